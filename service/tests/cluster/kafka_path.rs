//! The Kafka path's guarantees, against the test broker (Apache Kafka
//! on loopback) with in-process nodes: a record that can never be handled is
//! dead-lettered at once, a retry keeps its place before the later records
//! of its key, a record is delivered again only when its delivery failed,
//! and a partition that stops progressing is reported.

use crate::kafka::{ingest_settings, kafka_node, probe_records, produce, PARTITIONS};
use crate::support::*;
use colo::allocation::{ExternalAllocationClient, ExternalAllocationStrategy};
use colo::kafka::{IngestSettings, KafkaIngest};
use colo::{Region, ShardingSettings};
use colo_connectors::{NewTopicSpec, REASON_HEADER, SOURCE_OFFSET_HEADER};
use colo_tests::broker::Broker;
use colo_tests::rdkafka::consumer::{BaseConsumer, Consumer};
use colo_tests::rdkafka::message::{Headers, Message};
use colo_tests::rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use colo_tests::rdkafka::ClientConfig;
use std::collections::BTreeMap;
use std::time::Duration;

/// A test broker with the test's topic (one partition per shard) and its
/// dead-letter topic, and a cluster whose coordinator follows the
/// partition assignment, with node `a` registered.
struct BrokerWorld {
    broker: Broker,
    topic: String,
    cluster: Cluster,
    a: Region<Probe>,
}

async fn broker_world(test: &str, settings: ShardingSettings) -> BrokerWorld {
    let broker = Broker::start();
    let mut cluster = Cluster::new(test, settings);
    let topic = format!("{}.events", cluster.name);
    let topics = [
        NewTopicSpec {
            name: topic.clone(),
            partitions: PARTITIONS as i32,
            replication_factor: 1,
            config: Vec::new(),
        },
        NewTopicSpec {
            name: format!("{topic}.dlq"),
            partitions: 1,
            replication_factor: 1,
            config: Vec::new(),
        },
    ];
    colo_connectors::create_missing_topics(
        broker.bootstrap(),
        &[],
        &topics,
        Duration::from_secs(30),
    )
    .await
    .expect("topics created");
    cluster.start_coordinator(Box::new(ExternalAllocationStrategy::new(
        ExternalAllocationClient::new(),
    )));
    let a = kafka_node(&mut cluster, "a");
    cluster.await_regions(1).await;
    BrokerWorld {
        broker,
        topic,
        cluster,
        a,
    }
}

/// Sends records to one partition, in order: (key, payload).
fn send_to(bootstrap: &str, topic: &str, partition: u32, records: &[(&str, &str)]) {
    let producer: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .create()
        .expect("producer");
    for (key, payload) in records {
        producer
            .send(
                BaseRecord::to(topic)
                    .key(*key)
                    .payload(*payload)
                    .partition(partition as i32),
            )
            .expect("queued");
    }
    producer.flush(Duration::from_secs(10)).expect("flushed");
}

/// A dead letter: the record's payload, the reason and its source offset.
#[derive(Debug)]
struct DeadLetter {
    payload: Option<String>,
    reason: String,
    offset: Option<String>,
}

/// Reads the dead-letter topic until `n` letters came, for 30 s at most.
fn dead_letters(bootstrap: &str, dlq: &str, n: usize) -> Vec<DeadLetter> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", format!("{dlq}.reader"))
        .set("auto.offset.reset", "earliest")
        .create()
        .expect("consumer");
    consumer.subscribe(&[dlq]).expect("subscribed");
    let mut letters = Vec::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while letters.len() < n && std::time::Instant::now() < deadline {
        if let Some(Ok(message)) = consumer.poll(Duration::from_millis(200)) {
            let header = |name: &str| {
                message.headers().and_then(|h| {
                    h.iter()
                        .find(|x| x.key == name)
                        .and_then(|x| x.value)
                        .map(|v| String::from_utf8_lossy(v).into_owned())
                })
            };
            letters.push(DeadLetter {
                payload: message
                    .payload()
                    .map(|p| String::from_utf8_lossy(p).into_owned()),
                reason: header(REASON_HEADER).unwrap_or_default(),
                offset: header(SOURCE_OFFSET_HEADER),
            });
        }
    }
    letters
}

/// The sequence numbers `key` was handled with, in order.
fn handled(cluster: &Cluster, key: &str) -> Vec<u64> {
    cluster
        .world
        .log
        .lock()
        .get(key)
        .map(|d| d.iter().map(|d| d.seq).collect())
        .unwrap_or_default()
}

