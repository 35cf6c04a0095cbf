//! The moves part: at a paced rate, one more process joins the others and
//! leaves them (SIGTERM), `COLO_BENCH_CYCLES` times a run. For every moved
//! partition, the pause from its last record handled on the old owner to
//! its first on the new one; how long the leaving process took to exit
//! once told to stop; records handled twice.
//!
//! `COLO_BENCH_NODES` (2) is how many processes run once the joiner is in:
//! 2 is the peers' pair; 4 has a fourth node join three and leave them.

use crate::figures::{percentile, spread};
use crate::support::env;
use crate::systems::{answering, Instance, Observed, System};
use crate::{
    create_topic, end_offsets, now, observe, observed_within, paced, placement, settled, tag,
    until_observed, PARTITIONS,
};
use colo_tests::broker::Broker;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// Each partition's last record handled by any of `seen`.
fn lasts(seen: &[Observed]) -> BTreeMap<i32, f64> {
    let mut lasts = BTreeMap::new();
    for one in seen {
        for (p, t) in &one.last {
            let last = lasts.entry(*p).or_insert(*t);
            *last = t.max(*last);
        }
    }
    lasts
}

/// The pauses of the partitions `to` took after `since`: from their last
/// record on the others to their first on `to`.
fn pauses(from: &BTreeMap<i32, f64>, to: &Observed, since: f64) -> Vec<f64> {
    to.first
        .iter()
        .filter(|(_, first)| **first > since)
        .filter_map(|(p, first)| Some((first - from.get(p)?).max(0.0)))
        .collect()
}

