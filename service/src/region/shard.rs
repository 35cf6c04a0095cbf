//! A shard: a task that owns its entities and runs their handlers one
//! message at a time.
//!
//! Phases: active (delivering) -> handing off (stop message to every entity,
//! dropped by force after the deadline) -> stopped (mailbox closed, leftovers
//! returned to the region so nothing accepted is lost).
//!
//! While active, the shard passivates entities: after an explicit request
//! (once the handler returns; later messages start a new incarnation), when
//! idle for the timeout (on the region's idle tick, so no clock is read per
//! message and the delivery loop waits on its mailbox only),
//! and when its replacement policy picks them to stay within its share of
//! the region's active-entity limit.

use crate::entity::{Entity, EntityContext, EntityId, EntityType};
use crate::envelope::{Envelope, Reply};
use crate::error::AskError;
use crate::mailbox::{Consumer, Mailbox};
use crate::metrics::RegionMetrics;
use crate::node::context::NodeContext;
use crate::passivation::{PassivationReason, ReplacementPolicy};
use crate::region::activity::{Activity, ShardActivity, FLUSH_EVERY};
use crate::region::routes::Mail;
use colo_allocation::ShardId;
use futures::FutureExt;
use std::collections::{HashMap, VecDeque};
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use tokio::sync::oneshot;

type Entities<E> = HashMap<EntityId, Active<E>, foldhash::fast::RandomState>;

/// An active entity with the idle tick of its last message.
struct Active<E> {
    entity: E,
    touched: u64,
}

/// A shard task's state.
pub(crate) struct Shard<E: Entity> {
    id: ShardId,
    entity_type: Arc<EntityType<E>>,
    entities: Entities<E>,
    node: Arc<NodeContext>,
    metrics: RegionMetrics,
    /// Idle ticks elapsed; an entity is idle when not touched for
    /// `IdleCheck::ticks` of them.
    clock: u64,
    /// The limit-based replacement policy, when the strategy has one.
    policy: Option<Box<dyn ReplacementPolicy<EntityId>>>,
    /// Reused buffer for the entities a policy wants passivated.
    evicted: Vec<EntityId>,
    /// Where the region's active rate and window gauges come from.
    activity: Arc<Activity>,
    counts: ShardActivity,
}

/// A started shard, as its region sees it.
pub(crate) struct ShardHandle<E: Entity> {
    pub sink: Arc<Mailbox<Mail<E>>>,
    /// The messages left in the mailbox when the shard stopped.
    pub stopped: oneshot::Receiver<VecDeque<Envelope<E>>>,
}

impl<E: Entity> Shard<E> {
    /// Starts a shard task.
    pub fn start(
        id: ShardId,
        entity_type: Arc<EntityType<E>>,
        node: Arc<NodeContext>,
        metrics: RegionMetrics,
        policy: Option<Box<dyn ReplacementPolicy<EntityId>>>,
        activity: Arc<Activity>,
    ) -> ShardHandle<E> {
        let sink = Arc::new(Mailbox::new(entity_type.settings.shard_mailbox_capacity));
        let mailbox = Consumer(sink.clone());
        let (done, stopped) = oneshot::channel();
        let shard = Shard {
            id,
            entity_type,
            entities: Entities::default(),
            node: node.clone(),
            metrics,
            clock: 0,
            policy,
            evicted: Vec::new(),
            activity,
            counts: ShardActivity::default(),
        };
        node.tasks.spawn_shard(async move {
            let leftovers = shard.run(mailbox).await;
            let _ = done.send(leftovers);
        });
        ShardHandle { sink, stopped }
    }

    async fn run(mut self, mailbox: Consumer<Mail<E>>) -> VecDeque<Envelope<E>> {
        let mailbox = &mailbox.0;
        let mut batch = VecDeque::new();
        let idle_ticks = self
            .entity_type
            .settings
            .passivation
            .idle_check()
            .map(|c| c.ticks);
        while mailbox.recv_all(&mut batch).await {
            while let Some(mail) = batch.pop_front() {
                match mail {
                    Mail::One(env) => self.deliver(env).await,
                    Mail::Batch(envs) => {
                        for env in envs {
                            self.deliver(env).await;
                        }
                    }
                    Mail::Query(reply) => {
                        self.flush_activity();
                        let mut ids: Vec<EntityId> = self.entities.keys().cloned().collect();
                        ids.sort();
                        let _ = reply.send(ids);
                    }
                    Mail::Barrier(done) => {
                        let _ = done.send(());
                    }
                    Mail::SetLimit(limit) => self.set_limit(limit).await,
                    Mail::IdleTick => {
                        self.flush_activity();
                        if let Some(ticks) = idle_ticks {
                            self.passivate_idle(ticks).await;
                        }
                    }
                    Mail::HandOff => {
                        self.flush_activity();
                        self.activity.forget(self.id);
                        self.stop_entities().await;
                        batch.extend(mailbox.close_and_drain());
                        return leftovers(batch);
                    }
                }
            }
        }
        // Closed without a hand-off: the region stopped.
        self.flush_activity();
        self.activity.forget(self.id);
        self.drop_entities();
        VecDeque::new()
    }

