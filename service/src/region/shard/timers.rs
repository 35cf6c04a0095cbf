//! A durable shard's timers come due: each brings its message to its
//! entity, started again if it was passivated, as an acked message of the
//! shard's own, whose outcome the shard learns (see `durable/timers.rs`
//! for the index they are read from).

use super::durable::{Fired, Firing};
use super::runs::Done;
use super::{Phase, Shard};
use crate::entity::{Entity, EntityId};
use crate::envelope::{AckedAnswer, Cause, Envelope, Reply};
use crate::error::AskError;
use colo_state::TimerKey;
use std::future::Future;
use std::task::Context;
use tokio::sync::oneshot;

/// The most timers one turn of the shard fires.
const MOST_PER_TURN: usize = 1024;

impl<E: Entity, F: Future<Output = Done<E>>> Shard<E, F> {
    /// Fires the timers due now, while the shard serves and has room for
    /// their messages; whether anything happened.
    pub(super) fn poll_timers(&mut self, cx: &mut Context<'_>) -> bool {
        if !self.serving || !matches!(self.phase, Phase::Active) {
            return false;
        }
        let room = self.custody.saturating_sub(self.queued).min(MOST_PER_TURN);
        let Some(durable) = self.durable.as_mut() else {
            return false;
        };
        if durable.timers.is_quiet() {
            return false;
        }
        let now = crate::clock::unix_ms();
        let (progressed, due) = durable.due_timers(now, room, cx);
        // An outbox's entry found: the shard goes round once more to read
        // its record.
        let found = !due.is_empty();
        for (key, message) in due {
            self.fire(key, &message, now, cx);
        }
        progressed || found
    }

    fn fire(&mut self, key: TimerKey, message: &[u8], now: u64, cx: &mut Context<'_>) {
        let Some(durable) = self.durable.as_mut() else {
            return;
        };
        if key.is_outbox() {
            durable.outbox.found(EntityId::from(key.entity_id.as_str()));
            return;
        }
        let decoded = match postcard::from_bytes::<E::Message>(message) {
            Ok(decoded) => decoded,
            Err(e) => {
                // Checked when it was scheduled: the entity type's messages
                // changed since. The timer stays in its entity's record.
                tracing::error!(entity_type = %self.entity_type.name, shard = %self.id, entity_id = %key.entity_id, timer = %key.name, error = %e, "a due timer's message is not a message of this entity type any more; it is not fired");
                durable.timers.metrics.failed.increment(1);
                return;
            }
        };
        let (tx, rx) = oneshot::channel::<AckedAnswer<E::Reply>>();
        let env = Envelope {
            entity_id: EntityId::from(key.entity_id.as_str()),
            shard: self.id,
            message: decoded,
            reply: Reply::Acked(tx, Some(Box::new(Cause::Timer(key.clone())))),
            credit: None,
            received: false,
            delayed: false,
        };
        let lateness = now.saturating_sub(key.due);
        let message = message.to_vec();
        let firing: Firing = Box::pin(async move {
            let fired = match rx.await {
                Ok(AckedAnswer { result: Ok(_), .. }) => Fired::Applied,
                Ok(AckedAnswer {
                    result: Err(AskError::AlreadyApplied),
                    ..
                }) => Fired::Stale,
                Ok(_) => Fired::Failed,
                Err(_) => Fired::Dropped,
            };
            (key, message, fired)
        });
        durable.fired(firing, lateness);
        self.deliver(env, cx);
    }
}
