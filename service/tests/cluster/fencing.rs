//! At most one live copy of an entity, also when a region is cut off from
//! its coordinator: the region stops its shards (fences itself) before the
//! coordinator places them elsewhere, and what is sent meanwhile waits.

use crate::support::*;
use colo::{EntityType, InMemoryStore, Node, ShardId, ShardingSettings};
use std::collections::BTreeMap;
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_region_cut_off_from_the_coordinator_stops_its_shards_before_they_start_elsewhere() {
    let mut cluster = Cluster::new("partition", fast_settings(12));
    cluster.start_coordinator(least_shard_new(0, 0.1));
    for n in ["a", "b", "c"] {
        cluster.add_node(n);
    }
    cluster.await_regions(3).await;
    let ids = cluster.touch_all_shards("a").await;
    let on_b: Vec<String> = ids
        .iter()
        .filter(|(s, _)| cluster.homes().get(s).map(String::as_str) == Some("b"))
        .map(|(_, id)| id.clone())
        .collect();
    assert!(!on_b.is_empty());
    // Senders on both sides of the partition keep telling the same ids.
    let from_a = Sender::start(cluster.region("a"), "a", on_b.clone());
    let from_b = Sender::start(cluster.region("b"), "b", on_b.clone());
    eventually("traffic flowing", Duration::from_secs(5), || async {
        cluster.world.delivered() > 200
    })
    .await;

    cluster.network.partition_from_coordinator("b");
    // b's entities move: the coordinator terminates b once it has been
    // silent for the region timeout, by which time b has stopped them.
    let a = cluster.region("a");
    for id in &on_b {
        eventually(&format!("{id} lives off b"), Duration::from_secs(10), || async {
            matches!(a.ask(id, ProbeMsg::Where, ASK).await, Ok(ProbeReply::At { node, .. }) if node != "b")
        })
        .await;
    }
    assert!(!cluster.shard_counts().contains_key("b"));
    cluster.world.assert_never_live_twice();

    cluster.network.heal("b");
    cluster.await_regions(3).await;
    let mut sent = from_a.stop().await;
    sent.extend(from_b.stop().await);
    // What b held when it fenced waited in its buffer: nothing is lost or
    // handled twice. b's own sender keeps its order; messages a had handed
    // to b before the fence reach the entities after b registers anew, so
    // a's order holds except for those.
    all_delivered(&cluster.world, &sent).await;
    cluster.world.assert_each_exactly_once(&sent);
    let from_b_only: BTreeMap<_, _> = sent
        .iter()
        .filter(|((_, from), _)| from == "b")
        .map(|(k, v)| (k.clone(), *v))
        .collect();
    cluster.world.assert_complete_in_order(&from_b_only);
    cluster.world.assert_never_live_twice();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_coordinator_restarted_without_state_waits_for_regions_that_cannot_report_to_fence() {
    let mut cluster = Cluster::new("restart-partition", fast_settings(12));
    cluster.start_coordinator(least_shard_new(0, 0.1));
    for n in ["a", "b", "c"] {
        cluster.add_node(n);
    }
    cluster.await_regions(3).await;
    let ids = cluster.touch_all_shards("a").await;
    let homes = cluster.homes();
    let on_c: Vec<(ShardId, String)> = ids
        .iter()
        .filter(|(s, _)| homes.get(s).map(String::as_str) == Some("c"))
        .map(|(s, id)| (*s, id.clone()))
        .collect();
    assert!(!on_c.is_empty());

    // The coordinator restarts with its state lost, and c cannot reach it:
    // c cannot report its shards, and still runs them until it fences.
    cluster.network.partition_from_coordinator("c");
    cluster.coordinator.as_ref().unwrap().stop();
    cluster.store = InMemoryStore::after_loss();
    cluster.start_coordinator(least_shard_new(0, 0.1));
    // A node that knows no home asks the new coordinator, which must not
    // place c's shards elsewhere while c may still run them.
    let d = cluster.add_node("d");
    for (_, id) in &on_c {
        let reply = d.ask(id, ProbeMsg::Where, Duration::from_secs(10)).await;
        assert!(
            matches!(&reply, Ok(ProbeReply::At { node, .. }) if node != "c"),
            "{reply:?}"
        );
    }
    cluster.world.assert_never_live_twice();
    cluster.network.heal("c");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_brand_new_cluster_serves_its_first_message_at_once() {
    // Akka's default timings: nothing waits for regions to report shards,
    // since no shard can be running anywhere yet.
    let cluster = Cluster::new("brand-new", ShardingSettings::default());
    let coordinator = colo::CoordinatorHandle::spawn(
        &cluster.name,
        ShardingSettings::default(),
        least_shard_new(0, 0.1),
        std::sync::Arc::new(InMemoryStore::new()),
    )
    .unwrap();
    cluster.network.host_coordinator(coordinator);
    let node = Node::new(cluster.network.transport("a"));
    let entity_type: EntityType<Probe> = cluster.entity_type("a");
    let region = node.start_region(entity_type).unwrap();
    let started = tokio::time::Instant::now();
    let reply = region
        .ask("first", ProbeMsg::Where, Duration::from_secs(1))
        .await
        .unwrap();
    assert_eq!(reply, at("a", 1));
    // Well under one retry interval (2 s): no adoption wait.
    assert!(started.elapsed() < Duration::from_secs(1));
    let sent: BTreeMap<(String, String), u64> = BTreeMap::new();
    cluster.world.assert_complete_in_order(&sent);
}
