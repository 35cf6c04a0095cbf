//! A cluster's internal data on the brokers, for `colo
//! remove-internal-data`: its topics found by name, whether any member of
//! its consumer groups is alive, and topics deleted.

use crate::client::{client_config, non_consumer_config};
use crate::error::SourceError;
use rdkafka::consumer::{BaseConsumer, Consumer};
use std::time::Duration;

/// A consumer group with members now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LiveGroup {
    pub name: String,
    /// Each member as `client id @ host` (its member id where the broker
    /// says neither).
    pub members: Vec<String>,
}

fn consumer(
    bootstrap_servers: &str,
    client: &[(String, String)],
) -> Result<BaseConsumer, SourceError> {
    Ok(client_config(client)
        .set("bootstrap.servers", bootstrap_servers)
        .create()?)
}

/// The names of the topics that `keep` keeps, sorted. Blocking.
///
/// # Errors
/// The brokers cannot be reached within `timeout`.
pub fn topics_named(
    bootstrap_servers: &str,
    client: &[(String, String)],
    keep: &dyn Fn(&str) -> bool,
    timeout: Duration,
) -> Result<Vec<String>, SourceError> {
    let metadata = consumer(bootstrap_servers, client)?.fetch_metadata(None, timeout)?;
    let mut names: Vec<String> = metadata
        .topics()
        .iter()
        .filter(|t| t.error().is_none() && keep(t.name()))
        .map(|t| t.name().to_string())
        .collect();
    names.sort();
    Ok(names)
}

/// The address (`host:port`) of every broker the cluster lists now, as
/// clients reach them. Blocking.
///
/// # Errors
/// The brokers cannot be reached within `timeout`.
pub fn broker_addresses(
    bootstrap_servers: &str,
    client: &[(String, String)],
    timeout: Duration,
) -> Result<Vec<String>, SourceError> {
    let metadata = consumer(bootstrap_servers, client)?.fetch_metadata(None, timeout)?;
    Ok(metadata
        .brokers()
        .iter()
        .map(|b| format!("{}:{}", b.host(), b.port()))
        .collect())
}

/// The consumer groups whose name starts with `prefix` and that have
/// members now, as the brokers list and describe groups. Blocking.
///
/// # Errors
/// The brokers cannot be reached within `timeout`.
pub fn live_groups(
    bootstrap_servers: &str,
    client: &[(String, String)],
    prefix: &str,
    timeout: Duration,
) -> Result<Vec<LiveGroup>, SourceError> {
    let groups = consumer(bootstrap_servers, client)?.fetch_group_list(None, timeout)?;
    let mut live: Vec<LiveGroup> = groups
        .groups()
        .iter()
        .filter(|g| g.name().starts_with(prefix) && !g.members().is_empty())
        .map(|g| LiveGroup {
            name: g.name().to_string(),
            members: g
                .members()
                .iter()
                .map(|m| match (m.client_id(), m.client_host()) {
                    ("", _) => m.id().to_string(),
                    (client, host) => format!("{client} @ {host}"),
                })
                .collect(),
        })
        .collect();
    live.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(live)
}

/// Deletes `topics`; one already gone counts as deleted.
///
/// # Errors
/// The brokers cannot be reached, or refused to delete one (its name and
/// the broker's code).
pub async fn delete_topics(
    bootstrap_servers: &str,
    client: &[(String, String)],
    topics: &[String],
    timeout: Duration,
) -> Result<(), SourceError> {
    use rdkafka::admin::{AdminClient, AdminOptions};
    use rdkafka::client::DefaultClientContext;
    use rdkafka::types::RDKafkaErrorCode;

    if topics.is_empty() {
        return Ok(());
    }
    let admin: AdminClient<DefaultClientContext> =
        non_consumer_config(bootstrap_servers, client).create()?;
    let names: Vec<&str> = topics.iter().map(String::as_str).collect();
    let options = AdminOptions::new().operation_timeout(Some(timeout));
    for result in admin.delete_topics(&names, &options).await? {
        match result {
            Ok(_) | Err((_, RDKafkaErrorCode::UnknownTopicOrPartition)) => {}
            Err((name, code)) => {
                tracing::error!(topic = %name, ?code, "topic not deleted");
                return Err(SourceError::Kafka(rdkafka::error::KafkaError::AdminOp(
                    code,
                )));
            }
        }
    }
    Ok(())
}
