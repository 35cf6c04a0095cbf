//! The cost of an output record per record, against Apache Kafka (the
//! test broker on loopback): one node of the sample's users, durable, each
//! purchase emitting a receipt (`users_with_receipts`: kept with the
//! change, sent by the idempotent producer once it is durable, dropped
//! from the record by the next write), next to the same program emitting
//! nothing (`COLO_RECEIPTS=0`), and the same receipts sent in the
//! changelog's transactions (`kafka.transactional_outputs`), in one run,
//! the three in turn: records per second from the first record handled
//! to the last (with receipts, to the last receipt sent), and the CPU
//! seconds the node and the broker used per million records. Each run's receipts are
//! then read back with read_committed: one per purchase, under as many
//! ids, the copies sent under the same id counted (in transactions, none
//! may be read twice).
//!
//! `COLO_BENCH_RECORDS` (default 200000) and `COLO_BENCH_USERS` (default
//! 20000) size the run, `COLO_BENCH_RUNS` (default 3) how many times each
//! program is measured.
//!
//! `cargo bench -p colo-tests --bench outputs`

mod support;

use colo_tests::broker::Broker;
use colo_tests::process::Program;
use colo_tests::purchases::Producer;
use std::collections::BTreeSet;
use std::time::Duration;
use support::{cpu_seconds, env, through_all, user_node_sets, Rate, HANDLED};

const PARTITIONS: u32 = 12;

fn node_sets(bootstrap: &str, topic: &str, cluster: &str) -> Vec<String> {
    let mut sets = user_node_sets(bootstrap, topic, cluster, PARTITIONS);
    sets.push(r#"log.level="warn""#.to_string());
    sets
}

const RECEIPTS: Program = Program::Example("users_with_receipts");
const NONE: Program = Program::ExampleWith("users_with_receipts", &[("COLO_RECEIPTS", "0")]);

/// The receipts of `cluster` read back: how many, under how many ids.
fn receipts(bootstrap: &str, cluster: &str) -> (usize, usize) {
    let read = colo_connectors::read_outputs(
        bootstrap,
        &[],
        &format!("{cluster}.user.receipts"),
        "colo-output-id",
        Duration::from_secs(30),
    )
    .expect("the receipts");
    let ids: BTreeSet<&str> = read.iter().filter_map(|r| r.id.as_deref()).collect();
    (read.len(), ids.len())
}

/// The `--set`s of the node sending receipts in transactions.
fn transactional(bootstrap: &str, topic: &str, cluster: &str) -> Vec<String> {
    let mut sets = node_sets(bootstrap, topic, cluster);
    sets.push("kafka.transactional_outputs=true".to_string());
    sets
}

/// Runs `program` with `sets` until `until` counts every record, and the
/// broker's CPU seconds per million records meanwhile (the node's start
/// included: the broker's share of what a node costs, which transactions
/// move there).
async fn measured(
    program: Program,
    sets: &[String],
    records: u64,
    until: &[(&str, &str)],
    broker: Option<u32>,
) -> (Rate, f64) {
    let before = cpu_seconds(broker);
    let rate = through_all(program, sets, records, until).await;
    let broker = (cpu_seconds(broker) - before) * 1e6 / records as f64;
    (rate, broker)
}

/// Runs the receipts' program with `sets` until every receipt is sent,
/// then reads the receipts back.
async fn emitting(
    sets: &[String],
    bootstrap: &str,
    cluster: &str,
    records: u64,
    broker: Option<u32>,
) -> (Rate, f64, (usize, usize)) {
    let sent = ("colo_outputs_sent_total{", "");
    let (rate, broker) = measured(RECEIPTS, sets, records, &[HANDLED, sent], broker).await;
    let (b, c) = (bootstrap.to_string(), cluster.to_string());
    let read = tokio::task::spawn_blocking(move || receipts(&b, &c))
        .await
        .expect("read thread");
    assert_eq!(
        read.1 as u64, records,
        "a receipt per purchase, each id once"
    );
    (rate, broker, read)
}

fn main() {
    support::runtime().block_on(async {
        let broker = Broker::start();
        let records = env("COLO_BENCH_RECORDS", 200_000);
        let users = env("COLO_BENCH_USERS", 20_000);
        let dir = tempfile::tempdir().expect("dir");
        let topic = format!("bench-{}.user-events", std::process::id());
        // A first node creates the topic; the records go in before anyone
        // measures.
        let creator = colo_tests::process::NodeProcess::start_program(
            NONE,
            None,
            &node_sets(broker.bootstrap(), &topic, "bench-creator")
                .iter()
                .map(String::as_str)
                .collect::<Vec<_>>(),
        );
        creator.await_ready(Duration::from_secs(30)).await;
        drop(creator);
        Producer::start(dir.path(), broker.bootstrap(), &topic, users, records, None)
            .finished(Duration::from_secs(600))
            .await;
        println!(
            "outputs: {records} records of {users} users, {PARTITIONS} partitions, one node, Apache Kafka on loopback"
        );
        println!("| run | no output, records/s | at least once, records/s | in transactions, records/s | node CPU s per million records: no output | at least once | in transactions | broker CPU s per million records: no output | at least once | in transactions | receipts read at least once (ids) | in transactions (ids) |");
        println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|");
        let (mut at_least_once, mut in_transactions) = (Vec::new(), Vec::new());
        for run in 1..=env("COLO_BENCH_RUNS", 3) {
            let bootstrap = broker.bootstrap();
            let id = std::process::id();
            let plain = format!("bench-plain-{run}-{id}");
            let pid = broker.pid();
            let (without, broker_without) = measured(
                NONE,
                &node_sets(bootstrap, &topic, &plain),
                records,
                &[HANDLED],
                pid,
            )
            .await;
            let once = format!("bench-receipts-{run}-{id}");
            let sets = node_sets(bootstrap, &topic, &once);
            let (with, broker_with, read) = emitting(&sets, bootstrap, &once, records, pid).await;
            let tx = format!("bench-transactions-{run}-{id}");
            let sets = transactional(bootstrap, &topic, &tx);
            let (tx_rate, broker_tx, tx_read) = emitting(&sets, bootstrap, &tx, records, pid).await;
            assert_eq!(tx_read.0 as u64, records, "in transactions, no receipt read twice");
            at_least_once.push(with.cpu_per_million / without.cpu_per_million);
            in_transactions.push(tx_rate.cpu_per_million / with.cpu_per_million);
            println!(
                "| {run} | {:.0} | {:.0} | {:.0} | {:.2} | {:.2} | {:.2} | {broker_without:.2} | {broker_with:.2} | {broker_tx:.2} | {} ({}) | {} ({}) |",
                without.records_per_second,
                with.records_per_second,
                tx_rate.records_per_second,
                without.cpu_per_million,
                with.cpu_per_million,
                tx_rate.cpu_per_million,
                read.0,
                read.1,
                tx_read.0,
                tx_read.1
            );
        }
        for ratios in [&mut at_least_once, &mut in_transactions] {
            ratios.sort_by(f64::total_cmp);
        }
        println!(
            "median CPU per record: at least once / no output {:.2}; in transactions / at least once {:.2}",
            at_least_once[at_least_once.len() / 2],
            in_transactions[in_transactions.len() / 2]
        );
    });
}
