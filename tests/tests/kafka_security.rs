//! `colo run` against a broker that asks for SASL (SCRAM-SHA-256): with the
//! right credentials, read from a file, a node consumes; with a wrong
//! password it stops at startup with an error that names the refusal and
//! not the password. Neither password shows in a log or on `/metrics`.
//!
//! The broker is Apache Kafka with a SASL_PLAINTEXT listener, the user
//! added when its log directory is formatted. Kafka over TLS is checked as
//! configuration only so far (`config/secrets.rs`'s and the connectors'
//! tests).

use colo_tests::broker::Broker;
use colo_tests::process::colo_binary;
use colo_tests::purchases::verify;
use colo_tests::user_nodes::*;
use colo_tests::{http, wait};
use std::time::Duration;

const USER: &str = "colo-node";
const PASSWORD: &str = "right-password-4f1e2d3c";
const WRONG: &str = "wrong-password-9a8b7c6d";

/// `kafka_sets` with the SASL client properties; `password` is the TOML
/// value of `sasl.password`.
fn sasl_sets(bootstrap: &str, topic: &str, cluster: &str, password: &str) -> Vec<String> {
    let mut sets: Vec<String> = kafka_sets(bootstrap, topic, cluster)
        .into_iter()
        .filter(|s| !s.starts_with("kafka.client="))
        .collect();
    sets.push(format!(
        r#"kafka.client={{"session.timeout.ms"="6000","heartbeat.interval.ms"="500","security.protocol"="SASL_PLAINTEXT","sasl.mechanism"="SCRAM-SHA-256","sasl.username"="{USER}","sasl.password"={password}}}"#
    ));
    sets
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_sasl_the_right_password_consumes_and_a_wrong_one_stops_the_node_at_startup() {
    let broker = Broker::start_authenticating(USER, PASSWORD);
    let (topic, cluster) = unique("sasl");
    let dir = tempfile::tempdir().expect("temp dir");

    // A wrong password, written in the config: the node stops at once.
    let mut refused = start(
        None,
        &sasl_sets(
            broker.bootstrap(),
            &topic,
            &cluster,
            &format!("\"{WRONG}\""),
        ),
    );
    let status = refused.exited(Duration::from_secs(60)).await;
    assert!(!status.success());
    let logs = refused.logs();
    assert!(
        logs.contains("refused the node's credentials") && logs.contains("SASL"),
        "the error says the brokers refused the credentials:\n{logs}"
    );
    assert!(!logs.contains(WRONG), "the password is in the log:\n{logs}");

    // The right one, read from a file.
    let password_file = dir.path().join("kafka-password");
    std::fs::write(&password_file, format!("{PASSWORD}\n")).expect("write the password");
    let source = format!("{{file={:?}}}", password_file.display().to_string());
    let node = start(
        None,
        &sasl_sets(broker.bootstrap(), &topic, &cluster, &source),
    );
    node.await_ready(READY).await;

    let expected = dir.path().join("expected.json");
    let produced = std::process::Command::new(colo_binary())
        .args([
            "produce",
            "--quiet",
            "--bootstrap-servers",
            broker.bootstrap(),
        ])
        .args(["--topic", &topic, "--users", "20", "--count", "200"])
        .arg("--expected")
        .arg(&expected)
        .args(["--client", "security.protocol=SASL_PLAINTEXT"])
        .args(["--client", "sasl.mechanism=SCRAM-SHA-256"])
        .args(["--client", &format!("sasl.username={USER}")])
        .args(["--client", &format!("sasl.password={PASSWORD}")])
        .output()
        .expect("run colo produce");
    assert!(
        produced.status.success(),
        "colo produce: {}",
        String::from_utf8_lossy(&produced.stderr)
    );
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
