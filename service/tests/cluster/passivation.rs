//! Passivation inside shards: idle timeout and explicit requests.

use crate::support::*;
use colo::passivation::PassivationStrategy;
use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_entities_are_passivated_after_the_timeout() {
    let _ = metrics();
    // "busy" gets a message every 100 ms, far inside the 2 s idle timeout;
    // "quiet" gets none after its first, and is passivated within about
    // 2 s plus one look every idle_interval (1 s).
    let settings = colo::ShardingSettings {
        passivation: PassivationStrategy::idle(Duration::from_secs(2)),
        ..fast_settings(4)
    };
    let mut cluster = Cluster::new("idle", settings);
    cluster.start_coordinator(least_shard_new(0, 0.1));
    let a = cluster.add_node("a");
    for id in ["busy", "quiet"] {
        a.ask(id, ProbeMsg::Where, ASK).await.unwrap();
    }
    // "busy"'s messages, one per tick, until "quiet" is stopped.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    let mut pace = tokio::time::interval(Duration::from_millis(100));
    while cluster.world.stops.load(Ordering::Relaxed) == 0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "quiet was not passivated within 20 s"
        );
        pace.tick().await;
        a.ask("busy", ProbeMsg::Where, ASK).await.unwrap();
    }
    let live: Vec<String> = a
        .state(ASK)
        .await
        .unwrap()
        .shards
        .values()
        .flatten()
        .map(|id| id.to_string())
        .collect();
    assert_eq!(
        live,
        ["busy"],
        "quiet was idle past the timeout; busy never for more than 100 ms"
    );
    // The stop message ran for the passivated entity, and the reason counts.
    assert_eq!(cluster.world.stops.load(Ordering::Relaxed), 1);
    let idle = counter(
        colo::metrics::PASSIVATIONS,
        &[("entity_type", &cluster.name), ("reason", "idle")],
    );
    assert_eq!(idle, 1);
    // A message for a passivated entity starts a new incarnation.
    let reply = a.ask("quiet", ProbeMsg::Where, ASK).await.unwrap();
    assert_eq!(reply, at("a", 1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn explicit_passivation_loses_no_message() {
    let _ = metrics();
    let settings = colo::ShardingSettings {
        passivation: PassivationStrategy::none(),
        ..fast_settings(1)
    };
    let mut cluster = Cluster::new("explicit", settings);
    cluster.start_coordinator(least_shard_new(0, 0.1));
    let a = cluster.add_node("a");
    // The passivation request sits among a stream of records: the records
    // after it go to the next incarnation, all of them, in order.
    for seq in 0..100u64 {
        a.tell(
            "p",
            ProbeMsg::Record {
                from: "a".into(),
                seq,
            },
        )
        .await
        .unwrap();
        if seq % 10 == 9 {
            a.tell("p", ProbeMsg::Passivate).await.unwrap();
        }
    }
    let reply = a.ask("p", ProbeMsg::Where, ASK).await.unwrap();
    assert_eq!(reply, at("a", 1), "a fresh incarnation");
    cluster
        .world
        .assert_complete_in_order(&BTreeMap::from([(("p".into(), "a".into()), 100)]));
    assert_eq!(cluster.world.stops.load(Ordering::Relaxed), 10);
    let explicit = counter(
        colo::metrics::PASSIVATIONS,
        &[("entity_type", &cluster.name), ("reason", "explicit")],
    );
    assert_eq!(explicit, 10, "explicit passivations counted");
    cluster.world.assert_never_live_twice();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_limit_is_divided_among_active_shards_and_recomputed_when_one_starts() {
    use colo::passivation::ReplacementSettings;
    let _ = metrics();
    let lru = ReplacementSettings::preset("lru").unwrap();
    let settings = colo::ShardingSettings {
        passivation: PassivationStrategy::limit(8, lru),
        ..fast_settings(4)
    };
    let mut cluster = Cluster::new("limit", settings);
    cluster.start_coordinator(least_shard_new(0, 0.1));
    let a = cluster.add_node("a");
    let in_shard = |shard: u32, n: usize| -> Vec<String> {
        (0..)
            .map(|i| format!("l{i}"))
            .filter(|id| a.shard_of(id) == colo::ShardId(shard))
            .take(n)
            .collect()
    };
    let live = |state: colo::CurrentRegionState, shard: u32| -> Vec<String> {
        let mut ids: Vec<String> = state
            .shards
            .get(&colo::ShardId(shard))
            .map(|ids| ids.iter().map(|id| id.to_string()).collect())
            .unwrap_or_default();
        ids.sort();
        ids
    };
    let sorted = |ids: &[String]| {
        let mut ids = ids.to_vec();
        ids.sort();
        ids
    };
    // One active shard: it has the whole limit of 8; the 2 least recent of
    // 10 are passivated.
    let zero = in_shard(0, 10);
    for id in &zero {
        a.ask(id, ProbeMsg::Where, ASK).await.unwrap();
    }
    assert_eq!(live(a.state(ASK).await.unwrap(), 0), sorted(&zero[2..]));
    // A second shard starts: 8 / 2 = 4 each, and shard 0 shrinks at once.
    a.ask(&in_shard(1, 1)[0], ProbeMsg::Where, ASK)
        .await
        .unwrap();
    assert_eq!(live(a.state(ASK).await.unwrap(), 0), sorted(&zero[6..]));
    // A third: 8 / 3 = 2 each.
    a.ask(&in_shard(2, 1)[0], ProbeMsg::Where, ASK)
        .await
        .unwrap();
    let state = a.state(ASK).await.unwrap();
    assert_eq!(live(state.clone(), 0), sorted(&zero[8..]));
    assert_eq!(live(state, 1).len(), 1);
    let limit = counter(
        colo::metrics::PASSIVATIONS,
        &[("entity_type", &cluster.name), ("reason", "limit")],
    );
    assert_eq!(limit, 8);
    cluster.world.assert_never_live_twice();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn active_rate_and_adaptive_window_are_reported() {
    use colo::passivation::ReplacementSettings;
    let _ = metrics();
    let settings = colo::ShardingSettings {
        passivation: PassivationStrategy::limit(
            40,
            ReplacementSettings::preset("default-strategy").unwrap(),
        ),
        ..fast_settings(2)
    };
    let mut cluster = Cluster::new("gauges", settings);
    cluster.start_coordinator(least_shard_new(0, 0.1));
    let a = cluster.add_node("a");
    // 600 messages over 60 entities, more than the limit: some hit, some miss.
    for round in 0..10u64 {
        for e in 0..60 {
            a.tell(
                &format!("g{e}"),
                ProbeMsg::Record {
                    from: "a".into(),
                    seq: round,
                },
            )
            .await
            .unwrap();
        }
    }
    a.ask("g0", ProbeMsg::Where, ASK).await.unwrap();
    // A query makes every shard report; the region's next tick sets the gauges.
    a.state(ASK).await.unwrap();
    let labels = [("entity_type", cluster.name.as_str())];
    let mut ratio = None;
    eventually("active ratio reported", Duration::from_secs(5), || {
        ratio = ratio.or_else(|| gauge(colo::metrics::ACTIVE_RATIO, &labels));
        let found = ratio.is_some();
        async move { found }
    })
    .await;
    let ratio = ratio.unwrap();
    assert!(ratio > 0.0 && ratio < 1.0, "{ratio}");
    let mut window = None;
    eventually("window proportion reported", Duration::from_secs(5), || {
        window = window.or_else(|| gauge(colo::metrics::WINDOW_PROPORTION, &labels));
        let found = window.is_some();
        async move { found }
    })
    .await;
    let window = window.unwrap();
    assert!(window > 0.0 && window <= 1.0, "{window}");
}

/// A node's memory budget: each entity weighs what its type reports (here
/// 1,000 bytes for each message it handled), and a shard keeps their
/// total within its share of the budget, the policy (LRU) choosing whom
/// to passivate; a shard started beside it halves the share.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_memory_budget_keeps_the_entities_weight_within_each_shards_share() {
    use colo::passivation::ReplacementSettings;
    let _ = metrics();
    let settings = colo::ShardingSettings {
        passivation: PassivationStrategy {
            replacement: ReplacementSettings::preset("lru"),
            ..PassivationStrategy::none()
        },
        ..fast_settings(4)
    };
    let mut cluster = Cluster::new("budget", settings);
    cluster.start_coordinator(least_shard_new(0, 0.1));
    let node = colo::Node::new(cluster.network.transport("a")).with_memory_budget(10_000);
    let entity_type = cluster
        .entity_type("a")
        .with_size(|probe: &Probe| 1_000 * probe.handled() as usize);
    let a = cluster.add_built("a", node, entity_type, true);
    let in_shard = |shard: u32, n: usize| -> Vec<String> {
        (0..)
            .map(|i| format!("m{i}"))
            .filter(|id| a.shard_of(id) == colo::ShardId(shard))
            .take(n)
            .collect()
    };
    let live = |state: colo::CurrentRegionState, shard: u32| -> Vec<String> {
        state
            .shards
            .get(&colo::ShardId(shard))
            .map(|ids| ids.iter().map(|id| id.to_string()).collect())
            .unwrap_or_default()
    };
    let memory = || {
        gauge(
            colo::metrics::ENTITY_MEMORY,
            &[("entity_type", cluster.name.as_str())],
        )
        .unwrap_or(0.0)
    };
    // Thirty entities of 1,000 bytes in one shard: ten fit, the last ten.
    let ids = in_shard(0, 30);
    for id in &ids {
        a.ask(id, ProbeMsg::Where, ASK).await.unwrap();
    }
    let mut kept = live(a.state(ASK).await.unwrap(), 0);
    kept.sort();
    let mut last = ids[20..].to_vec();
    last.sort();
    assert_eq!(kept, last, "LRU keeps the ten most recent");
    assert_eq!(memory(), 10_000.0);
    // One grows to 6,000 bytes: the least recent others make room.
    let big = &ids[29];
    for _ in 0..5 {
        a.ask(big, ProbeMsg::Where, ASK).await.unwrap();
    }
    let kept = live(a.state(ASK).await.unwrap(), 0);
    assert!(kept.contains(big), "{kept:?}");
    assert_eq!(kept.len(), 5, "6,000 bytes and four of 1,000: {kept:?}");
    assert!(memory() <= 10_000.0, "{}", memory());
    // A second shard: 5,000 bytes each. The big one, now 7,000 bytes,
    // heavier than the whole share, is passivated once it has answered,
    // after the others.
    a.ask(&in_shard(1, 1)[0], ProbeMsg::Where, ASK)
        .await
        .unwrap();
    let reply = a.ask(big, ProbeMsg::Where, ASK).await.unwrap();
    assert_eq!(reply, at("a", 7));
    assert!(live(a.state(ASK).await.unwrap(), 0).is_empty());
    assert!(memory() <= 5_000.0, "{}", memory());
    let limit = counter(
        colo::metrics::PASSIVATIONS,
        &[("entity_type", &cluster.name), ("reason", "limit")],
    );
    assert_eq!(limit, 20 + 5 + 4 + 1);
    cluster.world.assert_never_live_twice();
}
