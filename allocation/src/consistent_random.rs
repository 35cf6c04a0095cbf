//! librdkafka's default partitioner, for topics fed by librdkafka-based
//! producers (rdkafka, confluent-kafka-python, -go, -dotnet) left at their
//! default `partitioner=consistent_random`.

use crate::partition_extractor::{PartitionExtractor, Partitioner};

/// Maps an entity id to the partition librdkafka's `consistent_random`
/// partitioner gives a record keyed by it: `crc32(key) % partitions`.
///
/// The CRC is the IEEE CRC-32 (zlib's `crc32`, the one librdkafka's
/// `rd_crc32` uses with or without zlib), computed as an unsigned 32-bit
/// value; librdkafka's `%` with an `int32_t` partition count is unsigned
/// arithmetic too, so no sign ever enters.
///
/// # Empty ids
/// librdkafka does not hash an empty key: for `consistent_random` a key of
/// length 0 is treated like a missing key and goes to a random (in recent
/// versions, "sticky" random) partition. An extractor must be a function, so
/// here an empty id is hashed like any other (`crc32("") = 0`, shard 0), which
/// is what librdkafka's plain `consistent` partitioner does. Records a
/// librdkafka producer sends with an empty key therefore do not line up with
/// this extractor; give entities non-empty ids.
pub type ConsistentRandomExtractor = PartitionExtractor<ConsistentRandomPartitioner>;

/// librdkafka's `consistent_random` partitioner, for non-empty keys.
#[derive(Clone, Copy, Debug)]
pub struct ConsistentRandomPartitioner;

impl Partitioner for ConsistentRandomPartitioner {
    fn partition(key: &[u8], partitions: u32) -> u32 {
        crc32fast::hash(key) % partitions
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{MessageExtractor, ShardId};

    /// Partitions a librdkafka producer picked on a real broker with 128
    /// partitions.
    #[test]
    fn shards_are_the_librdkafka_partitions() {
        let extractor = ConsistentRandomExtractor::new(128).unwrap();
        for (key, partition) in [("21", 52), ("foobar", 21), ("abc", 66)] {
            assert_eq!(extractor.shard_id(key), ShardId(partition), "key {key:?}");
        }
    }

    #[test]
    fn crc_is_taken_unsigned() {
        // crc32("21") = 0xfd77_46b4 has the top bit set: a signed reading
        // would give a negative remainder (C's `%`) or another partition.
        assert_eq!(crc32fast::hash(b"21"), 0xfd77_46b4);
        assert_eq!(
            ConsistentRandomExtractor::new(1000)
                .unwrap()
                .partition(b"21"),
            532
        );
    }

    #[test]
    fn empty_id_goes_to_shard_0() {
        let extractor = ConsistentRandomExtractor::new(128).unwrap();
        assert_eq!(extractor.shard_id(""), ShardId(0));
    }
}
