//! The sled engine (0.34, the project's specified store): one tree per
//! entity type; a batch is one atomic `apply_batch`, and the batches of
//! one write are flushed to disk together before it returns.

use crate::batch::{Checkpoint, Op, TimerKey, WriteBatch};
use crate::engine::{timers_bounds, visit_entities, visit_timers, Engine, StateStore};
use crate::error::StoreError;
use crate::keys;
use colo_allocation::ShardId;
use std::ops::ControlFlow;
use std::path::Path;
use std::time::{Duration, Instant};

const ENGINE: &str = "sled";

#[derive(Debug)]
pub(crate) struct SledStore {
    db: sled::Db,
}

fn io(entity_type: &str, e: impl std::fmt::Display) -> StoreError {
    StoreError::io(ENGINE, entity_type, e)
}

/// How long an open waits for the database's lock (see [`SledStore::open`]).
const LOCK_WAIT: Duration = Duration::from_secs(5);

impl SledStore {
    pub fn open(path: &Path) -> Result<Self, StoreError> {
        // A handle to the same database dropped just before (a node
        // restarted in the same process) may keep its file lock for a
        // moment, while sled's own threads wind down: waited for, briefly.
        // Another process holding it is still refused, after that wait.
        let deadline = Instant::now() + LOCK_WAIT;
        loop {
            match sled::open(path) {
                Ok(db) => return Ok(Self { db }),
                Err(sled::Error::Io(e))
                    if e.to_string().contains("could not acquire lock")
                        && Instant::now() < deadline =>
                {
                    std::thread::sleep(Duration::from_millis(20));
                }
                Err(e) => {
                    return Err(StoreError::Open {
                        path: path.to_path_buf(),
                        engine: ENGINE,
                        reason: e.to_string(),
                    })
                }
            }
        }
    }

    fn tree(&self, entity_type: &str) -> Result<sled::Tree, StoreError> {
        keys::check_entity_type(entity_type)?;
        self.db
            .open_tree(entity_type)
            .map_err(|e| io(entity_type, e))
    }

    /// Applies `batch` to its tree, atomically, not yet durably.
    fn apply(&self, batch: &WriteBatch) -> Result<(), StoreError> {
        let name = batch.entity_type.as_str();
        let tree = self.tree(name)?;
        let mut b = sled::Batch::default();
        for op in &batch.ops {
            match op {
                Op::Put {
                    shard,
                    entity_id,
                    value,
                } => b.insert(keys::entity(*shard, entity_id), value.as_slice()),
                Op::Delete { shard, entity_id } => b.remove(keys::entity(*shard, entity_id)),
                Op::Checkpoint { shard, checkpoint } => b.insert(
                    keys::checkpoint(*shard).as_slice(),
                    keys::encode_checkpoint(*checkpoint).as_slice(),
                ),
                Op::PutTimer {
                    shard,
                    timer,
                    message,
                } => b.insert(keys::timer_key(*shard, timer), message.as_slice()),
                Op::DeleteTimer { shard, timer } => b.remove(keys::timer_key(*shard, timer)),
                Op::ClearShard { shard } => {
                    // Read in the batch's own tree: a batch is applied
                    // atomically, so these removes and the ops after them
                    // land together.
                    let (start, end) = keys::all_of(*shard);
                    for entry in tree.range(start.as_slice()..end.as_slice()) {
                        let (key, _) = entry.map_err(|e| io(name, e))?;
                        b.remove(key);
                    }
                }
            }
        }
        tree.apply_batch(b).map_err(|e| io(name, e))
    }
}

impl StateStore for SledStore {
    fn write_all(&self, batches: &[WriteBatch]) -> Result<(), StoreError> {
        // Each batch is atomic in its tree; one flush makes them all
        // durable (sled flushes the whole database).
        for batch in batches {
            self.apply(batch)?;
        }
        let names: Vec<&str> = batches.iter().map(|b| b.entity_type.as_str()).collect();
        self.db
            .flush()
            .map(drop)
            .map_err(|e| io(&names.join(","), e))
    }

    fn write_unsynced(&self, batch: &WriteBatch) -> Result<(), StoreError> {
        // Atomic in its tree; sled flushes it on its own schedule.
        self.apply(batch)
    }

    fn load(
        &self,
        entity_type: &str,
        shard: ShardId,
        entity_id: &str,
    ) -> Result<Option<Vec<u8>>, StoreError> {
        let value = self
            .tree(entity_type)?
            .get(keys::entity(shard, entity_id))
            .map_err(|e| io(entity_type, e))?;
        Ok(value.map(|v| v.to_vec()))
    }

    fn scan(
        &self,
        entity_type: &str,
        shard: ShardId,
        visit: &mut dyn FnMut(&str, &[u8]) -> ControlFlow<()>,
    ) -> Result<(), StoreError> {
        let (start, end) = keys::entities_of(shard);
        let entries = self
            .tree(entity_type)?
            .range(start.as_slice()..end.as_slice())
            .map(|entry| entry.map_err(|e| io(entity_type, e)));
        visit_entities(entity_type, shard, entries, visit)
    }

    fn timers(
        &self,
        entity_type: &str,
        shard: ShardId,
        after: Option<&TimerKey>,
        visit: &mut dyn FnMut(TimerKey, &[u8]) -> ControlFlow<()>,
    ) -> Result<(), StoreError> {
        let entries = self
            .tree(entity_type)?
            .range(timers_bounds(shard, after))
            .map(|entry| entry.map_err(|e| io(entity_type, e)));
        visit_timers(entity_type, shard, entries, visit)
    }

    fn checkpoint(
        &self,
        entity_type: &str,
        shard: ShardId,
    ) -> Result<Option<Checkpoint>, StoreError> {
        let value = self
            .tree(entity_type)?
            .get(keys::checkpoint(shard))
            .map_err(|e| io(entity_type, e))?;
        Ok(value.and_then(|v| keys::decode_checkpoint(&v)))
    }

    fn engine(&self) -> Engine {
        Engine::Sled
    }
}
