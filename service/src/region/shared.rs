//! What routing needs, shared by every handle of a region and its task:
//! the routing table, the node, the lease, and what the region's contact
//! with its coordinator lets senders know.

use super::{activity, lease, routes};
use crate::entity::{Entity, EntityType};
use crate::envelope::Envelope;
use crate::error::TellError;
use crate::metrics::RegionMetrics;
use crate::node_context::NodeContext;
use colo_allocation::{MessageExtractor, RegionId};
use routes::Routes;
use std::sync::Arc;

/// What routing needs, shared by every handle and the region task.
pub(crate) struct Shared<E: Entity> {
    pub id: RegionId,
    pub entity_type: Arc<EntityType<E>>,
    pub extractor: Arc<dyn MessageExtractor>,
    pub routes: Routes<E>,
    pub proxy: bool,
    pub node: Arc<NodeContext>,
    pub metrics: RegionMetrics,
    pub activity: Arc<activity::Activity>,
    /// Until when local shards may handle messages (see `lease.rs`).
    pub lease: Arc<lease::Lease>,
    /// Has registered with a coordinator once and is not leaving: what
    /// readiness means. It stays set while the coordinator is away, as
    /// Akka's sharding health check does: the region still serves the
    /// shards it knows.
    pub ready: std::sync::atomic::AtomicBool,
    /// The coordinator answers (the lease is being renewed).
    pub reachable: std::sync::atomic::AtomicBool,
    /// Registered on a live link: the region can learn shard homes now.
    pub linked: std::sync::atomic::AtomicBool,
    /// Why the coordinator refused this region, while it does.
    pub refused: parking_lot::Mutex<Option<String>>,
    /// Fenced and not registered again: what other nodes send now waits
    /// here while they may route newer messages to a new home, so it is
    /// marked delayed.
    pub fenced: std::sync::atomic::AtomicBool,
}

impl<E: Entity> Shared<E> {
    pub(super) async fn route(&self, env: Envelope<E>) -> Result<routes::Placement, TellError> {
        self.routes.route(env).await
    }
}

/// Where the extractor puts a fixed set of probe ids, hashed: regions that
/// disagree on it would disagree on where entities live, so the
/// coordinator refuses a region whose fingerprint differs from the others'.
pub(crate) fn extractor_fingerprint(extractor: &dyn MessageExtractor) -> u64 {
    use std::fmt::Write;
    const PROBES: usize = 64;
    let mut placed = extractor.number_of_shards().to_string();
    for i in 0..PROBES {
        let shard = extractor.shard_id(&format!("colo-extractor-probe-{i}"));
        let _ = write!(placed, ",{}", shard.0);
    }
    colo_allocation::stable_hash(&placed)
}
