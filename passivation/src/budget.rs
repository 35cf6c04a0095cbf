//! A memory budget over a replacement policy: the entities' estimated
//! memory, not their count, is what a shard keeps within its share.
//!
//! The policy still decides who goes. The budget only moves the policy's
//! limit: when the weighed entities pass the share, the limit drops to the
//! count the share holds at their mean weight (and again, should the
//! policy's victims be lighter than the mean), and it rises again, to the
//! entity-count limit at most, once they are well under it. So W-TinyLFU,
//! LRU or any other policy keeps its own notion of value, and a shard of
//! large entities holds fewer of them than a shard of small ones.
//!
//! The limit moves by at least an eighth at a time when it rises, and
//! rises only once the entities take less than seven eighths of the share:
//! a policy that starts its structures anew at a new limit (the
//! composite's frequency sketch, as in Akka) is not reset for every entity
//! that grows by a byte.

use crate::{PolicyKey, ReplacementPolicy};
use std::collections::HashMap;

/// Until any entity is weighed, the limit assumes entities of this size.
const ASSUMED_WEIGHT: u64 = 1024;

/// The least limit the budget grows back to: room for one entity.
const LEAST_LIMIT: usize = 1;

/// A replacement policy kept within a memory budget (see the module's
/// doc). Weights are what the caller says an entity takes, in bytes.
pub struct MemoryBudgeted<K: PolicyKey> {
    inner: Box<dyn ReplacementPolicy<K>>,
    weights: HashMap<K, u64, foldhash::fast::FixedState>,
    /// Sum of `weights`.
    total: u64,
    /// The share of the budget this policy keeps to.
    budget: u64,
    /// The entity-count limit set from outside; `usize::MAX` without one.
    count_limit: usize,
    /// The limit the inner policy has now.
    limit: usize,
}

impl<K: PolicyKey> std::fmt::Debug for MemoryBudgeted<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryBudgeted")
            .field("total", &self.total)
            .field("budget", &self.budget)
            .field("limit", &self.limit)
            .field("count_limit", &self.count_limit)
            .finish_non_exhaustive()
    }
}

impl<K: PolicyKey> MemoryBudgeted<K> {
    /// `inner` kept within `budget` bytes and, if given, `count_limit`
    /// entities. `build` makes the inner policy for a limit.
    pub fn new(
        budget: u64,
        count_limit: Option<usize>,
        build: impl FnOnce(usize) -> Box<dyn ReplacementPolicy<K>>,
    ) -> Self {
        let count_limit = count_limit.unwrap_or(usize::MAX);
        let limit = Self::fitting(budget, ASSUMED_WEIGHT).min(count_limit);
        Self {
            inner: build(limit),
            weights: HashMap::default(),
            total: 0,
            budget,
            count_limit,
            limit,
        }
    }

    /// How many entities of `mean` bytes `budget` holds.
    fn fitting(budget: u64, mean: u64) -> usize {
        usize::try_from(budget / mean.max(1))
            .unwrap_or(usize::MAX)
            .max(LEAST_LIMIT)
    }

    /// The weighed entities' total, in bytes.
    pub fn total(&self) -> u64 {
        self.total
    }

    /// The limit the policy has now.
    pub fn limit(&self) -> usize {
        self.limit
    }

    /// Forgets the weights of the entities the inner policy just pushed
    /// (from `from` on).
    fn forget_pushed(&mut self, passivate: &[K], from: usize) {
        for id in &passivate[from..] {
            if let Some(weight) = self.weights.remove(id) {
                self.total -= weight;
            }
        }
    }

    fn set_inner_limit(&mut self, limit: usize, passivate: &mut Vec<K>) {
        self.limit = limit;
        let from = passivate.len();
        self.inner.set_limit(limit, passivate);
        self.forget_pushed(passivate, from);
    }

    /// Brings the total within the budget, or the limit back up once the
    /// total is well below it.
    fn fit(&mut self, passivate: &mut Vec<K>) {
        // Down to none: an entity heavier than the whole share is
        // passivated once its message is handled, as a limit of zero does.
        while self.total > self.budget && !self.inner.is_empty() {
            let len = self.inner.len();
            let holds = u128::from(self.budget) * len as u128 / u128::from(self.total);
            let target = usize::try_from(holds).unwrap_or(usize::MAX).min(len - 1);
            self.set_inner_limit(target, passivate);
            if self.inner.len() >= len {
                break; // nothing it could passivate: no loop for ever
            }
        }
        if self.limit < self.count_limit && self.total <= self.budget - self.budget / 8 {
            let len = self.inner.len().max(1);
            let mean = if self.total == 0 {
                ASSUMED_WEIGHT
            } else {
                (self.total / len as u64).max(1)
            };
            let wanted = Self::fitting(self.budget, mean).min(self.count_limit);
            if wanted >= self.limit + (self.limit / 8).max(1) {
                self.set_inner_limit(wanted, passivate);
            }
        }
    }
}

impl<K: PolicyKey> ReplacementPolicy<K> for MemoryBudgeted<K> {
    fn set_limit(&mut self, limit: usize, passivate: &mut Vec<K>) {
        self.count_limit = limit;
        if self.limit > limit {
            self.set_inner_limit(limit, passivate);
        }
        self.fit(passivate);
    }

