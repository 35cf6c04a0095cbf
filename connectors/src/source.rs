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
//! Backpressure: at most `max_in_flight` records per partition are in the
//! service's hands; past that the partition is paused, and resumed once
//! acks bring it below.

use crate::ack::{Ack, Offsets};
use crate::observer::{NoObserver, PartitionState, SourceObserver};
use parking_lot::Mutex;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer, ConsumerContext, Rebalance};
use rdkafka::message::Message;
use rdkafka::{ClientContext, TopicPartitionList};
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};

/// The librdkafka properties the source sets itself: overriding them would
/// break its guarantees.
const OWN_PROPERTIES: [&str; 6] = [
    "bootstrap.servers",
    "group.id",
    "enable.auto.offset.store",
    "enable.auto.commit",
    "auto.commit.interval.ms",
    "partition.assignment.strategy",
];

/// How an entity type's source consumes.
#[derive(Debug, Clone)]
pub struct SourceSettings {
    pub bootstrap_servers: String,
    /// `<cluster>.<entity type>`.
    pub group_id: String,
    pub topics: Vec<String>,
    /// Further librdkafka properties, passed through (security, timeouts).
    pub client: Vec<(String, String)>,
    /// Records of one partition in the service's hands at most.
    pub max_in_flight: usize,
    /// How often stored offsets are committed (and on revoke and shutdown).
    pub commit_interval: Duration,
    /// How long a rebalance callback waits for the service before going on.
    pub rebalance_timeout: Duration,
}

/// Why a source could not start.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    /// librdkafka refused the configuration or the subscription.
    #[error("kafka: {0}")]
    Kafka(#[from] rdkafka::error::KafkaError),
    /// A client property the source sets itself.
    #[error("client property {0:?} is set by colo and cannot be overridden")]
    OwnProperty(String),
    /// Nothing to consume.
    #[error("no topics to consume")]
    NoTopics,
    /// `max_in_flight` must be at least 1.
    #[error("max_in_flight must be at least 1")]
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
    /// A client property that must be a number of milliseconds.
    #[error("client property {key:?} must be a number of milliseconds, not {value:?}")]
    Milliseconds { key: String, value: String },
}

/// librdkafka's default `max.poll.interval.ms`.
const DEFAULT_MAX_POLL_INTERVAL: Duration = Duration::from_secs(300);
/// What the consumer needs besides the callback between two polls.
const POLL_MARGIN: Duration = Duration::from_secs(5);

impl SourceSettings {
    /// Checks what librdkafka would only find out in the middle of a
    /// rebalance.
    ///
    /// # Errors
    /// See [`SourceError`].
    pub fn validate(&self) -> Result<(), SourceError> {
        if self.topics.is_empty() {
            return Err(SourceError::NoTopics);
        }
        if self.max_in_flight == 0 {
            return Err(SourceError::NoInFlight);
        }
        for (key, _) in &self.client {
            if OWN_PROPERTIES.contains(&key.as_str()) {
                return Err(SourceError::OwnProperty(key.clone()));
            }
        }
        let max_poll_interval = match self
            .client
            .iter()
            .find(|(k, _)| k == "max.poll.interval.ms")
        {
            Some((key, value)) => Duration::from_millis(value.trim().parse().map_err(|_| {
                SourceError::Milliseconds {
                    key: key.clone(),
                    value: value.clone(),
                }
            })?),
            None => DEFAULT_MAX_POLL_INTERVAL,
        };
        if max_poll_interval < self.rebalance_timeout + POLL_MARGIN {
            return Err(SourceError::PollInterval {
                max_poll_interval,
                rebalance_timeout: self.rebalance_timeout,
                margin: POLL_MARGIN,
            });
        }
        Ok(())
    }
}

/// A partition of a topic.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TopicPartition {
    pub topic: String,
    pub partition: i32,
}

/// A consumed record. Its [`Ack`] must be acked once the record was handled
/// or dead-lettered; dropped unacked, the record is consumed again later.
#[derive(Debug)]
pub struct Record {
    /// Shared by every record of the partition.
    pub topic: Arc<str>,
    pub partition: i32,
    pub offset: i64,
    pub key: Option<Vec<u8>>,
    pub payload: Option<Vec<u8>>,
    pub ack: Ack,
}

