//! Low Inter-reference Recency Set (LIRS, Jiang and Zhang, SIGMETRICS
//! 2002), with a bounded history of passivated entities.
//!
//! LIRS ranks an entity by its inter-reference recency (IRR): how many
//! other distinct entities were seen between its last two messages. The
//! entities with a low IRR (LIR) hold most of the limit and are passivated
//! only after being demoted; the rest (HIR) share a small queue that
//! entities pass through on their first message, so a scan or a loop over
//! more entities than fit cannot flush the LIR set, yet an entity that
//! comes back sooner than the least recent LIR entity was last seen is
//! promoted. It is the policy the LIRS traces (multi*, gli, ps, loop, ...)
//! were published with, and it stays near LRU on recency-friendly traces.
//!
//! Structures: the stack S (one recency list) holds LIR entities and the
//! HIR entities (active or not) more recent than the least recent LIR one;
//! its bottom is always LIR ("stack pruning"). The queue Q holds the active
//! HIR entities (level 0, the passivation order) and, in level 1, the
//! passivated HIR entities still in S, oldest first; these are bounded to
//! `history_multiplier x limit`, dropping the oldest, so memory stays
//! proportional to the limit. Every operation is O(1) amortised (pruning
//! removes what earlier operations pushed) and allocation-free once the
//! lists have held their peak.

use super::area::ActiveArea;
use super::frequency_sketch::FrequencySketch;
use super::hill_climbing::HillClimbing;
use super::recency_list::RecencyList;
use super::settings::{FrequencySketchSettings, HillClimbingSettings};
use super::{PolicyKey, ReplacementPolicy};

/// Level of Q holding the active HIR entities.
const RESIDENT: usize = 0;
/// Level of Q holding passivated HIR entities remembered in S.
const GHOST: usize = 1;

/// Level of the sizing list holding active HIR entities demoted from LIR.
const DEMOTED: usize = 0;
/// Level of the sizing list holding entities passivated as HIR that were
/// never LIR since their activation (ARC's B1).
const PASSED: usize = 1;
/// Level of the sizing list holding passivated entities that had been LIR
/// (ARC's B2).
const DROPPED: usize = 2;
/// Level of the sizing list holding new entities the frequency filter
/// rejected.
const REJECTED: usize = 3;

/// LIRS over the entities of one shard.
#[derive(Debug)]
pub struct LowInterReferenceRecencySet<K> {
    limit: usize,
    hir_proportion: f64,
    history_multiplier: f64,
    lir_limit: usize,
    history_limit: usize,
    lir_count: usize,
    minimum_proportion: f64,
    maximum_proportion: f64,
    optimizer: Option<HillClimbing>,
    /// Ghost-driven sizing of the HIR share (ARC-style), if enabled.
    ghost_sizing: bool,
    stack: RecencyList<K>,
    queue: RecencyList<K>,
    /// With ghost sizing: the active HIR entities that were LIR, and ARC's
    /// two ghost lists (see [`DEMOTED`], [`PASSED`], [`DROPPED`]).
    sizing: RecencyList<K>,
    /// With ghost sizing: the entities seen most recently, in two levels:
    /// the `limit` most recent (what an LRU of the same limit would hold)
    /// and as many before them.
    shadow: RecencyList<K>,
    /// With ghost sizing: messages an LRU of the same limit would have had
    /// active and this policy did not, minus the reverse, within
    /// `[-limit, limit]`.
    recency_lead: i64,
    /// With a frequency filter: its settings and the sketch, rebuilt for
    /// every new limit.
    filter: Option<(FrequencySketchSettings, FrequencySketch)>,
    /// With a frequency filter: ghost hits of HIR entities passivated by
    /// new ones (the filter would have kept them) minus returns of
    /// rejected entities (the filter was wrong), within `[-limit, limit]`;
    /// the filter applies only while it is positive.
    filter_credit: i64,
}

impl<K: PolicyKey> LowInterReferenceRecencySet<K> {
    /// An empty policy holding at most `limit` active entities, of which
    /// `hir_proportion` (at least one, when the limit allows) are HIR,
    /// remembering up to `history_multiplier x limit` passivated ones.
    pub fn new(limit: usize, hir_proportion: f64, history_multiplier: f64) -> Self {
        let mut lirs = Self {
            limit,
            hir_proportion,
            history_multiplier,
            lir_limit: 0,
            history_limit: 0,
            lir_count: 0,
            minimum_proportion: hir_proportion,
            maximum_proportion: hir_proportion,
            optimizer: None,
            ghost_sizing: false,
            stack: RecencyList::new(1),
            queue: RecencyList::new(2),
            sizing: RecencyList::new(4),
            shadow: RecencyList::new(2),
            recency_lead: 0,
            filter: None,
            filter_credit: 0,
        };
        lirs.compute_limits();
        lirs
    }

