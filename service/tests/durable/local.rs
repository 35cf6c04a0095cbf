//! Durable entity types on one in-process node without a changelog: state
//! written behind to the node's store, read back when an entity starts
//! again, replies held until what they answer is durable, deletions, and a
//! state that no longer decodes. Each node of a test shares one store
//! opened in a temp dir, as a node restarted on its data directory would
//! find it.

use crate::ledger::*;
use colo::state::{StateRecord, WriteBatch};
use colo::{AskError, InMemoryNetwork, Node, Region, RegistrationError, StateSettings};
use std::time::Duration;

#[tokio::test]
async fn an_ask_is_answered_once_its_change_is_in_the_store() {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = open(&dir);
    let a = start(&store, at_once(), 1);
    for n in [5, 7] {
        a.region
            .ask("acct-1", LedgerMsg::Add(n), ASK)
            .await
            .expect("added");
        let record = stored(&store, "acct-1")
            .await
            .expect("stored when answered");
        let ledger: Ledger =
            colo::codec::decode(record.state.as_deref().expect("state")).expect("decodes");
        assert_eq!(ledger.balance, if n == 5 { 5 } else { 12 });
        assert_eq!(record.version, 1);
    }
}

#[tokio::test]
async fn state_survives_a_new_node_on_the_same_store_and_writes_go_behind_in_batches() {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = open(&dir);
    let behind = StateSettings {
        flush_interval: Duration::from_millis(20),
        max_dirty: 10_000,
        ..StateSettings::default()
    };
    let a = start(&store, behind, 1);
    let asks = (0..50).map(|i| {
        let region = a.region.clone();
        async move {
            region
                .ask(&format!("acct-{}", i % 5), LedgerMsg::Add(1), ASK)
                .await
        }
    });
    for answered in futures::future::join_all(asks).await {
        answered.expect("added");
    }
    a.node.kill().await;
    let b = start(&store, behind, 1);
    for i in 0..5 {
        let got = b
            .region
            .ask(&format!("acct-{i}"), LedgerMsg::Get, ASK)
            .await
            .expect("got");
        assert_eq!(got, (10, 10), "acct-{i}: every acknowledged change is back");
    }
}

#[tokio::test]
async fn a_passivated_entity_comes_back_with_its_state() {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = open(&dir);
    let a = start(&store, StateSettings::default(), 1);
    a.region
        .ask("acct-p", LedgerMsg::Add(3), ASK)
        .await
        .expect("added");
    a.region
        .ask("acct-p", LedgerMsg::Passivate, ASK)
        .await
        .expect("passivates");
    let ids = wait_until_gone(&a.region, "acct-p").await;
    assert!(!ids.contains(&"acct-p".to_string()));
    let got = a
        .region
        .ask("acct-p", LedgerMsg::Get, ASK)
        .await
        .expect("got");
    assert_eq!(got, (3, 1));
}

/// Waits (bounded) until `id` is no longer among the region's entities.
async fn wait_until_gone(region: &Region<Ledger>, id: &str) -> Vec<String> {
    colo_tests::wait::until_ok(ASK, || async {
        let state = region
            .state(Duration::from_secs(2))
            .await
            .expect("region state");
        let ids: Vec<String> = state
            .shards
            .values()
            .flat_map(|ids| ids.iter().map(|e| e.to_string()))
            .collect();
        match ids.iter().any(|e| e == id) {
            false => Ok(ids),
            true => Err(format!("{id} still active: {ids:?}")),
        }
    })
    .await
}

#[tokio::test]
async fn a_failed_handler_leaves_the_state_of_the_last_message_handled() {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = open(&dir);
    let a = start(&store, StateSettings::default(), 1);
    a.region
        .ask("acct-f", LedgerMsg::Add(5), ASK)
        .await
        .expect("added");
    let failed = a
        .region
        .ask("acct-f", LedgerMsg::AddThenFail(100), ASK)
        .await;
    assert!(
        matches!(failed, Err(AskError::EntityFailed(_))),
        "{failed:?}"
    );
    let got = a
        .region
        .ask("acct-f", LedgerMsg::Get, ASK)
        .await
        .expect("got");
    assert_eq!(got, (5, 1), "the failed message's change is not kept");
}

