//! Shards placed and released on demand, as a Kafka rebalance listener
//! needs: inside the callback, not at the next rebalance round.

use crate::support::*;
use colo::allocation::{ExternalAllocationClient, ExternalAllocationStrategy};
use colo::{PlacementError, ShardId};
use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::time::Duration;

/// Rebalance rounds so rare that only an on-demand placement moves a shard
/// within a test.
fn no_rebalance_rounds(shards: u32) -> colo::settings::ShardingSettings {
    colo::settings::ShardingSettings {
        rebalance_interval: Duration::from_secs(3600),
        ..fast_settings(shards)
    }
}

fn external() -> Box<ExternalAllocationStrategy> {
    Box::new(ExternalAllocationStrategy::new(
        ExternalAllocationClient::new(),
    ))
}

async fn tell_records(
    region: &colo::Region<Probe>,
    ids: &[&String],
    from: &str,
    seqs: std::ops::Range<u64>,
) {
    for seq in seqs {
        for id in ids {
            region
                .tell(
                    id,
                    ProbeMsg::Record {
                        from: from.into(),
                        seq,
                    },
                )
                .await
                .expect("tell");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hosting_shards_moves_them_at_once_and_returns_once_they_run_there() {
    let mut cluster = Cluster::new("host-shards", no_rebalance_rounds(6));
    cluster.start_coordinator(external());
    let a = cluster.add_node("a");
    let b = cluster.add_node("b");
    cluster.await_regions(2).await;
    let ids = cluster.touch_all_shards("a").await;
    assert_eq!(cluster.shard_counts()["a"], 6, "the requester hosts them");
    let moving = [ShardId(1), ShardId(4)];
    let moving_ids: Vec<&String> = moving.iter().map(|s| &ids[s]).collect();
    tell_records(&a, &moving_ids, "a", 0..20).await;

    b.host_shards(moving, Duration::from_secs(10))
        .await
        .expect("the shards move to b");
    // Done when it returns, not at a rebalance round an hour away.
    let homes = cluster.homes();
    for shard in moving {
        assert_eq!(homes.get(&shard).map(String::as_str), Some("b"), "{shard}");
    }
    assert_eq!(cluster.shard_counts()["a"], 4);
    tell_records(&a, &moving_ids, "a", 20..40).await;
    for id in &moving_ids {
        let reply = a.ask(id, ProbeMsg::Where, ASK).await.unwrap();
        assert!(
            matches!(reply, ProbeReply::At { ref node, .. } if node == "b"),
            "{reply:?}"
        );
    }
    // Hosting shards that already run here is done at once.
    b.host_shards(moving, Duration::from_secs(10))
        .await
        .expect("nothing to move");
    let expected: BTreeMap<(String, String), u64> = moving_ids
        .iter()
        .map(|id| (((*id).clone(), "a".into()), 40))
        .collect();
    all_delivered(&cluster.world, &expected).await;
    cluster.world.assert_complete_in_order(&expected);
    cluster.world.assert_never_live_twice();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn releasing_shards_returns_once_their_stop_messages_ran() {
    let mut cluster = Cluster::new("release-shards", no_rebalance_rounds(4));
    cluster.start_coordinator(external());
    let a = cluster.add_node("a");
    let b = cluster.add_node("b");
    cluster.await_regions(2).await;
    let ids = cluster.touch_all_shards("a").await;
    // Each shard has one live entity, whose stop message takes a while.
    *cluster.world.stop_delay.lock() = Duration::from_millis(300);
    let released = [ShardId(0), ShardId(2)];
    a.release_shards(released, Duration::from_secs(10))
        .await
        .expect("released");
    assert_eq!(
        cluster.world.stops.load(Ordering::Relaxed),
        2,
        "both entities stopped before the release returned"
    );
    let homes = cluster.homes();
    for shard in released {
        // Not placed straight back on the region that let it go.
        assert_eq!(homes.get(&shard), None, "{shard}");
    }
    // A message for a released shard gets it a home again, with the
    // messages kept in order.
    let id = &ids[&released[0]];
    tell_records(&b, &[id], "b", 0..5).await;
    let expected = BTreeMap::from([((id.clone(), "b".to_string()), 5)]);
    all_delivered(&cluster.world, &expected).await;
    cluster.world.assert_complete_in_order(&expected);
    // Releasing shards that do not run here is done at once.
    a.release_shards([ShardId(0)], Duration::from_secs(10))
        .await
        .expect("nothing to release");
    cluster.world.assert_never_live_twice();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn placements_need_the_external_strategy_and_shards_in_range() {
    let mut cluster = Cluster::new("placement-refused", no_rebalance_rounds(4));
    cluster.start_coordinator(least_shard_new(0, 0.1));
    let a = cluster.add_node("a");
    cluster.await_regions(1).await;
    let refused = a.host_shards([ShardId(1)], Duration::from_secs(10)).await;
    assert!(
        matches!(refused, Err(PlacementError::Refused(ref reason)) if reason.contains("external")),
        "{refused:?}"
    );
    let out_of_range = a
        .release_shards([ShardId(4)], Duration::from_secs(10))
        .await;
    assert_eq!(
        out_of_range,
        Err(PlacementError::OutOfRange {
            shard: ShardId(4),
            number_of_shards: 4
        })
    );
}
