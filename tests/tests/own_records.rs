//! Records of one's own through Kafka: `colo produce` sends a file's or a
//! template's records to their keys' murmur2 partitions (the shards), each
//! payload as written, and a program of one's own (the `thermometers`
//! example) decodes them as plain events with `colo::kafka::json_events`
//! and answers queries about them, printed by `colo ask` digit for digit.
//!
//! The broker is librdkafka's in-process mock cluster, listening on
//! loopback in the test process: these tests need a topic with a given
//! partition count, produce and fetch, and one consumer group, which it
//! serves, so they run without the test broker installed.

use colo_tests::client::READY;
use colo_tests::kafka::{java_partition, read_back, ReadBack};
use colo_tests::process::{colo_binary, NodeProcess, Program};
use colo_tests::{http, wait};
use rdkafka::mocking::MockCluster;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

/// `colo` with `args`: whether it succeeded, its stdout and its stderr.
fn colo(args: &[&str], dir: &Path) -> (bool, String, String) {
    let out = Command::new(colo_binary())
        .args(args)
        .current_dir(dir)
        .output()
        .expect("run colo");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A topic name no other test uses.
fn topic(test: &str) -> String {
    format!("{test}-{}", std::process::id())
}

/// Keys with the partitions Kafka's Java client gives them among 128
/// (the vectors `colo-allocation` checks its partitioner against).
const JAVA_PARTITIONS: [(&str, i32); 6] = [
    ("21", 108),
    ("foobar", 62),
    ("a-little-bit-long-string", 32),
    ("a-little-bit-longer-string", 67),
    ("lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", 77),
    ("abc", 27),
];

#[test]
fn produce_sends_a_files_records_to_their_keys_murmur2_partitions_as_written() {
    let kafka = MockCluster::new(1).expect("mock cluster");
    let bootstrap = kafka.bootstrap_servers();
    let topic = topic("own-file");
    kafka.create_topic(&topic, 128, 1).expect("topic");
    let dir = tempfile::tempdir().expect("temporary directory");
    // Both line forms; payloads whose member order and float digits a
    // re-encoding would change.
    let mut lines = Vec::new();
    let mut expected = Vec::new();
    for (i, (key, partition)) in JAVA_PARTITIONS.iter().enumerate() {
        assert_eq!(java_partition(key, 128), *partition, "the oracle is Java's");
        let payload = format!(r#"{{"z": {i}, "celsius": 21.099999999999998, "a": "{key}"}}"#);
        lines.push(if i % 2 == 0 {
            format!(r#"{{"key": "{key}", "value": {payload}}}"#)
        } else {
            format!("{key}\t{payload}")
        });
        expected.push(ReadBack {
            partition: *partition,
            key: key.to_string(),
            payload,
        });
    }
    let file = dir.path().join("records.jsonl");
    std::fs::write(&file, lines.join("\n") + "\n").expect("write records");
    let file = file.display().to_string();

    let (ok, out, err) = colo(
        &[
            "produce",
            "--bootstrap-servers",
            &bootstrap,
            "--topic",
            &topic,
            "--records",
            &file,
        ],
        dir.path(),
    );
    assert!(ok, "{out}\n{err}");
    assert!(out.contains("sent 6 records of 6 keys"), "{out}");
    let mut got = read_back(&bootstrap, &topic, 128, 6);
    got.sort_by_key(|r| r.partition);
    expected.sort_by_key(|r| r.partition);
    assert_eq!(got, expected);

    // Another partitioner would put keys elsewhere: refused, naming it.
    let (ok, _, err) = colo(
        &[
            "produce",
            "--bootstrap-servers",
            &bootstrap,
            "--topic",
            &topic,
            "--records",
            &file,
            "--client",
            "partitioner=consistent_random",
        ],
        dir.path(),
    );
    assert!(!ok);
    assert!(
        err.contains("--client partitioner=consistent_random")
            && err.contains("partitioner=murmur2_random"),
        "{err}"
    );
    // A line that is no record is named, and stops the command.
    let bad = dir.path().join("bad.jsonl");
    std::fs::write(&bad, "a\t1\nsensor-1 21.5\n").expect("write records");
    let (ok, _, err) = colo(
        &[
            "produce",
            "--bootstrap-servers",
            &bootstrap,
            "--topic",
            &topic,
            "--records",
            &bad.display().to_string(),
        ],
        dir.path(),
    );
    assert!(!ok);
    assert!(err.contains("bad.jsonl:2: not a record"), "{err}");
}

#[test]
fn produce_generates_records_from_a_template_keys_going_round() {
    let kafka = MockCluster::new(1).expect("mock cluster");
    let bootstrap = kafka.bootstrap_servers();
    let topic = topic("own-template");
    kafka.create_topic(&topic, 12, 1).expect("topic");
    let dir = tempfile::tempdir().expect("temporary directory");
    let (ok, out, err) = colo(
        &[
            "produce",
            "--bootstrap-servers",
            &bootstrap,
            "--topic",
            &topic,
            "--keys",
            "4",
            "--key-prefix",
            "sensor-",
            "--count",
            "12",
            "--payload",
            r#"{"sensor": "{key}", "n": {number}, "celsius": {seq}.5}"#,
        ],
        dir.path(),
    );
    assert!(ok, "{out}\n{err}");
    assert!(out.contains("sent 12 records of 4 keys"), "{out}");
    let got = read_back(&bootstrap, &topic, 12, 12);
    for key in 0..4 {
        let key = format!("sensor-{key}");
        // A key's records, in its partition's order.
        let payloads: Vec<&str> = got
            .iter()
            .filter(|r| r.key == key)
            .inspect(|r| assert_eq!(r.partition, java_partition(&key, 12), "{r:?}"))
            .map(|r| r.payload.as_str())
            .collect();
        let n = |seq: usize| key[7..].parse::<usize>().expect("key number") + 1 + 4 * (seq - 1);
        let expected: Vec<String> = (1..=3)
            .map(|seq| {
                format!(
                    r#"{{"sensor": "{key}", "n": {}, "celsius": {seq}.5}}"#,
                    n(seq)
                )
            })
            .collect();
        assert_eq!(payloads, expected, "{key}");
    }
}

/// The sample's events go the same way (the flags of own records left the
/// sample's as they were): each user's in the user's murmur2 partition,
/// as many as the written totals say; and another partitioner is refused
/// for them too.
#[test]
fn produce_still_sends_the_samples_events_to_their_users_partitions() {
    let kafka = MockCluster::new(1).expect("mock cluster");
    let bootstrap = kafka.bootstrap_servers();
    let topic = topic("sample");
    kafka.create_topic(&topic, 12, 1).expect("topic");
    let dir = tempfile::tempdir().expect("temporary directory");
    let sample = |extra: &[&str]| {
        let mut args = vec![
            "produce",
            "--bootstrap-servers",
            &bootstrap,
            "--topic",
            &topic,
            "--users",
            "5",
            "--count",
            "40",
            "--expected",
            "expected.json",
        ];
        args.extend_from_slice(extra);
        colo(&args, dir.path())
    };
    let (ok, out, err) = sample(&[]);
    assert!(ok, "{out}\n{err}");
    let expected: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(dir.path().join("expected.json")).expect("expected.json"),
    )
    .expect("JSON");
    assert_eq!(expected["records"], 40, "{expected}");
    for record in read_back(&bootstrap, &topic, 12, 40) {
        assert!(record.key.starts_with("user-"), "{record:?}");
        assert_eq!(
            record.partition,
            java_partition(&record.key, 12),
            "{record:?}"
        );
    }
    let (ok, _, err) = sample(&["--client", "partitioner=consistent_random"]);
    assert!(!ok);
    assert!(err.contains("partitioner=murmur2_random"), "{err}");
}

/// The issue's program: a topic of plain readings feeds an entity that
/// also answers a query; `colo ask` reaches it without `--type` (the node
/// runs one entity type) and prints its average as the node wrote it:
/// 21.099999999999998, which a `serde_json::Value` would print as 21.1.
#[tokio::test]
async fn a_program_of_ones_own_averages_plain_readings_and_ask_prints_every_digit() {
    let kafka = MockCluster::new(1).expect("mock cluster");
    let bootstrap = kafka.bootstrap_servers();
    let topic = topic("readings");
    let cluster = format!("own-{}", std::process::id());
    // The node's config has 12 shards: one partition each.
    kafka.create_topic(&topic, 12, 1).expect("topic");
    kafka
        .create_topic(&format!("{cluster}.thermometer.dlq"), 1, 1)
        .expect("dead-letter topic");
    // The mock cluster takes no CreateTopics: the node finds its
    // coordinator topic made.
    kafka
        .create_topic(&format!("{cluster}.coordinator"), 1, 1)
        .expect("coordinator topic");
    let sets = [
        format!(r#"kafka.bootstrap_servers="{bootstrap}""#),
        format!(r#"kafka.cluster="{cluster}""#),
        format!(r#"kafka.topics.thermometer=["{topic}"]"#),
        r#"kafka.commit_interval="200ms""#.to_string(),
    ];
    let sets: Vec<&str> = sets.iter().map(String::as_str).collect();
    let node = NodeProcess::start_program(Program::Example("thermometers"), None, &sets);
    node.await_ready(READY).await;

    let dir = tempfile::tempdir().expect("temporary directory");
    let file = dir.path().join("readings.jsonl");
    std::fs::write(
        &file,
        "{\"key\": \"sensor-1\", \"value\": {\"celsius\": 20.4}}\n\
         sensor-1\t{\"celsius\": 21.1}\n\
         {\"key\": \"sensor-1\", \"value\": {\"celsius\": 21.8}}\n\
         sensor-2\t{\"celsius\": 19.5}\n",
    )
    .expect("write readings");
    let (ok, out, err) = colo(
        &[
            "produce",
            "--bootstrap-servers",
            &bootstrap,
            "--topic",
            &topic,
            "--records",
            &file.display().to_string(),
        ],
        dir.path(),
    );
    assert!(ok, "{out}\n{err}");

    let shard = java_partition("sensor-1", 12);
    let expected = format!(
        "thermometer/sensor-1 (shard {shard}) replied {{\"readings\":3,\"average\":21.099999999999998}}\n"
    );
    let mut last = (String::new(), String::new());
    let averaged = wait::held_within(Duration::from_secs(60), || {
        let (_, out, err) = colo(
            &["ask", "--addr", &node.grpc, "--id", "sensor-1", "Average"],
            dir.path(),
        );
        let done = out == expected;
        last = (out, err);
        std::future::ready(done)
    })
    .await;
    assert!(
        averaged,
        "never {expected:?}; last: {last:?}\nlog:\n{}",
        node.logs()
    );
    let (ok, out, err) = colo(
        &[
            "ask", "--addr", &node.grpc, "--id", "sensor-2", "--json", "Average",
        ],
        dir.path(),
    );
    assert!(ok, "{err}");
    assert!(
        out.ends_with(",\"reply\":{\"readings\":1,\"average\":19.5}}\n"),
        "{out}"
    );
    // Every record was in its key's shard: none was forwarded.
    let (_, metrics) = http::get(&node.admin, "/metrics").await.expect("metrics");
    let mismatches: f64 = metrics
        .lines()
        .filter(|l| l.starts_with("colo_kafka_partitioner_mismatches_total"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum();
    assert_eq!(mismatches, 0.0, "{metrics}");
    // Its thermometers passivate when idle, and their state is memory-only:
    // the node says so as it starts, before a reading is lost.
    assert!(
        node.logs().contains("thermometer")
            && node.logs().contains("a passivated entity's state is gone"),
        "{}",
        node.logs()
    );
}

/// `colo produce` stopped by SIGTERM (or Ctrl-C) before its count ends as
/// its count would: what it sent is flushed, it exits with success, and
/// the totals it writes are those of the events in the topic.
#[test]
fn produce_stopped_by_a_signal_writes_the_totals_of_what_it_sent() {
    let kafka = MockCluster::new(1).expect("mock cluster");
    let bootstrap = kafka.bootstrap_servers();
    let topic = topic("stopped");
    kafka.create_topic(&topic, 4, 1).expect("topic");
    let dir = tempfile::tempdir().expect("temporary directory");
    let child = Command::new(colo_binary())
        .args(["produce", "--quiet", "--bootstrap-servers", &bootstrap])
        .args([
            "--topic", &topic, "--users", "5", "--rate", "200", "--count", "1000000",
        ])
        .args(["--expected", "expected.json"])
        .current_dir(dir.path())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("run colo produce");
    // Some records are in before it is stopped.
    read_back(&bootstrap, &topic, 4, 20);
    let status = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .expect("kill");
    assert!(status.success());
    let out = child.wait_with_output().expect("colo produce ends");
    assert!(out.status.success(), "{out:?}");
    let expected: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(dir.path().join("expected.json")).expect("expected.json"),
    )
    .expect("JSON");
    assert_eq!(
        expected["records"],
        in_topic(&bootstrap, &topic),
        "{expected}"
    );
}

/// Records in `topic`'s 4 partitions: read from the beginning to each
/// partition's end.
fn in_topic(bootstrap: &str, topic: &str) -> u64 {
    use rdkafka::consumer::{BaseConsumer, Consumer};
    use rdkafka::error::KafkaError;
    use rdkafka::types::RDKafkaErrorCode;
    let consumer: BaseConsumer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", format!("count-{topic}"))
        .set("enable.partition.eof", "true")
        .create()
        .expect("consumer");
    let mut list = rdkafka::TopicPartitionList::new();
    for p in 0..4 {
        list.add_partition_offset(topic, p, rdkafka::Offset::Beginning)
            .expect("partition offset");
    }
    consumer.assign(&list).expect("assign");
    let (mut records, mut ended) = (0, 0);
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while ended < 4 {
        assert!(
            std::time::Instant::now() < deadline,
            "{ended} of 4 partitions read to their end"
        );
        match consumer.poll(Duration::from_millis(500)) {
            Some(Ok(_)) => records += 1,
            Some(Err(KafkaError::PartitionEOF(_))) => ended += 1,
            Some(Err(e)) if e.rdkafka_error_code() == Some(RDKafkaErrorCode::PartitionEOF) => {
                ended += 1
            }
            _ => {}
        }
    }
    records
}
