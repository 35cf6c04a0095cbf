//! Records from producers that partition otherwise than Kafka's Java
//! client (murmur2 on the key): librdkafka's default `consistent_random`
//! (CRC32 of the key: rdkafka, confluent-kafka, kcat), and `random`. Such a
//! record sits in another partition than its key's shard, and is handled
//! on its shard's node, one hop away, exactly once like every other.
//!
//! Three `colo run` nodes of the durable sample on the test broker, while
//! records of all three kinds flow: graceful changes (a fourth node joins,
//! one stops on SIGTERM and starts again), and the elected coordinator's
//! node killed (kill -9) and started again. What counts is every user's
//! totals, asked of the cluster: each purchase counted once, whichever
//! partition it was in. A last test produces with a client no one here
//! wrote, confluent-kafka for Python, with its defaults.

mod common;

use colo::process::samples::purchases::{encode_event, Generator, Totals};
use colo_tests::broker::Broker;
use colo_tests::kafka::distinct_dead_letters;
use colo_tests::process::NodeProcess;
use colo_tests::purchases::{handled, verify, Producer};
use colo_tests::user_nodes::*;
use colo_tests::wait;
use common::{milestones, read_totals, OtherPartitioner};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// How long the misplaced records may take to settle after the last
/// change: each is a hop, and a moved shard restores first.
const SETTLED: Duration = Duration::from_secs(90);

/// Every user's totals, asked through `node`: what `colo verify` compares,
/// for users whose events may have been handled in any order (a `random`
/// partitioner spreads a user's events over partitions): the purchases,
/// items and amount only.
async fn unordered_totals_differ(node: &NodeProcess, expected: &Totals) -> Vec<String> {
    let mut client = node.client().await;
    let mut problems = Vec::new();
    for (user, want) in &expected.users {
        let request = colo_tests::client::ask_request_to(
            "user",
            user,
            r#""UserStats""#,
            Duration::from_secs(20),
        );
        let got = match client.ask(request).await {
            Ok(reply) => reply.into_inner().reply.map(|p| p.data),
            Err(status) => {
                problems.push(format!("{user}: {status}"));
                continue;
            }
        };
        let got: serde_json::Value =
            serde_json::from_slice(&got.unwrap_or_default()).unwrap_or_default();
        let field = |name: &str| got[name].as_i64().unwrap_or(-1);
        let want = (want.purchases as i64, want.items as i64, want.amount_spent);
        let got = (field("purchases"), field("items"), field("amount_spent"));
        if got != want {
            problems.push(format!(
                "{user}: (purchases, items, amount) {got:?}, produced {want:?}"
            ));
        }
    }
    problems
}

/// The consumer lag of every partition the nodes consume, summed.
async fn lag(nodes: &[&NodeProcess]) -> f64 {
    let mut sum = 0.0;
    for node in nodes {
        sum += metric(node, "colo_kafka_consumer_lag{").await;
    }
    sum
}

/// How often each shard of the user entity type started, on any node,
/// from the nodes' logs (every start across their restarts), and how many
/// times a node began to host the coordinators.
fn starts(nodes: &[&NodeProcess]) -> (BTreeMap<u32, usize>, usize) {
    let mut shards = BTreeMap::new();
    let mut elections = 0;
    for node in nodes {
        for line in node.logs().lines() {
            let Ok(event) = serde_json::from_str::<serde_json::Value>(line) else {
                continue;
            };
            let fields = &event["fields"];
            if fields["message"] == "hosting the coordinators" {
                elections += 1;
            }
            if fields["message"] != "shard started" || fields["entity_type"] != "user" {
                continue;
            }
            if let Some(shard) = fields["shard"].as_str().and_then(|s| s.parse().ok()) {
                *shards.entry(shard).or_default() += 1;
            }
        }
    }
    (shards, elections)
}

