//! Kafka end to end, against the test broker (Apache Kafka on loopback):
//!
//! 1. throughput: records per second through a `colo run` node (consume,
//!    decode, route, handle, write the users' state behind to the node's
//!    store and the changelog, commit) next to a bare rdkafka consumer that
//!    reads the same topic from the same broker, and next to the same node
//!    program with its users in memory only (the `users_in_memory`
//!    example), in one run, as ratios;
//! 2. hand-off pause: a node joins and leaves a group whose moving shards
//!    hold live entities while records flow; each pause is from the old
//!    owner's revoke to the first record handled on the new owner, with the
//!    part colo controls (the revoke callback: handle what is in flight,
//!    hand the shards off, commit) reported beside it.
//!
//! `COLO_BENCH_RECORDS` (default 1000000) sizes the throughput run,
//! `COLO_BENCH_USERS` (default 20000) the live entities and
//! `COLO_BENCH_CYCLES` (default 5) the join-and-leave cycles;
//! `COLO_BENCH_RUNS` (default 3) is how many times the throughput of each
//! consumer is measured: single runs spread by about 0.15 on two cores the
//! broker shares, so the median is what to read.

mod support;

use colo_tests::broker::Broker;
use colo_tests::http;
use colo_tests::lifecycle::JSON_LOGS;
use colo_tests::process::{NodeProcess, Program};
use colo_tests::purchases::Producer;
use rdkafka::consumer::{BaseConsumer, Consumer};
use std::time::{Duration, Instant};
use support::{cpu_seconds, env, through, user_node_sets, Rate};

const PARTITIONS: u32 = 24;

fn node_sets(bootstrap: &str, topic: &str, cluster: &str, debug: bool) -> Vec<String> {
    let mut sets = user_node_sets(bootstrap, topic, cluster, PARTITIONS);
    sets.push(
        r#"kafka.client={"session.timeout.ms"="6000","heartbeat.interval.ms"="500"}"#.to_string(),
    );
    if debug {
        sets.extend(JSON_LOGS.iter().map(|s| s.to_string()));
    } else {
        sets.push(r#"log.level="warn""#.to_string());
    }
    sets
}

fn start(coordinator: Option<&str>, sets: &[String]) -> NodeProcess {
    let sets: Vec<&str> = sets.iter().map(String::as_str).collect();
    NodeProcess::start(coordinator, &sets)
}

/// Durable users (`colo run`) or users in memory only.
#[derive(Debug, Clone, Copy)]
enum Users {
    Durable,
    InMemory,
}

async fn handled(node: &NodeProcess) -> f64 {
    support::metric(node, support::HANDLED.0, support::HANDLED.1).await
}

/// A bare consumer in a group of its own: records per second from its
/// first record to the `count`-th (its CPU time is this process's: nothing
/// else in it runs meanwhile).
fn bare(bootstrap: &str, topic: &str, group: &str, count: u64) -> Rate {
    let consumer: BaseConsumer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", group)
        .set("auto.offset.reset", "earliest")
        .set("partition.assignment.strategy", "cooperative-sticky")
        // What colo sets too (librdkafka's 1 s default idles a consumer
        // that drains its queue faster).
        .set(
            "fetch.queue.backoff.ms",
            colo_connectors::FETCH_QUEUE_BACKOFF_MS,
        )
        .create()
        .expect("consumer");
    consumer.subscribe(&[topic]).expect("subscribe");
    let mut seen = 0u64;
    let mut first = None;
    let deadline = Instant::now() + Duration::from_secs(300);
    while seen < count && Instant::now() < deadline {
        if let Some(Ok(_)) = consumer.poll(Duration::from_millis(100)) {
            first.get_or_insert_with(|| (Instant::now(), cpu_seconds(Some(std::process::id()))));
            seen += 1;
        }
    }
    assert_eq!(seen, count, "the bare consumer read only {seen}");
    consumer
        .commit_consumer_state(rdkafka::consumer::CommitMode::Sync)
        .ok();
    let (started, cpu) = first.expect("a record");
    Rate {
        records_per_second: count as f64 / started.elapsed().as_secs_f64(),
        cpu_per_million: (cpu_seconds(Some(std::process::id())) - cpu) * 1e6 / count as f64,
    }
}

/// A `colo run` node in a group of its own: records per second from its
/// first handled record to the `count`-th.
async fn through_colo(
    bootstrap: &str,
    topic: &str,
    cluster: &str,
    count: u64,
    users: Users,
) -> Rate {
    let sets = node_sets(bootstrap, topic, cluster, false);
    let program = match users {
        Users::Durable => Program::Colo,
        Users::InMemory => Program::Example("users_in_memory"),
    };
    through(program, &sets, count).await
}

async fn throughput(broker: &Broker) {
    let records = env("COLO_BENCH_RECORDS", 1_000_000);
    let users = env("COLO_BENCH_USERS", 20_000);
    let dir = tempfile::tempdir().expect("dir");
    let topic = format!("bench-{}.user-events", std::process::id());
    // The first node creates the topic; the records go in before anyone
    // measures.
    let creator = start(
        None,
        &node_sets(broker.bootstrap(), &topic, "bench-creator", false),
    );
    creator.await_ready(Duration::from_secs(30)).await;
    drop(creator);
    Producer::start(dir.path(), broker.bootstrap(), &topic, users, records, None)
        .finished(Duration::from_secs(600))
        .await;
    println!("throughput: {records} records of {users} users, {PARTITIONS} partitions, one node");
    println!("| run | bare rdkafka consumer records/s | colo, users in memory, records/s | colo run, durable users, records/s | durable/bare | durable/in memory | CPU s per million records: bare | in memory | durable |");
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|");
    let mut ratios = Vec::new();
    let mut costs = Vec::new();
    for run in 1..=env("COLO_BENCH_RUNS", 3) {
        let bootstrap = broker.bootstrap().to_string();
        let (t, group) = (topic.clone(), format!("bench-bare-{run}"));
        let bare = tokio::task::spawn_blocking(move || bare(&bootstrap, &t, &group, records))
            .await
            .expect("bare consumer");
        let memory = through_colo(
            broker.bootstrap(),
            &topic,
            &format!("bench-memory-{run}"),
            records,
            Users::InMemory,
        )
        .await;
        let colo = through_colo(
            broker.bootstrap(),
            &topic,
            &format!("bench-colo-{run}"),
            records,
            Users::Durable,
        )
        .await;
        let cpu = [
            bare.cpu_per_million,
            memory.cpu_per_million,
            colo.cpu_per_million,
        ];
        let (bare, memory, colo) = (
            bare.records_per_second,
            memory.records_per_second,
            colo.records_per_second,
        );
        ratios.push(colo / bare);
        costs.push(colo / memory);
        println!(
            "| {run} | {bare:.0} | {memory:.0} | {colo:.0} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} |",
            colo / bare,
            colo / memory,
            cpu[0],
            cpu[1],
            cpu[2]
        );
    }
    ratios.sort_by(f64::total_cmp);
    costs.sort_by(f64::total_cmp);
    println!(
        "median ratios: durable/bare {:.2}, durable/in memory {:.2}",
        ratios[ratios.len() / 2],
        costs[costs.len() / 2]
    );
}

/// Log lines with `message` (JSON logs): their time (seconds since the
/// epoch) and fields.
fn events(node: &NodeProcess, message: &str) -> Vec<(f64, serde_json::Value)> {
    node.logs()
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|e| e["fields"]["message"] == message)
        .filter_map(|e| {
            let at = humantime::parse_rfc3339(e["timestamp"].as_str()?).ok()?;
            let at = at.duration_since(std::time::UNIX_EPOCH).ok()?.as_secs_f64();
            Some((at, e["fields"].clone()))
        })
        .collect()
}

