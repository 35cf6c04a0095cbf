//! State carried between nodes by the changelog: a shard that starts on a
//! node restores its partition (all of it into an empty store, only the
//! tail after the store's checkpoint otherwise), and an epoch marker first,
//! so that what a deposed owner writes afterwards is ignored.
//!
//! The broker is librdkafka's in-process mock cluster: these scenarios need
//! a partitioned log that keeps what is written, in order, and nothing of
//! the broker's consumer groups.

use crate::ledger::*;
use colo::state::{StateRecord, StateStore};
use colo::{NodeStore, StateSettings};
use colo_connectors::{Changelog, ChangelogWrite};
use colo_tests::rdkafka::mocking::MockCluster;
use colo_tests::rdkafka::producer::DefaultProducerContext;
use colo_tests::recorded::{self, counter};
use std::ops::ControlFlow;
use std::sync::Arc;
use std::time::Duration;

pub(crate) type Broker = MockCluster<'static, DefaultProducerContext>;

/// A mock broker with `entity_type`'s changelog.
pub(crate) fn broker(entity_type: &str) -> Broker {
    let broker = MockCluster::new(1).expect("mock cluster");
    broker
        .create_topic(&topic(entity_type), SHARDS as i32, 1)
        .expect("changelog topic");
    broker
}

pub(crate) fn topic(entity_type: &str) -> String {
    format!("{entity_type}.changelog")
}

/// A node's store (in `dir`) with `entity_type`'s changelog.
pub(crate) fn store(broker: &Broker, entity_type: &str, store: &Arc<dyn StateStore>) -> NodeStore {
    let changelog = Changelog::new(
        &broker.bootstrap_servers(),
        &[],
        &topic(entity_type),
        Duration::from_secs(10),
    )
    .expect("changelog");
    NodeStore::new(store.clone(), behind()).with_changelog(entity_type, changelog)
}

/// As [`store`], the changelog written in transactions with the outputs.
pub(crate) fn transactional_store(
    broker: &Broker,
    entity_type: &str,
    store: &Arc<dyn StateStore>,
) -> NodeStore {
    let changelog = Changelog::new(
        &broker.bootstrap_servers(),
        &[],
        &topic(entity_type),
        Duration::from_secs(10),
    )
    .expect("changelog")
    .with_transactions();
    NodeStore::new(store.clone(), behind()).with_changelog(entity_type, changelog)
}

fn behind() -> StateSettings {
    StateSettings {
        flush_interval: Duration::from_millis(20),
        max_dirty: 10_000,
        ..StateSettings::default()
    }
}

/// Waits (bounded) until the node's region has registered with the
/// coordinator: shards handed off by a leaving node can go there.
pub(crate) async fn ready(node: &OneNode) {
    colo_tests::wait::until_ok(ASK, || async {
        let reasons = node.node.not_ready();
        match reasons.is_empty() {
            true => Ok(()),
            false => Err(format!("not ready: {reasons:?}")),
        }
    })
    .await;
}

