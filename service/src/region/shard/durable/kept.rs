//! What a durable shard keeps of each active entity beside its value: the
//! offsets it applied, the hash of its last state, the starts whose keys
//! may hold a record of it, the idempotency keys of the tells it applied,
//! its timers and its outbox.

use super::deletions::Deleted;
use crate::region::shard::keys::AppliedKeys;
use smallvec::SmallVec;
use std::sync::Arc;

/// Earlier starts whose keys may hold a record of an entity.
pub(super) type Earlier = SmallVec<[u64; 2]>;

/// Per source (a topic, or a topic's other partition: see
/// `Origin::source`), the offset of the last record applied. Checked for
/// every record: most entities read one topic, kept inline, and a source
/// is the partition's shared name, compared by pointer first.
pub(super) type Applied = SmallVec<[(Arc<str>, u64); 1]>;

/// What an active durable entity keeps beside its value.
#[derive(Default)]
pub(super) struct Kept {
    pub(super) applied: Applied,
    /// The 128-bit hash of its state as last kept: a message that changed
    /// nothing (a query) writes nothing and waits for nothing.
    pub(super) state: Option<u128>,
    /// The start whose key its changelog record has, if it has one: this
    /// start's first write of it retires that key (see `store/restore.rs`).
    pub(super) written: Option<u64>,
    /// Earlier starts' keys that may still hold a record of it: its record
    /// names them until their retirement is durable, so that whichever
    /// start deletes it removes them all (see `deletions.rs`).
    pub(super) earlier: Earlier,
    /// The idempotency keys of the client tells it applied (see
    /// `keys.rs`).
    pub(super) keys: AppliedKeys,
    /// Its durable timers, as its record keeps them.
    pub(super) timers: Vec<colo_state::Timer>,
    /// The records it emitted that its record still holds (see
    /// `outbox.rs`).
    pub(super) outbox: Vec<colo_state::Output>,
}

impl Kept {
    /// Its deletion by start `start`: what it applied, and every key that
    /// may hold a record of it.
    pub(super) fn deleted_by(&self, start: u64) -> Deleted {
        let mut keys = self.earlier.clone();
        keys.push(start);
        Deleted {
            applied: self.applied.clone(),
            start,
            keys,
        }
    }
}

pub(super) fn same_topic(kept: &Arc<str>, topic: &Arc<str>) -> bool {
    Arc::ptr_eq(kept, topic) || **kept == **topic
}

pub(super) fn state_hash(state: Option<&[u8]>) -> u128 {
    match state {
        Some(state) => xxhash_rust::xxh3::xxh3_128(state),
        // Not a hash of any state: a deletion is always a change.
        None => 0,
    }
}
