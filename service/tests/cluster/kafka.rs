//! Kafka records driving entities through the in-process cluster. The
//! broker is librdkafka's in-process mock cluster: these scenarios check the
//! wiring of the source to the regions (rebalances moving shards inside the
//! callback, offsets following handled records), which needs a consumer
//! group but no broker behaviour beyond it.

use crate::support::*;
use colo::allocation::{
    ExternalAllocationClient, ExternalAllocationStrategy, KafkaMurmur2Extractor,
};
use colo::kafka::{IngestSettings, KafkaIngest, RecordDecoder};
use colo::{Node, Region};
use colo_connectors::SourceSettings;
use colo_tests::rdkafka::mocking::MockCluster;
use colo_tests::rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use colo_tests::rdkafka::ClientConfig;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

pub const PARTITIONS: u32 = 4;

/// Record key: the entity id; payload: the sequence number.
pub fn probe_records() -> RecordDecoder<ProbeMsg> {
    Arc::new(|record: &colo_connectors::Record| {
        let id = std::str::from_utf8(record.key.as_deref().ok_or("no key")?)
            .map_err(|e| e.to_string())?
            .to_string();
        let payload = std::str::from_utf8(record.payload.as_deref().ok_or("no payload")?)
            .map_err(|e| e.to_string())?;
        if payload == "fail" {
            return Ok((id, ProbeMsg::Fail));
        }
        let seq = payload
            .parse()
            .map_err(|e: std::num::ParseIntError| e.to_string())?;
        Ok((
            id,
            ProbeMsg::Record {
                from: "kafka".into(),
                seq,
            },
        ))
    })
}

/// Records of the test's keys (see [`colo_tests::kafka::produce`]).
pub use colo_tests::kafka::produce;

pub fn ingest(region: &Region<Probe>, bootstrap: &str, topic: &str) -> KafkaIngest {
    KafkaIngest::start(
        region.clone(),
        ingest_settings(bootstrap, topic),
        probe_records(),
    )
    .expect("ingest")
}

/// Waits until the probe group's committed offsets of `topic` add up to
/// `records` (every record of the topic so far, from offset 0).
async fn all_committed(bootstrap: &str, topic: &str, records: i64) {
    let (bootstrap, topic) = (bootstrap.to_string(), topic.to_string());
    let group = format!("{topic}.probe");
    eventually(
        "every handled record is committed",
        Duration::from_secs(60),
        || {
            let (bootstrap, topic, group) = (bootstrap.clone(), topic.clone(), group.clone());
            async move {
                let committed = tokio::task::spawn_blocking(move || {
                    colo_tests::kafka::committed_offsets(
                        &bootstrap,
                        &topic,
                        &group,
                        PARTITIONS as i32,
                    )
                })
                .await
                .expect("committed offsets");
                committed.values().sum::<i64>() == records
            }
        },
    )
    .await;
}

pub fn ingest_settings(bootstrap: &str, topic: &str) -> IngestSettings {
    IngestSettings {
        source: SourceSettings {
            bootstrap_servers: bootstrap.into(),
            group_id: format!("{topic}.probe"),
            topics: vec![topic.into()],
            client: vec![
                ("session.timeout.ms".into(), "6000".into()),
                ("heartbeat.interval.ms".into(), "500".into()),
            ],
            max_in_flight: 100,
            max_in_flight_total: 1_000_000,
            commit_interval: Duration::from_millis(200),
            rebalance_timeout: Duration::from_secs(20),
            commit_timeout: Duration::from_secs(5),
            stall_timeout: Duration::from_secs(5),
        },
        delivery_timeout: Duration::from_secs(5),
        placement_timeout: Duration::from_secs(10),
        max_attempts: 3,
        redelivery_timeout: Duration::from_secs(60),
        retry_backoff: Duration::from_millis(50),
        dead_letter_topic: format!("{topic}.dlq"),
    }
}

pub fn kafka_node(cluster: &mut Cluster, name: &str) -> Region<Probe> {
    let node = Node::new(cluster.network.transport(name));
    let entity_type = cluster
        .entity_type(name)
        .with_extractor(KafkaMurmur2Extractor::new(PARTITIONS).expect("partitions"));
    let region = node.start_region(entity_type).expect("region");
    cluster
        .nodes
        .insert(name.to_string(), (node, region.clone()));
    region
}

