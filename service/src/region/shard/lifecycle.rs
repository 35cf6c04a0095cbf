//! An entity's life in its shard: created for its first message (and told
//! to the replacement policy), its messages run one at a time, passivated
//! (explicitly, when idle, or when the policy picks it) after the message in
//! hand, dropped when its handler fails. A durable entity's state is read
//! when it starts and kept after each message (`durable.rs`).

/// Whether a started entity can take its message now.
pub(super) enum Activation {
    Ready,
    /// Its state is being read; its messages wait in its queue.
    Loading,
}

use super::durable::Start;
use super::runs::{Cancel, Done, Ended, Job, Kind, Outcome};
use super::{dropped, Busy, Phase, Shard, Stop, LIFECYCLE};
use crate::entity::{Entity, EntityContext, EntityId};
use crate::envelope::{Cause, Envelope};
use crate::error::AskError;
use crate::region::activity::FLUSH_EVERY;
use colo_passivation::PassivationReason;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::task::Context;
use tokio::time::Instant;

impl<E: Entity, F: Future<Output = Done<E>>> Shard<E, F> {
    pub(super) fn take_entity(&mut self, id: &EntityId) -> E {
        match self.entities.get_mut(id).and_then(|a| a.entity.take()) {
            Some(entity) => entity,
            None => unreachable!("a run starts only for an active entity not in a run"),
        }
    }

    pub(super) fn start_message(&mut self, entity: E, env: Envelope<E>, cx: &mut Context<'_>) {
        // A Kafka record a durable entity applied already is skipped; one
        // whose key's previous record is missing from its state is refused
        // (see `Origin::previous`). Either answer rests on this start's
        // state, which may be unwritten yet: it names the start, like a
        // handled record's, and an ask's skip waits for the write.
        // A client tell with an idempotency key its entity applied already
        // is answered so, not applied again.
        let skipped = match self.durable.as_ref() {
            Some(durable) => durable.skips(&env.entity_id, env.reply.cause()),
            None => env.reply.idempotency_key().and_then(|key| {
                let keys = self.memory_keys.get(&env.entity_id)?;
                let now = crate::clock::unix_ms();
                keys.applied(key, now, self.retention)
                    .then_some(AskError::AlreadyApplied)
            }),
        };
        if let Some(skipped) = skipped {
            if let Some(active) = self.entities.get_mut(&env.entity_id) {
                active.entity = Some(entity);
            }
            let id = env.entity_id.clone();
            match self.durable.as_mut() {
                Some(durable) => durable.answer(&self.node, &id, env.reply, Err(skipped)),
                None => self.node.reply(env.reply, Err(skipped)),
            }
            self.after_run(&id);
            return;
        }
        let firing = match env.reply.cause() {
            Some(Cause::Timer(key)) => Some(key.name.clone()),
            _ => None,
        };
        let (entity_id, mut job, kind) = Job::message(entity, env, self.id);
        if self.durable.is_some() {
            job.ctx = job
                .ctx
                .with_timers(check_message::<E::Message>, firing)
                .with_outputs(self.entity_type.outputs.clone());
        }
        self.start(entity_id, job, kind, None, cx);
    }

