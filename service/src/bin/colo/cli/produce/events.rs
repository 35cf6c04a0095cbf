//! Sending purchase events to Kafka: keyed by user id and partitioned with
//! Kafka's own murmur2 partitioner, so a user's events land in the user's
//! shard; paced to a rate; stopped by a count, a duration or a flag.

use colo::process::samples::purchases::{encode_event, Generator, Totals};
use colo_connectors::{KeyedProducer, Partitioning, ProduceError, ProducerSettings};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

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
    /// Which partition each event goes to: its user's shard's, unless the
    /// demo shows a producer with librdkafka's default partitioner.
    pub partitioning: Partitioning,
}

/// What was sent.
#[derive(Debug, Clone)]
pub struct Produced {
    /// The events sent and the totals they add up to.
    pub totals: Totals,
    pub elapsed: Duration,
}

/// How often a paced producer looks at its stop flag.
const STOP_CHECK: Duration = Duration::from_millis(100);

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
    let mut producer = KeyedProducer::new(&ProducerSettings {
        bootstrap_servers: settings.bootstrap_servers.clone(),
        topic: settings.topic.clone(),
        client: settings.client.clone(),
        rate: settings.rate,
        partitioning: settings.partitioning,
    })?;
    let mut generator = Generator::new(&settings.user_prefix, settings.users, settings.seed);
    loop {
        let sent = producer.sent();
        if stop.load(Ordering::Relaxed)
            || settings.count.is_some_and(|c| sent >= c)
            || settings
                .duration
                .is_some_and(|d| producer.started().elapsed() >= d)
        {
            break;
        }
        // In short steps, so that a stop is seen in time.
        if !producer.wait_turn(STOP_CHECK) {
            continue;
        }
        let (user, purchase) = generator.next_event();
        producer.send(user.as_bytes(), &encode_event(&user, &purchase))?;
        sent_so_far.store(producer.sent(), Ordering::Relaxed);
    }
    let started = producer.started();
    producer.finish()?;
    Ok(Produced {
        totals: generator.totals().clone(),
        elapsed: started.elapsed(),
    })
}
