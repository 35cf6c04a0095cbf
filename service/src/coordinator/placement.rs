//! Placements asked for from outside the coordinator's own rounds: a
//! region's `UpdateLocations` (these shards should run there, now) and
//! `ReleaseShards` (these shards should stop running here, now). A Kafka
//! rebalance listener needs both inside its callback, before the partitions
//! change owner, so neither waits for a rebalance tick. Each request is
//! answered by one `PlacementDone` once every shard it names has got where
//! it should, or failed to.
//!
//! A region's `UpdateLocations` claims its shards for a source (the topic
//! whose partitions its consumer was assigned) until its `ReleaseShards`
//! of that source (the partitions were revoked) or until it leaves. A
//! location asked for a shard another live region claims for the same
//! source waits for that claim to end. The group protocol revokes a
//! partition before assigning it elsewhere, so the wait is normally empty;
//! but a broker that completes a rebalance without every member's current
//! assignment can hand a partition to a second consumer while the first
//! still reads it, and the shard must not move under the first one's
//! records. A shard another source's claim keeps on another region (an
//! entity type fed by several topics, whose same-numbered partitions went
//! to different nodes) stays there: the location is answered `elsewhere`,
//! and its partition's records are forwarded to the shard.
//!
//! A region asks again for a shard when its earlier request timed out: the
//! later request supersedes the earlier one, which is answered with it, so
//! no wait is left behind unanswered.

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
    /// The requests answered together: the first, and those it superseded.
    requests: Vec<u64>,
    /// The source of the claims it asked for.
    source: String,
    pending: BTreeMap<ShardId, Goal>,
    failed: Vec<ShardId>,
    /// Shards that stay on another region, for another source's claim.
    elsewhere: Vec<ShardId>,
}

/// The requests waiting, and the shards being released: a released shard
/// is not placed again at once when its hand-off ends (it would go back to
/// the region that let it go), only when a location or a message asks.
#[derive(Debug, Default)]
pub(super) struct Placements {
    waits: Vec<Wait>,
    released: BTreeSet<ShardId>,
    /// Each shard's claims: the region each source's assignment claims it
    /// for.
    claims: BTreeMap<ShardId, BTreeMap<String, RegionId>>,
    /// Locations waiting for another region's claim of the same source to
    /// end: the region that wants the shard.
    contested: BTreeMap<(ShardId, String), RegionId>,
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

    /// The claim of `source` on `shard`, if any.
    fn claimer(&self, shard: ShardId, source: &str) -> Option<&RegionId> {
        self.claims.get(&shard).and_then(|c| c.get(source))
    }

