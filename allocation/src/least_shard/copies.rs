//! The preference for a region keeping a standby copy of the shard.

use super::tests::{allocations, region};
use super::*;
use crate::standbys::{keepers, ranked};

fn strategy(standbys: u32) -> LeastShardAllocationStrategy {
    let mut strategy = LeastShardAllocationStrategy::default();
    strategy.set_standbys(standbys);
    strategy
}

/// A shard above 100 (none of the allocations' own) whose first-ranked
/// region among `regions` is `first`.
fn shard_ranking_first(regions: &[RegionId], first: &str) -> ShardId {
    (100..)
        .map(ShardId)
        .find(|shard| ranked(*shard, regions)[0].as_str() == first)
        .expect("a shard")
}

#[test]
fn a_homeless_shard_goes_to_its_copy_where_the_counts_allow_and_by_count_alone_otherwise() {
    let current = allocations(&[("a", &[1, 2, 3, 4]), ("b", &[5, 6, 7, 8])]);
    let regions: Vec<RegionId> = current.keys().cloned().collect();
    // By count alone a tie goes to the smaller id, a.
    let kept_on_b = shard_ranking_first(&regions, "b");
    assert_eq!(
        LeastShardAllocationStrategy::default().allocate(&region("a"), kept_on_b, &current),
        Some(region("a"))
    );
    assert_eq!(
        strategy(1).allocate(&region("a"), kept_on_b, &current),
        Some(region("b")),
        "the copy's region, and the counts stay 4 and 5"
    );
    assert_eq!(
        strategy(0).allocate(&region("a"), kept_on_b, &current),
        Some(region("a")),
        "no standbys: by count alone"
    );

    // b already one ahead: one more there and the rebalance would move one.
    let busy = allocations(&[("a", &[1, 2, 3, 4]), ("b", &[5, 6, 7, 8, 9])]);
    assert_eq!(
        strategy(1).allocate(&region("a"), kept_on_b, &busy),
        Some(region("a")),
        "balance first: a, without the copy"
    );
}

#[test]
fn the_second_keeper_is_tried_when_the_first_is_too_busy() {
    let current = allocations(&[("a", &[1, 2, 3]), ("b", &[4, 5, 6, 7]), ("c", &[8, 9, 10])]);
    let regions: Vec<RegionId> = current.keys().cloned().collect();
    let shard = (100..)
        .map(ShardId)
        .find(|shard| {
            let order: Vec<&str> = ranked(*shard, &regions)
                .iter()
                .map(|r| r.as_str())
                .collect();
            order[..2] == ["b", "c"]
        })
        .expect("a shard ranking b, then c");
    assert_eq!(
        strategy(1).allocate(&region("a"), shard, &current),
        Some(region("c")),
        "b would hold two more than a; c keeps the other copy"
    );
    assert_eq!(
        strategy(0).allocate(&region("a"), shard, &current),
        Some(region("a"))
    );
}

/// A node of three leaves, its shards placed one by one on the two left, in
/// many clusters: the placement never leaves the rebalance anything to
/// move, and more of the shards start where a copy was than by count
/// alone.
#[test]
fn a_leaving_nodes_shards_find_copies_and_the_regions_stay_balanced() {
    for algorithm in [
        LeastShardSettings::default(),
        LeastShardSettings {
            rebalance_absolute_limit: 0,
            ..LeastShardSettings::default()
        },
    ] {
        let (mut warm, mut warm_by_count, mut placed) = (0, 0, 0);
        for cluster in 0..50u32 {
            let names = [
                format!("x{cluster}"),
                format!("y{cluster}"),
                format!("z{cluster}"),
            ];
            let all: Vec<RegionId> = names.iter().map(RegionId::new).collect();
            let shards: Vec<ShardId> = (0..12).map(ShardId).collect();
            for standbys in [0, 1] {
                let mut strategy = LeastShardAllocationStrategy::new(algorithm.clone()).unwrap();
                strategy.set_standbys(standbys);
                let mut current: Allocations =
                    all.iter().map(|r| (r.clone(), Vec::new())).collect();
                for &shard in &shards {
                    let home = strategy.allocate(&all[0], shard, &current).unwrap();
                    current.get_mut(&home).unwrap().push(shard);
                }
                let gone = all[2].clone();
                let moved = current.remove(&gone).unwrap();
                for shard in moved {
                    let home = strategy.allocate(&all[0], shard, &current).unwrap();
                    // Warm: it kept a copy while the node that left hosted it.
                    if keepers(shard, &all, 1).contains(&&home) {
                        if standbys == 1 {
                            warm += 1;
                            placed += 1;
                        } else {
                            warm_by_count += 1;
                        }
                    } else if standbys == 1 {
                        placed += 1;
                    }
                    current.get_mut(&home).unwrap().push(shard);
                    assert!(
                        strategy.rebalance(&current, &BTreeSet::new()).is_empty(),
                        "cluster {cluster}: {current:?}"
                    );
                }
            }
        }
        assert!(
            warm > warm_by_count,
            "{warm} of {placed} on a copy, {warm_by_count} by count alone"
        );
    }
}
