//! The server end of other nodes' Links: batches go to this node's regions
//! in the order they arrive, without waiting on any shard; replies go to
//! the asks waiting here at once.
//!
//! One Link per sending node is served at a time: a sender that opens a new
//! Link (the last one broke) gets the old one stopped first, so the two
//! never route side by side. Per sender incarnation the receiver remembers
//! the highest sequence number it accepted, and skips what a resent batch
//! repeats: an envelope is taken at most once. It also returns the
//! sender's flow-control credit as envelopes leave its custody.
//!
//! When one of the node's regions fences itself, the node starts a new
//! inbound epoch: every Link is stopped, and nothing sent in an earlier
//! epoch is taken any more. A sender may have given up on such a batch
//! during the outage and sent newer messages to the shard's new home; the
//! batch's bytes may still sit in the network (a paused peer, a held
//! connection). Taken late, it would reach its entity behind those newer
//! messages. Instead the sender learns, when it is welcomed into the new
//! epoch, how much was taken, and routes the rest again itself.

use super::convert;
use super::members::Members;
use crate::credits::Credits;
use crate::tasks::TaskSet;
use crate::transport::tls::{check_node, ConnectionInfo};
use crate::transport::{Recipient, Sender};
use colo_allocation::RegionId;
use colo_proto::v1 as pb;
use parking_lot::{Mutex, RwLock};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use tokio::sync::{mpsc, oneshot};
use tokio_stream::wrappers::UnboundedReceiverStream;
use tonic::{Request, Response, Status, Streaming};

/// Where received traffic goes: set when the node attaches, cleared when it
/// detaches (then every Link is refused and senders find the node gone).
pub type RecipientSlot = Arc<RwLock<Option<Arc<dyn Recipient>>>>;

/// What the receiver remembers of one sender incarnation across its Links.
struct SenderState {
    sender: Sender,
    /// The highest sequence number taken (or refused) so far.
    accepted_through: Mutex<u64>,
}

/// The Link being served for a sending node: a serial, so that a Link that
/// ends does not unregister its successor; how to stop it; and what says it
/// has stopped.
struct Serving {
    serial: u64,
    stop: oneshot::Sender<()>,
    stopped: oneshot::Receiver<()>,
}

/// The Link served for each sending node, and what is remembered of each
/// sender.
pub(crate) struct Senders {
    serving: HashMap<RegionId, Serving>,
    known: HashMap<RegionId, Arc<SenderState>>,
    /// The node's inbound epoch; starts at 1 (0 in a Hello means none).
    epoch: Arc<AtomicU64>,
}

impl Default for Senders {
    fn default() -> Self {
        Self {
            serving: HashMap::new(),
            known: HashMap::new(),
            epoch: Arc::new(AtomicU64::new(1)),
        }
    }
}

impl Senders {
    /// Starts a new inbound epoch and stops every Link served: each sender
    /// opens a new one and is told what was taken.
    /// Returns once no batch of an earlier epoch is being taken: what was
    /// taken before is with the node's regions then.
    pub fn fence(&mut self) {
        self.epoch.fetch_add(1, Ordering::AcqRel);
        for (_, serving) in self.serving.drain() {
            let _ = serving.stop.send(());
        }
        // A batch is taken under its sender's lock, after checking the
        // epoch.
        for state in self.known.values() {
            drop(state.accepted_through.lock());
        }
    }
}

/// The `colo.v1.Node` service.
pub struct NodeService {
    local: RegionId,
    inbound: RecipientSlot,
    incarnation: u64,
    senders: Arc<Mutex<Senders>>,
    members: Arc<Members>,
    next: Arc<AtomicU64>,
    tasks: Arc<TaskSet>,
}

impl std::fmt::Debug for NodeService {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeService").finish_non_exhaustive()
    }
}

impl NodeService {
    pub(crate) fn new(
        local: RegionId,
        inbound: RecipientSlot,
        incarnation: u64,
        senders: Arc<Mutex<Senders>>,
        members: Arc<Members>,
        tasks: Arc<TaskSet>,
    ) -> Self {
        Self {
            local,
            inbound,
            incarnation,
            senders,
            members,
            next: Arc::default(),
            tasks,
        }
    }
}

type Answers = mpsc::UnboundedSender<Result<pb::LinkAnswer, Status>>;

#[tonic::async_trait]
impl pb::node_server::Node for NodeService {
    type LinkStream = UnboundedReceiverStream<Result<pb::LinkAnswer, Status>>;

    async fn link(
        &self,
        request: Request<Streaming<pb::LinkFrame>>,
    ) -> Result<Response<Self::LinkStream>, Status> {
        if self.inbound.read().is_none() {
            return Err(Status::unavailable("node is not serving"));
        }
        // Answers are bounded by the sender's window (acks) and coalesced
        // (credit); unbounded so that answering never waits while frames
        // must be read.
        let (answers, rx) = mpsc::unbounded_channel();
        let link = Link {
            local: self.local.clone(),
            slot: self.inbound.clone(),
            incarnation: self.incarnation,
            senders: self.senders.clone(),
            members: self.members.clone(),
            serial: self.next.fetch_add(1, Ordering::Relaxed),
            answers,
            connection: request.extensions().get::<ConnectionInfo>().cloned(),
        };
        self.tasks.spawn(link.run(request.into_inner()));
        Ok(Response::new(UnboundedReceiverStream::new(rx)))
    }
}

