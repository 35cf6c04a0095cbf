//! What this node's Kafka consumers are doing now, kept for the cluster map
//! (`admin/cluster_map.rs`): each assigned partition's lag, records in
//! flight and whether it is paused, and the node's last rebalances with how
//! long each took here. Metrics carry the same figures as series; the map
//! needs them as one current picture, and the rebalances as events.
//!
//! A move's pause is seen whole on neither node: the old owner knows when
//! it handled the partition's last record, the new one when it handled its
//! first. The new owner reads it off the first record itself: produced
//! while the partition was between owners, it waited the pause out, so
//! its age when handled here is the pause as a reader of the partition's
//! state felt it (plus the usual latency, and minus nothing: a partition
//! that was idle through the move shows no pause, rightly). The producers'
//! clocks stand in for the old owner's, so a skew between them shows.
//!
//! Below the regions and the Kafka ingest (they write it through the
//! node's context), so that the admin server can read it without importing
//! either.

use parking_lot::Mutex;
use serde::Serialize;
use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

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
    /// Which rebalance it is, for the partitions' first records to find it.
    #[serde(skip)]
    tag: RebalanceTag,
    pub entity_type: String,
    /// `assigned`, `revoked` or `lost`.
    pub kind: &'static str,
    /// When it ended here, in milliseconds since the Unix epoch.
    pub at_ms: u64,
    /// How long this node's part in it took.
    pub seconds: f64,
    pub partitions: usize,
    /// A revoke's steps in the order they ran, each with how long it took:
    /// the moved partitions' pause began with the first.
    pub steps: Vec<RevokeStep>,
    /// An assignment's partitions that handled a record here since.
    pub arrived: usize,
    /// Of those, the longest from the assignment to the first record
    /// handled: the part of the pause after Kafka gave the partition here.
    pub first_record_seconds: Option<f64>,
    /// Of those, the oldest first record when handled, from its Kafka
    /// timestamp: the pause the move cost (see the module's doc).
    pub pause_seconds: Option<f64>,
}

/// One step of a revoke on this node.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RevokeStep {
    /// `settle`, `commit` or `release`.
    pub step: &'static str,
    pub seconds: f64,
}

/// Names a rebalance kept in the view: an assignment's partitions report
/// their first records to it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RebalanceTag(u64);

type PartitionKey = (String, String, i32);

/// The node's Kafka partitions and last rebalances.
#[derive(Debug, Default)]
pub struct KafkaView {
    partitions: Mutex<BTreeMap<PartitionKey, PartitionView>>,
    rebalances: Mutex<VecDeque<RebalanceView>>,
    /// The tag of the next rebalance.
    next_tag: AtomicU64,
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

    /// A rebalance ended here; `steps` are a revoke's.
    pub fn rebalance(
        &self,
        entity_type: &str,
        kind: &'static str,
        took: Duration,
        partitions: usize,
        steps: Vec<RevokeStep>,
    ) -> RebalanceTag {
        let at_ms = crate::clock::unix_ms();
        let tag = RebalanceTag(self.next_tag.fetch_add(1, Ordering::Relaxed));
        let mut rebalances = self.rebalances.lock();
        if rebalances.len() == REBALANCES_KEPT {
            rebalances.pop_front();
        }
        rebalances.push_back(RebalanceView {
            tag,
            entity_type: entity_type.to_string(),
            kind,
            at_ms,
            seconds: took.as_secs_f64(),
            partitions,
            steps,
            arrived: 0,
            first_record_seconds: None,
            pause_seconds: None,
        });
        tag
    }

    /// A partition of the assignment `tag` handled its first record here
    /// `since_assigned` after it, the record `age` old (none: it carried
    /// no timestamp). Nothing, if the rebalance is no longer kept.
    pub fn arrived(&self, tag: RebalanceTag, since_assigned: Duration, age: Option<Duration>) {
        let mut rebalances = self.rebalances.lock();
        let Some(rebalance) = rebalances.iter_mut().rev().find(|r| r.tag == tag) else {
            return;
        };
        let longest = |kept: Option<f64>, new: f64| Some(kept.map_or(new, |kept| kept.max(new)));
        rebalance.arrived += 1;
        rebalance.first_record_seconds =
            longest(rebalance.first_record_seconds, since_assigned.as_secs_f64());
        if let Some(age) = age {
            rebalance.pause_seconds = longest(rebalance.pause_seconds, age.as_secs_f64());
        }
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
            view.rebalance("user", "assigned", Duration::from_millis(10), n, Vec::new());
        }
        let kept = view.rebalances();
        assert_eq!(kept.len(), REBALANCES_KEPT);
        assert_eq!(kept[0].partitions, REBALANCES_KEPT + 4);
        assert_eq!(kept[REBALANCES_KEPT - 1].partitions, 5);
    }

    #[test]
    fn an_assignment_shows_the_longest_wait_of_its_partitions_first_records() {
        let view = KafkaView::default();
        let ms = Duration::from_millis;
        let first = view.rebalance("user", "assigned", ms(1), 2, Vec::new());
        let steps = vec![RevokeStep {
            step: "settle",
            seconds: 0.25,
        }];
        let revoke = view.rebalance("user", "revoked", ms(300), 1, steps.clone());
        let second = view.rebalance("user", "assigned", ms(1), 2, Vec::new());
        view.arrived(first, ms(400), Some(ms(900)));
        view.arrived(first, ms(700), Some(ms(800)));
        view.arrived(second, ms(50), None);
        let kept = view.rebalances();
        let shown: Vec<_> = kept
            .iter()
            .map(|r| (r.kind, r.arrived, r.first_record_seconds, r.pause_seconds))
            .collect();
        assert_eq!(
            shown,
            [
                ("assigned", 1, Some(0.05), None),
                ("revoked", 0, None, None),
                ("assigned", 2, Some(0.7), Some(0.9)),
            ]
        );
        assert_eq!(kept[1].steps, steps);
        // A rebalance no longer kept is not looked for.
        for n in 0..REBALANCES_KEPT {
            view.rebalance("user", "revoked", ms(1), n, Vec::new());
        }
        view.arrived(revoke, ms(1), Some(ms(1)));
        assert!(view.rebalances().iter().all(|r| r.arrived == 0));
    }
}
