//! Most recently used (Akka's `most-recently-used` replacement policy).

use super::area::ActiveArea;
use super::recency_list::RecencyList;
use super::{PolicyKey, ReplacementPolicy};

/// Passivates the entity that received a message most recently, other than
/// the one being activated.
///
/// Good for cyclic access over more entities than fit, where LRU always
/// passivates exactly the entity needed next.
#[derive(Debug)]
pub struct MostRecentlyUsed<K> {
    limit: usize,
    list: RecencyList<K>,
}

impl<K: PolicyKey> MostRecentlyUsed<K> {
    /// An empty policy holding at most `limit` entities.
    pub fn new(limit: usize) -> Self {
        Self {
            limit,
            list: RecencyList::new(1),
        }
    }

    /// Passivates the excess from the most recent end, skipping the `skip`
    /// most recent entities. With a limit of zero the skipped entity stays,
    /// as in Akka.
    fn passivate_excess(&mut self, skip: usize, passivate: &mut Vec<K>) {
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

impl<K: PolicyKey> ReplacementPolicy<K> for MostRecentlyUsed<K> {
    fn set_limit(&mut self, limit: usize, passivate: &mut Vec<K>) {
        self.limit = limit;
        self.passivate_excess(0, passivate);
    }

    fn on_activate(&mut self, id: K, passivate: &mut Vec<K>) {
        match self.list.slot(&id) {
            Some(slot) => self.list.move_to_back(slot, 0),
            None => {
                self.list.push(id, 0);
            }
        }
        self.passivate_excess(1, passivate);
    }

    fn on_access(&mut self, id: &K) {
        if let Some(slot) = self.list.slot(id) {
            self.list.move_to_back(slot, 0);
        }
    }

    fn on_remove(&mut self, id: &K) {
        self.list.remove_key(id);
    }

    fn len(&self) -> usize {
        self.list.len()
    }
}

impl<K: PolicyKey> ActiveArea<K> for MostRecentlyUsed<K> {
    fn contains(&self, id: &K) -> bool {
        self.list.contains(id)
    }

    fn select(&self) -> Option<&K> {
        self.list.most_recent(0).and_then(|s| self.list.key(s))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::area::replay;

    #[test]
    fn mru_passivates_most_recent_before_the_new_entity() {
        let mut mru = MostRecentlyUsed::new(3);
        assert_eq!(replay(&mut mru, &[1, 2, 3, 4]), vec![3]);
        assert_eq!(replay(&mut mru, &[1, 5]), vec![1]);
        assert_eq!(replay(&mut mru, &[2, 6]), vec![2]);
        assert_eq!(mru.select(), Some(&6));
        assert_eq!(mru.len(), 3);
        let mut out = Vec::new();
        mru.set_limit(1, &mut out);
        assert_eq!(out, vec![6, 5]);
        assert_eq!(mru.select(), Some(&4));
    }

    #[test]
    fn mru_with_zero_limit_keeps_the_new_entity() {
        let mut mru = MostRecentlyUsed::new(0);
        assert_eq!(replay(&mut mru, &[1, 2]), vec![1]);
        assert_eq!(mru.len(), 1);
    }
}
