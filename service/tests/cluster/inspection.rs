//! The two inspection queries return exactly what is live.

use crate::support::*;
use colo::{EntityId, ShardId};
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn region_state_and_cluster_stats_return_exactly_what_is_live() {
    let mut cluster = Cluster::new("inspect", fast_settings(8));
    cluster.start_coordinator(least_shard_new(0, 0.1));
    for n in ["a", "b", "c"] {
        cluster.add_node(n);
    }
    cluster.add_proxy("p");
    cluster.await_regions(3).await;
    let p = cluster.region("p");
    let ids: Vec<String> = (0..60).map(|i| format!("i{i}")).collect();
    for id in &ids {
        p.ask(id, ProbeMsg::Where, ASK).await.unwrap();
    }
    // One entity fails and is dropped: it is not live any more.
    p.ask("i7", ProbeMsg::Fail, ASK).await.unwrap_err();

    let mut expected: BTreeMap<String, BTreeMap<ShardId, BTreeSet<String>>> = BTreeMap::new();
    let homes = cluster.homes();
    for id in ids.iter().filter(|id| id.as_str() != "i7") {
        let shard = p.shard_of(id);
        expected
            .entry(homes[&shard].clone())
            .or_default()
            .entry(shard)
            .or_default()
            .insert(id.clone());
    }
    for n in ["a", "b", "c"] {
        let state = cluster.region(n).state(ASK).await.unwrap();
        assert!(state.failed.is_empty());
        let got: BTreeMap<ShardId, BTreeSet<String>> = state
            .shards
            .into_iter()
            .map(|(s, ids)| (s, ids.iter().map(EntityId::to_string).collect()))
            .filter(|(_, ids): &(ShardId, BTreeSet<String>)| !ids.is_empty())
            .collect();
        assert_eq!(
            got,
            expected.get(n).cloned().unwrap_or_default(),
            "region state of {n}"
        );
    }
    assert!(p.state(ASK).await.unwrap().shards.is_empty());

    let stats = p.cluster_stats(ASK).await.unwrap();
    assert!(stats.failed_regions.is_empty());
    assert_eq!(
        stats
            .regions
            .keys()
            .map(|r| r.to_string())
            .collect::<Vec<_>>(),
        ["a", "b", "c"]
    );
    assert_eq!(stats.total_entities(), 59);
    for (region, r) in &stats.regions {
        for (shard, n) in &r.stats {
            let want = expected
                .get(region.as_str())
                .and_then(|s| s.get(shard))
                .map_or(0, BTreeSet::len);
            assert_eq!(*n, want, "stats of {region} shard {shard}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queries_list_the_shards_that_do_not_answer_in_time() {
    // A mailbox of one: a blocked entity with one more message queued fills
    // its shard, which then takes no mail (queries included) until released.
    let settings = colo::ShardingSettings {
        shard_mailbox_capacity: 1,
        ..fast_settings(4)
    };
    let mut cluster = Cluster::new("inspect-stuck", settings);
    cluster.start_coordinator(least_shard_new(0, 0.1));
    let a = cluster.add_node("a");
    cluster.add_node("b");
    cluster.await_regions(2).await;
    let ids = cluster.touch_all_shards("a").await;
    let (stuck, home) = cluster.homes().into_iter().find(|(_, r)| r == "b").unwrap();
    // One entity of b blocks; its next message waits behind it and fills
    // the shard. Told through b itself, so they are in the shard before the
    // queries.
    let b_region = cluster.region(&home);
    b_region.tell(&ids[&stuck], ProbeMsg::Block).await.unwrap();
    b_region.tell(&ids[&stuck], ProbeMsg::Where).await.unwrap();
    // A shard that had not taken the second message yet when the first
    // query came takes both at once and answers; from then on it is full.
    eventually(
        "the stuck shard listed as failed",
        Duration::from_secs(5),
        || async {
            let state = b_region.state(Duration::from_millis(200)).await.unwrap();
            state.failed == vec![stuck] && !state.shards.contains_key(&stuck)
        },
    )
    .await;

    let stats = a.cluster_stats(Duration::from_millis(300)).await.unwrap();
    assert!(stats.failed_regions.is_empty());
    let b = &stats.regions[&colo::RegionId::new("b")];
    assert_eq!(b.failed, vec![stuck]);
    assert_eq!(
        stats.total_entities(),
        3,
        "the three answering shards hold one entity each"
    );
    cluster.world.release_all();
    let state = cluster.region(&home).state(ASK).await.unwrap();
    assert!(state.failed.is_empty() && state.shards.contains_key(&stuck));
}
