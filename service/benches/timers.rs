//! Durable timers fired per second on one node, with many more pending:
//! `COLO_BENCH_DUE` entities (default 100,000) each have a timer due
//! already, and `COLO_BENCH_LATER` times as many others (default 9) one
//! due in an hour, so that a million timers wait in the store's index.
//! The node starts on that store and fires what is due: each firing starts
//! its entity from the store, hands it its message, and writes its change
//! with the timer removed. The baseline, in the same run: the due ones
//! alone. The two rates match if the timers not due cost nothing.
//!
//! `cargo bench -p colo --bench timers`

mod support;

use colo::allocation::{HashExtractor, MessageExtractor};
use colo::state::{Engine, StateRecord, Timer, TimerKey, WriteBatch};
use colo::{Entity, EntityContext, EntityError, EntityType, ShardingSettings};
use serde::{Deserialize, Serialize};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

const TYPE: &str = "reminded";
const SHARDS: u32 = 8;

/// Timers fired so far, all runs.
static FIRED: AtomicU64 = AtomicU64::new(0);

#[derive(Debug, Default, Serialize, Deserialize)]
struct Reminded {
    fired: u64,
}

#[derive(Debug, Serialize, Deserialize)]
enum Msg {
    Fire,
    Wake,
}

impl Entity for Reminded {
    type Message = Msg;
    type Reply = u64;

    async fn handle(&mut self, _: &EntityContext, msg: Msg) -> Result<u64, EntityError> {
        if let Msg::Fire = msg {
            self.fired += 1;
            FIRED.fetch_add(1, Ordering::Relaxed);
        }
        Ok(self.fired)
    }
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// Writes `due` entities with a timer due now and `later` times as many
/// with one due in an hour into the store under `dir`, as a shard would
/// have.
fn write_entities(dir: &std::path::Path, due: u64, later: u64) {
    let store = colo::state::open(dir, Engine::Fjall).expect("store");
    let extractor = HashExtractor::new(SHARDS).expect("shards");
    let state = postcard::to_allocvec(&Reminded::default()).expect("state");
    let fire = postcard::to_allocvec(&Msg::Fire).expect("message");
    let (now, hour) = (now_ms(), 3_600_000);
    let mut batch = WriteBatch::new(TYPE);
    for n in 0..due * (later + 1) {
        let (id, at) = match n < due {
            true => (format!("e-{n}"), now - 1_000),
            false => (format!("idle-{n}"), now + hour + n),
        };
        let shard = extractor.shard_id(&id);
        let mut record = StateRecord::new(0, 1, Some(state.clone()));
        let timer = Timer {
            name: "t".into(),
            due: at,
            message: fire.clone(),
        };
        let key = TimerKey {
            due: timer.due,
            entity_id: id.clone(),
            name: timer.name.clone(),
        };
        batch.put_timer(shard, key, fire.clone());
        record.timers.push(timer);
        batch.put(shard, id, record.encode());
        if batch.ops.len() >= 50_000 {
            store.write(&batch).expect("write");
            batch = WriteBatch::new(TYPE);
        }
    }
    store.write(&batch).expect("write");
}

/// Starts a node on the store, wakes each shard, and waits until every
/// due timer fired: the rate.
async fn fire_all(dir: &std::path::Path, due: u64) -> f64 {
    let settings = ShardingSettings {
        number_of_shards: SHARDS,
        ..ShardingSettings::default()
    };
    let store = support::open_store(dir, Engine::Fjall).await;
    let node = support::one_node(TYPE, &settings, Some(store));
    let region = node
        .start_region(
            EntityType::new(TYPE, |_| Reminded::default())
                .with_settings(settings)
                .durable(1),
        )
        .expect("registers");
    let extractor = HashExtractor::new(SHARDS).expect("shards");
    let before = FIRED.load(Ordering::Relaxed);
    let started = Instant::now();
    // A shard starts with its first message: one to an entity of each.
    let mut woken = std::collections::BTreeSet::new();
    for n in 0.. {
        let id = format!("wake-{n}");
        if woken.insert(extractor.shard_id(&id).0) {
            region.tell(&id, Msg::Wake).await.expect("told");
        }
        if woken.len() == SHARDS as usize {
            break;
        }
    }
    while FIRED.load(Ordering::Relaxed) - before < due {
        assert!(
            started.elapsed() < Duration::from_secs(600),
            "timers did not all fire"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let took = started.elapsed();
    node.shutdown().await;
    due as f64 / took.as_secs_f64()
}

fn main() {
    let due = support::env("COLO_BENCH_DUE", 100_000);
    let later = support::env("COLO_BENCH_LATER", 9);
    let runtime = support::runtime();
    println!("timers: {due} due, fired on one node from a fjall store ({SHARDS} shards)");
    for (label, later) in [
        ("due alone (baseline)", 0),
        ("with the others pending", later),
    ] {
        let dir = tempfile::tempdir().expect("dir");
        write_entities(dir.path(), due, later);
        let rate = runtime.block_on(fire_all(dir.path(), due));
        println!(
            "{label:<26} {:>9} timers in the index  {rate:>9.0} fired/s",
            due * (later + 1)
        );
    }
}
