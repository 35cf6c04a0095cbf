//! librdkafka's periodic commits refused by the group coordinator, with the
//! refusals injected by librdkafka's in-process mock cluster: one refused
//! because the group rebalances is counted apart from a failure, and the
//! next commit carries its offsets.

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

/// librdkafka's commits (those without a latency), by outcome.
#[derive(Default)]
struct Commits {
    ok: AtomicUsize,
    failed: AtomicUsize,
    rebalancing: AtomicUsize,
}

impl SourceObserver for Commits {
    fn partition(&self, _: &TopicPartition, _: PartitionState) {}
    fn partition_gone(&self, _: &TopicPartition) {}
    fn committed(&self, latency: Option<Duration>, ok: bool) {
        if latency.is_none() {
            let outcome = if ok { &self.ok } else { &self.failed };
            outcome.fetch_add(1, Ordering::Relaxed);
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commit_refused_during_a_rebalance_is_counted_apart_and_the_next_carries_its_offsets() {
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
