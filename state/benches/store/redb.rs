//! redb 4 for the comparison, with the same key layout and durability (one
//! durable write transaction per batch): the engine fjall was chosen over.

use super::{key, Workload, TYPE};
use colo_allocation::ShardId;
use colo_state::{Op, WriteBatch};
use redb::{ReadableDatabase, TableDefinition};

const TABLE: TableDefinition<'static, &'static [u8], &'static [u8]> = TableDefinition::new(TYPE);

pub struct Redb {
    db: redb::Database,
}

impl Redb {
    pub fn open(dir: &std::path::Path) -> Self {
        let db = redb::Database::create(dir.join("state.redb")).expect("redb");
        Self { db }
    }
}

impl Workload for Redb {
    fn flush(&self, batch: &WriteBatch) {
        let txn = self.db.begin_write().expect("begin");
        {
            let mut table = txn.open_table(TABLE).expect("table");
            for op in &batch.ops {
                match op {
                    Op::Put {
                        shard,
                        entity_id,
                        value,
                    } => {
                        let k = key(*shard, entity_id);
                        table
                            .insert(k.as_slice(), value.as_slice())
                            .expect("insert");
                    }
                    Op::Checkpoint { shard, checkpoint } => {
                        let mut k = shard.0.to_be_bytes().to_vec();
                        k.push(0);
                        table
                            .insert(k.as_slice(), checkpoint.offset.to_be_bytes().as_slice())
                            .expect("insert");
                    }
                    _ => unreachable!("the workload only puts and checkpoints"),
                }
            }
        }
        txn.commit().expect("commit");
    }

    fn load(&self, shard: ShardId, id: &str) -> bool {
        let txn = self.db.begin_read().expect("read");
        let table = txn.open_table(TABLE).expect("table");
        let k = key(shard, id);
        table.get(k.as_slice()).expect("get").is_some()
    }

    fn restore(&self, shard: ShardId) -> usize {
        let txn = self.db.begin_read().expect("read");
        let table = txn.open_table(TABLE).expect("table");
        let start = key(shard, "");
        let mut end = shard.0.to_be_bytes().to_vec();
        end.push(2);
        let mut n = 0;
        for entry in table
            .range::<&[u8]>(start.as_slice()..end.as_slice())
            .expect("range")
        {
            let (_, value) = entry.expect("entry");
            n += usize::from(!value.value().is_empty());
        }
        n
    }
}
