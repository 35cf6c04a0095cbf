//! Topic metadata the source checks before it subscribes: every topic of an
//! entity type must exist with the entity type's number of shards as its
//! partition count (shard = partition).

use crate::client::{client_config, non_consumer_config};
use crate::error::{SourceError, TopicError};
use crate::source::SourceSettings;
use rdkafka::consumer::{BaseConsumer, Consumer};
use std::collections::BTreeMap;
use std::time::Duration;

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

/// Checks, from the broker's metadata, that `topic` exists and that the
/// broker lets this client use it. For a topic the node writes only when
/// something goes wrong, the dead-letter topic: found missing only then, a
/// partition would wait behind its first bad record, long after startup.
/// Metadata cannot tell a topic that may be read but not written; a broker
/// that hides the topic from the client (an authorization error) counts as
/// refusing writes.
///
/// # Errors
/// [`SourceError::Topic`] when the topic is missing or refused; the broker
/// not answering within `timeout`.
pub fn check_topic_usable(
    bootstrap_servers: &str,
    client: &[(String, String)],
    topic: &str,
    timeout: Duration,
) -> Result<(), SourceError> {
    use rdkafka::types::RDKafkaErrorCode;

    // A consumer, not a producer: its metadata requests never create the
    // topic on a broker that creates topics on first use.
    let consumer: BaseConsumer = client_config(client)
        .set("bootstrap.servers", bootstrap_servers)
        .set("allow.auto.create.topics", "false")
        .create()?;
    let metadata = consumer.fetch_metadata(Some(topic), timeout)?;
    let found = metadata.topics().iter().find(|t| t.name() == topic);
    let missing = || TopicError::Missing {
        topic: topic.to_string(),
    };
    let Some(found) = found else {
        return Err(missing().into());
    };
    match found.error().map(RDKafkaErrorCode::from) {
        None if found.partitions().is_empty() => Err(missing().into()),
        None => Ok(()),
        Some(RDKafkaErrorCode::UnknownTopicOrPartition | RDKafkaErrorCode::UnknownTopic) => {
            Err(missing().into())
        }
        Some(
            code @ (RDKafkaErrorCode::TopicAuthorizationFailed
            | RDKafkaErrorCode::ClusterAuthorizationFailed),
        ) => Err(TopicError::Unauthorized {
            topic: topic.to_string(),
            code,
        }
        .into()),
        // A leader being elected, say: the topic is there, and a write
        // that fails later makes its partition wait, not skip.
        Some(code) => {
            tracing::warn!(%topic, error = %code, "topic metadata has an error; going on");
            Ok(())
        }
    }
}

