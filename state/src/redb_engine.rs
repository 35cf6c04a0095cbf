//! The redb engine: one file, one table per entity type, copy-on-write
//! B-trees with durable commits (each batch is one write transaction,
//! fsynced before `write` returns).

use crate::batch::{Op, WriteBatch};
use crate::engine::{Engine, StateStore};
use crate::error::StoreError;
use crate::keys;
use colo_allocation::ShardId;
use redb::{ReadableDatabase, TableDefinition, TableError};
use std::ops::ControlFlow;
use std::path::Path;

const ENGINE: &str = "redb";

pub(crate) struct RedbStore {
    db: redb::Database,
}

impl std::fmt::Debug for RedbStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedbStore").finish_non_exhaustive()
    }
}

fn table(entity_type: &str) -> TableDefinition<'_, &'static [u8], &'static [u8]> {
    TableDefinition::new(entity_type)
}

fn io(entity_type: &str, e: impl std::fmt::Display) -> StoreError {
    StoreError::Io {
        engine: ENGINE,
        entity_type: entity_type.to_string(),
        reason: e.to_string(),
    }
}

fn checked(entity_type: &str) -> Result<(), StoreError> {
    if keys::valid_entity_type(entity_type) {
        Ok(())
    } else {
        Err(StoreError::EntityTypeName(entity_type.to_string()))
    }
}

impl RedbStore {
    pub fn open(path: &Path) -> Result<Self, StoreError> {
        let db = redb::Database::create(path).map_err(|e| StoreError::Open {
            path: path.to_path_buf(),
            engine: ENGINE,
            reason: e.to_string(),
        })?;
        Ok(Self { db })
    }

    /// Reads one table; a table never written reads as empty.
    fn read<T>(
        &self,
        entity_type: &str,
        empty: T,
        read: impl FnOnce(&redb::ReadOnlyTable<&'static [u8], &'static [u8]>) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        checked(entity_type)?;
        let txn = self.db.begin_read().map_err(|e| io(entity_type, e))?;
        match txn.open_table(table(entity_type)) {
            Ok(t) => read(&t),
            Err(TableError::TableDoesNotExist(_)) => Ok(empty),
            Err(e) => Err(io(entity_type, e)),
        }
    }
}

impl StateStore for RedbStore {
    fn write(&self, batch: &WriteBatch) -> Result<(), StoreError> {
        let name = batch.entity_type.as_str();
        checked(name)?;
        let txn = self.db.begin_write().map_err(|e| io(name, e))?;
        {
            let mut t = txn.open_table(table(name)).map_err(|e| io(name, e))?;
            for op in &batch.ops {
                match op {
                    Op::Put {
                        shard,
                        entity_id,
                        value,
                    } => {
                        let key = keys::entity(*shard, entity_id);
                        t.insert(key.as_slice(), value.as_slice())
                            .map_err(|e| io(name, e))?;
                    }
                    Op::Delete { shard, entity_id } => {
                        let key = keys::entity(*shard, entity_id);
                        t.remove(key.as_slice()).map_err(|e| io(name, e))?;
                    }
                    Op::Checkpoint { shard, offset } => {
                        let key = keys::checkpoint(*shard);
                        t.insert(key.as_slice(), keys::encode_offset(*offset).as_slice())
                            .map_err(|e| io(name, e))?;
                    }
                    Op::ClearShard { shard } => {
                        let (start, end) = keys::all_of(*shard);
                        t.retain_in::<&[u8], _>(start.as_slice()..end.as_slice(), |_, _| false)
                            .map_err(|e| io(name, e))?;
                    }
                }
            }
        }
        // Durability::Immediate (the default): on disk when commit returns.
        txn.commit().map_err(|e| io(name, e))
    }

    fn load(
        &self,
        entity_type: &str,
        shard: ShardId,
        entity_id: &str,
    ) -> Result<Option<Vec<u8>>, StoreError> {
        let key = keys::entity(shard, entity_id);
        self.read(entity_type, None, |t| {
            let value = t.get(key.as_slice()).map_err(|e| io(entity_type, e))?;
            Ok(value.map(|v| v.value().to_vec()))
        })
    }

    fn scan(
        &self,
        entity_type: &str,
        shard: ShardId,
        visit: &mut dyn FnMut(&str, &[u8]) -> ControlFlow<()>,
    ) -> Result<(), StoreError> {
        let (start, end) = keys::entities_of(shard);
        self.read(entity_type, (), |t| {
            let range = t
                .range::<&[u8]>(start.as_slice()..end.as_slice())
                .map_err(|e| io(entity_type, e))?;
            for entry in range {
                let (key, value) = entry.map_err(|e| io(entity_type, e))?;
                let id = keys::entity_id(key.value()).ok_or_else(|| StoreError::Key {
                    entity_type: entity_type.to_string(),
                    shard: shard.0,
                })?;
                if visit(id, value.value()).is_break() {
                    break;
                }
            }
            Ok(())
        })
    }

    fn checkpoint(&self, entity_type: &str, shard: ShardId) -> Result<Option<u64>, StoreError> {
        let key = keys::checkpoint(shard);
        self.read(entity_type, None, |t| {
            let value = t.get(key.as_slice()).map_err(|e| io(entity_type, e))?;
            Ok(value.and_then(|v| keys::decode_offset(v.value())))
        })
    }

    fn engine(&self) -> Engine {
        Engine::Redb
    }
}
