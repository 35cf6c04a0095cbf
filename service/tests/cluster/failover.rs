//! The coordinator goes away and another takes over from the same store.

use crate::support::*;
use colo::ShardId;
use std::collections::BTreeMap;
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn coordinator_failover_keeps_known_homes_buffers_the_rest_and_takes_over() {
    let mut cluster = Cluster::new("failover", fast_settings(20));
    cluster.start_coordinator(least_shard_new(0, 0.1));
    for n in ["a", "b", "c"] {
        cluster.add_node(n);
    }
    cluster.await_regions(3).await;
    let a = cluster.region("a");
    let id_in = |shard: u32, prefix: &str| {
        (0..)
            .map(|i| format!("{prefix}{i}"))
            .find(|id| a.shard_of(id) == ShardId(shard))
            .unwrap()
    };
    // Shards 0..10 get homes (spread over a, b and c); 10..20 stay unknown.
    for shard in 0..10 {
        a.ask(&id_in(shard, "k"), ProbeMsg::Where, ASK)
            .await
            .unwrap();
    }
    let homes_before = cluster.homes();
    assert!(homes_before.values().any(|h| h == "c"), "{homes_before:?}");

    cluster.coordinator.as_ref().unwrap().stop();
    // Known homes on live nodes: still served while no coordinator runs.
    for (shard, home) in &homes_before {
        if home != "c" {
            assert!(a
                .ask(&id_in(shard.0, "k"), ProbeMsg::Where, ASK)
                .await
                .is_ok());
        }
    }
    // Unknown homes: buffered until a coordinator is back.
    let unknown: Vec<String> = (10..20).map(|s| id_in(s, "u")).collect();
    for id in &unknown {
        a.tell(
            id,
            ProbeMsg::Record {
                from: "a".into(),
                seq: 0,
            },
        )
        .await
        .unwrap();
    }
    // c dies while nobody watches.
    cluster.nodes["c"].0.kill().await;
    assert!(unknown
        .iter()
        .all(|id| !cluster.world.log.lock().contains_key(id)));

    cluster.start_coordinator(least_shard_new(0, 0.1));
    let expected: BTreeMap<(String, String), u64> = unknown
        .iter()
        .map(|id| ((id.clone(), "a".into()), 1))
        .collect();
    all_delivered(&cluster.world, &expected).await;
    cluster.world.assert_complete_in_order(&expected);
    // The new coordinator kept the old homes of the live regions...
    for (shard, home) in &homes_before {
        if home != "c" {
            assert_eq!(cluster.homes().get(shard), Some(home));
        }
    }
    // ...and terminated c, which never came back: its shards start elsewhere.
    eventually("c terminated", Duration::from_secs(5), || async {
        !cluster.shard_counts().contains_key("c")
    })
    .await;
    for (shard, home) in &homes_before {
        if home == "c" {
            let id = (0..)
                .map(|i| format!("c{i}"))
                .find(|id| a.shard_of(id) == *shard)
                .unwrap();
            let reply = a.ask(&id, ProbeMsg::Where, ASK).await.unwrap();
            assert!(!matches!(reply, ProbeReply::At { ref node, .. } if node == "c"));
        }
    }
    cluster.world.assert_never_live_twice();
}

/// A coordinator that starts afresh (its store lost, as with the in-memory
/// store of a node that restarted) learns the shard homes from the regions
/// as they register again: every shard stays where it runs, and none is
/// started a second time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn coordinator_restarted_without_state_keeps_shards_where_they_run() {
    let mut cluster = Cluster::new("fresh-coordinator", fast_settings(12));
    cluster.start_coordinator(least_shard_new(0, 0.1));
    for n in ["a", "b", "c"] {
        cluster.add_node(n);
    }
    cluster.await_regions(3).await;
    let ids = cluster.touch_all_shards("a").await;
    let homes_before = cluster.homes();
    assert_eq!(homes_before.len(), 12);

    cluster.coordinator.as_ref().unwrap().stop();
    cluster.store = colo::InMemoryStore::after_loss();
    cluster.start_coordinator(least_shard_new(0, 0.1));
    eventually(
        "every shard re-adopted",
        Duration::from_secs(10),
        || async { cluster.homes().len() == 12 },
    )
    .await;
    assert_eq!(cluster.homes(), homes_before);
    // A node that joins asks for homes: it is told the adopted ones.
    let d = cluster.add_node("d");
    for (shard, id) in &ids {
        let reply = d.ask(id, ProbeMsg::Where, ASK).await.unwrap();
        let home = &homes_before[shard];
        assert!(
            matches!(reply, ProbeReply::At { ref node, .. } if node == home),
            "{reply:?}"
        );
    }
    cluster.world.assert_never_live_twice();
}
