//! Routed `tell` and `ask` to 10,000 local entities, side by side with a
//! plain tokio mpsc send of a bare u64 to one task and an mpsc + oneshot
//! round trip, in the same run and on the same runtime (2 worker threads).
//! The baselines carry no entity id and do no routing, so the ratios are the
//! whole cost of routing by entity id (hash, route lock, entity lookup).
//!
//! `cargo bench -p colo --bench routing` prints the median throughput of
//! each case over several rounds and its ratio to the matching baseline.

use colo::allocation::{LeastShardAllocationStrategy, LeastShardSettings};
use colo::{
    CoordinatorHandle, Entity, EntityContext, EntityError, EntityType, InMemoryNetwork,
    InMemoryStore, Node, Region, ShardingSettings,
};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, oneshot, Notify};

const ENTITIES: usize = 10_000;
const ROUNDS: usize = 9;

/// Counts handled messages and wakes the bench when a batch is complete, so
/// every case measures "sent and handled", not only "sent".
#[derive(Default)]
struct Completion {
    count: AtomicU64,
    target: AtomicU64,
    done: Notify,
}

impl Completion {
    fn hit(&self) {
        let n = self.count.fetch_add(1, Ordering::Relaxed) + 1;
        if n == self.target.load(Ordering::Relaxed) {
            self.done.notify_one();
        }
    }

    async fn expect(&self, more: u64, send: impl std::future::Future<Output = ()>) {
        let target = self.count.load(Ordering::Relaxed) + more;
        self.target.store(target, Ordering::Relaxed);
        let done = self.done.notified();
        send.await;
        if self.count.load(Ordering::Relaxed) < target {
            done.await;
        }
    }
}

struct Hit(Arc<Completion>);

impl Entity for Hit {
    type Message = u64;
    type Reply = u64;

    async fn handle(&mut self, _ctx: &EntityContext, message: u64) -> Result<u64, EntityError> {
        self.0.hit();
        Ok(message)
    }
}

fn ids() -> Arc<Vec<String>> {
    Arc::new((0..ENTITIES).map(|i| format!("entity-{i}")).collect())
}

async fn start_region(completion: Arc<Completion>, shards: u32) -> (Node, Region<Hit>) {
    let settings = ShardingSettings {
        number_of_shards: shards,
        ..ShardingSettings::default()
    };
    let network = InMemoryNetwork::new();
    let strategy =
        LeastShardAllocationStrategy::new(LeastShardSettings::default()).expect("settings");
    let coordinator = CoordinatorHandle::spawn(
        "bench",
        settings.clone(),
        Box::new(strategy),
        Arc::new(InMemoryStore::new()),
    )
    .expect("coordinator settings");
    network.host_coordinator(coordinator);
    let node = Node::new(network.transport("bench-node"));
    let entity_type =
        EntityType::new("bench", move |_| Hit(completion.clone())).with_settings(settings);
    let region = node.start_region(entity_type).expect("region");
    // Warm up: every entity exists and every shard home is known.
    for id in ids().iter() {
        region
            .ask(id, 0, Duration::from_secs(10))
            .await
            .expect("warm-up ask");
    }
    (node, region)
}

/// Spawns one task per sender, each with its own clones, and waits for all.
/// A macro rather than a function: each body borrows its task's clones
/// across awaits, which a closure returning a future cannot express.
macro_rules! fan_out {
    ($senders:expr, $total:expr, |$state:ident = $setup:expr, $i:ident| $body:expr) => {{
        let senders: usize = $senders;
        let per = $total / senders;
        let tasks: Vec<_> = (0..senders)
            .map(|s| {
                let $state = $setup;
                tokio::spawn(async move {
                    for $i in s * per..(s + 1) * per {
                        $body;
                    }
                })
            })
            .collect();
        for t in tasks {
            t.await.expect("sender task");
        }
    }};
}

fn median_rate(mut samples: Vec<f64>) -> f64 {
    samples.sort_by(f64::total_cmp);
    samples[samples.len() / 2]
}

async fn measure<F, Fut>(batch: usize, mut round: F) -> f64
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    round().await; // warm-up round
    let mut rates = Vec::with_capacity(ROUNDS);
    for _ in 0..ROUNDS {
        let start = Instant::now();
        round().await;
        rates.push(batch as f64 / start.elapsed().as_secs_f64());
    }
    median_rate(rates)
}

