//! The node's state store, opened when an entity type it runs is durable,
//! with the changelog of each durable type when the node has `[kafka]`,
//! and the producer of their outputs when one emits records.

use super::{kafka, roles, ProgramError, Registration};
use crate::process::config::NodeConfig;
use crate::store::NodeStore;

/// The node's state store, when an entity type it hosts is durable: one
/// per node, under `node.data_dir`, opened on a blocking thread. A type
/// this node only routes to (a proxy, or another role's) needs none.
pub(super) async fn open_store(
    config: &NodeConfig,
    entity_types: &[Box<dyn Registration>],
) -> Result<Option<NodeStore>, ProgramError> {
    let durable: Vec<kafka::DurableType> = entity_types
        .iter()
        .filter(|t| t.is_durable() && roles::hosts(config, t.as_ref()))
        .map(|t| kafka::DurableType {
            name: t.name().to_string(),
            number_of_shards: t.settings().number_of_shards,
            emits: !t.outputs().is_empty(),
        })
        .collect();
    if durable.is_empty() {
        return Ok(None);
    }
    let mut outputs: Vec<String> = entity_types
        .iter()
        .filter(|t| t.is_durable() && roles::hosts(config, t.as_ref()))
        .flat_map(|t| t.outputs().iter().cloned())
        .collect();
    outputs.sort();
    outputs.dedup();
    let dir = config.data_dir();
    let settings = config.state;
    let changelog_config = config.clone();
    let opened = tokio::task::spawn_blocking(move || {
        let changelogs = kafka::changelogs(&changelog_config, &durable)?;
        let producer = kafka::outputs(&changelog_config, &outputs)?;
        let mut store = NodeStore::open(&dir, settings)?;
        for (name, changelog) in changelogs {
            store = store.with_changelog(&name, changelog);
        }
        if let Some(producer) = producer {
            store = store.with_outputs(producer);
        }
        Ok::<_, ProgramError>(store)
    })
    .await
    .map_err(|e| ProgramError::Settings(format!("opening the state store: {e}")))??;
    tracing::info!(data_dir = %config.data_dir().display(), engine = %settings.engine, flush_interval = ?settings.flush_interval, max_dirty = settings.max_dirty, store = ?opened, "state store open");
    Ok(Some(opened))
}
