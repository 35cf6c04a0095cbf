//! The Kafka source of one entity type: one consumer in the entity type's
//! group (cooperative-sticky), records per partition, and the group's
//! rebalances as events the service answers before the callback returns.
//!
//! The consumer is polled on a thread of its own, because librdkafka runs
//! the rebalance callback inside `poll`, and a revoke's callback waits for
//! the service: until the partitions' in-flight records are handled (then
//! it commits) and their shards handed off. Waiting on a runtime thread
//! would stall the runtime that does the hand-off.
//!
//! An assignment's callback does not wait: the group's round would wait
//! with it, and a broker may assign a partition here before its previous
//! owner revoked it, so the shard may only come once that owner's next
//! round is done. Each assigned partition's records instead wait behind
//! its [`Gate`] until the service opens it (its shard hosted here). Opening
//! reads the committed offset again: records below it were handled by the
//! previous owner after this assignment read its position, and are
//! dropped, so a graceful change hands each record to one node.
//!
//! Backpressure: at most `max_in_flight` records per partition, and
//! `max_in_flight_total` of all the source's partitions together, are in the
//! service's hands; past that the partition is paused, and resumed once
//! acks bring it below.

mod budget;
mod context;
mod events;
mod feeds;
mod poll;
mod settings;

pub use events::{AssignedPartition, Gate, Revocation, Rewind, SourceEvent};

pub(crate) use settings::GroupProtocol;
pub use settings::{SourceSettings, FETCH_QUEUE_BACKOFF_MS};

use crate::error::SourceError;
use crate::observer::{NoObserver, SourceObserver};
use budget::Budget;
use context::SourceContext;
use feeds::Feeds;
use parking_lot::Mutex;
use rdkafka::consumer::{BaseConsumer, Consumer};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use tokio::sync::mpsc;

/// A running source; stopped (committing what was handled) by
/// [`KafkaSource::shutdown`] or when dropped.
#[derive(Debug)]
pub struct KafkaSource {
    stop: Arc<AtomicBool>,
    rejoin: GroupRejoin,
    member: GroupMember,
    thread: Option<std::thread::JoinHandle<()>>,
}

/// A source's consumer as a member of its group, under the consumer
/// protocol (KIP-848), where the client picks its member id: what a mock
/// cluster's target assignment names it by, and whether the group's
/// coordinator counts it yet.
#[derive(Clone)]
pub struct GroupMember {
    id: Option<String>,
    /// The thread owns the consumer; this sees it while it runs.
    consumer: std::sync::Weak<BaseConsumer<SourceContext>>,
}

impl std::fmt::Debug for GroupMember {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GroupMember")
            .field("id", &self.id)
            .field("running", &(self.consumer.strong_count() > 0))
            .finish()
    }
}

impl GroupMember {
    /// Its member id; None under the classic protocol (see
    /// [`crate::group_member_id`]).
    pub fn id(&self) -> Option<&str> {
        self.id.as_deref()
    }

    /// Its member epoch, while the source runs: above 0 once the group's
    /// coordinator counts it a member with a target (see
    /// [`crate::group_member_epoch`]). Blocks briefly: call it off the
    /// async runtime's threads. It holds the consumer for the call: a
    /// source stopped meanwhile closes its consumer when the call ends,
    /// on this thread.
    pub fn epoch(&self) -> Option<i32> {
        let consumer = self.consumer.upgrade()?;
        crate::mock::group_member_epoch(consumer.client())
    }
}

/// Has a running source leave its group and join it again, as a new
/// member: for a group that left some of its partitions with no owner (a
/// broker that lost them after the group's leader died; Kafka assigns
/// them, and the rejoin is then never asked). Its partitions are revoked
/// first, as when it stops.
#[derive(Debug, Clone, Default)]
pub struct GroupRejoin(Arc<AtomicBool>);

impl GroupRejoin {
    pub fn rejoin(&self) {
        self.0.store(true, Ordering::Release);
    }

    /// Whether a rejoin was asked for since the last call: the consumer's
    /// thread takes each ask once.
    pub(crate) fn asked(&self) -> bool {
        self.0.swap(false, Ordering::AcqRel)
    }
}