fn accounts() -> Vec<String> {
    (0..40).map(|i| format!("acct-{i}")).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_moved_shard_serves_the_state_it_had_and_a_node_back_with_its_store_reads_only_the_tail()
{
    recorded::install();
    let name = "ledger-moves";
    let broker = broker(name);
    let cluster = cluster(name);
    let (dir_a, dir_b) = (
        tempfile::tempdir().expect("dir"),
        tempfile::tempdir().expect("dir"),
    );
    let (store_a, store_b) = (open(&dir_a), open(&dir_b));
    let a = cluster.node("a", store(&broker, name, &store_a), 1);
    for (i, id) in accounts().iter().enumerate() {
        let got = a.region.ask(id, LedgerMsg::Add(i as i64), ASK).await;
        assert_eq!(got.expect("added"), (i as i64, 1));
    }
    assert_eq!(
        counter(
            colo::metrics::STATE_RESTORES,
            &[("entity_type", name), ("from", "changelog")]
        ),
        u64::from(SHARDS),
        "each shard's first start reads its (empty) partition"
    );

    // b starts on an empty data directory: a's shards restore there from
    // the changelog alone.
    let b = cluster.node("b", store(&broker, name, &store_b), 1);
    ready(&b).await;
    a.node.shutdown().await;
    for (i, id) in accounts().iter().enumerate() {
        let got = b.region.ask(id, LedgerMsg::Get, ASK).await;
        assert_eq!(got.expect("got"), (i as i64, 1), "{id} as it was on a");
    }
    for id in accounts() {
        b.region
            .ask(&id, LedgerMsg::Add(100), ASK)
            .await
            .expect("added");
    }
    assert_eq!(
        counter(
            colo::metrics::STATE_RESTORES,
            &[("entity_type", name), ("from", "changelog")]
        ),
        2 * u64::from(SHARDS)
    );

    // a comes back on its data directory and b leaves: a reads only what
    // came after its checkpoints, b's markers and b's writes.
    let read_before = counter(
        colo::metrics::STATE_RESTORED_RECORDS,
        &[("entity_type", name)],
    );
    let a = cluster.node("a2", store(&broker, name, &store_a), 1);
    ready(&a).await;
    b.node.shutdown().await;
    for (i, id) in accounts().iter().enumerate() {
        let got = a.region.ask(id, LedgerMsg::Get, ASK).await;
        assert_eq!(got.expect("got"), (i as i64 + 100, 2), "{id} as b left it");
    }
    assert_eq!(
        counter(
            colo::metrics::STATE_RESTORES,
            &[("entity_type", name), ("from", "checkpoint")]
        ),
        u64::from(SHARDS),
        "every shard kept a's copy"
    );
    let tail = counter(
        colo::metrics::STATE_RESTORED_RECORDS,
        &[("entity_type", name)],
    ) - read_before;
    assert_eq!(
        tail,
        u64::from(SHARDS) + 2 * accounts().len() as u64,
        "one marker per shard from b, and b's one write of each account with the tombstone that retires a's key for it"
    );
}

/// A changelog not yet compacted holds an entity's state once per write,
/// and a removal between them: a restore writes each entity's last to the
/// store (one per entity per batch), which is what it serves.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restore_of_many_states_of_one_entity_serves_the_last_and_keeps_a_removal_then_a_new_start(
) {
    recorded::install();
    let name = "ledger-rewrites";
    let broker = broker(name);
    let cluster = cluster(name);
    let (dir_a, dir_b) = (
        tempfile::tempdir().expect("dir"),
        tempfile::tempdir().expect("dir"),
    );
    let (store_a, store_b) = (open(&dir_a), open(&dir_b));
    let a = cluster.node("a", store(&broker, name, &store_a), 1);
    for n in 1..=30 {
        a.region
            .ask("acct-busy", LedgerMsg::Add(n), ASK)
            .await
            .expect("added");
    }
    for n in 1..=5 {
        a.region
            .ask("acct-again", LedgerMsg::Add(n), ASK)
            .await
            .expect("added");
    }
    a.region
        .ask("acct-again", LedgerMsg::Delete, ASK)
        .await
        .expect("deleted");
    for _ in 0..2 {
        a.region
            .ask("acct-again", LedgerMsg::Add(7), ASK)
            .await
            .expect("added");
    }
    for n in 1..=4 {
        a.region
            .ask("acct-gone", LedgerMsg::Add(n), ASK)
            .await
            .expect("added");
    }
    a.region
        .ask("acct-gone", LedgerMsg::Delete, ASK)
        .await
        .expect("deleted");
    let read_before = counter(
        colo::metrics::STATE_RESTORED_RECORDS,
        &[("entity_type", name)],
    );

    let b = cluster.node("b", store(&broker, name, &store_b), 1);
    ready(&b).await;
    a.node.shutdown().await;
    let ask = |id: &'static str| b.region.ask(id, LedgerMsg::Get, ASK);
    assert_eq!(ask("acct-busy").await.expect("got"), (465, 30));
    assert_eq!(
        ask("acct-again").await.expect("got"),
        (14, 2),
        "started anew after its removal"
    );
    assert_eq!(ask("acct-gone").await.expect("got"), (0, 0), "removed");
    let read = counter(
        colo::metrics::STATE_RESTORED_RECORDS,
        &[("entity_type", name)],
    ) - read_before;
    assert!(read >= 30 + 5 + 2 + 4, "every state read: {read}");
    for (id, kept) in [
        ("acct-busy", true),
        ("acct-again", true),
        ("acct-gone", false),
    ] {
        let stored = store_b.load(name, shard_of(id), id).expect("loads");
        assert_eq!(stored.is_some(), kept, "{id} in b's store");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_a_deposed_owner_writes_after_a_newer_start_is_ignored_by_a_restore() {
    let name = "ledger-deposed";
    let broker = broker(name);
    let changelog = Arc::new(
        Changelog::new(
            &broker.bootstrap_servers(),
            &[],
            &topic(name),
            Duration::from_secs(10),
        )
        .expect("changelog"),
    );
    let id = "acct-1";
    let partition = shard_of(id).0 as i32;
    let state = |epoch: u64, balance: i64| {
        let ledger = Ledger {
            balance,
            entries: 1,
        };
        let bytes = colo::codec::encode(&ledger).expect("encodes");
        (
            id.as_bytes().to_vec(),
            StateRecord::new(epoch, 1, Some(bytes.to_vec())).encode(),
        )
    };
    // The old owner's start and write; then a newer start; then the old
    // owner, paused through it, writes once more.
    let old = changelog
        .write(partition, &[(Vec::new(), b"old start".to_vec())])
        .await
        .expect("marker")[0] as u64;
    changelog
        .write(partition, &[state(old, 10)])
        .await
        .expect("written");
    let new = changelog
        .write(partition, &[(Vec::new(), b"new start".to_vec())])
        .await
        .expect("marker")[0] as u64;
    changelog
        .write(partition, &[state(new, 20)])
        .await
        .expect("written");
    changelog
        .write(partition, &[state(old, 999)])
        .await
        .expect("written");

    let dir = tempfile::tempdir().expect("dir");
    let cluster = cluster(name);
    let c = cluster.node("c", store(&broker, name, &open(&dir)), 1);
    let got = c.region.ask(id, LedgerMsg::Get, ASK).await.expect("got");
    assert_eq!(
        got,
        (20, 1),
        "the newer owner's state, not the deposed one's"
    );
    let mut keys = Vec::new();
    let reader = changelog.clone();
    tokio::task::spawn_blocking(move || {
        reader
            .read(partition, None, i64::MAX, &mut |r| {
                keys.push(r.key.to_vec());
                if keys.len() == 6 {
                    ControlFlow::Break(())
                } else {
                    ControlFlow::Continue(())
                }
            })
            .expect("read");
        assert_eq!(
            keys[5].first(),
            Some(&0xFF),
            "c's start wrote its own marker last (a key no entity has)"
        );
    })
    .await
    .expect("reader");
}

/// An older start's write that landed late, among a later start's own
/// writes on the same node: the node restoring from its store's checkpoint
/// takes it as a node reading the whole partition does (the newest record
/// of its entity), rather than keeping its older copy.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_write_among_a_nodes_own_is_taken_from_its_checkpoint_as_from_the_whole_partition() {
    let name = "ledger-late-among";
    let broker = broker(name);
    let changelog = Arc::new(
        Changelog::new(
            &broker.bootstrap_servers(),
            &[],
            &topic(name),
            Duration::from_secs(10),
        )
        .expect("changelog"),
    );
    let id = "acct-1";
    let other = accounts()
        .into_iter()
        .find(|other| other != id && shard_of(other) == shard_of(id))
        .expect("another account on acct-1's shard");
    let cluster = cluster(name);
    let (dir_a, dir_c) = (
        tempfile::tempdir().expect("dir"),
        tempfile::tempdir().expect("dir"),
    );
    let store_a = open(&dir_a);

    let a = cluster.node("a", store(&broker, name, &store_a), 1);
    let got = a.region.ask(id, LedgerMsg::Add(10), ASK).await;
    assert_eq!(got.expect("added"), (10, 1));
    a.node.shutdown().await;
    let first = store_a
        .checkpoint(name, shard_of(id))
        .expect("checkpoint")
        .expect("a's checkpoint")
        .epoch;

    // a again, on its store: its start (its shard starts with a message),
    // then a's first start's write of acct-1 that landed late, then its
    // own write of another account.
    let a = cluster.node("a2", store(&broker, name, &store_a), 1);
    let got = a.region.ask(&other, LedgerMsg::Add(1), ASK).await;
    assert_eq!(got.expect("added"), (1, 1));
    let ledger = Ledger {
        balance: 25,
        entries: 2,
    };
    let late = StateRecord::new(
        first,
        1,
        Some(colo::codec::encode(&ledger).expect("encodes").to_vec()),
    )
    .encode();
    let key = [id.as_bytes(), &[0xFE], &first.to_be_bytes()].concat();
    changelog
        .write(shard_of(id).0 as i32, &[(key, late)])
        .await
        .expect("written");
    let got = a.region.ask(&other, LedgerMsg::Add(1), ASK).await;
    assert_eq!(got.expect("added"), (2, 2));
    a.node.shutdown().await;

    let c = cluster.node("c", store(&broker, name, &open(&dir_c)), 1);
    let got = c.region.ask(id, LedgerMsg::Get, ASK).await;
    assert_eq!(got.expect("got"), (25, 2), "the late write, read whole");
    c.node.shutdown().await;
    let a = cluster.node("a3", store(&broker, name, &store_a), 1);
    let got = a.region.ask(id, LedgerMsg::Get, ASK).await;
    assert_eq!(got.expect("got"), (25, 2), "the same, from a's checkpoint");
    a.node.shutdown().await;
}

/// A node's store kept through its changelog's topic being deleted and
/// made anew (`colo remove-internal-data --state` with the data
/// directories kept), while other nodes wrote the new topic past the
/// store's checkpoint: the node back on that store finds another start's
/// marker where its own was, drops its copy and reads the new changelog,
/// serving nothing of the old one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_copy_from_a_changelog_made_anew_is_dropped_though_the_new_one_reaches_past_it() {
    let name = "ledger-anew";
    let broker = broker(name);
    let anew = format!("{}.made-anew", topic(name));
    broker
        .create_topic(&anew, SHARDS as i32, 1)
        .expect("the new changelog topic");
    let on_new = |store: &Arc<dyn StateStore>| {
        let changelog = Changelog::new(
            &broker.bootstrap_servers(),
            &[],
            &anew,
            Duration::from_secs(10),
        )
        .expect("changelog");
        NodeStore::new(store.clone(), behind()).with_changelog(name, changelog)
    };
    let id = "acct-1";
    let others: Vec<String> = accounts()
        .into_iter()
        .filter(|other| other != id && shard_of(other) == shard_of(id))
        .take(2)
        .collect();
    assert_eq!(others.len(), 2, "two more accounts on acct-1's shard");
    let cluster = cluster(name);
    let (dir_a, dir_b) = (
        tempfile::tempdir().expect("dir"),
        tempfile::tempdir().expect("dir"),
    );
    let (store_a, store_b) = (open(&dir_a), open(&dir_b));

    // a on the old changelog: its marker, its write, its checkpoint.
    let a = cluster.node("a", store(&broker, name, &store_a), 1);
    let got = a.region.ask(id, LedgerMsg::Add(10), ASK).await;
    assert_eq!(got.expect("added"), (10, 1));
    a.node.shutdown().await;

    // b on the new one, with its own store: its marker where a's was, and
    // writes past a's checkpoint.
    let b = cluster.node("b", on_new(&store_b), 1);
    let got = b.region.ask(id, LedgerMsg::Add(5), ASK).await;
    assert_eq!(got.expect("added"), (5, 1));
    for other in &others {
        b.region
            .ask(other, LedgerMsg::Add(1), ASK)
            .await
            .expect("added");
    }
    b.node.shutdown().await;

    let a = cluster.node("a2", on_new(&store_a), 1);
    let got = a.region.ask(id, LedgerMsg::Get, ASK).await;
    assert_eq!(
        got.expect("got"),
        (5, 1),
        "the new changelog's state, not the old copy"
    );
    for other in &others {
        let got = a.region.ask(other, LedgerMsg::Get, ASK).await;
        assert_eq!(got.expect("got"), (1, 1), "{other}");
    }
    a.node.shutdown().await;
}

