//! The preference for a region keeping a standby copy of the shard
//! ([`AllocationStrategy::allocate_warm`]).

use super::tests::{allocations, region};
use super::*;
use crate::standbys::{keepers, ranked};

/// A shard above 100 (none of the allocations' own) whose first-ranked
/// region among `regions` is `first`.
fn shard_ranking_first(regions: &[RegionId], first: &str) -> ShardId {
    (100..)
        .map(ShardId)
        .find(|shard| ranked(*shard, regions)[0].as_str() == first)
        .expect("a shard")
}

#[test]
fn a_shard_goes_to_its_copy_where_the_counts_allow_and_by_count_alone_otherwise() {
    let mut strategy = LeastShardAllocationStrategy::default();
    let current = allocations(&[("a", &[1, 2, 3, 4]), ("b", &[5, 6, 7, 8])]);
    let regions: Vec<RegionId> = current.keys().cloned().collect();
    let kept_on_b = shard_ranking_first(&regions, "b");
    let warm = [region("b")];
    assert_eq!(
        strategy.allocate(&region("a"), kept_on_b, &current),
        Some(region("a")),
        "by count alone a tie goes to the smaller id"
    );
    assert_eq!(
        strategy.allocate_warm(&region("a"), kept_on_b, &current, &warm),
        Some(region("b")),
        "the copy's region: the counts stay 4 and 5"
    );

    // b already one ahead: one more there and the rebalance would move one.
    let busy = allocations(&[("a", &[1, 2, 3, 4]), ("b", &[5, 6, 7, 8, 9])]);
    assert_eq!(
        strategy.allocate_warm(&region("a"), kept_on_b, &busy, &warm),
        Some(region("a")),
        "balance first: a, by count, without the copy"
    );
}

#[test]
fn the_next_copy_is_tried_when_the_first_is_too_busy_and_the_count_decides_when_all_are() {
    let mut strategy = LeastShardAllocationStrategy::default();
    let warm = [region("b"), region("c")];
    let shard = ShardId(100);
    let c_has_room = allocations(&[("a", &[1, 2, 3]), ("b", &[4, 5, 6, 7]), ("c", &[8, 9, 10])]);
    assert_eq!(
        strategy.allocate_warm(&region("a"), shard, &c_has_room, &warm),
        Some(region("c")),
        "b would hold two more than a; c keeps the other copy"
    );
    let both_busy = allocations(&[
        ("a", &[1, 2, 3]),
        ("b", &[4, 5, 6, 7]),
        ("c", &[8, 9, 10, 11]),
    ]);
    assert_eq!(
        strategy.allocate_warm(&region("a"), shard, &both_busy, &warm),
        Some(region("a")),
        "neither copy fits: the least loaded"
    );
    assert_eq!(
        strategy.allocate_warm(&region("a"), shard, &c_has_room, &[region("gone")]),
        Some(region("a")),
        "a copy on a region that cannot take shards now is passed over"
    );
}

/// A node of three leaves, its shards placed one by one on the two left,
/// in many clusters, each from the same placement by count and by copy: the
/// preference never leaves the rebalance anything to move, and more of the
/// shards start where a copy was than by count alone.
#[test]
fn a_leaving_nodes_shards_find_copies_and_the_regions_stay_balanced() {
    for algorithm in [
        LeastShardSettings::default(),
        LeastShardSettings {
            rebalance_absolute_limit: 0,
            ..LeastShardSettings::default()
        },
    ] {
        let mut strategy = LeastShardAllocationStrategy::new(algorithm).unwrap();
        let (mut on_copies, mut by_count_on_copies, mut placed) = (0, 0, 0);
        for cluster in 0..50u32 {
            let all: Vec<RegionId> = ["x", "y", "z"]
                .iter()
                .map(|name| RegionId::new(format!("{name}{cluster}")))
                .collect();
            let mut layout: Allocations = all.iter().map(|r| (r.clone(), Vec::new())).collect();
            for shard in (0..12).map(ShardId) {
                let home = strategy.allocate(&all[0], shard, &layout).unwrap();
                layout.get_mut(&home).unwrap().push(shard);
            }
            let moved = layout.remove(&all[2]).unwrap();
            let survivors: Vec<RegionId> = layout.keys().cloned().collect();
            // Kept a copy while the node that left hosted the shard.
            let had_copy = |shard, home: &RegionId| keepers(shard, &all, 1).contains(&home);
            let (mut by_copy, mut by_count) = (layout.clone(), layout);
            for &shard in &moved {
                let warm: Vec<RegionId> =
                    keepers(shard, &survivors, 1).into_iter().cloned().collect();
                let home = strategy
                    .allocate_warm(&all[0], shard, &by_copy, &warm)
                    .unwrap();
                on_copies += usize::from(had_copy(shard, &home));
                by_copy.get_mut(&home).unwrap().push(shard);
                assert!(
                    strategy.rebalance(&by_copy, &BTreeSet::new()).is_empty(),
                    "cluster {cluster}: {by_copy:?}"
                );
                let home = strategy.allocate(&all[0], shard, &by_count).unwrap();
                by_count_on_copies += usize::from(had_copy(shard, &home));
                by_count.get_mut(&home).unwrap().push(shard);
                placed += 1;
            }
        }
        assert!(
            on_copies > by_count_on_copies,
            "{on_copies} of {placed} on a copy, {by_count_on_copies} by count alone"
        );
    }
}
