//! Regions that disappear, entities that fail, asks that time out.

use crate::support::*;
use colo::{AskError, EntityType, Node};
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn region_that_disappears_gets_its_shards_reallocated_on_the_next_message() {
    let mut cluster = Cluster::new("crash", fast_settings(10));
    cluster.start_coordinator(least_shard_new(0, 0.1));
    for n in ["a", "b"] {
        cluster.add_node(n);
    }
    eventually("two regions", Duration::from_secs(5), || async {
        cluster.shard_counts().len() == 2
    })
    .await;
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
    assert_eq!(
        a.ask("x", ProbeMsg::Where, ASK).await.unwrap(),
        ProbeReply::At {
            node: "a".into(),
            handled: 2
        }
    );
    assert_eq!(
        a.ask("y", ProbeMsg::Where, ASK).await.unwrap(),
        ProbeReply::At {
            node: "a".into(),
            handled: 1
        }
    );

    let err = a.ask("x", ProbeMsg::Fail, ASK).await.unwrap_err();
    assert_eq!(err, AskError::EntityFailed("asked to fail".into()));
    // Created anew: its count starts over. Its shard neighbour is untouched.
    assert_eq!(
        a.ask("x", ProbeMsg::Where, ASK).await.unwrap(),
        ProbeReply::At {
            node: "a".into(),
            handled: 1
        }
    );
    assert_eq!(
        a.ask("y", ProbeMsg::Where, ASK).await.unwrap(),
        ProbeReply::At {
            node: "a".into(),
            handled: 2
        }
    );

    let err = a.ask("y", ProbeMsg::Panic, ASK).await.unwrap_err();
    assert!(
        matches!(err, AskError::EntityFailed(ref m) if m.contains("asked to panic")),
        "{err}"
    );
    assert_eq!(
        a.ask("y", ProbeMsg::Where, ASK).await.unwrap(),
        ProbeReply::At {
            node: "a".into(),
            handled: 1
        }
    );
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
