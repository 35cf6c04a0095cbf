//! The topics durable entities emit records to: one idempotent producer
//! per node, each record to its key's murmur2 partition (where a colo
//! entity type reading the topic has the key's shard), with its
//! deterministic id in a header.
//!
//! Idempotence makes the broker drop a record this producer sent twice
//! (a retry after a lost answer), so a record leaves once per producer;
//! what only a reader can drop is a record sent again by another producer
//! (the next owner of a shard whose node died after sending), which has
//! the same id.

use crate::deliveries::AwaitedProducer;
use crate::error::SourceError;
use crate::producer::PARTITIONER;
use futures::future::join_all;
use rdkafka::error::KafkaError;
use rdkafka::message::{Header, OwnedHeaders};
use std::time::Duration;

/// One record to send.
#[derive(Debug, Clone, Copy)]
pub struct OutputWrite<'a> {
    pub topic: &'a str,
    pub key: &'a [u8],
    pub value: &'a [u8],
    pub headers: &'a [(String, Vec<u8>)],
    /// The id header's name and value.
    pub id: (&'a str, &'a str),
}

/// Why records were not all sent.
#[derive(Debug, thiserror::Error)]
#[error("records to topic {topic:?} not acknowledged: {source}")]
pub struct OutputSendFailed {
    pub topic: String,
    pub source: KafkaError,
}

/// Sends the outputs of a node's durable entity types.
pub struct OutputProducer {
    producer: AwaitedProducer,
    bootstrap_servers: String,
    client: Vec<(String, String)>,
    timeout: Duration,
}

impl std::fmt::Debug for OutputProducer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OutputProducer")
            .field("bootstrap_servers", &self.bootstrap_servers)
            .finish_non_exhaustive()
    }
}

impl OutputProducer {
    /// A producer to the brokers of `bootstrap_servers`; `client` are the
    /// node's pass-through properties (security and the like). `timeout`
    /// bounds a send (the broker's acknowledgement of every record).
    ///
    /// # Errors
    /// librdkafka refuses the configuration.
    pub fn new(
        bootstrap_servers: &str,
        client: &[(String, String)],
        timeout: Duration,
    ) -> Result<Self, SourceError> {
        let mut config = crate::client::non_consumer_config(bootstrap_servers, client);
        let within = timeout.as_millis().max(1).to_string();
        config
            .set("enable.idempotence", "true")
            .set("partitioner", PARTITIONER)
            .set("message.timeout.ms", &within)
            .set("request.timeout.ms", &within);
        let producer = AwaitedProducer::new(&config)?;
        Ok(Self {
            producer,
            bootstrap_servers: bootstrap_servers.to_string(),
            client: client.to_vec(),
            timeout,
        })
    }

    /// Checks that each of `topics` exists and is not refused to this
    /// client. Blocking.
    ///
    /// # Errors
    /// The first topic missing or refused, or the broker not answering.
    pub fn check(&self, topics: &[String]) -> Result<(), SourceError> {
        for topic in topics {
            crate::topics::check_topic_usable(
                &self.bootstrap_servers,
                &self.client,
                topic,
                self.timeout,
            )?;
        }
        Ok(())
    }

    /// Sends `records`; returns once the broker has them all.
    ///
    /// # Errors
    /// A record was not acknowledged within the timeout: the caller sends
    /// them all again.
    pub async fn send(&self, records: &[OutputWrite<'_>]) -> Result<(), OutputSendFailed> {
        let by = tokio::time::Instant::now() + self.timeout;
        let mut pending = Vec::with_capacity(records.len());
        for write in records {
            let failed = |source| OutputSendFailed {
                topic: write.topic.to_string(),
                source,
            };
            let (record, delivery) = output_record(write);
            self.producer.send_by(record, by).await.map_err(failed)?;
            pending.push((write.topic, delivery));
        }
        let (topics, deliveries): (Vec<&str>, Vec<_>) = pending.into_iter().unzip();
        for (topic, delivered) in topics.into_iter().zip(join_all(deliveries).await) {
            let source = match delivered {
                Ok(Ok(_)) => continue,
                Ok(Err(e)) => e,
                Err(_) => KafkaError::Canceled,
            };
            return Err(OutputSendFailed {
                topic: topic.to_string(),
                source,
            });
        }
        Ok(())
    }
}

/// An output as librdkafka's record: the handler's headers, then the id's.
pub(crate) fn output_record<'a>(
    write: &OutputWrite<'a>,
) -> (
    crate::deliveries::AwaitedRecord<'a, [u8], [u8]>,
    crate::deliveries::Delivery,
) {
    let (record, delivery) = AwaitedProducer::record::<[u8], [u8]>(write.topic);
    let mut headers = OwnedHeaders::new_with_capacity(write.headers.len() + 1);
    for (name, value) in write.headers {
        headers = headers.insert(Header {
            key: name,
            value: Some(value),
        });
    }
    headers = headers.insert(Header {
        key: write.id.0,
        value: Some(write.id.1),
    });
    (
        record.key(write.key).payload(write.value).headers(headers),
        delivery,
    )
}

