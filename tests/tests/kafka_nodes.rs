//! `colo run` nodes driven by Kafka, against Apache Kafka
//! (on loopback): the sample's purchase events produced by `colo
//! produce`, consumed by the user entity type's group; nodes join, stop
//! gracefully, are killed and restarted while records flow. What each node
//! handled is read from its log (one debug line per purchase, with the
//! user's sequence number), so the guarantees are checked per user.

use colo_tests::broker::Broker;
use colo_tests::lifecycle::Lifecycle;
use colo_tests::purchases::{
    at_least_once_in_order_problems, exactly_once_problems, handled, verify, Producer,
};
use colo_tests::user_nodes::*;
use colo_tests::{http, wait};
use std::time::Duration;

/// Graceful changes only (a node joins, one stops on SIGTERM) while
/// records flow: every purchase is handled exactly once, in order; no user
/// lives on two nodes at once; records are handled where they were
/// consumed, never forwarded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_graceful_changes_every_record_is_handled_exactly_once_in_order() {
    let broker = Broker::start();
    let dir = tempfile::tempdir().expect("dir");
    let (topic, cluster) = unique("graceful");
    let sets = kafka_sets(broker.bootstrap(), &topic, &cluster);
    let a = start(None, &sets);
    a.await_ready(READY).await;
    let b = start(Some(&a.grpc), &sets);
    b.await_ready(READY).await;
    // Twenty seconds of records: a joiner on a busy machine still gets
    // some, which its operator metrics below need.
    let producer = Producer::start(dir.path(), broker.bootstrap(), &topic, 40, 6000, Some(300));
    await_hosting(&a).await;
    await_hosting(&b).await;
    assert_group_protocol(&broker, &format!("{cluster}.user"));

    let c = start(Some(&a.grpc), &sets);
    c.await_ready(READY).await;
    await_hosting(&c).await;
    // The joiner handles records of its own before the other node leaves:
    // the join is a change under load, not after it.
    wait::until("the joiner handles a record", READY, || async {
        metric(&c, "colo_kafka_records_total{").await > 0.0
    })
    .await;
    let b_forwarded = metric(&b, "colo_messages_forwarded_total").await;
    b.terminate();
    let mut b = b;
    assert!(
        b.exited(Duration::from_secs(60)).await.success(),
        "{}",
        b.logs()
    );

    let expected = producer.finished(Duration::from_secs(60)).await;
    await_all_handled(&[&a, &b, &c], &expected).await;
    // Also where a broker assigns a partition to a joiner before its
    // owner revoked it: the joiner waits for the shard, which comes once
    // the owner committed and released it.
    let problems = exactly_once_problems(&handled(&[&a, &b, &c]), &expected);
    assert!(
        problems.is_empty(),
        "{problems:#?}\n{}",
        kafka_logs(&[&a, &b, &c])
    );
    let overlaps = Lifecycle::read(&[&a, &b, &c], "user").overlaps();
    assert!(overlaps.is_empty(), "{overlaps:#?}");
    // Shard = partition, and a partition is consumed only once its shard is
    // hosted, and released only after its records are handled.
    let forwarded = b_forwarded
        + metric(&a, "colo_messages_forwarded_total").await
        + metric(&c, "colo_messages_forwarded_total").await;
    assert_eq!(forwarded, 0.0, "records were forwarded between nodes");

    // What an operator watches: every record handled, commits answered,
    // lag back to zero, how long a partition took from its assignment to
    // its first record, and the group's rebalances.
    let handled_total = metric(&a, "colo_kafka_records_total{").await
        + metric(&c, "colo_kafka_records_total{").await;
    assert!(handled_total > 0.0);
    for node in [&a, &c] {
        // The lag comes with librdkafka's next statistics, maybe a moment
        // after a node's last record: awaited, not assumed.
        let body = wait::until_ok(READY, || async {
            let (_, body) = http::get(&node.admin, "/metrics")
                .await
                .map_err(|e| format!("no /metrics on {}: {e:?}", node.grpc))?;
            let missing: Vec<&str> = [
                "colo_kafka_records_total",
                "colo_kafka_consumer_lag",
                "colo_kafka_records_in_flight",
                "colo_kafka_partition_paused",
                "colo_kafka_commits_total",
                "colo_kafka_assignment_to_first_record_seconds",
                "colo_kafka_rebalances_total",
                "colo_kafka_rebalance_callback_seconds",
                "colo_kafka_partitioner_mismatches_total",
            ]
            .into_iter()
            .filter(|family| !body.contains(&format!("# HELP {family} ")))
            .collect();
            if missing.is_empty() {
                Ok(body)
            } else {
                Err(format!("no {missing:?} on {}:\n{body}", node.grpc))
            }
        })
        .await;
        // A revoke's commit is waited for and timed: a gave partitions up.
        if node.grpc == a.grpc {
            assert!(
                body.contains("# HELP colo_kafka_commit_latency_seconds "),
                "no commit latency on a:\n{body}"
            );
            // And each step of that revoke, timed.
            for step in ["settle", "commit", "release"] {
                let label = format!("step=\"{step}\"");
                assert!(
                    body.lines().any(|line| line
                        .starts_with("colo_kafka_revoke_step_seconds_count{")
                        && line.contains(&label)),
                    "no {step} step timed on a:\n{body}"
                );
            }
        }
        // Records of a durable entity type are committed once their state
        // is written (every state.flush_interval): waited for, not assumed.
        wait::until(&format!("a commit on {}", node.grpc), READY, || async {
            metric(node, "colo_kafka_commits_total{").await >= 1.0
        })
        .await;
    }
    wait::until("the lag is back to zero", READY, || async {
        metric(&a, "colo_kafka_consumer_lag{").await == 0.0
            && metric(&c, "colo_kafka_consumer_lag{").await == 0.0
    })
    .await;
}

