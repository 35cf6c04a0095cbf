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
