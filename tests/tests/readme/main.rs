//! README's shell blocks run as a new user runs them: the three-node
//! cluster and the client commands, exactly as written, from the project's
//! root. Each node keeps its data in its default directory,
//! `colo-data/<address>` under the root (ignored by git); the test removes
//! the directories of the addresses its blocks use before and after, so
//! that an earlier run's coordinator marker or entity state does not change
//! what this one sees.

mod blocks;

use blocks::*;
use colo_tests::{http, wait};
use std::process::Command;
use std::time::Duration;

#[tokio::test]
async fn the_three_node_cluster_and_the_client_commands_run_as_shown() {
    let root = root();
    let readme = std::fs::read_to_string(root.join("README.md")).expect("README.md");
    let nodes = block_after(&readme, "Three nodes on one machine:");
    let client = block_after(&readme, "Then, with the built-in counter");
    assert!(
        nodes.iter().filter(|l| l.contains(" run ")).count() == 3,
        "{nodes:?}"
    );
    let data = tempfile::tempdir().expect("a temporary directory");
    let (status, printed, started) = start_block(&root, &nodes, data.path());
    let logs = || std::fs::read_to_string(data.path().join("block.err")).unwrap_or_default();
    assert!(status.success(), "{printed}\n{}", logs());
    assert_eq!(started.1.len(), 3, "{printed}");
    await_ready(
        &["127.0.0.1:9001", "127.0.0.1:9002", "127.0.0.1:9003"],
        &logs,
    )
    .await;
    // The client commands, in a shell of their own that knows `$colo`.
    let stdout = run_client_block(&root, &nodes, &client, logs);
    // The ask answers 5, wherever alice lives; shards and stats answer;
    // the metric is there.
    assert!(
        stdout.contains("alice (shard") && stdout.contains("replied 5"),
        "{stdout}"
    );
    assert!(stdout.contains("region 127.0.0.1:7001"), "{stdout}");
    assert!(stdout.contains("127.0.0.1:7003"), "{stdout}");
    assert!(stdout.contains("colo_region_hosted_shards"), "{stdout}");
    // A keyed tell told twice through two nodes: applied once.
    let keyed = block_after(&readme, "A tell may carry an idempotency key");
    let stdout = run_client_block(&root, &nodes, &keyed, logs);
    assert!(stdout.contains("told counter/carol (shard"), "{stdout}");
    assert!(
        stdout.contains("had applied a tell with this idempotency key already"),
        "{stdout}"
    );
    assert!(
        stdout.contains("counter/carol (shard") && stdout.contains("replied 7"),
        "{stdout}"
    );
    // The cluster map's JSON, as "The cluster map" shows it: the whole
    // cluster's shards, alice's among them.
    let map = block_after(&readme, "The page polls `GET /api/cluster`");
    let run = Command::new("bash")
        .arg("-c")
        .arg(format!("set -euo pipefail\n{}", map.join("\n")))
        .current_dir(&root)
        .output()
        .expect("run bash");
    let map: serde_json::Value = serde_json::from_slice(&run.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&run.stdout)));
    assert_eq!(map["node"], "127.0.0.1:7001", "{map}");
    let counter = map["entity_types"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|t| t["name"] == "counter")
        .unwrap_or_else(|| panic!("no counter in {map}"));
    let nodes = counter["nodes"].as_array().expect("nodes");
    assert_eq!(nodes.len(), 3, "{map}");
    let entities: u64 = nodes.iter().filter_map(|n| n["entities"].as_u64()).sum();
    assert!(entities >= 1, "alice is live somewhere: {map}");
    started.stop_on_sigterm(logs).await;
}

