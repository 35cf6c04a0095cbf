//! Resident memory per entity: counter entities (one `u64` of state) of
//! one node, each told one increment, then the process's resident set
//! read from `/proc/self/status` once every message is handled and the
//! state written behind.
//!
//! Three cases, each in a process of its own (so one case's freed memory
//! is not another's):
//! - `in memory, all active`: `COLO_BENCH_ACTIVE` (default 200000)
//!   entities of a type without durable state, none passivated: the
//!   baseline;
//! - `durable, all active`: the same entities with durable state (fjall);
//! - `durable, passivated`: `COLO_BENCH_ENTITIES` (default 2000000)
//!   entities with durable state and an active-entity limit of
//!   `COLO_BENCH_ACTIVE` (Akka's default strategy, W-TinyLFU): the rest
//!   are passivated to the node's store.
//!
//! Per entity: the resident set over that of the same process before its
//! first entity (node, store and runtime started), divided by the entities
//! active at the end.
//!
//! `cargo bench -p colo --bench memory`

mod support;

use support::{env, mib, resident};

use colo::passivation::{PassivationStrategy, ReplacementSettings};
use colo::state::Engine;
use colo::{Entity, EntityContext, EntityError, EntityType, ShardingSettings};
use serde::{Deserialize, Serialize};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// What `colo run` allocates with.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Messages handled, across every entity.
static HANDLED: AtomicU64 = AtomicU64::new(0);

#[derive(Debug, Default, Serialize, Deserialize)]
struct Counter {
    value: u64,
}

impl Entity for Counter {
    type Message = u64;
    type Reply = u64;

    async fn handle(&mut self, _: &EntityContext, add: u64) -> Result<u64, EntityError> {
        self.value += add;
        HANDLED.fetch_add(1, Ordering::Relaxed);
        Ok(self.value)
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Case {
    InMemory,
    DurableActive,
    DurablePassivated,
}

impl Case {
    const ALL: [Case; 3] = [Case::InMemory, Case::DurableActive, Case::DurablePassivated];

    fn name(self) -> &'static str {
        match self {
            Case::InMemory => "in memory, all active",
            Case::DurableActive => "durable, all active",
            Case::DurablePassivated => "durable, passivated",
        }
    }

    fn arg(self) -> &'static str {
        match self {
            Case::InMemory => "in-memory",
            Case::DurableActive => "durable-active",
            Case::DurablePassivated => "durable-passivated",
        }
    }
}

/// Names the case a process of this bench runs.
const CASE: &str = "COLO_BENCH_MEMORY_CASE";

/// Messages told and not handled yet, at most.
const IN_FLIGHT: u64 = 10_000;

async fn run(case: Case, entities: u64, active: u64) {
    let dir = tempfile::tempdir().expect("dir");
    let passivation = match case {
        Case::DurablePassivated => {
            PassivationStrategy::limit(active as usize, ReplacementSettings::default())
        }
        _ => PassivationStrategy::none(),
    };
    let settings = ShardingSettings {
        passivation,
        ..ShardingSettings::default()
    };
    let entity_type =
        EntityType::new("counter", |_| Counter::default()).with_settings(settings.clone());
    let (node, region) = if case == Case::InMemory {
        let node = support::one_node("counter", &settings, None);
        let region = node.start_region(entity_type).expect("region");
        (node, region)
    } else {
        let store = support::open_store(dir.path(), Engine::Fjall).await;
        let node = support::one_node("counter", &settings, Some(store));
        let region = node.start_region(entity_type.durable(1)).expect("region");
        (node, region)
    };
    // Every shard started, so that what is measured is the entities.
    for shard in 0..u64::from(ShardingSettings::default().number_of_shards) * 4 {
        region
            .ask(&format!("warm-{shard}"), 0, Duration::from_secs(60))
            .await
            .expect("warm-up");
    }
    let warm = HANDLED.load(Ordering::Relaxed);
    let warm_entities = region
        .state(Duration::from_secs(60))
        .await
        .expect("region state")
        .shards
        .values()
        .map(|ids| ids.len() as u64)
        .sum::<u64>();
    let (before, _, _) = resident();
    let started = Instant::now();
    let handled = || HANDLED.load(Ordering::Relaxed) - warm;
    for i in 0..entities {
        // At most IN_FLIGHT told and not handled yet: what is measured is
        // the entities, not a backlog of messages.
        while i >= handled() + IN_FLIGHT {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        region.tell(&format!("counter-{i}"), 1).await.expect("told");
    }
    let deadline = Instant::now() + Duration::from_secs(1800);
    while handled() < entities {
        assert!(
            Instant::now() < deadline,
            "{} of {entities} handled after 30 minutes",
            handled()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let took = started.elapsed();
    // Ten flush intervals: what is written behind is written, what is
    // passivated is gone.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let state = region
        .state(Duration::from_secs(60))
        .await
        .expect("region state");
    let live = state
        .shards
        .values()
        .map(|ids| ids.len() as u64)
        .sum::<u64>()
        .saturating_sub(warm_entities);
    let (after, peak, threads) = resident();
    let per_entity = after.saturating_sub(before) as f64 / live.max(1) as f64;
    println!(
        "| {} | {entities} | {live} | {:.0} | {:.0} | {per_entity:.0} | {threads} | {:.1} s |",
        case.name(),
        mib(after),
        mib(peak),
        took.as_secs_f64()
    );
    node.shutdown().await;
}

fn main() {
    let entities = env("COLO_BENCH_ENTITIES", 2_000_000);
    let active = env("COLO_BENCH_ACTIVE", 200_000);
    if let Some(case) = support::this_case(CASE, &Case::ALL, Case::arg) {
        let told = match case {
            Case::DurablePassivated => entities,
            _ => active,
        };
        support::runtime().block_on(run(case, told, active));
        return;
    }
    println!("resident memory per entity: counter entities of one node, each told one increment");
    println!("| case | entities | active at the end | resident, MiB | peak, MiB | bytes per active entity | threads | told and handled in |");
    println!("|---|---:|---:|---:|---:|---:|---:|---:|");
    support::each_case_in_a_process(CASE, &Case::ALL, Case::arg, Case::name);
}
