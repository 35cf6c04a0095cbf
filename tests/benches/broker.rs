//! The test broker itself: how long Apache Kafka (one KRaft process,
//! broker and controller, as `tests/src/broker.rs` starts it for every
//! Kafka test) takes from nothing to answering metadata with its
//! transaction coordinator loaded, in two parts (formatting its log
//! directory, then starting), and its resident memory a few seconds after.
//! What each Kafka test pays before it starts, and what two tests running
//! side by side hold.
//!
//! Then the three-broker cluster of the broker-fault tests
//! (`tests/src/broker_cluster.rs`): from nothing to all three listed in a
//! metadata answer with the transaction coordinator loaded, and the three
//! processes' resident memory, together, a few seconds after.
//!
//! `COLO_BENCH_RUNS` (default 5) brokers, one after the other, then
//! `COLO_BENCH_CLUSTER_RUNS` (default 3) clusters.

mod support;

use colo_tests::broker::Broker;
use colo_tests::broker_cluster::{BrokerCluster, BROKER_IDS};
use std::time::{Duration, Instant};
use support::env;

/// Resident memory of a process, in MiB.
fn resident_mib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()?;
    Some(kib / 1024)
}

fn main() {
    single_brokers(env("COLO_BENCH_RUNS", 5));
    clusters(env("COLO_BENCH_CLUSTER_RUNS", 3));
}

/// The median of `values`, which are not empty.
fn median<T: Ord + Copy>(values: &mut [T]) -> T {
    values.sort_unstable();
    values[values.len() / 2]
}

fn single_brokers(runs: u64) {
    println!("| run | format, s | start to ready, s | total, s | resident after 5 s, MiB |");
    println!("|---:|---:|---:|---:|---:|");
    let mut totals = Vec::new();
    let mut residents = Vec::new();
    for run in 1..=runs {
        let started = Instant::now();
        let broker = Broker::start_own();
        let total = started.elapsed();
        let format = broker.formatted_in();
        // The broker's steady size once its start's allocations settle.
        std::thread::sleep(Duration::from_secs(5));
        let resident = broker.pid().and_then(resident_mib).unwrap_or(0);
        println!(
            "| {run} | {:.2} | {:.2} | {:.2} | {resident} |",
            format.as_secs_f64(),
            (total - format).as_secs_f64(),
            total.as_secs_f64()
        );
        totals.push(total);
        residents.push(resident);
    }
    println!(
        "median start {:.2} s, median resident {} MiB over {runs} brokers",
        median(&mut totals).as_secs_f64(),
        median(&mut residents)
    );
}

fn clusters(runs: u64) {
    if runs == 0 {
        return;
    }
    println!();
    println!("| cluster run | start to ready, s | resident after 5 s, MiB (three brokers) |");
    println!("|---:|---:|---:|");
    let mut totals = Vec::new();
    let mut residents = Vec::new();
    for run in 1..=runs {
        let cluster = BrokerCluster::start();
        let total = cluster.started_in();
        std::thread::sleep(Duration::from_secs(5));
        let resident: u64 = BROKER_IDS
            .iter()
            .filter_map(|&id| cluster.pid(id).and_then(resident_mib))
            .sum();
        println!("| {run} | {:.2} | {resident} |", total.as_secs_f64());
        totals.push(total);
        residents.push(resident);
    }
    println!(
        "median cluster start {:.2} s, median resident {} MiB over {runs} clusters of three brokers",
        median(&mut totals).as_secs_f64(),
        median(&mut residents)
    );
}
