//! Kafka I/O for colo: everything that talks to Kafka through rdkafka lives
//! here, so the sharding runtime never does.
//!
//! - The source ([`KafkaSource`], [`SourceSettings`]): one consumer group
//!   per entity type (cooperative-sticky, or the consumer protocol), each
//!   assigned partition's [`Record`]s behind a [`Gate`], and the group's
//!   rebalances as [`SourceEvent`]s the service answers inside the
//!   rebalance; an [`Ack`] per record, committed in offset order.
//! - [`SourceObserver`]: the partitions' state and the commits, for metrics.
//! - [`Changelog`]: a durable entity type's compacted changelog topic,
//!   written per shard partition in order and read back between offsets.
//! - [`DeadLetters`]: the dead-letter topic's producer, with the reason and
//!   the record's origin as headers.
//! - [`OutputProducer`]: the records durable entities emit, idempotent,
//!   each with its id in a header.
//! - [`KeyedProducer`]: records sent to their key's murmur2 partition (the
//!   partition colo's shards follow), paced, acknowledged.
//! - [`check_brokers`]: at startup, whether the brokers take the node's
//!   credentials.
//! - Topic checks at startup ([`check_partition_counts`],
//!   [`check_topic_usable`], [`create_missing_topics`]).
//! - A cluster's internal data ([`topics_named`], [`live_groups`],
//!   [`delete_topics`]), for `colo remove-internal-data`.
//! - [`Election`]: one member of a cluster elected through a consumer
//!   group on a one-partition topic, and that topic's records followed by
//!   every member.
//! - [`MockKafka`]: librdkafka's in-process mock cluster, for the demo.
//!
//! Partitioning itself (murmur2, consistent_random) lives in
//! `colo-allocation`, which is pure and shared with the runtime.
// Denied rather than forbidden: `mock.rs` sets what rdkafka's mock API
// does not wrap (its one `unsafe` block says why it is sound).
#![deny(unsafe_code)]

mod ack;
mod brokers;
mod changelog;
mod client;
mod cluster_data;
mod dead_letters;
mod deliveries;
mod election;
mod error;
mod mock;
mod observer;
mod outputs;
mod producer;
mod record;
mod source;
mod topics;

pub use ack::{Ack, AWAITING_DURABILITY_PER_IN_FLIGHT};
pub use brokers::{check_brokers, BrokerError, Reached};
pub use changelog::{
    Changelog, ChangelogError, ChangelogRecord, ChangelogWrite, ShardTransactions, CHANGELOG_CONFIG,
};
pub use cluster_data::{broker_addresses, delete_topics, live_groups, topics_named, LiveGroup};
pub use colo_allocation::MessageExtractor;
pub use dead_letters::{
    DeadLetters, REASON_HEADER, SOURCE_OFFSET_HEADER, SOURCE_PARTITION_HEADER, SOURCE_TOPIC_HEADER,
};
pub use election::{Election, ElectionEvent, ElectionSettings, StepDown};
pub use error::{SourceError, TopicError};
pub use mock::{group_member_epoch, group_member_id, MemberTarget, MockGroupTimings, MockKafka};
pub use observer::{NoObserver, PartitionState, SourceObserver};
pub use outputs::{read_outputs, OutputProducer, OutputRead, OutputSendFailed, OutputWrite};
pub use producer::{
    check_partitioner, KeyedProducer, Partitioning, ProduceError, ProducerSettings, PARTITIONER,
};
pub use record::{Record, TopicPartition};
pub use source::{
    AssignedPartition, Gate, GroupMember, GroupRejoin, KafkaSource, Revocation, Rewind,
    SourceEvent, SourceSettings, FETCH_QUEUE_BACKOFF_MS,
};
pub use topics::{
    await_listed, check_partition_counts, check_topic_usable, create_missing_topics,
    partition_counts, NewTopicSpec,
};
