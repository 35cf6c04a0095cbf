//! The source against librdkafka's in-process mock cluster: the connector
//! alone, with the test playing the service. The mock cluster serves these
//! tests because they check the connector's own bookkeeping (acks, offsets,
//! the in-flight bound, rebalance events), not a broker's behaviour; the
//! broker tests run against a real Kafka-protocol broker.

use colo_connectors::{
    KafkaSource, PartitionState, SourceObserver, SourceSettings, TopicPartition,
};
use colo_tests::kafka::{
    assigned, assigned_closed, committed_offsets, handed_to_joiner, next_record, opened,
    source_settings,
};
use rdkafka::mocking::MockCluster;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::ClientConfig;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

const TOPIC: &str = "events";
const PARTITIONS: i32 = 3;
const PER_PARTITION: i64 = 20;

fn broker() -> MockCluster<'static, rdkafka::producer::DefaultProducerContext> {
    let cluster = MockCluster::new(1).expect("mock cluster");
    cluster
        .create_topic(TOPIC, PARTITIONS, 1)
        .expect("topic created");
    cluster
}

fn produce(bootstrap: &str) {
    let producer: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .create()
        .expect("producer");
    for partition in 0..PARTITIONS {
        for i in 0..PER_PARTITION {
            let key = format!("k{partition}");
            let payload = i.to_string();
            producer
                .send(
                    BaseRecord::to(TOPIC)
                        .key(&key)
                        .payload(&payload)
                        .partition(partition),
                )
                .expect("queued");
        }
    }
    producer.flush(Duration::from_secs(10)).expect("flushed");
}

