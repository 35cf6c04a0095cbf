//! The restore part: how long a process started on an empty disk takes
//! before its partitions flow again, when their state is a changelog of
//! many users, and what one process holds in memory once it has handled
//! them all.

use crate::figures::spread;
use crate::support::env;
use crate::systems::{Instance, System};
use crate::{create_topic, placement, tag, until_observed};
use colo_tests::broker::Broker;
use colo_tests::purchases::Producer;
use std::path::Path;
use std::time::{Duration, Instant};

/// Records per partition produced for the process on an empty disk: its
/// partitions flow again once it has handled them all.
const LATE_PER_PARTITION: u64 = 50;

/// Whether `system` keeps its state anywhere but in memory.
fn durable(system: System) -> bool {
    !matches!(system, System::ColoInMemory | System::Pekko)
}

/// Users with at least one record, from `colo produce --expected`.
fn users_with_records(expected: &Path) -> u64 {
    let text = std::fs::read_to_string(expected).expect("expected totals");
    let expected: serde_json::Value = serde_json::from_str(&text).expect("expected JSON");
    expected["users"].as_object().map_or(0, |u| u.len() as u64)
}

/// One run's figures.
struct Run {
    /// Start of the process on an empty disk to its last late record
    /// handled, in seconds; `None` for a system whose state is in memory
    /// (nothing to restore).
    flowing: Option<f64>,
    /// Resident memory of the process that handled every user, once it
    /// had, in bytes.
    resident: f64,
}

/// One process handles records of `COLO_BENCH_RESTORE_USERS` users (three
/// a user, so that about 95% of them have one), its resident memory is
/// read, and it stops gracefully, its state committed; then, for a system
/// that keeps its state on disk, a few records more are produced to every
/// partition, and a process of the same group starts on an empty disk:
/// the time until it has handled them is the time until its partitions
/// flow again, its state restored first (Kafka Streams restores a task's
/// store before it processes the task's records; colo restores a shard
/// before it starts).
pub async fn restore(broker: &Broker, systems: &[System], dir: &Path) {
    let users = env("COLO_BENCH_RESTORE_USERS", 1_000_000);
    let runs = env("COLO_BENCH_RUNS", 3);
    let records = users * 3;
    let topic = format!("peers-{}.restore", std::process::id());
    create_topic(broker.bootstrap(), &topic).await;
    let producer = Producer::start(dir, broker.bootstrap(), &topic, users, records, None);
    let expected = producer.expected_file();
    producer.finished(Duration::from_secs(1800)).await;
    let held = users_with_records(&expected);
    let partitions = u64::from(crate::PARTITIONS);
    println!("restore: {records} records of {held} users ({users} ids), {} partitions; one process handles them and stops, then one on an empty disk takes the partitions with {LATE_PER_PARTITION} records more each; median of {runs} runs (min–max)", crate::PARTITIONS);
    println!("| system | empty disk to partitions flowing, s | users restored per s | resident MiB with every user handled | resident bytes per user |");
    println!("|---|---:|---:|---:|---:|");
    for &system in systems {
        let mut figures = Vec::new();
        for run in 1..=runs {
            let group = format!("peers-{}-r{}-{run}", std::process::id(), tag(system));
            let at = placement(broker, &topic, group);
            let mut first = Instance::start(system, &at, 0, None);
            until_observed(
                &first,
                "every record handled",
                Duration::from_secs(1800),
                |o| o.handled >= records as f64,
            )
            .await;
            let resident = first.resident() as f64;
            first.terminate();
            let deadline = Instant::now() + Duration::from_secs(120);
            while !first.exited() && Instant::now() < deadline {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            assert!(first.exited(), "{} did not stop", system.name());
            if !durable(system) {
                figures.push(Run {
                    flowing: None,
                    resident,
                });
                continue;
            }
            let late = LATE_PER_PARTITION * partitions;
            let prefix = format!("late-{run}-");
            Producer::start_for(&prefix, dir, broker.bootstrap(), &topic, late, late, None)
                .finished(Duration::from_secs(120))
                .await;
            let started = Instant::now();
            let second = Instance::start(system, &at, 1, None);
            until_observed(
                &second,
                "the late records handled",
                Duration::from_secs(1800),
                |o| o.handled >= late as f64,
            )
            .await;
            figures.push(Run {
                flowing: Some(started.elapsed().as_secs_f64()),
                resident,
            });
        }
        let flowing: Vec<f64> = figures.iter().filter_map(|r| r.flowing).collect();
        let rate: Vec<f64> = flowing.iter().map(|s| held as f64 / s).collect();
        let (flowing, rate) = if flowing.is_empty() {
            ("in memory: nothing to restore".to_string(), "-".to_string())
        } else {
            (spread(&flowing, 2), spread(&rate, 0))
        };
        let mib: Vec<f64> = figures
            .iter()
            .map(|r| r.resident / (1 << 20) as f64)
            .collect();
        let per_user: Vec<f64> = figures.iter().map(|r| r.resident / held as f64).collect();
        println!(
            "| {} | {} | {} | {} | {} |",
            system.name(),
            flowing,
            rate,
            spread(&mib, 0),
            spread(&per_user, 0)
        );
    }
}
