//! Least frequently used, with optional dynamic aging (Akka's
//! `least-frequently-used` replacement policy and its `dynamic-aging`).

use super::area::ActiveArea;
use super::frequency_list::FrequencyList;
use super::{PolicyKey, ReplacementPolicy};

/// Passivates the entity with the fewest messages since its activation,
/// the least recently used one among equals.
///
/// Plain LFU keeps once-popular entities forever; with dynamic aging new
/// and accessed entities are credited with the priority of the last
/// passivated one, so stale popularity fades (LFU-DA).
#[derive(Debug)]
pub struct LeastFrequentlyUsed<K> {
    limit: usize,
    list: FrequencyList<K>,
}

impl<K: PolicyKey> LeastFrequentlyUsed<K> {
    /// An empty policy holding at most `limit` entities.
    pub fn new(limit: usize, dynamic_aging: bool) -> Self {
        Self {
            limit,
            list: FrequencyList::new(dynamic_aging),
        }
    }

    /// Passivates down to the limit, leaving room for `reserve` more.
    fn passivate_excess(&mut self, reserve: usize, passivate: &mut Vec<K>) {
        let excess = (self.list.len() + reserve).saturating_sub(self.limit);
        for _ in 0..excess {
            match self.list.pop_least_frequent() {
                Some(id) => passivate.push(id),
                None => break,
            }
        }
    }
}

impl<K: PolicyKey> ReplacementPolicy<K> for LeastFrequentlyUsed<K> {
    fn set_limit(&mut self, limit: usize, passivate: &mut Vec<K>) {
        self.limit = limit;
        self.passivate_excess(0, passivate);
    }

    /// Room is made before the new entity is tracked, so that with dynamic
    /// aging it starts from the age of the entity it replaces (Akka's
    /// order). With a limit of zero one entity is still kept, as in Akka.
    fn on_activate(&mut self, id: K, passivate: &mut Vec<K>) {
        if self.list.contains(&id) {
            self.list.increment(&id);
            return;
        }
        self.passivate_excess(1, passivate);
        self.list.insert(id);
    }

    fn on_access(&mut self, id: &K) {
        self.list.increment(id);
    }

    fn on_remove(&mut self, id: &K) {
        self.list.remove(id);
    }

    fn len(&self) -> usize {
        self.list.len()
    }
}

impl<K: PolicyKey> ActiveArea<K> for LeastFrequentlyUsed<K> {
    fn contains(&self, id: &K) -> bool {
        self.list.contains(id)
    }

    fn select(&self) -> Option<&K> {
        self.list.least_frequent()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::area::replay;

    #[test]
    fn lfu_passivates_least_frequent_then_least_recent() {
        let mut lfu = LeastFrequentlyUsed::new(3, false);
        assert_eq!(replay(&mut lfu, &[1, 1, 2, 2, 3, 4]), vec![3]);
        assert_eq!(replay(&mut lfu, &[2, 5]), vec![4]);
        // 5 (once) goes before 1 (twice) and 2 (three times)
        assert_eq!(replay(&mut lfu, &[6, 7]), vec![5, 6]);
        assert_eq!(lfu.select(), Some(&7));
        let mut out = Vec::new();
        lfu.set_limit(1, &mut out);
        assert_eq!(out, vec![7, 1]);
    }

    #[test]
    fn dynamic_aging_forgets_a_popular_past() {
        // 1 is hot early; later newcomers pass through
        let script = [1, 1, 1, 2, 3, 4, 5];
        let mut lfu = LeastFrequentlyUsed::new(2, false);
        assert_eq!(replay(&mut lfu, &script), vec![2, 3, 4]);
        // with aging 3 starts at 1 + 1, 4 at 1 + 2 = 3: level with 1, which
        // is less recent, so 1 goes when 5 arrives
        let mut aged = LeastFrequentlyUsed::new(2, true);
        assert_eq!(replay(&mut aged, &script), vec![2, 3, 1]);
    }
}
