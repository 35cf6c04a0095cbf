//! The two inspection queries and their answers.
//!
//! Both are best effort with a deadline: a shard (or region) that does not
//! answer in time is listed as failed rather than holding the answer back.

use crate::entity::EntityId;
use colo_allocation::{RegionId, ShardId};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// One region's shards and the entities alive in each.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CurrentRegionState {
    /// Hosted shards, by id, with their live entity ids (sorted).
    pub shards: BTreeMap<ShardId, Vec<EntityId>>,
    /// Shards that did not answer in time.
    pub failed: Vec<ShardId>,
    /// Whether the coordinator answers the region now. While it does not,
    /// the region serves the shards it hosts until its fence timeout and
    /// buffers messages for shards without a known home.
    pub coordinator_reachable: bool,
}

impl CurrentRegionState {
    /// Live entities in the region's shards that answered.
    pub fn total_entities(&self) -> usize {
        self.shards.values().map(Vec::len).sum()
    }
}

/// One region's shard -> number of live entities.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RegionStats {
    /// Hosted shards with their number of live entities.
    pub stats: BTreeMap<ShardId, usize>,
    /// Shards that did not answer in time.
    pub failed: Vec<ShardId>,
    /// Shards whose entities are stopping here for a hand-off.
    #[serde(default)]
    pub handing_off: Vec<ShardId>,
    /// Hosted shards whose durable state is still being restored: they
    /// take no messages yet, so they are usually among `failed` too.
    #[serde(default)]
    pub restoring: Vec<ShardId>,
    /// Shards whose Kafka partitions this region's node consumes, hosted
    /// here yet or not (a partition waits for its shard while its previous
    /// owner releases it).
    #[serde(default)]
    pub assigned: Vec<ShardId>,
    /// Shards this region's node keeps a standby copy of: where a shard
    /// would start warm, which every node's cluster map shows.
    #[serde(default)]
    pub standbys: Vec<ShardId>,
}

/// Every region's stats, as the coordinator gathered them.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClusterShardingStats {
    /// Stats per region that answered.
    pub regions: BTreeMap<RegionId, RegionStats>,
    /// Regions that did not answer in time.
    pub failed_regions: Vec<RegionId>,
}

impl ClusterShardingStats {
    /// Live entities across the cluster.
    pub fn total_entities(&self) -> usize {
        self.regions.values().flat_map(|r| r.stats.values()).sum()
    }
}
