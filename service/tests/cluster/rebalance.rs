//! A node joins: the least-shard strategy moves shards to it.

use crate::support::*;
use parking_lot::Mutex;
use std::sync::Arc;
use std::time::Duration;

async fn join_and_rebalance(test: &str, absolute: usize, relative: f64) -> (Cluster, Vec<usize>) {
    let mut cluster = Cluster::new(test, fast_settings(30));
    let rounds = Arc::new(Mutex::new(Vec::new()));
    cluster.start_coordinator(Box::new(CountingRounds {
        inner: least_shard_new(absolute, relative),
        rounds: rounds.clone(),
    }));
    for n in ["a", "b", "c"] {
        cluster.add_node(n);
    }
    cluster.await_regions(3).await;
    let ids: Vec<String> = cluster.touch_all_shards("a").await.into_values().collect();
    assert!(
        balanced(&cluster.shard_counts(), 30),
        "{:?}",
        cluster.shard_counts()
    );
    assert!(rounds.lock().is_empty());

    let sender = Sender::start(cluster.region("a"), "a", ids);
    cluster.add_node("d");
    eventually("balanced with d", Duration::from_secs(20), || async {
        let counts = cluster.shard_counts();
        counts.len() == 4 && balanced(&counts, 30)
    })
    .await;
    let sent = sender.stop().await;
    all_delivered(&cluster.world, &sent).await;
    cluster.world.assert_complete_in_order(&sent);
    cluster.world.assert_never_live_twice();
    let rounds = rounds.lock().clone();
    (cluster, rounds)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_joins_and_new_algorithm_balances_in_at_most_two_rounds() {
    let (cluster, rounds) = join_and_rebalance("join-new", 100, 1.0).await;
    assert!(
        !rounds.is_empty() && rounds.len() <= 2,
        "rounds: {rounds:?}"
    );
    assert!(cluster.shard_counts()["d"] >= 7);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lower_limits_cap_how_many_shards_move_per_round() {
    let (_, rounds) = join_and_rebalance("join-capped", 2, 1.0).await;
    assert!(rounds.iter().all(|&n| n <= 2), "rounds: {rounds:?}");
    assert!(
        rounds.len() >= 4,
        "7 shards at 2 per round need at least 4 rounds: {rounds:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn original_algorithm_moves_at_most_threshold_per_round() {
    let mut cluster = Cluster::new("join-old", fast_settings(30));
    let rounds = Arc::new(Mutex::new(Vec::new()));
    cluster.start_coordinator(Box::new(CountingRounds {
        inner: least_shard_new(0, 0.1),
        rounds: rounds.clone(),
    }));
    for n in ["a", "b"] {
        cluster.add_node(n);
    }
    cluster.await_regions(2).await;
    let ids: Vec<String> = cluster.touch_all_shards("a").await.into_values().collect();
    let sender = Sender::start(cluster.region("a"), "a", ids);
    cluster.add_node("c");
    eventually("balanced with c", Duration::from_secs(20), || async {
        let counts = cluster.shard_counts();
        counts.len() == 3 && balanced(&counts, 30)
    })
    .await;
    let sent = sender.stop().await;
    all_delivered(&cluster.world, &sent).await;
    cluster.world.assert_complete_in_order(&sent);
    cluster.world.assert_never_live_twice();
    // rebalance_threshold 1: one shard per round.
    assert!(rounds.lock().iter().all(|&n| n == 1), "{:?}", rounds.lock());
}
