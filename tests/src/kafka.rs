//! Kafka helpers shared by the connector's tests and the broker tests: a
//! group's committed offsets, and waiting for the source's assignments and
//! records with a deadline.

use colo_connectors::{Record, SourceEvent, TopicPartition};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::{ClientConfig, Offset, TopicPartitionList};
use std::collections::BTreeMap;
use std::time::Duration;
use tokio::sync::mpsc;

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
/// completes it; a cooperative rebalance may first assign nothing new.
pub async fn assigned(events: &mut mpsc::UnboundedReceiver<SourceEvent>) -> Assigned {
    loop {
        let event = tokio::time::timeout(Duration::from_secs(60), events.recv())
            .await
            .expect("an assignment in time")
            .expect("source running");
        if let SourceEvent::Assigned { partitions, done } = event {
            done.done();
            if !partitions.is_empty() {
                return partitions
                    .into_iter()
                    .map(|p| (p.partition, p.records))
                    .collect();
            }
        }
    }
}

/// The partition's next record, within 30 s.
pub async fn next_record(records: &mut mpsc::UnboundedReceiver<Record>) -> Record {
    tokio::time::timeout(Duration::from_secs(30), records.recv())
        .await
        .expect("a record in time")
        .expect("partition still assigned")
}
