//! What a sender sees when a message cannot be accepted or answered.

use serde::{Deserialize, Serialize};
use std::time::Duration;

/// Why a `tell` was refused. A refused message was not accepted: nothing
/// about it is left in the cluster.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, Serialize, Deserialize)]
pub enum TellError {
    /// The region's buffer for messages without a known shard home is full.
    #[error("region buffer of entity type {entity_type:?} is full ({limit} messages)")]
    BufferFull {
        /// The entity type.
        entity_type: String,
        /// `buffer_size`.
        limit: usize,
    },
    /// A tell made inside an entity handler found the target's mailbox full
    /// for `handler_tell_timeout`. Handlers do not wait longer: the target
    /// may be waiting for the very shard the handler runs in.
    #[error("mailbox of a shard of entity type {entity_type:?} stayed full for {waited:?}")]
    MailboxFull {
        /// The entity type.
        entity_type: String,
        /// How long the tell waited.
        waited: Duration,
    },
    /// The entity id is empty.
    #[error("entity id must not be empty")]
    EmptyEntityId,
    /// The region has shut down.
    #[error("region of entity type {0:?} has stopped")]
    RegionStopped(String),
    /// A node received the message from another node while its coordinator
    /// did not answer, and could not buffer it; the sending node keeps it.
    #[error("region of entity type {0:?} cannot reach its coordinator")]
    CoordinatorUnreachable(String),
    /// The message could not be encoded for a remote node.
    #[error("message could not be encoded: {0}")]
    Codec(String),
    /// A Kafka record's shard is not on this node, whose partition it came
    /// from: it is handled only there (the partition's next owner consumes
    /// it again otherwise).
    #[error("the shard of a Kafka record of entity type {0:?} is not on this node")]
    NotHere(String),
    /// A tell's idempotency key is empty or longer than
    /// [`MAX_IDEMPOTENCY_KEY`] bytes.
    #[error("invalid idempotency key: {0}")]
    InvalidIdempotencyKey(String),
}

/// The longest idempotency key, in bytes: each is kept with its entity's
/// state and written at every change of it.
pub const MAX_IDEMPOTENCY_KEY: usize = 256;

/// Refuses a key that is empty or too long, saying which.
pub(crate) fn check_idempotency_key(key: &str) -> Result<(), TellError> {
    if key.is_empty() {
        return Err(TellError::InvalidIdempotencyKey(
            "it must not be empty".into(),
        ));
    }
    if key.len() > MAX_IDEMPOTENCY_KEY {
        return Err(TellError::InvalidIdempotencyKey(format!(
            "it is {} bytes, at most {MAX_IDEMPOTENCY_KEY}",
            key.len()
        )));
    }
    Ok(())
}

/// Why an `ask` got no reply.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, Serialize, Deserialize)]
pub enum AskError {
    /// The message was refused.
    #[error(transparent)]
    Tell(#[from] TellError),
    /// No reply within the timeout. The message may still be handled.
    #[error("no reply within {0:?}")]
    Timeout(Duration),
    /// The entity's handler failed or panicked; the entity was dropped.
    #[error("entity failed: {0}")]
    EntityFailed(String),
    /// The message was dropped before an entity handled it (its shard was
    /// stopped by force, or its node disappeared).
    #[error("message was dropped: {0}")]
    Dropped(String),
    /// The reply could not be decoded.
    #[error("reply could not be decoded: {0}")]
    Codec(String),
    /// A node took the message and went away before confirming it: it may
    /// or may not have been handled.
    #[error("message unconfirmed: {0}")]
    Unconfirmed(String),
    /// A Kafka record its durable entity had applied already (consumed
    /// again after a crash or a rebalance): skipped, not applied twice.
    #[error("record applied already")]
    AlreadyApplied,
    /// A Kafka record whose key's previous record in its partition is not
    /// in its entity's state: that one was handled by a start of the shard
    /// that ended before writing it. Not applied: its partition is
    /// consumed again from its committed offset, the lost record with it.
    #[error("its key's previous record in the partition is not in the entity's state (lost with the start of its shard that handled it)")]
    PreviousLost,
}

/// The reply to a routed message: its reply channel is the finalizer, so
/// one dropped unanswered (anywhere) means the message was not handled.
pub(crate) async fn replied<R>(
    reply: tokio::sync::oneshot::Receiver<Result<R, AskError>>,
) -> Result<R, AskError> {
    reply.await.map_err(|_| unanswered())?
}

/// What a reply channel dropped unanswered means.
pub(crate) fn unanswered() -> AskError {
    AskError::Dropped("the message was dropped before it was handled".into())
}

/// An inspection query got no answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QueryError {
    /// No answer within the timeout.
    #[error("no answer within {0:?}")]
    Timeout(Duration),
    /// The query needs the coordinator, which does not answer this region
    /// now.
    #[error("coordinator unreachable")]
    CoordinatorUnreachable,
    /// The region has stopped.
    #[error("region has stopped")]
    Stopped,
}
