//! A producer whose records' deliveries are awaited, for the changelog
//! and the dead-letter topic: rdkafka's `FutureProducer` without its
//! polling thread, which kept about 1% of a core busy per producer even
//! with nothing to send. That thread polls in rounds of 100 ms, and
//! rdkafka's poll hands librdkafka the wait left in whole milliseconds,
//! rounded down: the first wait of a round ends a fraction of a
//! millisecond short of it, and the poll spins through that fraction,
//! reading the clock, at every round. Here a round lasts a whole number of
//! milliseconds and a little more, so that an idle round ends within its
//! wait, and a round is long, so that the fraction left after a delivery
//! report is spun through rarely.

use rdkafka::config::ClientConfig;
use rdkafka::error::{KafkaError, KafkaResult};
use rdkafka::message::{Message, ToBytes};
use rdkafka::producer::{BaseProducer, BaseRecord, DeliveryResult, Producer, ProducerContext};
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::ClientContext;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
// futures' channel, not tokio's: a write awaits thousands of deliveries
// together (`join_all`), and tokio's receiver spends the task's
// cooperative budget, then wakes itself at each poll past it: with a
// million users' changes per write, its wakes and polls took 40% of the
// node's CPU.
use futures::channel::oneshot;

/// One round of the polling thread: deliveries are reported as they come
/// within it; a dropped producer's thread ends at the end of its round.
const ROUND: Duration = Duration::from_micros(500_050);

/// How often a record that finds librdkafka's queue full is tried again.
const QUEUE_FULL_RETRY: Duration = Duration::from_millis(5);

/// Where a record landed (partition, offset), or why it did not.
pub(crate) type Delivered = Result<(i32, i64), KafkaError>;

/// A record handed to librdkafka; resolves once the broker acknowledged it
/// or librdkafka gave it up (`Canceled`: the producer went away first).
pub(crate) type Delivery = oneshot::Receiver<Delivered>;

/// A record for [`AwaitedProducer::send`]: rdkafka's record, carrying the
/// sender of its delivery.
pub(crate) type AwaitedRecord<'a, K, P> = BaseRecord<'a, K, P, Box<oneshot::Sender<Delivered>>>;

/// Sends each record's outcome to whoever awaits it.
pub(crate) struct Deliveries {
    /// Set once the last clone of the producer is gone: what librdkafka
    /// reports then (brokers that went away first, at a process's end) no
    /// longer concerns anyone.
    closing: Arc<AtomicBool>,
}

impl ClientContext for Deliveries {
    fn log(&self, level: rdkafka::config::RDKafkaLogLevel, fac: &str, message: &str) {
        if self.closing.load(Ordering::Acquire) {
            tracing::debug!(target: "librdkafka", "librdkafka (producer closing): {fac} {message}");
        } else {
            crate::client::log_at_its_level(level, fac, message);
        }
    }

    fn error(&self, error: KafkaError, reason: &str) {
        if self.closing.load(Ordering::Acquire) {
            tracing::debug!(%error, reason, "kafka producer closing");
        } else {
            tracing::error!(%error, reason, "kafka producer");
        }
    }
}

impl ProducerContext for Deliveries {
    type DeliveryOpaque = Box<oneshot::Sender<Delivered>>;

    fn delivery(&self, result: &DeliveryResult<'_>, sender: Self::DeliveryOpaque) {
        let delivered = match result {
            Ok(message) => Ok((message.partition(), message.offset())),
            Err((error, _)) => Err(error.clone()),
        };
        // Nobody waits any more: the write was given up.
        let _ = sender.send(delivered);
    }
}

/// A producer and the thread that serves its delivery reports. Clones
/// share both; once the last is dropped, the thread ends at the end of its
/// round and drops the producer there (librdkafka purges what it still
/// holds), so no caller blocks on it.
#[derive(Clone)]
pub(crate) struct AwaitedProducer {
    producer: Arc<BaseProducer<Deliveries>>,
    _polling: Arc<Polling>,
}

/// Tells the polling thread to end when the last clone goes.
struct Polling(Arc<AtomicBool>);

impl Drop for Polling {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Release);
    }
}

