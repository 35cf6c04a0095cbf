//! The coordinator: one per cluster and entity type. It decides shard homes
//! through the allocation strategy, runs the rebalance loop, drives hand-offs
//! and tracks which regions are alive.
//!
//! Phases: waiting for state (replaying the store) -> active. Every decision
//! is an event persisted before it is applied, so a coordinator that takes
//! over from the same store continues where the last one stopped.

mod handle;
pub mod hosting;
pub mod ledger;
mod membership;
mod placement;
pub mod rebalance;
pub mod stats;
pub mod store;
#[cfg(test)]
mod tests;

pub use handle::{CoordinatorHandle, CoordinatorStopped};

use crate::inspection::RegionStats;
use crate::metrics;
use crate::protocol::{CoordinatorToRegion, RegionToCoordinator};
use crate::settings::ShardingSettings;
use crate::tasks::TaskSet;
use colo_allocation::{AllocationStrategy, Allocations, RegionId, ShardId};
use ledger::{CoordinatorEvent, CoordinatorState};
use rebalance::{HandOffPlan, WorkerInput};
use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;
use store::{CoordinatorStore, StoreError};
use tokio::sync::mpsc;
use tokio::time::Instant;

/// Capacity of the coordinator's inbox, shared by every region link: links
/// forward with `send().await`, so a full inbox slows regions down rather
/// than losing protocol messages.
const INBOX_CAPACITY: usize = 8192;

/// What reaches the coordinator task.
#[derive(Debug)]
enum Input {
    Connected {
        region: RegionId,
        link: u64,
        to_region: mpsc::UnboundedSender<CoordinatorToRegion>,
    },
    FromRegion {
        region: RegionId,
        link: u64,
        message: RegionToCoordinator,
    },
    Disconnected {
        region: RegionId,
        link: u64,
    },
    RebalanceDone {
        shard: ShardId,
        ok: bool,
    },
    StatsDone {
        request: u64,
    },
}

struct Link {
    id: u64,
    /// The only strong sender: hand-off workers and stats gatherers hold
    /// weak ones, so that removing the link closes it and the region sees.
    to_region: mpsc::UnboundedSender<CoordinatorToRegion>,
    /// The region has registered on this link: a later Register on it
    /// only repeats what the region said (it was sent before the ack).
    registered: bool,
}

struct InProgress {
    owner: RegionId,
    started: Instant,
    worker: mpsc::UnboundedSender<WorkerInput>,
    /// Regions whose GetShardHome waits for the hand-off to finish.
    deferred: Vec<RegionId>,
}

struct Coordinator {
    entity_type: String,
    settings: ShardingSettings,
    strategy: Box<dyn AllocationStrategy>,
    store: Arc<dyn CoordinatorStore>,
    state: CoordinatorState,
    links: HashMap<RegionId, Link>,
    in_progress: BTreeMap<ShardId, InProgress>,
    graceful_shutdown: BTreeSet<RegionId>,
    /// HostShard sent, ShardStarted not yet received: resent after
    /// `shard_start_timeout`.
    unacked_host: HashMap<ShardId, (RegionId, Instant)>,
    stats_requests: HashMap<u64, mpsc::Sender<(RegionId, RegionStats)>>,
    next_request: u64,
    /// When each region or proxy of the state was last heard, over its
    /// current link. One silent for `region_timeout` is terminated, linked
    /// or not: it has fenced itself by then. Regions of a replayed state
    /// start at the coordinator's start.
    last_heard: HashMap<RegionId, Instant>,
    /// The extractor fingerprint of the regions registered so far; a region
    /// with another one is refused.
    extractor: Option<u64>,
    /// Set when the coordinator starts without state although the cluster
    /// may be running (its store lost it): until then no shard without a
    /// reported home is allocated, so that regions still running shards
    /// can register and report them first; by then any region that could
    /// not has fenced itself.
    adoption_grace: Option<Instant>,
    inbox: mpsc::Sender<Input>,
    /// Hand-off workers, stats gatherers and link forwarders: stopped with
    /// the coordinator.
    tasks: Arc<TaskSet>,
    /// Locations and releases regions asked for and wait on.
    placements: placement::Placements,
}

