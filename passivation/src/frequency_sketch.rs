//! A count-min frequency sketch with TinyLFU's reset, the admission filter
//! of the composite strategy (Akka's `frequency-sketch`).
//!
//! It estimates how often an entity was seen recently in a few bits per
//! counter, also for entities that are no longer active, which no policy
//! that forgets passivated entities can do.

use foldhash::quality::FixedState;
use std::hash::{BuildHasher, Hash};

/// Seeds of the per-row index functions: large odd constants, one per row.
const SEEDS: [u64; 8] = [
    0xc3a5_c85c_97cb_3127,
    0xb492_b66f_be98_f273,
    0x9ae1_6a3b_2f90_404f,
    0xcbf2_9ce4_8422_2325,
    0x9e37_79b9_7f4a_7c15,
    0xbf58_476d_1ce4_e5b9,
    0x94d0_49bb_1331_11eb,
    0xd6e8_feb8_6659_fd93,
];

/// The most rows a sketch can have.
pub const MAX_DEPTH: usize = SEEDS.len();

/// Counter sizes a sketch supports: they must divide a 64-bit word.
pub const COUNTER_BITS: [u32; 6] = [2, 4, 8, 16, 32, 64];

/// Fixed so that simulator runs are reproducible; a crafted collision only
/// skews which entity is admitted, it cannot grow anything.
const HASH_SEED: u64 = 0x5eed_c010_0000_0001;

/// A caller-supplied hash of keys for the sketch, replacing foldhash.
///
/// The trace simulator uses it with [`akka_spread`] over Java's
/// `String.hashCode` of the decimal id to count exactly as Akka's sketch
/// does, so that composite strategies can be compared with Akka's published
/// figures counter for counter rather than up to hash noise (the sketch of
/// a small shard has few counters, and which ids collide moves the active
/// rate by a point or more).
pub type SketchHash<K> = std::sync::Arc<dyn Fn(&K) -> u64 + Send + Sync>;

/// Spreads a Java `hashCode` the way Akka's fast sketch does (a low-bias
/// 32-bit mixer from hash-prospector), widened with sign like a Java `int`
/// to `long`; with depth 4 the row indexes then equal Akka's.
pub fn akka_spread(java_hash: i32) -> u64 {
    let mut x = java_hash as u32;
    x = ((x >> 15) ^ x).wrapping_mul(0xd168_aaad);
    x = ((x >> 15) ^ x).wrapping_mul(0xaf72_3597);
    x = (x >> 15) ^ x;
    x as i32 as i64 as u64
}

/// A count-min sketch of `depth` rows of `width` saturating counters; an
/// entity's frequency is the minimum of its counter in each row.
///
/// After `reset_multiplier x capacity` increments that changed a counter,
/// every counter is halved (TinyLFU's reset), so the sketch follows
/// changes in popularity and small counters suffice.
#[derive(Debug, Clone)]
pub struct FrequencySketch {
    depth: usize,
    counter_bits: u32,
    /// log2 of the counters per word.
    slot_shift: u32,
    counter_mask: u64,
    odd_mask: u64,
    reset_mask: u64,
    index_mask: u64,
    row_width: usize,
    /// `depth` rows of `row_width` words, row after row.
    matrix: Vec<u64>,
    row_sizes: Vec<u64>,
    size: u64,
    reset_size: u64,
    hasher: FixedState,
}

impl FrequencySketch {
    /// A sketch for a policy holding `capacity` entities: `width_multiplier
    /// x capacity` counters per row (capacity rounded up to a power of two
    /// first, as in Akka), halved after `reset_multiplier x capacity`
    /// increments (truncated). `depth` is clamped to 1..=8 and
    /// `counter_bits` rounded up to a supported size; a width multiplier
    /// that is not a power of two is rounded up to one.
    pub fn new(
        capacity: usize,
        width_multiplier: usize,
        reset_multiplier: f64,
        depth: usize,
        counter_bits: u32,
    ) -> Self {
        let depth = depth.clamp(1, MAX_DEPTH);
        let counter_bits = COUNTER_BITS
            .into_iter()
            .find(|&b| b >= counter_bits)
            .unwrap_or(64);
        let width = width_multiplier
            .max(1)
            .saturating_mul(capacity.max(1).next_power_of_two())
            .next_power_of_two();
        let slots = (64 / counter_bits) as usize;
        let row_width = (width / slots).max(1);
        // 64-bit counters stop one bit short so halving stays a shift
        let counter_mask = if counter_bits == 64 {
            u64::MAX >> 1
        } else {
            (1u64 << counter_bits) - 1
        };
        let mut odd_mask = 0u64;
        let mut reset_mask = 0u64;
        for slot in 0..slots as u32 {
            odd_mask |= 1u64 << (slot * counter_bits);
            reset_mask |= (counter_mask >> 1) << (slot * counter_bits);
        }
        Self {
            depth,
            counter_bits,
            slot_shift: slots.trailing_zeros(),
            counter_mask,
            odd_mask,
            reset_mask,
            index_mask: (width - 1) as u64,
            row_width,
            matrix: vec![0; depth * row_width],
            row_sizes: vec![0; depth],
            size: 0,
            reset_size: (reset_multiplier * capacity as f64) as u64,
            hasher: FixedState::with_seed(HASH_SEED),
        }
    }

