//! A durable entity type's changelog topic, `<cluster>.<entity type>.changelog`:
//! compacted, one partition per shard, keyed by entity id. It is what lets
//! a shard's state follow the shard to another node: each write of a
//! shard's changed entities goes here before the node's own store, and a
//! shard that starts reads its partition back.
//!
//! This module only moves bytes: what the keys and values mean (entity
//! records, epoch markers) is the runtime's.

use crate::client::{client_config, non_consumer_config};
use crate::deliveries::AwaitedProducer;
use crate::error::SourceError;
use futures::future::join_all;
use rdkafka::client::ClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext};
use rdkafka::error::KafkaError;
use rdkafka::message::{BorrowedMessage, Header, Headers, Message, OwnedHeaders};
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::{Offset, TopicPartitionList};
use std::ops::ControlFlow;
use std::time::{Duration, Instant};

/// The topic config every changelog is created with: compacted, so that
/// it keeps each entity's last state, however long it lives.
pub const CHANGELOG_CONFIG: [(&str, &str); 1] = [("cleanup.policy", "compact")];

/// The header that carries a record's tag (see [`ChangelogWrite::tag`]).
const TAG_HEADER: &str = "tag";

/// One record read back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChangelogRecord<'a> {
    pub offset: i64,
    pub key: &'a [u8],
    /// `None` for a tombstone.
    pub value: Option<&'a [u8]>,
    /// As written (see [`ChangelogWrite::tag`]).
    pub tag: Option<&'a [u8]>,
}

/// One record to write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChangelogWrite<'a> {
    pub key: &'a [u8],
    /// `None` for a tombstone.
    pub value: Option<&'a [u8]>,
    /// Read back with the record, in a header: a tombstone has no value,
    /// so what it means beyond its key being gone (the runtime's tombstones
    /// say whether an entity was deleted or only moved to another key)
    /// travels here.
    pub tag: Option<&'a [u8]>,
}

impl<'a> ChangelogWrite<'a> {
    pub fn value(key: &'a [u8], value: &'a [u8]) -> Self {
        Self {
            key,
            value: Some(value),
            tag: None,
        }
    }

    pub fn tombstone(key: &'a [u8]) -> Self {
        Self {
            key,
            value: None,
            tag: None,
        }
    }
}

/// Why a changelog could not be written or read.
#[derive(Debug, thiserror::Error)]
pub enum ChangelogError {
    #[error("changelog {topic}: {source}")]
    Kafka { topic: String, source: KafkaError },
    #[error("changelog {topic}, partition {partition}: the last start of this shard in this process still holds its transactional producer")]
    LastStartHolds { topic: String, partition: i32 },
    #[error("changelog {topic}, partition {partition}: no record for {0:?} while reading up to offset {until}", .stalled)]
    Stalled {
        topic: String,
        partition: i32,
        until: i64,
        stalled: Duration,
    },
}

/// Writes and reads one entity type's changelog.
pub struct Changelog {
    producer: AwaitedProducer,
    topic: String,
    bootstrap_servers: String,
    client: Vec<(String, String)>,
    timeout: Duration,
    /// How long a write's records may take to get into librdkafka's queue
    /// when it is full: half the write's bound, so that the last record
    /// queued lands, or is dropped, within one and a half bounds of the
    /// write's start, however full the queue was.
    queue_within: Duration,
    write_within: Duration,
    /// Whether each start of a shard writes its partition in transactions
    /// of its own (see `transactions.rs`).
    transactional: bool,
    /// Per partition, the turn of the start whose transactional producer
    /// is open (see `transactions.rs`).
    turns: transactions::Turns,
}

impl std::fmt::Debug for Changelog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Changelog")
            .field("topic", &self.topic)
            .finish_non_exhaustive()
    }
}

impl Changelog {
    /// A changelog on `topic`; `client` are the source's pass-through
    /// properties (security and the like). `timeout` bounds a write (the
    /// broker's acknowledgement of every record) and a read's wait for its
    /// next record.
    ///
    /// # Errors
    /// librdkafka refuses the configuration.
    pub fn new(
        bootstrap_servers: &str,
        client: &[(String, String)],
        topic: &str,
        timeout: Duration,
    ) -> Result<Self, SourceError> {
        Self::with_linger(bootstrap_servers, client, topic, timeout, timeout, None)
    }

