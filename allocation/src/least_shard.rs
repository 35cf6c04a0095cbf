//! The default allocation strategy: new shards go to the region with the
//! fewest, and rebalancing moves shards from the busiest regions.
//!
//! Both of Akka's algorithms are here, because a cluster migrating from Akka
//! may want the behaviour it had, while new deployments want the 2.6.10 one:
//! - the original (threshold) algorithm moves a few shards from the single
//!   busiest region per round, at most `rebalance_threshold` at a time, and
//!   may need many rounds after a node joins;
//! - the newer (limits) algorithm computes the optimal count per region and
//!   moves every excess shard at once, capped by the absolute and relative
//!   limits, so it typically balances in one or two rounds.
//!
//! With standby copies (`sharding.standbys`), a shard without a home goes
//! to a region that keeps a copy of it ([`AllocationStrategy::allocate_warm`]),
//! if it can without unbalancing the regions: only where the rebalance
//! would then move nothing. A copy saves a restore once, a rebalance costs
//! a hand-off, so balance comes first.

use crate::least_shard_settings::{LeastShardSettings, SettingsError};
use crate::{AllocationStrategy, Allocations, RegionId, ShardId};
use std::collections::BTreeSet;

/// Allocates to the least-loaded region and rebalances by shard count.
/// See the [module docs](self) for the two rebalance algorithms.
#[derive(Clone, Debug, Default)]
pub struct LeastShardAllocationStrategy {
    settings: LeastShardSettings,
}

impl LeastShardAllocationStrategy {
    /// A strategy with `settings`; `rebalance_absolute_limit > 0` selects the
    /// newer algorithm.
    ///
    /// # Errors
    /// The first problem [`LeastShardSettings::validate`] finds.
    pub fn new(settings: LeastShardSettings) -> Result<Self, SettingsError> {
        settings.validate()?;
        Ok(Self { settings })
    }

    /// The settings this strategy runs with.
    pub fn settings(&self) -> &LeastShardSettings {
        &self.settings
    }

    /// The original algorithm (Akka's `ShardCoordinator.LeastShardAllocationStrategy`).
    fn rebalance_by_threshold(
        &self,
        current: &Allocations,
        in_progress: &BTreeSet<ShardId>,
    ) -> BTreeSet<ShardId> {
        let threshold = self.settings.rebalance_threshold;
        let max_simultaneous = self.settings.max_simultaneous_rebalance;
        if in_progress.len() >= max_simultaneous {
            return BTreeSet::new();
        }
        let regions = by_suitability(current);
        let Some((_, least)) = regions.first() else {
            return BTreeSet::new();
        };
        // Shards already handing off are about to leave their region, so
        // they do not count towards making it the busiest. Among equally busy
        // regions the first in suitability order wins, as in Akka.
        let mut most: Vec<ShardId> = Vec::new();
        for (_, shards) in &regions {
            let movable: Vec<ShardId> = shards
                .iter()
                .filter(|shard| !in_progress.contains(shard))
                .copied()
                .collect();
            if movable.len() > most.len() {
                most = movable;
            }
        }
        // The least-loaded count includes its in-progress shards while the
        // busiest excludes them, so the busiest can be the smaller one.
        let difference = most.len().saturating_sub(least.len());
        if difference <= threshold {
            return BTreeSet::new();
        }
        let n = (difference - threshold)
            .min(threshold)
            .min(max_simultaneous - in_progress.len());
        most.sort_unstable();
        most.into_iter().take(n).collect()
    }

