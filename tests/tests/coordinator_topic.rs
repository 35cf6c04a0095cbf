//! The coordinator's state on the cluster's coordinator topic
//! (`<cluster>.coordinator`), with `colo run` processes on the test broker:
//! the whole cluster killed and started again goes on from the state its
//! coordinator had.

use colo_tests::broker::Broker;
use colo_tests::lifecycle::Lifecycle;
use colo_tests::process::NodeProcess;
use colo_tests::purchases::{at_least_once_in_order_problems, handled, verify, Producer};
use colo_tests::user_nodes::*;
use std::time::Duration;

/// The coordinator's "state read from its topic" log lines: (epoch, events).
fn state_reads(node: &NodeProcess) -> Vec<(u64, u64)> {
    node.logs()
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|e| e["fields"]["message"] == "coordinator state read from its topic")
        .filter(|e| e["fields"]["entity_type"] == "user")
        .filter_map(|e| {
            let fields = &e["fields"];
            Some((fields["epoch"].as_u64()?, fields["events"].as_u64()?))
        })
        .collect()
}

/// Both nodes killed with SIGKILL while records flow, then started again:
/// the coordinator reads the shard homes it had from the topic (with a
/// higher epoch), every shard is hosted again, every purchase is handled at
/// least once and each user's in order, no user lives on two nodes at once,
/// and the durable totals count each purchase once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_whole_cluster_killed_and_started_again_goes_on_from_its_coordinators_state() {
    let broker = Broker::start();
    let dir = tempfile::tempdir().expect("dir");
    let (topic, cluster) = unique("coordinator-topic");
    let sets = kafka_sets(broker.bootstrap(), &topic, &cluster);
    let mut a = start(None, &sets);
    a.await_ready(READY).await;
    let mut b = start(Some(&a.grpc), &sets);
    b.await_ready(READY).await;
    let producer = Producer::start(dir.path(), broker.bootstrap(), &topic, 40, 3000, Some(500));
    await_hosting(&b).await;
    let first = state_reads(&a);
    assert_eq!(first.len(), 1, "{first:?}");
    assert_eq!(first[0].1, 0, "a new cluster's topic is empty: {first:?}");

    b.kill();
    a.kill();
    let killed_at = humantime::format_rfc3339_micros(std::time::SystemTime::now()).to_string();
    a.restart();
    b.restart();
    a.await_ready(READY).await;
    b.await_ready(READY).await;
    let reads = state_reads(&a);
    assert_eq!(reads.len(), 2, "{reads:?}");
    let (epoch, events) = reads[1];
    assert!(
        epoch > first[0].0,
        "the new epoch outranks the old: {reads:?}"
    );
    assert!(events > 0, "the shard homes were read back: {reads:?}");

    let expected_file = producer.expected_file();
    let expected = producer.finished(Duration::from_secs(60)).await;
    await_all_handled(&[&a, &b], &expected).await;
    await_hosting(&a).await;
    await_hosting(&b).await;
    let problems = at_least_once_in_order_problems(&handled(&[&a, &b]), &expected);
    assert!(problems.is_empty(), "{problems:#?}");
    let mut lifecycle = Lifecycle::read(&[&a, &b], "user");
    lifecycle.killed(&a.grpc, &killed_at);
    lifecycle.killed(&b.grpc, &killed_at);
    let overlaps = lifecycle.overlaps();
    assert!(overlaps.is_empty(), "{overlaps:#?}");
    verify(&expected_file, &a.grpc).await.expect("totals exact");
}
