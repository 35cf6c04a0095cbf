//! A durable shard's deleted entities, from the deletion to the tombstones
//! that remove every record of them.
//!
//! A deletion is first written as a record without a state that keeps the
//! offsets the entity applied: a record consumed again from before the
//! deletion (its offset not committed yet) is still skipped as applied,
//! rather than applied to an entity made anew. Once the group's committed
//! offsets have passed every offset it applied, no such record is consumed
//! again, and the next write removes the entity: a tombstone for each key
//! that may hold a record of it (this start's, the earlier starts' it may
//! have been left under, and the key of one start per entity that came
//! before), and a delete in the node's store. So the changelog and the
//! store keep nothing of an entity once it is gone, and do not grow with
//! every id ever used.
//!
//! The tombstones are tagged with the deletion's start: a restore takes
//! such a tombstone as the entity's end unless a newer start holds a
//! record of it (see `store/restore.rs`), where an untagged tombstone of
//! one start's key only retires that key.

use super::{Applied, Map};
use crate::entity::EntityId;
use smallvec::SmallVec;

/// A deleted entity, until its tombstones are durable.
#[derive(Debug, Clone)]
pub(in crate::region::shard) struct Deleted {
    /// What it had applied, per source.
    pub applied: Applied,
    /// The start whose record says it was deleted.
    pub start: u64,
    /// Every start whose key may hold a record of it, `start` included.
    pub keys: SmallVec<[u64; 2]>,
}

/// Deletions by their progress; an entity is in one of them at most.
#[derive(Default)]
pub(in crate::region::shard) struct Deletions {
    /// In the changes not written yet.
    unwritten: Map<Deleted>,
    /// Written: waiting for the committed offsets to pass what they applied.
    waiting: Map<Deleted>,
    /// Their offsets committed: removed by the next write.
    due: Map<Deleted>,
}

impl Deletions {
    /// The entity deleted itself: its record without a state goes into the
    /// next write.
    pub fn deleted(&mut self, id: &EntityId, deleted: Deleted) {
        self.waiting.remove(id);
        self.due.remove(id);
        self.unwritten.insert(id.clone(), deleted);
    }

    /// The entity has a state again (made anew after its deletion, and
    /// changed): nothing of it is removed.
    pub fn revived(&mut self, id: &EntityId) {
        if !self.is_empty() {
            self.unwritten.remove(id);
            self.waiting.remove(id);
            self.due.remove(id);
        }
    }

    /// A deletion read back from the store (written by an earlier start, or
    /// before its offsets were committed): removed once they are.
    pub fn stored(&mut self, id: &EntityId, deleted: Deleted) {
        if !self.unwritten.contains_key(id) && !self.due.contains_key(id) {
            self.wait(id.clone(), deleted);
        }
    }

    /// A written deletion waits for its offsets' commit; one that applied
    /// no record (deleted by an ask) has nothing to wait for.
    fn wait(&mut self, id: EntityId, deleted: Deleted) {
        if deleted.applied.is_empty() {
            self.due.insert(id, deleted);
        } else {
            self.waiting.insert(id, deleted);
        }
    }

    /// The deletions a write takes.
    pub fn take_unwritten(&mut self) -> Map<Deleted> {
        std::mem::take(&mut self.unwritten)
    }

    /// The removals a write takes.
    pub fn take_due(&mut self) -> Map<Deleted> {
        std::mem::take(&mut self.due)
    }

    /// A removal that must wait (its entity's outputs are not sent yet):
    /// it is due again at the next commit that moves.
    pub fn postpone(&mut self, id: EntityId, deleted: Deleted) {
        self.waiting.insert(id, deleted);
    }

    /// A write's deletions are durable: each waits for its offsets' commit.
    pub fn written(&mut self, written: Map<Deleted>) {
        for (id, deleted) in written {
            if !self.unwritten.contains_key(&id) {
                self.wait(id, deleted);
            }
        }
    }

    /// A write failed: its deletions and removals go into the next, unless
    /// the entity changed since (`changed_since`).
    pub fn failed(
        &mut self,
        unwritten: Map<Deleted>,
        due: Map<Deleted>,
        changed_since: impl Fn(&EntityId) -> bool,
    ) {
        for (id, deleted) in unwritten {
            if !changed_since(&id) {
                self.unwritten.entry(id).or_insert(deleted);
            }
        }
        for (id, deleted) in due {
            if !changed_since(&id) && !self.unwritten.contains_key(&id) {
                self.due.insert(id, deleted);
            }
        }
    }

    /// Moves the deletions whose every applied offset is below its
    /// source's committed offset (`committed_past(source, offset)`) to the
    /// next write.
    pub fn check(&mut self, committed_past: impl Fn(&str, u64) -> bool) {
        let covered: Vec<EntityId> = self
            .waiting
            .iter()
            .filter(|(_, deleted)| {
                deleted
                    .applied
                    .iter()
                    .all(|(source, offset)| committed_past(source, *offset))
            })
            .map(|(id, _)| id.clone())
            .collect();
        for id in covered {
            if let Some(deleted) = self.waiting.remove(&id) {
                self.due.insert(id, deleted);
            }
        }
    }

    /// Whether deletions wait for their offsets' commit.
    pub fn waiting(&self) -> bool {
        !self.waiting.is_empty()
    }

    /// Whether removals wait for the next write.
    pub fn due(&self) -> bool {
        !self.due.is_empty()
    }

    pub fn is_empty(&self) -> bool {
        self.unwritten.is_empty() && self.waiting.is_empty() && self.due.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn deleted(applied: &[(&str, u64)]) -> Deleted {
        Deleted {
            applied: applied
                .iter()
                .map(|(source, offset)| (Arc::from(*source), *offset))
                .collect(),
            start: 7,
            keys: SmallVec::from_slice(&[7]),
        }
    }

    #[test]
    fn a_deletion_is_removed_only_once_every_offset_it_applied_is_committed() {
        let mut deletions = Deletions::default();
        let id = EntityId::from("a");
        deletions.deleted(&id, deleted(&[("events", 10), ("events/3", 4)]));
        deletions.check(|_, _| true);
        assert!(!deletions.due(), "not written yet: nothing is removed");
        let written = deletions.take_unwritten();
        deletions.written(written);
        let committed = |source: &str, offset: u64| match source {
            "events" => offset < 11,
            _ => offset < 4,
        };
        deletions.check(committed);
        assert!(!deletions.due(), "events/3's offset 4 is not committed");
        deletions.check(|_, _| true);
        assert!(deletions.due());
        assert_eq!(deletions.take_due().len(), 1);
        assert!(deletions.is_empty());
    }

    #[test]
    fn an_entity_changed_after_its_deletion_is_not_removed() {
        let mut deletions = Deletions::default();
        let id = EntityId::from("a");
        deletions.deleted(&id, deleted(&[]));
        let written = deletions.take_unwritten();
        deletions.written(written);
        deletions.check(|_, _| true);
        deletions.revived(&id);
        assert!(deletions.is_empty());

        deletions.stored(&id, deleted(&[]));
        deletions.check(|_, _| true);
        let due = deletions.take_due();
        deletions.failed(Map::default(), due, |changed| *changed == id);
        assert!(
            deletions.is_empty(),
            "a removal that failed is not tried again once the entity changed"
        );
    }
}
