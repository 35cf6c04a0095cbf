//! The gRPC transport: nodes in different processes, reached at their
//! advertised addresses (a node's address is its [`RegionId`]).
//!
//! - `grpc/peer.rs`: this node's Link to each other node (batches and replies);
//! - `grpc/node_service.rs`: the server end of other nodes' Links;
//! - `grpc/coordinator_link.rs`: a region's stream to a remote coordinator;
//! - `grpc/coordinator_service.rs`: the server end, on the hosting node;
//! - `grpc/members.rs`: the nodes this node takes Links and reply addresses
//!   from;
//! - `grpc/convert.rs`: colo.v1 messages to and from the runtime's types.
//!
//! Where a coordinator runs comes from [`CoordinatorHosting`]; a region whose
//! coordinator is on this node links to it directly, without a socket.

mod convert;
mod coordinator_link;
mod coordinator_service;
mod members;
mod node_service;
mod peer;
#[cfg(test)]
mod prop_tests;

pub use coordinator_service::CoordinatorService;
pub use node_service::NodeService;

use super::{Recipient, Transport, TransportError};
use crate::coordinator::hosting::{CoordinatorHosting, CoordinatorLocation};
use crate::envelope::{WireEnvelope, WireReply};
use crate::protocol::CoordinatorLink;
use crate::tasks::TaskSet;
use crate::transport::tls::NodeTls;
use colo_allocation::RegionId;
use futures::future::BoxFuture;
use members::Members;
use node_service::RecipientSlot;
use parking_lot::Mutex;
use peer::Peer;
use std::collections::HashMap;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::Duration;

/// Timings of the gRPC transport.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GrpcSettings {
    /// How long to wait for a TCP connection and a stream to open.
    pub connect_timeout: Duration,
    /// How often both ends of a coordinator link send a heartbeat.
    pub heartbeat_interval: Duration,
    /// Silence after which a coordinator link is dropped (the coordinator
    /// terminates the region, the region registers again), and after which
    /// a batch without an ack is given up on and sent elsewhere.
    pub region_timeout: Duration,
    /// With `[tls]`: connections to other nodes are TLS, this node's
    /// certificate its identity, the cluster's CA the only root, and the
    /// other node's certificate must name the host it is reached at.
    pub tls: Option<NodeTls>,
}

impl Default for GrpcSettings {
    fn default() -> Self {
        Self {
            connect_timeout: Duration::from_secs(2),
            heartbeat_interval: Duration::from_secs(1),
            region_timeout: Duration::from_secs(10),
            tls: None,
        }
    }
}

/// What an in-process gRPC server (tests, benches) accepts connections
/// from: `listener`, plain text, with Nagle's algorithm off as on the
/// connecting side (see [`crate::transport::tls::connection::accept`], which the
/// node program uses).
pub fn incoming(listener: tokio::net::TcpListener) -> tonic::transport::server::TcpIncoming {
    tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true))
}

/// The endpoint of the node at `address`: over TLS with `[tls]`.
fn endpoint(
    address: &str,
    settings: &GrpcSettings,
) -> Result<tonic::transport::Endpoint, tonic::transport::Error> {
    use tonic::transport::Endpoint;
    match &settings.tls {
        None => Endpoint::from_shared(format!("http://{address}")),
        Some(tls) => Endpoint::from_shared(format!("https://{address}"))?
            .tls_config(tls.client_config(crate::transport::tls::host_of(address))),
    }
}

/// Connects to another node's gRPC server for the coordinator stream.
pub(crate) async fn connect(
    address: &str,
    settings: &GrpcSettings,
) -> Result<tonic::transport::Channel, String> {
    endpoint(address, settings)
        .map_err(|e| e.to_string())?
        .connect_timeout(settings.connect_timeout)
        .tcp_nodelay(true)
        .connect()
        .await
        .map_err(|e| e.to_string())
}

/// Why a Link connection was not opened.
enum ConnectError {
    /// Nothing listens at the address: the node is not there.
    Refused(String),
    /// Anything else (a timeout, say): it may be slow or cut off.
    Other(String),
}

/// Connects for a Link. HTTP/2 keepalive pings find a peer that stopped
/// answering (a frozen process, a cut network) even while nothing is sent.
async fn connect_link(
    address: &str,
    settings: &GrpcSettings,
) -> Result<tonic::transport::Channel, ConnectError> {
    endpoint(address, settings)
        .map_err(|e| ConnectError::Refused(e.to_string()))?
        .connect_timeout(settings.connect_timeout)
        .tcp_nodelay(true)
        .http2_keep_alive_interval(settings.heartbeat_interval)
        .keep_alive_timeout(settings.region_timeout)
        .keep_alive_while_idle(true)
        .connect()
        .await
        .map_err(|e| {
            if is_connection_refused(&e) {
                ConnectError::Refused(e.to_string())
            } else {
                ConnectError::Other(e.to_string())
            }
        })
}