/// A partition assigned to this node, with its records in order once its
/// gate is open.
#[derive(Debug)]
pub struct AssignedPartition {
    pub partition: TopicPartition,
    /// Ends when the partition is revoked or lost.
    pub records: mpsc::UnboundedReceiver<Record>,
    /// Open it once the partition's shard is hosted here.
    pub gate: Gate,
}

/// What holds an assigned partition's records back until the service can
/// handle them where they were consumed. Dropped unopened (the partition
/// revoked meanwhile, say), the records wait until the partition goes
/// (paused once as many as the in-flight bound wait).
#[derive(Debug)]
pub struct Gate {
    partition: TopicPartition,
    /// Which assignment of the partition: a gate of an earlier one opens
    /// nothing.
    feed: u64,
    opens: std::sync::mpsc::Sender<(TopicPartition, u64)>,
}

impl Gate {
    /// The partition's shard is hosted here: consume it, from its committed
    /// offset as it is now.
    pub fn open(self) {
        let _ = self.opens.send((self.partition, self.feed));
    }
}

/// A revoke the callback waits for, in two steps. Dropped, each step it
/// did not take is taken as not done, and the callback goes on.
#[derive(Debug)]
pub struct Revocation {
    settled: Option<std::sync::mpsc::SyncSender<oneshot::Sender<bool>>>,
    done: std::sync::mpsc::SyncSender<()>,
}

impl Revocation {
    /// Every record received of the revoked partitions was settled: the
    /// source stores and commits their offsets now, and this says whether
    /// the broker took the commit. It comes before the hand-off because the
    /// partitions' next owner starts once their shards are handed off, from
    /// the offset committed then.
    pub async fn commit(&mut self) -> bool {
        let Some(settled) = self.settled.take() else {
            return false;
        };
        let (reply, answer) = oneshot::channel();
        if settled.send(reply).is_err() {
            return false;
        }
        answer.await.unwrap_or(false)
    }

    /// The revoked partitions' shards were handed off: the callback returns
    /// and the partitions change owner.
    pub fn done(self) {
        let _ = self.done.send(());
    }
}

/// A rebalance of the entity type's group, as this node sees it.
#[derive(Debug)]
pub enum SourceEvent {
    /// Partitions assigned here, each one's records held behind its
    /// [`Gate`].
    Assigned { partitions: Vec<AssignedPartition> },
    /// Partitions revoked. Their record streams have ended: settle what was
    /// received, [`Revocation::commit`], hand their shards off, then
    /// [`Revocation::done`]; the partitions change owner after that.
    Revoked {
        partitions: Vec<TopicPartition>,
        revocation: Revocation,
    },
    /// Partitions lost (the session expired): another node may own them
    /// already. Drop their shards; nothing is committed.
    Lost { partitions: Vec<TopicPartition> },
}

/// A running source; stopped (committing what was handled) by
/// [`KafkaSource::shutdown`] or when dropped.
#[derive(Debug)]
pub struct KafkaSource {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
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
        settings.validate()?;
        let mut config = ClientConfig::new();
        for (key, value) in &settings.client {
            config.set(key, value);
        }
        config
            .set("bootstrap.servers", &settings.bootstrap_servers)
            .set("group.id", &settings.group_id)
            .set("partition.assignment.strategy", "cooperative-sticky")
            .set("enable.auto.offset.store", "false")
            // librdkafka commits what was stored every commit_interval, and
            // when partitions are unassigned; the source commits itself,
            // and waits, at every revoke and at shutdown.
            .set("enable.auto.commit", "true")
            .set(
                "auto.commit.interval.ms",
                settings
                    .commit_interval
                    .as_millis()
                    .clamp(1, i32::MAX as u128)
                    .to_string(),
            );
        for (key, value) in DEFAULT_PROPERTIES {
            if !settings.client.iter().any(|(k, _)| k == key) {
                config.set(key, value);
            }
        }
        let (events, receiver) = mpsc::unbounded_channel();
        let feeds = Arc::new(Mutex::new(Feeds {
            by: HashMap::new(),
            max_in_flight: settings.max_in_flight,
        }));
        let (opens, opened) = std::sync::mpsc::channel();
        let context = SourceContext {
            feeds: feeds.clone(),
            events,
            opens,
            next_feed: std::sync::atomic::AtomicU64::new(0),
            timeout: settings.rebalance_timeout,
            observer,
            high_watermarks: Mutex::new(HashMap::new()),
        };
        let consumer: BaseConsumer<SourceContext> = config.create_with_context(context)?;
        let topics: Vec<&str> = settings.topics.iter().map(String::as_str).collect();
        consumer.subscribe(&topics)?;
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let stop = stop.clone();
            std::thread::Builder::new()
                .name(format!("kafka-{}", settings.group_id))
                .spawn(move || poll(&consumer, &feeds, &opened, &stop))
                .map_err(|e| {
                    SourceError::Kafka(rdkafka::error::KafkaError::ClientCreation(e.to_string()))
                })?
        };
        Ok((
            Self {
                stop,
                thread: Some(thread),
            },
            receiver,
        ))
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
    fn drop(&mut self) {
        self.stop_and_join();
    }
}

