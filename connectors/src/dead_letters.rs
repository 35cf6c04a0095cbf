//! The dead-letter topic: records that cannot be handled (undecodable, or a
//! handler that keeps failing) are written there with the reason and where
//! they came from, so a partition can go on without skipping anything
//! unrecorded.

use crate::deliveries::AwaitedProducer;
use crate::error::SourceError;
use crate::record::Record;
use rdkafka::error::KafkaError;
use rdkafka::message::{Header, OwnedHeaders};
use std::time::Duration;

/// The header naming why a record was dead-lettered.
pub const REASON_HEADER: &str = "colo.reason";
/// The headers naming where it came from.
pub const SOURCE_TOPIC_HEADER: &str = "colo.source.topic";
pub const SOURCE_PARTITION_HEADER: &str = "colo.source.partition";
pub const SOURCE_OFFSET_HEADER: &str = "colo.source.offset";

/// Writes records to one entity type's dead-letter topic.
#[derive(Clone)]
pub struct DeadLetters {
    producer: AwaitedProducer,
    topic: String,
    timeout: Duration,
}

impl std::fmt::Debug for DeadLetters {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeadLetters")
            .field("topic", &self.topic)
            .finish_non_exhaustive()
    }
}

impl DeadLetters {
    /// A producer for `topic`; `client` are the source's pass-through
    /// properties (security and the like).
    ///
    /// # Errors
    /// librdkafka refuses the configuration.
    pub fn new(
        bootstrap_servers: &str,
        client: &[(String, String)],
        topic: &str,
        timeout: Duration,
    ) -> Result<Self, SourceError> {
        let mut config = crate::client::non_consumer_config(bootstrap_servers, client);
        // A dead letter is written once or retried by the caller, and must
        // not be reordered behind a retry.
        config
            .set("enable.idempotence", "false")
            .set("message.timeout.ms", timeout.as_millis().max(1).to_string());
        let producer = AwaitedProducer::new(&config)?;
        Ok(Self {
            producer,
            topic: topic.to_string(),
            timeout,
        })
    }

    /// The dead-letter topic.
    pub fn topic(&self) -> &str {
        &self.topic
    }

    /// Writes `record` with `reason`; returns once the broker has it.
    ///
    /// # Errors
    /// The broker did not take it within the timeout.
    pub async fn send(
        &self,
        record: &Record,
        reason: &str,
    ) -> Result<(), rdkafka::error::KafkaError> {
        let partition = record.partition.to_string();
        let offset = record.offset.to_string();
        let headers = OwnedHeaders::new()
            .insert(Header {
                key: REASON_HEADER,
                value: Some(reason),
            })
            .insert(Header {
                key: SOURCE_TOPIC_HEADER,
                value: Some(&*record.topic),
            })
            .insert(Header {
                key: SOURCE_PARTITION_HEADER,
                value: Some(partition.as_str()),
            })
            .insert(Header {
                key: SOURCE_OFFSET_HEADER,
                value: Some(offset.as_str()),
            });
        let (mut letter, delivery) = AwaitedProducer::record::<[u8], [u8]>(&self.topic);
        letter = letter.headers(headers);
        if let Some(key) = record.key.as_deref() {
            letter = letter.key(key);
        }
        if let Some(payload) = record.payload.as_deref() {
            letter = letter.payload(payload);
        }
        // While librdkafka's queue is full, tried again up to the timeout.
        let by = tokio::time::Instant::now() + self.timeout;
        self.producer.send_by(letter, by).await?;
        match delivery.await {
            Ok(delivered) => delivered.map(drop),
            Err(_) => Err(KafkaError::Canceled),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::consumer_only;

    /// The source's pass-through properties of either group protocol reach
    /// the dead-letter producer without the consumer's: librdkafka would
    /// warn at every start about each property it ignores.
    #[test]
    fn the_producer_gets_the_shared_properties_and_not_the_consumers() {
        let client: Vec<(String, String)> = [
            ("group.protocol", "consumer"),
            ("group.remote.assignor", "uniform"),
            ("group.instance.id", "node-1"),
            ("group.protocol.type", "consumer"),
            ("session.timeout.ms", "10000"),
            ("max.poll.interval.ms", "300000"),
            ("fetch.wait.max.ms", "50"),
            ("security.protocol", "SASL_SSL"),
            ("sasl.mechanism", "SCRAM-SHA-256"),
            ("sasl.username", "colo"),
            ("sasl.password", "secret"),
            ("compression.type", "zstd"),
        ]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        let passed: Vec<&str> = client
            .iter()
            .map(|(k, _)| k.as_str())
            .filter(|k| !consumer_only(k))
            .collect();
        assert_eq!(
            passed,
            [
                "security.protocol",
                "sasl.mechanism",
                "sasl.username",
                "sasl.password",
                "compression.type"
            ]
        );
        let letters = DeadLetters::new("127.0.0.1:9", &client, "t.dlq", Duration::from_secs(1))
            .expect("librdkafka takes the producer's properties");
        assert_eq!(letters.topic(), "t.dlq");
    }
}
