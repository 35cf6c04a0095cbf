//! An O(1) recency list: entities ordered from least to most recently used,
//! optionally split into levels (segments) for segmented LRU.
//!
//! Nodes live in a slab (`Vec`) and link to each other by index, with a map
//! from entity to slot. Freed slots are chained into a free list and reused,
//! so once the list has held its peak number of entities no operation
//! allocates: a linked list of boxed nodes would allocate per activation,
//! and a `VecDeque` cannot unlink from the middle in O(1).

use foldhash::fast::RandomState;
use std::collections::HashMap;

/// The "no node" index: the end of a list, or of the free chain.
const NIL: u32 = u32::MAX;

/// A slot of the slab. `key` is `None` while the slot is free; then `next`
/// chains it to the next free slot.
#[derive(Debug)]
struct Node<K> {
    key: Option<K>,
    /// Towards the least recent end of its level.
    prev: u32,
    /// Towards the most recent end of its level.
    next: u32,
    level: u32,
}

/// The two ends of one level and its size.
#[derive(Debug, Clone, Copy)]
struct Ends {
    /// Least recent.
    head: u32,
    /// Most recent.
    tail: u32,
    len: usize,
}

impl Ends {
    const EMPTY: Ends = Ends {
        head: NIL,
        tail: NIL,
        len: 0,
    };
}

/// A handle to a tracked entity's node, valid until that entity is removed.
pub(crate) type Slot = u32;

/// Entities in recency order, in one or more levels; every operation is
/// O(1).
///
/// The map uses foldhash with a random seed: entity ids come from outside
/// (record keys), so a fixed seed would let a producer aim collisions.
#[derive(Debug)]
pub(crate) struct RecencyList<K> {
    nodes: Vec<Node<K>>,
    free: u32,
    index: HashMap<K, Slot, RandomState>,
    levels: Vec<Ends>,
}

impl<K: std::hash::Hash + Eq + Clone> RecencyList<K> {
    /// An empty list with `levels` levels (at least one).
    pub(crate) fn new(levels: usize) -> Self {
        Self {
            nodes: Vec::new(),
            free: NIL,
            index: HashMap::default(),
            levels: vec![Ends::EMPTY; levels.max(1)],
        }
    }

    /// Entities tracked, over all levels.
    pub(crate) fn len(&self) -> usize {
        self.index.len()
    }

    /// Entities tracked in `level`.
    pub(crate) fn level_len(&self, level: usize) -> usize {
        self.levels[level].len
    }

    /// The number of levels.
    pub(crate) fn levels(&self) -> usize {
        self.levels.len()
    }

    /// Changes the number of levels (at least one). The caller empties
    /// the levels that go away.
    pub(crate) fn resize_levels(&mut self, levels: usize) {
        debug_assert!(self.levels.iter().skip(levels).all(|ends| ends.len == 0));
        self.levels.resize(levels.max(1), Ends::EMPTY);
    }

    /// The slot of a tracked entity.
    pub(crate) fn slot(&self, key: &K) -> Option<Slot> {
        self.index.get(key).copied()
    }

    /// Whether `key` is tracked.
    pub(crate) fn contains(&self, key: &K) -> bool {
        self.index.contains_key(key)
    }

    /// The level a tracked entity is in.
    pub(crate) fn level_of(&self, slot: Slot) -> usize {
        self.nodes[slot as usize].level as usize
    }

    /// The entity of a slot.
    pub(crate) fn key(&self, slot: Slot) -> Option<&K> {
        self.nodes.get(slot as usize).and_then(|n| n.key.as_ref())
    }

    /// The least recent entity of `level`.
    pub(crate) fn least_recent(&self, level: usize) -> Option<Slot> {
        Some(self.levels[level].head).filter(|&s| s != NIL)
    }

    /// The most recent entity of `level`.
    pub(crate) fn most_recent(&self, level: usize) -> Option<Slot> {
        Some(self.levels[level].tail).filter(|&s| s != NIL)
    }

    /// The next less recent entity in the same level.
    pub(crate) fn less_recent(&self, slot: Slot) -> Option<Slot> {
        Some(self.nodes[slot as usize].prev).filter(|&s| s != NIL)
    }

