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
mod tests {
    use super::*;
    use crate::area::replay;

    fn policy(limit: usize) -> PredictedNextUse<u32> {
        PredictedNextUse::new(limit, 8.0, 16.0)
    }

    /// Messages of `ids` that found their entity active.
    fn hits(p: &mut PredictedNextUse<u32>, ids: &[u32]) -> usize {
        let mut out = Vec::new();
        let mut hits = 0;
        for &id in ids {
            if p.contains(&id) {
                hits += 1;
                p.on_access(&id);
            } else {
                p.on_activate(id, &mut out);
            }
        }
        hits
    }

    #[test]
    fn new_entities_go_first_the_newest_first() {
        let mut p = policy(3);
        // 1 has an interval; 2 and 3 were seen once; 4 is the newest new
        // entity, so it is passivated after its message, then 5 is
        assert_eq!(replay(&mut p, &[1, 1, 2, 3, 4, 5]), vec![4, 5]);
        assert!(p.contains(&1) && p.contains(&2) && p.contains(&3));
        assert_eq!(p.select(), Some(&3));
    }

    #[test]
    fn the_entity_late_the_longest_goes_before_those_on_time() {
        let mut p = policy(2);
        // messages 0..=3: 1 and 2 each twice, expected at 2 and 4; 3 is new
        // at 4 and passivated; back at 5 it is expected at 6, while 1 is 3
        // late (expected at 8) and 2 is 1 late (expected at 6, but seen
        // earlier than 3): 1 goes
        assert_eq!(replay(&mut p, &[1, 1, 2, 2, 3, 3]), vec![3, 1]);
        assert!(p.contains(&2) && p.contains(&3));
    }

    #[test]
    fn the_forecast_is_the_shorter_interval_then_the_longer() {
        let mut history = History {
            last: 100,
            interval: 30,
            previous: 10,
            second: false,
            passivated: Passivated::No,
        };
        assert_eq!(history.forecast(), 110);
        history.second = true;
        assert_eq!(history.forecast(), 130);
        assert_eq!(history.latest_forecast(), 130);
        history.cap_at(120);
        assert_eq!((history.interval, history.previous), (20, 10));
        let once = History {
            last: 5,
            interval: 7,
            ..History::default()
        };
        assert_eq!((once.forecast(), once.latest_forecast()), (12, 12));
    }

    #[test]
    fn a_loop_larger_than_the_limit_keeps_part_of_it_active() {
        // a loop over 10 entities with room for 4: LRU never hits; Belady
        // keeps 3 of them and hits 3 in 10 (one slot turns over)
        let trace: Vec<u32> = (0..10).cycle().take(10 * 50).collect();
        let mut p = policy(4);
        let warm = hits(&mut p, &trace[..100]);
        let steady = hits(&mut p, &trace[100..]);
        assert!(warm < 100);
        assert!(steady >= 3 * 40 - 2, "{steady} hits in 400 messages");
        assert_eq!(p.len(), 4);
    }

    #[test]
    fn sweeps_up_and_down_are_forecast_from_the_interval_before_last() {
        // 0..40 up then down with room for 10: an entity's intervals
        // alternate, so the last interval alone forecasts the wrong turn
        let sweep: Vec<u32> = (0..40).chain((0..40).rev()).collect();
        let trace: Vec<u32> = sweep.iter().copied().cycle().take(80 * 30).collect();
        let mut p = policy(10);
        let rate = hits(&mut p, &trace) as f64 / trace.len() as f64;
        // LRU keeps the 10 entities around each turn: about 11%
        assert!(rate > 0.11, "{rate}");
    }

    #[test]
    fn newcomers_that_come_back_at_once_open_the_window() {
        // every entity gets two messages in a row: without a window the
        // second always misses
        let pairs: Vec<u32> = (0..2000).flat_map(|id| [id, id]).collect();
        let mut p = policy(10);
        let steady = {
            hits(&mut p, &pairs[..400]);
            hits(&mut p, &pairs[400..])
        };
        assert!(p.window >= 1);
        assert_eq!(p.window_proportion(), Some(p.window as f64 / 10.0));
        assert!(steady > 1500, "{steady} of 1800");
        // a loop then shuts it again: the window's room is better spent on
        // entities with a forecast
        let trace: Vec<u32> = (5000..5030).cycle().take(30 * 40).collect();
        hits(&mut p, &trace);
        assert_eq!(p.window, 0);
    }

