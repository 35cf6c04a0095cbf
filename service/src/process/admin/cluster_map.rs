//! The cluster map: `GET /` (a page, no assets fetched from anywhere) and
//! `GET /api/cluster` (what the page polls, documented in README as an API
//! of its own).
//!
//! The shards of every node come from the coordinator (the cluster-stats
//! query every region answers, with its shards' entity counts and which
//! are handing off or restoring), so any node's map shows the whole
//! cluster, the shards each node keeps a standby copy of included. Kafka
//! partitions, rebalances and the copies' progress are the serving node's
//! own: each node's map shows its consumers and how far its copies read.
//!
//! A map is gathered at most once per [`FRESH`]: every open page polls, and
//! each gathering asks every region of the cluster.

use crate::inspection::ClusterShardingStats;
use crate::kafka_view::{PartitionView, RebalanceView};
use crate::node::Node;
use crate::store::StandbyView;
use serde::Serialize;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

/// A map younger than this is served again rather than gathered anew.
const FRESH: Duration = Duration::from_millis(500);
/// How long the coordinator may take to gather its regions' answers.
const QUERY_TIMEOUT: Duration = Duration::from_secs(2);

/// The page, served as is.
pub(super) const PAGE: &str = include_str!("cluster_map.html");

/// What `/api/cluster` answers.
#[derive(Debug, Clone, Serialize)]
pub struct ClusterMap {
    /// The node that answered (its advertised address).
    pub node: String,
    /// When it was gathered, in milliseconds since the Unix epoch.
    pub at_ms: u64,
    pub entity_types: Vec<EntityTypeMap>,
    /// This node's assigned Kafka partitions.
    pub partitions: Vec<PartitionView>,
    /// This node's last rebalances, the newest first.
    pub rebalances: Vec<RebalanceView>,
    /// The standby copies this node keeps, by entity type and shard.
    pub standbys: Vec<StandbyView>,
}

/// One entity type's nodes and their shards.
#[derive(Debug, Clone, Serialize)]
pub struct EntityTypeMap {
    pub name: String,
    /// The node hosting its coordinator, as the serving node knows it
    /// (`None`: none known, an election under way).
    pub coordinator: Option<String>,
    /// That coordinator's epoch (0: not known to this node).
    pub coordinator_epoch: u64,
    pub nodes: Vec<NodeShards>,
    /// Nodes the coordinator knows but that did not answer in time.
    pub failed_nodes: Vec<String>,
    /// Why nothing could be gathered (the coordinator is unreachable from
    /// this node, say).
    pub error: Option<String>,
}

/// One node's shards of an entity type.
#[derive(Debug, Clone, Serialize)]
pub struct NodeShards {
    pub node: String,
    /// Live entities in the shards that answered.
    pub entities: usize,
    pub shards: Vec<ShardView>,
    /// The shards this node keeps a standby copy of: where each would
    /// start warm if its node went away.
    pub standbys: Vec<u32>,
}

/// One shard on its node.
#[derive(Debug, Clone, Serialize)]
pub struct ShardView {
    pub shard: u32,
    /// `active`, `handing_off`, `restoring`, or `no_answer` (it did not
    /// answer in time: busy, or starting).
    pub phase: &'static str,
    /// Live entities, when it answered.
    pub entities: Option<usize>,
}

impl EntityTypeMap {
    fn from_stats(name: String, stats: ClusterShardingStats) -> Self {
        let nodes = stats
            .regions
            .into_iter()
            .map(|(region, stats)| {
                let mut shards: BTreeMap<u32, ShardView> = BTreeMap::new();
                let mut put = |shard: u32, phase: &'static str| {
                    let entities = stats.stats.get(&colo_allocation::ShardId(shard)).copied();
                    shards.insert(
                        shard,
                        ShardView {
                            shard,
                            phase,
                            entities,
                        },
                    );
                };
                // The later phases win: restoring says more than no answer.
                for shard in stats.stats.keys() {
                    put(shard.0, "active");
                }
                for shard in &stats.failed {
                    put(shard.0, "no_answer");
                }
                for shard in &stats.handing_off {
                    put(shard.0, "handing_off");
                }
                for shard in &stats.restoring {
                    put(shard.0, "restoring");
                }
                NodeShards {
                    node: region.to_string(),
                    entities: stats.stats.values().sum(),
                    shards: shards.into_values().collect(),
                    standbys: stats.standbys.iter().map(|s| s.0).collect(),
                }
            })
            .collect();
        Self {
            name,
            coordinator: None,
            coordinator_epoch: 0,
            nodes,
            failed_nodes: stats
                .failed_regions
                .iter()
                .map(ToString::to_string)
                .collect(),
            error: None,
        }
    }
}

