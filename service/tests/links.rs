//! Delivery between nodes over gRPC: a busy receiver slows its sender down
//! and is never resent to; a Link that breaks mid-stream is opened again
//! and nothing is lost or handled twice; what comes off the wire is checked
//! again (the shard an envelope names, the incarnation a reply is for).

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
use tokio_stream::StreamExt;

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
    /// Handlers begun, finished or not.
    begun: std::sync::atomic::AtomicU64,
}

struct Recorder(Arc<Log>);

impl Entity for Recorder {
    type Message = Msg;
    type Reply = u64;

    async fn handle(&mut self, _ctx: &EntityContext, message: Msg) -> Result<u64, EntityError> {
        self.0
            .begun
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let delay = *self.0.delay.lock();
        if !delay.is_zero() {
            tokio::time::sleep(delay).await;
        }
        let Msg::Record(seq) = message;
        self.0.seqs.lock().push(seq);
        Ok(seq)
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
        ..GrpcSettings::default()
    }
}

/// A node of the test, over gRPC on a loopback port.
struct GrpcNode {
    node: Arc<Node>,
    region: Region<Recorder>,
    server: tokio::task::JoinHandle<()>,
}

impl GrpcNode {
    /// A node advertised as `advertised` (a proxy, say) and serving on
    /// `listener`; it hosts the coordinator when `locations` is given.
    fn start(
        listener: TcpListener,
        advertised: &str,
        coordinator: &str,
        locations: Option<&ExternalAllocationClient>,
        log: &Arc<Log>,
        mailbox: usize,
    ) -> Self {
        let hosting = Arc::new(StaticHosting::new(coordinator));
        if let Some(locations) = locations {
            let strategy = ExternalAllocationStrategy::new(locations.clone());
            let handle = CoordinatorHandle::spawn(
                ENTITY_TYPE,
                settings(mailbox),
                Box::new(strategy),
                Arc::new(InMemoryStore::new()),
            )
            .unwrap();
            hosting.host(handle, 1);
        }
        let transport = GrpcTransport::new(advertised, grpc_settings(), hosting);
        let node = Arc::new(Node::new(transport.clone()));
        let entity = {
            let log = log.clone();
            EntityType::new(ENTITY_TYPE, move |_| Recorder(log.clone()))
                .with_settings(settings(mailbox))
        };
        let region = node.start_region(entity).unwrap();
        let server = tonic::transport::Server::builder()
            .add_service(transport.node_service())
            .add_service(transport.coordinator_service())
            .serve_with_incoming(colo::transport::grpc::incoming(listener));
        let server = tokio::spawn(async move {
            let _ = server.await;
        });
        Self {
            node,
            region,
            server,
        }
    }

    /// kill -9: nothing handed off, the server gone.
    async fn kill(self) {
        self.node.kill().await;
        self.server.abort();
        let _ = self.server.await;
    }
}

