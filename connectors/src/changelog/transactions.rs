//! A shard's changelog partition written in Kafka transactions, each with
//! the outputs its entities emitted in the same write: a reader of an
//! output topic with `read_committed` sees an output once its state
//! change is in the changelog, and never otherwise, so it sees each once.
//!
//! Each start of a shard has a producer of its own, whose
//! `transactional.id` names the changelog and the partition: the same for
//! every start, on any node. Opening it fences the shard's last producer,
//! wherever it runs (a node that lost the shard with a transaction under
//! way has that transaction refused), and aborts the transaction that
//! producer left open, before the start reads the partition back: a
//! reader with `read_committed` reads no further than an open
//! transaction.
//!
//! Two producers of one shard in one process must not overlap: one that a
//! stopped start left in a blocking call of librdkafka (an abort that
//! bumps its epoch, once the coordinator answers) could fence the next
//! start's after it opened, and that start would write nothing more while
//! it owns the shard. So a start's producer takes its partition's turn,
//! and gives it back only once nothing holds that producer any more.
//!
//! Kafka Streams' first exactly-once mode had a producer per task in the
//! same way; its second fences through the consumer group instead, which
//! colo's shards, placed also by its coordinator, cannot rely on.

use super::{changelog_record, delivered, Changelog, ChangelogError, ChangelogWrite};
use crate::deliveries::AwaitedProducer;
use crate::outputs::{output_record, OutputWrite};
use crate::producer::PARTITIONER;
use rdkafka::error::KafkaError;
use rdkafka::producer::Producer;
use rdkafka::types::RDKafkaErrorCode;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{Mutex, OwnedMutexGuard};

/// Per partition, the turn a start's producer holds while it lives.
pub(super) type Turns = Arc<parking_lot::Mutex<HashMap<i32, Arc<Mutex<()>>>>>;

/// A start's producer, with its partition's turn: shared by the blocking
/// calls made with it, so the turn passes on only once the last of them
/// returned.
struct Turned {
    producer: AwaitedProducer,
    _turn: OwnedMutexGuard<()>,
}

/// The producer of one start of a shard.
enum Writer {
    Open(Arc<Turned>),
    /// Fenced, or failed as librdkafka cannot recover from: the next write
    /// opens a producer again. Fenced while this start still writes: the
    /// producer that fenced it is one a start that no longer serves left
    /// opening (in a blocking call its start could not stop), and this
    /// start, which serves, takes the shard's transactions back. A start
    /// that no longer serves writes nothing (its lease stops it first), so
    /// a start deposed while a transaction of its was open has only that
    /// transaction refused.
    Closed,
}

/// Writes one shard's changelog partition, and its outputs, in
/// transactions. Writes run one at a time.
pub struct ShardTransactions {
    topic: String,
    partition: i32,
    config: rdkafka::ClientConfig,
    /// Bounds opening the producer, and a transaction's commit or abort.
    timeout: Duration,
    /// Bounds getting a write's records into librdkafka's queue.
    queue_within: Duration,
    /// The partition's turn, taken by each producer this start opens.
    turn: Arc<Mutex<()>>,
    writer: Mutex<Writer>,
}

impl std::fmt::Debug for ShardTransactions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ShardTransactions")
            .field("topic", &self.topic)
            .field("partition", &self.partition)
            .finish_non_exhaustive()
    }
}

impl Changelog {
    /// Opens the transactional writer of `partition` for a start of its
    /// shard, fencing the last one and aborting what it left open.
    ///
    /// # Errors
    /// The producer cannot be made, or the broker did not take it within
    /// the changelog's timeout.
    pub async fn transactions(&self, partition: i32) -> Result<ShardTransactions, ChangelogError> {
        let mut config = crate::client::non_consumer_config(&self.bootstrap_servers, &self.client);
        let within = self.write_within.as_millis().max(1);
        config
            .set("transactional.id", format!("{}.{partition}", self.topic))
            // An open transaction of a node that died holds back every
            // reader of the partitions it wrote (the output topics'
            // included) until the shard's next start aborts it, or the
            // broker does after this: 10 s, as Kafka Streams' exactly-once
            // default, or a write's bound if that is longer.
            .set(
                "transaction.timeout.ms",
                self.write_within
                    .max(Duration::from_secs(10))
                    .as_millis()
                    .to_string(),
            )
            .set("message.timeout.ms", within.to_string())
            .set("request.timeout.ms", within.to_string())
            // Outputs go to their key's partition, as the outputs'
            // idempotent producer sends them.
            .set("partitioner", PARTITIONER);
        let turn = self.turns.lock().entry(partition).or_default().clone();
        let transactions = ShardTransactions {
            topic: self.topic.clone(),
            partition,
            config,
            timeout: self.timeout,
            queue_within: self.write_within / 2,
            turn,
            writer: Mutex::new(Writer::Closed),
        };
        let producer = transactions.open().await?;
        *transactions.writer.lock().await = Writer::Open(producer);
        Ok(transactions)
    }
}

