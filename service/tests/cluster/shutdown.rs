//! Graceful shutdown hands every shard off with no message lost.

use crate::support::*;
use colo::TellError;
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn graceful_shutdown_moves_every_shard_away_with_no_message_lost() {
    let mut cluster = Cluster::new("graceful", fast_settings(12));
    cluster.start_coordinator(least_shard_new(100, 1.0));
    for n in ["a", "b", "c"] {
        cluster.add_node(n);
    }
    cluster.await_regions(3).await;
    let ids: Vec<String> = cluster.touch_all_shards("a").await.into_values().collect();
    let on_b = cluster.shard_counts()["b"];
    assert!(on_b > 0);

    let from_a = Sender::start(cluster.region("a"), "a", ids.clone());
    let from_c = Sender::start(cluster.region("c"), "c", ids.clone());
    // b itself keeps telling until it stops: what it accepted must arrive.
    let b = cluster.region("b");
    let mut from_b = 0u64;
    for _ in 0..500 {
        b.tell(
            &ids[0],
            ProbeMsg::Record {
                from: "b".into(),
                seq: from_b,
            },
        )
        .await
        .unwrap();
        from_b += 1;
    }
    b.shutdown().await;
    assert!(matches!(
        b.tell(&ids[0], ProbeMsg::Where).await,
        Err(TellError::RegionStopped(_))
    ));

    eventually(
        "b gone from the coordinator",
        Duration::from_secs(5),
        || async { !cluster.shard_counts().contains_key("b") },
    )
    .await;
    let mut sent = from_a.stop().await;
    sent.extend(from_c.stop().await);
    sent.insert((ids[0].clone(), "b".into()), from_b);
    all_delivered(&cluster.world, &sent).await;
    cluster.world.assert_complete_in_order(&sent);
    cluster.world.assert_never_live_twice();
    // Every shard ends up with a home on a or c (a rebalance between them
    // may still be moving one, so wait for a settled view).
    eventually(
        "every shard homed on a or c",
        Duration::from_secs(5),
        || async { cluster.shard_counts().values().sum::<usize>() == 12 },
    )
    .await;
}

/// A leaving region's last messages (its shards' ShardStopped) reach the
/// coordinator even when the coordinator talks to it meanwhile (the homes
/// of the shards it already handed off). Lost, the coordinator would wait
/// for the region timeout, here far beyond the test's waits, before it
/// moved the shards whose stop it did not hear.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leaving_region_hands_every_shard_off_without_waiting_for_its_region_timeout() {
    let settings = colo::ShardingSettings {
        fence_timeout: Duration::from_secs(60),
        region_timeout: Duration::from_secs(120),
        ..fast_settings(12)
    };
    let mut cluster = Cluster::new("leave-at-once", settings);
    cluster.start_coordinator(least_shard_new(100, 1.0));
    cluster.add_node("n0");
    for round in 1..=4 {
        let (leaving, staying) = (format!("n{}", round - 1), format!("n{round}"));
        cluster.add_node(&staying);
        eventually(
            &format!("{staying} registered"),
            Duration::from_secs(5),
            || async { cluster.shard_counts().contains_key(&staying) },
        )
        .await;
        cluster.touch_all_shards(&leaving).await;
        cluster.region(&leaving).shutdown().await;
        eventually(
            &format!("every shard homed on {staying} once {leaving} left"),
            Duration::from_secs(5),
            || async { cluster.shard_counts().get(&staying) == Some(&12) },
        )
        .await;
    }
}
