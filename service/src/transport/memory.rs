//! An in-memory network: the nodes of one process, connected through the
//! same byte boundary as real ones (every batch and reply is encoded and
//! decoded), so tests exercise the codec and the runtime's handling of
//! unreachable nodes without sockets.

use super::{Recipient, Sender, Transport, TransportError};
use crate::codec;
use crate::coordinator::CoordinatorHandle;
use crate::envelope::{WireEnvelope, WireReply};
use crate::protocol::CoordinatorLink;
use crate::tasks::TaskSet;
use colo_allocation::RegionId;
use futures::future::BoxFuture;
use parking_lot::RwLock;
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;

/// The nodes and coordinators of one process.
#[derive(Default, Clone)]
pub struct InMemoryNetwork {
    inner: Arc<Inner>,
}

#[derive(Default)]
struct Inner {
    nodes: RwLock<HashMap<RegionId, Arc<dyn Recipient>>>,
    coordinators: RwLock<HashMap<String, CoordinatorHandle>>,
    /// Simulated one-way delay of deliveries to a node.
    latency: RwLock<HashMap<RegionId, Duration>>,
    /// Deliveries under way, per target node.
    in_flight: RwLock<HashMap<RegionId, Arc<AtomicUsize>>>,
    /// Nodes whose coordinator links lose everything, both ways.
    cut: RwLock<HashSet<RegionId>>,
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
            incarnation: super::new_incarnation(),
            network: self.clone(),
            tasks: TaskSet::default(),
        })
    }

    /// Partitions `node` from the coordinator: everything on its coordinator
    /// links is lost, both ways, while the links stay open and the node's
    /// shards keep running, as when a network drops packets between two
    /// hosts. Other nodes still reach it.
    pub fn partition_from_coordinator(&self, node: &str) {
        self.inner.cut.write().insert(RegionId::new(node));
    }

    /// Ends the partition of `node`.
    pub fn heal(&self, node: &str) {
        self.inner.cut.write().remove(&RegionId::new(node));
    }

    fn is_cut(&self, node: &RegionId) -> bool {
        self.inner.cut.read().contains(node)
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

    fn node(&self, name: &RegionId) -> Result<Arc<dyn Recipient>, TransportError> {
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
    incarnation: u64,
    network: InMemoryNetwork,
    /// The relays of its coordinator links: stopped when the node detaches.
    tasks: TaskSet,
}

impl InMemoryTransport {
    /// Puts a relay between a region and its coordinator link, so that a
    /// partition can drop what crosses it. Either end closing closes both.
    fn relay(&self, inner: CoordinatorLink) -> CoordinatorLink {
        let CoordinatorLink {
            to_coordinator: up,
            from_coordinator: mut down,
        } = inner;
        let (to_coordinator, mut from_region) = mpsc::unbounded_channel();
        let (to_region, from_coordinator) = mpsc::unbounded_channel();
        let network = self.network.clone();
        let local = self.local.clone();
        self.tasks.spawn(async move {
            loop {
                tokio::select! {
                    message = from_region.recv() => match message {
                        Some(message) if !network.is_cut(&local) => {
                            if up.send(message).is_err() {
                                return;
                            }
                        }
                        Some(_) => {}
                        None => return,
                    },
                    message = down.recv() => match message {
                        Some(message) if !network.is_cut(&local) => {
                            if to_region.send(message).is_err() {
                                break;
                            }
                        }
                        Some(_) => {}
                        None => return,
                    },
                }
            }
            // The region left the link: what it sent before still goes up
            // (its last ShardStopped, say), as a network link delivers
            // what was sent before it closed.
            while let Some(message) = from_region.recv().await {
                if network.is_cut(&local) || up.send(message).is_err() {
                    return;
                }
            }
        });
        CoordinatorLink {
            to_coordinator,
            from_coordinator,
        }
    }
}

impl Transport for InMemoryTransport {
    fn local(&self) -> &RegionId {
        &self.local
    }

    fn incarnation(&self) -> u64 {
        self.incarnation
    }

    fn attach(&self, inbound: Arc<dyn Recipient>) {
        self.network
            .inner
            .nodes
            .write()
            .insert(self.local.clone(), inbound);
    }

    fn detach(&self) {
        self.network.inner.nodes.write().remove(&self.local);
    }

    fn abort(&self) {
        self.detach();
        self.tasks.abort_now();
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
        let from = Sender {
            node: self.local.clone(),
            incarnation: self.incarnation,
        };
        Box::pin(async move {
            let target = target?;
            in_flight.fetch_add(1, Ordering::Relaxed);
            if let Some(latency) = latency {
                tokio::time::sleep(latency).await;
            }
            in_flight.fetch_sub(1, Ordering::Relaxed);
            let bytes = codec::encode(&batch)?;
            let batch: Vec<WireEnvelope> = codec::decode(&bytes)?;
            // Flow control: wait while the receiver holds a window's worth
            // of this node's envelopes. A receiver that has stopped never
            // took the batch.
            let credits = target.credits(&from);
            credits
                .acquire(batch.len() as u64)
                .await
                .map_err(|_| TransportError::Unreachable(to.clone()))?;
            target
                .deliver(&from, batch, &credits)
                .map_err(|accepted| TransportError::Refused {
                    node: to.clone(),
                    accepted,
                })
        })
    }

    fn reply(&self, to: &RegionId, reply: WireReply) -> Result<(), TransportError> {
        let target = self.network.node(to)?;
        let bytes = codec::encode(&reply)?;
        target.reply(codec::decode(&bytes)?);
        Ok(())
    }

    fn coordinator_of(&self, entity_type: &str) -> Option<(String, u64)> {
        let coordinators = self.network.inner.coordinators.read();
        coordinators
            .contains_key(entity_type)
            .then(|| ("this process".to_string(), 0))
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
            let inner = coordinator
                .connect(region)
                .await
                .map_err(|_| TransportError::NoCoordinator(entity_type))?;
            Ok(self.relay(inner))
        })
    }
}