    fn on_activate(&mut self, id: K, passivate: &mut Vec<K>) {
        let from = passivate.len();
        self.weights.entry(id.clone()).or_insert(0);
        self.inner.on_activate(id, passivate);
        self.forget_pushed(passivate, from);
    }

    fn on_access(&mut self, id: &K) {
        self.inner.on_access(id);
    }

    fn on_remove(&mut self, id: &K) {
        self.inner.on_remove(id);
        if let Some(weight) = self.weights.remove(id) {
            self.total -= weight;
        }
    }

    fn len(&self) -> usize {
        self.inner.len()
    }

    fn window_proportion(&self) -> Option<f64> {
        self.inner.window_proportion()
    }

    fn set_weight(&mut self, id: &K, weight: u64, passivate: &mut Vec<K>) {
        let Some(kept) = self.weights.get_mut(id) else {
            return; // not tracked (passivated meanwhile)
        };
        self.total = self.total - *kept + weight;
        *kept = weight;
        self.fit(passivate);
    }

    fn set_budget(&mut self, budget: u64, passivate: &mut Vec<K>) {
        if budget != self.budget {
            self.budget = budget;
            self.fit(passivate);
        }
    }

    fn weight(&self) -> Option<u64> {
        Some(self.total)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ReplacementSettings;

    fn lru(budget: u64, count: Option<usize>) -> MemoryBudgeted<u32> {
        MemoryBudgeted::new(budget, count, |limit| {
            ReplacementSettings::preset("lru")
                .expect("lru")
                .build(limit)
        })
    }

    /// Activates `id` weighing `weight`; what is passivated.
    fn add(policy: &mut MemoryBudgeted<u32>, id: u32, weight: u64) -> Vec<u32> {
        let mut out = Vec::new();
        policy.on_activate(id, &mut out);
        policy.set_weight(&id, weight, &mut out);
        out
    }

    #[test]
    fn the_total_stays_within_the_budget_and_the_policy_picks_who_goes() {
        let mut policy = lru(10_000, None);
        let mut passivated = Vec::new();
        for id in 0..100 {
            passivated.extend(add(&mut policy, id, 1_000));
            assert!(policy.total() <= 10_000, "{} after {id}", policy.total());
        }
        // As many as the budget holds (the limit rises by an eighth at
        // least, so one entity's room may stay free).
        assert!((9..=10).contains(&policy.len()), "{}", policy.len());
        // LRU's victims: the least recently used, in order.
        let kept = u32::try_from(policy.len()).expect("len");
        assert_eq!(passivated, (0..100 - kept).collect::<Vec<_>>());
    }

    #[test]
    fn large_entities_make_room_for_fewer_and_small_ones_for_more() {
        let mut policy = lru(100_000, None);
        for id in 0..100 {
            add(&mut policy, id, 10_000);
        }
        assert_eq!(policy.len(), 10);
        for id in 100..1_000 {
            add(&mut policy, id, 100);
        }
        assert!(policy.total() <= 100_000);
        assert!(
            policy.len() > 500,
            "small entities fill the budget: {} of them",
            policy.len()
        );
    }

    #[test]
    fn an_entity_that_grows_past_the_share_pushes_others_out() {
        let mut policy = lru(10_000, None);
        for id in 0..10 {
            add(&mut policy, id, 900);
        }
        assert!(policy.total() <= 10_000);
        let mut out = Vec::new();
        policy.on_access(&0);
        policy.set_weight(&0, 5_000, &mut out);
        assert!(policy.total() <= 10_000, "{}", policy.total());
        assert!(!out.contains(&0), "the one just used stays: {out:?}");
        assert!(!out.is_empty());
        // Heavier than the whole share: it goes too, once handled.
        policy.set_weight(&0, 20_000, &mut out);
        assert!(out.contains(&0), "{out:?}");
        assert_eq!(policy.total(), 0);
        assert!(policy.is_empty());
    }

    #[test]
    fn the_entity_count_limit_still_holds() {
        let mut policy = lru(1_000_000, Some(5));
        for id in 0..20 {
            add(&mut policy, id, 10);
        }
        assert_eq!(policy.len(), 5);
    }

    #[test]
    fn a_smaller_share_passivates_at_once_and_removed_entities_free_theirs() {
        let mut policy = lru(10_000, None);
        for id in 0..10 {
            add(&mut policy, id, 1_000);
        }
        let (before, oldest) = (
            policy.total(),
            10 - u32::try_from(policy.len()).expect("len"),
        );
        let mut out = Vec::new();
        policy.set_budget(5_000, &mut out);
        assert!(policy.total() <= 5_000, "{}", policy.total());
        let gone = u32::try_from(out.len()).expect("len");
        assert_eq!(out, (oldest..oldest + gone).collect::<Vec<_>>());
        assert_eq!(policy.total(), before - 1_000 * u64::from(gone));
        policy.on_remove(&9);
        assert_eq!(policy.total(), before - 1_000 * u64::from(gone + 1));
    }
}