/// The first time after `after` that `node` logged `message`, with fields
/// that pass `keep`, waited for up to a minute.
async fn first_after(
    node: &NodeProcess,
    message: &str,
    after: f64,
    keep: impl Fn(&serde_json::Value) -> bool,
) -> f64 {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some((t, _)) = events(node, message)
            .into_iter()
            .find(|(t, f)| *t > after && keep(f))
        {
            return t;
        }
        assert!(
            Instant::now() < deadline,
            "{} never logged {message:?} after {after}",
            node.grpc
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The sum and count of a node's revoke-callback durations.
async fn revoke_callbacks(node: &NodeProcess) -> (f64, f64) {
    let Ok((_, body)) = http::get(&node.admin, "/metrics").await else {
        return (0.0, 0.0);
    };
    let value = |name: &str| {
        body.lines()
            .filter(|l| l.starts_with(name) && l.contains("kind=\"revoked\""))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum::<f64>()
    };
    (
        value("colo_kafka_rebalance_callback_seconds_sum"),
        value("colo_kafka_rebalance_callback_seconds_count"),
    )
}

fn now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or_default()
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    let at = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[at.min(sorted.len() - 1)]
}

/// One hand-off's parts, in seconds.
struct Pause {
    /// A node joined or left.
    join: bool,
    /// Old owner's revoke to the first moved record handled on the new.
    total: f64,
    /// The old owner's revoke callback (records in flight handled, shards
    /// handed off with their entities stopped, offsets committed).
    callback: f64,
    /// The new owner's assignment to its first moved record handled.
    start: f64,
}

/// One part of a hand-off's pause, read off a [`Pause`].
type PausePart = fn(&Pause) -> f64;

async fn handoff_pause(broker: &Broker) {
    let users = env("COLO_BENCH_USERS", 20_000);
    let cycles = env("COLO_BENCH_CYCLES", 5);
    let dir = tempfile::tempdir().expect("dir");
    let topic = format!("bench-{}.pause", std::process::id());
    let sets = node_sets(broker.bootstrap(), &topic, "bench-pause", true);
    let a = start(None, &sets);
    a.await_ready(Duration::from_secs(30)).await;
    // Every user active on the first node before anything moves.
    let warm = Producer::start_for(
        "u-",
        dir.path(),
        broker.bootstrap(),
        &topic,
        users,
        users * 3,
        None,
    )
    .finished(Duration::from_secs(600))
    .await;
    while handled(&a).await < (users * 3) as f64 {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    println!(
        "hand-off pause: {} users live on the first node, {PARTITIONS} partitions; a second node joins and leaves {cycles} times while 2000 records/s flow",
        warm.len()
    );
    // The same users keep buying while the second node joins and leaves.
    let _flow = Producer::start_for(
        "u-",
        dir.path(),
        broker.bootstrap(),
        &topic,
        users,
        2000 * 60 * cycles,
        Some(2000),
    );
    let assigned_some = |f: &serde_json::Value| f["partitions"].as_u64().unwrap_or(0) > 0;
    let mut pauses = Vec::new();
    for _ in 0..cycles {
        // Joining: a revokes about half its partitions, b gets them.
        let joined_at = now();
        let before = revoke_callbacks(&a).await;
        let mut b = start(Some(&a.grpc), &sets);
        let revoked = first_after(&a, "kafka partitions revoked", joined_at, |_| true).await;
        let assigned = first_after(&b, "kafka partitions assigned", revoked, assigned_some).await;
        let first = first_after(&b, "purchase handled", assigned, |_| true).await;
        let after = revoke_callbacks(&a).await;
        pauses.push(Pause {
            join: true,
            total: first - revoked,
            callback: (after.0 - before.0) / (after.1 - before.1).max(1.0),
            start: first - assigned,
        });
        // Let the group settle: b consumes for a second.
        let settled = first_after(&b, "purchase handled", first + 1.0, |_| true).await;
        let moved: std::collections::BTreeSet<String> = events(&b, "purchase handled")
            .into_iter()
            .filter_map(|(_, f)| f["entity_id"].as_str().map(str::to_string))
            .collect();
        // Leaving: b revokes everything, a gets it back.
        let before = revoke_callbacks(&b).await;
        b.terminate();
        let revoked = first_after(&b, "kafka partitions revoked", settled, |_| true).await;
        let (sum, count) = revoke_callbacks(&b).await;
        let assigned = first_after(&a, "kafka partitions assigned", revoked, assigned_some).await;
        let first = first_after(&a, "purchase handled", assigned, |f| {
            f["entity_id"].as_str().is_some_and(|id| moved.contains(id))
        })
        .await;
        assert!(b.exited(Duration::from_secs(60)).await.success());
        let callback = if count > before.1 {
            (sum - before.0) / (count - before.1)
        } else {
            // Scraped before the callback ended: from the log instead.
            first_after(&b, "stopped", revoked, |_| true).await - revoked
        };
        pauses.push(Pause {
            join: false,
            total: first - revoked,
            callback,
            start: first - assigned,
        });
    }
    println!(
        "{} hand-offs ({cycles} joins, {cycles} leaves):",
        pauses.len()
    );
    println!("| part | hand-offs | p50 s | p99 s | max s |");
    println!("|---|---|---:|---:|---:|");
    let parts: [(&str, PausePart); 3] = [
        (
            "revoke on the old owner to first moved record on the new",
            |p| p.total,
        ),
        ("old owner's revoke callback (hand-off inside it)", |p| {
            p.callback
        }),
        ("new owner's assignment to its first moved record", |p| {
            p.start
        }),
    ];
    for (name, part) in parts {
        for (which, keep) in [
            ("all", None),
            ("joins", Some(true)),
            ("leaves", Some(false)),
        ] {
            let mut values: Vec<f64> = pauses
                .iter()
                .filter(|p| keep.is_none_or(|join| p.join == join))
                .map(part)
                .collect();
            values.sort_by(f64::total_cmp);
            println!(
                "| {name} | {which} | {:.3} | {:.3} | {:.3} |",
                percentile(&values, 0.5),
                percentile(&values, 0.99),
                values.last().copied().unwrap_or_default()
            );
        }
    }
}

fn main() {
    let filter = std::env::args().skip(1).find(|a| !a.starts_with('-'));
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let broker = Broker::start();
        if filter.as_deref().is_none_or(|f| "throughput".contains(f)) {
            throughput(&broker).await;
        }
        if filter.as_deref().is_none_or(|f| "pause".contains(f)) {
            handoff_pause(&broker).await;
        }
    });
}
