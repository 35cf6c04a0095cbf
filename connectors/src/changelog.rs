//! A durable entity type's changelog topic, `<cluster>.<entity type>.changelog`:
//! compacted, one partition per shard, keyed by entity id. It is what lets
//! a shard's state follow the shard to another node: each write of a
//! shard's changed entities goes here before the node's own store, and a
//! shard that starts reads its partition back.
//!
//! This module only moves bytes: what the keys and values mean (entity
//! records, epoch markers) is the runtime's.

use crate::client::{client_config, non_consumer_config};
use crate::error::SourceError;
use futures::future::join_all;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::message::Message;
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::{Offset, TopicPartitionList};
use std::ops::ControlFlow;
use std::time::{Duration, Instant};

/// The topic config every changelog is created with: compacted, so that
/// it keeps each entity's last state, however long it lives.
pub const CHANGELOG_CONFIG: [(&str, &str); 1] = [("cleanup.policy", "compact")];

/// One record read back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChangelogRecord<'a> {
    pub offset: i64,
    pub key: &'a [u8],
    /// `None` for a tombstone.
    pub value: Option<&'a [u8]>,
}

/// Why a changelog could not be written or read.
#[derive(Debug, thiserror::Error)]
pub enum ChangelogError {
    #[error("changelog {topic}: {source}")]
    Kafka { topic: String, source: KafkaError },
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
    producer: FutureProducer,
    topic: String,
    bootstrap_servers: String,
    client: Vec<(String, String)>,
    timeout: Duration,
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
        let producer = config.create()?;
        Ok(Self {
            producer,
            topic: topic.to_string(),
            bootstrap_servers: bootstrap_servers.to_string(),
            client: client.to_vec(),
            timeout,
        })
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
        use rdkafka::producer::Producer;
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
            .map(|(key, value)| (key.as_ref(), Some(value.as_ref())));
        self.send(partition, records).await
    }

    /// Writes `records` (key, value, or `None` for a tombstone) to
    /// `partition`, in order; returns the offset of each once the broker
    /// has them all.
    ///
    /// # Errors
    /// As [`Changelog::write`].
    pub async fn write_or_delete<K: AsRef<[u8]>, V: AsRef<[u8]>>(
        &self,
        partition: i32,
        records: &[(K, Option<V>)],
    ) -> Result<Vec<i64>, ChangelogError> {
        let records = records
            .iter()
            .map(|(key, value)| (key.as_ref(), value.as_ref().map(AsRef::as_ref)));
        self.send(partition, records).await
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
        let records = keys.iter().map(|key| (key.as_ref(), None));
        self.send(partition, records).await.map(drop)
    }

    async fn send<'a>(
        &self,
        partition: i32,
        records: impl ExactSizeIterator<Item = (&'a [u8], Option<&'a [u8]>)>,
    ) -> Result<Vec<i64>, ChangelogError> {
        let mut pending = Vec::with_capacity(records.len());
        for (key, value) in records {
            let mut record = FutureRecord::<[u8], [u8]>::to(&self.topic)
                .partition(partition)
                .key(key);
            if let Some(value) = value {
                record = record.payload(value);
            }
            loop {
                match self.producer.send_result(record) {
                    Ok(delivery) => {
                        pending.push(delivery);
                        break;
                    }
                    Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), again)) => {
                        // librdkafka's queue is full: what is in it must go
                        // out first.
                        record = again;
                        tokio::task::yield_now().await;
                    }
                    Err((e, _)) => return Err(self.error(e)),
                }
            }
        }
        let mut offsets = Vec::with_capacity(pending.len());
        for delivered in join_all(pending).await {
            match delivered {
                Ok(Ok(delivery)) => offsets.push(delivery.offset),
                Ok(Err((e, _))) => return Err(self.error(e)),
                Err(_) => return Err(self.error(KafkaError::Canceled)),
            }
        }
        Ok(offsets)
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
        let consumer: BaseConsumer = client_config(&self.client)
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
            .create()
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
                    };
                    if visit(record).is_break() {
                        return Ok(read);
                    }
                }
            }
        }
    }
}