/// Each allocated shard's home, as `shard=region` pairs in shard order.
fn homes(allocations: &Allocations) -> String {
    let by_shard: BTreeMap<u32, &RegionId> = allocations
        .iter()
        .flat_map(|(region, shards)| shards.iter().map(move |s| (s.0, region)))
        .collect();
    let pairs: Vec<String> = by_shard
        .iter()
        .map(|(shard, region)| format!("{shard}={region}"))
        .collect();
    pairs.join(",")
}

impl Coordinator {
    async fn run(mut self, mut rx: mpsc::Receiver<Input>) {
        // Phase 1: waiting for state.
        match self.store.load().await.map(CoordinatorState::replay) {
            Ok(Ok(state)) => self.state = state,
            Ok(Err(e)) => return tracing::error!(error = %e, "coordinator state does not replay"),
            Err(e) => return tracing::error!(error = %e, "coordinator store cannot be read"),
        }
        let now = Instant::now();
        let known = self.state.allocations().keys().chain(self.state.proxies());
        self.last_heard = known.map(|r| (r.clone(), now)).collect();
        let empty = self.state.allocations().is_empty() && self.state.proxies().is_empty();
        if empty && self.store.may_have_lost_state() {
            self.adoption_grace = Some(now + self.settings.region_timeout);
            tracing::info!(entity_type = %self.entity_type, wait = ?self.settings.region_timeout, "coordinator started without state: regions report the shards they run before others are placed");
        }
        tracing::info!(entity_type = %self.entity_type, recovered = self.last_heard.len(), "coordinator active");
        // What a takeover goes on from, for whoever compares it with the
        // cluster before (the failover tests).
        tracing::debug!(entity_type = %self.entity_type, homes = %homes(self.state.allocations()), "shard homes read back");
        // Phase 2: active.
        let mut rebalance_tick = tokio::time::interval(self.settings.rebalance_interval);
        rebalance_tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        rebalance_tick.reset();
        let mut host_tick = tokio::time::interval(self.settings.shard_start_timeout / 2);
        host_tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut liveness_tick = tokio::time::interval(self.settings.heartbeat_interval);
        liveness_tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let result = tokio::select! {
                biased;
                input = rx.recv() => match input {
                    Some(input) => self.on_input(input).await,
                    None => return,
                },
                _ = rebalance_tick.tick() => self.on_rebalance_tick().await,
                _ = liveness_tick.tick() => self.terminate_silent_regions().await,
                _ = host_tick.tick() => {
                    self.resend_host_shard();
                    Ok(())
                }
            };
            if let Err(e) = result {
                tracing::error!(entity_type = %self.entity_type, error = %e, "coordinator stops: store failed");
                return;
            }
        }
    }

    async fn on_input(&mut self, input: Input) -> Result<(), StoreError> {
        match input {
            Input::Connected {
                region,
                link,
                to_region,
            } => {
                // A newer link replaces an older one: the region left it.
                self.links.insert(
                    region,
                    Link {
                        id: link,
                        to_region,
                        registered: false,
                    },
                );
            }
            Input::FromRegion {
                region,
                link,
                message,
            } => {
                if self.links.get(&region).is_some_and(|l| l.id == link) {
                    if self.last_heard.contains_key(&region) {
                        self.last_heard.insert(region.clone(), Instant::now());
                    }
                    self.on_region_message(region, message).await?;
                }
            }
            Input::Disconnected { region, link } => {
                if self.links.get(&region).is_some_and(|l| l.id == link) {
                    self.links.remove(&region);
                    self.disconnected(region).await?;
                }
            }
            Input::RebalanceDone { shard, ok } => self.rebalance_done(shard, ok).await?,
            Input::StatsDone { request } => {
                self.stats_requests.remove(&request);
            }
        }
        Ok(())
    }

    async fn on_region_message(
        &mut self,
        region: RegionId,
        message: RegionToCoordinator,
    ) -> Result<(), StoreError> {
        // From the network: a shard the cluster does not have is never
        // allocated or waited for.
        let shards = self.settings.number_of_shards;
        if let Some(shard) = message.shards().into_iter().find(|s| s.0 >= shards) {
            tracing::warn!(%region, %shard, number_of_shards = shards, "region message names a shard out of range; ignored");
            return Ok(());
        }
        match message {
            RegionToCoordinator::Register {
                proxy,
                hosted,
                number_of_shards,
                extractor,
                ping,
                ..
            } => {
                self.register(region, proxy, hosted, (number_of_shards, extractor), ping)
                    .await?
            }
            RegionToCoordinator::Heartbeat { ping } => {
                if self.state.is_region(&region) || self.state.is_proxy(&region) {
                    self.send(&region, CoordinatorToRegion::HeartbeatAck { ping });
                }
            }
            RegionToCoordinator::GetShardHome { shard } => {
                self.get_shard_home(shard, region).await?
            }
            RegionToCoordinator::ShardStarted { shard } => {
                if self
                    .unacked_host
                    .get(&shard)
                    .is_some_and(|(r, _)| *r == region)
                {
                    self.unacked_host.remove(&shard);
                    self.settle();
                }
            }
            RegionToCoordinator::BeginHandOffAck { shard } => {
                self.to_worker(shard, WorkerInput::Ack(region));
            }
            RegionToCoordinator::ShardStopped { shard } => {
                self.to_worker(shard, WorkerInput::Stopped(region));
            }
            RegionToCoordinator::GracefulShutdown => {
                if self.state.is_region(&region) && self.graceful_shutdown.insert(region.clone()) {
                    tracing::info!(%region, "graceful shutdown: handing off its shards");
                }
                self.continue_graceful_shutdowns();
            }
            RegionToCoordinator::GetClusterStats { request, timeout } => {
                self.cluster_stats(region, request, timeout);
            }
            RegionToCoordinator::RegionStats { request, stats } => {
                if let Some(collector) = self.stats_requests.get(&request) {
                    let _ = collector.try_send((region, stats));
                }
            }
            RegionToCoordinator::UpdateLocations {
                request,
                locations,
                source,
            } => {
                self.update_locations(region, request, locations, source)
                    .await?
            }
            RegionToCoordinator::ReleaseShards {
                request,
                shards,
                source,
            } => self.release_shards(region, request, shards, source).await?,
        }
        Ok(())
    }

    /// Persist, then apply.
    async fn update(&mut self, event: CoordinatorEvent) -> Result<(), StoreError> {
        self.store.persist(event.clone()).await?;
        if let Err(e) = self.state.apply(event) {
            // The event was checked against this very state just before; a
            // refusal here is a bug, not an operational condition.
            tracing::error!(error = %e, "coordinator event refused after persisting");
        }
        Ok(())
    }

    fn send(&self, region: &RegionId, message: CoordinatorToRegion) {
        if let Some(link) = self.links.get(region) {
            // A closed link: the region left it; its Disconnected follows.
            let _ = link.to_region.send(message);
        }
    }

    fn to_worker(&self, shard: ShardId, input: WorkerInput) {
        if let Some(p) = self.in_progress.get(&shard) {
            let _ = p.worker.send(input);
        }
    }

    /// Regions that may receive shards: registered, linked now, and not
    /// leaving.
    fn active_allocations(&self) -> Cow<'_, Allocations> {
        active_allocations(&self.state, &self.graceful_shutdown, &self.links)
    }

    async fn get_shard_home(
        &mut self,
        shard: ShardId,
        requester: RegionId,
    ) -> Result<(), StoreError> {
        if let Some(p) = self.in_progress.get_mut(&shard) {
            if !p.deferred.contains(&requester) {
                p.deferred.push(requester);
            }
            return Ok(());
        }
        if let Some(home) = self.state.home(shard) {
            let home = home.clone();
            self.send(
                &requester,
                CoordinatorToRegion::ShardHome {
                    shard,
                    region: home,
                },
            );
            return Ok(());
        }
        if !self.state.is_region(&requester) && !self.state.is_proxy(&requester) {
            return Ok(()); // not registered yet: it registers, then retries
        }
        if self
            .adoption_grace
            .is_some_and(|until| Instant::now() < until)
        {
            return Ok(()); // regions may still report this shard running: retried
        }
        let active = active_allocations(&self.state, &self.graceful_shutdown, &self.links);
        if active.len() < self.settings.min_members {
            return Ok(()); // too early: the requester retries
        }
        let chosen = match self.settings.standbys {
            0 => self.strategy.allocate(&requester, shard, &active),
            standbys => {
                let warm = warm_regions(self.state.allocations(), &active, shard, standbys);
                self.strategy
                    .allocate_warm(&requester, shard, &active, &warm)
            }
        };
        let region = match chosen {
            Some(region) if active.contains_key(&region) => region,
            Some(region) => {
                tracing::warn!(%shard, %region, "allocation strategy chose an unknown region");
                return Ok(());
            }
            None => return Ok(()),
        };
        drop(active);
        self.update(CoordinatorEvent::ShardHomeAllocated {
            shard,
            region: region.clone(),
        })
        .await?;
        tracing::debug!(%shard, %region, "shard home allocated");
        self.send(&region, CoordinatorToRegion::HostShard { shard });
        self.unacked_host
            .insert(shard, (region.clone(), Instant::now()));
        self.send(&requester, CoordinatorToRegion::ShardHome { shard, region });
        Ok(())
    }

    fn resend_host_shard(&mut self) {
        let now = Instant::now();
        let timeout = self.settings.shard_start_timeout;
        let due: Vec<(ShardId, RegionId)> = self
            .unacked_host
            .iter()
            .filter(|(_, (_, sent))| now.duration_since(*sent) >= timeout)
            .map(|(s, (r, _))| (*s, r.clone()))
            .collect();
        for (shard, region) in due {
            if self.state.home(shard) == Some(&region) {
                self.send(&region, CoordinatorToRegion::HostShard { shard });
                self.unacked_host.insert(shard, (region, now));
            } else {
                self.unacked_host.remove(&shard);
            }
        }
    }

    async fn on_rebalance_tick(&mut self) -> Result<(), StoreError> {
        self.continue_graceful_shutdowns();
        if self.state.allocations().len() < 2 {
            return Ok(());
        }
        let in_progress: BTreeSet<ShardId> = self.in_progress.keys().copied().collect();
        let active = self.active_allocations().into_owned();
        let chosen = self.strategy.rebalance(&active, &in_progress);
        let mut started = 0;
        for shard in chosen {
            if self.start_handoff(shard) {
                started += 1;
            }
        }
        if started > 0 {
            tracing::info!(entity_type = %self.entity_type, shards = started, "rebalance started");
            metrics::rebalance_started(&self.entity_type, started);
        }
        Ok(())
    }

    fn continue_graceful_shutdowns(&mut self) {
        let shards: Vec<ShardId> = self
            .graceful_shutdown
            .iter()
            .flat_map(|r| self.state.shards_of(r).iter().copied())
            .collect();
        for shard in shards {
            self.start_handoff(shard);
        }
    }

    /// Starts a hand-off unless one runs for the shard; `true` when started.
    fn start_handoff(&mut self, shard: ShardId) -> bool {
        if self.in_progress.contains_key(&shard) {
            return false;
        }
        let Some(owner) = self.state.home(shard).cloned() else {
            return false;
        };
        let regions = self
            .links
            .iter()
            .filter(|(r, _)| self.state.is_region(r) || self.state.is_proxy(r))
            .map(|(r, l)| (r.clone(), l.to_region.downgrade()))
            .collect();
        let (worker, input) = mpsc::unbounded_channel();
        let plan = HandOffPlan {
            shard,
            owner: owner.clone(),
            regions,
            timeout: self.settings.handoff_timeout,
        };
        let inbox = self.inbox.clone();
        self.tasks.spawn(async move {
            let ok = rebalance::run(plan, input).await;
            let _ = inbox.send(Input::RebalanceDone { shard, ok }).await;
        });
        self.unacked_host.remove(&shard);
        self.in_progress.insert(
            shard,
            InProgress {
                owner,
                started: Instant::now(),
                worker,
                deferred: Vec::new(),
            },
        );
        true
    }

    async fn rebalance_done(&mut self, shard: ShardId, ok: bool) -> Result<(), StoreError> {
        let Some(done) = self.in_progress.remove(&shard) else {
            return Ok(());
        };
        metrics::handoff_finished(&self.entity_type, ok, done.started.elapsed());
        if ok {
            if self.state.home(shard).is_some() {
                self.update(CoordinatorEvent::ShardHomeDeallocated { shard })
                    .await?;
            }
            tracing::debug!(%shard, from = %done.owner, "shard handed off");
        } else {
            tracing::warn!(%shard, owner = %done.owner, "hand-off failed; the shard stays where it is");
            // A leaving region asks again; its shards are retried then.
            self.graceful_shutdown.remove(&done.owner);
        }
        // A leaving region stops (and closes its link) as soon as its last
        // shard stopped, often before its last hand-off is done here: it
        // waited for region_timeout then, and so did every message for
        // the shards it had. Now that nothing of it runs, it is gone.
        if ok
            && self.graceful_shutdown.contains(&done.owner)
            && !self.links.contains_key(&done.owner)
            && self.state.is_region(&done.owner)
            && self.state.shards_of(&done.owner).is_empty()
        {
            tracing::info!(region = %done.owner, "the leaving region's last shard is handed off; it is gone");
            self.region_terminated(done.owner.clone()).await?;
        }
        let released = self.placements.take_released(shard);
        self.placement_handoff_done(shard, ok);
        let target = self.placement_target(shard).filter(|_| ok);
        if let Some(target) = &target {
            // A location set while the shard was moving: placed there now.
            self.get_shard_home(shard, target.clone()).await?;
        }
        // A region that released a shard asks for its home only when
        // messages for it wait there (see the region's `release`).
        for requester in &done.deferred {
            self.get_shard_home(shard, requester.clone()).await?;
        }
        let place = !released || target.is_some();
        // A moved shard gets its new home at once rather than on its next
        // message, so the next rebalance round sees where it went; a
        // released one only when asked (it would go back where it was).
        // When the owner has left meanwhile (the end of a graceful shutdown),
        // any registered region asks on its behalf.
        if ok && done.deferred.is_empty() && place && self.state.home(shard).is_none() {
            let requester = if self.state.is_region(&done.owner) {
                Some(done.owner)
            } else {
                self.state.allocations().keys().next().cloned()
            };
            if let Some(requester) = requester {
                self.get_shard_home(shard, requester).await?;
            }
        }
        Ok(())
    }

    fn cluster_stats(&mut self, requester: RegionId, request: u64, timeout: Duration) {
        let internal = self.next_request;
        self.next_request += 1;
        let asked: BTreeSet<RegionId> = self
            .links
            .keys()
            .filter(|r| self.state.is_region(r))
            .cloned()
            .collect();
        let (tx, rx) = mpsc::channel(asked.len().max(1));
        self.stats_requests.insert(internal, tx);
        // Regions get most of the deadline for their shards, leaving time to
        // send the answer back.
        let region_timeout = timeout.mul_f64(0.8);
        for region in &asked {
            self.send(
                region,
                CoordinatorToRegion::GetRegionStats {
                    request: internal,
                    timeout: region_timeout,
                },
            );
        }
        let reply_to = self.links.get(&requester).map(|l| l.to_region.downgrade());
        let inbox = self.inbox.clone();
        self.tasks.spawn(async move {
            let stats = stats::gather(asked, rx, timeout).await;
            if let Some(link) = reply_to.and_then(|l| l.upgrade()) {
                let _ = link.send(CoordinatorToRegion::ClusterStats { request, stats });
            }
            let _ = inbox.send(Input::StatsDone { request: internal }).await;
        });
    }
}

