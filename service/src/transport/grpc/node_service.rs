//! The server end of other nodes' Links: batches go to this node's regions
//! in the order they arrive, replies to the asks waiting here.

use super::convert;
use crate::transport::Inbound;
use colo_proto::v1 as pb;
use parking_lot::RwLock;
use std::sync::Arc;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status, Streaming};

/// Acks waiting to be written back. The sender waits for each ack before
/// its next batch, so a handful per stream is plenty.
const ACK_CAPACITY: usize = 64;

/// Where received traffic goes: set when the node attaches, cleared when it
/// detaches (then every Link is refused and senders find the node gone).
pub type InboundSlot = Arc<RwLock<Option<Arc<dyn Inbound>>>>;

/// The `colo.v1.Node` service.
pub struct NodeService {
    inbound: InboundSlot,
}

impl std::fmt::Debug for NodeService {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeService").finish_non_exhaustive()
    }
}

impl NodeService {
    pub fn new(inbound: InboundSlot) -> Self {
        Self { inbound }
    }
}

#[tonic::async_trait]
impl pb::node_server::Node for NodeService {
    type LinkStream = ReceiverStream<Result<pb::BatchAck, Status>>;

    async fn link(
        &self,
        request: Request<Streaming<pb::LinkFrame>>,
    ) -> Result<Response<Self::LinkStream>, Status> {
        let Some(inbound) = self.inbound.read().clone() else {
            return Err(Status::unavailable("node is not serving"));
        };
        let (acks, rx) = mpsc::channel(ACK_CAPACITY);
        tokio::spawn(serve_link(
            request.into_inner(),
            inbound,
            self.inbound.clone(),
            acks,
        ));
        Ok(Response::new(ReceiverStream::new(rx)))
    }
}

async fn serve_link(
    mut frames: Streaming<pb::LinkFrame>,
    inbound: Arc<dyn Inbound>,
    slot: InboundSlot,
    acks: mpsc::Sender<Result<pb::BatchAck, Status>>,
) {
    let mut from = String::new();
    loop {
        let frame = match frames.message().await {
            Ok(Some(pb::LinkFrame { frame: Some(frame) })) => frame,
            Ok(Some(_)) => {
                let _ = acks
                    .send(Err(Status::invalid_argument("empty link frame")))
                    .await;
                return;
            }
            Ok(None) => return,
            Err(status) => {
                tracing::debug!(%from, %status, "link from node ended");
                return;
            }
        };
        // A detached node takes nothing more: the sender keeps its batch.
        if slot.read().is_none() {
            let _ = acks
                .send(Err(Status::unavailable("node stopped serving")))
                .await;
            return;
        }
        match frame {
            pb::link_frame::Frame::Hello(hello) => from = hello.node,
            pb::link_frame::Frame::Batch(batch) => {
                let count = batch.envelopes.len();
                let envelopes: Result<Vec<_>, _> = batch
                    .envelopes
                    .into_iter()
                    .map(convert::envelope_from_pb)
                    .collect();
                let envelopes = match envelopes {
                    Ok(envelopes) => envelopes,
                    Err(e) => {
                        let _ = acks
                            .send(Err(Status::invalid_argument(e.to_string())))
                            .await;
                        return;
                    }
                };
                let accepted = match inbound.deliver(envelopes).await {
                    Ok(()) => count,
                    Err(accepted) => accepted,
                };
                let ack = pb::BatchAck {
                    sequence: batch.sequence,
                    accepted: u32::try_from(accepted).unwrap_or(u32::MAX),
                };
                if acks.send(Ok(ack)).await.is_err() {
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