/// Gathers the map from a node, at most once per [`FRESH`].
#[derive(Debug)]
pub(super) struct ClusterMapSource {
    node: Arc<Node>,
    last: tokio::sync::Mutex<Option<(Instant, Arc<ClusterMap>)>>,
}

impl ClusterMapSource {
    pub fn new(node: Arc<Node>) -> Self {
        Self {
            node,
            last: tokio::sync::Mutex::default(),
        }
    }

    /// The map now (or at most [`FRESH`] ago). Callers that come while one
    /// is gathered wait for it and share it.
    pub async fn map(&self) -> Arc<ClusterMap> {
        let mut last = self.last.lock().await;
        if let Some((at, map)) = last.as_ref() {
            if at.elapsed() < FRESH {
                return map.clone();
            }
        }
        let map = Arc::new(self.gather().await);
        *last = Some((Instant::now(), map.clone()));
        map
    }

    async fn gather(&self) -> ClusterMap {
        let names = self.node.entity_types();
        let entity_types = futures::future::join_all(names.into_iter().map(|name| async move {
            let region = self.node.region_by_name(&name)?;
            let coordinator = self.node.coordinator_of(&name);
            let mut map = match region.cluster_stats(QUERY_TIMEOUT).await {
                Ok(stats) => EntityTypeMap::from_stats(name, stats),
                Err(e) => EntityTypeMap {
                    name,
                    coordinator: None,
                    coordinator_epoch: 0,
                    nodes: Vec::new(),
                    failed_nodes: Vec::new(),
                    error: Some(e.to_string()),
                },
            };
            if let Some((address, epoch)) = coordinator {
                map.coordinator = Some(address);
                map.coordinator_epoch = epoch;
            }
            Some(map)
        }))
        .await
        .into_iter()
        .flatten()
        .collect();
        let at_ms = crate::clock::unix_ms();
        let kafka = self.node.kafka_view();
        ClusterMap {
            node: self.node.id().to_string(),
            at_ms,
            entity_types,
            partitions: kafka.partitions(),
            rebalances: kafka.rebalances(),
            standbys: self.node.standby_copies(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inspection::RegionStats;
    use colo_allocation::{RegionId, ShardId};

    #[test]
    fn a_shard_shows_the_phase_that_says_most() {
        let stats = ClusterShardingStats {
            regions: BTreeMap::from([(
                RegionId::new("a:1"),
                RegionStats {
                    stats: BTreeMap::from([(ShardId(0), 3), (ShardId(1), 2), (ShardId(2), 0)]),
                    failed: vec![ShardId(3), ShardId(4)],
                    handing_off: vec![ShardId(1)],
                    restoring: vec![ShardId(4)],
                    assigned: Vec::new(),
                    standbys: vec![ShardId(7)],
                },
            )]),
            failed_regions: vec![RegionId::new("b:1")],
        };
        let map = EntityTypeMap::from_stats("user".into(), stats);
        let node = &map.nodes[0];
        assert_eq!(node.node, "a:1");
        assert_eq!(node.entities, 5);
        let phases: Vec<_> = node
            .shards
            .iter()
            .map(|s| (s.shard, s.phase, s.entities))
            .collect();
        assert_eq!(
            phases,
            [
                (0, "active", Some(3)),
                (1, "handing_off", Some(2)),
                (2, "active", Some(0)),
                (3, "no_answer", None),
                (4, "restoring", None),
            ]
        );
        assert_eq!(node.standbys, [7]);
        assert_eq!(map.failed_nodes, ["b:1"]);
    }
}
