//! Asks to remote entities, forwarded over the gRPC transport to a second
//! node on loopback, side by side with asks to local entities in the same
//! run and on the same runtime (2 worker threads, both nodes in this
//! process, so the two nodes share the machine's two cores).
//!
//! A second pair of nodes speaks mutual TLS (`[tls]`, certificates made by
//! `scripts/certs.sh`, which needs openssl): its remote asks are measured in
//! the same rounds, so TLS's cost stands beside plain text's.
//!
//! `cargo bench -p colo --bench remote_ask` prints the median asks per
//! second over several rounds for 1 and 64 concurrent askers, and the ratios
//! remote / local and TLS / plain.

use colo::coordinator::hosting::StaticHosting;
use colo::process::config::TlsSettings;
use colo::process::samples::counter::{Counter, CounterMsg, COUNTER};
use colo::process::security::{AccessLayer, Policy};
use colo::transport::grpc::{GrpcSettings, GrpcTransport};
use colo::transport::tls::NodeTls;
use colo::TaskSet;
use colo::{CoordinatorHandle, EntityType, InMemoryStore, Node, Region, ShardingSettings};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::net::TcpListener;

/// The acceptors' tasks, for the bench's whole run.
static TASKS: std::sync::LazyLock<TaskSet> = std::sync::LazyLock::new(TaskSet::default);

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
    tls: Option<&TlsSettings>,
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
    let tls = match tls {
        Some(section) => Some(NodeTls::load(section, &address).await.expect("TLS files")),
        None => None,
    };
    let grpc = GrpcSettings {
        tls: tls.clone(),
        ..GrpcSettings::default()
    };
    let transport = GrpcTransport::new(&address, grpc, hosting);
    let node = Arc::new(Node::new(transport.clone()));
    let region = node
        .start_region(EntityType::new(COUNTER, |_| Counter::default()).with_settings(settings()))
        .expect("valid entity type");
    let access = AccessLayer::new(Policy {
        tls: tls.is_some(),
        client_certificates: true,
        tokens: None,
    });
    // The node program's own acceptor: TLS handshakes, then every request
    // checked.
    let incoming = colo::transport::tls::connection::incoming(listener, tls, &TASKS);
    let server = tonic::transport::Server::builder()
        .layer(access)
        .add_service(transport.node_service())
        .add_service(transport.coordinator_service())
        .serve_with_incoming(incoming);
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

/// Certificates for 127.0.0.1 from a new CA, made by the repository's
/// script, and the `[tls]` naming them.
fn certificates(dir: &std::path::Path) -> TlsSettings {
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/certs.sh");
    let status = std::process::Command::new("bash")
        .arg(script)
        .arg(dir)
        .arg("127.0.0.1")
        .stdout(std::process::Stdio::null())
        .status()
        .expect("run scripts/certs.sh");
    assert!(status.success(), "scripts/certs.sh failed");
    TlsSettings {
        ca: dir.join("ca.pem"),
        cert: dir.join("127.0.0.1.pem"),
        key: dir.join("127.0.0.1.key"),
        admin: false,
        reload_interval: Duration::from_secs(10),
    }
}

/// Two nodes, the first hosting the coordinator; every entity placed. The
/// first's region, and the entities local to it and on the other node.
async fn pair(
    tls: Option<&TlsSettings>,
) -> (Vec<Arc<Node>>, Region<Counter>, Vec<String>, Vec<String>) {
    let la = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let lb = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let coordinator = la.local_addr().expect("bound").to_string();
    let (na, a) = node(la, &coordinator, true, tls).await;
    let (nb, _region_b) = node(lb, &coordinator, false, tls).await;
    // Wait for both regions, then place every entity.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        if let Ok(stats) = a.cluster_stats(Duration::from_secs(1)).await {
            if stats.regions.len() == 2 {
                break;
            }
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the two regions did not register within 60 s"
        );
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
    (vec![na, nb], a, here, there)
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let dir = tempfile::tempdir().expect("a directory for the certificates");
    let tls = certificates(dir.path());
    runtime.block_on(async {
        let (_plain_nodes, a, here, there) = pair(None).await;
        let (_tls_nodes, a_tls, _, there_tls) = pair(Some(&tls)).await;
        println!(
            "entities: {} local to the asking node, {} on the other node ({} over TLS)",
            here.len(),
            there.len(),
            there_tls.len()
        );
        let (here, there, there_tls) = (Arc::new(here), Arc::new(there), Arc::new(there_tls));
        println!(
            "{:<10} {:>14} {:>14} {:>8} {:>14} {:>12}",
            "askers", "local asks/s", "remote asks/s", "ratio", "TLS asks/s", "TLS / plain"
        );
        for askers in [1, 64] {
            let (mut l, mut r, mut t) = (Vec::new(), Vec::new(), Vec::new());
            for _ in 0..ROUNDS {
                l.push(measure(&a, &here, askers).await);
                r.push(measure(&a, &there, askers).await);
                t.push(measure(&a_tls, &there_tls, askers).await);
            }
            let (l, r, t) = (median(l), median(r), median(t));
            println!(
                "{askers:<10} {l:>14.0} {r:>14.0} {:>8.2} {t:>14.0} {:>12.2}",
                r / l,
                t / r
            );
        }
    });
}