    /// Sizes the HIR share adaptively between `minimum` and `maximum`,
    /// hill climbing on the active rate like the composite's window.
    pub fn with_optimizer(
        mut self,
        settings: HillClimbingSettings,
        minimum: f64,
        maximum: f64,
    ) -> Self {
        self.minimum_proportion = minimum.min(maximum);
        self.maximum_proportion = maximum;
        self.hir_proportion = self.hir_proportion.clamp(self.minimum_proportion, maximum);
        self.optimizer = Some(HillClimbing::new(settings, self.limit));
        self.compute_limits();
        self
    }

    /// Sizes the HIR share between `minimum` and `maximum` from ghost hits,
    /// as ARC sizes its recency side against its frequency side. The HIR
    /// queue plays ARC's T1 and the LIR set its T2: a message for an
    /// entity recently passivated from the HIR queue without ever having
    /// been LIR (a larger queue would have kept it) grows the HIR share at
    /// once; one for an entity recently passivated after being LIR (a
    /// larger LIR set would have kept it) shrinks it. Each step is one
    /// entity times the ratio of the other ghost list's length to this
    /// one's, at least one, as in ARC. No sampling, so a reversal of the
    /// access pattern moves the share within a few misses. A shadow LRU of
    /// the same limit (keys only, 2 x limit of them, as ARC's directory)
    /// guards both signals (see `size_by_ghosts`). Every step is O(1)
    /// amortised and allocation-free once the lists have held their peak;
    /// memory grows by at most 5 x limit keys. Replaces any optimizer.
    pub fn with_ghost_sizing(mut self, minimum: f64, maximum: f64) -> Self {
        self.minimum_proportion = minimum.min(maximum);
        self.maximum_proportion = maximum;
        self.hir_proportion = self.hir_proportion.clamp(self.minimum_proportion, maximum);
        self.optimizer = None;
        self.ghost_sizing = true;
        self.compute_limits();
        self
    }

    /// Weighs the oldest HIR entity against the least recent LIR one
    /// with a TinyLFU frequency sketch before passivating (see
    /// [`LirsSettings::frequency_filter`](super::settings::LirsSettings)).
    pub fn with_frequency_filter(mut self, settings: FrequencySketchSettings) -> Self {
        let sketch = Self::sketch(&settings, self.limit);
        self.filter = Some((settings, sketch));
        self
    }

    fn sketch(settings: &FrequencySketchSettings, limit: usize) -> FrequencySketch {
        FrequencySketch::new(
            limit,
            settings.width_multiplier,
            settings.reset_multiplier,
            settings.depth,
            settings.counter_bits,
        )
    }

    fn count(&mut self, id: &K) {
        if let Some((_, sketch)) = self.filter.as_mut() {
            sketch.increment(id);
        }
    }

    /// Whether the sketch estimates `candidate` strictly more frequent
    /// than `incumbent`.
    fn more_frequent(&self, candidate: &K, incumbent: &K) -> bool {
        self.filter
            .as_ref()
            .is_some_and(|(_, sketch)| sketch.frequency(candidate) > sketch.frequency(incumbent))
    }

    /// Moves the HIR share by `entities` (negative shrinks it), within the
    /// bounds; LIR entities beyond a smaller LIR share are demoted.
    fn resize_hir(&mut self, entities: f64) {
        if self.limit == 0 {
            return;
        }
        let proportion = (self.hir_proportion + entities / self.limit as f64)
            .min(self.maximum_proportion)
            .max(self.minimum_proportion);
        if proportion == self.hir_proportion {
            return;
        }
        self.hir_proportion = proportion;
        self.compute_limits();
        while self.lir_count > self.lir_limit {
            self.demote_bottom();
        }
    }

    /// Records a message for `id` in the shadow LRU; true if an LRU of
    /// the same limit would have had it active.
    fn touch_shadow(&mut self, id: &K) -> bool {
        let hit = match self.shadow.slot(id) {
            Some(slot) => {
                let hit = self.shadow.level_of(slot) == 0;
                self.shadow.move_to_back(slot, 0);
                hit
            }
            None => {
                self.shadow.push(id.clone(), 0);
                false
            }
        };
        while self.shadow.level_len(0) > self.limit {
            let Some(slot) = self.shadow.least_recent(0) else {
                break;
            };
            self.shadow.move_to_back(slot, 1);
        }
        while self.shadow.level_len(1) > self.limit {
            let Some(slot) = self.shadow.least_recent(1) else {
                break;
            };
            self.shadow.remove(slot);
        }
        hit
    }

