//! A restore after Kafka's log cleaner compacted the changelog: what a
//! restore's decisions rest on, the epoch markers of every start of a
//! shard, is still there. The broker is Apache Kafka (the tests' broker,
//! its cleaner rolling and cleaning segments every second): librdkafka's
//! mock cluster does not compact.

use crate::ledger::*;
use colo::state::{Checkpoint, StateRecord, StateStore, WriteBatch};
use colo::NodeStore;
use colo_connectors::Changelog;
use colo_tests::broker::Broker;
use std::ops::ControlFlow;
use std::sync::Arc;
use std::time::Duration;

const TIMEOUT: Duration = Duration::from_secs(30);

/// How often the broker rolls segments and cleans.
const ROLL: Duration = Duration::from_secs(1);

/// A node's store with `entity_type`'s changelog on `broker`, writing
/// each change at once.
fn store(broker: &Broker, entity_type: &str, store: &Arc<dyn StateStore>) -> NodeStore {
    let changelog = Changelog::new(
        broker.bootstrap(),
        &[],
        &format!("{entity_type}.changelog"),
        TIMEOUT,
    )
    .expect("changelog");
    NodeStore::new(store.clone(), at_once()).with_changelog(entity_type, changelog)
}

/// `n` account ids on the shard of `first`, `first` included.
fn same_shard(first: &str, prefix: &str, n: usize) -> Vec<String> {
    let shard = shard_of(first);
    std::iter::once(first.to_string())
        .chain(
            (0..10_000)
                .map(|i| format!("{prefix}-{i}"))
                .filter(|id| id != first && shard_of(id) == shard),
        )
        .take(n)
        .collect()
}

/// A ledger's state record as a start at `epoch` writes it.
fn state(epoch: u64, balance: i64) -> Vec<u8> {
    let ledger = Ledger {
        balance,
        entries: 1,
    };
    let bytes = colo::codec::encode(&ledger).expect("encodes");
    StateRecord::new(epoch, 1, Some(bytes.to_vec())).encode()
}

/// What `partition` holds now: each record's offset, key and whether it
/// has a value (not a tombstone).
async fn held(changelog: &Arc<Changelog>, partition: i32) -> Vec<(i64, Vec<u8>, bool)> {
    let reader = changelog.clone();
    tokio::task::spawn_blocking(move || {
        let mut held = Vec::new();
        reader
            .read(partition, None, i64::MAX, &mut |r| {
                held.push((r.offset, r.key.to_vec(), r.value.is_some()));
                ControlFlow::Continue(())
            })
            .expect("read");
        held
    })
    .await
    .expect("reader")
}

/// The offsets `partition` holds now.
async fn offsets(changelog: &Arc<Changelog>, partition: i32) -> Vec<i64> {
    let held = held(changelog, partition).await;
    held.into_iter().map(|(offset, _, _)| offset).collect()
}

/// A broker whose cleaner compacts every [`ROLL`], `name`'s changelog on
/// it, a cluster of `name`, and `nodes` stores of their own.
struct Compacting {
    broker: Broker,
    changelog: Arc<Changelog>,
    cluster: Cluster,
    stores: Vec<Arc<dyn StateStore>>,
    _dirs: Vec<tempfile::TempDir>,
}

async fn compacting(name: &str, nodes: usize) -> Compacting {
    let broker = Broker::start_compacting(&humantime::format_duration(ROLL).to_string());
    let topic = format!("{name}.changelog");
    colo_tests::kafka::create_compacted(broker.bootstrap(), &topic, SHARDS as i32).await;
    let changelog =
        Arc::new(Changelog::new(broker.bootstrap(), &[], &topic, TIMEOUT).expect("changelog"));
    let dirs: Vec<tempfile::TempDir> = (0..nodes)
        .map(|_| tempfile::tempdir().expect("dir"))
        .collect();
    Compacting {
        broker,
        changelog,
        cluster: cluster(name),
        stores: dirs.iter().map(open).collect(),
        _dirs: dirs,
    }
}

