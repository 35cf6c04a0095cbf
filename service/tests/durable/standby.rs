//! Standby shards (`sharding.standbys`): a node keeps a copy of the shards
//! it does not host by reading their changelog partitions, and a start of
//! such a shard there reads only what the copy lacks. The broker is
//! librdkafka's in-process mock cluster, as for the other changelog
//! scenarios (`changelog.rs`).

use crate::changelog::{broker, ready, store, topic};
use crate::ledger::*;
use colo::ShardingSettings;
use colo_allocation::standbys::ranked;
use colo_connectors::Changelog;
use colo_tests::recorded::{self, counter};
use std::collections::BTreeSet;
use std::ops::ControlFlow;
use std::time::Duration;

fn with_standbys() -> ShardingSettings {
    ShardingSettings {
        standbys: 1,
        ..settings()
    }
}

fn accounts() -> Vec<String> {
    (0..40).map(|i| format!("acct-{i}")).collect()
}

/// Each record of the changelog: (partition, whether it is an epoch
/// marker: its key begins with 0xFF).
fn changelog_records(broker: &crate::changelog::Broker, name: &str) -> Vec<(i32, bool)> {
    let changelog = Changelog::new(
        &broker.bootstrap_servers(),
        &[],
        &topic(name),
        Duration::from_secs(10),
    )
    .expect("changelog");
    let mut records = Vec::new();
    for partition in 0..SHARDS as i32 {
        changelog
            .read(partition, None, i64::MAX, &mut |r| {
                records.push((partition, r.key.first() == Some(&0xFF)));
                ControlFlow::Continue(())
            })
            .expect("read");
    }
    records
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standby_never_writes_or_answers_and_a_start_from_its_copy_reads_only_what_it_lacks() {
    recorded::install();
    let name = "ledger-standby";
    let broker = broker(name);
    let cluster = cluster(name);
    let (dir_a, dir_b) = (
        tempfile::tempdir().expect("dir"),
        tempfile::tempdir().expect("dir"),
    );
    let (store_a, store_b) = (open(&dir_a), open(&dir_b));
    let a = cluster.node_with("a", store(&broker, name, &store_a), with_standbys(), 1);
    ready(&a).await;
    for (i, id) in accounts().iter().enumerate() {
        let got = a.region.ask(id, LedgerMsg::Add(i as i64), ASK).await;
        assert_eq!(got.expect("added"), (i as i64, 1));
    }
    let shards: BTreeSet<colo::ShardId> = accounts().iter().map(|id| shard_of(id)).collect();

    // b joins and keeps a copy of every shard a hosts (two members, one
    // standby each): the copies come from the changelog alone.
    let b = cluster.node_with("b", store(&broker, name, &store_b), with_standbys(), 1);
    ready(&b).await;
    colo_tests::wait::until("b's copies of a's shards", ASK, || {
        let store_b = store_b.clone();
        async move {
            accounts().iter().all(|id| {
                store_b
                    .load(name, shard_of(id), id)
                    .ok()
                    .flatten()
                    .is_some()
            })
        }
    })
    .await;
    let before = changelog_records(&broker, name);
    assert_eq!(
        before.iter().filter(|(_, marker)| *marker).count(),
        shards.len(),
        "one marker per start of a shard on a, none from b's standbys"
    );
    assert_eq!(before.len(), shards.len() + accounts().len());

    // a writes on; b's copies fall behind; then a leaves and b starts its
    // shards from the copies.
    for id in accounts() {
        a.region
            .ask(&id, LedgerMsg::Add(100), ASK)
            .await
            .expect("added");
    }
    let read_before = counter(
        colo::metrics::STATE_RESTORED_RECORDS,
        &[("entity_type", name)],
    );
    let restores = |from: &str| {
        counter(
            colo::metrics::STATE_RESTORES,
            &[("entity_type", name), ("from", from)],
        )
    };
    let (from_standby, from_changelog) = (restores("standby"), restores("changelog"));
    a.node.shutdown().await;
    for (i, id) in accounts().iter().enumerate() {
        let got = b.region.ask(id, LedgerMsg::Get, ASK).await;
        assert_eq!(got.expect("got"), (i as i64 + 100, 2), "{id} as a left it");
    }
    assert_eq!(
        restores("standby") - from_standby,
        shards.len() as u64,
        "every shard of a started on b from b's copy"
    );
    assert_eq!(
        restores("changelog"),
        from_changelog,
        "no partition read whole"
    );
    let tail = counter(
        colo::metrics::STATE_RESTORED_RECORDS,
        &[("entity_type", name)],
    ) - read_before;
    assert!(
        tail <= (shards.len() + accounts().len()) as u64,
        "at most b's markers and a's last writes read: {tail}"
    );
    let after = changelog_records(&broker, name);
    assert_eq!(
        after.iter().filter(|(_, marker)| *marker).count(),
        2 * shards.len(),
        "one more marker per shard: b's starts"
    );
}

/// Short timings, so that a node cut off from the coordinator is
/// terminated within a second or so.
fn quick_with_standbys() -> ShardingSettings {
    ShardingSettings {
        heartbeat_interval: Duration::from_millis(100),
        fence_timeout: Duration::from_millis(700),
        region_timeout: Duration::from_secs(1),
        ..with_standbys()
    }
}

/// The "the placement prefers a node that holds a warm copy": c
/// is cut off from the coordinator in a cluster of three, and each of its
/// shards, asked for one after another once c is terminated, goes to the
/// survivor the nodes rank first for it (which kept its copy) whenever
/// that leaves the two survivors' shard counts within one of each other,
/// and starts there from the copy; else to the survivor with fewer. By
/// count alone, a tie goes to the smaller id: at least one of c's shards
/// here goes elsewhere than it would have.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_nodes_shards_start_where_their_copies_are_when_the_counts_allow() {
    recorded::install();
    let name = "ledger-warm-placement";
    let broker = broker(name);
    let cluster = cluster_with(name, quick_with_standbys());
    let dirs: Vec<tempfile::TempDir> = (0..3).map(|_| tempfile::tempdir().expect("dir")).collect();
    let stores: Vec<_> = dirs.iter().map(open).collect();
    let names = ["a", "b", "c"];
    let mut nodes = Vec::new();
    for (node, store_of) in names.iter().zip(&stores) {
        let store_of = store(&broker, name, store_of);
        let node = cluster.node_with(node, store_of, quick_with_standbys(), 1);
        ready(&node).await;
        nodes.push(node);
    }
    for (i, id) in accounts().iter().enumerate() {
        let got = nodes[0].region.ask(id, LedgerMsg::Add(i as i64), ASK).await;
        assert_eq!(got.expect("added"), (i as i64, 1));
    }
    let hosted = |node: &crate::ledger::OneNode| {
        let region = node.region.clone();
        async move {
            let state = region.state(ASK).await.expect("region state");
            state
                .shards
                .keys()
                .copied()
                .collect::<BTreeSet<colo::ShardId>>()
        }
    };
    let lost = hosted(&nodes[2]).await;
    assert!(!lost.is_empty(), "c hosts shards");
    let survivors = [colo::RegionId::new("a"), colo::RegionId::new("b")];
    let first_ranked = |shard| usize::from(ranked(shard, &survivors)[0].as_str() == "b");

    // Each of c's shards is in its first-ranked survivor's store.
    for shard in &lost {
        let keeper = stores[first_ranked(*shard)].clone();
        let ids: Vec<String> = accounts()
            .into_iter()
            .filter(|id| shard_of(id) == *shard)
            .collect();
        colo_tests::wait::until("the first-ranked survivor's copy", ASK, || {
            let (keeper, ids) = (keeper.clone(), ids.clone());
            async move {
                ids.iter()
                    .all(|id| keeper.load(name, *shard, id).ok().flatten().is_some())
            }
        })
        .await;
    }
    let restores = |from: &str| {
        counter(
            colo::metrics::STATE_RESTORES,
            &[("entity_type", name), ("from", from)],
        )
    };

    cluster.network.partition_from_coordinator("c");
    colo_tests::wait::until_ok(ASK, || {
        let a = nodes[0].region.clone();
        async move {
            let c = colo::RegionId::new("c");
            match a.cluster_stats(Duration::from_millis(500)).await {
                Ok(stats)
                    if !stats.regions.contains_key(&c) && !stats.failed_regions.contains(&c) =>
                {
                    Ok(())
                }
                other => Err(format!("c's region not terminated yet: {other:?}")),
            }
        }
    })
    .await;
    let mut counts = [hosted(&nodes[0]).await.len(), hosted(&nodes[1]).await.len()];
    let (mut on_copies, mut not_by_count) = (0, 0);
    for shard in &lost {
        let keeper = first_ranked(*shard);
        let fits = counts[keeper] <= counts[1 - keeper];
        let by_count = usize::from(counts[1] < counts[0]);
        let from_standby = restores("standby");
        for (i, id) in accounts().iter().enumerate() {
            if shard_of(id) == *shard {
                let got = nodes[0].region.ask(id, LedgerMsg::Get, ASK).await;
                assert_eq!(got.expect("got"), (i as i64, 1), "{id} as c left it");
            }
        }
        let host = usize::from(hosted(&nodes[1]).await.contains(shard));
        let expected = if fits { keeper } else { by_count };
        assert_eq!(
            names[host], names[expected],
            "shard {shard}: the survivor keeping its copy ({}) if the counts {counts:?} allow, else the one with fewer",
            names[keeper]
        );
        if fits {
            assert_eq!(
                restores("standby") - from_standby,
                1,
                "shard {shard} starts from the copy"
            );
            on_copies += 1;
        }
        not_by_count += usize::from(host != by_count);
        counts[host] += 1;
    }
    assert!(on_copies > 0, "a shard of c went where its copy is");
    assert!(
        not_by_count > 0,
        "a shard of c went elsewhere than by count alone: this test shows the preference"
    );
}
