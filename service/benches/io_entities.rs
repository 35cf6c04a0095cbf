//! Entities whose handler awaits I/O: 1,000 entities in 10 shards, each
//! handler awaiting a 5 ms timer (a database call, say). Every entity is told
//! `MESSAGES_PER_ENTITY` messages at once; a round ends when all are handled.
//!
//! The ideal is every entity busy all the time: entities / 5 ms = 200,000
//! messages per second. The bench prints the median rate over its rounds and
//! its ratio to that ideal, so a runtime that runs one handler per shard at a
//! time shows as shards / entities of it.
//!
//! `cargo bench -p colo --bench io_entities`

use colo::allocation::{LeastShardAllocationStrategy, LeastShardSettings};
use colo::{
    CoordinatorHandle, Entity, EntityContext, EntityError, EntityType, InMemoryNetwork,
    InMemoryStore, Node, Region, ShardingSettings,
};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::Notify;

const ENTITIES: usize = 1_000;
const SHARDS: u32 = 10;
const IO: Duration = Duration::from_millis(5);
const MESSAGES_PER_ENTITY: usize = 4;
const ROUNDS: usize = 5;

#[derive(Default)]
struct Completion {
    count: AtomicU64,
    target: AtomicU64,
    done: Notify,
}

struct Waiting(Arc<Completion>);

impl Entity for Waiting {
    type Message = u64;
    type Reply = u64;

    async fn handle(&mut self, _ctx: &EntityContext, message: u64) -> Result<u64, EntityError> {
        tokio::time::sleep(IO).await;
        let c = &self.0;
        let n = c.count.fetch_add(1, Ordering::Relaxed) + 1;
        if n == c.target.load(Ordering::Relaxed) {
            c.done.notify_one();
        }
        Ok(message)
    }
}

async fn start_region(completion: Arc<Completion>) -> (Node, Region<Waiting>) {
    let settings = ShardingSettings {
        number_of_shards: SHARDS,
        ..ShardingSettings::default()
    };
    let network = InMemoryNetwork::new();
    let strategy =
        LeastShardAllocationStrategy::new(LeastShardSettings::default()).expect("settings");
    let coordinator = CoordinatorHandle::spawn(
        "bench-io",
        settings.clone(),
        Box::new(strategy),
        Arc::new(InMemoryStore::new()),
    )
    .expect("coordinator settings");
    network.host_coordinator(coordinator);
    let node = Node::new(network.transport("bench-node"));
    let entity_type =
        EntityType::new("bench-io", move |_| Waiting(completion.clone())).with_settings(settings);
    let region = node.start_region(entity_type).expect("region");
    (node, region)
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let completion = Arc::new(Completion::default());
        let (_node, region) = start_region(completion.clone()).await;
        let ids: Vec<String> = (0..ENTITIES).map(|i| format!("entity-{i}")).collect();
        // Warm-up: every entity exists and every shard home is known.
        for id in &ids {
            region
                .ask(id, 0, Duration::from_secs(120))
                .await
                .expect("warm-up ask");
        }
        let batch = (ENTITIES * MESSAGES_PER_ENTITY) as u64;
        let mut rates = Vec::with_capacity(ROUNDS);
        for _ in 0..ROUNDS {
            let target = completion.count.load(Ordering::Relaxed) + batch;
            completion.target.store(target, Ordering::Relaxed);
            let done = completion.done.notified();
            let start = Instant::now();
            for m in 0..MESSAGES_PER_ENTITY {
                for id in &ids {
                    region.tell(id, m as u64).await.expect("tell");
                }
            }
            if completion.count.load(Ordering::Relaxed) < target {
                done.await;
            }
            rates.push(batch as f64 / start.elapsed().as_secs_f64());
        }
        rates.sort_by(f64::total_cmp);
        let rate = rates[rates.len() / 2];
        let ideal = ENTITIES as f64 / IO.as_secs_f64();
        println!(
            "{ENTITIES} entities in {SHARDS} shards, handler awaits {IO:?}; {MESSAGES_PER_ENTITY} messages each, median of {ROUNDS} rounds"
        );
        println!("{:<28} {:>12} {:>8}", "case", "msgs/s", "ratio");
        println!("{:<28} {:>12.0} {:>8.2}", "ideal (entities / 5 ms)", ideal, 1.0);
        println!(
            "{:<28} {:>12.0} {:>8.3}",
            "routed tell, I/O handler",
            rate,
            rate / ideal
        );
    });
}
