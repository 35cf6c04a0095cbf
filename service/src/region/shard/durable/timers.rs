//! A durable shard's timers: its entities' timers as their records keep
//! them, the shard's index of them by due time in the node's store, and
//! which are due soon.
//!
//! The index is written in the same batch as the records whose timers
//! changed, so the two never disagree after a crash. The changelog carries
//! the records alone: a restore puts each restored record's timers in the
//! index again (`store/applier.rs`). An index entry may outlive its timer
//! (a copy restored over an older one keeps the older record's entries):
//! every firing is checked against its entity's record, and one its
//! entity no longer has is dropped then.
//!
//! Reading: after its restore the shard reads its index from the lowest
//! due time up to a little ahead of now ([`LOOKAHEAD`]), at most
//! [`MOST_PER_SCAN`] at a time, and goes on from where it stopped when
//! that horizon nears: each index entry is read once per start of the
//! shard, and a shard with a million timers reads what is due, not all.
//! A timer scheduled here that is due before the horizon goes straight to
//! the timers due soon; a later one is read when the horizon reaches it.

use crate::entity::EntityId;
use crate::metrics::TimerMetrics;
use crate::store::NodeStore;
use crate::timer::TimerRequest;
use colo_allocation::ShardId;
use colo_state::{Timer, TimerKey, WriteBatch};
use futures::stream::FuturesUnordered;
use std::collections::BTreeMap;
use std::future::Future;
use std::ops::ControlFlow;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use tokio::time::Sleep;

/// How far ahead of now a read of the index goes.
const LOOKAHEAD_MS: u64 = 5_000;

/// The most index entries one read takes: a read holds one of the node's
/// store calls.
const MOST_PER_SCAN: usize = 4096;

/// Index changes: a timer's message when it is put, `None` when it goes.
pub(in crate::region::shard) type IndexChanges = BTreeMap<TimerKey, Option<Vec<u8>>>;

/// What one read of the index found.
struct Scanned {
    due: Vec<(TimerKey, Vec<u8>)>,
    /// It read every entry up to its horizon (else it stopped at its most).
    complete: bool,
    /// It saw an entry past its horizon.
    past: bool,
}

type Scan = Pin<Box<dyn Future<Output = Result<Scanned, String>> + Send>>;

type Count = Pin<Box<dyn Future<Output = Result<u64, String>> + Send>>;

/// The count of a shard's index, for the pending gauge: a read of every
/// entry, so it waits until the shard has fired what was due at its start
/// (nothing due now, no read under way), and never holds up a firing.
/// Until it starts, what changes in the index is what it will count; while
/// it runs, the changes are added to what it counts (one that lands before
/// the count passes its key is counted twice: an estimate); once it is
/// done, the gauge follows each change.
enum Counting {
    NotYet,
    Running { count: Count, during: i64 },
    Done,
}

pub(in crate::region::shard) struct ShardTimers {
    /// Index changes for the next write.
    pub(super) unwritten: IndexChanges,
    /// Timers due up to the horizon, by due time: the next to fire first.
    /// By when each fires (its due time, or a retry's), then its key.
    soon: BTreeMap<(u64, TimerKey), Vec<u8>>,
    /// Every timer due at or before it is in `soon` or fired; `None` until
    /// the first read.
    horizon: Option<u64>,
    /// The last index entry read.
    cursor: Option<TimerKey>,
    /// The index may hold entries past the horizon: without any, a shard
    /// whose timers are all read reads its index no more until one of its
    /// entities schedules one past it.
    more: bool,
    scanning: Option<Scan>,
    /// The count of the index's entries, for the pending gauge.
    counting: Counting,
    /// Timers scheduled here that the read under way may not find in the
    /// store (their write had not landed when it began).
    unread: Vec<(TimerKey, Vec<u8>)>,
    /// The timers in the index as counted (see [`Counting`]); an index
    /// entry that outlived its timer counts until the shard restarts.
    pending: i64,
    /// Wakes the shard when the next timer is due or a read is.
    wake: Option<(u64, Pin<Box<Sleep>>)>,
    /// Fired timers whose outcome is not known yet.
    firing: FuturesUnordered<Firing>,
    pub(in crate::region::shard) metrics: TimerMetrics,
}

impl ShardTimers {
    pub fn new(entity_type: &str) -> Self {
        Self {
            unwritten: IndexChanges::new(),
            soon: BTreeMap::new(),
            horizon: None,
            cursor: None,
            more: false,
            scanning: None,
            counting: Counting::NotYet,
            unread: Vec::new(),
            pending: 0,
            wake: None,
            firing: FuturesUnordered::new(),
            metrics: TimerMetrics::new(entity_type),
        }
    }