    /// As [`Changelog::new`], with a write given up (an error) once
    /// `write_within` has passed, shorter than a read's `timeout`: what
    /// librdkafka still holds for a write then is dropped rather than sent
    /// later, when another node may own what it wrote.
    ///
    /// # Errors
    /// As [`Changelog::new`].
    pub fn writing_within(
        bootstrap_servers: &str,
        client: &[(String, String)],
        topic: &str,
        timeout: Duration,
        write_within: Duration,
    ) -> Result<Self, SourceError> {
        Self::with_linger(
            bootstrap_servers,
            client,
            topic,
            timeout,
            write_within,
            None,
        )
    }

    /// A log whose writes are one record each, each awaited before the
    /// next (the coordinator's decisions): sent at once rather than after
    /// librdkafka's `linger.ms` (5 ms), which would bound such a writer to
    /// 200 records a second.
    ///
    /// # Errors
    /// As [`Changelog::new`].
    pub fn unbatched(
        bootstrap_servers: &str,
        client: &[(String, String)],
        topic: &str,
        timeout: Duration,
    ) -> Result<Self, SourceError> {
        Self::with_linger(
            bootstrap_servers,
            client,
            topic,
            timeout,
            timeout,
            Some("0"),
        )
    }

    fn with_linger(
        bootstrap_servers: &str,
        client: &[(String, String)],
        topic: &str,
        timeout: Duration,
        write_within: Duration,
        linger: Option<&str>,
    ) -> Result<Self, SourceError> {
        let mut config = non_consumer_config(bootstrap_servers, client);
        // A shard's records keep their order even when the broker answers
        // late and librdkafka sends again: a state must never land after a
        // newer one of the same entity.
        // A record sent and not answered is not timed out before its
        // request is: the same bound for both. And while its broker is
        // away, librdkafka looks for timed-out records only between tries
        // to connect, up to 10 s apart by default: a write waited up to 12 s
        // for a bound of 2.5 s (and at most 3.5 s with tries 1 s apart).
        let within = write_within.as_millis().max(1);
        let reconnect =
            (write_within / 4).clamp(Duration::from_millis(100), Duration::from_secs(1));
        config
            .set("enable.idempotence", "true")
            .set("message.timeout.ms", within.to_string())
            .set("request.timeout.ms", within.to_string())
            .set(
                "reconnect.backoff.max.ms",
                reconnect.as_millis().to_string(),
            );
        if let Some(linger) = linger {
            config.set("linger.ms", linger);
        }
        let producer = AwaitedProducer::new(&config)?;
        Ok(Self {
            producer,
            topic: topic.to_string(),
            bootstrap_servers: bootstrap_servers.to_string(),
            client: client.to_vec(),
            timeout,
            queue_within: write_within / 2,
            write_within,
            transactional: false,
            turns: transactions::Turns::default(),
        })
    }

    /// The same changelog, with each start of a shard writing its
    /// partition in transactions of its own, its outputs in the same ones
    /// ([`Changelog::transactions`]).
    #[must_use]
    pub fn with_transactions(mut self) -> Self {
        self.transactional = true;
        self
    }

    pub fn is_transactional(&self) -> bool {
        self.transactional
    }

    pub fn topic(&self) -> &str {
        &self.topic
    }

    fn error(&self, source: KafkaError) -> ChangelogError {
        ChangelogError::Kafka {
            topic: self.topic.clone(),
            source,
        }
    }

    /// Checks that the topic exists with one partition per shard: a
    /// changelog with another count would put shards' states in other
    /// shards' partitions. Blocking.
    ///
    /// # Errors
    /// The topic is missing, has another partition count, or its metadata
    /// cannot be read.
    pub fn check(&self, number_of_shards: u32) -> Result<(), SourceError> {
        let metadata = self
            .producer
            .client()
            .fetch_metadata(Some(&self.topic), self.timeout)?;
        let found = metadata
            .topics()
            .iter()
            .find(|t| t.name() == self.topic && t.error().is_none())
            .map(|t| t.partitions().len())
            .filter(|&n| n > 0);
        let counts = std::collections::BTreeMap::from([(self.topic.clone(), found)]);
        crate::topics::check_partition_counts(&counts, number_of_shards)?;
        Ok(())
    }