async fn plain_send(senders: usize, batch: usize) -> f64 {
    let completion = Arc::new(Completion::default());
    let (tx, mut rx) = mpsc::channel::<u64>(1024);
    let c = completion.clone();
    tokio::spawn(async move {
        while let Some(m) = rx.recv().await {
            std::hint::black_box(m);
            c.hit();
        }
    });
    measure(batch, || {
        let completion = completion.clone();
        let tx = tx.clone();
        async move {
            let send = async {
                fan_out!(senders, batch, |tx = tx.clone(), i| tx.send(i as u64).await.expect("send"));
            };
            completion.expect(batch as u64, send).await
        }
    })
    .await
}

async fn plain_round_trip(senders: usize, batch: usize) -> f64 {
    let (tx, mut rx) = mpsc::channel::<(u64, oneshot::Sender<u64>)>(1024);
    tokio::spawn(async move {
        while let Some((n, reply)) = rx.recv().await {
            let _ = reply.send(n);
        }
    });
    measure(batch, || {
        let tx = tx.clone();
        async move {
            fan_out!(senders, batch, |tx = tx.clone(), i| {
                let (rtx, rrx) = oneshot::channel();
                tx.send((i as u64, rtx)).await.expect("send");
                rrx.await.expect("reply")
            });
        }
    })
    .await
}

async fn routed_tell(
    region: &Region<Hit>,
    completion: &Arc<Completion>,
    senders: usize,
    batch: usize,
) -> f64 {
    let ids = ids();
    measure(batch, || {
        let completion = completion.clone();
        let region = region.clone();
        let ids = ids.clone();
        async move {
            let send = async {
                fan_out!(senders, batch, |state = (region.clone(), ids.clone()), i| {
                    let (region, ids) = &state;
                    region.tell(&ids[i % ENTITIES], i as u64).await.expect("tell")
                });
            };
            completion.expect(batch as u64, send).await
        }
    })
    .await
}

async fn routed_ask(region: &Region<Hit>, senders: usize, batch: usize) -> f64 {
    let ids = ids();
    measure(batch, || {
        let region = region.clone();
        let ids = ids.clone();
        async move {
            fan_out!(senders, batch, |state = (region.clone(), ids.clone()), i| {
                let (region, ids) = &state;
                region
                    .ask(&ids[i % ENTITIES], i as u64, Duration::from_secs(10))
                    .await
                    .expect("ask")
            });
        }
    })
    .await
}

fn main() {
    // `cargo bench` passes `--bench`; any other argument selects cases whose
    // name contains it (e.g. `tell`, `ask`, `mpsc`).
    let filter: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    let wanted = |case: &str| filter.is_empty() || filter.iter().any(|f| case.contains(f.as_str()));
    // COLO_BENCH_WORKERS=0 runs everything on one thread (current-thread
    // runtime), which isolates routing cost from cross-thread wake-ups.
    let shards: u32 = std::env::var("COLO_BENCH_SHARDS")
        .ok()
        .and_then(|w| w.parse().ok())
        .unwrap_or(1000);
    let workers: usize = std::env::var("COLO_BENCH_WORKERS")
        .ok()
        .and_then(|w| w.parse().ok())
        .unwrap_or(2);
    let runtime = if workers == 0 {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
    } else {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(workers)
            .enable_all()
            .build()
    }
    .expect("runtime");
    runtime.block_on(async {
        let completion = Arc::new(Completion::default());
        let (_node, region) = start_region(completion.clone(), shards).await;
        println!(
            "{ENTITIES} entities in {shards} shards, {workers} worker threads (0 = current thread)"
        );
        println!(
            "{:<34} {:>8} {:>14} {:>8}",
            "case", "senders", "msgs/s", "ratio"
        );
        let row = |case: &str, senders: usize, rate: f64, base: f64| {
            println!("{case:<34} {senders:>8} {rate:>14.0} {:>8.2}", rate / base);
        };
        for senders in [1, 100] {
            let batch = 100_000;
            let base = plain_send(senders, batch).await;
            row("mpsc send to one task (baseline)", senders, base, base);
            if wanted("tell") {
                row(
                    "routed tell, 10k entities",
                    senders,
                    routed_tell(&region, &completion, senders, batch).await,
                    base,
                );
            }
        }
        for senders in [1, 100] {
            let batch = if senders == 1 { 50_000 } else { 100_000 };
            let base = plain_round_trip(senders, batch).await;
            row("mpsc + oneshot round trip (base)", senders, base, base);
            if wanted("ask") {
                row(
                    "routed ask, 10k entities",
                    senders,
                    routed_ask(&region, senders, batch).await,
                    base,
                );
            }
        }
    });
}
