//! The server end of other nodes' Links: batches go to this node's regions
//! in the order they arrive, replies to the asks waiting here.
//!
//! One Link per sending node is served at a time. A sender that gave up on
//! a Link (no ack in time) opens a new one and resends what was not acked;
//! the older Link is stopped first, so the two never route side by side and
//! the sender's order holds (a resent message may arrive twice).

use super::convert;
use crate::transport::Inbound;
use colo_proto::v1 as pb;
use parking_lot::{Mutex, RwLock};
use std::collections::HashMap;
use std::sync::Arc;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status, Streaming};

/// Acks waiting to be written back. The sender waits for each ack before
/// its next batch, so a handful per stream is plenty.
const ACK_CAPACITY: usize = 64;

/// Where received traffic goes: set when the node attaches, cleared when it
/// detaches (then every Link is refused and senders find the node gone).
pub type InboundSlot = Arc<RwLock<Option<Arc<dyn Inbound>>>>;

/// The Link being served for each sending node, with a serial so that a
/// Link that ends does not unregister its successor.
type Serving = Arc<Mutex<HashMap<String, (u64, JoinHandle<()>)>>>;

/// The `colo.v1.Node` service.
pub struct NodeService {
    inbound: InboundSlot,
    serving: Serving,
    next: Arc<std::sync::atomic::AtomicU64>,
}

impl std::fmt::Debug for NodeService {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeService").finish_non_exhaustive()
    }
}

impl NodeService {
    pub fn new(inbound: InboundSlot) -> Self {
        Self {
            inbound,
            serving: Arc::default(),
            next: Arc::default(),
        }
    }
}

#[tonic::async_trait]
impl pb::node_server::Node for NodeService {
    type LinkStream = ReceiverStream<Result<pb::BatchAck, Status>>;

    async fn link(
        &self,
        request: Request<Streaming<pb::LinkFrame>>,
    ) -> Result<Response<Self::LinkStream>, Status> {
        if self.inbound.read().is_none() {
            return Err(Status::unavailable("node is not serving"));
        }
        let (acks, rx) = mpsc::channel(ACK_CAPACITY);
        let link = Link {
            slot: self.inbound.clone(),
            serving: self.serving.clone(),
            serial: self.next.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
            acks,
        };
        tokio::spawn(link.start(request.into_inner()));
        Ok(Response::new(ReceiverStream::new(rx)))
    }
}

struct Link {
    slot: InboundSlot,
    serving: Serving,
    serial: u64,
    acks: mpsc::Sender<Result<pb::BatchAck, Status>>,
}

impl Link {
    /// Waits for Hello, stops the sender's previous Link, then serves.
    async fn start(self, mut frames: Streaming<pb::LinkFrame>) {
        let from = match frames.message().await {
            Ok(Some(pb::LinkFrame {
                frame: Some(pb::link_frame::Frame::Hello(hello)),
            })) if !hello.node.is_empty() => hello.node,
            Ok(Some(_)) => {
                let refusal = Status::invalid_argument("the first frame must be hello with a node");
                let _ = self.acks.send(Err(refusal)).await;
                return;
            }
            Ok(None) | Err(_) => return,
        };
        let (serving, serial) = (self.serving.clone(), self.serial);
        let mut map = serving.lock();
        let previous = map.remove(&from);
        let task = tokio::spawn(self.serve(from.clone(), frames, previous.map(|(_, t)| t)));
        map.insert(from, (serial, task));
    }

    async fn serve(
        self,
        from: String,
        frames: Streaming<pb::LinkFrame>,
        previous: Option<JoinHandle<()>>,
    ) {
        if let Some(previous) = previous {
            previous.abort();
            let _ = previous.await;
        }
        self.serve_frames(&from, frames).await;
        let mut map = self.serving.lock();
        if map
            .get(&from)
            .is_some_and(|(serial, _)| *serial == self.serial)
        {
            map.remove(&from);
        }
    }

    async fn serve_frames(&self, from: &str, mut frames: Streaming<pb::LinkFrame>) {
        loop {
            let frame = match frames.message().await {
                Ok(Some(pb::LinkFrame { frame: Some(frame) })) => frame,
                Ok(Some(_)) => continue,
                Ok(None) => return,
                Err(status) => {
                    tracing::debug!(%from, %status, "link from node ended");
                    return;
                }
            };
            // A detached node takes nothing more: the sender keeps its batch.
            let Some(inbound) = self.slot.read().clone() else {
                let refusal = Status::unavailable("node stopped serving");
                let _ = self.acks.send(Err(refusal)).await;
                return;
            };
            match frame {
                pb::link_frame::Frame::Hello(_) => {}
                pb::link_frame::Frame::Batch(batch) => {
                    let ack = deliver(from, &inbound, batch).await;
                    if self.acks.send(Ok(ack)).await.is_err() {
                        return;
                    }
                }
                pb::link_frame::Frame::Reply(reply) => match convert::reply_from_pb(reply) {
                    Ok(reply) => inbound.reply(reply),
                    Err(e) => tracing::warn!(%from, error = %e, "reply dropped"),
                },
            }
        }
    }
}

/// Routes a batch. A malformed envelope (a sender of another version,
/// say) is dropped and logged on its own: refusing it would make the
/// sender resend it for ever.
async fn deliver(from: &str, inbound: &Arc<dyn Inbound>, batch: pb::Batch) -> pb::BatchAck {
    let count = batch.envelopes.len();
    let mut envelopes = Vec::with_capacity(count);
    let mut positions = Vec::with_capacity(count);
    for (i, envelope) in batch.envelopes.into_iter().enumerate() {
        match convert::envelope_from_pb(envelope) {
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
    let accepted = match inbound.deliver(envelopes).await {
        Ok(()) => count,
        // Refused from the n-th well-formed envelope: everything before its
        // position in the batch was taken or dropped.
        Err(n) => positions.get(n).copied().unwrap_or(count),
    };
    pb::BatchAck {
        sequence: batch.sequence,
        accepted: u32::try_from(accepted).unwrap_or(u32::MAX),
    }
}
