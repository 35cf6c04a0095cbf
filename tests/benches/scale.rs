//! A cluster of many `colo run` processes on this machine:
//!
//! `COLO_BENCH_NODES` nodes (default 10) of the built-in counter and the
//! sample's durable `user`, `COLO_BENCH_SHARDS` shards (default 1024), the
//! coordinator on the first node (no Kafka: the users' state stays in each
//! node's store, and the placement is the coordinator's alone). It
//! measures:
//! - *placement*: from the first tell to every shard of a fresh cluster
//!   placed, one counter told in each shard, 64 tells at a time; the
//!   baseline, the same tells again once every shard is placed;
//! - *join* and *leave*: while 8 askers ask those counters in turn through
//!   the first nodes, one more node joins, and once the coordinator has
//!   moved its share of shards to it, it leaves gracefully (SIGTERM); the
//!   longest ask of each window (the pause) against the longest of as long
//!   a window before the join (the baseline);
//! - *memory*: each node's resident set after it started, after the shards
//!   were placed, and after `COLO_BENCH_ENTITIES` users (default
//!   10,000,000) were told one purchase each, at most
//!   `COLO_BENCH_ACTIVE` (default 100,000) of them active per node (the
//!   default passivation preset; the rest passivated to the node's store).
//!
//! The nodes use the tests' timings: heartbeats every 200 ms,
//! `rebalance_interval` 500 ms, `region_timeout` 2.5 s. `COLO_BENCH_LOG`
//! set: the nodes log at info (the coordinator at debug), and the bench
//! prints when each node was ready and what the coordinator's node logged
//! about the node that joined and left.

mod support;

use colo_allocation::{HashExtractor, MessageExtractor};
use colo_proto::v1 as pb;
use colo_tests::process::NodeProcess;
use colo_tests::wait::until_ok;
use pb::sharding_client::ShardingClient;
use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use support::{env, percentile, resident};
use tonic::transport::Channel;

/// How long a phase may take before the bench gives up.
const DEADLINE: Duration = Duration::from_secs(1800);
const TELLERS: usize = 64;
const ASKERS: usize = 8;

fn sets(shards: u64, active: u64) -> Vec<String> {
    vec![
        r#"node.entity_types=["counter", "user"]"#.to_string(),
        format!("sharding.number_of_shards={shards}"),
        r#"sharding.passivation.strategy="default""#.to_string(),
        format!("sharding.passivation.active_entity_limit={active}"),
        format!(
            r#"log.level="{}""#,
            if std::env::var_os("COLO_BENCH_LOG").is_some() {
                "info,colo::coordinator=debug"
            } else {
                "warn"
            }
        ),
    ]
}

/// One counter id in each shard, by the `colo run` extractor's hash.
fn one_per_shard(shards: u64) -> Vec<String> {
    let extractor = HashExtractor::new(u32::try_from(shards).expect("shards")).expect("shards");
    let mut ids = vec![None; shards as usize];
    let mut left = shards;
    let mut n = 0u64;
    while left > 0 {
        let id = format!("c-{n}");
        let slot = &mut ids[extractor.shard_id(&id).0 as usize];
        if slot.is_none() {
            *slot = Some(id);
            left -= 1;
        }
        n += 1;
    }
    ids.into_iter().flatten().collect()
}

