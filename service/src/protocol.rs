//! The coordinator protocol, as types split by direction: what a region sends
//! the coordinator, what the coordinator sends a region. The coordinator's
//! persisted events are in [`crate::coordinator::ledger`].
//!
//! Each region speaks to the coordinator over one ordered, bidirectional link
//! ([`CoordinatorLink`]); the in-memory transport makes it a pair of channels,
//! the gRPC transport a stream.
//!
//! Liveness is part of the protocol, whatever the transport: a region sends
//! a heartbeat every `heartbeat_interval` and the coordinator answers each.
//! The answers are the region's lease: without one for `fence_timeout` it
//! stops its shards, and the coordinator, which has not heard from it for
//! `region_timeout`, places them elsewhere only after that.

use crate::inspection::{ClusterShardingStats, RegionStats};
use colo_allocation::{RegionId, ShardId};
use serde::{Deserialize, Serialize};
use std::time::Duration;
use tokio::sync::mpsc;

/// What a region sends its coordinator.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum RegionToCoordinator {
    /// Sent on connect and every `retry_interval` until answered by
    /// [`CoordinatorToRegion::RegisterAck`] (or refused with
    /// [`CoordinatorToRegion::RegisterRefused`]). A proxy hosts nothing.
    /// `hosted`: the shards the region still runs, when it registers again
    /// after losing its link; the coordinator keeps those that have no other
    /// home there, answers the others with their [`ShardHome`] (which makes
    /// the region stop its copy), and forgets any home it had recorded on
    /// the region that the region no longer runs. `number_of_shards` and
    /// `extractor` (a fingerprint of where the extractor puts a fixed set of
    /// ids) must match the cluster's. `ping` is echoed in the ack.
    ///
    /// [`ShardHome`]: CoordinatorToRegion::ShardHome
    Register {
        region: RegionId,
        proxy: bool,
        hosted: Vec<ShardId>,
        number_of_shards: u32,
        extractor: u64,
        ping: u64,
    },
    /// Every `heartbeat_interval`; answered by
    /// [`CoordinatorToRegion::HeartbeatAck`] with the same `ping`.
    Heartbeat { ping: u64 },
    /// Where does this shard live? Answered by [`CoordinatorToRegion::ShardHome`],
    /// possibly much later (during a hand-off, or before `min_members`);
    /// resent every `retry_interval` while messages wait.
    GetShardHome { shard: ShardId },
    /// Answers [`CoordinatorToRegion::HostShard`]: the shard runs here now.
    ShardStarted { shard: ShardId },
    /// Answers [`CoordinatorToRegion::BeginHandOff`]: this region buffers the
    /// shard, and everything it forwarded earlier has reached the old home.
    BeginHandOffAck { shard: ShardId },
    /// Answers [`CoordinatorToRegion::HandOff`]: the shard's entities are stopped.
    ShardStopped { shard: ShardId },
    /// The region is leaving: move its shards away. No direct answer; the
    /// coordinator hands off each shard, then the region unregisters.
    GracefulShutdown,
    /// Asks for the stats of every region; answered by
    /// [`CoordinatorToRegion::ClusterStats`] within `timeout`.
    GetClusterStats { request: u64, timeout: Duration },
    /// Answers [`CoordinatorToRegion::GetRegionStats`].
    RegionStats { request: u64, stats: RegionStats },
    /// These shards should live in these regions, now (a Kafka consumer
    /// group assigned their partitions there). The coordinator hands off
    /// each one that lives elsewhere and places it, without waiting for a
    /// rebalance round, and answers [`CoordinatorToRegion::PlacementDone`]
    /// once every one runs where it should. Refused unless the allocation
    /// strategy takes locations from outside (the external strategy).
    ///
    /// `source` names what claims the shards (the topic whose partitions
    /// were assigned): a location waits for another live region's claim of
    /// the same source to end (a partition assigned twice for a while);
    /// a shard another source's claim keeps on another region stays there
    /// and is answered as `elsewhere`.
    UpdateLocations {
        request: u64,
        locations: Vec<(ShardId, RegionId)>,
        source: String,
    },
    /// Hand these shards off from this region, now (their Kafka partitions
    /// were revoked), ending its claims of `source`: answered by
    /// [`CoordinatorToRegion::PlacementDone`] once none of them runs here.
    /// A desired location naming this region is forgotten; the shards get
    /// a home again when a location is set or a message asks for one.
    ReleaseShards {
        request: u64,
        shards: Vec<ShardId>,
        source: String,
    },
}

