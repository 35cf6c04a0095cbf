//! The node program's own checks: entity types it does not register, and
//! readiness while a Kafka-driven type's consumer starts or after it failed.
use super::*;
use crate::samples::counter::{Counter, COUNTER};

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
