//! Least recently used, plain and segmented (Akka's `least-recently-used`
//! replacement policy, with or without `segmented` levels).

use super::area::ActiveArea;
use super::recency_list::RecencyList;
use super::{PolicyKey, ReplacementPolicy};

/// Passivates the entity that went longest without a message.
///
/// Good when recent entities are the likely next ones; a scan of one-off
/// entities flushes everything else out.
pub type LeastRecentlyUsed<K> = RecencyEnd<K, false>;

/// One recency list, passivated from one end: the least recent
/// ([`LeastRecentlyUsed`]) or, with `MOST_RECENT`, the most recent
/// ([`MostRecentlyUsed`](super::MostRecentlyUsed)). Everything else the two
/// policies do is the same.
#[derive(Debug)]
pub struct RecencyEnd<K, const MOST_RECENT: bool> {
    limit: usize,
    list: RecencyList<K>,
}

impl<K: PolicyKey, const MOST_RECENT: bool> RecencyEnd<K, MOST_RECENT> {
    /// An empty policy holding at most `limit` entities.
    pub fn new(limit: usize) -> Self {
        Self {
            limit,
            list: RecencyList::new(1),
        }
    }

    /// Passivates the excess from the policy's end. From the most recent
    /// end it skips the `skip` most recent entities (the one being
    /// activated), so with a limit of zero that one stays, as in Akka; from
    /// the least recent end nothing is skipped.
    fn passivate_excess(&mut self, skip: usize, passivate: &mut Vec<K>) {
        if !MOST_RECENT {
            while self.list.len() > self.limit {
                match self.list.least_recent(0).and_then(|s| self.list.remove(s)) {
                    Some(id) => passivate.push(id),
                    None => break,
                }
            }
            return;
        }
        let excess = self.list.len().saturating_sub(self.limit);
        let mut at = self.list.most_recent(0);
        for _ in 0..skip {
            at = at.and_then(|slot| self.list.less_recent(slot));
        }
        for _ in 0..excess {
            let Some(slot) = at else {
                break;
            };
            at = self.list.less_recent(slot);
            if let Some(id) = self.list.remove(slot) {
                passivate.push(id);
            }
        }
    }
}

impl<K: PolicyKey, const MOST_RECENT: bool> ReplacementPolicy<K> for RecencyEnd<K, MOST_RECENT> {
    fn set_limit(&mut self, limit: usize, passivate: &mut Vec<K>) {
        self.limit = limit;
        self.passivate_excess(0, passivate);
    }

    /// With a limit of zero LRU passivates the new entity itself, as in
    /// Akka: the composite strategy relies on it to pass every entity
    /// through an empty window.
    fn on_activate(&mut self, id: K, passivate: &mut Vec<K>) {
        self.list.touch_or_push(id, 0);
        self.passivate_excess(1, passivate);
    }

    fn on_access(&mut self, id: &K) {
        self.list.touch(id, 0);
    }

    fn on_remove(&mut self, id: &K) {
        self.list.remove_key(id);
    }

    fn len(&self) -> usize {
        self.list.len()
    }
}

impl<K: PolicyKey, const MOST_RECENT: bool> ActiveArea<K> for RecencyEnd<K, MOST_RECENT> {
    fn contains(&self, id: &K) -> bool {
        self.list.contains(id)
    }

    fn select(&self) -> Option<&K> {
        let end = if MOST_RECENT {
            self.list.most_recent(0)
        } else {
            self.list.least_recent(0)
        };
        end.and_then(|s| self.list.key(s))
    }
}

/// Segmented LRU: level 0 holds entities seen once since activation; each
/// further message promotes an entity one level up (or to the most recent
/// end of the top level). A level over its share demotes its least recent
/// entity to the level below, and only level 0's least recent entity is
/// ever passivated, so the upper levels protect entities that proved
/// popular (SLRU with 2 levels, S4LRU with 4).
#[derive(Debug)]
pub struct SegmentedLeastRecentlyUsed<K> {
    proportions: Vec<f64>,
    truncate_levels: bool,
    level_limits: Vec<usize>,
    total_limit: usize,
    list: RecencyList<K>,
}

impl<K: PolicyKey> SegmentedLeastRecentlyUsed<K> {
    /// An empty policy holding at most `limit` entities, with one level per
    /// proportion (fractions of the limit, lowest level first, summing to
    /// 1; see `ReplacementSettings::validate`).
    pub fn new(limit: usize, proportions: Vec<f64>) -> Self {
        Self::build(limit, proportions, false)
    }

