//! Records from a transactional producer upstream (Kafka Streams, a sink
//! with exactly-once, any producer with a `transactional.id`), interleaved
//! with plain records of the same users: colo reads `read_committed`, so a
//! committed transaction's records are handled once each, an aborted
//! one's never, and each user's records in the order they were written.

use colo::process::samples::purchases::{encode_event, Generator, Purchase, Totals};
use colo_tests::broker::Broker;
use colo_tests::purchases::{at_least_once_in_order_problems, handled, verify};
use colo_tests::user_nodes::*;
use rdkafka::producer::{FutureProducer, FutureRecord, Producer};
use rdkafka::ClientConfig;
use std::collections::BTreeMap;
use std::time::Duration;

const USERS: usize = 12;
const TRANSACTIONS: u64 = 45;
/// Records of each transaction; a plain record follows each of them.
const PER_TRANSACTION: u64 = 8;
/// The sequence numbers of aborted records start here: none may be
/// handled, and a user's own numbers never reach it.
const ABORTED: u64 = 1_000_000;
const WAIT: Duration = Duration::from_secs(30);

/// Writes the test's records to `topic`: transactions, every third one
/// aborted, with a plain record after each transactional one. What the
/// users add up to without the aborted records, and how many those were.
async fn write(bootstrap: &str, topic: &str) -> (Totals, u64) {
    let plain: FutureProducer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("enable.idempotence", "true")
        .create()
        .expect("the plain producer");
    let transactional: FutureProducer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("transactional.id", format!("{topic}.writer"))
        .create()
        .expect("the transactional producer");
    // The transactions' calls block until the broker answers.
    let blocking = |call: &dyn Fn() -> rdkafka::error::KafkaResult<()>, what: &str| {
        tokio::task::block_in_place(call).unwrap_or_else(|e| panic!("{what}: {e}"));
    };
    blocking(
        &|| transactional.init_transactions(WAIT),
        "init_transactions",
    );
    // Each record is in the log before the next is sent, by either
    // producer: a user's records are in the log in their order.
    let send = |producer: &FutureProducer, user: String, purchase: Purchase| {
        let producer = producer.clone();
        let topic = topic.to_string();
        async move {
            let payload = encode_event(&user, &purchase);
            producer
                .send(FutureRecord::to(&topic).key(&user).payload(&payload), WAIT)
                .await
                .expect("written");
        }
    };
    let mut users = Generator::new("user-", USERS, 36);
    let mut aborted = 0;
    for transaction in 0..TRANSACTIONS {
        let aborts = transaction % 3 == 2;
        blocking(&|| transactional.begin_transaction(), "begin_transaction");
        for _ in 0..PER_TRANSACTION {
            if aborts {
                let user = format!("user-{}", aborted % USERS as u64);
                let purchase = Purchase {
                    product: "aborted".to_string(),
                    quantity: 1,
                    price: 1_000_000,
                    sequence: ABORTED + aborted,
                };
                send(&transactional, user, purchase).await;
                aborted += 1;
            } else {
                let (user, purchase) = users.next_event();
                send(&transactional, user, purchase).await;
            }
            let (user, purchase) = users.next_event();
            send(&plain, user, purchase).await;
        }
        if aborts {
            blocking(&|| transactional.abort_transaction(WAIT), "abort");
        } else {
            blocking(&|| transactional.commit_transaction(WAIT), "commit");
        }
    }
    (users.totals().clone(), aborted)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn committed_transactions_are_handled_once_aborted_ones_never_in_order_among_plain_records() {
    let broker = Broker::start();
    let dir = tempfile::tempdir().expect("dir");
    let (topic, cluster) = unique("transactions");
    let sets = kafka_sets(broker.bootstrap(), &topic, &cluster);
    let (a, b) = two_hosting_nodes(&sets).await;

    let (totals, aborted) = write(broker.bootstrap(), &topic).await;
    assert!(aborted > 0);
    let expected_file = dir.path().join("expected.json");
    std::fs::write(
        &expected_file,
        serde_json::to_string_pretty(&totals).expect("totals"),
    )
    .expect("write the expected totals");
    let expected: BTreeMap<String, u64> = totals
        .users
        .iter()
        .map(|(user, stats)| (user.clone(), stats.last_sequence))
        .collect();

    await_all_handled(&[&a, &b], &expected).await;
    let verified = verify(&expected_file, &a.grpc).await;
    assert!(
        verified.is_ok(),
        "the totals count committed and plain records once and aborted ones never: {verified:?}"
    );
    let handled = handled(&[&a, &b]);
    let problems = at_least_once_in_order_problems(&handled, &expected);
    assert!(problems.is_empty(), "{problems:#?}");
    let of_aborts: Vec<_> = handled
        .values()
        .flatten()
        .filter(|h| h.sequence >= ABORTED)
        .collect();
    assert!(
        of_aborts.is_empty(),
        "records of aborted transactions were handled: {of_aborts:#?}"
    );
}