    fn credit(&mut self, by: i64) {
        let bound = self.limit as i64;
        self.filter_credit = (self.filter_credit + by).clamp(-bound, bound);
    }

    /// Counts a message only the shadow LRU (`by` 1) or only this policy
    /// (`by` -1) had active.
    fn lead(&mut self, by: i64) {
        let bound = self.limit as i64;
        self.recency_lead = (self.recency_lead + by).clamp(-bound, bound);
    }

    /// ARC's adaptation, on the activation of `id`: a ghost hit moves the
    /// share towards the side that would have kept it.
    ///
    /// Two guards keep ARC's reasoning true for LIRS, where growing one
    /// side shrinks the other:
    /// - an entity passed through the HIR queue only grows it if recency
    ///   alone (an LRU of the whole limit) would have kept it: in a loop
    ///   over more entities than fit, a larger queue would not;
    /// - an entity dropped after being LIR only shrinks the queue while
    ///   LIRS is not losing to that LRU: in a pattern that favours recency
    ///   (a sweep up and back down), a larger LIR set would have kept it,
    ///   but at the expense of more hits at the turns.
    fn size_by_ghosts(&mut self, id: &K) {
        let recency_hit = self.touch_shadow(id);
        if recency_hit {
            self.lead(1);
        }
        let Some(slot) = self.sizing.slot(id) else {
            return;
        };
        let passed = self.sizing.level_len(PASSED) as f64;
        let dropped = self.sizing.level_len(DROPPED) as f64;
        match self.sizing.level_of(slot) {
            PASSED if recency_hit => self.resize_hir((dropped / passed).max(1.0)),
            DROPPED if self.recency_lead <= 0 => self.resize_hir(-(passed / dropped).max(1.0)),
            _ => {}
        }
        match self.sizing.level_of(slot) {
            PASSED => self.credit(1),
            REJECTED => self.credit(-1),
            _ => {}
        }
        self.sizing.remove(slot);
    }

    /// Records, for ghost sizing, the passivation of `key`, which had been
    /// LIR if `was_lir` (else it may still be marked as demoted).
    fn remember_passivated(&mut self, key: &K, was_lir: bool) {
        if !self.ghost_sizing {
            return;
        }
        match self.sizing.slot(key) {
            Some(slot) => {
                let level = if was_lir || self.sizing.level_of(slot) == DEMOTED {
                    DROPPED
                } else {
                    PASSED
                };
                self.sizing.move_to_back(slot, level);
            }
            None => {
                self.sizing
                    .push(key.clone(), if was_lir { DROPPED } else { PASSED });
            }
        }
        // ARC's bounds: |T1| + |B1| <= c and |B1| + |B2| <= 2c
        let passed_cap = self.limit.saturating_sub(self.resident_hir());
        while self.sizing.level_len(PASSED) > passed_cap {
            let Some(slot) = self.sizing.least_recent(PASSED) else {
                break;
            };
            self.sizing.remove(slot);
        }
        let dropped_cap = (2 * self.limit).saturating_sub(self.sizing.level_len(PASSED));
        while self.sizing.level_len(DROPPED) > dropped_cap {
            let Some(slot) = self.sizing.least_recent(DROPPED) else {
                break;
            };
            self.sizing.remove(slot);
        }
    }

    /// Forgets that an entity leaving the HIR queue had been LIR.
    fn forget_demotion(&mut self, key: &K) {
        if self.ghost_sizing {
            self.sizing.remove_key(key);
        }
    }

    /// The current HIR share of the limit.
    pub fn hir_proportion(&self) -> f64 {
        self.hir_proportion
    }

    /// Applies the optimizer's adjustment, if a sample just completed: LIR
    /// entities beyond a smaller LIR share are demoted (none passivated);
    /// a larger one fills up with later promotions.
    fn adapt(&mut self) {
        let Some(optimizer) = self.optimizer.as_mut() else {
            return;
        };
        let adjustment = optimizer.adjustment();
        if adjustment == 0.0 {
            return;
        }
        let proportion = (self.hir_proportion + adjustment)
            .min(self.maximum_proportion)
            .max(self.minimum_proportion);
        if proportion == self.hir_proportion {
            // pinned at a bound: explore the other way next time, since a
            // flat active rate gives the climb no slope to follow
            optimizer.turn();
            return;
        }
        self.hir_proportion = proportion;
        self.compute_limits();
        while self.lir_count > self.lir_limit {
            self.demote_bottom();
        }
    }

