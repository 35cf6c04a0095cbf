//! An O(1) frequency list for LFU: a list of frequency buckets in ascending
//! priority, each holding its entities from least to most recently
//! updated, so ties between equally frequent entities go to the least
//! recent one (as in Akka's `FrequencyList`).
//!
//! Entities and buckets live in two slabs with free lists; once warmed, no
//! operation allocates.

use foldhash::fast::RandomState;
use std::collections::HashMap;

const NIL: u32 = u32::MAX;

#[derive(Debug)]
struct Node<K> {
    key: Option<K>,
    /// Less recent within the bucket; the free chain for a free slot is
    /// `next`.
    prev: u32,
    next: u32,
    bucket: u32,
    accesses: u64,
}

#[derive(Debug)]
struct Bucket {
    priority: u64,
    /// Lower priority; the free chain for a free slot is `higher`.
    lower: u32,
    higher: u32,
    /// Least recently updated entity.
    head: u32,
    /// Most recently updated entity.
    tail: u32,
}

/// Entities by frequency (or by aged priority, with dynamic aging).
///
/// With dynamic aging, a new entity starts at priority `1 + age` and an
/// accessed one moves to `accesses + age`, where `age` is the priority of
/// the last entity passivated: entities that were popular long ago lose
/// their advantage over recent ones (LFU-DA).
#[derive(Debug)]
pub(crate) struct FrequencyList<K> {
    nodes: Vec<Node<K>>,
    free_node: u32,
    buckets: Vec<Bucket>,
    free_bucket: u32,
    lowest: u32,
    index: HashMap<K, u32, RandomState>,
    dynamic_aging: bool,
    age: u64,
}

