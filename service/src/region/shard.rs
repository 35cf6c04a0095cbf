//! A shard: the task that owns its entities and runs their handlers.
//!
//! Each entity handles one message at a time, in arrival order; different
//! entities of the shard run side by side (up to `shard_concurrency` at
//! once), so a handler may await I/O, or tell or ask any entity, its own
//! shard's included, without holding up its neighbours. While an entity
//! handles a message its later messages wait in a queue of its own; the
//! shard stops taking mail while those queues hold a mailbox's worth, which
//! is what keeps memory bounded and makes senders wait.
//!
//! Phases: active (delivering) -> handing off (the messages each entity had
//! already received are handled, then its stop message runs, all entities
//! side by side; whatever still runs at the deadline is dropped) -> stopped
//! (leftovers returned to the region, so nothing accepted is lost).
//!
//! While active, the shard passivates entities: after an explicit request
//! (once the handler returns; later messages start a new incarnation), when
//! idle for the timeout (on the region's idle tick, so no clock is read per
//! message), and when its replacement policy picks them to stay within its
//! share of the region's active-entity limit. A passivation waits for the
//! message in hand, at most `handoff_timeout`, then drops the entity.
//!
//! A durable entity type's shard also reads each entity's state when it
//! starts (its messages wait meanwhile), keeps its state after each message
//! and writes it behind, answers once what an answer covers is durable, and
//! ends a hand-off only once everything it changed is written.
//!
//! This file has the shard's intake and its poll loop (mail taken in turn
//! with running handlers, timers and the state's reads and writes);
//! `lifecycle.rs` an entity's start, runs, passivation and stop;
//! `stateful.rs` what a durable entity adds to that, `durable.rs` the
//! state kept and written behind, `recovery.rs` remembered entities
//! started again; `handoff.rs` the hand-off and the stop;
//! `runs.rs` the handler futures in flight; `signals.rs` what the region
//! sends outside the mailbox's order; `timers.rs` durable timers come due.

mod deliver;
mod durable;
mod handoff;
mod keys;
mod lifecycle;
mod loads;
mod recovery;
mod runs;
mod signals;
mod stateful;
mod timers;
mod weights;

use crate::entity::{Entity, EntityId, EntityType};
use crate::envelope::{Envelope, Reply};
use crate::error::AskError;
use crate::mailbox::{Consumer, Mailbox};
use crate::metrics::RegionMetrics;
use crate::node_context::NodeContext;
use crate::region::activity::{Activity, ShardActivity};
use crate::region::lease::Generation;
use crate::region::mail::{Mail, IN_SHARD};
use crate::region::shared::Shared;
use colo_allocation::ShardId;
use colo_passivation::{PassivationReason, ReplacementPolicy};
use durable::DurableShard;
use runs::{Cancel, Done, Runs};
pub(crate) use signals::ShardSignals;
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::task::{Context, Poll};
use tokio::sync::oneshot;
use tokio::time::{Instant, Sleep};

type Map<V> = HashMap<EntityId, V, foldhash::fast::RandomState>;

/// How many mailbox batches one poll of the shard task takes before it
/// yields, so a flooded shard does not hold its worker thread.
const BATCHES_PER_POLL: usize = 32;

/// An active entity.
struct Active<E> {
    /// `None` while a run holds it.
    entity: Option<E>,
    /// The idle tick of its last message.
    touched: u64,
    /// It has an entry in `Shard::busy`: a run under way or work waiting, so
    /// a new message queues behind.
    busy: bool,
}

/// When a requested stop runs.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Stop {
    /// Before the messages still waiting, which go to a new incarnation
    /// (passivation).
    Next(PassivationReason),
    /// After them (hand-off: what the entity received before, it handles).
    Last,
}

/// An entity with a run under way or work waiting.
struct Busy<E: Entity> {
    waiting: VecDeque<Envelope<E>>,
    /// The run under way, with its cancel handle when it waits.
    running: Option<Option<Cancel>>,
    stop: Option<Stop>,
    /// Listed in `Shard::runnable`.
    listed: bool,
}

