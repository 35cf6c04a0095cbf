//! Remember entities: a durable entity type's entities with state start
//! again with their shard, at the recovery strategy's rate, without a
//! message; a type must be durable to remember.

use crate::ledger::*;
use colo::{EntityRecovery, EntityType, InMemoryNetwork, Node, NodeStore, RegistrationError};
use colo::{ShardingSettings, StateSettings};
use std::time::Duration;

/// Ids of one shard, the first being `acct-r0`'s.
fn ids_in_one_shard(count: usize) -> Vec<String> {
    let shard = shard_of("acct-r0");
    (0..10_000)
        .map(|i| format!("acct-r{i}"))
        .filter(|id| shard_of(id) == shard)
        .take(count)
        .collect()
}

/// Writes `ids` on a node of its own, each its `amount`, then kills it.
async fn written_then_killed(
    store: &std::sync::Arc<dyn colo::state::StateStore>,
    ids: &[String],
    amount: impl Fn(usize) -> i64,
) {
    let a = start(store, at_once(), 1);
    for (n, id) in ids.iter().enumerate() {
        a.region
            .ask(id, LedgerMsg::Add(amount(n)), ASK)
            .await
            .expect("added");
    }
    a.node.kill().await;
}

/// A node on `store` that remembers `number` entities every `frequency`.
fn remembering_node(
    store: &std::sync::Arc<dyn colo::state::StateStore>,
    state: StateSettings,
    frequency: Duration,
    number: usize,
) -> OneNode {
    let remembering = ShardingSettings {
        remember_entities: Some(EntityRecovery::Constant { frequency, number }),
        ..settings()
    };
    cluster(LEDGER).node_with("b", NodeStore::new(store.clone(), state), remembering, 1)
}

/// The entities active on `node`.
async fn active(node: &OneNode) -> Vec<String> {
    let state = node
        .region
        .state(Duration::from_secs(2))
        .await
        .expect("state");
    state
        .shards
        .values()
        .flat_map(|ids| ids.iter().map(|e| e.to_string()))
        .collect()
}

#[tokio::test]
async fn remembered_entities_start_with_their_shard_at_the_constant_rate() {
    let dir = tempfile::tempdir().expect("dir");
    let store = open(&dir);
    let ids = ids_in_one_shard(6);
    written_then_killed(&store, &ids, |n| n as i64 + 1).await;
    let b = remembering_node(
        &store,
        StateSettings::default(),
        Duration::from_millis(20),
        2,
    );
    // One message starts the shard; its other entities come without one.
    let first = b
        .region
        .ask(&ids[0], LedgerMsg::Get, ASK)
        .await
        .expect("got");
    assert_eq!(first, (1, 1));
    colo_tests::wait::until_ok(ASK, || async {
        let active = active(&b).await;
        match ids.iter().all(|id| active.contains(id)) {
            true => Ok(()),
            false => Err(format!("remembered {ids:?}, active {active:?}")),
        }
    })
    .await;
    for (n, id) in ids.iter().enumerate() {
        let got = b.region.ask(id, LedgerMsg::Get, ASK).await.expect("got");
        assert_eq!(got, (n as i64 + 1, 1), "{id} started with its state");
    }
}

#[tokio::test]
async fn only_a_durable_entity_type_remembers_its_entities() {
    let network = InMemoryNetwork::new();
    let node = Node::new(network.transport("a"));
    let remembering = ShardingSettings {
        remember_entities: Some(EntityRecovery::All),
        ..settings()
    };
    let refused = node
        .start_region(EntityType::new(LEDGER, |_| Ledger::default()).with_settings(remembering))
        .map(drop)
        .expect_err("not durable");
    assert!(
        matches!(&refused, RegistrationError::Settings(e) if e.field == "remember_entities"),
        "{refused}"
    );
}

/// An entity that a message started, changed and stopped while its
/// shard was still starting its remembered entities is not started again
/// from what the shard's first read of the store held: its change stays.
/// Before, the remembered start came after the change and brought the
/// older state back (a lost update: 1 instead of 11).
#[tokio::test]
async fn an_entity_changed_and_stopped_while_its_shard_remembers_keeps_its_change() {
    let dir = tempfile::tempdir().expect("dir");
    let store = open(&dir);
    let ids = ids_in_one_shard(6);
    written_then_killed(&store, &ids, |_| 1).await;
    // One remembered entity every 300 ms, in id order: the fourth comes
    // about a second after the shard starts.
    let b = remembering_node(&store, at_once(), Duration::from_millis(300), 1);
    let mut sorted = ids.clone();
    sorted.sort();
    let (changed, last) = (&sorted[3], &sorted[5]);
    // Its message starts the shard; then it changes and stops before the
    // shard's remembered entities reach it.
    let got = b
        .region
        .ask(changed, LedgerMsg::Add(10), ASK)
        .await
        .expect("added");
    assert_eq!(got, (11, 2));
    b.region
        .ask(changed, LedgerMsg::Passivate, ASK)
        .await
        .expect("passivated");
    colo_tests::wait::until_ok(ASK, || async {
        let active = active(&b).await;
        match active.contains(last) {
            true => Ok(()),
            false => Err(format!("{last} not remembered yet: {active:?}")),
        }
    })
    .await;
    let got = b
        .region
        .ask(changed, LedgerMsg::Get, ASK)
        .await
        .expect("got");
    assert_eq!(got, (11, 2), "{changed} after the shard remembered past it");
}