    /// The Akka 2.6.10 algorithm (`internal.LeastShardAllocationStrategy`).
    fn rebalance_by_limits(
        &self,
        current: &Allocations,
        in_progress: &BTreeSet<ShardId>,
    ) -> BTreeSet<ShardId> {
        // One round at a time: the counts below are only meaningful once the
        // previous round's shards have found their new homes.
        if !in_progress.is_empty() {
            return BTreeSet::new();
        }
        let regions = by_suitability(current);
        let number_of_shards: usize = regions.iter().map(|(_, shards)| shards.len()).sum();
        if regions.is_empty() || number_of_shards == 0 {
            return BTreeSet::new();
        }
        let optimal = number_of_shards.div_ceil(regions.len());
        let limit = self.limit(number_of_shards);

        // Phase 1: every region above the optimal count gives up its excess.
        let excess: BTreeSet<ShardId> = regions
            .iter()
            .filter(|(_, shards)| shards.len() > optimal)
            .flat_map(|(_, shards)| &shards[..shards.len() - optimal])
            .copied()
            .take(limit)
            .collect();
        if !excess.is_empty() {
            return excess;
        }

        // Phase 2: the optimal count is rounded up, so phase 1 can leave a
        // region two or more below it (e.g. 4, 4, 4, 4, 0 with optimal 4).
        // Take one shard from each region at the optimal count, but no more
        // than the regions below need.
        let count_below: usize = regions
            .iter()
            .map(|(_, shards)| (optimal - 1).saturating_sub(shards.len()))
            .sum();
        if count_below == 0 {
            return BTreeSet::new();
        }
        regions
            .iter()
            .filter(|(_, shards)| shards.len() >= optimal)
            .filter_map(|(_, shards)| shards.first())
            .copied()
            .take(count_below.min(limit))
            .collect()
    }

    /// Shards allowed to move in one round: the lower of the two limits, but
    /// at least one so a small cluster still makes progress.
    fn limit(&self, number_of_shards: usize) -> usize {
        // The float-to-int cast floors (and saturates), like Akka's `toInt`.
        let relative = (self.settings.rebalance_relative_limit * number_of_shards as f64) as usize;
        relative.min(self.settings.rebalance_absolute_limit).max(1)
    }
}

impl AllocationStrategy for LeastShardAllocationStrategy {
    fn allocate(
        &mut self,
        _requester: &RegionId,
        _shard: ShardId,
        current: &Allocations,
    ) -> Option<RegionId> {
        least_loaded_region(current).cloned()
    }

    fn allocate_warm(
        &mut self,
        requester: &RegionId,
        shard: ShardId,
        current: &Allocations,
        warm: &[RegionId],
    ) -> Option<RegionId> {
        let settled = BTreeSet::new();
        let fits = |region: &&RegionId| {
            let mut after = current.clone();
            match after.get_mut(*region) {
                Some(shards) => shards.push(shard),
                None => return false,
            }
            self.moves(&after, &settled).is_empty()
        };
        match warm.iter().find(fits) {
            Some(region) => Some(region.clone()),
            None => self.allocate(requester, shard, current),
        }
    }

    fn rebalance(
        &mut self,
        current: &Allocations,
        in_progress: &BTreeSet<ShardId>,
    ) -> BTreeSet<ShardId> {
        self.moves(current, in_progress)
    }
}

impl LeastShardAllocationStrategy {
    fn moves(&self, current: &Allocations, in_progress: &BTreeSet<ShardId>) -> BTreeSet<ShardId> {
        if self.settings.uses_limits() {
            self.rebalance_by_limits(current, in_progress)
        } else {
            self.rebalance_by_threshold(current, in_progress)
        }
    }
}

/// The region hosting the fewest shards; among equals the smallest
/// [`RegionId`], so every coordinator incarnation decides alike. `None` when
/// no region is registered.
pub fn least_loaded_region(current: &Allocations) -> Option<&RegionId> {
    // `min_by_key` keeps the first minimum, and the map iterates by id.
    current
        .iter()
        .min_by_key(|(_, shards)| shards.len())
        .map(|(region, _)| region)
}

/// Regions least loaded first, ties by id: Akka's `ShardSuitabilityOrdering`
/// reduced to its shard-count key, because [`Allocations`] carries no member
/// status or app version to rank by.
fn by_suitability(current: &Allocations) -> Vec<(&RegionId, &[ShardId])> {
    let mut regions: Vec<(&RegionId, &[ShardId])> = current
        .iter()
        .map(|(region, shards)| (region, shards.as_slice()))
        .collect();
    // Stable, and the map yields ids in order, so ties stay ordered by id.
    regions.sort_by_key(|(_, shards)| shards.len());
    regions
}

#[cfg(test)]
mod copies;
#[cfg(test)]
mod tests;
