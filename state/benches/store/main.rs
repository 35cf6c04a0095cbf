//! The state store on colo's own workload, per engine: write-behind flushes
//! (durable batches of dirty entities, each with its shards' checkpoints),
//! point loads (an entity activating), and per-shard scans (a restore).
//!
//!     cargo bench -p colo-state --bench store
//!
//! `COLO_BENCH_ENTITIES` (default 200000) sets the entities, over 64 shards;
//! `COLO_BENCH_ENGINES` (default `fjall,sled,redb`) the engines and their
//! order. redb is measured here only: fjall was chosen over it on these
//! figures (BENCHMARKS.md, "State store engines").

use colo_allocation::ShardId;
use colo_state::{Checkpoint, CheckpointKind, Engine, StateStore, WriteBatch};
use std::ops::ControlFlow;
use std::path::Path;
use std::time::{Duration, Instant};

mod redb;

const SHARDS: u32 = 64;
const BATCH: usize = 10_000;
const VALUE: usize = 48;
const LOADS: usize = 100_000;
const TYPE: &str = "user";
const SMALL: usize = 100;
const SMALL_FLUSHES: u32 = 200;

/// What the workload needs of an engine.
trait Workload {
    fn flush(&self, batch: &WriteBatch);
    fn load(&self, shard: ShardId, id: &str) -> bool;
    fn restore(&self, shard: ShardId) -> usize;
}

impl Workload for Box<dyn StateStore> {
    fn flush(&self, batch: &WriteBatch) {
        self.write(batch).expect("write");
    }

    fn load(&self, shard: ShardId, id: &str) -> bool {
        StateStore::load(self.as_ref(), TYPE, shard, id)
            .expect("load")
            .is_some()
    }

    fn restore(&self, shard: ShardId) -> usize {
        let mut n = 0;
        self.scan(TYPE, shard, &mut |_, v| {
            n += usize::from(!v.is_empty());
            ControlFlow::Continue(())
        })
        .expect("scan");
        n
    }
}

/// The key layout of colo-state's engines.
fn key(shard: ShardId, id: &str) -> Vec<u8> {
    let mut k = shard.0.to_be_bytes().to_vec();
    k.push(1);
    k.extend_from_slice(id.as_bytes());
    k
}

fn open(engine: &str, dir: &Path) -> Box<dyn Workload> {
    match engine {
        "redb" => Box::new(redb::Redb::open(dir)),
        other => {
            let engine: Engine = other.parse().expect("engine");
            Box::new(colo_state::open(dir, engine).expect("open"))
        }
    }
}

/// A small, fast, seeded generator: the same ids and order for every engine.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

fn entity(i: u64) -> (ShardId, String) {
    (ShardId((i % u64::from(SHARDS)) as u32), format!("user-{i}"))
}

fn value(i: u64, round: u64) -> Vec<u8> {
    let mut v = vec![0u8; VALUE];
    v[..8].copy_from_slice(&i.to_le_bytes());
    v[8..16].copy_from_slice(&round.to_le_bytes());
    v
}

/// Durable batches of `ids`, each with a checkpoint per shard, as a flush
/// writes them.
fn flush_all(store: &dyn Workload, ids: impl Iterator<Item = u64>, round: u64) -> Duration {
    let started = Instant::now();
    let mut batch = WriteBatch::new(TYPE);
    let mut flushes = 0u64;
    let write = |batch: &mut WriteBatch, flushes: &mut u64| {
        *flushes += 1;
        for shard in 0..SHARDS {
            batch.checkpoint(
                ShardId(shard),
                Checkpoint {
                    offset: *flushes,
                    epoch: 1,
                    marker: 0,
                    kind: CheckpointKind::Start,
                },
            );
        }
        store.flush(batch);
        batch.ops.clear();
    };
    for i in ids {
        let (shard, id) = entity(i);
        batch.put(shard, id, value(i, round));
        if batch.ops.len() == BATCH {
            write(&mut batch, &mut flushes);
        }
    }
    if !batch.is_empty() {
        write(&mut batch, &mut flushes);
    }
    started.elapsed()
}

fn dir_size(path: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(path) else {
        return 0;
    };
    entries
        .flatten()
        .map(|e| match e.metadata() {
            Ok(m) if m.is_dir() => dir_size(&e.path()),
            Ok(m) => m.len(),
            Err(_) => 0,
        })
        .sum()
}

fn per_sec(n: u64, took: Duration) -> String {
    format!("{:.0}", n as f64 / took.as_secs_f64())
}

fn main() {
    let entities: u64 = std::env::var("COLO_BENCH_ENTITIES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200_000);
    let engines =
        std::env::var("COLO_BENCH_ENGINES").unwrap_or_else(|_| "fjall,sled,redb".to_string());
    println!(
        "{entities} entities of {VALUE} bytes over {SHARDS} shards, durable batches of {BATCH}"
    );
    println!("| engine | first flush, entities/s | updates, entities/s | flushes of {SMALL}, ms each | point loads/s | restore scan, entities/s | on disk, MiB |");
    println!("|---|---:|---:|---:|---:|---:|---:|");
    for engine in engines.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        let dir = tempfile::tempdir().expect("temp dir");
        let store = open(engine, dir.path());
        let first = flush_all(store.as_ref(), 0..entities, 0);
        // Half the entities change again, in a shuffled order (entities
        // become dirty in message order, not id order).
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        let changed: Vec<u64> = (0..entities / 2).map(|_| rng.next() % entities).collect();
        let updates = flush_all(store.as_ref(), changed.iter().copied(), 1);
        // Small flushes, as a flush interval passing with few dirty
        // entities writes them: what an ask to a durable entity waits for.
        let started = Instant::now();
        for _ in 0..SMALL_FLUSHES {
            let mut batch = WriteBatch::new(TYPE);
            for _ in 0..SMALL {
                let i = rng.next() % entities;
                let (shard, id) = entity(i);
                batch.put(shard, id, value(i, 2));
            }
            batch.checkpoint(
                ShardId(0),
                Checkpoint {
                    offset: 1,
                    epoch: 1,
                    marker: 0,
                    kind: CheckpointKind::Start,
                },
            );
            store.flush(&batch);
        }
        let small = started.elapsed();
        let started = Instant::now();
        let mut found = 0;
        for _ in 0..LOADS {
            let (shard, id) = entity(rng.next() % entities);
            found += usize::from(store.load(shard, &id));
        }
        let loads = started.elapsed();
        assert_eq!(found, LOADS, "{engine}: every entity written is found");
        let started = Instant::now();
        let restored: usize = (0..SHARDS).map(|s| store.restore(ShardId(s))).sum();
        let restore = started.elapsed();
        assert_eq!(
            restored as u64, entities,
            "{engine}: a restore sees every entity"
        );
        drop(store);
        println!(
            "| {engine} | {} | {} | {:.1} | {} | {} | {:.0} |",
            per_sec(entities, first),
            per_sec(changed.len() as u64, updates),
            small.as_secs_f64() * 1000.0 / f64::from(SMALL_FLUSHES),
            per_sec(LOADS as u64, loads),
            per_sec(entities, restore),
            dir_size(dir.path()) as f64 / (1024.0 * 1024.0)
        );
    }
}