impl<K: std::hash::Hash + Eq + Clone> FrequencyList<K> {
    pub(crate) fn new(dynamic_aging: bool) -> Self {
        Self {
            nodes: Vec::new(),
            free_node: NIL,
            buckets: Vec::new(),
            free_bucket: NIL,
            lowest: NIL,
            index: HashMap::default(),
            dynamic_aging,
            age: 0,
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.index.len()
    }

    pub(crate) fn contains(&self, key: &K) -> bool {
        self.index.contains_key(key)
    }

    /// The entity LFU passivates next.
    pub(crate) fn least_frequent(&self) -> Option<&K> {
        let bucket = self.buckets.get(self.lowest as usize)?;
        self.nodes.get(bucket.head as usize)?.key.as_ref()
    }

    /// Tracks a new entity (the caller checks it is not tracked).
    pub(crate) fn insert(&mut self, key: K) {
        let priority = 1 + self.age();
        let bucket = if self.lowest != NIL && self.buckets[self.lowest as usize].priority < priority
        {
            self.find_or_insert_after(self.lowest, priority)
        } else if self.lowest != NIL && self.buckets[self.lowest as usize].priority == priority {
            self.lowest
        } else {
            let bucket = self.new_bucket(priority, NIL, self.lowest);
            self.lowest = bucket;
            bucket
        };
        let node = Node {
            key: Some(key.clone()),
            prev: NIL,
            next: NIL,
            bucket,
            accesses: 1,
        };
        let slot = if self.free_node != NIL {
            let slot = self.free_node;
            self.free_node = self.nodes[slot as usize].next;
            self.nodes[slot as usize] = node;
            slot
        } else {
            self.nodes.push(node);
            (self.nodes.len() - 1) as u32
        };
        self.index.insert(key, slot);
        self.append(slot, bucket);
    }

    /// Counts an access to a tracked entity.
    pub(crate) fn increment(&mut self, key: &K) {
        let Some(&slot) = self.index.get(key) else {
            return;
        };
        let age = self.age();
        let node = &mut self.nodes[slot as usize];
        node.accesses += 1;
        let priority = node.accesses + age;
        let from = node.bucket;
        let target = self.find_or_insert_after(from, priority);
        self.detach(slot);
        self.append(slot, target);
    }

    /// Passivates the least frequent entity (the least recent among
    /// equals); with dynamic aging its priority becomes the new age.
    pub(crate) fn pop_least_frequent(&mut self) -> Option<K> {
        let bucket = self.buckets.get(self.lowest as usize)?;
        let (priority, slot) = (bucket.priority, bucket.head);
        if self.dynamic_aging {
            self.age = priority;
        }
        self.remove_slot(slot)
    }

    pub(crate) fn remove(&mut self, key: &K) -> bool {
        match self.index.get(key) {
            Some(&slot) => self.remove_slot(slot).is_some(),
            None => false,
        }
    }

    fn age(&self) -> u64 {
        if self.dynamic_aging {
            self.age
        } else {
            0
        }
    }

    /// The bucket of `priority` at or after `start` (exclusive): walks up
    /// while the next bucket is lower, then reuses the next bucket if it
    /// has exactly that priority or inserts one. Without aging the walk
    /// never moves, so this is O(1); with aging it is Akka's search.
    fn find_or_insert_after(&mut self, start: u32, priority: u64) -> u32 {
        let mut current = start;
        loop {
            let higher = self.buckets[current as usize].higher;
            if higher != NIL && self.buckets[higher as usize].priority < priority {
                current = higher;
            } else {
                break;
            }
        }
        let higher = self.buckets[current as usize].higher;
        if higher != NIL && self.buckets[higher as usize].priority == priority {
            higher
        } else {
            self.new_bucket(priority, current, higher)
        }
    }

    fn new_bucket(&mut self, priority: u64, lower: u32, higher: u32) -> u32 {
        let bucket = Bucket {
            priority,
            lower,
            higher,
            head: NIL,
            tail: NIL,
        };
        let index = if self.free_bucket != NIL {
            let index = self.free_bucket;
            self.free_bucket = self.buckets[index as usize].higher;
            self.buckets[index as usize] = bucket;
            index
        } else {
            self.buckets.push(bucket);
            (self.buckets.len() - 1) as u32
        };
        if lower != NIL {
            self.buckets[lower as usize].higher = index;
        }
        if higher != NIL {
            self.buckets[higher as usize].lower = index;
        }
        index
    }

    fn append(&mut self, slot: u32, bucket: u32) {
        let tail = self.buckets[bucket as usize].tail;
        {
            let node = &mut self.nodes[slot as usize];
            node.bucket = bucket;
            node.prev = tail;
            node.next = NIL;
        }
        if tail != NIL {
            self.nodes[tail as usize].next = slot;
        } else {
            self.buckets[bucket as usize].head = slot;
        }
        self.buckets[bucket as usize].tail = slot;
    }

    /// Unlinks a node from its bucket, dropping the bucket once empty.
    fn detach(&mut self, slot: u32) {
        let (prev, next, bucket) = {
            let node = &self.nodes[slot as usize];
            (node.prev, node.next, node.bucket)
        };
        if prev != NIL {
            self.nodes[prev as usize].next = next;
        } else {
            self.buckets[bucket as usize].head = next;
        }
        if next != NIL {
            self.nodes[next as usize].prev = prev;
        } else {
            self.buckets[bucket as usize].tail = prev;
        }
        if self.buckets[bucket as usize].head == NIL {
            let (lower, higher) = {
                let b = &self.buckets[bucket as usize];
                (b.lower, b.higher)
            };
            if lower != NIL {
                self.buckets[lower as usize].higher = higher;
            } else {
                self.lowest = higher;
            }
            if higher != NIL {
                self.buckets[higher as usize].lower = lower;
            }
            self.buckets[bucket as usize].higher = self.free_bucket;
            self.free_bucket = bucket;
        }
    }

    fn remove_slot(&mut self, slot: u32) -> Option<K> {
        self.detach(slot);
        let node = &mut self.nodes[slot as usize];
        let key = node.key.take()?;
        node.next = self.free_node;
        self.free_node = slot;
        self.index.remove(&key);
        Some(key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn drain(list: &mut FrequencyList<u32>) -> Vec<u32> {
        std::iter::from_fn(|| list.pop_least_frequent()).collect()
    }

    #[test]
    fn orders_by_frequency_then_recency() {
        let mut list = FrequencyList::new(false);
        for k in 1..=4 {
            list.insert(k);
        }
        list.increment(&3);
        list.increment(&1);
        list.increment(&3);
        // 2 and 4 seen once (2 first), 1 twice, 3 three times
        assert_eq!(list.least_frequent(), Some(&2));
        assert!(list.remove(&2));
        assert_eq!(drain(&mut list), vec![4, 1, 3]);
        assert_eq!(list.len(), 0);
        // buckets and nodes were recycled
        list.insert(9);
        assert_eq!(list.least_frequent(), Some(&9));
    }

    #[test]
    fn dynamic_aging_starts_new_entities_at_the_age() {
        let mut list = FrequencyList::new(true);
        list.insert(1);
        list.insert(2);
        list.increment(&1);
        list.increment(&1);
        list.increment(&2);
        // priorities: 1 -> 3, 2 -> 2
        assert_eq!(list.pop_least_frequent(), Some(2));
        assert_eq!(list.age, 2);
        // new entity at 1 + 2 = 3: ties with 1, and 1 is less recent
        list.insert(3);
        assert_eq!(list.least_frequent(), Some(&1));
        // 3 accessed: 2 + 2 = 4, above 1
        list.increment(&3);
        assert_eq!(drain(&mut list), vec![1, 3]);
    }
}
