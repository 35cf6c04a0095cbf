//! Gathering cluster sharding stats: ask every region, wait until all have
//! answered or the deadline passes, and list the silent ones.

use crate::inspection::{ClusterShardingStats, RegionStats};
use colo_allocation::RegionId;
use std::collections::BTreeSet;
use std::time::Duration;
use tokio::sync::mpsc;

/// Collects `(region, stats)` answers from `rx` for the regions in `asked`.
pub(crate) async fn gather(
    asked: BTreeSet<RegionId>,
    mut rx: mpsc::Receiver<(RegionId, RegionStats)>,
    timeout: Duration,
) -> ClusterShardingStats {
    let mut result = ClusterShardingStats::default();
    let mut waiting = asked;
    let deadline = tokio::time::Instant::now() + timeout;
    while !waiting.is_empty() {
        match tokio::time::timeout_at(deadline, rx.recv()).await {
            Ok(Some((region, stats))) => {
                if waiting.remove(&region) {
                    result.regions.insert(region, stats);
                }
            }
            Ok(None) | Err(_) => break,
        }
    }
    result.failed_regions = waiting.into_iter().collect();
    result
}
