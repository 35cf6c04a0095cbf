//! A message on its way into the shard: to its entity at once when the
//! entity is free (the common case, done in one place), queued behind its
//! earlier messages when not, started when the entity is not active yet.

use super::lifecycle::Activation;
use super::runs::{Cancel, Done, Job, Kind, Outcome};
use super::Shard;
use crate::entity::{Entity, EntityId};
use crate::envelope::{Envelope, Reply};
use crate::region::activity::FLUSH_EVERY;
use colo_passivation::PassivationReason;
use std::future::Future;
use std::task::Context;

/// What is left to do after the fast path of [`Shard::deliver`].
enum After<E: Entity> {
    Nothing,
    Queue(Envelope<E>),
    /// A durable entity with nothing in hand, or a keyed tell: run now,
    /// through the checks of what it applied already.
    Start(Envelope<E>),
    Unknown(Envelope<E>),
    Waiting(EntityId, Cancel),
    Passivate(EntityId),
    /// Handled at once by an entity the node's memory budget weighs.
    Weigh(EntityId),
    Failed(EntityId, String, Reply<E::Reply>),
}

impl<E: Entity, F: Future<Output = Done<E>>> Shard<E, F> {
    /// Whether the lease still holds, looked at again before each message
    /// starts: the turn's look is not enough, because a process paused in
    /// the middle of a turn (kill -STOP) resumes there, and would go on
    /// through the rest of its batch after its lease ran out (the seeded
    /// faults test caught a frozen node handling a record 13 ms after it
    /// woke, before its fence timer had fired). A look is a coarse clock
    /// read and an atomic load; once the lease has run out, the renewal
    /// wakes the shard.
    pub(super) fn still_serving(&mut self, cx: &Context<'_>) -> bool {
        if self.serving && !self.lease.is_valid_or_wake(cx.waker()) {
            self.serving = false;
        }
        self.serving
    }

    /// A message for an entity: run it now, or queue it behind the
    /// entity's earlier ones.
    ///
    /// The common case, a known entity with nothing in hand whose handler
    /// finishes at once, is done here in one place: the entity is found once
    /// and goes back into the same slot of the map.
    pub(super) fn deliver(&mut self, env: Envelope<E>, cx: &mut Context<'_>) {
        if env.abandoned() {
            self.metrics.dropped_abandoned.increment(1);
            return;
        }
        if !self.still_serving(cx) {
            // Held until the lease holds again, or the hand-off the region
            // starts when it fences returns it.
            self.enqueue(env);
            return;
        }
        // A durable entity's message with nothing in hand starts at once
        // as well, but through `start_message`: it may be a record applied
        // already, and what it changes is kept.
        let durable = self.durable.is_some();
        let weighs = self.weighing.is_some();
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
                    } else if durable || env.reply.idempotency_key().is_some() {
                        After::Start(env)
                    } else {
                        let Some(entity) = active.entity.take() else {
                            unreachable!("an entity that is not busy is not in a run")
                        };
                        let (entity_id, job, kind) = Job::message(entity, env, *shard);
                        let mut kind = Some(kind);
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
                                        } else if weighs {
                                            After::Weigh(entity_id)
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
            After::Start(env) => {
                if let Some(env) = self.refuse_if_broken(env) {
                    let entity = self.take_entity(&env.entity_id);
                    self.start_message(entity, env, cx);
                }
            }
            After::Unknown(env) => self.deliver_new(env, cx),
            After::Waiting(id, cancel) => {
                self.busy.entry(id).or_default().running = Some(Some(cancel));
            }
            After::Passivate(id) => self.request_stop(&id, PassivationReason::Explicit, cx),
            After::Weigh(id) => self.weigh_active(&id),
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
        let Some(env) = self.refuse_if_broken(env) else {
            return;
        };
        match self.activate(&env.entity_id) {
            Ok(Activation::Ready) => {}
            Ok(Activation::Loading) => return self.enqueue(env),
            Err(reason) => {
                let error = self.entity_failed(&env.entity_id, reason);
                self.node.reply(env.reply, Err(error));
                return;
            }
        }
        if self.running < self.concurrency {
            let entity = self.take_entity(&env.entity_id);
            self.start_message(entity, env, cx);
        } else {
            self.enqueue(env);
        }
    }

    pub(super) fn enqueue(&mut self, env: Envelope<E>) {
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
}