    /// A timer was put in an entity's record.
    pub fn put(&mut self, key: TimerKey, message: &[u8]) {
        self.metrics.scheduled.increment(1);
        self.count(1);
        if self.is_within_reach(&key) {
            self.soon.insert((key.due, key.clone()), message.to_vec());
        } else {
            self.more = true;
        }
        if self.scanning.is_some() {
            self.unread.push((key.clone(), message.to_vec()));
        }
        self.unwritten.insert(key, Some(message.to_vec()));
    }

    /// A timer left an entity's record: fired, cancelled, replaced, or its
    /// entity deleted.
    /// An outbox's index entry (see `outbox.rs`), `put` or deleted with
    /// the next write: no timer, so neither counted nor due soon.
    pub fn mark_outbox(&mut self, key: TimerKey, put: bool) {
        self.unwritten.insert(key, put.then(Vec::new));
    }

    pub fn gone(&mut self, key: TimerKey) {
        self.count(-1);
        self.soon.remove(&(key.due, key.clone()));
        self.unwritten.insert(key, None);
    }

    /// An index entry whose timer its entity no longer has: removed. Not
    /// counted down: most often it is a timer that fired or went already,
    /// read again before its removal was written.
    pub fn stale(&mut self, key: TimerKey) {
        self.metrics.stale.increment(1);
        self.unwritten.insert(key, None);
    }

    /// A timer whose message failed: fired again at `retry_at`, under its
    /// own key (its entity's record has it due when it was).
    pub fn retry(&mut self, key: TimerKey, message: Vec<u8>, retry_at: u64) {
        self.metrics.failed.increment(1);
        self.soon.insert((retry_at.max(key.due), key), message);
    }

    /// Timers put in (`delta` > 0) or gone from the index: counted once
    /// the index was counted, and while it is (see [`Counting`]).
    fn count(&mut self, delta: i64) {
        match &mut self.counting {
            Counting::NotYet => {}
            Counting::Running { during, .. } => *during += delta,
            Counting::Done => {
                self.pending += delta;
                self.metrics.pending.increment(delta as f64);
            }
        }
    }

    /// Whether a read has gone past where `key` sits.
    fn is_within_reach(&self, key: &TimerKey) -> bool {
        self.horizon.is_some_and(|h| key.due <= h) || self.cursor.as_ref().is_some_and(|c| key <= c)
    }

    /// Whether there is nothing to do until a timer is scheduled: the
    /// index read and counted, nothing more in it, nothing due soon or on
    /// its way. Most shards are so most of the time: their turns then
    /// neither read the clock nor look further.
    pub fn is_quiet(&self) -> bool {
        self.horizon.is_some()
            && !self.more
            && self.soon.is_empty()
            && self.scanning.is_none()
            && self.firing.is_empty()
            && matches!(self.counting, Counting::Done)
    }

    /// The timers due by `now`, the earliest first, at most `most`.
    pub fn take_due(&mut self, now: u64, most: usize) -> Vec<(TimerKey, Vec<u8>)> {
        let mut due = Vec::new();
        while due.len() < most {
            match self.soon.first_key_value() {
                Some(((at, _), _)) if *at <= now => {
                    if let Some(((_, key), message)) = self.soon.pop_first() {
                        due.push((key, message));
                    }
                }
                _ => break,
            }
        }
        due
    }

