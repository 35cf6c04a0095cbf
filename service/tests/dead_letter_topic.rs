//! The dead-letter topic is checked when an entity type's ingest starts: it
//! is written only when a record cannot be handled, and found missing or
//! refused only then, the record's partition would wait from then on. The
//! broker is librdkafka's in-process mock cluster, which answers metadata
//! as Kafka does (and can refuse a topic to the client).

use colo::allocation::{KafkaMurmur2Extractor, LeastShardAllocationStrategy};
use colo::kafka::{json_records, IngestError, IngestSettings, KafkaIngest};
use colo::process::samples::counter::{Counter, CounterMsg};
use colo::{
    CoordinatorHandle, EntityType, InMemoryNetwork, InMemoryStore, Node, Region, ShardingSettings,
};
use colo_connectors::SourceSettings;
use colo_tests::rdkafka::mocking::MockCluster;
use colo_tests::rdkafka::types::RDKafkaRespErr;
use std::sync::Arc;
use std::time::Duration;

const SHARDS: u32 = 4;

fn ingest_settings(bootstrap: &str, dead_letter_topic: &str) -> IngestSettings {
    IngestSettings {
        source: SourceSettings {
            bootstrap_servers: bootstrap.into(),
            group_id: "dlq-check.counter".into(),
            topics: vec!["dlq-check.events".into()],
            client: vec![],
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
        dead_letter_topic: dead_letter_topic.into(),
    }
}

fn start(
    region: &Region<Counter>,
    bootstrap: &str,
    dead_letter_topic: &str,
) -> Result<KafkaIngest, IngestError> {
    KafkaIngest::start(
        region.clone(),
        ingest_settings(bootstrap, dead_letter_topic),
        json_records::<CounterMsg>(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ingest_does_not_start_without_a_usable_dead_letter_topic_and_names_it() {
    let broker = MockCluster::new(1).expect("mock cluster");
    broker
        .create_topic("dlq-check.events", SHARDS as i32, 1)
        .expect("topic");
    let bootstrap = broker.bootstrap_servers();
    let settings = ShardingSettings {
        number_of_shards: SHARDS,
        handoff_timeout: Duration::from_secs(5),
        ..ShardingSettings::default()
    };
    let network = InMemoryNetwork::new();
    network.host_coordinator(
        CoordinatorHandle::spawn(
            "counter",
            settings.clone(),
            Box::new(LeastShardAllocationStrategy::default()),
            Arc::new(InMemoryStore::new()),
        )
        .expect("coordinator"),
    );
    let node = Node::new(network.transport("node-1"));
    let region = node
        .start_region(
            EntityType::new("counter", |_id| Counter::default())
                .with_settings(settings)
                .with_extractor(KafkaMurmur2Extractor::new(SHARDS).expect("extractor")),
        )
        .expect("region");

    // Missing: the error names the topic and where it is configured.
    let missing = start(&region, &bootstrap, "dlq-check.counter.dlq")
        .expect_err("no dead-letter topic")
        .to_string();
    for part in [
        "\"counter\"",
        "\"dlq-check.counter.dlq\"",
        "does not exist",
        "kafka.dead_letter_topics.counter",
        "kafka.create_topics",
    ] {
        assert!(missing.contains(part), "{part} in: {missing}");
    }

    // There, the ingest starts.
    broker
        .create_topic("dlq-check.counter.dlq", 1, 1)
        .expect("topic");
    start(&region, &bootstrap, "dlq-check.counter.dlq")
        .expect("the ingest starts")
        .shutdown()
        .await;

    // Refused to the node: as good as missing.
    broker
        .create_topic("dlq-check.denied", 1, 1)
        .expect("topic");
    broker
        .topic_error(
            "dlq-check.denied",
            RDKafkaRespErr::RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED,
        )
        .expect("refused");
    let refused = start(&region, &bootstrap, "dlq-check.denied")
        .expect_err("a refused dead-letter topic")
        .to_string();
    assert!(
        refused.contains("\"dlq-check.denied\"") && refused.contains("does not authorize"),
        "{refused}"
    );
    node.shutdown().await;
}
