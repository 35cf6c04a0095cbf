//! librdkafka's in-process mock cluster, for the demo: a Kafka that needs
//! nothing but cargo. It speaks the Kafka protocol on loopback with consumer
//! groups, commits and rebalances; it is no stand-in for a broker in tests
//! of the Kafka path.
//!
//! Its group coordinator paces groups unlike a broker, and the clock it
//! keeps is librdkafka's mock defaults unless set ([`MockGroupTimings`]):
//! - Classic groups: it holds an empty group's first round for
//!   `group.initial.rebalance.delay.ms` (3 s), expiring members whose
//!   session runs out meanwhile, and every later round for the members'
//!   session timeout less a second, even once all have joined (a broker
//!   ends a round then). A cooperative join takes two rounds.
//! - Consumer-protocol groups (KIP-848): no rounds; it answers each
//!   member's heartbeat with its next assignment, revocations first, and
//!   tells members to heartbeat every 3 s, with 30 s sessions.
//!
//! rdkafka's `MockCluster` wraps none of these settings, so
//! [`MockKafka::start`] makes librdkafka's own calls.

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

/// How the mock's group coordinator paces its groups (see the module's
/// doc for what each does there).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MockGroupTimings {
    /// How long a new classic group's first round is held (librdkafka's
    /// mock: 3 s).
    pub first_round: Duration,
    /// How often members of the consumer protocol heartbeat, which is when
    /// they learn of partitions to give up or to take (3 s).
    pub consumer_heartbeat: Duration,
    /// Their session timeout (30 s).
    pub consumer_session: Duration,
}

impl MockKafka {
    /// Starts a cluster of `brokers` brokers on loopback whose groups are
    /// paced by `timings`.
    ///
    /// # Errors
    /// librdkafka cannot start it.
    pub fn start(brokers: i32, timings: MockGroupTimings) -> Result<Self, KafkaError> {
        let owner: BaseProducer = ClientConfig::new()
            .set("test.mock.num.brokers", brokers.to_string())
            .create()?;
        let ms = |d: Duration| i32::try_from(d.as_millis()).unwrap_or(i32::MAX);
        let (delay, heartbeat, session) = (
            ms(timings.first_round),
            ms(timings.consumer_heartbeat),
            ms(timings.consumer_session),
        );
        // SAFETY: `owner` is a live client for the whole block. Its mock
        // cluster, if it has one, lives as long as it; the other calls only
        // store a setting in the cluster's defaults, under the cluster's
        // lock.
        #[allow(unsafe_code)]
        let made = unsafe {
            let cluster = rdkafka_sys::rd_kafka_handle_mock_cluster(owner.client().native_ptr());
            if !cluster.is_null() {
                rdkafka_sys::rd_kafka_mock_group_initial_rebalance_delay_ms(cluster, delay);
                rdkafka_sys::rd_kafka_mock_set_group_consumer_heartbeat_interval_ms(
                    cluster, heartbeat,
                );
                rdkafka_sys::rd_kafka_mock_set_group_consumer_session_timeout_ms(cluster, session);
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
