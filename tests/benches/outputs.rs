//! The cost of an output record per record, against Apache Kafka (the
//! test broker on loopback): one node of the sample's users, durable, each
//! purchase emitting a receipt (`users_with_receipts`: kept with the
//! change, sent by the idempotent producer once it is durable, dropped
//! from the record by the next write), next to the same program emitting
//! nothing (`COLO_RECEIPTS=0`), in one run, the two alternating: records
//! per second from the first record handled to the last (with receipts,
//! to the last receipt sent), and the CPU seconds each node used per
//! million records. Each run's receipts are
//! then read back with read_committed: one per purchase, under as many
//! ids, the copies sent under the same id counted.
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
use support::{env, through, through_all, Rate, HANDLED};

const PARTITIONS: u32 = 12;

fn node_sets(bootstrap: &str, topic: &str, cluster: &str) -> Vec<String> {
    vec![
        r#"node.entity_types=["user"]"#.to_string(),
        format!("sharding.number_of_shards={PARTITIONS}"),
        format!(r#"kafka.bootstrap_servers="{bootstrap}""#),
        format!(r#"kafka.cluster="{cluster}""#),
        format!(r#"kafka.topics.user=["{topic}"]"#),
        "kafka.create_topics=true".to_string(),
        r#"log.level="warn""#.to_string(),
    ]
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
        println!("| run | durable users, no output, records/s | a receipt per record, records/s | with/without | CPU s per million records: without | with | receipts read (under as many ids) |");
        println!("|---|---:|---:|---:|---:|---:|---|");
        let mut ratios = Vec::new();
        for run in 1..=env("COLO_BENCH_RUNS", 3) {
            let bootstrap = broker.bootstrap();
            let plain = format!("bench-plain-{run}-{}", std::process::id());
            let without: Rate = through(NONE, &node_sets(bootstrap, &topic, &plain), records).await;
            let emitting = format!("bench-receipts-{run}-{}", std::process::id());
            // Until every receipt is sent, too.
            let sent = ("colo_outputs_sent_total{", "");
            let with: Rate = through_all(
                RECEIPTS,
                &node_sets(bootstrap, &topic, &emitting),
                records,
                &[HANDLED, sent],
            )
            .await;
            let (b, c) = (bootstrap.to_string(), emitting.clone());
            let read = tokio::task::spawn_blocking(move || receipts(&b, &c))
                .await
                .expect("read thread");
            let ratio = with.records_per_second / without.records_per_second;
            ratios.push(ratio);
            println!(
                "| {run} | {:.0} | {:.0} | {ratio:.2} | {:.2} | {:.2} | {} ({}) |",
                without.records_per_second,
                with.records_per_second,
                without.cpu_per_million,
                with.cpu_per_million,
                read.0,
                read.1
            );
            assert_eq!(read.1 as u64, records, "a receipt per purchase, each id once");
        }
        ratios.sort_by(f64::total_cmp);
        println!("median ratio with/without: {:.2}", ratios[ratios.len() / 2]);
    });
}