/// A node killed with SIGKILL while records flow: its partitions go to the
/// other node once the broker notices, which replays from the committed
/// offsets: every purchase is handled at least once, each user's in order
/// (a replay goes back, never skips), no user lives on two nodes at once,
/// and every user's totals count each purchase exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_node_s_records_are_replayed_from_the_committed_offset_never_skipped() {
    let broker = Broker::start();
    let dir = tempfile::tempdir().expect("dir");
    let (topic, cluster) = unique("killed");
    let sets = kafka_sets(broker.bootstrap(), &topic, &cluster);
    let a = start(None, &sets);
    a.await_ready(READY).await;
    let mut b = start(Some(&a.grpc), &sets);
    b.await_ready(READY).await;
    let producer = Producer::start(dir.path(), broker.bootstrap(), &topic, 40, 2500, Some(300));
    await_hosting(&b).await;
    b.kill();
    let killed_at = humantime::format_rfc3339_micros(std::time::SystemTime::now()).to_string();

    let expected_file = producer.expected_file();
    let expected = producer.finished(Duration::from_secs(60)).await;
    await_all_handled(&[&a, &b], &expected).await;
    let problems = at_least_once_in_order_problems(&handled(&[&a, &b]), &expected);
    assert!(problems.is_empty(), "{problems:#?}");
    let mut lifecycle = Lifecycle::read(&[&a, &b], "user");
    lifecycle.killed(&b.grpc, &killed_at);
    let overlaps = lifecycle.overlaps();
    assert!(overlaps.is_empty(), "{overlaps:#?}");
    // The user entity type is durable: what b handled and had not made
    // durable counted nowhere, and a's replay counted it once.
    verify(&expected_file, &a.grpc).await.expect("totals exact");
}