    fn compute_limits(&mut self) {
        // with ghost sizing, at least one LIR entity anchors S, so that
        // promotions (and with them the signal to shrink) stay possible
        let most = if self.ghost_sizing && self.limit > 1 {
            self.limit - 1
        } else {
            self.limit
        };
        let hir = ((self.hir_proportion * self.limit as f64).ceil() as usize)
            .max(1)
            .min(most);
        self.lir_limit = self.limit - hir;
        self.history_limit = (self.history_multiplier * self.limit as f64) as usize;
    }

    #[cfg(test)]
    fn is_lir(&self, id: &K) -> bool {
        self.stack.contains(id) && !self.queue.contains(id)
    }

    fn resident_hir(&self) -> usize {
        self.queue.level_len(RESIDENT)
    }

    /// Removes HIR entities from the bottom of S until it is LIR; a
    /// passivated one is forgotten altogether.
    fn prune(&mut self) {
        while let Some(slot) = self.stack.least_recent(0) {
            let Some(key) = self.stack.key(slot) else {
                break;
            };
            let Some(qslot) = self.queue.slot(key) else {
                break;
            };
            if self.queue.level_of(qslot) == GHOST {
                self.queue.remove(qslot);
            }
            self.stack.remove(slot);
        }
    }

    /// Demotes the least recent LIR entity to the back of the active HIR
    /// queue.
    fn demote_bottom(&mut self) {
        self.prune();
        if let Some(slot) = self.stack.least_recent(0) {
            if let Some(key) = self.stack.remove(slot) {
                if self.ghost_sizing {
                    self.sizing.remove_key(&key);
                    self.sizing.push(key.clone(), DEMOTED);
                }
                self.queue.push(key, RESIDENT);
                self.lir_count -= 1;
            }
        }
        self.prune();
    }

    /// Promotes an HIR entity that is in S (its Q entry already removed)
    /// to the top of S as LIR, demoting the least recent LIR entity if the
    /// LIR set is full.
    fn promote(&mut self, stack_slot: u32) {
        self.stack.move_to_back(stack_slot, 0);
        self.lir_count += 1;
        if self.lir_count > self.lir_limit {
            self.demote_bottom();
        }
    }

    /// The entity to passivate next: the oldest active HIR entity, or the
    /// least recent LIR one when there is none.
    fn victim_slot(&self) -> Option<(bool, u32)> {
        match self.queue.least_recent(RESIDENT) {
            Some(slot) => Some((true, slot)),
            None => self.stack.least_recent(0).map(|slot| (false, slot)),
        }
    }

    /// Passivates one entity; false if there is none.
    fn evict(&mut self, passivate: &mut Vec<K>) -> bool {
        match self.victim_slot() {
            Some((true, slot)) => {
                let Some(key) = self.queue.remove(slot) else {
                    return false;
                };
                if self.stack.contains(&key) {
                    self.queue.push(key.clone(), GHOST);
                    self.bound_history();
                }
                self.remember_passivated(&key, false);
                passivate.push(key);
                true
            }
            Some((false, slot)) => {
                let Some(key) = self.stack.remove(slot) else {
                    return false;
                };
                self.lir_count -= 1;
                self.prune();
                self.remember_passivated(&key, true);
                passivate.push(key);
                true
            }
            None => false,
        }
    }

    /// TinyLFU's admission of a new entity (not remembered in the stack)
    /// into a full HIR queue: rejected if estimated strictly less frequent
    /// than the oldest active HIR entity it would displace.
    fn reject(&self, id: &K) -> bool {
        if self.filter.is_none()
            || self.filter_credit <= 0
            || self.queue.contains(id)
            || self.stack.contains(id)
        {
            return false;
        }
        let Some(victim) = self
            .queue
            .least_recent(RESIDENT)
            .and_then(|s| self.queue.key(s))
        else {
            return false;
        };
        self.more_frequent(victim, id)
    }

    /// Forgets the oldest passivated entities beyond the history limit.
    fn bound_history(&mut self) {
        while self.queue.level_len(GHOST) > self.history_limit {
            let Some(slot) = self.queue.least_recent(GHOST) else {
                break;
            };
            if let Some(key) = self.queue.remove(slot) {
                self.stack.remove_key(&key);
            }
        }
    }

