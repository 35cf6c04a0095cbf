//! Following the leader among expert policies (not an Akka policy).
//!
//! No single policy wins everywhere. LIRS-style policies win on loops,
//! scans and sweeps. Window-TinyLFU wins where a long-term frequency count
//! matters and a shard is too small for LIRS to keep more than about one
//! probation entity (sprite at 10 to 20 entities a shard). Each expert here
//! sees the shard's messages as a virtual cache of the whole limit (it
//! tracks keys and passivates nothing), and the shard's real active set
//! follows whichever expert had more of the recent messages active.
//!
//! The real set drifts towards the leader's lazily: when room is needed it
//! passivates the active entity that the leader dropped (or never held)
//! longest ago. For each expert the active entities it does not hold are
//! kept in order, so this choice is O(1) and a change of leader costs
//! nothing up front: entities only the old leader valued stay, and may
//! still be hit, until the new leader's choices need their room.
//!
//! The leader changes only when another expert's lead exceeds `margin x
//! limit` hits. Moving the whole active set over costs up to `limit`
//! misses, so a smaller lead does not pay for the move; without the margin
//! the leader flaps between near-equal experts and the mixed active set
//! loses to both (loop at 250: 14.3 against 23.7 and 21.9).
//!
//! Every operation is O(1) amortised (one update of each expert and a
//! bounded number of list operations per expert) and allocation-free once
//! the lists have held their peak. Memory is that of the experts plus, per
//! expert, at most `limit` keys.

use super::area::ActiveArea;
use super::recency_list::RecencyList;
use super::{PolicyKey, ReplacementPolicy};

/// Follows the expert with the most recent virtual hits.
pub struct Ensemble<K: PolicyKey> {
    limit: usize,
    experts: Vec<Box<dyn ActiveArea<K>>>,
    /// By expert: the active entities it does not hold, oldest first.
    outside: Vec<RecencyList<K>>,
    /// The active entities, least recent first (the order of last resort,
    /// when the limit shrinks below what every expert holds).
    active: RecencyList<K>,
    /// By expert: its virtual hits, halved every `period` messages.
    scores: Vec<u64>,
    leader: usize,
    period_multiplier: f64,
    margin_multiplier: f64,
    period: u64,
    margin: u64,
    messages: u64,
    /// Scratch buffer for what an expert drops.
    dropped: Vec<K>,
}

impl<K: PolicyKey> std::fmt::Debug for Ensemble<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ensemble")
            .field("limit", &self.limit)
            .field("experts", &self.experts.len())
            .field("active", &self.active.len())
            .field("scores", &self.scores)
            .field("leader", &self.leader)
            .finish_non_exhaustive()
    }
}

impl<K: PolicyKey> Ensemble<K> {
    /// An ensemble of `experts`, each already built for `limit`; the first
    /// leads until another one's virtual hits, halved every
    /// `period_multiplier x limit` messages, exceed its own by more than
    /// `margin_multiplier x limit`.
    pub(crate) fn new(
        limit: usize,
        experts: Vec<Box<dyn ActiveArea<K>>>,
        period_multiplier: f64,
        margin_multiplier: f64,
    ) -> Self {
        let n = experts.len();
        let mut ensemble = Self {
            limit,
            experts,
            outside: (0..n).map(|_| RecencyList::new(1)).collect(),
            active: RecencyList::new(1),
            scores: vec![0; n],
            leader: 0,
            period_multiplier,
            margin_multiplier,
            period: 0,
            margin: 0,
            messages: 0,
            dropped: Vec::new(),
        };
        ensemble.compute_limits();
        ensemble
    }

    fn compute_limits(&mut self) {
        let limit = self.limit as f64;
        self.period = ((self.period_multiplier * limit) as u64).max(1);
        self.margin = (self.margin_multiplier * limit) as u64;
    }

    /// The index of the expert currently followed.
    pub fn leader(&self) -> usize {
        self.leader
    }

    /// Records what expert `e` just dropped: those still active are now
    /// outside it.
    fn record_dropped(&mut self, e: usize) {
        for key in self.dropped.drain(..) {
            if self.active.contains(&key) && !self.outside[e].contains(&key) {
                self.outside[e].push(key, 0);
            }
        }
    }

