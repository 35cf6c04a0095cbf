//! The coordinator protocol, as types split by direction: what a region sends
//! the coordinator, what the coordinator sends a region. The coordinator's
//! persisted events are in [`crate::coordinator::state`].
//!
//! Each region speaks to the coordinator over one ordered, bidirectional link
//! ([`CoordinatorLink`]); the in-memory transport makes it a pair of channels,
//! the gRPC transport a stream.

use crate::inspection::{ClusterShardingStats, RegionStats};
use colo_allocation::{RegionId, ShardId};
use serde::{Deserialize, Serialize};
use std::time::Duration;
use tokio::sync::mpsc;

/// What a region sends its coordinator.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum RegionToCoordinator {
    /// Sent on connect and every `retry_interval` until answered by
    /// [`CoordinatorToRegion::RegisterAck`]. A proxy hosts nothing.
    /// `hosted`: the shards the region still runs, when it registers again
    /// after losing its link; the coordinator keeps those that have no other
    /// home there, and answers the others with their [`ShardHome`], which
    /// makes the region stop its copy.
    ///
    /// [`ShardHome`]: CoordinatorToRegion::ShardHome
    Register {
        region: RegionId,
        proxy: bool,
        hosted: Vec<ShardId>,
    },
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
}

/// What the coordinator sends a region.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum CoordinatorToRegion {
    /// Answers `Register`.
    RegisterAck,
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
    /// Asks for this region's stats; answered by `RegionStats`.
    GetRegionStats { request: u64, timeout: Duration },
    /// Answers `GetClusterStats`.
    ClusterStats {
        request: u64,
        stats: ClusterShardingStats,
    },
}

/// A region's end of its link to the coordinator. Dropping it is how the
/// coordinator learns that the region is gone.
#[derive(Debug)]
pub struct CoordinatorLink {
    /// Towards the coordinator.
    pub to_coordinator: mpsc::Sender<RegionToCoordinator>,
    /// From the coordinator.
    pub from_coordinator: mpsc::Receiver<CoordinatorToRegion>,
}

/// Capacity of each direction of a coordinator link: protocol traffic is a
/// few messages per shard and hand-off, so this only absorbs bursts such as a
/// region asking for a thousand shard homes at once.
pub(crate) const LINK_CAPACITY: usize = 4096;
