//! Asks to remote entities, forwarded over the gRPC transport to a second
//! node on loopback, side by side with asks to local entities in the same
//! run and on the same runtime (2 worker threads, both nodes in this
//! process, so the two nodes share the machine's two cores).
//!
//! `cargo bench -p colo --bench remote_ask` prints the median asks per
//! second over several rounds for 1 and 64 concurrent askers, and the ratio
//! remote / local.

use colo::coordinator::hosting::StaticHosting;
use colo::samples::counter::{Counter, CounterMsg, COUNTER};
use colo::transport::grpc::{GrpcSettings, GrpcTransport};
use colo::{CoordinatorHandle, EntityType, InMemoryStore, Node, Region, ShardingSettings};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::net::TcpListener;

const ROUNDS: usize = 5;
const ASKS_PER_ROUND: usize = 20_000;
const ENTITIES: usize = 2_000;
const TIMEOUT: Duration = Duration::from_secs(10);

fn settings() -> ShardingSettings {
    ShardingSettings {
        number_of_shards: 100,
        ..ShardingSettings::default()
    }
}

async fn node(
    listener: TcpListener,
    coordinator: &str,
    host: bool,
) -> (Arc<Node>, Region<Counter>) {
    let address = listener.local_addr().expect("bound").to_string();
    let hosting = Arc::new(StaticHosting::new(coordinator));
    if host {
        let strategy = colo::allocation::LeastShardAllocationStrategy::new(
            colo::allocation::LeastShardSettings::default(),
        )
        .expect("valid strategy");
        let handle = CoordinatorHandle::spawn(
            COUNTER,
            settings(),
            Box::new(strategy),
            Arc::new(InMemoryStore::new()),
        )
        .expect("valid settings");
        hosting.host(handle, 1);
    }
    let transport = GrpcTransport::new(&address, GrpcSettings::default(), hosting);
    let node = Arc::new(Node::new(transport.clone()));
    let region = node
        .start_region(EntityType::new(COUNTER, |_| Counter::default()).with_settings(settings()))
        .expect("valid entity type");
    let server = tonic::transport::Server::builder()
        .add_service(transport.node_service())
        .add_service(transport.coordinator_service())
        .serve_with_incoming(colo::transport::grpc::incoming(listener));
    tokio::spawn(server);
    (node, region)
}

/// Asks per second with `askers` concurrent askers cycling over `ids`.
async fn measure(region: &Region<Counter>, ids: &Arc<Vec<String>>, askers: usize) -> f64 {
    let per_asker = ASKS_PER_ROUND / askers;
    let start = Instant::now();
    let tasks: Vec<_> = (0..askers)
        .map(|a| {
            let region = region.clone();
            let ids = ids.clone();
            tokio::spawn(async move {
                for i in 0..per_asker {
                    let id = &ids[(a * per_asker + i) % ids.len()];
                    region
                        .ask(id, CounterMsg::Add(1), TIMEOUT)
                        .await
                        .expect("ask answered");
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.expect("asker");
    }
    (per_asker * askers) as f64 / start.elapsed().as_secs_f64()
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let la = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let lb = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let coordinator = la.local_addr().expect("bound").to_string();
        let (_a, a) = node(la, &coordinator, true).await;
        let (_b, _region_b) = node(lb, &coordinator, false).await;
        // Wait for both regions, then place every entity.
        loop {
            if let Ok(stats) = a.cluster_stats(Duration::from_secs(1)).await {
                if stats.regions.len() == 2 {
                    break;
                }
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let all: Vec<String> = (0..ENTITIES).map(|i| format!("e{i}")).collect();
        for id in &all {
            a.ask(id, CounterMsg::Get, TIMEOUT).await.expect("placed");
        }
        let state = a.state(Duration::from_secs(5)).await.expect("region state");
        let local: std::collections::BTreeSet<String> = state
            .shards
            .values()
            .flatten()
            .map(|id| id.to_string())
            .collect();
        let (here, there): (Vec<String>, Vec<String>) =
            all.into_iter().partition(|id| local.contains(id));
        println!(
            "entities: {} local to the asking node, {} on the other node",
            here.len(),
            there.len()
        );
        let (here, there) = (Arc::new(here), Arc::new(there));
        println!(
            "{:<10} {:>14} {:>14} {:>8}",
            "askers", "local asks/s", "remote asks/s", "ratio"
        );
        for askers in [1, 64] {
            let (mut l, mut r) = (Vec::new(), Vec::new());
            for _ in 0..ROUNDS {
                l.push(measure(&a, &here, askers).await);
                r.push(measure(&a, &there, askers).await);
            }
            let (l, r) = (median(l), median(r));
            println!("{askers:<10} {l:>14.0} {r:>14.0} {:>8.2}", r / l);
        }
    });
}