/// The `n`-th tell: the entity's id and the JSON message.
type Tell = Arc<dyn Fn(u64) -> (String, &'static str) + Send + Sync>;

/// Tells `count` messages to entities of `entity_type`, 64 at a time
/// through every node in turn; a tell refused is sent again. Returns how
/// long it took and how many were sent again.
async fn tell_all(
    clients: &[ShardingClient<Channel>],
    entity_type: &'static str,
    count: u64,
    tell: Tell,
) -> (Duration, u64) {
    let next = Arc::new(AtomicU64::new(0));
    let again = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let mut tellers = tokio::task::JoinSet::new();
    for t in 0..TELLERS {
        let mut client = clients[t % clients.len()].clone();
        let (next, again, tell) = (next.clone(), again.clone(), tell.clone());
        tellers.spawn(async move {
            loop {
                let n = next.fetch_add(1, Ordering::Relaxed);
                if n >= count {
                    return;
                }
                let (id, message) = tell(n);
                let request = pb::TellRequest {
                    entity_type: entity_type.into(),
                    entity_id: id,
                    payload: colo_tests::client::json(message),
                    idempotency_key: None,
                };
                let mut tries = 0;
                while let Err(status) = client.tell(request.clone()).await {
                    tries += 1;
                    again.fetch_add(1, Ordering::Relaxed);
                    assert!(tries < 100, "tell {n} refused 100 times: {status}");
                }
            }
        });
    }
    while let Some(done) = tellers.join_next().await {
        done.expect("teller");
    }
    (started.elapsed(), again.load(Ordering::Relaxed))
}

/// Per region, the counter's shards placed there (and whether any is
/// handing off), as the coordinator's node sees them.
async fn shards_by_region(via: &NodeProcess) -> Result<(Vec<(String, usize)>, bool), String> {
    let stats = via
        .client()
        .await
        .cluster_stats(pb::ClusterStatsRequest {
            entity_type: "counter".into(),
            timeout: None,
        })
        .await
        .map_err(|e| e.to_string())?
        .into_inner();
    if !stats.failed_regions.is_empty() {
        return Err(format!(
            "regions did not answer: {:?}",
            stats.failed_regions
        ));
    }
    let moving = stats.regions.iter().any(|r| !r.handing_off.is_empty());
    Ok((
        stats
            .regions
            .into_iter()
            .map(|r| (r.region, r.entities.len()))
            .collect(),
        moving,
    ))
}

/// Asks going on in the background: each ask's start and how long it took.
struct Askers {
    stop: Arc<AtomicBool>,
    asked: Arc<Mutex<Vec<(Instant, Duration)>>>,
    failed: Arc<AtomicU64>,
    tasks: tokio::task::JoinSet<()>,
}

impl Askers {
    fn start(clients: &[ShardingClient<Channel>], ids: &[String]) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let asked = Arc::new(Mutex::new(Vec::new()));
        let failed = Arc::new(AtomicU64::new(0));
        let mut tasks = tokio::task::JoinSet::new();
        for a in 0..ASKERS {
            let mut client = clients[a % clients.len()].clone();
            let ids: Vec<String> = ids.iter().skip(a).step_by(ASKERS).cloned().collect();
            let (stop, asked, failed) = (stop.clone(), asked.clone(), failed.clone());
            tasks.spawn(async move {
                for id in ids.iter().cycle() {
                    if stop.load(Ordering::Relaxed) {
                        return;
                    }
                    let started = Instant::now();
                    let answer = colo_tests::client::ask_within(
                        &mut client,
                        id,
                        r#""Get""#,
                        Duration::from_secs(30),
                    )
                    .await;
                    if answer.is_err() {
                        failed.fetch_add(1, Ordering::Relaxed);
                    }
                    asked
                        .lock()
                        .expect("asks")
                        .push((started, started.elapsed()));
                }
            });
        }
        Self {
            stop,
            asked,
            failed,
            tasks,
        }
    }

    /// The asks that started in `from..to`.
    fn between(&self, from: Instant, to: Instant) -> Vec<Duration> {
        self.asked
            .lock()
            .expect("asks")
            .iter()
            .filter(|(at, _)| *at >= from && *at < to)
            .map(|(_, took)| *took)
            .collect()
    }

    async fn stop(mut self) -> u64 {
        self.stop.store(true, Ordering::Relaxed);
        while self.tasks.join_next().await.is_some() {}
        self.failed.load(Ordering::Relaxed)
    }
}

