//! Passivation inside shards: idle timeout and explicit requests.

use crate::support::*;
use colo::passivation::PassivationStrategy;
use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::time::Duration;

#[tokio::test(start_paused = true)]
async fn idle_entities_are_passivated_after_the_timeout() {
    let _ = metrics();
    let settings = colo::ShardingSettings {
        passivation: PassivationStrategy::idle(Duration::from_secs(120)),
        ..fast_settings(4)
    };
    let mut cluster = Cluster::new("idle", settings);
    cluster.start_coordinator(least_shard_new(0, 0.1));
    let a = cluster.add_node("a");
    for id in ["busy", "quiet"] {
        a.ask(id, ProbeMsg::Where, ASK).await.unwrap();
    }
    // Both live; "busy" keeps getting a message every 30 s of virtual time.
    for _ in 0..6 {
        tokio::time::advance(Duration::from_secs(30)).await;
        a.ask("busy", ProbeMsg::Where, ASK).await.unwrap();
    }
    let live: Vec<String> = a
        .state(ASK)
        .await
        .unwrap()
        .shards
        .values()
        .flatten()
        .map(|id| id.to_string())
        .collect();
    assert_eq!(
        live,
        ["busy"],
        "quiet was idle for 180 s; busy never for more than 30 s"
    );
    // The stop message ran for the passivated entity, and the reason counts.
    assert_eq!(cluster.world.stops.load(Ordering::Relaxed), 1);
    let idle = counter(
        colo::metrics::PASSIVATIONS,
        &[("entity_type", &cluster.name), ("reason", "idle")],
    );
    assert_eq!(idle, 1);
    // A message for a passivated entity starts a new incarnation.
    let reply = a.ask("quiet", ProbeMsg::Where, ASK).await.unwrap();
    assert_eq!(
        reply,
        ProbeReply::At {
            node: "a".into(),
            handled: 1
        }
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn explicit_passivation_loses_no_message() {
    let _ = metrics();
    let settings = colo::ShardingSettings {
        passivation: PassivationStrategy::none(),
        ..fast_settings(1)
    };
    let mut cluster = Cluster::new("explicit", settings);
    cluster.start_coordinator(least_shard_new(0, 0.1));
    let a = cluster.add_node("a");
    // The passivation request sits among a stream of records: the records
    // after it go to the next incarnation, all of them, in order.
    for seq in 0..100u64 {
        a.tell(
            "p",
            ProbeMsg::Record {
                from: "a".into(),
                seq,
            },
        )
        .await
        .unwrap();
        if seq % 10 == 9 {
            a.tell("p", ProbeMsg::Passivate).await.unwrap();
        }
    }
    let reply = a.ask("p", ProbeMsg::Where, ASK).await.unwrap();
    assert_eq!(
        reply,
        ProbeReply::At {
            node: "a".into(),
            handled: 1
        },
        "a fresh incarnation"
    );
    cluster
        .world
        .assert_complete_in_order(&BTreeMap::from([(("p".into(), "a".into()), 100)]));
    assert_eq!(cluster.world.stops.load(Ordering::Relaxed), 10);
    let explicit = counter(
        colo::metrics::PASSIVATIONS,
        &[("entity_type", &cluster.name), ("reason", "explicit")],
    );
    assert_eq!(explicit, 10, "explicit passivations counted");
    cluster.world.assert_never_live_twice();
}
