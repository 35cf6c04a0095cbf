//! Akka's sharding emulation: which shard an id belongs to, which region a
//! shard goes to, and each shard's share of the active-entity limit.
//!
//! It follows Akka's passivation simulator (`Simulator.ShardAllocation` and
//! `ShardingState`) so that figures compare with its published tables: the
//! shard of an id is `abs(javaStringHashCode(id) % shards)`, a shard is
//! allocated to the least-loaded region (ties to the first region) when its
//! first access arrives, and that shard then counts as active before the
//! access that activated it is replayed.

/// Java's `String.hashCode`: `s[0]*31^(n-1) + ... + s[n-1]` over UTF-16 code
/// units, in wrapping 32-bit arithmetic.
pub fn java_string_hash(id: &str) -> i32 {
    id.encode_utf16().fold(0i32, |h, unit| {
        h.wrapping_mul(31).wrapping_add(i32::from(unit))
    })
}

/// The shard of an id out of `shards`: Java's `%` (the sign of the dividend),
/// then `abs`, as Akka's default shard-id extractor in its simulator.
///
/// # Panics
/// If `shards` is 0 or above `i32::MAX` (the CLI refuses both).
pub fn shard_of(id: &str, shards: u32) -> u32 {
    let n = i32::try_from(shards).expect("shards fits an i32");
    assert!(n > 0, "at least one shard");
    // `%` by a positive divisor never overflows, and its result is within
    // (-n, n), so `unsigned_abs` is exact.
    (java_string_hash(id) % n).unsigned_abs()
}

/// A shard's share of the total limit: `(limit / regions) / active shards of
/// its region`, in integer division, as Akka's strategies compute it from
/// their per-region limit.
pub fn shard_limit(total_limit: usize, regions: u32, active_shards_in_region: usize) -> usize {
    let per_region = total_limit / regions.max(1) as usize;
    per_region / active_shards_in_region.max(1)
}

/// Where shards live: the least-shard allocation Akka's simulator emulates.
#[derive(Debug, Clone)]
pub struct Allocation {
    /// The region of each shard, once allocated.
    region_of: Vec<Option<u32>>,
    /// The shards of each region, in allocation order.
    shards_of: Vec<Vec<u32>>,
}

impl Allocation {
    /// No shard allocated yet, `regions` empty regions.
    pub fn new(shards: u32, regions: u32) -> Self {
        Self {
            region_of: vec![None; shards as usize],
            shards_of: vec![Vec::new(); regions.max(1) as usize],
        }
    }

    /// The region of `shard`, allocating it to the least-loaded region (the
    /// first of equally loaded ones) on its first access. Returns the region
    /// and whether the shard is new.
    pub fn locate(&mut self, shard: u32) -> (u32, bool) {
        if let Some(region) = self.region_of[shard as usize] {
            return (region, false);
        }
        let region = (0..self.shards_of.len())
            .min_by_key(|&r| self.shards_of[r].len())
            .expect("at least one region") as u32;
        self.shards_of[region as usize].push(shard);
        self.region_of[shard as usize] = Some(region);
        (region, true)
    }

    /// The active shards of `region`, in allocation order.
    pub fn shards_of(&self, region: u32) -> &[u32] {
        &self.shards_of[region as usize]
    }

    /// The number of regions.
    pub fn regions(&self) -> u32 {
        self.shards_of.len() as u32
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn java_hash_vectors() {
        assert_eq!(java_string_hash(""), 0);
        assert_eq!(java_string_hash("0"), 48);
        assert_eq!(java_string_hash("10"), 1567);
        assert_eq!(java_string_hash("abc"), 96354);
        // wraps: "polygenelubricants".hashCode() == Integer.MIN_VALUE
        assert_eq!(java_string_hash("polygenelubricants"), i32::MIN);
        assert_eq!(java_string_hash("hello world"), 1_794_106_052);
        assert_eq!(java_string_hash("1234567890"), -2_054_162_789);
    }

    #[test]
    fn shard_uses_java_remainder_then_abs() {
        assert_eq!(shard_of("0", 10), 8);
        assert_eq!(shard_of("1234567890", 10), 9);
        assert_eq!(shard_of("polygenelubricants", 10), 8);
        assert_eq!(shard_of("anything", 1), 0);
    }

    #[test]
    fn least_loaded_region_first_on_ties() {
        let mut a = Allocation::new(10, 2);
        assert_eq!(a.locate(7), (0, true));
        assert_eq!(a.locate(3), (1, true));
        assert_eq!(a.locate(7), (0, false));
        assert_eq!(a.locate(5), (0, true));
        assert_eq!(a.shards_of(0), &[7, 5]);
        assert_eq!(shard_limit(100, 2, 2), 25);
        assert_eq!(shard_limit(7, 2, 2), 1);
    }
}
