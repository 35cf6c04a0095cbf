//! The region task: the one place that changes where shards live, as seen
//! from this node.
//!
//! Its two state machines are explicit: the region's own [`Phase`] (running
//! -> shutting down -> stopped) and its [`Contact`] with the coordinator
//! (unlinked -> registering -> registered, back to unlinked when the link
//! breaks or the region fences itself), in `task/contact.rs`.

use super::command::RegionCmd;
use super::mail::Mail;
use super::routes::Home;
use super::shard::{Shard, ShardHandle};
use super::shared::Shared;
use crate::entity::{Entity, EntityId};
use crate::envelope::Envelope;
use crate::inspection::{ClusterShardingStats, CurrentRegionState};
use crate::mailbox::Mailbox;
use crate::protocol::RegionToCoordinator;
use crate::region::QueryError;
use colo_allocation::{RegionId, ShardId};
use contact::Contact;
use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};
use tokio::time::{Instant, Sleep};

mod contact;
mod draining;
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

enum Hosted<E: Entity> {
    Active(ShardHandle<E>),
    /// `notify`: the coordinator asked for the hand-off and waits for
    /// ShardStopped; otherwise the region stops a shard it found stale or
    /// fenced itself (`fenced`).
    HandingOff {
        notify: bool,
        fenced: bool,
    },
}

