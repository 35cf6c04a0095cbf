//! The extractor for colo's main mode: shard = the Kafka partition a Java
//! producer would pick for the entity id.

use crate::murmur2::murmur2_partition;
use crate::partition_extractor::{PartitionExtractor, Partitioner};

/// Maps an entity id to the partition Kafka's Java default partitioner gives
/// a record keyed by it: `(murmur2(utf8 key) & 0x7fffffff) % partitions`.
///
/// This is what makes a record and a gRPC ask for the same entity meet in the
/// same shard. It only holds while producers use that partitioner (the Java
/// client's default, or `partitioner=murmur2_random` in librdkafka) and while
/// `partitions` equals the topics' partition count.
pub type KafkaMurmur2Extractor = PartitionExtractor<Murmur2Partitioner>;

/// Kafka's Java client's default partitioner (librdkafka's `murmur2`).
#[derive(Clone, Copy, Debug)]
pub struct Murmur2Partitioner;

impl Partitioner for Murmur2Partitioner {
    fn partition(key: &[u8], partitions: u32) -> u32 {
        murmur2_partition(key, partitions)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{MessageExtractor, ShardId};

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
