//! A durable entity type fed by Kafka: a record is acked only once the
//! state it changed is written, so a partition's records in flight wait
//! for the shard's next write. The broker is librdkafka's in-process mock
//! cluster, as for the other in-process scenarios; the partition pauses
//! and resumes at its in-flight bound.

use crate::ledger::{open, Ledger, LedgerMsg};
use colo::allocation::{
    ExternalAllocationClient, ExternalAllocationStrategy, KafkaMurmur2Extractor,
};
use colo::kafka::{IngestSettings, KafkaIngest, RecordDecoder};
use colo::state::StateStore;
use colo::{
    CoordinatorHandle, EntityType, InMemoryNetwork, InMemoryStore, Node, NodeStore,
    ShardingSettings, StateSettings,
};
use colo_connectors::SourceSettings;
use colo_tests::rdkafka::mocking::MockCluster;
use colo_tests::recorded::{self, counter};
use std::sync::Arc;
use std::time::Duration;

const PARTITIONS: u32 = 2;
const MAX_IN_FLIGHT: usize = 10;

/// Key: the account; payload: the amount added (the record's number), or
/// `delete`.
fn additions() -> RecordDecoder<LedgerMsg> {
    Arc::new(|record: &colo_connectors::Record| {
        let id = std::str::from_utf8(record.key.as_deref().ok_or("no key")?)
            .map_err(|e| e.to_string())?
            .to_string();
        let payload = std::str::from_utf8(record.payload.as_deref().ok_or("no payload")?)
            .map_err(|e| e.to_string())?;
        if payload == "delete" {
            return Ok((id, LedgerMsg::Delete));
        }
        let amount = payload
            .parse()
            .map_err(|e: std::num::ParseIntError| e.to_string())?;
        Ok((id, LedgerMsg::Add(amount)))
    })
}