struct Link {
    local: RegionId,
    slot: RecipientSlot,
    incarnation: u64,
    senders: Arc<Mutex<Senders>>,
    members: Arc<Members>,
    serial: u64,
    answers: Answers,
    /// What the TLS handshake proved of the sender, if it was TLS.
    connection: Option<ConnectionInfo>,
}

impl Link {
    /// Waits for Hello, stops the sender's previous Link, then serves until
    /// the stream ends or a newer Link of the sender stops this one.
    async fn run(self, mut frames: Streaming<pb::LinkFrame>) {
        let hello = match frames.message().await {
            Ok(Some(pb::LinkFrame {
                frame: Some(pb::link_frame::Frame::Hello(hello)),
            })) if !hello.node.is_empty() => hello,
            Ok(Some(_)) => {
                let refusal = Status::invalid_argument("the first frame must be hello with a node");
                let _ = self.answers.send(Err(refusal));
                return;
            }
            Ok(None) | Err(_) => return,
        };
        if let Err(refusal) = check_node(self.connection.as_ref(), &hello.node) {
            let _ = self.answers.send(Err(refusal));
            return;
        }
        let node = RegionId::new(hello.node);
        if !self.members.contains(&node) {
            tracing::debug!(%node, "link refused: no coordinator of this node lists the sender");
            let refusal = Status::failed_precondition(format!(
                "{node} is not a registered node of any entity type {} runs",
                self.local
            ));
            let _ = self.answers.send(Err(refusal));
            return;
        }
        let sender = Sender {
            node: node.clone(),
            incarnation: hello.incarnation,
        };
        let (stop, stopping) = oneshot::channel();
        let (_stopped, stopped) = oneshot::channel::<()>();
        let (state, previous, epoch) = {
            let mut all = self.senders.lock();
            let epoch = Epoch {
                current: all.epoch.clone(),
                served: all.epoch.load(Ordering::Acquire),
            };
            let state = match all.known.get(&node) {
                Some(state) if state.sender == sender => state.clone(),
                // A new incarnation of the node: it numbers from scratch.
                _ => {
                    let state = Arc::new(SenderState {
                        sender,
                        accepted_through: Mutex::new(0),
                    });
                    all.known.insert(node.clone(), state.clone());
                    state
                }
            };
            let serving = Serving {
                serial: self.serial,
                stop,
                stopped,
            };
            (state, all.serving.insert(node.clone(), serving), epoch)
        };
        if let Some(previous) = previous {
            let _ = previous.stop.send(());
            // Resolves when the previous Link's `_stopped` is dropped.
            let _ = previous.stopped.await;
        }
        tokio::select! {
            () = self.serve_frames(&state, &epoch, frames) => {}
            _ = stopping => {}
        }
        let mut all = self.senders.lock();
        if all
            .serving
            .get(&node)
            .is_some_and(|serving| serving.serial == self.serial)
        {
            all.serving.remove(&node);
        }
    }

    async fn serve_frames(
        &self,
        state: &SenderState,
        epoch: &Epoch,
        mut frames: Streaming<pb::LinkFrame>,
    ) {
        let Some(inbound) = self.slot.read().clone() else {
            let _ = self
                .answers
                .send(Err(Status::unavailable("node stopped serving")));
            return;
        };
        let credits = inbound.credits(&state.sender);
        let mut reported = credits.released();
        let welcome = pb::link_answer::Answer::Welcome(pb::Welcome {
            incarnation: self.incarnation,
            released: reported,
            epoch: epoch.served,
            // Read after the epoch: whatever an earlier epoch's Link took
            // is in it (see `deliver`).
            accepted_through: *state.accepted_through.lock(),
        });
        if self.answer(welcome).is_err() {
            return;
        }
        loop {
            let frame = tokio::select! {
                frame = frames.message() => frame,
                released = credits.released_since(reported) => {
                    if released.is_err() {
                        // The node stopped receiving.
                        let _ = self.answers.send(Err(Status::unavailable("node stopped serving")));
                        return;
                    }
                    reported = credits.released();
                    let credit = pb::link_answer::Answer::Credit(pb::Credit { released: reported });
                    if self.answer(credit).is_err() {
                        return;
                    }
                    continue;
                }
            };
            let frame = match frame {
                Ok(Some(pb::LinkFrame { frame: Some(frame) })) => frame,
                Ok(Some(_)) => continue,
                Ok(None) => return,
                Err(status) => {
                    tracing::debug!(from = %state.sender.node, %status, "link from node ended");
                    return;
                }
            };
            // A detached node takes nothing more: the sender keeps its batch.
            let Some(inbound) = self.slot.read().clone() else {
                let _ = self
                    .answers
                    .send(Err(Status::unavailable("node stopped serving")));
                return;
            };
            match frame {
                pb::link_frame::Frame::Hello(_) => {}
                pb::link_frame::Frame::Batch(batch) => {
                    // A batch of an earlier epoch is not taken and not
                    // acked: the Link ends, and the sender learns on its
                    // next one what was taken.
                    let Some(delivered) =
                        deliver(state, epoch, self.knows(), &inbound, &credits, batch)
                    else {
                        return;
                    };
                    let answered = self.answer(pb::link_answer::Answer::Ack(delivered.ack));
                    if answered.is_err() || delivered.refused {
                        return;
                    }
                }
                pb::link_frame::Frame::Reply(reply) => match convert::reply_from_pb(reply) {
                    Ok(reply) => inbound.reply(reply),
                    Err(e) => {
                        tracing::warn!(from = %state.sender.node, error = %e, "reply dropped")
                    }
                },
            }
        }
    }

