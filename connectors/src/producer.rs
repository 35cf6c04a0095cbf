//! Records sent to a topic, each to its key's partition as colo's shards
//! count it: Kafka's murmur2 of the key. librdkafka's default partitioner
//! (`consistent_random`, a CRC32 of the key) would put most keys in another
//! partition than their entity's shard. Paced to a rate if asked; done only
//! once the broker acknowledged every record.

use crate::client::{client_config, consumer_only};
use rdkafka::producer::{BaseProducer, BaseRecord, DeliveryResult, Producer, ProducerContext};
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::ClientContext;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// The partitioner colo's shards follow: Kafka's Java client's murmur2 on
/// the key (librdkafka's `murmur2_random` differs from `murmur2` only for
/// records without a key, which are not sent here).
pub const PARTITIONER: &str = "murmur2_random";

/// Partitioners that put every keyed record in its key's murmur2
/// partition.
const MURMUR2: [&str; 2] = ["murmur2_random", "murmur2"];

/// librdkafka's bound on a record's delivery, unless the client
/// properties set `message.timeout.ms` (or its alias).
const DEFAULT_MESSAGE_TIMEOUT: Duration = Duration::from_secs(300);

/// Beyond the delivery bound, for librdkafka to report the last records.
const FLUSH_MARGIN: Duration = Duration::from_secs(5);

/// Where to send and how fast.
#[derive(Debug, Clone)]
pub struct ProducerSettings {
    pub bootstrap_servers: String,
    pub topic: String,
    /// librdkafka properties passed through (consumer-only ones left out);
    /// `partitioner` may only name a murmur2 partitioner.
    pub client: Vec<(String, String)>,
    /// Records per second at most; `None`: as fast as the broker takes them.
    pub rate: Option<u64>,
    /// Which partition each record goes to.
    pub partitioning: Partitioning,
}

/// Which partition a keyed record goes to.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Partitioning {
    /// Its key's murmur2 partition: its shard's.
    #[default]
    Shards,
    /// Where librdkafka's default partitioner, `consistent_random` (a
    /// CRC32 of the key), puts it, as most Kafka clients other than Java's
    /// do: most keys land in another partition than their shard's, and
    /// their records are forwarded to it. Chosen in code only, to show or
    /// measure what such producers cost.
    LibrdkafkaDefault,
}

/// Why records were not all sent.
#[derive(Debug, thiserror::Error)]
pub enum ProduceError {
    #[error("kafka producer: {0}")]
    Kafka(#[from] rdkafka::error::KafkaError),
    /// `partitioner` names another partitioner than murmur2's.
    #[error("partitioner={0}: colo's shards are Kafka's murmur2 partitions of the key, so records must be sent with partitioner={PARTITIONER} (or murmur2)")]
    Partitioner(String),
    /// Some records were not acknowledged by the broker: what the entities
    /// see would not be what was sent.
    #[error(
        "{failed} of {sent} records were not acknowledged by the broker (first error: {first})"
    )]
    Undelivered {
        failed: u64,
        sent: u64,
        first: String,
    },
    #[error("records still unacknowledged after {0:?}")]
    Flush(Duration),
}

/// Refuses a `partitioner` property that is not murmur2's: records would
/// land in other partitions than their shards and be handled only after a
/// hop between nodes (counted and warned about as a partitioner mismatch).
///
/// # Errors
/// [`ProduceError::Partitioner`] naming the property's value.
pub fn check_partitioner(client: &[(String, String)]) -> Result<(), ProduceError> {
    match client.iter().find(|(key, _)| key == "partitioner") {
        Some((_, value)) if !MURMUR2.contains(&value.as_str()) => {
            Err(ProduceError::Partitioner(value.clone()))
        }
        _ => Ok(()),
    }
}

/// A producer of keyed records. Blocking: use it off the async runtime's
/// threads.
pub struct KeyedProducer {
    producer: BaseProducer<Deliveries>,
    topic: String,
    rate: Option<u64>,
    started: Instant,
    sent: u64,
    /// How long the last records may take to be acknowledged: as long as
    /// librdkafka tries to deliver them (a broker restarting under load
    /// took more than 30 s, a bound this had before), then each is
    /// delivered or reported failed.
    flush_within: Duration,
}

impl std::fmt::Debug for KeyedProducer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeyedProducer")
            .field("topic", &self.topic)
            .field("rate", &self.rate)
            .field("sent", &self.sent)
            .finish_non_exhaustive()
    }
}

impl KeyedProducer {
    /// # Errors
    /// A partitioner other than murmur2's, or a configuration librdkafka
    /// refuses.
    pub fn new(settings: &ProducerSettings) -> Result<Self, ProduceError> {
        check_partitioner(&settings.client)?;
        let mut config = client_config(
            settings
                .client
                .iter()
                .filter(|(key, _)| !consumer_only(key)),
        );
        // What the client properties do not say. Idempotence: a batch
        // whose answer was lost (its partition's leader died after writing
        // it, or answered after socket.timeout.ms) is sent again, and
        // without a producer id and sequence numbers the broker writes it
        // twice, so a record would count twice downstream while the
        // totals this producer reports count it once.
        for (key, value) in [
            ("bootstrap.servers", settings.bootstrap_servers.as_str()),
            ("partitioner", PARTITIONER),
            ("linger.ms", "5"),
            ("enable.idempotence", "true"),
        ] {
            if config.get(key).is_none() {
                config.set(key, value);
            }
        }
        if settings.partitioning == Partitioning::LibrdkafkaDefault {
            config.set("partitioner", "consistent_random");
        }
        let flush_within = ["message.timeout.ms", "delivery.timeout.ms"]
            .iter()
            .find_map(|key| config.get(key)?.parse::<u64>().ok())
            .map_or(DEFAULT_MESSAGE_TIMEOUT, Duration::from_millis)
            + FLUSH_MARGIN;
        Ok(Self {
            flush_within,
            producer: config.create_with_context(Deliveries::default())?,
            topic: settings.topic.clone(),
            rate: settings.rate.filter(|r| *r > 0),
            started: Instant::now(),
            sent: 0,
        })
    }