pub(super) struct RegionTask<E: Entity> {
    shared: Arc<Shared<E>>,
    commands: mpsc::Sender<RegionCmd<E>>,
    phase: Phase,
    contact: Contact,
    /// Fires `fence_timeout` after the coordinator's last answer.
    fence_timer: Pin<Box<Sleep>>,
    hosted: BTreeMap<ShardId, Hosted<E>>,
    outbound: HashMap<RegionId, Queue<E>>,
    next_queue: u64,
    /// Nodes whose delivery just failed: their homes are ignored for a
    /// `retry_interval`, until the coordinator has noticed the death.
    unreachable: HashMap<RegionId, Instant>,
    /// Outbound queues being emptied after their node failed or left: per
    /// node, the shards that were routed there and the messages that came
    /// back, in order. Those shards are held (no new home) until the queue
    /// has closed, so returned messages go out before anything newer.
    draining: HashMap<(RegionId, u64), Returned<E>>,
    /// Every outbound queue until it has closed, current or draining: set
    /// when its node is terminated, and the queue sends nothing more.
    give_back: HashMap<(RegionId, u64), Arc<std::sync::atomic::AtomicBool>>,
    /// Homes learned for held shards, applied once they are released.
    pending_home: HashMap<ShardId, RegionId>,
    /// Shards whose hand-off barrier has not passed yet (it follows what
    /// was sent to the old home).
    barriers: BTreeSet<ShardId>,
    /// Shards whose hand-off has begun while their barrier or an
    /// unconfirmed batch to the old home was pending: acked once that is
    /// settled.
    handoff_acks: BTreeSet<ShardId>,
    asked_at: HashMap<ShardId, Instant>,
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
            hosted: BTreeMap::new(),
            outbound: HashMap::new(),
            next_queue: 0,
            unreachable: HashMap::new(),
            draining: HashMap::new(),
            give_back: HashMap::new(),
            pending_home: HashMap::new(),
            barriers: BTreeSet::new(),
            handoff_acks: BTreeSet::new(),
            asked_at: HashMap::new(),
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
            self.asked_at.entry(shard).or_insert_with(Instant::now);
            self.send(RegionToCoordinator::GetShardHome { shard });
        }
    }

    fn on_shard_home(&mut self, shard: ShardId, region: RegionId) {
        if let Some(asked) = self.asked_at.remove(&shard) {
            self.shared
                .metrics
                .shard_home_latency
                .record(asked.elapsed().as_secs_f64());
        }
        if self.is_held(shard) {
            self.pending_home.insert(shard, region);
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
        if matches!(self.hosted.get(&shard), Some(Hosted::Active(_))) {
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
        let sink = match self.hosted.get(&shard) {
            Some(Hosted::Active(handle)) if !handle.sink.is_closed() => handle.sink.clone(),
            // Asked again once the hand-off is done.
            Some(Hosted::HandingOff { .. }) => return,
            _ => {
                let passivation = &self.shared.entity_type.settings.passivation;
                let policy = passivation
                    .shard_limit(self.hosted.len() + 1)
                    .and_then(|limit| passivation.policy(limit));
                let handle = Shard::spawn(
                    shard,
                    self.shared.entity_type.clone(),
                    self.shared.node.clone(),
                    self.shared.metrics.clone(),
                    policy,
                    self.shared.activity.clone(),
                    self.shared.lease.current(),
                );
                let sink = handle.sink.clone();
                self.hosted.insert(shard, Hosted::Active(handle));
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
        self.shared
            .metrics
            .hosted_shards
            .set(self.hosted.len() as f64);
        let passivation = &self.shared.entity_type.settings.passivation;
        if let Some(limit) = passivation.shard_limit(self.hosted.len()) {
            for hosted in self.hosted.values() {
                if let Hosted::Active(handle) = hosted {
                    let _ = handle.sink.push(Mail::SetLimit(limit));
                }
            }
        }
    }

    /// An idle-check interval passed: every active shard gets one tick, and
    /// a shard that has not taken its last one yet (it is stuck or busy)
    /// gets no second, so ticks never pile up in a mailbox.
    fn idle_tick(&self) {
        for hosted in self.hosted.values() {
            if let Hosted::Active(handle) = hosted {
                if handle.signals.claim_idle_tick() {
                    let _ = handle.sink.push(Mail::IdleTick);
                }
            }
        }
    }

    /// Non-owners stop routing to the old home and ack once everything they
    /// forwarded there has arrived; the owner keeps delivering until HandOff,
    /// so all of it is handled before the shard stops, in order.
    fn begin_handoff(&mut self, shard: ShardId) {
        self.pending_home.remove(&shard);
        if self.is_draining(shard) || self.barriers.contains(&shard) {
            // What this region sent the old home may not have arrived yet
            // (an earlier hand-off's barrier has not passed, or a batch is
            // unconfirmed): if the old home takes it, it must still host
            // the shard then. Acked once it has arrived or its fate is
            // known; until then the hand-off waits (or times out and is
            // tried again).
            self.handoff_acks.insert(shard);
            return;
        }
        if let Some(old) = self.shared.routes.unset_remote_home(shard) {
            let (done, passed) = oneshot::channel();
            if old.sink.push(Mail::Barrier(done)).is_ok() {
                self.barriers.insert(shard);
                let commands = self.commands.clone();
                self.shared.node.tasks.spawn(async move {
                    let _ = passed.await;
                    let _ = commands.send(RegionCmd::BeginHandOffReady { shard }).await;
                });
                return;
            }
        }
        self.send(RegionToCoordinator::BeginHandOffAck { shard });
    }

    /// Stops a local shard: its entities handle what they have received,
    /// then their stop message (a fenced shard handles nothing more, and
    /// stops by its lease's hard deadline).
    fn handoff(&mut self, shard: ShardId, notify: bool) {
        self.stop_shard(shard, notify, false);
    }

    /// Stops a local shard (see [`Self::handoff`]); `fenced`: because the
    /// region fenced itself.
    fn stop_shard(&mut self, shard: ShardId, notify: bool, fenced: bool) {
        self.shared.routes.unset_home(shard);
        match self.hosted.remove(&shard) {
            Some(Hosted::Active(handle)) => {
                self.hosted
                    .insert(shard, Hosted::HandingOff { notify, fenced });
                // Behind every message routed so far; nothing is routed here
                // after `unset_home`.
                let _ = handle.sink.push(Mail::HandOff);
                let commands = self.commands.clone();
                self.shared.node.tasks.spawn(async move {
                    let leftovers = handle.stopped.await.unwrap_or_default();
                    let _ = commands
                        .send(RegionCmd::ShardStopped { shard, leftovers })
                        .await;
                });
            }
            Some(Hosted::HandingOff {
                notify: already,
                fenced: was_fenced,
            }) => {
                self.hosted.insert(
                    shard,
                    Hosted::HandingOff {
                        notify: notify || already,
                        fenced: fenced || was_fenced,
                    },
                );
            }
            None => {
                if notify {
                    self.send(RegionToCoordinator::ShardStopped { shard });
                }
            }
        }
    }

    fn on_command(&mut self, cmd: RegionCmd<E>) {
        match cmd {
            RegionCmd::ShardStopped {
                shard,
                mut leftovers,
            } => {
                let (notify, fenced) = match self.hosted.remove(&shard) {
                    Some(Hosted::HandingOff { notify, fenced }) => (notify, fenced),
                    _ => (false, false),
                };
                if fenced {
                    mark_delayed(leftovers.iter_mut());
                }
                self.shards_changed();
                self.requeue(shard, leftovers);
                if notify {
                    self.send(RegionToCoordinator::ShardStopped { shard });
                }
                self.release(shard);
                tracing::debug!(entity_type = %self.name(), %shard, "shard stopped");
            }
            RegionCmd::BeginHandOffReady { shard } => {
                self.barriers.remove(&shard);
                if self.is_draining(shard) {
                    // Acked when the rest of the old home's queue has come
                    // back (see `release`).
                    self.handoff_acks.insert(shard);
                } else {
                    self.handoff_acks.remove(&shard);
                    self.send(RegionToCoordinator::BeginHandOffAck { shard });
                    // A home learned while the barrier was pending waited
                    // for it: messages go there only behind those sent to
                    // the old home.
                    if let Some(home) = self.pending_home.remove(&shard) {
                        self.on_shard_home(shard, home);
                    }
                }
            }
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
                for env in envelopes {
                    returned.entry(env.shard).or_default().push_back(env);
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
            .hosted
            .iter()
            .filter_map(|(id, h)| match h {
                Hosted::Active(handle) => Some((*id, handle.sink.clone(), handle.signals.clone())),
                Hosted::HandingOff { .. } => None,
            })
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
fn mark_delayed<'a, E: Entity>(envelopes: impl Iterator<Item = &'a mut Envelope<E>>) {
    for env in envelopes {
        if env.received {
            env.delayed = true;
        }
    }
}
