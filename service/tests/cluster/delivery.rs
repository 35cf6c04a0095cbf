//! Deliveries whose sender learns what became of the message, the seam a
//! Kafka source commits offsets by.

use crate::support::*;
use colo::Delivery;
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delivery_says_handled_failed_not_delivered_or_unconfirmed() {
    let mut cluster = Cluster::new("delivery", fast_settings(4));
    cluster.start_coordinator(least_shard_new(0, 0.1));
    let a = cluster.add_node("a");
    cluster.await_regions(1).await;
    let record = |seq| ProbeMsg::Record {
        from: "a".into(),
        seq,
    };
    // Handled, with the handler's reply.
    assert_eq!(
        a.deliver("x", record(0), ASK).await,
        Delivery::Handled(ProbeReply::Ok)
    );
    // The handler got it and failed.
    let failed = a.deliver("x", ProbeMsg::Fail, ASK).await;
    assert!(
        matches!(failed, Delivery::Failed(ref why) if why.contains("asked to fail")),
        "{failed:?}"
    );
    // Never reached a handler.
    let refused = a.deliver("", record(1), ASK).await;
    assert!(
        matches!(refused, Delivery::NotDelivered(ref why) if why.contains("empty")),
        "{refused:?}"
    );
    // No answer in time: it may still be handled.
    let slow = a
        .deliver("y", ProbeMsg::Block, Duration::from_millis(200))
        .await;
    assert!(matches!(slow, Delivery::Unconfirmed(_)), "{slow:?}");
    cluster.world.release_all();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delivery_to_an_entity_on_another_node_reports_its_reply() {
    let mut cluster = Cluster::new("delivery-remote", fast_settings(4));
    // Every shard goes to the region that first asks for it: b.
    cluster.start_coordinator(Box::new(
        colo::allocation::ExternalAllocationStrategy::default(),
    ));
    let a = cluster.add_node("a");
    cluster.add_node("b");
    cluster.await_regions(2).await;
    let ids = cluster.touch_all_shards("b").await;
    for id in ids.values() {
        let delivered = a.deliver(id, ProbeMsg::Where, ASK).await;
        assert!(
            matches!(delivered, Delivery::Handled(ProbeReply::At { ref node, .. }) if node == "b"),
            "{delivered:?}"
        );
    }
}

/// A full buffer refuses at once: the sender keeps the message and may try
/// again, knowing it was not handled.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delivery_refused_by_a_full_buffer_is_not_delivered() {
    let settings = colo::ShardingSettings {
        buffer_size: 1,
        ..fast_settings(4)
    };
    let mut cluster = Cluster::new("delivery-full", settings);
    let a = cluster.add_node("a");
    // No coordinator: the first message fills the buffer.
    a.tell(
        "x",
        ProbeMsg::Record {
            from: "a".into(),
            seq: 0,
        },
    )
    .await
    .unwrap();
    let refused = a.deliver("x", ProbeMsg::Where, ASK).await;
    assert!(
        matches!(refused, Delivery::NotDelivered(ref why) if why.contains("full")),
        "{refused:?}"
    );
}
