//! Placements asked for from outside the coordinator's own rounds: a
//! region's `UpdateLocations` (these shards should run there, now) and
//! `ReleaseShards` (these shards should stop running here, now). A Kafka
//! rebalance listener needs both inside its callback, before the partitions
//! change owner, so neither waits for a rebalance tick. Each request is
//! answered by one `PlacementDone` once every shard it names has got where
//! it should, or failed to.
//!
//! A region's `UpdateLocations` claims its shards (its consumer was
//! assigned their partitions) until its `ReleaseShards` (the partitions
//! were revoked) or until it leaves. A location asked for a shard another
//! live region claims waits for that claim to end. The group protocol
//! revokes a partition before assigning it elsewhere, so the wait is
//! normally empty; but a broker that completes a rebalance without every
//! member's current assignment can hand a partition to a second consumer
//! while the first still reads it, and the shard must not move under the
//! first one's records.

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
    /// The region whose assignment claims each shard.
    claims: BTreeMap<ShardId, RegionId>,
    /// Locations waiting for another region's claim to end: shard to the
    /// region that wants it.
    contested: BTreeMap<ShardId, RegionId>,
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

    /// Requests of a region that left are dropped: nobody waits for them,
    /// and neither do the locations it wanted.
    pub(super) fn region_left(&mut self, region: &RegionId) {
        self.waits.retain(|w| w.region != *region);
        self.contested.retain(|_, wanted| wanted != region);
    }

    /// Ends `region`'s claim on `shard`; the location waiting for it, if
    /// any, is returned to go ahead (and claims the shard).
    fn end_claim(&mut self, shard: ShardId, region: &RegionId) -> Option<RegionId> {
        if self.claims.get(&shard) == Some(region) {
            self.claims.remove(&shard);
        }
        if self.claims.contains_key(&shard) {
            return None;
        }
        let wanted = self.contested.remove(&shard)?;
        self.claims.insert(shard, wanted.clone());
        Some(wanted)
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
        let (contested, free): (Vec<_>, Vec<_>) =
            locations.iter().cloned().partition(|(shard, target)| {
                self.placements
                    .claims
                    .get(shard)
                    .is_some_and(|claimer| claimer != target && self.state.is_region(claimer))
            });
        if !self.strategy.set_locations(&free) {
            let reason = "the allocation strategy takes no locations from outside \
                          (the external strategy does)"
                .to_string();
            self.refuse_placement(&requester, request, &locations, reason);
            return Ok(());
        }
        for (shard, target) in &free {
            self.placements.claims.insert(*shard, target.clone());
        }
        for (shard, target) in &contested {
            tracing::warn!(%shard, wanted = %target, claimed_by = ?self.placements.claims.get(shard), "shard location waits: another region's assignment still claims it (its partition was assigned again before it was revoked)");
            self.placements.contested.insert(*shard, target.clone());
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
        for (shard, target) in free {
            self.place(shard, target).await?;
        }
        self.settle();
        Ok(())
    }

    /// Moves `shard` to `target`: at once if it runs nowhere, by a hand-off
    /// if it runs elsewhere, after the hand-off under way if one is.
    async fn place(&mut self, shard: ShardId, target: RegionId) -> Result<(), StoreError> {
        if self.in_progress.contains_key(&shard) {
            return Ok(()); // placed when its hand-off ends
        }
        match self.state.home(shard) {
            Some(home) if *home == target => {}
            Some(_) => {
                self.start_handoff(shard);
            }
            None => self.get_shard_home(shard, target).await?,
        }
        Ok(())
    }

    /// The locations that waited for `region`'s claims go ahead: it left.
    pub(super) async fn claims_ended(&mut self, region: &RegionId) -> Result<(), StoreError> {
        let shards: Vec<ShardId> = self
            .placements
            .claims
            .iter()
            .filter(|(_, claimer)| *claimer == region)
            .map(|(shard, _)| *shard)
            .collect();
        for shard in shards {
            self.claim_ended(shard, region).await?;
        }
        Ok(())
    }

    async fn claim_ended(&mut self, shard: ShardId, region: &RegionId) -> Result<(), StoreError> {
        if let Some(wanted) = self.placements.end_claim(shard, region) {
            tracing::info!(%shard, %wanted, "shard location goes ahead: the claim before it ended");
            self.strategy.set_locations(&[(shard, wanted.clone())]);
            self.place(shard, wanted).await?;
        }
        Ok(())
    }

    /// `ReleaseShards`: hand off each shard that runs on the requester, and
    /// end its claims (a location that waited for one goes ahead).
    pub(super) async fn release_shards(
        &mut self,
        requester: RegionId,
        request: u64,
        shards: Vec<ShardId>,
    ) -> Result<(), StoreError> {
        let mut pending = BTreeMap::new();
        for &shard in &shards {
            self.strategy.location_released(shard, &requester);
            if self.placements.contested.get(&shard) == Some(&requester) {
                self.placements.contested.remove(&shard);
            }
            if self.state.home(shard) == Some(&requester) {
                self.placements.released.insert(shard);
                self.start_handoff(shard);
                pending.insert(shard, Goal::Away(requester.clone()));
            }
        }
        for shard in shards {
            self.claim_ended(shard, &requester).await?;
        }
        self.placements.waits.push(Wait {
            region: requester,
            request,
            pending,
            failed: Vec::new(),
        });
        self.settle();
        Ok(())
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
