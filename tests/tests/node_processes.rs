//! Several `colo run` processes on loopback: the runtime over gRPC, the
//! client API, health, metrics and reflection, as an operator meets them.
//! Every test has its own ports, so they run in parallel.

use colo_proto::v1 as pb;
use colo_tests::client::*;
use colo_tests::process::{colo_binary, NodeProcess};
use colo_tests::{http, wait};
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;
use tonic::Code;

/// Scenario 2 of the concepts page, across processes: a message for a
/// shard whose home is another node is forwarded there, and every later
/// message through any node reaches the same entity.
#[tokio::test]
async fn scenario_2_messages_reach_a_home_on_another_node() {
    let (a, b, c) = cluster_of_three().await;
    let ids = ids("s2", 40);
    let mut via_a = a.client().await;
    for id in &ids {
        assert_eq!(ask(&mut via_a, id, r#"{"Add":1}"#).await.unwrap(), 1);
    }
    let by_node = entities_by_node(&[&a, &b, &c]).await;
    let all: BTreeSet<String> = by_node.values().flatten().cloned().collect();
    assert_eq!(all, ids.iter().cloned().collect());
    let live: usize = by_node.values().map(BTreeSet::len).sum();
    assert_eq!(live, ids.len(), "an entity lives twice: {by_node:?}");
    assert!(
        by_node[&b.grpc].len() + by_node[&c.grpc].len() > 0,
        "nothing was forwarded: {by_node:?}"
    );
    // Through another node: the same entities, one message later.
    let mut via_c = c.client().await;
    for id in &ids {
        assert_eq!(ask(&mut via_c, id, r#"{"Add":1}"#).await.unwrap(), 2);
    }
}

/// A node that joins gets its share of the shards.
#[tokio::test]
async fn a_joining_node_receives_shards() {
    let a = NodeProcess::start(None, &[]);
    let b = NodeProcess::start(Some(&a.grpc), &[]);
    a.await_ready(READY).await;
    b.await_ready(READY).await;
    let mut via_a = a.client().await;
    for id in ids("join", 120) {
        ask(&mut via_a, &id, r#""Get""#).await.unwrap();
    }
    let c = NodeProcess::start(Some(&a.grpc), &[]);
    c.await_ready(READY).await;
    wait::until(
        "the new node hosts shards",
        Duration::from_secs(30),
        || async {
            shards_by_region(&a)
                .await
                .is_some_and(|s| s.get(&c.grpc).is_some_and(|n| *n >= 3) && s.len() == 3)
        },
    )
    .await;
}

/// A node asked to shut down hands its shards over first: asks running
/// meanwhile through another node all get their answer.
#[tokio::test]
async fn graceful_shutdown_moves_shards_and_loses_no_acknowledged_message() {
    let (a, mut b, c) = cluster_of_three().await;
    let ids = ids("gs", 30);
    let mut via_a = a.client().await;
    for id in &ids {
        ask(&mut via_a, id, r#"{"Add":1}"#).await.unwrap();
    }
    let before = entities_by_node(&[&b]).await;
    assert!(!before[&b.grpc].is_empty(), "b hosts nothing: {before:?}");

    let load = {
        let ids = ids.clone();
        let mut client = c.client().await;
        tokio::spawn(async move {
            let mut answered = 0;
            for _round in 0..15 {
                for id in &ids {
                    ask(&mut client, id, r#"{"Add":1}"#)
                        .await
                        .unwrap_or_else(|e| panic!("ask {id} failed during the shutdown: {e}"));
                    answered += 1;
                }
            }
            answered
        })
    };
    b.client()
        .await
        .shutdown(pb::ShutdownRequest {})
        .await
        .expect("shutdown accepted");
    let status = b.exited(Duration::from_secs(60)).await;
    assert!(
        status.success(),
        "b exited with {status}; log:\n{}",
        b.logs()
    );
    assert_eq!(load.await.unwrap(), 15 * ids.len());
    let regions = shards_by_region(&a).await.expect("cluster stats");
    assert_eq!(regions.len(), 2, "{regions:?}");
    assert!(!regions.contains_key(&b.grpc));
}

/// A node that leaves is not waited for: the coordinator has read its last
/// hand-off (ShardStopped) before the node exits, so its shards are homed
/// elsewhere at once. The coordinator here waits a minute for a silent
/// region: a ShardStopped lost with the leaving node's connection would
/// keep that shard's messages waiting as long, and the asks below fail.
#[tokio::test]
async fn a_node_that_leaves_is_not_waited_for() {
    let patient = ["coordinator.region_timeout=\"60s\""];
    let a = NodeProcess::start(None, &patient);
    a.await_ready(READY).await;
    let ids = ids("leave", 48);
    let mut via_a = a.client().await;
    for round in 0..4 {
        let mut b = NodeProcess::start(Some(&a.grpc), &patient);
        b.await_ready(READY).await;
        wait::until(
            "the joining node hosts entities",
            Duration::from_secs(30),
            || {
                let (mut client, ids, b) = (via_a.clone(), &ids, &b);
                async move {
                    for id in ids {
                        if ask(&mut client, id, r#""Get""#).await.is_err() {
                            return false;
                        }
                    }
                    entities_on(b, "counter")
                        .await
                        .is_some_and(|hosted| !hosted.is_empty())
                }
            },
        )
        .await;
        b.terminate();
        let status = b.exited(Duration::from_secs(60)).await;
        assert!(
            status.success(),
            "b exited with {status}; log:\n{}",
            b.logs()
        );
        for id in &ids {
            if let Err(status) =
                ask_within(&mut via_a, id, r#""Get""#, Duration::from_secs(10)).await
            {
                panic!(
                    "round {round}: {id} not answered after the node left: {status}; a's log:\n{}",
                    a.logs()
                );
            }
        }
    }
}

/// SIGTERM (what an orchestrator sends) and Ctrl-C stop a node the way the
/// Shutdown call does: its shards are handed off first, and it exits with
/// success while the rest of the cluster keeps answering for every id.
#[tokio::test]
async fn sigterm_and_ctrl_c_hand_the_shards_off_before_the_node_exits() {
    let (a, mut b, mut c) = cluster_of_three().await;
    let ids = ids("sig", 30);
    let mut via_a = a.client().await;
    for id in &ids {
        ask(&mut via_a, id, r#"{"Add":1}"#).await.unwrap();
    }
    let hosted = entities_by_node(&[&b, &c]).await;
    assert!(hosted.values().all(|ids| !ids.is_empty()), "{hosted:?}");
    b.terminate();
    let status = b.exited(Duration::from_secs(60)).await;
    assert!(
        status.success(),
        "b exited with {status}; log:\n{}",
        b.logs()
    );
    assert!(b.logs().contains("graceful shutdown"), "{}", b.logs());
    c.interrupt();
    let status = c.exited(Duration::from_secs(60)).await;
    assert!(
        status.success(),
        "c exited with {status}; log:\n{}",
        c.logs()
    );
    assert!(c.logs().contains("graceful shutdown"), "{}", c.logs());
    let regions = shards_by_region(&a).await.expect("cluster stats");
    assert_eq!(
        regions.keys().collect::<Vec<_>>(),
        vec![&a.grpc],
        "{regions:?}"
    );
    for id in &ids {
        ask(&mut via_a, id, r#""Get""#).await.unwrap();
    }
    assert_each_lives_once(&ids, &entities_by_node(&[&a]).await);
}

/// kill -9 of a node that does not host the coordinator: its shards start
/// elsewhere; the survivors keep their values, the killed node's entities
/// start again from their initial state (state is in memory only), and
/// each id lives once. Restarted with the same config, the node rejoins and
/// gets shards again, and still no id lives twice (while shards move to it
/// an entity may be between homes).
#[tokio::test]
async fn a_killed_node_is_replaced_and_rejoins_after_a_restart() {
    let (a, mut b, c) = cluster_of_three().await;
    let ids = ids("k9", 40);
    let mut via_a = a.client().await;
    for id in &ids {
        ask(&mut via_a, id, r#"{"Add":1}"#).await.unwrap();
    }
    let on_b = entities_by_node(&[&b]).await.remove(&b.grpc).unwrap();
    assert!(!on_b.is_empty());

    b.kill();
    for id in &on_b {
        let client = a.client().await;
        wait::until(
            &format!("{id} answers again"),
            Duration::from_secs(30),
            || {
                let mut client = client.clone();
                async move { ask(&mut client, id, r#""Get""#).await.is_ok() }
            },
        )
        .await;
    }
    for id in &ids {
        let expected = if on_b.contains(id) { 0 } else { 1 };
        assert_eq!(
            ask(&mut via_a, id, r#""Get""#).await.unwrap(),
            expected,
            "{id}"
        );
    }
    assert_each_lives_once(&ids, &entities_by_node(&[&a, &c]).await);

    b.restart();
    b.await_ready(READY).await;
    wait::until("b hosts shards again", Duration::from_secs(30), || async {
        shards_by_region(&a)
            .await
            .is_some_and(|s| s.len() == 3 && s.get(&b.grpc).is_some_and(|n| *n >= 1))
    })
    .await;
    for id in &ids {
        ask(&mut via_a, id, r#""Get""#).await.unwrap();
    }
    let by_node = entities_by_node(&[&a, &b, &c]).await;
    let live: Vec<&String> = by_node.values().flatten().collect();
    let distinct: BTreeSet<&String> = live.iter().copied().collect();
    assert_eq!(live.len(), distinct.len(), "an id lives twice: {by_node:?}");
}

/// Every id is live on exactly one node.
fn assert_each_lives_once(ids: &[String], by_node: &BTreeMap<String, BTreeSet<String>>) {
    let mut live: Vec<&String> = by_node.values().flatten().collect();
    live.sort();
    let mut expected: Vec<&String> = ids.iter().collect();
    expected.sort();
    assert_eq!(live, expected, "{by_node:?}");
}

/// Malformed client requests are refused with INVALID_ARGUMENT and a
/// message naming what is wrong.
#[tokio::test]
async fn malformed_requests_get_invalid_argument() {
    let a = NodeProcess::start(None, &[]);
    a.await_ready(READY).await;
    let mut client = a.client().await;
    let good = ask_request("x", r#""Get""#);
    let cases = [
        (
            "entity_type",
            pb::AskRequest {
                entity_type: String::new(),
                ..good.clone()
            },
        ),
        (
            "no-such-type",
            pb::AskRequest {
                entity_type: "no-such-type".into(),
                ..good.clone()
            },
        ),
        (
            "entity_id",
            pb::AskRequest {
                entity_id: String::new(),
                ..good.clone()
            },
        ),
        (
            "payload",
            pb::AskRequest {
                payload: None,
                ..good.clone()
            },
        ),
        (
            "text/yaml",
            pb::AskRequest {
                payload: Some(pb::Payload {
                    content_type: "text/yaml".into(),
                    data: b"x".to_vec(),
                }),
                ..good.clone()
            },
        ),
        (
            "payload",
            pb::AskRequest {
                payload: json(r#"{"Sub":1}"#),
                ..good.clone()
            },
        ),
        (
            "timeout",
            pb::AskRequest {
                timeout: Some(prost_types::Duration {
                    seconds: -1,
                    nanos: 0,
                }),
                ..good.clone()
            },
        ),
    ];
    for (field, request) in cases {
        let status = client.ask(request).await.expect_err(field);
        assert_eq!(status.code(), Code::InvalidArgument, "{field}: {status:?}");
        assert!(
            status.message().contains(field),
            "{field}: {}",
            status.message()
        );
    }
    let status = client
        .tell(pb::TellRequest {
            entity_type: "counter".into(),
            entity_id: String::new(),
            payload: json(r#""Get""#),
            idempotency_key: None,
        })
        .await
        .expect_err("empty id");
    assert_eq!(status.code(), Code::InvalidArgument);
    // Nothing refused reached an entity; the node still serves.
    assert_eq!(ask(&mut client, "x", r#""Get""#).await.unwrap(), 0);
}

/// A config that cannot work stops startup, naming the field and why.
#[tokio::test]
async fn an_invalid_config_names_the_field() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad.toml");
    std::fs::write(
        &path,
        "[node]\nlisten = \"127.0.0.1:1\"\nadmin_listen = \"127.0.0.1:2\"\n[coordinator]\naddress = \"127.0.0.1:1\"\n[sharding]\nnumber_of_shards = 0\n",
    )
    .unwrap();
    let out = std::process::Command::new(colo_binary())
        .args(["run", "--config"])
        .arg(&path)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("sharding.number_of_shards"), "{stderr}");
    assert!(stderr.contains("at least 1"), "{stderr}");

    std::fs::write(&path, "[node]\nlisten = 5\n").unwrap();
    let out = std::process::Command::new(colo_binary())
        .args(["run", "--config"])
        .arg(&path)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("node.listen"), "{stderr}");
}

/// `/metrics` of a running node shows its hosted shards and the messages
/// its entities handled; the health endpoints answer.
#[tokio::test]
async fn metrics_show_hosted_shards_and_delivered_messages() {
    let a = NodeProcess::start(None, &[]);
    let b = NodeProcess::start(Some(&a.grpc), &[]);
    a.await_ready(READY).await;
    b.await_ready(READY).await;
    let mut client = b.client().await;
    for id in ids("m", 30) {
        ask(&mut client, &id, r#"{"Add":2}"#).await.unwrap();
    }
    let (status, live) = http::get(&b.admin, "/health/live").await.unwrap();
    assert_eq!(status, 200, "{live}");
    let (status, body) = http::get(&b.admin, "/metrics").await.unwrap();
    assert_eq!(status, 200);
    let value = |name: &str| -> f64 {
        body.lines()
            .filter(|l| l.starts_with(name) && l.contains("entity_type=\"counter\""))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    };
    assert!(value("colo_region_hosted_shards") >= 1.0, "{body}");
    // Of the 30 asks through b, those for b's shards were handled here and
    // the others forwarded to a.
    let (delivered, forwarded) = (
        value("colo_messages_delivered_total"),
        value("colo_messages_forwarded_total"),
    );
    assert!(delivered >= 1.0 && forwarded >= 1.0, "{body}");
    assert!(delivered + forwarded >= 30.0, "{body}");
    assert_eq!(value("colo_region_coordinator_reachable"), 1.0, "{body}");
    assert!(value("colo_shard_entities{") >= 1.0, "{body}");
    // Every family README lists is described and present on this node,
    // which does not host the coordinator: hand-off and rebalance series
    // included, at zero until something happens.
    for family in [
        "colo_region_hosted_shards",
        "colo_region_hosted_entities",
        "colo_shard_entities",
        "colo_messages_delivered_total",
        "colo_messages_forwarded_total",
        "colo_messages_buffered",
        "colo_messages_buffered_total",
        "colo_messages_dropped_total",
        "colo_entity_failures_total",
        "colo_shard_home_latency_seconds",
        "colo_handoffs_total",
        "colo_handoff_duration_seconds",
        "colo_rebalanced_shards_total",
        "colo_passivations_total",
        "colo_entity_activations_total",
        "colo_region_coordinator_reachable",
    ] {
        assert!(
            body.contains(&format!("# HELP {family} ")),
            "no HELP for {family}:\n{body}"
        );
        assert!(
            body.lines()
                .any(|l| l.starts_with(family) && !l.starts_with('#')),
            "no series of {family}:\n{body}"
        );
    }
    assert!(
        body.contains(r#"colo_handoffs_total{entity_type="counter",outcome="failed"} 0"#),
        "{body}"
    );
    assert!(body.contains("colo_stale_replies_total 0"), "{body}");
    assert!(
        body.contains(r#"colo_messages_dropped_total{entity_type="",reason="malformed"} 0"#),
        "{body}"
    );
    // The node that hosts the coordinator counts the registered regions.
    let (_, body) = http::get(&a.admin, "/metrics").await.unwrap();
    assert!(body.contains("# HELP colo_coordinator_regions "), "{body}");
    assert!(
        body.contains(r#"colo_coordinator_regions{entity_type="counter"} 2"#),
        "{body}"
    );
}

/// Server reflection lists colo's services and the standard health
/// service, and the health service says the node serves.
#[tokio::test]
async fn reflection_lists_the_services_and_health_serves() {
    use tonic_reflection::pb::v1::{
        server_reflection_client::ServerReflectionClient,
        server_reflection_request::MessageRequest, server_reflection_response::MessageResponse,
        ServerReflectionRequest,
    };
    let a = NodeProcess::start(None, &[]);
    a.await_ready(READY).await;
    let mut reflection = ServerReflectionClient::new(a.channel().await);
    let request = ServerReflectionRequest {
        host: String::new(),
        message_request: Some(MessageRequest::ListServices(String::new())),
    };
    let mut answers = reflection
        .server_reflection_info(tokio_stream::iter([request]))
        .await
        .unwrap()
        .into_inner();
    let answer = answers.message().await.unwrap().expect("an answer");
    let Some(MessageResponse::ListServicesResponse(list)) = answer.message_response else {
        panic!("unexpected answer {answer:?}");
    };
    let names: BTreeSet<String> = list.service.into_iter().map(|s| s.name).collect();
    for service in [
        "colo.v1.Sharding",
        "colo.v1.Node",
        "colo.v1.Coordinator",
        "grpc.health.v1.Health",
    ] {
        assert!(names.contains(service), "{service} missing from {names:?}");
    }
    let mut health = tonic_health::pb::health_client::HealthClient::new(a.channel().await);
    let status = health
        .check(tonic_health::pb::HealthCheckRequest {
            service: String::new(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        status.status,
        tonic_health::pb::health_check_response::ServingStatus::Serving as i32
    );
}

/// A node started with another number_of_shards would put the same id in
/// another shard than the cluster: it is refused at registration, says so
/// in its readiness probe, and never serves.
#[tokio::test]
async fn a_node_with_another_number_of_shards_is_refused_at_registration() {
    let a = NodeProcess::start(None, &[]);
    a.await_ready(READY).await;
    let d = NodeProcess::start(Some(&a.grpc), &["sharding.number_of_shards=50"]);
    wait::until("d's refusal shows in its readiness", READY, || async {
        matches!(
            http::get(&d.admin, "/health/ready").await,
            Ok((503, body)) if body.contains("the region has number_of_shards 50, the cluster 12")
        )
    })
    .await;
    let regions = shards_by_region(&a).await.expect("cluster stats");
    assert!(!regions.contains_key(&d.grpc), "{regions:?}");
    assert!(a.logs().contains("region refused"), "{}", a.logs());
}
