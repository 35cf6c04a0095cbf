//! How nodes reach each other: deliver envelope batches, send ask replies,
//! and open a region's link to the coordinator.
//!
//! The runtime only ever calls [`Transport`]; the in-memory network here
//! connects the nodes of one process (tests, the demo), and the gRPC
//! transport of a later issue connects processes. Both move bytes: payloads
//! are encoded at the codec boundary before they get here.

pub mod grpc;
pub mod memory;

use crate::envelope::{WireEnvelope, WireReply};
use crate::protocol::CoordinatorLink;
use colo_allocation::RegionId;
use futures::future::BoxFuture;
use std::sync::Arc;

/// A node could not be reached; what was sent did not arrive.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TransportError {
    /// No node with that name is reachable.
    #[error("node {0} is unreachable")]
    Unreachable(RegionId),
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

/// One node's view of the network.
pub trait Transport: Send + Sync + 'static {
    /// This node's name.
    fn local(&self) -> &RegionId;

    /// Delivers a batch in order to node `to`. Ok means the receiving node
    /// has routed every envelope (to a shard, or into its buffer); an error
    /// says how many, if any, were taken.
    fn deliver(
        &self,
        to: &RegionId,
        batch: Vec<WireEnvelope>,
    ) -> BoxFuture<'_, Result<(), TransportError>>;

    /// Sends an ask's reply to the asking node.
    fn reply(&self, to: &RegionId, reply: WireReply) -> BoxFuture<'_, Result<(), TransportError>>;

    /// Starts handing this node's received traffic to `inbound`.
    fn attach(&self, inbound: Arc<dyn Inbound>);

    /// Stops receiving: other nodes find this one unreachable.
    fn detach(&self);

    /// Opens `region`'s link to the coordinator of `entity_type`.
    fn connect_coordinator(
        &self,
        entity_type: &str,
        region: RegionId,
    ) -> BoxFuture<'_, Result<CoordinatorLink, TransportError>>;
}

/// What a transport hands received traffic to: the node.
pub trait Inbound: Send + Sync + 'static {
    /// Routes a received batch, in order. `Err(accepted)`: only the first
    /// `accepted` envelopes were taken; the sender keeps the rest.
    fn deliver(&self, batch: Vec<WireEnvelope>) -> BoxFuture<'_, Result<(), usize>>;
    /// Completes a pending ask.
    fn reply(&self, reply: WireReply);
}