/// A deletion is written as a record without a state (what it applied,
/// kept while a record before it may be consumed again), then removed:
/// here it applied no record, so at once. Before, the record stayed for
/// good, and the store grew with every id ever deleted.
#[tokio::test]
async fn a_deleted_entity_starts_anew_stays_deleted_and_leaves_no_record() {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = open(&dir);
    let a = start(&store, at_once(), 1);
    a.region
        .ask("acct-d", LedgerMsg::Add(9), ASK)
        .await
        .expect("added");
    let after = a
        .region
        .ask("acct-d", LedgerMsg::Delete, ASK)
        .await
        .expect("deleted");
    assert_eq!(
        after,
        (9, 1),
        "the deleting message sees the state it deletes"
    );
    assert_eq!(
        a.region
            .ask("acct-d", LedgerMsg::Get, ASK)
            .await
            .expect("got"),
        (0, 0)
    );
    colo_tests::wait::until(
        "the deleted entity's record removed from the store",
        ASK,
        || {
            let store = store.clone();
            async move { stored(&store, "acct-d").await.is_none() }
        },
    )
    .await;
    a.node.kill().await;
    let b = start(&store, at_once(), 1);
    assert_eq!(
        b.region
            .ask("acct-d", LedgerMsg::Get, ASK)
            .await
            .expect("got"),
        (0, 0),
        "still deleted on the next node"
    );
}

#[tokio::test]
async fn a_state_that_does_not_decode_stops_its_shard_with_the_reason() {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = open(&dir);
    // Written by an older program whose state had another shape.
    let old = StateRecord::new(0, 1, Some(vec![0xff])).encode();
    let mut batch = WriteBatch::new(LEDGER);
    batch.put(shard_of("acct-old"), "acct-old", old);
    let writer = store.clone();
    tokio::task::spawn_blocking(move || writer.write(&batch))
        .await
        .expect("write thread")
        .expect("written");
    let a = start(&store, StateSettings::default(), 2);
    let refused = a.region.ask("acct-old", LedgerMsg::Get, ASK).await;
    let Err(AskError::Dropped(reason)) = refused else {
        panic!("an undecodable state is refused, never reset: {refused:?}");
    };
    for part in [
        "acct-old",
        "ledger",
        "state version 1",
        "this program's is 2",
    ] {
        assert!(reason.contains(part), "{part:?} missing from: {reason}");
    }
    // Its shard takes nothing more; another shard goes on.
    let neighbour = (0..1000)
        .map(|i| format!("acct-{i}"))
        .find(|id| shard_of(id) == shard_of("acct-old"))
        .expect("an id in the same shard");
    let elsewhere = (0..1000)
        .map(|i| format!("acct-{i}"))
        .find(|id| shard_of(id) != shard_of("acct-old"))
        .expect("an id in another shard");
    let stopped = a.region.ask(&neighbour, LedgerMsg::Add(1), ASK).await;
    assert!(matches!(stopped, Err(AskError::Dropped(_))), "{stopped:?}");
    assert_eq!(
        a.region
            .ask(&elsewhere, LedgerMsg::Add(1), ASK)
            .await
            .expect("added"),
        (1, 1)
    );
}

#[tokio::test]
async fn a_durable_entity_type_needs_a_node_with_a_store() {
    let network = InMemoryNetwork::new();
    let node = Node::new(network.transport("a"));
    let refused = node.start_region(ledger(1)).map(drop);
    assert_eq!(
        refused,
        Err(RegistrationError::NoStateStore(LEDGER.to_string()))
    );
    node.start_proxy(ledger(1))
        .expect("a proxy routes only: it needs no store");
}

/// What is written at an hour's interval and only then.
fn hourly() -> StateSettings {
    StateSettings {
        flush_interval: Duration::from_secs(3600),
        max_dirty: 10_000,
        ..StateSettings::default()
    }
}

#[tokio::test]
async fn an_ask_waiting_for_its_change_is_written_at_once_not_at_the_flush_interval() {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = open(&dir);
    let a = start(&store, hourly(), 1);
    let got = a
        .region
        .ask("acct-1", LedgerMsg::Add(3), ASK)
        .await
        .expect("answered before the flush interval");
    assert_eq!(got, (3, 1));
    assert!(
        stored(&store, "acct-1").await.is_some(),
        "answered once its change is in the store"
    );
}

/// A store whose writes fail; reads go to the one underneath.
#[derive(Debug)]
struct Failing(std::sync::Arc<dyn colo::state::StateStore>);

impl colo::state::StateStore for Failing {
    fn write_all(&self, _: &[WriteBatch]) -> Result<(), colo::state::StoreError> {
        Err(colo::state::StoreError::Io {
            engine: "fjall",
            entity_type: LEDGER.into(),
            reason: "disk full".into(),
        })
    }

    fn load(
        &self,
        entity_type: &str,
        shard: colo::ShardId,
        entity_id: &str,
    ) -> Result<Option<Vec<u8>>, colo::state::StoreError> {
        self.0.load(entity_type, shard, entity_id)
    }

