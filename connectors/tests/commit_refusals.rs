//! Commits refused by the group coordinator, with the refusals injected by
//! librdkafka's in-process mock cluster: one of librdkafka's periodic
//! commits refused because the group rebalances is counted apart from a
//! failure, and the next commit carries its offsets; the source's own
//! commit at a revoke, refused so, is given up at once rather than tried
//! again until `commit_timeout`.

use colo_connectors::{KafkaSource, PartitionState, SourceEvent, SourceObserver, TopicPartition};
use colo_tests::kafka::{assigned, committed_offsets, next_record, source_settings};
use rdkafka::mocking::MockCluster;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::types::{RDKafkaApiKey, RDKafkaRespErr};
use rdkafka::ClientConfig;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

const TOPIC: &str = "refusals";
const RECORDS: i64 = 10;

/// librdkafka's commits (those without a latency), by outcome, and the
/// source's own attempts.
#[derive(Default)]
struct Commits {
    ok: AtomicUsize,
    failed: AtomicUsize,
    rebalancing: AtomicUsize,
    own_failed: AtomicUsize,
}

impl SourceObserver for Commits {
    fn partition(&self, _: &TopicPartition, _: PartitionState) {}
    fn partition_gone(&self, _: &TopicPartition) {}
    fn committed(&self, latency: Option<Duration>, ok: bool) {
        if latency.is_none() {
            let outcome = if ok { &self.ok } else { &self.failed };
            outcome.fetch_add(1, Ordering::Relaxed);
        } else if !ok {
            self.own_failed.fetch_add(1, Ordering::Relaxed);
        }
    }
    fn commit_refused_in_rebalance(&self) {
        self.rebalancing.fetch_add(1, Ordering::Relaxed);
    }
}

async fn eventually(what: &str, mut check: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while !check() {
        assert!(tokio::time::Instant::now() < deadline, "timed out: {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A mock cluster with `TOPIC` holding `RECORDS` records; its bootstrap
/// servers.
fn cluster_with_records() -> (
    MockCluster<'static, rdkafka::producer::DefaultProducerContext>,
    String,
) {
    let cluster = MockCluster::new(1).expect("mock cluster");
    cluster.create_topic(TOPIC, 1, 1).expect("topic created");
    let bootstrap = cluster.bootstrap_servers();
    let producer: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", &bootstrap)
        .create()
        .expect("producer");
    for i in 0..RECORDS {
        let payload = i.to_string();
        producer
            .send(BaseRecord::to(TOPIC).key("k").payload(&payload))
            .expect("queued");
    }
    producer.flush(Duration::from_secs(10)).expect("flushed");
    (cluster, bootstrap)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commit_refused_during_a_rebalance_is_counted_apart_and_the_next_carries_its_offsets() {
    let (cluster, bootstrap) = cluster_with_records();
    let commits = Arc::new(Commits::default());
    let (source, mut events) = KafkaSource::start_observed(
        source_settings(&bootstrap, TOPIC, "refusals"),
        commits.clone(),
    )
    .expect("source");
    let mut partitions = assigned(&mut events).await;
    let records = partitions.values_mut().next().expect("the partition");
    let mut in_hand = Vec::new();
    for _ in 0..RECORDS {
        in_hand.push(next_record(records).await);
    }
    // Nothing was handled, so nothing was committed yet: the next two
    // commits are the ones refused.
    cluster.request_errors(
        RDKafkaApiKey::OffsetCommit,
        &[
            RDKafkaRespErr::RD_KAFKA_RESP_ERR_REBALANCE_IN_PROGRESS,
            RDKafkaRespErr::RD_KAFKA_RESP_ERR_OFFSET_METADATA_TOO_LARGE,
        ],
    );
    for record in in_hand {
        record.ack.handled();
    }
    // The commit that went through is reported after the two before it.
    eventually("the offsets committed past both refusals", || {
        commits.ok.load(Ordering::Relaxed) >= 1
            && committed_offsets(&bootstrap, TOPIC, "refusals", 1) == BTreeMap::from([(0, RECORDS)])
    })
    .await;
    assert_eq!(
        commits.rebalancing.load(Ordering::Relaxed),
        1,
        "refused in a rebalance"
    );
    assert_eq!(
        commits.failed.load(Ordering::Relaxed),
        1,
        "failed otherwise"
    );
    // The service's part in the shutdown's revoke, with nothing in flight.
    let answers = tokio::spawn(async move {
        while let Some(event) = events.recv().await {
            if let SourceEvent::Revoked { mut revocation, .. } = event {
                revocation.commit().await;
                revocation.done();
            }
        }
    });
    tokio::task::spawn_blocking(move || source.shutdown())
        .await
        .expect("source shut down");
    answers.await.expect("revokes answered");
}

/// The revoke's commit refused because the group is in another round
/// cannot go through before the member joins that round, which it does
/// only once the revoke returns: the source gives it up after one attempt
/// and says so, rather than holding the rebalance for `commit_timeout`
/// (with the mock cluster, which refuses commits while a round gathers its
/// members, that got the member put out of the group). Before, it tried
/// again every 200 ms until `commit_timeout`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revokes_commit_refused_because_the_group_is_in_another_round_is_given_up_at_once() {
    let (cluster, bootstrap) = cluster_with_records();
    let commits = Arc::new(Commits::default());
    let mut settings = source_settings(&bootstrap, TOPIC, "refusals-at-revoke");
    // Only the revoke's commit: none on librdkafka's timer.
    settings.commit_interval = Duration::from_secs(600);
    settings.commit_timeout = Duration::from_secs(20);
    let (source, mut events) =
        KafkaSource::start_observed(settings, commits.clone()).expect("source");
    let mut partitions = assigned(&mut events).await;
    let records = partitions.values_mut().next().expect("the partition");
    for _ in 0..RECORDS {
        next_record(records).await.ack.handled();
    }
    // More refusals than the retries `commit_timeout` would allow.
    cluster.request_errors(
        RDKafkaApiKey::OffsetCommit,
        &[RDKafkaRespErr::RD_KAFKA_RESP_ERR_REBALANCE_IN_PROGRESS; 200],
    );
    let answers = tokio::spawn(async move {
        let mut outcomes = Vec::new();
        while let Some(event) = events.recv().await {
            if let SourceEvent::Revoked { mut revocation, .. } = event {
                outcomes.push(revocation.commit().await);
                revocation.done();
            }
        }
        outcomes
    });
    tokio::task::spawn_blocking(move || source.shutdown())
        .await
        .expect("source shut down");
    let outcomes = answers.await.expect("revokes answered");
    assert_eq!(outcomes, vec![false], "the revoke's commit was refused");
    // One attempt for the revoke's commit and one for the shutdown's,
    // none again until `commit_timeout` (about a hundred before).
    assert_eq!(
        commits.own_failed.load(Ordering::Relaxed),
        2,
        "each commit tried once"
    );
}