    /// Like [`SegmentedLeastRecentlyUsed::new`], with the rounding of
    /// Akka 2.6.18's segmented LRU: every level gets its proportion of the
    /// limit truncated, so the levels may add up to less than the limit.
    /// Akka's published simulator tables for SLRU and S4LRU were made with
    /// it (multi3 S4LRU at 100: 8.43 with it, 10.21 with Akka's current
    /// rounding).
    pub fn with_truncated_levels(limit: usize, proportions: Vec<f64>) -> Self {
        Self::build(limit, proportions, true)
    }

    fn build(limit: usize, proportions: Vec<f64>, truncate_levels: bool) -> Self {
        let levels = proportions.len().max(1);
        let mut policy = Self {
            proportions,
            truncate_levels,
            level_limits: Vec::with_capacity(levels),
            total_limit: 0,
            list: RecencyList::new(levels),
        };
        policy.compute_limits(limit);
        policy
    }

    /// `levels` even levels (S4LRU is `even(limit, 4)`).
    pub fn even(limit: usize, levels: usize) -> Self {
        let levels = levels.max(1);
        Self::new(limit, vec![1.0 / levels as f64; levels])
    }

    /// The upper levels get their proportion of the limit, truncated, and
    /// level 0 gets what is left, so the levels always add up to the limit
    /// exactly (Akka's current rounding); or level 0 is truncated too
    /// (Akka 2.6.18's).
    fn compute_limits(&mut self, limit: usize) {
        self.level_limits.clear();
        self.level_limits.push(0);
        let mut upper = 0usize;
        for p in self.proportions.iter().skip(1) {
            let level = (p * limit as f64) as usize;
            upper += level;
            self.level_limits.push(level);
        }
        self.level_limits[0] = if self.truncate_levels {
            let lowest = self.proportions.first().copied().unwrap_or(1.0);
            (lowest * limit as f64) as usize
        } else {
            limit.saturating_sub(upper)
        };
        self.total_limit = self.level_limits.iter().sum();
    }

    /// Demotes the least recent entities of `level` (an upper level) while
    /// it is over its limit.
    fn demote_excess(&mut self, level: usize) {
        while self.list.level_len(level) > self.level_limits[level] {
            match self.list.least_recent(level) {
                Some(slot) => self.list.move_to_back(slot, level - 1),
                None => break,
            }
        }
    }

    /// Over the total: first bring every upper level within its limit, top
    /// down, so demotions cascade; then passivate from level 0.
    fn passivate_excess(&mut self, passivate: &mut Vec<K>) {
        if self.list.len() <= self.total_limit {
            return;
        }
        for level in (1..self.list.levels()).rev() {
            self.demote_excess(level);
        }
        while self.list.len() > self.total_limit {
            match self.list.least_recent(0).and_then(|s| self.list.remove(s)) {
                Some(id) => passivate.push(id),
                None => break,
            }
        }
    }
}

impl<K: PolicyKey> ReplacementPolicy<K> for SegmentedLeastRecentlyUsed<K> {
    /// Upper levels that exceed their new limit are only brought back
    /// within it when the total overflows, as in Akka.
    fn set_limit(&mut self, limit: usize, passivate: &mut Vec<K>) {
        self.compute_limits(limit);
        self.passivate_excess(passivate);
    }

    fn on_activate(&mut self, id: K, passivate: &mut Vec<K>) {
        if self.list.contains(&id) {
            self.on_access(&id);
        } else {
            self.list.push(id, 0);
        }
        self.passivate_excess(passivate);
    }

    fn on_access(&mut self, id: &K) {
        let Some(slot) = self.list.slot(id) else {
            return;
        };
        let level = self.list.level_of(slot);
        let top = self.list.levels() - 1;
        if level == top {
            self.list.move_to_back(slot, level);
        } else {
            self.list.move_to_back(slot, level + 1);
            self.demote_excess(level + 1);
        }
    }

    fn on_remove(&mut self, id: &K) {
        self.list.remove_key(id);
    }

    fn len(&self) -> usize {
        self.list.len()
    }
}

impl<K: PolicyKey> ActiveArea<K> for SegmentedLeastRecentlyUsed<K> {
    fn contains(&self, id: &K) -> bool {
        self.list.contains(id)
    }