/// README's roles: two nodes, the counter's shards on the one with the
/// role, asked through the other.
#[tokio::test]
async fn the_roles_commands_run_as_shown() {
    let root = root();
    let readme = std::fs::read_to_string(root.join("README.md")).expect("README.md");
    let nodes = block_after(&readme, "Two nodes, the counter's shards on the");
    let client = block_after(&readme, "The front node answers for the counter");
    let data = tempfile::tempdir().expect("a temporary directory");
    let (status, printed, started) = start_block(&root, &nodes, data.path());
    let logs = || std::fs::read_to_string(data.path().join("block.err")).unwrap_or_default();
    assert!(status.success(), "{printed}\n{}", logs());
    assert_eq!(started.1.len(), 2, "{printed}");
    await_ready(&["127.0.0.1:9021", "127.0.0.1:9022"], &logs).await;
    let stdout = run_client_block(&root, &nodes, &client, logs);
    assert!(stdout.contains("counter/bob (shard"), "{stdout}");
    assert!(stdout.contains("replied 2"), "{stdout}");
    assert!(
        stdout.contains("region 127.0.0.1:7022: 0 shards, 0 entities"),
        "{stdout}"
    );
    // The stats list the backend node's region alone, with bob's shard.
    let regions: Vec<&str> = stdout
        .lines()
        .filter(|l| l.starts_with("127.0.0.1:"))
        .collect();
    assert_eq!(regions.len(), 1, "{stdout}");
    assert!(regions[0].starts_with("127.0.0.1:7021 "), "{stdout}");
    assert!(
        logs().contains("it routes to them as a proxy"),
        "the front node says why it hosts no counter shard: {}",
        logs()
    );
    started.stop_on_sigterm(logs).await;
}

