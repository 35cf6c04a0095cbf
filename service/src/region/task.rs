//! The region task: the one place that changes where shards live, as seen
//! from this node.
//!
//! Its state machines are explicit: the region's own [`Phase`] (running
//! -> shutting down -> stopped), its [`Contact`] with the coordinator
//! (unlinked -> registering -> registered, back to unlinked when the link
//! breaks or the region fences itself; `task/contact.rs`), and one
//! [`ShardPhase`] per shard (asked, hosted, stopping, waiting for a barrier
//! or for returning messages; `task/shards.rs`).

use super::command::RegionCmd;
use super::mail::Mail;
use super::routes::Home;
use super::shard::Shard;
use super::shared::Shared;
use crate::entity::{Entity, EntityId};
use crate::envelope::Envelope;
use crate::error::QueryError;
use crate::inspection::{ClusterShardingStats, CurrentRegionState};
use crate::mailbox::Mailbox;
use crate::protocol::RegionToCoordinator;
use colo_allocation::{RegionId, ShardId};
use contact::Contact;
use shards::{ShardPhase, Shards};
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};
use tokio::time::{Instant, Sleep};

mod contact;
mod draining;
mod handoff;
mod shards;
mod shutdown;

enum Phase {
    Running,
    /// Handing every shard off and flushing every buffer until `deadline`.
    ShuttingDown {
        deadline: Instant,
    },
    Stopped,
}

/// Messages an outbound queue gave back, per shard, in order; a shard with
/// an empty queue is held all the same until the queue has closed.
type Returned<E> = BTreeMap<ShardId, VecDeque<Envelope<E>>>;

/// The current outbound queue to a node; `serial` tells it apart from
/// earlier queues to the same node that may still be giving messages back.
struct Queue<E: Entity> {
    serial: u64,
    sink: Arc<Mailbox<Mail<E>>>,
}

pub(super) struct RegionTask<E: Entity> {
    shared: Arc<Shared<E>>,
    commands: mpsc::Sender<RegionCmd<E>>,
    phase: Phase,
    contact: Contact,
    /// Fires `fence_timeout` after the coordinator's last answer.
    fence_timer: Pin<Box<Sleep>>,
    shards: Shards<E>,
    outbound: HashMap<RegionId, Queue<E>>,
    next_queue: u64,
    /// Nodes whose delivery just failed: their homes are ignored for a
    /// `retry_interval`, until the coordinator has noticed the death.
    unreachable: HashMap<RegionId, Instant>,
    /// Outbound queues being emptied after their node failed or left: per
    /// node, the shards that were routed there and the messages that came
    /// back, in order. Those shards are held (`Returning`) until the queue
    /// has closed, so returned messages go out before anything newer.
    draining: HashMap<(RegionId, u64), Returned<E>>,
    /// Every outbound queue until it has closed, current or draining: set
    /// when its node is terminated, and the queue sends nothing more.
    give_back: HashMap<(RegionId, u64), Arc<std::sync::atomic::AtomicBool>>,
    stats_waiting: HashMap<u64, oneshot::Sender<Result<ClusterShardingStats, QueryError>>>,
    /// Placements asked of the coordinator, by request.
    placements_waiting: HashMap<u64, super::placement::PlacementReply>,
    next_request: u64,
    shutdown_waiters: Vec<oneshot::Sender<()>>,
}

impl<E: Entity> RegionTask<E> {
    pub fn new(shared: Arc<Shared<E>>, commands: mpsc::Sender<RegionCmd<E>>) -> Self {
        Self {
            shared,
            commands,
            phase: Phase::Running,
            contact: Contact::default(),
            fence_timer: Box::pin(tokio::time::sleep(Duration::ZERO)),
            shards: Shards::default(),
            outbound: HashMap::new(),
            next_queue: 0,
            unreachable: HashMap::new(),
            draining: HashMap::new(),
            give_back: HashMap::new(),
            stats_waiting: HashMap::new(),
            placements_waiting: HashMap::new(),
            next_request: 0,
            shutdown_waiters: Vec::new(),
        }
    }

