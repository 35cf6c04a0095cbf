//! Entities of a shard run side by side: a handler may await I/O, tell or
//! ask any entity (its own shard's included) without stalling or
//! deadlocking its shard; hand-off and passivation wait for the message in
//! hand, within their bound.

use crate::support::*;
use colo::allocation::{ExternalAllocationClient, ExternalAllocationStrategy, RegionId};
use colo::passivation::PassivationStrategy;
use colo::{AskError, ShardId, ShardingSettings};
use std::sync::atomic::Ordering;
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn entities_of_a_shard_run_side_by_side_while_one_awaits() {
    let mut cluster = Cluster::new("side-by-side", fast_settings(1));
    cluster.start_coordinator(least_shard_new(0, 0.1));
    let a = cluster.add_node("a");
    // "slow" awaits (a database call, say) until released...
    let slow = tokio::spawn({
        let a = a.clone();
        async move { a.ask("slow", ProbeMsg::Block, ASK).await }
    });
    // ...while its neighbour in the same shard answers at once.
    eventually("slow is handling", Duration::from_secs(5), || async {
        a.state(ASK).await.is_ok_and(|s| s.total_entities() == 1)
    })
    .await;
    assert_eq!(
        a.ask("quick", ProbeMsg::Where, ASK).await.unwrap(),
        at("a", 1)
    );
    cluster.world.release_all();
    assert_eq!(slow.await.unwrap().unwrap(), ProbeReply::Ok);
    // The blocked entity then goes on with its next message, in order.
    assert_eq!(
        a.ask("slow", ProbeMsg::Where, ASK).await.unwrap(),
        at("a", 2)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handler_may_ask_an_entity_of_its_own_shard() {
    let mut cluster = Cluster::new("ask-sibling", fast_settings(1));
    cluster.start_coordinator(least_shard_new(0, 0.1));
    let a = cluster.add_node("a");
    let reply = a
        .ask(
            "asker",
            ProbeMsg::AskWhere {
                to: "sibling".into(),
            },
            ASK,
        )
        .await
        .unwrap();
    assert_eq!(reply, at("a", 1), "the sibling answered the handler");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tell_from_a_handler_into_a_full_mailbox_fails_instead_of_waiting_for_ever() {
    let settings = ShardingSettings {
        shard_mailbox_capacity: 1,
        handler_tell_timeout: Duration::from_millis(200),
        ..fast_settings(2)
    };
    let mut cluster = Cluster::new("tell-full", settings);
    cluster.start_coordinator(least_shard_new(0, 0.1));
    let a = cluster.add_node("a");
    let [blocked, queued, waiting] = <[String; 3]>::try_from(cluster.ids_in(1, 3)).unwrap();
    let teller = cluster.ids_in(0, 1).remove(0);
    // Homes known first, so each tell goes to the mailbox on its own.
    cluster.touch_all_shards("a").await;
    // Shard 1 fills up: one entity blocks, a message waits behind it (the
    // shard then takes no mail), and one more fills its mailbox.
    a.tell(&blocked, ProbeMsg::Block).await.unwrap();
    a.tell(&blocked, ProbeMsg::Where).await.unwrap();
    a.tell(&queued, ProbeMsg::Where).await.unwrap();
    // A handler in shard 0 tells into shard 1: it gets an error, not a
    // wait for ever.
    let reply = a
        .ask(
            &teller,
            ProbeMsg::TellTo {
                to: waiting.clone(),
                seq: 0,
            },
            ASK,
        )
        .await
        .unwrap();
    assert!(
        matches!(&reply, ProbeReply::Refused(e) if e.contains("stayed full")),
        "{reply:?}"
    );
    cluster.world.release_all();
    // Once released, the same tell goes through.
    let reply = a
        .ask(
            &teller,
            ProbeMsg::TellTo {
                to: waiting,
                seq: 1,
            },
            ASK,
        )
        .await
        .unwrap();
    assert_eq!(reply, ProbeReply::Ok);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hand_off_waits_for_the_message_in_hand_then_stops_the_entity() {
    let mut cluster = Cluster::new("handoff-in-hand", fast_settings(1));
    let client = ExternalAllocationClient::new();
    cluster.start_coordinator(Box::new(ExternalAllocationStrategy::new(client.clone())));
    let a = cluster.add_node("a");
    cluster.add_node("b");
    cluster.await_regions(2).await;
    client.set_location(ShardId(0), RegionId::new("a"));
    let in_hand = tokio::spawn({
        let a = a.clone();
        async move { a.ask("x", ProbeMsg::Block, ASK).await }
    });
    eventually("x is handling", Duration::from_secs(5), || async {
        a.state(ASK).await.is_ok_and(|s| s.total_entities() == 1)
    })
    .await;
    client.set_location(ShardId(0), RegionId::new("b"));
    // The hand-off has started (a no longer lists the shard as active)
    // and waits for x's message.
    eventually(
        "the hand-off has started",
        Duration::from_secs(5),
        || async { a.state(ASK).await.is_ok_and(|s| s.shards.is_empty()) },
    )
    .await;
    assert_eq!(cluster.world.stops.load(Ordering::Relaxed), 0);
    cluster.world.release_all();
    assert_eq!(in_hand.await.unwrap().unwrap(), ProbeReply::Ok);
    eventually("the shard lives on b", Duration::from_secs(5), || async {
        cluster.homes().get(&ShardId(0)).map(String::as_str) == Some("b")
    })
    .await;
    assert_eq!(cluster.world.stops.load(Ordering::Relaxed), 1);
    assert_eq!(a.ask("x", ProbeMsg::Where, ASK).await.unwrap(), at("b", 1));
    cluster.world.assert_never_live_twice();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hand_off_stops_ten_thousand_entities_side_by_side_within_the_timeout() {
    let settings = ShardingSettings {
        handoff_timeout: Duration::from_secs(10),
        ..fast_settings(1)
    };
    let mut cluster = Cluster::new("handoff-10k", settings);
    let client = ExternalAllocationClient::new();
    cluster.start_coordinator(Box::new(ExternalAllocationStrategy::new(client.clone())));
    let a = cluster.add_node("a");
    cluster.add_node("b");
    cluster.await_regions(2).await;
    client.set_location(ShardId(0), RegionId::new("a"));
    const N: u64 = 10_000;
    for i in 0..N {
        a.tell(&format!("e{i}"), ProbeMsg::Where).await.unwrap();
    }
    eventually("10,000 entities live", Duration::from_secs(20), || async {
        a.state(ASK)
            .await
            .is_ok_and(|s| s.total_entities() == N as usize)
    })
    .await;
    // Each stop message takes 10 ms: one after another that is 100 s, far
    // past the 10 s hand-off timeout; side by side it is a fraction of it.
    *cluster.world.stop_delay.lock() = Duration::from_millis(10);
    client.set_location(ShardId(0), RegionId::new("b"));
    eventually("the shard lives on b", Duration::from_secs(20), || async {
        cluster.homes().get(&ShardId(0)).map(String::as_str) == Some("b")
    })
    .await;
    assert_eq!(
        cluster.world.stops.load(Ordering::Relaxed),
        N,
        "every entity ran its stop message before the deadline"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn passivation_of_an_entity_stuck_in_a_handler_is_bounded_by_the_handoff_timeout() {
    let _ = metrics();
    let settings = ShardingSettings {
        // One active entity per shard: a second one evicts the first.
        passivation: PassivationStrategy::limit(
            1,
            colo::passivation::ReplacementSettings::preset("lru").unwrap(),
        ),
        handoff_timeout: Duration::from_millis(300),
        ..fast_settings(1)
    };
    let mut cluster = Cluster::new("stuck-passivation", settings);
    cluster.start_coordinator(least_shard_new(0, 0.1));
    let a = cluster.add_node("a");
    let stuck = tokio::spawn({
        let a = a.clone();
        async move { a.ask("stuck", ProbeMsg::Block, ASK).await }
    });
    eventually("stuck is handling", Duration::from_secs(5), || async {
        a.state(ASK).await.is_ok_and(|s| s.total_entities() == 1)
    })
    .await;
    // A second entity evicts the stuck one; its passivation waits for the
    // message in hand only as long as the hand-off timeout.
    assert_eq!(
        a.ask("next", ProbeMsg::Where, ASK).await.unwrap(),
        at("a", 1)
    );
    let err = stuck.await.unwrap().unwrap_err();
    assert!(matches!(err, AskError::Dropped(_)), "{err}");
    eventually("stuck is gone", Duration::from_secs(5), || async {
        a.state(ASK).await.is_ok_and(|s| s.total_entities() == 1)
    })
    .await;
    assert_eq!(
        counter(
            colo::metrics::PASSIVATIONS,
            &[("entity_type", &cluster.name), ("reason", "limit")]
        ),
        1
    );
}