/// A node with the durable ledger fed by `topic` (on `broker`, with its
/// dead-letter topic), writing to `store` with `state`.
fn ledger_node(
    name: &str,
    broker: &MockCluster<'static, colo_tests::rdkafka::producer::DefaultProducerContext>,
    store: &Arc<dyn StateStore>,
    state: StateSettings,
) -> (Node, KafkaIngest) {
    let topic = format!("{name}.events");
    broker
        .create_topic(&topic, PARTITIONS as i32, 1)
        .expect("topic");
    broker
        .create_topic(&format!("{topic}.dlq"), 1, 1)
        .expect("dead-letter topic");
    let bootstrap = broker.bootstrap_servers();
    let settings = ShardingSettings {
        number_of_shards: PARTITIONS,
        retry_interval: Duration::from_millis(50),
        handoff_timeout: Duration::from_secs(5),
        ..ShardingSettings::default()
    };
    let network = InMemoryNetwork::new();
    let coordinator = CoordinatorHandle::spawn(
        name,
        settings.clone(),
        Box::new(ExternalAllocationStrategy::new(
            ExternalAllocationClient::new(),
        )),
        Arc::new(InMemoryStore::new()),
    )
    .expect("coordinator settings");
    network.host_coordinator(coordinator.clone());
    let node = Node::with_state_store(network.transport("a"), NodeStore::new(store.clone(), state));
    let region = node
        .start_region(
            EntityType::new(name, |_| Ledger::default())
                .with_settings(settings)
                .with_extractor(KafkaMurmur2Extractor::new(PARTITIONS).expect("partitions"))
                .durable(1),
        )
        .expect("region");
    let ingest = KafkaIngest::start(
        region,
        IngestSettings {
            source: SourceSettings {
                max_in_flight: MAX_IN_FLIGHT,
                max_in_flight_total: 1_000_000,
                // A 6 s session, not the shared 10 s: the test took 11 s
                // with that on the mock cluster, 4 s with this.
                client: vec![
                    ("session.timeout.ms".into(), "6000".into()),
                    ("heartbeat.interval.ms".into(), "500".into()),
                ],
                ..colo_tests::kafka::source_settings(&bootstrap, &topic, &format!("{topic}.ledger"))
            },
            delivery_timeout: Duration::from_secs(5),
            placement_timeout: Duration::from_secs(10),
            max_attempts: 3,
            redelivery_timeout: Duration::from_secs(60),
            retry_backoff: Duration::from_millis(50),
            dead_letter_topic: format!("{topic}.dlq"),
        },
        additions(),
    )
    .expect("ingest");
    (node, ingest)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_waiting_for_a_write_do_not_wait_for_the_flush_interval_at_the_in_flight_bound() {
    recorded::install();
    let name = "ledger-in-flight";
    let broker = MockCluster::new(1).expect("mock cluster");
    let topic = format!("{name}.events");
    // Written only when something asks for it: an hour's flush interval,
    // and more entities than the test has.
    let dir = tempfile::tempdir().expect("dir");
    let state = StateSettings {
        flush_interval: Duration::from_secs(3600),
        max_dirty: 100_000,
        ..StateSettings::default()
    };
    let (node, ingest) = ledger_node(name, &broker, &open(&dir), state);
    let bootstrap = broker.bootstrap_servers();

    // Many more records per partition than it may have in flight.
    let accounts: Vec<String> = (0..8).map(|i| format!("acct-{i}")).collect();
    let rounds = 25;
    colo_tests::kafka::produce(&bootstrap, &topic, &accounts, 0..rounds);

    // Before, each partition stopped at its in-flight bound (its records
    // wait for a write) until the flush interval, an hour, wrote them: at
    // most 2 x 10 of the 200 records were handled.
    let total = (rounds as usize * accounts.len()) as u64;
    let handled = [
        ("entity_type", name),
        ("topic", topic.as_str()),
        ("outcome", "handled"),
    ];
    colo_tests::wait::until_ok(Duration::from_secs(30), || async {
        match counter(colo::metrics::KAFKA_RECORDS, &handled) {
            n if n == total => Ok(()),
            n => Err(format!("{n} of {total} records handled")),
        }
    })
    .await;
    assert!(
        counter(
            colo::metrics::STATE_WRITES,
            &[("entity_type", name), ("outcome", "ok")]
        ) > 0,
        "the writes the partitions asked for ran"
    );
    ingest.shutdown().await;
    node.shutdown().await;
}

/// An account deleted by a record is written as a deletion (what it
/// applied, so that its records consumed again are skipped), and removed
/// once the group has committed past its records: nothing of it is left in
/// the node's store. Before, the deletion stayed for good, and the store
/// (and changelog) grew with every id ever deleted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_entity_deleted_by_a_record_leaves_no_record_once_its_offsets_are_committed() {
    recorded::install();
    let name = "ledger-removed-by-record";
    let broker = MockCluster::new(1).expect("mock cluster");
    let topic = format!("{name}.events");
    let dir = tempfile::tempdir().expect("dir");
    let store = open(&dir);
    let (node, ingest) = ledger_node(name, &broker, &store, crate::ledger::at_once());
    let bootstrap = broker.bootstrap_servers();
    let accounts = ["gone".to_string(), "kept".to_string()];
    colo_tests::kafka::produce(&bootstrap, &topic, &accounts, 1..4);
    let producer: colo_tests::rdkafka::producer::BaseProducer =
        colo_tests::rdkafka::ClientConfig::new()
            .set("bootstrap.servers", &bootstrap)
            .set("partitioner", "murmur2_random")
            .create()
            .expect("producer");
    producer
        .send(
            colo_tests::rdkafka::producer::BaseRecord::to(&topic)
                .key("gone")
                .payload("delete"),
        )
        .expect("queued");
    colo_tests::rdkafka::producer::Producer::flush(&producer, Duration::from_secs(10))
        .expect("flushed");

    let removed = [("entity_type", name)];
    // The group's join and the records' commit: well under a minute here
    // (4 s alone), given a loaded machine's slack.
    colo_tests::wait::until_ok(Duration::from_secs(60), || async {
        match counter(colo::metrics::STATE_REMOVED_ENTITIES, &removed) {
            0 => Err(format!(
                "no entity removed; handled: {}, writes: {}",
                counter(
                    colo::metrics::KAFKA_RECORDS,
                    &[
                        ("entity_type", name),
                        ("topic", topic.as_str()),
                        ("outcome", "handled")
                    ]
                ),
                counter(
                    colo::metrics::STATE_WRITES,
                    &[("entity_type", name), ("outcome", "ok")]
                )
            )),
            _ => Ok(()),
        }
    })
    .await;
    let shard = |id: &str| {
        colo_allocation::MessageExtractor::shard_id(
            &KafkaMurmur2Extractor::new(PARTITIONS).expect("partitions"),
            id,
        )
    };
    assert_eq!(store.load(name, shard("gone"), "gone").expect("load"), None);
    let kept = store
        .load(name, shard("kept"), "kept")
        .expect("load")
        .map(|value| colo::state::StateRecord::decode(&value).expect("a record"));
    let kept = kept.expect("the other account is kept");
    let ledger: Ledger = colo::codec::decode(&kept.state.expect("a state")).expect("decodes");
    assert_eq!((ledger.balance, ledger.entries), (6, 3));
    ingest.shutdown().await;
    node.shutdown().await;
}
