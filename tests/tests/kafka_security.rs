//! `colo run` against Apache Kafka brokers that ask for credentials or TLS.
//!
//! - SASL with SCRAM-SHA-256 over plain text, and with SCRAM-SHA-512 over
//!   TLS: with the right credentials, read from a file, a node consumes;
//!   with a wrong password it stops at startup with an error that names
//!   the refusal and not the password. Neither password shows in a log or
//!   on `/metrics`.
//! - TLS: nodes that elect their coordinator consume, write their
//!   changelog and elect over it; a node that trusts another CA than the
//!   one that signed the broker's certificate stops at startup, saying so.
//!
//! The certificates are made by `scripts/certs.sh`, as README tells users.

use colo_connectors::Changelog;
use colo_tests::broker::Broker;
use colo_tests::process::{colo_binary, NodeProcess};
use colo_tests::purchases::verify;
use colo_tests::tls::Certs;
use colo_tests::user_nodes::*;
use colo_tests::{http, wait};
use std::ops::ControlFlow;
use std::path::Path;
use std::time::Duration;

const USER: &str = "colo-node";
const PASSWORD: &str = "right-password-4f1e2d3c";
const WRONG: &str = "wrong-password-9a8b7c6d";

/// `broker`'s client properties as TOML values, with `sasl.password`
/// replaced by `password` (a TOML value) when given.
fn client_of(broker: &Broker, password: Option<&str>) -> Vec<(String, String)> {
    broker
        .client()
        .iter()
        .map(|(key, value)| match password {
            Some(password) if key == "sasl.password" => (key.clone(), password.to_string()),
            _ => (key.clone(), format!("{value:?}")),
        })
        .collect()
}

/// `colo produce` of `count` purchases of 20 users to `topic` as a client
/// of `broker`; the expected totals go to `expected`.
fn produce(broker: &Broker, topic: &str, count: u64, expected: &Path) {
    let mut command = std::process::Command::new(colo_binary());
    command
        .args(["produce", "--quiet", "--bootstrap-servers"])
        .arg(broker.bootstrap())
        .args(["--topic", topic, "--users", "20"])
        .args(["--count", &count.to_string()])
        .arg("--expected")
        .arg(expected);
    for (key, value) in broker.client() {
        command.arg("--client").arg(format!("{key}={value}"));
    }
    let produced = command.output().expect("run colo produce");
    assert!(
        produced.status.success(),
        "colo produce: {}",
        String::from_utf8_lossy(&produced.stderr)
    );
}

/// A node given `client` stops at startup, and its log says why.
async fn refused_at_startup(sets: Vec<String>, says: &[&str]) -> String {
    let mut refused = start(None, &sets);
    let status = refused.exited(Duration::from_secs(60)).await;
    let logs = refused.logs();
    assert!(!status.success(), "the node kept running:\n{logs}");
    assert!(
        says.iter().all(|s| logs.contains(s)),
        "the error says {says:?}:\n{logs}"
    );
    logs
}