/// librdkafka's `fetch.queue.backoff.ms` unless the client properties set
/// it.
pub const FETCH_QUEUE_BACKOFF_MS: &str = "10";

/// librdkafka properties the source sets unless the client properties do:
/// - `statistics.interval.ms`: the partitions' ends, for the lag;
/// - `auto.offset.reset`: a group without commits reads from the start;
/// - `fetch.queue.backoff.ms`: librdkafka stops fetching for this long
///   once its local queue is past its thresholds; its 1 s default leaves
///   the poll thread idle after it drained the queue in a fraction of that.
const DEFAULT_PROPERTIES: [(&str, &str); 3] = [
    ("statistics.interval.ms", "1000"),
    ("auto.offset.reset", "earliest"),
    ("fetch.queue.backoff.ms", FETCH_QUEUE_BACKOFF_MS),
];

/// How often, at most, held records are handed over, offsets stored and
/// partitions paused or resumed while records keep coming.
const MAINTAIN_EVERY: Duration = Duration::from_millis(5);

/// Records polled in a row before the clock is read again (for the
/// maintenance below and the reports): at a million records a second, a
/// reading every few dozen microseconds.
const CLOCK_EVERY: u32 = 32;

/// How often the partitions' states are reported.
const REPORT_EVERY: Duration = Duration::from_secs(1);

/// How long a poll waits for a record: also how long an opened gate may
/// wait for the poll thread.
const POLL_WAIT: Duration = Duration::from_millis(10);

/// How long opening gates waits for the committed offsets, and how long
/// it waits to ask again when they did not come.
const COMMITTED_WAIT: Duration = Duration::from_secs(5);
const COMMITTED_RETRY: Duration = Duration::from_millis(500);

/// The consumer's thread: poll, hand records to their partitions, open
/// gates, keep the in-flight bound and store what was handled (librdkafka
/// commits it).
fn poll(
    consumer: &BaseConsumer<SourceContext>,
    feeds: &Mutex<Feeds>,
    opened: &std::sync::mpsc::Receiver<(TopicPartition, u64)>,
    stop: &AtomicBool,
) {
    let mut last_report = std::time::Instant::now();
    let mut last_maintain = std::time::Instant::now();
    let mut idle = false;
    // Records polled since the clock was last read: reading it per record
    // costs as much as a record.
    let mut since_clock = 0u32;
    let mut opening = Vec::new();
    let mut open_again = std::time::Instant::now();
    while !stop.load(Ordering::Acquire) {
        // Not under the lock: the rebalance callback runs in here and
        // takes it.
        match consumer.poll(POLL_WAIT) {
            Some(Ok(message)) => {
                let raw = RawRecord {
                    partition: message.partition(),
                    offset: message.offset(),
                    key: message.key().map(<[u8]>::to_vec),
                    payload: message.payload().map(<[u8]>::to_vec),
                };
                feeds.lock().push(message.topic(), raw);
                since_clock += 1;
                if since_clock < CLOCK_EVERY {
                    continue;
                }
            }
            Some(Err(e)) => tracing::warn!(error = %e, "kafka consumer error"),
            None => idle = true,
        }
        since_clock = 0;
        opening.extend(opened.try_iter());
        if !opening.is_empty() && open_again <= std::time::Instant::now() {
            if open_gates(consumer, feeds, &mut opening) {
                idle = true;
            } else {
                open_again = std::time::Instant::now() + COMMITTED_RETRY;
            }
        }
        // Not after every record: storing offsets and pausing or resuming
        // partitions costs more than a record, and a few milliseconds'
        // delay changes neither the commits nor the in-flight bound much.
        if idle || last_maintain.elapsed() >= MAINTAIN_EVERY {
            last_maintain = std::time::Instant::now();
            idle = false;
            feeds.lock().maintain(consumer);
        }
        if last_report.elapsed() >= REPORT_EVERY {
            last_report = std::time::Instant::now();
            feeds.lock().report(consumer, &*consumer.context().observer);
        }
    }
    feeds.lock().maintain(consumer);
    consumer.context().commit_sync(consumer, "shutdown");
}

