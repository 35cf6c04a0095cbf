//! The shards whose Kafka partitions this node's consumers hold, by topic,
//! hosted here yet or not (a partition waits for its shard while its
//! previous owner releases it).
//!
//! - Region stats carry the shards, so that the elected node can tell a
//!   shard whose partition nobody holds (a broker that left a dead member's
//!   partition unassigned: rejoining the group moves it) from one whose
//!   partition waits for a release, a restore or a stuck record, which a
//!   rejoin would only set back.
//! - A region that registers with a coordinator claims them again, by
//!   topic: a coordinator elected anew does not know the claims of the one
//!   before, and a shard whose region fenced itself would otherwise wait
//!   for a record or an ask to be placed again.

use colo_allocation::ShardId;
use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::sync::Arc;

/// Per (topic, shard), how many assigned partitions hold it (one, but for
/// a partition assigned again before its task ended).
#[derive(Debug, Default)]
pub(crate) struct Assignments {
    held: Mutex<BTreeMap<(Arc<str>, ShardId), usize>>,
}

impl Assignments {
    /// Notes `topic`'s partition of `shard` assigned here, until the
    /// returned value is dropped.
    pub fn hold(self: &Arc<Self>, topic: Arc<str>, shard: ShardId) -> AssignedShard {
        *self.held.lock().entry((topic.clone(), shard)).or_default() += 1;
        AssignedShard {
            assignments: self.clone(),
            key: (topic, shard),
        }
    }

    /// The shards held, ascending.
    pub fn shards(&self) -> Vec<ShardId> {
        let mut shards: Vec<ShardId> = self.held.lock().keys().map(|(_, s)| *s).collect();
        shards.sort();
        shards.dedup();
        shards
    }

    /// The shards held, by topic.
    pub fn by_topic(&self) -> BTreeMap<Arc<str>, Vec<ShardId>> {
        let mut topics: BTreeMap<Arc<str>, Vec<ShardId>> = BTreeMap::new();
        for (topic, shard) in self.held.lock().keys() {
            topics.entry(topic.clone()).or_default().push(*shard);
        }
        topics
    }
}

/// A partition's hold on its shard, for as long as its task runs.
#[derive(Debug)]
pub(crate) struct AssignedShard {
    assignments: Arc<Assignments>,
    key: (Arc<str>, ShardId),
}

impl Drop for AssignedShard {
    fn drop(&mut self) {
        let mut held = self.assignments.held.lock();
        if let Some(count) = held.get_mut(&self.key) {
            *count -= 1;
            if *count == 0 {
                held.remove(&self.key);
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
        let (a, b): (Arc<str>, Arc<str>) = (Arc::from("a"), Arc::from("b"));
        let first = assignments.hold(a.clone(), ShardId(3));
        let again = assignments.hold(a.clone(), ShardId(3));
        let other_topic = assignments.hold(b.clone(), ShardId(3));
        let other = assignments.hold(a.clone(), ShardId(1));
        assert_eq!(assignments.shards(), vec![ShardId(1), ShardId(3)]);
        assert_eq!(
            assignments.by_topic(),
            BTreeMap::from([
                (a.clone(), vec![ShardId(1), ShardId(3)]),
                (b, vec![ShardId(3)])
            ])
        );
        drop(first);
        drop(other_topic);
        assert_eq!(assignments.shards(), vec![ShardId(1), ShardId(3)]);
        drop(again);
        drop(other);
        assert!(assignments.shards().is_empty());
    }
}