/// Each user's last sequence number, as `Producer::finished` gives them.
fn last_sequences(totals: &Totals) -> BTreeMap<String, u64> {
    totals
        .users
        .iter()
        .map(|(user, stats)| (user.clone(), stats.last_sequence))
        .collect()
}

/// Every event of every user in `totals` handled at least once, in any
/// order, as the nodes logged them.
fn unhandled_events(nodes: &[&NodeProcess], totals: &Totals) -> Vec<String> {
    let handled = handled(nodes);
    let mut missing = Vec::new();
    for (user, stats) in &totals.users {
        let seen: BTreeSet<u64> = handled
            .get(user)
            .map(|list| list.iter().map(|h| h.sequence).collect())
            .unwrap_or_default();
        let absent: Vec<u64> = (1..=stats.last_sequence)
            .filter(|s| !seen.contains(s))
            .collect();
        if !absent.is_empty() {
            missing.push(format!("{user}: events {absent:?} never handled"));
        }
    }
    missing
}

/// What happens to the cluster while the records flow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Changes {
    /// A fourth node joins, one node stops on SIGTERM, and starts again.
    Graceful,
    /// The elected coordinator's node is killed (kill -9) and started
    /// again.
    CoordinatorKilled,
}

/// Three nodes electing their coordinator; murmur2-partitioned purchases
/// (`colo produce`) with CRC32-partitioned ones, randomly partitioned ones
/// and undecodable ones mixed in, while `changes` happen. Then: every
/// record handled, each murmur2 and CRC32 user's totals exact, each random
/// user's counts exact (each of its purchases counted once, in whatever
/// order), every undecodable record in the dead-letter topic, no lag, and
/// no node starting shards more often than the changes explain.
async fn other_partitioners_through(test: &str, changes: Changes) {
    let broker = Broker::start();
    let dir = tempfile::tempdir().expect("dir");
    let (topic, cluster) = unique(test);
    let sets = elected_sets(broker.bootstrap(), &topic, &cluster);
    let mut nodes: Vec<NodeProcess> = (0..3).map(|_| start(None, &sets)).collect();
    for node in &nodes {
        node.await_ready(READY).await;
    }
    let bootstrap = broker.bootstrap();
    let murmur2 = Producer::start(dir.path(), bootstrap, &topic, 60, 3600, Some(200));
    let crc = OtherPartitioner::start(
        dir.path(),
        bootstrap,
        &topic,
        "consistent_random",
        "crc-user-",
        40,
        600,
        36,
        Some(30),
    );
    let random = OtherPartitioner::start(
        dir.path(),
        bootstrap,
        &topic,
        "random",
        "rnd-user-",
        20,
        360,
        20,
        None,
    );
    for node in &nodes {
        await_hosting(node).await;
    }
    let refs: Vec<&NodeProcess> = nodes.iter().collect();
    wait::until("records handled before the changes", SETTLED, || {
        std::future::ready(handled(&refs).values().map(Vec::len).sum::<usize>() >= 600)
    })
    .await;
    // The changes the shard starts are held against: each moves at most
    // every shard once (a node's restart: its shards leave, others come).
    let moves = match changes {
        Changes::Graceful => {
            let joiner = start(None, &sets);
            joiner.await_ready(READY).await;
            await_hosting(&joiner).await;
            nodes.push(joiner);
            nodes[1].terminate();
            let stopped = nodes[1].exited(Duration::from_secs(60)).await;
            assert!(stopped.success(), "{}", nodes[1].logs());
            nodes[1].restart();
            nodes[1].await_ready(READY).await;
            await_hosting(&nodes[1]).await;
            3
        }
        Changes::CoordinatorKilled => {
            let host = wait::until_ok(READY, || async {
                let hosts = hosting_coordinator(&nodes.iter().collect::<Vec<_>>()).await;
                match hosts.as_slice() {
                    [one] => Ok(one.clone()),
                    other => Err(format!("coordinator hosts: {other:?}")),
                }
            })
            .await;
            let victim = nodes.iter().position(|n| n.grpc == host).expect("host");
            nodes[victim].kill();
            nodes[victim].restart();
            nodes[victim].await_ready(READY).await;
            await_hosting(&nodes[victim]).await;
            2
        }
    };
    let murmur2_file = murmur2.expected_file();
    let murmur2 = murmur2.finished(Duration::from_secs(90)).await;
    let crc_file = crc.expected_file();
    let crc = crc.finished().await;
    let random = random.finished().await;
    let refs: Vec<&NodeProcess> = nodes.iter().collect();
    await_all_handled(&refs, &murmur2).await;
    await_all_handled(&refs, &last_sequences(&crc)).await;
    let settled = wait::held_within(SETTLED, || {
        std::future::ready(unhandled_events(&refs, &random).is_empty())
    })
    .await;
    assert!(
        settled,
        "{:?}
{}",
        unhandled_events(&refs, &random),
        kafka_logs(&refs)
    );

    for (expected, what) in [(&murmur2_file, "murmur2"), (&crc_file, "consistent_random")] {
        if let Err(mismatch) = verify(expected, &nodes[0].grpc).await {
            panic!(
                "{what} users' totals differ from what was produced: {mismatch}
{}",
                kafka_logs(&refs)
            );
        }
    }
    let differ = unordered_totals_differ(&nodes[0], &random).await;
    assert!(differ.is_empty(), "random users' totals: {differ:#?}");
    // Each user of any partitioner who crossed the milestone emitted
    // exactly one, as a reader with read_committed sees them.
    let mut everyone = read_totals(&murmur2_file);
    everyone.users.extend(crc.users.clone());
    everyone.users.extend(random.users.clone());
    if let Err(checked) = milestones(bootstrap, &cluster, &everyone, Duration::from_secs(60)).await
    {
        panic!(
            "milestones not emitted exactly once: {checked:#?}\n{}",
            kafka_logs(&refs)
        );
    }

    let bad = usize::try_from(crc.records / 30).expect("count");
    let dlq = format!("{cluster}.user.dlq");
    let letters = tokio::task::spawn_blocking({
        let bootstrap = bootstrap.to_string();
        let group = format!("{cluster}.dlq-reader");
        move || distinct_dead_letters(&bootstrap, &dlq, &group, bad)
    })
    .await
    .expect("dead letters");
    assert_eq!(letters, bad, "undecodable records dead-lettered");

    let caught_up = wait::held_within(SETTLED, || async { lag(&refs).await == 0.0 }).await;
    assert!(caught_up, "lag {} at the end", lag(&refs).await);

    // Each change, and each election of a coordinator after the first,
    // starts a shard at most twice: regions that lose their coordinator
    // for the fence timeout stop their shards, which start again once a
    // new one answers (on the test broker one kill may take several
    // elections), and the test broker may hand a partition to a joiner
    // before its owner revoked it, and back (DEVELOPERS.md); a misplaced
    // record whose shard has no home yet starts it where it waits, to
    // move once its partition is assigned. Records that never settle used
    // to restart shards by the hundred.
    let (starts, elections) = starts(&refs);
    let explained = 2 * (1 + moves + elections.saturating_sub(1));
    let over: Vec<_> = starts.iter().filter(|(_, n)| **n > explained).collect();
    assert!(
        over.is_empty(),
        "shards started more often than {moves} changes and {elections} elections explain ({explained} times): {over:?}"
    );
    // Records given up are reported per partition, not one line each.
    let per_record: usize = refs
        .iter()
        .map(|node| {
            node.logs()
                .lines()
                .filter(|l| l.contains("\"level\":\"WARN\"") && l.contains("record not handled"))
                .count()
        })
        .sum();
    assert_eq!(per_record, 0, "records given up were logged one by one");
    let mismatches: f64 = {
        let mut sum = 0.0;
        for node in &refs {
            sum += metric(node, "colo_kafka_partitioner_mismatches_total{").await;
        }
        sum
    };
    assert!(mismatches > 0.0, "the misplaced records were counted");
    eprintln!(
        "{test}: {} murmur2, {} consistent_random, {} random records; starts per shard {starts:?} with {elections} elections; mismatches counted {mismatches}",
        murmur2.values().sum::<u64>(),
        crc.records,
        random.records
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_of_other_partitioners_are_each_handled_once_through_graceful_changes() {
    other_partitioners_through("partitioners-graceful", Changes::Graceful).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_of_other_partitioners_are_each_handled_once_when_the_coordinators_node_is_killed()
{
    other_partitioners_through("partitioners-kill", Changes::CoordinatorKilled).await;
}

/// The Python interpreter with confluent-kafka installed, which
/// `./scripts/test.sh` sets up in `target/python`.
fn python() -> PathBuf {
    if let Some(python) = std::env::var_os("COLO_TEST_PYTHON") {
        return PathBuf::from(python);
    }
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/python/bin/python3")
}

/// A producer no one here wrote, configured with nothing but the brokers:
/// confluent-kafka for Python, whose default partitioner is librdkafka's
/// `consistent_random`. Into a running cluster of three: every record
/// handled, every user's totals exact.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_from_confluent_kafka_for_python_with_its_defaults_are_all_handled() {
    let python = python();
    assert!(
        python.exists(),
        "{} is missing: ./scripts/test.sh installs confluent-kafka there (or set COLO_TEST_PYTHON)",
        python.display()
    );
    let broker = Broker::start();
    let dir = tempfile::tempdir().expect("dir");
    let (topic, cluster) = unique("python-client");
    let sets = kafka_sets(broker.bootstrap(), &topic, &cluster);
    let a = start(None, &sets);
    a.await_ready(READY).await;
    let b = start(Some(&a.grpc), &sets);
    let c = start(Some(&a.grpc), &sets);
    for node in [&a, &b, &c] {
        node.await_ready(READY).await;
        await_hosting(node).await;
    }

    let mut generator = Generator::new("py-user-", 80, 5);
    let mut lines = String::new();
    for _ in 0..800 {
        let (user, purchase) = generator.next_event();
        let payload: String = encode_event(&user, &purchase)
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        lines.push_str(&format!("{user}\t{payload}\n"));
    }
    let totals = generator.totals().clone();
    let expected = dir.path().join("python-expected.json");
    std::fs::write(&expected, serde_json::to_string(&totals).expect("JSON")).expect("write");

    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("python/produce_with_defaults.py");
    let bootstrap = broker.bootstrap().to_string();
    let produce_topic = topic.clone();
    let output = tokio::task::spawn_blocking(move || {
        use std::io::Write as _;
        let mut child = std::process::Command::new(python)
            .arg(script)
            .args([&bootstrap, &produce_topic])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("start the Python producer");
        child
            .stdin
            .take()
            .expect("stdin")
            .write_all(lines.as_bytes())
            .expect("records written to the producer");
        child.wait_with_output().expect("Python producer")
    })
    .await
    .expect("producer thread");
    assert!(
        output.status.success(),
        "the Python producer failed: {}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );

    let nodes = [&a, &b, &c];
    await_all_handled(&nodes, &last_sequences(&totals)).await;
    if let Err(mismatch) = verify(&expected, &a.grpc).await {
        panic!("totals differ: {mismatch}\n{}", kafka_logs(&nodes));
    }
    let mut mismatches = 0.0;
    for node in nodes {
        mismatches += metric(node, "colo_kafka_partitioner_mismatches_total{").await;
    }
    // With 12 partitions, CRC32 and murmur2 agree on about one key in 12.
    assert!(
        mismatches >= 400.0,
        "the client's records were mostly in other partitions than their keys': {mismatches} counted"
    );
}