/// The regions of `active` that keep a standby copy of `shard`, the most
/// preferred first. The nodes rank the keepers over every registered
/// region (the members the coordinator announces, proxies apart), so the
/// ranking here is over the same regions; only then are the regions that
/// cannot take a shard now (leaving, unlinked) left out.
fn warm_regions(
    registered: &Allocations,
    active: &Allocations,
    shard: ShardId,
    standbys: u32,
) -> Vec<RegionId> {
    colo_allocation::standbys::keepers(shard, registered.keys(), standbys)
        .into_iter()
        .filter(|region| active.contains_key(*region))
        .cloned()
        .collect()
}

/// Registered regions that are linked and not leaving, with their shards.
/// A region without a link may be gone (it is terminated once silent for
/// `region_timeout`) and could not be told to host anything.
fn active_allocations<'a>(
    state: &'a CoordinatorState,
    leaving: &BTreeSet<RegionId>,
    links: &HashMap<RegionId, Link>,
) -> Cow<'a, Allocations> {
    let all_linked = state.allocations().keys().all(|r| links.contains_key(r));
    if leaving.is_empty() && all_linked {
        Cow::Borrowed(state.allocations())
    } else {
        let mut a = state.allocations().clone();
        a.retain(|r, _| !leaving.contains(r) && links.contains_key(r));
        Cow::Owned(a)
    }
}