    /// The regions other than `except` that claim `shard` for a source
    /// other than `source`.
    fn other_claimers<'a>(
        &'a self,
        shard: ShardId,
        source: &'a str,
        except: &'a RegionId,
    ) -> impl Iterator<Item = &'a RegionId> + 'a {
        self.claims
            .get(&shard)
            .into_iter()
            .flatten()
            .filter(move |(s, region)| s.as_str() != source && *region != except)
            .map(|(_, region)| region)
    }

    fn claim(&mut self, shard: ShardId, source: &str, region: &RegionId) {
        self.claims
            .entry(shard)
            .or_default()
            .insert(source.to_string(), region.clone());
    }

    /// Takes `shards` out of `region`'s waits for them to run on it for
    /// `source`: a later request of the region for the same source
    /// supersedes them. Returns the requests left with nothing to wait
    /// for, to be answered with the later one.
    fn supersede(&mut self, region: &RegionId, shards: &[ShardId], source: &str) -> Vec<u64> {
        let mut superseded = Vec::new();
        self.waits.retain_mut(|wait| {
            if wait.region != *region || wait.source != source {
                return true;
            }
            let before = wait.pending.len();
            wait.pending.retain(|shard, goal| {
                !(shards.contains(shard) && matches!(goal, Goal::RunsOn(r) if r == region))
            });
            if before > 0 && wait.pending.is_empty() {
                superseded.append(&mut wait.requests);
                return false;
            }
            true
        });
        superseded
    }

    /// Ends `region`'s claim of `source` on `shard`; the location waiting
    /// for it, if any, is returned to go ahead (and claims the shard).
    fn end_claim(&mut self, shard: ShardId, source: &str, region: &RegionId) -> Option<RegionId> {
        if let Some(claims) = self.claims.get_mut(&shard) {
            if claims.get(source) == Some(region) {
                claims.remove(source);
            }
            let claimed = claims.contains_key(source);
            if claims.is_empty() {
                self.claims.remove(&shard);
            }
            if claimed {
                return None;
            }
        }
        let wanted = self.contested.remove(&(shard, source.to_string()))?;
        self.claim(shard, source, &wanted);
        Some(wanted)
    }

    /// `shard` stays on another region for `region`'s waits: answered as
    /// elsewhere.
    fn elsewhere(&mut self, shard: ShardId, region: &RegionId) {
        for wait in &mut self.waits {
            if matches!(wait.pending.get(&shard), Some(Goal::RunsOn(r)) if r == region) {
                wait.pending.remove(&shard);
                wait.elsewhere.push(shard);
            }
        }
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
        source: String,
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
        let mut contested = Vec::new();
        let mut elsewhere = Vec::new();
        let mut free = Vec::new();
        for (shard, target) in &locations {
            let placements = &self.placements;
            if placements
                .claimer(*shard, &source)
                .is_some_and(|claimer| claimer != target && self.state.is_region(claimer))
            {
                contested.push((*shard, target.clone()));
            } else if placements
                .other_claimers(*shard, &source, target)
                .any(|claimer| self.state.is_region(claimer))
            {
                elsewhere.push((*shard, target.clone()));
            } else {
                free.push((*shard, target.clone()));
            }
        }
        if !self.strategy.set_locations(&free) {
            let reason = "the allocation strategy takes no locations from outside \
                          (the external strategy does)"
                .to_string();
            self.refuse_placement(&requester, request, &locations, reason);
            return Ok(());
        }
        let shards: Vec<ShardId> = locations.iter().map(|(shard, _)| *shard).collect();
        let mut requests = vec![request];
        requests.extend(self.placements.supersede(&requester, &shards, &source));
        for (shard, target) in free.iter().chain(&elsewhere) {
            self.placements.claim(*shard, &source, target);
        }
        // At debug: the claimer's release is on its way (its revoke's report
        // raced this assignment's), or the claimer is gone and its region's
        // timeout, which says so at warn, ends the claim.
        for (shard, target) in &contested {
            tracing::debug!(%shard, %source, wanted = %target, claimed_by = ?self.placements.claimer(*shard, &source), "shard location waits: another region's assignment still claims it (its partition was assigned again before it was revoked)");
            self.placements
                .contested
                .insert((*shard, source.clone()), target.clone());
        }
        for (shard, target) in &elsewhere {
            tracing::info!(%shard, %source, wanted = %target, "shard stays where another topic's partition keeps it; this partition's records are forwarded there");
        }
        let pending = free
            .iter()
            .chain(&contested)
            .map(|(shard, region)| (*shard, Goal::RunsOn(region.clone())))
            .collect();
        self.placements.waits.push(Wait {
            region: requester,
            requests,
            source,
            pending,
            failed: Vec::new(),
            elsewhere: elsewhere.into_iter().map(|(shard, _)| shard).collect(),
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
        self.claims_ended_but(region, &[]).await
    }

    /// `region`'s claims end but those of the shards in `kept`: it
    /// registered anew, on a new link, running only `kept`. A restarted
    /// node (the same address, a new process) claims again what its new
    /// assignment gives it; a node whose link only broke asks again for a
    /// shard it still waits for. Its old claims would otherwise keep
    /// another node's location waiting for good.
    pub(super) async fn claims_ended_but(
        &mut self,
        region: &RegionId,
        kept: &[ShardId],
    ) -> Result<(), StoreError> {
        let claims: Vec<(ShardId, String)> = self
            .placements
            .claims
            .iter()
            .filter(|(shard, _)| !kept.contains(shard))
            .flat_map(|(shard, claims)| {
                claims
                    .iter()
                    .filter(|(_, claimer)| *claimer == region)
                    .map(|(source, _)| (*shard, source.clone()))
            })
            .collect();
        for (shard, source) in claims {
            self.claim_ended(shard, &source, region).await?;
        }
        Ok(())
    }

    async fn claim_ended(
        &mut self,
        shard: ShardId,
        source: &str,
        region: &RegionId,
    ) -> Result<(), StoreError> {
        let Some(wanted) = self.placements.end_claim(shard, source, region) else {
            return Ok(());
        };
        let kept_elsewhere = self
            .placements
            .other_claimers(shard, source, &wanted)
            .any(|claimer| self.state.is_region(claimer));
        if kept_elsewhere {
            tracing::info!(%shard, %source, %wanted, "shard location goes ahead, and stays where another topic's partition keeps it");
            self.placements.elsewhere(shard, &wanted);
            self.settle();
            return Ok(());
        }
        tracing::info!(%shard, %source, %wanted, "shard location goes ahead: the claim before it ended");
        self.strategy.set_locations(&[(shard, wanted.clone())]);
        self.place(shard, wanted).await?;
        Ok(())
    }

    /// `ReleaseShards`: hand off each shard that runs on the requester and
    /// that it claims for no other source, and end its claims of `source`
    /// (a location that waited for one goes ahead).
    pub(super) async fn release_shards(
        &mut self,
        requester: RegionId,
        request: u64,
        shards: Vec<ShardId>,
        source: String,
    ) -> Result<(), StoreError> {
        // Its requests to host these shards are withdrawn: the partitions
        // were revoked before the shards came.
        let withdrawn = self.placements.supersede(&requester, &shards, &source);
        if !withdrawn.is_empty() {
            for withdrawn in withdrawn {
                self.send(
                    &requester,
                    CoordinatorToRegion::PlacementDone {
                        request: withdrawn,
                        failed: shards.clone(),
                        refused: None,
                        elsewhere: Vec::new(),
                    },
                );
            }
        }
        let mut pending = BTreeMap::new();
        for &shard in &shards {
            let key = (shard, source.clone());
            if self.placements.contested.get(&key) == Some(&requester) {
                self.placements.contested.remove(&key);
            }
            let claims_otherwise = self
                .placements
                .claims
                .get(&shard)
                .is_some_and(|c| c.iter().any(|(s, r)| *s != source && *r == requester));
            if claims_otherwise {
                continue;
            }
            self.strategy.location_released(shard, &requester);
            if self.state.home(shard) == Some(&requester) {
                // Another source's claimer gets it when its forwarded
                // records ask for it.
                let next = self
                    .placements
                    .other_claimers(shard, &source, &requester)
                    .find(|claimer| self.state.is_region(claimer))
                    .cloned();
                if let Some(next) = next {
                    self.strategy.set_locations(&[(shard, next)]);
                }
                self.placements.released.insert(shard);
                self.start_handoff(shard);
                pending.insert(shard, Goal::Away(requester.clone()));
            }
        }
        for shard in shards {
            self.claim_ended(shard, &source, &requester).await?;
        }
        self.placements.waits.push(Wait {
            region: requester,
            requests: vec![request],
            source,
            pending,
            failed: Vec::new(),
            elsewhere: Vec::new(),
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
                let failed = std::mem::take(&mut wait.failed);
                let elsewhere = std::mem::take(&mut wait.elsewhere);
                for &request in &wait.requests {
                    answers.push((
                        wait.region.clone(),
                        CoordinatorToRegion::PlacementDone {
                            request,
                            failed: failed.clone(),
                            refused: None,
                            elsewhere: elsewhere.clone(),
                        },
                    ));
                }
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
                elsewhere: Vec::new(),
            },
        );
    }
}
