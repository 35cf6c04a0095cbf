//! A durable shard's hand-off stops every entity it started, the ones
//! whose stored state was still being read when the hand-off began
//! included: each runs the entity type's stop message before the shard
//! ends.

use crate::ledger::*;
use colo::state::{Checkpoint, Engine, StateStore, StoreError, WriteBatch};
use colo::{Entity, EntityContext, EntityError, EntityType, Node, NodeStore, ShardId};
use serde::{Deserialize, Serialize};
use std::ops::ControlFlow;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};

/// Stop messages handled by [`Tally`] entities (only this test has them).
static STOPS: AtomicUsize = AtomicUsize::new(0);

/// A count whose stop message is counted.
#[derive(Debug, Default, Serialize, Deserialize)]
struct Tally {
    n: u32,
}

#[derive(Debug, Serialize, Deserialize)]
enum TallyMsg {
    Add,
    Stop,
}

impl Entity for Tally {
    type Message = TallyMsg;
    type Reply = u32;

    async fn handle(&mut self, _: &EntityContext, message: TallyMsg) -> Result<u32, EntityError> {
        match message {
            TallyMsg::Add => self.n += 1,
            TallyMsg::Stop => {
                STOPS.fetch_add(1, Ordering::SeqCst);
            }
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