/// Waits until as many records were handled as were sent: the test broker
/// holds a joining member for seconds, so longer than the in-memory
/// scenarios wait.
async fn delivered_all(world: &World, sent: &BTreeMap<(String, String), u64>) {
    let total: u64 = sent.values().sum();
    eventually("every record handled", Duration::from_secs(90), || async {
        world.delivered() as u64 >= total
    })
    .await;
}

fn start(region: &Region<Probe>, bootstrap: &str, settings: IngestSettings) -> KafkaIngest {
    KafkaIngest::start(region.clone(), settings, probe_records())
        .unwrap_or_else(|e| panic!("ingest of {bootstrap}: {e}"))
}

/// A record whose key is empty can never reach an entity (the region
/// refuses an empty id): it goes to the dead-letter topic at once, the
/// records after it are handled, and nothing holds up a graceful stop.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_record_with_an_empty_key_is_dead_lettered_at_once_and_the_partition_goes_on() {
    let BrokerWorld {
        broker,
        topic,
        cluster,
        a,
    } = broker_world("kafka-empty-key", fast_settings(PARTITIONS)).await;
    let key = "user-1";
    let partition = a.shard_of(key).0;
    send_to(
        broker.bootstrap(),
        &topic,
        partition,
        &[(key, "0"), (key, "1"), ("", "2"), (key, "3")],
    );
    let ingest = start(
        &a,
        broker.bootstrap(),
        ingest_settings(broker.bootstrap(), &topic),
    );
    eventually("0, 1 and 3 handled", Duration::from_secs(60), || async {
        handled(&cluster, key).len() >= 3
    })
    .await;
    assert_eq!(handled(&cluster, key), [0, 1, 3]);
    let letters = dead_letters(broker.bootstrap(), &format!("{topic}.dlq"), 1);
    assert_eq!(letters.len(), 1, "{letters:?}");
    assert_eq!(letters[0].payload.as_deref(), Some("2"));
    assert_eq!(letters[0].offset.as_deref(), Some("2"));
    assert!(
        letters[0]
            .reason
            .contains("refused: entity id must not be empty"),
        "{letters:?}"
    );
    assert_eq!(
        counter(
            colo::metrics::KAFKA_RECORDS,
            &[
                ("entity_type", &cluster.name),
                ("topic", &topic),
                ("outcome", "refused"),
            ],
        ),
        1
    );
    // Nothing is left in hand: the revoke at shutdown has nothing to wait
    // for (before, the refused record was retried for ever and the stop
    // hung).
    tokio::time::timeout(Duration::from_secs(15), ingest.shutdown())
        .await
        .expect("the ingest stops promptly");
}

/// A record whose handler fails is delivered again before any later
/// record of its key: handled 0, 1, 2, 3, 4 in that order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retried_record_keeps_its_place_before_later_records_of_its_key() {
    let BrokerWorld {
        broker,
        topic,
        cluster,
        a,
    } = broker_world("kafka-retry-order", fast_settings(PARTITIONS)).await;
    let key = "user-2".to_string();
    cluster.world.fail_once.lock().insert((key.clone(), 2));
    // All five are in hand before the first is handled.
    produce(broker.bootstrap(), &topic, std::slice::from_ref(&key), 0..5);
    let ingest = start(
        &a,
        broker.bootstrap(),
        ingest_settings(broker.bootstrap(), &topic),
    );
    let sent = BTreeMap::from([((key.clone(), "kafka".to_string()), 5)]);
    delivered_all(&cluster.world, &sent).await;
    assert_eq!(handled(&cluster, &key), [0, 1, 2, 3, 4]);
    assert!(cluster.world.fail_once.lock().is_empty(), "2 failed once");
    ingest.shutdown().await;
}

