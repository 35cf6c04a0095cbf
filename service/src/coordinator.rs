//! The coordinator: one per cluster and entity type. It decides shard homes
//! through the allocation strategy, runs the rebalance loop, drives hand-offs
//! and tracks which regions are alive.
//!
//! Phases: waiting for state (replaying the store) -> active. Every decision
//! is an event persisted before it is applied, so a coordinator that takes
//! over from the same store continues where the last one stopped.

mod handle;
pub mod hosting;
pub mod rebalance;
pub mod state;
pub mod stats;
pub mod store;

pub use handle::{CoordinatorHandle, CoordinatorStopped};

use crate::inspection::RegionStats;
use crate::metrics;
use crate::protocol::{CoordinatorToRegion, RegionToCoordinator};
use crate::settings::ShardingSettings;
use crate::tasks::TaskSet;
use colo_allocation::{AllocationStrategy, Allocations, RegionId, ShardId};
use rebalance::{HandOffPlan, WorkerInput, WORKER_CAPACITY};
use state::{CoordinatorEvent, CoordinatorState};
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
        to_region: mpsc::Sender<CoordinatorToRegion>,
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
    to_region: mpsc::Sender<CoordinatorToRegion>,
}

struct InProgress {
    owner: RegionId,
    started: Instant,
    worker: mpsc::Sender<WorkerInput>,
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
    /// Regions and proxies found in the replayed state that have not
    /// connected since; terminated when still absent after the grace period,
    /// since a region that died while no coordinator ran never disconnects.
    recovered: HashMap<RegionId, Instant>,
    /// Set when the coordinator starts with no state at all (a new cluster,
    /// or a restart with an in-memory store): until then no shard is
    /// allocated, so that regions still running shards can register first
    /// and report them, rather than see a second copy started elsewhere.
    adoption_grace: Option<Instant>,
    inbox: mpsc::Sender<Input>,
    /// Hand-off workers, stats gatherers and link forwarders: stopped with
    /// the coordinator.
    tasks: Arc<TaskSet>,
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
        self.recovered = known.map(|r| (r.clone(), now)).collect();
        if self.state.allocations().is_empty() && self.state.proxies().is_empty() {
            self.adoption_grace = Some(now + self.settings.retry_interval * 2);
        }
        tracing::info!(entity_type = %self.entity_type, recovered = self.recovered.len(), "coordinator active");
        // Phase 2: active.
        let mut rebalance_tick = tokio::time::interval(self.settings.rebalance_interval);
        rebalance_tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        rebalance_tick.reset();
        let mut host_tick = tokio::time::interval(self.settings.shard_start_timeout / 2);
        host_tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let result = tokio::select! {
                biased;
                input = rx.recv() => match input {
                    Some(input) => self.on_input(input).await,
                    None => return,
                },
                _ = rebalance_tick.tick() => self.on_rebalance_tick().await,
                _ = host_tick.tick() => {
                    self.resend_host_shard();
                    self.terminate_absent_regions().await
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
                self.recovered.remove(&region);
                self.links.insert(
                    region,
                    Link {
                        id: link,
                        to_region,
                    },
                );
            }
            Input::FromRegion {
                region,
                link,
                message,
            } => {
                if self.links.get(&region).is_some_and(|l| l.id == link) {
                    self.on_region_message(region, message).await?;
                }
            }
            Input::Disconnected { region, link } => {
                if self.links.get(&region).is_some_and(|l| l.id == link) {
                    self.links.remove(&region);
                    self.region_terminated(region).await?;
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
        match message {
            RegionToCoordinator::Register { proxy, hosted, .. } => {
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
                metrics::coordinator_regions(&self.entity_type, self.state.allocations().len());
                self.send(&region, CoordinatorToRegion::RegisterAck);
                if !proxy {
                    self.adopt(&region, hosted).await?;
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
        let Some(link) = self.links.get(region) else {
            return;
        };
        match link.to_region.try_send(message) {
            Ok(()) => {}
            Err(mpsc::error::TrySendError::Full(_)) => {
                tracing::warn!(%region, "coordinator link full; message not sent, the region retries");
            }
            // The region is leaving; its Disconnected input follows.
            Err(mpsc::error::TrySendError::Closed(_)) => {}
        }
    }

    fn to_worker(&self, shard: ShardId, input: WorkerInput) {
        if let Some(p) = self.in_progress.get(&shard) {
            let _ = p.worker.try_send(input);
        }
    }

    /// Regions that may receive shards: registered and not leaving.
    fn active_allocations(&self) -> Cow<'_, Allocations> {
        active_allocations(&self.state, &self.graceful_shutdown)
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
        let active = active_allocations(&self.state, &self.graceful_shutdown);
        if active.len() < self.settings.min_members {
            return Ok(()); // too early: the requester retries
        }
        let chosen = self.strategy.allocate(&requester, shard, &active);
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

    /// Recovered regions get `shard_start_timeout` to connect again.
    async fn terminate_absent_regions(&mut self) -> Result<(), StoreError> {
        let grace = self.settings.shard_start_timeout;
        let absent: Vec<RegionId> = self
            .recovered
            .iter()
            .filter(|(_, since)| since.elapsed() >= grace)
            .map(|(r, _)| r.clone())
            .collect();
        for region in absent {
            self.recovered.remove(&region);
            tracing::warn!(%region, "region from the recovered state did not come back; terminating it");
            self.region_terminated(region).await?;
        }
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
            .map(|(r, l)| (r.clone(), l.to_region.clone()))
            .collect();
        let (worker, input) = mpsc::channel(WORKER_CAPACITY);
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
        for requester in &done.deferred {
            self.get_shard_home(shard, requester.clone()).await?;
        }
        // A moved shard gets its new home at once rather than on its next
        // message, so the next rebalance round sees where it went.
        // When the owner has left meanwhile (the end of a graceful shutdown),
        // any registered region asks on its behalf.
        if ok && done.deferred.is_empty() {
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

    async fn region_terminated(&mut self, region: RegionId) -> Result<(), StoreError> {
        if self.state.is_region(&region) {
            tracing::info!(%region, shards = self.state.shards_of(&region).len(), "region terminated");
            self.update(CoordinatorEvent::RegionTerminated {
                region: region.clone(),
            })
            .await?;
            for link in self.links.values() {
                let _ = link
                    .to_region
                    .try_send(CoordinatorToRegion::RegionTerminated {
                        region: region.clone(),
                    });
            }
        } else if self.state.is_proxy(&region) {
            self.update(CoordinatorEvent::RegionProxyTerminated {
                region: region.clone(),
            })
            .await?;
        }
        self.graceful_shutdown.remove(&region);
        self.unacked_host.retain(|_, (r, _)| *r != region);
        for p in self.in_progress.values() {
            let _ = p.worker.try_send(WorkerInput::RegionGone(region.clone()));
        }
        metrics::coordinator_regions(&self.entity_type, self.state.allocations().len());
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
        let reply_to = self.links.get(&requester).map(|l| l.to_region.clone());
        let inbox = self.inbox.clone();
        self.tasks.spawn(async move {
            let stats = stats::gather(asked, rx, timeout).await;
            if let Some(link) = reply_to {
                let _ = link
                    .send(CoordinatorToRegion::ClusterStats { request, stats })
                    .await;
            }
            let _ = inbox.send(Input::StatsDone { request: internal }).await;
        });
    }
}

/// Registered regions that are not leaving, with their shards.
fn active_allocations<'a>(
    state: &'a CoordinatorState,
    leaving: &BTreeSet<RegionId>,
) -> Cow<'a, Allocations> {
    if leaving.is_empty() {
        Cow::Borrowed(state.allocations())
    } else {
        let mut a = state.allocations().clone();
        a.retain(|r, _| !leaving.contains(r));
        Cow::Owned(a)
    }
}
