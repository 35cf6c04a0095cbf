//! A node that leaves while the broker refuses its commits: it gives the
//! commit up rather than waiting out `kafka.commit_timeout`, hands its
//! shards off and exits, and the next owner of its partitions gets the
//! records since the last commit again, whose effects its durable entities
//! skip: every total stays exact.
//!
//! The broker is librdkafka's in-process mock cluster, listening on
//! loopback in the test process: it refuses commits on cue, which Apache
//! Kafka does not.

use colo_tests::purchases::{verify, Producer};
use colo_tests::user_nodes::*;
use rdkafka::mocking::MockCluster;
use rdkafka::types::{RDKafkaApiKey, RDKafkaRespErr};
use std::time::Duration;

/// Far longer than the test waits for the leaving node to exit: a refusal
/// tried again until this bound would fail the test.
const COMMIT_TIMEOUT: &str = r#"kafka.commit_timeout="60s""#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_leaving_while_its_commits_are_refused_exits_promptly_and_totals_stay_exact() {
    let kafka = MockCluster::new(1).expect("mock cluster");
    let bootstrap = kafka.bootstrap_servers();
    let dir = tempfile::tempdir().expect("dir");
    let (topic, cluster) = unique("refused_commits");
    // Made here: the mock cluster answers no admin request to create one.
    for (made, partitions) in [
        (topic.clone(), 12),
        (format!("{cluster}.user.changelog"), 12),
        (format!("{cluster}.user.dlq"), 1),
        (format!("{cluster}.user.milestones"), 12),
        (format!("{cluster}.coordinator"), 1),
    ] {
        kafka.create_topic(&made, partitions, 1).expect("topic");
    }
    let mut sets = kafka_sets(&bootstrap, &topic, &cluster);
    sets.retain(|set| set != "kafka.create_topics=true");
    sets.push(COMMIT_TIMEOUT.to_string());
    let (a, mut b) = two_hosting_nodes(&sets).await;
    let producer = Producer::start(dir.path(), &bootstrap, &topic, 40, 3000, Some(300));
    until_handled(&[&a, &b], 900).await;

    // From here the group coordinator refuses every commit, as a group in
    // another round does, for longer than the rest of b's life: what b
    // handles from now on is never committed.
    kafka.request_errors(
        RDKafkaApiKey::OffsetCommit,
        &[RDKafkaRespErr::RD_KAFKA_RESP_ERR_REBALANCE_IN_PROGRESS; 2000],
    );
    let refused_from = handled_so_far(&[&a, &b]);
    until_handled(&[&a, &b], refused_from + 300).await;
    let skipped_before = metric(&a, "colo_state_skipped_records_total{").await;
    b.terminate();
    assert!(
        b.exited(Duration::from_secs(30)).await.success(),
        "{}",
        b.logs()
    );
    let logs = b.logs();
    assert!(
        logs.contains("offsets not committed at"),
        "b's commit at its leave was refused and given up:\n{logs}"
    );
    assert!(
        !logs.contains("within kafka.commit_timeout"),
        "b waited out the commit timeout:\n{logs}"
    );

    let expected_file = producer.expected_file();
    let expected = producer.finished(Duration::from_secs(90)).await;
    await_all_handled(&[&a, &b], &expected).await;
    verify(&expected_file, &a.grpc)
        .await
        .expect("totals exact after b left uncommitted");
    assert!(
        metric(&a, "colo_state_skipped_records_total{").await > skipped_before,
        "a got b's uncommitted records again and skipped their effects, already applied"
    );
}
