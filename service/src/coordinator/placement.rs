//! Placements asked for from outside the coordinator's own rounds: a
//! region's `UpdateLocations` (these shards should run there, now) and
//! `ReleaseShards` (these shards should stop running here, now). A Kafka
//! rebalance listener needs both inside its callback, before the partitions
//! change owner, so neither waits for a rebalance tick. Each request is
//! answered by one `PlacementDone` once every shard it names has got where
//! it should, or failed to.

use super::store::StoreError;
use super::Coordinator;
use crate::protocol::CoordinatorToRegion;
use colo_allocation::{RegionId, ShardId};
use std::collections::{BTreeMap, BTreeSet};

/// Where a shard of a request must get to.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Goal {
    /// Running on this region (started there).
    RunsOn(RegionId),
    /// No longer running on this region.
    Away(RegionId),
}

/// One request waiting for its shards.
#[derive(Debug)]
struct Wait {
    /// Who asked, and gets the answer.
    region: RegionId,
    request: u64,
    pending: BTreeMap<ShardId, Goal>,
    failed: Vec<ShardId>,
}

/// The requests waiting, and the shards being released: a released shard
/// is not placed again at once when its hand-off ends (it would go back to
/// the region that let it go), only when a location or a message asks.
#[derive(Debug, Default)]
pub(super) struct Placements {
    waits: Vec<Wait>,
    released: BTreeSet<ShardId>,
}

impl Placements {
    /// Whether `shard`'s hand-off was a release; asked once, when it ends.
    pub(super) fn take_released(&mut self, shard: ShardId) -> bool {
        self.released.remove(&shard)
    }

    /// The region a waiting request wants `shard` to run on.
    fn wanted_on(&self, shard: ShardId) -> Option<RegionId> {
        self.waits.iter().find_map(|w| match w.pending.get(&shard) {
            Some(Goal::RunsOn(region)) => Some(region.clone()),
            _ => None,
        })
    }

    /// Requests of a region that left are dropped: nobody waits for them.
    pub(super) fn region_left(&mut self, region: &RegionId) {
        self.waits.retain(|w| w.region != *region);
    }
}

impl Coordinator {
    /// `UpdateLocations`: record the locations with the strategy, then hand
    /// off what runs elsewhere and place what runs nowhere.
    pub(super) async fn update_locations(
        &mut self,
        requester: RegionId,
        request: u64,
        locations: Vec<(ShardId, RegionId)>,
    ) -> Result<(), StoreError> {
        let unknown: Vec<&RegionId> = locations
            .iter()
            .map(|(_, r)| r)
            .filter(|r| !self.state.is_region(r))
            .collect();
        if let Some(region) = unknown.first() {
            let reason = format!("{region} is not a registered region");
            self.refuse_placement(&requester, request, &locations, reason);
            return Ok(());
        }
        if !self.strategy.set_locations(&locations) {
            let reason = "the allocation strategy takes no locations from outside \
                          (the external strategy does)"
                .to_string();
            self.refuse_placement(&requester, request, &locations, reason);
            return Ok(());
        }
        let pending = locations
            .iter()
            .map(|(shard, region)| (*shard, Goal::RunsOn(region.clone())))
            .collect();
        self.placements.waits.push(Wait {
            region: requester,
            request,
            pending,
            failed: Vec::new(),
        });
        for (shard, target) in locations {
            if self.in_progress.contains_key(&shard) {
                continue; // placed when its hand-off ends
            }
            match self.state.home(shard) {
                Some(home) if *home == target => {}
                Some(_) => {
                    self.start_handoff(shard);
                }
                None => self.get_shard_home(shard, target).await?,
            }
        }
        self.settle();
        Ok(())
    }

    /// `ReleaseShards`: hand off each shard that runs on the requester.
    pub(super) fn release_shards(
        &mut self,
        requester: RegionId,
        request: u64,
        shards: Vec<ShardId>,
    ) {
        let mut pending = BTreeMap::new();
        for shard in shards {
            self.strategy.location_released(shard, &requester);
            if self.state.home(shard) == Some(&requester) {
                self.placements.released.insert(shard);
                self.start_handoff(shard);
                pending.insert(shard, Goal::Away(requester.clone()));
            }
        }
        self.placements.waits.push(Wait {
            region: requester,
            request,
            pending,
            failed: Vec::new(),
        });
        self.settle();
    }

    /// A hand-off ended: a shard to be released is away if it succeeded; a
    /// failed one fails every request waiting for it.
    pub(super) fn placement_handoff_done(&mut self, shard: ShardId, ok: bool) {
        for wait in &mut self.placements.waits {
            if ok {
                if matches!(wait.pending.get(&shard), Some(Goal::Away(_))) {
                    wait.pending.remove(&shard);
                }
            } else if wait.pending.remove(&shard).is_some() {
                wait.failed.push(shard);
            }
        }
        self.settle();
    }

    /// The region a request wants `shard` on, for placing it after its
    /// hand-off.
    pub(super) fn placement_target(&self, shard: ShardId) -> Option<RegionId> {
        self.placements.wanted_on(shard)
    }

    /// Answers every request whose shards all got where they should: called
    /// whenever a shard starts, stops or moves.
    pub(super) fn settle(&mut self) {
        let home_of = |shard: ShardId| self.state.home(shard).cloned();
        let starting = |shard: ShardId| self.unacked_host.contains_key(&shard);
        let moving = |shard: ShardId| self.in_progress.contains_key(&shard);
        let mut answers = Vec::new();
        self.placements.waits.retain_mut(|wait| {
            wait.pending.retain(|shard, goal| match goal {
                Goal::RunsOn(region) => {
                    home_of(*shard).as_ref() != Some(region) || starting(*shard) || moving(*shard)
                }
                Goal::Away(region) => home_of(*shard).as_ref() == Some(region) || moving(*shard),
            });
            if wait.pending.is_empty() {
                answers.push((
                    wait.region.clone(),
                    CoordinatorToRegion::PlacementDone {
                        request: wait.request,
                        failed: std::mem::take(&mut wait.failed),
                        refused: None,
                    },
                ));
                false
            } else {
                true
            }
        });
        for (region, answer) in answers {
            self.send(&region, answer);
        }
    }

    fn refuse_placement(
        &self,
        requester: &RegionId,
        request: u64,
        locations: &[(ShardId, RegionId)],
        reason: String,
    ) {
        tracing::warn!(region = %requester, %reason, "shard locations refused");
        self.send(
            requester,
            CoordinatorToRegion::PlacementDone {
                request,
                failed: locations.iter().map(|(s, _)| *s).collect(),
                refused: Some(reason),
            },
        );
    }
}
