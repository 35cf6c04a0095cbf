//! Durable entity state end to end: `colo run` nodes of the sample's user
//! entity type (durable: its totals kept in each node's store and the
//! changelog) on Apache Kafka, while records flow and nodes join, are killed and
//! restarted, or stop. What counts is every user's totals, asked of the
//! cluster with `colo verify` and compared with what was produced: each
//! purchase counted exactly once, whatever happened.

use colo_connectors::Changelog;
use colo_tests::broker::Broker;
use colo_tests::client::entities_on;
use colo_tests::lifecycle::Lifecycle;
use colo_tests::process::NodeProcess;
use colo_tests::purchases::{verify, verify_with_milestones, Producer};
use colo_tests::user_nodes::*;
use colo_tests::{http, wait};
use std::collections::BTreeMap;
use std::ops::ControlFlow;
use std::time::Duration;

/// A series of a user metric on `node` whose labels include `label`.
async fn series(node: &NodeProcess, name: &str, label: &str) -> f64 {
    let (_, body) = http::get(&node.admin, "/metrics").await.expect("metrics");
    body.lines()
        .filter(|l| l.starts_with(name) && l.contains("entity_type=\"user\"") && l.contains(label))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// Two nodes, a third joining midway; one killed (kill -9) midway and
/// started again (on its data directory, or on an empty one), another
/// stopped with SIGTERM; records flowing throughout.
async fn through_a_join_a_kill_and_a_stop(test: &str, empty_data_dir: bool, standbys: u32) {
    let broker = Broker::start();
    let dir = tempfile::tempdir().expect("dir");
    let (topic, cluster) = unique(test);
    let mut sets = kafka_sets(broker.bootstrap(), &topic, &cluster);
    sets.push(format!("sharding.standbys={standbys}"));
    let a = start(None, &sets);
    a.await_ready(READY).await;
    let mut b = start(Some(&a.grpc), &sets);
    b.await_ready(READY).await;
    let producer = Producer::start(dir.path(), broker.bootstrap(), &topic, 40, 3600, Some(300));
    await_hosting(&a).await;
    await_hosting(&b).await;
    assert_group_protocol(&broker, &format!("{cluster}.user"));
    until_handled(&[&a, &b], 900).await;

    let mut c = start(Some(&a.grpc), &sets);
    c.await_ready(READY).await;
    await_hosting(&c).await;
    until_handled(&[&a, &b, &c], 1800).await;

    b.kill();
    let killed_at = humantime::format_rfc3339_micros(std::time::SystemTime::now()).to_string();
    if empty_data_dir {
        b.clear_data_dir();
    }
    b.restart();
    b.await_ready(READY).await;
    until_handled(&[&a, &b, &c], 2700).await;

    c.terminate();
    assert!(
        c.exited(Duration::from_secs(60)).await.success(),
        "{}",
        c.logs()
    );
    let expected_file = producer.expected_file();
    let expected = producer.finished(Duration::from_secs(90)).await;
    await_all_handled(&[&a, &b, &c], &expected).await;
    let milestones = colo::process::samples::purchases::milestone_topic(&cluster);
    let verified =
        verify_with_milestones(&expected_file, &a.grpc, broker.bootstrap(), &milestones).await;
    if let Err(mismatch) = verified {
        panic!(
            "totals or milestones differ from the purchases produced: {mismatch}\n{}",
            kafka_logs(&[&a, &b, &c])
        );
    }
    let mut lifecycle = Lifecycle::read(&[&a, &b, &c], "user");
    lifecycle.killed(&b.grpc, &killed_at);
    let overlaps = lifecycle.overlaps();
    assert!(overlaps.is_empty(), "{overlaps:#?}");
    if empty_data_dir {
        await_hosting(&b).await;
        assert!(
            series(&b, "colo_state_restores_total{", "from=\"changelog\"").await >= 1.0,
            "b, on an empty data directory, restored its shards from the changelog alone"
        );
    }
    if standbys > 0 {
        let mut from_standby = 0.0;
        for node in [&a, &b] {
            from_standby += series(node, "colo_state_restores_total{", "from=\"standby\"").await;
        }
        assert!(
            from_standby >= 1.0,
            "the shards b had before its kill, and c's at its stop, started from standby copies\n{}",
            kafka_logs(&[&a, &b, &c])
        );
        assert!(
            series(&a, "colo_state_standby_records_total{", "").await > 0.0,
            "a's standbys read the changelog"
        );
        assert!(
            series(&a, "colo_state_standby_bytes_total{", "").await > 0.0,
            "a's standbys count the bytes they read"
        );
    }
}

/// The issue's totals test: every user's totals equal the ones produced,
/// exactly, and no user was live on two nodes at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn totals_are_exact_through_a_join_a_kill_9_and_restart_and_a_sigterm() {
    through_a_join_a_kill_and_a_stop("totals", false, 0).await;
}

/// The same with the killed node started again on an empty data directory:
/// the shards it gets restore from the changelog alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn totals_are_exact_when_the_killed_node_comes_back_without_its_data() {
    through_a_join_a_kill_and_a_stop("empty-dir", true, 0).await;
}

/// The same with standby shards on every node (`sharding.standbys`, one
/// less than the nodes): the shards of the killed node and of the stopped
/// one start on the others from their warm copies, and every total is
/// still exact.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn totals_are_exact_through_a_kill_9_with_standby_shards() {
    through_a_join_a_kill_and_a_stop("standbys", false, 2).await;
}

