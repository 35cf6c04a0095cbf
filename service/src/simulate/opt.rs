//! OPT: Belady's clairvoyant replacement, the upper bound every policy is
//! measured against. It needs the whole trace up front: each access knows
//! when its entity is accessed next.
//!
//! Like Akka's `ClairvoyantPassivationStrategy` it works per shard, under the
//! same limit split as the real policies: the accessed entity is tracked
//! under the position of its next access (or, if none, under a key past
//! every position, later-marked entities below earlier ones), then while the
//! shard is over its limit the entity with the highest key is passivated,
//! which may be the one just accessed.

use std::collections::BTreeMap;

/// "Never accessed again" in a next-use table.
pub const NEVER: u32 = u32::MAX;

/// For each position of `ids`, the position of the next access to the same
/// id, or [`NEVER`].
///
/// # Panics
/// If the trace has `u32::MAX` accesses or more (the caller refuses such a
/// trace before).
pub fn next_uses(ids: &[u32]) -> Vec<u32> {
    assert!(ids.len() < NEVER as usize, "trace too long for OPT");
    let distinct = ids.iter().map(|&id| id as usize + 1).max().unwrap_or(0);
    let mut seen = vec![NEVER; distinct];
    let mut next = vec![NEVER; ids.len()];
    for (position, &id) in ids.iter().enumerate().rev() {
        next[position] = seen[id as usize];
        seen[id as usize] = position as u32;
    }
    next
}

/// OPT's state for one shard.
#[derive(Debug)]
pub struct OptShard {
    limit: usize,
    /// Active entities by the key they are tracked under: the position of
    /// their next access, or a "never" key above every position.
    by_next_use: BTreeMap<u64, u64>,
    /// The next "never" key; counts down from `u64::MAX` so the entity that
    /// stopped being needed first goes first (Akka's order).
    never: u64,
}

impl OptShard {
    /// An empty shard with `limit` active entities at most.
    pub fn new(limit: usize) -> Self {
        Self {
            limit,
            by_next_use: BTreeMap::new(),
            never: u64::MAX,
        }
    }

    /// The shard's limit changed; pushes the entities to passivate.
    pub fn set_limit(&mut self, limit: usize, passivate: &mut Vec<u64>) {
        self.limit = limit;
        self.passivate_excess(passivate);
    }

    /// An access to `id` at `position`, whose next access is at `next`
    /// ([`NEVER`] if none). Pushes the entities to passivate (possibly `id`).
    pub fn access(&mut self, id: u64, position: u64, next: u32, passivate: &mut Vec<u64>) {
        // An active entity is tracked under this very position; an inactive
        // one is not tracked at all.
        self.by_next_use.remove(&position);
        let key = if next == NEVER {
            self.never -= 1;
            self.never
        } else {
            u64::from(next)
        };
        self.by_next_use.insert(key, id);
        self.passivate_excess(passivate);
    }

    /// Entities tracked.
    pub fn len(&self) -> usize {
        self.by_next_use.len()
    }

    /// Whether no entity is tracked.
    pub fn is_empty(&self) -> bool {
        self.by_next_use.is_empty()
    }

    fn passivate_excess(&mut self, passivate: &mut Vec<u64>) {
        while self.by_next_use.len() > self.limit {
            if let Some((_, id)) = self.by_next_use.pop_last() {
                passivate.push(id);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn next_use_table() {
        assert_eq!(next_uses(&[0, 1, 0, 2, 1]), vec![2, 4, NEVER, NEVER, NEVER]);
    }

    #[test]
    fn evicts_the_farthest_next_use() {
        // a b c a b d a b c, limit 2
        let ids = [0u32, 1, 2, 0, 1, 3, 0, 1, 2];
        let next = next_uses(&ids);
        let mut shard = OptShard::new(2);
        let mut active = [false; 4];
        let mut misses = 0;
        let mut out = Vec::new();
        for (p, &id) in ids.iter().enumerate() {
            if !active[id as usize] {
                misses += 1;
                active[id as usize] = true;
            }
            shard.access(u64::from(id), p as u64, next[p], &mut out);
            for gone in out.drain(..) {
                active[gone as usize] = false;
            }
        }
        // a, b, c (bypassed), d (bypassed), c again: 5 misses out of 9.
        assert_eq!(misses, 5);
        assert_eq!(shard.len(), 2);
    }
}
