//! Asks that change a durable entity, answered once the change is in the
//! node's store (fjall, a sync to disk per commit), side by side with the
//! same asks to the same entity kept in memory only, in one run: one asker
//! at a time (each ask waits for its own write) and 64 at once (their
//! changes share writes). One in-process node, default state settings
//! (`state.flush_interval` 100 ms), no changelog.
//!
//! `cargo bench -p colo --bench durable_ask` prints, per case, asks per
//! second and the median and 99th percentile of an ask's latency.

mod support;

use colo::state::Engine;
use colo::{Entity, EntityContext, EntityError, EntityType, Node, Region, ShardingSettings};
use serde::{Deserialize, Serialize};
use std::time::{Duration, Instant};

const ASKS: usize = 2_000;
const ENTITIES: usize = 1_000;
const TIMEOUT: Duration = Duration::from_secs(30);

#[derive(Debug, Default, Serialize, Deserialize)]
struct Tally {
    value: u64,
}

impl Entity for Tally {
    type Message = ();
    type Reply = u64;

    async fn handle(&mut self, _: &EntityContext, (): ()) -> Result<u64, EntityError> {
        self.value += 1;
        Ok(self.value)
    }
}

fn settings() -> ShardingSettings {
    ShardingSettings {
        number_of_shards: 100,
        ..ShardingSettings::default()
    }
}

async fn region(durable: bool, dir: &tempfile::TempDir) -> (Node, Region<Tally>) {
    let name = if durable { "tally-durable" } else { "tally" };
    let store = match durable {
        true => Some(support::open_store(dir.path(), Engine::Fjall).await),
        false => None,
    };
    let node = support::one_node(name, &settings(), store);
    let mut entity_type = EntityType::new(name, |_| Tally::default()).with_settings(settings());
    if durable {
        entity_type = entity_type.durable(1);
    }
    let region = node.start_region(entity_type).expect("region");
    (node, region)
}

/// `askers` at once, `ASKS` in all: asks per second and each ask's latency.
async fn asks(region: &Region<Tally>, askers: usize) -> (f64, Vec<Duration>) {
    let started = Instant::now();
    let per_asker = ASKS / askers;
    let tasks = (0..askers).map(|asker| {
        let region = region.clone();
        tokio::spawn(async move {
            let mut took = Vec::with_capacity(per_asker);
            for i in 0..per_asker {
                let id = format!("tally-{}", (asker * per_asker + i) % ENTITIES);
                let sent = Instant::now();
                region.ask(&id, (), TIMEOUT).await.expect("answered");
                took.push(sent.elapsed());
            }
            took
        })
    });
    let mut took = Vec::with_capacity(ASKS);
    for task in futures::future::join_all(tasks).await {
        took.extend(task.expect("asker"));
    }
    let rate = took.len() as f64 / started.elapsed().as_secs_f64();
    took.sort();
    (rate, took)
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    println!("asks that change an entity, {ASKS} per case over {ENTITIES} entities, one node");
    println!("| entity | askers at once | asks/s | median, ms | p99, ms |");
    println!("|---|---:|---:|---:|---:|");
    runtime.block_on(async {
        for durable in [false, true] {
            let dir = tempfile::tempdir().expect("dir");
            let (node, region) = region(durable, &dir).await;
            // Every entity started (and, durable, written) before timing.
            let _ = asks(&region, 64).await;
            for askers in [1, 64] {
                let (rate, took) = asks(&region, askers).await;
                let median = took[took.len() / 2];
                let p99 = took[took.len() * 99 / 100];
                let entity = if durable { "durable" } else { "in memory" };
                println!(
                    "| {entity} | {askers} | {rate:.0} | {:.2} | {:.2} |",
                    ms(median),
                    ms(p99)
                );
            }
            node.shutdown().await;
        }
    });
}