/// The whole cluster stopped and started again resumes from the committed
/// offsets: what was handled before is not handled again, and what was
/// produced meanwhile is; every user's totals (durable) are intact.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_cluster_resumes_from_the_committed_offsets() {
    let broker = Broker::start();
    let dir = tempfile::tempdir().expect("dir");
    let (topic, cluster) = unique("restart");
    let sets = kafka_sets(broker.bootstrap(), &topic, &cluster);
    let mut a = start(None, &sets);
    a.await_ready(READY).await;
    let mut b = start(Some(&a.grpc), &sets);
    b.await_ready(READY).await;
    let before = Producer::start_for(
        "before-",
        dir.path(),
        broker.bootstrap(),
        &topic,
        20,
        800,
        None,
    );
    let before_file = before.expected_file();
    let before = before.finished(Duration::from_secs(60)).await;
    await_all_handled(&[&a, &b], &before).await;
    b.terminate();
    assert!(
        b.exited(Duration::from_secs(60)).await.success(),
        "{}",
        b.logs()
    );
    a.terminate();
    assert!(
        a.exited(Duration::from_secs(60)).await.success(),
        "{}",
        a.logs()
    );

    let after = Producer::start_for(
        "after-",
        dir.path(),
        broker.bootstrap(),
        &topic,
        20,
        800,
        None,
    );
    let after_file = after.expected_file();
    let after = after.finished(Duration::from_secs(60)).await;
    a.restart();
    b.restart();
    a.await_ready(READY).await;
    b.await_ready(READY).await;
    await_all_handled(&[&a, &b], &after).await;
    // Each partition is consumed in order, so had a node started from an
    // earlier offset, the "before" events would show again ahead of these.
    let all = handled(&[&a, &b]);
    for (expected, when) in [(&before, "before"), (&after, "after")] {
        let problems = exactly_once_problems(&all, expected);
        assert!(problems.is_empty(), "{when} the restart: {problems:#?}");
    }
    // The totals of before kept through the restart, the ones after added.
    for file in [&before_file, &after_file] {
        verify(file, &b.grpc).await.expect("totals exact");
    }
}

