//! A user-defined allocation strategy: pin each shard to a region by shard id
//! modulo the number of registered regions (in id order), so placement is a
//! pure function of the membership.
//!
//! Run with `cargo run -p colo-allocation --example custom_strategy`.

use colo_allocation::{AllocationStrategy, Allocations, RegionId, ShardId};
use std::collections::BTreeSet;

#[derive(Debug, Default)]
struct ModuloStrategy;

impl ModuloStrategy {
    fn pinned_region(shard: ShardId, current: &Allocations) -> Option<&RegionId> {
        // `Allocations` is ordered by region id, so every coordinator agrees.
        let index = shard.0 as usize % current.len().max(1);
        current.keys().nth(index)
    }
}

impl AllocationStrategy for ModuloStrategy {
    fn allocate(
        &mut self,
        _requester: &RegionId,
        shard: ShardId,
        current: &Allocations,
    ) -> Option<RegionId> {
        Self::pinned_region(shard, current).cloned()
    }

    fn rebalance(
        &mut self,
        current: &Allocations,
        in_progress: &BTreeSet<ShardId>,
    ) -> BTreeSet<ShardId> {
        current
            .iter()
            .flat_map(|(region, hosted)| hosted.iter().map(move |shard| (region, *shard)))
            .filter(|(region, shard)| {
                !in_progress.contains(shard)
                    && Self::pinned_region(*shard, current) != Some(*region)
            })
            .map(|(_, shard)| shard)
            .collect()
    }
}

fn main() {
    let mut strategy = ModuloStrategy;
    let mut current = Allocations::new();
    current.insert(RegionId::new("node-a"), Vec::new());
    current.insert(RegionId::new("node-b"), Vec::new());

    let requester = RegionId::new("node-a");
    for shard in (0..6).map(ShardId) {
        if let Some(home) = strategy.allocate(&requester, shard, &current) {
            println!("shard {shard} -> {home}");
            current.entry(home).or_default().push(shard);
        }
    }

    // A third node joins: shards whose pinned region changed must move.
    current.insert(RegionId::new("node-c"), Vec::new());
    let moving = strategy.rebalance(&current, &BTreeSet::new());
    println!("node-c joined; rebalance moves {moving:?}");
}
