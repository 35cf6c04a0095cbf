//! Predicted next use (not an Akka policy): Belady's clairvoyant rule run
//! on a forecast instead of the future.
//!
//! Belady passivates the entity whose next message is furthest away. An
//! online policy cannot know that, but an entity's recent intervals
//! between messages forecast its next one well on the workloads entity
//! sharding sees. An entity in a periodic job (a loop over more entities
//! than fit) comes back after the same number of messages. One in sweeps up
//! and down alternates a short and a long interval. One in a burst comes
//! back soon. So an entity is expected again after the shorter of its last
//! two intervals and, once that has passed, after the longer one. The
//! entity expected last is passivated. On a loop larger than the limit
//! this keeps a fixed part of the loop active, as Belady does, where LRU
//! keeps nothing.
//!
//! Entities are passivated in this order of preference:
//! - **New** (no interval yet, nothing remembered): first, most recent
//!   first. A first message says nothing of when the next one comes, and
//!   most entities seen once in a scan never come back; passivating the
//!   newest keeps the older ones, which had time to prove themselves.
//! - **Late** (both forecasts passed without a message) and **on time**,
//!   by when they are expected. An entity on time is expected at its
//!   forecast. A late one is expected as far ahead as it is late (`now +
//!   (now - forecast)`): one just late is still expected soon, one long
//!   late is not. Among equal forecasts the one filed last goes first:
//!   usually the most recently seen, which has the shorter interval (the
//!   next turn shows which was right).
//! - **In the window**: last. The newest new entities stay active while
//!   the window holds them. The window starts shut. It grows by one each
//!   time a passivated new entity comes back that a window at most twice
//!   as large would still hold (entities seen twice in a row). It shrinks
//!   by one each time an entity passivated with an interval comes back,
//!   since the window took its room. Entities stopped for other reasons
//!   (idle, explicit, hand-off) are remembered too, without effect on the
//!   window.
//!
//! Passivated entities are remembered (their last message and intervals)
//! up to `history_multiplier x limit`, oldest forgotten first, so an entity
//! that comes back is known again. Intervals are capped at
//! `interval_cap_multiplier x limit`.
//!
//! Structures: one recency list whose levels are the window, the other new
//! entities, the late ones, the remembered ones, and a ring of forecast
//! buckets.
//! - The late ones are in the order they became late, which is the order
//!   of their forecasts.
//! - A bucket holds, in the order they were filed, the entities expected
//!   within a span of `width` messages.
//! - The ring covers the interval cap, and two levels of bitmaps find the
//!   furthest non-empty bucket in O(1).
//! - When a bucket's span has passed, its entities move to their second
//!   forecast's bucket or become late. That is one bucket per `width`
//!   messages, and each entity moves at most twice per message it gets.
//!
//! Every operation is O(1) amortised and allocation-free once the lists
//! have held their peak.

use super::area::ActiveArea;
use super::recency_list::{RecencyList, Slot};
use super::{PolicyKey, ReplacementPolicy};

/// Level of the active entities without an interval.
const NEW: usize = 0;
/// Level of the active entities whose forecast has passed.
const LATE: usize = 1;
/// Level of the passivated entities remembered.
const REMEMBERED: usize = 2;
/// Level used while the ring is rebuilt for a new limit.
const SPARE: usize = 3;
/// Level of the newest entities without an interval, least recent
/// first: the window.
const WINDOW: usize = 4;
/// The first forecast bucket.
const RING: usize = 5;
/// Buckets of the largest ring: 64 words of 64 bits under one summary word.
const MAX_BUCKETS: usize = 4096;
/// Buckets of the smallest ring.
const MIN_BUCKETS: usize = 64;
/// The longest interval, whatever the limit: 2^40 messages, so that no
/// forecast arithmetic can overflow.
const MAX_INTERVAL_CAP: u64 = 1 << 40;
/// Messages a bucket spans, about: forecasts are off by more than that
/// anyway, and a ring one message wide costs 33 KB for a shard of 100
/// entities (4 KB at 8). On the published traces buckets of 1 to 16
/// messages change the mean distance to OPT by less than 0.01.
const SPAN_PER_BUCKET: usize = 8;

/// What is known of a tracked entity.
#[derive(Debug, Clone, Copy, Default)]
struct History {
    /// The message count at its last message.
    last: u64,
    /// Messages between its last two messages; 0 when seen once.
    interval: u64,
    /// The interval before that; 0 when unknown.
    previous: u64,
    /// Whether the earlier of the two forecasts has passed.
    second: bool,
    /// Why a remembered entity is no longer active, for the window.
    passivated: Passivated,
}