    fn scan(
        &self,
        entity_type: &str,
        shard: colo::ShardId,
        visit: &mut dyn FnMut(&str, &[u8]) -> std::ops::ControlFlow<()>,
    ) -> Result<(), colo::state::StoreError> {
        self.0.scan(entity_type, shard, visit)
    }

    fn timers(
        &self,
        entity_type: &str,
        shard: colo::ShardId,
        after: Option<&colo::state::TimerKey>,
        visit: &mut dyn FnMut(colo::state::TimerKey, &[u8]) -> std::ops::ControlFlow<()>,
    ) -> Result<(), colo::state::StoreError> {
        self.0.timers(entity_type, shard, after, visit)
    }

    fn checkpoint(
        &self,
        entity_type: &str,
        shard: colo::ShardId,
    ) -> Result<Option<colo::state::Checkpoint>, colo::state::StoreError> {
        self.0.checkpoint(entity_type, shard)
    }

    fn engine(&self) -> colo::state::Engine {
        self.0.engine()
    }
}

#[tokio::test]
async fn a_failed_write_is_tried_again_a_flush_interval_later_even_with_an_answer_waiting() {
    colo_tests::recorded::install();
    let dir = tempfile::tempdir().expect("temp dir");
    let failing: std::sync::Arc<dyn colo::state::StateStore> =
        std::sync::Arc::new(Failing(open(&dir)));
    let name = "ledger-failing-store";
    let a = crate::ledger::cluster(name).node("a", colo::NodeStore::new(failing, hourly()), 1);
    let answer = a
        .region
        .ask("acct-1", LedgerMsg::Add(1), Duration::from_secs(2))
        .await;
    assert!(answer.is_err(), "not written, not acknowledged: {answer:?}");
    assert_eq!(
        colo_tests::recorded::counter(
            colo::metrics::STATE_WRITES,
            &[("entity_type", name), ("outcome", "failed")]
        ),
        1,
        "the waiting answer started one write, and the next waits an hour"
    );
}

/// A tell with an idempotency key is applied once: its key is written
/// with the change it made (answered once both are in the store), and a
/// retry finds it after the entity was passivated and on a new node on
/// the same store. A tell whose handler failed keeps no key: its retry
/// runs.
#[tokio::test]
async fn a_keyed_tell_is_applied_once_through_passivation_and_a_new_node() {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = open(&dir);
    let a = start(&store, at_once(), 1);
    let once = |region: &Region<Ledger>, key: &'static str, message: LedgerMsg| {
        let region = region.clone();
        async move { region.tell_once("acct-k", key, message, ASK).await }
    };
    assert_eq!(
        once(&a.region, "deposit-1", LedgerMsg::Add(5)).await,
        Ok(colo::TellOnce::Applied)
    );
    let record = stored(&store, "acct-k")
        .await
        .expect("stored when answered");
    assert_eq!(record.keys.len(), 1);
    assert_eq!(record.keys[0].0, "deposit-1");
    assert_eq!(
        once(&a.region, "deposit-1", LedgerMsg::Add(5)).await,
        Ok(colo::TellOnce::AlreadyApplied)
    );
    a.region
        .ask("acct-k", LedgerMsg::Passivate, ASK)
        .await
        .expect("passivates");
    assert_eq!(
        once(&a.region, "deposit-1", LedgerMsg::Add(5)).await,
        Ok(colo::TellOnce::AlreadyApplied),
        "read back with its state"
    );
    let failed = once(&a.region, "deposit-2", LedgerMsg::AddThenFail(100)).await;
    assert!(
        matches!(failed, Err(AskError::EntityFailed(_))),
        "{failed:?}"
    );
    a.node.kill().await;

    let b = start(&store, at_once(), 1);
    assert_eq!(
        once(&b.region, "deposit-1", LedgerMsg::Add(5)).await,
        Ok(colo::TellOnce::AlreadyApplied)
    );
    assert_eq!(
        once(&b.region, "deposit-2", LedgerMsg::Add(7)).await,
        Ok(colo::TellOnce::Applied),
        "the failed tell changed nothing: its retry runs"
    );
    let (balance, _) = b
        .region
        .ask("acct-k", LedgerMsg::Get, ASK)
        .await
        .expect("balance");
    assert_eq!(balance, 12);
    let refused = once(&b.region, "", LedgerMsg::Add(1)).await;
    assert!(
        matches!(
            refused,
            Err(AskError::Tell(colo::TellError::InvalidIdempotencyKey(_)))
        ),
        "{refused:?}"
    );
}
