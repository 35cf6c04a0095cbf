//! The store trait and how a data directory picks its engine.

use crate::batch::WriteBatch;
use crate::error::StoreError;
use crate::{fjall_engine, keys, sled_engine};
use colo_allocation::ShardId;
use std::ops::ControlFlow;
use std::path::Path;

/// What the runtime asks of a node's state store. Every call blocks on
/// disk: call it from a blocking thread, never from an async task.
pub trait StateStore: Send + Sync + std::fmt::Debug {
    /// Applies every op of the batch, all or nothing, durably: once this
    /// returns `Ok`, the batch survives a crash of the process or machine.
    ///
    /// # Errors
    /// The write failed (disk full, I/O error); nothing of it was applied.
    fn write(&self, batch: &WriteBatch) -> Result<(), StoreError>;

    /// An entity's stored value, if it has one.
    ///
    /// # Errors
    /// The read failed.
    fn load(
        &self,
        entity_type: &str,
        shard: ShardId,
        entity_id: &str,
    ) -> Result<Option<Vec<u8>>, StoreError>;

    /// Visits every entity of a shard in id order, until `visit` breaks.
    ///
    /// # Errors
    /// The read failed, or a stored key is not an entity id.
    fn scan(
        &self,
        entity_type: &str,
        shard: ShardId,
        visit: &mut dyn FnMut(&str, &[u8]) -> ControlFlow<()>,
    ) -> Result<(), StoreError>;

    /// How far the shard's changelog is reflected here, if it ever was.
    ///
    /// # Errors
    /// The read failed.
    fn checkpoint(&self, entity_type: &str, shard: ShardId) -> Result<Option<u64>, StoreError>;

    /// The engine's name, for logs and metrics.
    fn engine(&self) -> Engine;
}

/// The embedded database under a node's data directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Engine {
    /// fjall: the default, the faster on colo's workload (BENCHMARKS.md,
    /// "State store engines").
    #[default]
    Fjall,
    /// sled 0.34: the engine the project was specified with.
    Sled,
}

impl Engine {
    pub const ALL: [Engine; 2] = [Engine::Fjall, Engine::Sled];

    pub fn name(self) -> &'static str {
        match self {
            Engine::Fjall => "fjall",
            Engine::Sled => "sled",
        }
    }

    /// What this engine keeps under the data directory.
    fn file_name(self) -> &'static str {
        match self {
            Engine::Fjall => "state.fjall",
            Engine::Sled => "state.sled",
        }
    }
}

impl std::fmt::Display for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Engine {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Engine::ALL
            .into_iter()
            .find(|e| e.name() == s)
            .ok_or_else(|| format!("unknown state engine {s:?}: expected fjall or sled"))
    }
}

/// Opens (or creates) the store of a data directory with `engine`.
///
/// A directory that already holds the other engine's store is refused
/// rather than silently started empty beside it: switching engines would
/// otherwise look like every entity's state vanished.
///
/// # Errors
/// The directory cannot be created or used, holds the other engine's store,
/// or the database cannot be opened (corrupt, or locked by another node).
pub fn open(data_dir: &Path, engine: Engine) -> Result<Box<dyn StateStore>, StoreError> {
    std::fs::create_dir_all(data_dir).map_err(|e| StoreError::DataDir {
        path: data_dir.to_path_buf(),
        reason: e.to_string(),
    })?;
    for other in Engine::ALL.into_iter().filter(|e| *e != engine) {
        let theirs = data_dir.join(other.file_name());
        if theirs.exists() {
            return Err(StoreError::DataDir {
                path: data_dir.to_path_buf(),
                reason: format!(
                    "it holds a {other} store ({}) but state.engine is {engine}: set state.engine = \"{other}\", or move that store away to start empty",
                    theirs.display()
                ),
            });
        }
    }
    let path = data_dir.join(engine.file_name());
    Ok(match engine {
        Engine::Fjall => Box::new(fjall_engine::FjallStore::open(&path)?),
        Engine::Sled => Box::new(sled_engine::SledStore::open(&path)?),
    })
}

/// Hands a shard's entities, as an engine's range over its entity keys
/// yields them, to a scan's visitor until it breaks.
pub(crate) fn visit_entities<K: AsRef<[u8]>, V: AsRef<[u8]>>(
    entity_type: &str,
    shard: ShardId,
    entries: impl Iterator<Item = Result<(K, V), StoreError>>,
    visit: &mut dyn FnMut(&str, &[u8]) -> ControlFlow<()>,
) -> Result<(), StoreError> {
    for entry in entries {
        let (key, value) = entry?;
        let id = keys::entity_id(key.as_ref()).ok_or_else(|| StoreError::Key {
            entity_type: entity_type.to_string(),
            shard: shard.0,
        })?;
        if visit(id, value.as_ref()).is_break() {
            break;
        }
    }
    Ok(())
}
