//! The extractor for entity types that are not fed by Kafka.

use crate::extractor::{check_number_of_shards, ExtractorError, MessageExtractor};
use crate::ShardId;
use xxhash_rust::xxh3::xxh3_64;

/// A hash of an entity id that every node, build and Rust version agrees on.
///
/// std's `DefaultHasher` is explicitly allowed to change between releases,
/// and a changed hash would silently move every entity to another shard after
/// an upgrade; xxh3 (seed 0) is a fixed, published algorithm.
pub fn stable_hash(entity_id: &str) -> u64 {
    xxh3_64(entity_id.as_bytes())
}

/// Spreads entity ids evenly over a fixed number of shards:
/// `stable_hash(entity_id) % number_of_shards`.
///
/// The Akka guidance applies: pick about ten times the largest planned number
/// of nodes, and never change it on a running cluster, because it moves
/// almost every entity.
#[derive(Clone, Debug)]
pub struct HashExtractor {
    number_of_shards: u32,
}

impl HashExtractor {
    /// An extractor over `number_of_shards` shards.
    ///
    /// # Errors
    /// [`ExtractorError::NoShards`] if `number_of_shards` is 0.
    pub fn new(number_of_shards: u32) -> Result<Self, ExtractorError> {
        Ok(Self {
            number_of_shards: check_number_of_shards(number_of_shards)?,
        })
    }
}

impl MessageExtractor for HashExtractor {
    fn shard_id(&self, entity_id: &str) -> ShardId {
        // The remainder is below a u32, so the narrowing cannot truncate.
        ShardId((stable_hash(entity_id) % u64::from(self.number_of_shards)) as u32)
    }

    fn number_of_shards(&self) -> u32 {
        self.number_of_shards
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zero_shards_is_refused() {
        assert_eq!(HashExtractor::new(0).unwrap_err(), ExtractorError::NoShards);
    }

    /// Fixed vectors, computed with the reference C library (libxxhash
    /// 0.8.1, `XXH3_64bits`), covering each of xxh3's input-length paths
    /// (0, 1-16, 17-128, 129-240, 241+ bytes). If one of these changes, the
    /// hash changed, and every deployed cluster would place its entities
    /// elsewhere after an upgrade.
    #[test]
    fn stable_hash_matches_the_xxh3_reference() {
        let vectors: [(String, u64, u32); 8] = [
            (String::new(), 0x2d06_8005_38d3_94c2, 38),
            ("21".into(), 0x8ac2_b105_4e7a_c49b, 35),
            ("foobar".into(), 0xd78f_da63_144c_5c84, 60),
            ("user-42".into(), 0x50fe_4b21_cf7b_09cd, 21),
            ("\u{65e5}\u{672c}".into(), 0x2c17_fb83_7f1a_1bc0, 96),
            ("entity-".repeat(3), 0xcd5f_4976_3288_f7bd, 93),
            ("entity-".repeat(20), 0x17b4_f005_bc57_ceef, 43),
            ("colo-".repeat(60), 0xcbc0_c254_036b_3d2f, 31),
        ];
        let extractor = HashExtractor::new(100).unwrap();
        for (id, hash, shard) in vectors {
            assert_eq!(stable_hash(&id), hash, "id {id:?}");
            assert_eq!(extractor.shard_id(&id), ShardId(shard), "id {id:?}");
        }
    }

    #[test]
    fn shards_stay_in_range_and_spread() {
        let extractor = HashExtractor::new(10).unwrap();
        let mut counts = [0u32; 10];
        for i in 0..10_000 {
            let ShardId(shard) = extractor.shard_id(&format!("entity-{i}"));
            counts[shard as usize] += 1;
        }
        // 1000 expected per shard; a decent hash stays well within 20%.
        assert!(
            counts.iter().all(|&c| (800..1200).contains(&c)),
            "{counts:?}"
        );
    }
}