    /// Starts a run; `deadline`: cancel it then if it still runs.
    pub(super) fn start(
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

    pub(super) fn cancel_at(&mut self, deadline: Instant, cancel: Cancel) {
        self.next_deadline += 1;
        self.deadlines
            .insert((deadline, self.next_deadline), cancel);
    }

    /// Creates the entity for its first message and tells the policy, which
    /// may pick others to passivate (done once this message is handled). A
    /// durable entity whose state must be read first is `Loading`: its
    /// messages wait in its queue (marked as running) until it is read.
    ///
    /// # Errors
    /// The factory panicked; the reason.
    pub(super) fn activate(&mut self, id: &EntityId) -> Result<Activation, String> {
        let entity = match self.durable.as_mut().map(|d| d.start(id)) {
            None => self.make_entity(id)?,
            Some(Ok(Start::Fresh)) => self.make_fresh(id)?,
            Some(Ok(Start::Entity(entity))) => entity,
            Some(Ok(Start::Loading)) => {
                self.busy.entry(id.clone()).or_default().running = Some(None);
                return Ok(Activation::Loading);
            }
            Some(Err(reason)) => return Err(reason),
        };
        self.insert_active(id, entity);
        Ok(Activation::Ready)
    }

    /// A new entity from the factory.
    ///
    /// # Errors
    /// The factory panicked; the reason.
    pub(super) fn make_entity(&self, id: &EntityId) -> Result<E, String> {
        // The factory sees the entity id, which comes from outside: a panic
        // in it fails this message only, not the whole shard.
        let factory = &self.entity_type.factory;
        std::panic::catch_unwind(AssertUnwindSafe(|| factory(id)))
            .map_err(|panic| format!("factory {}", super::runs::panic_message(&panic)))
    }

    /// A run ended after waiting.
    pub(super) fn ended(&mut self, ended: Ended<E>, cx: &mut Context<'_>) {
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
    pub(super) fn finished(&mut self, done: Done<E>, kind: Kind<E::Reply>, cx: &mut Context<'_>) {
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
                        let deleted = ctx.deletion_requested();
                        let requested = ctx.requested();
                        match self.keep(id, entity, deleted, reply.cause(), requested) {
                            Ok(entity) => {
                                if let Some(active) = self.entities.get_mut(id) {
                                    active.entity = Some(entity);
                                }
                                Ok(r)
                            }
                            Err(reason) => Err(self.entity_failed(id, reason)),
                        }
                    }
                    Outcome::Failed(reason) => {
                        drop(entity);
                        Err(self.entity_failed(id, reason))
                    }
                };
                self.answer(id, reply, result);
                if ctx.passivation_requested() && self.entities.contains_key(id) {
                    self.request_stop(id, PassivationReason::Explicit, cx);
                }
            }
            Kind::Stop(reason) => {
                if let (Some(durable), Outcome::Replied(_)) = (self.durable.as_mut(), &outcome) {
                    // What its stop message changed is kept too.
                    let requested = ctx.requested();
                    if let Err(e) = durable.changed(id, Some(&entity), None, requested) {
                        tracing::warn!(entity_type = %self.entity_type.name, shard = %self.id, entity_id = %id, reason = %e, "what the entity's stop message changed is not kept");
                    }
                }
                drop((entity, outcome));
                self.gone(id, reason);
            }
        }
        self.after_run(id);
        self.passivate_evicted(cx);
    }

    /// After an entity's run: its next piece of work, if it has one, is
    /// listed to run; otherwise it is no longer busy.
    pub(super) fn after_run(&mut self, id: &EntityId) {
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
    pub(super) fn fill_slots(&mut self, cx: &mut Context<'_>) {
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
    pub(super) fn start_next(&mut self, id: EntityId, cx: &mut Context<'_>) {
        enum Next<E: Entity> {
            Stop(PassivationReason),
            Message(Envelope<E>),
            Nothing,
        }
        let serving = self.still_serving(cx);
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
                _ if !serving => {
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
            // A hand-off that began while the entity's own stop ran asked
            // for a stop of an entity that is gone by now.
            Next::Stop(_) if self.entities.get(&id).is_none_or(|a| a.entity.is_none()) => {
                self.after_run(&id);
            }
            Next::Stop(reason) => self.start_stop(id, reason, cx),
            Next::Message(env) if env.abandoned() => {
                self.queued -= 1;
                self.metrics.dropped_abandoned.increment(1);
                self.after_run(&id);
            }
            Next::Message(env) => {
                self.queued -= 1;
                let Some(env) = self.refuse_if_broken(env) else {
                    self.after_run(&id);
                    return;
                };
                let has_entity = self.entities.get(&id).is_some_and(|a| a.entity.is_some());
                if !has_entity {
                    // Its last incarnation stopped: this message starts the
                    // next one.
                    match self.activate(&id) {
                        Ok(Activation::Ready) => {}
                        Ok(Activation::Loading) => {
                            if let Some(busy) = self.busy.get_mut(&id) {
                                busy.waiting.push_front(env);
                                self.queued += 1;
                            }
                            return;
                        }
                        Err(reason) => {
                            let error = self.entity_failed(&id, reason);
                            self.node.reply(env.reply, Err(error));
                            self.after_run(&id);
                            return;
                        }
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
    pub(super) fn request_stop(
        &mut self,
        id: &EntityId,
        reason: PassivationReason,
        cx: &mut Context<'_>,
    ) {
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
    pub(super) fn start_stop(
        &mut self,
        id: EntityId,
        reason: PassivationReason,
        cx: &mut Context<'_>,
    ) {
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
        let mut ctx = EntityContext::new(id.clone(), self.id);
        if self.durable.is_some() {
            ctx = ctx
                .with_timers(check_message::<E::Message>, None)
                .with_outputs(self.entity_type.outputs.clone());
        }
        let job = Job {
            ctx,
            entity,
            message: stop(),
        };
        self.start(id, job, Kind::Stop(reason), deadline, cx);
    }

    /// An entity was stopped (its value is already dropped).
    pub(super) fn gone(&mut self, id: &EntityId, reason: PassivationReason) {
        if let Some(durable) = self.durable.as_mut() {
            durable.forget(id);
        }
        self.memory_keys.remove(id);
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
    pub(super) fn entity_failed(&mut self, id: &EntityId, reason: String) -> AskError {
        tracing::warn!(
            entity_type = %self.entity_type.name,
            shard = %self.id,
            entity_id = %id,
            %reason,
            "entity failed and was dropped"
        );
        self.metrics.entity_failures.increment(1);
        if let Some(durable) = self.durable.as_mut() {
            // Its next message starts it from its last kept state.
            durable.forget(id);
        }
        // Kept in memory, it starts anew: what its keys guarded is gone.
        self.memory_keys.remove(id);
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
    pub(super) fn passivate_evicted(&mut self, cx: &mut Context<'_>) {
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
        self.report_weight();
    }

    /// One idle tick: passivates the entities untouched for the timeout's
    /// worth of ticks (not those handling a message).
    pub(super) fn passivate_idle(&mut self, cx: &mut Context<'_>) {
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

    /// The entity count changed: the region's gauge and the shard's.
    pub(super) fn count_entities(&self, delta: f64) {
        self.metrics.hosted_entities.increment(delta);
        self.entities_gauge.increment(delta);
    }

    pub(super) fn flush_activity(&mut self) {
        let window = self.policy.as_ref().and_then(|p| p.window_proportion());
        self.activity.flush(self.id, &mut self.counts, window);
    }
}

/// Whether an encoded timer message is one of the entity type's messages:
/// checked when a handler schedules it, so that a timer never fires a
/// message its entity cannot read.
fn check_message<M: serde::de::DeserializeOwned>(bytes: &[u8]) -> Result<(), String> {
    postcard::from_bytes::<M>(bytes)
        .map(drop)
        .map_err(|e| e.to_string())
}
