//! An in-memory network: the nodes of one process, connected through the
//! same byte boundary as real ones (every batch and reply is encoded and
//! decoded), so tests exercise the codec and the runtime's handling of
//! unreachable nodes without sockets.

use super::{Inbound, Transport, TransportError};
use crate::codec;
use crate::coordinator::CoordinatorHandle;
use crate::envelope::{WireEnvelope, WireReply};
use crate::protocol::CoordinatorLink;
use colo_allocation::RegionId;
use futures::future::BoxFuture;
use parking_lot::RwLock;
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// The nodes and coordinators of one process.
#[derive(Default, Clone)]
pub struct InMemoryNetwork {
    inner: Arc<Inner>,
}

#[derive(Default)]
struct Inner {
    nodes: RwLock<HashMap<RegionId, Arc<dyn Inbound>>>,
    coordinators: RwLock<HashMap<String, CoordinatorHandle>>,
    /// Simulated one-way delay of deliveries to a node.
    latency: RwLock<HashMap<RegionId, Duration>>,
    /// Deliveries under way, per target node.
    in_flight: RwLock<HashMap<RegionId, Arc<AtomicUsize>>>,
}

impl std::fmt::Debug for InMemoryNetwork {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InMemoryNetwork")
            .field("nodes", &self.inner.nodes.read().keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

impl InMemoryNetwork {
    /// An empty network.
    pub fn new() -> Self {
        Self::default()
    }

    /// The transport of node `name`.
    pub fn transport(&self, name: &str) -> Arc<dyn Transport> {
        Arc::new(InMemoryTransport {
            local: RegionId::new(name),
            network: self.clone(),
        })
    }

    /// Delays every delivery to `node` by `latency`, as a slow link would
    /// (tests use it to keep a batch in flight while something else happens).
    pub fn set_latency(&self, node: &str, latency: Duration) {
        self.inner
            .latency
            .write()
            .insert(RegionId::new(node), latency);
    }

    /// Deliveries to `node` under way now (sent, not yet routed there).
    pub fn in_flight(&self, node: &str) -> usize {
        self.inner
            .in_flight
            .read()
            .get(&RegionId::new(node))
            .map_or(0, |n| n.load(Ordering::Relaxed))
    }

    fn in_flight_counter(&self, node: &RegionId) -> Arc<AtomicUsize> {
        self.inner
            .in_flight
            .write()
            .entry(node.clone())
            .or_default()
            .clone()
    }

    /// Makes a coordinator reachable by every node.
    pub fn host_coordinator(&self, coordinator: CoordinatorHandle) {
        self.inner
            .coordinators
            .write()
            .insert(coordinator.entity_type().to_string(), coordinator);
    }

    fn node(&self, name: &RegionId) -> Result<Arc<dyn Inbound>, TransportError> {
        self.inner
            .nodes
            .read()
            .get(name)
            .cloned()
            .ok_or_else(|| TransportError::Unreachable(name.clone()))
    }
}

struct InMemoryTransport {
    local: RegionId,
    network: InMemoryNetwork,
}

impl Transport for InMemoryTransport {
    fn local(&self) -> &RegionId {
        &self.local
    }

    fn attach(&self, inbound: Arc<dyn Inbound>) {
        self.network
            .inner
            .nodes
            .write()
            .insert(self.local.clone(), inbound);
    }

    fn detach(&self) {
        self.network.inner.nodes.write().remove(&self.local);
    }

    fn deliver(
        &self,
        to: &RegionId,
        batch: Vec<WireEnvelope>,
    ) -> BoxFuture<'_, Result<(), TransportError>> {
        let target = self.network.node(to);
        let latency = self.network.inner.latency.read().get(to).copied();
        let in_flight = self.network.in_flight_counter(to);
        let to = to.clone();
        Box::pin(async move {
            let target = target?;
            in_flight.fetch_add(1, Ordering::Relaxed);
            if let Some(latency) = latency {
                tokio::time::sleep(latency).await;
            }
            in_flight.fetch_sub(1, Ordering::Relaxed);
            let bytes = codec::encode(&batch)?;
            let batch: Vec<WireEnvelope> = codec::decode(&bytes)?;
            target
                .deliver(batch)
                .await
                .map_err(|accepted| TransportError::Refused {
                    node: to.clone(),
                    accepted,
                })
        })
    }

    fn reply(&self, to: &RegionId, reply: WireReply) -> BoxFuture<'_, Result<(), TransportError>> {
        let target = self.network.node(to);
        Box::pin(async move {
            let target = target?;
            let bytes = codec::encode(&reply)?;
            target.reply(codec::decode(&bytes)?);
            Ok(())
        })
    }

    fn connect_coordinator(
        &self,
        entity_type: &str,
        region: RegionId,
    ) -> BoxFuture<'_, Result<CoordinatorLink, TransportError>> {
        let coordinator = self
            .network
            .inner
            .coordinators
            .read()
            .get(entity_type)
            .cloned();
        let entity_type = entity_type.to_string();
        Box::pin(async move {
            let coordinator =
                coordinator.ok_or_else(|| TransportError::NoCoordinator(entity_type.clone()))?;
            coordinator
                .connect(region)
                .await
                .map_err(|_| TransportError::NoCoordinator(entity_type))
        })
    }
}
