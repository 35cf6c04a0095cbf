use super::*;

pub(super) fn region(name: &str) -> RegionId {
    RegionId::new(name)
}

/// Allocations from `(region, shard ids)` pairs.
pub(super) fn allocations(regions: &[(&str, &[u32])]) -> Allocations {
    regions
        .iter()
        .map(|(name, shards)| (region(name), shards.iter().copied().map(ShardId).collect()))
        .collect()
}

/// Regions named r00, r01, ... holding consecutive shard ids, `counts[i]` each.
fn allocations_with_counts(counts: &[usize]) -> Allocations {
    let mut next = 0u32;
    counts
        .iter()
        .enumerate()
        .map(|(i, &count)| {
            let shards = (0..count)
                .map(|_| {
                    next += 1;
                    ShardId(next)
                })
                .collect();
            (region(&format!("r{i:02}")), shards)
        })
        .collect()
}

fn shards(ids: &[u32]) -> BTreeSet<ShardId> {
    ids.iter().copied().map(ShardId).collect()
}

fn threshold_strategy(threshold: usize, max_simultaneous: usize) -> LeastShardAllocationStrategy {
    LeastShardAllocationStrategy::new(LeastShardSettings {
        rebalance_absolute_limit: 0,
        rebalance_threshold: threshold,
        max_simultaneous_rebalance: max_simultaneous,
        ..LeastShardSettings::default()
    })
    .unwrap()
}

fn limits_strategy(absolute: usize, relative: f64) -> LeastShardAllocationStrategy {
    LeastShardAllocationStrategy::new(LeastShardSettings {
        rebalance_absolute_limit: absolute,
        rebalance_relative_limit: relative,
        ..LeastShardSettings::default()
    })
    .unwrap()
}

/// One coordinator round: ask for the shards to move, hand them off (drop
/// them from their regions), then let each be requested again and allocated,
/// one after the other, as the coordinator does. Returns how many moved.
fn run_round(strategy: &mut LeastShardAllocationStrategy, current: &mut Allocations) -> usize {
    let moving = strategy.rebalance(current, &BTreeSet::new());
    for hosted in current.values_mut() {
        hosted.retain(|shard| !moving.contains(shard));
    }
    let requester = region("r00");
    for &shard in &moving {
        let home = strategy.allocate(&requester, shard, current).unwrap();
        current.get_mut(&home).unwrap().push(shard);
    }
    moving.len()
}

fn spread(current: &Allocations) -> usize {
    let max = current.values().map(Vec::len).max().unwrap_or(0);
    let min = current.values().map(Vec::len).min().unwrap_or(0);
    max - min
}

/// Runs rounds until the strategy moves nothing; returns the rounds that
/// moved something.
fn rounds_until_stable(
    strategy: &mut LeastShardAllocationStrategy,
    current: &mut Allocations,
) -> usize {
    let total: usize = current.values().map(Vec::len).sum();
    let mut rounds = 0;
    while run_round(strategy, current) > 0 {
        rounds += 1;
        assert!(rounds < 1000, "no convergence: {current:?}");
    }
    assert_eq!(
        current.values().map(Vec::len).sum::<usize>(),
        total,
        "a shard got lost"
    );
    rounds
}

// --- allocate ---

#[test]
fn allocates_to_the_least_loaded_region() {
    let mut strategy = LeastShardAllocationStrategy::default();
    let current = allocations(&[("a", &[1, 2, 3]), ("b", &[4]), ("c", &[5, 6])]);
    assert_eq!(
        strategy.allocate(&region("a"), ShardId(7), &current),
        Some(region("b"))
    );
}

#[test]
fn allocation_ties_go_to_the_smallest_region_id() {
    let mut strategy = limits_strategy(10, 0.5);
    let current = allocations(&[("c", &[]), ("b", &[1]), ("a", &[])]);
    assert_eq!(
        strategy.allocate(&region("b"), ShardId(2), &current),
        Some(region("a"))
    );
}

#[test]
fn nothing_to_allocate_to_without_regions() {
    let mut strategy = LeastShardAllocationStrategy::default();
    assert_eq!(
        strategy.allocate(&region("proxy"), ShardId(1), &Allocations::new()),
        None
    );
}

#[test]
fn invalid_settings_are_refused() {
    let settings = LeastShardSettings {
        max_simultaneous_rebalance: 0,
        ..LeastShardSettings::default()
    };
    let err = LeastShardAllocationStrategy::new(settings).unwrap_err();
    assert_eq!(err.field, "max_simultaneous_rebalance");
}

