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

mod runs;

use crate::entity::{Entity, EntityContext, EntityId, EntityType};
use crate::envelope::{Envelope, Reply};
use crate::error::AskError;
use crate::mailbox::{Consumer, Mailbox};
use crate::metrics::RegionMetrics;
use crate::node_context::NodeContext;
use crate::region::activity::{Activity, ShardActivity, FLUSH_EVERY};
use crate::region::lease::Generation;
use crate::region::mail::{Mail, IN_SHARD};
use colo_allocation::ShardId;
use colo_passivation::{PassivationReason, ReplacementPolicy};
use runs::{Cancel, Done, Ended, Job, Kind, Outcome, Runs};
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
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

/// What is left to do after the fast path of [`Shard::deliver`].
enum After<E: Entity> {
    Nothing,
    Queue(Envelope<E>),
    Unknown(Envelope<E>),
    Waiting(EntityId, Cancel),
    Passivate(EntityId),
    Failed(EntityId, String, Reply<E::Reply>),
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

/// What the region sends a shard that must not pile up in its mailbox
/// when the shard is slow or stuck: at most one idle tick and one query
/// mail wait there at a time.
#[derive(Default)]
pub(crate) struct ShardSignals {
    idle_tick: AtomicBool,
    query_mail: AtomicBool,
    queries: parking_lot::Mutex<Vec<oneshot::Sender<Vec<EntityId>>>>,
}

impl ShardSignals {
    /// Whether an idle tick should be sent: none is waiting already.
    pub fn claim_idle_tick(&self) -> bool {
        !self.idle_tick.swap(true, Ordering::AcqRel)
    }

    /// Adds a query for the live entity ids; whether a query mail should be
    /// sent (none is waiting already).
    pub fn add_query(&self, reply: oneshot::Sender<Vec<EntityId>>) -> bool {
        let mut queries = self.queries.lock();
        queries.retain(|q| !q.is_closed());
        queries.push(reply);
        drop(queries);
        !self.query_mail.swap(true, Ordering::AcqRel)
    }

