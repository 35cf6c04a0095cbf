//! The external strategy and user-defined strategies.

use crate::support::*;
use colo::allocation::{
    AllocationStrategy, Allocations, ExternalAllocationClient, ExternalAllocationStrategy,
};
use colo::{RegionId, ShardId};
use std::collections::BTreeSet;
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn external_strategy_moves_a_shard_to_the_location_set_through_its_client() {
    let mut cluster = Cluster::new("external", fast_settings(6));
    let client = ExternalAllocationClient::new();
    cluster.start_coordinator(Box::new(ExternalAllocationStrategy::new(client.clone())));
    let a = cluster.add_node("a");
    cluster.add_node("b");
    cluster.await_regions(2).await;
    // Unset locations go to the requester.
    let ids = cluster.touch_all_shards("a").await;
    assert_eq!(cluster.shard_counts()["a"], 6);
    let shard = ShardId(3);
    client.set_location(shard, RegionId::new("b"));
    eventually("shard 3 on b", Duration::from_secs(5), || async {
        cluster.homes().get(&shard).map(String::as_str) == Some("b")
    })
    .await;
    let reply = a.ask(&ids[&shard], ProbeMsg::Where, ASK).await.unwrap();
    assert!(
        matches!(reply, ProbeReply::At { ref node, .. } if node == "b"),
        "{reply:?}"
    );
    // Bulk update.
    client.set_locations((0..3).map(|s| (ShardId(s), RegionId::new("b"))));
    eventually("shards 0..3 on b", Duration::from_secs(5), || async {
        cluster.shard_counts()["b"] == 4
    })
    .await;
    cluster.world.assert_never_live_twice();
}

/// Puts every shard on the region named last in order, whoever asks.
struct LastRegion;

impl AllocationStrategy for LastRegion {
    fn allocate(
        &mut self,
        _requester: &RegionId,
        _shard: ShardId,
        current: &Allocations,
    ) -> Option<RegionId> {
        current.keys().next_back().cloned()
    }

    fn rebalance(
        &mut self,
        _current: &Allocations,
        _in_progress: &BTreeSet<ShardId>,
    ) -> BTreeSet<ShardId> {
        BTreeSet::new()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn custom_strategy_is_used_when_registered() {
    let mut cluster = Cluster::new("custom", fast_settings(5));
    cluster.start_coordinator(Box::new(LastRegion));
    cluster.add_node("a");
    cluster.add_node("z");
    cluster.await_regions(2).await;
    cluster.touch_all_shards("a").await;
    assert_eq!(cluster.shard_counts()["z"], 5);
    assert_eq!(cluster.shard_counts()["a"], 0);
}
