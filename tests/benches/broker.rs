//! The test broker itself: how long Apache Kafka (one KRaft process,
//! broker and controller, as `tests/src/broker.rs` starts it for every
//! Kafka test) takes from nothing to answering metadata with its
//! transaction coordinator loaded, in two parts (formatting its log
//! directory, then starting), and its resident memory a few seconds after.
//! What each Kafka test pays before it starts, and what two tests running
//! side by side hold.
//!
//! `COLO_BENCH_RUNS` (default 5) brokers, one after the other.

mod support;

use colo_tests::broker::Broker;
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
    let runs = env("COLO_BENCH_RUNS", 5);
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
    totals.sort();
    residents.sort_unstable();
    println!(
        "median start {:.2} s, median resident {} MiB over {runs} brokers",
        totals[totals.len() / 2].as_secs_f64(),
        residents[residents.len() / 2]
    );
}
