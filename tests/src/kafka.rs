//! Kafka helpers shared by the connector's tests and the broker tests: a
//! group's committed offsets, waiting for the source's assignments and
//! records with a deadline, a topic read back from its start, the
//! partition Kafka's Java client gives a key, a topic compacted as
//! colo's changelogs and coordinator topics are, and kcat's records.

use colo_connectors::{
    Ack, AssignedPartition, Record, SourceEvent, SourceSettings, TopicPartition,
};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::{ClientConfig, Offset, TopicPartitionList};
use std::collections::BTreeMap;
use std::time::Duration;
use tokio::sync::mpsc;

/// A source of `group` on `topic`, tuned for tests: heartbeats every 500 ms
/// (a rebalance that waits on a revoke callback completes one
/// heartbeat-driven round later), commits every 100 ms.
pub fn source_settings(bootstrap: &str, topic: &str, group: &str) -> SourceSettings {
    SourceSettings {
        bootstrap_servers: bootstrap.into(),
        group_id: group.into(),
        topics: vec![topic.into()],
        client: vec![
            ("session.timeout.ms".into(), "10000".into()),
            ("heartbeat.interval.ms".into(), "500".into()),
        ],
        max_in_flight: 1000,
        max_in_flight_total: 1_000_000,
        commit_interval: Duration::from_millis(100),
        rebalance_timeout: Duration::from_secs(20),
        commit_timeout: Duration::from_secs(5),
        stall_timeout: Duration::from_secs(10),
    }
}

/// Creates `name` with `partitions` partitions, one replica, compacted as
/// colo creates its changelogs and coordinator topics.
///
/// # Panics
/// The brokers at `bootstrap` do not create it within 30 s.
pub async fn create_compacted(bootstrap: &str, name: &str, partitions: i32) {
    let spec = colo_connectors::NewTopicSpec {
        name: name.to_string(),
        partitions,
        replication_factor: 1,
        config: colo_connectors::CHANGELOG_CONFIG
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
    };
    colo_connectors::create_missing_topics(bootstrap, &[], &[spec], Duration::from_secs(30))
        .await
        .unwrap_or_else(|e| panic!("topic {name} not created: {e}"));
}

/// Produces `seqs` (as text) for every key, partitioned as Kafka's Java
/// client does (murmur2), which colo's Kafka extractor reproduces.
pub fn produce(bootstrap: &str, topic: &str, keys: &[String], seqs: std::ops::Range<u64>) {
    let producer: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("partitioner", "murmur2_random")
        .create()
        .expect("producer");
    for seq in seqs {
        for key in keys {
            let payload = seq.to_string();
            producer
                .send(BaseRecord::to(topic).key(key).payload(&payload))
                .expect("queued");
        }
    }
    producer.flush(Duration::from_secs(10)).expect("flushed");
}

/// Each partition's assigned record stream.
pub type Assigned = BTreeMap<TopicPartition, mpsc::UnboundedReceiver<Record>>;

/// `group`'s committed offsets of `topic`'s first `partitions` partitions,
/// by partition (those with none are left out).
pub fn committed_offsets(
    bootstrap: &str,
    topic: &str,
    group: &str,
    partitions: i32,
) -> BTreeMap<i32, i64> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", group)
        .create()
        .expect("consumer");
    let mut list = TopicPartitionList::new();
    for p in 0..partitions {
        list.add_partition(topic, p);
    }
    consumer
        .committed_offsets(list, Duration::from_secs(10))
        .expect("committed offsets")
        .elements()
        .iter()
        .filter_map(|e| match e.offset() {
            Offset::Offset(o) => Some((e.partition(), o)),
            _ => None,
        })
        .collect()
}

/// Waits (up to 60 s) for the next assignment of some partitions and
/// opens their gates; a cooperative rebalance may first assign nothing new.
pub async fn assigned(events: &mut mpsc::UnboundedReceiver<SourceEvent>) -> Assigned {
    opened(assigned_closed(events).await)
}

/// [`assigned`], leaving the gates closed.
pub async fn assigned_closed(
    events: &mut mpsc::UnboundedReceiver<SourceEvent>,
) -> Vec<AssignedPartition> {
    loop {
        let event = tokio::time::timeout(Duration::from_secs(60), events.recv())
            .await
            .expect("an assignment in time")
            .expect("source running");
        if let SourceEvent::Assigned { partitions } = event {
            if !partitions.is_empty() {
                return partitions;
            }
        }
    }
}

/// Opens every partition's gate, as the service does once their shards are
/// hosted.
pub fn opened(partitions: Vec<AssignedPartition>) -> Assigned {
    partitions
        .into_iter()
        .map(|p| {
            p.gate.open();
            (p.partition, p.records)
        })
        .collect()
}

