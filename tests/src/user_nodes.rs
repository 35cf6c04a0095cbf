//! Nodes of the sample's `user` entity type driven by Kafka, as the broker
//! tests start and watch them: unique topics and clusters, the nodes'
//! `--set`s, their metrics and logs, waiting for their shards and for
//! every purchase to be handled, and asking a user's totals.

use crate::lifecycle::JSON_LOGS;
use crate::process::NodeProcess;
use crate::purchases::{all_handled, at_least_once_in_order_problems, handled};
use crate::{http, wait};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

pub const READY: Duration = Duration::from_secs(30);
pub const ALL_HANDLED: Duration = Duration::from_secs(90);

/// A topic and a cluster name no other test uses.
pub fn unique(test: &str) -> (String, String) {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let id = format!("{test}-{}-{n}", std::process::id());
    (format!("{id}.user-events"), id)
}

/// The environment variable that runs the Kafka tests' nodes with another
/// group protocol: `consumer` (KIP-848) or `classic` (the default). The
/// test command runs the tests of rebalances, hand-offs, durable state and
/// the election under both.
pub const GROUP_PROTOCOL: &str = "COLO_TEST_GROUP_PROTOCOL";

/// Whether the nodes use the consumer group protocol (KIP-848).
pub fn consumer_protocol() -> bool {
    match std::env::var(GROUP_PROTOCOL).as_deref() {
        Err(_) | Ok("" | "classic") => false,
        Ok("consumer") => true,
        Ok(other) => panic!("{GROUP_PROTOCOL} is \"classic\" or \"consumer\", not {other:?}"),
    }
}

