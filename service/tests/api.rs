//! The client API over real gRPC: two in-process nodes on the in-memory
//! network, each serving `Sharding` on a loopback port, reached with the
//! generated client.

use colo::allocation::{LeastShardAllocationStrategy, LeastShardSettings};
use colo::process::api::ShardingApi;
use colo::process::samples::counter::{Counter, CounterMsg, COUNTER};
use colo::{
    codec, CoordinatorHandle, EntityType, InMemoryNetwork, InMemoryStore, Node, ShardingSettings,
};
use colo_proto::v1::sharding_client::ShardingClient;
use colo_proto::v1::{
    AskRequest, ClusterStatsRequest, Payload, RegionStateRequest, ShutdownRequest, TellRequest,
};
use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;
use tonic::transport::Channel;
use tonic::Code;

const ASK: Duration = Duration::from_secs(5);
const JSON: &str = "application/json";
const POSTCARD: &str = "application/x-postcard";

/// A node with its API served on a loopback port.
struct Served {
    node: Arc<Node>,
    client: ShardingClient<Channel>,
    shutdown: watch::Receiver<bool>,
}

/// Two nodes, `a` and `b`, each running the counter entity type, and the
/// counter's coordinator.
struct TwoNodes {
    a: Served,
    b: Served,
    _coordinator: CoordinatorHandle,
}

async fn two_nodes() -> TwoNodes {
    let settings = ShardingSettings {
        number_of_shards: 8,
        retry_interval: Duration::from_millis(50),
        // Allocate nothing until both nodes are up, and never rebalance: the
        // counters live in memory, and a test reads what it wrote.
        min_members: 2,
        rebalance_interval: Duration::from_secs(3600),
        ..ShardingSettings::default()
    };
    let network = InMemoryNetwork::new();
    let strategy = LeastShardAllocationStrategy::new(LeastShardSettings::default())
        .expect("least-shard settings");
    let coordinator = CoordinatorHandle::spawn(
        COUNTER,
        settings.clone(),
        Box::new(strategy),
        Arc::new(InMemoryStore::new()),
    )
    .expect("coordinator settings");
    network.host_coordinator(coordinator.clone());
    let mut served = Vec::new();
    for name in ["a", "b"] {
        let node = Arc::new(Node::new(network.transport(name)));
        node.start_region(
            EntityType::new(COUNTER, |_| Counter::default()).with_settings(settings.clone()),
        )
        .expect("counter registers");
        served.push(serve(node).await);
    }
    let b = served.pop().expect("b");
    let a = served.pop().expect("a");
    TwoNodes {
        a,
        b,
        _coordinator: coordinator,
    }
}

async fn serve(node: Arc<Node>) -> Served {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind loopback");
    let addr = listener.local_addr().expect("local addr");
    let (trigger, shutdown) = watch::channel(false);
    let service = ShardingApi::new(node.clone(), ASK, trigger);
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(service)
            .serve_with_incoming(colo::transport::grpc::incoming(listener)),
    );
    let client = ShardingClient::connect(format!("http://{addr}"))
        .await
        .expect("connect to the API");
    Served {
        node,
        client,
        shutdown,
    }
}

fn payload(content_type: &str, data: impl Into<Vec<u8>>) -> Option<Payload> {
    Some(Payload {
        content_type: content_type.to_string(),
        data: data.into(),
    })
}

fn tell(id: &str, payload: Option<Payload>) -> TellRequest {
    TellRequest {
        entity_type: COUNTER.into(),
        entity_id: id.into(),
        payload,
        idempotency_key: None,
    }
}

fn ask(id: &str, payload: Option<Payload>) -> AskRequest {
    AskRequest {
        entity_type: COUNTER.into(),
        entity_id: id.into(),
        payload,
        timeout: None,
    }
}

fn region_state() -> RegionStateRequest {
    RegionStateRequest {
        entity_type: COUNTER.into(),
        timeout: None,
    }
}