/// The partition's next record, within 30 s.
pub async fn next_record(records: &mut mpsc::UnboundedReceiver<Record>) -> Record {
    tokio::time::timeout(Duration::from_secs(30), records.recv())
        .await
        .expect("a record in time")
        .expect("partition still assigned")
}

/// Records the test holds unacked, by partition: settled (acked as
/// handled) when their partition is revoked, as the service settles what
/// it received before the revoke's commit.
pub type Held = BTreeMap<TopicPartition, Vec<Ack>>;

/// A second member joined: follows the rebalance rounds until it is
/// assigned partitions, completing the first member's revokes (whose
/// record streams must have ended by then) and the second's empty rounds.
/// Returns what the first gave up, perhaps over several rounds, and what
/// the second got, which must be part of it.
pub async fn handed_to_joiner(
    first_events: &mut mpsc::UnboundedReceiver<SourceEvent>,
    first_partitions: &mut Assigned,
    second_events: &mut mpsc::UnboundedReceiver<SourceEvent>,
) -> (Vec<TopicPartition>, Assigned) {
    handed_to_joiner_settling(
        first_events,
        first_partitions,
        &mut Held::new(),
        second_events,
    )
    .await
}

/// [`handed_to_joiner`], settling the `held` records of each revoked
/// partition before the revoke's commit.
pub async fn handed_to_joiner_settling(
    first_events: &mut mpsc::UnboundedReceiver<SourceEvent>,
    first_partitions: &mut Assigned,
    held: &mut Held,
    second_events: &mut mpsc::UnboundedReceiver<SourceEvent>,
) -> (Vec<TopicPartition>, Assigned) {
    let mut revoked = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    let taken = loop {
        tokio::select! {
            event = first_events.recv() => match event.expect("first source running") {
                SourceEvent::Revoked { partitions: gone, mut revocation } => {
                    for tp in &gone {
                        if let Some(records) = first_partitions.get_mut(tp) {
                            assert!(records.recv().await.is_none(), "{tp:?}: its stream ended before the revoke");
                        }
                        for ack in held.remove(tp).unwrap_or_default() {
                            ack.handled();
                        }
                    }
                    assert!(revocation.commit().await, "committed at the revoke");
                    revocation.done();
                    revoked.extend(gone);
                }
                SourceEvent::Assigned { partitions } => assert!(partitions.is_empty(), "the first member gets nothing more"),
                SourceEvent::Lost { .. } => panic!("nothing is lost"),
                SourceEvent::Failed { reason } => panic!("the first source failed: {reason}"),
            },
            event = second_events.recv() => match event.expect("second source running") {
                SourceEvent::Assigned { partitions } => {
                    if !partitions.is_empty() {
                        break opened(partitions);
                    }
                }
                other => panic!("{other:?} before an assignment"),
            },
            () = tokio::time::sleep_until(deadline) => panic!("the joining member got nothing within 60 s"),
        }
    };
    assert!(
        taken.keys().all(|tp| revoked.contains(tp)),
        "the joining member gets only what the first gave up: {:?} of {revoked:?}",
        taken.keys().collect::<Vec<_>>()
    );
    (revoked, taken)
}

/// A record read back from a topic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadBack {
    pub partition: i32,
    pub key: String,
    pub payload: String,
}

/// The first `count` records of `topic`'s `partitions` partitions, read
/// from their start, in each partition's order; panics if they are not
/// all there within 30 s.
pub fn read_back(bootstrap: &str, topic: &str, partitions: i32, count: usize) -> Vec<ReadBack> {
    use rdkafka::Message as _;
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", format!("read-back-{topic}"))
        .set("enable.auto.commit", "false")
        .create()
        .expect("consumer");
    let mut list = TopicPartitionList::new();
    for p in 0..partitions {
        list.add_partition_offset(topic, p, Offset::Beginning)
            .expect("partition offset");
    }
    consumer.assign(&list).expect("assign");
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let mut records = Vec::new();
    while records.len() < count {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        assert!(
            !left.is_zero(),
            "{} of {count} records of {topic} read back within 30 s: {records:?}",
            records.len()
        );
        let Some(message) = consumer.poll(left.min(Duration::from_millis(500))) else {
            continue;
        };
        let message = message.expect("a record");
        let text =
            |bytes: Option<&[u8]>| String::from_utf8_lossy(bytes.unwrap_or_default()).into_owned();
        records.push(ReadBack {
            partition: message.partition(),
            key: text(message.key()),
            payload: text(message.payload()),
        });
    }
    records
}