/// Records `colo run` cannot handle: payloads that are no purchase event,
/// and one user's purchases whose amount overflows (its handler fails each
/// time). They land in the entity type's dead-letter topic with the reason
/// and where they came from; every other record is handled, the partitions
/// go on; records another partitioner placed are handled and counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_records_go_to_the_dead_letter_topic_and_the_rest_is_handled() {
    use prost::Message as _;
    use rdkafka::producer::{BaseProducer, BaseRecord, Producer as _};

    let broker = Broker::start();
    let dir = tempfile::tempdir().expect("dir");
    let (topic, cluster) = unique("dead-letters");
    let mut sets = kafka_sets(broker.bootstrap(), &topic, &cluster);
    sets.push("kafka.max_attempts=2".to_string());
    sets.push(r#"kafka.retry_backoff="20ms""#.to_string());
    let a = start(None, &sets);
    a.await_ready(READY).await;

    let bad: BaseProducer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", broker.bootstrap())
        .set("partitioner", "murmur2_random")
        .create()
        .expect("producer");
    for i in 0..5 {
        let payload = format!("not a purchase {i}");
        bad.send(BaseRecord::to(&topic).key("user-0").payload(&payload))
            .expect("queued");
    }
    let overflow = colo_proto::v1::PurchaseEvent {
        user_id: "user-overflow".into(),
        product: "everything".into(),
        quantity: 2,
        price: i64::MAX,
        sequence: 1,
    }
    .encode_to_vec();
    for _ in 0..3 {
        bad.send(
            BaseRecord::to(&topic)
                .key("user-overflow")
                .payload(&overflow),
        )
        .expect("queued");
    }
    bad.flush(Duration::from_secs(10)).expect("flushed");
    // Good records, some placed by librdkafka's default partitioner
    // (CRC32), not Kafka's murmur2 that shards follow.
    let expected = Producer::start(dir.path(), broker.bootstrap(), &topic, 30, 600, None)
        .finished(Duration::from_secs(60))
        .await;
    let elsewhere: BaseProducer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", broker.bootstrap())
        .create()
        .expect("producer");
    for i in 0..30 {
        let user = format!("crc-user-{i}");
        let event = colo_proto::v1::PurchaseEvent {
            user_id: user.clone(),
            product: "tea".into(),
            quantity: 1,
            price: 350,
            sequence: 1,
        }
        .encode_to_vec();
        elsewhere
            .send(BaseRecord::to(&topic).key(&user).payload(&event))
            .expect("queued");
    }
    elsewhere.flush(Duration::from_secs(10)).expect("flushed");

    await_all_handled(&[&a], &expected).await;
    let dlq = format!("{cluster}.user.dlq");
    let letters = colo_tests::kafka::dead_letters(
        broker.bootstrap(),
        &dlq,
        &format!("{cluster}.dlq-reader"),
        |read| read.len() >= 8,
    );
    for letter in &letters {
        assert_eq!(letter.source_topic, topic);
        assert!(letter.source_partition.is_some() && letter.source_offset.is_some());
    }
    let reasons: Vec<(String, String)> = letters.into_iter().map(|l| (l.key, l.reason)).collect();
    let undecodable = reasons
        .iter()
        .filter(|(k, r)| k == "user-0" && r.contains("not a PurchaseEvent"))
        .count();
    let failed = reasons
        .iter()
        .filter(|(k, r)| k == "user-overflow" && r.contains("the handler failed 2 times"))
        .count();
    assert_eq!((undecodable, failed), (5, 3), "{reasons:#?}");
    // The CRC32-placed users were handled, not where Kafka put them but
    // where their shards live, and counted.
    let all = handled(&[&a]);
    let crc_handled = (0..30)
        .filter(|i| all.contains_key(&format!("crc-user-{i}")))
        .count();
    assert_eq!(crc_handled, 30);
    assert!(metric(&a, "colo_kafka_partitioner_mismatches_total{").await > 0.0);
    let (_, body) = http::get(&a.admin, "/metrics").await.expect("metrics");
    let outcome = |outcome: &str| -> f64 {
        body.lines()
            .filter(|l| {
                l.starts_with("colo_kafka_records_total{")
                    && l.contains(&format!("outcome=\"{outcome}\""))
            })
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    };
    assert_eq!(
        (outcome("undecodable"), outcome("handler_failed")),
        (5.0, 3.0)
    );
}

/// A topic whose partition count is not the entity type's number of
/// shards stops `colo run` at startup, naming the topic and both counts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_topic_with_another_partition_count_stops_the_node_naming_it() {
    use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
    let broker = Broker::start();
    let (topic, cluster) = unique("partition-count");
    let admin: AdminClient<rdkafka::client::DefaultClientContext> = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", broker.bootstrap())
        .create()
        .expect("admin");
    let created = admin
        .create_topics(
            &[NewTopic::new(&topic, 3, TopicReplication::Fixed(1))],
            &AdminOptions::new().operation_timeout(Some(Duration::from_secs(10))),
        )
        .await
        .expect("create");
    assert!(created.iter().all(Result::is_ok), "{created:?}");
    let sets = kafka_sets(broker.bootstrap(), &topic, &cluster);
    let mut node = start(None, &sets);
    let status = node.exited(Duration::from_secs(60)).await;
    assert!(!status.success());
    let logs = node.logs();
    assert!(
        logs.contains(&format!(
            "topic \\\"{topic}\\\" has 3 partitions but the entity type has 12 shards"
        )) || logs.contains(&format!(
            "topic \"{topic}\" has 3 partitions but the entity type has 12 shards"
        )),
        "{logs}"
    );
}

