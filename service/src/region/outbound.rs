//! The queue of messages from one region to another node: one task per
//! destination, so per-sender order holds, batching whatever has piled up.

use super::command::RegionCmd;
use super::mail::Mail;
use crate::codec;
use crate::entity::Entity;
use crate::envelope::{Envelope, Origin, Reply, ReplyTo, WireEnvelope};
use crate::error::AskError;
use crate::mailbox::{Consumer, Mailbox};
use crate::metrics::RegionMetrics;
use crate::node_context::NodeContext;
use crate::transport::TransportError;
use colo_allocation::RegionId;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};

/// Capacity of an outbound queue, in mails (a mail may be a whole flushed
/// buffer). Senders wait when the remote node falls this far behind.
pub(crate) const OUTBOUND_CAPACITY: usize = 1024;

/// The most envelopes sent in one batch: bounds the size of one transfer.
const MAX_BATCH: usize = 512;

/// What an outbound task towards one node is given by its region.
pub(crate) struct Outbound<E: Entity> {
    pub to: RegionId,
    /// Tells this queue apart from earlier ones to the same node.
    pub serial: u64,
    pub entity_type: Arc<str>,
    pub node: Arc<NodeContext>,
    pub metrics: RegionMetrics,
    pub region: mpsc::Sender<RegionCmd<E>>,
    /// A batch the node has not confirmed after this long (the region
    /// timeout) makes the region stop routing there while the batch's fate
    /// is found out (see `deliver`).
    pub silent_after: Duration,
    /// Once set, nothing more is sent: all the queue holds goes back.
    pub give_back: Arc<AtomicBool>,
}

/// Starts the outbound task.
pub(crate) fn start<E: Entity>(outbound: Outbound<E>) -> Arc<Mailbox<Mail<E>>> {
    let Outbound {
        to,
        serial,
        entity_type,
        node,
        metrics,
        region,
        silent_after,
        give_back,
    } = outbound;
    let sink = Arc::new(Mailbox::new(OUTBOUND_CAPACITY));
    let queue = Consumer(sink.clone());
    let task_node = node.clone();
    node.tasks.spawn(async move {
        let node = task_node;
        let mut failed = false;
        let mut mails = VecDeque::new();
        while queue.0.recv_all(&mut mails).await {
            let mut envelopes = Vec::new();
            let mut barriers = Vec::new();
            for mail in mails.drain(..) {
                collect(mail, &mut envelopes, &mut barriers);
            }
            let mut undelivered = Vec::new();
            if failed {
                undelivered = envelopes;
            } else {
                while !envelopes.is_empty() {
                    if give_back.load(Ordering::Acquire) {
                        undelivered.append(&mut envelopes);
                        break;
                    }
                    let rest = envelopes.split_off(envelopes.len().min(MAX_BATCH));
                    let mut chunk = std::mem::replace(&mut envelopes, rest);
                    let wire = encode_batch(&entity_type, &node, &metrics, &mut chunk);
                    let delivery = deliver(&to, serial, &node, wire, &region, silent_after);
                    match delivery.await {
                        Ok(()) => {}
                        Err(TransportError::Unconfirmed(_)) => {
                            // The node may or may not have taken them: sent
                            // elsewhere they could be handled twice, so they
                            // are dropped, counted, and their askers told.
                            unconfirmed(&to, &node, &metrics, chunk);
                            failed = true;
                            undelivered.append(&mut envelopes);
                        }
                        Err(e) => {
                            let accepted = match e {
                                TransportError::Refused { accepted, .. } => accepted,
                                _ => 0,
                            };
                            tracing::warn!(node = %to, error = %e, "remote region unreachable; messages go back to the buffer");
                            failed = true;
                            undelivered = chunk.split_off(accepted.min(chunk.len()));
                            undelivered.append(&mut envelopes);
                        }
                    }
                }
            }
            if !undelivered.is_empty() {
                let cmd = RegionCmd::Undeliverable {
                    to: to.clone(),
                    serial,
                    envelopes: undelivered,
                };
                if region.send(cmd).await.is_err() {
                    return;
                }
            }
            for barrier in barriers {
                let _ = barrier.send(());
            }
        }
        // Closed by the region and emptied: nothing more comes back.
        let _ = region.send(RegionCmd::OutboundClosed { to, serial }).await;
    });
    sink
}