impl<E: Entity> Default for Busy<E> {
    fn default() -> Self {
        Self {
            waiting: VecDeque::new(),
            running: None,
            stop: None,
            listed: false,
        }
    }
}

enum Phase<E: Entity> {
    Active,
    HandingOff {
        deadline: Instant,
        leftovers: VecDeque<Envelope<E>>,
    },
}

/// A started shard, as its region sees it.
pub(crate) struct ShardHandle<E: Entity> {
    pub sink: Arc<Mailbox<Mail<E>>>,
    /// The messages left over when the shard stopped.
    pub stopped: oneshot::Receiver<VecDeque<Envelope<E>>>,
    pub signals: Arc<ShardSignals>,
}

/// A shard task's state; `F` is the type of its handler runs.
pub(crate) struct Shard<E: Entity, F> {
    id: ShardId,
    entity_type: Arc<EntityType<E>>,
    node: Arc<NodeContext>,
    metrics: RegionMetrics,
    /// Idle ticks elapsed; an entity is idle when not touched for
    /// `IdleCheck::ticks` of them.
    clock: u64,
    idle_ticks: Option<u64>,
    /// The limit-based replacement policy, when the strategy has one.
    policy: Option<Box<dyn ReplacementPolicy<EntityId>>>,
    /// Its part in the node's memory budget, when the node has one.
    weighing: Option<weights::Weighing>,
    /// Reused buffer for the entities a policy wants passivated.
    evicted: Vec<EntityId>,
    /// Where the region's active rate and window gauges come from.
    activity: Arc<Activity>,
    counts: ShardActivity,
    entities: Map<Active<E>>,
    busy: Map<Busy<E>>,
    /// Busy entities with work and no run, in the order they became so.
    runnable: VecDeque<EntityId>,
    runs: Runs<E, F>,
    /// Runs that waited and are under way (a run that finishes at once is
    /// never counted).
    running: usize,
    concurrency: usize,
    /// Messages waiting in entities' queues, and the most the shard holds
    /// before it stops taking mail.
    queued: usize,
    custody: usize,
    /// Runs that must end by a deadline (a passivation waiting for the
    /// message in hand, a stop message): cancelled when it passes, if they
    /// still run. The counter keeps keys apart.
    deadlines: BTreeMap<(Instant, u64), Cancel>,
    next_deadline: u64,
    timer: Option<Pin<Box<Sleep>>>,
    timer_at: Option<Instant>,
    phase: Phase<E>,
    /// The lease generation the shard started under, and whether it held
    /// at the start of this turn: a shard handles messages only while it
    /// does.
    lease: Arc<Generation>,
    serving: bool,
    signals: Arc<ShardSignals>,
    /// Live entities of this shard, as a metric.
    entities_gauge: metrics::Gauge,
    /// The state of a durable entity type's entities (`durable.rs`).
    durable: Option<DurableShard<E>>,
    /// Of a type kept in memory: the idempotency keys its live entities
    /// applied (a durable type keeps them with the state: `keys.rs`).
    memory_keys: Map<keys::AppliedKeys>,
    retention: keys::KeyRetention,
}