    /// Akka's defaults: depth 4, 4-bit counters, width 4 x capacity,
    /// halved after 10 x capacity increments.
    pub fn with_defaults(capacity: usize) -> Self {
        Self::new(capacity, 4, 10.0, 4, 4)
    }

    /// Increments since the last reset (after a reset: the largest row sum).
    pub fn size(&self) -> u64 {
        self.size
    }

    /// The estimated recent frequency of `key`, at most the counter maximum.
    pub fn frequency<T: Hash + ?Sized>(&self, key: &T) -> u64 {
        self.frequency_of_hash(self.hasher.hash_one(key))
    }

    /// [`FrequencySketch::frequency`] for a key already hashed by the
    /// caller (see [`SketchHash`]).
    pub fn frequency_of_hash(&self, hash: u64) -> u64 {
        (0..self.depth)
            .map(|row| {
                let (word, shift) = self.position(row, hash);
                (self.matrix[word] >> shift) & self.counter_mask
            })
            .min()
            .unwrap_or(0)
    }

    /// Counts one more occurrence of `key`. Counters at their maximum stay
    /// there; an increment that changes no counter does not count towards
    /// the reset.
    pub fn increment<T: Hash + ?Sized>(&mut self, key: &T) {
        self.increment_hash(self.hasher.hash_one(key));
    }

    /// [`FrequencySketch::increment`] for a key already hashed by the
    /// caller (see [`SketchHash`]).
    pub fn increment_hash(&mut self, hash: u64) {
        let mut changed = false;
        for row in 0..self.depth {
            let (word, shift) = self.position(row, hash);
            let mask = self.counter_mask << shift;
            if self.matrix[word] & mask != mask {
                self.matrix[word] += 1u64 << shift;
                self.row_sizes[row] += 1;
                changed = true;
            }
        }
        if changed {
            self.size += 1;
            if self.size == self.reset_size {
                self.reset();
            }
        }
    }

    /// The word and bit offset of `hash`'s counter in `row`.
    fn position(&self, row: usize, hash: u64) -> (usize, u32) {
        let seed = SEEDS[row];
        let x = hash.wrapping_add(seed).wrapping_mul(seed);
        let index = x.wrapping_add(x >> 32) & self.index_mask;
        let column = (index >> self.slot_shift) as usize;
        let slot = (index & ((1u64 << self.slot_shift) - 1)) as u32;
        (row * self.row_width + column, slot * self.counter_bits)
    }

    /// Halves every counter. Halving truncates, so each row's sum drops by
    /// half of (sum - odd counters), which keeps the row sums exact.
    fn reset(&mut self) {
        for row in 0..self.depth {
            let mut odd = 0u64;
            let words = &mut self.matrix[row * self.row_width..(row + 1) * self.row_width];
            for word in words {
                odd += u64::from((*word & self.odd_mask).count_ones());
                *word = (*word >> 1) & self.reset_mask;
            }
            self.row_sizes[row] = self.row_sizes[row].saturating_sub(odd) >> 1;
        }
        self.size = self.row_sizes.iter().copied().max().unwrap_or(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn width_and_reset_follow_the_capacity() {
        let sketch = FrequencySketch::with_defaults(100);
        // 4 x 128 counters of 4 bits = 32 words per row
        assert_eq!(sketch.index_mask, 511);
        assert_eq!(sketch.row_width, 32);
        assert_eq!(sketch.reset_size, 1000);
        let tiny = FrequencySketch::with_defaults(0);
        assert_eq!(tiny.row_width, 1);
        assert_eq!(tiny.index_mask, 3);
    }

    #[test]
    fn counts_increments() {
        let mut sketch = FrequencySketch::with_defaults(64);
        for _ in 0..5 {
            sketch.increment("a");
        }
        sketch.increment("b");
        assert_eq!(sketch.frequency("a"), 5);
        assert_eq!(sketch.frequency("b"), 1);
        assert_eq!(sketch.frequency("never"), 0);
        assert_eq!(sketch.size(), 6);
    }

    #[test]
    fn counters_saturate_at_their_maximum() {
        let mut sketch = FrequencySketch::with_defaults(64);
        for _ in 0..40 {
            sketch.increment(&7u64);
        }
        assert_eq!(sketch.frequency(&7u64), 15);
        // saturated increments do not count towards the reset
        assert_eq!(sketch.size(), 15);
        let mut wide = FrequencySketch::new(64, 4, 10.0, 4, 8);
        for _ in 0..300 {
            wide.increment(&7u64);
        }
        assert_eq!(wide.frequency(&7u64), 255);
    }

    #[test]
    fn reset_halves_all_counters() {
        // capacity 16: reset after 160 increments
        let mut sketch = FrequencySketch::with_defaults(16);
        for _ in 0..9 {
            sketch.increment("hot");
        }
        for _ in 0..3 {
            sketch.increment("warm");
        }
        let mut i = 0u64;
        while sketch.size() < 159 {
            sketch.increment(&(1000 + i));
            i += 1;
        }
        let hot = sketch.frequency("hot");
        let warm = sketch.frequency("warm");
        sketch.increment(&u64::MAX);
        assert!(sketch.size() < 90, "size {} after reset", sketch.size());
        assert_eq!(sketch.frequency("hot"), hot / 2);
        assert_eq!(sketch.frequency("warm"), warm / 2);
    }
}