    /// Writes `records` (key, value) to `partition`, in order; returns the
    /// offset of each once the broker has them all.
    ///
    /// # Errors
    /// A record was not acknowledged within the timeout (none of the batch
    /// counts as written then: the caller writes it all again).
    pub async fn write<K: AsRef<[u8]>, V: AsRef<[u8]>>(
        &self,
        partition: i32,
        records: &[(K, V)],
    ) -> Result<Vec<i64>, ChangelogError> {
        let records = records
            .iter()
            .map(|(key, value)| ChangelogWrite::value(key.as_ref(), value.as_ref()));
        self.send(partition, records).await
    }

    /// Writes `records` (values, tombstones, tagged or not) to
    /// `partition`, in order; returns the offset of each once the broker
    /// has them all.
    ///
    /// # Errors
    /// As [`Changelog::write`].
    pub async fn write_or_delete(
        &self,
        partition: i32,
        records: &[ChangelogWrite<'_>],
    ) -> Result<Vec<i64>, ChangelogError> {
        self.send(partition, records.iter().copied()).await
    }

    /// Writes a tombstone for each of `keys` to `partition`: compaction
    /// drops every earlier record of those keys. Returns once the broker
    /// has them all.
    ///
    /// # Errors
    /// As [`Changelog::write`].
    pub async fn delete<K: AsRef<[u8]>>(
        &self,
        partition: i32,
        keys: &[K],
    ) -> Result<(), ChangelogError> {
        let records = keys
            .iter()
            .map(|key| ChangelogWrite::tombstone(key.as_ref()));
        self.send(partition, records).await.map(drop)
    }

    async fn send<'a>(
        &self,
        partition: i32,
        records: impl ExactSizeIterator<Item = ChangelogWrite<'a>>,
    ) -> Result<Vec<i64>, ChangelogError> {
        let mut pending = Vec::with_capacity(records.len());
        let queue_by = tokio::time::Instant::now() + self.queue_within;
        for write in records {
            let (record, delivery) = changelog_record(&self.topic, partition, &write);
            // A record queued after `queue_by` would be sent later than
            // the write's bound.
            self.producer
                .send_by(record, queue_by)
                .await
                .map_err(|e| self.error(e))?;
            pending.push(delivery);
        }
        delivered(pending).await.map_err(|e| self.error(e))
    }