struct Cluster {
    sender: Region<Recorder>,
    receiver: Region<Recorder>,
    log: Arc<Log>,
    locations: ExternalAllocationClient,
    /// The sender's node, then the receiver's.
    nodes: Vec<GrpcNode>,
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
    let sender = GrpcNode::start(a, &a_address, &a_address, Some(&locations), &log, mailbox);
    let receiver = GrpcNode::start(b, &b_advertised, &a_address, None, &log, mailbox);
    Cluster {
        sender: sender.region.clone(),
        receiver: receiver.region.clone(),
        log,
        locations,
        nodes: vec![sender, receiver],
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
    place(&cluster.locations, &cluster.sender, &cluster.receiver, 2).await
}

/// Entity `x` lives on `home`, once `regions` regions are registered.
async fn place(
    locations: &ExternalAllocationClient,
    via: &Region<Recorder>,
    home: &Region<Recorder>,
    regions: usize,
) -> String {
    let id = "x".to_string();
    let shard = via.shard_of(&id);
    locations.set_location(shard, RegionId::new(home.node().as_str()));
    eventually(
        "every region registered",
        Duration::from_secs(10),
        || async {
            via.is_ready()
                && home.is_ready()
                && via
                    .cluster_stats(Duration::from_secs(1))
                    .await
                    .is_ok_and(|s| s.regions.len() == regions)
        },
    )
    .await;
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

/// Opens a Link to the receiving node as `node` (a new incarnation of it)
/// and sends `envelopes` in one batch; the answers.
async fn raw_link(
    cluster: &Cluster,
    node: String,
    envelopes: Vec<colo_proto::v1::Envelope>,
) -> tonic::Streaming<colo_proto::v1::LinkAnswer> {
    use colo_proto::v1 as pb;
    let address = format!("http://{}", cluster.receiver.node());
    let mut client = pb::node_client::NodeClient::connect(address).await.unwrap();
    let frames = [
        pb::link_frame::Frame::Hello(pb::Hello {
            node,
            incarnation: 1,
        }),
        pb::link_frame::Frame::Batch(pb::Batch {
            first_sequence: 1,
            envelopes,
        }),
    ]
    .map(|frame| pb::LinkFrame { frame: Some(frame) });
    client
        .link(tokio_stream::iter(frames).chain(tokio_stream::pending()))
        .await
        .unwrap()
        .into_inner()
}

/// How many envelopes the first ack says were taken.
async fn accepted(answers: &mut tonic::Streaming<colo_proto::v1::LinkAnswer>) -> u32 {
    loop {
        if let Some(colo_proto::v1::link_answer::Answer::Ack(ack)) =
            answers.message().await.unwrap().unwrap().answer
        {
            return ack.accepted;
        }
    }
}

fn raw_envelope(id: &str, seq: u64, shard: u32) -> colo_proto::v1::Envelope {
    colo_proto::v1::Envelope {
        entity_type: ENTITY_TYPE.into(),
        entity_id: id.to_string(),
        shard,
        payload: colo::codec::encode(&Msg::Record(seq)).unwrap().to_vec(),
        reply_to: None,
        delayed: false,
        origin: None,
        idempotency_key: None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_envelope_naming_a_shard_its_entity_is_not_in_is_dropped() {
    let cluster = cluster(1024, false).await;
    let id = place_on_receiver(&cluster).await;
    // A Link of a sender that disagrees on where `x` lives.
    let shard = cluster.receiver.shard_of(&id).0;
    let envelopes = vec![raw_envelope(&id, 7, shard + 1), raw_envelope(&id, 8, shard)];
    let mut answers = raw_link(&cluster, cluster.sender.node().to_string(), envelopes).await;
    // Both taken off the wire (the first dropped, not refused: refusing
    // would make the sender send it again for ever).
    assert_eq!(accepted(&mut answers).await, 2);
    eventually(
        "the well-formed message handled",
        Duration::from_secs(10),
        || async { cluster.log.seqs.lock().contains(&8) },
    )
    .await;
    assert_eq!(
        *cluster.log.seqs.lock(),
        vec![8],
        "the mismatched one was dropped"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_link_from_a_node_no_coordinator_lists_is_refused_and_so_is_a_reply_address_naming_one() {
    let cluster = cluster(1024, false).await;
    let id = place_on_receiver(&cluster).await;
    let shard = cluster.receiver.shard_of(&id).0;
    let stranger = "127.0.0.1:1".to_string();
    let mut answers = raw_link(
        &cluster,
        stranger.clone(),
        vec![raw_envelope(&id, 6, shard)],
    )
    .await;
    let refusal = answers
        .message()
        .await
        .expect_err("a stranger's Link is refused");
    assert_eq!(
        refusal.code(),
        tonic::Code::FailedPrecondition,
        "{refusal:?}"
    );
    assert!(refusal.message().contains(&stranger), "{refusal:?}");
    // A member's Link, with an ask whose reply would go to the stranger
    // behind a tell: the ask is refused (not dropped: the asker may have
    // registered a moment ago, and its sender routes it again), the tell
    // before it is taken.
    let mut ask = raw_envelope(&id, 7, shard);
    ask.reply_to = Some(colo_proto::v1::ReplyTo {
        node: stranger,
        correlation: 1,
        incarnation: 1,
    });
    let envelopes = vec![raw_envelope(&id, 8, shard), ask];
    let mut answers = raw_link(&cluster, cluster.sender.node().to_string(), envelopes).await;
    assert_eq!(accepted(&mut answers).await, 1, "only the tell taken");
    // The Link ends after a batch it did not take whole: a later batch
    // taken on it would pass over the refused envelopes.
    while let Ok(Some(_)) = answers.message().await {}
    eventually("the tell handled", Duration::from_secs(10), || async {
        cluster.log.seqs.lock().contains(&8)
    })
    .await;
    assert_eq!(*cluster.log.seqs.lock(), vec![8], "the ask was not handled");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reply_for_an_earlier_incarnation_of_the_asker_never_completes_a_new_ask() {
    // c hosts the coordinator, b the slow entity, a asks.
    let log = Arc::new(Log::default());
    let locations = ExternalAllocationClient::new();
    let [a, b, c] = [(); 3].map(|()| std::net::TcpListener::bind("127.0.0.1:0").unwrap());
    let [a, b, c] = [a, b, c].map(|l| {
        l.set_nonblocking(true).unwrap();
        TcpListener::from_std(l).unwrap()
    });
    let [a_addr, b_addr, c_addr] = [&a, &b, &c].map(|l| l.local_addr().unwrap().to_string());
    let _c = GrpcNode::start(c, &c_addr, &c_addr, Some(&locations), &log, 1024);
    let b = GrpcNode::start(b, &b_addr, &c_addr, None, &log, 1024);
    let a = GrpcNode::start(a, &a_addr, &c_addr, None, &log, 1024);
    let id = place(&locations, &a.region, &b.region, 3).await;
    *log.delay.lock() = Duration::from_millis(1000);
    // The first incarnation of a asks, gives up, and dies.
    let first = a
        .region
        .ask(&id, Msg::Record(1), Duration::from_millis(200))
        .await;
    assert!(
        matches!(first, Err(colo::AskError::Timeout(_))),
        "{first:?}"
    );
    a.kill().await;
    // Restarted at the same address, it asks again; the reply to the first
    // ask (correlation ids start over) arrives while it waits.
    let listener = TcpListener::bind(&a_addr).await.unwrap();
    let a = GrpcNode::start(listener, &a_addr, &c_addr, None, &log, 1024);
    eventually("the new a registered", Duration::from_secs(10), || async {
        a.region.is_ready()
    })
    .await;
    let answer = a
        .region
        .ask(&id, Msg::Record(2), Duration::from_secs(10))
        .await
        .unwrap();
    assert_eq!(answer, 2, "the answer to this incarnation's own ask");
    assert_eq!(*log.seqs.lock(), vec![1, 2]);
}

/// A Kafka rebalance listener's two steps over the wire: the receiving
/// node takes a shard that runs on the sender, then lets it go, each call
/// returning once done; messages keep their order across both moves.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shards_are_hosted_and_released_on_demand_over_grpc() {
    let cluster = cluster(1024, false).await;
    let id = place(&cluster.locations, &cluster.sender, &cluster.sender, 2).await;
    let shard = cluster.sender.shard_of(&id);
    cluster.sender.tell(&id, Msg::Record(1)).await.unwrap();
    cluster
        .receiver
        .host_shards([shard], Duration::from_secs(10))
        .await
        .expect("the shard moves to the receiver");
    assert_eq!(
        cluster.locations.location(shard).map(|r| r.to_string()),
        Some(cluster.receiver.node().to_string()),
        "the location is recorded"
    );
    cluster.sender.tell(&id, Msg::Record(2)).await.unwrap();
    cluster
        .receiver
        .release_shards([shard], Duration::from_secs(10))
        .await
        .expect("the shard is released");
    assert_eq!(cluster.locations.location(shard), None, "and forgotten");
    cluster.sender.tell(&id, Msg::Record(3)).await.unwrap();
    eventually("every message handled", Duration::from_secs(10), || async {
        cluster.log.seqs.lock().len() == 3
    })
    .await;
    assert_eq!(*cluster.log.seqs.lock(), vec![1, 2, 3]);
}

/// A node that stops gracefully has sent its last replies when its
/// shutdown returns, and its process ends next: an ask it answers while it
/// stops reaches the asker, even over a Link it had never opened (the
/// asker's Link carried the ask; the reply needs the receiver's own).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_replies_of_a_node_stopping_gracefully_arrive_before_it_exits() {
    let mut cluster = cluster(64, false).await;
    let id = place_on_receiver(&cluster).await;
    *cluster.log.delay.lock() = Duration::from_millis(300);
    let asked = {
        let sender = cluster.sender.clone();
        tokio::spawn(async move {
            sender
                .ask(&id, Msg::Record(7), Duration::from_secs(10))
                .await
        })
    };
    let begun = || cluster.log.begun.load(std::sync::atomic::Ordering::Relaxed) == 1;
    eventually(
        "the receiver handles the ask",
        Duration::from_secs(10),
        || std::future::ready(begun()),
    )
    .await;
    let receiver = cluster.nodes.pop().expect("the receiver's node");
    receiver.node.shutdown().await;
    // The process would end here: nothing of the node runs any more.
    receiver.kill().await;
    let answer = tokio::time::timeout(Duration::from_secs(10), asked)
        .await
        .expect("the ask ends")
        .expect("the asking task");
    assert_eq!(answer.expect("the reply arrived"), 7);
}