/// Opens the gates asked for whose assignment still holds: reads their
/// committed offsets (one request for all), below which records are
/// dropped. False, keeping them to open, if the offsets did not come.
fn open_gates(
    consumer: &BaseConsumer<SourceContext>,
    feeds: &Mutex<Feeds>,
    opening: &mut Vec<(TopicPartition, u64)>,
) -> bool {
    {
        let feeds = feeds.lock();
        opening.retain(|(tp, id)| feeds.closed(tp, *id));
    }
    if opening.is_empty() {
        return true;
    }
    let mut list = TopicPartitionList::new();
    for (tp, _) in opening.iter() {
        list.add_partition(&tp.topic, tp.partition);
    }
    // Not under the lock: this waits for the broker.
    let committed = match consumer.committed_offsets(list, COMMITTED_WAIT) {
        Ok(committed) => committed,
        Err(e) => {
            tracing::warn!(partitions = opening.len(), error = %e, "committed offsets not read; the partitions wait");
            return false;
        }
    };
    let mut feeds = feeds.lock();
    for (tp, id) in opening.drain(..) {
        let floor = committed
            .find_partition(&tp.topic, tp.partition)
            .and_then(|e| match e.offset() {
                rdkafka::Offset::Offset(offset) => Some(offset),
                _ => None,
            });
        feeds.open(&tp, id, floor);
    }
    true
}

/// A record as polled, before it is handed over with its ack.
#[derive(Debug)]
struct RawRecord {
    partition: i32,
    offset: i64,
    key: Option<Vec<u8>>,
    payload: Option<Vec<u8>>,
}

/// Whether an assigned partition's records go to the service yet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Held until the service opens the gate (and paused if as many as
    /// the in-flight bound wait).
    Closed,
    /// Consumed; records below `floor` (the offset committed when the gate
    /// opened) were handled elsewhere and are dropped.
    Open { floor: Option<i64> },
}

/// An assigned partition's way to the service.
#[derive(Debug)]
struct Feed {
    /// Which assignment of the partition this is.
    id: u64,
    phase: Phase,
    topic: Arc<str>,
    to_service: mpsc::UnboundedSender<Record>,
    offsets: Arc<Mutex<Offsets>>,
    /// Polled but not handed over: the partition is at its in-flight bound.
    held: VecDeque<RawRecord>,
    paused: bool,
    /// The position last stored.
    stored: Option<i64>,
}

impl Feed {
    /// Whether a record goes to the service now, rather than being held.
    fn takes(&self, max_in_flight: usize) -> bool {
        matches!(self.phase, Phase::Open { .. })
            && self.held.is_empty()
            && self.offsets.lock().in_flight() < max_in_flight
    }

    /// Whether a record was handled by the partition's previous owner.
    fn below_floor(&self, offset: i64) -> bool {
        matches!(self.phase, Phase::Open { floor: Some(floor) } if offset < floor)
    }

    fn hand_over(&self, raw: RawRecord) {
        let ack = Ack::new(self.offsets.clone(), raw.offset);
        let record = Record {
            topic: self.topic.clone(),
            partition: raw.partition,
            offset: raw.offset,
            key: raw.key,
            payload: raw.payload,
            ack,
        };
        // A service that stopped listening drops the record, and with it
        // the ack: the record is consumed again later.
        let _ = self.to_service.send(record);
    }
}

#[derive(Debug)]
struct Feeds {
    by: HashMap<TopicPartition, Feed>,
    max_in_flight: usize,
}

impl Feeds {
    fn push(&mut self, topic: &str, raw: RawRecord) {
        // Found by a scan, not a hash of a key built per record: a node has
        // a few dozen partitions, and this runs for every record.
        let found = self
            .by
            .iter_mut()
            .find(|(tp, _)| tp.partition == raw.partition && tp.topic == topic);
        // A record of a partition revoked meanwhile: its next owner reads it.
        let Some((_, feed)) = found else {
            return;
        };
        if feed.below_floor(raw.offset) {
            return;
        }
        if feed.takes(self.max_in_flight) {
            feed.hand_over(raw);
        } else {
            feed.held.push_back(raw);
        }
    }

