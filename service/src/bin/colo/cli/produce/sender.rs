//! Sending records of one's own to Kafka with Kafka's murmur2 partitioner,
//! the partitioner colo's shards follow: librdkafka's default
//! (`consistent_random`, a CRC32 of the key) would put most keys in
//! another partition than their entity's shard.

use super::own_records::OwnRecord;
use colo_connectors::{KeyedProducer, ProduceError, ProducerSettings};
use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Where and how fast to send.
#[derive(Debug, Clone)]
pub struct SendSettings {
    pub bootstrap_servers: String,
    pub topic: String,
    /// librdkafka properties passed through.
    pub client: Vec<(String, String)>,
    /// Records per second at most; `None`: as fast as the broker takes them.
    pub rate: Option<u64>,
    /// Stop after this long, if the records last that long.
    pub duration: Option<Duration>,
}

/// What was sent.
#[derive(Debug, Clone)]
pub struct Sent {
    pub records: u64,
    pub keys: usize,
    pub elapsed: Duration,
}

/// Refuses a `partitioner` property other than murmur2's: records would
/// land in other partitions than their shards, and be handled only after a
/// hop between nodes (counted and warned about as a partitioner mismatch).
///
/// # Errors
/// The property names another partitioner.
pub fn check_partitioner(client: &[(String, String)]) -> Result<(), String> {
    colo_connectors::check_partitioner(client).map_err(|e| format!("--client {e}"))
}

/// Sends `records` in order until they end or the duration is over,
/// counting them in `sent_so_far`, and waits until the broker has
/// acknowledged every one. Blocks: call it off the async runtime's threads.
///
/// The partitioner is checked once, by the command before it reads any
/// record ([`check_partitioner`]), and again by the producer itself.
///
/// # Errors
/// A record cannot be made (the iterator's error), the producer cannot be
/// created, or the broker did not acknowledge every record.
pub fn send(
    settings: &SendSettings,
    records: impl Iterator<Item = Result<OwnRecord, String>>,
    sent_so_far: &AtomicU64,
) -> Result<Sent, SendError> {
    let mut producer = KeyedProducer::new(&ProducerSettings {
        bootstrap_servers: settings.bootstrap_servers.clone(),
        topic: settings.topic.clone(),
        client: settings.client.clone(),
        rate: settings.rate,
        partitioning: colo_connectors::Partitioning::Shards,
    })?;
    let mut keys = BTreeSet::new();
    for record in records {
        if settings
            .duration
            .is_some_and(|d| producer.started().elapsed() >= d)
        {
            break;
        }
        let record = record.map_err(SendError::Input)?;
        while !producer.wait_turn(Duration::MAX) {}
        producer.send(record.key.as_bytes(), record.value.as_bytes())?;
        keys.insert(record.key);
        sent_so_far.store(producer.sent(), Ordering::Relaxed);
    }
    let started = producer.started();
    let records = producer.finish()?;
    Ok(Sent {
        records,
        keys: keys.len(),
        elapsed: started.elapsed(),
    })
}

/// Why sending stopped short.
#[derive(Debug, thiserror::Error)]
pub enum SendError {
    /// What to send is not usable (a record, the template, a property);
    /// nothing after the first unusable record was sent.
    #[error("{0}")]
    Input(String),
    #[error(transparent)]
    Kafka(#[from] ProduceError),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_murmur2_partitioners_are_accepted() {
        let client = |value: &str| vec![("partitioner".to_string(), value.to_string())];
        assert_eq!(check_partitioner(&[]), Ok(()));
        assert_eq!(check_partitioner(&client("murmur2_random")), Ok(()));
        assert_eq!(check_partitioner(&client("murmur2")), Ok(()));
        let err = check_partitioner(&client("consistent_random")).unwrap_err();
        assert!(
            err.starts_with("--client partitioner=consistent_random: colo's shards are Kafka's murmur2 partitions"),
            "{err}"
        );
    }
}
