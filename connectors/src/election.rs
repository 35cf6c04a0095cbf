//! Electing one member of a cluster through a consumer group, and following
//! the log the elected member writes.
//!
//! Every node joins one group on a one-partition topic; the member the
//! group assigns that partition is elected. The broker's group coordinator
//! is the only arbiter: colo runs no consensus of its own. Being assigned
//! the partition is not proof that no one else still believes it is
//! elected (a broker may assign it before its previous owner revoked it),
//! so the elected member fences its predecessors through the log itself:
//! the service writes an epoch there, and every member follows the log.
//!
//! The group's consumer and the log's reader are polled on one thread of
//! their own: librdkafka runs the rebalance callback inside `poll`, and a
//! revoke waits (bounded) until the service has stepped down.

use crate::client::client_config;
use crate::error::SourceError;
use crate::source::{GroupProtocol, GroupRejoin};
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer, ConsumerContext, Rebalance};
use rdkafka::message::Message;
use rdkafka::{ClientContext, Offset, TopicPartitionList};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::mpsc;

/// The topic's one partition.
const PARTITION: i32 = 0;
/// How long one poll of each consumer waits.
const POLL_WAIT: Duration = Duration::from_millis(50);
/// After a consumer could not be made, the next try.
const RETRY: Duration = Duration::from_secs(1);

/// Where and how a member takes part.
#[derive(Debug, Clone)]
pub struct ElectionSettings {
    pub bootstrap_servers: String,
    /// The pass-through client properties (security and the like).
    pub client: Vec<(String, String)>,
    /// The group every member joins.
    pub group_id: String,
    /// The one-partition topic whose partition elects, and whose records
    /// every member follows.
    pub topic: String,
    /// How this member is named in the group's listings: the node's
    /// address.
    pub member: String,
    /// How long the group waits for a silent member before it assigns the
    /// partition to another (classic protocol only; with the consumer
    /// protocol the broker decides).
    pub session_timeout: Duration,
    /// How long a revoke waits for the service to step down.
    pub step_down_timeout: Duration,
}

/// What a member learns.
#[derive(Debug)]
pub enum ElectionEvent {
    /// This member holds the partition: it is elected, as far as the
    /// group is concerned.
    Elected,
    /// It no longer does (revoked, lost, or the member left the group):
    /// the service stops what it runs as the elected member, then lets
    /// `StepDown` go.
    Deposed(StepDown),
    /// A record of the log, in offset order from its first.
    Record {
        offset: i64,
        key: Vec<u8>,
        /// `None`: a tombstone.
        value: Option<Vec<u8>>,
    },
}

/// The service's answer to a deposition: [`StepDown::done`] once it has
/// stopped; dropped without it, the revoke is told that it did not.
#[derive(Debug)]
pub struct StepDown {
    answer: Option<std::sync::mpsc::SyncSender<bool>>,
}

impl StepDown {
    /// The service has stopped what it ran as the elected member.
    pub fn done(mut self) {
        if let Some(answer) = self.answer.take() {
            let _ = answer.send(true);
        }
    }
}

impl Drop for StepDown {
    fn drop(&mut self) {
        if let Some(answer) = self.answer.take() {
            let _ = answer.send(false);
        }
    }
}

