//! The coordinator's state on the cluster's coordinator topic
//! (`<cluster>.coordinator`), with `colo run` processes on the test broker:
//! the whole cluster killed and started again goes on from the state its
//! coordinator had, whichever node is elected to host it.

use colo_tests::broker::Broker;
use colo_tests::lifecycle::Lifecycle;
use colo_tests::process::NodeProcess;
use colo_tests::purchases::{at_least_once_in_order_problems, handled, verify, Producer};
use colo_tests::user_nodes::*;
use std::time::Duration;

/// How long an election may take: the broker holds a joiner 3 s, and
/// members that died may need the election timeout and a rejoin.
const ELECTED: Duration = Duration::from_secs(60);

/// The coordinator's "state read from its topic" log lines of `nodes`:
/// (epoch, events), by epoch.
fn state_reads(nodes: &[&NodeProcess]) -> Vec<(u64, u64)> {
    let mut reads: Vec<(u64, u64)> = nodes.iter().flat_map(|node| state_reads_of(node)).collect();
    reads.sort_unstable();
    reads
}

fn state_reads_of(node: &NodeProcess) -> Vec<(u64, u64)> {
    node.logs()
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|e| e["fields"]["message"] == "coordinator state read from its topic")
        .filter(|e| e["fields"]["entity_type"] == "user")
        .filter_map(|e| {
            let fields = &e["fields"];
            Some((fields["epoch"].as_u64()?, fields["events"].as_u64()?))
        })
        .collect()
}

/// Both nodes of a cluster that elects its coordinator killed with SIGKILL
/// while records flow, then started again: the coordinator (on whichever
/// node is elected) reads the shard homes it had from the topic (with a
/// higher epoch), every shard is hosted again, every purchase is handled at
/// least once and each user's in order, no user lives on two nodes at once,
/// and the durable totals count each purchase once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_whole_cluster_killed_and_started_again_goes_on_from_its_coordinators_state() {
    let broker = Broker::start();
    let dir = tempfile::tempdir().expect("dir");
    let (topic, cluster) = unique("coordinator-topic");
    let sets = elected_sets(broker.bootstrap(), &topic, &cluster);
    let mut a = start(None, &sets);
    let mut b = start(None, &sets);
    a.await_ready(ELECTED).await;
    b.await_ready(ELECTED).await;
    let producer = Producer::start(dir.path(), broker.bootstrap(), &topic, 40, 3000, Some(500));
    await_hosting(&a).await;
    await_hosting(&b).await;
    let first = state_reads(&[&a, &b]);
    // One read, or more if the broker moved the election while the nodes
    // started; the first found an empty topic.
    assert!(!first.is_empty(), "{first:?}");
    assert_eq!(first[0].1, 0, "a new cluster's topic is empty: {first:?}");

    b.kill();
    a.kill();
    let killed_at = humantime::format_rfc3339_micros(std::time::SystemTime::now()).to_string();
    a.restart();
    b.restart();
    a.await_ready(ELECTED).await;
    b.await_ready(ELECTED).await;
    let reads = state_reads(&[&a, &b]);
    assert!(reads.len() > first.len(), "{reads:?}");
    let (epoch, events) = reads[reads.len() - 1];
    assert!(
        epoch > first[first.len() - 1].0,
        "the new epoch outranks the old: {reads:?}"
    );
    assert!(events > 0, "the shard homes were read back: {reads:?}");
    // The same, as metrics of the node elected: the epoch, the takeover,
    // and where it runs.
    let hosts = hosting_coordinator(&[&a, &b]).await;
    assert_eq!(hosts.len(), 1, "{hosts:?}");
    let host = if hosts[0] == a.grpc { &a } else { &b };
    assert_eq!(metric(host, "colo_coordinator_epoch{").await, epoch as f64);
    assert_eq!(metric(host, "colo_coordinator_takeovers_total{").await, 1.0);
    assert!(metric(host, "colo_coordinator_recovery_records_total{").await >= events as f64);

    let expected_file = producer.expected_file();
    let expected = producer.finished(Duration::from_secs(60)).await;
    await_all_handled(&[&a, &b], &expected).await;
    await_hosting(&a).await;
    await_hosting(&b).await;
    let problems = at_least_once_in_order_problems(&handled(&[&a, &b]), &expected);
    assert!(problems.is_empty(), "{problems:#?}");
    let mut lifecycle = Lifecycle::read(&[&a, &b], "user");
    lifecycle.killed(&a.grpc, &killed_at);
    lifecycle.killed(&b.grpc, &killed_at);
    let overlaps = lifecycle.overlaps();
    assert!(overlaps.is_empty(), "{overlaps:#?}");
    verify(&expected_file, &a.grpc).await.expect("totals exact");
}

