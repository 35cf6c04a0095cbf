//! Sending records of one's own to Kafka with Kafka's murmur2 partitioner,
//! the partitioner colo's shards follow: librdkafka's default
//! (`consistent_random`, a CRC32 of the key) would put most keys in
//! another partition than their entity's shard.

use super::own_records::OwnRecord;
use crate::purchases::{acknowledged, Deliveries, ProduceError};
use rdkafka::config::ClientConfig;
use rdkafka::producer::{BaseProducer, BaseRecord};
use rdkafka::types::RDKafkaErrorCode;
use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// The partitioner colo's shards follow: Kafka's Java client's murmur2 on
/// the key (librdkafka's `murmur2_random` differs from `murmur2` only for
/// records without a key, which colo does not send).
pub const PARTITIONER: &str = "murmur2_random";

/// Partitioners that put every keyed record in its key's murmur2
/// partition.
const MURMUR2: [&str; 2] = ["murmur2_random", "murmur2"];

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
    match client.iter().find(|(key, _)| key == "partitioner") {
        Some((_, value)) if !MURMUR2.contains(&value.as_str()) => Err(format!(
            "--client partitioner={value}: colo's shards are Kafka's murmur2 partitions of the key, so records must be sent with partitioner={PARTITIONER} (or murmur2)"
        )),
        _ => Ok(()),
    }
}

/// Sends `records` in order until they end or the duration is over,
/// counting them in `sent_so_far`, and waits until the broker has
/// acknowledged every one. Blocks: call it off the async runtime's threads.
///
/// # Errors
/// A record cannot be made (the iterator's error), the producer cannot be
/// created, or the broker did not acknowledge every record.
pub fn send(
    settings: &SendSettings,
    records: impl Iterator<Item = Result<OwnRecord, String>>,
    sent_so_far: &AtomicU64,
) -> Result<Sent, SendError> {
    check_partitioner(&settings.client).map_err(SendError::Input)?;
    let mut config = ClientConfig::new();
    config
        .set("bootstrap.servers", &settings.bootstrap_servers)
        .set("partitioner", PARTITIONER)
        .set("linger.ms", "5");
    for (key, value) in &settings.client {
        config.set(key, value);
    }
    let producer: BaseProducer<Deliveries> = config
        .create_with_context(Deliveries::default())
        .map_err(ProduceError::from)?;
    let started = Instant::now();
    let mut keys = BTreeSet::new();
    let mut sent: u64 = 0;
    for record in records {
        if settings.duration.is_some_and(|d| started.elapsed() >= d) {
            break;
        }
        let record = record.map_err(SendError::Input)?;
        if let Some(rate) = settings.rate.filter(|r| *r > 0) {
            // Paced: the n-th record goes no earlier than n / rate.
            let due = started + Duration::from_secs_f64(sent as f64 / rate as f64);
            while let Some(wait) = due.checked_duration_since(Instant::now()) {
                producer.poll(wait);
            }
        }
        let mut kafka_record = BaseRecord::to(&settings.topic)
            .key(&record.key)
            .payload(&record.value);
        loop {
            match producer.send(kafka_record) {
                Ok(()) => break,
                Err((e, back)) if e.rdkafka_error_code() == Some(RDKafkaErrorCode::QueueFull) => {
                    kafka_record = back;
                    producer.poll(Duration::from_millis(50));
                }
                Err((e, _)) => return Err(ProduceError::from(e).into()),
            }
        }
        keys.insert(record.key);
        sent += 1;
        sent_so_far.store(sent, Ordering::Relaxed);
        producer.poll(Duration::ZERO);
    }
    acknowledged(&producer, sent)?;
    Ok(Sent {
        records: sent,
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