impl Changelog {
    /// The offset `consumer` fetches `partition` from next, if it knows it.
    fn position(&self, consumer: &BaseConsumer, partition: i32) -> Option<i64> {
        let positions = consumer.position().ok()?;
        match positions.find_partition(&self.topic, partition)?.offset() {
            Offset::Offset(at) => Some(at),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rdkafka::mocking::MockCluster;

    const TIMEOUT: Duration = Duration::from_secs(10);

    fn read_all(
        log: &Changelog,
        partition: i32,
        from: Option<i64>,
        until: i64,
    ) -> Vec<(i64, String)> {
        let mut seen = Vec::new();
        log.read(partition, from, until, &mut |r| {
            seen.push((r.offset, String::from_utf8_lossy(r.key).into_owned()));
            ControlFlow::Continue(())
        })
        .expect("read");
        seen
    }

    /// A shard's writes land in its partition, in order, and read back from
    /// any offset up to any other.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn writes_land_in_their_partition_in_order_and_read_back_between_offsets() {
        let broker = MockCluster::new(1).expect("mock cluster");
        broker.create_topic("t.e.changelog", 4, 1).expect("topic");
        let log = Changelog::new(&broker.bootstrap_servers(), &[], "t.e.changelog", TIMEOUT)
            .expect("changelog");
        let batch: Vec<(Vec<u8>, Vec<u8>)> = (0..5)
            .map(|i| (format!("e{i}").into_bytes(), vec![i]))
            .collect();
        let offsets = log.write(2, &batch).await.expect("written");
        assert_eq!(offsets, vec![0, 1, 2, 3, 4]);
        let more = log.write(2, &batch[..1]).await.expect("written");
        assert_eq!(more, vec![5]);
        let log = std::sync::Arc::new(log);
        let reader = log.clone();
        let (all, tail, none) = tokio::task::spawn_blocking(move || {
            (
                read_all(&reader, 2, None, 6),
                read_all(&reader, 2, Some(3), 5),
                read_all(&reader, 1, None, i64::MAX),
            )
        })
        .await
        .expect("reader");
        let keys: Vec<&str> = all.iter().map(|(_, k)| k.as_str()).collect();
        assert_eq!(keys, ["e0", "e1", "e2", "e3", "e4", "e0"]);
        assert_eq!(tail, vec![(3, "e3".to_string()), (4, "e4".to_string())]);
        assert!(none.is_empty(), "another partition holds nothing: {none:?}");
        let checker = log.clone();
        let (right, wrong) =
            tokio::task::spawn_blocking(move || (checker.check(4), checker.check(8)))
                .await
                .expect("checker");
        right.expect("4 partitions for 4 shards");
        let wrong = wrong.expect_err("4 partitions for 8 shards");
        assert!(wrong.to_string().contains("t.e.changelog"), "{wrong}");
    }

    /// A one-partition changelog `topic` on `broker` with five records,
    /// and a read up to offset 8 under way that has read those five (the
    /// rest is written only then, after the broker reported the end at 5).
    async fn five_read_of_eight(
        broker: &MockCluster<'static, rdkafka::producer::DefaultProducerContext>,
        topic: &str,
    ) -> (
        std::sync::Arc<Changelog>,
        Vec<(Vec<u8>, Vec<u8>)>,
        tokio::task::JoinHandle<Result<Vec<String>, ChangelogError>>,
    ) {
        broker.create_topic(topic, 1, 1).expect("topic");
        let log = std::sync::Arc::new(
            Changelog::new(&broker.bootstrap_servers(), &[], topic, TIMEOUT).expect("changelog"),
        );
        let batch: Vec<(Vec<u8>, Vec<u8>)> = (0..5)
            .map(|i| (format!("e{i}").into_bytes(), vec![i]))
            .collect();
        log.write(0, &batch).await.expect("written");
        let (seen_all, wait_for_it) = std::sync::mpsc::channel();
        let reader = log.clone();
        let read = tokio::task::spawn_blocking(move || {
            let mut keys = Vec::new();
            reader
                .read(0, None, 8, &mut |r| {
                    keys.push(String::from_utf8_lossy(r.key).into_owned());
                    if r.offset == 4 {
                        let _ = seen_all.send(());
                    }
                    ControlFlow::Continue(())
                })
                .map(|_| keys)
        });
        tokio::task::spawn_blocking(move || wait_for_it.recv_timeout(TIMEOUT))
            .await
            .expect("waiter")
            .expect("the first five read");
        (log, batch, read)
    }

    /// A broker that reports the partition's end before the offset asked
    /// for (its view lagging) does not end the read there: the records up
    /// to that offset are read once they come. Before, the read stopped at
    /// the reported end, and a restore took its copy for complete.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_read_goes_on_past_an_end_reported_before_the_offset_asked_for() {
        let broker = MockCluster::new(1).expect("mock cluster");
        let (log, batch, read) = five_read_of_eight(&broker, "t.late.changelog").await;
        log.write(0, &batch[..3]).await.expect("written");
        let keys = read.await.expect("reader").expect("read up to offset 8");
        assert_eq!(keys, ["e0", "e1", "e2", "e3", "e4", "e0", "e1", "e2"]);
    }

    /// The broker away for a while during a read: the read goes on once it
    /// is back. Before, it failed at once (found by a benchmark whose
    /// broker, busy cleaning, dropped its reader's connection).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_read_goes_on_through_its_broker_away_for_a_while() {
        let broker = MockCluster::new(1).expect("mock cluster");
        let (log, batch, read) = five_read_of_eight(&broker, "t.away.changelog").await;
        broker.broker_down(1).expect("down");
        // How long the broker is away: the fault, not a wait for a state.
        tokio::time::sleep(Duration::from_millis(1500)).await;
        broker.broker_up(1).expect("up");
        log.write(0, &batch[..3]).await.expect("written");
        let keys = read.await.expect("reader").expect("read up to offset 8");
        assert_eq!(keys, ["e0", "e1", "e2", "e3", "e4", "e0", "e1", "e2"]);
    }

    /// An end that never reaches the offset asked for is an error once no
    /// record came for the timeout, not a short read taken as whole.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_read_whose_partition_ends_short_of_the_offset_asked_for_fails() {
        let broker = MockCluster::new(1).expect("mock cluster");
        broker
            .create_topic("t.short.changelog", 1, 1)
            .expect("topic");
        let log = std::sync::Arc::new(
            Changelog::new(
                &broker.bootstrap_servers(),
                &[],
                "t.short.changelog",
                Duration::from_secs(1),
            )
            .expect("changelog"),
        );
        let batch: Vec<(Vec<u8>, Vec<u8>)> = (0..5)
            .map(|i| (format!("e{i}").into_bytes(), vec![i]))
            .collect();
        log.write(0, &batch).await.expect("written");
        let reader = log.clone();
        let read = tokio::task::spawn_blocking(move || {
            reader.read(0, None, 8, &mut |_| ControlFlow::Continue(()))
        })
        .await
        .expect("reader");
        match read {
            Err(ChangelogError::Stalled { until: 8, .. }) => {}
            other => panic!("expected the read to stall short of offset 8, got {other:?}"),
        }
    }
}
