//! What a record in another partition than its key's costs: the same
//! purchase events, produced once with Kafka's murmur2 partitioner (every
//! record in its shard's partition, handled where it is consumed) and once
//! with librdkafka's default `consistent_random` (a CRC32 of the key: about
//! eleven records in twelve in another partition, each sent to its
//! shard's node as an ask and answered once its change is durable),
//! through three `colo run` nodes of the durable sample on the test broker
//! (Apache Kafka on loopback), in one run.
//!
//! Per partitioner: records per second from the first handled record to
//! the last (the records are produced while the nodes consume, unpaced),
//! the share of records forwarded to another node, and the nodes' CPU
//! seconds per thousand records.
//!
//! `COLO_BENCH_RECORDS` (default 100000) and `COLO_BENCH_USERS` (default
//! 5000) size a run; `COLO_BENCH_RUNS` (default 2) is how many runs of
//! each partitioner, alternating.

mod support;

use colo::process::samples::purchases::{encode_event, Generator};
use colo_tests::broker::Broker;
use colo_tests::process::NodeProcess;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use std::time::{Duration, Instant};
use support::{env, metric};

fn node_sets(bootstrap: &str, topic: &str, cluster: &str) -> Vec<String> {
    vec![
        r#"node.entity_types=["user"]"#.to_string(),
        format!(r#"kafka.bootstrap_servers="{bootstrap}""#),
        format!(r#"kafka.cluster="{cluster}""#),
        format!(r#"kafka.topics.user=["{topic}"]"#),
        "kafka.create_topics=true".to_string(),
        r#"kafka.client={"session.timeout.ms"="6000","heartbeat.interval.ms"="500"}"#.to_string(),
        r#"log.level="warn""#.to_string(),
    ]
}

/// Records handled so far across `nodes`.
async fn handled(nodes: &[NodeProcess]) -> f64 {
    let mut sum = 0.0;
    for node in nodes {
        sum += metric(node, "colo_kafka_records_total{", "outcome=\"handled\"").await;
    }
    sum
}

/// The CPU seconds (user and system) `nodes` have used.
fn cpu_seconds(nodes: &[NodeProcess]) -> f64 {
    nodes
        .iter()
        .map(|node| support::cpu_seconds(node.pid()))
        .sum()
}

/// One run: three nodes on a topic of their own, `records` events of
/// `users` users produced with `partitioner` while they consume.
async fn run(broker: &Broker, partitioner: &str, tag: &str, records: u64, users: u64) -> Row {
    let cluster = format!("bench-{tag}-{}", std::process::id());
    let topic = format!("{cluster}.user-events");
    let sets = node_sets(broker.bootstrap(), &topic, &cluster);
    let sets: Vec<&str> = sets.iter().map(String::as_str).collect();
    let first = NodeProcess::start(None, &sets);
    first.await_ready(Duration::from_secs(30)).await;
    let coordinator = first.grpc.clone();
    let mut nodes = vec![first];
    for _ in 0..2 {
        nodes.push(NodeProcess::start(Some(&coordinator), &sets));
    }
    for node in &nodes {
        node.await_ready(Duration::from_secs(30)).await;
    }
    let hosting = colo_tests::wait::held_within(Duration::from_secs(90), || async {
        let mut all = true;
        for node in &nodes {
            all &= metric(node, "colo_region_hosted_shards{", "entity_type=\"user\"").await > 0.0;
        }
        all
    })
    .await;
    assert!(hosting, "the three nodes host shards");

    let bootstrap = broker.bootstrap().to_string();
    let partitioner = partitioner.to_string();
    let producing = tokio::task::spawn_blocking(move || {
        let producer: BaseProducer = rdkafka::ClientConfig::new()
            .set("bootstrap.servers", &bootstrap)
            .set("partitioner", &partitioner)
            .create()
            .expect("producer");
        let mut generator = Generator::new("user-", usize::try_from(users).unwrap_or(1), 3);
        for _ in 0..records {
            let (user, purchase) = generator.next_event();
            let payload = encode_event(&user, &purchase);
            let mut record = BaseRecord::to(&topic)
                .key(user.as_bytes())
                .payload(&payload);
            loop {
                match producer.send(record) {
                    Ok(()) => break,
                    Err((_, back)) => {
                        record = back;
                        producer.poll(Duration::from_millis(10));
                    }
                }
            }
        }
        producer.flush(Duration::from_secs(60)).expect("flushed");
    });
    let mut first = None;
    let deadline = Instant::now() + Duration::from_secs(600);
    let mut tick = tokio::time::interval(Duration::from_millis(50));
    loop {
        tick.tick().await;
        let done = handled(&nodes).await;
        if done > 0.0 && first.is_none() {
            first = Some((Instant::now(), cpu_seconds(&nodes)));
        }
        if done as u64 >= records {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{tag}: {done} of {records} handled"
        );
    }
    producing.await.expect("producer");
    let (started, cpu) = first.expect("a record");
    let elapsed = started.elapsed().as_secs_f64();
    let mut forwarded = 0.0;
    let mut misplaced = 0.0;
    for node in &nodes {
        forwarded += metric(
            node,
            "colo_messages_forwarded_total",
            "entity_type=\"user\"",
        )
        .await;
        misplaced += metric(
            node,
            "colo_kafka_partitioner_mismatches_total{",
            "entity_type=\"user\"",
        )
        .await;
    }
    Row {
        records_per_second: records as f64 / elapsed,
        misplaced: misplaced / records as f64,
        forwarded: forwarded / records as f64,
        cpu_per_thousand: (cpu_seconds(&nodes) - cpu) * 1e3 / records as f64,
    }
}

struct Row {
    records_per_second: f64,
    /// Share of the records in another partition than their key's.
    misplaced: f64,
    /// Share of the records sent to another node.
    forwarded: f64,
    cpu_per_thousand: f64,
}

fn main() {
    let records = env("COLO_BENCH_RECORDS", 100_000);
    let users = env("COLO_BENCH_USERS", 5_000);
    support::runtime().block_on(async {
        let broker = Broker::start();
        println!("partitioners: {records} purchase events of {users} users, 12 partitions, three nodes, durable users");
        println!("| run | partitioner | records/s | in another partition | forwarded to another node | CPU s per 1000 records (three nodes) |");
        println!("|---|---|---:|---:|---:|---:|");
        let mut rates: Vec<(f64, f64)> = Vec::new();
        for n in 1..=env("COLO_BENCH_RUNS", 2) {
            let murmur2 = run(&broker, "murmur2_random", &format!("m{n}"), records, users).await;
            let crc = run(&broker, "consistent_random", &format!("c{n}"), records, users).await;
            for (name, row) in [("murmur2_random", &murmur2), ("consistent_random", &crc)] {
                println!(
                    "| {n} | {name} | {:.0} | {:.2} | {:.2} | {:.3} |",
                    row.records_per_second, row.misplaced, row.forwarded, row.cpu_per_thousand
                );
            }
            rates.push((murmur2.records_per_second, crc.records_per_second));
        }
        let mut ratios: Vec<f64> = rates.iter().map(|(m, c)| c / m).collect();
        ratios.sort_by(f64::total_cmp);
        println!(
            "median consistent_random/murmur2 records/s: {:.2}",
            ratios[ratios.len() / 2]
        );
    });
}
