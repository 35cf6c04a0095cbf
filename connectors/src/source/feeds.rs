//! Each assigned partition's way from the poll thread to the service: its
//! gate's phase, the records held back, the in-flight bound, the offsets
//! stored.

mod release;

use super::budget::Budget;
use crate::ack::{Ack, Offsets};
use crate::observer::{PartitionState, SourceObserver};
use crate::record::{Record, TopicPartition};
use parking_lot::Mutex;
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext};
use rdkafka::TopicPartitionList;
use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use tokio::sync::mpsc;

/// A record as polled, before it is handed over with its ack.
#[derive(Debug)]
pub(super) struct RawRecord {
    pub(super) partition: i32,
    pub(super) offset: i64,
    pub(super) timestamp: Option<i64>,
    pub(super) key: Option<Vec<u8>>,
    pub(super) payload: Option<Vec<u8>>,
}

/// Whether an assigned partition's records go to the service yet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Phase {
    /// Held until the service opens the gate (and paused if as many as
    /// the in-flight bound wait).
    Closed,
    /// Consumed; records below `floor` (the offset committed when the gate
    /// opened) were handled elsewhere and are dropped.
    Open { floor: Option<i64> },
}

/// An assigned partition's way to the service.
#[derive(Debug)]
pub(super) struct Feed {
    /// Which assignment of the partition this is.
    pub(super) id: u64,
    pub(super) phase: Phase,
    pub(super) topic: Arc<str>,
    pub(super) to_service: mpsc::UnboundedSender<Record>,
    pub(super) offsets: Arc<Mutex<Offsets>>,
    /// Polled but not handed over: the partition is at its in-flight bound.
    pub(super) held: VecDeque<RawRecord>,
    pub(super) paused: bool,
    /// The position last stored.
    pub(super) stored: Option<i64>,
    /// How far this assignment's records were taken.
    pub(super) taken: Taken,
    /// Whether it moves, as the reports see it.
    pub(super) progress: Progress,
}

/// Whether a partition moves: checked at each report, so a stall is seen
/// within a report's interval of `stall_timeout`, and reported again every
/// `stall_timeout` while it lasts.
#[derive(Debug)]
pub(super) struct Progress {
    /// The position and the highest offset handed over, at the last move.
    marker: (Option<i64>, Option<i64>),
    since: std::time::Instant,
    /// When the stall was last reported, while it lasts.
    reported: Option<std::time::Instant>,
}

/// What a check of a partition's progress has to say.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stall {
    /// No move for this long while records wait.
    Stalled(std::time::Duration),
    /// It moves again after a stall this long.
    Moves(std::time::Duration),
}

impl Progress {
    pub(super) fn new() -> Self {
        Self {
            marker: (None, None),
            since: std::time::Instant::now(),
            reported: None,
        }
    }

    /// Whether there is a stall to report: once records wait and neither
    /// its position nor what it handed over moved for `timeout`, and again
    /// each `timeout` after; or that it moves again.
    fn check(
        &mut self,
        marker: (Option<i64>, Option<i64>),
        waiting: bool,
        timeout: std::time::Duration,
    ) -> Option<Stall> {
        self.check_at(marker, waiting, timeout, std::time::Instant::now())
    }

    fn check_at(
        &mut self,
        marker: (Option<i64>, Option<i64>),
        waiting: bool,
        timeout: std::time::Duration,
        now: std::time::Instant,
    ) -> Option<Stall> {
        if marker != self.marker || !waiting {
            self.marker = marker;
            let stalled_for = now.duration_since(self.since);
            self.since = now;
            return self.reported.take().map(|_| Stall::Moves(stalled_for));
        }
        let due = match self.reported {
            None => now.duration_since(self.since) >= timeout,
            Some(last) => now.duration_since(last) >= timeout,
        };
        if due {
            self.reported = Some(now);
            return Some(Stall::Stalled(now.duration_since(self.since)));
        }
        None
    }
}

