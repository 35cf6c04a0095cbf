//! A shard's changelog partition written in Kafka transactions, each with
//! the outputs its entities emitted in the same write: a reader of an
//! output topic with `read_committed` sees an output once its state
//! change is in the changelog, and never otherwise, so it sees each once.
//!
//! Each start of a shard has a producer of its own, whose
//! `transactional.id` names the changelog and the partition: the same for
//! every start, on any node. Opening it fences the shard's last producer,
//! wherever it runs (a node that lost the shard and still writes sees its
//! next commit refused), and aborts the transaction that producer left
//! open, before the start reads the partition back: a reader with
//! `read_committed` reads no further than an open transaction.
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
use std::time::Duration;
use tokio::sync::Mutex;

/// The producer of one start of a shard, and whether it may still write.
enum Writer {
    Open(AwaitedProducer),
    /// A later start of the shard opened a producer of its own: this one
    /// writes nothing more.
    Fenced,
    /// A failure librdkafka cannot recover from: the next write opens the
    /// producer again.
    Broken,
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
            // reader with `read_committed` until the shard's next start
            // aborts it, or the broker does after this.
            .set(
                "transaction.timeout.ms",
                self.timeout.as_millis().max(1000).to_string(),
            )
            .set("message.timeout.ms", within.to_string())
            .set("request.timeout.ms", within.to_string())
            // Outputs go to their key's partition, as the outputs'
            // idempotent producer sends them.
            .set("partitioner", PARTITIONER);
        let transactions = ShardTransactions {
            topic: self.topic.clone(),
            partition,
            config,
            timeout: self.timeout,
            queue_within: self.write_within / 2,
            writer: Mutex::new(Writer::Broken),
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

    async fn open(&self) -> Result<AwaitedProducer, ChangelogError> {
        let producer = AwaitedProducer::new(&self.config).map_err(|e| self.error(e))?;
        let base = producer.base();
        let timeout = self.timeout;
        blocking(move || base.init_transactions(timeout))
            .await
            .map_err(|e| self.error(e))?;
        Ok(producer)
    }

    /// Writes `records` to the partition and sends `outputs`, in one
    /// transaction; returns the offset of each record once it committed.
    ///
    /// # Errors
    /// The transaction did not commit (none of it is read then with
    /// `read_committed`: the caller writes it all again), or a later start
    /// of the shard fenced this one.
    pub async fn write(
        &self,
        records: &[ChangelogWrite<'_>],
        outputs: &[OutputWrite<'_>],
    ) -> Result<Vec<i64>, ChangelogError> {
        let mut writer = self.writer.lock().await;
        let producer = match &*writer {
            Writer::Open(producer) => producer.clone(),
            Writer::Fenced => {
                return Err(self.error(KafkaError::MessageProduction(RDKafkaErrorCode::Fenced)))
            }
            Writer::Broken => {
                let producer = self.open().await?;
                *writer = Writer::Open(producer.clone());
                producer
            }
        };
        let written = self.transaction(&producer, records, outputs).await;
        let Err(e) = written else {
            return written;
        };
        let base = producer.base();
        let timeout = self.timeout;
        let aborted = match &e {
            ChangelogError::Kafka { source, .. } if fatal(source) => Err(source.clone()),
            _ => blocking(move || base.abort_transaction(timeout)).await,
        };
        if let Err(why) = aborted {
            *writer = if fenced(&why)
                || matches!(&e, ChangelogError::Kafka { source, .. } if fenced(source))
            {
                Writer::Fenced
            } else {
                Writer::Broken
            };
        }
        Err(e)
    }

    async fn transaction(
        &self,
        producer: &AwaitedProducer,
        records: &[ChangelogWrite<'_>],
        outputs: &[OutputWrite<'_>],
    ) -> Result<Vec<i64>, ChangelogError> {
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
        let (base, timeout) = (producer.base(), self.timeout);
        blocking(move || base.commit_transaction(timeout))
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