/// The credentials test on `broker`, which knows [`USER`] with
/// [`PASSWORD`] through `mechanism`.
async fn credentials_are_checked(broker: Broker, test: &str, mechanism: &str) {
    let (topic, cluster) = unique(test);
    let dir = tempfile::tempdir().expect("temp dir");
    let sets = kafka_sets(broker.bootstrap(), &topic, &cluster);

    // A wrong password, written in the config: the node stops at once.
    let wrong = client_of(&broker, Some(&format!("{WRONG:?}")));
    let logs = refused_at_startup(
        with_client(sets.clone(), &wrong),
        &["refused the node's credentials", "SASL", mechanism],
    )
    .await;
    assert!(!logs.contains(WRONG), "the password is in the log:\n{logs}");

    // The right one, read from a file.
    let password_file = dir.path().join("kafka-password");
    std::fs::write(&password_file, format!("{PASSWORD}\n")).expect("write the password");
    let source = format!("{{file={:?}}}", password_file.display().to_string());
    let node = start(None, &with_client(sets, &client_of(&broker, Some(&source))));
    node.await_ready(READY).await;

    let expected = dir.path().join("expected.json");
    produce(&broker, &topic, 200, &expected);
    let verified = verify(&expected, &node.grpc).await;
    assert!(verified.is_ok(), "{verified:?}");

    wait::until("the consumer's lag is reported", READY, || async {
        http::get(&node.admin, "/metrics")
            .await
            .is_ok_and(|(_, body)| body.contains("colo_kafka"))
    })
    .await;
    let (_, metrics) = http::get(&node.admin, "/metrics").await.expect("metrics");
    let logs = node.logs();
    for shown in [&logs, &metrics] {
        assert!(!shown.contains(PASSWORD), "the password is shown");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_sasl_the_right_password_consumes_and_a_wrong_one_stops_the_node_at_startup() {
    let broker = Broker::start_authenticating(USER, PASSWORD);
    credentials_are_checked(broker, "sasl", "SCRAM-SHA-256").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_sasl_over_tls_the_right_password_consumes_and_a_wrong_one_stops_the_node_at_startup()
{
    let certs = Certs::make(&["127.0.0.1"]);
    let broker = Broker::start_sasl_tls(&certs, USER, PASSWORD);
    credentials_are_checked(broker, "sasl-ssl", "SCRAM-SHA-512").await;
}

/// Records in the changelog `topic`'s `partitions`, read over TLS.
fn changelog_records(broker: &Broker, topic: &str, partitions: i32) -> usize {
    let changelog = Changelog::new(broker.bootstrap(), broker.client(), topic, READY)
        .expect("the changelog's client");
    let mut records = 0;
    for partition in 0..partitions {
        changelog
            .read(partition, None, i64::MAX, &mut |_| {
                records += 1;
                ControlFlow::Continue(())
            })
            .expect("read the changelog");
    }
    records
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_tls_nodes_consume_write_their_changelog_and_elect_a_coordinator_and_another_ca_is_refused(
) {
    let certs = Certs::make(&["127.0.0.1"]);
    let broker = Broker::start_tls(&certs);
    let (topic, cluster) = unique("tls");
    let dir = tempfile::tempdir().expect("temp dir");
    let sets = elected_sets(broker.bootstrap(), &topic, &cluster);

    // A node that trusts another CA: the broker's certificate is refused.
    let elsewhere = Certs::make(&["127.0.0.1"]);
    let other_ca = vec![
        ("security.protocol".to_string(), r#""SSL""#.to_string()),
        (
            "ssl.ca.location".to_string(),
            format!("{:?}", elsewhere.ca().display().to_string()),
        ),
    ];
    refused_at_startup(
        with_client(sets.clone(), &other_ca),
        &[
            "refused the node's credentials",
            "certificate verify failed",
        ],
    )
    .await;

    let sets = with_client(sets, &client_of(&broker, None));
    let a = start(None, &sets);
    let b = start(None, &sets);
    a.await_ready(READY).await;
    b.await_ready(READY).await;
    let nodes: [&NodeProcess; 2] = [&a, &b];
    wait::until("one of the nodes is elected coordinator", READY, || async {
        hosting_coordinator(&nodes).await.len() == 1
    })
    .await;

    let expected = dir.path().join("expected.json");
    produce(&broker, &topic, 400, &expected);
    let verified = verify(&expected, &a.grpc).await;
    assert!(verified.is_ok(), "{verified:?}\n{}", kafka_logs(&nodes));
    // Each user's state is written behind the handling, within a flush.
    let changelog = format!("{cluster}.user.changelog");
    wait::until("the changelog holds each of the 20 users", READY, || {
        let written = tokio::task::block_in_place(|| changelog_records(&broker, &changelog, 12));
        async move { written >= 20 }
    })
    .await;
}