/// The changelog's broker goes away: the write fails and is tried again,
/// the node says it is not ready and why, the ask whose change it holds
/// gets no acknowledgement, and what was acknowledged before stays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_that_fails_holds_its_acknowledgement_and_makes_the_node_unready() {
    let name = "ledger-failing";
    let broker = broker(name);
    let changelog = Changelog::new(
        &broker.bootstrap_servers(),
        &[],
        &topic(name),
        Duration::from_secs(1),
    )
    .expect("changelog");
    let dir = tempfile::tempdir().expect("dir");
    let store = open(&dir);
    let node_store = NodeStore::new(store.clone(), behind()).with_changelog(name, changelog);
    let cluster = cluster(name);
    let a = cluster.node("a", node_store, 1);
    let id = "acct-1";
    a.region
        .ask(id, LedgerMsg::Add(1), ASK)
        .await
        .expect("acknowledged while the broker is there");
    drop(broker);

    let region = a.region.clone();
    let held = tokio::spawn(async move {
        region
            .ask(id, LedgerMsg::Add(5), Duration::from_secs(5))
            .await
    });
    colo_tests::wait::until_ok(ASK, || async {
        let reasons = a.node.not_ready();
        match reasons
            .iter()
            .any(|r| r.contains("state writes") && r.contains(name))
        {
            true => Ok(()),
            false => Err(format!(
                "the node does not say its writes fail: {reasons:?}"
            )),
        }
    })
    .await;
    let answer = held.await.expect("ask task");
    assert!(
        answer.is_err(),
        "a change that was not written is not acknowledged: {answer:?}"
    );
    let kept = stored_as(&store, name, id)
        .await
        .expect("the acknowledged state");
    let ledger: Ledger =
        colo::codec::decode(kept.state.as_deref().expect("state")).expect("decodes");
    assert_eq!(ledger.balance, 1, "what was acknowledged stays");
}