fn is_connection_refused(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut source = Some(e);
    while let Some(e) = source {
        if let Some(io) = e.downcast_ref::<std::io::Error>() {
            return io.kind() == std::io::ErrorKind::ConnectionRefused;
        }
        source = e.source();
    }
    false
}

/// This node's end of the gRPC network.
pub struct GrpcTransport {
    local: RegionId,
    incarnation: u64,
    settings: GrpcSettings,
    hosting: Arc<dyn CoordinatorHosting>,
    inbound: RecipientSlot,
    /// The Link task towards each node, while the node is a member.
    peers: Mutex<HashMap<RegionId, Arc<Peer>>>,
    /// The sequence numbers of every envelope this node sends, to any node:
    /// one counter, so that a Link started anew towards a node (the last
    /// gave up, or was forgotten with a node that left) numbers upwards.
    sequence: Arc<AtomicU64>,
    members: Arc<Members>,
    /// Per entity type, the newest coordinator epoch heard.
    epochs: Mutex<HashMap<String, Arc<AtomicU64>>>,
    /// Every task the transport starts (stream pumps, served links): they
    /// stop when the node detaches, as they would if the process died.
    tasks: Arc<TaskSet>,
    /// The Links other nodes send on, and what is remembered of each sender.
    senders: Arc<Mutex<node_service::Senders>>,
}

impl std::fmt::Debug for GrpcTransport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GrpcTransport")
            .field("local", &self.local)
            .finish_non_exhaustive()
    }
}

impl GrpcTransport {
    /// The transport of the node advertised at `address`.
    pub fn new(
        address: impl AsRef<str>,
        settings: GrpcSettings,
        hosting: Arc<dyn CoordinatorHosting>,
    ) -> Arc<Self> {
        Arc::new(Self {
            local: RegionId::new(address),
            incarnation: super::new_incarnation(),
            settings,
            hosting,
            inbound: Arc::default(),
            peers: Mutex::default(),
            sequence: Arc::default(),
            members: Arc::default(),
            epochs: Mutex::default(),
            tasks: Arc::default(),
            senders: Arc::default(),
        })
    }

    /// The services another node or a region calls on this one.
    pub fn node_service(&self) -> colo_proto::v1::node_server::NodeServer<NodeService> {
        colo_proto::v1::node_server::NodeServer::new(NodeService::new(
            self.local.clone(),
            self.inbound.clone(),
            self.incarnation,
            self.senders.clone(),
            self.members.clone(),
            self.tasks.clone(),
        ))
    }

    /// The coordinator protocol's server end, for coordinators hosted here.
    pub fn coordinator_service(
        &self,
    ) -> colo_proto::v1::coordinator_server::CoordinatorServer<CoordinatorService> {
        colo_proto::v1::coordinator_server::CoordinatorServer::new(CoordinatorService::new(
            self.hosting.clone(),
            self.settings.clone(),
            self.tasks.clone(),
        ))
    }

    /// The Link task towards `to`, started on first use and again after
    /// one gave up.
    fn peer(&self, to: &RegionId) -> Arc<Peer> {
        let mut peers = self.peers.lock();
        if let Some(peer) = peers.get(to).filter(|p| !p.is_gone()) {
            return peer.clone();
        }
        let local = peer::Local {
            node: self.local.clone(),
            incarnation: self.incarnation,
        };
        let peer = Arc::new(Peer::start(
            local,
            to.to_string(),
            self.settings.clone(),
            self.sequence.clone(),
            &self.tasks,
        ));
        peers.insert(to.clone(), peer.clone());
        peer
    }

    fn epoch(&self, entity_type: &str) -> Arc<AtomicU64> {
        self.epochs
            .lock()
            .entry(entity_type.to_string())
            .or_default()
            .clone()
    }
}

impl Transport for GrpcTransport {
    fn local(&self) -> &RegionId {
        &self.local
    }

    fn incarnation(&self) -> u64 {
        self.incarnation
    }

