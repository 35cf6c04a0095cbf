//! A node program of one's own (the `accounts` example of the colo crate):
//! its entity type runs as a cluster of processes with everything `colo
//! run` has: the client API, health, metrics and graceful shutdown.

use colo_proto::v1 as pb;
use colo_tests::client::{json, READY};
use colo_tests::process::{NodeProcess, Program};
use colo_tests::{http, wait};
use pb::sharding_client::ShardingClient;
use std::time::Duration;
use tonic::transport::Channel;

const ACCOUNTS: Program = Program::Example("accounts");

async fn ask(
    client: &mut ShardingClient<Channel>,
    id: &str,
    message: &str,
) -> Result<serde_json::Value, tonic::Status> {
    let reply = client
        .ask(pb::AskRequest {
            entity_type: "account".into(),
            entity_id: id.into(),
            payload: json(message),
            timeout: None,
        })
        .await?
        .into_inner();
    let data = reply.reply.map(|p| p.data).unwrap_or_default();
    serde_json::from_slice(&data).map_err(|e| tonic::Status::internal(e.to_string()))
}

#[tokio::test]
async fn a_program_of_ones_own_runs_its_entity_type_as_a_cluster() {
    let a = NodeProcess::start_program(ACCOUNTS, None, &[]);
    let mut b = NodeProcess::start_program(ACCOUNTS, Some(&a.grpc), &[]);
    let c = NodeProcess::start_program(ACCOUNTS, Some(&a.grpc), &[]);
    for node in [&a, &b, &c] {
        node.await_ready(READY).await;
    }
    let (mut via_a, mut via_b, mut via_c) = (a.client().await, b.client().await, c.client().await);
    for i in 0..20 {
        let id = format!("acct-{i}");
        let deposit = ask(&mut via_a, &id, r#"{"Deposit":10}"#).await.unwrap();
        assert_eq!(deposit, serde_json::json!({"Balance": 10}), "{id}");
        let withdraw = ask(&mut via_b, &id, r#"{"Withdraw":3}"#).await.unwrap();
        assert_eq!(withdraw, serde_json::json!({"Balance": 7}), "{id}");
        let refused = ask(&mut via_c, &id, r#"{"Withdraw":100}"#).await.unwrap();
        assert_eq!(
            refused,
            serde_json::json!({"Refused": "insufficient funds: 7 available"}),
            "{id}"
        );
        assert_eq!(
            ask(&mut via_c, &id, r#""Balance""#).await.unwrap(),
            serde_json::json!({"Balance": 7}),
            "{id}"
        );
    }
    // The program registers only its own entity type.
    let unknown = via_a
        .ask(pb::AskRequest {
            entity_type: "counter".into(),
            entity_id: "x".into(),
            payload: json(r#""Get""#),
            timeout: None,
        })
        .await
        .unwrap_err();
    assert_eq!(unknown.code(), tonic::Code::InvalidArgument, "{unknown}");
    assert!(unknown.message().contains("known: account"), "{unknown}");
    // Its metrics and health, as colo run's.
    let (status, body) = http::get(&b.admin, "/metrics").await.unwrap();
    assert_eq!(status, 200);
    assert!(
        body.contains(r#"colo_region_hosted_shards{entity_type="account"}"#),
        "{body}"
    );
    // SIGTERM stops it gracefully: its shards move, and it exits 0.
    b.terminate();
    let status = b.exited(Duration::from_secs(60)).await;
    assert!(status.success(), "{status}");
    wait::until(
        "the others serve b's accounts",
        Duration::from_secs(30),
        || {
            let mut client = via_a.clone();
            async move { ask(&mut client, "acct-0", r#""Balance""#).await.is_ok() }
        },
    )
    .await;
}