    async fn deliver(&mut self, env: Envelope<E>) {
        let ctx = EntityContext::new(env.entity_id, self.id);
        if self.entities.contains_key(&ctx.entity_id) {
            if let Some(policy) = &mut self.policy {
                policy.on_access(&ctx.entity_id);
            }
        } else if let Err(reason) = self.activate(&ctx) {
            let error = self.entity_failed(&ctx, reason);
            self.node.reply(env.reply, Err(error));
            return;
        }
        let clock = self.clock;
        let Some(active) = self.entities.get_mut(&ctx.entity_id) else {
            unreachable!("the entity is active: found or activated just above")
        };
        active.touched = clock;
        let outcome = AssertUnwindSafe(active.entity.handle(&ctx, env.message))
            .catch_unwind()
            .await;
        self.metrics.delivered.increment(1);
        self.counts.accesses += 1;
        if self.counts.accesses >= FLUSH_EVERY {
            self.flush_activity();
        }
        let result = match outcome {
            Ok(Ok(reply)) => Ok(reply),
            Ok(Err(e)) => Err(self.entity_failed(&ctx, e.0)),
            Err(panic) => Err(self.entity_failed(&ctx, panic_message(&panic))),
        };
        self.node.reply(env.reply, result);
        if ctx.passivation_requested() && self.entities.contains_key(&ctx.entity_id) {
            self.passivate(&ctx.entity_id, PassivationReason::Explicit)
                .await;
        }
        self.passivate_evicted().await;
    }

    /// Creates the entity for its first message and tells the policy, which
    /// may pick others to passivate (done once this message is handled).
    ///
    /// # Errors
    /// The factory panicked; the reason.
    fn activate(&mut self, ctx: &EntityContext) -> Result<(), String> {
        // The factory sees the entity id, which comes from outside: a panic
        // in it fails this message only, not the whole shard.
        let factory = &self.entity_type.factory;
        let entity = std::panic::catch_unwind(AssertUnwindSafe(|| factory(&ctx.entity_id)))
            .map_err(|panic| format!("factory {}", panic_message(&panic)))?;
        self.metrics.hosted_entities.increment(1.0);
        self.metrics.activations.increment(1);
        self.counts.activations += 1;
        let active = Active {
            entity,
            touched: self.clock,
        };
        self.entities.insert(ctx.entity_id.clone(), active);
        if let Some(policy) = &mut self.policy {
            policy.on_activate(ctx.entity_id.clone(), &mut self.evicted);
        }
        Ok(())
    }

    fn flush_activity(&mut self) {
        let window = self.policy.as_ref().and_then(|p| p.window_proportion());
        self.activity.flush(self.id, &mut self.counts, window);
    }

    /// Drops a failed entity: the next message creates it anew.
    fn entity_failed(&mut self, ctx: &EntityContext, reason: String) -> AskError {
        tracing::warn!(
            entity_type = %self.entity_type.name,
            shard = %self.id,
            entity_id = %ctx.entity_id,
            %reason,
            "entity failed and was dropped"
        );
        self.metrics.entity_failures.increment(1);
        if self.entities.remove(&ctx.entity_id).is_some() {
            self.metrics.hosted_entities.decrement(1.0);
            if let Some(policy) = &mut self.policy {
                policy.on_remove(&ctx.entity_id);
            }
        }
        AskError::EntityFailed(reason)
    }