/// a wrote an account and left; b, owning the shard next, deleted it and
/// removed it (tombstones tagged with b's start, for every key that may
/// hold a record of it). a comes back on its store, which holds the
/// account below its checkpoint, and reads only the tail: the tagged
/// tombstones there delete its copy, so a's store holds nothing of the
/// account either. Taken as a key retired (as an untagged tombstone of a
/// start's key is), they left the deletion's record in a's store.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_back_with_its_store_drops_an_entity_removed_while_it_was_away() {
    let name = "ledger-removed-away";
    let broker = broker(name);
    let cluster = cluster(name);
    let (dir_a, dir_b) = (
        tempfile::tempdir().expect("dir"),
        tempfile::tempdir().expect("dir"),
    );
    let (store_a, store_b) = (open(&dir_a), open(&dir_b));
    let a = cluster.node("a", store(&broker, name, &store_a), 1);
    let got = a.region.ask("acct-1", LedgerMsg::Add(7), ASK).await;
    assert_eq!(got.expect("added"), (7, 1));
    a.node.shutdown().await;

    let b = cluster.node("b", store(&broker, name, &store_b), 1);
    let got = b.region.ask("acct-1", LedgerMsg::Delete, ASK).await;
    assert_eq!(got.expect("deleted"), (7, 1));
    colo_tests::wait::until("b removed the account", ASK, || {
        let store = store_b.clone();
        async move { stored_as(&store, name, "acct-1").await.is_none() }
    })
    .await;
    b.node.shutdown().await;

    // Another account of the shard starts it on a (the deleted one, loaded,
    // would be removed anew).
    let other = (0..1000)
        .map(|i| format!("other-{i}"))
        .find(|id| shard_of(id) == shard_of("acct-1"))
        .expect("an account of the same shard");
    let a = cluster.node("a2", store(&broker, name, &store_a), 1);
    let got = a.region.ask(&other, LedgerMsg::Get, ASK).await;
    assert_eq!(got.expect("got"), (0, 0));
    assert_eq!(
        stored_as(&store_a, name, "acct-1").await,
        None,
        "a's store holds nothing of it once restored"
    );
    let got = a.region.ask("acct-1", LedgerMsg::Get, ASK).await;
    assert_eq!(got.expect("got"), (0, 0), "deleted on a too");
    a.node.shutdown().await;
}