/// An entity type fed by two topics: the group may assign the
/// same-numbered partitions of the two to different nodes, and only one
/// of them can host their shard. The other's partition is consumed all the
/// same (its records forwarded to the shard): every purchase of both
/// topics is handled, each user's in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_entity_type_fed_by_two_topics_handles_both_wherever_their_partitions_go() {
    let broker = Broker::start();
    let (first_dir, second_dir) = (
        tempfile::tempdir().expect("dir"),
        tempfile::tempdir().expect("dir"),
    );
    let (topic, cluster) = unique("two-topics");
    let other = topic.replace(".user-events", ".more-user-events");
    let sets: Vec<String> = kafka_sets(broker.bootstrap(), &topic, &cluster)
        .into_iter()
        .map(|set| {
            if set.starts_with("kafka.topics.user=") {
                format!(r#"kafka.topics.user=["{topic}","{other}"]"#)
            } else {
                set
            }
        })
        .collect();
    let a = start(None, &sets);
    a.await_ready(READY).await;
    let b = start(Some(&a.grpc), &sets);
    b.await_ready(READY).await;
    let first = Producer::start_for(
        "first-",
        first_dir.path(),
        broker.bootstrap(),
        &topic,
        20,
        600,
        Some(200),
    );
    let second = Producer::start_for(
        "second-",
        second_dir.path(),
        broker.bootstrap(),
        &other,
        20,
        600,
        Some(200),
    );
    let mut expected = first.finished(Duration::from_secs(60)).await;
    expected.extend(second.finished(Duration::from_secs(60)).await);
    await_all_handled(&[&a, &b], &expected).await;
    let problems = at_least_once_in_order_problems(&handled(&[&a, &b]), &expected);
    assert!(
        problems.is_empty(),
        "{problems:#?}\n{}",
        kafka_logs(&[&a, &b])
    );
}

/// The broker killed and started again while records flow: the nodes and
/// the producer reconnect, and every purchase is handled at least once,
/// each user's in order (nothing skipped).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_broker_restart_mid_load_nothing_is_skipped() {
    let mut broker = Broker::start_durable();
    let dir = tempfile::tempdir().expect("dir");
    let (topic, cluster) = unique("broker-restart");
    let sets = kafka_sets(broker.bootstrap(), &topic, &cluster);
    let a = start(None, &sets);
    a.await_ready(READY).await;
    let b = start(Some(&a.grpc), &sets);
    b.await_ready(READY).await;
    let producer = Producer::start(dir.path(), broker.bootstrap(), &topic, 40, 2400, Some(300));
    await_hosting(&a).await;
    await_hosting(&b).await;
    broker.restart();
    let expected = producer.finished(Duration::from_secs(90)).await;
    await_all_handled(&[&a, &b], &expected).await;
    let problems = at_least_once_in_order_problems(&handled(&[&a, &b]), &expected);
    assert!(
        problems.is_empty(),
        "{problems:#?}\n{}\nbroker:\n{}",
        kafka_logs(&[&a, &b]),
        broker.log()
    );
}

/// The issue's whole sequence while records flow: two nodes, a third
/// joins, one stops on SIGTERM, another is killed with SIGKILL. Every
/// purchase is handled at least once, each user's in order, no user lives
/// on two nodes at once, and every user's totals are exact.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn joins_stops_and_a_kill_while_records_flow_keep_at_least_once_in_order() {
    let broker = Broker::start();
    let dir = tempfile::tempdir().expect("dir");
    let (topic, cluster) = unique("mixed");
    let sets = kafka_sets(broker.bootstrap(), &topic, &cluster);
    let a = start(None, &sets);
    a.await_ready(READY).await;
    let mut b = start(Some(&a.grpc), &sets);
    b.await_ready(READY).await;
    let producer = Producer::start(dir.path(), broker.bootstrap(), &topic, 40, 6000, Some(300));
    await_hosting(&a).await;
    await_hosting(&b).await;
    let mut c = start(Some(&a.grpc), &sets);
    c.await_ready(READY).await;
    await_hosting(&c).await;
    b.terminate();
    assert!(
        b.exited(Duration::from_secs(60)).await.success(),
        "{}",
        b.logs()
    );
    c.kill();
    let killed_at = humantime::format_rfc3339_micros(std::time::SystemTime::now()).to_string();

    let expected_file = producer.expected_file();
    let expected = producer.finished(Duration::from_secs(90)).await;
    await_all_handled(&[&a, &b, &c], &expected).await;
    let problems = at_least_once_in_order_problems(&handled(&[&a, &b, &c]), &expected);
    assert!(
        problems.is_empty(),
        "{problems:#?}\n{}",
        kafka_logs(&[&a, &b, &c])
    );
    let mut lifecycle = Lifecycle::read(&[&a, &b, &c], "user");
    lifecycle.killed(&c.grpc, &killed_at);
    let overlaps = lifecycle.overlaps();
    assert!(overlaps.is_empty(), "{overlaps:#?}");
    verify(&expected_file, &a.grpc).await.expect("totals exact");
}