/// The group's entries of a node's `[kafka.client]`, as TOML: under the
/// classic protocol a member found dead after 6 s, as the tests want it;
/// under the consumer protocol the broker sets those timeouts (the test
/// broker sets them as short, `broker.rs`).
pub fn group_client() -> Vec<String> {
    if consumer_protocol() {
        vec![r#""group.protocol"="consumer""#.to_string()]
    } else {
        vec![
            r#""session.timeout.ms"="6000""#.to_string(),
            r#""heartbeat.interval.ms"="500""#.to_string(),
        ]
    }
}

/// Asserts that the broker runs the consumer group `group` (the user
/// entity type's `<cluster>.user`, the election's `<cluster>.coordinator`)
/// under the protocol the tests ask for ([`GROUP_PROTOCOL`]).
pub fn assert_group_protocol(broker: &crate::broker::Broker, group: &str) {
    let wanted = if consumer_protocol() {
        "Consumer"
    } else {
        "Classic"
    };
    assert_eq!(
        broker.group_type(group).as_deref(),
        Some(wanted),
        "the broker's type of the group {group}"
    );
}

/// A node of the user entity type consuming `topic` (created by the first
/// node, with one partition per shard), logging each handled purchase.
pub fn kafka_sets(bootstrap: &str, topic: &str, cluster: &str) -> Vec<String> {
    let mut sets = vec![
        r#"node.entity_types=["user"]"#.to_string(),
        format!(r#"kafka.bootstrap_servers="{bootstrap}""#),
        format!(r#"kafka.cluster="{cluster}""#),
        format!(r#"kafka.topics.user=["{topic}"]"#),
        "kafka.create_topics=true".to_string(),
        r#"kafka.commit_interval="200ms""#.to_string(),
        format!("kafka.client={{{}}}", group_client().join(",")),
    ];
    sets.extend(JSON_LOGS.iter().map(|s| s.to_string()));
    sets
}

/// `sets` with the node's `[kafka.client]` made of the group's entries
/// ([`group_client`]) and `client`, each value there a TOML value.
pub fn with_client(mut sets: Vec<String>, client: &[(String, String)]) -> Vec<String> {
    sets.retain(|s| !s.starts_with("kafka.client="));
    let mut table = group_client();
    table.extend(client.iter().map(|(key, value)| format!("{key:?}={value}")));
    sets.push(format!("kafka.client={{{}}}", table.join(",")));
    sets
}

/// The `--set`s of a node whose coordinator is elected through Kafka (no
/// coordinator address), with `kafka_sets`' and colo's election timings:
/// Kafka moves a dead node's partition within the session timeout, before
/// a rejoin would.
pub fn elected_sets(bootstrap: &str, topic: &str, cluster: &str) -> Vec<String> {
    let mut sets = kafka_sets(bootstrap, topic, cluster);
    sets.push(r#"coordinator.address="""#.to_string());
    sets
}

/// Which of `nodes` host the user entity type's coordinator now.
pub async fn hosting_coordinator(nodes: &[&NodeProcess]) -> Vec<String> {
    let mut hosts = Vec::new();
    for node in nodes {
        if metric(node, "colo_coordinator_hosted{").await == 1.0 {
            hosts.push(node.grpc.clone());
        }
    }
    hosts
}

pub fn start(coordinator: Option<&str>, sets: &[String]) -> NodeProcess {
    let sets: Vec<&str> = sets.iter().map(String::as_str).collect();
    NodeProcess::start(coordinator, &sets)
}

/// The sum of a metric's series of the user entity type on `node`.
pub async fn metric(node: &NodeProcess, name: &str) -> f64 {
    let (_, body) = http::get(&node.admin, "/metrics").await.expect("metrics");
    body.lines()
        .filter(|l| l.starts_with(name) && l.contains("entity_type=\"user\""))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// The nodes' Kafka log lines (the source and the ingest), for a failure.
pub fn kafka_logs(nodes: &[&NodeProcess]) -> String {
    let mut out = String::new();
    for node in nodes {
        out.push_str(&format!("--- {} ---\n", node.grpc));
        for line in node.logs().lines() {
            if line.contains("colo_connectors") || line.contains("colo::kafka") {
                out.push_str(line);
                out.push('\n');
            }
        }
    }
    out
}

/// How long a node may take to host its first shards: a joining node's
/// shards wait until their previous owner released them, which may take
/// a rebalance round or two on two shared cores.
pub const FIRST_SHARDS: Duration = Duration::from_secs(90);

/// Waits until `node` hosts shards of the user entity type: its consumer
/// was assigned partitions and their shards started there.
pub async fn await_hosting(node: &NodeProcess) {
    wait::until(
        &format!("{} hosts shards", node.grpc),
        FIRST_SHARDS,
        || async { metric(node, "colo_region_hosted_shards{").await > 0.0 },
    )
    .await;
}

/// Two nodes started with `sets`, the second joining the first, once both
/// are ready and host shards.
pub async fn two_hosting_nodes(sets: &[String]) -> (NodeProcess, NodeProcess) {
    let a = start(None, sets);
    a.await_ready(READY).await;
    let b = start(Some(&a.grpc), sets);
    b.await_ready(READY).await;
    await_hosting(&a).await;
    await_hosting(&b).await;
    (a, b)
}

/// Purchases handled so far across `nodes` (a purchase handled twice, its
/// first effect never made durable, counts twice).
pub fn handled_so_far(nodes: &[&NodeProcess]) -> usize {
    handled(nodes).values().map(Vec::len).sum()
}

/// Waits until `nodes` handled `count` purchases between them.
pub async fn until_handled(nodes: &[&NodeProcess], count: usize) {
    wait::until(&format!("{count} purchases handled"), ALL_HANDLED, || {
        std::future::ready(handled_so_far(nodes) >= count)
    })
    .await;
}

pub async fn await_all_handled(nodes: &[&NodeProcess], expected: &BTreeMap<String, u64>) {
    let done = wait::held_within(ALL_HANDLED, || {
        std::future::ready(all_handled(&handled(nodes), expected))
    })
    .await;
    if !done {
        let problems = at_least_once_in_order_problems(&handled(nodes), expected);
        // The nodes print their logs as they drop.
        eprintln!("{problems:#?}");
        panic!(
            "not every purchase was handled within {ALL_HANDLED:?}: {} users short, the first: {}",
            problems.len(),
            problems.first().map_or("none listed", String::as_str)
        );
    }
}

/// Asks `user` on `node` (JSON), answered within `timeout`: the totals.
pub async fn ask_user(
    node: &NodeProcess,
    user: &str,
    message: &str,
    timeout: Duration,
) -> Result<serde_json::Value, String> {
    crate::client::ask_json(node, "user", user, message, timeout).await
}
