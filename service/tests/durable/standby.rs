//! Standby shards (`sharding.standbys`): a node keeps a copy of the shards
//! it does not host by reading their changelog partitions, and a start of
//! such a shard there reads only what the copy lacks. The broker is
//! librdkafka's in-process mock cluster, as for the other changelog
//! scenarios (`changelog.rs`).

use crate::changelog::{broker, ready, store, topic};
use crate::ledger::*;
use colo::ShardingSettings;
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