    /// Whether this assignment of the partition is still here, closed.
    fn closed(&self, tp: &TopicPartition, id: u64) -> bool {
        self.by
            .get(tp)
            .is_some_and(|feed| feed.id == id && feed.phase == Phase::Closed)
    }

    /// Opens the partition's gate at `floor`; the held records below it are
    /// dropped, the others handed over by the next [`Self::maintain`].
    fn open(&mut self, tp: &TopicPartition, id: u64, floor: Option<i64>) {
        if let Some(feed) = self.by.get_mut(tp).filter(|f| f.id == id) {
            feed.phase = Phase::Open { floor };
            if let Some(floor) = floor {
                feed.held.retain(|raw| raw.offset >= floor);
            }
            tracing::debug!(topic = %tp.topic, partition = tp.partition, ?floor, "partition opened");
        }
    }

    /// Tells the observer each partition's state.
    fn report(&self, consumer: &BaseConsumer<SourceContext>, observer: &dyn SourceObserver) {
        for (tp, feed) in &self.by {
            let offsets = feed.offsets.lock();
            let next = offsets.position().or(feed.stored);
            let lag = consumer
                .context()
                .high_watermarks
                .lock()
                .get(tp)
                .copied()
                .and_then(|high| next.map(|n| (high - n).max(0)));
            observer.partition(
                tp,
                PartitionState {
                    in_flight: offsets.in_flight(),
                    paused: feed.paused,
                    lag,
                },
            );
        }
    }

    fn maintain(&mut self, consumer: &BaseConsumer<SourceContext>) {
        for (tp, feed) in &mut self.by {
            let open = matches!(feed.phase, Phase::Open { .. });
            while open
                && !feed.held.is_empty()
                && feed.offsets.lock().in_flight() < self.max_in_flight
            {
                if let Some(raw) = feed.held.pop_front() {
                    feed.hand_over(raw);
                }
            }
            // A closed partition is not paused at once: librdkafka fetches a
            // resumed partition again only at its broker thread's next
            // wakeup (up to a second), and a gate normally opens within
            // milliseconds. Its records wait in `held`, up to the bound.
            let pause = if open {
                !feed.held.is_empty()
            } else {
                feed.held.len() >= self.max_in_flight
            };
            if pause != feed.paused {
                let list = one(tp);
                let result = if pause {
                    consumer.pause(&list)
                } else {
                    consumer.resume(&list)
                };
                match result {
                    Ok(()) => feed.paused = pause,
                    Err(e) => {
                        tracing::warn!(topic = %tp.topic, partition = tp.partition, error = %e, "cannot pause or resume")
                    }
                }
            }
            store(consumer, tp, feed);
        }
    }
}

/// Stores the partition's position if it moved.
fn store(consumer: &BaseConsumer<SourceContext>, tp: &TopicPartition, feed: &mut Feed) {
    let position = feed.offsets.lock().position();
    if let Some(offset) = position.filter(|_| position != feed.stored) {
        match store_position(consumer, tp, offset) {
            Ok(()) => feed.stored = position,
            Err(e) => {
                tracing::debug!(topic = %tp.topic, partition = tp.partition, error = %e, "offset not stored")
            }
        }
    }
}

/// Stores `offset` as the next one to consume (what a commit records).
fn store_position(
    consumer: &BaseConsumer<SourceContext>,
    tp: &TopicPartition,
    offset: i64,
) -> rdkafka::error::KafkaResult<()> {
    let mut list = TopicPartitionList::new();
    list.add_partition_offset(&tp.topic, tp.partition, rdkafka::Offset::Offset(offset))?;
    consumer.store_offsets(&list)
}

fn one(tp: &TopicPartition) -> TopicPartitionList {
    let mut list = TopicPartitionList::new();
    list.add_partition(&tp.topic, tp.partition);
    list
}

fn partitions(list: &TopicPartitionList) -> Vec<TopicPartition> {
    list.elements()
        .iter()
        .map(|e| TopicPartition {
            topic: e.topic().to_string(),
            partition: e.partition(),
        })
        .collect()
}

