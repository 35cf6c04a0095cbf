//! A message sent so that the sender learns what became of it: handled
//! (with the handler's reply), failed in the handler, never delivered, or
//! unconfirmed. A Kafka source commits a record's offset only once its
//! delivery says it was handled (or the record was dead-lettered).
//!
//! No path can lose the outcome. The reply channel travels with the message
//! and is the finalizer: answered when the handler finishes, and when the
//! message is dropped anywhere (a full buffer, a shard stopped by force, a
//! refusal on another node) its drop or the drop's answer reports "not
//! delivered". A message a node took and then went away with is reported
//! unconfirmed, as is one with no answer within the deadline.

use super::Region;
use crate::entity::Entity;
use crate::error::AskError;
use std::time::Duration;

/// What became of a message sent with [`Region::deliver`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Delivery<R> {
    /// An entity handled it; this is the handler's reply.
    Handled(R),
    /// An entity's handler got it and failed or panicked (the entity was
    /// dropped), or its reply could not be decoded.
    Failed(String),
    /// It never reached a handler: refused (empty id, full buffer, stopped
    /// region) or dropped before an entity got it. Sending it again cannot
    /// make it handled twice.
    NotDelivered(String),
    /// It may or may not have been handled: no answer within the deadline,
    /// or the node that took it went away before confirming it. Under
    /// at-least-once, send it again.
    Unconfirmed(String),
}

impl<R> Delivery<R> {
    /// Whether an entity handled the message successfully.
    pub fn is_handled(&self) -> bool {
        matches!(self, Delivery::Handled(_))
    }
}

impl<R> From<Result<R, AskError>> for Delivery<R> {
    fn from(result: Result<R, AskError>) -> Self {
        match result {
            Ok(reply) => Delivery::Handled(reply),
            Err(e @ (AskError::EntityFailed(_) | AskError::Codec(_))) => {
                Delivery::Failed(e.to_string())
            }
            // Only a Kafka record's own delivery sees it.
            Err(
                e @ (AskError::Tell(_)
                | AskError::Dropped(_)
                | AskError::AlreadyApplied
                | AskError::PreviousLost),
            ) => Delivery::NotDelivered(e.to_string()),
            Err(e @ (AskError::Timeout(_) | AskError::Unconfirmed(_))) => {
                Delivery::Unconfirmed(e.to_string())
            }
        }
    }
}

impl<E: Entity> Region<E> {
    /// Sends a message as [`Self::ask`] does and says what became of it
    /// (see [`Delivery`]), within `timeout`: the step a Kafka source takes
    /// for each record before it may commit the record's offset.
    pub async fn deliver(
        &self,
        entity_id: &str,
        message: E::Message,
        timeout: Duration,
    ) -> Delivery<E::Reply> {
        self.ask(entity_id, message, timeout).await.into()
    }
}