/// Kafka cleans every segment but the one it writes to, and rolls that
/// one on a write once ROLL has passed (a time the broker counts, which no
/// state shows): three writes of `roll`, ROLL apart, leave what came
/// before in segments the cleaner takes. Returns the first write's offset.
async fn roll_segments(changelog: &Changelog, partition: i32, roll: &str, epoch: u64) -> i64 {
    let mut first = None;
    for _ in 0..3 {
        let at = changelog
            .write(partition, &[(roll.as_bytes().to_vec(), state(epoch, 0))])
            .await
            .expect("written")[0];
        first.get_or_insert(at);
        tokio::time::sleep(ROLL + Duration::from_millis(100)).await;
    }
    first.expect("written")
}

/// Node a wrote shard S, then b owned S and wrote to it, while a, not
/// knowing, wrote once more an entity b wrote (a record that landed after
/// b's, and that a's store took with its checkpoint). c owned S after.
/// Kafka's cleaner then compacted the partition. a comes back on its
/// store: the records between its own marker and its checkpoint hold b's
/// start, so its copy is dropped and the whole partition read, giving b's
/// write and ignoring a's deposed one. When every marker had the same key,
/// the cleaner kept c's alone: a kept its copy, served its deposed write,
/// and never had b's (it lay below a's checkpoint).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_back_after_compaction_still_finds_the_start_that_deposed_it() {
    let name = "ledger-compacted";
    let Compacting {
        broker,
        changelog,
        cluster,
        stores,
        _dirs,
    } = compacting(name, 3).await;
    let ids = same_shard("acct-1", "acct", 2);
    let (a_kept, b_wrote) = (&ids[0], &ids[1]);
    let partition = shard_of(a_kept).0 as i32;

    // a's start and write; a leaves.
    let a = cluster.node("a", store(&broker, name, &stores[0]), 1);
    let got = a.region.ask(a_kept, LedgerMsg::Add(10), ASK).await;
    assert_eq!(got.expect("added"), (10, 1));
    a.node.shutdown().await;
    let a_checkpoint = stores[0]
        .checkpoint(name, shard_of(a_kept))
        .expect("checkpoint")
        .expect("a's checkpoint");
    let a_epoch = a_checkpoint.epoch;

    // b's start and write; b leaves.
    let b = cluster.node("b", store(&broker, name, &stores[1]), 1);
    let got = b.region.ask(b_wrote, LedgerMsg::Add(20), ASK).await;
    assert_eq!(got.expect("added"), (20, 1));
    b.node.shutdown().await;

    // a's write of b's entity that landed after b's, under the key a's
    // start writes it (the id, 0xFE, a's epoch), and in a's store with its
    // checkpoint as a's flush would have put it.
    let late = state(a_epoch, 999);
    let a_key = [b_wrote.as_bytes(), &[0xFE], &a_epoch.to_be_bytes()].concat();
    let offset = changelog
        .write(partition, &[(a_key, late.clone())])
        .await
        .expect("written")[0];
    let mut batch = WriteBatch::new(name);
    batch.put(shard_of(b_wrote), b_wrote, late);
    batch.checkpoint(
        shard_of(b_wrote),
        Checkpoint {
            offset: u64::try_from(offset).expect("offset") + 1,
            ..a_checkpoint
        },
    );
    stores[0].write(&batch).expect("a's store");

    // c's start: it reads the partition and ignores a's late write, older
    // than b's.
    let c = cluster.node("c", store(&broker, name, &stores[2]), 1);
    let got = c.region.ask(b_wrote, LedgerMsg::Get, ASK).await;
    assert_eq!(got.expect("got"), (20, 1), "a's late write ignored");
    c.node.shutdown().await;

    // The first of three writes of one key is in a segment the cleaner
    // takes with the second's key known.
    let roll = same_shard(a_kept, "roll", 2).remove(1);
    let first = roll_segments(&changelog, partition, &roll, a_epoch).await;
    colo_tests::wait::until("the cleaner compacted the partition", TIMEOUT * 2, || {
        let changelog = changelog.clone();
        async move { !offsets(&changelog, partition).await.contains(&first) }
    })
    .await;

    // a is back on its store.
    let a = cluster.node("a2", store(&broker, name, &stores[0]), 1);
    let got = a.region.ask(b_wrote, LedgerMsg::Get, ASK).await;
    assert_eq!(
        got.expect("got"),
        (20, 1),
        "b's write, below a's checkpoint, not a's deposed one in a's store"
    );
    let got = a.region.ask(a_kept, LedgerMsg::Get, ASK).await;
    assert_eq!(got.expect("got"), (10, 1), "a's own write before b");
    a.node.shutdown().await;
}