    /// Tracks a new entity as the most recent of `level`. The caller checks
    /// that it is not tracked yet.
    pub(crate) fn push(&mut self, key: K, level: usize) -> Slot {
        let slot = if self.free != NIL {
            let slot = self.free;
            let node = &mut self.nodes[slot as usize];
            self.free = node.next;
            node.key = Some(key.clone());
            slot
        } else {
            self.nodes.push(Node {
                key: Some(key.clone()),
                prev: NIL,
                next: NIL,
                level: 0,
            });
            (self.nodes.len() - 1) as Slot
        };
        self.index.insert(key, slot);
        self.append(slot, level);
        slot
    }

    /// Makes a tracked entity the most recent of `level` (its own level or
    /// another one).
    pub(crate) fn move_to_back(&mut self, slot: Slot, level: usize) {
        let node = &self.nodes[slot as usize];
        if node.level as usize == level && node.next == NIL {
            return;
        }
        self.unlink(slot);
        self.append(slot, level);
    }

    /// Stops tracking the entity of `slot` and gives it back.
    pub(crate) fn remove(&mut self, slot: Slot) -> Option<K> {
        self.unlink(slot);
        let node = &mut self.nodes[slot as usize];
        let key = node.key.take()?;
        node.next = self.free;
        node.prev = NIL;
        self.free = slot;
        self.index.remove(&key);
        Some(key)
    }

    /// Moves `key` to the most recent end of `level` if tracked: a message
    /// to an active entity, for the single-list policies.
    pub(crate) fn touch(&mut self, key: &K, level: usize) {
        if let Some(slot) = self.slot(key) {
            self.move_to_back(slot, level);
        }
    }

    /// [`Self::touch`], or tracks `key` at the most recent end of `level`.
    pub(crate) fn touch_or_push(&mut self, key: K, level: usize) {
        match self.slot(&key) {
            Some(slot) => self.move_to_back(slot, level),
            None => {
                self.push(key, level);
            }
        }
    }

    /// Stops tracking `key`, if tracked.
    pub(crate) fn remove_key(&mut self, key: &K) -> bool {
        match self.slot(key) {
            Some(slot) => self.remove(slot).is_some(),
            None => false,
        }
    }

    fn append(&mut self, slot: Slot, level: usize) {
        let ends = &mut self.levels[level];
        let tail = ends.tail;
        ends.tail = slot;
        if tail == NIL {
            ends.head = slot;
        }
        ends.len += 1;
        if tail != NIL {
            self.nodes[tail as usize].next = slot;
        }
        let node = &mut self.nodes[slot as usize];
        node.prev = tail;
        node.next = NIL;
        node.level = level as u32;
    }

    fn unlink(&mut self, slot: Slot) {
        let (prev, next, level) = {
            let node = &self.nodes[slot as usize];
            (node.prev, node.next, node.level as usize)
        };
        let ends = &mut self.levels[level];
        if prev == NIL {
            ends.head = next;
        }
        if next == NIL {
            ends.tail = prev;
        }
        ends.len -= 1;
        if prev != NIL {
            self.nodes[prev as usize].next = next;
        }
        if next != NIL {
            self.nodes[next as usize].prev = prev;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn order(list: &RecencyList<u32>, level: usize) -> Vec<u32> {
        let mut out = Vec::new();
        let mut at = list.most_recent(level);
        while let Some(slot) = at {
            out.push(*list.key(slot).unwrap());
            at = list.less_recent(slot);
        }
        out.reverse();
        out
    }

    #[test]
    fn keeps_recency_order_and_reuses_slots() {
        let mut list = RecencyList::new(2);
        for k in 1..=4 {
            list.push(k, 0);
        }
        let s2 = list.slot(&2).unwrap();
        list.move_to_back(s2, 0);
        assert_eq!(order(&list, 0), vec![1, 3, 4, 2]);
        let s3 = list.slot(&3).unwrap();
        list.move_to_back(s3, 1);
        assert_eq!(order(&list, 0), vec![1, 4, 2]);
        assert_eq!(order(&list, 1), vec![3]);
        assert_eq!(list.remove(list.least_recent(0).unwrap()), Some(1));
        assert_eq!(list.len(), 3);
        let slots = list.nodes.len();
        list.push(5, 0);
        assert_eq!(list.nodes.len(), slots, "freed slot reused");
        assert_eq!(order(&list, 0), vec![4, 2, 5]);
        assert!(list.remove_key(&4));
        assert!(!list.remove_key(&4));
        assert_eq!(order(&list, 0), vec![2, 5]);
        assert_eq!(list.level_len(1), 1);
    }
}