/// The consumer's context: turns rebalances into events and waits for the
/// service's answer.
struct SourceContext {
    feeds: Arc<Mutex<Feeds>>,
    events: mpsc::UnboundedSender<SourceEvent>,
    /// Where gates say they opened.
    opens: std::sync::mpsc::Sender<(TopicPartition, u64)>,
    next_feed: std::sync::atomic::AtomicU64,
    timeout: Duration,
    observer: Arc<dyn SourceObserver>,
    /// Each partition's end, from librdkafka's statistics.
    high_watermarks: Mutex<HashMap<TopicPartition, i64>>,
}

impl SourceContext {
    /// Commits the stored offsets and waits for the broker's answer: true
    /// if they are committed (or nothing was new).
    fn commit_sync(&self, consumer: &BaseConsumer<Self>, when: &str) -> bool {
        let started = std::time::Instant::now();
        match consumer.commit_consumer_state(CommitMode::Sync) {
            // Nothing new since the last commit is a commit answered at once:
            // what the revoke or shutdown waited for is done.
            Ok(())
            | Err(rdkafka::error::KafkaError::ConsumerCommit(
                rdkafka::types::RDKafkaErrorCode::NoOffset,
            )) => {
                self.observer.committed(Some(started.elapsed()), true);
                true
            }
            Err(e) => {
                self.observer.committed(Some(started.elapsed()), false);
                tracing::warn!(error = %e, "offsets not committed at {when}");
                false
            }
        }
    }

    fn assigned(&self, list: &TopicPartitionList) {
        let mut assigned = Vec::new();
        {
            let mut feeds = self.feeds.lock();
            for tp in partitions(list) {
                let (to_service, records) = mpsc::unbounded_channel();
                let id = self.next_feed.fetch_add(1, Ordering::Relaxed);
                feeds.by.insert(
                    tp.clone(),
                    Feed {
                        id,
                        phase: Phase::Closed,
                        topic: Arc::from(tp.topic.as_str()),
                        to_service,
                        offsets: Arc::default(),
                        held: VecDeque::new(),
                        paused: false,
                        stored: None,
                    },
                );
                assigned.push(AssignedPartition {
                    gate: Gate {
                        partition: tp.clone(),
                        feed: id,
                        opens: self.opens.clone(),
                    },
                    partition: tp,
                    records,
                });
            }
        }
        tracing::info!(partitions = assigned.len(), "kafka partitions assigned");
        if self
            .events
            .send(SourceEvent::Assigned {
                partitions: assigned,
            })
            .is_err()
        {
            tracing::warn!("kafka source: nobody listens to rebalance events");
        }
    }

    fn revoked(&self, consumer: &BaseConsumer<Self>, list: &TopicPartitionList) {
        let revoked = partitions(list);
        let removed: Vec<(TopicPartition, Feed)> = {
            let mut feeds = self.feeds.lock();
            revoked
                .iter()
                .filter_map(|tp| feeds.by.remove(tp).map(|f| (tp.clone(), f)))
                .collect()
        };
        for tp in &revoked {
            self.observer.partition_gone(tp);
        }
        // librdkafka keeps a partition's pause across its unassignment: one
        // paused here would come back paused if assigned here again, with a
        // new feed that does not know it.
        for (tp, feed) in &removed {
            if feed.paused {
                if let Err(e) = consumer.resume(&one(tp)) {
                    tracing::warn!(topic = %tp.topic, partition = tp.partition, error = %e, "cannot resume a revoked partition");
                }
            }
        }
        if consumer.assignment_lost() {
            tracing::warn!(partitions = revoked.len(), "kafka partitions lost");
            let _ = self.events.send(SourceEvent::Lost {
                partitions: revoked,
            });
            return;
        }
        tracing::info!(partitions = revoked.len(), "kafka partitions revoked");
        // Their streams end with the feeds (the senders dropped here); what
        // the service received it settles now.
        let offsets: Vec<(TopicPartition, Arc<Mutex<Offsets>>)> = removed
            .into_iter()
            .map(|(tp, feed)| (tp, feed.offsets))
            .collect();
        let (settled, settled_wait) = std::sync::mpsc::sync_channel(1);
        let (done, done_wait) = std::sync::mpsc::sync_channel(1);
        let deadline = std::time::Instant::now() + self.timeout;
        let sent = self.events.send(SourceEvent::Revoked {
            partitions: revoked,
            revocation: Revocation {
                settled: Some(settled),
                done,
            },
        });
        if sent.is_err() {
            tracing::warn!("kafka source: nobody listens to rebalance events");
        }
        let reply = wait_until(
            &settled_wait,
            deadline,
            "settling the revoked partitions' records",
        );
        for (tp, offsets) in offsets {
            if let Some(position) = offsets.lock().position() {
                if let Err(e) = store_position(consumer, &tp, position) {
                    tracing::warn!(topic = %tp.topic, partition = tp.partition, error = %e, "offset not stored on revoke");
                }
            }
        }
        let committed = self.commit_sync(consumer, "revoke");
        if let Some(reply) = reply {
            let _ = reply.send(committed);
        }
        if sent.is_ok() {
            wait_until(
                &done_wait,
                deadline,
                "handing off the revoked partitions' shards",
            );
        }
    }
}