/// a wrote an account; b owned the shard next and wrote it again. a,
/// deposed and not knowing, had removed the account, and its tombstones
/// (tagged with a's start) land after b's record. c restores: the account
/// is b's. Such a tombstone removes an entity only when no newer start's
/// record of it is kept; taken as a plain tombstone of the entity's id, it
/// deleted b's state.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deposed_starts_removal_landing_late_takes_nothing_from_a_newer_start() {
    let name = "ledger-late-removal";
    let broker = broker(name);
    let cluster = cluster(name);
    let dirs: Vec<tempfile::TempDir> = (0..3).map(|_| tempfile::tempdir().expect("dir")).collect();
    let stores: Vec<Arc<dyn StateStore>> = dirs.iter().map(open).collect();
    let a = cluster.node("a", store(&broker, name, &stores[0]), 1);
    let got = a.region.ask("acct-1", LedgerMsg::Add(7), ASK).await;
    assert_eq!(got.expect("added"), (7, 1));
    a.node.shutdown().await;
    let a_epoch = stores[0]
        .checkpoint(name, shard_of("acct-1"))
        .expect("checkpoint")
        .expect("a's checkpoint")
        .epoch;

    let b = cluster.node("b", store(&broker, name, &stores[1]), 1);
    let got = b.region.ask("acct-1", LedgerMsg::Add(5), ASK).await;
    assert_eq!(got.expect("added"), (12, 2));
    b.node.shutdown().await;

    let changelog = Changelog::new(
        &broker.bootstrap_servers(),
        &[],
        &topic(name),
        Duration::from_secs(10),
    )
    .expect("changelog");
    let a_key = [b"acct-1".as_slice(), &[0xFE], &a_epoch.to_be_bytes()].concat();
    let tag = a_epoch.to_be_bytes();
    let removal = |key| ChangelogWrite {
        tag: Some(&tag),
        ..ChangelogWrite::tombstone(key)
    };
    let partition = shard_of("acct-1").0 as i32;
    changelog
        .write_or_delete(partition, &[removal(&a_key), removal(b"acct-1")])
        .await
        .expect("written");

    let c = cluster.node("c", store(&broker, name, &stores[2]), 1);
    let got = c.region.ask("acct-1", LedgerMsg::Get, ASK).await;
    assert_eq!(
        got.expect("got"),
        (12, 2),
        "b's state, not a's late removal"
    );
    c.node.shutdown().await;
}
