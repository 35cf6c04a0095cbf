//! What a shard's mailbox and a remote node's outbound queue carry, and the
//! mark of code that runs inside a shard task. Both the routing table
//! (which sends) and the shard task (which receives) speak of them, so they
//! live apart from either.

use crate::entity::Entity;
use crate::envelope::Envelope;
use std::collections::VecDeque;
use tokio::sync::oneshot;

/// What goes into a shard's mailbox or a remote node's outbound queue.
pub(crate) enum Mail<E: Entity> {
    One(Envelope<E>),
    /// A flushed buffer: one mailbox slot, so a flush never waits for room.
    Batch(VecDeque<Envelope<E>>),
    /// Stop the shard after the messages before it (shards only).
    HandOff,
    /// Answer the queries waiting in the shard's signals with the ids of
    /// the live entities (shards only).
    Query,
    /// Answered once everything before it has been handled (shard) or has
    /// reached the remote node (outbound).
    Barrier(oneshot::Sender<()>),
    /// The shard's share of the region's active-entity limit (shards only).
    SetLimit(usize),
    /// An idle-check interval passed (shards only).
    IdleTick,
}

tokio::task_local! {
    /// Set for the whole shard task: what runs there runs in an entity
    /// handler, where waiting for a full mailbox must be bounded.
    pub(crate) static IN_SHARD: ();
}

/// Whether this code runs inside a shard task, i.e. in an entity handler.
pub(crate) fn in_handler() -> bool {
    IN_SHARD.try_with(|_| ()).is_ok()
}