impl AwaitedProducer {
    /// # Errors
    /// librdkafka refuses the configuration, or the thread cannot start.
    pub fn new(config: &ClientConfig) -> KafkaResult<Self> {
        let stop = Arc::new(AtomicBool::new(false));
        let producer: Arc<BaseProducer<Deliveries>> =
            Arc::new(config.create_with_context(Deliveries {
                closing: stop.clone(),
            })?);
        std::thread::Builder::new()
            .name("colo-deliveries".to_string())
            .spawn({
                let producer = producer.clone();
                let stop = stop.clone();
                move || {
                    while !stop.load(Ordering::Acquire) {
                        producer.poll(ROUND);
                    }
                }
            })
            .map_err(|e| KafkaError::ClientCreation(format!("delivery thread: {e}")))?;
        Ok(Self {
            producer,
            _polling: Arc::new(Polling(stop)),
        })
    }

    /// A record for `topic`, to fill in as rdkafka's `BaseRecord`.
    pub fn record<'a, K: ToBytes + ?Sized, P: ToBytes + ?Sized>(
        topic: &'a str,
    ) -> (AwaitedRecord<'a, K, P>, Delivery) {
        let (sender, delivery) = oneshot::channel();
        (
            BaseRecord::with_opaque_to(topic, Box::new(sender)),
            delivery,
        )
    }

    /// Hands `record` to librdkafka, trying again while its queue is full
    /// until `by` (room comes as the records in it are delivered or time
    /// out); its delivery comes on the receiver [`Self::record`] made with
    /// it.
    ///
    /// # Errors
    /// librdkafka refused it: its queue still full at `by`, or otherwise.
    pub async fn send_by<K: ToBytes + ?Sized, P: ToBytes + ?Sized>(
        &self,
        mut record: AwaitedRecord<'_, K, P>,
        by: tokio::time::Instant,
    ) -> Result<(), KafkaError> {
        loop {
            match self.producer.send(record) {
                Ok(()) => return Ok(()),
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), again))
                    if tokio::time::Instant::now() < by =>
                {
                    record = again;
                    tokio::time::sleep(QUEUE_FULL_RETRY).await;
                }
                Err((e, _)) => return Err(e),
            }
        }
    }

    /// The producer itself, for librdkafka's blocking calls (a
    /// transaction's), made off the runtime.
    pub fn base(&self) -> Arc<BaseProducer<Deliveries>> {
        self.producer.clone()
    }

    /// The producer's client, for metadata.
    pub fn client(&self) -> &rdkafka::client::Client<Deliveries> {
        self.producer.client()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_record_librdkafka_gives_up_reports_why() {
        // No broker answers here: the record times out in librdkafka, and
        // its delivery says so rather than hanging.
        let mut config = ClientConfig::new();
        config
            .set("bootstrap.servers", "127.0.0.1:1")
            .set("message.timeout.ms", "200");
        let producer = AwaitedProducer::new(&config).expect("producer");
        let (record, delivery) = AwaitedProducer::record::<[u8], [u8]>("t");
        let by = tokio::time::Instant::now() + Duration::from_secs(1);
        producer
            .send_by(record.key(b"k").payload(b"v"), by)
            .await
            .expect("queued");
        let delivered = tokio::time::timeout(Duration::from_secs(10), delivery)
            .await
            .expect("reported within the bound")
            .expect("the producer was still there");
        assert!(delivered.is_err(), "{delivered:?}");
    }

    #[tokio::test]
    async fn the_thread_ends_once_the_last_clone_is_dropped() {
        let mut config = ClientConfig::new();
        config.set("bootstrap.servers", "127.0.0.1:1");
        let producer = AwaitedProducer::new(&config).expect("producer");
        let clone = producer.clone();
        let weak = Arc::downgrade(&producer.producer);
        drop(producer);
        assert!(weak.upgrade().is_some(), "a clone still uses it");
        drop(clone);
        // The thread drops the producer at the end of its round.
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while weak.upgrade().is_some() {
            assert!(
                std::time::Instant::now() < deadline,
                "the thread still holds the producer"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}
