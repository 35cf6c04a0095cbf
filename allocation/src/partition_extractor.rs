//! Extractors whose shard is the partition a producer's partitioner gives a
//! record keyed by the entity id: one type, with the partitioner as its
//! parameter ([`KafkaMurmur2Extractor`](crate::KafkaMurmur2Extractor),
//! [`ConsistentRandomExtractor`](crate::ConsistentRandomExtractor)).

use crate::extractor::{check_number_of_shards, ExtractorError, MessageExtractor};
use crate::ShardId;
use std::marker::PhantomData;

/// A producer's partitioner.
pub trait Partitioner: Send + Sync + 'static {
    /// The partition of a record keyed by `key` among `partitions` (at
    /// least 1).
    fn partition(key: &[u8], partitions: u32) -> u32;
}

/// Shard = the partition `P` gives a record keyed by the entity id.
#[derive(Clone, Debug)]
pub struct PartitionExtractor<P> {
    partitions: u32,
    partitioner: PhantomData<fn() -> P>,
}

impl<P: Partitioner> PartitionExtractor<P> {
    /// An extractor for topics with `partitions` partitions.
    ///
    /// # Errors
    /// [`ExtractorError::NoShards`] if `partitions` is 0.
    pub fn new(partitions: u32) -> Result<Self, ExtractorError> {
        Ok(Self {
            partitions: check_number_of_shards(partitions)?,
            partitioner: PhantomData,
        })
    }

    /// The partition of a raw record key, for keys that are not UTF-8 text.
    pub fn partition(&self, key: &[u8]) -> u32 {
        P::partition(key, self.partitions)
    }
}

impl<P: Partitioner> MessageExtractor for PartitionExtractor<P> {
    fn shard_id(&self, entity_id: &str) -> ShardId {
        ShardId(self.partition(entity_id.as_bytes()))
    }

    fn number_of_shards(&self) -> u32 {
        self.partitions
    }
}

#[cfg(test)]
mod tests {
    use crate::{ConsistentRandomExtractor, ExtractorError, KafkaMurmur2Extractor};

    #[test]
    fn zero_partitions_is_refused() {
        assert_eq!(
            KafkaMurmur2Extractor::new(0).unwrap_err(),
            ExtractorError::NoShards
        );
        assert_eq!(
            ConsistentRandomExtractor::new(0).unwrap_err(),
            ExtractorError::NoShards
        );
    }
}
