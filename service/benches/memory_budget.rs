//! A node's memory budget against an entity count, with a type kept in
//! memory and a durable one side by side in one node.
//!
//! Each entity holds a payload whose size is drawn once per entity from a
//! heavy tail (64 bytes to 16 KiB, in powers of two, each half as likely
//! as the one below it: about 320 bytes on average). Messages go to
//! `COLO_BENCH_ENTITIES` (default 100000) entities of each type along a
//! Zipf stream (exponent 0.9), `COLO_BENCH_MESSAGES` (default 400000) in
//! all, at most 10,000 of them unhandled at a time.
//!
//! Three cases, each in a process of its own:
//! - `no passivation`: every entity stays active, the baseline;
//! - `entity count`: LRU at a limit per type of what the budget holds at
//!   the mean weight (budget / 2 / (mean payload + the entity's own
//!   size));
//! - `memory budget`: LRU within `COLO_BENCH_BUDGET_MIB` (default 16) for
//!   the node, its entities weighed by their payload
//!   (`EntityType::with_size` for the type in memory, its encoded state
//!   for the durable one).
//!
//! Per case: messages per second, the entities active at the end, the
//! bytes their payloads hold (known to the bench) and the most the payloads
//! held at once, as sampled every 10 ms, and the process's resident set.
//!
//! `cargo bench -p colo --bench memory_budget`

mod support;

use support::{env, mib, resident};

use colo::passivation::{PassivationStrategy, ReplacementSettings};
use colo::state::Engine;
use colo::{Entity, EntityContext, EntityError, EntityType, Node, Region, ShardingSettings};
use serde::{Deserialize, Serialize};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// What `colo run` allocates with.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Messages handled, across every entity.
static HANDLED: AtomicU64 = AtomicU64::new(0);
/// Bytes the live entities' payloads hold now.
static HELD: AtomicU64 = AtomicU64::new(0);

/// Names the case a process of this bench runs.
const CASE: &str = "COLO_BENCH_BUDGET_CASE";

/// Messages told and not handled yet, at most.
const IN_FLIGHT: u64 = 10_000;

/// An entity with a payload of its own size.
#[derive(Debug, Default, Serialize, Deserialize)]
struct Holder {
    payload: Vec<u8>,
    messages: u64,
    /// Its payload is in `HELD` (from its first message on, whether it
    /// made the payload or was read back with it).
    #[serde(skip)]
    counted: bool,
}

impl Holder {
    fn size(&self) -> usize {
        std::mem::size_of::<Self>() + self.payload.len()
    }
}

impl Drop for Holder {
    fn drop(&mut self) {
        if self.counted {
            HELD.fetch_sub(self.payload.len() as u64, Ordering::Relaxed);
        }
    }
}

impl Entity for Holder {
    /// The payload's size, for an entity that has none yet.
    type Message = u32;
    type Reply = u64;

    async fn handle(&mut self, _: &EntityContext, size: u32) -> Result<u64, EntityError> {
        if self.payload.is_empty() {
            self.payload = vec![1; size as usize];
        }
        if !self.counted {
            self.counted = true;
            HELD.fetch_add(self.payload.len() as u64, Ordering::Relaxed);
        }
        self.messages += 1;
        HANDLED.fetch_add(1, Ordering::Relaxed);
        Ok(self.messages)
    }
}

