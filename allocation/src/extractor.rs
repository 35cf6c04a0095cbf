//! Message extractors: entity id -> shard.

use crate::ShardId;

/// Maps an entity id to its shard. Every node of a cluster must use the same
/// extractor with the same number of shards, or two nodes would disagree on
/// where an entity lives.
pub trait MessageExtractor: Send + Sync + 'static {
    /// The shard of `entity_id`; always below [`Self::number_of_shards`].
    fn shard_id(&self, entity_id: &str) -> ShardId;

    /// How many shards this extractor spreads entities over.
    fn number_of_shards(&self) -> u32;
}

/// Why an extractor could not be built.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ExtractorError {
    /// Zero shards (or partitions) were asked for: every entity needs a
    /// shard, and `x % 0` has no answer.
    NoShards,
}

impl std::fmt::Display for ExtractorError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::NoShards => f.write_str("the number of shards must be at least 1"),
        }
    }
}

impl std::error::Error for ExtractorError {}

/// Shared check of the extractors' constructors.
pub(crate) fn check_number_of_shards(number_of_shards: u32) -> Result<u32, ExtractorError> {
    if number_of_shards == 0 {
        Err(ExtractorError::NoShards)
    } else {
        Ok(number_of_shards)
    }
}
