//! The outbox with transactions (`kafka.transactional_outputs`): the
//! outputs never enter the records; each write takes those of its
//! changes into the transaction that writes their records, and they leave
//! the outbox once it commits.

use super::{Map, Phase, ShardOutbox};
use colo_state::Output;

impl ShardOutbox {
    /// From now on, outputs go in the writes' transactions.
    pub fn in_transactions(&mut self) {
        self.transactional = true;
    }

    /// With transactions: the outputs write `seq` takes, those of the
    /// changes its records hold.
    pub fn to_commit(&self, seq: u64, states: &Map<Vec<u8>>) -> Vec<Output> {
        if !self.transactional || self.entities.is_empty() {
            return Vec::new();
        }
        states
            .keys()
            .filter_map(|id| self.entities.get(id))
            .flat_map(|entry| entry.outputs.iter())
            .filter(|p| matches!(p.phase, Phase::Unwritten { seq: s } if s <= seq))
            .map(|p| p.output.clone())
            .collect()
    }

    /// With transactions, write `seq` committed: the outputs it took are
    /// sent.
    pub(super) fn committed(&mut self, seq: u64, states: &Map<Vec<u8>>) {
        let mut sent = 0;
        for id in states.keys() {
            let Some(entry) = self.entities.get_mut(id) else {
                continue;
            };
            let before = entry.outputs.len();
            entry
                .outputs
                .retain(|p| !matches!(p.phase, Phase::Unwritten { seq: s } if s <= seq));
            sent += before - entry.outputs.len();
            if entry.outputs.is_empty() && !self.indexed.contains(id) {
                self.entities.remove(id);
            }
        }
        self.metrics.sent.increment(sent as u64);
        self.metrics.pending.decrement(sent as f64);
    }
}
