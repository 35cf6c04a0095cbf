//! Which regions belong to the cluster: registration (with its checks and
//! the shards a region reports running), liveness from heartbeats, and
//! termination.
//!
//! A region is terminated only once the coordinator has not heard from it
//! for `region_timeout`, whether its link broke or not: a broken link does
//! not mean a stopped region, and a region only stops its shards (fences
//! itself) `fence_timeout` after its last answered heartbeat. The one
//! exception is a region that hosts nothing when its link closes (a proxy,
//! or a region that has handed everything off): nothing of it can run twice.

use super::ledger::CoordinatorEvent;
use super::store::StoreError;
use super::{Coordinator, WorkerInput};
use crate::metrics;
use crate::protocol::CoordinatorToRegion;
use colo_allocation::{RegionId, ShardId};
use tokio::time::Instant;

impl Coordinator {
    /// A region registers (again): checked against the cluster, recorded,
    /// answered, and reconciled with the shards it says it runs.
    pub(super) async fn register(
        &mut self,
        region: RegionId,
        proxy: bool,
        hosted: Vec<ShardId>,
        (number_of_shards, extractor): (u32, u64),
        ping: u64,
    ) -> Result<(), StoreError> {
        if let Some(reason) = self.refusal(number_of_shards, extractor) {
            tracing::error!(%region, %reason, "region refused");
            self.send(&region, CoordinatorToRegion::RegisterRefused { reason });
            return Ok(());
        }
        self.extractor.get_or_insert(extractor);
        if proxy && !self.state.is_proxy(&region) {
            self.update(CoordinatorEvent::RegionProxyRegistered {
                region: region.clone(),
            })
            .await?;
        } else if !proxy && !self.state.is_region(&region) {
            self.update(CoordinatorEvent::RegionRegistered {
                region: region.clone(),
            })
            .await?;
        }
        self.last_heard.insert(region.clone(), Instant::now());
        metrics::coordinator_regions(&self.entity_type, self.state.allocations().len());
        self.send(&region, CoordinatorToRegion::RegisterAck { ping });
        // Everyone learns the newcomer (and the newcomer everyone) before
        // any shard home names it.
        self.announce_members();
        let first_on_link = match self.links.get_mut(&region) {
            Some(link) => !std::mem::replace(&mut link.registered, true),
            None => false,
        };
        if !proxy {
            if first_on_link {
                self.forget_unreported(&region, &hosted).await?;
                self.claims_ended_but(&region, &hosted).await?;
            }
            self.adopt(&region, hosted).await?;
        }
        Ok(())
    }

    /// Sends every linked region the regions and proxies registered now.
    fn announce_members(&self) {
        let proxies: Vec<RegionId> = self.state.proxies().iter().cloned().collect();
        let regions: Vec<RegionId> = self
            .state
            .allocations()
            .keys()
            .chain(&proxies)
            .cloned()
            .collect();
        for link in self.links.values() {
            let _ = link.to_region.send(CoordinatorToRegion::Members {
                regions: regions.clone(),
                proxies: proxies.clone(),
            });
        }
    }

    /// Why a region cannot join, if it cannot: it would put entities in
    /// other shards than the rest of the cluster.
    fn refusal(&self, number_of_shards: u32, extractor: u64) -> Option<String> {
        let ours = self.settings.number_of_shards;
        if number_of_shards != ours {
            return Some(format!(
                "entity type {:?}: the region has number_of_shards {number_of_shards}, the cluster {ours}",
                self.entity_type
            ));
        }
        match self.extractor {
            Some(cluster) if cluster != extractor => Some(format!(
                "entity type {:?}: the region's message extractor places entities in other shards than the cluster's (fingerprint {extractor:016x}, cluster {cluster:016x})",
                self.entity_type
            )),
            _ => None,
        }
    }

