//! A shard's handler runs: one entity handling one message (or its stop
//! message) is a future that owns the entity while it runs, so different
//! entities of a shard can await I/O side by side while the shard task
//! keeps taking mail.
//!
//! Most handlers finish without waiting. A run is therefore written into a
//! reused, pinned slot and polled once at once: when it finishes there, the
//! slot is kept for the next run and no allocation happens. Only a run that
//! waits keeps its slot and joins the set of pending runs.

use crate::entity::{Entity, EntityContext, EntityId};
use crate::envelope::{Envelope, Reply};
use colo_allocation::ShardId;
use colo_passivation::PassivationReason;
use futures::stream::FuturesUnordered;
use futures::task::AtomicWaker;
use futures::FutureExt;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

/// What a run is for, kept beside its future so that a cancelled run can
/// still answer its sender.
pub(crate) enum Kind<R> {
    /// A message; the reply goes where its sender waits.
    Message(Reply<R>),
    /// The entity's stop message, for this reason.
    Stop(PassivationReason),
}

/// What a run needs: the entity moves in and comes back in [`Done`].
/// Deadlines (a stop message's, a hand-off's) are kept by the shard, which
/// cancels a run that passes one: the run itself holds no timer, so that
/// the common run, a handler that finishes at once, stays small to move.
pub(crate) struct Job<E: Entity> {
    pub ctx: EntityContext,
    pub entity: E,
    pub message: E::Message,
}

impl<E: Entity> Job<E> {
    /// `entity`'s run of the message `env` carries, in `shard`, with the
    /// entity's id: the
    /// envelope leaves custody (its credit returned, so its sender may send
    /// more), and its reply goes with the run.
    pub fn message(
        entity: E,
        env: Envelope<E>,
        shard: ShardId,
    ) -> (EntityId, Self, Kind<E::Reply>) {
        let Envelope {
            entity_id,
            message,
            reply,
            credit,
            delayed,
            ..
        } = env;
        drop(credit);
        let job = Job {
            ctx: EntityContext::with_delay(entity_id.clone(), shard, delayed),
            entity,
            message,
        };
        (entity_id, job, Kind::Message(reply))
    }
}

/// How a handler ended.
pub(crate) enum Outcome<R> {
    Replied(R),
    /// It returned an error or panicked.
    Failed(String),
}

/// A finished run: the entity is back.
pub(crate) struct Done<E: Entity> {
    pub ctx: EntityContext,
    pub entity: E,
    pub outcome: Outcome<E::Reply>,
}

/// The one future type of a shard's runs.
pub(crate) async fn run<E: Entity>(job: Job<E>) -> Done<E> {
    let Job {
        ctx,
        mut entity,
        message,
    } = job;
    let outcome = match AssertUnwindSafe(entity.handle(&ctx, message))
        .catch_unwind()
        .await
    {
        Ok(Ok(reply)) => Outcome::Replied(reply),
        Ok(Err(e)) => Outcome::Failed(e.0),
        Err(panic) => Outcome::Failed(panic_message(&panic)),
    };
    Done {
        ctx,
        entity,
        outcome,
    }
}

pub(crate) fn panic_message(panic: &Box<dyn std::any::Any + Send>) -> String {
    if let Some(s) = panic.downcast_ref::<&str>() {
        format!("panicked: {s}")
    } else if let Some(s) = panic.downcast_ref::<String>() {
        format!("panicked: {s}")
    } else {
        "panicked".to_string()
    }
}

/// Stops a waiting run: its future (and the entity inside) is dropped the
/// next time the shard polls its runs.
#[derive(Clone, Default)]
pub(crate) struct Cancel(Arc<CancelState>);

#[derive(Default)]
struct CancelState {
    cancelled: AtomicBool,
    waker: AtomicWaker,
}

impl Cancel {
    pub fn cancel(&self) {
        self.0.cancelled.store(true, Ordering::Release);
        self.0.waker.wake();
    }
}