    fn select(&self) -> Option<&K> {
        self.list.least_recent(0).and_then(|s| self.list.key(s))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::area::replay;

    fn levels(policy: &SegmentedLeastRecentlyUsed<u32>) -> Vec<Vec<u32>> {
        (0..policy.list.levels())
            .map(|level| {
                let mut ids = Vec::new();
                let mut at = policy.list.most_recent(level);
                while let Some(slot) = at {
                    ids.push(*policy.list.key(slot).unwrap());
                    at = policy.list.less_recent(slot);
                }
                ids.reverse();
                ids
            })
            .collect()
    }

    #[test]
    fn lru_passivates_least_recently_used() {
        let mut lru = LeastRecentlyUsed::new(3);
        assert_eq!(replay(&mut lru, &[1, 2, 3, 1, 4, 5, 1, 6]), vec![2, 3, 4]);
        assert_eq!(lru.len(), 3);
        assert_eq!(lru.select(), Some(&5));
        let mut out = Vec::new();
        lru.set_limit(1, &mut out);
        assert_eq!(out, vec![5, 1]);
        lru.on_remove(&6);
        assert!(lru.is_empty());
    }

    #[test]
    fn lru_with_zero_limit_passivates_the_new_entity() {
        let mut lru = LeastRecentlyUsed::new(0);
        assert_eq!(replay(&mut lru, &[7]), vec![7]);
        assert!(lru.is_empty());
    }

    #[test]
    fn slru_limits_split_with_level_zero_taking_the_rest() {
        let slru = SegmentedLeastRecentlyUsed::<u32>::new(10, vec![0.2, 0.8]);
        assert_eq!(slru.level_limits, vec![2, 8]);
        let odd = SegmentedLeastRecentlyUsed::<u32>::new(7, vec![0.2, 0.8]);
        assert_eq!(odd.level_limits, vec![2, 5]);
        let s4 = SegmentedLeastRecentlyUsed::<u32>::even(10, 4);
        assert_eq!(s4.level_limits, vec![4, 2, 2, 2]);
        let old = SegmentedLeastRecentlyUsed::<u32>::with_truncated_levels(10, vec![0.25; 4]);
        assert_eq!(old.level_limits, vec![2, 2, 2, 2]);
        assert_eq!(old.total_limit, 8);
    }

    #[test]
    fn slru_protects_entities_seen_twice() {
        // limit 4: level 0 holds 1, the protected level 3
        let mut slru = SegmentedLeastRecentlyUsed::new(4, vec![0.25, 0.75]);
        assert_eq!(replay(&mut slru, &[1, 2, 3, 1, 2, 3]), Vec::<u32>::new());
        assert_eq!(levels(&slru), vec![vec![], vec![1, 2, 3]]);
        assert_eq!(replay(&mut slru, &[4]), Vec::<u32>::new());
        // promoting 4 overflows the protected level: its LRU (1) is
        // demoted to the most recent end of level 0
        assert_eq!(replay(&mut slru, &[4]), Vec::<u32>::new());
        assert_eq!(levels(&slru), vec![vec![1], vec![2, 3, 4]]);
        // only level 0's LRU is ever passivated
        assert_eq!(replay(&mut slru, &[5]), vec![1]);
        assert_eq!(levels(&slru), vec![vec![5], vec![2, 3, 4]]);
        assert_eq!(replay(&mut slru, &[6]), vec![5]);
        assert_eq!(slru.select(), Some(&6));
    }

    #[test]
    fn s4lru_promotes_one_level_per_access() {
        let mut s4 = SegmentedLeastRecentlyUsed::even(8, 4);
        replay(&mut s4, &[1, 1, 1, 1, 1, 2, 2]);
        assert_eq!(levels(&s4), vec![vec![], vec![2], vec![], vec![1]]);
        // fill: 3..=8 in level 0 (limit 2 at level 0 but 8 in total)
        assert_eq!(replay(&mut s4, &[3, 4, 5, 6, 7, 8]), Vec::<u32>::new());
        assert_eq!(replay(&mut s4, &[9]), vec![3]);
    }

    #[test]
    fn slru_overflow_demotes_top_down_before_passivating() {
        let mut slru = SegmentedLeastRecentlyUsed::new(4, vec![0.5, 0.5]);
        replay(&mut slru, &[1, 2, 1, 2, 3, 4]);
        assert_eq!(levels(&slru), vec![vec![3, 4], vec![1, 2]]);
        let mut out = Vec::new();
        slru.set_limit(2, &mut out);
        // protected limit now 1: 1 is demoted behind 3 and 4, then the two
        // least recent of level 0 go
        assert_eq!(out, vec![3, 4]);
        assert_eq!(levels(&slru), vec![vec![1], vec![2]]);
    }
}
