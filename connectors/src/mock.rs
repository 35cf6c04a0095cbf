//! librdkafka's in-process mock cluster, for the demo: a Kafka that needs
//! nothing but cargo. It speaks the Kafka protocol on loopback with consumer
//! groups, commits and rebalances, but holds each rebalance round open for
//! the members' session timeout less a second; it is no stand-in for a
//! broker in tests of the Kafka path.

use rdkafka::error::KafkaError;
use rdkafka::mocking::MockCluster;
use rdkafka::producer::DefaultProducerContext;

/// A running mock cluster; it stops when dropped.
pub struct MockKafka {
    cluster: MockCluster<'static, DefaultProducerContext>,
}

impl std::fmt::Debug for MockKafka {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MockKafka")
            .field("bootstrap_servers", &self.cluster.bootstrap_servers())
            .finish()
    }
}

impl MockKafka {
    /// Starts a cluster of `brokers` brokers on loopback.
    ///
    /// # Errors
    /// librdkafka cannot start it.
    pub fn start(brokers: i32) -> Result<Self, KafkaError> {
        Ok(Self {
            cluster: MockCluster::new(brokers)?,
        })
    }

    /// Creates `topic` with `partitions` partitions.
    ///
    /// # Errors
    /// The cluster refuses it (a topic of that name exists, say).
    pub fn create_topic(&self, topic: &str, partitions: i32) -> Result<(), KafkaError> {
        self.cluster.create_topic(topic, partitions, 1)
    }

    /// The `bootstrap.servers` of the cluster's brokers.
    pub fn bootstrap_servers(&self) -> String {
        self.cluster.bootstrap_servers()
    }
}