    fn answer_queries(&self, ids: &[EntityId]) {
        self.query_mail.store(false, Ordering::Release);
        for query in std::mem::take(&mut *self.queries.lock()) {
            let _ = query.send(ids.to_vec());
        }
    }
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
}

impl<E: Entity> Shard<E, ()> {
    /// Starts a shard task.
    pub fn spawn(
        id: ShardId,
        entity_type: Arc<EntityType<E>>,
        node: Arc<NodeContext>,
        metrics: RegionMetrics,
        policy: Option<Box<dyn ReplacementPolicy<EntityId>>>,
        activity: Arc<Activity>,
        lease: Arc<Generation>,
    ) -> ShardHandle<E> {
        let settings = &entity_type.settings;
        let sink = Arc::new(Mailbox::new(settings.shard_mailbox_capacity));
        let mailbox = Consumer(sink.clone());
        let (done, stopped) = oneshot::channel();
        let signals = Arc::new(ShardSignals::default());
        let entities_gauge = metrics.shard_entities(&entity_type.name, id);
        let shard = Shard {
            id,
            idle_ticks: settings.passivation.idle_check().map(|c| c.ticks),
            concurrency: settings.shard_concurrency.max(1),
            custody: settings.shard_mailbox_capacity.max(1),
            entity_type,
            node: node.clone(),
            metrics,
            clock: 0,
            policy,
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
            // out.
            self.serving = self.lease.is_valid();
            self.arm_timer();
            if let Some(timer) = self.timer.as_mut() {
                if timer.as_mut().poll(cx).is_ready() {
                    self.timer = None;
                    self.timer_at = None;
                    self.on_timer();
                    progressed = true;
                }
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
                    if self.queued < self.custody {
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
                Phase::HandingOff { leftovers, .. } => {
                    if self.busy.is_empty() && self.running == 0 {
                        let leftovers = std::mem::take(leftovers);
                        self.entities.clear();
                        return Poll::Ready(leftovers);
                    }
                }
            }
            self.fill_slots(cx);
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

    /// A message for an entity: run it now, or queue it behind the
    /// entity's earlier ones.
    ///
    /// The common case, a known entity with nothing in hand whose handler
    /// finishes at once, is done here in one place: the entity is found once
    /// and goes back into the same slot of the map.
    fn deliver(&mut self, env: Envelope<E>, cx: &mut Context<'_>) {
        if env.abandoned() {
            self.metrics.dropped_abandoned.increment(1);
            return;
        }
        if !self.serving {
            // Held until the lease holds again, or the hand-off the region
            // starts when it fences returns it.
            self.enqueue(env);
            return;
        }
        let after = {
            let Self {
                entities,
                policy,
                runs,
                running,
                concurrency,
                clock,
                id: shard,
                node,
                metrics,
                counts,
                ..
            } = self;
            match entities.get_mut(&env.entity_id) {
                None => After::Unknown(env),
                Some(active) => {
                    if let Some(policy) = policy {
                        policy.on_access(&env.entity_id);
                    }
                    active.touched = *clock;
                    if active.busy || *running >= *concurrency {
                        After::Queue(env)
                    } else {
                        let Some(entity) = active.entity.take() else {
                            unreachable!("an entity that is not busy is not in a run")
                        };
                        let Envelope {
                            entity_id,
                            message,
                            reply,
                            credit,
                            delayed,
                            ..
                        } = env;
                        // In custody no longer: its sender may send more.
                        drop(credit);
                        let job = Job {
                            ctx: EntityContext::with_delay(entity_id.clone(), *shard, delayed),
                            entity,
                            message,
                        };
                        let mut kind = Some(Kind::Message(reply));
                        match runs.start(&entity_id, job, &mut kind, cx) {
                            Err(cancel) => {
                                *running += 1;
                                active.busy = true;
                                After::Waiting(entity_id, cancel)
                            }
                            Ok(Done {
                                ctx,
                                entity,
                                outcome,
                            }) => {
                                let Some(Kind::Message(reply)) = kind else {
                                    unreachable!("a message run that finished keeps its reply")
                                };
                                metrics.delivered.increment(1);
                                counts.accesses += 1;
                                match outcome {
                                    Outcome::Replied(r) => {
                                        active.entity = Some(entity);
                                        node.reply(reply, Ok(r));
                                        if ctx.passivation_requested() {
                                            After::Passivate(entity_id)
                                        } else {
                                            After::Nothing
                                        }
                                    }
                                    Outcome::Failed(reason) => {
                                        drop(entity);
                                        After::Failed(entity_id, reason, reply)
                                    }
                                }
                            }
                        }
                    }
                }
            }
        };
        match after {
            After::Nothing => {}
            After::Queue(env) => self.enqueue(env),
            After::Unknown(env) => self.deliver_new(env, cx),
            After::Waiting(id, cancel) => {
                self.busy.entry(id).or_default().running = Some(Some(cancel));
            }
            After::Passivate(id) => self.request_stop(&id, PassivationReason::Explicit, cx),
            After::Failed(id, reason, reply) => {
                let error = self.entity_failed(&id, reason);
                self.node.reply(reply, Err(error));
            }
        }
        if self.counts.accesses >= FLUSH_EVERY {
            self.flush_activity();
        }
        if !self.evicted.is_empty() {
            self.passivate_evicted(cx);
        }
    }

    /// A message for an entity that is not active: its first message, or
    /// one that queues behind its last incarnation's.
    fn deliver_new(&mut self, env: Envelope<E>, cx: &mut Context<'_>) {
        if self.busy.contains_key(&env.entity_id) {
            self.enqueue(env);
            return;
        }
        if let Err(reason) = self.activate(&env.entity_id) {
            let error = self.entity_failed(&env.entity_id, reason);
            self.node.reply(env.reply, Err(error));
            return;
        }
        if self.running < self.concurrency {
            let entity = self.take_entity(&env.entity_id);
            self.start_message(entity, env, cx);
        } else {
            self.enqueue(env);
        }
    }

    fn enqueue(&mut self, env: Envelope<E>) {
        let id = env.entity_id.clone();
        if let Some(active) = self.entities.get_mut(&id) {
            active.busy = true;
        }
        let busy = self.busy.entry(id.clone()).or_default();
        busy.waiting.push_back(env);
        self.queued += 1;
        if busy.running.is_none() && !busy.listed {
            busy.listed = true;
            self.runnable.push_back(id);
        }
    }

    fn take_entity(&mut self, id: &EntityId) -> E {
        match self.entities.get_mut(id).and_then(|a| a.entity.take()) {
            Some(entity) => entity,
            None => unreachable!("a run starts only for an active entity not in a run"),
        }
    }

    fn start_message(&mut self, entity: E, env: Envelope<E>, cx: &mut Context<'_>) {
        let Envelope {
            entity_id,
            message,
            reply,
            credit,
            delayed,
            ..
        } = env;
        // In custody no longer: its sender may send more.
        drop(credit);
        let job = Job {
            ctx: EntityContext::with_delay(entity_id.clone(), self.id, delayed),
            entity,
            message,
        };
        self.start(entity_id, job, Kind::Message(reply), None, cx);
    }

    /// Starts a run; `deadline`: cancel it then if it still runs.
    fn start(
        &mut self,
        id: EntityId,
        job: Job<E>,
        kind: Kind<E::Reply>,
        deadline: Option<Instant>,
        cx: &mut Context<'_>,
    ) {
        let mut kind = Some(kind);
        match self.runs.start(&id, job, &mut kind, cx) {
            Ok(done) => {
                let Some(kind) = kind else {
                    unreachable!("a run that finished at once leaves its kind")
                };
                self.finished(done, kind, cx);
            }
            Err(cancel) => {
                self.running += 1;
                if let Some(active) = self.entities.get_mut(&id) {
                    active.busy = true;
                }
                if let Some(deadline) = deadline {
                    self.cancel_at(deadline, cancel.clone());
                }
                self.busy.entry(id).or_default().running = Some(Some(cancel));
            }
        }
    }

    fn cancel_at(&mut self, deadline: Instant, cancel: Cancel) {
        self.next_deadline += 1;
        self.deadlines
            .insert((deadline, self.next_deadline), cancel);
    }

    /// Creates the entity for its first message and tells the policy, which
    /// may pick others to passivate (done once this message is handled).
    ///
    /// # Errors
    /// The factory panicked; the reason.
    fn activate(&mut self, id: &EntityId) -> Result<(), String> {
        // The factory sees the entity id, which comes from outside: a panic
        // in it fails this message only, not the whole shard.
        let factory = &self.entity_type.factory;
        let entity = std::panic::catch_unwind(AssertUnwindSafe(|| factory(id)))
            .map_err(|panic| format!("factory {}", runs::panic_message(&panic)))?;
        self.count_entities(1.0);
        self.metrics.activations.increment(1);
        self.counts.activations += 1;
        tracing::debug!(target: LIFECYCLE, entity_type = %self.entity_type.name, shard = %self.id, entity_id = %id, "entity started");
        let busy = self.busy.contains_key(id);
        self.entities.insert(
            id.clone(),
            Active {
                entity: Some(entity),
                touched: self.clock,
                busy,
            },
        );
        if let Some(policy) = &mut self.policy {
            policy.on_activate(id.clone(), &mut self.evicted);
        }
        Ok(())
    }

    /// A run ended after waiting.
    fn ended(&mut self, ended: Ended<E>, cx: &mut Context<'_>) {
        self.running -= 1;
        match ended.done {
            Some(done) => self.finished(done, ended.kind, cx),
            None => {
                // Cancelled at a deadline: the entity went with its run.
                tracing::warn!(entity_type = %self.entity_type.name, shard = %self.id, entity_id = %ended.id, "entity did not finish in time; dropped");
                let reason = match ended.kind {
                    Kind::Message(reply) => {
                        dropped(
                            reply,
                            &self.node,
                            "its entity was stopped while handling it",
                        );
                        match self.busy.get_mut(&ended.id).and_then(|b| b.stop.take()) {
                            Some(Stop::Next(reason)) => reason,
                            _ => PassivationReason::HandOff,
                        }
                    }
                    Kind::Stop(reason) => reason,
                };
                self.gone(&ended.id, reason);
                self.after_run(&ended.id);
            }
        }
    }

    /// A run finished (at once or after waiting): the entity comes back, or
    /// is dropped, and the sender gets its answer.
    fn finished(&mut self, done: Done<E>, kind: Kind<E::Reply>, cx: &mut Context<'_>) {
        let Done {
            ctx,
            entity,
            outcome,
        } = done;
        let id = &ctx.entity_id;
        match kind {
            Kind::Message(reply) => {
                self.metrics.delivered.increment(1);
                self.counts.accesses += 1;
                if self.counts.accesses >= FLUSH_EVERY {
                    self.flush_activity();
                }
                let result = match outcome {
                    Outcome::Replied(r) => {
                        if let Some(active) = self.entities.get_mut(id) {
                            active.entity = Some(entity);
                        }
                        Ok(r)
                    }
                    Outcome::Failed(reason) => {
                        drop(entity);
                        Err(self.entity_failed(id, reason))
                    }
                };
                self.node.reply(reply, result);
                if ctx.passivation_requested() && self.entities.contains_key(id) {
                    self.request_stop(id, PassivationReason::Explicit, cx);
                }
            }
            Kind::Stop(reason) => {
                drop((entity, outcome));
                self.gone(id, reason);
            }
        }
        self.after_run(id);
        self.passivate_evicted(cx);
    }

    /// After an entity's run: its next piece of work, if it has one, is
    /// listed to run; otherwise it is no longer busy.
    fn after_run(&mut self, id: &EntityId) {
        let Some(busy) = self.busy.get_mut(id) else {
            return;
        };
        busy.running = None;
        if busy.waiting.is_empty() && busy.stop.is_none() {
            self.busy.remove(id);
            if let Some(active) = self.entities.get_mut(id) {
                active.busy = false;
            }
            return;
        }
        if !busy.listed {
            busy.listed = true;
            self.runnable.push_back(id.clone());
        }
    }

    /// Starts listed work while there is room for runs.
    fn fill_slots(&mut self, cx: &mut Context<'_>) {
        if !self.serving && matches!(self.phase, Phase::Active) {
            return;
        }
        while self.running < self.concurrency {
            let Some(id) = self.runnable.pop_front() else {
                return;
            };
            self.start_next(id, cx);
        }
    }

    /// The next piece of work of a busy entity without a run: a stop that
    /// goes first, its oldest waiting message, or a stop that goes last.
    fn start_next(&mut self, id: EntityId, cx: &mut Context<'_>) {
        enum Next<E: Entity> {
            Stop(PassivationReason),
            Message(Envelope<E>),
            Nothing,
        }
        let next = {
            let Some(busy) = self.busy.get_mut(&id) else {
                return;
            };
            busy.listed = false;
            if busy.running.is_some() {
                return;
            }
            match busy.stop {
                Some(Stop::Next(reason)) => {
                    busy.stop = None;
                    Next::Stop(reason)
                }
                _ if !self.serving => {
                    // A fenced shard handles nothing more: what waits goes
                    // to the shard's next home. Only its stop may run.
                    self.queued -= busy.waiting.len();
                    if let Phase::HandingOff { leftovers, .. } = &mut self.phase {
                        leftovers.extend(busy.waiting.drain(..));
                    }
                    if busy.stop.take().is_some() {
                        Next::Stop(PassivationReason::HandOff)
                    } else {
                        Next::Nothing
                    }
                }
                _ => match busy.waiting.pop_front() {
                    Some(env) => {
                        busy.running = Some(None);
                        Next::Message(env)
                    }
                    None if busy.stop == Some(Stop::Last) => {
                        busy.stop = None;
                        Next::Stop(PassivationReason::HandOff)
                    }
                    None => Next::Nothing,
                },
            }
        };
        match next {
            Next::Stop(reason) => self.start_stop(id, reason, cx),
            Next::Message(env) if env.abandoned() => {
                self.queued -= 1;
                self.metrics.dropped_abandoned.increment(1);
                self.after_run(&id);
            }
            Next::Message(env) => {
                self.queued -= 1;
                let has_entity = self.entities.get(&id).is_some_and(|a| a.entity.is_some());
                if !has_entity {
                    // Its last incarnation stopped: this message starts the
                    // next one.
                    if let Err(reason) = self.activate(&id) {
                        let error = self.entity_failed(&id, reason);
                        self.node.reply(env.reply, Err(error));
                        self.after_run(&id);
                        return;
                    }
                }
                let entity = self.take_entity(&id);
                self.start_message(entity, env, cx);
            }
            Next::Nothing => self.after_run(&id),
        }
    }

    /// Passivates an entity once its message in hand (if any) is handled;
    /// messages that arrive meanwhile go to its next incarnation.
    fn request_stop(&mut self, id: &EntityId, reason: PassivationReason, cx: &mut Context<'_>) {
        if !self.entities.contains_key(id) {
            return;
        }
        if let Some(busy) = self.busy.get_mut(id) {
            match busy.stop {
                None => busy.stop = Some(Stop::Next(reason)),
                // The policy has already forgotten an entity it evicts.
                Some(Stop::Next(_)) if reason == PassivationReason::Limit => {
                    busy.stop = Some(Stop::Next(reason));
                }
                // A hand-off or an earlier request stops it anyway.
                Some(_) => return,
            }
            match &busy.running {
                Some(Some(cancel)) => {
                    let bound = Instant::now() + self.entity_type.settings.handoff_timeout;
                    let cancel = cancel.clone();
                    self.cancel_at(bound, cancel);
                }
                Some(None) => {}
                None => {
                    if !busy.listed {
                        busy.listed = true;
                        self.runnable.push_back(id.clone());
                    }
                }
            }
            return;
        }
        if self.running < self.concurrency {
            self.start_stop(id.clone(), reason, cx);
            return;
        }
        if let Some(active) = self.entities.get_mut(id) {
            active.busy = true;
        }
        self.busy.insert(
            id.clone(),
            Busy {
                stop: Some(Stop::Next(reason)),
                listed: true,
                ..Busy::default()
            },
        );
        self.runnable.push_back(id.clone());
    }

    /// Runs the stop message of an entity not in a run (or drops it at once
    /// when the entity type has none).
    fn start_stop(&mut self, id: EntityId, reason: PassivationReason, cx: &mut Context<'_>) {
        let entity = self.take_entity(&id);
        let Some(stop) = self.entity_type.stop_message.clone() else {
            drop(entity);
            self.gone(&id, reason);
            self.after_run(&id);
            return;
        };
        // During a hand-off its own deadline bounds every run.
        let deadline = match &self.phase {
            Phase::Active => Some(Instant::now() + self.entity_type.settings.entity_stop_timeout()),
            Phase::HandingOff { .. } => None,
        };
        if let Some(busy) = self.busy.get_mut(&id) {
            busy.running = Some(None);
        }
        let job = Job {
            ctx: EntityContext::new(id.clone(), self.id),
            entity,
            message: stop(),
        };
        self.start(id, job, Kind::Stop(reason), deadline, cx);
    }

    /// An entity was stopped (its value is already dropped).
    fn gone(&mut self, id: &EntityId, reason: PassivationReason) {
        if self.entities.remove(id).is_some() {
            tracing::debug!(target: LIFECYCLE, entity_type = %self.entity_type.name, shard = %self.id, entity_id = %id, reason = reason.as_str(), "entity stopped");
            self.count_entities(-1.0);
            self.metrics.passivated(reason);
            if reason != PassivationReason::Limit {
                if let Some(policy) = &mut self.policy {
                    policy.on_remove(id);
                }
            }
        }
        // No new incarnation during a hand-off: what still waits goes to
        // the shard's next home.
        if let Phase::HandingOff { leftovers, .. } = &mut self.phase {
            if let Some(busy) = self.busy.get_mut(id) {
                self.queued -= busy.waiting.len();
                leftovers.extend(busy.waiting.drain(..));
            }
        }
    }

    /// Drops a failed entity: its next message creates it anew.
    fn entity_failed(&mut self, id: &EntityId, reason: String) -> AskError {
        tracing::warn!(
            entity_type = %self.entity_type.name,
            shard = %self.id,
            entity_id = %id,
            %reason,
            "entity failed and was dropped"
        );
        self.metrics.entity_failures.increment(1);
        if self.entities.remove(id).is_some() {
            tracing::debug!(target: LIFECYCLE, entity_type = %self.entity_type.name, shard = %self.id, entity_id = %id, reason = "failed", "entity stopped");
            self.count_entities(-1.0);
            if let Some(policy) = &mut self.policy {
                policy.on_remove(id);
            }
        }
        AskError::EntityFailed(reason)
    }

    /// Passivates what the policy picked.
    fn passivate_evicted(&mut self, cx: &mut Context<'_>) {
        if self.evicted.is_empty() {
            return;
        }
        let evicted = std::mem::take(&mut self.evicted);
        for id in &evicted {
            self.request_stop(id, PassivationReason::Limit, cx);
        }
        // Keep the buffer's capacity for the next time.
        self.evicted = evicted;
        self.evicted.clear();
    }

    /// One idle tick: passivates the entities untouched for the timeout's
    /// worth of ticks (not those handling a message).
    fn passivate_idle(&mut self, cx: &mut Context<'_>) {
        self.clock += 1;
        let Some(ticks) = self.idle_ticks else {
            return;
        };
        let clock = self.clock;
        let idle: Vec<EntityId> = self
            .entities
            .iter()
            .filter(|(_, a)| !a.busy && clock - a.touched >= ticks)
            .map(|(id, _)| id.clone())
            .collect();
        for id in idle {
            self.request_stop(&id, PassivationReason::Idle, cx);
        }
    }

    /// Stops every entity: each first handles what it has already received,
    /// then its stop message; all of them side by side. A fenced shard
    /// (its lease ran out) handles nothing more, and drops its entities at
    /// once when even its stop messages are too late.
    fn begin_handoff(&mut self, mut leftovers: VecDeque<Envelope<E>>, cx: &mut Context<'_>) {
        let deadline = Instant::now() + self.entity_type.settings.entity_stop_timeout();
        if !self.serving {
            for busy in self.busy.values_mut() {
                leftovers.extend(busy.waiting.drain(..));
            }
            self.queued = 0;
        }
        self.phase = Phase::HandingOff {
            deadline,
            leftovers,
        };
        self.deadlines.clear();
        if !self.serving && self.lease.past_hard_deadline() {
            tracing::warn!(entity_type = %self.entity_type.name, shard = %self.id, "past the region's lease: dropping the shard's entities without running anything");
            self.force_stop();
            return;
        }
        let ids: Vec<EntityId> = self.entities.keys().cloned().collect();
        for id in ids {
            let busy = self.busy.entry(id.clone()).or_default();
            if busy.stop.is_none() {
                busy.stop = Some(Stop::Last);
            }
            if busy.running.is_none() && !busy.listed {
                busy.listed = true;
                self.runnable.push_back(id.clone());
            }
            if let Some(active) = self.entities.get_mut(&id) {
                active.busy = true;
            }
        }
        self.fill_slots(cx);
    }

    /// When a hand-off must be over: its own deadline, or, for a fenced
    /// shard, the lease's hard deadline if that is earlier.
    fn handoff_deadline(&self) -> Option<Instant> {
        let Phase::HandingOff { deadline, .. } = &self.phase else {
            return None;
        };
        if self.serving {
            Some(*deadline)
        } else {
            Some((*deadline).min(self.lease.hard_deadline()))
        }
    }

    fn on_timer(&mut self) {
        let now = Instant::now();
        match &mut self.phase {
            Phase::HandingOff { deadline, .. } => {
                let fenced_out = !self.serving && self.lease.past_hard_deadline();
                if now >= *deadline || fenced_out {
                    self.force_stop();
                }
            }
            Phase::Active => {
                // A run that has already ended ignores its cancel.
                while let Some(entry) = self.deadlines.first_entry() {
                    if entry.key().0 > now {
                        break;
                    }
                    entry.remove().cancel();
                }
            }
        }
    }

    /// The hand-off deadline passed: whatever still runs is dropped, and
    /// what still waits goes back to the region.
    fn force_stop(&mut self) {
        let aborted = self.runs.abort_all();
        self.running -= aborted.len();
        for (_, kind) in aborted {
            if let Kind::Message(reply) = kind {
                dropped(reply, &self.node, "its shard was handed off by force");
            }
        }
        let Phase::HandingOff { leftovers, .. } = &mut self.phase else {
            return;
        };
        for (_, mut busy) in self.busy.drain() {
            leftovers.extend(busy.waiting.drain(..));
        }
        self.runnable.clear();
        self.queued = 0;
        tracing::warn!(
            entity_type = %self.entity_type.name,
            shard = %self.id,
            entities = self.entities.len(),
            "entities did not stop in time; stopping them by force"
        );
        for _ in 0..self.entities.len() {
            self.metrics.passivated(PassivationReason::HandOff);
        }
        self.drop_entities();
    }

    /// Keeps the timer at the earliest instant the shard must act at.
    fn arm_timer(&mut self) {
        let wanted = match &self.phase {
            Phase::HandingOff { .. } => self.handoff_deadline(),
            Phase::Active => self.deadlines.keys().next().map(|(at, _)| *at),
        };
        if wanted != self.timer_at {
            self.timer_at = wanted;
            self.timer = wanted.map(|at| Box::pin(tokio::time::sleep_until(at)));
        }
    }

    /// The region closed the mailbox without a hand-off: it has stopped, and
    /// what the shard holds cannot go anywhere.
    fn closed(&mut self) -> VecDeque<Envelope<E>> {
        self.flush_activity();
        self.activity.forget(self.id);
        for (_, kind) in self.runs.abort_all() {
            if let Kind::Message(reply) = kind {
                dropped(reply, &self.node, "its region stopped");
            }
        }
        self.running = 0;
        for (_, busy) in self.busy.drain() {
            for env in busy.waiting {
                dropped(env.reply, &self.node, "its region stopped");
            }
        }
        self.runnable.clear();
        self.queued = 0;
        self.drop_entities();
        VecDeque::new()
    }

    /// The entity count changed: the region's gauge and the shard's.
    fn count_entities(&self, delta: f64) {
        self.metrics.hosted_entities.increment(delta);
        self.entities_gauge.increment(delta);
    }

    fn flush_activity(&mut self) {
        let window = self.policy.as_ref().and_then(|p| p.window_proportion());
        self.activity.flush(self.id, &mut self.counts, window);
    }

    fn drop_entities(&mut self) {
        log_dropped(&self.entity_type.name, self.id, &self.entities);
        let n = self.entities.len();
        self.entities.clear();
        self.count_entities(-(n as f64));
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
mod tests {
    use super::*;

    #[test]
    fn a_stuck_shard_gets_one_idle_tick_and_one_query_mail_at_a_time() {
        let signals = ShardSignals::default();
        assert!(signals.claim_idle_tick(), "the first tick is sent");
        for _ in 0..10 {
            assert!(!signals.claim_idle_tick(), "no second tick while one waits");
        }
        signals.idle_tick.store(false, Ordering::Release); // the shard took it
        assert!(signals.claim_idle_tick());

        let (first, mut first_answer) = oneshot::channel();
        assert!(signals.add_query(first), "the first query sends a mail");
        let mut later = Vec::new();
        for _ in 0..10 {
            let (tx, rx) = oneshot::channel();
            assert!(!signals.add_query(tx), "later queries wait with the first");
            later.push(rx);
        }
        signals.answer_queries(&[EntityId::from("a")]);
        assert_eq!(first_answer.try_recv().unwrap(), vec![EntityId::from("a")]);
        for mut rx in later {
            assert_eq!(rx.try_recv().unwrap(), vec![EntityId::from("a")]);
        }
        let (next, _) = oneshot::channel();
        assert!(
            signals.add_query(next),
            "answered: the next query sends a mail"
        );
    }
}