// --- original (threshold) algorithm ---

#[test]
fn threshold_moves_nothing_until_the_difference_exceeds_it() {
    let current = allocations(&[("a", &[1, 2, 3, 4, 5]), ("b", &[6, 7, 8])]);
    assert!(threshold_strategy(2, 3)
        .rebalance(&current, &BTreeSet::new())
        .is_empty());
    assert_eq!(
        threshold_strategy(1, 3).rebalance(&current, &BTreeSet::new()),
        shards(&[1])
    );
}

#[test]
fn threshold_takes_the_lowest_shard_ids_of_the_busiest_region() {
    let current = allocations(&[("a", &[9, 3, 7, 1, 5]), ("b", &[])]);
    // difference 5, threshold 2: min(min(5 - 2, 2), 3) = 2 shards.
    assert_eq!(
        threshold_strategy(2, 3).rebalance(&current, &BTreeSet::new()),
        shards(&[1, 3])
    );
}

#[test]
fn threshold_respects_max_simultaneous_rebalance() {
    let mut strategy = threshold_strategy(3, 3);
    let current = allocations(&[("a", &[1, 2, 3, 4, 5, 6, 7, 8, 9, 10]), ("b", &[])]);
    assert_eq!(
        strategy.rebalance(&current, &BTreeSet::new()),
        shards(&[1, 2, 3])
    );
    // Two still handing off: one slot left, and they are not picked again.
    assert_eq!(strategy.rebalance(&current, &shards(&[1, 2])), shards(&[3]));
    assert!(strategy.rebalance(&current, &shards(&[1, 2, 3])).is_empty());
}

#[test]
fn threshold_busiest_region_excludes_shards_in_progress() {
    let mut strategy = threshold_strategy(1, 10);
    let current = allocations(&[("a", &[1, 2, 3, 4]), ("b", &[5, 6, 7]), ("c", &[8])]);
    // "a" has 4 shards, but only 1 still movable, so "b" is the busiest.
    assert_eq!(
        strategy.rebalance(&current, &shards(&[1, 2, 3])),
        shards(&[5])
    );
}

#[test]
fn threshold_runs_while_other_shards_are_in_progress() {
    let mut strategy = threshold_strategy(1, 3);
    let current = allocations(&[("a", &[1, 2, 3, 4]), ("b", &[])]);
    assert_eq!(strategy.rebalance(&current, &shards(&[4])), shards(&[1]));
}

#[test]
fn threshold_reaches_balance_eventually() {
    let mut strategy = LeastShardAllocationStrategy::default();
    let mut current = allocations_with_counts(&[100, 100, 100, 0]);
    rounds_until_stable(&mut strategy, &mut current);
    // "more than the threshold (1)" stops at a difference of 1.
    assert!(spread(&current) <= 1, "{current:?}");
}

#[test]
fn threshold_with_no_regions_moves_nothing() {
    assert!(threshold_strategy(1, 3)
        .rebalance(&Allocations::new(), &BTreeSet::new())
        .is_empty());
}

// --- newer (limits) algorithm ---

#[test]
fn limits_phase_1_takes_the_excess_of_regions_above_optimal() {
    let mut strategy = limits_strategy(1000, 1.0);
    // 10 shards over 3 regions: optimal 4; "a" gives up its first 4.
    let current = allocations(&[
        ("a", &[1, 2, 3, 4, 5, 6, 7, 8]),
        ("b", &[9, 10]),
        ("c", &[]),
    ]);
    assert_eq!(
        strategy.rebalance(&current, &BTreeSet::new()),
        shards(&[1, 2, 3, 4])
    );
}

#[test]
fn limits_phase_1_takes_shards_in_allocation_order() {
    let mut strategy = limits_strategy(1000, 1.0);
    let current = allocations(&[("a", &[8, 3, 5]), ("b", &[])]);
    // optimal 2: the first-allocated shard leaves, not the lowest id.
    assert_eq!(strategy.rebalance(&current, &BTreeSet::new()), shards(&[8]));
}

#[test]
fn limits_phase_2_fills_regions_two_below_optimal() {
    let mut strategy = limits_strategy(1000, 1.0);
    // 16 shards over 5 regions: optimal 4, nobody above it, "e" is 3 below
    // (optimal - 1) - 0 = 3: one shard from each of the first three full regions.
    let current = allocations(&[
        ("a", &[1, 2, 3, 4]),
        ("b", &[5, 6, 7, 8]),
        ("c", &[9, 10, 11, 12]),
        ("d", &[13, 14, 15, 16]),
        ("e", &[]),
    ]);
    assert_eq!(
        strategy.rebalance(&current, &BTreeSet::new()),
        shards(&[1, 5, 9])
    );
}