/// A mock broker with the test's topic (one partition per shard) and its
/// dead-letter topic, and a cluster whose coordinator follows the
/// partition assignment, with node `a` registered.
struct KafkaWorld {
    _broker: MockCluster<'static, colo_tests::rdkafka::producer::DefaultProducerContext>,
    bootstrap: String,
    topic: String,
    cluster: Cluster,
    a: Region<Probe>,
}

async fn kafka_world(test: &str) -> KafkaWorld {
    kafka_world_with(test, fast_settings(PARTITIONS)).await
}

async fn kafka_world_with(test: &str, settings: colo::ShardingSettings) -> KafkaWorld {
    let broker = MockCluster::new(1).expect("mock cluster");
    let mut cluster = Cluster::new(test, settings);
    let topic = format!("{}.events", cluster.name);
    broker
        .create_topic(&topic, PARTITIONS as i32, 1)
        .expect("topic");
    broker
        .create_topic(&format!("{topic}.dlq"), 1, 1)
        .expect("dead-letter topic");
    let bootstrap = broker.bootstrap_servers();
    cluster.start_coordinator(Box::new(ExternalAllocationStrategy::new(
        ExternalAllocationClient::new(),
    )));
    let a = kafka_node(&mut cluster, "a");
    cluster.await_regions(1).await;
    KafkaWorld {
        _broker: broker,
        bootstrap,
        topic,
        cluster,
        a,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_drive_entities_and_a_joining_node_takes_partitions_over_without_losing_or_repeating_one(
) {
    let KafkaWorld {
        bootstrap,
        topic,
        mut cluster,
        a,
        _broker,
    } = kafka_world("kafka-join").await;
    let keys: Vec<String> = (0..16).map(|i| format!("user-{i}")).collect();
    produce(&bootstrap, &topic, &keys, 0..20);
    let ingest_a = ingest(&a, &bootstrap, &topic);
    let first: BTreeMap<(String, String), u64> = keys
        .iter()
        .map(|k| ((k.clone(), "kafka".to_string()), 20))
        .collect();
    all_delivered(&cluster.world, &first).await;
    assert_eq!(
        cluster.shard_counts()["a"],
        PARTITIONS as usize,
        "a consumes and hosts every partition"
    );
    // The mock cluster refuses commits while a join is open (DEVELOPERS.md),
    // so a revoke's commit during b's join may not land there: b joins once
    // a's periodic commit holds everything a handled.
    all_committed(&bootstrap, &topic, keys.len() as i64 * 20).await;

    // b joins the group: some partitions move, their shards with them.
    let b = kafka_node(&mut cluster, "b");
    cluster.await_regions(2).await;
    let ingest_b = ingest(&b, &bootstrap, &topic);
    eventually("b hosts some shards", Duration::from_secs(60), || async {
        cluster.shard_counts().get("b").copied().unwrap_or(0) > 0
    })
    .await;
    produce(&bootstrap, &topic, &keys, 20..40);
    let all: BTreeMap<(String, String), u64> = keys
        .iter()
        .map(|k| ((k.clone(), "kafka".to_string()), 40))
        .collect();
    all_delivered(&cluster.world, &all).await;
    // Graceful changes only: every record handled exactly once, in order.
    cluster.world.assert_complete_in_order(&all);
    cluster.world.assert_never_live_twice();
    // Records after the move were handled where their partition is now.
    let homes = cluster.homes();
    let log = cluster.world.log.lock().clone();
    for key in &keys {
        let shard = a.shard_of(key);
        let home = &homes[&shard];
        let last = log[key].last().expect("deliveries");
        assert_eq!(&last.node, home, "{key} handled on its partition's node");
    }
    ingest_b.shutdown().await;
    ingest_a.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_topic_without_one_partition_per_shard_stops_the_start_naming_it() {
    let broker = MockCluster::new(1).expect("mock cluster");
    let mut cluster = Cluster::new("kafka-partitions", fast_settings(PARTITIONS));
    let topic = format!("{}.events", cluster.name);
    broker.create_topic(&topic, 3, 1).expect("topic");
    let bootstrap = broker.bootstrap_servers();
    let a = kafka_node(&mut cluster, "a");
    let error = KafkaIngest::start(
        a.clone(),
        ingest_settings(&bootstrap, &topic),
        probe_records(),
    )
    .expect_err("3 partitions for 4 shards");
    let message = error.to_string();
    assert!(
        message.contains(&topic)
            && message.contains("3 partitions")
            && message.contains("4 shards"),
        "{message}"
    );
    let missing = format!("{topic}.missing");
    let error = KafkaIngest::start(a, ingest_settings(&bootstrap, &missing), probe_records())
        .expect_err("a missing topic");
    assert!(error.to_string().contains("does not exist"), "{error}");
}

/// A producer with another partitioner (librdkafka's default CRC32, say)
/// puts keys in other partitions: their records are still handled, in
/// order, and counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_in_another_partition_than_their_keys_are_handled_and_counted() {
    let _ = metrics();
    let KafkaWorld {
        bootstrap,
        topic,
        cluster,
        a,
        _broker,
    } = kafka_world("kafka-mismatch").await;
    let id = "user-7".to_string();
    let wrong = (a.shard_of(&id).0 + 1) % PARTITIONS;
    let producer: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", &bootstrap)
        .create()
        .expect("producer");
    for seq in 0..5u64 {
        let payload = seq.to_string();
        producer
            .send(
                BaseRecord::to(&topic)
                    .key(&id)
                    .payload(&payload)
                    .partition(wrong as i32),
            )
            .expect("queued");
    }
    producer.flush(Duration::from_secs(10)).expect("flushed");
    let ingest_a = ingest(&a, &bootstrap, &topic);
    let sent = BTreeMap::from([((id.clone(), "kafka".to_string()), 5)]);
    all_delivered(&cluster.world, &sent).await;
    cluster.world.assert_complete_in_order(&sent);
    let mismatches = counter(
        colo::metrics::KAFKA_PARTITIONER_MISMATCHES,
        &[("entity_type", &cluster.name), ("topic", &topic)],
    );
    assert_eq!(mismatches, 5);
    ingest_a.shutdown().await;
}

/// Records that cannot be handled land in the dead-letter topic with why
/// and where they came from; the partition goes on with the rest.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_records_and_a_failing_handler_go_to_the_dead_letter_topic_and_the_partition_goes_on() {
    use colo_connectors::{REASON_HEADER, SOURCE_OFFSET_HEADER, SOURCE_TOPIC_HEADER};
    use colo_tests::rdkafka::consumer::{BaseConsumer, Consumer};
    use colo_tests::rdkafka::message::{Headers, Message};
    let KafkaWorld {
        bootstrap,
        topic,
        cluster,
        a,
        _broker,
    } = kafka_world("kafka-dlq").await;
    let dlq = format!("{topic}.dlq");
    let id = "user-3".to_string();
    let producer: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", &bootstrap)
        .set("partitioner", "murmur2_random")
        .create()
        .expect("producer");
    // 0, 1, garbage, 2, a record whose handler fails, 3.
    for payload in ["0", "1", "not a number", "2", "fail", "3"] {
        producer
            .send(BaseRecord::to(&topic).key(&id).payload(payload))
            .expect("queued");
    }
    producer.flush(Duration::from_secs(10)).expect("flushed");
    let ingest_a = ingest(&a, &bootstrap, &topic);
    let sent = BTreeMap::from([((id.clone(), "kafka".to_string()), 4)]);
    all_delivered(&cluster.world, &sent).await;
    cluster.world.assert_complete_in_order(&sent);

    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", &bootstrap)
        .set("group.id", format!("{dlq}.reader"))
        .set("auto.offset.reset", "earliest")
        .create()
        .expect("consumer");
    consumer.subscribe(&[dlq.as_str()]).expect("subscribed");
    let mut letters = Vec::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while letters.len() < 2 && std::time::Instant::now() < deadline {
        if let Some(Ok(message)) = consumer.poll(Duration::from_millis(200)) {
            let header = |name: &str| {
                message.headers().and_then(|h| {
                    h.iter()
                        .find(|x| x.key == name)
                        .and_then(|x| x.value)
                        .map(|v| String::from_utf8_lossy(v).into_owned())
                })
            };
            letters.push((
                message
                    .payload()
                    .map(|p| String::from_utf8_lossy(p).into_owned()),
                header(REASON_HEADER).unwrap_or_default(),
                header(SOURCE_TOPIC_HEADER),
                header(SOURCE_OFFSET_HEADER),
            ));
        }
    }
    assert_eq!(letters.len(), 2, "{letters:?}");
    assert_eq!(letters[0].0.as_deref(), Some("not a number"));
    assert!(letters[0].1.contains("cannot be decoded"), "{letters:?}");
    assert_eq!(letters[0].2.as_deref(), Some(topic.as_str()));
    assert_eq!(letters[0].3.as_deref(), Some("2"));
    assert_eq!(letters[1].0.as_deref(), Some("fail"));
    assert!(letters[1].1.contains("failed 3 times"), "{letters:?}");
    assert_eq!(letters[1].3.as_deref(), Some("4"));
    let dead = |outcome| {
        counter(
            colo::metrics::KAFKA_RECORDS,
            &[
                ("entity_type", &cluster.name),
                ("topic", &topic),
                ("outcome", outcome),
            ],
        )
    };
    assert_eq!(
        (dead("undecodable"), dead("handler_failed"), dead("handled")),
        (1, 1, 4)
    );
    ingest_a.shutdown().await;
}

/// A consumer fenced for good (another member took its static
/// `group.instance.id`: a fatal error in librdkafka's words) consumes
/// nothing more: its ingest says why, which the node's readiness reports,
/// and its partitions' shards are released. The mock cluster answers
/// FENCED_INSTANCE_ID on cue; the test broker never fences a member.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_consumer_fenced_for_good_fails_its_ingest_and_releases_its_shards() {
    use colo_tests::rdkafka::types::{RDKafkaApiKey, RDKafkaRespErr};
    let KafkaWorld {
        bootstrap,
        topic,
        cluster,
        a,
        _broker,
    } = kafka_world("kafka-fenced").await;
    let mut settings = ingest_settings(&bootstrap, &topic);
    settings
        .source
        .client
        .push(("group.instance.id".into(), format!("{topic}.a")));
    let ingest_a = KafkaIngest::start(a.clone(), settings, probe_records()).expect("ingest");
    eventually("a hosts every shard", Duration::from_secs(30), || async {
        cluster.shard_counts().get("a").copied() == Some(PARTITIONS as usize)
    })
    .await;
    assert_eq!(ingest_a.health().failure(), None);
    _broker.request_errors(
        RDKafkaApiKey::Heartbeat,
        &[RDKafkaRespErr::RD_KAFKA_RESP_ERR_FENCED_INSTANCE_ID],
    );
    eventually("the ingest failed", Duration::from_secs(30), || async {
        ingest_a.health().failure().is_some()
    })
    .await;
    let reason = ingest_a.health().failure().unwrap_or_default();
    assert!(reason.to_lowercase().contains("fenced"), "{reason}");
    eventually("a's shards released", Duration::from_secs(30), || async {
        cluster.shard_counts().get("a").copied() == Some(0)
    })
    .await;
    tokio::time::timeout(Duration::from_secs(30), ingest_a.shutdown())
        .await
        .expect("a failed ingest stops at once");
}

