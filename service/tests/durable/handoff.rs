//! A durable shard's hand-off stops every entity it started, the ones
//! whose stored state was still being read when the hand-off began
//! included: each runs the entity type's stop message before the shard
//! ends, once, and one whose stop was already running is not stopped
//! twice.

use crate::ledger::*;
use colo::state::{Checkpoint, Engine, StateStore, StoreError, WriteBatch};
use colo::{Entity, EntityContext, EntityError, EntityType, Node, NodeStore, ShardId};
use serde::{Deserialize, Serialize};
use std::ops::ControlFlow;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

/// Stop messages handled by [`Tally`] entities, by kind (only these
/// tests have them).
static STOPS: AtomicUsize = AtomicUsize::new(0);
static SLOW_STOPS: AtomicUsize = AtomicUsize::new(0);

/// Where a slow stop waits until the test lets it go on.
static SLOW_STOP_GATE: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(0);

/// A count whose stop message is counted.
#[derive(Debug, Default, Serialize, Deserialize)]
struct Tally {
    n: u32,
}

#[derive(Debug, Serialize, Deserialize)]
enum TallyMsg {
    Add,
    Stop,
    /// A stop that waits at [`SLOW_STOP_GATE`].
    SlowStop,
    Passivate,
}

impl Entity for Tally {
    type Message = TallyMsg;
    type Reply = u32;

    async fn handle(&mut self, ctx: &EntityContext, message: TallyMsg) -> Result<u32, EntityError> {
        match message {
            TallyMsg::Add => self.n += 1,
            TallyMsg::Stop => {
                STOPS.fetch_add(1, Ordering::SeqCst);
            }
            TallyMsg::SlowStop => {
                SLOW_STOPS.fetch_add(1, Ordering::SeqCst);
                SLOW_STOP_GATE.acquire().await.expect("gate").forget();
                // What a stop changes is kept too.
                self.n += 100;
            }
            TallyMsg::Passivate => ctx.passivate(),
        }
        Ok(self.n)
    }
}

/// A store whose reads of an entity wait while its gate is shut.
#[derive(Debug)]
struct HeldReads {
    inner: Arc<dyn StateStore>,
    /// Whether reads go through, and its change announced.
    open: Mutex<bool>,
    opened: Condvar,
    /// A read has begun (and waits at the gate if it is shut).
    asked: AtomicBool,
}

impl HeldReads {
    fn set_open(&self, open: bool) {
        *self.open.lock().expect("gate") = open;
        self.opened.notify_all();
    }
}

impl StateStore for HeldReads {
    fn write_all(&self, batches: &[WriteBatch]) -> Result<(), StoreError> {
        self.inner.write_all(batches)
    }

    fn load(
        &self,
        entity_type: &str,
        shard: ShardId,
        entity_id: &str,
    ) -> Result<Option<Vec<u8>>, StoreError> {
        self.asked.store(true, Ordering::SeqCst);
        let open = self.open.lock().expect("gate");
        drop(self.opened.wait_while(open, |open| !*open).expect("gate"));
        self.inner.load(entity_type, shard, entity_id)
    }

    fn scan(
        &self,
        entity_type: &str,
        shard: ShardId,
        visit: &mut dyn FnMut(&str, &[u8]) -> ControlFlow<()>,
    ) -> Result<(), StoreError> {
        self.inner.scan(entity_type, shard, visit)
    }

    fn timers(
        &self,
        entity_type: &str,
        shard: ShardId,
        after: Option<&colo::state::TimerKey>,
        visit: &mut dyn FnMut(colo::state::TimerKey, &[u8]) -> ControlFlow<()>,
    ) -> Result<(), StoreError> {
        self.inner.timers(entity_type, shard, after, visit)
    }

    fn checkpoint(
        &self,
        entity_type: &str,
        shard: ShardId,
    ) -> Result<Option<Checkpoint>, StoreError> {
        self.inner.checkpoint(entity_type, shard)
    }

