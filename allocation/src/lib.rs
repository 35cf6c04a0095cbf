//! Pure placement logic for colo: which shard an entity belongs to, and which
//! region a shard lives in. No I/O, no async runtime, so every piece is tested
//! on its own and reused by the runtime, the Kafka connector and the tools.
//!
//! # Layout
//! - [`ids`]: `ShardId`, `RegionId`.
//! - [`extractor`]: the `MessageExtractor` trait and `ExtractorError`.
//! - [`hash_extractor`]: `HashExtractor` and `stable_hash` (xxh3), for entity
//!   types not fed by Kafka.
//! - [`murmur2`](mod@murmur2): Kafka's murmur2 hash, bit-exact with the Java client.
//! - [`partition_extractor`]: `PartitionExtractor`, shard = the partition a
//!   producer's `Partitioner` gives the entity id; its two partitioners:
//! - [`kafka_murmur2`]: `KafkaMurmur2Extractor`, shard = the Java client's
//!   default partition (colo's main mode).
//! - [`consistent_random`]: `ConsistentRandomExtractor`, shard = librdkafka's
//!   default partition.
//! - [`strategy`]: the `AllocationStrategy` trait and `Allocations`.
//! - [`least_shard_settings`]: `LeastShardSettings` and `SettingsError`.
//! - [`least_shard`]: `LeastShardAllocationStrategy`, with both of Akka's
//!   rebalance algorithms and a preference for a shard's standby copies,
//!   and `least_loaded_region`.
//! - [`standbys`]: which regions keep a shard's standby copies, ranked
//!   alike by nodes and the coordinator.
//! - [`external`]: `ExternalAllocationStrategy` and the
//!   `ExternalAllocationClient` that sets desired locations (the Kafka
//!   rebalance listener is one such client).
//!
//! A user-defined strategy implements `AllocationStrategy`; see
//! `examples/custom_strategy.rs`.
#![forbid(unsafe_code)]

pub mod consistent_random;
pub mod external;
pub mod extractor;
pub mod hash_extractor;
pub mod ids;
pub mod kafka_murmur2;
pub mod least_shard;
pub mod least_shard_settings;
pub mod murmur2;
pub mod partition_extractor;
pub mod standbys;
pub mod strategy;

pub use consistent_random::ConsistentRandomExtractor;
pub use external::{ExternalAllocationClient, ExternalAllocationStrategy};
pub use extractor::{ExtractorError, MessageExtractor};
pub use hash_extractor::{stable_hash, HashExtractor};
pub use ids::{RegionId, ShardId};
pub use kafka_murmur2::KafkaMurmur2Extractor;
pub use least_shard::{least_loaded_region, LeastShardAllocationStrategy};
pub use least_shard_settings::{LeastShardSettings, SettingsError};
pub use murmur2::murmur2;
pub use partition_extractor::{PartitionExtractor, Partitioner};
pub use strategy::{AllocationStrategy, Allocations};