/// The changelog's records per partition and key (each entity's under
/// the key of the start that wrote it, and the epoch markers, each start's
/// under a key of its own).
fn changelog_keys(
    bootstrap: &str,
    topic: &str,
    partitions: i32,
) -> BTreeMap<(i32, Vec<u8>), usize> {
    let changelog =
        Changelog::new(bootstrap, &[], topic, Duration::from_secs(10)).expect("changelog");
    let mut keys = BTreeMap::new();
    for partition in 0..partitions {
        changelog
            .read(partition, None, i64::MAX, &mut |r| {
                *keys.entry((partition, r.key.to_vec())).or_default() += 1;
                ControlFlow::Continue(())
            })
            .expect("read the changelog");
    }
    keys
}

/// Once Kafka's log cleaner has compacted the changelog, a node on an
/// empty data directory restores from it the same totals. The cleaner
/// leaves each key's newest record in the segments it cleans and never
/// touches the active one; the broker rolls a segment only at the first
/// write a second after it began. So the node keeps running, and writing,
/// while the test waits for the cleaner: a trickle of purchases of other
/// users goes on meanwhile, and every partition's segments keep rolling
/// however late a loaded machine wrote the first users' states.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restore_after_compaction_gives_the_same_totals() {
    let broker = Broker::start_compacting("1s");
    let dir = tempfile::tempdir().expect("dir");
    let (topic, cluster) = unique("compacted");
    let sets = kafka_sets(broker.bootstrap(), &topic, &cluster);
    let mut a = start(None, &sets);
    a.await_ready(READY).await;
    // Ten users, many writes each: a flush every 100 ms while they come.
    let producer = Producer::start(dir.path(), broker.bootstrap(), &topic, 10, 1500, Some(300));
    let expected_file = producer.expected_file();
    let expected = producer.finished(Duration::from_secs(90)).await;
    await_all_handled(&[&a], &expected).await;
    verify(&expected_file, &a.grpc)
        .await
        .expect("totals exact on a");

    // A hundred other users, a few purchases a second, until the
    // changelog is compacted: enough to write to every partition.
    let trickle = Producer::start_for(
        "trickle-",
        dir.path(),
        broker.bootstrap(),
        &topic,
        100,
        1_000_000,
        Some(50),
    );
    let changelog = format!("{cluster}.user.changelog");
    wait::until(
        "the changelog is compacted",
        Duration::from_secs(120),
        || {
            let (bootstrap, topic) = (broker.bootstrap().to_string(), changelog.clone());
            let a = &a;
            async move {
                let written = series(a, "colo_state_written_entities_total{", "").await;
                let keys =
                    tokio::task::spawn_blocking(move || changelog_keys(&bootstrap, &topic, 12))
                        .await
                        .expect("reader");
                // Fewer records than states written (read after them):
                // compaction dropped some. Uncompacted, each write is a
                // record, and the markers more.
                let records = keys.values().sum::<usize>() as f64;
                records > 0.0 && records < written
            }
        },
    )
    .await;
    let trickled_file = trickle.expected_file();
    let trickled = trickle.stopped(Duration::from_secs(30)).await;
    await_all_handled(&[&a], &trickled).await;
    a.terminate();
    assert!(
        a.exited(Duration::from_secs(60)).await.success(),
        "{}",
        a.logs()
    );

    // The same node, as a new machine: its shards restore from the
    // compacted changelog alone.
    a.clear_data_dir();
    a.restart();
    a.await_ready(READY).await;
    verify(&expected_file, &a.grpc)
        .await
        .expect("totals exact after a restore from the compacted changelog");
    verify(&trickled_file, &a.grpc)
        .await
        .expect("the trickle's totals exact after the restore too");
}

/// The issue's failover test: a change a client had acknowledged just
/// before its entity's node was killed (kill -9) is there once the entity
/// runs on the other node, restored from the changelog.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ask_answered_just_before_its_node_is_killed_survives_the_failover() {
    let broker = Broker::start();
    let (topic, cluster) = unique("ask_before_kill");
    let sets = kafka_sets(broker.bootstrap(), &topic, &cluster);
    let a = start(None, &sets);
    a.await_ready(READY).await;
    let mut b = start(Some(&a.grpc), &sets);
    b.await_ready(READY).await;
    await_hosting(&a).await;
    await_hosting(&b).await;
    // A user whose shard is on b, asked through a (which survives).
    let purchase = |sequence: u64| {
        format!(
            r#"{{"Purchase":{{"product":"p","quantity":2,"price":150,"sequence":{sequence}}}}}"#
        )
    };
    let mut on_b = None;
    for n in 0..64 {
        let user = format!("failover-{n}");
        ask_user(&a, &user, &purchase(1), Duration::from_secs(10))
            .await
            .expect("the first purchase is answered");
        if entities_on(&b, "user")
            .await
            .expect("b answers")
            .contains(&user)
        {
            on_b = Some(user);
            break;
        }
    }
    let user = on_b.expect("some user of 64 lives on b");
    let answered = ask_user(&a, &user, &purchase(2), Duration::from_secs(10))
        .await
        .expect("the second purchase is answered");
    assert_eq!(answered["purchases"], 2, "{answered}");
    b.kill();
    // b's partitions go to a once the group notices; the user's state
    // comes back from the changelog.
    let after = wait::until_ok(Duration::from_secs(90), || async {
        ask_user(&a, &user, r#""UserStats""#, Duration::from_secs(5)).await
    })
    .await;
    assert_eq!(
        after["purchases"], 2,
        "both acknowledged purchases survive the kill: {after}"
    );
    assert_eq!(after["items"], 4, "{after}");
    assert!(
        entities_on(&a, "user")
            .await
            .expect("a answers")
            .contains(&user),
        "the user runs on a now"
    );
}
