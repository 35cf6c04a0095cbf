//! Compressed topics, against Apache Kafka (on
//! loopback): producers compress record batches with whatever codec they
//! are set to, and a consumer without that codec cannot read a batch at
//! all, so its partition stops there. The source reads every codec Kafka
//! has.

use colo_connectors::{KafkaSource, Record, SourceEvent};
use colo_tests::broker::Broker;
use colo_tests::kafka::{opened, source_settings};
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::ClientConfig;
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;
use tokio::sync::mpsc;

const CODECS: [&str; 5] = ["none", "gzip", "snappy", "lz4", "zstd"];
const PARTITIONS: i32 = 2;
const PER_CODEC: usize = 200;

async fn create_topics(bootstrap: &str, topics: &[String]) {
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .create()
        .expect("admin client");
    let new: Vec<NewTopic<'_>> = topics
        .iter()
        .map(|t| NewTopic::new(t, PARTITIONS, TopicReplication::Fixed(1)))
        .collect();
    let results = admin
        .create_topics(
            &new,
            &AdminOptions::new().operation_timeout(Some(Duration::from_secs(10))),
        )
        .await
        .expect("create topics");
    for result in results {
        result.expect("topic created");
    }
}

/// Produces `PER_CODEC` records compressed with `codec`, lingering so that
/// batches hold many records (a batch of one is barely compressed).
async fn produce(bootstrap: &str, topic: &str, codec: &str) -> BTreeSet<String> {
    let producer: FutureProducer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("compression.type", codec)
        .set("linger.ms", "20")
        .set("message.timeout.ms", "30000")
        .create()
        .unwrap_or_else(|e| panic!("a producer compressing with {codec}: {e}"));
    let payloads: Vec<String> = (0..PER_CODEC)
        .map(|i| format!("{codec} purchase {i}: {}", "item ".repeat(20)))
        .collect();
    // All queued before any is awaited, so that they share batches.
    let mut deliveries = Vec::new();
    for (i, payload) in payloads.iter().enumerate() {
        let key = format!("user-{}", i % 17);
        let delivery = producer
            .send_result(
                FutureRecord::to(topic)
                    .key(&key)
                    .payload(payload)
                    .partition(i as i32 % PARTITIONS),
            )
            .unwrap_or_else(|(e, _)| panic!("{codec}: not queued: {e}"));
        deliveries.push(delivery);
    }
    for delivery in deliveries {
        delivery
            .await
            .expect("delivery reported")
            .unwrap_or_else(|(e, _)| panic!("{codec}: not produced: {e}"));
    }
    payloads.into_iter().collect()
}

/// Every record of every codec's topic reaches the source, intact.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_compressed_with_every_codec_are_all_consumed() {
    let broker = Broker::start();
    let bootstrap = broker.bootstrap().to_string();
    let prefix = format!("compression-{}", std::process::id());
    let topics: BTreeMap<&str, String> = CODECS
        .iter()
        .map(|codec| (*codec, format!("{prefix}-{codec}")))
        .collect();
    let names: Vec<String> = topics.values().cloned().collect();
    create_topics(&bootstrap, &names).await;
    let mut expected = BTreeMap::new();
    for (codec, topic) in &topics {
        expected.insert(topic.clone(), produce(&bootstrap, topic, codec).await);
    }

    let mut settings = source_settings(&bootstrap, &names[0], &format!("{prefix}.probe"));
    settings.topics = names.clone();
    let (source, mut events) = KafkaSource::start(settings).expect("source");
    let (records, mut received) = mpsc::unbounded_channel::<Record>();
    let mut got: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(90);
    while got != expected {
        tokio::select! {
            event = events.recv() => match event.expect("source running") {
                SourceEvent::Assigned { partitions } => {
                    for (_, mut stream) in opened(partitions) {
                        let records = records.clone();
                        tokio::spawn(async move {
                            while let Some(record) = stream.recv().await {
                                let _ = records.send(record);
                            }
                        });
                    }
                }
                SourceEvent::Revoked { revocation, .. } => revocation.done(),
                SourceEvent::Lost { partitions } => panic!("lost {partitions:?}"),
                SourceEvent::Failed { reason } => panic!("the source failed: {reason}"),
            },
            Some(record) = received.recv() => {
                let payload = String::from_utf8(record.payload.clone().expect("a payload"))
                    .expect("the payload as produced");
                record.ack.handled();
                got.entry(record.topic.to_string()).or_default().insert(payload);
            }
            () = tokio::time::sleep_until(deadline) => {
                let counts: BTreeMap<&String, usize> = got.iter().map(|(t, p)| (t, p.len())).collect();
                panic!(
                    "within 90 s, of {PER_CODEC} records per codec the source got {counts:?}; broker log:\n{}",
                    broker.log()
                );
            }
        }
    }
    // Closing revokes every partition; answered, it goes at once.
    tokio::spawn(async move {
        while let Some(event) = events.recv().await {
            if let SourceEvent::Revoked { revocation, .. } = event {
                revocation.done();
            }
        }
    });
    tokio::task::spawn_blocking(move || source.shutdown())
        .await
        .expect("source stopped");
}
