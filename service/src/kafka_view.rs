//! What this node's Kafka consumers are doing now, kept for the cluster map
//! (`admin/cluster_map.rs`): each assigned partition's lag, records in
//! flight and whether it is paused, and the node's last rebalances with how
//! long each took here. Metrics carry the same figures as series; the map
//! needs them as one current picture, and the rebalances as events.
//!
//! Below the regions and the Kafka ingest (they write it through the
//! node's context), so that the admin server can read it without importing
//! either.

use parking_lot::Mutex;
use serde::Serialize;
use std::collections::{BTreeMap, VecDeque};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// How many rebalances the view keeps: the map shows the last ones.
const REBALANCES_KEPT: usize = 20;

/// One assigned partition, as its consumer sees it now.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PartitionView {
    pub entity_type: String,
    pub topic: String,
    pub partition: i32,
    /// Records between the partition's end and the last one read; unknown
    /// until the consumer's first statistics.
    pub lag: Option<i64>,
    pub in_flight: usize,
    pub paused: bool,
    /// Its records wait for the partition's shard to start here.
    pub waiting_for_shard: bool,
}

/// One rebalance this node took part in.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RebalanceView {
    pub entity_type: String,
    /// `assigned`, `revoked` or `lost`.
    pub kind: &'static str,
    /// When it ended here, in milliseconds since the Unix epoch.
    pub at_ms: u64,
    /// How long this node's part in it took.
    pub seconds: f64,
    pub partitions: usize,
}

type PartitionKey = (String, String, i32);

/// The node's Kafka partitions and last rebalances.
#[derive(Debug, Default)]
pub struct KafkaView {
    partitions: Mutex<BTreeMap<PartitionKey, PartitionView>>,
    rebalances: Mutex<VecDeque<RebalanceView>>,
}

impl KafkaView {
    /// A partition's state now.
    pub fn partition(&self, view: PartitionView) {
        let key = (view.entity_type.clone(), view.topic.clone(), view.partition);
        self.partitions.lock().insert(key, view);
    }

    /// A partition is no longer assigned here.
    pub fn partition_gone(&self, entity_type: &str, topic: &str, partition: i32) {
        self.partitions
            .lock()
            .remove(&(entity_type.to_string(), topic.to_string(), partition));
    }

    /// A rebalance ended here.
    pub fn rebalance(
        &self,
        entity_type: &str,
        kind: &'static str,
        took: Duration,
        partitions: usize,
    ) {
        let at_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
            .unwrap_or_default();
        let mut rebalances = self.rebalances.lock();
        if rebalances.len() == REBALANCES_KEPT {
            rebalances.pop_front();
        }
        rebalances.push_back(RebalanceView {
            entity_type: entity_type.to_string(),
            kind,
            at_ms,
            seconds: took.as_secs_f64(),
            partitions,
        });
    }

    /// The assigned partitions, by entity type, topic and partition.
    pub fn partitions(&self) -> Vec<PartitionView> {
        self.partitions.lock().values().cloned().collect()
    }

    /// The last rebalances, the newest first.
    pub fn rebalances(&self) -> Vec<RebalanceView> {
        self.rebalances.lock().iter().rev().cloned().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn partition(n: i32, lag: i64) -> PartitionView {
        PartitionView {
            entity_type: "user".into(),
            topic: "t".into(),
            partition: n,
            lag: Some(lag),
            in_flight: 0,
            paused: false,
            waiting_for_shard: false,
        }
    }

    #[test]
    fn a_partition_shows_its_latest_state_until_it_is_gone() {
        let view = KafkaView::default();
        view.partition(partition(2, 5));
        view.partition(partition(1, 3));
        view.partition(partition(2, 0));
        let lags: Vec<_> = view
            .partitions()
            .iter()
            .map(|p| (p.partition, p.lag))
            .collect();
        assert_eq!(lags, [(1, Some(3)), (2, Some(0))]);
        view.partition_gone("user", "t", 1);
        assert_eq!(view.partitions().len(), 1);
    }

    #[test]
    fn only_the_last_rebalances_are_kept_newest_first() {
        let view = KafkaView::default();
        for n in 0..REBALANCES_KEPT + 5 {
            view.rebalance("user", "assigned", Duration::from_millis(10), n);
        }
        let kept = view.rebalances();
        assert_eq!(kept.len(), REBALANCES_KEPT);
        assert_eq!(kept[0].partitions, REBALANCES_KEPT + 4);
        assert_eq!(kept[REBALANCES_KEPT - 1].partitions, 5);
    }
}