/// A hand-off inside the rebalance callback must fit in the callback's
/// time: timeouts that do not fit stop the start, naming them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timeouts_that_would_cut_a_hand_off_short_stop_the_start() {
    let mut cluster = Cluster::new("kafka-timeouts", fast_settings(PARTITIONS));
    let a = kafka_node(&mut cluster, "a");
    let mut short = ingest_settings("127.0.0.1:1", "t");
    short.placement_timeout = Duration::from_secs(1);
    let error = KafkaIngest::start(a.clone(), short, probe_records()).expect_err("1 s < 5 s");
    assert!(error.to_string().contains("hand-off timeout"), "{error}");
    let mut tight = ingest_settings("127.0.0.1:1", "t");
    tight.source.rebalance_timeout = Duration::from_secs(10);
    let error = KafkaIngest::start(a, tight, probe_records()).expect_err("10 s < 15 s");
    assert!(error.to_string().contains("rebalance timeout"), "{error}");
}

/// Node a's coordinator link is cut while b's join revokes partitions from
/// it: a's release does not reach the coordinator, and is retried once the
/// link heals (before a could be taken as gone: the fence and region
/// timeouts are long here, so nothing but the retried release can move the
/// shards), so b gets the shards and consumes the partitions. Meanwhile
/// b's waiting partitions show it in the metrics. The mock
/// cluster serves it because its group waits for a's revoke callback as
/// Kafka's does; the test broker's hands the partitions back and forth
/// while the callback waits out the cut link (DEVELOPERS.md).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shard_release_cut_off_at_a_revoke_is_retried_until_the_next_owner_gets_the_partition() {
    let settings = colo::ShardingSettings {
        fence_timeout: Duration::from_secs(100),
        region_timeout: Duration::from_secs(120),
        ..fast_settings(PARTITIONS)
    };
    let KafkaWorld {
        bootstrap,
        topic,
        mut cluster,
        a,
        _broker,
    } = kafka_world_with("kafka-release-retry", settings).await;
    let keys: Vec<String> = (0..16).map(|i| format!("user-{i}")).collect();
    produce(&bootstrap, &topic, &keys, 0..10);
    let mut fast = ingest_settings(&bootstrap, &topic);
    fast.placement_timeout = Duration::from_secs(5);
    let ingest_a = KafkaIngest::start(a.clone(), fast.clone(), probe_records()).expect("ingest");
    let first: BTreeMap<(String, String), u64> = keys
        .iter()
        .map(|k| ((k.clone(), "kafka".to_string()), 10))
        .collect();
    all_delivered(&cluster.world, &first).await;

    let b = kafka_node(&mut cluster, "b");
    cluster.await_regions(2).await;
    cluster.network.partition_from_coordinator("a");
    let ingest_b = KafkaIngest::start(b.clone(), fast, probe_records()).expect("ingest");
    let partition_gauge = |name: &str, partition: u32| {
        gauge(
            name,
            &[
                ("entity_type", &cluster.name),
                ("topic", &topic),
                ("partition", &partition.to_string()),
            ],
        )
    };
    let waiting = || {
        (0..PARTITIONS)
            .filter(|&p| partition_gauge(colo::metrics::KAFKA_WAITING, p) == Some(1.0))
            .collect::<Vec<u32>>()
    };
    eventually(
        "b's partitions wait for their shards",
        Duration::from_secs(60),
        || async { !waiting().is_empty() },
    )
    .await;
    produce(&bootstrap, &topic, &keys, 10..20);
    assert_eq!(
        cluster.shard_counts().get("b").copied().unwrap_or(0),
        0,
        "no shard moves while a's release cannot reach the coordinator"
    );
    cluster.network.heal("a");
    eventually("b hosts shards", Duration::from_secs(60), || async {
        cluster.shard_counts().get("b").copied().unwrap_or(0) > 0
    })
    .await;
    let all: BTreeMap<(String, String), u64> = keys
        .iter()
        .map(|k| ((k.clone(), "kafka".to_string()), 20))
        .collect();
    all_delivered(&cluster.world, &all).await;
    assert!(
        cluster.world.delivered_on("b") > 0,
        "b consumes the partitions it took"
    );
    cluster.world.assert_never_live_twice();
    ingest_b.shutdown().await;
    ingest_a.shutdown().await;
}