    /// The first Register on a new link: any home recorded on the region
    /// that it does not report is forgotten. The region left its old link
    /// (what was sent there never arrived, a HostShard included), or fenced
    /// itself and stopped the shard; either way it does not run it now.
    async fn forget_unreported(
        &mut self,
        region: &RegionId,
        hosted: &[ShardId],
    ) -> Result<(), StoreError> {
        let stale: Vec<ShardId> = self
            .state
            .shards_of(region)
            .iter()
            .copied()
            .filter(|s| !hosted.contains(s) && !self.in_progress.contains_key(s))
            .collect();
        for shard in stale {
            tracing::info!(%shard, %region, "region no longer runs the shard; its home is forgotten");
            self.unacked_host.remove(&shard);
            self.update(CoordinatorEvent::ShardHomeDeallocated { shard })
                .await?;
        }
        Ok(())
    }

    /// Shards a region reports running when it registers: those without a
    /// home stay where they run (a coordinator that started afresh learns
    /// the cluster from its regions); those with another home, or moving,
    /// are stopped there by telling the region where they live.
    async fn adopt(
        &mut self,
        region: &RegionId,
        mut hosted: Vec<ShardId>,
    ) -> Result<(), StoreError> {
        // From the network: no shard twice, none out of range.
        hosted.sort_unstable();
        hosted.dedup();
        hosted.retain(|s| s.0 < self.settings.number_of_shards);
        for shard in hosted {
            match self.state.home(shard) {
                Some(home) if home == region => {}
                Some(home) => {
                    let home = home.clone();
                    tracing::warn!(%shard, %region, %home, "region runs a shard that lives elsewhere");
                    self.send(
                        region,
                        CoordinatorToRegion::ShardHome {
                            shard,
                            region: home,
                        },
                    );
                }
                None if self.in_progress.contains_key(&shard) => {}
                None => {
                    tracing::info!(%shard, %region, "keeping a shard where it runs");
                    self.update(CoordinatorEvent::ShardHomeAllocated {
                        shard,
                        region: region.clone(),
                    })
                    .await?;
                }
            }
        }
        Ok(())
    }

    /// A region's link closed. Terminated at once only when nothing of it
    /// can still run; otherwise when it has been silent for
    /// `region_timeout`, unless it links again before.
    pub(super) async fn disconnected(&mut self, region: RegionId) -> Result<(), StoreError> {
        if self.state.shards_of(&region).is_empty() {
            self.region_terminated(region).await
        } else {
            tracing::info!(%region, "region link closed; it is terminated if it stays silent");
            Ok(())
        }
    }

    /// Terminates every region silent for `region_timeout`.
    pub(super) async fn terminate_silent_regions(&mut self) -> Result<(), StoreError> {
        let timeout = self.settings.region_timeout;
        let silent: Vec<RegionId> = self
            .last_heard
            .iter()
            .filter(|(_, heard)| heard.elapsed() >= timeout)
            .map(|(r, _)| r.clone())
            .collect();
        for region in silent {
            tracing::warn!(%region, silent_for = ?timeout, "region silent for the region timeout; terminating it");
            self.region_terminated(region).await?;
        }
        Ok(())
    }

    /// A region is gone: its shards have no home any more, the others
    /// forget the homes they knew there, and its link (if any) is dropped so
    /// that the region, should it come back, registers anew.
    pub(super) async fn region_terminated(&mut self, region: RegionId) -> Result<(), StoreError> {
        self.last_heard.remove(&region);
        self.links.remove(&region);
        if self.state.is_region(&region) {
            tracing::info!(%region, shards = self.state.shards_of(&region).len(), "region terminated");
            self.update(CoordinatorEvent::RegionTerminated {
                region: region.clone(),
            })
            .await?;
            for link in self.links.values() {
                let _ = link.to_region.send(CoordinatorToRegion::RegionTerminated {
                    region: region.clone(),
                });
            }
        } else if self.state.is_proxy(&region) {
            self.update(CoordinatorEvent::RegionProxyTerminated {
                region: region.clone(),
            })
            .await?;
        }
        self.announce_members();
        self.graceful_shutdown.remove(&region);
        self.unacked_host.retain(|_, (r, _)| *r != region);
        self.placements.region_left(&region);
        // Its shards have no home now: a release it asked for is done, and
        // the locations other regions asked for while it claimed them go
        // ahead.
        self.claims_ended(&region).await?;
        self.settle();
        for p in self.in_progress.values() {
            let _ = p.worker.send(WorkerInput::RegionGone(region.clone()));
        }
        metrics::coordinator_regions(&self.entity_type, self.state.allocations().len());
        Ok(())
    }
}