/// README's memory budget: a node of counters and durable users within
/// 4 KiB, the estimate within it, users passivated by the policy, and a
/// passivated user's totals read back.
#[tokio::test]
async fn the_memory_budget_commands_run_as_shown() {
    let root = root();
    let readme = std::fs::read_to_string(root.join("README.md")).expect("README.md");
    let node = block_after(
        &readme,
        "A node of the built-in counter and the sample's durable",
    );
    let client = block_after(&readme, "Fifty counters and fifty users later");
    let data = tempfile::tempdir().expect("a temporary directory");
    let (status, printed, started) = start_block(&root, &node, data.path());
    let logs = || std::fs::read_to_string(data.path().join("block.err")).unwrap_or_default();
    assert!(status.success(), "{printed}\n{}", logs());
    assert_eq!(started.1.len(), 1, "{printed}");
    await_ready(&["127.0.0.1:9031"], &logs).await;
    let stdout = run_client_block(&root, &node, &client, logs);
    assert!(
        stdout.contains(r#""purchases":1,"items":2,"amount_spent":500"#),
        "{stdout}"
    );
    let value = |prefix: &str| -> f64 {
        stdout
            .lines()
            .filter(|l| l.starts_with(prefix))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    };
    let memory = value("colo_region_entity_memory_bytes");
    assert!(memory > 0.0 && memory <= 4096.0, "{stdout}");
    assert!(
        value("colo_passivations_total{entity_type=\"user\"") > 0.0,
        "{stdout}"
    );
    started.stop_on_sigterm(logs).await;
}

/// README's Kafka sample as written, against the test broker (its address
/// in place of 127.0.0.1:9092): one node consuming `user-events`, `colo
/// produce`, and a user's totals asked with `colo ask`, which reach what
/// the producer says they must.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_kafka_sample_commands_run_as_shown() {
    // README names its topics and cluster as a user would: a broker of
    // the test's own, where another test cannot have used them.
    let broker = colo_tests::broker::Broker::start_own();
    let root = root();
    let readme = std::fs::read_to_string(root.join("README.md")).expect("README.md");
    let node = block_at_broker(
        &readme,
        "one node that consumes the topic",
        broker.bootstrap(),
    );
    let sample = commands(block_at_broker(
        &readme,
        "Then some purchase events",
        broker.bootstrap(),
    ));
    let (produce, ask, verify) = match sample.as_slice() {
        [produce, ask, verify]
            if produce.contains(" produce ")
                && ask.contains(" ask ")
                && verify.contains(" verify ") =>
        {
            (produce.clone(), ask.clone(), verify.clone())
        }
        other => panic!("README's sample block changed: {other:?}"),
    };
    let data = tempfile::tempdir().expect("a temporary directory");
    let (status, printed, started) = start_block(&root, &node, data.path());
    let logs = || std::fs::read_to_string(data.path().join("block.err")).unwrap_or_default();
    assert!(status.success(), "{printed}\n{}", logs());
    assert_eq!(started.1.len(), 1, "{printed}");
    let ready = wait::held_within(Duration::from_secs(60), || async {
        matches!(
            http::get("127.0.0.1:9011", "/health/ready").await,
            Ok((200, _))
        )
    })
    .await;
    assert!(ready, "not ready; logs:\n{}", logs());
    let assignment = node
        .iter()
        .find(|l| l.starts_with("colo="))
        .expect("the block names the binary")
        .clone();
    let shell = |line: &str| {
        Command::new("bash")
            .arg("-c")
            .arg(format!("set -euo pipefail\n{assignment}\n{line}"))
            .current_dir(data.path())
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .output()
            .expect("run bash")
    };
    // Run from the data directory, so expected.json lands there; the binary
    // path is relative to the project, hence an absolute one.
    let absolute = root.join("target/release/colo");
    let produced = shell(&produce.replace("$colo", &absolute.display().to_string()));
    assert!(
        produced.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&produced.stdout),
        String::from_utf8_lossy(&produced.stderr)
    );
    let expected: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(data.path().join("expected.json")).expect("expected.json"),
    )
    .expect("JSON");
    let wanted = expected["users"]["user-7"]["purchases"]
        .as_u64()
        .expect("user-7 bought something");
    let ask = ask.replace("$colo", &absolute.display().to_string());
    let mut last = String::new();
    let reached = wait::held_within(Duration::from_secs(60), || {
        let answer = shell(&ask);
        last = String::from_utf8_lossy(&answer.stdout).into_owned();
        let purchases = last
            .split_once("replied ")
            .and_then(|(_, json)| serde_json::from_str::<serde_json::Value>(json.trim()).ok())
            .and_then(|stats| stats["purchases"].as_u64());
        std::future::ready(purchases == Some(wanted))
    })
    .await;
    assert!(
        reached,
        "user-7 never reached {wanted} purchases; last answer: {last}\nlogs:\n{}",
        logs()
    );
    // Every user's totals, once every purchase is handled.
    let verify = verify.replace("$colo", &absolute.display().to_string());
    let mut last = String::new();
    let matched = wait::held_within(Duration::from_secs(60), || {
        let checked = shell(&verify);
        last = format!(
            "{}{}",
            String::from_utf8_lossy(&checked.stdout),
            String::from_utf8_lossy(&checked.stderr)
        );
        std::future::ready(checked.status.success())
    })
    .await;
    assert!(
        matched
            && last.contains("100 of 100 users match")
            && last.contains(
                "users who crossed the milestone emitted exactly one to colo.user.milestones"
            ),
        "colo verify: {last}\nlogs:\n{}",
        logs()
    );
    started.stop_on_sigterm(logs).await;
}

