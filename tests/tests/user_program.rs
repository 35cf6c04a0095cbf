//! A node program of one's own (the `accounts` example of the colo crate):
//! its entity type runs as a cluster of processes with everything `colo
//! run` has: the client API, health, metrics and graceful shutdown.

use colo_proto::v1 as pb;
use colo_tests::client::{json, READY};
use colo_tests::process::{colo_binary, example_binary, free_port, NodeProcess, Program};
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

/// A process started by the test, killed by its PID however the test ends.
struct Started(std::process::Child);

impl Drop for Started {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `colo.example.toml`, copied as it ships, configures a program of one's
/// own (the example names no entity type of `colo run`'s), and the client
/// commands reach the program's only entity type without `--type`.
#[tokio::test]
async fn the_example_config_runs_a_program_of_ones_own_and_the_cli_finds_its_entity_type() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the workspace");
    let dir = tempfile::tempdir().expect("temporary directory");
    let config = dir.path().join("colo.toml");
    std::fs::copy(root.join("colo.example.toml"), &config).expect("copy the example");
    let grpc = format!("127.0.0.1:{}", free_port());
    let admin = format!("127.0.0.1:{}", free_port());
    let log = dir.path().join("accounts.log");
    let out = std::fs::File::create(&log).expect("log file");
    // The addresses are the flags' (they override the file's); the data
    // directory is the example's relative default, inside `dir`.
    let _node = Started(
        std::process::Command::new(example_binary("accounts"))
            .arg("--config")
            .arg(&config)
            .args([
                "--listen",
                &grpc,
                "--admin-listen",
                &admin,
                "--coordinator",
                &grpc,
            ])
            .arg("--exit-with-parent")
            .current_dir(dir.path())
            .stdout(out.try_clone().expect("log file"))
            .stderr(out)
            .spawn()
            .expect("start the accounts example"),
    );
    let logs = || std::fs::read_to_string(&log).unwrap_or_default();
    let ready = wait::held_within(READY, || async {
        matches!(http::get(&admin, "/health/ready").await, Ok((200, _)))
    })
    .await;
    assert!(ready, "not ready with the example config; log:\n{}", logs());
    let colo = |args: &[&str]| {
        let out = std::process::Command::new(colo_binary())
            .args(args)
            .args(["--addr", &grpc])
            .output()
            .expect("run colo");
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (ok, out, err) = colo(&["tell", "--id", "alice", r#"{"Deposit":10}"#]);
    assert!(
        ok && out.starts_with("told account/alice (shard "),
        "{out}{err}"
    );
    let (ok, out, err) = colo(&["ask", "--id", "alice", "Balance"]);
    assert!(ok, "{err}");
    assert!(
        out.starts_with("account/alice (shard ") && out.ends_with(" replied {\"Balance\":10}\n"),
        "{out}"
    );
    let (ok, out, err) = colo(&["shards"]);
    assert!(ok && out.contains("alice"), "{out}{err}");
}
