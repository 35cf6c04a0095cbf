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
//! Its consumer-protocol groups get a range assignment, recomputed at
//! each join or leave: on a join it moves partitions between members that
//! stay, one hand-off feeding the next, where Apache Kafka's assignors
//! keep them in place. [`MockKafka::assign`] gives a group its target
//! assignment instead, as a broker's sticky assignor would have it.
//!
//! rdkafka's `MockCluster` wraps none of these settings, nor the member id
//! a target assignment names, so [`MockKafka::start`],
//! [`MockKafka::assign`], [`group_member_id`] and [`group_member_epoch`]
//! make librdkafka's own calls.

use rdkafka::client::{Client, ClientContext};
use rdkafka::config::ClientConfig;
use rdkafka::error::KafkaError;
use rdkafka::producer::{BaseProducer, Producer};
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::TopicPartitionList;
use std::ffi::CString;
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

/// librdkafka's own timings: for a cluster whose groups are not what it
/// shows.
impl Default for MockGroupTimings {
    fn default() -> Self {
        Self {
            first_round: Duration::from_secs(3),
            consumer_heartbeat: Duration::from_secs(3),
            consumer_session: Duration::from_secs(30),
        }
    }
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

    /// Makes `targets` the target assignment of the consumer-protocol group
    /// `group` from now on: the cluster computes none of its own for it any
    /// more, at a join or a leave either, so a member that joins holds
    /// nothing until a target names it, and a member's partitions are
    /// nobody's after it leaves until a target gives them out. Each member
    /// is given its target at its heartbeats, revocations first, a
    /// partition once its previous owner gave it up; members not named
    /// keep theirs. A group the cluster does not know yet (no member has
    /// heartbeat) is left as it is.
    ///
    /// # Errors
    /// A member id, the group or a topic holds a NUL byte, or librdkafka
    /// refuses the assignment.
    pub fn assign(&self, group: &str, targets: &[MemberTarget]) -> Result<(), KafkaError> {
        let invalid = || KafkaError::MockCluster(RDKafkaErrorCode::InvalidArgument);
        let group = CString::new(group).map_err(|_| invalid())?;
        let ids = targets
            .iter()
            .map(|target| CString::new(target.member_id.as_str()))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|_| invalid())?;
        let mut lists = Vec::with_capacity(targets.len());
        for target in targets {
            let mut list = TopicPartitionList::with_capacity(target.partitions.len());
            for (topic, partition) in &target.partitions {
                if topic.contains('\0') {
                    return Err(invalid());
                }
                list.add_partition(topic, *partition);
            }
            lists.push(list);
        }
        let mut id_ptrs: Vec<*mut std::ffi::c_char> =
            ids.iter().map(|id| id.as_ptr().cast_mut()).collect();
        let mut list_ptrs: Vec<_> = lists.iter().map(TopicPartitionList::ptr).collect();
        let count = i32::try_from(targets.len()).map_err(|_| invalid())?;
        // SAFETY: `owner` is a live client, and its mock cluster lives as
        // long as it. The member ids and lists outlive the calls; librdkafka
        // copies them into the target assignment, which it copies again into
        // the group, under the cluster's lock, and which is destroyed here.
        // One hole is librdkafka's: the timer that expires consumer-protocol
        // sessions (`rd_kafka_mock_cgrp_consumer_session_tmr_cb`, once a
        // second on the cluster's thread) unlocks that lock where it means
        // to take it, so a call here that it overlaps (microseconds) may
        // share the group with the cluster's thread. The demo calls it a
        // handful of times per change, naming no more members than it must.
        #[allow(unsafe_code)]
        let set = unsafe {
            let cluster =
                rdkafka_sys::rd_kafka_handle_mock_cluster(self.owner.client().native_ptr());
            if cluster.is_null() {
                false
            } else {
                let target = rdkafka_sys::rd_kafka_mock_cgrp_consumer_target_assignment_new(
                    id_ptrs.as_mut_ptr(),
                    count,
                    list_ptrs.as_mut_ptr(),
                );
                if target.is_null() {
                    false
                } else {
                    rdkafka_sys::rd_kafka_mock_cgrp_consumer_target_assignment(
                        cluster,
                        group.as_ptr(),
                        target,
                    );
                    rdkafka_sys::rd_kafka_mock_cgrp_consumer_target_assignment_destroy(target);
                    true
                }
            }
        };
        if set {
            Ok(())
        } else {
            Err(KafkaError::MockCluster(RDKafkaErrorCode::Fail))
        }
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

/// One member's partitions in a group's target assignment
/// ([`MockKafka::assign`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberTarget {
    /// As the member's client reports it ([`group_member_id`]).
    pub member_id: String,
    /// Topic and partition of each partition it is to hold.
    pub partitions: Vec<(String, i32)>,
}

/// The member id `client`, a consumer, has in its group under the consumer
/// protocol (KIP-848), where the client picks it when it is created; it
/// names the member in a target assignment ([`MockKafka::assign`]). None
/// under the classic protocol, whose group coordinator hands one out at
/// the first join, or for a client in no group. Blocks until the client's
/// group handler answers: call it off the async runtime's threads.
pub fn group_member_id<C: ClientContext>(client: &Client<C>) -> Option<String> {
    // SAFETY: `client` is live for the call; librdkafka returns a copy of
    // the id (or null), which is read, then freed with the client's own
    // allocator as its API asks.
    #[allow(unsafe_code)]
    let id = unsafe {
        let native = client.native_ptr();
        let id = rdkafka_sys::rd_kafka_memberid(native);
        if id.is_null() {
            None
        } else {
            let copied = std::ffi::CStr::from_ptr(id).to_string_lossy().into_owned();
            rdkafka_sys::rd_kafka_mem_free(native, id.cast());
            Some(copied)
        }
    };
    id.filter(|id| !id.is_empty())
}

/// The member epoch `client`, a consumer under the consumer protocol
/// (KIP-848), last had from its group's coordinator: above 0 once the
/// coordinator counts it a member with a target, even an empty one. None
/// for a client in no group. Blocks until the client's group handler
/// answers: call it off the async runtime's threads.
pub fn group_member_epoch<C: ClientContext>(client: &Client<C>) -> Option<i32> {
    // SAFETY: `client` is live for the call; librdkafka returns a copy of
    // the group's metadata (or null), which is read, then destroyed.
    #[allow(unsafe_code)]
    unsafe {
        let metadata = rdkafka_sys::rd_kafka_consumer_group_metadata(client.native_ptr());
        if metadata.is_null() {
            return None;
        }
        let epoch = rdkafka_sys::rd_kafka_consumer_group_metadata_generation_id(metadata);
        rdkafka_sys::rd_kafka_consumer_group_metadata_destroy(metadata);
        Some(epoch)
    }
}