/// How far an assignment's records were taken (handed over or held), so
/// that the consumer going back within it is seen. librdkafka can: a
/// partition without a committed offset is reset to its first offset by an
/// offset query, and a query timer left over from a pause during that
/// query restarts the partition there once more, after its records were
/// consumed (seen with librdkafka 2.12). Taken twice, they would be handled
/// twice by the same entities, out of order.
#[derive(Debug, Default)]
pub(super) enum Taken {
    /// Nothing yet.
    #[default]
    Nothing,
    /// Every record before `next`.
    Through { next: i64 },
    /// Every record before `next`, and the consumer now delivers earlier
    /// ones again (from `from`): they are dropped until it catches up.
    Repeating { next: i64, from: i64, dropped: u64 },
}

impl Taken {
    /// Whether the record at `offset` is new to this assignment, noting it.
    fn take(&mut self, offset: i64, tp: (&str, i32)) -> bool {
        match *self {
            Taken::Nothing => {
                *self = Taken::Through { next: offset + 1 };
                true
            }
            Taken::Through { next } if offset >= next => {
                *self = Taken::Through { next: offset + 1 };
                true
            }
            Taken::Through { next } => {
                tracing::warn!(topic = tp.0, partition = tp.1, offset, next, "the consumer went back within the partition's assignment: records it delivered already are dropped until it catches up (were the partition's log truncated, records before the next offset would be skipped)");
                *self = Taken::Repeating {
                    next,
                    from: offset,
                    dropped: 1,
                };
                false
            }
            Taken::Repeating {
                next,
                from,
                dropped,
            } if offset < next => {
                *self = Taken::Repeating {
                    next,
                    from,
                    dropped: dropped + 1,
                };
                false
            }
            Taken::Repeating { from, dropped, .. } => {
                tracing::info!(
                    topic = tp.0,
                    partition = tp.1,
                    from,
                    dropped,
                    "the consumer caught up: records delivered again were dropped"
                );
                *self = Taken::Through { next: offset + 1 };
                true
            }
        }
    }
}

impl Feed {
    /// Whether a record goes to the service now, rather than being held.
    pub(super) fn takes(&self, max_in_flight: usize) -> bool {
        matches!(self.phase, Phase::Open { .. })
            && self.held.is_empty()
            && self.offsets.lock().takes_more(max_in_flight)
    }

    /// Whether a record was handled by the partition's previous owner.
    pub(super) fn below_floor(&self, offset: i64) -> bool {
        matches!(self.phase, Phase::Open { floor: Some(floor) } if offset < floor)
    }