    /// Reads `partition` from `from` (`None`: its first record) up to
    /// `until`, exclusive, handing each record to `visit` until it breaks.
    /// Blocking: call it from a blocking thread. Returns the records read.
    ///
    /// The end of the partition as the broker answering reports it ends
    /// the read only once it is at `until` or past it: a broker whose
    /// view lags (a follower read through `client.rack`, a leader that
    /// has not advanced its high watermark yet) reports an end before
    /// records that exist, and a restore that stopped there would take
    /// its store for up to date while records it never read are below
    /// its checkpoint. `until` = `i64::MAX` reads to whatever end the
    /// broker reports.
    ///
    /// # Errors
    /// The partition cannot be read, or no record came for the timeout
    /// before `until` was reached.
    pub fn read(
        &self,
        partition: i32,
        from: Option<i64>,
        until: i64,
        visit: &mut dyn FnMut(ChangelogRecord<'_>) -> ControlFlow<()>,
    ) -> Result<u64, ChangelogError> {
        // From offset 0 rather than `Beginning`: librdkafka looks the
        // beginning up first, which took half a second per restore; a
        // partition whose first records are gone answers 0 as out of
        // range, and `auto.offset.reset` starts at its first record then.
        let start = Offset::Offset(from.unwrap_or(0));
        if from.is_some_and(|from| from >= until) {
            return Ok(0);
        }
        let consumer: BaseConsumer<Reader> = client_config(&self.client)
            .set("bootstrap.servers", &self.bootstrap_servers)
            // librdkafka assigns only with a group id; this one never
            // joins (no subscription) and never commits.
            .set("group.id", format!("{}.reader", self.topic))
            .set("enable.auto.commit", "false")
            .set("enable.partition.eof", "true")
            // At the partition's end the broker answers at once rather
            // than waiting for more: a restore ends there.
            .set("fetch.wait.max.ms", "10")
            .set("auto.offset.reset", "earliest")
            .create_with_context(Reader)
            .map_err(|e| self.error(e))?;
        let mut assignment = TopicPartitionList::new();
        assignment
            .add_partition_offset(&self.topic, partition, start)
            .map_err(|e| self.error(e))?;
        consumer.assign(&assignment).map_err(|e| self.error(e))?;
        let mut read = 0;
        let mut last = None;
        let mut heard = Instant::now();
        loop {
            match consumer.poll(Duration::from_millis(100)) {
                None => {
                    if heard.elapsed() >= self.timeout {
                        return Err(ChangelogError::Stalled {
                            topic: self.topic.clone(),
                            partition,
                            until,
                            stalled: self.timeout,
                        });
                    }
                }
                // The end of the partition as this broker sees it: the end
                // of the read if it is at `until`; otherwise records up to
                // `until` are still to come (or the timeout says so).
                Some(Err(KafkaError::PartitionEOF(_))) => {
                    if until == i64::MAX || self.position(&consumer, partition) >= Some(until) {
                        return Ok(read);
                    }
                }
                // Brokers away for a while: librdkafka connects again, and
                // the read goes on, failing only once nothing came for
                // the timeout.
                Some(Err(KafkaError::MessageConsumption(
                    RDKafkaErrorCode::AllBrokersDown | RDKafkaErrorCode::BrokerTransportFailure,
                ))) => {}
                Some(Err(e)) => return Err(self.error(e)),
                Some(Ok(message)) => {
                    heard = Instant::now();
                    if message.offset() >= until {
                        return Ok(read);
                    }
                    // Offsets only grow in a partition: one at or below the
                    // last is the same record again (a broker serving a
                    // compacted batch more than once; DEVELOPERS.md).
                    if last.is_some_and(|last| message.offset() <= last) {
                        continue;
                    }
                    last = Some(message.offset());
                    read += 1;
                    let record = ChangelogRecord {
                        offset: message.offset(),
                        key: message.key().unwrap_or_default(),
                        value: message.payload(),
                        tag: tag_of(&message),
                    };
                    if visit(record).is_break() {
                        return Ok(read);
                    }
                }
            }
        }
    }
}

/// Each record's offset, once the broker has them all; the first failure
/// otherwise.
async fn delivered(deliveries: Vec<crate::deliveries::Delivery>) -> Result<Vec<i64>, KafkaError> {
    let mut offsets = Vec::with_capacity(deliveries.len());
    for delivered in join_all(deliveries).await {
        match delivered {
            Ok(Ok((_, offset))) => offsets.push(offset),
            Ok(Err(e)) => return Err(e),
            Err(_) => return Err(KafkaError::Canceled),
        }
    }
    Ok(offsets)
}

/// A changelog record as librdkafka's record, to `partition`.
fn changelog_record<'a>(
    topic: &'a str,
    partition: i32,
    write: &ChangelogWrite<'a>,
) -> (
    crate::deliveries::AwaitedRecord<'a, [u8], [u8]>,
    crate::deliveries::Delivery,
) {
    let (record, delivery) = AwaitedProducer::record::<[u8], [u8]>(topic);
    let mut record = record.partition(partition).key(write.key);
    if let Some(value) = write.value {
        record = record.payload(value);
    }
    if let Some(tag) = write.tag {
        record = record.headers(OwnedHeaders::new().insert(Header {
            key: TAG_HEADER,
            value: Some(tag),
        }));
    }
    (record, delivery)
}

/// The context of a read's consumer (a changelog's, an output topic's).
/// librdkafka also reports the end of the partition, which every read
/// reaches, as an error of the client: the read takes the end from its
/// poll, so that report is for debugging, not an error a healthy read
/// should print.
pub(crate) struct Reader;

impl ClientContext for Reader {
    fn error(&self, error: KafkaError, reason: &str) {
        if matches!(error, KafkaError::PartitionEOF(_))
            || error.rdkafka_error_code() == Some(RDKafkaErrorCode::PartitionEOF)
        {
            tracing::debug!(%reason, "read at the partition's end");
        } else {
            tracing::warn!(%error, %reason, "topic read: kafka client error");
        }
    }
}

impl ConsumerContext for Reader {}

/// A record's tag, if it has one (see [`ChangelogWrite::tag`]).
fn tag_of<'a>(message: &'a BorrowedMessage<'_>) -> Option<&'a [u8]> {
    let headers = message.headers()?;
    headers
        .iter()
        .find(|header| header.key == TAG_HEADER)
        .and_then(|header| header.value)
}

impl Changelog {
    /// The offset `consumer` fetches `partition` from next, if it knows it.
    fn position(&self, consumer: &BaseConsumer<Reader>, partition: i32) -> Option<i64> {
        let positions = consumer.position().ok()?;
        match positions.find_partition(&self.topic, partition)?.offset() {
            Offset::Offset(at) => Some(at),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests;
mod transactions;
pub use transactions::ShardTransactions;
