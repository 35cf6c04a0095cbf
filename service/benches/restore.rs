//! Restore rate of durable state: a shard that starts on a node with an
//! empty store reads its changelog partition (`COLO_BENCH_ENTITIES`
//! entity states, default 200000) into the node's store before its first
//! message is answered; entities restored per second, for each engine, in
//! one run. The changelog is on the test broker (Apache Kafka, on
//! loopback, sharing the machine's two cores with the node). The baseline,
//! in the same run: a bare consumer reading the same partition from its
//! first record to its last, with the changelog reader's fetch settings.
//!
//! Then from the local store: a node restarts on that store with
//! remember-entities on; entities started per second from the region's
//! start until every remembered entity has its state (the shard's restore
//! reads only the changelog after the store's checkpoint: nothing).
//!
//! `cargo bench -p colo --bench restore`

mod support;

use colo::state::{Engine, StateRecord};
use colo::{
    Entity, EntityContext, EntityError, EntityRecovery, EntityType, Node, NodeStore, Region,
    ShardingSettings,
};
use colo_connectors::Changelog;
use colo_tests::broker::Broker;
use serde::{Deserialize, Serialize};
use std::time::{Duration, Instant};

#[derive(Debug, Default, Serialize, Deserialize)]
struct Counter {
    value: i64,
}

impl Entity for Counter {
    type Message = ();
    type Reply = i64;

    async fn handle(&mut self, _: &EntityContext, (): ()) -> Result<i64, EntityError> {
        Ok(self.value)
    }
}

const TYPE: &str = "restored";

async fn restore_once(
    broker: &Broker,
    run: usize,
    engine: Engine,
    entities: u64,
) -> (f64, Duration, f64, tempfile::TempDir) {
    let entity_type = format!("{TYPE}-{run}-{engine}");
    let topic = format!("{entity_type}.changelog");
    colo_connectors::create_missing_topics(
        broker.bootstrap(),
        &[],
        &[colo_connectors::NewTopicSpec {
            name: topic.clone(),
            partitions: 1,
            replication_factor: 1,
            config: Vec::new(),
        }],
        Duration::from_secs(30),
    )
    .await
    .expect("topic");
    let changelog = Changelog::new(broker.bootstrap(), &[], &topic, Duration::from_secs(60))
        .expect("changelog");
    for chunk in (0..entities).collect::<Vec<_>>().chunks(10_000) {
        let records: Vec<(Vec<u8>, Vec<u8>)> = chunk
            .iter()
            .map(|i| {
                let state = postcard::to_stdvec(&Counter { value: *i as i64 }).expect("state");
                let mut record = StateRecord::new(0, 1, Some(state));
                record.mark_applied("events", *i);
                (format!("counter-{i}").into_bytes(), record.encode())
            })
            .collect();
        changelog.write(0, &records).await.expect("written");
    }
    let bare = {
        let (bootstrap, topic) = (broker.bootstrap().to_string(), topic.clone());
        tokio::task::spawn_blocking(move || bare_read(&bootstrap, &topic, entities))
            .await
            .expect("bare read")
    };
    let dir = tempfile::tempdir().expect("dir");
    let store = support::open_store(dir.path(), engine).await;
    let settings = ShardingSettings {
        number_of_shards: 1,
        ..ShardingSettings::default()
    };
    let (node, region) = start(
        &entity_type,
        settings,
        store.with_changelog(&entity_type, changelog),
    );
    let started = Instant::now();
    let last = entities - 1;
    let value = region
        .ask(&format!("counter-{last}"), (), Duration::from_secs(600))
        .await
        .expect("answered after the restore");
    assert_eq!(value, last as i64);
    let took = started.elapsed();
    node.shutdown().await;
    drop((region, node));
    (entities as f64 / took.as_secs_f64(), took, bare, dir)
}