/// A topic to create if it is missing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewTopicSpec {
    pub name: String,
    pub partitions: i32,
    pub replication_factor: i32,
    /// Topic configs, e.g. `cleanup.policy = compact`.
    pub config: Vec<(String, String)>,
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
        non_consumer_config(bootstrap_servers, client).create()?;
    let new: Vec<NewTopic<'_>> = topics
        .iter()
        .map(|t| {
            t.config.iter().fold(
                NewTopic::new(
                    &t.name,
                    t.partitions,
                    TopicReplication::Fixed(t.replication_factor),
                ),
                |topic, (key, value)| topic.set(key, value),
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
    // Those that existed already too: another node may have created them
    // a moment ago.
    let names: Vec<String> = topics.iter().map(|t| t.name.clone()).collect();
    await_listed(bootstrap_servers, client, &names, timeout).await?;
    Ok(created)
}

/// Waits until every broker lists `topics`. Kafka answers CreateTopics
/// (or says a topic exists) once its controller has the topics, and each
/// broker learns them from the metadata log a moment later, on its own:
/// a check of a topic just created (its partition count, at startup) must
/// not find it missing meanwhile, whichever broker answers it. Listed by
/// one broker is not enough: with three, a node's next check went to
/// another, which did not know the topic yet, and the node refused to
/// start. A broker that does not answer (one that is down and not fenced
/// yet) is not waited for.
pub async fn await_listed(
    bootstrap_servers: &str,
    client: &[(String, String)],
    topics: &[String],
    timeout: Duration,
) -> Result<(), SourceError> {
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        let (servers, client_owned, wanted) = (
            bootstrap_servers.to_string(),
            client.to_vec(),
            topics.to_vec(),
        );
        let missing = tokio::task::spawn_blocking(move || {
            missing_on_some_broker(&servers, &client_owned, &wanted, timeout)
        })
        .await
        // A listing that panicked lists nothing: asked again.
        .unwrap_or_else(|_| Ok(topics.to_vec()))?;
        let Some(first) = missing.into_iter().next() else {
            return Ok(());
        };
        if tokio::time::Instant::now() >= deadline {
            return Err(TopicError::Missing { topic: first }.into());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Those of `topics` that some answering broker of the cluster does not
/// list. Blocking.
fn missing_on_some_broker(
    bootstrap_servers: &str,
    client: &[(String, String)],
    topics: &[String],
    timeout: Duration,
) -> Result<Vec<String>, SourceError> {
    let listed = |servers: &str, timeout| {
        crate::cluster_data::topics_named(
            servers,
            client,
            &|name| topics.iter().any(|t| t == name),
            timeout,
        )
    };
    let mut missing: Vec<String> = Vec::new();
    let mut note = |listed: &[String]| {
        for topic in topics {
            if !listed.contains(topic) && !missing.contains(topic) {
                missing.push(topic.clone());
            }
        }
    };
    let brokers = crate::cluster_data::broker_addresses(bootstrap_servers, client, timeout)?;
    if brokers.is_empty() {
        note(&listed(bootstrap_servers, timeout)?);
    }
    for broker in brokers {
        // Asked alone: a client of the whole cluster asks any one broker.
        if let Ok(names) = listed(&broker, BROKER_ANSWER) {
            note(&names);
        }
    }
    Ok(missing)
}

/// How long one broker may take to list topics before it is taken for
/// down and not waited for.
const BROKER_ANSWER: Duration = Duration::from_secs(2);

#[cfg(test)]
mod tests {
    use super::*;
    use rdkafka::mocking::MockCluster;
    use rdkafka::types::RDKafkaRespErr;

    const TIMEOUT: Duration = Duration::from_secs(10);

    /// A dead-letter topic is written only when a record goes wrong: one
    /// that is missing or refused must stop the start, not the first bad
    /// record's partition.
    #[test]
    fn a_topic_to_write_must_exist_and_be_granted() {
        let broker = MockCluster::new(1).expect("mock cluster");
        let bootstrap = broker.bootstrap_servers();
        broker.create_topic("t.dlq", 1, 1).expect("topic");
        check_topic_usable(&bootstrap, &[], "t.dlq", TIMEOUT).expect("usable");

        let missing =
            check_topic_usable(&bootstrap, &[], "other.dlq", TIMEOUT).expect_err("missing");
        assert!(
            matches!(&missing, SourceError::Topic(TopicError::Missing { topic }) if topic == "other.dlq"),
            "{missing}"
        );
        // The check does not create what it looks for.
        let again = check_topic_usable(&bootstrap, &[], "other.dlq", TIMEOUT);
        assert!(
            matches!(again, Err(SourceError::Topic(TopicError::Missing { .. }))),
            "{again:?}"
        );

        broker.create_topic("denied.dlq", 1, 1).expect("topic");
        broker
            .topic_error(
                "denied.dlq",
                RDKafkaRespErr::RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED,
            )
            .expect("error set");
        let denied =
            check_topic_usable(&bootstrap, &[], "denied.dlq", TIMEOUT).expect_err("not authorized");
        assert!(
            matches!(&denied, SourceError::Topic(TopicError::Unauthorized { topic, .. }) if topic == "denied.dlq"),
            "{denied}"
        );
        assert!(denied.to_string().contains("\"denied.dlq\""), "{denied}");
    }
}