/// Waits for the service's answer until `deadline`; `None`, logged, if it
/// does not come.
fn wait_until<T>(
    answer: &std::sync::mpsc::Receiver<T>,
    deadline: std::time::Instant,
    what: &str,
) -> Option<T> {
    let left = deadline.saturating_duration_since(std::time::Instant::now());
    match answer.recv_timeout(left) {
        Ok(value) => Some(value),
        Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
            tracing::warn!("kafka source: {what} not done within the rebalance timeout; going on");
            None
        }
        Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
            tracing::warn!("kafka source: {what} not done; going on");
            None
        }
    }
}

impl ClientContext for SourceContext {
    /// librdkafka's statistics carry each partition's high watermark, which
    /// the lag is measured against.
    fn stats(&self, statistics: rdkafka::Statistics) {
        let mut highs = self.high_watermarks.lock();
        for (topic, t) in statistics.topics {
            for (partition, p) in t.partitions {
                if partition >= 0 && p.hi_offset >= 0 {
                    highs.insert(
                        TopicPartition {
                            topic: topic.clone(),
                            partition,
                        },
                        p.hi_offset,
                    );
                }
            }
        }
    }
}

impl ConsumerContext for SourceContext {
    /// librdkafka's own commits (on its timer and at unassignment): counted
    /// by outcome; their latency is not known here.
    fn commit_callback(
        &self,
        result: rdkafka::error::KafkaResult<()>,
        _offsets: &TopicPartitionList,
    ) {
        match result {
            Ok(()) => self.observer.committed(None, true),
            Err(rdkafka::error::KafkaError::ConsumerCommit(
                rdkafka::types::RDKafkaErrorCode::NoOffset,
            )) => {}
            Err(e) => {
                self.observer.committed(None, false);
                tracing::warn!(error = %e, "offsets not committed");
            }
        }
    }

    fn pre_rebalance(&self, consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        match rebalance {
            Rebalance::Assign(list) => self.assigned(list),
            Rebalance::Revoke(list) => self.revoked(consumer, list),
            Rebalance::Error(e) => tracing::warn!(error = %e, "kafka rebalance error"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings() -> SourceSettings {
        SourceSettings {
            bootstrap_servers: "127.0.0.1:9092".into(),
            group_id: "c.t".into(),
            topics: vec!["t".into()],
            client: vec![],
            max_in_flight: 10,
            commit_interval: Duration::from_secs(5),
            rebalance_timeout: Duration::from_secs(60),
        }
    }

    #[test]
    fn the_poll_interval_must_outlast_a_blocking_rebalance_callback() {
        assert!(settings().validate().is_ok(), "librdkafka's 300 s default");
        let mut short = settings();
        short.client = vec![("max.poll.interval.ms".into(), "30000".into())];
        let error = short.validate().unwrap_err().to_string();
        assert!(
            error.contains("max.poll.interval.ms") && error.contains("60s"),
            "{error}"
        );
        let mut garbled = settings();
        garbled.client = vec![("max.poll.interval.ms".into(), "5 minutes".into())];
        assert!(garbled
            .validate()
            .unwrap_err()
            .to_string()
            .contains("5 minutes"));
    }

    #[test]
    fn properties_the_source_relies_on_cannot_be_overridden() {
        let mut s = settings();
        s.client = vec![("enable.auto.offset.store".into(), "true".into())];
        assert!(
            matches!(s.validate(), Err(SourceError::OwnProperty(k)) if k == "enable.auto.offset.store")
        );
        let mut s = settings();
        s.topics.clear();
        assert!(matches!(s.validate(), Err(SourceError::NoTopics)));
        let mut s = settings();
        s.max_in_flight = 0;
        assert!(matches!(s.validate(), Err(SourceError::NoInFlight)));
    }
}
