//! Sending purchase events to Kafka: keyed by user id and partitioned with
//! Kafka's own murmur2 partitioner, so a user's events land in the user's
//! shard; paced to a rate; stopped by a count, a duration or a flag.

use super::generate::{Generator, Totals};
use super::records::encode_event;
use rdkafka::config::ClientConfig;
use rdkafka::producer::{BaseProducer, BaseRecord, DeliveryResult, Producer, ProducerContext};
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::ClientContext;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// What to send.
#[derive(Debug, Clone)]
pub struct ProduceSettings {
    pub bootstrap_servers: String,
    pub topic: String,
    /// librdkafka properties passed through.
    pub client: Vec<(String, String)>,
    /// Users the events are spread over.
    pub users: usize,
    /// User ids are `<user_prefix><n>`.
    pub user_prefix: String,
    /// Records per second at most; `None`: as fast as the broker takes them.
    pub rate: Option<u64>,
    /// Stop after this many records.
    pub count: Option<u64>,
    /// Stop after this long.
    pub duration: Option<Duration>,
    /// The same seed sends the same events.
    pub seed: u64,
}

/// What was sent.
#[derive(Debug, Clone)]
pub struct Produced {
    /// The events sent and the totals they add up to.
    pub totals: Totals,
    pub elapsed: Duration,
}

/// Why producing stopped short.
#[derive(Debug, thiserror::Error)]
pub enum ProduceError {
    #[error("kafka producer: {0}")]
    Kafka(#[from] rdkafka::error::KafkaError),
    /// Some records were not acknowledged by the broker: the totals would
    /// not be what the entities see.
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

/// Counts deliveries the broker refused: the context of every producer of
/// the `colo` command (the sample's and `colo produce`'s).
#[derive(Default)]
pub(crate) struct Deliveries {
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

/// How long the last records may take to be acknowledged.
const FLUSH_TIMEOUT: Duration = Duration::from_secs(30);

/// Waits until the broker acknowledged the `sent` records.
///
/// # Errors
/// Records unacknowledged after [`FLUSH_TIMEOUT`], or refused.
pub(crate) fn acknowledged(
    producer: &BaseProducer<Deliveries>,
    sent: u64,
) -> Result<(), ProduceError> {
    producer
        .flush(FLUSH_TIMEOUT)
        .map_err(|_| ProduceError::Flush(FLUSH_TIMEOUT))?;
    let deliveries = producer.context();
    let failed = deliveries.failed.load(Ordering::Relaxed);
    if failed > 0 {
        return Err(ProduceError::Undelivered {
            failed,
            sent,
            first: deliveries.first_error.lock().clone().unwrap_or_default(),
        });
    }
    Ok(())
}

/// Sends events until the count, the duration or `stop` says so, calling
/// `progress` with the number sent now and then. Blocks: call it off the
/// async runtime's threads.
///
/// # Errors
/// See [`ProduceError`].
pub fn produce(
    settings: &ProduceSettings,
    stop: &AtomicBool,
    sent_so_far: &AtomicU64,
) -> Result<Produced, ProduceError> {
    let mut config = ClientConfig::new();
    config
        .set("bootstrap.servers", &settings.bootstrap_servers)
        // Kafka's Java partitioner (murmur2), which colo's shard
        // extractor reproduces: a user's events reach the user's shard.
        .set("partitioner", "murmur2_random")
        .set("linger.ms", "5");
    for (key, value) in &settings.client {
        config.set(key, value);
    }
    let producer: BaseProducer<Deliveries> = config.create_with_context(Deliveries::default())?;
    let mut generator = Generator::new(&settings.user_prefix, settings.users, settings.seed);
    let started = Instant::now();
    let mut sent: u64 = 0;
    loop {
        if stop.load(Ordering::Relaxed)
            || settings.count.is_some_and(|c| sent >= c)
            || settings.duration.is_some_and(|d| started.elapsed() >= d)
        {
            break;
        }
        if let Some(rate) = settings.rate.filter(|r| *r > 0) {
            // Paced: the n-th record goes no earlier than n / rate.
            let due = started + Duration::from_secs_f64(sent as f64 / rate as f64);
            let now = Instant::now();
            if due > now {
                producer.poll(due - now);
                continue;
            }
        }
        let (user, purchase) = generator.next_event();
        let payload = encode_event(&user, &purchase);
        let mut record = BaseRecord::to(&settings.topic).key(&user).payload(&payload);
        loop {
            match producer.send(record) {
                Ok(()) => break,
                Err((e, back)) if e.rdkafka_error_code() == Some(RDKafkaErrorCode::QueueFull) => {
                    record = back;
                    producer.poll(Duration::from_millis(50));
                }
                Err((e, _)) => return Err(e.into()),
            }
        }
        sent += 1;
        sent_so_far.store(sent, Ordering::Relaxed);
        producer.poll(Duration::ZERO);
    }
    acknowledged(&producer, sent)?;
    Ok(Produced {
        totals: generator.totals().clone(),
        elapsed: started.elapsed(),
    })
}