    fn deliver(
        &self,
        to: &RegionId,
        batch: Vec<WireEnvelope>,
    ) -> BoxFuture<'_, Result<(), TransportError>> {
        let to = to.clone();
        Box::pin(async move {
            let count = batch.len();
            let peer = self.peer(&to);
            let accepted = peer.deliver(batch).await.map_err(|failure| match failure {
                peer::Failure::NotSent => TransportError::Unreachable(to.clone()),
                peer::Failure::Unconfirmed => TransportError::Unconfirmed(to.clone()),
            })?;
            let accepted = usize::try_from(accepted).unwrap_or(usize::MAX);
            if accepted >= count {
                Ok(())
            } else {
                Err(TransportError::Refused { node: to, accepted })
            }
        })
    }

    fn reply(&self, to: &RegionId, reply: WireReply) -> Result<(), TransportError> {
        if *to == self.local {
            if let Some(inbound) = self.inbound.read().clone() {
                inbound.reply(reply);
            }
            return Ok(());
        }
        self.peer(to)
            .reply(reply)
            .map_err(|()| TransportError::Unreachable(to.clone()))
    }

    fn finish_sending(&self, within: std::time::Duration) -> BoxFuture<'_, ()> {
        let peers: Vec<Arc<Peer>> = self.peers.lock().values().cloned().collect();
        Box::pin(async move {
            let finished = futures::future::join_all(peers.iter().map(|peer| peer.finish()));
            if tokio::time::timeout(within, finished).await.is_err() {
                tracing::warn!(timeout = ?within, "links did not finish sending before the node stopped; replies still queued are lost (their askers time out)");
            }
        })
    }

    fn attach(&self, inbound: Arc<dyn Recipient>) {
        *self.inbound.write() = Some(inbound);
    }

    fn detach(&self) {
        *self.inbound.write() = None;
    }

    fn abort(&self) {
        self.detach();
        self.tasks.abort_now();
    }

    fn fence_inbound(&self) {
        self.senders.lock().fence();
    }

    fn members(&self, entity_type: &str, nodes: Vec<RegionId>) {
        let listed: std::collections::HashSet<RegionId> = nodes.iter().cloned().collect();
        self.members.set(entity_type, nodes);
        // The Link task towards a node no coordinator lists is forgotten
        // once nothing uses it (a batch on its way keeps it: two tasks
        // towards one node would keep stopping each other's Link), at a
        // later update. A list may be short (a coordinator that lost its
        // state hears from its regions one by one), so only a termination
        // gives up on what a node did not confirm.
        self.peers.lock().retain(|node, peer| {
            if listed.contains(node) {
                peer.node_rejoined(entity_type);
            }
            if self.members.contains(node) {
                return true;
            }
            Arc::strong_count(peer) > 1
        });
    }

    fn node_terminated(&self, entity_type: &str, node: &RegionId) {
        if let Some(peer) = self.peers.lock().get(node) {
            peer.node_left(entity_type);
        }
    }

    fn coordinator_of(&self, entity_type: &str) -> Option<(String, u64)> {
        match self.hosting.locate(entity_type) {
            CoordinatorLocation::Local { epoch, .. } => Some((self.local.to_string(), epoch)),
            CoordinatorLocation::Remote { address, epoch } => Some((address, epoch)),
            CoordinatorLocation::Unknown => None,
        }
    }

    fn connect_coordinator(
        &self,
        entity_type: &str,
        region: RegionId,
    ) -> BoxFuture<'_, Result<CoordinatorLink, TransportError>> {
        let entity_type = entity_type.to_string();
        Box::pin(async move {
            let unreachable = || TransportError::NoCoordinator(entity_type.clone());
            match self.hosting.locate(&entity_type) {
                CoordinatorLocation::Local { handle, .. } => {
                    handle.connect(region).await.map_err(|_| unreachable())
                }
                CoordinatorLocation::Remote { address, .. } => coordinator_link::open(
                    &address,
                    &entity_type,
                    &region,
                    &self.settings,
                    coordinator_link::Epochs {
                        newest: self.epoch(&entity_type),
                        hosting: self.hosting.clone(),
                    },
                    &self.tasks,
                )
                .await
                .map_err(|reason| {
                    tracing::debug!(%address, %reason, "coordinator not reachable");
                    unreachable()
                }),
                CoordinatorLocation::Unknown => Err(unreachable()),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::coordinator::hosting::StaticHosting;

    #[tokio::test]
    async fn accepted_connections_send_small_frames_at_once() {
        use futures::StreamExt;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let mut accepted = incoming(listener);
        let _client = tokio::net::TcpStream::connect(address).await.unwrap();
        let stream = accepted.next().await.unwrap().unwrap();
        assert!(stream.nodelay().unwrap(), "Nagle's algorithm is off");
    }

    #[tokio::test]
    async fn the_link_task_towards_a_node_that_left_is_forgotten() {
        let hosting = Arc::new(StaticHosting::new("127.0.0.1:9"));
        let transport = GrpcTransport::new("127.0.0.1:9", GrpcSettings::default(), hosting);
        let (a, b) = (RegionId::new("127.0.0.1:10"), RegionId::new("127.0.0.1:11"));
        transport.members("x", vec![a.clone(), b.clone()]);
        let in_use = transport.peer(&a);
        drop(transport.peer(&b));
        assert_eq!(transport.peers.lock().len(), 2);
        transport.members("x", vec![]);
        let kept: Vec<RegionId> = transport.peers.lock().keys().cloned().collect();
        assert_eq!(kept, vec![a.clone()], "only the task still in use is kept");
        drop(in_use);
        transport.members("x", vec![]);
        assert!(transport.peers.lock().is_empty());
    }
}
