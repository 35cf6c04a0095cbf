//! Kafka helpers shared by the connector's tests and the broker tests: a
//! group's committed offsets, and waiting for the source's assignments and
//! records with a deadline.

use colo_connectors::{AssignedPartition, Record, SourceEvent, SourceSettings, TopicPartition};
use rdkafka::consumer::{BaseConsumer, Consumer};
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
        commit_interval: Duration::from_millis(100),
        rebalance_timeout: Duration::from_secs(20),
        commit_timeout: Duration::from_secs(5),
        stall_timeout: Duration::from_secs(10),
    }
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
