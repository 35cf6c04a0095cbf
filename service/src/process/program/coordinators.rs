//! Hosting the coordinators: on the node that the config names, or on the
//! node elected through Kafka (`program/kafka/candidacy.rs`).

use super::ProgramError;
use crate::coordinator::hosting::StaticHosting;
use crate::coordinator::store::{CoordinatorStore, InMemoryStore};
use crate::coordinator::CoordinatorHandle;
use crate::process::config::NodeConfig;
use crate::settings::ShardingSettings;
use colo_allocation::{
    AllocationStrategy, ExternalAllocationClient, ExternalAllocationStrategy,
    LeastShardAllocationStrategy,
};
use std::sync::Arc;

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

/// Each entity type's coordinator store on the cluster's coordinator
/// topic, given its name and the coordinator's epoch (`[kafka]`'s, from
/// `program/kafka.rs`).
pub(super) type TopicStores = Box<dyn Fn(&str, u64) -> Arc<dyn CoordinatorStore> + Send + Sync>;

/// This node hosts the coordinators: one per entity type it runs. Its
/// epoch is the start time, so a restarted coordinator outranks the one
/// before it.
///
/// With `[kafka]`, each keeps its state on the cluster's coordinator topic
/// (`on_topic`, the runtime's `kafka/coordinator_store.rs`): a restarted
/// coordinator reads it back. Without, the state is in memory and lost
/// when the node restarts, while the other nodes may still run shards. A
/// marker in the data directory says whether this node has hosted the
/// coordinator before: if it has, the coordinator waits `region_timeout`
/// for the regions to report what they run before it places other shards;
/// a brand-new cluster places shards at once.
pub(super) fn host(
    config: &NodeConfig,
    entity_types: &[Hosted],
    hosting: &StaticHosting,
    on_topic: Option<TopicStores>,
) -> Result<(), ProgramError> {
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
        let store: Arc<dyn CoordinatorStore> = match &on_topic {
            // The topic keeps the state across restarts and nodes.
            Some(on_topic) => on_topic(name, epoch),
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