type Slot<F> = Pin<Box<F>>;

/// A run that waited: its slot, and what answers its sender.
struct InFlight<E: Entity, F> {
    slot: Option<Slot<F>>,
    rest: Option<(EntityId, Kind<E::Reply>)>,
    cancel: Cancel,
}

// The future sits in its own box and is never projected, so the wrapper
// can move freely whatever the reply type is.
impl<E: Entity, F> Unpin for InFlight<E, F> {}

/// A run that ended after waiting; `done` is `None` when it was cancelled
/// (its entity is gone with it).
pub(crate) struct Ended<E: Entity> {
    pub id: EntityId,
    pub kind: Kind<E::Reply>,
    pub done: Option<Done<E>>,
}

impl<E: Entity, F: Future<Output = Done<E>>> Future for InFlight<E, F> {
    type Output = Ended<E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        this.cancel.0.waker.register(cx.waker());
        let Some(slot) = this.slot.as_mut() else {
            // FuturesUnordered never polls a future again once it is ready.
            return Poll::Pending;
        };
        let done = if this.cancel.0.cancelled.load(Ordering::Acquire) {
            // Dropping the slot drops the run, and the entity inside.
            this.slot = None;
            None
        } else {
            match slot.as_mut().poll(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(done) => Some(done),
            }
        };
        let Some((id, kind)) = this.rest.take() else {
            unreachable!("a run ends once")
        };
        Poll::Ready(Ended { id, kind, done })
    }
}

/// The runs of one shard.
pub(crate) struct Runs<E: Entity, F> {
    make: fn(Job<E>) -> F,
    /// The slot of the last run that finished at once, kept for the next:
    /// its finished future is dropped when the next one is written over it.
    spare: Option<Slot<F>>,
    pending: FuturesUnordered<InFlight<E, F>>,
}

impl<E: Entity, F: Future<Output = Done<E>>> Runs<E, F> {
    pub fn new(make: fn(Job<E>) -> F) -> Self {
        Self {
            make,
            spare: None,
            pending: FuturesUnordered::new(),
        }
    }

    /// Starts a run of entity `id` and polls it once with the shard task's
    /// context. `Ok` when it finished at once (`kind` stays with the
    /// caller); `Err` with its cancel handle when it waits (`kind` goes with
    /// the run and comes back in [`Ended`]).
    #[inline]
    pub fn start(
        &mut self,
        id: &EntityId,
        job: Job<E>,
        kind: &mut Option<Kind<E::Reply>>,
        cx: &mut Context<'_>,
    ) -> Result<Done<E>, Cancel> {
        let run = (self.make)(job);
        let mut slot = match self.spare.take() {
            Some(mut slot) => {
                slot.as_mut().set(run);
                slot
            }
            None => Box::pin(run),
        };
        match slot.as_mut().poll(cx) {
            Poll::Ready(done) => {
                self.spare = Some(slot);
                Ok(done)
            }
            Poll::Pending => {
                let cancel = Cancel::default();
                let Some(kind) = kind.take() else {
                    unreachable!("a run starts with what answers its sender")
                };
                self.pending.push(InFlight {
                    slot: Some(slot),
                    rest: Some((id.clone(), kind)),
                    cancel: cancel.clone(),
                });
                Err(cancel)
            }
        }
    }

    /// The next run that ended after waiting, if any has.
    pub fn poll_ended(&mut self, cx: &mut Context<'_>) -> Poll<Option<Ended<E>>> {
        use futures::StreamExt;
        self.pending.poll_next_unpin(cx)
    }

    /// Drops every waiting run (their entities with them) and returns what
    /// answers their senders.
    pub fn abort_all(&mut self) -> Vec<(EntityId, Kind<E::Reply>)> {
        std::mem::take(&mut self.pending)
            .into_iter()
            .filter_map(|mut run| run.rest.take())
            .collect()
    }
}
