//! A shard's changelog written in Kafka transactions with its outputs
//! (`kafka.transactional_outputs`), on Apache Kafka: a start of the shard
//! fences the one before, wherever it runs, so the transaction a deposed
//! start had under way is refused, and a reader with `read_committed`
//! sees neither its records nor its outputs. (librdkafka's mock cluster takes a fenced
//! producer's writes, so this runs on the broker of record only.) The
//! whole path, three nodes under faults, is seed 2 of
//! `exactly_once_under_faults`.

use colo_connectors::{read_outputs, Changelog, ChangelogWrite, OutputWrite};
use colo_tests::broker::Broker;
use colo_tests::kafka::create_compacted;
use colo_tests::user_nodes::unique;
use std::ops::ControlFlow;
use std::sync::Arc;
use std::time::Duration;

const TIMEOUT: Duration = Duration::from_secs(30);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_later_start_fences_the_last_ones_transactions_and_their_outputs() {
    let broker = Broker::start();
    let bootstrap = broker.bootstrap().to_string();
    let (_, cluster) = unique("transactions");
    let (changelog, alerts) = (
        format!("{cluster}.tallies.changelog"),
        format!("{cluster}.alerts"),
    );
    create_compacted(&bootstrap, &changelog, 2).await;
    create_compacted(&bootstrap, &alerts, 2).await;
    let log = Arc::new(
        Changelog::new(&bootstrap, &[], &changelog, TIMEOUT)
            .expect("changelog")
            .with_transactions(),
    );
    let output = |value: &'static [u8], id: &'static str| OutputWrite {
        topic: &alerts,
        key: b"a",
        value,
        headers: &[],
        id: ("colo-output-id", id),
    };
    let first = log.transactions(1).await.expect("first start");
    first
        .write(
            &[ChangelogWrite::value(b"e0", b"1")],
            &[output(b"one", "1")],
        )
        .await
        .expect("written");
    // Another node's start: a changelog of its own.
    let other = Changelog::new(&bootstrap, &[], &changelog, TIMEOUT)
        .expect("changelog")
        .with_transactions();
    let second = other.transactions(1).await.expect("second start");
    let refused = first
        .write(
            &[ChangelogWrite::value(b"e1", b"2")],
            &[output(b"two", "2")],
        )
        .await;
    assert!(refused.is_err(), "a fenced start committed: {refused:?}");
    second
        .write(
            &[ChangelogWrite::value(b"e2", b"3")],
            &[output(b"three", "3")],
        )
        .await
        .expect("written by the later start");
    let reader = log.clone();
    let (keys, outputs) = tokio::task::spawn_blocking(move || {
        let mut keys = Vec::new();
        reader
            .read(1, None, i64::MAX, &mut |r| {
                keys.push(String::from_utf8_lossy(r.key).into_owned());
                ControlFlow::Continue(())
            })
            .expect("changelog read");
        let outputs = read_outputs(&bootstrap, &[], &alerts, "colo-output-id", TIMEOUT)
            .expect("outputs read");
        (keys, outputs)
    })
    .await
    .expect("reader");
    assert_eq!(keys, ["e0", "e2"], "the fenced start's record was read");
    let ids: Vec<_> = outputs.iter().filter_map(|o| o.id.clone()).collect();
    assert_eq!(ids, ["1", "3"], "the fenced start's output was read");
}