impl<E: Entity> Shard<E, ()> {
    /// Starts a shard task of `region`, one of `local_shards` running here
    /// (itself included).
    pub fn spawn(
        id: ShardId,
        region: &Shared<E>,
        local_shards: usize,
        lease: Arc<Generation>,
    ) -> ShardHandle<E> {
        let (entity_type, node) = (region.entity_type.clone(), region.node.clone());
        let (metrics, activity) = (region.metrics.clone(), region.activity.clone());
        let retention = keys::KeyRetention::new(
            entity_type.settings.idempotency_retention,
            entity_type.settings.idempotency_keys,
        );
        let durable = match (entity_type.state, &node.store) {
            (Some(codec), Some(store)) => Some(DurableShard::new(
                codec,
                store.clone(),
                &entity_type.name,
                id,
                &region.durable,
                region.id.as_str(),
                &entity_type.settings,
            )),
            _ => None,
        };
        let settings = &entity_type.settings;
        let sink = Arc::new(Mailbox::new(settings.shard_mailbox_capacity));
        let mailbox = Consumer(sink.clone());
        let (done, stopped) = oneshot::channel();
        let signals = Arc::new(ShardSignals::default());
        let entities_gauge = metrics.shard_entities(&entity_type.name, id);
        // Remembered entities are not passivated automatically.
        let remembers = settings.remember_entities.is_some() && durable.is_some();
        let (policy, weighing) = match remembers {
            true => (None, None),
            false => weights::policy(&entity_type, &node, local_shards),
        };
        let shard = Shard {
            id,
            idle_ticks: settings
                .passivation
                .idle_check()
                .filter(|_| !remembers)
                .map(|c| c.ticks),
            concurrency: settings.shard_concurrency.max(1),
            custody: settings.shard_mailbox_capacity.max(1),
            entity_type,
            node: node.clone(),
            metrics,
            clock: 0,
            policy,
            weighing,
            evicted: Vec::new(),
            activity,
            counts: ShardActivity::default(),
            entities: Map::default(),
            busy: Map::default(),
            runnable: VecDeque::new(),
            runs: Runs::new(runs::run::<E>),
            running: 0,
            queued: 0,
            deadlines: BTreeMap::new(),
            next_deadline: 0,
            timer: None,
            timer_at: None,
            phase: Phase::Active,
            lease,
            serving: false,
            signals: signals.clone(),
            entities_gauge,
            durable,
            memory_keys: Map::default(),
            retention,
        };
        node.tasks.spawn_shard(IN_SHARD.scope((), async move {
            let leftovers = shard.run(mailbox).await;
            let _ = done.send(leftovers);
        }));
        ShardHandle {
            sink,
            stopped,
            signals,
        }
    }
}

impl<E: Entity, F: Future<Output = Done<E>>> Shard<E, F> {
    async fn run(mut self, mailbox: Consumer<Mail<E>>) -> VecDeque<Envelope<E>> {
        let mut batch = VecDeque::new();
        std::future::poll_fn(|cx| self.poll_run(&mailbox.0, &mut batch, cx)).await
    }

    /// One turn of the task: runs that ended, the timer, then mail. Ready
    /// with the leftovers once the shard has stopped.
    fn poll_run(
        &mut self,
        mailbox: &Mailbox<Mail<E>>,
        batch: &mut VecDeque<Mail<E>>,
        cx: &mut Context<'_>,
    ) -> Poll<VecDeque<Envelope<E>>> {
        let mut batches = 0;
        loop {
            let mut progressed = false;
            // Once per turn, before any message is handled: a process that
            // was paused must not handle what arrived while its lease ran
            // out. If it has, the renewal wakes the shard.
            self.serving = self.lease.is_valid_or_wake(cx.waker());
            self.arm_timer();
            if let Some(timer) = self.timer.as_mut() {
                if timer.as_mut().poll(cx).is_ready() {
                    self.timer = None;
                    self.timer_at = None;
                    self.on_timer();
                    progressed = true;
                }
            }
            if self.poll_durable(cx) {
                progressed = true;
            }
            if self.poll_timers(cx) {
                progressed = true;
            }
            // Only runs that waited are polled here: most shards have none,
            // and then their set of runs is not touched at all.
            while self.running > 0 {
                match self.runs.poll_ended(cx) {
                    Poll::Ready(Some(ended)) => {
                        self.ended(ended, cx);
                        progressed = true;
                    }
                    Poll::Ready(None) | Poll::Pending => break,
                }
            }
            match &mut self.phase {
                Phase::Active => {
                    // A durable shard takes mail once its state is restored.
                    let restoring = self.durable.as_ref().is_some_and(|d| d.restoring());
                    if self.queued < self.custody && !restoring {
                        match mailbox.poll_recv_all(batch, cx) {
                            Poll::Ready(true) => {
                                self.take_mail(batch, mailbox, cx);
                                progressed = true;
                                batches += 1;
                            }
                            Poll::Ready(false) => return Poll::Ready(self.closed()),
                            Poll::Pending => {}
                        }
                    }
                }
                Phase::HandingOff { .. } => {
                    // A durable shard ends once its state is written.
                    if self.busy.is_empty() && self.running == 0 && self.durable_settled(cx) {
                        let Phase::HandingOff { leftovers, .. } = &mut self.phase else {
                            unreachable!("still handing off")
                        };
                        let leftovers = std::mem::take(leftovers);
                        // Any entity still here never ran its stop: it
                        // ends with the shard, logged and counted as gone.
                        self.drop_entities();
                        return Poll::Ready(leftovers);
                    }
                }
            }
            self.fill_slots(cx);
            progressed |= self.loads_to_start();
            if !progressed {
                return Poll::Pending;
            }
            if batches >= BATCHES_PER_POLL {
                cx.waker().wake_by_ref();
                return Poll::Pending;
            }
        }
    }