fn window(what: &str, asks: &[Duration], lasted: Duration) {
    println!(
        "{what}: {:.2} s, {} asks, longest {:.0} ms, p99 {:.0} ms, p50 {:.1} ms",
        lasted.as_secs_f64(),
        asks.len(),
        percentile(asks, 100.0).as_secs_f64() * 1000.0,
        percentile(asks, 99.0).as_secs_f64() * 1000.0,
        percentile(asks, 50.0).as_secs_f64() * 1000.0,
    );
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

fn main() {
    let count = env("COLO_BENCH_NODES", 10).max(2) as usize;
    let shards = env("COLO_BENCH_SHARDS", 1024);
    let entities = env("COLO_BENCH_ENTITIES", 10_000_000);
    let active = env("COLO_BENCH_ACTIVE", 100_000);
    support::runtime().block_on(async {
        let sets = sets(shards, active);
        let sets: Vec<&str> = sets.iter().map(String::as_str).collect();
        let started = Instant::now();
        let first = NodeProcess::start(None, &sets);
        let mut nodes = vec![first];
        for _ in 1..count {
            nodes.push(NodeProcess::start(Some(&nodes[0].grpc), &sets));
        }
        let mut ready_after = Vec::new();
        for node in &nodes {
            node.await_ready(DEADLINE).await;
            ready_after.push(started.elapsed());
        }
        let ready = started.elapsed();
        if std::env::var_os("COLO_BENCH_LOG").is_some() {
            println!("ready after: {ready_after:?}");
            println!("the last node's log:\n{}", nodes[count - 1].logs());
        }
        let at_start: Vec<u64> = nodes.iter().map(|n| resident(n).0).collect();
        let mut clients = Vec::new();
        for node in &nodes {
            clients.push(node.client().await);
        }

        // Placement: one counter in each shard.
        let ids = one_per_shard(shards);
        let per_shard = ids.clone();
        // A counter's tell is accepted before its shard starts: placed once
        // the cluster's stats count every shard.
        let telling = Instant::now();
        tell_all(
            &clients,
            "counter",
            shards,
            Arc::new(move |n| (per_shard[n as usize].clone(), r#"{"Add":1}"#)),
        )
        .await;
        let regions = until_ok(DEADLINE, || async {
            let (regions, _) = shards_by_region(&nodes[0]).await?;
            let total: usize = regions.iter().map(|(_, n)| n).sum();
            if total as u64 == shards {
                Ok(regions)
            } else {
                Err(format!("{total} shards placed: {regions:?}"))
            }
        })
        .await;
        let placed = telling.elapsed();
        // The baseline: the same tells again, every shard placed.
        let per_shard = ids.clone();
        let (retold, _) = tell_all(
            &clients,
            "counter",
            shards,
            Arc::new(move |n| (per_shard[n as usize].clone(), r#"{"Add":1}"#)),
        )
        .await;
        let spread: BTreeSet<usize> = regions.iter().map(|(_, n)| *n).collect();
        let after_placement: Vec<u64> = nodes.iter().map(|n| resident(n).0).collect();

        // A node joins, then leaves, while the counters are asked.
        let askers = Askers::start(&clients, &ids);
        let quiet_from = Instant::now();
        tokio::time::sleep(Duration::from_secs(5)).await;
        let joining = Instant::now();
        let mut joiner = NodeProcess::start(Some(&nodes[0].grpc), &sets);
        let share = (shards as usize) / (count + 1);
        until_ok(DEADLINE, || async {
            let (regions, moving) = shards_by_region(&nodes[0]).await?;
            let on_joiner = regions
                .iter()
                .find(|(r, _)| *r == joiner.grpc)
                .map_or(0, |(_, n)| *n);
            if on_joiner >= share && !moving {
                Ok(())
            } else {
                Err(format!("{on_joiner} shards on the new node"))
            }
        })
        .await;
        let joined = Instant::now();
        joiner.terminate();
        joiner.exited(DEADLINE).await;
        if std::env::var_os("COLO_BENCH_LOG").is_some() {
            println!("the node that joined and left:\n{}", joiner.logs());
            let first = nodes[0].logs();
            let about: Vec<&str> = first.lines().filter(|l| l.contains(&joiner.grpc)).collect();
            println!("the coordinator's node on it:\n{}", about.join("\n"));
        }
        until_ok(DEADLINE, || async {
            let (regions, moving) = shards_by_region(&nodes[0]).await?;
            let total: usize = regions.iter().map(|(_, n)| n).sum();
            if total as u64 == shards && !moving {
                Ok(())
            } else {
                Err(format!("{total} shards placed"))
            }
        })
        .await;
        let left = Instant::now();
        let baseline = askers.between(quiet_from, joining);
        let join = askers.between(joining, joined);
        let leave = askers.between(joined, left);
        let failed = askers.stop().await;

        // Users, one purchase each: most of them passivated.
        let purchase = r#"{"Purchase":{"product":"p","quantity":1,"price":100,"sequence":1}}"#;
        let (told, again) = tell_all(
            &clients,
            "user",
            entities,
            Arc::new(move |n| (format!("u-{n}"), purchase)),
        )
        .await;
        // Ten flush intervals: what the shards keep after their writes.
        tokio::time::sleep(Duration::from_secs(1)).await;
        let after_users: Vec<(u64, u64)> = nodes.iter().map(resident).collect();

        println!(
            "{count} nodes, {shards} shards, the coordinator on the first; {} s to start them all",
            ready.as_secs_f64()
        );
        println!(
            "placement: {:.3} s from the first tell to every shard placed ({} to {} shards per node); baseline, the same tells once placed: {:.3} s",
            placed.as_secs_f64(),
            spread.first().copied().unwrap_or(0),
            spread.last().copied().unwrap_or(0),
            retold.as_secs_f64()
        );
        window("baseline, before the join", &baseline, joining - quiet_from);
        window("a node joins, until it has its share", &join, joined - joining);
        window("it leaves (SIGTERM), until its shards are placed again", &leave, left - joined);
        println!("asks failed: {failed}");
        println!(
            "{entities} users told one purchase each in {:.1} s ({:.0}/s, {again} sent again), at most {active} active per node",
            told.as_secs_f64(),
            entities as f64 / told.as_secs_f64()
        );
        println!("| node | resident after start, MiB | after placement | after the users | peak |");
        println!("|---|---:|---:|---:|---:|");
        for (n, node) in nodes.iter().enumerate() {
            let what = if n == 0 { "coordinator's" } else { "other" };
            println!(
                "| {} ({what}) | {:.0} | {:.0} | {:.0} | {:.0} |",
                node.grpc,
                mib(at_start[n]),
                mib(after_placement[n]),
                mib(after_users[n].0),
                mib(after_users[n].1)
            );
        }
        for node in &nodes {
            node.terminate();
        }
        for node in &mut nodes {
            let _ = node.exited(Duration::from_secs(60)).await;
        }
    });
}
