//! The node program's own checks: entity types it does not register, and
//! readiness while a Kafka-driven type's consumer starts or after it failed.
use super::*;
use crate::process::samples::counter::{Counter, COUNTER};

fn config(sets: &[&str]) -> NodeConfig {
    let mut all = vec![
        "node.listen=127.0.0.1:0".to_string(),
        "node.advertised=127.0.0.1:7001".to_string(),
        "node.admin_listen=127.0.0.1:0".to_string(),
        "coordinator.address=127.0.0.1:7001".to_string(),
    ];
    all.extend(sets.iter().map(|s| s.to_string()));
    NodeConfig::load(None, Vec::new(), &all).expect("valid config")
}

#[tokio::test]
async fn an_entity_type_the_program_does_not_register_is_refused_at_startup() {
    let program = NodeProgram::new(config(&[r#"node.entity_types=["cart"]"#]))
        .entity_type(|s| EntityType::new(COUNTER, |_| Counter::default()).with_settings(s));
    let err = program.run().await.unwrap_err().to_string();
    assert_eq!(
        err,
        "invalid config: node.entity_types: `cart` is not an entity type of this program (it registers: counter)"
    );
    let empty = NodeProgram::new(config(&[]));
    let err = empty.run().await.unwrap_err().to_string();
    assert!(err.contains("registers no entity type"), "{err}");
}

#[tokio::test]
async fn a_role_for_an_entity_type_the_node_does_not_run_is_refused_at_startup() {
    let program = NodeProgram::new(config(&["roles.cart=backend"]))
        .entity_type(|s| EntityType::new(COUNTER, |_| Counter::default()).with_settings(s));
    let err = program.run().await.unwrap_err().to_string();
    assert_eq!(
        err,
        "invalid config: roles.cart: `cart` is not an entity type this node runs (it runs: counter)"
    );
}

#[test]
fn a_kafka_driven_entity_type_keeps_the_node_unready_while_its_consumer_starts_or_after_it_failed()
{
    let running = IngestHealth::default();
    let failed = IngestHealth::default();
    failed.fail("Fatal consumer error: Broker: Static consumer fenced by other consumer with same group.instance.id".into());
    let reasons = kafka_not_ready(&[
        ("counter".into(), Some(running)),
        ("user".into(), None),
        ("device".into(), Some(failed)),
    ]);
    assert_eq!(
        reasons,
        [
            "entity type \"user\": kafka consumer starting",
            "entity type \"device\": kafka consumer failed: Fatal consumer error: Broker: Static consumer fenced by other consumer with same group.instance.id",
        ]
    );
    assert!(kafka_not_ready(&[("user".into(), Some(IngestHealth::default()))]).is_empty());
}

/// A shard's changelog write that the broker does not take is given up
/// (an error, tried again while the shard serves) within the fencing
/// margin, `coordinator.region_timeout - fence_timeout`: librdkafka drops
/// what it holds for it rather than sending it once the node has fenced
/// itself and another node owns the shard. It waited 30 s before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_changelog_write_the_broker_does_not_take_is_given_up_within_the_fencing_margin() {
    use colo_tests::rdkafka::mocking::MockCluster;
    use colo_tests::rdkafka::producer::DefaultProducerContext;
    let broker: MockCluster<'static, DefaultProducerContext> =
        MockCluster::new(1).expect("mock cluster");
    broker
        .create_topic("bounded.counter.changelog", 2, 1)
        .expect("changelog topic");
    let bootstrap = format!("kafka.bootstrap_servers={}", broker.bootstrap_servers());
    let config = config(&[bootstrap.as_str(), "kafka.cluster=bounded"]);
    let margin = config.coordinator.region_timeout - config.coordinator.fence_timeout;
    assert_eq!(kafka::changelog_write_bound(&config), margin / 2);
    let changelogs = tokio::task::spawn_blocking(move || {
        let counter = kafka::DurableType {
            name: COUNTER.into(),
            number_of_shards: 2,
            emits: false,
        };
        kafka::changelogs(&config, &[counter])
    })
    .await
    .expect("checked")
    .expect("the changelog");
    let changelog = &changelogs[0].1;
    changelog
        .write(0, &[(b"k", b"taken")])
        .await
        .expect("written while the broker is up");
    broker.broker_down(1).expect("broker down");
    let given_up = tokio::time::timeout(margin, changelog.write(0, &[(b"k", b"held")])).await;
    assert!(
        matches!(given_up, Ok(Err(_))),
        "the write still waits, or was taken, after the fencing margin: {given_up:?}"
    );
}