    fn take_mail(
        &mut self,
        batch: &mut VecDeque<Mail<E>>,
        mailbox: &Mailbox<Mail<E>>,
        cx: &mut Context<'_>,
    ) {
        while let Some(mail) = batch.pop_front() {
            match mail {
                Mail::One(env) => self.deliver(env, cx),
                Mail::Batch(envs) => {
                    for env in envs {
                        self.deliver(env, cx);
                    }
                }
                Mail::Query => {
                    self.flush_activity();
                    let mut ids: Vec<EntityId> = self.entities.keys().cloned().collect();
                    ids.sort();
                    self.signals.answer_queries(&ids);
                }
                // Everything before it has reached the shard.
                Mail::Barrier(done) => {
                    let _ = done.send(());
                }
                Mail::SetLimit(limit) => {
                    if let Some(policy) = &mut self.policy {
                        policy.set_limit(limit, &mut self.evicted);
                    }
                    self.passivate_evicted(cx);
                }
                Mail::IdleTick => {
                    self.signals.idle_tick.store(false, Ordering::Release);
                    self.flush_activity();
                    if self.serving {
                        self.passivate_idle(cx);
                    }
                }
                Mail::HandOff => {
                    self.flush_activity();
                    self.activity.forget(self.id);
                    // After a hand-off the region routes nothing here: what
                    // follows is normally nothing, and is never lost.
                    let mut rest = leftovers(std::mem::take(batch));
                    rest.extend(leftovers(mailbox.close_and_drain()));
                    self.begin_handoff(rest, cx);
                    return;
                }
            }
        }
    }
}

impl<E: Entity, F> Drop for Shard<E, F> {
    fn drop(&mut self) {
        // A shard aborted with its node still counts its entities as gone.
        log_dropped(&self.entity_type.name, self.id, &self.entities);
        let n = self.entities.len() as f64;
        self.entities.clear();
        self.metrics.hosted_entities.decrement(n);
        self.entities_gauge.decrement(n);
        self.unreport_weight();
    }
}

/// The target of entity lifecycle events (debug level): one per entity
/// start and stop, so that a log shows where each entity lived when.
pub(crate) const LIFECYCLE: &str = "colo::entity";

fn log_dropped<V>(entity_type: &str, shard: ShardId, entities: &Map<V>) {
    if tracing::enabled!(target: LIFECYCLE, tracing::Level::DEBUG) {
        for id in entities.keys() {
            tracing::debug!(target: LIFECYCLE, %entity_type, %shard, entity_id = %id, reason = "dropped", "entity stopped");
        }
    }
}

/// The messages among mails still queued behind a hand-off; the rest is
/// answered as if the shard had handled it.
fn leftovers<E: Entity>(rest: VecDeque<Mail<E>>) -> VecDeque<Envelope<E>> {
    let mut leftovers = VecDeque::new();
    for mail in rest {
        match mail {
            Mail::One(env) => leftovers.push_back(env),
            Mail::Batch(batch) => leftovers.extend(batch),
            Mail::Barrier(done) => {
                let _ = done.send(());
            }
            Mail::HandOff | Mail::SetLimit(_) | Mail::IdleTick | Mail::Query => {}
        }
    }
    leftovers
}

/// A reply for a message that no entity will handle.
pub(crate) fn dropped<R>(reply: Reply<R>, node: &NodeContext, reason: &str)
where
    R: serde::Serialize + Send + 'static,
{
    node.reply(reply, Err(AskError::Dropped(reason.to_string())));
}

#[cfg(test)]
mod tests;
