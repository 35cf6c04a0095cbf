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
use super::hill_climbing::HillClimbing;
use super::recency_list::RecencyList;
use super::settings::HillClimbingSettings;
use super::{PolicyKey, ReplacementPolicy};

/// Level of Q holding the active HIR entities.
const RESIDENT: usize = 0;
/// Level of Q holding passivated HIR entities remembered in S.
const GHOST: usize = 1;

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
    stack: RecencyList<K>,
    queue: RecencyList<K>,
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
            stack: RecencyList::new(1),
            queue: RecencyList::new(2),
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
        let hir = ((self.hir_proportion * self.limit as f64).ceil() as usize)
            .max(1)
            .min(self.limit);
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
                passivate.push(key);
                true
            }
            Some((false, slot)) => {
                let Some(key) = self.stack.remove(slot) else {
                    return false;
                };
                self.lir_count -= 1;
                self.prune();
                passivate.push(key);
                true
            }
            None => false,
        }
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
                        self.promote(slot);
                    }
                    None if self.lir_count < self.lir_limit => {
                        // room in the LIR set (it was resized): promote
                        self.queue.remove(qslot);
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
        if self.limit == 0 {
            // nothing fits: passivated right after this message
            passivate.push(id);
            return;
        }
        if self.len() >= self.limit {
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
        self.access(id);
        self.adapt();
    }

    fn on_remove(&mut self, id: &K) {
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
mod tests {
    use super::*;
    use crate::passivation::area::replay;

    #[test]
    fn ghosts_are_promoted_and_the_hir_queue_is_passivated_first() {
        // limit 3: 2 LIR, 1 HIR
        let mut p = LowInterReferenceRecencySet::<u32>::new(3, 0.01, 2.0);
        // 1, 2 fill the LIR set; 3 is HIR; 4 passivates 3 (remembered);
        // 3 comes back within the LIR recency: passivates HIR 4, becomes
        // LIR and demotes 1, which 5 then passivates (and forgets: 1 was
        // no longer in the stack)
        assert_eq!(replay(&mut p, &[1, 2, 3, 4, 3, 5]), vec![3, 4, 1]);
        assert!(p.is_lir(&2) && p.is_lir(&3));
        assert!(p.contains(&5) && !p.is_lir(&5));
        assert_eq!(p.select(), Some(&5));
        assert_eq!(p.len(), 3);
        // 1 was forgotten: it re-enters as HIR
        assert_eq!(replay(&mut p, &[1]), vec![5]);
        assert!(!p.is_lir(&1));
    }

    #[test]
    fn a_scan_passes_through_the_hir_queue_and_history_stays_bounded() {
        // limit 10: 9 LIR, 1 HIR; history 2 x 10
        let mut p = LowInterReferenceRecencySet::<u32>::new(10, 0.01, 2.0);
        let hot: Vec<u32> = (1..=9).chain(1..=9).collect();
        assert!(replay(&mut p, &hot).is_empty());
        let scan: Vec<u32> = (100..1100).collect();
        let out = replay(&mut p, &scan);
        assert_eq!(out.len(), 999);
        assert!((1..=9).all(|id| p.is_lir(&id)), "the hot set survives");
        assert!(p.queue.level_len(GHOST) <= 20);
        assert!(p.stack.len() <= 9 + 1 + 20);
        assert_eq!(p.len(), 10);
    }

    #[test]
    fn shrinking_the_limit_demotes_then_passivates() {
        let mut p = LowInterReferenceRecencySet::<u32>::new(10, 0.01, 2.0);
        assert!(replay(&mut p, &(1..=10).collect::<Vec<_>>()).is_empty());
        let mut out = Vec::new();
        p.set_limit(4, &mut out);
        // to 3 LIR + 1 HIR: 10 was HIR; 1..=6 are demoted in recency
        // order and all but the last (6, now HIR) passivated
        assert_eq!(out, vec![10, 1, 2, 3, 4, 5]);
        assert_eq!(p.len(), 4);
        assert!((7..=9).all(|id| p.is_lir(&id)));
        assert_eq!(p.select(), Some(&6));
        p.on_remove(&8);
        assert_eq!(p.len(), 3);
        assert!(!p.contains(&8));
    }

    #[test]
    fn the_climber_turns_at_a_bound_when_the_rate_is_flat() {
        // limit 100: a sample every 1000 accesses
        let mut p = LowInterReferenceRecencySet::<u32>::new(100, 0.01, 2.0).with_optimizer(
            HillClimbingSettings::default(),
            0.01,
            1.0,
        );
        let mut out = Vec::new();
        for id in 0..1000 {
            p.on_activate(id, &mut out);
        }
        // first step goes down, blocked by the minimum: turn
        assert_eq!(p.hir_proportion(), 0.01);
        for id in 1000..2000 {
            p.on_activate(id, &mut out);
        }
        // still no active access: plain hill climbing would stay pinned
        assert_eq!(p.hir_proportion(), 0.01 + 0.0625);
        assert_eq!(p.len(), 100);
        assert_eq!(out.len(), 1900);
    }
}