fn settings(bootstrap: &str, group: &str, max_in_flight: usize) -> SourceSettings {
    SourceSettings {
        max_in_flight,
        ..source_settings(bootstrap, TOPIC, group)
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
async fn records_come_in_order_and_their_offsets_are_committed_once_acked() {
    let cluster = broker();
    let bootstrap = cluster.bootstrap_servers();
    produce(&bootstrap);
    let (source, mut events) =
        KafkaSource::start(settings(&bootstrap, "in-order", 1000)).expect("source");
    let mut partitions = assigned(&mut events).await;
    assert_eq!(
        partitions.len(),
        PARTITIONS as usize,
        "one node gets them all"
    );
    let mut held = None;
    for (tp, records) in &mut partitions {
        for expected in 0..PER_PARTITION {
            let record = next_record(records).await;
            assert_eq!(record.offset, expected, "{tp:?} in order");
            assert_eq!(
                record.payload.as_deref(),
                Some(expected.to_string().as_bytes())
            );
            // Partition 0's record 5 is not acked yet.
            if tp.partition == 0 && expected == 5 {
                held = Some(record.ack);
            } else {
                record.ack.handled();
            }
        }
    }
    eventually("offsets committed up to the unacked record", || {
        committed_offsets(&bootstrap, TOPIC, "in-order", PARTITIONS)
            == BTreeMap::from([(0, 5), (1, PER_PARTITION), (2, PER_PARTITION)])
    })
    .await;
    held.expect("held").handled();
    eventually("every offset committed", || {
        committed_offsets(&bootstrap, TOPIC, "in-order", PARTITIONS)
            .values()
            .all(|&o| o == PER_PARTITION)
    })
    .await;
    tokio::task::spawn_blocking(move || source.shutdown())
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_assigned_partition_is_consumed_only_once_its_gate_opens() {
    let cluster = broker();
    let bootstrap = cluster.bootstrap_servers();
    produce(&bootstrap);
    let (source, mut events) =
        KafkaSource::start(settings(&bootstrap, "gated", 1000)).expect("source");
    let mut closed = assigned_closed(&mut events).await;
    // The service has not hosted the shards yet: nothing comes.
    for partition in &mut closed {
        assert!(
            tokio::time::timeout(Duration::from_millis(300), partition.records.recv())
                .await
                .is_err(),
            "{:?}: a record before the gate opened",
            partition.partition
        );
    }
    let mut partitions = opened(closed);
    for (tp, records) in &mut partitions {
        assert_eq!(
            next_record(records).await.offset,
            0,
            "{tp:?} from the start"
        );
    }
    drop(events);
    tokio::task::spawn_blocking(move || source.shutdown())
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partition_at_its_in_flight_bound_waits_for_acks() {
    let cluster = broker();
    let bootstrap = cluster.bootstrap_servers();
    produce(&bootstrap);
    let (source, mut events) =
        KafkaSource::start(settings(&bootstrap, "bounded", 3)).expect("source");
    let mut partitions = assigned(&mut events).await;
    let records = partitions
        .get_mut(&TopicPartition {
            topic: TOPIC.into(),
            partition: 1,
        })
        .expect("partition 1");
    let mut in_hand = Vec::new();
    for _ in 0..3 {
        in_hand.push(next_record(records).await);
    }
    // Nothing more while three are in hand.
    assert!(
        tokio::time::timeout(Duration::from_millis(500), records.recv())
            .await
            .is_err(),
        "a fourth record while three are in flight"
    );
    // One ack lets one more through, in order.
    in_hand.remove(0).ack.handled();
    assert_eq!(next_record(records).await.offset, 3);
    drop(events);
    tokio::task::spawn_blocking(move || source.shutdown())
        .await
        .unwrap();
}

/// The revoke's own bookkeeping: the revoked partitions' streams end
/// first, the revoke waits for the service's commit and its hand-off, and
/// the partitions change owner after the offsets their records were
/// handled to. The mock cluster refuses commits while a join phase is
/// open (Kafka takes them from a member of the current generation), and
/// its SyncGroup answers open one again just as the revoke comes; so here
/// the periodic commit carries the handled offsets before the joiner
/// arrives, and the commit of records settled at the revoke itself is
/// checked against the broker (tests/tests/kafka_broker.rs).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revoke_waits_for_the_service_and_hands_off_at_the_handled_offsets() {
    let cluster = broker();
    let bootstrap = cluster.bootstrap_servers();
    produce(&bootstrap);
    let (first, mut first_events) =
        KafkaSource::start(settings(&bootstrap, "revoke", 1000)).expect("first source");
    let mut partitions = assigned(&mut first_events).await;
    // Everything handled on the first node, and committed.
    for records in partitions.values_mut() {
        for _ in 0..PER_PARTITION {
            next_record(records).await.ack.handled();
        }
    }
    let all_handled = |offsets: &BTreeMap<i32, i64>| {
        offsets.len() == PARTITIONS as usize && offsets.values().all(|&o| o == PER_PARTITION)
    };
    eventually("every handled offset committed", || {
        all_handled(&committed_offsets(&bootstrap, TOPIC, "revoke", PARTITIONS))
    })
    .await;
    // A second node joins: the first gives some partitions up.
    let (second, mut second_events) =
        KafkaSource::start(settings(&bootstrap, "revoke", 1000)).expect("second source");
    let (revoked, taken) =
        handed_to_joiner(&mut first_events, &mut partitions, &mut second_events).await;
    assert!(!revoked.is_empty());
    // The partitions changed owner at the offsets they were handled to.
    assert!(all_handled(&committed_offsets(
        &bootstrap, TOPIC, "revoke", PARTITIONS
    )));
    drop((first_events, second_events, taken));
    tokio::task::spawn_blocking(move || {
        second.shutdown();
        first.shutdown();
    })
    .await
    .unwrap();
}

/// Each partition's last reported pause.
#[derive(Default)]
struct Pauses(Mutex<BTreeMap<i32, bool>>);

impl SourceObserver for Pauses {
    fn partition(&self, partition: &TopicPartition, state: PartitionState) {
        if let Ok(mut paused) = self.0.lock() {
            paused.insert(partition.partition, state.paused);
        }
    }
    fn partition_gone(&self, partition: &TopicPartition) {
        if let Ok(mut paused) = self.0.lock() {
            paused.remove(&partition.partition);
        }
    }
    fn committed(&self, _: Option<Duration>, _: bool) {}
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partition_paused_when_revoked_is_consumed_when_it_comes_back() {
    let cluster = broker();
    let bootstrap = cluster.bootstrap_servers();
    produce(&bootstrap);
    let pauses = Arc::new(Pauses::default());
    let (first, mut first_events) =
        KafkaSource::start_observed(settings(&bootstrap, "paused-back", 2), pauses.clone())
            .expect("first source");
    let mut partitions = assigned(&mut first_events).await;
    // Two records of each partition in hand, none acked: every partition is
    // at its bound, and paused.
    let mut in_hand = Vec::new();
    for records in partitions.values_mut() {
        in_hand.push(next_record(records).await);
        in_hand.push(next_record(records).await);
    }
    eventually("every partition paused", || {
        let paused = pauses.0.lock().unwrap();
        paused.len() == PARTITIONS as usize && paused.values().all(|&p| p)
    })
    .await;
    // A second member takes some of them, then leaves: they come back.
    let (second, mut second_events) =
        KafkaSource::start(settings(&bootstrap, "paused-back", 1000)).expect("second source");
    let (revoked, taken) =
        handed_to_joiner(&mut first_events, &mut partitions, &mut second_events).await;
    drop((taken, second_events));
    tokio::task::spawn_blocking(move || second.shutdown())
        .await
        .unwrap();
    let mut back = assigned(&mut first_events).await;
    // Nothing was acked: each comes back from its first record, and flows.
    for tp in &revoked {
        let records = back.get_mut(tp).expect("the revoked partition came back");
        assert_eq!(next_record(records).await.offset, 0, "{tp:?}");
        assert_eq!(next_record(records).await.offset, 1, "{tp:?}");
    }
    drop((in_hand, first_events));
    tokio::task::spawn_blocking(move || first.shutdown())
        .await
        .unwrap();
}

/// Dropped on an async runtime's thread, a source does not wait there for
/// its consumer to close: the close's revoke waits for the service (up to
/// the rebalance timeout), and the service may run on that very runtime.
/// Here it does: the runtime has one thread, so a drop that waited would
/// sit out the whole 60 s rebalance timeout before the revoke below is
/// answered.
#[tokio::test(flavor = "current_thread")]
async fn a_source_dropped_on_the_runtime_does_not_wait_there_for_its_close() {
    let cluster = broker();
    let bootstrap = cluster.bootstrap_servers();
    let settings = SourceSettings {
        rebalance_timeout: Duration::from_secs(60),
        ..settings(&bootstrap, "dropped", 1000)
    };
    let (source, mut events) = KafkaSource::start(settings).expect("source");
    let _partitions = assigned(&mut events).await;
    let dropping = std::time::Instant::now();
    drop(source);
    let dropped_after = dropping.elapsed();
    // The close revokes the partitions, and waits for this answer.
    let event = tokio::time::timeout(Duration::from_secs(30), events.recv())
        .await
        .expect("the close's revoke comes");
    match event {
        Some(colo_connectors::SourceEvent::Revoked { mut revocation, .. }) => {
            revocation.commit().await;
            revocation.done();
        }
        other => panic!("expected the close's revoke, got {other:?}"),
    }
    assert!(
        dropped_after < Duration::from_secs(30),
        "the drop waited {dropped_after:?} on the runtime's thread"
    );
}
