//! Regions that disappear, entities that fail, asks that time out.

use crate::support::*;
use colo::{AskError, EntityType, Node};
use std::collections::BTreeMap;
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn region_that_disappears_gets_its_shards_reallocated_on_the_next_message() {
    let mut cluster = Cluster::new("crash", fast_settings(10));
    cluster.start_coordinator(least_shard_new(0, 0.1));
    for n in ["a", "b"] {
        cluster.add_node(n);
    }
    cluster.await_regions(2).await;
    let ids = cluster.touch_all_shards("a").await;
    let on_b: Vec<String> = ids
        .iter()
        .filter(|(s, _)| cluster.homes().get(s).map(String::as_str) == Some("b"))
        .map(|(_, id)| id.clone())
        .collect();
    assert!(!on_b.is_empty());

    cluster.nodes["b"].0.kill().await;
    let a = cluster.region("a");
    for id in &on_b {
        let reply = a.ask(id, ProbeMsg::Where, ASK).await.unwrap();
        assert!(
            matches!(reply, ProbeReply::At { ref node, .. } if node == "a"),
            "{reply:?}"
        );
    }
    assert!(!cluster.shard_counts().contains_key("b"));
    cluster.world.assert_never_live_twice();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failing_or_panicking_entity_is_dropped_and_recreated_while_the_shard_keeps_running() {
    let _ = metrics();
    let mut cluster = Cluster::new("entityfail", fast_settings(1));
    cluster.start_coordinator(least_shard_new(0, 0.1));
    let a = cluster.add_node("a");
    a.tell(
        "x",
        ProbeMsg::Record {
            from: "t".into(),
            seq: 0,
        },
    )
    .await
    .unwrap();
    assert_eq!(a.ask("x", ProbeMsg::Where, ASK).await.unwrap(), at("a", 2));
    assert_eq!(a.ask("y", ProbeMsg::Where, ASK).await.unwrap(), at("a", 1));

    let err = a.ask("x", ProbeMsg::Fail, ASK).await.unwrap_err();
    assert_eq!(err, AskError::EntityFailed("asked to fail".into()));
    // Created anew: its count starts over. Its shard neighbour is untouched.
    assert_eq!(a.ask("x", ProbeMsg::Where, ASK).await.unwrap(), at("a", 1));
    assert_eq!(a.ask("y", ProbeMsg::Where, ASK).await.unwrap(), at("a", 2));

    let err = a.ask("y", ProbeMsg::Panic, ASK).await.unwrap_err();
    assert!(
        matches!(err, AskError::EntityFailed(ref m) if m.contains("asked to panic")),
        "{err}"
    );
    assert_eq!(a.ask("y", ProbeMsg::Where, ASK).await.unwrap(), at("a", 1));
    assert_eq!(
        counter(
            colo::metrics::ENTITY_FAILURES,
            &[("entity_type", &cluster.name)]
        ),
        2
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ask_without_a_coordinator_times_out() {
    let mut cluster = Cluster::new("asktimeout", fast_settings(10));
    let a = cluster.add_node("a");
    let err = a
        .ask("x", ProbeMsg::Where, Duration::from_millis(100))
        .await
        .unwrap_err();
    assert_eq!(err, AskError::Timeout(Duration::from_millis(100)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_entity_types_are_refused_at_registration() {
    let cluster = Cluster::new("register", fast_settings(10));
    let node = Node::new(cluster.network.transport("n"));
    let bad = cluster
        .entity_type("n")
        .with_settings(colo::ShardingSettings {
            buffer_size: 0,
            ..fast_settings(10)
        });
    let err = node.start_region(bad).unwrap_err();
    assert!(err.to_string().contains("buffer_size"), "{err}");
    let mismatch = cluster
        .entity_type("n")
        .with_extractor(colo::allocation::KafkaMurmur2Extractor::new(7).unwrap());
    let err = node.start_region(mismatch).unwrap_err();
    assert!(err.to_string().contains("7 shards"), "{err}");
    let bad_name: EntityType<Probe> = EntityType::new("no spaces", |_| unreachable!());
    assert!(node.start_region(bad_name).is_err());
    node.start_region(cluster.entity_type("n")).unwrap();
    let err = node.start_region(cluster.entity_type("n")).unwrap_err();
    assert!(err.to_string().contains("already registered"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn panicking_factory_fails_that_message_only() {
    let mut cluster = Cluster::new("factorypanic", fast_settings(1));
    cluster.start_coordinator(least_shard_new(0, 0.1));
    *cluster.world.refused_id.lock() = Some("bad".into());
    let a = cluster.add_node("a");
    a.ask("good", ProbeMsg::Where, ASK).await.unwrap();
    let err = a.ask("bad", ProbeMsg::Where, ASK).await.unwrap_err();
    assert!(
        matches!(err, AskError::EntityFailed(ref m) if m.contains("factory")),
        "{err}"
    );
    // The shard (and the entity sharing it) carried on.
    let reply = a.ask("good", ProbeMsg::Where, ASK).await.unwrap();
    assert_eq!(reply, at("a", 2));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_a_dead_node_never_received_come_back_in_order() {
    use colo::allocation::{ExternalAllocationClient, ExternalAllocationStrategy};
    use colo::{RegionId, ShardId};
    let settings = colo::ShardingSettings {
        shard_mailbox_capacity: 16,
        ..fast_settings(1)
    };
    let mut cluster = Cluster::new("undelivered", settings);
    let client = ExternalAllocationClient::new();
    cluster.start_coordinator(Box::new(ExternalAllocationStrategy::new(client.clone())));
    let a = cluster.add_node("a");
    cluster.add_node("b");
    cluster.await_regions(2).await;
    client.set_location(ShardId(0), RegionId::new("b"));
    // b stops keeping up after 20 records: it takes a credit window's worth
    // of a's messages into its custody and no more, so the rest are still
    // at a (in its queue to b) when b dies, whatever the timing.
    const N: u64 = 3 * colo::transport::WINDOW;
    *cluster.world.stall_node.lock() = Some(("b".into(), 20));
    let sender = tokio::spawn({
        let a = a.clone();
        async move {
            for seq in 0..N {
                a.tell(
                    "x",
                    ProbeMsg::Record {
                        from: "a".into(),
                        seq,
                    },
                )
                .await
                .unwrap();
            }
        }
    });
    eventually("b has stalled", Duration::from_secs(5), || async {
        cluster.world.delivered_on("b") >= 20
    })
    .await;
    client.set_location(ShardId(0), RegionId::new("a"));
    cluster.nodes["b"].0.kill().await;
    sender.await.unwrap();
    eventually(
        "the last message arrives at a",
        Duration::from_secs(10),
        || async {
            cluster.world.log.lock()["x"]
                .last()
                .is_some_and(|d| d.seq == N - 1)
        },
    )
    .await;
    let log = cluster.world.log.lock();
    let seqs: Vec<u64> = log["x"].iter().map(|d| d.seq).collect();
    // What b had taken into its mailbox died with it; everything else came
    // back to a and was delivered there, in order.
    assert!(
        seqs.windows(2).all(|w| w[0] < w[1]),
        "out of order: {seqs:?}"
    );
    let on_a: Vec<u64> = log["x"]
        .iter()
        .filter(|d| d.node == "a")
        .map(|d| d.seq)
        .collect();
    assert!(!on_a.is_empty());
    let first_on_a = on_a[0];
    assert_eq!(
        on_a,
        (first_on_a..N).collect::<Vec<_>>(),
        "nothing lost after the first returned message"
    );
    drop(log);
    cluster.world.assert_never_live_twice();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn new_home_waits_for_messages_still_coming_back_from_a_dead_node() {
    use colo::allocation::{ExternalAllocationClient, ExternalAllocationStrategy};
    use colo::{RegionId, ShardId};
    let mut cluster = Cluster::new("heldhome", fast_settings(1));
    let client = ExternalAllocationClient::new();
    cluster.start_coordinator(Box::new(ExternalAllocationStrategy::new(client.clone())));
    let a = cluster.add_node("a");
    cluster.add_node("b");
    cluster.await_regions(2).await;
    client.set_location(ShardId(0), RegionId::new("b"));
    for seq in 0..10u64 {
        a.tell(
            "x",
            ProbeMsg::Record {
                from: "a".into(),
                seq,
            },
        )
        .await
        .unwrap();
    }
    eventually("0..10 handled on b", Duration::from_secs(5), || async {
        cluster.world.delivered_on("b") == 10
    })
    .await;
    // 10..20 leave a over a slow link; b dies while they are in flight, and
    // the shard's new home is a itself.
    cluster.network.set_latency("b", Duration::from_millis(500));
    for seq in 10..20u64 {
        a.tell(
            "x",
            ProbeMsg::Record {
                from: "a".into(),
                seq,
            },
        )
        .await
        .unwrap();
    }
    eventually("10..20 in flight to b", Duration::from_secs(5), || async {
        cluster.network.in_flight("b") == 1
    })
    .await;
    client.set_location(ShardId(0), RegionId::new("a"));
    cluster.nodes["b"].0.kill().await;
    eventually("b terminated", Duration::from_secs(5), || async {
        !cluster.shard_counts().contains_key("b")
    })
    .await;
    // Told after the death is known, while 10..20 are still in flight: they
    // must not overtake them.
    for seq in 20..30u64 {
        a.tell(
            "x",
            ProbeMsg::Record {
                from: "a".into(),
                seq,
            },
        )
        .await
        .unwrap();
    }
    let sent = BTreeMap::from([(("x".to_string(), "a".to_string()), 30)]);
    all_delivered(&cluster.world, &sent).await;
    cluster.world.assert_complete_in_order(&sent);
    cluster.world.assert_never_live_twice();
}