    pub(super) fn hand_over(&self, raw: RawRecord) {
        let ack = Ack::new(self.offsets.clone(), raw.offset);
        let record = Record {
            topic: self.topic.clone(),
            partition: raw.partition,
            offset: raw.offset,
            timestamp: raw.timestamp,
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
pub(super) struct Feeds {
    pub(super) by: HashMap<TopicPartition, Feed>,
    pub(super) max_in_flight: usize,
    /// The bound of all the partitions together.
    pub(super) budget: Budget,
    /// How long a partition may not move while records wait before it is
    /// reported stalled.
    pub(super) stall_timeout: std::time::Duration,
}

impl Feeds {
    pub(super) fn push(&mut self, topic: &str, raw: RawRecord) {
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
        if !feed.taken.take(raw.offset, (topic, raw.partition)) {
            return;
        }
        if self.budget.takes() && feed.takes(self.max_in_flight) {
            feed.hand_over(raw);
            self.budget.took(1);
        } else {
            feed.held.push_back(raw);
        }
    }

    /// Whether this assignment of the partition is still here, closed.
    pub(super) fn closed(&self, tp: &TopicPartition, id: u64) -> bool {
        self.by
            .get(tp)
            .is_some_and(|feed| feed.id == id && feed.phase == Phase::Closed)
    }

    /// Opens the partition's gate at `floor`; the held records below it are
    /// dropped, the others handed over by the next [`Self::maintain`].
    pub(super) fn open(&mut self, tp: &TopicPartition, id: u64, floor: Option<i64>) {
        if let Some(feed) = self.by.get_mut(tp).filter(|f| f.id == id) {
            feed.phase = Phase::Open { floor };
            if let Some(floor) = floor {
                feed.held.retain(|raw| raw.offset >= floor);
            }
            tracing::debug!(topic = %tp.topic, partition = tp.partition, ?floor, "partition opened");
        }
    }

    /// Tells the observer each partition's state, and warns about a
    /// partition that does not move while records wait.
    pub(super) fn report(
        &mut self,
        watermarks: &HashMap<TopicPartition, Watermarks>,
        observer: &dyn SourceObserver,
    ) {
        for (tp, feed) in &mut self.by {
            let (position, delivered, in_flight) = {
                let offsets = feed.offsets.lock();
                (
                    offsets.position(),
                    offsets.delivered_through(),
                    offsets.in_flight(),
                )
            };
            let marks = watermarks.get(tp).copied().unwrap_or_default();
            let floor = match feed.phase {
                Phase::Open { floor } => floor,
                Phase::Closed => None,
            };
            let next = next_to_handle(position, feed.stored, floor, marks.committed, marks.low);
            let lag = marks.high.and_then(|high| next.map(|n| (high - n).max(0)));
            let waiting = feed.phase == Phase::Closed;
            let state = PartitionState {
                in_flight,
                paused: feed.paused,
                held: feed.held.len(),
                waiting_for_shard: waiting,
                lag,
            };
            observer.partition(tp, state);
            let records_wait = in_flight > 0 || !feed.held.is_empty() || lag.is_some_and(|l| l > 0);
            match feed
                .progress
                .check((position, delivered), records_wait, self.stall_timeout)
            {
                Some(Stall::Stalled(stalled_for)) if waiting => {
                    tracing::warn!(topic = %tp.topic, partition = tp.partition, held = feed.held.len(), ?lag, ?stalled_for, "partition waits for its shard: its records are held until the shard starts on this node (its previous owner has not released it)");
                }
                Some(Stall::Stalled(stalled_for)) => {
                    let oldest = next.map_or_else(|| "unknown".to_string(), |o| o.to_string());
                    tracing::warn!(topic = %tp.topic, partition = tp.partition, oldest_offset = %oldest, in_flight, held = feed.held.len(), ?lag, ?stalled_for, "partition makes no progress while records wait: its oldest record is not handled (a slow or stuck handler, a record its entity cannot take, or records the consumer cannot fetch)");
                }
                Some(Stall::Moves(stalled_for)) => {
                    tracing::info!(topic = %tp.topic, partition = tp.partition, ?stalled_for, "partition progresses again");
                }
                None => {}
            }
        }
    }

    pub(super) fn maintain<C: ConsumerContext>(&mut self, consumer: &BaseConsumer<C>) {
        self.release_held();
        for (tp, feed) in &mut self.by {
            let open = matches!(feed.phase, Phase::Open { .. });
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

/// A partition as librdkafka's statistics last described it.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Watermarks {
    /// The offset after the partition's last record.
    pub(super) high: Option<i64>,
    /// Its first record's offset.
    pub(super) low: Option<i64>,
    /// The group's committed offset, which librdkafka reads at assignment.
    pub(super) committed: Option<i64>,
}

/// The next offset a partition has to handle, for its lag: the position
/// its handled records reached, or the one last stored; before any record
/// of this assignment was handled, the offset the group had committed: the
/// gate's floor (read when it opened) or librdkafka's view of the commit,
/// whichever is further (librdkafka's can be older than the floor: a
/// consumer that never committed a partition keeps what it read at an
/// earlier assignment); without either, the partition's first offset.
fn next_to_handle(
    position: Option<i64>,
    stored: Option<i64>,
    floor: Option<i64>,
    committed: Option<i64>,
    low: Option<i64>,
) -> Option<i64> {
    position.or(stored).or(floor.max(committed)).or(low)
}

/// Stores the partition's position if it moved.
fn store<C: ConsumerContext>(consumer: &BaseConsumer<C>, tp: &TopicPartition, feed: &mut Feed) {
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
pub(super) fn store_position<C: ConsumerContext>(
    consumer: &BaseConsumer<C>,
    tp: &TopicPartition,
    offset: i64,
) -> rdkafka::error::KafkaResult<()> {
    let mut list = TopicPartitionList::new();
    list.add_partition_offset(&tp.topic, tp.partition, rdkafka::Offset::Offset(offset))?;
    consumer.store_offsets(&list)
}

pub(super) fn one(tp: &TopicPartition) -> TopicPartitionList {
    let mut list = TopicPartitionList::new();
    list.add_partition(&tp.topic, tp.partition);
    list
}

pub(super) fn partitions(list: &TopicPartitionList) -> Vec<TopicPartition> {
    list.elements()
        .iter()
        .map(|e| TopicPartition {
            topic: e.topic().to_string(),
            partition: e.partition(),
        })
        .collect()
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    pub(in crate::source) fn open_feed(to_service: mpsc::UnboundedSender<Record>) -> Feeds {
        let feed = Feed {
            id: 1,
            phase: Phase::Open { floor: None },
            topic: Arc::from("t"),
            to_service,
            offsets: Arc::default(),
            held: VecDeque::new(),
            paused: false,
            stored: None,
            taken: Taken::default(),
            progress: Progress::new(),
        };
        let tp = TopicPartition {
            topic: "t".into(),
            partition: 0,
        };
        Feeds {
            by: HashMap::from([(tp, feed)]),
            max_in_flight: 1000,
            budget: Budget::new(10_000),
            stall_timeout: std::time::Duration::from_secs(60),
        }
    }

    pub(in crate::source) fn raw(offset: i64) -> RawRecord {
        RawRecord {
            partition: 0,
            offset,
            timestamp: None,
            key: None,
            payload: None,
        }
    }

    /// A partition whose records below its floor were all handled by its
    /// previous owner, and none came since, has no lag, whatever older
    /// commit librdkafka still reports for it.
    #[test]
    fn a_partition_caught_up_at_its_floor_has_no_lag_whatever_older_commit_librdkafka_reports() {
        assert_eq!(
            next_to_handle(None, None, Some(148), Some(84), Some(0)),
            Some(148)
        );
        assert_eq!(
            next_to_handle(None, None, None, Some(84), Some(0)),
            Some(84)
        );
        assert_eq!(
            next_to_handle(None, None, Some(90), Some(120), Some(0)),
            Some(120)
        );
        assert_eq!(
            next_to_handle(Some(150), None, Some(148), Some(84), Some(0)),
            Some(150)
        );
        assert_eq!(next_to_handle(None, None, None, None, Some(0)), Some(0));
    }

    /// librdkafka restarting a partition at its first offset within one
    /// assignment (see `Taken`): what it delivers again is not handed over
    /// twice, and what comes after is.
    #[test]
    fn records_the_consumer_delivers_again_within_an_assignment_are_handed_over_once() {
        let (to_service, mut records) = mpsc::unbounded_channel();
        let mut feeds = open_feed(to_service);
        for offset in [0, 1, 2, 0, 1, 2, 3, 1, 4] {
            feeds.push("t", raw(offset));
        }
        let mut handed = Vec::new();
        while let Ok(record) = records.try_recv() {
            handed.push(record.offset);
        }
        assert_eq!(handed, vec![0, 1, 2, 3, 4]);
    }

    #[test]
    fn a_stall_is_reported_again_while_it_lasts_and_its_end_once() {
        let timeout = std::time::Duration::from_secs(10);
        let start = std::time::Instant::now();
        let at = |s: u64| start + std::time::Duration::from_secs(s);
        let mut progress = Progress::new();
        let stuck = (Some(5), Some(9));
        assert_eq!(progress.check_at(stuck, true, timeout, at(0)), None);
        assert_eq!(progress.check_at(stuck, true, timeout, at(9)), None);
        assert_eq!(
            progress.check_at(stuck, true, timeout, at(10)),
            Some(Stall::Stalled(std::time::Duration::from_secs(10)))
        );
        assert_eq!(progress.check_at(stuck, true, timeout, at(15)), None);
        assert_eq!(
            progress.check_at(stuck, true, timeout, at(20)),
            Some(Stall::Stalled(std::time::Duration::from_secs(20))),
            "reported again while it lasts"
        );
        assert_eq!(
            progress.check_at((Some(6), Some(9)), true, timeout, at(23)),
            Some(Stall::Moves(std::time::Duration::from_secs(23)))
        );
        assert_eq!(
            progress.check_at((Some(7), Some(9)), true, timeout, at(24)),
            None
        );
    }

    #[test]
    fn a_partition_without_records_waiting_is_never_stalled() {
        let timeout = std::time::Duration::from_secs(1);
        let start = std::time::Instant::now();
        let mut progress = Progress::new();
        let idle = (Some(5), Some(4));
        for s in 0..5 {
            let now = start + std::time::Duration::from_secs(s);
            assert_eq!(progress.check_at(idle, false, timeout, now), None);
        }
    }
}
