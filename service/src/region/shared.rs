//! What routing needs, shared by every handle of a region and its task:
//! the routing table, the node, the lease, and what the region's contact
//! with its coordinator lets senders know ([`ContactView`]).

use super::{activity, lease, routes};
use crate::entity::{Entity, EntityType};
use crate::metrics::RegionMetrics;
use crate::node_context::NodeContext;
use colo_allocation::{MessageExtractor, RegionId};
use routes::Routes;
use std::sync::atomic::{AtomicU8, Ordering};
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
    /// What the region's contact with its coordinator lets senders know,
    /// published by the region task.
    pub contact: PublishedContact,
    /// How far each local durable shard's changes are durable.
    pub durable: Arc<crate::store::DurableShards>,
    /// The shards whose partitions this node's consumers hold.
    pub assignments: Arc<super::assigned::Assignments>,
    /// The regions the coordinator last listed, its proxies excepted
    /// (standby copies are kept among them).
    pub members: tokio::sync::watch::Sender<Vec<RegionId>>,
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

/// The region's contact with its coordinator as senders see it. The region
/// task derives it from its `Contact` and its own phase after every change
/// and publishes it whole, so that no reader sees half of a change and no
/// field is kept in step with the others by hand.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct ContactView {
    /// Has registered with a coordinator once and is not leaving: what
    /// readiness means. It stays set while the coordinator is away, as
    /// Akka's sharding health check does: the region still serves the
    /// shards it knows.
    pub ready: bool,
    /// The coordinator answers on the current link (the lease is renewed).
    pub reachable: bool,
    /// Registered on a live link: the region can learn shard homes now.
    pub registered: bool,
    /// Fenced and not registered again: what other nodes send now waits
    /// here while they may route newer messages to a new home, so it is
    /// marked delayed.
    pub fenced: bool,
}

impl ContactView {
    const READY: u8 = 1;
    const REACHABLE: u8 = 2;
    const REGISTERED: u8 = 4;
    const FENCED: u8 = 8;

    fn encode(self) -> u8 {
        let bit = |on: bool, bit: u8| if on { bit } else { 0 };
        bit(self.ready, Self::READY)
            | bit(self.reachable, Self::REACHABLE)
            | bit(self.registered, Self::REGISTERED)
            | bit(self.fenced, Self::FENCED)
    }

    fn decode(bits: u8) -> Self {
        Self {
            ready: bits & Self::READY != 0,
            reachable: bits & Self::REACHABLE != 0,
            registered: bits & Self::REGISTERED != 0,
            fenced: bits & Self::FENCED != 0,
        }
    }
}

/// The last [`ContactView`] the region task published, read by every
/// message that arrives from another node: one atomic load, no lock.
#[derive(Default)]
pub(crate) struct PublishedContact {
    view: AtomicU8,
    /// Why the coordinator refused this region, while it does: read only
    /// by inspection, so it may sit behind a lock.
    refused: parking_lot::Mutex<Option<String>>,
}

impl PublishedContact {
    pub fn view(&self) -> ContactView {
        ContactView::decode(self.view.load(Ordering::Acquire))
    }

    pub fn refused(&self) -> Option<String> {
        self.refused.lock().clone()
    }

    /// Only the region task publishes.
    pub(super) fn publish(&self, view: ContactView, refused: Option<&str>) {
        self.view.store(view.encode(), Ordering::Release);
        let mut published = self.refused.lock();
        if published.as_deref() != refused {
            *published = refused.map(str::to_string);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::ContactView;

    #[test]
    fn a_published_contact_view_reads_back_as_it_was_published() {
        for bits in 0..16u8 {
            let view = ContactView::decode(bits);
            assert_eq!(ContactView::decode(view.encode()), view);
            assert_eq!(view.encode(), bits);
        }
    }
}
