//! This node's Link to another node: one gRPC stream that carries envelope
//! batches (each acked, in order) and ask replies.
//!
//! Every region's outbound queue awaits each batch's ack before it sends the
//! next, so the stream keeps each sender's order. When the stream breaks,
//! every batch still waiting for its ack fails as unreachable: the runtime
//! takes those envelopes back and sends them to the shard's next home. So
//! does a batch not acked within the region timeout (a node that is stopped
//! or stuck, not dead). One that had in fact arrived is then delivered
//! twice; at-least-once is what a broken connection allows.

use super::convert;
use crate::envelope::{WireEnvelope, WireReply};
use colo_proto::v1 as pb;
use parking_lot::Mutex;
use std::collections::VecDeque;
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};
use tokio_stream::wrappers::ReceiverStream;

/// Frames waiting to be written to the stream. Senders await their ack
/// before sending more, so this holds about one batch per region plus
/// replies; the bound only stops a stalled connection from growing memory.
const FRAME_CAPACITY: usize = 256;

/// The stream broke (or never opened): what was sent may not have arrived.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Broken;

struct Writer {
    next: u64,
    frames: mpsc::Sender<pb::LinkFrame>,
}

#[derive(Default)]
struct Pending {
    broken: bool,
    waiting: VecDeque<(u64, oneshot::Sender<u32>)>,
}

/// An open Link to one node.
pub struct Peer {
    reader: tokio::task::AbortHandle,
    ack_timeout: Duration,
    writer: tokio::sync::Mutex<Writer>,
    pending: std::sync::Arc<Mutex<Pending>>,
}

impl std::fmt::Debug for Peer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Peer")
            .field("broken", &self.is_broken())
            .finish_non_exhaustive()
    }
}

impl Peer {
    /// Connects to `address` and opens the Link as `local`. A batch not
    /// acked within `ack_timeout` breaks the link.
    pub async fn open(
        local: &str,
        address: &str,
        connect_timeout: Duration,
        ack_timeout: Duration,
    ) -> Result<Self, Broken> {
        let channel = super::connect(address, connect_timeout)
            .await
            .map_err(|e| {
                tracing::debug!(%address, error = %e, "node not reachable");
                Broken
            })?;
        let mut client = pb::node_client::NodeClient::new(channel);
        let (frames, rx) = mpsc::channel(FRAME_CAPACITY);
        let hello = pb::LinkFrame {
            frame: Some(pb::link_frame::Frame::Hello(pb::Hello {
                node: local.to_string(),
            })),
        };
        frames.send(hello).await.map_err(|_| Broken)?;
        let acks = tokio::time::timeout(connect_timeout, client.link(ReceiverStream::new(rx)))
            .await
            .map_err(|_| Broken)?
            .map_err(|status| {
                tracing::debug!(%address, %status, "node refused the link");
                Broken
            })?
            .into_inner();
        let pending = std::sync::Arc::new(Mutex::new(Pending::default()));
        let reader = tokio::spawn(read_acks(acks, pending.clone())).abort_handle();
        Ok(Self {
            reader,
            ack_timeout,
            writer: tokio::sync::Mutex::new(Writer { next: 0, frames }),
            pending,
        })
    }

    /// The stream has ended: open a new one.
    pub fn is_broken(&self) -> bool {
        self.pending.lock().broken
    }

    /// Sends a batch and waits for its ack: how many envelopes were routed.
    /// Waiting for the stream and for the ack together take at most the ack
    /// timeout: a stalled stream must not hold the sender (or the senders
    /// queued behind it on the writer) for ever.
    pub async fn deliver(&self, batch: Vec<WireEnvelope>) -> Result<u32, Broken> {
        let (tx, rx) = oneshot::channel();
        let attempt = async {
            {
                let mut writer = self.writer.lock().await;
                writer.next += 1;
                let sequence = writer.next;
                {
                    let mut pending = self.pending.lock();
                    if pending.broken {
                        return Err(Broken);
                    }
                    pending.waiting.push_back((sequence, tx));
                }
                let frame = pb::LinkFrame {
                    frame: Some(pb::link_frame::Frame::Batch(pb::Batch {
                        sequence,
                        envelopes: batch.into_iter().map(convert::envelope_to_pb).collect(),
                    })),
                };
                writer.frames.send(frame).await.map_err(|_| Broken)?;
            }
            rx.await.map_err(|_| Broken)
        };
        self.within_timeout(attempt).await
    }

    /// Sends an ask's reply; replies are not acked.
    pub async fn reply(&self, reply: WireReply) -> Result<(), Broken> {
        if self.is_broken() {
            return Err(Broken);
        }
        let frame = pb::LinkFrame {
            frame: Some(pb::link_frame::Frame::Reply(convert::reply_to_pb(reply))),
        };
        self.within_timeout(async {
            let writer = self.writer.lock().await;
            writer.frames.send(frame).await.map_err(|_| Broken)
        })
        .await
    }

    async fn within_timeout<T>(
        &self,
        attempt: impl std::future::Future<Output = Result<T, Broken>>,
    ) -> Result<T, Broken> {
        match tokio::time::timeout(self.ack_timeout, attempt).await {
            Ok(Ok(done)) => Ok(done),
            Ok(Err(Broken)) => {
                self.break_link();
                Err(Broken)
            }
            Err(_) => {
                // A node that is alive but does not answer (stopped, stuck)
                // must not hold this sender's messages for ever: give up on
                // the connection, and the runtime sends them elsewhere.
                tracing::warn!(timeout = ?self.ack_timeout, "no ack from node; dropping the link");
                self.break_link();
                Err(Broken)
            }
        }
    }

    /// Gives up on the stream: waiting batches fail, the ack reader stops
    /// (which resets the stream), and the next send opens a new Link, which
    /// the receiver serves only once this one has stopped there.
    fn break_link(&self) {
        {
            let mut pending = self.pending.lock();
            pending.broken = true;
            pending.waiting.clear();
        }
        self.reader.abort();
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        self.reader.abort();
    }
}

/// Completes waiting batches in order; on the stream's end, fails the rest.
async fn read_acks(
    mut acks: tonic::Streaming<pb::BatchAck>,
    pending: std::sync::Arc<Mutex<Pending>>,
) {
    loop {
        let ack = match acks.message().await {
            Ok(Some(ack)) => ack,
            Ok(None) => break,
            Err(status) => {
                tracing::debug!(%status, "node link broke");
                break;
            }
        };
        let waiter = pending.lock().waiting.pop_front();
        match waiter {
            Some((sequence, tx)) if sequence == ack.sequence => {
                let _ = tx.send(ack.accepted);
            }
            _ => {
                tracing::warn!(
                    sequence = ack.sequence,
                    "ack out of order; dropping the link"
                );
                break;
            }
        }
    }
    let mut pending = pending.lock();
    pending.broken = true;
    // Dropping the senders fails every waiting batch as unreachable.
    pending.waiting.clear();
}