    #[test]
    fn memory_stays_bounded_and_every_passivated_entity_was_active() {
        let mut p = policy(50);
        let mut active = std::collections::HashSet::new();
        let mut seed = 7u64;
        let mut out = Vec::new();
        for step in 0..50_000u32 {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            let id = (seed % 3000) as u32 % (200 + step / 100);
            if p.contains(&id) {
                p.on_access(&id);
            } else {
                p.on_activate(id, &mut out);
                active.insert(id);
                for gone in out.drain(..) {
                    assert!(active.remove(&gone), "{gone} was not active");
                }
            }
            if step % 5000 == 4999 {
                p.on_remove(&id);
                active.remove(&id);
            }
            assert_eq!(p.len(), active.len());
            assert!(p.len() <= 50);
        }
        assert!(p.list.len() <= 50 + 8 * 50);
        assert!(active.iter().all(|id| p.contains(id)));
    }

    #[test]
    fn a_new_limit_rebuilds_the_ring_and_keeps_the_forecasts() {
        let mut p = policy(100);
        let trace: Vec<u32> = (0..150).cycle().take(150 * 10).collect();
        hits(&mut p, &trace);
        let mut out = Vec::new();
        // a wide limit: buckets span several messages
        p.set_limit(100_000, &mut out);
        assert!(out.is_empty());
        assert!(p.width > 1 && p.buckets == MAX_BUCKETS);
        let steady = hits(&mut p, &trace);
        assert_eq!(steady, trace.len() - 50, "only the first turn misses");
        // and back to a narrow one: entities go, the loop still hits
        p.set_limit(20, &mut out);
        assert_eq!(out.len(), 130);
        assert!(p.width <= 8 && p.buckets == MIN_BUCKETS);
        assert_eq!(p.len(), 20);
        let steady = hits(&mut p, &trace);
        assert!(steady > 100, "{steady}");
        assert!(p.list.len() <= 20 + 8 * 20);
    }

    /// Checks that every entity on time is filed under its forecast's
    /// bucket, within the ring, and that the bitmaps match the buckets.
    fn check_ring(p: &PredictedNextUse<u32>) {
        for bucket in 0..p.buckets {
            let level = RING + bucket;
            let filled = p.list.level_len(level) > 0;
            let bit = p.occupancy.words[bucket / 64] & (1 << (bucket % 64)) != 0;
            assert_eq!(filled, bit, "bucket {bucket}");
            let mut at = p.list.most_recent(level);
            while let Some(slot) = at {
                let due = p.history(slot).forecast() / p.width;
                assert!(due.saturating_sub(p.next_due) < p.buckets as u64, "{due}");
                assert_eq!(p.ring_bucket(due.max(p.next_due)), bucket);
                at = p.list.less_recent(slot);
            }
        }
        for word in 0..p.occupancy.words.len() {
            let summary = p.occupancy.summary & (1 << word) != 0;
            assert_eq!(summary, p.occupancy.words[word] != 0);
        }
    }

    #[test]
    fn forecasts_stay_in_the_ring_through_limit_changes_and_removals() {
        for seed in 1..=40u64 {
            let mut p = policy(100);
            let mut out = Vec::new();
            let mut state = seed;
            let mut next = move || {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                state
            };
            for step in 0..6_000u32 {
                let r = next();
                // a hot loop, a long loop and a sprinkling of strays
                let id = match r % 10 {
                    0..=5 => step % 40,
                    6..=8 => 1_000 + step % 700,
                    _ => 10_000 + (r % 5_000) as u32,
                };
                if p.contains(&id) {
                    p.on_access(&id);
                } else {
                    p.on_activate(id, &mut out);
                }
                match next() % 500 {
                    0 => p.set_limit((next() % 300) as usize, &mut out),
                    1 => p.on_remove(&id),
                    _ => {}
                }
                out.clear();
                assert!(p.len() <= p.limit);
                assert!(p.window <= p.limit);
            }
            check_ring(&p);
        }
    }

    #[test]
    fn a_huge_limit_does_not_overflow() {
        let mut p = policy(10);
        let mut out = Vec::new();
        p.set_limit(usize::MAX, &mut out);
        assert_eq!(hits(&mut p, &[1, 2, 1, 2, 3, 1]), 3);
        p.set_limit(1, &mut out);
        assert_eq!(p.len(), 1);
        check_ring(&p);
    }

    #[test]
    fn a_smaller_limit_narrows_the_window() {
        // blocks of six newcomers, each sent twice: the window opens to six
        let trace: Vec<u32> = (0..500u32)
            .flat_map(|block| {
                let ids: Vec<u32> = (0..6).map(|i| block * 6 + i).collect();
                ids.iter().chain(ids.iter()).copied().collect::<Vec<_>>()
            })
            .collect();
        let mut p = policy(10);
        hits(&mut p, &trace);
        assert_eq!(p.window, 6);
        let mut out = Vec::new();
        p.set_limit(2, &mut out);
        assert_eq!(p.window, 2);
        assert_eq!(p.window_proportion(), Some(1.0));
        assert!(p.list.level_len(WINDOW) <= 2);
    }
}
