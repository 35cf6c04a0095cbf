//! Roles on Apache Kafka: three `colo run` nodes electing their
//! coordinator, two with the role `backend` that the durable `user` type
//! has, one without (`front`). Purchases flow from murmur2 and from
//! librdkafka's default partitioner while one backend node is killed
//! (kill -9) and started again. The `user` type's consumer group has the
//! backend nodes only, its shards run on them only, and a client asking
//! through the front node gets every user's exact totals.

mod common;

use colo_tests::broker::Broker;
use colo_tests::process::NodeProcess;
use colo_tests::purchases::{handled, verify, Producer};
use colo_tests::user_nodes::*;
use colo_tests::wait;
use common::OtherPartitioner;
use std::time::Duration;

fn with(sets: &[String], more: &str) -> Vec<String> {
    let mut sets = sets.to_vec();
    sets.push(more.to_string());
    sets
}

/// Waits until the broker lists `count` members in `group`.
async fn await_members(broker: &Broker, group: &str, count: usize) {
    let mut last = Vec::new();
    let held = wait::held_within(Duration::from_secs(60), || {
        last = broker.group_members(group);
        std::future::ready(last.len() == count)
    })
    .await;
    assert!(held, "{group} has members {last:?}, not {count}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kafka_driven_type_with_a_role_is_consumed_and_hosted_by_its_nodes_only() {
    let broker = Broker::start();
    let dir = tempfile::tempdir().expect("dir");
    let (topic, cluster) = unique("roles");
    let sets = with(
        &elected_sets(broker.bootstrap(), &topic, &cluster),
        r#"roles.user="backend""#,
    );
    let backend = with(&sets, r#"node.roles=["backend"]"#);
    let front = with(&sets, r#"node.roles=["front"]"#);
    let mut a = start(None, &backend);
    let b = start(None, &backend);
    let c = start(None, &front);
    for node in [&a, &b, &c] {
        node.await_ready(READY).await;
    }
    await_hosting(&a).await;
    await_hosting(&b).await;
    let group = format!("{cluster}.user");
    await_members(&broker, &group, 2).await;

    let bootstrap = broker.bootstrap();
    let murmur2 = Producer::start(dir.path(), bootstrap, &topic, 30, 2400, Some(120));
    let crc = OtherPartitioner::start(
        dir.path(),
        bootstrap,
        &topic,
        "consistent_random",
        "crc-user-",
        20,
        480,
        24,
        None,
    );
    wait::until("purchases handled before the kill", ALL_HANDLED, || {
        std::future::ready(handled(&[&a, &b]).values().map(Vec::len).sum::<usize>() >= 300)
    })
    .await;
    a.kill();
    wait::until("b hosts every shard", ALL_HANDLED, || async {
        metric(&b, "colo_region_hosted_shards{").await == 12.0
    })
    .await;
    a.restart();
    a.await_ready(READY).await;
    await_hosting(&a).await;

    let murmur2_file = murmur2.expected_file();
    let murmur2 = murmur2.finished(Duration::from_secs(90)).await;
    let crc_file = crc.expected_file();
    let crc = crc.finished().await;
    let nodes: [&NodeProcess; 3] = [&a, &b, &c];
    await_all_handled(&nodes, &murmur2).await;
    let crc_last = crc
        .users
        .iter()
        .map(|(user, stats)| (user.clone(), stats.last_sequence))
        .collect();
    await_all_handled(&nodes, &crc_last).await;
    // Asked through the node without the role: it routes as a proxy.
    for (file, what) in [(&murmur2_file, "murmur2"), (&crc_file, "consistent_random")] {
        if let Err(mismatch) = verify(file, &c.grpc).await {
            panic!(
                "{what} users' totals asked through c differ: {mismatch}\n{}",
                kafka_logs(&nodes)
            );
        }
    }
    assert!(
        handled(&[&c]).is_empty(),
        "the node without the role handled purchases"
    );
    assert_eq!(metric(&c, "colo_region_hosted_shards{").await, 0.0);
    assert_eq!(
        metric(&c, "colo_kafka_records_total{").await,
        0.0,
        "the node without the role consumed records"
    );
    await_members(&broker, &group, 2).await;
}