    /// Records sent so far.
    pub fn sent(&self) -> u64 {
        self.sent
    }

    /// When the producer was made.
    pub fn started(&self) -> Instant {
        self.started
    }

    /// Serves the producer's callbacks until the next record is due at the
    /// rate (at once without one), or for `at_most`: true once it is due.
    /// A caller that must notice a stop in time waits in short steps.
    pub fn wait_turn(&self, at_most: Duration) -> bool {
        let Some(rate) = self.rate else {
            return true;
        };
        // Paced: the n-th record goes no earlier than n / rate.
        let due = self.started + Duration::from_secs_f64(self.sent as f64 / rate as f64);
        match due.checked_duration_since(Instant::now()) {
            None => true,
            Some(wait) => {
                self.producer.poll(wait.min(at_most));
                wait <= at_most
            }
        }
    }

    /// Sends one record to its key's partition, waiting while librdkafka's
    /// queue is full.
    ///
    /// # Errors
    /// librdkafka refuses the record.
    pub fn send(&mut self, key: &[u8], payload: &[u8]) -> Result<(), ProduceError> {
        let mut record = BaseRecord::to(&self.topic).key(key).payload(payload);
        loop {
            match self.producer.send(record) {
                Ok(()) => break,
                Err((e, back)) if e.rdkafka_error_code() == Some(RDKafkaErrorCode::QueueFull) => {
                    record = back;
                    self.producer.poll(Duration::from_millis(50));
                }
                Err((e, _)) => return Err(e.into()),
            }
        }
        self.sent += 1;
        self.producer.poll(Duration::ZERO);
        Ok(())
    }

    /// Waits until the broker acknowledged every record sent so far, or
    /// refused it (which [`KeyedProducer::finish`] reports).
    ///
    /// # Errors
    /// Records still unacknowledged once librdkafka's delivery bound
    /// (`message.timeout.ms`, 300 s by default) has passed.
    pub fn flush(&self) -> Result<(), ProduceError> {
        self.producer
            .flush(self.flush_within)
            .map_err(|_| ProduceError::Flush(self.flush_within))
    }

    /// Waits until the broker acknowledged every record sent: their count.
    ///
    /// # Errors
    /// Records unacknowledged past the delivery bound, or refused by the
    /// broker.
    pub fn finish(self) -> Result<u64, ProduceError> {
        self.flush()?;
        let deliveries = self.producer.context();
        let failed = deliveries.failed.load(Ordering::Relaxed);
        if failed > 0 {
            return Err(ProduceError::Undelivered {
                failed,
                sent: self.sent,
                first: deliveries.first_error.lock().clone().unwrap_or_default(),
            });
        }
        Ok(self.sent)
    }
}

/// Counts deliveries the broker refused.
#[derive(Default)]
struct Deliveries {
    failed: AtomicU64,
    first_error: parking_lot::Mutex<Option<String>>,
}

impl ClientContext for Deliveries {}

impl ProducerContext for Deliveries {
    type DeliveryOpaque = ();

    fn delivery(&self, result: &DeliveryResult<'_>, _: ()) {
        if let Err((e, _)) = result {
            self.failed.fetch_add(1, Ordering::Relaxed);
            self.first_error.lock().get_or_insert_with(|| e.to_string());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A broker restarting under load took more than 30 s to take records
    /// again, and the last records' wait, bounded at 30 s, failed a
    /// produce that librdkafka would still have delivered: the wait lasts
    /// as long as librdkafka tries.
    #[test]
    fn the_last_records_are_awaited_as_long_as_librdkafka_tries_to_deliver_them() {
        let settings = |client: &[(&str, &str)]| ProducerSettings {
            bootstrap_servers: "127.0.0.1:9".to_string(),
            topic: "t".to_string(),
            client: client
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            rate: None,
            partitioning: Partitioning::Shards,
        };
        let within = |client: &[(&str, &str)]| {
            KeyedProducer::new(&settings(client))
                .expect("producer")
                .flush_within
        };
        assert_eq!(within(&[]), Duration::from_secs(305));
        assert_eq!(
            within(&[("message.timeout.ms", "20000")]),
            Duration::from_secs(25)
        );
        assert_eq!(
            within(&[("delivery.timeout.ms", "1000")]),
            Duration::from_secs(6)
        );
    }

    #[test]
    fn a_producer_refuses_a_partitioner_other_than_murmur2s() {
        let client = |value: &str| vec![("partitioner".to_string(), value.to_string())];
        assert!(check_partitioner(&[]).is_ok());
        assert!(check_partitioner(&client("murmur2_random")).is_ok());
        assert!(check_partitioner(&client("murmur2")).is_ok());
        let err = check_partitioner(&client("consistent_random")).unwrap_err();
        assert!(
            err.to_string().starts_with(
                "partitioner=consistent_random: colo's shards are Kafka's murmur2 partitions"
            ),
            "{err}"
        );
    }
}