    /// Feeds a message to every expert, scores their hits and picks the
    /// leader.
    fn feed(&mut self, id: &K) {
        for e in 0..self.experts.len() {
            let expert = &mut self.experts[e];
            if expert.contains(id) {
                self.scores[e] += 1;
                expert.on_access(id);
            } else {
                expert.on_activate(id.clone(), &mut self.dropped);
            }
            self.record_dropped(e);
            if self.experts[e].contains(id) {
                self.outside[e].remove_key(id);
            } else if self.active.contains(id) && !self.outside[e].contains(id) {
                self.outside[e].push(id.clone(), 0);
            }
        }
        self.messages += 1;
        if self.messages >= self.period {
            self.messages = 0;
            for score in &mut self.scores {
                *score /= 2;
            }
        }
        let leading = self.scores[self.leader];
        if let Some(best) = (0..self.scores.len()).max_by_key(|&e| self.scores[e]) {
            if self.scores[best] > leading.saturating_add(self.margin) {
                self.leader = best;
            }
        }
    }

    /// Stops tracking an active entity.
    fn drop_active(&mut self, key: &K) {
        self.active.remove_key(key);
        for outside in &mut self.outside {
            outside.remove_key(key);
        }
    }

    fn oldest(list: &RecencyList<K>) -> Option<&K> {
        list.least_recent(0).and_then(|slot| list.key(slot))
    }

    /// The active entity to passivate when the limit shrinks: the one the
    /// leader let go of longest ago, else one another expert let go of,
    /// else the least recent.
    fn victim(&self) -> Option<K> {
        Self::oldest(&self.outside[self.leader])
            .or_else(|| self.outside.iter().find_map(Self::oldest))
            .or_else(|| Self::oldest(&self.active))
            .cloned()
    }
}

impl<K: PolicyKey> ReplacementPolicy<K> for Ensemble<K> {
    fn set_limit(&mut self, limit: usize, passivate: &mut Vec<K>) {
        self.limit = limit;
        self.compute_limits();
        for e in 0..self.experts.len() {
            self.experts[e].set_limit(limit, &mut self.dropped);
            self.record_dropped(e);
        }
        while self.active.len() > limit {
            let Some(victim) = self.victim() else {
                break;
            };
            self.drop_active(&victim);
            passivate.push(victim);
        }
    }

    /// An expert that rejects the new entity (an admission filter) and
    /// holds every active one makes the ensemble reject it too.
    fn on_activate(&mut self, id: K, passivate: &mut Vec<K>) {
        if self.active.contains(&id) {
            self.on_access(&id);
            return;
        }
        self.feed(&id);
        if self.limit == 0 {
            passivate.push(id);
            return;
        }
        if self.active.len() >= self.limit {
            let Some(victim) = Self::oldest(&self.outside[self.leader]).cloned() else {
                passivate.push(id);
                return;
            };
            self.drop_active(&victim);
            passivate.push(victim);
        }
        self.active.push(id.clone(), 0);
        for e in 0..self.experts.len() {
            if !self.experts[e].contains(&id) {
                self.outside[e].push(id.clone(), 0);
            }
        }
    }

    fn on_access(&mut self, id: &K) {
        let Some(slot) = self.active.slot(id) else {
            return; // not active: a caller bug
        };
        self.active.move_to_back(slot, 0);
        self.feed(id);
    }

    /// The experts forget it too, so that they stay within what can be
    /// active.
    fn on_remove(&mut self, id: &K) {
        self.drop_active(id);
        for expert in &mut self.experts {
            expert.on_remove(id);
        }
    }

    fn len(&self) -> usize {
        self.active.len()
    }
}

impl<K: PolicyKey> ActiveArea<K> for Ensemble<K> {
    fn contains(&self, id: &K) -> bool {
        self.active.contains(id)
    }