impl KafkaSource {
    /// Subscribes and starts consuming. The events say which partitions
    /// are assigned, with their records.
    ///
    /// # Errors
    /// A bad configuration, or a subscription librdkafka refuses.
    pub fn start(
        settings: SourceSettings,
    ) -> Result<(Self, mpsc::UnboundedReceiver<SourceEvent>), SourceError> {
        Self::start_observed(settings, Arc::new(NoObserver))
    }

    /// [`Self::start`], reporting partitions and commits to `observer`.
    ///
    /// # Errors
    /// A bad configuration, or a subscription librdkafka refuses.
    pub fn start_observed(
        settings: SourceSettings,
        observer: Arc<dyn SourceObserver>,
    ) -> Result<(Self, mpsc::UnboundedReceiver<SourceEvent>), SourceError> {
        let config = settings.consumer_config()?;
        let (events, receiver) = mpsc::unbounded_channel();
        let feeds = Arc::new(Mutex::new(Feeds {
            by: HashMap::new(),
            max_in_flight: settings.max_in_flight,
            budget: Budget::new(settings.max_in_flight_total),
            stall_timeout: settings.stall_timeout,
        }));
        let (opens, opened) = std::sync::mpsc::channel();
        let (rewinds, rewound) = std::sync::mpsc::channel();
        let context = SourceContext {
            feeds: feeds.clone(),
            events,
            opens,
            rewinds,
            next_feed: std::sync::atomic::AtomicU64::new(0),
            timeout: settings.rebalance_timeout,
            commit_timeout: settings.commit_timeout,
            observer,
            watermarks: Mutex::new(HashMap::new()),
            committing: AtomicBool::new(false),
            consumer: std::sync::OnceLock::new(),
            rebalanced: (GroupProtocol::of(&settings.client)? == GroupProtocol::Classic)
                .then(|| AtomicBool::new(false)),
        };
        let consumer: Arc<BaseConsumer<SourceContext>> =
            Arc::new(config.create_with_context(context)?);
        let _ = consumer.context().consumer.set(Arc::downgrade(&consumer));
        let member = GroupMember {
            id: crate::mock::group_member_id(consumer.client()),
            consumer: Arc::downgrade(&consumer),
        };
        let topics: Vec<&str> = settings.topics.iter().map(String::as_str).collect();
        consumer.subscribe(&topics)?;
        let stop = Arc::new(AtomicBool::new(false));
        let rejoin = GroupRejoin::default();
        let thread = {
            let stop = stop.clone();
            let rejoining = rejoin.clone();
            let topics: Vec<String> = settings.topics.clone();
            std::thread::Builder::new()
                .name(format!("kafka-{}", settings.group_id))
                .spawn(move || {
                    poll::poll(
                        &consumer,
                        &feeds,
                        poll::Asks {
                            opened: &opened,
                            rewound: &rewound,
                            rejoin: &rejoining,
                            topics: &topics,
                        },
                        &stop,
                    )
                })
                .map_err(|e| {
                    SourceError::Kafka(rdkafka::error::KafkaError::ClientCreation(e.to_string()))
                })?
        };
        Ok((
            Self {
                stop,
                rejoin,
                member,
                thread: Some(thread),
            },
            receiver,
        ))
    }

    /// What has this source rejoin its group.
    pub fn group_rejoin(&self) -> GroupRejoin {
        self.rejoin.clone()
    }

    /// Its consumer as a member of its group.
    pub fn group_member(&self) -> GroupMember {
        self.member.clone()
    }

    /// Stops consuming and commits the offsets of what was handled. Blocks
    /// until the consumer has closed: call it off the async runtime's
    /// threads (`spawn_blocking`).
    pub fn shutdown(mut self) {
        self.stop_and_join();
    }

    fn stop_and_join(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl Drop for KafkaSource {
    /// Stops the consumer. On an async runtime's thread it does not wait
    /// for the consumer to close (its last revoke may wait for the service
    /// on this very runtime, for up to the rebalance timeout): the thread
    /// closes it on its own. Elsewhere it waits.
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if tokio::runtime::Handle::try_current().is_ok() {
            drop(self.thread.take());
        } else {
            self.stop_and_join();
        }
    }
}