/// A running member; it leaves the group when stopped or dropped.
#[derive(Debug)]
pub struct Election {
    stop: Arc<AtomicBool>,
    rejoin: GroupRejoin,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Election {
    /// Joins the group and follows the log from its first record.
    ///
    /// # Errors
    /// A configuration librdkafka refuses.
    pub fn start(
        settings: ElectionSettings,
    ) -> Result<(Self, mpsc::UnboundedReceiver<ElectionEvent>), SourceError> {
        let (events, receiver) = mpsc::unbounded_channel();
        // Both made here, so that a bad configuration fails the start.
        let member = Member::join(&settings, &events)?;
        let reader = follow(&settings)?;
        let stop = Arc::new(AtomicBool::new(false));
        let rejoin = GroupRejoin::default();
        let thread = {
            let (stop, rejoin) = (stop.clone(), rejoin.clone());
            std::thread::Builder::new()
                .name(format!("kafka-{}", settings.group_id))
                .spawn(move || run(&settings, member, &reader, &events, &stop, &rejoin))
                .map_err(|e| {
                    SourceError::Kafka(rdkafka::error::KafkaError::ClientCreation(e.to_string()))
                })?
        };
        Ok((
            Self {
                stop,
                rejoin,
                thread: Some(thread),
            },
            receiver,
        ))
    }

    /// Leaves the group and joins it again as a new member: for a group
    /// whose broker left the partition unassigned (DEVELOPERS.md, "The
    /// coordinator's election").
    pub fn rejoin(&self) {
        self.rejoin.rejoin();
    }

    /// Leaves the group. Blocks until the consumer has closed (a revoke
    /// may wait for the service): call it off the async runtime's threads.
    pub fn shutdown(mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl Drop for Election {
    /// Stops the member; its thread leaves the group on its own.
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
    }
}

/// The group's callbacks: the partition's coming and going, as events.
struct MemberContext {
    topic: String,
    events: mpsc::UnboundedSender<ElectionEvent>,
    step_down_timeout: Duration,
}

impl MemberContext {
    fn holds_partition(&self, list: &TopicPartitionList) -> bool {
        list.elements()
            .iter()
            .any(|e| e.topic() == self.topic && e.partition() == PARTITION)
    }

    fn deposed(&self) {
        let (answer, answered) = std::sync::mpsc::sync_channel(1);
        let step_down = StepDown {
            answer: Some(answer),
        };
        if self.events.send(ElectionEvent::Deposed(step_down)).is_err() {
            return;
        }
        match answered.recv_timeout(self.step_down_timeout) {
            Ok(true) => {}
            Ok(false) => tracing::warn!("the elected member did not step down cleanly"),
            Err(_) => {
                tracing::warn!(timeout = ?self.step_down_timeout, "the elected member did not step down in time; the partition goes on")
            }
        }
    }
}

impl ClientContext for MemberContext {
    /// librdkafka warns of any commit that fails without a callback. The
    /// member's one commit of its position fails when the group moves on
    /// meanwhile (nodes that start together): expected, and harmless, so
    /// said at info.
    fn log(&self, level: rdkafka::config::RDKafkaLogLevel, fac: &str, message: &str) {
        if matches!(level, rdkafka::config::RDKafkaLogLevel::Warning) && fac == "COMMITFAIL" {
            tracing::info!(target: "librdkafka", "librdkafka: {fac} {message}");
        } else {
            crate::client::log_at_its_level(level, fac, message);
        }
    }
}

impl ConsumerContext for MemberContext {
    fn pre_rebalance(&self, _: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        match rebalance {
            Rebalance::Revoke(list) if self.holds_partition(list) => self.deposed(),
            Rebalance::Error(e) => tracing::warn!(error = %e, "election rebalance error"),
            _ => {}
        }
    }

    fn post_rebalance(&self, _: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        if let Rebalance::Assign(list) = rebalance {
            if self.holds_partition(list) {
                let _ = self.events.send(ElectionEvent::Elected);
            }
        }
    }
}

/// One membership of the group.
struct Member {
    consumer: BaseConsumer<MemberContext>,
    /// Whether its position has been committed since it was elected: a
    /// broker may list a group only once it has committed offsets, and
    /// the cluster's tools look for live groups in that list.
    committed: bool,
}

impl Member {
    fn join(
        settings: &ElectionSettings,
        events: &mpsc::UnboundedSender<ElectionEvent>,
    ) -> Result<Self, SourceError> {
        let protocol = GroupProtocol::of(&settings.client)?;
        let mut config = client_config(&settings.client);
        config
            .set("bootstrap.servers", &settings.bootstrap_servers)
            .set("group.id", &settings.group_id)
            .set("group.protocol", protocol.name())
            .set("client.id", &settings.member)
            .set("enable.auto.commit", "false")
            // The partition is held, not read: a new holder starts at its
            // end.
            .set("auto.offset.reset", "latest");
        if protocol == GroupProtocol::Classic {
            config
                .set("partition.assignment.strategy", "cooperative-sticky")
                .set(
                    "session.timeout.ms",
                    settings.session_timeout.as_millis().to_string(),
                )
                .set(
                    "heartbeat.interval.ms",
                    (settings.session_timeout / 6)
                        .as_millis()
                        .max(1)
                        .to_string(),
                );
        }
        let context = MemberContext {
            topic: settings.topic.clone(),
            events: events.clone(),
            step_down_timeout: settings.step_down_timeout,
        };
        let consumer: BaseConsumer<MemberContext> = config.create_with_context(context)?;
        consumer.subscribe(&[&settings.topic])?;
        Ok(Self {
            consumer,
            committed: false,
        })
    }

    fn poll(&mut self) {
        // The partition's records are not read here: the log's reader
        // reads them, from the first.
        if let Some(Err(e)) = self.consumer.poll(POLL_WAIT) {
            tracing::debug!(error = %e, "election consumer");
        }
        if !self.committed {
            self.commit_position();
        }
    }

    /// Commits the held partition's position once it is known.
    fn commit_position(&mut self) {
        let Ok(positions) = self.consumer.position() else {
            return;
        };
        let known = positions
            .elements()
            .iter()
            .any(|e| matches!(e.offset(), Offset::Offset(_)));
        if known {
            self.committed = self.consumer.commit(&positions, CommitMode::Async).is_ok();
        }
    }
}

/// The log's reader: no group, from the partition's first record.
fn follow(settings: &ElectionSettings) -> Result<BaseConsumer, SourceError> {
    let reader: BaseConsumer = client_config(&settings.client)
        .set("bootstrap.servers", &settings.bootstrap_servers)
        // librdkafka assigns only with a group id; this one never joins
        // (no subscription) and never commits.
        .set("group.id", format!("{}.reader", settings.group_id))
        .set("enable.auto.commit", "false")
        .set("auto.offset.reset", "earliest")
        .set("fetch.wait.max.ms", "100")
        .create()?;
    let mut assignment = TopicPartitionList::new();
    assignment.add_partition_offset(&settings.topic, PARTITION, Offset::Offset(0))?;
    reader.assign(&assignment)?;
    Ok(reader)
}

fn run(
    settings: &ElectionSettings,
    member: Member,
    reader: &BaseConsumer,
    events: &mpsc::UnboundedSender<ElectionEvent>,
    stop: &AtomicBool,
    rejoin: &GroupRejoin,
) {
    let mut member = Some(member);
    let mut next_try = Instant::now();
    let mut last_offset = -1;
    while !stop.load(Ordering::Acquire) && !events.is_closed() {
        if rejoin.asked() {
            // Dropping the consumer leaves the group (a revoke first, if it
            // held the partition).
            drop(member.take());
            tracing::info!(group = %settings.group_id, "rejoining the election group");
        }
        if member.is_none() && Instant::now() >= next_try {
            match Member::join(settings, events) {
                Ok(joined) => member = Some(joined),
                Err(e) => {
                    tracing::warn!(error = %e, retry_in = ?RETRY, "election group not joined");
                    next_try = Instant::now() + RETRY;
                }
            }
        }
        if let Some(member) = member.as_mut() {
            member.poll();
        }
        while let Some(polled) = reader.poll(if member.is_some() {
            Duration::ZERO
        } else {
            POLL_WAIT
        }) {
            match polled {
                Ok(message) => {
                    // A broker may serve a compacted batch more than once.
                    if message.offset() <= last_offset {
                        continue;
                    }
                    last_offset = message.offset();
                    let record = ElectionEvent::Record {
                        offset: message.offset(),
                        key: message.key().unwrap_or_default().to_vec(),
                        value: message.payload().map(<[u8]>::to_vec),
                    };
                    if events.send(record).is_err() {
                        return;
                    }
                }
                Err(e) => {
                    tracing::debug!(error = %e, "coordinator log reader");
                    break;
                }
            }
        }
    }
}