    pub async fn run(
        mut self,
        mut commands: mpsc::Receiver<RegionCmd<E>>,
        mut home_requests: mpsc::UnboundedReceiver<ShardId>,
    ) {
        let settings = &self.shared.entity_type.settings;
        let mut tick = tokio::time::interval(settings.retry_interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut heartbeat = tokio::time::interval(settings.heartbeat_interval);
        heartbeat.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        // One timer per region rather than per shard: shards get an idle
        // tick in their mailbox.
        let idle = settings.passivation.idle_check();
        let mut idle_tick =
            tokio::time::interval(idle.map_or(Duration::from_secs(3600), |c| c.interval));
        idle_tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        idle_tick.reset();
        loop {
            let fence_armed = self.contact.last_answer().is_some();
            tokio::select! {
                biased;
                message = self.contact.recv() => match message {
                    Some(message) => self.on_coordinator(message),
                    None => self.link_lost(),
                },
                _ = self.fence_timer.as_mut(), if fence_armed => self.on_fence_timer(),
                Some(cmd) = commands.recv() => self.on_command(cmd),
                Some(shard) = home_requests.recv() => self.ask_home(shard),
                _ = heartbeat.tick() => self.send_heartbeat(),
                _ = tick.tick() => self.on_tick(),
                _ = idle_tick.tick(), if idle.is_some() => self.idle_tick(),
            }
            if let Phase::ShuttingDown { deadline } = self.phase {
                self.continue_shutdown(deadline, &mut commands).await;
            }
            if matches!(self.phase, Phase::Stopped) {
                return;
            }
        }
    }

    fn name(&self) -> &str {
        &self.shared.entity_type.name
    }

    fn on_tick(&mut self) {
        if matches!(self.phase, Phase::Stopped) {
            return;
        }
        let metrics = &self.shared.metrics;
        if let Some(rate) = self.shared.activity.active_rate() {
            metrics.active_ratio.set(rate);
        }
        if let Some(window) = self.shared.activity.mean_window() {
            metrics.window_proportion.set(window);
        }
        self.contact_tick();
        let retry = self.shared.entity_type.settings.retry_interval;
        self.unreachable.retain(|_, since| since.elapsed() < retry);
        self.stats_waiting.retain(|_, w| !w.is_closed());
        self.placements_waiting.retain(|_, w| !w.is_closed());
    }

    fn ask_waiting_homes(&mut self) {
        for shard in self.shared.routes.waiting_shards() {
            self.ask_home(shard);
        }
    }

    fn ask_home(&mut self, shard: ShardId) {
        if self.contact.is_registered() {
            let now = Instant::now();
            match self.shards.take(shard) {
                None => self.shards.put(shard, ShardPhase::Asked { since: now }),
                Some(mut phase) => {
                    if let Some(then) = phase.release_mut() {
                        then.asked.get_or_insert(now);
                    }
                    self.shards.put(shard, phase);
                }
            }
            self.send(RegionToCoordinator::GetShardHome { shard });
        }
    }

    fn on_shard_home(&mut self, shard: ShardId, region: RegionId) {
        let asked = match self.shards.take(shard) {
            Some(ShardPhase::Asked { since }) => Some(since),
            Some(mut phase) => {
                let asked = phase.release_mut().and_then(|then| then.asked.take());
                self.shards.put(shard, phase);
                asked
            }
            None => None,
        };
        if let Some(asked) = asked {
            self.shared
                .metrics
                .shard_home_latency
                .record(asked.elapsed().as_secs_f64());
        }
        if self.shards.is_held(shard) {
            if let Some(then) = self.shards.release_of(shard) {
                then.home = Some(region);
            }
            return;
        }
        if region == self.shared.id {
            if self.shared.proxy {
                tracing::warn!(%shard, "coordinator named a proxy as shard home; ignored");
            } else {
                self.host_locally(shard);
            }
            return;
        }
        if matches!(self.shards.get(shard), Some(ShardPhase::Hosted(_))) {
            // This region lost the shard while it was away from the
            // coordinator: stop the local copy so the entity lives once,
            // whether or not the new home is reachable from here.
            tracing::warn!(%shard, home = %region, "shard runs here but lives elsewhere; stopping it here");
            self.handoff(shard, false);
            return;
        }
        if self.unreachable.contains_key(&region) {
            return; // asked again on the next tick
        }
        let sink = self.outbound_to(&region);
        self.set_home(
            shard,
            Home {
                sink,
                remote: Some(region),
            },
        );
    }

    fn host_locally(&mut self, shard: ShardId) {
        let sink = match self.shards.get(shard) {
            Some(ShardPhase::Hosted(handle)) if !handle.sink.is_closed() => handle.sink.clone(),
            // Asked again once the hand-off is done.
            Some(ShardPhase::Stopping { .. }) => return,
            // Hosted once released (callers check; this keeps it so).
            Some(ShardPhase::BarrierPending { .. } | ShardPhase::Returning { .. }) => {
                if let Some(then) = self.shards.release_of(shard) {
                    then.home = Some(self.shared.id.clone());
                }
                return;
            }
            _ => {
                let local = self.shards.local().count() + 1;
                let handle = Shard::spawn(shard, &self.shared, local, self.shared.lease.current());
                let sink = handle.sink.clone();
                self.shards.put(shard, ShardPhase::Hosted(handle));
                self.shards_changed();
                tracing::debug!(entity_type = %self.name(), %shard, "shard started");
                sink
            }
        };
        self.set_home(shard, Home { sink, remote: None });
    }

    fn set_home(&mut self, shard: ShardId, home: Home<E>) {
        if !self.shared.routes.install(shard, home) {
            // The home closed meanwhile (a shard stopped, a queue to a dead
            // node): keep buffering and ask again.
            self.ask_home(shard);
        }
    }

    /// The number of hosted shards changed: every shard gets its new share
    /// of the region's active-entity limit.
    fn shards_changed(&mut self) {
        let local = self.shards.local().count();
        self.shared.metrics.hosted_shards.set(local as f64);
        let passivation = &self.shared.entity_type.settings.passivation;
        if let Some(limit) = passivation.shard_limit(local) {
            for (_, handle) in self.shards.hosted() {
                let _ = handle.sink.push(Mail::SetLimit(limit));
            }
        }
    }

    /// An idle-check interval passed: every active shard gets one tick, and
    /// a shard that has not taken its last one yet (it is stuck or busy)
    /// gets no second, so ticks never pile up in a mailbox.
    fn idle_tick(&self) {
        for (_, handle) in self.shards.hosted() {
            if handle.signals.claim_idle_tick() {
                let _ = handle.sink.push(Mail::IdleTick);
            }
        }
    }

    fn on_command(&mut self, cmd: RegionCmd<E>) {
        match cmd {
            RegionCmd::ShardStopped { shard, leftovers } => self.on_shard_stopped(shard, leftovers),
            RegionCmd::BeginHandOffReady { shard } => self.on_barrier_passed(shard),
            RegionCmd::Undeliverable {
                to,
                serial,
                envelopes,
            } => {
                self.unreachable.insert(to.clone(), Instant::now());
                if self.outbound.get(&to).is_some_and(|q| q.serial == serial) {
                    self.start_draining(&to, false);
                }
                let returned = self.draining.entry((to, serial)).or_default();
                let mut shards = Vec::new();
                for env in envelopes {
                    shards.push(env.shard);
                    returned.entry(env.shard).or_default().push_back(env);
                }
                // Held until that queue has closed (a shard hosted here is
                // not: its route already points here).
                for shard in shards {
                    self.shards.release_of(shard);
                }
            }
            RegionCmd::OutboundClosed { to, serial } => {
                self.give_back.remove(&(to.clone(), serial));
                if let Some(shards) = self.draining.remove(&(to, serial)) {
                    for (shard, returned) in shards {
                        self.requeue(shard, returned);
                        self.release(shard);
                    }
                }
            }
            RegionCmd::State { timeout, reply } => {
                let query = self.query_shards(timeout);
                let reachable = self.contact.is_registered();
                self.shared.node.tasks.spawn(async move {
                    let mut state = query.await;
                    state.coordinator_reachable = reachable;
                    let _ = reply.send(state);
                });
            }
            RegionCmd::ClusterStats { timeout, reply } => {
                if self.contact.is_registered() {
                    let request = self.next_request;
                    self.next_request += 1;
                    self.stats_waiting.insert(request, reply);
                    self.send(RegionToCoordinator::GetClusterStats { request, timeout });
                } else {
                    let _ = reply.send(Err(QueryError::CoordinatorUnreachable));
                }
            }
            RegionCmd::Shutdown { done } => self.begin_shutdown(done),
            RegionCmd::Placement { request, reply } => self.ask_placement(request, reply),
            RegionCmd::CoordinatorLinked { link } => self.on_linked(link),
        }
    }

    /// The region fenced itself: what other nodes sent that it holds
    /// (buffered, or come back from a failed node) reaches its entity only
    /// once the region has registered anew, perhaps after newer messages
    /// from the same sender; it says so. Shards still stopping mark theirs
    /// when they have stopped.
    fn mark_held_delayed(&mut self) {
        self.shared
            .routes
            .for_each_buffered(|env| mark_delayed(std::iter::once(env)));
        for returned in self.draining.values_mut() {
            mark_delayed(returned.values_mut().flatten());
        }
    }

    /// Asks every active local shard for its live entities, within `timeout`.
    fn query_shards(
        &self,
        timeout: Duration,
    ) -> impl std::future::Future<Output = CurrentRegionState> + Send + 'static {
        let shards: Vec<_> = self
            .shards
            .hosted()
            .map(|(id, handle)| (id, handle.sink.clone(), handle.signals.clone()))
            .collect();
        async move {
            let deadline = Instant::now() + timeout;
            let answers = futures::future::join_all(shards.into_iter().map(
                |(id, sink, signals)| async move {
                    let ask = async {
                        let (tx, rx) = oneshot::channel::<Vec<EntityId>>();
                        // Queries to a shard that has not answered the last
                        // one wait together: one query mail at a time.
                        if signals.add_query(tx) {
                            sink.push(Mail::Query).ok()?;
                        }
                        rx.await.ok()
                    };
                    (
                        id,
                        tokio::time::timeout_at(deadline, ask).await.ok().flatten(),
                    )
                },
            ))
            .await;
            let mut state = CurrentRegionState::default();
            for (id, answer) in answers {
                match answer {
                    Some(ids) => {
                        state.shards.insert(id, ids);
                    }
                    None => state.failed.push(id),
                }
            }
            state
        }
    }
}

/// Marks the envelopes received from other nodes as delayed (see
/// [`EntityContext::delayed`](crate::EntityContext::delayed)).
pub(super) fn mark_delayed<'a, E: Entity>(envelopes: impl Iterator<Item = &'a mut Envelope<E>>) {
    for env in envelopes {
        if env.received {
            env.delayed = true;
        }
    }
}