/// The key of `id`'s last state record in `partition`, as whichever start
/// wrote it keyed it.
async fn key_of(changelog: &Arc<Changelog>, partition: i32, id: &str) -> Vec<u8> {
    let of_id = |key: &[u8]| {
        key.strip_prefix(id.as_bytes())
            .is_some_and(|rest| rest.first().is_none_or(|&b| b == 0xFE))
    };
    held(changelog, partition)
        .await
        .into_iter()
        .rev()
        .find(|(_, key, value)| *value && of_id(key))
        .map(|(_, key, _)| key)
        .expect("a state record of the entity")
}

/// Node a wrote two accounts of shard S; b owned S next and wrote one of
/// them; a, cut off and not knowing, had a write of each land after b's
/// (what librdkafka still held for it). Kafka's cleaner then compacted
/// the partition, which keeps one record per key. c, restoring after it:
/// the account b wrote is b's (a's late record is older than b's, and
/// could not take its place), and the other is a's late record, the newest
/// of its account (a's state with the offsets it applied, which were
/// never acknowledged and are skipped as applied when they come again).
/// When a start's writes shared their key with every other start's, the
/// cleaner kept a's late records alone, a restore ignored them as a
/// deposed start's, and both accounts lost their whole history.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deposed_owners_late_writes_take_nothing_from_a_newer_one_after_compaction() {
    let name = "ledger-late";
    let Compacting {
        broker,
        changelog,
        cluster,
        stores,
        _dirs,
    } = compacting(name, 3).await;
    let ids = same_shard("acct-1", "acct", 3);
    let (b_wrote, a_only, roll) = (&ids[0], &ids[1], &ids[2]);
    let partition = shard_of(b_wrote).0 as i32;

    let a = cluster.node("a", store(&broker, name, &stores[0]), 1);
    let got = a.region.ask(b_wrote, LedgerMsg::Add(10), ASK).await;
    assert_eq!(got.expect("added"), (10, 1));
    let got = a.region.ask(a_only, LedgerMsg::Add(20), ASK).await;
    assert_eq!(got.expect("added"), (20, 1));
    a.node.shutdown().await;
    let a_epoch = stores[0]
        .checkpoint(name, shard_of(b_wrote))
        .expect("checkpoint")
        .expect("a's checkpoint")
        .epoch;
    let a_keys = (
        key_of(&changelog, partition, b_wrote).await,
        key_of(&changelog, partition, a_only).await,
    );
    let a_wrote = offsets(&changelog, partition).await;

    let b = cluster.node("b", store(&broker, name, &stores[1]), 1);
    let got = b.region.ask(b_wrote, LedgerMsg::Add(5), ASK).await;
    assert_eq!(got.expect("added"), (15, 2));
    b.node.shutdown().await;

    // a's late writes, under a's keys, with a's epoch.
    changelog
        .write(
            partition,
            &[
                (a_keys.0, state(a_epoch, 999)),
                (a_keys.1, state(a_epoch, 25)),
            ],
        )
        .await
        .expect("written");

    roll_segments(&changelog, partition, roll, a_epoch).await;
    colo_tests::wait::until("the cleaner dropped a's first writes", TIMEOUT * 2, || {
        let changelog = changelog.clone();
        let a_wrote = a_wrote.clone();
        async move {
            let held = offsets(&changelog, partition).await;
            // a's marker stays; its two writes go.
            a_wrote.iter().filter(|o| held.contains(o)).count() == 1
        }
    })
    .await;

    let c = cluster.node("c", store(&broker, name, &stores[2]), 1);
    let got = c.region.ask(b_wrote, LedgerMsg::Get, ASK).await;
    assert_eq!(got.expect("got"), (15, 2), "b's write, not a's late one");
    let got = c.region.ask(a_only, LedgerMsg::Get, ASK).await;
    assert_eq!(
        got.expect("got"),
        (25, 1),
        "a's late write, the newest of its account"
    );
    c.node.shutdown().await;
}

