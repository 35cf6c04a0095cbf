//! The shards whose Kafka partitions this node's consumers hold, hosted
//! here yet or not (a partition waits for its shard while its previous
//! owner releases it). Region stats carry them, so that the elected node
//! can tell a shard whose partition nobody holds (a broker that left a dead
//! member's partition unassigned: rejoining the group moves it) from one
//! whose partition waits for a release, a restore or a stuck record, which
//! a rejoin would only set back.

use colo_allocation::ShardId;
use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::sync::Arc;

/// Per shard, how many assigned partitions (one per topic) hold it.
#[derive(Debug, Default)]
pub(crate) struct Assignments {
    held: Mutex<BTreeMap<ShardId, usize>>,
}

impl Assignments {
    /// Notes a partition of `shard` assigned here, until the returned
    /// value is dropped.
    pub fn hold(self: &Arc<Self>, shard: ShardId) -> AssignedShard {
        *self.held.lock().entry(shard).or_default() += 1;
        AssignedShard {
            assignments: self.clone(),
            shard,
        }
    }

    /// The shards held, ascending.
    pub fn shards(&self) -> Vec<ShardId> {
        self.held.lock().keys().copied().collect()
    }
}

/// A partition's hold on its shard, for as long as its task runs.
#[derive(Debug)]
pub(crate) struct AssignedShard {
    assignments: Arc<Assignments>,
    shard: ShardId,
}

impl Drop for AssignedShard {
    fn drop(&mut self) {
        let mut held = self.assignments.held.lock();
        if let Some(count) = held.get_mut(&self.shard) {
            *count -= 1;
            if *count == 0 {
                held.remove(&self.shard);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shard_is_held_while_any_of_its_partitions_is() {
        let assignments = Arc::new(Assignments::default());
        let first = assignments.hold(ShardId(3));
        let second = assignments.hold(ShardId(3));
        let other = assignments.hold(ShardId(1));
        assert_eq!(assignments.shards(), vec![ShardId(1), ShardId(3)]);
        drop(first);
        assert_eq!(assignments.shards(), vec![ShardId(1), ShardId(3)]);
        drop(second);
        drop(other);
        assert!(assignments.shards().is_empty());
    }
}