    fn engine(&self) -> Engine {
        self.inner.engine()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_entity_whose_state_was_being_read_when_its_shard_handed_off_runs_its_stop() {
    let dir = tempfile::tempdir().expect("temp dir");
    let held = Arc::new(HeldReads {
        inner: open(&dir),
        open: Mutex::new(true),
        opened: Condvar::new(),
        asked: AtomicBool::new(false),
    });
    let store: Arc<dyn StateStore> = held.clone();
    let first = cluster("tally");
    let tally = || {
        EntityType::new("tally", |_| Tally::default())
            .with_settings(settings())
            .with_stop_message(|| TallyMsg::Stop)
            .durable(1)
    };
    // The entity has state in the store: node b reads it when it starts.
    let a = Node::with_state_store(
        first.network.transport("a"),
        NodeStore::new(store.clone(), at_once()),
    );
    let on_a = a.start_region(tally()).expect("registers");
    assert_eq!(on_a.ask("t-1", TallyMsg::Add, ASK).await.expect("added"), 1);
    a.kill().await;
    let stops_before = STOPS.load(Ordering::SeqCst);

    // b on a cluster of its own, as on the node's next start.
    let cluster = crate::ledger::cluster("tally");
    let b = Node::with_state_store(
        cluster.network.transport("b"),
        NodeStore::new(store.clone(), at_once()),
    );
    let on_b = Arc::new(b.start_region(tally()).expect("registers"));
    held.set_open(false);
    held.asked.store(false, Ordering::SeqCst);
    let ask = tokio::spawn({
        let on_b = on_b.clone();
        async move { on_b.ask("t-1", TallyMsg::Add, ASK).await }
    });
    colo_tests::wait::until("b reads t-1's state", ASK, || {
        std::future::ready(held.asked.load(Ordering::SeqCst))
    })
    .await;
    // The hand-off begins while the read waits; the region has taken the
    // shutdown once it answers the query behind it.
    let shutdown = tokio::spawn({
        let on_b = on_b.clone();
        async move { on_b.shutdown().await }
    });
    let _ = on_b.state(ASK).await;
    held.set_open(true);
    assert_eq!(ask.await.expect("ask task").expect("added"), 2);
    tokio::time::timeout(ASK, shutdown)
        .await
        .expect("the hand-off ends")
        .expect("shutdown task");
    assert_eq!(
        STOPS.load(Ordering::SeqCst) - stops_before,
        1,
        "t-1 started on b and must run its stop before its shard ends"
    );
}

/// The hand-off begins while an entity's passivation runs its stop: the
/// entity goes once that stop ends, what the stop changed is written, and
/// the hand-off ends, without a panic. Before, the hand-off gave the
/// stopping entity a second stop, which found no entity and ended its
/// shard's task with a panic (what the shard still held was lost with it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hand_off_that_begins_while_an_entity_stops_ends_with_one_stop() {
    // Each test runs in a process of its own: a panic on any thread of
    // this one is the shard's.
    static PANICS: AtomicUsize = AtomicUsize::new(0);
    let report = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        PANICS.fetch_add(1, Ordering::SeqCst);
        report(info);
    }));
    let dir = tempfile::tempdir().expect("temp dir");
    let store = open(&dir);
    let cluster = cluster("tally-slow");
    let node = Node::with_state_store(
        cluster.network.transport("a"),
        NodeStore::new(store.clone(), at_once()),
    );
    let region = Arc::new(
        node.start_region(
            EntityType::new("tally-slow", |_| Tally::default())
                .with_settings(settings())
                .with_stop_message(|| TallyMsg::SlowStop)
                .durable(1),
        )
        .expect("registers"),
    );
    assert_eq!(
        region.ask("s-1", TallyMsg::Add, ASK).await.expect("added"),
        1
    );
    region
        .ask("s-1", TallyMsg::Passivate, ASK)
        .await
        .expect("passivation asked");
    colo_tests::wait::until("s-1's stop runs", ASK, || {
        std::future::ready(SLOW_STOPS.load(Ordering::SeqCst) == 1)
    })
    .await;
    let shutdown = tokio::spawn({
        let region = region.clone();
        async move { region.shutdown().await }
    });
    // The region has taken the shutdown once it answers the query behind
    // it. Nothing outside the shard's task tells when it took its
    // hand-off mail from its mailbox: it is given 100 ms for that, as the
    // fault is a stop that lasts past the hand-off's start.
    let _ = region.state(ASK).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    SLOW_STOP_GATE.add_permits(10);
    tokio::time::timeout(ASK, shutdown)
        .await
        .expect("the hand-off ends")
        .expect("shutdown task");
    assert_eq!(SLOW_STOPS.load(Ordering::SeqCst), 1, "s-1 stopped once");
    assert_eq!(PANICS.load(Ordering::SeqCst), 0, "a shard's task panicked");
    let record = stored_as(&store, "tally-slow", "s-1")
        .await
        .expect("s-1 stored");
    let tally: Tally =
        colo::codec::decode(record.state.as_deref().expect("state")).expect("decodes");
    assert_eq!(tally.n, 101, "what s-1's stop changed is written");
}
