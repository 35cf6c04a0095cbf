//! Delivery between nodes over gRPC: a busy receiver slows its sender down
//! and is never resent to; a Link that breaks mid-stream is opened again
//! and nothing is lost or handled twice.

use colo::allocation::{ExternalAllocationClient, ExternalAllocationStrategy, RegionId};
use colo::coordinator::hosting::StaticHosting;
use colo::transport::grpc::{GrpcSettings, GrpcTransport};
use colo::{
    CoordinatorHandle, Entity, EntityContext, EntityError, EntityType, InMemoryStore, Node, Region,
    ShardingSettings,
};
use colo_tests::proxy::Proxy;
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio_stream::wrappers::TcpListenerStream;

const ENTITY_TYPE: &str = "recorder";

#[derive(Debug, Clone, Serialize, Deserialize)]
enum Msg {
    Record(u64),
}

/// Every sequence number an entity handled, in order, and how long each
/// handler takes.
#[derive(Default)]
struct Log {
    seqs: Mutex<Vec<u64>>,
    delay: Mutex<Duration>,
}

struct Recorder(Arc<Log>);

impl Entity for Recorder {
    type Message = Msg;
    type Reply = ();

    async fn handle(&mut self, _ctx: &EntityContext, message: Msg) -> Result<(), EntityError> {
        let delay = *self.0.delay.lock();
        if !delay.is_zero() {
            tokio::time::sleep(delay).await;
        }
        let Msg::Record(seq) = message;
        self.0.seqs.lock().push(seq);
        Ok(())
    }
}

fn settings(mailbox: usize) -> ShardingSettings {
    ShardingSettings {
        number_of_shards: 4,
        retry_interval: Duration::from_millis(100),
        shard_mailbox_capacity: mailbox,
        heartbeat_interval: Duration::from_millis(100),
        fence_timeout: Duration::from_millis(700),
        region_timeout: Duration::from_secs(1),
        ..ShardingSettings::default()
    }
}

/// The region timeout is 1 s: a batch waiting longer than that for an ack
/// would have been resent by a sender that mixed flow control with failure
/// detection.
fn grpc_settings() -> GrpcSettings {
    GrpcSettings {
        connect_timeout: Duration::from_millis(500),
        heartbeat_interval: Duration::from_millis(100),
        region_timeout: Duration::from_secs(1),
    }
}

struct Cluster {
    sender: Region<Recorder>,
    receiver: Region<Recorder>,
    log: Arc<Log>,
    locations: ExternalAllocationClient,
    _nodes: Vec<Arc<Node>>,
    proxy: Option<Proxy>,
}

/// Two nodes: the sender hosts the coordinator; the receiver is reached
/// through a proxy when `proxied`.
async fn cluster(mailbox: usize, proxied: bool) -> Cluster {
    let log = Arc::new(Log::default());
    let locations = ExternalAllocationClient::new();
    let a = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let b = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let a_address = a.local_addr().unwrap().to_string();
    let b_address = b.local_addr().unwrap().to_string();
    let proxy = if proxied {
        Some(Proxy::start(&b_address).await)
    } else {
        None
    };
    let b_advertised = proxy.as_ref().map_or(b_address, |p| p.address.clone());
    let mut nodes = Vec::new();
    let mut regions = Vec::new();
    for (listener, advertised) in [(a, a_address.clone()), (b, b_advertised)] {
        let hosting = Arc::new(StaticHosting::new(&a_address));
        if advertised == a_address {
            let strategy = ExternalAllocationStrategy::new(locations.clone());
            let handle = CoordinatorHandle::spawn(
                ENTITY_TYPE,
                settings(mailbox),
                Box::new(strategy),
                Arc::new(InMemoryStore::new()),
            )
            .unwrap();
            hosting.host(handle, 1, Some(locations.clone()));
        }
        let transport = GrpcTransport::new(&advertised, grpc_settings(), hosting);
        let node = Arc::new(Node::new(transport.clone()));
        let entity = {
            let log = log.clone();
            EntityType::new(ENTITY_TYPE, move |_| Recorder(log.clone()))
                .with_settings(settings(mailbox))
        };
        regions.push(node.start_region(entity).unwrap());
        let server = tonic::transport::Server::builder()
            .add_service(transport.node_service())
            .add_service(transport.coordinator_service())
            .serve_with_incoming(TcpListenerStream::new(listener));
        tokio::spawn(server);
        nodes.push(node);
    }
    let receiver = regions.pop().unwrap();
    let sender = regions.pop().unwrap();
    Cluster {
        sender,
        receiver,
        log,
        locations,
        _nodes: nodes,
        proxy,
    }
}

