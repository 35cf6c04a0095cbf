//! The runtime over the gRPC transport: three nodes of one process, each
//! with its own server on a loopback port, the coordinator on the first.

use colo::coordinator::hosting::StaticHosting;
use colo::process::samples::counter::{Counter, CounterMsg, COUNTER};
use colo::transport::grpc::{GrpcSettings, GrpcTransport};
use colo::{CoordinatorHandle, EntityType, InMemoryStore, Node, Region, ShardingSettings};
use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::oneshot;

const ASK: Duration = Duration::from_secs(5);

struct TestNode {
    node: Arc<Node>,
    region: Region<Counter>,
    stop_server: Option<oneshot::Sender<()>>,
}

fn settings() -> ShardingSettings {
    ShardingSettings {
        number_of_shards: 12,
        retry_interval: Duration::from_millis(100),
        rebalance_interval: Duration::from_millis(200),
        // A dead node's shards start elsewhere after region_timeout: the
        // tests' short timings, not colo's defaults, which outlast an
        // election through Kafka.
        heartbeat_interval: Duration::from_millis(100),
        fence_timeout: Duration::from_millis(700),
        region_timeout: Duration::from_secs(1),
        ..ShardingSettings::default()
    }
}

fn grpc_settings() -> GrpcSettings {
    GrpcSettings {
        connect_timeout: Duration::from_millis(500),
        heartbeat_interval: Duration::from_millis(100),
        region_timeout: Duration::from_secs(1),
        ..GrpcSettings::default()
    }
}

async fn start(listener: TcpListener, coordinator: &str, host: bool) -> TestNode {
    let address = listener.local_addr().unwrap().to_string();
    let hosting = Arc::new(StaticHosting::new(coordinator));
    if host {
        let handle = CoordinatorHandle::spawn(
            COUNTER,
            settings(),
            Box::new(
                colo::allocation::LeastShardAllocationStrategy::new(
                    colo::allocation::LeastShardSettings::default(),
                )
                .unwrap(),
            ),
            Arc::new(InMemoryStore::new()),
        )
        .unwrap();
        hosting.host(handle, 1);
    }
    let transport = GrpcTransport::new(&address, grpc_settings(), hosting);
    let node = Arc::new(Node::new(transport.clone()));
    let region = node
        .start_region(EntityType::new(COUNTER, |_| Counter::default()).with_settings(settings()))
        .unwrap();
    let (stop_server, stopped) = oneshot::channel::<()>();
    let server = tonic::transport::Server::builder()
        .add_service(transport.node_service())
        .add_service(transport.coordinator_service())
        .serve_with_incoming_shutdown(colo::transport::grpc::incoming(listener), async {
            let _ = stopped.await;
        });
    tokio::spawn(server);
    TestNode {
        node,
        region,
        stop_server: Some(stop_server),
    }
}

async fn cluster(n: usize) -> Vec<TestNode> {
    let mut listeners = Vec::new();
    for _ in 0..n {
        listeners.push(TcpListener::bind("127.0.0.1:0").await.unwrap());
    }
    let coordinator = listeners[0].local_addr().unwrap().to_string();
    let mut nodes = Vec::new();
    for (i, listener) in listeners.into_iter().enumerate() {
        nodes.push(start(listener, &coordinator, i == 0).await);
    }
    nodes
}

async fn eventually_ok<F, Fut>(what: &str, deadline: Duration, mut f: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let end = tokio::time::Instant::now() + deadline;
    while !f().await {
        assert!(tokio::time::Instant::now() < end, "timed out: {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn asks_reach_entities_on_every_node_over_grpc() {
    let nodes = cluster(3).await;
    eventually_ok("cluster stats list 3 regions", Duration::from_secs(10), || async {
        matches!(nodes[1].region.cluster_stats(Duration::from_secs(1)).await, Ok(s) if s.regions.len() == 3)
    })
    .await;
    // Each id gets 3 adds, one through each node, in turn.
    let ids: Vec<String> = (0..60).map(|i| format!("id-{i}")).collect();
    for (round, via) in nodes.iter().enumerate() {
        for id in &ids {
            let value = via.region.ask(id, CounterMsg::Add(1), ASK).await.unwrap();
            assert_eq!(value, round as i64 + 1, "{id}");
        }
    }
    let stats = nodes[2].region.cluster_stats(ASK).await.unwrap();
    let entities: usize = stats.regions.values().flat_map(|r| r.stats.values()).sum();
    assert_eq!(entities, 60);
    assert!(
        stats.regions.values().all(|r| !r.stats.is_empty()),
        "{stats:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_nodes_shards_start_elsewhere_over_grpc() {
    let mut nodes = cluster(3).await;
    eventually_ok("3 regions", Duration::from_secs(10), || async {
        matches!(nodes[0].region.cluster_stats(Duration::from_secs(1)).await, Ok(s) if s.regions.len() == 3)
    })
    .await;
    let ids: Vec<String> = (0..60).map(|i| format!("k-{i}")).collect();
    for id in &ids {
        nodes[1].region.tell(id, CounterMsg::Add(1)).await.unwrap();
    }
    for id in &ids {
        assert_eq!(
            nodes[1].region.ask(id, CounterMsg::Get, ASK).await.unwrap(),
            1
        );
    }
    // Node 2 dies: its server goes, its entities with it.
    let on_dead: BTreeSet<String> = nodes[2]
        .region
        .state(ASK)
        .await
        .unwrap()
        .shards
        .into_values()
        .flatten()
        .map(|id| id.to_string())
        .collect();
    assert!(!on_dead.is_empty(), "the dead node hosted nothing");
    let dead = nodes.pop().unwrap();
    dead.node.kill().await;
    drop(dead.stop_server);
    // Every id answers again, from a live node: the survivors with their
    // values, the dead node's entities from their initial state (state is
    // in memory only).
    for id in &ids {
        let mut value = None;
        let end = tokio::time::Instant::now() + Duration::from_secs(15);
        while value.is_none() && tokio::time::Instant::now() < end {
            value = nodes[1]
                .region
                .ask(id, CounterMsg::Get, Duration::from_secs(1))
                .await
                .ok();
        }
        let expected = if on_dead.contains(id) { 0 } else { 1 };
        assert_eq!(value, Some(expected), "{id}");
    }
    // Each id lives exactly once.
    let mut live = Vec::new();
    for node in &nodes {
        let state = node.region.state(ASK).await.unwrap();
        live.extend(
            state
                .shards
                .into_values()
                .flatten()
                .map(|id| id.to_string()),
        );
    }
    live.sort();
    let expected: Vec<String> = ids
        .iter()
        .cloned()
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    assert_eq!(live, expected);
    let stats = nodes[0].region.cluster_stats(ASK).await.unwrap();
    assert_eq!(stats.regions.len(), 2, "{stats:?}");
}