/// Why a remembered entity is no longer active.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
enum Passivated {
    /// It is active.
    #[default]
    No,
    /// Passivated before it had an interval, when this many new entities
    /// had been seen.
    New(u64),
    /// Passivated with an interval.
    Known,
    /// Stopped for another reason (idle, explicit, hand-off): its return
    /// says nothing of the window.
    Elsewhere,
}

impl History {
    fn shorter(&self) -> u64 {
        match self.previous {
            0 => self.interval,
            previous => previous.min(self.interval),
        }
    }

    fn longer(&self) -> u64 {
        self.previous.max(self.interval)
    }

    /// When the entity is expected: after the shorter of its last two
    /// intervals, then, once that has passed, after the longer one.
    fn forecast(&self) -> u64 {
        self.last
            + if self.second {
                self.longer()
            } else {
                self.shorter()
            }
    }

    /// The last forecast, which a late entity has missed.
    fn latest_forecast(&self) -> u64 {
        self.last + self.longer()
    }

    /// Caps both intervals so that no forecast is after `at`.
    fn cap_at(&mut self, at: u64) {
        let most = at - self.last;
        self.interval = self.interval.min(most);
        self.previous = self.previous.min(most);
    }
}

/// Which buckets of the ring hold entities: a bit per bucket, and a
/// summary bit per word of 64 buckets.
#[derive(Debug, Clone)]
struct Occupancy {
    summary: u64,
    words: Vec<u64>,
}

impl Occupancy {
    fn new(buckets: usize) -> Self {
        Self {
            summary: 0,
            words: vec![0; buckets.div_ceil(64)],
        }
    }

    fn set(&mut self, bucket: usize) {
        self.words[bucket / 64] |= 1 << (bucket % 64);
        self.summary |= 1 << (bucket / 64);
    }

    fn clear(&mut self, bucket: usize) {
        let word = &mut self.words[bucket / 64];
        *word &= !(1 << (bucket % 64));
        if *word == 0 {
            self.summary &= !(1 << (bucket / 64));
        }
    }

    /// The highest occupied bucket below `end`.
    fn highest_below(&self, end: usize) -> Option<usize> {
        if end == 0 {
            return None;
        }
        let last = end - 1;
        let (word, bit) = (last / 64, last % 64);
        let partial = self.words[word] & (u64::MAX >> (63 - bit));
        if partial != 0 {
            return Some(word * 64 + 63 - partial.leading_zeros() as usize);
        }
        let below = self.summary & ((1u64 << word) - 1);
        if below == 0 {
            return None;
        }
        let word = 63 - below.leading_zeros() as usize;
        Some(word * 64 + 63 - self.words[word].leading_zeros() as usize)
    }
}

/// Predicted next use over the entities of one shard.
#[derive(Debug)]
pub struct PredictedNextUse<K> {
    limit: usize,
    history_multiplier: f64,
    interval_cap_multiplier: f64,
    history_limit: usize,
    interval_cap: u64,
    /// Buckets in the ring (a power of two) and messages per bucket (a
    /// power of two).
    buckets: usize,
    width: u64,
    occupancy: Occupancy,
    list: RecencyList<K>,
    /// By slot of `list`.
    histories: Vec<History>,
    /// Messages seen; the current message is `now - 1`.
    now: u64,
    /// New entities seen.
    arrivals: u64,
    /// New entities kept in the window, adapted from returns.
    window: usize,
    /// The first bucket (absolute, `forecast / width`) not yet moved to
    /// the late level.
    next_due: u64,
}

impl<K: PolicyKey> PredictedNextUse<K> {
    /// An empty policy holding at most `limit` active entities,
    /// remembering up to `history_multiplier x limit` passivated ones and
    /// capping intervals at `interval_cap_multiplier x limit` messages.
    pub fn new(limit: usize, history_multiplier: f64, interval_cap_multiplier: f64) -> Self {
        let mut policy = Self {
            limit,
            history_multiplier,
            interval_cap_multiplier,
            history_limit: 0,
            interval_cap: 1,
            buckets: MIN_BUCKETS,
            width: 1,
            occupancy: Occupancy::new(MIN_BUCKETS),
            list: RecencyList::new(RING + MIN_BUCKETS),
            histories: Vec::new(),
            now: 0,
            arrivals: 0,
            window: 0,
            next_due: 0,
        };
        policy.resize();
        policy
    }

    /// Active entities.
    fn active(&self) -> usize {
        self.list.len() - self.list.level_len(REMEMBERED)
    }

    fn history(&self, slot: Slot) -> History {
        self.histories[slot as usize]
    }

    fn set_history(&mut self, slot: Slot, history: History) {
        let at = slot as usize;
        if at >= self.histories.len() {
            self.histories.resize(at + 1, History::default());
        }
        self.histories[at] = history;
    }

    /// The ring bucket of an absolute bucket number.
    fn ring_bucket(&self, due: u64) -> usize {
        (due % self.buckets as u64) as usize
    }

