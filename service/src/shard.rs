//! A shard: a task that owns its entities and runs their handlers one
//! message at a time.
//!
//! Phases: active (delivering) -> handing off (stop message to every entity,
//! dropped by force after the deadline) -> stopped (mailbox closed, leftovers
//! returned to the region so nothing accepted is lost).

use crate::entity::{Entity, EntityContext, EntityId, EntityType};
use crate::envelope::{Envelope, Reply};
use crate::error::AskError;
use crate::mailbox::{Consumer, Mailbox};
use crate::metrics::RegionMetrics;
use crate::node::NodeContext;
use crate::region::routes::Mail;
use colo_allocation::ShardId;
use futures::FutureExt;
use std::collections::{HashMap, VecDeque};
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use tokio::sync::oneshot;

type Entities<E> = HashMap<EntityId, E, foldhash::fast::RandomState>;

/// A shard task's state.
pub(crate) struct Shard<E: Entity> {
    id: ShardId,
    entity_type: Arc<EntityType<E>>,
    entities: Entities<E>,
    node: Arc<NodeContext>,
    metrics: RegionMetrics,
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
                        let mut ids: Vec<EntityId> = self.entities.keys().cloned().collect();
                        ids.sort();
                        let _ = reply.send(ids);
                    }
                    Mail::Barrier(done) => {
                        let _ = done.send(());
                    }
                    Mail::HandOff => {
                        self.stop_entities().await;
                        batch.extend(mailbox.close_and_drain());
                        return leftovers(batch);
                    }
                }
            }
        }
        // Closed without a hand-off: the region stopped.
        self.drop_entities();
        VecDeque::new()
    }

    async fn deliver(&mut self, env: Envelope<E>) {
        let ctx = EntityContext {
            entity_id: env.entity_id,
            shard: self.id,
        };
        if !self.entities.contains_key(&ctx.entity_id) {
            // The factory sees the entity id, which comes from outside: a
            // panic in it fails this message only, not the whole shard.
            let factory = &self.entity_type.factory;
            match std::panic::catch_unwind(AssertUnwindSafe(|| factory(&ctx.entity_id))) {
                Ok(entity) => {
                    self.metrics.hosted_entities.increment(1.0);
                    self.entities.insert(ctx.entity_id.clone(), entity);
                }
                Err(panic) => {
                    let error =
                        self.entity_failed(&ctx, format!("factory {}", panic_message(&panic)));
                    self.node.reply(env.reply, Err(error));
                    return;
                }
            }
        }
        let Some(entity) = self.entities.get_mut(&ctx.entity_id) else {
            unreachable!("the entity was inserted just above")
        };
        let outcome = AssertUnwindSafe(entity.handle(&ctx, env.message))
            .catch_unwind()
            .await;
        self.metrics.delivered.increment(1);
        let result = match outcome {
            Ok(Ok(reply)) => Ok(reply),
            Ok(Err(e)) => Err(self.entity_failed(&ctx, e.0)),
            Err(panic) => Err(self.entity_failed(&ctx, panic_message(&panic))),
        };
        self.node.reply(env.reply, result);
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
        }
        AskError::EntityFailed(reason)
    }

    /// Gives every entity the stop message, then drops them all; entities
    /// still busy at the deadline are dropped anyway.
    async fn stop_entities(&mut self) {
        if let Some(stop) = self.entity_type.stop_message.clone() {
            let deadline = self.entity_type.settings.entity_stop_timeout();
            let shard = self.id;
            let entities = &mut self.entities;
            let all = async move {
                for (id, entity) in entities.iter_mut() {
                    let ctx = EntityContext {
                        entity_id: id.clone(),
                        shard,
                    };
                    let _ = AssertUnwindSafe(entity.handle(&ctx, stop()))
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
            Mail::HandOff => {}
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
