//! The allocation strategy trait the coordinator asks.

use crate::{RegionId, ShardId};
use std::collections::{BTreeMap, BTreeSet};

/// The current placement, as the coordinator knows it: every registered
/// (non-proxy) region, with the shards it hosts in allocation order. Regions
/// that host nothing yet are present with an empty list.
pub type Allocations = BTreeMap<RegionId, Vec<ShardId>>;

/// Decides where shards live. The coordinator calls it from one task, so an
/// implementation may keep state in `&mut self`; it must not block.
pub trait AllocationStrategy: Send + 'static {
    /// Where a shard that has no home goes. `requester` is the region that
    /// asked for the home. `None` means no region can take it now (only
    /// proxies are registered); the coordinator then leaves the request
    /// unanswered and the requester retries.
    fn allocate(
        &mut self,
        requester: &RegionId,
        shard: ShardId,
        current: &Allocations,
    ) -> Option<RegionId>;

    /// Which shards to move in this rebalance round. `in_progress` holds the
    /// shards whose hand-off is still running; a returned shard that is in it
    /// is ignored by the coordinator.
    fn rebalance(
        &mut self,
        current: &Allocations,
        in_progress: &BTreeSet<ShardId>,
    ) -> BTreeSet<ShardId>;

    /// Desired homes decided outside the coordinator (a Kafka consumer
    /// group's assignment), which the coordinator applies at once. `false`:
    /// this strategy decides on its own and takes none (the default).
    fn set_locations(&mut self, _locations: &[(ShardId, RegionId)]) -> bool {
        false
    }

    /// `region` gave `shard` up (its Kafka partition was revoked): a desired
    /// home naming it no longer holds, or the shard would be placed back
    /// there. Nothing to do for a strategy that takes no locations.
    fn location_released(&mut self, _shard: ShardId, _region: &RegionId) {}

    /// [`allocate`](Self::allocate) for a shard of which `warm` regions
    /// (among `current`, the most preferred first) keep a standby copy
    /// (`sharding.standbys`): a start there reads only the changelog's
    /// tail. A strategy may prefer them; by default it does not.
    fn allocate_warm(
        &mut self,
        requester: &RegionId,
        shard: ShardId,
        current: &Allocations,
        _warm: &[RegionId],
    ) -> Option<RegionId> {
        self.allocate(requester, shard, current)
    }
}

impl<S: AllocationStrategy + ?Sized> AllocationStrategy for Box<S> {
    fn allocate(
        &mut self,
        requester: &RegionId,
        shard: ShardId,
        current: &Allocations,
    ) -> Option<RegionId> {
        (**self).allocate(requester, shard, current)
    }

    fn rebalance(
        &mut self,
        current: &Allocations,
        in_progress: &BTreeSet<ShardId>,
    ) -> BTreeSet<ShardId> {
        (**self).rebalance(current, in_progress)
    }

    fn set_locations(&mut self, locations: &[(ShardId, RegionId)]) -> bool {
        (**self).set_locations(locations)
    }

    fn location_released(&mut self, shard: ShardId, region: &RegionId) {
        (**self).location_released(shard, region)
    }

    fn allocate_warm(
        &mut self,
        requester: &RegionId,
        shard: ShardId,
        current: &Allocations,
        warm: &[RegionId],
    ) -> Option<RegionId> {
        (**self).allocate_warm(requester, shard, current, warm)
    }
}