/// When each of `partitions` first had a record handled after `since` by
/// one of `instances`, the earliest if two did, waited for up to
/// `deadline`; `None` if one did not flow by then. A partition assigned
/// there again reports its first record exactly; one held all along
/// (Pekko's consumer may keep a partition whose entities lived on the
/// leaving node) is seen by its last record moving past `since`, to
/// within the reading interval.
async fn taken_back(
    instances: &[Instance],
    partitions: &[i32],
    since: f64,
    deadline: Duration,
) -> Option<BTreeMap<i32, f64>> {
    let end = Instant::now() + deadline;
    let mut taken = BTreeMap::new();
    while taken.len() < partitions.len() {
        for instance in instances {
            let seen = observe(instance).await;
            let after = |t: Option<&f64>| t.copied().filter(|t| *t > since);
            for p in partitions {
                if let Some(at) = after(seen.first.get(p)).or(after(seen.last.get(p))) {
                    let earliest = taken.entry(*p).or_insert(at);
                    *earliest = at.min(*earliest);
                }
            }
        }
        if Instant::now() >= end {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Some(taken)
}

pub async fn moves(broker: &Broker, systems: &[System], dir: &std::path::Path) {
    let rate = env("COLO_BENCH_RATE", 20_000);
    let users = env("COLO_BENCH_USERS", 10_000);
    let runs = env("COLO_BENCH_RUNS", 3);
    let cycles = env("COLO_BENCH_CYCLES", 3);
    let nodes = env("COLO_BENCH_NODES", 2).max(2) as usize;
    let hold = Duration::from_secs(env("COLO_BENCH_HOLD_S", 5));
    let join_wait = Duration::from_secs(env("COLO_BENCH_JOIN_WAIT_S", 60));
    println!("moves: {rate} records/s of {users} users, {PARTITIONS} partitions; process {nodes} joins the others and leaves (SIGTERM) {cycles} times, {runs} runs; each moved partition's pause, last record on the old owner to first on the new; the leaving process's exit, SIGTERM to exit");
    println!("| system | joins: pause p50 ms | p99 ms | max ms | leaves: pause p50 ms | p99 ms | max ms | leaving process exits after, p50 ms | max ms | records handled twice per run | joins that moved nothing within {}s |", join_wait.as_secs());
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for &system in systems {
        let (mut joins, mut leaves, mut exits, mut twice) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        let (mut idle_joins, mut killed) = (0, 0);
        for run in 1..=runs {
            let name = format!("peers-{}-m{}-{run}", std::process::id(), tag(system));
            let topic = format!("{name}.purchases");
            create_topic(broker.bootstrap(), &topic).await;
            let at = placement(broker, &topic, name);
            let mut others = vec![Instance::start(system, &at, 0, None)];
            answering(&mut others[0], Duration::from_secs(90)).await;
            for n in 1..nodes - 1 {
                let mut other = Instance::start(system, &at, n, Some(&others[0]));
                answering(&mut other, Duration::from_secs(90)).await;
                others.push(other);
            }
            // Long enough for every cycle, however slow each move is; the
            // producer stops when the run ends.
            let producer = paced(dir, broker, &at.topic, users, rate);
            for other in &others {
                until_observed(other, "a record handled", Duration::from_secs(120), |o| {
                    o.handled > 0.0
                })
                .await;
            }
            tokio::time::sleep(hold).await;
            let mut gone_handled = 0.0;
            for _ in 0..cycles {
                let joined_at = now();
                let mut b = Instance::start(system, &at, nodes - 1, Some(&others[0]));
                // Kafka Streams moves an active task to a joiner only once
                // its warm-up copy has caught up (a probing rebalance, every
                // 10 min by default): a join that moves nothing within
                // `COLO_BENCH_JOIN_WAIT_S` (a minute) is counted as such.
                let taken =
                    observed_within(&b, join_wait, |o| o.first.values().any(|t| *t > joined_at))
                        .await;
                if taken.is_none() {
                    idle_joins += 1;
                }
                tokio::time::sleep(hold).await;
                let mut seen = Vec::new();
                for other in &others {
                    seen.push(observe(other).await);
                }
                joins.extend(pauses(&lasts(&seen), &observe(&b).await, joined_at));
                // Leaving: read until it exits, the last reading kept.
                let mut last_b = observe(&b).await;
                let left_at = now();
                let told = Instant::now();
                b.terminate();
                let deadline = told + Duration::from_secs(120);
                while !b.exited() && Instant::now() < deadline {
                    if let Some(seen) = b.observe().await {
                        last_b = seen;
                    }
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                exits.push(told.elapsed().as_secs_f64());
                if !b.exited() {
                    killed += 1;
                }
                b.kill();
                gone_handled += last_b.handled;
                let held: Vec<i32> = last_b.last.keys().copied().collect();
                let Some(back) =
                    taken_back(&others, &held, left_at, Duration::from_secs(180)).await
                else {
                    panic!(
                        "{}: partitions not taken back after a leave:\n{}",
                        system.name(),
                        others[0].log()
                    );
                };
                leaves.extend(
                    back.iter()
                        .filter_map(|(p, t)| Some((t - last_b.last.get(p)?).max(0.0))),
                );
                tokio::time::sleep(hold).await;
            }
            // Records handled twice: everything handled, less what was
            // produced, once the producer has stopped and all is handled.
            producer.stopped(Duration::from_secs(120)).await;
            let produced = end_offsets(broker.bootstrap(), &at.topic);
            let handled = settled(&others, gone_handled, produced).await;
            twice.push(handled + gone_handled - produced as f64);
        }
        let ms = |values: &[f64], p: f64| {
            let v = percentile(values, p) * 1e3;
            if v.is_nan() {
                "-".to_string()
            } else {
                format!("{v:.0}")
            }
        };
        println!(
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {idle_joins} of {} |",
            system.name(),
            ms(&joins, 0.5),
            ms(&joins, 0.99),
            ms(&joins, 1.0),
            ms(&leaves, 0.5),
            ms(&leaves, 0.99),
            ms(&leaves, 1.0),
            ms(&exits, 0.5),
            match killed {
                0 => ms(&exits, 1.0),
                n => format!("{} ({n} killed, not exited)", ms(&exits, 1.0)),
            },
            // The bare consumer's count misses what its leaving process
            // read after the bench's last look at it.
            if system == System::Bare {
                "–".to_string()
            } else {
                spread(&twice, 0)
            },
            runs * cycles
        );
    }
}