    fn select(&self) -> Option<&K> {
        Self::oldest(&self.outside[self.leader]).or_else(|| Self::oldest(&self.active))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::area::replay;
    use crate::lru::LeastRecentlyUsed;
    use crate::mru::MostRecentlyUsed;
    use crate::settings::{
        CompositeSettings, EnsembleSettings, FrequencySketchSettings, ReplacementSettings,
    };

    fn lru_mru(limit: usize) -> Ensemble<u32> {
        Ensemble::new(
            limit,
            vec![
                Box::new(LeastRecentlyUsed::new(limit)),
                Box::new(MostRecentlyUsed::new(limit)),
            ],
            10.0,
            1.0,
        )
    }

    #[test]
    fn a_lone_expert_is_followed_exactly() {
        let mut ensemble = Ensemble::new(3, vec![Box::new(LeastRecentlyUsed::new(3))], 10.0, 1.0);
        let mut lru = LeastRecentlyUsed::new(3);
        let script = [1, 2, 3, 1, 4, 5, 1, 2, 6, 3, 3, 7, 1];
        let passivated = replay(&mut ensemble, &script);
        assert_eq!(passivated, replay(&mut lru, &script));
        assert_eq!(&passivated[..3], &[2, 3, 4]);
        assert_eq!(ensemble.select(), lru.select());
        assert_eq!(ensemble.len(), 3);
    }

    #[test]
    fn the_leader_changes_after_a_lead_of_more_than_the_margin() {
        // limit 3, a loop over 4: LRU never hits, MRU keeps 2 of the 4
        let mut p = lru_mru(3);
        let loop_of_4 = |n: u32| (0..n).map(|i| i % 4 + 1).collect::<Vec<_>>();
        // 1, 2, 3 fill; 4 passivates LRU's choice 1 (the leader's)
        assert_eq!(replay(&mut p, &loop_of_4(4)), vec![1]);
        let mut out = Vec::new();
        let mut lead_when_changed = None;
        for id in loop_of_4(40).into_iter().skip(4) {
            let lead = p.scores[1] as i64 - p.scores[0] as i64;
            if p.contains(&id) {
                p.on_access(&id);
            } else {
                p.on_activate(id, &mut out);
            }
            if p.leader() == 1 && lead_when_changed.is_none() {
                lead_when_changed = Some(lead);
            }
        }
        // the margin is 3 hits (1 x limit): MRU leads once it is 4 ahead,
        // counting the message that put it there
        assert_eq!(lead_when_changed, Some(3));
        assert_eq!(p.scores[0], 0);
        // it has taken MRU's active set over: the next passes hit exactly
        // as MRU alone does
        let mut mru = MostRecentlyUsed::new(3);
        replay(&mut mru, &loop_of_4(40));
        let next = loop_of_4(40);
        assert_eq!(replay(&mut p, &next), replay(&mut mru, &next));
        assert_eq!(p.len(), 3);
    }

    #[test]
    fn entities_the_leader_never_held_are_passivated_first() {
        let mut p = lru_mru(3);
        // leader LRU; MRU's own churn does not move the real set
        assert!(replay(&mut p, &[1, 2, 3]).is_empty());
        for e in 0..2 {
            assert_eq!(p.outside[e].len(), 0);
        }
        // 4: LRU drops 1 (passivated); MRU drops 3, which stays active
        assert_eq!(replay(&mut p, &[4]), vec![1]);
        assert!(p.contains(&3) && p.outside[1].contains(&3));
        assert_eq!(p.select(), Some(&2));
        p.leader = 1;
        // following MRU, 3 (outside it) goes before anything MRU holds
        assert_eq!(p.select(), Some(&3));
        assert_eq!(replay(&mut p, &[5]), vec![3]);
        assert_eq!(p.len(), 3);
    }

    #[test]
    fn a_rejecting_leader_makes_the_ensemble_reject() {
        // a filter in front of an LRU main area: a new entity seen less
        // often than the victim is rejected
        let filtered = ReplacementSettings::Composite(Box::new(CompositeSettings {
            window: None,
            filter: Some(FrequencySketchSettings::default()),
            main: ReplacementSettings::preset("lru").unwrap(),
        }));
        let settings = EnsembleSettings {
            experts: vec![filtered],
            ..EnsembleSettings::default()
        };
        let mut p = settings.build::<u32>(2);
        assert!(replay(&mut p, &[1, 1, 2, 2, 1, 2]).is_empty());
        assert_eq!(replay(&mut p, &[3]), vec![3]);
        assert!(p.contains(&1) && p.contains(&2) && !p.contains(&3));
        assert_eq!(p.len(), 2);
    }

    #[test]
    fn limit_changes_and_removals_keep_the_lists_bounded() {
        let mut p = lru_mru(10);
        let trace: Vec<u32> = (0..5000).map(|i| i % 7 + (i / 3) * 13 % 50).collect();
        replay(&mut p, &trace);
        assert_eq!(p.len(), 10);
        assert!(p.outside.iter().all(|o| o.len() <= 10));
        let mut out = Vec::new();
        p.set_limit(4, &mut out);
        assert_eq!(out.len(), 6);
        assert_eq!(p.len(), 4);
        assert!(p.outside.iter().all(|o| o.len() <= 4));
        let some = *p.active.key(p.active.least_recent(0).unwrap()).unwrap();
        p.on_remove(&some);
        assert_eq!(p.len(), 3);
        assert!(p.outside.iter().all(|o| !o.contains(&some)));
        assert!(p.experts.iter().all(|e| !e.contains(&some)));
    }
}
