//! Following the leader among expert policies (not an Akka policy).
//!
//! No single policy wins everywhere: LIRS-style policies win on loops,
//! scans and traces whose hot set changes slowly, while Window-TinyLFU
//! wins where a long-term frequency count matters and the shard is too
//! small for LIRS to keep more than one probation entity. Each expert here
//! runs on the shard's message stream as a virtual cache of the whole
//! limit (keys only, it passivates nothing), and the shard's real active
//! set follows whichever expert had more of the recent messages active.
//!
//! The real set drifts towards the leader's lazily: when room is needed,
//! it passivates the active entity the leader dropped (or never held)
//! longest ago. For each expert, the active entities it does not hold are
//! kept in order, so this choice is O(1) and a change of leader costs
//! nothing up front; entities only the old leader valued stay until the
//! new one's choices need their room, and hit meanwhile. Every operation
//! is O(1) amortised (one update of each expert, a bounded number of list
//! operations) and allocation-free once the lists have held their peak.

use super::area::ActiveArea;
use super::recency_list::RecencyList;
use super::{PolicyKey, ReplacementPolicy};

/// Follows the expert with the most recent virtual hits.
pub struct Ensemble<K: PolicyKey> {
    limit: usize,
    experts: Vec<Box<dyn ActiveArea<K>>>,
    /// By expert: the active entities it does not hold, oldest first.
    outside: Vec<RecencyList<K>>,
    /// The active entities, least recent first.
    active: RecencyList<K>,
    /// By expert: its virtual hits, halved every `period` messages.
    scores: Vec<u64>,
    leader: usize,
    period_multiplier: f64,
    period: u64,
    messages: u64,
    margin: u64,
    margin_multiplier: f64,
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

fn env_f64(name: &str, default: f64) -> f64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

impl<K: PolicyKey> Ensemble<K> {
    /// An ensemble of `experts`, each built for `limit` (the first leads
    /// until another one scores more).
    pub(crate) fn new(limit: usize, experts: Vec<Box<dyn ActiveArea<K>>>) -> Self {
        let n = experts.len();
        let mut ensemble = Self {
            limit,
            experts,
            outside: (0..n).map(|_| RecencyList::new(1)).collect(),
            active: RecencyList::new(1),
            scores: vec![0; n],
            leader: 0,
            period_multiplier: env_f64("ENS_PERIOD", 10.0),
            period: 0,
            messages: 0,
            margin: 0,
            margin_multiplier: env_f64("ENS_MARGIN", 0.0),
            dropped: Vec::new(),
        };
        ensemble.compute_period();
        ensemble
    }

    fn compute_period(&mut self) {
        self.period = ((self.period_multiplier * self.limit as f64) as u64).max(1);
        self.margin = (self.margin_multiplier * self.limit as f64) as u64;
    }

    /// The expert currently followed.
    pub fn leader(&self) -> usize {
        self.leader
    }

    /// Records what expert `e` dropped: those still active are now outside
    /// it.
    fn record_dropped(&mut self, e: usize) {
        for key in self.dropped.drain(..) {
            if self.active.contains(&key) && !self.outside[e].contains(&key) {
                self.outside[e].push(key, 0);
            }
        }
    }

    /// Feeds a message to every expert, scoring their hits.
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
            for s in &mut self.scores {
                *s /= 2;
            }
        }
        let best = (0..self.scores.len())
            .max_by_key(|&e| (self.scores[e], e == self.leader))
            .unwrap_or(0);
        if self.scores[best] > self.scores[self.leader] + self.margin {
            self.leader = best;
        }
    }

    /// Stops tracking an active entity.
    fn drop_active(&mut self, key: &K) {
        self.active.remove_key(key);
        for outside in &mut self.outside {
            outside.remove_key(key);
        }
    }

    /// The active entity to passivate: the one the leader let go of
    /// longest ago, else one another expert let go of, else the least
    /// recent.
    fn victim(&self) -> Option<K> {
        let slot_key = |list: &RecencyList<K>| {
            list.least_recent(0)
                .and_then(|slot| list.key(slot))
                .cloned()
        };
        slot_key(&self.outside[self.leader])
            .or_else(|| self.outside.iter().find_map(slot_key))
            .or_else(|| slot_key(&self.active))
    }
}

impl<K: PolicyKey> ReplacementPolicy<K> for Ensemble<K> {
    fn set_limit(&mut self, limit: usize, passivate: &mut Vec<K>) {
        self.limit = limit;
        self.compute_period();
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
            let leader = &self.outside[self.leader];
            let Some(victim) = leader.least_recent(0).and_then(|s| leader.key(s)).cloned() else {
                // the leader rejected it and holds all the active ones
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
        let list = &self.outside[self.leader];
        match list.least_recent(0) {
            Some(slot) => list.key(slot),
            None => self.active.least_recent(0).and_then(|s| self.active.key(s)),
        }
    }
}
