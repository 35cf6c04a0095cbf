//! Coordinator failover, with `colo run` processes electing their
//! coordinator through the test broker (Apache Kafka on loopback):
//!
//! three nodes of the built-in counter with `COLO_BENCH_SHARDS` shards
//! (default 1000), most of them placed by telling entities across them;
//! then the node hosting the coordinator is killed (kill -9), and an ask to
//! an entity whose shard was on it is sent through a survivor at once. The
//! failover time is from the kill to that ask's answer: the first newly
//! allocated shard started. Beside it, from the same kill, the time until
//! the survivors agree on a new elected epoch.
//!
//! The baseline, in the same run: the same cluster with a node that does
//! not host the coordinator killed instead, so that the coordinator only
//! has to notice the node is gone and place its shards again.
//!
//! `COLO_BENCH_RUNS` (default 10) clusters of each kind; p50 and p99 are
//! the nearest-rank percentiles of the runs. The nodes use the tests'
//! timings: heartbeats every 200 ms, `fence_timeout` 1.5 s,
//! `region_timeout` 2.5 s; the election group's session timeout 6 s and
//! `election_timeout` 15 s are colo's defaults (`COLO_BENCH_ELECTION_TIMEOUT`
//! sets another, at least twice the session timeout).

mod support;

use colo_tests::broker::Broker;
use colo_tests::process::NodeProcess;
use colo_tests::wait::until_ok;
use std::time::{Duration, Instant};
use support::{env, metric, percentile};

/// How long anything in one run may take before the bench gives up.
const DEADLINE: Duration = Duration::from_secs(120);

