//! The topics of running nodes changed under them. Partitions added: the
//! nodes consume them once their consumers see them, and each record of a
//! partition past the entity type's shards is handled on its key's shard,
//! exactly once; a node started afterwards refuses the topic, naming the
//! counts. A topic deleted: its shards are handed off and the node runs on.

use colo_tests::broker::Broker;
use colo_tests::process::NodeProcess;
use colo_tests::purchases::{verify, Producer};
use colo_tests::user_nodes::*;
use colo_tests::wait;
use rdkafka::admin::{AdminClient, AdminOptions, NewPartitions};
use rdkafka::client::DefaultClientContext;
use std::time::Duration;

/// `kafka_sets` whose consumers look for new partitions every second
/// (librdkafka's default is every 5 minutes).
fn watching_sets(bootstrap: &str, topic: &str, cluster: &str) -> Vec<String> {
    with_client(
        kafka_sets(bootstrap, topic, cluster),
        &[(
            "topic.metadata.refresh.interval.ms".to_string(),
            r#""1000""#.to_string(),
        )],
    )
}

async fn produce(
    dir: &std::path::Path,
    broker: &Broker,
    topic: &str,
    prefix: &str,
    via: &NodeProcess,
) {
    let producer = Producer::start_for(prefix, dir, broker.bootstrap(), topic, 20, 300, None);
    let expected = producer.expected_file();
    producer.finished(Duration::from_secs(60)).await;
    let verified = verify(&expected, &via.grpc).await;
    assert!(verified.is_ok(), "{prefix}: {verified:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partitions_added_under_running_nodes_are_handled_on_their_keys_shards() {
    let broker = Broker::start();
    let (topic, cluster) = unique("more-partitions");
    let dir = tempfile::tempdir().expect("dir");
    let sets = watching_sets(broker.bootstrap(), &topic, &cluster);
    let (a, b) = two_hosting_nodes(&sets).await;
    produce(dir.path(), &broker, &topic, "before-", &a).await;

    let admin: AdminClient<DefaultClientContext> = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", broker.bootstrap())
        .create()
        .expect("admin");
    let added = admin
        .create_partitions(&[NewPartitions::new(&topic, 16)], &AdminOptions::new())
        .await
        .expect("partitions added");
    assert!(added.iter().all(Result::is_ok), "{added:?}");
    let past = "partition past the entity type's shards";
    wait::until("the nodes consume the new partitions", READY, || {
        std::future::ready(a.logs().contains(past) || b.logs().contains(past))
    })
    .await;
    // murmur2 over 16 partitions now: some of the records go to the new
    // ones, and many to another partition than their key's shard.
    produce(dir.path(), &broker, &topic, "after-", &b).await;

    let mut c = start(Some(&a.grpc), &sets);
    let status = c.exited(Duration::from_secs(60)).await;
    let logs = c.logs();
    assert!(!status.success(), "{logs}");
    assert!(
        logs.contains("has 16 partitions but the entity type has 12 shards"),
        "a node started now refuses the topic:\n{logs}"
    );
}

/// A topic deleted under a running node takes its unhandled records with
/// it: the node's consumer loses its partitions, their shards are handed
/// off, the node says why at warn, and it keeps running (serving asks,
/// consuming its other topics). README says what to do before the topic
/// is created again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_topic_deleted_under_a_running_node_hands_its_shards_off_and_the_node_runs_on() {
    let broker = Broker::start();
    let (topic, cluster) = unique("deleted");
    let dir = tempfile::tempdir().expect("dir");
    let sets = watching_sets(broker.bootstrap(), &topic, &cluster);
    let a = start(None, &sets);
    a.await_ready(READY).await;
    await_hosting(&a).await;
    produce(dir.path(), &broker, &topic, "before-", &a).await;

    let admin: AdminClient<DefaultClientContext> = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", broker.bootstrap())
        .create()
        .expect("admin");
    let options = AdminOptions::new().operation_timeout(Some(Duration::from_secs(10)));
    let deleted = admin
        .delete_topics(&[&topic], &options)
        .await
        .expect("deleted");
    assert!(deleted.iter().all(Result::is_ok), "{deleted:?}");
    wait::until("the node hands its shards off", READY, || async {
        metric(&a, "colo_region_hosted_shards{").await == 0.0
    })
    .await;
    let logs = a.logs();
    assert!(
        logs.contains("kafka consumer error") && logs.contains("UnknownTopicOrPartition"),
        "the node says its topic is gone:\n{logs}"
    );
    assert!(
        colo_tests::http::get(&a.admin, "/metrics").await.is_ok(),
        "the node runs on"
    );
}