fn remove_internal_data(bootstrap: &str, cluster: &str, more: &[&str]) -> (bool, String) {
    let out = std::process::Command::new(colo_tests::process::colo_binary())
        .args(["remove-internal-data", "--bootstrap-servers", bootstrap])
        .args(["--cluster", cluster])
        .args(more)
        .output()
        .expect("run colo remove-internal-data");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

fn topics(bootstrap: &str, cluster: &str) -> Vec<String> {
    let prefix = format!("{cluster}.");
    colo_connectors::topics_named(
        bootstrap,
        &[],
        &|name: &str| name.starts_with(&prefix),
        Duration::from_secs(10),
    )
    .expect("metadata")
}

/// `colo remove-internal-data` refuses while a node of the cluster runs,
/// lists what it would delete with `--dry-run`, and once the cluster is
/// stopped deletes its coordinator topic and (`--state`) its changelogs,
/// and nothing of the user's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn remove_internal_data_refuses_while_a_node_runs_and_deletes_after() {
    let broker = Broker::start();
    let (topic, cluster) = unique("remove-internal");
    let sets = kafka_sets(broker.bootstrap(), &topic, &cluster);
    let mut a = start(None, &sets);
    a.await_ready(READY).await;
    // Records handled and committed: the test broker lists a group only
    // once it has committed offsets (DEVELOPERS.md).
    let dir = tempfile::tempdir().expect("dir");
    let producer = Producer::start(dir.path(), broker.bootstrap(), &topic, 10, 100, None);
    let expected = producer.finished(Duration::from_secs(60)).await;
    await_all_handled(&[&a], &expected).await;
    colo_tests::wait::until("a commit", READY, || async {
        metric(&a, "colo_kafka_commits_total{").await >= 1.0
    })
    .await;
    let coordinator = format!("{cluster}.coordinator");
    let changelog = format!("{cluster}.user.changelog");
    let before = topics(broker.bootstrap(), &cluster);
    for wanted in [&coordinator, &changelog] {
        assert!(before.contains(wanted), "{before:?}");
    }

    let (ok, said) = remove_internal_data(broker.bootstrap(), &cluster, &["--state"]);
    assert!(!ok, "{said}");
    assert!(
        said.contains("refused") && said.contains(&format!("{cluster}.user")),
        "{said}"
    );
    let (ok, said) = remove_internal_data(broker.bootstrap(), &cluster, &["--state", "--dry-run"]);
    assert!(ok, "{said}");
    assert!(
        said.contains(&format!("would delete: {coordinator}, {changelog}")),
        "{said}"
    );
    assert!(said.contains("would refuse now"), "{said}");
    // README's line, this test's broker and cluster in place of its own.
    let readme =
        std::fs::read_to_string(colo_tests::deploy::repo().join("README.md")).expect("README");
    let line = readme
        .lines()
        .find(|l| l.trim_start().starts_with("$colo remove-internal-data"))
        .expect("README shows remove-internal-data");
    let args: Vec<String> = line
        .replace("127.0.0.1:9092", broker.bootstrap())
        .replace("--cluster colo", &format!("--cluster {cluster}"))
        .split_whitespace()
        .skip(1)
        .map(str::to_string)
        .collect();
    let out = std::process::Command::new(colo_tests::process::colo_binary())
        .args(&args)
        .output()
        .expect("README's command");
    let printed = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{printed}");
    assert!(
        printed.contains(&format!("would delete: {coordinator}, {changelog}")),
        "{printed}"
    );
    assert_eq!(topics(broker.bootstrap(), &cluster), before);

    a.terminate();
    assert!(a.exited(Duration::from_secs(60)).await.success());
    let (ok, said) = remove_internal_data(broker.bootstrap(), &cluster, &["--state"]);
    assert!(ok, "{said}");
    assert!(
        said.contains(&format!("deleted: {coordinator}, {changelog}")),
        "{said}"
    );
    let after = topics(broker.bootstrap(), &cluster);
    assert!(
        !after.contains(&coordinator) && !after.contains(&changelog),
        "{after:?}"
    );
    // The user's data stays: the source topic and the dead-letter topic.
    assert!(after.contains(&topic), "{after:?}");
    assert!(after.contains(&format!("{cluster}.user.dlq")), "{after:?}");
}
