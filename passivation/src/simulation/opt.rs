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
//!
//! `opt-seen` is a reference for online policies rather than a bound: it
//! knows the future of every entity already seen in its shard, but not of
//! newcomers, which it passivates first, the newest first (as `next-use`
//! does). An online policy cannot tell which newcomers come back; the
//! distance from `opt-seen` to OPT is what that knowledge is worth.

use std::collections::{BTreeMap, HashMap, HashSet};

/// "Never accessed again" in a next-use table.
pub const NEVER: u32 = u32::MAX;

/// Keys of entities never accessed again count down from here; keys of
/// newcomers (for `opt-seen`) are above it, keys of next uses (positions)
/// far below.
const NEVER_KEYS: u64 = 1 << 62;

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
    /// The next "never" key; counts down so the entity that stopped being
    /// needed first goes first (Akka's order).
    never: u64,
    /// For `opt-seen`: the entities seen in this shard, and the keys of
    /// the active ones not seen before their last access.
    newcomers: Option<(HashSet<u64>, HashMap<u64, u64>)>,
}

impl OptShard {
    /// An empty shard with `limit` active entities at most.
    pub fn new(limit: usize) -> Self {
        Self {
            limit,
            by_next_use: BTreeMap::new(),
            never: NEVER_KEYS,
            newcomers: None,
        }
    }

    /// `opt-seen`: an empty shard that passivates newcomers first, the
    /// newest first, then the entity used furthest ahead.
    pub fn newcomers_first(limit: usize) -> Self {
        Self {
            newcomers: Some((HashSet::new(), HashMap::new())),
            ..Self::new(limit)
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
        if let Some((seen, keys)) = self.newcomers.as_mut() {
            if let Some(key) = keys.remove(&id) {
                self.by_next_use.remove(&key);
            }
            if seen.insert(id) {
                let key = NEVER_KEYS + 1 + position;
                keys.insert(id, key);
                self.by_next_use.insert(key, id);
                self.passivate_excess(passivate);
                return;
            }
        }
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
            if let Some((key, id)) = self.by_next_use.pop_last() {
                if let Some((_, keys)) = self.newcomers.as_mut() {
                    if key > NEVER_KEYS {
                        keys.remove(&id);
                    }
                }
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
        let mut shard = OptShard::new(2);
        let (misses, _) = replay(&mut shard, &ids);
        // a, b, c (bypassed), d (bypassed), c again: 5 misses out of 9.
        assert_eq!(misses, 5);
        assert_eq!(shard.len(), 2);
    }

    /// Misses and passivations of `shard` over `ids`.
    fn replay(shard: &mut OptShard, ids: &[u32]) -> (usize, Vec<u64>) {
        let next = next_uses(ids);
        let mut active = vec![false; ids.len()];
        let (mut misses, mut out, mut passivated) = (0, Vec::new(), Vec::new());
        for (p, &id) in ids.iter().enumerate() {
            if !active[id as usize] {
                misses += 1;
                active[id as usize] = true;
            }
            shard.access(u64::from(id), p as u64, next[p], &mut out);
            for gone in out.drain(..) {
                active[gone as usize] = false;
                passivated.push(gone);
            }
        }
        (misses, passivated)
    }

    #[test]
    fn opt_seen_passivates_newcomers_first_the_newest_first() {
        // a b c c a b, limit 2
        let ids = [0u32, 1, 2, 2, 0, 1];
        // OPT passivates b at c (b is needed last) and c at the last b
        assert_eq!(replay(&mut OptShard::new(2), &ids), (4, vec![1, 2]));
        // opt-seen cannot tell that c comes back: c, the newest newcomer,
        // goes; back, c is known and b is the newest newcomer; at the last
        // b, c stopped being needed first
        assert_eq!(
            replay(&mut OptShard::newcomers_first(2), &ids),
            (5, vec![2, 1, 2])
        );
    }
}