    /// Stops one entity: the stop message first, if the entity type has one
    /// (bounded by the entity stop timeout), then it is dropped. Messages for
    /// it that come later start a new incarnation.
    async fn passivate(&mut self, id: &EntityId, reason: PassivationReason) {
        let Some(mut active) = self.entities.remove(id) else {
            return;
        };
        if let Some(stop) = self.entity_type.stop_message.clone() {
            let ctx = EntityContext::new(id.clone(), self.id);
            let deadline = self.entity_type.settings.entity_stop_timeout();
            let stopping = AssertUnwindSafe(active.entity.handle(&ctx, stop())).catch_unwind();
            if tokio::time::timeout(deadline, stopping).await.is_err() {
                tracing::warn!(entity_type = %self.entity_type.name, entity_id = %id, "entity did not stop in time; dropped");
            }
        }
        drop(active);
        self.metrics.hosted_entities.decrement(1.0);
        self.metrics.passivated(reason);
        if reason != PassivationReason::Limit {
            if let Some(policy) = &mut self.policy {
                policy.on_remove(id);
            }
        }
    }

    /// Passivates what the policy picked.
    async fn passivate_evicted(&mut self) {
        if self.evicted.is_empty() {
            return;
        }
        let evicted = std::mem::take(&mut self.evicted);
        for id in &evicted {
            self.passivate(id, PassivationReason::Limit).await;
        }
        // Keep the buffer's capacity for the next time.
        self.evicted = evicted;
        self.evicted.clear();
    }

    /// The shard's share of the region's limit changed.
    async fn set_limit(&mut self, limit: usize) {
        if let Some(policy) = &mut self.policy {
            policy.set_limit(limit, &mut self.evicted);
        }
        self.passivate_evicted().await;
    }

    /// One idle tick: passivates the entities untouched for `ticks` ticks.
    async fn passivate_idle(&mut self, ticks: u64) {
        self.clock += 1;
        let clock = self.clock;
        let idle: Vec<EntityId> = self
            .entities
            .iter()
            .filter(|(_, active)| clock - active.touched >= ticks)
            .map(|(id, _)| id.clone())
            .collect();
        for id in idle {
            self.passivate(&id, PassivationReason::Idle).await;
        }
    }

    /// Gives every entity the stop message, then drops them all; entities
    /// still busy at the deadline are dropped anyway.
    async fn stop_entities(&mut self) {
        if let Some(stop) = self.entity_type.stop_message.clone() {
            let deadline = self.entity_type.settings.entity_stop_timeout();
            let shard = self.id;
            let entities = &mut self.entities;
            let all = async move {
                for (id, active) in entities.iter_mut() {
                    let ctx = EntityContext::new(id.clone(), shard);
                    let _ = AssertUnwindSafe(active.entity.handle(&ctx, stop()))
                        .catch_unwind()
                        .await;
                }
            };
            if tokio::time::timeout(deadline, all).await.is_err() {
                tracing::warn!(
                    entity_type = %self.entity_type.name,
                    shard = %self.id,
                    ?deadline,
                    "entities did not stop in time; stopping them by force"
                );
            }
        }
        for _ in 0..self.entities.len() {
            self.metrics.passivated(PassivationReason::HandOff);
        }
        self.drop_entities();
    }

    fn drop_entities(&mut self) {
        let n = self.entities.len();
        self.entities.clear();
        self.metrics.hosted_entities.decrement(n as f64);
    }
}

/// What was still queued behind a hand-off. After a hand-off the region
/// routes nothing here, so this is normally empty; it is the safety net that
/// keeps an accepted message from being lost.
fn leftovers<E: Entity>(rest: VecDeque<Mail<E>>) -> VecDeque<Envelope<E>> {
    let mut leftovers = VecDeque::new();
    for mail in rest {
        match mail {
            Mail::One(env) => leftovers.push_back(env),
            Mail::Batch(batch) => leftovers.extend(batch),
            Mail::Query(reply) => {
                let _ = reply.send(Vec::new());
            }
            Mail::Barrier(done) => {
                let _ = done.send(());
            }
            Mail::HandOff | Mail::SetLimit(_) | Mail::IdleTick => {}
        }
    }
    leftovers
}

fn panic_message(panic: &Box<dyn std::any::Any + Send>) -> String {
    if let Some(s) = panic.downcast_ref::<&str>() {
        format!("panicked: {s}")
    } else if let Some(s) = panic.downcast_ref::<String>() {
        format!("panicked: {s}")
    } else {
        "panicked".to_string()
    }
}

impl<E: Entity> Drop for Shard<E> {
    fn drop(&mut self) {
        // A shard aborted with its node still counts its entities as gone.
        self.drop_entities();
    }
}

/// A reply for a message that no entity will handle.
pub(crate) fn dropped<R>(reply: Reply<R>, node: &NodeContext, reason: &str)
where
    R: serde::Serialize + Send + 'static,
{
    node.reply(reply, Err(AskError::Dropped(reason.to_string())));
}
