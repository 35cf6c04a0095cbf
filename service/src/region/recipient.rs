//! The receiving half of a region: where the transport hands envelopes
//! from other nodes (checked against this node's extractor and decoded
//! here), and how the node stops the region. The sending half, the
//! [`Region`](super::Region) handle, is what programs hold.

use super::command::shut_down;
use super::command::RegionCmd;
use super::shard::dropped;
use super::shared::Shared;
use crate::codec;
use crate::entity::Entity;
use crate::envelope::{Cause, Envelope, Origin, Reply, WireEnvelope};
use futures::future::BoxFuture;
use std::sync::Arc;
use tokio::sync::mpsc;

/// What became of an envelope received from another node.
pub(crate) enum Placed {
    /// Taken: in a shard mailbox, the buffer, or on its way to another node.
    Taken,
    /// Dropped, counted and logged, with its asker told why (it cannot be
    /// decoded, or names a shard the entity is not in).
    Dropped,
    /// The region has stopped: the sender keeps it and finds the new home.
    Refused,
}

/// A region as the node sees it: where the transport hands received
/// envelopes, and how the node stops it.
pub(crate) trait RegionRecipient: Send + Sync + 'static {
    /// Takes an envelope received from another node, without waiting.
    fn deliver(&self, env: WireEnvelope, credit: crate::credits::Credit) -> Placed;
    /// Refuses new messages (the node is dying).
    fn stop_accepting(&self);
    /// Hands off every shard and stops.
    fn shutdown(&self) -> BoxFuture<'_, ()>;
}

pub(super) struct ReceivingHalf<E: Entity> {
    pub(super) shared: Arc<Shared<E>>,
    pub(super) commands: mpsc::Sender<RegionCmd<E>>,
}

impl<E: Entity> RegionRecipient for ReceivingHalf<E> {
    fn deliver(&self, env: WireEnvelope, credit: crate::credits::Credit) -> Placed {
        let shared = &self.shared;
        let cause = match (env.origin, env.idempotency_key) {
            (Some(origin), _) => Some(Box::new(Cause::Record(Origin::from_wire(origin)))),
            (None, Some(key)) => Some(Box::new(Cause::Keyed(Arc::from(key)))),
            (None, None) => None,
        };
        let reply = env
            .reply_to
            .map_or(Reply::None, |to| Reply::Remote(Box::new(to), cause));
        // From the wire: the shard must be the one this node's extractor
        // gives the entity, or the two nodes disagree on where it lives.
        let expected = shared.extractor.shard_id(&env.entity_id);
        let checked = if env.shard == expected {
            codec::decode::<E::Message>(&env.payload).map_err(|e| {
                let reason = format!("cannot be decoded: {}", e.0);
                (&shared.metrics.dropped_bad_payload, reason)
            })
        } else {
            let reason = format!(
                "names shard {} but this node places entity {:?} in shard {expected}",
                env.shard, env.entity_id
            );
            Err((&shared.metrics.dropped_wrong_shard, reason))
        };
        let message = match checked {
            Ok(message) => message,
            Err((counter, reason)) => {
                counter.increment(1);
                tracing::warn!(entity_type = %shared.entity_type.name, entity_id = %env.entity_id, shard = %env.shard, %reason, "message received from another node dropped");
                dropped(
                    reply,
                    &shared.node,
                    &format!("the receiving node refused it: the message {reason}"),
                );
                return Placed::Dropped;
            }
        };
        let contact = shared.contact.view();
        let envelope = Envelope {
            entity_id: env.entity_id,
            shard: env.shard,
            message,
            reply,
            credit: Some(credit),
            received: true,
            delayed: env.delayed || contact.fenced,
        };
        match shared.routes.place(envelope, contact.registered) {
            Ok(()) => Placed::Taken,
            Err(_) => Placed::Refused,
        }
    }

    fn stop_accepting(&self) {
        self.shared.routes.stop();
        self.shared.metrics.hosted_shards.set(0.0);
    }

    fn shutdown(&self) -> BoxFuture<'_, ()> {
        Box::pin(shut_down(&self.commands))
    }
}