fn sets(bootstrap: &str, cluster: &str, shards: u64) -> Vec<String> {
    vec![
        r#"node.entity_types=["counter"]"#.to_string(),
        format!("sharding.number_of_shards={shards}"),
        format!(r#"kafka.bootstrap_servers="{bootstrap}""#),
        format!(r#"kafka.cluster="{cluster}""#),
        r#"coordinator.address="""#.to_string(),
        format!(
            r#"coordinator.election_timeout="{}""#,
            std::env::var("COLO_BENCH_ELECTION_TIMEOUT").unwrap_or_else(|_| "15s".to_string())
        ),
        format!(
            r#"log.level="{}""#,
            if std::env::var_os("COLO_BENCH_ELECTION_LOG").is_some() {
                "info"
            } else {
                "warn"
            }
        ),
    ]
}

/// What one kill measured.
struct Measured {
    /// Kill to the first newly allocated shard's answer.
    first_shard: Duration,
    /// Kill to the survivors agreeing on a new elected epoch (`None`: the
    /// coordinator was not on the killed node).
    elected: Option<Duration>,
}

/// One cluster; kills the node hosting the coordinator, or another.
async fn run(broker: &Broker, cluster: &str, shards: u64, kill_coordinator: bool) -> Measured {
    let sets = sets(broker.bootstrap(), cluster, shards);
    let sets: Vec<&str> = sets.iter().map(String::as_str).collect();
    let mut nodes: Vec<NodeProcess> = (0..3).map(|_| NodeProcess::start(None, &sets)).collect();
    for node in &nodes {
        node.await_ready(DEADLINE).await;
    }
    let mut client = nodes[0].client().await;
    // Enough entities to place nearly every shard.
    for n in 0..shards * 3 {
        colo_tests::client::tell(&mut client, &format!("bench-{n}"), r#"{"Add":1}"#)
            .await
            .expect("tell");
    }
    let host = until_ok(DEADLINE, || async {
        let mut hosts = Vec::new();
        for (at, node) in nodes.iter().enumerate() {
            if metric(node, "colo_coordinator_hosted{", "counter").await == 1.0 {
                hosts.push(at);
            }
        }
        match hosts[..] {
            [one] => Ok(one),
            _ => Err(format!("not one node hosts the coordinator: {hosts:?}")),
        }
    })
    .await;
    let victim_at = if kill_coordinator {
        host
    } else {
        (host + 1) % nodes.len()
    };
    let orphan = until_ok(DEADLINE, || async {
        let on = colo_tests::client::entities_on(&nodes[victim_at], "counter").await;
        on.and_then(|on| on.into_iter().next())
            .ok_or_else(|| "no entity on the node to kill yet".to_string())
    })
    .await;
    let old_epoch = metric(&nodes[victim_at], "colo_coordinator_elected_epoch", "").await;
    let mut victim = nodes.remove(victim_at);
    let mut via = nodes[0].client().await;
    victim.kill();
    let killed = Instant::now();
    // Asked again only when the survivor had sent it to the killed node,
    // which went away before confirming it (at most once: it is not sent
    // again by itself).
    let ask = tokio::spawn(async move {
        loop {
            match colo_tests::client::ask_within(&mut via, &orphan, r#""Get""#, DEADLINE).await {
                Ok(_) => return Ok(killed.elapsed()),
                Err(status) if status.message().contains("went away") => {}
                Err(status) => return Err(status),
            }
        }
    });
    let elected = if kill_coordinator {
        let survivors = &nodes;
        Some(
            until_ok(DEADLINE, || async {
                let mut epochs = Vec::new();
                for node in survivors {
                    epochs.push(metric(node, "colo_coordinator_elected_epoch", "").await);
                }
                if epochs.iter().all(|e| *e > old_epoch && *e == epochs[0]) {
                    Ok(killed.elapsed())
                } else {
                    Err(format!("the survivors know these epochs: {epochs:?}"))
                }
            })
            .await,
        )
    } else {
        None
    };
    let first_shard = ask
        .await
        .expect("ask task")
        .expect("the orphan's ask is answered");
    if std::env::var_os("COLO_BENCH_ELECTION_LOG").is_some() {
        for node in &nodes {
            for line in node.logs().lines().filter(|l| l.contains("election")) {
                println!("{} {line}", node.grpc);
            }
        }
    }
    for node in &nodes {
        node.terminate();
    }
    for node in &mut nodes {
        let _ = node.exited(Duration::from_secs(60)).await;
    }
    Measured {
        first_shard,
        elected,
    }
}

fn report(what: &str, samples: &[Duration]) {
    println!(
        "{what}: p50 {:.2} s, p99 {:.2} s, min {:.2} s, max {:.2} s over {} runs",
        percentile(samples, 50.0).as_secs_f64(),
        percentile(samples, 99.0).as_secs_f64(),
        percentile(samples, 0.0).as_secs_f64(),
        percentile(samples, 100.0).as_secs_f64(),
        samples.len()
    );
}

fn main() {
    let runs = env("COLO_BENCH_RUNS", 10);
    let shards = env("COLO_BENCH_SHARDS", 1000);
    support::runtime().block_on(async {
        let broker = Broker::start();
        let (mut failover, mut elected, mut baseline) = (Vec::new(), Vec::new(), Vec::new());
        for n in 0..runs {
            let id = std::process::id();
            let coordinator = run(&broker, &format!("failover-{id}-{n}"), shards, true).await;
            failover.push(coordinator.first_shard);
            elected.extend(coordinator.elected);
            let other = run(&broker, &format!("baseline-{id}-{n}"), shards, false).await;
            baseline.push(other.first_shard);
            println!(
                "run {}: coordinator's node killed: first new shard {:.2} s (new coordinator elected {:.2} s); another node killed: {:.2} s",
                n + 1,
                coordinator.first_shard.as_secs_f64(),
                coordinator.elected.unwrap_or_default().as_secs_f64(),
                other.first_shard.as_secs_f64()
            );
        }
        println!("3 nodes, {shards} shards, kill -9:");
        report("  coordinator's node: first newly allocated shard", &failover);
        report("  coordinator's node: new coordinator elected", &elected);
        report("  baseline, another node: first newly allocated shard", &baseline);
    });
}