/// A record is delivered again only when its delivery failed, never
/// because it waited its turn: 500 records of one key, 20 ms each, take
/// far longer than the 2 s delivery timeout, and each is handled once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_record_waiting_behind_slow_work_of_its_key_is_handled_exactly_once() {
    let BrokerWorld {
        broker,
        topic,
        cluster,
        a,
    } = broker_world("kafka-slow-key", fast_settings(PARTITIONS)).await;
    let key = "user-3".to_string();
    *cluster.world.record_delay.lock() = Duration::from_millis(20);
    produce(
        broker.bootstrap(),
        &topic,
        std::slice::from_ref(&key),
        0..500,
    );
    let mut settings = ingest_settings(broker.bootstrap(), &topic);
    settings.delivery_timeout = Duration::from_secs(2);
    settings.source.max_in_flight = 1000;
    let ingest = start(&a, broker.bootstrap(), settings);
    let sent = BTreeMap::from([((key.clone(), "kafka".to_string()), 500)]);
    eventually("500 records handled", Duration::from_secs(120), || async {
        handled(&cluster, &key).len() >= 500
    })
    .await;
    cluster.world.assert_complete_in_order(&sent);
    assert_eq!(
        handled(&cluster, &key).len(),
        500,
        "no record handled twice"
    );
    ingest.shutdown().await;
}

/// A handler that never finishes stalls its key and its partition's
/// commits: the source names the partition and its oldest offset at warn.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partition_making_no_progress_is_reported_with_its_oldest_offset() {
    let logs = logs();
    let BrokerWorld {
        broker,
        topic,
        cluster,
        a,
    } = broker_world("kafka-stalled", fast_settings(PARTITIONS)).await;
    let key = "user-4";
    let partition = a.shard_of(key).0;
    // The third record's handler blocks until released.
    *cluster.world.stall_node.lock() = Some(("a".to_string(), 2));
    send_to(
        broker.bootstrap(),
        &topic,
        partition,
        &[(key, "0"), (key, "1"), (key, "2"), (key, "3")],
    );
    let mut settings = ingest_settings(broker.bootstrap(), &topic);
    settings.source.stall_timeout = Duration::from_secs(1);
    let ingest = start(&a, broker.bootstrap(), settings);
    let wanted = format!("partition={partition}");
    eventually(
        "the stalled partition is reported",
        Duration::from_secs(60),
        || async {
            logs.text().lines().any(|l| {
                l.contains("WARN")
                    && l.contains("partition makes no progress")
                    && l.contains(&topic)
                    && l.contains(&wanted)
                    && l.contains("oldest_offset=2")
            })
        },
    )
    .await;
    cluster.world.release_all();
    eventually("the rest handled", Duration::from_secs(30), || async {
        handled(&cluster, key).len() >= 4
    })
    .await;
    eventually("progress reported", Duration::from_secs(30), || async {
        logs.text()
            .lines()
            .any(|l| l.contains("partition progresses again") && l.contains(&wanted))
    })
    .await;
    ingest.shutdown().await;
}

/// A partition assigned here whose shard cannot start yet (the coordinator
/// does not answer) holds its records: the metrics say it waits, how many
/// records it holds, and its lag, known from the assignment on, before any
/// record was handled. Once the coordinator answers, everything is handled.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partition_waiting_for_its_shard_shows_it_with_its_held_records_and_lag() {
    let BrokerWorld {
        broker,
        topic,
        cluster,
        a,
    } = broker_world("kafka-waiting", fast_settings(PARTITIONS)).await;
    let keys: Vec<String> = (0..16).map(|i| format!("user-{i}")).collect();
    produce(broker.bootstrap(), &topic, &keys, 0..10);
    cluster.network.partition_from_coordinator("a");
    let ingest = start(
        &a,
        broker.bootstrap(),
        ingest_settings(broker.bootstrap(), &topic),
    );
    // A partition's gauges are set together, once a second: read in one
    // call.
    let waiting_with_lag = |partition: u32| {
        let partition = partition.to_string();
        let labels = [
            ("entity_type", cluster.name.as_str()),
            ("topic", topic.as_str()),
            ("partition", partition.as_str()),
        ];
        let values = gauges(&[
            (colo::metrics::KAFKA_WAITING, &labels),
            (colo::metrics::KAFKA_HELD, &labels),
            (colo::metrics::KAFKA_LAG, &labels),
        ]);
        values[0] == 1.0 && values[1] > 0.0 && values[2] > 0.0
    };
    eventually(
        "a partition waits, holding records, its lag known",
        Duration::from_secs(60),
        || async { (0..PARTITIONS).any(waiting_with_lag) },
    )
    .await;
    assert_eq!(
        cluster.world.delivered(),
        0,
        "nothing handled while waiting"
    );
    cluster.network.heal("a");
    let all: BTreeMap<(String, String), u64> = keys
        .iter()
        .map(|k| ((k.clone(), "kafka".to_string()), 10))
        .collect();
    delivered_all(&cluster.world, &all).await;
    cluster.world.assert_complete_in_order(&all);
    ingest.shutdown().await;
}
