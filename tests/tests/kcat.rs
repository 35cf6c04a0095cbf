//! kcat, the command-line client most Kafka users reach for, writing to a
//! program of one's own with nothing but its defaults: its partitioner is
//! librdkafka's `consistent_random`, not murmur2, so most records land in
//! another partition than their key's shard. The broker is Apache Kafka on
//! loopback; `./scripts/test.sh` installs Debian's kcat.

use colo_tests::broker::Broker;
use colo_tests::process::{NodeProcess, Program};
use colo_tests::user_nodes::{unique, FIRST_SHARDS, READY};
use colo_tests::wait;
use std::collections::BTreeMap;

/// kcat, the command-line client most Kafka users reach for, with nothing
/// but the brokers, the topic and a key delimiter: its partitioner is
/// librdkafka's `consistent_random`. Its stock events, written as a person
/// would (`sku-7<TAB>{"delta": 3}`), into a program of one's own (the
/// durable `inventory` crate) of two nodes: most land in another partition
/// than their SKU's shard, often on the other node, and every SKU's level
/// counts each event once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_from_kcat_with_its_defaults_reach_a_program_of_ones_own_exactly() {
    let broker = Broker::start();
    let dir = tempfile::tempdir().expect("dir");
    let (topic, cluster) = unique("kcat-stock");
    let sets: Vec<String> = vec![
        format!(r#"kafka.bootstrap_servers="{}""#, broker.bootstrap()),
        format!(r#"kafka.cluster="{cluster}""#),
        format!(r#"kafka.topics.item=["{topic}"]"#),
        "kafka.create_topics=true".to_string(),
        r#"kafka.commit_interval="200ms""#.to_string(),
    ];
    let sets: Vec<&str> = sets.iter().map(String::as_str).collect();
    let a = NodeProcess::start_program(Program::Crate("inventory"), None, &sets);
    a.await_ready(READY).await;
    let b = NodeProcess::start_program(Program::Crate("inventory"), Some(&a.grpc), &sets);
    b.await_ready(READY).await;
    let hosts = |node: &NodeProcess| {
        let admin = node.admin.clone();
        async move { item_metric(&admin, "colo_region_hosted_shards{").await > 0.0 }
    };
    wait::until("both nodes host shards", FIRST_SHARDS, || async {
        hosts(&a).await && hosts(&b).await
    })
    .await;

    // 40 SKUs, ten events each, deltas of both signs.
    let mut lines = String::new();
    let mut levels = BTreeMap::new();
    for n in 0..400_i64 {
        let sku = format!("sku-{}", n % 40);
        let delta = (n * 7) % 11 - 4;
        lines.push_str(&format!("{sku}\t{{\"delta\": {delta}}}\n"));
        let (on_hand, events) = levels.entry(sku).or_insert((0_i64, 0_u64));
        *on_hand += delta;
        *events += 1;
    }
    let records = dir.path().join("stock.txt");
    std::fs::write(&records, lines).expect("write stock.txt");
    let expected: BTreeMap<String, serde_json::Value> = levels
        .into_iter()
        .map(|(sku, (on_hand, events))| {
            (
                sku,
                serde_json::json!({"on_hand": on_hand, "events": events}),
            )
        })
        .collect();
    let expected_file = dir.path().join("levels.json");
    std::fs::write(
        &expected_file,
        serde_json::to_string(&expected).expect("JSON"),
    )
    .expect("write levels.json");

    colo_tests::kafka::kcat_produce(broker.bootstrap(), &topic, &records);

    let expected_path = expected_file.display().to_string();
    let verified = colo_tests::process::colo_verify(&[
        "--addr",
        &a.grpc,
        "--ask",
        "Level",
        "--expected",
        &expected_path,
    ])
    .await;
    assert!(
        verified
            .as_ref()
            .is_ok_and(|out| out.contains("40 of 40 item entities match")),
        "{verified:?}\n{}\n{}",
        a.logs(),
        b.logs()
    );
    let mismatches = item_metric(&a.admin, "colo_kafka_partitioner_mismatches_total{").await
        + item_metric(&b.admin, "colo_kafka_partitioner_mismatches_total{").await;
    // With 12 partitions, CRC32 and murmur2 agree on about one key in 12.
    assert!(
        mismatches >= 200.0,
        "kcat's records were mostly in other partitions than their SKUs': {mismatches} counted"
    );
}

/// The sum of a metric's series of the `item` entity type.
async fn item_metric(admin: &str, name: &str) -> f64 {
    let (_, body) = colo_tests::http::get(admin, "/metrics")
        .await
        .expect("metrics");
    body.lines()
        .filter(|l| l.starts_with(name) && l.contains("entity_type=\"item\""))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}
