//! The extractor for colo's main mode: shard = the Kafka partition a Java
//! producer would pick for the entity id.

use crate::extractor::{check_number_of_shards, ExtractorError, MessageExtractor};
use crate::murmur2::murmur2_partition;
use crate::ShardId;

/// Maps an entity id to the partition Kafka's Java default partitioner gives
/// a record keyed by it: `(murmur2(utf8 key) & 0x7fffffff) % partitions`.
///
/// This is what makes a record and a gRPC ask for the same entity meet in the
/// same shard. It only holds while producers use that partitioner (the Java
/// client's default, or `partitioner=murmur2_random` in librdkafka) and while
/// `partitions` equals the topics' partition count.
#[derive(Clone, Debug)]
pub struct KafkaMurmur2Extractor {
    partitions: u32,
}

impl KafkaMurmur2Extractor {
    /// An extractor for topics with `partitions` partitions.
    ///
    /// # Errors
    /// [`ExtractorError::NoShards`] if `partitions` is 0.
    pub fn new(partitions: u32) -> Result<Self, ExtractorError> {
        Ok(Self {
            partitions: check_number_of_shards(partitions)?,
        })
    }

    /// The partition of a raw record key, for keys that are not UTF-8 text.
    pub fn partition(&self, key: &[u8]) -> u32 {
        murmur2_partition(key, self.partitions)
    }
}

impl MessageExtractor for KafkaMurmur2Extractor {
    fn shard_id(&self, entity_id: &str) -> ShardId {
        ShardId(self.partition(entity_id.as_bytes()))
    }

    fn number_of_shards(&self) -> u32 {
        self.partitions
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zero_partitions_is_refused() {
        assert_eq!(
            KafkaMurmur2Extractor::new(0).unwrap_err(),
            ExtractorError::NoShards
        );
    }

    #[test]
    fn shards_are_the_java_client_partitions() {
        let extractor = KafkaMurmur2Extractor::new(128).unwrap();
        let vectors = [
            ("21", 108),
            ("foobar", 62),
            ("a-little-bit-long-string", 32),
            ("a-little-bit-longer-string", 67),
            ("lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", 77),
            ("abc", 27),
        ];
        for (key, partition) in vectors {
            assert_eq!(extractor.shard_id(key), ShardId(partition), "key {key:?}");
        }
        assert_eq!(extractor.number_of_shards(), 128);
    }

    #[test]
    fn a_single_partition_takes_everything() {
        let extractor = KafkaMurmur2Extractor::new(1).unwrap();
        assert_eq!(extractor.shard_id("anything"), ShardId(0));
    }
}