    /// Whether a reply address may name `node`: this node, or a member.
    fn knows(&self) -> impl Fn(&RegionId) -> bool + '_ {
        |node| *node == self.local || self.members.contains(node)
    }

    fn answer(&self, answer: pb::link_answer::Answer) -> Result<(), ()> {
        self.answers
            .send(Ok(pb::LinkAnswer {
                answer: Some(answer),
            }))
            .map_err(|_| ())
    }
}

/// The inbound epoch a Link was welcomed in, and the node's current one.
struct Epoch {
    current: Arc<AtomicU64>,
    served: u64,
}

/// Takes a batch: what was already accepted from this sender incarnation
/// is skipped, the rest routed at once. A malformed envelope (a sender of
/// another version, say) is dropped and logged on its own: refusing it
/// would make the sender resend it for ever. `None`: the Link's epoch has
/// ended, and nothing was taken.
fn deliver(
    state: &SenderState,
    epoch: &Epoch,
    knows: impl Fn(&RegionId) -> bool,
    inbound: &Arc<dyn Recipient>,
    credits: &Arc<Credits>,
    batch: pb::Batch,
) -> Option<Delivered> {
    let from = &state.sender.node;
    let first = batch.first_sequence;
    let count = batch.envelopes.len();
    let mut accepted_through = state.accepted_through.lock();
    // Checked under the sender's lock, which the next epoch's Welcome
    // takes to read `accepted_through`: a batch either counts in that
    // Welcome or is not taken at all.
    if epoch.current.load(Ordering::Acquire) != epoch.served {
        return None;
    }
    let seen = usize::try_from(accepted_through.saturating_sub(first.saturating_sub(1)))
        .unwrap_or(usize::MAX)
        .min(count);
    let mut envelopes = Vec::with_capacity(count - seen);
    let mut positions = Vec::with_capacity(count - seen);
    // An envelope whose reply address this node does not know (yet: the
    // asker may have registered a moment ago) is refused, with all after
    // it: its sender routes them again.
    let mut refused_from = None;
    for (i, envelope) in batch.envelopes.into_iter().enumerate().skip(seen) {
        match convert::envelope_from_pb(envelope) {
            Ok(envelope) if envelope.reply_to.as_ref().is_some_and(|r| !knows(&r.node)) => {
                let reply_to = envelope.reply_to.map(|r| r.node);
                tracing::debug!(%from, ?reply_to, "envelope refused: its reply address is not a registered node");
                refused_from = Some(i);
                break;
            }
            Ok(envelope) => {
                envelopes.push(envelope);
                positions.push(i);
            }
            Err(e) => {
                crate::metrics::malformed_envelope();
                tracing::warn!(%from, error = %e, "malformed envelope dropped");
            }
        }
    }
    let considered = refused_from.unwrap_or(count) - seen;
    credits.take((count - seen) as u64);
    // Malformed envelopes, and the refused ones, never took custody: their
    // credit returns now.
    credits.release((count - seen - envelopes.len()) as u64);
    let taken = match inbound.deliver(&state.sender, envelopes, credits) {
        Ok(()) => seen + considered,
        // Refused from the n-th well-formed envelope: everything before its
        // position in the batch was taken or dropped.
        Err(n) => positions.get(n).copied().unwrap_or(seen + considered),
    };
    if taken > 0 {
        let through = first.saturating_add(taken as u64 - 1);
        *accepted_through = (*accepted_through).max(through);
    }
    Some(Delivered {
        ack: pb::BatchAck {
            first_sequence: first,
            accepted: u32::try_from(taken).unwrap_or(u32::MAX),
        },
        refused: taken < count,
    })
}

/// What became of a batch.
struct Delivered {
    ack: pb::BatchAck,
    /// Not all of it was taken. The Link ends after the ack: a later batch
    /// taken on it would raise `accepted_through` past the refused
    /// envelopes, and a resend of them (their ack lost) would be skipped.
    refused: bool,
}

#[cfg(test)]
mod prop_tests;