impl ShardTransactions {
    fn error(&self, source: KafkaError) -> ChangelogError {
        ChangelogError::Kafka {
            topic: self.topic.clone(),
            source,
        }
    }

    /// Opens a producer once the partition's last one in this process is
    /// gone: its blocking calls end within the timeout, so the wait is
    /// bounded by twice that.
    async fn open(&self) -> Result<Arc<Turned>, ChangelogError> {
        let turn = tokio::time::timeout(self.timeout * 2, self.turn.clone().lock_owned())
            .await
            .map_err(|_| ChangelogError::LastStartHolds {
                topic: self.topic.clone(),
                partition: self.partition,
            })?;
        let producer = AwaitedProducer::new(&self.config).map_err(|e| self.error(e))?;
        let turned = Arc::new(Turned {
            producer,
            _turn: turn,
        });
        let (held, timeout) = (turned.clone(), self.timeout);
        blocking(move || held.producer.base().init_transactions(timeout))
            .await
            .map_err(|e| self.error(e))?;
        Ok(turned)
    }

    /// Writes `records` to the partition and sends `outputs`, in one
    /// transaction; returns the offset of each record once it committed.
    ///
    /// # Errors
    /// The transaction did not commit (none of it is read then with
    /// `read_committed`: the caller writes it all again), a later start of
    /// the shard fenced this one among them.
    pub async fn write(
        &self,
        records: &[ChangelogWrite<'_>],
        outputs: &[OutputWrite<'_>],
    ) -> Result<Vec<i64>, ChangelogError> {
        let mut writer = self.writer.lock().await;
        let producer = match &*writer {
            Writer::Open(producer) => producer.clone(),
            Writer::Closed => {
                let producer = self.open().await?;
                *writer = Writer::Open(producer.clone());
                producer
            }
        };
        let written = self.transaction(&producer, records, outputs).await;
        let Err(e) = written else {
            return written;
        };
        let (held, timeout) = (producer.clone(), self.timeout);
        let aborted = match &e {
            ChangelogError::Kafka { source, .. } if fatal(source) => Err(source.clone()),
            _ => blocking(move || held.producer.base().abort_transaction(timeout)).await,
        };
        if let Err(why) = aborted {
            if fenced(&why) {
                tracing::warn!(topic = %self.topic, partition = self.partition, "another start of this shard opened its transactions: this one's transaction is refused, and its next write opens them again");
            }
            *writer = Writer::Closed;
        }
        Err(e)
    }

    async fn transaction(
        &self,
        turned: &Arc<Turned>,
        records: &[ChangelogWrite<'_>],
        outputs: &[OutputWrite<'_>],
    ) -> Result<Vec<i64>, ChangelogError> {
        let producer = &turned.producer;
        producer
            .base()
            .begin_transaction()
            .map_err(|e| self.error(e))?;
        let queue_by = tokio::time::Instant::now() + self.queue_within;
        let mut pending = Vec::with_capacity(records.len());
        for write in records {
            let (record, delivery) = changelog_record(&self.topic, self.partition, write);
            producer
                .send_by(record, queue_by)
                .await
                .map_err(|e| self.error(e))?;
            pending.push(delivery);
        }
        let mut sent = Vec::with_capacity(outputs.len());
        for write in outputs {
            let (record, delivery) = output_record(write);
            producer
                .send_by(record, queue_by)
                .await
                .map_err(|e| self.error(e))?;
            sent.push(delivery);
        }
        let offsets = delivered(pending).await.map_err(|e| self.error(e))?;
        delivered(sent).await.map_err(|e| self.error(e))?;
        let (held, timeout) = (turned.clone(), self.timeout);
        blocking(move || held.producer.base().commit_transaction(timeout))
            .await
            .map_err(|e| self.error(e))?;
        Ok(offsets)
    }
}

/// Runs one of librdkafka's blocking transaction calls off the runtime.
async fn blocking(
    call: impl FnOnce() -> Result<(), KafkaError> + Send + 'static,
) -> Result<(), KafkaError> {
    tokio::task::spawn_blocking(call)
        .await
        .unwrap_or(Err(KafkaError::Canceled))
}

fn fatal(error: &KafkaError) -> bool {
    match error {
        KafkaError::Transaction(e) => e.is_fatal(),
        other => fenced(other),
    }
}

/// A later producer with the same `transactional.id` took over.
fn fenced(error: &KafkaError) -> bool {
    matches!(
        error.rdkafka_error_code(),
        Some(
            RDKafkaErrorCode::Fenced
                | RDKafkaErrorCode::ProducerFenced
                | RDKafkaErrorCode::InvalidProducerEpoch
        )
    )
}