/// The dependencies README lists for a program of one's own are the ones
/// `examples/inventory` builds with, and no others: that crate, built by
/// the test command, is a program written from README alone. Only colo's
/// path differs (README's is a clone beside the program).
#[test]
fn readme_lists_the_dependencies_a_program_of_ones_own_builds_with() {
    let root = root();
    let readme = std::fs::read_to_string(root.join("README.md")).expect("README.md");
    let listed = block_after(&readme, "serde, with these features");
    assert_eq!(listed.first().map(String::as_str), Some("[dependencies]"));
    let manifest = std::fs::read_to_string(root.join("examples/inventory/Cargo.toml"))
        .expect("examples/inventory/Cargo.toml");
    let built: Vec<String> = manifest
        .lines()
        .skip_while(|l| *l != "[dependencies]")
        .take_while(|l| !l.trim().is_empty())
        .map(|l| l.replace(r#"path = "../../service""#, r#"path = "../colo/service""#))
        .collect();
    assert_eq!(listed, built);
}

/// README's program of one's own as written: the `inventory` crate built
/// and started next to the test broker, fed stock events with `colo
/// produce`, and every SKU's level checked with `colo verify --ask`. Then
/// what a user gets wrong: an expectation that differs names the SKU with
/// both replies, and a file that is not one of expected replies is refused
/// with why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_program_of_ones_own_commands_run_as_shown() {
    // README names its topics and cluster as a user would: a broker of
    // the test's own, where another test cannot have used them.
    let broker = colo_tests::broker::Broker::start_own();
    let root = root();
    let readme = std::fs::read_to_string(root.join("README.md")).expect("README.md");
    let node = block_at_broker(
        &readme,
        "Built and started next to a broker",
        broker.bootstrap(),
    );
    let checks = block_at_broker(
        &readme,
        "then fed stock events and checked",
        broker.bootstrap(),
    );
    assert!(
        node.iter()
            .any(|l| l.starts_with("cargo build -p inventory"))
            && checks.last().is_some_and(|l| l.contains(" verify ")),
        "README's blocks changed: {node:?} {checks:?}"
    );
    let data = tempfile::tempdir().expect("a temporary directory");
    let (status, printed, started) = start_block(&root, &node, data.path());
    let logs = || std::fs::read_to_string(data.path().join("block.err")).unwrap_or_default();
    assert!(status.success(), "{printed}\n{}", logs());
    assert_eq!(started.1.len(), 1, "{printed}");
    await_ready(&["127.0.0.1:9301"], logs).await;
    // From a directory of its own, so stock.txt and levels.json land there.
    let debug = root.join("target/debug/");
    let shell = |lines: &[String]| {
        let lines = lines
            .join("\n")
            .replace("target/debug/", &debug.display().to_string());
        Command::new("bash")
            .arg("-c")
            .arg(format!("set -euo pipefail\n{lines}"))
            .current_dir(data.path())
            .output()
            .expect("run bash")
    };
    let text = |out: &std::process::Output| {
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    };
    let (feed, verify) = checks.split_at(checks.len() - 1);
    let fed = shell(feed);
    assert!(fed.status.success(), "{}\nlogs:\n{}", text(&fed), logs());
    let mut last = String::new();
    let matched = wait::held_within(Duration::from_secs(60), || {
        let checked = shell(verify);
        last = text(&checked);
        std::future::ready(checked.status.success())
    })
    .await;
    assert!(
        matched && last.contains("2 of 2 item entities match levels.json"),
        "colo verify: {last}\nlogs:\n{}",
        logs()
    );

    std::fs::write(
        data.path().join("levels.json"),
        r#"{"sku-1": {"on_hand": 3, "events": 2}, "sku-2": {"on_hand": 6, "events": 1}}"#,
    )
    .expect("write levels.json");
    let differs = shell(verify);
    assert!(!differs.status.success(), "{}", text(&differs));
    assert!(
        text(&differs)
            .contains(r#"sku-2: expected {"events":1,"on_hand":6}; got {"events":1,"on_hand":7}"#),
        "{}",
        text(&differs)
    );
    std::fs::write(data.path().join("levels.json"), "[1, 2]").expect("write levels.json");
    let refused = shell(verify);
    assert!(!refused.status.success(), "{}", text(&refused));
    assert!(
        text(&refused)
            .contains("cannot read levels.json: not a JSON object of entity id → expected reply"),
        "{}",
        text(&refused)
    );
    started.stop_on_sigterm(logs).await;
}

/// README's records of one's own, as written, against librdkafka's
/// in-process mock cluster (its address in place of 127.0.0.1:9092; it
/// serves a topic and produce and fetch, all these commands need, without
/// the test broker), with the `colo` the tests build as `$colo`: every
/// record lands in its key's murmur2 partition (the Java client's),
/// with its payload as written.
#[test]
fn the_own_records_commands_run_as_shown() {
    use colo_tests::kafka::{java_partition, read_back};
    let readme = std::fs::read_to_string(root().join("README.md")).expect("README.md");
    let kafka = rdkafka::mocking::MockCluster::new(1).expect("mock cluster");
    let bootstrap = kafka.bootstrap_servers();
    let block: Vec<String> = block_after(&readme, "whose sensors average them")
        .into_iter()
        .map(|l| l.replace("127.0.0.1:9092", &bootstrap))
        .collect();
    assert!(
        block.iter().any(|l| l.contains(" --topic readings ")),
        "README's block changed: {block:?}"
    );
    kafka.create_topic("readings", 12, 1).expect("topic");
    let dir = tempfile::tempdir().expect("a temporary directory");
    let run = Command::new("bash")
        .arg("-c")
        .arg(format!(
            "set -euo pipefail\ncolo={}\n{}",
            colo_tests::process::colo_binary().display(),
            block.join("\n")
        ))
        .current_dir(dir.path())
        .output()
        .expect("run bash");
    assert!(
        run.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&run.stdout),
        String::from_utf8_lossy(&run.stderr)
    );
    let records = read_back(&bootstrap, "readings", 12, 102);
    for record in &records {
        assert_eq!(
            record.partition,
            java_partition(&record.key, 12),
            "{record:?}"
        );
    }
    let payloads = |key: &str| -> Vec<&str> {
        records
            .iter()
            .filter(|r| r.key == key)
            .map(|r| r.payload.as_str())
            .collect()
    };
    // Each key's records in its partition's order: the file's first, then
    // the template's.
    for key in 0..10 {
        let key = format!("sensor-{key}");
        let mut expected: Vec<String> = match key.as_str() {
            "sensor-1" => vec![r#"{"celsius": 20.4}"#.to_string()],
            "sensor-2" => vec![r#"{"celsius": 19.5}"#.to_string()],
            _ => vec![],
        };
        expected.extend((1..=10).map(|seq| format!(r#"{{"celsius": {seq}.5}}"#)));
        assert_eq!(payloads(&key), expected, "{key}");
    }
}

/// README's secured cluster as written: the certificates and tokens made,
/// two nodes over mutual TLS, a tell with a client certificate and an ask
/// with a read-only token, through the nodes' TLS client API.
#[tokio::test]
async fn the_secured_cluster_commands_run_as_shown() {
    let root = root();
    let readme = std::fs::read_to_string(root.join("README.md")).expect("README.md");
    let nodes = block_after(&readme, "tokens for an operator and a dashboard:");
    let client = block_after(&readme, "which keeps a token out of the process list:");
    assert!(nodes.iter().any(|l| l.contains("certs.sh")), "{nodes:?}");
    let certs = root.join("colo-data").join("certs");
    let _ = std::fs::remove_dir_all(&certs);
    let data = tempfile::tempdir().expect("a temporary directory");
    let (status, printed, mut started) = start_block(&root, &nodes, data.path());
    started.0.push(certs);
    let logs = || std::fs::read_to_string(data.path().join("block.err")).unwrap_or_default();
    assert!(status.success(), "{printed}\n{}", logs());
    assert_eq!(started.1.len(), 2, "{printed}");
    await_ready(&["127.0.0.1:9201", "127.0.0.1:9202"], logs).await;
    let stdout = run_client_block(&root, &nodes, &client, logs);
    assert!(stdout.contains("replied 5"), "{stdout}");
    // Without credentials the same ask is refused.
    let refused = Command::new("bash")
        .arg("-c")
        .arg("colo=target/release/colo\n$colo ask --addr 127.0.0.1:7202 --type counter --id alice Get --ca colo-data/certs/ca.pem")
        .current_dir(&root)
        .output()
        .expect("run bash");
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(
        !refused.status.success() && said.contains("UNAUTHENTICATED"),
        "{said}"
    );
}