/// The commit at a revoke is refused once (the mock cluster answers it
/// with an error on cue; the test broker does not refuse commits): it is
/// tried again within the revoke (here the first commit of node a's leaving,
/// made as its consumer stops, then its revoke's), before the partitions'
/// shards are handed off, so their next owner starts after what was handled (even a
/// next owner the broker assigned them to before this revoke, as the test
/// broker can), and each record is handled exactly once. The refusal is
/// counted, and the source never gives up on the commit (which it says at
/// warn). librdkafka's own commit when the partitions are unassigned
/// follows the hand-off: it would not save such an early next owner.
///
/// The revoke is node a's consumer leaving (its ingest stops) while node b
/// is not consuming yet: were b joining meanwhile, the mock cluster would
/// hold a round of the rebalance open while a's revoke runs and refuse
/// every commit in it (Kafka takes commits from the current generation
/// then), and the test would time that race rather than the retry.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commit_refused_at_a_revoke_is_tried_again_before_the_hand_off() {
    use colo_tests::rdkafka::types::{RDKafkaApiKey, RDKafkaRespErr};
    let logs = logs();
    let KafkaWorld {
        bootstrap,
        topic,
        mut cluster,
        a,
        _broker,
    } = kafka_world("kafka-commit-retry").await;
    let keys: Vec<String> = (0..16).map(|i| format!("user-{i}")).collect();
    produce(&bootstrap, &topic, &keys, 0..20);
    // Only the source's own commits, at the revoke: none on a timer.
    let mut settings = ingest_settings(&bootstrap, &topic);
    settings.source.commit_interval = Duration::from_secs(600);
    settings.source.commit_timeout = Duration::from_secs(15);
    settings.source.rebalance_timeout = Duration::from_secs(40);
    let ingest_a =
        KafkaIngest::start(a.clone(), settings.clone(), probe_records()).expect("ingest");
    let first: BTreeMap<(String, String), u64> = keys
        .iter()
        .map(|k| ((k.clone(), "kafka".to_string()), 20))
        .collect();
    all_delivered(&cluster.world, &first).await;
    let name = cluster.name.clone();
    let failed_commits = || {
        counter(
            colo::metrics::KAFKA_COMMITS,
            &[("entity_type", &name), ("outcome", "failed")],
        )
    };
    let failed_before = failed_commits();
    let b = kafka_node(&mut cluster, "b");
    cluster.await_regions(2).await;
    _broker.request_errors(
        RDKafkaApiKey::OffsetCommit,
        &[RDKafkaRespErr::RD_KAFKA_RESP_ERR_OFFSET_METADATA_TOO_LARGE],
    );
    ingest_a.shutdown().await;
    assert!(failed_commits() > failed_before, "the refusal is counted");
    let text = logs.text();
    assert!(
        !text.contains("within kafka.commit_timeout"),
        "a commit was given up:\n{text}"
    );
    let ingest_b = KafkaIngest::start(b.clone(), settings, probe_records()).expect("ingest");
    eventually("b hosts every shard", Duration::from_secs(60), || async {
        cluster.shard_counts().get("b").copied().unwrap_or(0) == PARTITIONS as usize
    })
    .await;
    produce(&bootstrap, &topic, &keys, 20..30);
    let all: BTreeMap<(String, String), u64> = keys
        .iter()
        .map(|k| ((k.clone(), "kafka".to_string()), 30))
        .collect();
    all_delivered(&cluster.world, &all).await;
    cluster.world.assert_complete_in_order(&all);
    ingest_b.shutdown().await;
}

