//! Durable timers on Apache Kafka: a program of one's own (the colo
//! crate's `follow_ups` example) whose customers schedule a follow-up for
//! each visit record, three nodes electing their coordinator, records from
//! both partitioners real producers use (murmur2 from `colo produce`,
//! `consistent_random` from kcat), and the node hosting most shards killed
//! (kill -9) while the follow-ups wait, then started again. Every
//! follow-up comes, once.

use colo_tests::broker::Broker;
use colo_tests::http;
use colo_tests::process::{colo_binary, NodeProcess, Program};
use colo_tests::user_nodes::{group_client, unique, FIRST_SHARDS, READY};
use colo_tests::wait;
use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

const FOLLOW_UPS: Program = Program::Example("follow_ups");
const CUSTOMERS: usize = 30;
/// Each customer's visits: the follow-up each asks for, and when.
const VISITS: [(&str, u64); 4] = [
    ("call", 15_000),
    ("mail", 17_000),
    ("survey", 19_000),
    ("offer", 21_000),
];

/// The sum of a metric's series of the customer type on `node`.
async fn metric(node: &NodeProcess, name: &str) -> f64 {
    let (_, body) = http::get(&node.admin, "/metrics").await.expect("metrics");
    body.lines()
        .filter(|l| l.starts_with(name) && l.contains("entity_type=\"customer\""))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// `customer`'s report, asked through `node`.
async fn report(node: &NodeProcess, customer: &str) -> Result<serde_json::Value, String> {
    colo_tests::client::ask_json(
        node,
        "customer",
        customer,
        "\"Report\"",
        Duration::from_secs(10),
    )
    .await
}

/// `colo verify` until every customer answers `report` (a minute at most
/// per call, `colo_verify`'s own).
async fn verify(
    node: &NodeProcess,
    dir: &Path,
    name: &str,
    report: serde_json::Value,
) -> Result<String, String> {
    let expected: BTreeMap<String, serde_json::Value> = (0..CUSTOMERS)
        .map(|c| (format!("cust-{c}"), report.clone()))
        .collect();
    let file = dir.join(name);
    std::fs::write(&file, serde_json::to_string(&expected).expect("JSON")).expect("write");
    let file = file.display().to_string();
    colo_tests::process::colo_verify(&[
        "--addr",
        &node.grpc,
        "--ask",
        "Report",
        "--expected",
        &file,
    ])
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn follow_ups_come_once_through_a_kill_9_and_moves() {
    let broker = Broker::start();
    let dir = tempfile::tempdir().expect("dir");
    let (topic, cluster) = unique("follow-ups");
    let sets: Vec<String> = vec![
        format!(r#"kafka.bootstrap_servers="{}""#, broker.bootstrap()),
        format!(r#"kafka.cluster="{cluster}""#),
        format!(r#"kafka.topics.customer=["{topic}"]"#),
        "kafka.create_topics=true".to_string(),
        r#"kafka.commit_interval="200ms""#.to_string(),
        "sharding.number_of_shards=12".to_string(),
        r#"coordinator.address="""#.to_string(),
        format!("kafka.client={{{}}}", group_client().join(",")),
    ];
    let sets: Vec<&str> = sets.iter().map(String::as_str).collect();
    let first = NodeProcess::start_program(FOLLOW_UPS, None, &sets);
    first.await_ready(READY).await;
    let mut nodes = vec![first];
    for _ in 0..2 {
        nodes.push(NodeProcess::start_program(FOLLOW_UPS, None, &sets));
    }
    for node in &nodes {
        node.await_ready(READY).await;
    }
    wait::until("every node hosts shards", FIRST_SHARDS, || async {
        let mut all = true;
        for node in &nodes {
            all &= metric(node, "colo_region_hosted_shards{").await > 0.0;
        }
        all
    })
    .await;

    // Each customer's visits, half of them partitioned by murmur2 (colo
    // produce), half by consistent_random (kcat): most of those land in
    // another partition than their customer's shard.
    let mut murmur2 = String::new();
    let mut crc = String::new();
    for c in 0..CUSTOMERS {
        for (n, (name, after_ms)) in VISITS.iter().enumerate() {
            let line =
                format!("cust-{c}\t{{\"follow_up\": \"{name}\", \"after_ms\": {after_ms}}}\n");
            match n % 2 {
                0 => murmur2.push_str(&line),
                _ => crc.push_str(&line),
            }
        }
    }
    let (murmur2_file, crc_file) = (dir.path().join("murmur2.txt"), dir.path().join("crc.txt"));
    std::fs::write(&murmur2_file, murmur2).expect("write");
    std::fs::write(&crc_file, crc).expect("write");
    let produced = std::process::Command::new(colo_binary())
        .args([
            "produce",
            "--bootstrap-servers",
            broker.bootstrap(),
            "--topic",
            &topic,
            "--records",
        ])
        .arg(&murmur2_file)
        .output()
        .expect("run colo produce");
    assert!(
        produced.status.success(),
        "{}",
        String::from_utf8_lossy(&produced.stderr)
    );
    colo_tests::kafka::kcat_produce(broker.bootstrap(), &topic, &crc_file);

    // Every visit handled: each follow-up scheduled, due 15 to 21 s later.
    wait::until_ok(Duration::from_secs(60), || async {
        let mut behind = Vec::new();
        for c in 0..CUSTOMERS {
            let report = report(&nodes[0], &format!("cust-{c}")).await?;
            if report["scheduled"] != 4 {
                behind.push(format!("cust-{c}: {report}"));
            }
        }
        match behind.is_empty() {
            true => Ok(()),
            false => Err(format!("not every visit handled yet: {behind:?}")),
        }
    })
    .await;

    // The node hosting most shards dies with the follow-ups pending.
    let mut hosted = Vec::new();
    for node in &nodes {
        hosted.push(metric(node, "colo_region_hosted_shards{").await);
    }
    let victim = (0..nodes.len())
        .max_by(|&a, &b| hosted[a].total_cmp(&hosted[b]))
        .expect("three nodes");
    let pending = metric(&nodes[victim], "colo_timers_pending{").await;
    nodes[victim].kill();
    eprintln!(
        "killed node {victim}, which hosted {} shards of {hosted:?}, with {pending} follow-ups pending",
        hosted[victim]
    );
    assert!(pending > 0.0, "the killed node had follow-ups pending");
    let survivor = (victim + 1) % nodes.len();
    let done = serde_json::json!({"scheduled": 4, "followed_up": 4, "twice": 0});
    let after = verify(&nodes[survivor], dir.path(), "followed.json", done.clone()).await;
    assert!(
        after.as_ref().is_ok_and(|out| out.contains("30 of 30")),
        "every follow-up came once, the killed node's on the others: {after:?}\n{}",
        nodes.iter().map(NodeProcess::logs).collect::<String>()
    );

    // Back again: shards move to it, and nothing fires a second time.
    nodes[victim].restart();
    nodes[victim].await_ready(READY).await;
    wait::until("the restarted node hosts shards", FIRST_SHARDS, || async {
        metric(&nodes[victim], "colo_region_hosted_shards{").await > 0.0
    })
    .await;
    let moved = verify(&nodes[victim], dir.path(), "moved.json", done).await;
    assert!(
        moved.as_ref().is_ok_and(|out| out.contains("30 of 30")),
        "{moved:?}\n{}",
        nodes.iter().map(NodeProcess::logs).collect::<String>()
    );
}