/// One record read back from an output topic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutputRead {
    pub partition: i32,
    pub offset: i64,
    pub key: Vec<u8>,
    pub value: Vec<u8>,
    /// The value of its `id_header`, if it has one.
    pub id: Option<String>,
}

/// Reads every committed record of `topic` (`read_committed`: a record of
/// a transaction that aborted, or has not committed yet, is not read), up
/// to each partition's end when the read begins, with the value of its
/// `id_header`. Blocking: what `colo verify` and the tests check outputs
/// with.
///
/// # Errors
/// The topic cannot be found or read, or a partition gives no record for
/// `timeout` before its end.
pub fn read_outputs(
    bootstrap_servers: &str,
    client: &[(String, String)],
    topic: &str,
    id_header: &str,
    timeout: Duration,
) -> Result<Vec<OutputRead>, SourceError> {
    use rdkafka::consumer::{BaseConsumer, Consumer};
    use rdkafka::message::{Headers, Message};
    use rdkafka::{Offset, TopicPartitionList};

    let consumer: BaseConsumer<crate::changelog::Reader> = crate::client::client_config(client)
        .set("bootstrap.servers", bootstrap_servers)
        .set(
            "group.id",
            format!("colo-read-outputs-{}", std::process::id()),
        )
        .set("enable.auto.commit", "false")
        .set("isolation.level", "read_committed")
        .set("enable.partition.eof", "true")
        .set("allow.auto.create.topics", "false")
        .create_with_context(crate::changelog::Reader)?;
    crate::topics::check_topic_usable(bootstrap_servers, client, topic, timeout)?;
    let metadata = consumer.fetch_metadata(Some(topic), timeout)?;
    let partitions: Vec<i32> = metadata
        .topics()
        .iter()
        .filter(|t| t.name() == topic)
        .flat_map(|t| t.partitions().iter().map(|p| p.id()))
        .collect();
    let mut open = std::collections::BTreeSet::new();
    let mut assignment = TopicPartitionList::new();
    for partition in partitions {
        let (low, high) = consumer.fetch_watermarks(topic, partition, timeout)?;
        if high > low {
            open.insert(partition);
            assignment.add_partition_offset(topic, partition, Offset::Offset(low))?;
        }
    }
    consumer.assign(&assignment)?;
    let mut read = Vec::new();
    let mut last = std::time::Instant::now();
    // Until each partition reports its end: under read_committed, its
    // last stable offset (a transaction's markers take offsets no reader
    // is given).
    while !open.is_empty() {
        if last.elapsed() > timeout {
            return Err(KafkaError::MessageConsumption(
                rdkafka::types::RDKafkaErrorCode::OperationTimedOut,
            )
            .into());
        }
        let message = match consumer.poll(Duration::from_millis(100)) {
            None => continue,
            Some(Err(KafkaError::PartitionEOF(partition))) => {
                open.remove(&partition);
                continue;
            }
            Some(message) => message?,
        };
        last = std::time::Instant::now();
        let id = message.headers().and_then(|headers| {
            headers
                .iter()
                .find(|h| h.key == id_header)
                .and_then(|h| h.value)
                .map(|v| String::from_utf8_lossy(v).into_owned())
        });
        read.push(OutputRead {
            partition: message.partition(),
            offset: message.offset(),
            key: message.key().unwrap_or_default().to_vec(),
            value: message.payload().unwrap_or_default().to_vec(),
            id,
        });
    }
    Ok(read)
}