    /// Recomputes the bounds for the limit and, when the ring's shape
    /// changes, moves the entities on time into the new one.
    fn resize(&mut self) {
        let limit = self.limit.max(1) as f64;
        self.history_limit = (self.history_multiplier * limit) as usize;
        self.interval_cap =
            ((self.interval_cap_multiplier * limit) as u64).clamp(1, MAX_INTERVAL_CAP);
        // A forecast is at most `interval_cap` ahead; the current bucket
        // may hold forecasts just passed, so the ring spans one more.
        let span = self.interval_cap + 2;
        let buckets = ((span as usize) / SPAN_PER_BUCKET)
            .next_power_of_two()
            .clamp(MIN_BUCKETS, MAX_BUCKETS);
        let width = span.div_ceil(buckets as u64 - 1).next_power_of_two();
        if buckets == self.buckets && width == self.width && self.list.levels() == RING + buckets {
            return;
        }
        // Entities on time, by bucket from the nearest, each in the order
        // seen, wait in the spare level while the ring is rebuilt.
        let first_due = self.now.saturating_sub(1) / self.width;
        for due in first_due..first_due + self.buckets as u64 {
            let level = RING + self.ring_bucket(due);
            while let Some(slot) = self.list.least_recent(level) {
                self.list.move_to_back(slot, SPARE);
            }
        }
        self.list.resize_levels(RING + buckets);
        self.buckets = buckets;
        self.width = width;
        self.occupancy = Occupancy::new(buckets);
        self.next_due = self.now.saturating_sub(1) / width;
        while let Some(slot) = self.list.least_recent(SPARE) {
            let mut history = self.history(slot);
            history.cap_at(self.now.saturating_sub(1) + self.interval_cap);
            self.set_history(slot, history);
            self.expect(slot, history);
        }
    }

    /// Files an entity with an interval under its forecast, as the most
    /// recently seen of its bucket.
    fn expect(&mut self, slot: Slot, history: History) {
        let due = history.forecast() / self.width;
        debug_assert!(
            due.saturating_sub(self.next_due) < self.buckets as u64,
            "a forecast beyond the ring"
        );
        let bucket = self.ring_bucket(due.max(self.next_due));
        self.list.move_to_back(slot, RING + bucket);
        self.occupancy.set(bucket);
    }

    /// Takes an entity out of the ring bookkeeping before it moves
    /// elsewhere.
    fn leave(&mut self, slot: Slot) {
        let level = self.list.level_of(slot);
        if level >= RING && self.list.level_len(level) == 1 {
            self.occupancy.clear(level - RING);
        }
    }

    /// Starts a message: the entities of buckets whose span has passed
    /// are expected again at their second forecast, or become late, the
    /// most recently seen of each bucket first (the later of equal
    /// forecasts is the likelier to be passivated).
    fn tick(&mut self) -> u64 {
        let now = self.now;
        self.now += 1;
        while (self.next_due + 1) * self.width <= now {
            let bucket = self.ring_bucket(self.next_due);
            let level = RING + bucket;
            while let Some(slot) = self.list.most_recent(level) {
                let mut history = self.history(slot);
                if !history.second && history.latest_forecast() / self.width > self.next_due {
                    history.second = true;
                    self.set_history(slot, history);
                    self.expect(slot, history);
                } else {
                    self.list.move_to_back(slot, LATE);
                }
            }
            self.occupancy.clear(bucket);
            self.next_due += 1;
        }
        now
    }

    /// Records a message for a tracked entity at `now` and files it.
    fn seen(&mut self, slot: Slot, now: u64) {
        let before = self.history(slot);
        let history = History {
            last: now,
            interval: (now - before.last).min(self.interval_cap),
            // Capped again: the limit may have shrunk since.
            previous: before.interval.min(self.interval_cap),
            second: false,
            passivated: Passivated::No,
        };
        self.set_history(slot, history);
        self.leave(slot);
        self.expect(slot, history);
    }

    /// The furthest bucket ahead of the current one.
    fn furthest_bucket(&self) -> Option<usize> {
        let current = self.ring_bucket(self.next_due);
        // Buckets below the current one hold forecasts that wrapped
        // around the ring: they are the furthest.
        self.occupancy
            .highest_below(current)
            .or_else(|| self.occupancy.highest_below(self.buckets))
    }

    /// Adapts the window to a passivated entity coming back. One
    /// passivated as new that a window at most twice as large would still
    /// hold grows it by one. One passivated with an interval (a window
    /// takes room from those) shrinks it by one.
    fn adapt_window(&mut self, history: &History) {
        match history.passivated {
            Passivated::New(at) if self.arrivals - at <= self.window as u64 => {
                self.window = (self.window + 1).min(self.limit);
            }
            Passivated::Known => self.window = self.window.saturating_sub(1),
            _ => {}
        }
        self.bound_window();
    }