/// A revoke waits for the records in hand for `delivery_timeout` at most:
/// node a's handlers hang, b joins, and a's revoke gives the records it
/// could not settle up (uncommitted, counted) and hands the shards off
/// (their stuck entities dropped at the hand-off timeout), so b gets the
/// partitions and handles those records again, each key in order. On the
/// mock cluster: the test broker hands partitions back and forth while a
/// revoke waits (DEVELOPERS.md).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revoke_gives_up_records_that_do_not_settle_within_the_delivery_timeout() {
    let KafkaWorld {
        bootstrap,
        topic,
        mut cluster,
        a,
        _broker,
    } = kafka_world("kafka-revoke-bound").await;
    let keys: Vec<String> = (0..8).map(|i| format!("user-{i}")).collect();
    // a handles 8 records, then every handler on a hangs.
    *cluster.world.stall_node.lock() = Some(("a".to_string(), 8));
    produce(&bootstrap, &topic, &keys, 0..10);
    let mut settings = ingest_settings(&bootstrap, &topic);
    settings.delivery_timeout = Duration::from_secs(2);
    let ingest_a =
        KafkaIngest::start(a.clone(), settings.clone(), probe_records()).expect("ingest");
    eventually("a's handlers hang", Duration::from_secs(30), || async {
        cluster.world.delivered_on("a") >= 8
    })
    .await;
    let b = kafka_node(&mut cluster, "b");
    cluster.await_regions(2).await;
    let ingest_b = KafkaIngest::start(b.clone(), settings, probe_records()).expect("ingest");
    let name = cluster.name.clone();
    eventually(
        "a's revoke gave records up",
        Duration::from_secs(60),
        || async {
            counter(
                colo::metrics::KAFKA_GIVEN_UP,
                &[
                    ("entity_type", &name),
                    ("topic", &topic),
                    ("reason", "revoke_timeout"),
                ],
            ) >= 1
        },
    )
    .await;
    eventually("b handles records", Duration::from_secs(60), || async {
        cluster.world.delivered_on("b") > 0
    })
    .await;
    // The partitions a kept go on once its handlers are let go.
    cluster.world.release_all();
    eventually(
        "every key's last record handled",
        Duration::from_secs(60),
        || async {
            let log = cluster.world.log.lock();
            keys.iter()
                .all(|k| log.get(k).is_some_and(|d| d.iter().any(|d| d.seq == 9)))
        },
    )
    .await;
    // On each node, each key's records in order: b starts from a's last
    // commit, whatever a gave up.
    let log = cluster.world.log.lock().clone();
    for (key, deliveries) in &log {
        for node in ["a", "b"] {
            let seqs: Vec<u64> = deliveries
                .iter()
                .filter(|d| d.node == node)
                .map(|d| d.seq)
                .collect();
            assert!(
                seqs.windows(2).all(|w| w[1] == w[0] + 1),
                "{key} on {node}: {seqs:?}"
            );
        }
    }
    ingest_b.shutdown().await;
    ingest_a.shutdown().await;
}