    /// A message for an active entity.
    fn access(&mut self, id: &K) {
        match self.queue.slot(id) {
            Some(qslot) if self.queue.level_of(qslot) == RESIDENT => {
                match self.stack.slot(id) {
                    Some(slot) => {
                        self.queue.remove(qslot);
                        self.forget_demotion(id);
                        self.promote(slot);
                    }
                    None if self.lir_count < self.lir_limit => {
                        // room in the LIR set (it was resized): promote
                        self.queue.remove(qslot);
                        self.forget_demotion(id);
                        self.stack.push(id.clone(), 0);
                        self.lir_count += 1;
                    }
                    None => {
                        self.stack.push(id.clone(), 0);
                        self.queue.move_to_back(qslot, RESIDENT);
                        // S's bottom must stay LIR even if it has none
                        self.prune();
                    }
                }
            }
            Some(_) => {}
            None => {
                if let Some(slot) = self.stack.slot(id) {
                    self.stack.move_to_back(slot, 0);
                    self.prune();
                }
            }
        }
    }

    /// Demotes and passivates down to the limits.
    fn enforce_limits(&mut self, passivate: &mut Vec<K>) {
        while self.lir_count > self.lir_limit {
            self.demote_bottom();
        }
        while self.len() > self.limit {
            if !self.evict(passivate) {
                break;
            }
        }
        self.bound_history();
    }
}

impl<K: PolicyKey> ReplacementPolicy<K> for LowInterReferenceRecencySet<K> {
    fn set_limit(&mut self, limit: usize, passivate: &mut Vec<K>) {
        self.limit = limit;
        if let Some(optimizer) = self.optimizer.as_mut() {
            optimizer.set_limit(limit);
        }
        if let Some((settings, sketch)) = self.filter.as_mut() {
            *sketch = Self::sketch(settings, limit);
        }
        self.compute_limits();
        self.enforce_limits(passivate);
    }

    fn on_activate(&mut self, id: K, passivate: &mut Vec<K>) {
        if self.contains(&id) {
            self.on_access(&id);
            return;
        }
        if let Some(optimizer) = self.optimizer.as_mut() {
            optimizer.record_passive();
        }
        self.count(&id);
        if self.limit == 0 {
            // nothing fits: passivated right after this message
            passivate.push(id);
            return;
        }
        if self.ghost_sizing {
            self.size_by_ghosts(&id);
        }
        if self.len() >= self.limit {
            if self.reject(&id) {
                self.stack.push(id.clone(), 0);
                self.queue.push(id.clone(), GHOST);
                self.prune();
                self.bound_history();
                if self.ghost_sizing {
                    self.sizing.remove_key(&id);
                    self.sizing.push(id.clone(), REJECTED);
                    while self.sizing.level_len(REJECTED) > self.limit {
                        let Some(slot) = self.sizing.least_recent(REJECTED) else {
                            break;
                        };
                        self.sizing.remove(slot);
                    }
                }
                passivate.push(id);
                return;
            }
            self.evict(passivate);
        }
        match self.queue.slot(&id) {
            // passivated, but recent enough to still be in S: its IRR is
            // below the least recent LIR entity's recency
            Some(ghost) => {
                self.queue.remove(ghost);
                if let Some(slot) = self.stack.slot(&id) {
                    self.promote(slot);
                }
            }
            None if self.lir_count < self.lir_limit => {
                self.stack.push(id, 0);
                self.lir_count += 1;
            }
            None => {
                self.stack.push(id.clone(), 0);
                self.queue.push(id, RESIDENT);
                self.prune();
            }
        }
        self.adapt();
    }

    fn on_access(&mut self, id: &K) {
        if !self.contains(id) {
            return; // not active: a caller bug
        }
        if let Some(optimizer) = self.optimizer.as_mut() {
            optimizer.record_active();
        }
        self.count(id);
        if self.ghost_sizing && !self.touch_shadow(id) {
            self.lead(-1);
        }
        self.access(id);
        self.adapt();
    }

    fn on_remove(&mut self, id: &K) {
        self.forget_demotion(id);
        match self.queue.slot(id) {
            Some(qslot) if self.queue.level_of(qslot) == RESIDENT => {
                self.queue.remove(qslot);
                self.stack.remove_key(id);
            }
            Some(_) => {}
            None => {
                if self.stack.remove_key(id) {
                    self.lir_count -= 1;
                    self.prune();
                }
            }
        }
    }

    fn len(&self) -> usize {
        self.lir_count + self.resident_hir()
    }
}

impl<K: PolicyKey> ActiveArea<K> for LowInterReferenceRecencySet<K> {
    fn contains(&self, id: &K) -> bool {
        match self.queue.slot(id) {
            Some(qslot) => self.queue.level_of(qslot) == RESIDENT,
            None => self.stack.contains(id),
        }
    }

    fn select(&self) -> Option<&K> {
        match self.victim_slot()? {
            (true, slot) => self.queue.key(slot),
            (false, slot) => self.stack.key(slot),
        }
    }
}

#[cfg(test)]
mod tests;