async fn eventually<F, Fut>(what: &str, deadline: Duration, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let end = tokio::time::Instant::now() + deadline;
    while !check().await {
        assert!(
            tokio::time::Instant::now() < end,
            "timed out after {deadline:?}: {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The one entity of the test lives on the receiving node.
async fn place_on_receiver(cluster: &Cluster) -> String {
    let id = "x".to_string();
    let shard = cluster.sender.shard_of(&id);
    cluster
        .locations
        .set_location(shard, RegionId::new(cluster.receiver.node().as_str()));
    eventually(
        "both regions registered",
        Duration::from_secs(10),
        || async {
            cluster.sender.is_ready()
                && cluster.receiver.is_ready()
                && cluster
                    .receiver
                    .cluster_stats(Duration::from_secs(1))
                    .await
                    .is_ok_and(|s| s.regions.len() == 2)
        },
    )
    .await;
    assert_eq!(shard, cluster.receiver.shard_of(&id));
    id
}

/// Tells `end` after everything else and waits until it is handled: since
/// order holds per sender, a message handled twice would have been handled
/// again before it.
async fn finish(cluster: &Cluster, id: &str, end: u64) -> Vec<u64> {
    cluster.sender.tell(id, Msg::Record(end)).await.unwrap();
    eventually(
        "the last message handled",
        Duration::from_secs(30),
        || async { cluster.log.seqs.lock().last() == Some(&end) },
    )
    .await;
    cluster.log.seqs.lock().clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_busy_receiver_slows_its_sender_and_nothing_is_resent() {
    // A mailbox of one and a 50 ms handler: 100 messages take 5 s to
    // handle, five region timeouts.
    let cluster = cluster(1, false).await;
    *cluster.log.delay.lock() = Duration::from_millis(50);
    let id = place_on_receiver(&cluster).await;
    for seq in 0..100 {
        cluster.sender.tell(&id, Msg::Record(seq)).await.unwrap();
    }
    // Handled exactly once each, in order: nothing was resent while the
    // receiver was merely busy.
    let seqs = finish(&cluster, &id, 100).await;
    assert_eq!(seqs, (0..=100).collect::<Vec<u64>>());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_link_broken_mid_stream_loses_nothing_and_handles_nothing_twice() {
    let cluster = cluster(1024, true).await;
    let proxy = cluster.proxy.as_ref().unwrap();
    let id = place_on_receiver(&cluster).await;
    const N: u64 = 3000;
    let sender = tokio::spawn({
        let region = cluster.sender.clone();
        let id = id.clone();
        async move {
            for seq in 0..N {
                region.tell(&id, Msg::Record(seq)).await.unwrap();
                if seq % 64 == 0 {
                    tokio::task::yield_now().await;
                }
            }
        }
    });
    // Break the Link twice while messages are on their way.
    for at in [500, 1500] {
        eventually("traffic flowing", Duration::from_secs(20), || async {
            cluster.log.seqs.lock().len() >= at
        })
        .await;
        proxy.break_connections();
    }
    sender.await.unwrap();
    let seqs = finish(&cluster, &id, N).await;
    assert_eq!(seqs, (0..=N).collect::<Vec<u64>>());
}
