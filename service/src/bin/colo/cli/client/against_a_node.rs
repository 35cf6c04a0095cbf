//! The client subcommands against a node serving the Sharding API on a
//! loopback port (moved here from the library's API tests with the
//! subcommands, which are the binary's).

use super::{execute, ClientCliError, ClientCommand, Target};
use colo::allocation::{LeastShardAllocationStrategy, LeastShardSettings};
use colo::process::api::ShardingApi;
use colo::process::samples::counter::{Counter, COUNTER};
use colo::{CoordinatorHandle, EntityType, InMemoryNetwork, InMemoryStore, Node, ShardingSettings};
use std::sync::Arc;
use std::time::Duration;

/// A node running the counter entity type and its coordinator, its API
/// served on a loopback port; the coordinator's handle and the address.
async fn served_node() -> (CoordinatorHandle, Arc<Node>, std::net::SocketAddr) {
    let settings = ShardingSettings {
        number_of_shards: 8,
        retry_interval: Duration::from_millis(50),
        ..ShardingSettings::default()
    };
    let network = InMemoryNetwork::new();
    let strategy = LeastShardAllocationStrategy::new(LeastShardSettings::default())
        .expect("least-shard settings");
    let coordinator = CoordinatorHandle::spawn(
        COUNTER,
        settings.clone(),
        Box::new(strategy),
        Arc::new(InMemoryStore::new()),
    )
    .expect("coordinator settings");
    network.host_coordinator(coordinator.clone());
    let node = Arc::new(Node::new(network.transport("a")));
    node.start_region(EntityType::new(COUNTER, |_| Counter::default()).with_settings(settings))
        .expect("counter registers");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind loopback");
    let addr = listener.local_addr().expect("local addr");
    let (trigger, _shutdown) = tokio::sync::watch::channel(false);
    let service = ShardingApi::new(node.clone(), Duration::from_secs(5), trigger);
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(service)
            .serve_with_incoming(colo::transport::grpc::incoming(listener)),
    );
    (coordinator, node, addr)
}

#[tokio::test]
async fn the_cli_tells_asks_and_reports_status_codes() {
    let (_coordinator, _node, addr) = served_node().await;
    let target = |json| Target {
        addr: addr.to_string(),
        entity_type: COUNTER.into(),
        json,
        credentials: Default::default(),
    };
    let told = execute(ClientCommand::Tell {
        target: target(false),
        id: "cli".into(),
        idempotency_key: None,
        message: r#"{"Add":4}"#.into(),
    })
    .await
    .expect("tell");
    assert!(told.starts_with("told counter/cli (shard "), "{told}");
    // Told again with a key, then retried: applied once.
    for (n, expected) in [(1, "told counter/cli"), (2, "had applied a tell")] {
        let told = execute(ClientCommand::Tell {
            target: target(false),
            id: "cli".into(),
            idempotency_key: Some("cli-once".into()),
            message: r#"{"Add":0}"#.into(),
        })
        .await
        .expect("keyed tell");
        assert!(told.contains(expected), "try {n}: {told}");
    }
    let asked = execute(ClientCommand::Ask {
        target: target(true),
        id: "cli".into(),
        message: "Get".into(),
        timeout: Some(Duration::from_secs(2)),
    })
    .await
    .expect("ask");
    let asked: serde_json::Value = serde_json::from_str(&asked).expect("JSON output");
    assert_eq!(asked["reply"], serde_json::json!(4));

    let err = execute(ClientCommand::Ask {
        target: target(false),
        id: "cli".into(),
        message: r#""Reset""#.into(),
        timeout: None,
    })
    .await
    .expect_err("unknown variant");
    assert!(matches!(err, ClientCliError::Status(_)), "{err:?}");
    assert!(
        err.to_string().starts_with("INVALID_ARGUMENT: payload"),
        "{err}"
    );

    let stats = execute(ClientCommand::Stats {
        target: target(false),
        timeout: Some(Duration::from_secs(2)),
    })
    .await
    .expect("stats");
    assert!(stats.lines().any(|l| l.starts_with("total ")), "{stats}");
}