/// Delivers one batch. Past `silent_after` without an answer the node is
/// unreachable (or too busy to take anything): the region is told at once,
/// with nothing given back, so that it stops routing there and holds the
/// node's shards (new messages wait in its buffer) until this batch's fate
/// is known: taken, given back, or gone with a node that left.
async fn deliver<E: Entity>(
    to: &RegionId,
    serial: u64,
    node: &NodeContext,
    wire: Vec<crate::envelope::WireEnvelope>,
    region: &mpsc::Sender<RegionCmd<E>>,
    silent_after: Duration,
) -> Result<(), TransportError> {
    let delivery = node.transport.deliver(to, wire);
    tokio::pin!(delivery);
    tokio::select! {
        result = &mut delivery => return result,
        () = tokio::time::sleep(silent_after) => {}
    }
    let silent = RegionCmd::Undeliverable {
        to: to.clone(),
        serial,
        envelopes: Vec::new(),
    };
    let _ = region.send(silent).await;
    delivery.await
}

/// Envelopes a node went away with before confirming them.
fn unconfirmed<E: Entity>(
    to: &RegionId,
    node: &NodeContext,
    metrics: &RegionMetrics,
    envelopes: Vec<Envelope<E>>,
) {
    tracing::warn!(node = %to, messages = envelopes.len(), "node went away before confirming messages; they may or may not have been handled, and are not sent again");
    metrics
        .dropped_unconfirmed
        .increment(envelopes.len() as u64);
    for env in envelopes {
        node.reply(
            env.reply,
            Err(AskError::Unconfirmed(format!(
                "node {to} went away before confirming the message; it may or may not have been handled"
            ))),
        );
    }
}

fn collect<E: Entity>(
    mail: Mail<E>,
    envelopes: &mut Vec<Envelope<E>>,
    barriers: &mut Vec<oneshot::Sender<()>>,
) {
    match mail {
        Mail::One(env) => envelopes.push(env),
        Mail::Batch(batch) => envelopes.extend(batch),
        Mail::Barrier(done) => barriers.push(done),
        // Only shards are handed off or queried.
        Mail::HandOff | Mail::SetLimit(_) | Mail::IdleTick | Mail::Query => {}
    }
}

/// Encodes envelopes for the wire. A local ask's reply channel is parked in
/// the node's table and the envelope now points there, so it still works if
/// the envelope comes back undelivered and is routed again. An envelope that
/// cannot be encoded is answered with the error and dropped, and a Kafka
/// record its partition gave up on is dropped (it is consumed again).
fn encode_batch<E: Entity>(
    entity_type: &str,
    node: &NodeContext,
    metrics: &RegionMetrics,
    envelopes: &mut Vec<Envelope<E>>,
) -> Vec<WireEnvelope> {
    let mut wire = Vec::with_capacity(envelopes.len());
    envelopes.retain_mut(|env| {
        if env.abandoned() {
            metrics.dropped_abandoned.increment(1);
            return false;
        }
        if env.local_only() {
            // Its shard left this node, taking the record's partition: the
            // partition's next owner consumes it again.
            let reply = std::mem::replace(&mut env.reply, Reply::None);
            node.reply(
                reply,
                Err(AskError::Tell(crate::error::TellError::NotHere(
                    entity_type.to_string(),
                ))),
            );
            return false;
        }
        let payload = match codec::encode(&env.message) {
            Ok(p) => p,
            Err(e) => {
                let reply = std::mem::replace(&mut env.reply, Reply::None);
                node.reply(
                    reply,
                    Err(AskError::Tell(crate::error::TellError::Codec(e.0))),
                );
                return false;
            }
        };
        if let Reply::Local(..) = env.reply {
            if let Reply::Local(tx, cause) = std::mem::replace(&mut env.reply, Reply::None) {
                let correlation = node.pending.register(tx);
                let to = ReplyTo {
                    node: node.id.clone(),
                    incarnation: node.incarnation,
                    correlation,
                };
                env.reply = Reply::Remote(Box::new(to), cause);
            }
        }
        let reply_to = match &env.reply {
            Reply::Remote(to, _) => Some((**to).clone()),
            _ => None,
        };
        wire.push(WireEnvelope {
            entity_type: entity_type.to_string(),
            entity_id: env.entity_id.clone(),
            shard: env.shard,
            payload,
            reply_to,
            delayed: env.delayed,
            origin: env.origin().map(Origin::to_wire),
            idempotency_key: env.reply.idempotency_key().map(|key| key.to_string()),
        });
        true
    });
    wire
}
