//! Hand-off: messages sent meanwhile are buffered and arrive, in order, at
//! the new home; entities get their stop message.

use crate::support::*;
use colo::allocation::{ExternalAllocationClient, ExternalAllocationStrategy, RegionId};
use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn handoff_buffers_and_delivers_in_order_at_the_new_home() {
    let mut cluster = Cluster::new("handoff-order", fast_settings(4));
    let client = ExternalAllocationClient::new();
    cluster.start_coordinator(Box::new(ExternalAllocationStrategy::new(client.clone())));
    let a = cluster.add_node("a");
    let b = cluster.add_node("b");
    let c = cluster.add_node("c");
    cluster.await_regions(3).await;
    let ids: Vec<String> = (0..40).map(|i| format!("h{i}")).collect();
    for s in 0..4 {
        client.set_location(colo::ShardId(s), RegionId::new("a"));
    }
    for id in &ids {
        a.ask(id, ProbeMsg::Where, ASK).await.unwrap();
    }
    // Three senders on three nodes keep telling while every shard moves a -> b.
    let senders = vec![
        Sender::start(a.clone(), "a", ids.clone()),
        Sender::start(b.clone(), "b", ids.clone()),
        Sender::start(c.clone(), "c", ids.clone()),
    ];
    eventually("traffic flowing", Duration::from_secs(5), || async {
        cluster.world.delivered() > 1000
    })
    .await;
    for s in 0..4 {
        client.set_location(colo::ShardId(s), RegionId::new("b"));
    }
    eventually("every shard on b", Duration::from_secs(10), || async {
        cluster.shard_counts().get("b") == Some(&4)
    })
    .await;
    eventually(
        "traffic at the new home",
        Duration::from_secs(5),
        || async {
            cluster
                .world
                .log
                .lock()
                .values()
                .flatten()
                .filter(|d| d.node == "b")
                .count()
                > 1000
        },
    )
    .await;
    let mut sent = BTreeMap::new();
    for s in senders {
        sent.extend(s.stop().await);
    }
    all_delivered(&cluster.world, &sent).await;
    cluster.world.assert_complete_in_order(&sent);
    cluster.world.assert_never_live_twice();
    // Every live entity got the stop message when its shard left a.
    assert_eq!(cluster.world.stops.load(Ordering::Relaxed), 40);
    assert!(a.state(ASK).await.unwrap().shards.is_empty());
    let on_b = b.state(ASK).await.unwrap().total_entities();
    assert_eq!(on_b, 40);
}

/// Akka's entity stop timeout: an entity whose stop message runs past it is
/// dropped, and the hand-off completes within `handoff_timeout`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stop_message_overrunning_the_stop_timeout_is_cut_off_and_the_shard_moves_on() {
    let settings = colo::ShardingSettings {
        handoff_timeout: Duration::from_secs(2),
        ..fast_settings(1)
    };
    assert_eq!(settings.entity_stop_timeout(), Duration::from_secs(1));
    let mut cluster = Cluster::new("stop-timeout", settings);
    let client = ExternalAllocationClient::new();
    cluster.start_coordinator(Box::new(ExternalAllocationStrategy::new(client.clone())));
    let a = cluster.add_node("a");
    cluster.add_node("b");
    cluster.await_regions(2).await;
    client.set_location(colo::ShardId(0), RegionId::new("a"));
    let ids: Vec<String> = (0..5).map(|i| format!("slow{i}")).collect();
    for id in &ids {
        assert_eq!(a.ask(id, ProbeMsg::Where, ASK).await.unwrap(), at("a", 1));
    }
    // Stop messages that would take a minute.
    *cluster.world.stop_delay.lock() = Duration::from_secs(60);
    client.set_location(colo::ShardId(0), RegionId::new("b"));
    eventually("the shard on b", Duration::from_secs(10), || async {
        cluster.shard_counts().get("b") == Some(&1)
    })
    .await;
    for id in &ids {
        assert_eq!(a.ask(id, ProbeMsg::Where, ASK).await.unwrap(), at("b", 1));
    }
    assert_eq!(
        cluster.world.stops.load(Ordering::Relaxed),
        0,
        "no stop finished"
    );
    cluster.world.assert_never_live_twice();
    assert_eq!(
        counter(
            colo::metrics::HANDOFFS,
            &[("entity_type", &cluster.name), ("outcome", "completed")]
        ),
        1
    );
}

/// A hand-off whose owner cannot be told to stop (it is cut off from the
/// coordinator) fails at `handoff_timeout`: counted, the shard stays where
/// it runs, and the move is made once the owner answers again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hand_off_that_times_out_fails_and_the_shard_stays_until_it_can_move() {
    let settings = colo::ShardingSettings {
        handoff_timeout: Duration::from_secs(1),
        // The owner stays cut off longer than the hand-off may take, but
        // never long enough to fence itself.
        fence_timeout: Duration::from_secs(8),
        region_timeout: Duration::from_secs(12),
        ..fast_settings(1)
    };
    let mut cluster = Cluster::new("handoff-fails", settings);
    let client = ExternalAllocationClient::new();
    cluster.start_coordinator(Box::new(ExternalAllocationStrategy::new(client.clone())));
    let a = cluster.add_node("a");
    let b = cluster.add_node("b");
    cluster.await_regions(2).await;
    client.set_location(colo::ShardId(0), RegionId::new("a"));
    assert_eq!(a.ask("x", ProbeMsg::Where, ASK).await.unwrap(), at("a", 1));
    cluster.network.partition_from_coordinator("a");
    client.set_location(colo::ShardId(0), RegionId::new("b"));
    let failed = || {
        counter(
            colo::metrics::HANDOFFS,
            &[("entity_type", &cluster.name), ("outcome", "failed")],
        )
    };
    eventually("the hand-off failed", Duration::from_secs(10), || async {
        failed() >= 1
    })
    .await;
    assert_eq!(cluster.homes()[&colo::ShardId(0)], "a", "the shard stays");
    // Its owner still serves it.
    assert_eq!(a.ask("x", ProbeMsg::Where, ASK).await.unwrap(), at("a", 2));
    cluster.network.heal("a");
    eventually("the shard on b", Duration::from_secs(10), || async {
        cluster.shard_counts().get("b") == Some(&1)
    })
    .await;
    assert_eq!(b.ask("x", ProbeMsg::Where, ASK).await.unwrap(), at("b", 1));
    cluster.world.assert_never_live_twice();
}
