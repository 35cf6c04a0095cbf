//! A coordinator's state read back from the cluster's coordinator topic:
//! `COLO_BENCH_EVENTS` coordinator events (default 20000; BENCHMARKS.md
//! has 1000000) written through the store by one coordinator, each awaited
//! before the next as a coordinator does (a snapshot every 4,096 events,
//! tombstones for what each covers); then a new coordinator starts, timed
//! until its state is read. The topic is on the test broker (Apache
//! Kafka, its segments rolled and cleaned every second, on loopback);
//! the recovery is timed after the broker has compacted it. The baseline,
//! in the same run: a bare read of the whole partition as it is then.
//!
//! The events: 10 regions registering, then shards of 1,024 placed, moved
//! and handed off in turn, as a long-lived cluster's coordinator writes
//! them.
//!
//! `cargo bench -p colo --bench coordinator_recovery`

mod support;

use colo::allocation::{RegionId, ShardId};
use colo::coordinator::ledger::{CoordinatorEvent, CoordinatorState};
use colo::coordinator::store::CoordinatorStore;
use colo::kafka::KafkaCoordinatorStore;
use colo_connectors::Changelog;
use colo_tests::broker::Broker;
use std::ops::ControlFlow;
use std::sync::Arc;
use std::time::{Duration, Instant};
use support::env;

const SHARDS: u32 = 1024;
const REGIONS: u32 = 10;
const TIMEOUT: Duration = Duration::from_secs(30);
/// How often the broker rolls the topic's segments and runs its cleaner.
const ROLL: Duration = Duration::from_secs(1);

/// The `n`-th event of a long-lived coordinator's history.
fn event(n: u64) -> CoordinatorEvent {
    let region = |r: u64| RegionId::new(format!("10.0.0.{}:7001", r % u64::from(REGIONS)));
    if n < u64::from(REGIONS) {
        return CoordinatorEvent::RegionRegistered { region: region(n) };
    }
    let step = n - u64::from(REGIONS);
    let shard = ShardId(u32::try_from(step / 2 % u64::from(SHARDS)).unwrap_or(0));
    if step.is_multiple_of(2) {
        CoordinatorEvent::ShardHomeAllocated {
            shard,
            region: region(step / 2 / u64::from(SHARDS) + u64::from(shard.0)),
        }
    } else {
        CoordinatorEvent::ShardHomeDeallocated { shard }
    }
}

/// Records in the partition now: all, and those with a value.
fn records_in(log: &Changelog) -> (u64, u64) {
    let mut values = 0;
    let all = log
        .read(0, None, i64::MAX, &mut |r| {
            values += u64::from(r.value.is_some());
            ControlFlow::Continue(())
        })
        .expect("read");
    (all, values)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let events = env("COLO_BENCH_EVENTS", 20_000);
    let broker = Broker::start_compacting(&humantime::format_duration(ROLL).to_string());
    let topic = format!("bench-{}.coordinator", std::process::id());
    colo_tests::kafka::create_compacted(broker.bootstrap(), &topic, 1).await;
    let log =
        Arc::new(Changelog::unbatched(broker.bootstrap(), &[], &topic, TIMEOUT).expect("log"));

    let writer = KafkaCoordinatorStore::new(log.clone(), "user", 1);
    writer.load().await.expect("loaded");
    let started = Instant::now();
    let mut paused = Duration::ZERO;
    for n in 0..events {
        if n + 1 == events && n > 0 {
            // Kafka never cleans the segment it writes to, and rolls it
            // only on a write once `ROLL` has passed: the last event,
            // written after a pause, leaves every other record in
            // segments the cleaner takes.
            let pause = Instant::now();
            tokio::time::sleep(ROLL * 2).await;
            paused = pause.elapsed();
        }
        writer.persist(event(n)).await.expect("persisted");
    }
    let wrote = started.elapsed() - paused;
    let expected = CoordinatorState::replay((0..events).map(event)).expect("replays");

    // Compacted: what is left is the epoch record, the last snapshot and
    // one record per event slot (2 × 4,096), a tombstone in the slots
    // before the snapshot; with a value, the epoch record, the snapshot and
    // the events after it. The last event's record, in the segment the
    // broker does not clean, may keep its slot's older record beside it.
    let (left, live) = (2 * 4096 + 3, events % 4096 + 4);
    let count = || {
        let reader = log.clone();
        async move {
            tokio::task::spawn_blocking(move || records_in(&reader))
                .await
                .expect("reader")
        }
    };
    let compacted = colo_tests::wait::held_within(Duration::from_secs(300), || async {
        let (all, values) = count().await;
        all <= left && values <= live
    })
    .await;
    assert!(
        compacted,
        "the broker did not compact the topic within 5 minutes: {:?} records (with a value)",
        count().await
    );
    let (all, values) = count().await;

    let started = Instant::now();
    let reader = KafkaCoordinatorStore::new(log.clone(), "user", 2);
    let state = CoordinatorState::replay(reader.load().await.expect("loaded")).expect("replays");
    let recovery = started.elapsed();
    assert_eq!(state, expected, "the state read back differs");
    let bare_log = log.clone();
    let started = Instant::now();
    tokio::task::spawn_blocking(move || records_in(&bare_log))
        .await
        .expect("bare read");
    let bare = started.elapsed();

    println!("coordinator recovery: {events} events of {REGIONS} regions and {SHARDS} shards, a snapshot every 4096");
    println!(
        "written at {:.0} events/s ({:.1} s); after compaction {all} records in the partition, {values} with a value",
        events as f64 / wrote.as_secs_f64(),
        wrote.as_secs_f64()
    );
    println!("| events | records after compaction | with a value | recovery | bare read of the partition |");
    println!("|---:|---:|---:|---:|---:|");
    println!(
        "| {events} | {all} | {values} | {:.3} s | {:.3} s |",
        recovery.as_secs_f64(),
        bare.as_secs_f64(),
    );
}