impl RegionToCoordinator {
    /// The shard the message is about, if it is about one.
    pub fn shard(&self) -> Option<ShardId> {
        match self {
            Self::GetShardHome { shard }
            | Self::ShardStarted { shard }
            | Self::BeginHandOffAck { shard }
            | Self::ShardStopped { shard } => Some(*shard),
            Self::Register { .. }
            | Self::Heartbeat { .. }
            | Self::GracefulShutdown
            | Self::GetClusterStats { .. }
            | Self::RegionStats { .. }
            | Self::UpdateLocations { .. }
            | Self::ReleaseShards { .. } => None,
        }
    }

    /// Every shard the message names: checked against the number of shards
    /// before anything is done with it.
    pub fn shards(&self) -> Vec<ShardId> {
        match self {
            Self::UpdateLocations { locations, .. } => locations.iter().map(|(s, _)| *s).collect(),
            Self::ReleaseShards { shards, .. } => shards.clone(),
            other => other.shard().into_iter().collect(),
        }
    }
}

/// What the coordinator sends a region.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum CoordinatorToRegion {
    /// Answers `Register`, echoing its `ping`.
    RegisterAck { ping: u64 },
    /// Answers `Register` from a region that cannot join: it disagrees with
    /// the cluster on the number of shards or the extractor. The region
    /// logs the reason and tries again later (an operator must fix it).
    RegisterRefused { reason: String },
    /// Answers `Heartbeat`: the coordinator heard the region at or after the
    /// time it sent heartbeat `ping`.
    HeartbeatAck { ping: u64 },
    /// Answers `GetShardHome`: `region` hosts the shard.
    ShardHome { shard: ShardId, region: RegionId },
    /// Start this shard here; answered by `ShardStarted`, resent after
    /// `shard_start_timeout` without one.
    HostShard { shard: ShardId },
    /// A hand-off of the shard starts: buffer its messages; answered by
    /// `BeginHandOffAck`.
    BeginHandOff { shard: ShardId },
    /// Stop the shard (sent to its owner after every region acked
    /// `BeginHandOff`); answered by `ShardStopped`.
    HandOff { shard: ShardId },
    /// A region left without handing off; forget the homes it had.
    RegionTerminated { region: RegionId },
    /// Every region and proxy registered now: sent after each
    /// `RegisterAck`, and to every region whenever the set changes. A node
    /// takes Links and reply addresses only from the nodes its
    /// coordinators list. `proxies` says which of `regions` are proxies:
    /// they host nothing and keep no standby copies, so the nodes rank the
    /// copies' keepers over the rest, as the coordinator's placement does.
    Members {
        regions: Vec<RegionId>,
        proxies: Vec<RegionId>,
    },
    /// Asks for this region's stats; answered by `RegionStats`.
    GetRegionStats { request: u64, timeout: Duration },
    /// Answers `GetClusterStats`.
    ClusterStats {
        request: u64,
        stats: ClusterShardingStats,
    },
    /// Answers `UpdateLocations` or `ReleaseShards`: done, except for the
    /// `failed` shards (a hand-off that failed, a region that is not
    /// registered) and the shards that stay `elsewhere` (another source's
    /// claim keeps them on another region), or not done at all for the
    /// `refused` reason.
    PlacementDone {
        request: u64,
        failed: Vec<ShardId>,
        refused: Option<String>,
        elsewhere: Vec<ShardId>,
    },
}

/// A region's end of its link to the coordinator. Dropping it is how the
/// coordinator learns that the region has left the link.
///
/// Both directions are unbounded so that no protocol message is ever
/// dropped or waited for (an ack lost to a full queue would stall a
/// hand-off). They are bounded by the protocol itself: every message
/// answers a request of the other side or drives a hand-off, a region asks
/// for each shard's home at most once per `retry_interval`, and heartbeats
/// are one per interval.
#[derive(Debug)]
pub struct CoordinatorLink {
    /// Towards the coordinator.
    pub to_coordinator: mpsc::UnboundedSender<RegionToCoordinator>,
    /// From the coordinator.
    pub from_coordinator: mpsc::UnboundedReceiver<CoordinatorToRegion>,
}
