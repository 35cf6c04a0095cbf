//! The two routing scenarios of the concepts page, buffering and proxies.

use crate::support::*;
use colo::allocation::{ExternalAllocationClient, ExternalAllocationStrategy, RegionId};
use colo::TellError;
use std::collections::BTreeMap;
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scenario_1_unknown_shard_that_belongs_to_the_local_region() {
    let mut cluster = Cluster::new("scenario1", fast_settings(10));
    cluster.start_coordinator(least_shard_new(0, 0.1));
    let sr1 = cluster.add_node("sr1");

    let reply = sr1.ask("e1", ProbeMsg::Where, ASK).await.unwrap();
    assert_eq!(reply, at("sr1", 1));
    // The coordinator allocated the shard to the asking region, once.
    let s1 = sr1.shard_of("e1");
    assert_eq!(cluster.homes().get(&s1).map(String::as_str), Some("sr1"));
    // Later messages are handled without the coordinator: same entity, same count.
    for _ in 0..10 {
        sr1.tell(
            "e1",
            ProbeMsg::Record {
                from: "t".into(),
                seq: 0,
            },
        )
        .await
        .unwrap();
    }
    let reply = sr1.ask("e1", ProbeMsg::Where, ASK).await.unwrap();
    assert_eq!(reply, at("sr1", 12));
    let allocations = cluster
        .store
        .events()
        .iter()
        .filter(|e| {
            matches!(
                e,
                colo::coordinator::ledger::CoordinatorEvent::ShardHomeAllocated { .. }
            )
        })
        .count();
    assert_eq!(allocations, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scenario_2_unknown_shard_that_belongs_to_a_remote_region() {
    let _ = metrics();
    let mut cluster = Cluster::new("scenario2", fast_settings(10));
    let client = ExternalAllocationClient::new();
    cluster.start_coordinator(Box::new(ExternalAllocationStrategy::new(client.clone())));
    let sr1 = cluster.add_node("sr1");
    let sr2 = cluster.add_node("sr2");
    let s2 = sr1.shard_of("e2");
    client.set_location(s2, RegionId::new("sr2"));
    // sr2 must be registered before the allocation for the location to apply.
    eventually("sr2 registered", Duration::from_secs(5), || async {
        cluster.shard_counts().contains_key("sr2")
    })
    .await;

    // M2 .. M101 go to SR1 while S2's home is unknown: buffered, then
    // forwarded to SR2 in arrival order.
    for seq in 0..100 {
        sr1.tell(
            "e2",
            ProbeMsg::Record {
                from: "sr1".into(),
                seq,
            },
        )
        .await
        .unwrap();
    }
    let reply = sr1.ask("e2", ProbeMsg::Where, ASK).await.unwrap();
    assert_eq!(reply, at("sr2", 101));
    cluster
        .world
        .assert_complete_in_order(&BTreeMap::from([(("e2".into(), "sr1".into()), 100)]));
    assert!(cluster.world.log.lock()["e2"]
        .iter()
        .all(|d| d.node == "sr2"));
    // SR1 hosts nothing; SR2 hosts S2 with E2.
    let state1 = sr1.state(ASK).await.unwrap();
    assert!(state1.shards.is_empty());
    let state2 = sr2.state(ASK).await.unwrap();
    assert_eq!(state2.shards.get(&s2).map(Vec::len), Some(1));
    assert_eq!(
        counter(colo::metrics::FORWARDED, &[("entity_type", &cluster.name)]),
        101
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn burst_before_home_is_known_arrives_complete_and_in_order() {
    let mut cluster = Cluster::new("burst", fast_settings(20));
    let a = cluster.add_node("a");
    let b = cluster.add_node("b");
    // No coordinator yet: every message waits in the regions' buffers.
    let mut expected = BTreeMap::new();
    for seq in 0..200u64 {
        for e in 0..25 {
            let id = format!("e{e}");
            a.tell(
                &id,
                ProbeMsg::Record {
                    from: "a".into(),
                    seq,
                },
            )
            .await
            .unwrap();
            b.tell(
                &id,
                ProbeMsg::Record {
                    from: "b".into(),
                    seq,
                },
            )
            .await
            .unwrap();
            expected.insert((id.clone(), "a".to_string()), seq + 1);
            expected.insert((id, "b".to_string()), seq + 1);
        }
    }
    assert_eq!(cluster.world.delivered(), 0);
    cluster.start_coordinator(least_shard_new(0, 0.1));
    eventually("all 10000 delivered", Duration::from_secs(10), || async {
        cluster.world.delivered() == 10_000
    })
    .await;
    cluster.world.assert_complete_in_order(&expected);
    cluster.world.assert_never_live_twice();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn proxy_region_hosts_nothing_and_routes() {
    let mut cluster = Cluster::new("proxy", fast_settings(10));
    cluster.start_coordinator(least_shard_new(0, 0.1));
    let host = cluster.add_node("host");
    let proxy = cluster.add_proxy("proxy");
    for i in 0..50 {
        let reply = proxy
            .ask(&format!("p{i}"), ProbeMsg::Where, ASK)
            .await
            .unwrap();
        assert!(matches!(reply, ProbeReply::At { ref node, .. } if node == "host"));
    }
    assert!(proxy.state(ASK).await.unwrap().shards.is_empty());
    let hosted = host.state(ASK).await.unwrap().total_entities();
    assert_eq!(hosted, 50);
    assert!(
        !cluster.shard_counts().contains_key("proxy"),
        "a proxy is never a shard home"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn buffer_overflow_returns_an_error_to_the_sender_and_counts_the_drop() {
    let settings = colo::ShardingSettings {
        buffer_size: 10,
        ..fast_settings(10)
    };
    let mut cluster = Cluster::new("overflow", settings);
    let _ = metrics();
    let a = cluster.add_node("a");
    // No coordinator: nothing leaves the buffer.
    for seq in 0..10 {
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
    let err = a
        .tell(
            "x",
            ProbeMsg::Record {
                from: "a".into(),
                seq: 10,
            },
        )
        .await
        .unwrap_err();
    assert!(
        matches!(err, TellError::BufferFull { limit: 10, .. }),
        "{err}"
    );
    let err = a.ask("y", ProbeMsg::Where, ASK).await.unwrap_err();
    assert!(err.to_string().contains("buffer"), "{err}");
    let dropped = counter(
        colo::metrics::DROPPED,
        &[("entity_type", &cluster.name), ("reason", "buffer_full")],
    );
    assert_eq!(dropped, 2);
    // What was accepted is not lost.
    cluster.start_coordinator(least_shard_new(0, 0.1));
    eventually(
        "the 10 accepted messages delivered",
        Duration::from_secs(5),
        || async { cluster.world.delivered() == 10 },
    )
    .await;
    cluster
        .world
        .assert_complete_in_order(&BTreeMap::from([(("x".into(), "a".into()), 10)]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn empty_entity_id_is_refused() {
    let mut cluster = Cluster::new("emptyid", fast_settings(10));
    let a = cluster.add_node("a");
    assert_eq!(
        a.tell("", ProbeMsg::Where).await.unwrap_err(),
        TellError::EmptyEntityId
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_shard_is_allocated_before_min_members_regions_registered() {
    let settings = colo::ShardingSettings {
        min_members: 2,
        ..fast_settings(10)
    };
    let mut cluster = Cluster::new("minmembers", settings);
    cluster.start_coordinator(least_shard_new(0, 0.1));
    let a = cluster.add_node("a");
    cluster.await_regions(1).await;
    for seq in 0..20 {
        a.tell(
            &format!("m{seq}"),
            ProbeMsg::Record {
                from: "a".into(),
                seq: 0,
            },
        )
        .await
        .unwrap();
    }
    // Several retry intervals pass with one region: nothing is allocated.
    let err = a
        .ask("m0", ProbeMsg::Where, Duration::from_millis(300))
        .await
        .unwrap_err();
    assert!(matches!(err, colo::AskError::Timeout(_)));
    assert!(cluster.homes().is_empty());
    cluster.add_node("b");
    eventually("all 20 delivered", Duration::from_secs(5), || async {
        cluster.world.delivered() == 20
    })
    .await;
    let counts = cluster.shard_counts();
    assert!(counts["a"] > 0 && counts["b"] > 0, "{counts:?}");
}