/// The node restarted on the store `restore_once` filled, remembering its
/// entities: entities per second until all of them have their state.
async fn from_store(
    broker: &Broker,
    run: usize,
    engine: Engine,
    entities: u64,
    dir: &tempfile::TempDir,
) -> (f64, Duration) {
    let entity_type = format!("{TYPE}-{run}-{engine}");
    let topic = format!("{entity_type}.changelog");
    let changelog = Changelog::new(broker.bootstrap(), &[], &topic, Duration::from_secs(60))
        .expect("changelog");
    let store = support::open_store(dir.path(), engine).await;
    let settings = ShardingSettings {
        number_of_shards: 1,
        remember_entities: Some(EntityRecovery::All),
        ..ShardingSettings::default()
    };
    let store = store.with_changelog(&entity_type, changelog);
    let loaded = || {
        colo_tests::recorded::counter(
            colo::metrics::STATE_LOADS,
            &[("entity_type", &entity_type), ("from", "store")],
        )
    };
    let before = loaded();
    let started = Instant::now();
    let (node, region) = start(&entity_type, settings, store);
    // The shard starts with its first message; its remembered entities
    // start with it.
    region
        .ask("counter-0", (), Duration::from_secs(600))
        .await
        .expect("answered");
    let mut tick = tokio::time::interval(Duration::from_millis(5));
    while loaded() - before < entities {
        assert!(
            started.elapsed() < Duration::from_secs(600),
            "only {} of {entities} remembered entities started",
            loaded() - before
        );
        tick.tick().await;
    }
    let took = started.elapsed();
    node.shutdown().await;
    (entities as f64 / took.as_secs_f64(), took)
}

/// The node with the counter entity type on `store`.
fn start(
    entity_type: &str,
    settings: ShardingSettings,
    store: NodeStore,
) -> (Node, Region<Counter>) {
    let node = support::one_node(entity_type, &settings, Some(store));
    let region = node
        .start_region(
            EntityType::new(entity_type, |_| Counter::default())
                .with_settings(settings)
                .durable(1),
        )
        .expect("region");
    (node, region)
}

/// Records per second of a bare consumer reading `topic`'s partition 0
/// from its first record until it has `count`.
fn bare_read(bootstrap: &str, topic: &str, count: u64) -> f64 {
    use colo_tests::rdkafka::consumer::{BaseConsumer, Consumer};
    use colo_tests::rdkafka::{ClientConfig, Offset, TopicPartitionList};
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", format!("{topic}.bare"))
        .set("enable.auto.commit", "false")
        .set("fetch.wait.max.ms", "10")
        .create()
        .expect("consumer");
    let mut assignment = TopicPartitionList::new();
    assignment
        .add_partition_offset(topic, 0, Offset::Offset(0))
        .expect("partition");
    consumer.assign(&assignment).expect("assign");
    let started = Instant::now();
    let mut seen = 0;
    while seen < count {
        match consumer.poll(Duration::from_secs(10)) {
            Some(Ok(_)) => seen += 1,
            Some(Err(e)) => panic!("bare read: {e}"),
            None => panic!("bare read stalled at {seen} of {count}"),
        }
    }
    count as f64 / started.elapsed().as_secs_f64()
}

fn main() {
    let entities: u64 = std::env::var("COLO_BENCH_ENTITIES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200_000);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let broker = Broker::start();
    colo_tests::recorded::install();
    println!("restore of one shard from its changelog into an empty store, then from that store on a restart (remembered entities): {entities} entities");
    println!("| engine | run | from the changelog, first message answered | entities/s | bare read of the partition, records/s | restore/bare read | from the local store, all remembered entities started | entities/s |");
    println!("|---|---:|---:|---:|---:|---:|---:|---:|");
    for run in 1..=2 {
        for engine in Engine::ALL {
            let (rate, took, bare, dir) =
                runtime.block_on(restore_once(&broker, run, engine, entities));
            let (local_rate, local_took) =
                runtime.block_on(from_store(&broker, run, engine, entities, &dir));
            println!(
                "| {engine} | {run} | {:.2} s | {rate:.0} | {bare:.0} | {:.2} | {:.2} s | {local_rate:.0} |",
                took.as_secs_f64(),
                rate / bare,
                local_took.as_secs_f64(),
            );
        }
    }
}
