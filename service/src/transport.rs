//! How nodes reach each other: deliver envelope batches, send ask replies,
//! and open a region's link to the coordinator.
//!
//! The runtime only ever calls [`Transport`]; the in-memory network
//! ([`memory`]) connects the nodes of one process (tests, the demo), and
//! gRPC ([`grpc`]: a Link per peer with credit-based flow control and
//! sequence numbers, and the coordinator links) connects processes. Both
//! move bytes: payloads are encoded at the codec boundary before they get
//! here. [`Credits`]: the flow control that keeps a busy receiver from
//! stalling or being resent to; [`tls`]: mutual TLS between nodes.

pub use crate::credits::{Closed, Credit, Credits, WINDOW};
pub mod grpc;
pub mod memory;
pub mod tls;

use crate::envelope::{WireEnvelope, WireReply};
use crate::protocol::CoordinatorLink;
use colo_allocation::RegionId;
use futures::future::BoxFuture;
use std::sync::Arc;

/// A node could not be reached, or did not confirm what it was sent.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TransportError {
    /// No node with that name is reachable; nothing of the batch was sent.
    #[error("node {0} is unreachable")]
    Unreachable(RegionId),
    /// The batch was sent, and the node went away (or restarted) before it
    /// confirmed it: it may or may not have taken it. The sender must not
    /// send it elsewhere, or a message could be handled twice.
    #[error("node {0} went away before it confirmed the batch")]
    Unconfirmed(RegionId),
    /// The node took the first `accepted` envelopes of a batch and refused
    /// the rest (its region has stopped); the sender keeps the rest.
    #[error("node {node} refused all but the first {accepted} envelopes")]
    Refused {
        /// The refusing node.
        node: RegionId,
        /// How many envelopes it routed.
        accepted: usize,
    },
    /// No coordinator for the entity type is reachable.
    #[error("no coordinator for entity type {0:?} is reachable")]
    NoCoordinator(String),
    /// The bytes could not be encoded or decoded.
    #[error(transparent)]
    Codec(#[from] crate::codec::CodecError),
}

/// A new node incarnation: different for every node start, with no
/// coordination (time, process and a per-process counter, hashed).
pub(crate) fn new_incarnation() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    use std::sync::atomic::{AtomicU64, Ordering};
    static STARTS: AtomicU64 = AtomicU64::new(0);
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    hasher.write_u128(now);
    hasher.write_u32(std::process::id());
    hasher.write_u64(STARTS.fetch_add(1, Ordering::Relaxed));
    hasher.finish().max(1)
}

/// Who sends: a node, in one of its incarnations (a node restarted at the
/// same address is another incarnation).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Sender {
    /// The sending node.
    pub node: RegionId,
    /// Its incarnation.
    pub incarnation: u64,
}

/// One node's view of the network.
pub trait Transport: Send + Sync + 'static {
    /// This node's name.
    fn local(&self) -> &RegionId;

    /// This node's incarnation: a new one each time a node starts, so that
    /// other nodes tell a restarted node from the one before.
    fn incarnation(&self) -> u64;

    /// Delivers a batch in order to node `to`. Ok means the receiving node
    /// has taken every envelope into its custody (a shard, its buffer, an
    /// outbound queue); an error says how many, if any, were taken. It waits
    /// while the receiver holds a window's worth of this node's envelopes
    /// ([`Credits`]); it never sends a batch twice to one incarnation
    /// of the receiver, nor elsewhere.
    fn deliver(
        &self,
        to: &RegionId,
        batch: Vec<WireEnvelope>,
    ) -> BoxFuture<'_, Result<(), TransportError>>;

    /// Sends an ask's reply to the asking node, without waiting: it is
    /// queued behind the replies sent before it, so that a graceful stop's
    /// [`Transport::finish_sending`] sees every reply already given.
    ///
    /// # Errors
    /// The asking node cannot be reached from here.
    fn reply(&self, to: &RegionId, reply: WireReply) -> Result<(), TransportError>;

    /// Waits, at most `within`, until what this node still sends (the
    /// last replies, batches not acked yet) has reached its receivers. A
    /// gracefully stopping node calls it last: its process ends next, and
    /// a reply still queued then (say, towards a node it had never sent to,
    /// whose connection was still opening) would leave its asker waiting
    /// for its deadline. A transport that delivers at once (the in-memory
    /// one) has nothing to wait for.
    fn finish_sending(&self, _within: std::time::Duration) -> BoxFuture<'_, ()> {
        Box::pin(async {})
    }

    /// Starts handing this node's received traffic to `inbound`.
    fn attach(&self, inbound: Arc<dyn Recipient>);

    /// Stops receiving: other nodes find this one unreachable. What this
    /// node is still sending (the last replies, say) goes on.
    fn detach(&self);

    /// Stops everything at once, as a crash would: receiving, and sending
    /// whatever was not sent yet.
    fn abort(&self);

    /// A region of this node fenced itself: nothing other nodes sent before
    /// now and this node has not taken yet may be taken any more. A sender
    /// may have given up on it during the outage and sent newer messages to
    /// the shard's new home; taken late, it would be handled behind them.
    /// Senders learn what was taken and route the rest again. A transport
    /// that never holds a batch it has not delivered (the in-memory one)
    /// has nothing to do.
    fn fence_inbound(&self) {}

    /// The coordinator of `entity_type` lists these nodes as registered.
    /// A node takes Links and reply addresses only from nodes one of its
    /// coordinators lists, and forgets its idle Link tasks towards the
    /// others. The in-memory network connects only the nodes of one
    /// process, which are known to each other by construction.
    fn members(&self, _entity_type: &str, _nodes: Vec<RegionId>) {}

    /// The coordinator of `entity_type` terminated `node`: it was silent
    /// for the region timeout, so it has fenced itself if it runs at all,
    /// and takes nothing sent to it before. What it did not confirm is
    /// given up on, until that coordinator lists it again. The in-memory
    /// network never holds a batch it has not delivered.
    fn node_terminated(&self, _entity_type: &str, _node: &RegionId) {}

    /// Where the coordinator of `entity_type` is, as this node knows it:
    /// the hosting node's address and the coordinator's epoch (0 where it
    /// is not known). `None`: nowhere known (an election under way, or a
    /// network within one process).
    fn coordinator_of(&self, _entity_type: &str) -> Option<(String, u64)> {
        None
    }

    /// Opens `region`'s link to the coordinator of `entity_type`.
    fn connect_coordinator(
        &self,
        entity_type: &str,
        region: RegionId,
    ) -> BoxFuture<'_, Result<CoordinatorLink, TransportError>>;
}

/// What a transport hands received traffic to: the node.
pub trait Recipient: Send + Sync + 'static {
    /// The credit window of a sender at this node.
    fn credits(&self, from: &Sender) -> Arc<crate::credits::Credits>;

    /// Takes a received batch, in order, without waiting: each envelope
    /// goes to its shard, the buffer or another node at once, carrying a
    /// credit of `credits` (taken by the caller for the whole batch).
    /// `Err(accepted)`: only the first `accepted` envelopes were taken (the
    /// region of the rest has stopped); the sender keeps the rest.
    fn deliver(
        &self,
        from: &Sender,
        batch: Vec<WireEnvelope>,
        credits: &Arc<crate::credits::Credits>,
    ) -> Result<(), usize>;

    /// Completes a pending ask.
    fn reply(&self, reply: WireReply);
}