/// Node a wrote an account and left. b owned the shard next and deleted
/// the account: a record without a state, then, once that was durable
/// (the deletion applied no record, so nothing waits for a commit), a
/// tombstone for each key that may hold a record of it, tagged with b's
/// start, and a delete in b's store. Kafka's cleaner then compacted the
/// partition, and (its `delete.retention.ms` a second here, a day by
/// default) dropped the tombstones too. a comes back on its store, which
/// still holds the account below its checkpoint: records after its
/// checkpoint are gone, so it drops its copy and reads the partition, and
/// the account stays deleted. Before, a deletion was a record kept for
/// good (changelog and store grew with every id ever deleted); reading
/// only the tail, a served its copy again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_entity_is_removed_from_changelog_and_store_and_stays_deleted_after_compaction() {
    let name = "ledger-removed";
    let Compacting {
        broker,
        changelog,
        cluster,
        stores,
        _dirs,
    } = compacting(name, 2).await;
    let ids = same_shard("acct-1", "acct", 2);
    let (deleted, roll) = (&ids[0], &ids[1]);
    let partition = shard_of(deleted).0 as i32;

    let a = cluster.node("a", store(&broker, name, &stores[0]), 1);
    let got = a.region.ask(deleted, LedgerMsg::Add(10), ASK).await;
    assert_eq!(got.expect("added"), (10, 1));
    a.node.shutdown().await;
    let a_epoch = stores[0]
        .checkpoint(name, shard_of(deleted))
        .expect("checkpoint")
        .expect("a's checkpoint")
        .epoch;
    let a_wrote = offsets(&changelog, partition).await;

    let b = cluster.node("b", store(&broker, name, &stores[1]), 1);
    let got = b.region.ask(deleted, LedgerMsg::Delete, ASK).await;
    assert_eq!(got.expect("deleted"), (10, 1));
    colo_tests::wait::until("b removed the deleted account", TIMEOUT, || {
        let store = stores[1].clone();
        let id = deleted.clone();
        async move { stored_as(&store, name, &id).await.is_none() }
    })
    .await;
    b.node.shutdown().await;

    let of_deleted = |key: &[u8]| {
        key.strip_prefix(deleted.as_bytes())
            .is_some_and(|rest| rest.first().is_none_or(|&b| b == 0xFE))
    };
    let keys: Vec<(Vec<u8>, bool)> = held(&changelog, partition)
        .await
        .into_iter()
        .filter(|(_, key, _)| of_deleted(key))
        .map(|(_, key, value)| (key, value))
        .collect();
    let a_key = [deleted.as_bytes(), &[0xFE], &a_epoch.to_be_bytes()].concat();
    for key in [a_key.clone(), deleted.as_bytes().to_vec()] {
        let last = keys.iter().rev().find(|(k, _)| *k == key);
        assert_eq!(
            last.map(|(_, value)| *value),
            Some(false),
            "a tombstone ends {key:?}: {keys:?}"
        );
    }
    let b_key = keys
        .iter()
        .find(|(key, value)| *value && *key != a_key)
        .map(|(key, _)| key.clone())
        .expect("b's record of the deletion");
    assert_eq!(
        keys.iter()
            .rev()
            .find(|(k, _)| *k == b_key)
            .map(|(_, v)| *v),
        Some(false),
        "a tombstone ends b's key: {keys:?}"
    );

    roll_segments(&changelog, partition, roll, a_epoch).await;
    colo_tests::wait::until(
        "the cleaner dropped every record of the deleted account but its tombstones",
        TIMEOUT * 2,
        || {
            let changelog = changelog.clone();
            async move {
                let held = held(&changelog, partition).await;
                !held.iter().any(|(_, key, value)| *value && of_deleted(key))
            }
        },
    )
    .await;
    assert!(
        offsets(&changelog, partition).await.contains(&a_wrote[0]),
        "a's marker stays"
    );

    let a = cluster.node("a2", store(&broker, name, &stores[0]), 1);
    let got = a.region.ask(deleted, LedgerMsg::Get, ASK).await;
    assert_eq!(
        got.expect("got"),
        (0, 0),
        "deleted, not a's copy from before its checkpoint"
    );
    a.node.shutdown().await;
}
