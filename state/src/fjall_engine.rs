//! The fjall engine (the default): a log-structured store, one keyspace per
//! entity type; a batch is one atomic write to the journal, fsynced before
//! `write` returns. Writes are sequential whatever keys a flush touches,
//! which is what write-behind of randomly chosen entities needs.

use crate::batch::{Checkpoint, Op, TimerKey, WriteBatch};
use crate::engine::{timers_bounds, visit_entities, visit_timers, Engine, StateStore};
use crate::error::StoreError;
use crate::keys;
use colo_allocation::ShardId;
use fjall::config::PinningPolicy;
use fjall::{KeyspaceCreateOptions, PersistMode};
use std::collections::HashMap;
use std::ops::ControlFlow;
use std::path::Path;

const ENGINE: &str = "fjall";

pub(crate) struct FjallStore {
    db: fjall::Database,
    /// Opened keyspaces, by entity type: opening one takes the database's
    /// keyspace lock.
    keyspaces: parking_lot::Mutex<HashMap<String, fjall::Keyspace>>,
}

impl std::fmt::Debug for FjallStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FjallStore").finish_non_exhaustive()
    }
}

fn io(entity_type: &str, e: impl std::fmt::Display) -> StoreError {
    StoreError::io(ENGINE, entity_type, e)
}

/// An entity type's keyspace: every table's filter and index blocks stay
/// in memory. A starting entity is a point read, most often of an entity
/// the store does not have yet; fjall's default keeps only the first
/// levels' filters in memory and reads the others through its 32 MiB
/// cache, so with millions of entities every such read fetched and
/// checksummed a filter block of a megabyte or more from disk (measured:
/// 10,000,000 entities passivated through a limit of 1,000,000 had not
/// finished in 20 minutes, nearly all of it in reads of filter blocks;
/// `benches/memory.rs`). Pinned, they take about 10 bits per key.
fn keyspace_options() -> KeyspaceCreateOptions {
    KeyspaceCreateOptions::default()
        .filter_block_pinning_policy(PinningPolicy::all(true))
        .index_block_pinning_policy(PinningPolicy::all(true))
}

impl FjallStore {
    pub fn open(path: &Path) -> Result<Self, StoreError> {
        let db = fjall::Database::builder(path)
            .open()
            .map_err(|e| StoreError::Open {
                path: path.to_path_buf(),
                engine: ENGINE,
                reason: e.to_string(),
            })?;
        Ok(Self {
            db,
            keyspaces: parking_lot::Mutex::default(),
        })
    }

    /// The entity type's keyspace; `None` if it was never written and
    /// `create` is false (a read then finds nothing, and creates nothing).
    fn keyspace(
        &self,
        entity_type: &str,
        create: bool,
    ) -> Result<Option<fjall::Keyspace>, StoreError> {
        keys::check_entity_type(entity_type)?;
        let mut open = self.keyspaces.lock();
        if let Some(keyspace) = open.get(entity_type) {
            return Ok(Some(keyspace.clone()));
        }
        if !create && !self.db.keyspace_exists(entity_type) {
            return Ok(None);
        }
        let keyspace = self
            .db
            .keyspace(entity_type, keyspace_options)
            .map_err(|e| io(entity_type, e))?;
        open.insert(entity_type.to_string(), keyspace.clone());
        Ok(Some(keyspace))
    }

    /// Adds `batch`'s ops to the commit `b`.
    fn add(&self, b: &mut fjall::OwnedWriteBatch, batch: &WriteBatch) -> Result<(), StoreError> {
        let name = batch.entity_type.as_str();
        let Some(keyspace) = self.keyspace(name, true)? else {
            unreachable!("created when missing")
        };
        for op in &batch.ops {
            match op {
                Op::Put {
                    shard,
                    entity_id,
                    value,
                } => b.insert(&keyspace, keys::entity(*shard, entity_id), value.as_slice()),
                Op::Delete { shard, entity_id } => {
                    b.remove(&keyspace, keys::entity(*shard, entity_id));
                }
                Op::Checkpoint { shard, checkpoint } => b.insert(
                    &keyspace,
                    keys::checkpoint(*shard).as_slice(),
                    keys::encode_checkpoint(*checkpoint).as_slice(),
                ),
                Op::PutTimer {
                    shard,
                    timer,
                    message,
                } => b.insert(
                    &keyspace,
                    keys::timer_key(*shard, timer),
                    message.as_slice(),
                ),
                Op::DeleteTimer { shard, timer } => {
                    b.remove(&keyspace, keys::timer_key(*shard, timer));
                }
                Op::ClearShard { shard } => {
                    // Read before the batch, applied with it: the removes and
                    // the ops after them land together.
                    let (start, end) = keys::all_of(*shard);
                    for guard in keyspace.range(start.as_slice()..end.as_slice()) {
                        let key = guard.key().map_err(|e| io(name, e))?;
                        b.remove(&keyspace, key);
                    }
                }
            }
        }
        Ok(())
    }
}

impl StateStore for FjallStore {
    fn write_all(&self, batches: &[WriteBatch]) -> Result<(), StoreError> {
        let mut b = self.db.batch().durability(Some(PersistMode::SyncAll));
        for batch in batches {
            self.add(&mut b, batch)?;
        }
        let names: Vec<&str> = batches.iter().map(|b| b.entity_type.as_str()).collect();
        b.commit().map_err(|e| io(&names.join(","), e))
    }

    fn write_unsynced(&self, batch: &WriteBatch) -> Result<(), StoreError> {
        let mut b = self.db.batch().durability(None);
        self.add(&mut b, batch)?;
        b.commit().map_err(|e| io(&batch.entity_type, e))
    }

    fn load(
        &self,
        entity_type: &str,
        shard: ShardId,
        entity_id: &str,
    ) -> Result<Option<Vec<u8>>, StoreError> {
        let Some(keyspace) = self.keyspace(entity_type, false)? else {
            return Ok(None);
        };
        let value = keyspace
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
        let Some(keyspace) = self.keyspace(entity_type, false)? else {
            return Ok(());
        };
        let (start, end) = keys::entities_of(shard);
        let entries = keyspace
            .range(start.as_slice()..end.as_slice())
            .map(|guard| guard.into_inner().map_err(|e| io(entity_type, e)));
        visit_entities(entity_type, shard, entries, visit)
    }

    fn timers(
        &self,
        entity_type: &str,
        shard: ShardId,
        after: Option<&TimerKey>,
        visit: &mut dyn FnMut(TimerKey, &[u8]) -> ControlFlow<()>,
    ) -> Result<(), StoreError> {
        let Some(keyspace) = self.keyspace(entity_type, false)? else {
            return Ok(());
        };
        let (start, end) = timers_bounds(shard, after);
        let entries = keyspace
            .range((start, end))
            .map(|guard| guard.into_inner().map_err(|e| io(entity_type, e)));
        visit_timers(entity_type, shard, entries, visit)
    }

    fn checkpoint(
        &self,
        entity_type: &str,
        shard: ShardId,
    ) -> Result<Option<Checkpoint>, StoreError> {
        let Some(keyspace) = self.keyspace(entity_type, false)? else {
            return Ok(None);
        };
        let value = keyspace
            .get(keys::checkpoint(shard))
            .map_err(|e| io(entity_type, e))?;
        Ok(value.and_then(|v| keys::decode_checkpoint(&v)))
    }

    fn engine(&self) -> Engine {
        Engine::Fjall
    }
}