#[test]
fn limits_leaves_a_difference_of_one_alone() {
    let mut strategy = limits_strategy(1000, 1.0);
    let current = allocations(&[("a", &[1, 2, 3]), ("b", &[4, 5]), ("c", &[6, 7])]);
    assert!(strategy.rebalance(&current, &BTreeSet::new()).is_empty());
}

#[test]
fn limits_move_nothing_while_a_rebalance_is_in_progress() {
    let mut strategy = limits_strategy(1000, 1.0);
    let current = allocations(&[("a", &[1, 2, 3, 4, 5, 6]), ("b", &[])]);
    assert!(strategy.rebalance(&current, &shards(&[1])).is_empty());
    assert_eq!(strategy.rebalance(&current, &BTreeSet::new()).len(), 3);
}

#[test]
fn limits_with_no_regions_or_no_shards_move_nothing() {
    let mut strategy = limits_strategy(10, 0.5);
    assert!(strategy
        .rebalance(&Allocations::new(), &BTreeSet::new())
        .is_empty());
    let empty = allocations(&[("a", &[]), ("b", &[])]);
    assert!(strategy.rebalance(&empty, &BTreeSet::new()).is_empty());
}

#[test]
fn absolute_limit_caps_each_round() {
    let mut strategy = limits_strategy(5, 1.0);
    let mut current = allocations_with_counts(&[100, 100, 100, 0]);
    assert_eq!(strategy.rebalance(&current, &BTreeSet::new()).len(), 5);
    let rounds = rounds_until_stable(&mut strategy, &mut current);
    assert_eq!(rounds, 15, "75 shards, 5 per round");
    assert!(spread(&current) <= 1, "{current:?}");
}

#[test]
fn relative_limit_caps_each_round() {
    // 10% of 300 shards = 30 per round, below the absolute limit.
    let mut strategy = limits_strategy(1000, 0.1);
    let current = allocations_with_counts(&[100, 100, 100, 0]);
    assert_eq!(strategy.rebalance(&current, &BTreeSet::new()).len(), 30);
}

#[test]
fn at_least_one_shard_moves_when_the_limits_round_to_zero() {
    // 10% of 5 shards floors to 0; the floor of 1 keeps rebalancing alive.
    let mut strategy = limits_strategy(1000, 0.1);
    let current = allocations(&[("a", &[1, 2, 3, 4, 5]), ("b", &[])]);
    assert_eq!(strategy.rebalance(&current, &BTreeSet::new()), shards(&[1]));
}

#[test]
fn limits_balance_a_new_node_in_one_round() {
    let mut strategy = limits_strategy(1000, 1.0);
    let mut current = allocations_with_counts(&[100, 100, 100, 0]);
    assert_eq!(rounds_until_stable(&mut strategy, &mut current), 1);
    assert!(
        current.values().all(|hosted| hosted.len() == 75),
        "{current:?}"
    );
}

#[test]
fn limits_balance_uneven_clusters_in_at_most_two_rounds() {
    let cases: [&[usize]; 8] = [
        &[100, 100, 100, 0],
        &[0, 1, 2, 3, 4, 5, 6, 7, 8, 9],
        &[50, 3, 0, 17, 1, 1, 29, 8, 0, 41],
        &[4, 4, 4, 4, 0],
        &[1000, 0, 0, 0, 0, 0, 0],
        &[7, 0, 0, 0, 0, 0, 0, 0, 0, 0],
        &[33, 33, 34, 0, 0],
        &[2, 2, 2, 2, 2, 2, 2, 2, 2, 0, 0, 0],
    ];
    for counts in cases {
        let mut strategy = limits_strategy(100_000, 1.0);
        let mut current = allocations_with_counts(counts);
        let rounds = rounds_until_stable(&mut strategy, &mut current);
        assert!(rounds <= 2, "{counts:?} took {rounds} rounds");
        assert!(spread(&current) <= 1, "{counts:?} ended as {current:?}");
    }
}

#[test]
fn limits_never_move_a_balanced_cluster() {
    let mut strategy = limits_strategy(1000, 1.0);
    for counts in [&[3usize, 3, 3][..], &[4, 3, 3, 4], &[1, 0], &[5]] {
        let current = allocations_with_counts(counts);
        assert!(
            strategy.rebalance(&current, &BTreeSet::new()).is_empty(),
            "{counts:?}"
        );
    }
}
