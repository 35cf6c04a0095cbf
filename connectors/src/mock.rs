//! librdkafka's in-process mock cluster, for the demo: a Kafka that needs
//! nothing but cargo. It speaks the Kafka protocol on loopback with consumer
//! groups, commits and rebalances, but holds each rebalance round open for
//! the members' session timeout less a second (a broker ends a round once
//! every member has joined); it is no stand-in for a broker in tests of the
//! Kafka path.
//!
//! Its group coordinator holds an empty group's first round for
//! `group.initial.rebalance.delay.ms`, 3 s unless set, and meanwhile
//! expires members whose session ran out: a session shorter than the
//! first round never gets a member through it, and every later round is
//! held for that session less a second. So [`MockKafka::start`] sets the
//! first round's delay, which rdkafka's `MockCluster` does not wrap,
//! through librdkafka's own call; the sessions, and every round after the
//! first, can then be short.

use rdkafka::config::ClientConfig;
use rdkafka::error::KafkaError;
use rdkafka::producer::{BaseProducer, Producer};
use rdkafka::types::RDKafkaErrorCode;
use std::time::Duration;

/// A running mock cluster; it stops when dropped.
pub struct MockKafka {
    /// The client the cluster belongs to: librdkafka makes a mock cluster
    /// of a client configured with `test.mock.num.brokers`, and destroys
    /// it with the client.
    owner: BaseProducer,
}

impl std::fmt::Debug for MockKafka {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MockKafka")
            .field("bootstrap_servers", &self.bootstrap_servers())
            .finish()
    }
}

impl MockKafka {
    /// Starts a cluster of `brokers` brokers on loopback whose groups'
    /// first round is held for `first_round` (3 s is librdkafka's default).
    ///
    /// # Errors
    /// librdkafka cannot start it.
    pub fn start(brokers: i32, first_round: Duration) -> Result<Self, KafkaError> {
        let owner: BaseProducer = ClientConfig::new()
            .set("test.mock.num.brokers", brokers.to_string())
            .create()?;
        let delay = i32::try_from(first_round.as_millis()).unwrap_or(i32::MAX);
        // SAFETY: `owner` is a live client for the whole block. Its mock
        // cluster, if it has one, lives as long as it; the second call only
        // stores the delay in the cluster's defaults, under the cluster's
        // lock.
        #[allow(unsafe_code)]
        let made = unsafe {
            let cluster = rdkafka_sys::rd_kafka_handle_mock_cluster(owner.client().native_ptr());
            if !cluster.is_null() {
                rdkafka_sys::rd_kafka_mock_group_initial_rebalance_delay_ms(cluster, delay);
            }
            !cluster.is_null()
        };
        if !made {
            return Err(KafkaError::MockCluster(RDKafkaErrorCode::Fail));
        }
        Ok(Self { owner })
    }

    /// Creates `topic` with `partitions` partitions.
    ///
    /// # Errors
    /// The cluster refuses it (a topic of that name exists, say).
    pub fn create_topic(&self, topic: &str, partitions: i32) -> Result<(), KafkaError> {
        self.cluster()?.create_topic(topic, partitions, 1)
    }

    /// The `bootstrap.servers` of the cluster's brokers.
    pub fn bootstrap_servers(&self) -> String {
        self.cluster()
            .map(|cluster| cluster.bootstrap_servers())
            .unwrap_or_default()
    }

    fn cluster(
        &self,
    ) -> Result<
        rdkafka::mocking::MockCluster<'_, rdkafka::producer::DefaultProducerContext>,
        KafkaError,
    > {
        self.owner
            .client()
            .mock_cluster()
            .ok_or(KafkaError::MockCluster(RDKafkaErrorCode::Fail))
    }
}