/// A deterministic xorshift generator: the same stream on every run.
struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn next_f64(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// The payload size of entity `n`: 64 << k bytes, k in 0..=8, each k
/// half as likely as the one before.
fn size_of_entity(n: u64) -> u32 {
    let mut rng = XorShift(n.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
    let k = rng.next().trailing_zeros().min(8);
    64 << k
}

/// The mean of [`size_of_entity`] over `entities`.
fn mean_size(entities: u64) -> f64 {
    (0..entities)
        .map(|n| f64::from(size_of_entity(n)))
        .sum::<f64>()
        / entities as f64
}

/// A Zipf stream over `entities` ids (rank scattered by an odd multiplier).
fn zipf_stream(entities: u64, len: u64) -> Vec<u64> {
    let mut cumulative = Vec::with_capacity(entities as usize);
    let mut total = 0.0;
    for rank in 1..=entities {
        total += 1.0 / (rank as f64).powf(0.9);
        cumulative.push(total);
    }
    let mut rng = XorShift(0x2545_f491_4f6c_dd1d);
    (0..len)
        .map(|_| {
            let target = rng.next_f64() * total;
            let rank = cumulative.partition_point(|&c| c < target) as u64;
            rank.min(entities - 1).wrapping_mul(0x9e37_79b9) % entities
        })
        .collect()
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Case {
    None,
    Count,
    Budget,
}

impl Case {
    const ALL: [Case; 3] = [Case::None, Case::Count, Case::Budget];

    fn name(self) -> &'static str {
        match self {
            Case::None => "no passivation",
            Case::Count => "entity count",
            Case::Budget => "memory budget",
        }
    }

    fn arg(self) -> &'static str {
        match self {
            Case::None => "none",
            Case::Count => "count",
            Case::Budget => "budget",
        }
    }
}

async fn live(region: &Region<Holder>) -> u64 {
    region
        .state(Duration::from_secs(60))
        .await
        .expect("region state")
        .shards
        .values()
        .map(|ids| ids.len() as u64)
        .sum()
}

async fn run(case: Case, entities: u64, messages: u64, budget: u64) {
    let dir = tempfile::tempdir().expect("dir");
    // What an entity weighs on average, as the budget counts it.
    let mean = mean_size(entities) + std::mem::size_of::<Holder>() as f64;
    let lru = || ReplacementSettings::preset("lru").expect("lru");
    let passivation = match case {
        Case::None => PassivationStrategy::none(),
        Case::Count => PassivationStrategy::limit((budget as f64 / 2.0 / mean) as usize, lru()),
        Case::Budget => PassivationStrategy {
            replacement: Some(lru()),
            ..PassivationStrategy::none()
        },
    };
    let settings = ShardingSettings {
        passivation,
        number_of_shards: 100,
        ..ShardingSettings::default()
    };
    let store = support::open_store(dir.path(), Engine::Fjall).await;
    let node: Node = support::one_node_of(&["note", "ledger"], &settings, Some(store));
    let node = match case {
        Case::Budget => node.with_memory_budget(budget),
        _ => node,
    };
    let note = node
        .start_region(
            EntityType::new("note", |_| Holder::default())
                .with_settings(settings.clone())
                .with_size(Holder::size),
        )
        .expect("note");
    let ledger = node
        .start_region(
            EntityType::new("ledger", |_| Holder::default())
                .with_settings(settings.clone())
                .durable(1),
        )
        .expect("ledger");
    let stream = zipf_stream(entities, messages / 2);
    let started = Instant::now();
    let handled = || HANDLED.load(Ordering::Relaxed);
    let mut peak_held = 0;
    let mut sampled = Instant::now();
    for (i, &n) in stream.iter().enumerate() {
        let told = 2 * i as u64;
        while told >= handled() + IN_FLIGHT {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        if sampled.elapsed() >= Duration::from_millis(10) {
            peak_held = peak_held.max(HELD.load(Ordering::Relaxed));
            sampled = Instant::now();
        }
        let id = format!("e{n}");
        let size = size_of_entity(n);
        note.tell(&id, size).await.expect("told");
        ledger.tell(&id, size).await.expect("told");
    }
    let all = 2 * stream.len() as u64;
    let deadline = Instant::now() + Duration::from_secs(1800);
    while handled() < all {
        assert!(Instant::now() < deadline, "{} of {all} handled", handled());
        peak_held = peak_held.max(HELD.load(Ordering::Relaxed));
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let took = started.elapsed();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let active = live(&note).await + live(&ledger).await;
    let (rss, peak_rss, _) = resident();
    println!(
        "| {} | {:.0} | {active} | {:.1} | {:.1} | {:.0} | {:.0} |",
        case.name(),
        all as f64 / took.as_secs_f64(),
        mib(HELD.load(Ordering::Relaxed)),
        mib(peak_held),
        mib(rss),
        mib(peak_rss),
    );
    node.shutdown().await;
}

fn main() {
    let entities = env("COLO_BENCH_ENTITIES", 100_000);
    let messages = env("COLO_BENCH_MESSAGES", 400_000);
    let budget = env("COLO_BENCH_BUDGET_MIB", 16) << 20;
    if let Some(case) = support::this_case(CASE, &Case::ALL, Case::arg) {
        support::runtime().block_on(run(case, entities, messages, budget));
        return;
    }
    println!(
        "{entities} entities of each type (payloads {:.0} bytes on average), {messages} messages, a budget of {} MiB",
        mean_size(entities),
        budget >> 20
    );
    println!("| case | messages/s | active at the end | payloads held at the end, MiB | payloads held at most, MiB | resident, MiB | peak resident, MiB |");
    println!("|---|---:|---:|---:|---:|---:|---:|");
    support::each_case_in_a_process(CASE, &Case::ALL, Case::arg, Case::name);
}
