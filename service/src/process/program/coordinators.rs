//! Hosting the coordinators: on the node that the config names, or on the
//! node elected through Kafka (`program/candidacy.rs`).

use super::ProgramError;
use crate::coordinator::hosting::StaticHosting;
use crate::coordinator::store::{CoordinatorStore, InMemoryStore};
use crate::coordinator::CoordinatorHandle;
use crate::kafka::KafkaCoordinatorStore;
use crate::process::config::NodeConfig;
use crate::settings::ShardingSettings;
use colo_allocation::{
    AllocationStrategy, ExternalAllocationClient, ExternalAllocationStrategy,
    LeastShardAllocationStrategy,
};
use colo_connectors::Changelog;
use std::sync::Arc;
use std::time::Duration;

/// How long creating the coordinator topic may take.
const CREATE_TIMEOUT: Duration = Duration::from_secs(30);

/// This node hosts the coordinators: one per entity type it runs. Its
/// epoch is the start time, so a restarted coordinator outranks the one
/// before it.
///
/// With `[kafka]`, each keeps its state on the cluster's coordinator topic
/// (`kafka/coordinator_store.rs`): a restarted coordinator reads it back.
/// Without, the state is in memory and lost when the node restarts, while
/// the other nodes may still run shards. A marker in the data directory
/// says whether this node has hosted the coordinator before: if it has, the
/// coordinator waits `region_timeout` for the regions to report what they
/// run before it places other shards; a brand-new cluster places shards at
/// once.
/// An entity type whose coordinator this node hosts.
pub(super) struct Hosted {
    pub name: String,
    pub settings: ShardingSettings,
    /// Kafka drives it: its consumer group's assignment places its shards
    /// (the external allocation strategy), not least-shard.
    pub follows_partitions: bool,
}

/// The coordinators are hosted by another node: this one's metrics say so.
pub(super) fn hosted_elsewhere(entity_types: &[Hosted]) {
    for entity_type in entity_types {
        crate::metrics::coordinator_hosted(&entity_type.name, false);
    }
}

/// With `[kafka]`, the cluster's coordinator topic: created if missing
/// (it is colo's own, like a stream processor's internal topics, whatever
/// `kafka.create_topics` says), then checked off the runtime.
pub(super) async fn topic(config: &NodeConfig) -> Result<Option<Arc<Changelog>>, ProgramError> {
    let Some(kafka) = &config.kafka else {
        return Ok(None);
    };
    let name = kafka.coordinator_topic();
    let (servers, client) = (kafka.bootstrap_servers.clone(), kafka.client_properties());
    let wanted = name.clone();
    // Listed from the metadata of every topic: asking for the one topic
    // would have a broker that creates topics on demand make it with its
    // default partition count.
    let existing = tokio::task::spawn_blocking(move || {
        colo_connectors::topics_named(&servers, &client, &|t| t == wanted, CREATE_TIMEOUT)
    })
    .await
    .map_err(|e| ProgramError::Settings(format!("coordinator topic: {e}")))?
    .map_err(|e| ProgramError::Settings(format!("the brokers: {e}")))?;
    if existing.is_empty() {
        let spec = colo_connectors::NewTopicSpec {
            name: name.clone(),
            partitions: 1,
            replication_factor: kafka.replication_factor,
            config: colo_connectors::CHANGELOG_CONFIG
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        };
        colo_connectors::create_missing_topics(
            &kafka.bootstrap_servers,
            &kafka.client_properties(),
            &[spec],
            CREATE_TIMEOUT,
        )
        .await
        .map_err(|e| {
            ProgramError::Settings(format!(
                "the coordinator topic {name:?} could not be created: {e}"
            ))
        })?;
    } else {
        // Listed by the broker asked; another node may have created it a
        // moment ago, and the check below may ask another broker.
        colo_connectors::await_listed(
            &kafka.bootstrap_servers,
            &kafka.client_properties(),
            std::slice::from_ref(&name),
            CREATE_TIMEOUT,
        )
        .await
        .map_err(|e| ProgramError::Settings(format!("the coordinator topic {name:?}: {e}")))?;
    }
    let config = config.clone();
    let log = tokio::task::spawn_blocking(move || super::ingest::coordinator_log(&config))
        .await
        .map_err(|e| ProgramError::Settings(format!("coordinator topic: {e}")))??;
    Ok(Some(Arc::new(log)))
}

pub(super) async fn host(
    config: &NodeConfig,
    entity_types: &[Hosted],
    hosting: &StaticHosting,
) -> Result<(), ProgramError> {
    let log = topic(config).await?;
    let epoch = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(1, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
    let data_dir = config.data_dir();
    for Hosted {
        name,
        settings,
        follows_partitions,
    } in entity_types
    {
        let store: Arc<dyn CoordinatorStore> = match &log {
            // The topic keeps the state across restarts and nodes.
            Some(log) => Arc::new(KafkaCoordinatorStore::new(log.clone(), name, epoch)),
            None => {
                let marker = data_dir.join(format!("coordinator-{name}.started"));
                let store = if marker.exists() {
                    InMemoryStore::after_loss()
                } else {
                    InMemoryStore::new()
                };
                std::fs::create_dir_all(&data_dir)
                    .and_then(|()| std::fs::write(&marker, format!("{epoch}\n")))
                    .map_err(|source| ProgramError::DataDir {
                        path: marker.clone(),
                        source,
                    })?;
                Arc::new(store)
            }
        };
        let handle = spawn(config, name, settings, *follows_partitions, store)?;
        hosting.host(handle, epoch);
        crate::metrics::coordinator_hosted(name, true);
    }
    tracing::info!(
        entity_types = entity_types.len(),
        epoch,
        "hosting the coordinators"
    );
    Ok(())
}

/// Starts the coordinator of one entity type on `store`.
pub(super) fn spawn(
    config: &NodeConfig,
    name: &str,
    settings: &ShardingSettings,
    follows_partitions: bool,
    store: Arc<dyn CoordinatorStore>,
) -> Result<CoordinatorHandle, ProgramError> {
    let strategy: Box<dyn AllocationStrategy> = if follows_partitions {
        Box::new(ExternalAllocationStrategy::new(
            ExternalAllocationClient::new(),
        ))
    } else {
        Box::new(
            LeastShardAllocationStrategy::new(config.least_shard_settings())
                .map_err(|e| ProgramError::Settings(format!("coordinator.least_shard: {e}")))?,
        )
    };
    CoordinatorHandle::spawn(name, settings.clone(), strategy, store)
        .map_err(|e| ProgramError::Settings(format!("sharding.{}: {}", e.field, e.reason)))
}