    /// When the next timer known here is due, or the next read should run.
    pub fn next_wake(&self) -> Option<u64> {
        let soon = self.soon.first_key_value().map(|((at, _), _)| *at);
        // A read under way wakes the shard when it ends.
        let read = match (&self.scanning, self.more) {
            (None, true) => self.horizon.map(|h| h.saturating_sub(LOOKAHEAD_MS / 2)),
            _ => None,
        };
        match (soon, read) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Sleeps until the next wake, if there is one: whether it came.
    fn poll_wake(&mut self, now: u64, cx: &mut Context<'_>) -> bool {
        let Some(at) = self.next_wake() else {
            self.wake = None;
            return false;
        };
        if self.wake.as_ref().is_none_or(|(set, _)| *set != at) {
            let after = std::time::Duration::from_millis(at.saturating_sub(now));
            self.wake = Some((at, Box::pin(tokio::time::sleep(after))));
        }
        let Some((_, sleep)) = self.wake.as_mut() else {
            return false;
        };
        if sleep.as_mut().poll(cx).is_ready() {
            self.wake = None;
            return true;
        }
        false
    }

    /// Reads the index when a read is due and polls the one under way;
    /// `writing`: the index changes of the write under way. Whether a read
    /// ended.
    pub fn poll_scan(
        &mut self,
        store: &Arc<NodeStore>,
        (entity_type, shard): (&Arc<str>, ShardId),
        now: u64,
        writing: Option<&IndexChanges>,
        cx: &mut Context<'_>,
    ) -> bool {
        self.poll_count(store, (entity_type, shard), now, cx);
        if self.scanning.is_none() {
            let due = match self.horizon {
                None => true,
                Some(h) => self.more && now + LOOKAHEAD_MS / 2 >= h,
            };
            if !due {
                return false;
            }
            // Timers scheduled here but not in the store yet: the read may
            // pass them (so may it those scheduled while it runs).
            self.unread = [Some(&self.unwritten), writing]
                .into_iter()
                .flatten()
                .flat_map(|changes| changes.iter())
                .filter_map(|(key, message)| Some((key.clone(), message.clone()?)))
                .collect();
            self.scanning = Some(scan(
                store.clone(),
                (entity_type.clone(), shard),
                self.cursor.clone(),
                now + LOOKAHEAD_MS,
            ));
        }
        let Some(scanning) = self.scanning.as_mut() else {
            return false;
        };
        let Poll::Ready(result) = scanning.as_mut().poll(cx) else {
            return false;
        };
        self.scanning = None;
        let scanned = match result {
            Ok(scanned) => scanned,
            Err(e) => {
                // Read again on the next turn that wants it.
                tracing::warn!(%entity_type, %shard, error = %e, "the shard's timers could not be read; tried again");
                return true;
            }
        };
        let until = now + LOOKAHEAD_MS;
        let last = scanned.due.last().map(|(key, _)| key.clone());
        self.horizon = Some(match (scanned.complete, &last) {
            (true, _) | (false, None) => until,
            (false, Some(last)) => last.due.saturating_sub(1),
        });
        if last.is_some() {
            self.cursor = last;
        }
        self.more = scanned.past || !scanned.complete;
        for (key, message) in scanned.due {
            self.soon.insert((key.due, key), message);
        }
        for (key, message) in std::mem::take(&mut self.unread) {
            match self.is_within_reach(&key) {
                true => {
                    self.soon.insert((key.due, key), message);
                }
                false => self.more = true,
            }
        }
        if !scanned.complete {
            cx.waker().wake_by_ref();
        }
        true
    }

    /// Starts the count of the index once the shard is idle, and polls it.
    fn poll_count(
        &mut self,
        store: &Arc<NodeStore>,
        (entity_type, shard): (&Arc<str>, ShardId),
        now: u64,
        cx: &mut Context<'_>,
    ) {
        let due_now = self
            .soon
            .first_key_value()
            .is_some_and(|((at, _), _)| *at <= now);
        let read_due = self
            .horizon
            .is_none_or(|h| self.more && now + LOOKAHEAD_MS / 2 >= h);
        let idle = !due_now && !read_due && self.scanning.is_none() && self.firing.is_empty();
        if matches!(self.counting, Counting::NotYet) && idle {
            self.counting = Counting::Running {
                count: count(store.clone(), (entity_type.clone(), shard)),
                during: 0,
            };
        }
        let Counting::Running { count, during } = &mut self.counting else {
            return;
        };
        let Poll::Ready(counted) = count.as_mut().poll(cx) else {
            return;
        };
        let during = *during;
        self.counting = Counting::Done;
        match counted {
            Ok(counted) => {
                self.count(
                    i64::try_from(counted)
                        .unwrap_or(i64::MAX)
                        .saturating_add(during),
                );
            }
            Err(e) => {
                tracing::warn!(%entity_type, %shard, error = %e, "the shard's timers could not be counted");
            }
        }
    }

    /// The shard stopped: its timers wait in its index for the next start.
    pub fn stopped(&mut self) {
        self.metrics.pending.decrement(self.pending as f64);
        self.pending = 0;
    }
}

/// Applies a message's changes to its entity's `timers`: the one that
/// `fired` goes, then what the handler `scheduled` and cancelled, in order;
/// a `deleted` entity keeps none. Whether any changed.
pub(super) fn change_timers(
    index: &mut ShardTimers,
    id: &EntityId,
    timers: &mut Vec<Timer>,
    (fired, scheduled, deleted): (Option<&TimerKey>, Vec<TimerRequest>, bool),
) -> bool {
    let key = |timer: &Timer| TimerKey {
        due: timer.due,
        entity_id: id.to_string(),
        name: timer.name.clone(),
    };
    // Removes timer `name` (due at `due`, if given): whether there was one.
    let remove = |timers: &mut Vec<Timer>, index: &mut ShardTimers, name: &str, due| {
        let at = timers
            .iter()
            .position(|t| t.name == name && Option::is_none_or(due, |due| t.due == due));
        at.map(|at| index.gone(key(&timers.remove(at)))).is_some()
    };
    let mut changed = false;
    if let Some(fired) = fired {
        changed |= remove(timers, index, &fired.name, Some(fired.due));
    }
    for request in scheduled {
        changed = true;
        match request {
            TimerRequest::Schedule { name, due, message } => {
                remove(timers, index, &name, None);
                let timer = Timer { name, due, message };
                index.put(key(&timer), &timer.message);
                timers.push(timer);
            }
            TimerRequest::Cancel { name } => {
                remove(timers, index, &name, None);
            }
        }
    }
    if deleted {
        for timer in timers.drain(..) {
            index.gone(key(&timer));
            changed = true;
        }
    }
    changed
}

/// Index changes into a store batch.
pub(in crate::region::shard) fn add_changes(
    batch: &mut WriteBatch,
    shard: ShardId,
    changes: &IndexChanges,
) {
    for (key, message) in changes {
        match message {
            Some(message) => batch.put_timer(shard, key.clone(), message.clone()),
            None => batch.delete_timer(shard, key.clone()),
        }
    }
}

fn scan(
    store: Arc<NodeStore>,
    (entity_type, shard): (Arc<str>, ShardId),
    after: Option<TimerKey>,
    until: u64,
) -> Scan {
    Box::pin(async move {
        let calls = store.calls().clone();
        let engine = store.store();
        calls
            .run(move || {
                let mut due = Vec::new();
                let (mut complete, mut past) = (true, false);
                engine
                    .timers(&entity_type, shard, after.as_ref(), &mut |key, message| {
                        if key.due > until {
                            past = true;
                            return ControlFlow::Break(());
                        }
                        if due.len() == MOST_PER_SCAN {
                            complete = false;
                            return ControlFlow::Break(());
                        }
                        due.push((key, message.to_vec()));
                        ControlFlow::Continue(())
                    })
                    .map_err(|e| e.to_string())?;
                Ok(Scanned {
                    due,
                    complete,
                    past,
                })
            })
            .await?
    })
}

fn count(store: Arc<NodeStore>, (entity_type, shard): (Arc<str>, ShardId)) -> Count {
    Box::pin(async move {
        let calls = store.calls().clone();
        let engine = store.store();
        calls
            .run(move || {
                let mut counted = 0u64;
                engine
                    .timers(&entity_type, shard, None, &mut |key, _| {
                        counted += u64::from(!key.is_outbox());
                        ControlFlow::Continue(())
                    })
                    .map_err(|e| e.to_string())
                    .map(|()| counted)
            })
            .await?
    })
}

/// How a timer's message ended, as its shard learns it.
pub(in crate::region::shard) enum Fired {
    /// Handled: the timer went in the write of the change it made.
    Applied,
    /// Its entity no longer has it.
    Stale,
    /// Its handler failed: the timer stays, and fires again.
    Failed,
    /// The message never reached the entity (the shard stopped first).
    Dropped,
}

/// A timer's message on its way, until its outcome is known.
pub(in crate::region::shard) type Firing =
    Pin<Box<dyn Future<Output = (TimerKey, Vec<u8>, Fired)> + Send>>;

/// How long a timer whose handler failed waits before it fires again.
const RETRY_MS: u64 = 1_000;

impl<E: crate::entity::Entity> super::DurableShard<E> {
    /// Reads the index when due, learns how fired timers ended, and gives
    /// the timers due now (at most `most`); whether anything happened.
    pub fn due_timers(
        &mut self,
        now: u64,
        most: usize,
        cx: &mut Context<'_>,
    ) -> (bool, Vec<(TimerKey, Vec<u8>)>) {
        if self.restoring() || self.broken.is_some() {
            return (false, Vec::new());
        }
        let writing = self.writing.as_ref().map(|w| &*w.timers);
        let mut progressed = self.timers.poll_scan(
            &self.store,
            (&self.entity_type, self.shard),
            now,
            writing,
            cx,
        );
        while let Poll::Ready(Some((key, message, fired))) =
            futures::StreamExt::poll_next_unpin(&mut self.timers.firing, cx)
        {
            progressed = true;
            match fired {
                Fired::Applied => self.timers.metrics.applied.increment(1),
                Fired::Stale => self.timers.stale(key),
                Fired::Failed => self.timers.retry(key, message, now + RETRY_MS),
                Fired::Dropped => {}
            }
        }
        let due = self.timers.take_due(now, most);

        if due.len() == most {
            cx.waker().wake_by_ref();
        } else {
            progressed |= self.timers.poll_wake(now, cx);
        }
        (progressed, due)
    }

    /// A due timer's message went to its entity.
    pub fn fired(&mut self, firing: Firing, lateness_ms: u64) {
        self.timers
            .metrics
            .lateness
            .record(lateness_ms as f64 / 1000.0);
        self.timers.firing.push(firing);
    }
}
