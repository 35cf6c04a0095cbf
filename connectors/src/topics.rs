//! Topic metadata the source checks before it subscribes: every topic of an
//! entity type must exist with the entity type's number of shards as its
//! partition count (shard = partition).

use crate::client::client_config;
use crate::dead_letters::consumer_only;
use crate::source::{SourceError, SourceSettings};
use rdkafka::consumer::{BaseConsumer, Consumer};
use std::collections::BTreeMap;
use std::time::Duration;

/// Why a topic does not fit the entity type.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TopicError {
    /// The broker does not know the topic.
    #[error("topic {topic:?} does not exist")]
    Missing { topic: String },
    /// Shard = partition: the counts must be equal.
    #[error("topic {topic:?} has {partitions} partitions but the entity type has {number_of_shards} shards; they must be equal")]
    PartitionCount {
        topic: String,
        partitions: usize,
        number_of_shards: u32,
    },
}

/// The partition count of each of `settings.topics`, from the broker's
/// metadata.
///
/// # Errors
/// The broker cannot be reached within `timeout`.
pub fn partition_counts(
    settings: &SourceSettings,
    timeout: Duration,
) -> Result<BTreeMap<String, Option<usize>>, SourceError> {
    let consumer: BaseConsumer = client_config(&settings.client)
        .set("bootstrap.servers", &settings.bootstrap_servers)
        .create()?;
    let mut counts = BTreeMap::new();
    for topic in &settings.topics {
        let metadata = consumer.fetch_metadata(Some(topic), timeout)?;
        let found = metadata
            .topics()
            .iter()
            .find(|t| t.name() == topic && t.error().is_none())
            .map(|t| t.partitions().len())
            .filter(|&n| n > 0);
        counts.insert(topic.clone(), found);
    }
    Ok(counts)
}

/// Checks every topic against the entity type's number of shards.
///
/// # Errors
/// The first topic that is missing or has another partition count.
pub fn check_partition_counts(
    counts: &BTreeMap<String, Option<usize>>,
    number_of_shards: u32,
) -> Result<(), TopicError> {
    for (topic, count) in counts {
        match count {
            None => {
                return Err(TopicError::Missing {
                    topic: topic.clone(),
                })
            }
            Some(n) if *n != number_of_shards as usize => {
                return Err(TopicError::PartitionCount {
                    topic: topic.clone(),
                    partitions: *n,
                    number_of_shards,
                })
            }
            Some(_) => {}
        }
    }
    Ok(())
}

/// A topic to create if it is missing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewTopicSpec {
    pub name: String,
    pub partitions: i32,
    pub replication_factor: i32,
}

/// Creates those of `topics` that do not exist; one that exists is left as
/// it is (its partition count is checked when the source starts).
///
/// # Errors
/// The broker refused a creation for another reason than the topic
/// existing, or did not answer within `timeout`.
pub async fn create_missing_topics(
    bootstrap_servers: &str,
    client: &[(String, String)],
    topics: &[NewTopicSpec],
    timeout: Duration,
) -> Result<Vec<String>, SourceError> {
    use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
    use rdkafka::client::DefaultClientContext;
    use rdkafka::types::RDKafkaErrorCode;

    if topics.is_empty() {
        return Ok(Vec::new());
    }
    let admin: AdminClient<DefaultClientContext> =
        client_config(client.iter().filter(|(key, _)| !consumer_only(key)))
            .set("bootstrap.servers", bootstrap_servers)
            .create()?;
    let new: Vec<NewTopic<'_>> = topics
        .iter()
        .map(|t| {
            NewTopic::new(
                &t.name,
                t.partitions,
                TopicReplication::Fixed(t.replication_factor),
            )
        })
        .collect();
    let options = AdminOptions::new().operation_timeout(Some(timeout));
    let results = admin.create_topics(new.iter(), &options).await?;
    let mut created = Vec::new();
    for result in results {
        match result {
            Ok(name) => created.push(name),
            Err((_, RDKafkaErrorCode::TopicAlreadyExists)) => {}
            Err((name, code)) => {
                return Err(SourceError::Kafka(rdkafka::error::KafkaError::AdminOp(
                    code,
                )))
                .map_err(|e| {
                    tracing::error!(topic = %name, error = %e, "topic not created");
                    e
                })
            }
        }
    }
    Ok(created)
}