/// The partition Kafka's Java client (its default partitioner, murmur2)
/// gives `key` among `partitions`: the test's own oracle, checked against
/// the Java client's partitions of known keys where it is used.
pub fn java_partition(key: &str, partitions: u32) -> i32 {
    const SEED: u32 = 0x9747_b28c;
    const M: u32 = 0x5bd1_e995;
    let data = key.as_bytes();
    let mut h = SEED ^ data.len() as u32;
    let mut chunks = data.chunks_exact(4);
    for chunk in &mut chunks {
        let mut k = u32::from_le_bytes([chunk[0], chunk[1], chunk[2], chunk[3]]);
        k = k.wrapping_mul(M);
        k ^= k >> 24;
        k = k.wrapping_mul(M);
        h = h.wrapping_mul(M);
        h ^= k;
    }
    let rest = chunks.remainder();
    if rest.len() == 3 {
        h ^= u32::from(rest[2]) << 16;
    }
    if rest.len() >= 2 {
        h ^= u32::from(rest[1]) << 8;
    }
    if !rest.is_empty() {
        h ^= u32::from(rest[0]);
        h = h.wrapping_mul(M);
    }
    h ^= h >> 13;
    h = h.wrapping_mul(M);
    h ^= h >> 15;
    ((h & 0x7fff_ffff) % partitions) as i32
}

/// A record of a dead-letter topic, as colo wrote it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeadLetter {
    pub key: String,
    pub reason: String,
    pub source_topic: String,
    pub source_partition: Option<i32>,
    pub source_offset: Option<i64>,
}

/// Reads the dead-letter topic `dlq` from its start, in consumer group
/// `group`, until `enough` says the letters read suffice or a minute has
/// passed; what was read.
pub fn dead_letters(
    bootstrap: &str,
    dlq: &str,
    group: &str,
    enough: impl Fn(&[DeadLetter]) -> bool,
) -> Vec<DeadLetter> {
    use rdkafka::message::{Headers, Message};
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", group)
        .set("auto.offset.reset", "earliest")
        .create()
        .expect("consumer");
    consumer.subscribe(&[dlq]).expect("subscribe");
    let mut letters = Vec::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while !enough(&letters) && std::time::Instant::now() < deadline {
        let Some(Ok(message)) = consumer.poll(Duration::from_millis(500)) else {
            continue;
        };
        let header = |name: &str| {
            message
                .headers()
                .and_then(|h| h.iter().find(|h| h.key == name))
                .and_then(|h| h.value)
                .map(|v| String::from_utf8_lossy(v).into_owned())
                .unwrap_or_default()
        };
        letters.push(DeadLetter {
            key: message
                .key()
                .map(|k| String::from_utf8_lossy(k).into_owned())
                .unwrap_or_default(),
            reason: header(colo_connectors::REASON_HEADER),
            source_topic: header(colo_connectors::SOURCE_TOPIC_HEADER),
            source_partition: header(colo_connectors::SOURCE_PARTITION_HEADER)
                .parse()
                .ok(),
            source_offset: header(colo_connectors::SOURCE_OFFSET_HEADER).parse().ok(),
        });
    }
    letters
}

/// How many distinct source records (partition and offset) the
/// dead-letter topic `dlq` holds, read until `expected` of them are there
/// or a minute has passed: a record dead-lettered just before its node
/// was killed, its offset not committed, is dead-lettered again, with
/// the same source headers (README, "Kafka").
pub fn distinct_dead_letters(bootstrap: &str, dlq: &str, group: &str, expected: usize) -> usize {
    let distinct = |letters: &[DeadLetter]| {
        letters
            .iter()
            .map(|l| (l.source_partition, l.source_offset))
            .collect::<std::collections::BTreeSet<_>>()
            .len()
    };
    distinct(&dead_letters(bootstrap, dlq, group, |l| {
        distinct(l) >= expected
    }))
}

/// Sends the records of `file` (`key<TAB>value` lines) to `topic` with
/// kcat and nothing but its defaults: librdkafka's `consistent_random`
/// partitioner, not murmur2.
///
/// # Panics
/// kcat is missing or fails.
pub fn kcat_produce(bootstrap: &str, topic: &str, file: &std::path::Path) {
    let kcat = std::process::Command::new("kcat")
        .args(["-P", "-b", bootstrap, "-t", topic, "-K", "\t", "-l"])
        .arg(file)
        .output()
        .expect("run kcat (./scripts/test.sh installs Debian's kcat)");
    assert!(
        kcat.status.success(),
        "kcat failed: {}",
        String::from_utf8_lossy(&kcat.stderr)
    );
}
