//! Kafka I/O for colo.
//!
//! This crate will hold everything that talks to Kafka through rdkafka, so the
//! sharding runtime never does:
//! - the source: one consumer group per entity type (cooperative-sticky), with
//!   rebalance events (assigned, revoked, lost) turned into shard hand-offs;
//! - the changelog: a compacted topic partitioned like the source, restored
//!   into the local state store before a shard starts;
//! - sinks and dead-letter topics;
//! - topic admin (partition counts checked at startup).
//!
//! Partitioning itself (murmur2, consistent_random) lives in
//! `colo-allocation`, which is pure and shared with the runtime.
#![forbid(unsafe_code)]

mod ack;
mod client;
mod dead_letters;
mod error;
mod mock;
mod observer;
mod producer;
mod record;
mod source;
mod topics;

pub use ack::Ack;
pub use colo_allocation::MessageExtractor;
pub use dead_letters::{
    DeadLetters, REASON_HEADER, SOURCE_OFFSET_HEADER, SOURCE_PARTITION_HEADER, SOURCE_TOPIC_HEADER,
};
pub use error::{SourceError, TopicError};
pub use mock::MockKafka;
pub use observer::{NoObserver, PartitionState, SourceObserver};
pub use producer::{check_partitioner, KeyedProducer, ProduceError, ProducerSettings, PARTITIONER};
pub use record::{Record, TopicPartition};
pub use source::{
    AssignedPartition, Gate, KafkaSource, Revocation, SourceEvent, SourceSettings,
    FETCH_QUEUE_BACKOFF_MS,
};
pub use topics::{
    check_partition_counts, check_topic_usable, create_missing_topics, partition_counts,
    NewTopicSpec,
};
