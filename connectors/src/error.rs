//! Why a source, a topic check or a dead-letter producer could not start:
//! the errors a program shows its operator at startup.

use std::time::Duration;

/// Why a source could not start.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    /// librdkafka refused the configuration or the subscription.
    #[error("kafka: {0}")]
    Kafka(#[from] rdkafka::error::KafkaError),
    /// A client property the source sets itself.
    #[error("client property {0:?} is set by colo and cannot be overridden")]
    OwnProperty(String),
    /// `isolation.level` other than `read_committed`: records of aborted
    /// transactions would be handled, and a transaction's records handled
    /// before it is known to commit.
    #[error("client property \"isolation.level\" must be \"read_committed\", not {0:?}: records of transactions that abort would be handled")]
    Isolation(String),
    /// `group.protocol` names no protocol librdkafka has.
    #[error("client property \"group.protocol\" must be \"classic\" or \"consumer\", not {0:?}")]
    GroupProtocol(String),
    /// A client property the group protocol does not take.
    #[error("client property {key:?} cannot be set with group.protocol = {protocol:?}: {instead}")]
    ProtocolProperty {
        key: String,
        protocol: &'static str,
        instead: &'static str,
    },
    /// Nothing to consume.
    #[error("no topics to consume")]
    NoTopics,
    /// `max_in_flight` and `max_in_flight_total` must be at least 1.
    #[error("max_in_flight and max_in_flight_total must be at least 1")]
    NoInFlight,
    /// A rebalance callback may block for `rebalance_timeout`; the consumer
    /// does not poll meanwhile, and one that does not poll for
    /// `max.poll.interval.ms` is thrown out of the group in the middle of
    /// its hand-off.
    #[error("max.poll.interval.ms ({max_poll_interval:?}) must exceed the rebalance timeout ({rebalance_timeout:?}) by at least {margin:?}, or a hand-off inside the rebalance callback gets the node thrown out of the group")]
    PollInterval {
        max_poll_interval: Duration,
        rebalance_timeout: Duration,
        margin: Duration,
    },
    /// A topic is missing, or the broker refuses it to this client.
    #[error(transparent)]
    Topic(#[from] TopicError),
    /// A client property that must be a number of milliseconds.
    #[error("client property {key:?} must be a number of milliseconds, not {value:?}")]
    Milliseconds { key: String, value: String },
}

/// Why a topic does not fit the entity type.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TopicError {
    /// The broker does not know the topic.
    #[error("topic {topic:?} does not exist")]
    Missing { topic: String },
    /// The broker refuses this client the topic's metadata: it would refuse
    /// it writes too.
    #[error(
        "topic {topic:?} cannot be used: the broker does not authorize this client for it ({code})"
    )]
    Unauthorized {
        topic: String,
        code: rdkafka::types::RDKafkaErrorCode,
    },
    /// Shard = partition: the counts must be equal.
    #[error("topic {topic:?} has {partitions} partitions but the entity type has {number_of_shards} shards; they must be equal")]
    PartitionCount {
        topic: String,
        partitions: usize,
        number_of_shards: u32,
    },
}
