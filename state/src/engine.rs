//! The store trait every engine implements, and the engines' names.

use crate::batch::{Checkpoint, TimerKey, WriteBatch};
use crate::error::StoreError;
use crate::keys;
use colo_allocation::ShardId;
use std::ops::ControlFlow;

/// What the runtime asks of a node's state store. Every call blocks on
/// disk: call it from a blocking thread, never from an async task.
pub trait StateStore: Send + Sync + std::fmt::Debug {
    /// Applies every op of the batch, all or nothing, durably: once this
    /// returns `Ok`, the batch survives a crash of the process or machine.
    ///
    /// # Errors
    /// The write failed (disk full, I/O error); nothing of it was applied.
    fn write(&self, batch: &WriteBatch) -> Result<(), StoreError> {
        self.write_all(std::slice::from_ref(batch))
    }

    /// Applies several batches (of any entity types) with one durable
    /// commit: a node's shards that write at the same time share one sync
    /// to disk (group commit) instead of one each. Each batch is applied
    /// all or nothing; once this returns `Ok`, all of them survive a crash.
    ///
    /// # Errors
    /// The write failed; a batch may have been applied without being made
    /// durable, so the caller writes all of them again (every op can be
    /// applied twice to the same effect).
    fn write_all(&self, batches: &[WriteBatch]) -> Result<(), StoreError>;

    /// Applies every op of the batch, all or nothing, without waiting for
    /// the disk: a crash may lose it whole (never part of it). For what
    /// can be read again from elsewhere, such as a standby's copy of a
    /// changelog, whose checkpoint is lost with the states it covers.
    ///
    /// # Errors
    /// The write failed; nothing of it was applied.
    fn write_unsynced(&self, batch: &WriteBatch) -> Result<(), StoreError> {
        self.write(batch)
    }

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

    /// Visits a shard's timers in the order they are due, from the first
    /// after `after` (from the first of all without one), until `visit`
    /// breaks: a caller that stops at the first timer not due yet reads
    /// only what is due.
    ///
    /// # Errors
    /// The read failed, or a stored key is not a timer's.
    fn timers(
        &self,
        entity_type: &str,
        shard: ShardId,
        after: Option<&TimerKey>,
        visit: &mut dyn FnMut(TimerKey, &[u8]) -> ControlFlow<()>,
    ) -> Result<(), StoreError>;

    /// How far the shard's changelog is reflected here, if it ever was.
    ///
    /// # Errors
    /// The read failed.
    fn checkpoint(
        &self,
        entity_type: &str,
        shard: ShardId,
    ) -> Result<Option<Checkpoint>, StoreError>;

    /// The engine's name, for logs and metrics.
    fn engine(&self) -> Engine;
}

/// The embedded database under a node's data directory; also the value of
/// a node's `state.engine` setting, so the list is written only here.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Engine {
    /// fjall: the default, the faster on the store benchmark's model of
    /// colo's workload (BENCHMARKS.md, "State store engines").
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
    pub(crate) fn file_name(self) -> &'static str {
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

/// The bounds of a scan of a shard's timers after `after`.
pub(crate) fn timers_bounds(
    shard: ShardId,
    after: Option<&TimerKey>,
) -> (std::ops::Bound<Vec<u8>>, std::ops::Bound<Vec<u8>>) {
    use std::ops::Bound;
    let (first, end) = keys::timers_of(shard);
    let start = match after {
        Some(timer) => Bound::Excluded(keys::timer_key(shard, timer)),
        None => Bound::Included(first.to_vec()),
    };
    (start, Bound::Excluded(end.to_vec()))
}

/// Hands a shard's timers, as an engine's range over its timer keys yields
/// them, to a scan's visitor until it breaks.
pub(crate) fn visit_timers<K: AsRef<[u8]>, V: AsRef<[u8]>>(
    entity_type: &str,
    shard: ShardId,
    entries: impl Iterator<Item = Result<(K, V), StoreError>>,
    visit: &mut dyn FnMut(TimerKey, &[u8]) -> ControlFlow<()>,
) -> Result<(), StoreError> {
    for entry in entries {
        let (key, value) = entry?;
        let (due, id, name) = keys::decode_timer(key.as_ref()).ok_or_else(|| StoreError::Key {
            entity_type: entity_type.to_string(),
            shard: shard.0,
        })?;
        let timer = TimerKey {
            due,
            entity_id: id.to_string(),
            name: name.to_string(),
        };
        if visit(timer, value.as_ref()).is_break() {
            break;
        }
    }
    Ok(())
}
