//! A node's memory budget for its entities (`passivation.memory_budget`):
//! the bytes its active entities may take, shared evenly by the shards of
//! every entity type that passivates with a replacement policy. Each such
//! shard keeps its entities within its share (colo-passivation's
//! `MemoryBudgeted`), reading the share anew as it works: a shard started
//! or stopped anywhere on the node moves every share.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

/// The node's budget and the shards that share it.
#[derive(Debug, Default)]
pub(crate) struct MemoryBudget {
    /// In bytes; 0: none.
    bytes: AtomicU64,
    shards: AtomicUsize,
}

impl MemoryBudget {
    /// Sets the budget, before any shard starts.
    pub fn set(&self, bytes: u64) {
        self.bytes.store(bytes, Ordering::Relaxed);
    }

    /// The budget, if the node has one.
    pub fn bytes(&self) -> Option<u64> {
        Some(self.bytes.load(Ordering::Relaxed)).filter(|&b| b > 0)
    }

    /// A shard joins the budget until the returned share is dropped.
    pub fn join(self: &Arc<Self>) -> BudgetShare {
        self.shards.fetch_add(1, Ordering::Relaxed);
        BudgetShare {
            budget: self.clone(),
        }
    }
}

/// One shard's part of the node's budget, for as long as it runs.
#[derive(Debug)]
pub(crate) struct BudgetShare {
    budget: Arc<MemoryBudget>,
}

impl BudgetShare {
    /// The shard's share now, in bytes.
    pub fn bytes(&self) -> u64 {
        let shards = self.budget.shards.load(Ordering::Relaxed).max(1);
        self.budget.bytes.load(Ordering::Relaxed) / shards as u64
    }
}

impl Drop for BudgetShare {
    fn drop(&mut self) {
        self.budget.shards.fetch_sub(1, Ordering::Relaxed);
    }
}
