//! The outbox with transactions (`kafka.transactional_outputs`): the
//! outputs never enter the records; each write takes those of its
//! changes into the transaction that writes their records, and they leave
//! the outbox once it commits.

use super::{Map, Phase, ShardOutbox};
use crate::store::{ShardTransactions, Transactions};
use colo_state::Output;
use std::sync::Arc;

impl ShardOutbox {
    /// The start's writer, once restored: with one, outputs go in the
    /// writes' transactions from now on.
    pub fn in_transactions(&mut self, transactions: Transactions) {
        self.transactions = transactions;
    }

    pub fn transactions(&self) -> Option<&Arc<dyn ShardTransactions>> {
        self.transactions.as_ref()
    }

    /// With transactions: the outputs write `seq` takes, those of the
    /// changes its records hold.
    pub fn to_commit(&self, seq: u64, states: &Map<Vec<u8>>) -> Vec<Output> {
        if self.transactions.is_none() || self.entities.is_empty() {
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
