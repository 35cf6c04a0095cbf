//! A durable shard's answers: at once when what they answer needs no
//! write, else held until the write that makes it durable.

use super::DurableShard;
use crate::entity::{Entity, EntityId};
use crate::envelope::{AckedAnswer, Reply};
use crate::error::AskError;
use crate::node_context::NodeContext;
use std::sync::Arc;

/// Whether an answer waits for the write that holds its entity's unwritten
/// state: an ask's that the state answers, a change or a Kafka record
/// skipped as applied already (the skip rests on that state: a record
/// acked on it would be lost with it). A Kafka record of its partition's
/// own shard is answered at once: its partition waits for the write
/// itself, naming the start.
/// `unwritten` is asked last: a record's answer, the most frequent, needs
/// no look-up of its entity's unwritten state.
pub(super) fn waits_for_write<R>(
    reply: &Reply<R>,
    result: &Result<R, AskError>,
    unwritten: impl FnOnce() -> bool,
) -> bool {
    let answered_by_state = matches!(result, Ok(_) | Err(AskError::AlreadyApplied));
    matches!(reply, Reply::Local(..) | Reply::Remote(..)) && answered_by_state && unwritten()
}

impl<E: Entity> DurableShard<E> {
    /// Answers a message to entity `id`: at once when none of its state
    /// waits to be written, else once the write that holds it is durable.
    /// A record's reply goes at once: its partition waits for the write
    /// itself (it must know the outcome to go on with the record's key).
    pub fn answer(
        &mut self,
        node: &NodeContext,
        id: &EntityId,
        reply: Reply<E::Reply>,
        result: Result<E::Reply, AskError>,
    ) {
        let unwritten = || self.unwritten(id).is_some();
        if waits_for_write(&reply, &result, unwritten) {
            self.held.push((reply, result));
        } else {
            self.answer_now(node, reply, result);
        }
    }

    /// Sends an answer now; a record's says which start of the shard
    /// handled it (see [`AckedAnswer`]).
    pub fn answer_now(
        &self,
        node: &NodeContext,
        reply: Reply<E::Reply>,
        result: Result<E::Reply, AskError>,
    ) {
        match reply {
            Reply::Acked(tx, _) => {
                let _ = tx.send(AckedAnswer {
                    result,
                    start: Some(Arc::downgrade(&self.durability)),
                });
            }
            reply => node.reply(reply, result),
        }
    }
}