    /// The new entities beyond the window join the others without an
    /// interval, as the most recent.
    fn bound_window(&mut self) {
        while self.list.level_len(WINDOW) > self.window {
            let Some(oldest) = self.list.least_recent(WINDOW) else {
                break;
            };
            self.list.move_to_back(oldest, NEW);
        }
    }

    /// The entity to passivate next.
    fn victim(&self) -> Option<Slot> {
        if let Some(newest) = self.list.most_recent(NEW) {
            return Some(newest);
        }
        let on_time = self
            .furthest_bucket()
            .and_then(|bucket| self.list.most_recent(RING + bucket));
        let late = self.list.least_recent(LATE);
        match (late, on_time) {
            (Some(late), Some(on_time)) => {
                let now = self.now.saturating_sub(1);
                let (l, o) = (self.history(late), self.history(on_time));
                // A late entity is expected as far ahead as it is late.
                let late_expected = 2 * now - l.latest_forecast().min(now);
                let late_first = late_expected > o.forecast()
                    || (late_expected == o.forecast() && l.last > o.last);
                Some(if late_first { late } else { on_time })
            }
            (late, on_time) => late.or(on_time).or_else(|| self.list.least_recent(WINDOW)),
        }
    }

    /// Passivates entities until the active ones fit the limit.
    fn enforce_limit(&mut self, passivate: &mut Vec<K>) {
        while self.active() > self.limit {
            let Some(slot) = self.victim() else { break };
            self.remember(slot, true);
            if let Some(key) = self.list.key(slot) {
                passivate.push(key.clone());
            }
        }
        self.bound_history();
    }

    /// Moves an active entity to the remembered ones.
    fn remember(&mut self, slot: Slot, by_policy: bool) {
        self.leave(slot);
        let mut history = self.history(slot);
        history.passivated = match (by_policy, history.interval) {
            (false, _) => Passivated::Elsewhere,
            (true, 0) => Passivated::New(self.arrivals),
            (true, _) => Passivated::Known,
        };
        self.set_history(slot, history);
        self.list.move_to_back(slot, REMEMBERED);
    }

    fn bound_history(&mut self) {
        while self.list.level_len(REMEMBERED) > self.history_limit {
            let Some(oldest) = self.list.least_recent(REMEMBERED) else {
                break;
            };
            self.list.remove(oldest);
        }
    }
}

impl<K: PolicyKey> ReplacementPolicy<K> for PredictedNextUse<K> {
    fn set_limit(&mut self, limit: usize, passivate: &mut Vec<K>) {
        self.limit = limit;
        self.window = self.window.min(limit);
        self.bound_window();
        self.resize();
        self.enforce_limit(passivate);
    }

    fn on_activate(&mut self, id: K, passivate: &mut Vec<K>) {
        let now = self.tick();
        match self.list.slot(&id) {
            // Remembered, or (if a caller activates a tracked entity)
            // active: either way a message with a known interval.
            Some(slot) => {
                if self.list.level_of(slot) == REMEMBERED {
                    let history = self.history(slot);
                    self.adapt_window(&history);
                }
                self.seen(slot, now);
            }
            None => {
                self.arrivals += 1;
                let slot = self.list.push(id, WINDOW);
                self.set_history(
                    slot,
                    History {
                        last: now,
                        ..History::default()
                    },
                );
                self.bound_window();
            }
        }
        self.enforce_limit(passivate);
    }

    fn on_access(&mut self, id: &K) {
        let now = self.tick();
        if let Some(slot) = self.list.slot(id) {
            if self.list.level_of(slot) != REMEMBERED {
                self.seen(slot, now);
            }
        }
    }

    /// The entity stopped for another reason: it is no longer active, but
    /// its intervals are still the best forecast if it comes back, so it
    /// is remembered like a passivated one.
    fn on_remove(&mut self, id: &K) {
        if let Some(slot) = self.list.slot(id) {
            if self.list.level_of(slot) != REMEMBERED {
                self.remember(slot, false);
                self.bound_history();
            }
        }
    }

    fn len(&self) -> usize {
        self.active()
    }

    /// The newcomers' window, as a share of the limit.
    fn window_proportion(&self) -> Option<f64> {
        Some(self.window as f64 / self.limit.max(1) as f64)
    }
}

impl<K: PolicyKey> ActiveArea<K> for PredictedNextUse<K> {
    fn contains(&self, id: &K) -> bool {
        self.list
            .slot(id)
            .is_some_and(|slot| self.list.level_of(slot) != REMEMBERED)
    }

    fn select(&self) -> Option<&K> {
        self.victim().and_then(|slot| self.list.key(slot))
    }
}

#[cfg(test)]
mod tests;