/// Asks `Get` in JSON and answers the counter's value.
async fn get(client: &mut ShardingClient<Channel>, id: &str) -> i64 {
    let reply = client
        .ask(ask(id, payload(JSON, "\"Get\"")))
        .await
        .expect("get answered")
        .into_inner()
        .reply
        .expect("a reply");
    assert_eq!(reply.content_type, JSON);
    serde_json::from_slice(&reply.data).expect("a JSON number")
}

/// Shards a node's region hosts, with their entity ids.
async fn hosted(client: &mut ShardingClient<Channel>) -> Vec<(u32, Vec<String>)> {
    let state = client
        .region_state(region_state())
        .await
        .expect("region state")
        .into_inner();
    state
        .shards
        .into_iter()
        .map(|s| (s.shard, s.entity_ids))
        .collect()
}

#[tokio::test]
async fn tell_then_ask_a_counter_in_json() {
    let mut c = two_nodes().await;
    let told =
        c.a.client
            .tell(tell("json-1", payload(JSON, r#"{"Add":5}"#)))
            .await
            .expect("tell accepted")
            .into_inner();
    let region = c.a.node.region_by_name(COUNTER).expect("counter region");
    assert_eq!(told.shard, region.shard_of("json-1").0);

    let asked =
        c.a.client
            .ask(ask("json-1", payload(JSON, r#"{"Add":2}"#)))
            .await
            .expect("ask answered")
            .into_inner();
    assert_eq!(asked.shard, told.shard);
    let reply = asked.reply.expect("a reply");
    assert_eq!(
        (reply.content_type.as_str(), reply.data.as_slice()),
        (JSON, &b"7"[..])
    );
    // The same entity, reached through the other node.
    assert_eq!(get(&mut c.b.client, "json-1").await, 7);
}

#[tokio::test]
async fn tell_then_ask_a_counter_in_postcard() {
    let mut c = two_nodes().await;
    let add = codec::encode(&CounterMsg::Add(3)).expect("encode");
    c.a.client
        .tell(tell("pc-1", payload(POSTCARD, add.to_vec())))
        .await
        .expect("tell accepted");
    let get = codec::encode(&CounterMsg::Get).expect("encode");
    let reply =
        c.a.client
            .ask(ask("pc-1", payload(POSTCARD, get.to_vec())))
            .await
            .expect("ask answered")
            .into_inner()
            .reply
            .expect("a reply");
    assert_eq!(reply.content_type, POSTCARD);
    assert_eq!(codec::decode::<i64>(&reply.data).expect("postcard i64"), 3);
}

#[tokio::test]
async fn ask_through_node_a_reaches_an_entity_homed_on_node_b() {
    let mut c = two_nodes().await;
    for i in 0..32 {
        c.a.client
            .tell(tell(&format!("e{i}"), payload(JSON, r#"{"Add":1}"#)))
            .await
            .expect("tell accepted");
    }
    // Asking every entity makes sure every tell has been handled.
    for i in 0..32 {
        assert_eq!(get(&mut c.a.client, &format!("e{i}")).await, 1);
    }
    let on_a: BTreeSet<u32> = hosted(&mut c.a.client)
        .await
        .into_iter()
        .map(|(s, _)| s)
        .collect();
    let on_b = hosted(&mut c.b.client).await;
    let (shard, ids) = on_b
        .iter()
        .find(|(_, ids)| !ids.is_empty())
        .expect("least-shard allocation gave node b some of the 8 shards");
    assert!(
        !on_a.contains(shard),
        "shard {shard} is hosted on both nodes"
    );

    let id = &ids[0];
    let asked =
        c.a.client
            .ask(ask(id, payload(JSON, r#"{"Add":10}"#)))
            .await
            .expect("ask through a answered")
            .into_inner();
    assert_eq!(asked.shard, *shard);
    assert_eq!(asked.reply.expect("a reply").data, b"11");
}

#[tokio::test]
async fn region_state_and_cluster_stats_count_every_entity() {
    let mut c = two_nodes().await;
    let ids: Vec<String> = (0..12).map(|i| format!("s{i}")).collect();
    for id in &ids {
        assert_eq!(
            c.b.client
                .ask(ask(id, payload(JSON, r#"{"Add":1}"#)))
                .await
                .expect("ask answered")
                .into_inner()
                .reply
                .expect("a reply")
                .data,
            b"1"
        );
    }
    let state_a =
        c.a.client
            .region_state(region_state())
            .await
            .expect("region state")
            .into_inner();
    assert_eq!(state_a.region, "a");
    assert!(state_a.failed.is_empty());
    let mut seen: BTreeSet<String> = state_a
        .shards
        .into_iter()
        .flat_map(|s| s.entity_ids)
        .collect();
    seen.extend(
        hosted(&mut c.b.client)
            .await
            .into_iter()
            .flat_map(|(_, ids)| ids),
    );
    assert_eq!(seen, ids.iter().cloned().collect::<BTreeSet<_>>());

    let stats =
        c.a.client
            .cluster_stats(ClusterStatsRequest {
                entity_type: COUNTER.into(),
                timeout: Some(prost_types::Duration {
                    seconds: 2,
                    nanos: 0,
                }),
            })
            .await
            .expect("cluster stats")
            .into_inner();
    assert!(stats.failed_regions.is_empty(), "{stats:?}");
    let regions: BTreeSet<&str> = stats.regions.iter().map(|r| r.region.as_str()).collect();
    assert_eq!(regions, BTreeSet::from(["a", "b"]));
    let total: u64 = stats.regions.iter().flat_map(|r| r.entities.values()).sum();
    assert_eq!(total, ids.len() as u64);
}

#[tokio::test]
async fn bad_input_is_invalid_argument_naming_the_field() {
    let mut c = two_nodes().await;
    let client = &mut c.a.client;
    let good = || payload(JSON, "\"Get\"");
    let bad_timeout = |seconds, nanos| AskRequest {
        timeout: Some(prost_types::Duration { seconds, nanos }),
        ..ask("x", good())
    };

    let tells: Vec<(&str, TellRequest, &[&str])> = vec![
        (
            "empty entity type",
            TellRequest {
                entity_type: String::new(),
                ..tell("x", good())
            },
            &["entity_type"],
        ),
        (
            "unknown entity type",
            TellRequest {
                entity_type: "device".into(),
                ..tell("x", good())
            },
            &["entity_type", "device", "known: counter"],
        ),
        ("empty entity id", tell("", good()), &["entity_id"]),
        ("missing payload", tell("x", None), &["payload"]),
        (
            "empty content type",
            tell("x", payload("", "\"Get\"")),
            &["content_type", JSON, POSTCARD],
        ),
        (
            "unknown content type",
            tell("x", payload("text/plain", "Get")),
            &["content_type", "text/plain", JSON, POSTCARD],
        ),
        (
            "not the entity type's message",
            tell("x", payload(JSON, r#"{"Mul":2}"#)),
            &["payload", "unknown variant `Mul`"],
        ),
        (
            "not JSON at all",
            tell("x", payload(JSON, "{Add:2}")),
            &["payload", "key must be a string"],
        ),
        (
            "not postcard",
            tell("x", payload(POSTCARD, vec![9, 9])),
            &["payload", POSTCARD],
        ),
        (
            "empty idempotency key",
            TellRequest {
                idempotency_key: Some(String::new()),
                ..tell("x", good())
            },
            &["idempotency_key", "must not be empty"],
        ),
        (
            "oversized idempotency key",
            TellRequest {
                idempotency_key: Some("k".repeat(257)),
                ..tell("x", good())
            },
            &["idempotency_key", "257 bytes, at most 256"],
        ),
    ];
    for (case, request, needles) in tells {
        let status = client.tell(request).await.expect_err(case);
        assert_eq!(status.code(), Code::InvalidArgument, "{case}: {status:?}");
        for needle in needles {
            assert!(
                status.message().contains(needle),
                "{case}: {status:?} lacks {needle:?}"
            );
        }
    }

    let asks: Vec<(&str, AskRequest, &[&str])> = vec![
        ("empty entity id", ask("", good()), &["entity_id"]),
        ("missing payload", ask("x", None), &["payload"]),
        (
            "negative timeout",
            bad_timeout(-1, 0),
            &["timeout", "negative"],
        ),
        ("zero timeout", bad_timeout(0, 0), &["timeout", "positive"]),
        (
            "nanos out of range",
            bad_timeout(1, 2_000_000_000),
            &["timeout", "nanos"],
        ),
        (
            "absurd timeout",
            bad_timeout(i64::MAX, 0),
            &["timeout", "at most"],
        ),
    ];
    for (case, request, needles) in asks {
        let status = client.ask(request).await.expect_err(case);
        assert_eq!(status.code(), Code::InvalidArgument, "{case}: {status:?}");
        for needle in needles {
            assert!(
                status.message().contains(needle),
                "{case}: {status:?} lacks {needle:?}"
            );
        }
    }

    let status = client
        .region_state(RegionStateRequest {
            entity_type: String::new(),
            timeout: None,
        })
        .await
        .expect_err("empty entity type");
    assert_eq!(status.code(), Code::InvalidArgument);
    assert!(status.message().contains("entity_type"), "{status:?}");
    let status = client
        .cluster_stats(ClusterStatsRequest {
            entity_type: COUNTER.into(),
            timeout: Some(prost_types::Duration {
                seconds: -3,
                nanos: 0,
            }),
        })
        .await
        .expect_err("negative timeout");
    assert_eq!(status.code(), Code::InvalidArgument);
    assert!(status.message().contains("timeout"), "{status:?}");
}

/// A tell with an idempotency key is applied once however often it is
/// retried, through either node, and the retry says so; another key is
/// another tell.
#[tokio::test]
async fn a_tell_retried_with_its_idempotency_key_is_applied_once() {
    let mut c = two_nodes().await;
    let keyed = |key: &str| TellRequest {
        idempotency_key: Some(key.into()),
        ..tell("once", payload(JSON, r#"{"Add":5}"#))
    };
    let first =
        c.a.client
            .tell(keyed("add-1"))
            .await
            .expect("told")
            .into_inner();
    assert!(!first.already_applied);
    assert!(first.buffered.is_empty(), "answered once applied");
    for client in [&mut c.a.client, &mut c.b.client] {
        let retry = client
            .tell(keyed("add-1"))
            .await
            .expect("told")
            .into_inner();
        assert!(retry.already_applied, "a retry is not applied again");
    }
    assert_eq!(get(&mut c.b.client, "once").await, 5);
    let other =
        c.b.client
            .tell(keyed("add-2"))
            .await
            .expect("told")
            .into_inner();
    assert!(!other.already_applied);
    assert_eq!(get(&mut c.a.client, "once").await, 10);
}

#[tokio::test]
async fn a_failing_entity_is_aborted() {
    let mut c = two_nodes().await;
    let max = format!(r#"{{"Add":{}}}"#, i64::MAX);
    c.a.client
        .ask(ask("big", payload(JSON, max.clone())))
        .await
        .expect("first add fits");
    let status =
        c.a.client
            .ask(ask("big", payload(JSON, max)))
            .await
            .expect_err("overflow fails the entity");
    assert_eq!(status.code(), Code::Aborted, "{status:?}");
    assert!(status.message().contains("counter overflow"), "{status:?}");
}

#[tokio::test]
async fn shutdown_fires_the_trigger_and_a_stopped_region_is_unavailable() {
    let mut c = two_nodes().await;
    // What the program does: wait for the trigger, then stop the node.
    let node = c.a.node.clone();
    let mut trigger = c.a.shutdown.clone();
    let stopped = tokio::spawn(async move {
        trigger.wait_for(|stop| *stop).await.expect("trigger kept");
        node.shutdown().await;
    });
    c.a.client
        .shutdown(ShutdownRequest {})
        .await
        .expect("shutdown accepted");
    assert!(*c.a.shutdown.borrow());
    tokio::time::timeout(Duration::from_secs(10), stopped)
        .await
        .expect("node a stops")
        .expect("stop task");

    let status =
        c.a.client
            .tell(tell("after", payload(JSON, r#"{"Add":1}"#)))
            .await
            .expect_err("a stopped region refuses");
    assert_eq!(status.code(), Code::Unavailable, "{status:?}");
    // Node b's API still answers; its region is untouched.
    assert!(hosted(&mut c.b.client).await.is_empty());
}