/// Node b frozen (SIGSTOP) past its session timeout while records flow:
/// the broker gives its partitions to a, which replays them from the
/// committed offsets. When b goes on, its consumer learns the partitions
/// were lost, and what b had in hand (polled before the freeze, or in its
/// entities' mailboxes, or handled and not yet durable) is dropped: b,
/// fenced, writes none of it. Overall each user's events are handled at
/// least once, in order, and every user's totals count each event exactly
/// once. (A node may handle a user's events again from an earlier one,
/// b included once its partitions come back: what it handled before was
/// never made durable, so it never counted.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_session_expiry_the_next_owner_handles_each_user_in_order() {
    let broker = Broker::start();
    let dir = tempfile::tempdir().expect("dir");
    let (topic, cluster) = unique("expired");
    let sets = kafka_sets(broker.bootstrap(), &topic, &cluster);
    let a = start(None, &sets);
    a.await_ready(READY).await;
    // b writes its state behind only every 5 s: it freezes about a second
    // after its first records, so it holds state not durable yet then.
    let mut b_sets = sets.clone();
    b_sets.push(r#"state.flush_interval="5s""#.to_string());
    let b = start(Some(&a.grpc), &b_sets);
    b.await_ready(READY).await;
    let producer = Producer::start(dir.path(), broker.bootstrap(), &topic, 40, 4000, Some(400));
    await_hosting(&a).await;
    await_hosting(&b).await;
    wait::until("b handles records", FIRST_SHARDS, || async {
        handled(&[&b]).values().map(Vec::len).sum::<usize>() > 200
    })
    .await;
    b.pause();
    // The broker expires b's session (6 s) once a heartbeats; a takes b's
    // partitions and, b's region being gone, its shards.
    wait::until("a hosts every shard", FIRST_SHARDS, || async {
        metric(&a, "colo_region_hosted_shards{").await >= 12.0
    })
    .await;
    b.resume();
    let lost = || async { metric(&b, "colo_kafka_partitions_given_up_total{").await };
    wait::until("b learns its partitions were lost", READY, || async {
        lost().await >= 1.0
    })
    .await;

    let expected_file = producer.expected_file();
    let expected = producer.finished(Duration::from_secs(90)).await;
    await_all_handled(&[&a, &b], &expected).await;
    let all = handled(&[&a, &b]);
    let problems = at_least_once_in_order_problems(&all, &expected);
    assert!(
        problems.is_empty(),
        "{problems:#?}\n{}",
        kafka_logs(&[&a, &b])
    );
    // What b held it dropped rather than wrote: its unwritten state, or
    // (when a write had just gone out as it froze) its entities, without
    // running anything, past its lease.
    let logs = b.logs();
    assert!(
        logs.contains("entity state not written")
            || logs.contains("past the region's lease: dropping the shard's entities"),
        "b, fenced when it went on, wrote nothing of what it held:\n{logs}"
    );
    if let Err(mismatch) = verify(&expected_file, &a.grpc).await {
        panic!(
            "totals differ from the events produced: {mismatch}\n{}",
            kafka_logs(&[&a, &b])
        );
    }
}
