//! A node whose brokers are not there at startup: it waits for them for
//! `kafka.startup_timeout` (a broker started beside it may still be coming
//! up), then consumes; if they never answer it stops, naming them. (A broker that goes away mid-run:
//! `kafka_nodes::after_a_broker_restart_mid_load_nothing_is_skipped`.)

use colo_tests::broker::Broker;
use colo_tests::process::free_port;
use colo_tests::purchases::{verify, Producer};
use colo_tests::user_nodes::*;
use colo_tests::wait;
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_started_before_its_broker_waits_for_it_then_consumes() {
    let port = free_port();
    let bootstrap = format!("127.0.0.1:{port}");
    let (topic, cluster) = unique("broker-later");
    let dir = tempfile::tempdir().expect("dir");
    let mut sets = kafka_sets(&bootstrap, &topic, &cluster);
    sets.push(r#"kafka.startup_timeout="120s""#.to_string());
    let node = start(None, &sets);
    wait::until("the node says it waits for the brokers", READY, || {
        std::future::ready(
            node.logs()
                .contains("the kafka brokers do not answer yet; waiting for them"),
        )
    })
    .await;

    let broker = Broker::start_on(port);
    node.await_ready(READY).await;
    let producer = Producer::start(dir.path(), broker.bootstrap(), &topic, 20, 300, None);
    let expected = producer.expected_file();
    producer.finished(Duration::from_secs(60)).await;
    let verified = verify(&expected, &node.grpc).await;
    assert!(verified.is_ok(), "{verified:?}\n{}", node.logs());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_whose_brokers_never_answer_stops_at_startup_naming_them() {
    let bootstrap = format!("127.0.0.1:{}", free_port());
    let (topic, cluster) = unique("broker-never");
    let mut sets = kafka_sets(&bootstrap, &topic, &cluster);
    sets.push(r#"kafka.startup_timeout="12s""#.to_string());
    let mut node = start(None, &sets);
    let status = node.exited(Duration::from_secs(60)).await;
    let logs = node.logs();
    assert!(!status.success(), "{logs}");
    assert!(
        logs.contains(&format!(
            "the brokers at {bootstrap} did not answer within 12s (kafka.startup_timeout)"
        )),
        "the error names the brokers and the setting:\n{logs}"
    );
}
