//! The interface every replacement policy implements, shared by shards and
//! the trace simulator so that what is measured is what runs.

use std::hash::Hash;

/// A key a policy tracks: an entity id in a shard, an interned id in the
/// simulator.
pub trait PolicyKey: Hash + Eq + Clone + Send + 'static {}

impl<K: Hash + Eq + Clone + Send + 'static> PolicyKey for K {}

/// Decides which active entities of one shard to passivate once the shard's
/// share of the region's active-entity limit is reached.
///
/// One instance per shard. Every operation is O(1) amortised and allocates
/// nothing on the hot path (`on_access`, `on_activate` once warmed up):
/// entities to passivate are pushed into a buffer the caller owns and
/// reuses.
pub trait ReplacementPolicy<K: PolicyKey>: Send {
    /// The shard's limit changed (a shard of the region started or stopped);
    /// pushes the entities to passivate to get within it.
    fn set_limit(&mut self, limit: usize, passivate: &mut Vec<K>);

    /// A message for an entity that is not active: it is activated now and
    /// tracked. Pushes the entities to passivate to make room (never `id`
    /// itself, except for policies whose admission filter rejects it; the
    /// caller then passivates it after this message).
    fn on_activate(&mut self, id: K, passivate: &mut Vec<K>);

    /// A message for an active entity.
    fn on_access(&mut self, id: &K);

    /// The entity stopped for another reason (idle, explicit, failure,
    /// hand-off): forget it.
    fn on_remove(&mut self, id: &K);

    /// Entities tracked.
    fn len(&self) -> usize;

    /// Whether no entity is tracked.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The current proportion of the admission window, for adaptive
    /// policies (a metric); `None` for the others.
    fn window_proportion(&self) -> Option<f64> {
        None
    }

    /// How much memory an active entity takes now, in bytes (its encoded
    /// state, or what its entity type reports): a policy kept within a
    /// memory budget ([`crate::MemoryBudgeted`]) pushes the entities to
    /// passivate to stay within it. The others count entities only.
    fn set_weight(&mut self, _id: &K, _weight: u64, _passivate: &mut Vec<K>) {}

    /// This shard's share of the memory budget changed (a shard of the
    /// node started or stopped): pushes the entities to passivate to get
    /// within it. Only a budgeted policy has one.
    fn set_budget(&mut self, _budget: u64, _passivate: &mut Vec<K>) {}

    /// The weighed entities' memory, in bytes, for a budgeted policy.
    fn weight(&self) -> Option<u64> {
        None
    }
}
