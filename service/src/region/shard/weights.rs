//! A shard's part in its node's memory budget (see `memory_budget.rs`):
//! its replacement policy kept within the shard's share of the budget,
//! each active entity weighed when it starts and after every message.

use super::Shard;
use crate::entity::{Entity, EntityId, EntityType};
use crate::memory_budget::BudgetShare;
use crate::node_context::NodeContext;
use colo_passivation::{MemoryBudgeted, ReplacementPolicy};
use std::cell::Cell;

/// A shard's policy, from its entity type's passivation and the node's
/// budget: `local_shards` is how many of the region's shards run here,
/// this one included (the entity-count limit is shared by them).
pub(in crate::region) fn policy<E: Entity>(
    entity_type: &EntityType<E>,
    node: &NodeContext,
    local_shards: usize,
) -> (
    Option<Box<dyn ReplacementPolicy<EntityId>>>,
    Option<Weighing>,
) {
    let passivation = &entity_type.settings.passivation;
    let limit = passivation.shard_limit(local_shards);
    match (node.memory.bytes(), passivation.replacement.as_ref()) {
        (Some(_), Some(replacement)) => {
            let share = node.memory.join();
            let policy = MemoryBudgeted::new(share.bytes(), limit, |limit| {
                replacement.build::<EntityId>(limit)
            });
            let weighing = Weighing {
                share,
                reported: Cell::new(0),
            };
            (Some(Box::new(policy)), Some(weighing))
        }
        _ => (limit.and_then(|limit| passivation.policy(limit)), None),
    }
}

/// A shard's share of the budget, and what it last reported of its
/// entities' weight to the region's gauge.
#[derive(Debug)]
pub(in crate::region) struct Weighing {
    share: BudgetShare,
    reported: Cell<u64>,
}

impl<E: Entity, F> Shard<E, F> {
    /// What `entity` weighs now (see [`EntityType::with_size`]), when the
    /// shard keeps to a budget.
    pub(super) fn weight_of(&self, entity: &E) -> Option<u64> {
        self.weighing.as_ref()?;
        let bytes = match (&self.entity_type.size, &self.durable) {
            (Some(size), _) => size(entity),
            // The value, and about what it owns on the heap.
            (None, Some(durable)) => std::mem::size_of::<E>() + durable.encoded_size(),
            (None, None) => std::mem::size_of::<E>(),
        };
        Some(bytes as u64)
    }

    /// Tells the policy what an active entity weighs now, and the share it
    /// keeps to: it picks the entities to passivate if they no longer fit.
    pub(super) fn weighed(&mut self, id: &EntityId, weight: Option<u64>) {
        let (Some(weight), Some(weighing), Some(policy)) =
            (weight, self.weighing.as_ref(), self.policy.as_mut())
        else {
            return;
        };
        policy.set_budget(weighing.share.bytes(), &mut self.evicted);
        policy.set_weight(id, weight, &mut self.evicted);
        self.report_weight();
    }

    /// Weighs an active entity that handled a message at once (not
    /// through a run: see `Shard::deliver`).
    pub(super) fn weigh_active(&mut self, id: &EntityId) {
        let weight = self
            .entities
            .get(id)
            .and_then(|active| active.entity.as_ref())
            .and_then(|entity| self.weight_of(entity));
        self.weighed(id, weight);
    }

    /// The region's gauge of its entities' memory follows this shard's.
    pub(super) fn report_weight(&self) {
        let (Some(weighing), Some(policy)) = (&self.weighing, &self.policy) else {
            return;
        };
        let now = policy.weight().unwrap_or(0);
        let before = weighing.reported.replace(now);
        self.metrics
            .entity_memory
            .increment(now as f64 - before as f64);
    }

    /// The shard stops: its entities' memory leaves the gauge.
    pub(super) fn unreport_weight(&self) {
        if let Some(weighing) = &self.weighing {
            let before = weighing.reported.replace(0);
            self.metrics.entity_memory.decrement(before as f64);
        }
    }
}
