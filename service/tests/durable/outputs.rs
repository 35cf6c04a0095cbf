//! Output records on in-process nodes: what a handler emits is sent once
//! its change is durable, with a deterministic id, and dropped from the
//! entity's record once sent; a handler that fails emits nothing; a send
//! that fails is sent again; what a node did not send is sent by the next
//! node on the same store, or by the next owner through the changelog;
//! with transactions, outputs go with their changes' changelog records
//! and are read once; bad outputs are refused to the handler and bad declarations to the
//! registration.

use crate::ledger::{cluster, open, settings, shard_of, stored_as, Cluster, ASK};
use colo::state::StateStore;
use colo::{
    Entity, EntityContext, EntityError, EntityType, Node, NodeStore, OutputRecord, OutputSendError,
    OutputSink, Region, RegistrationError, StateSettings, OUTPUT_ID_HEADER,
};
use futures::future::BoxFuture;
use futures::FutureExt;
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use std::ops::ControlFlow;
use std::sync::Arc;
use std::time::Duration;

const TALLIES: &str = "tallies";
const ALERTS: &str = "alerts";
const THRESHOLD: u64 = 10;

/// A total that emits one alert when it crosses [`THRESHOLD`].
#[derive(Debug, Default, Serialize, Deserialize)]
struct Tally {
    total: u64,
}

#[derive(Debug, Serialize, Deserialize)]
enum Msg {
    Add(u64),
    /// Adds and emits, then fails: neither is kept.
    AddThenFail(u64),
    /// Emits to `topic`, answering what `emit` said.
    EmitTo(String),
    Get,
}

impl Entity for Tally {
    type Message = Msg;
    type Reply = (u64, String);

    async fn handle(
        &mut self,
        ctx: &EntityContext,
        msg: Msg,
    ) -> Result<(u64, String), EntityError> {
        let refused = |e: colo::OutputError| EntityError::new(e.to_string());
        match msg {
            Msg::Add(n) => {
                let before = self.total;
                self.total += n;
                if before < THRESHOLD && self.total >= THRESHOLD {
                    let value = format!("crossed at {}", self.total);
                    ctx.emit_with_headers(
                        ALERTS,
                        ctx.entity_id().as_bytes(),
                        value.as_bytes(),
                        &[("kind", b"threshold")],
                    )
                    .map_err(refused)?;
                }
            }
            Msg::AddThenFail(n) => {
                self.total += n;
                ctx.emit(ALERTS, b"k", b"never").map_err(refused)?;
                return Err(EntityError::new("refused after emitting"));
            }
            Msg::EmitTo(topic) => {
                let said = match ctx.emit(&topic, b"k", b"v") {
                    Ok(()) => "emitted".to_string(),
                    Err(e) => e.to_string(),
                };
                return Ok((self.total, said));
            }
            Msg::Get => {}
        }
        Ok((self.total, String::new()))
    }
}

/// One output as the sink took it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Sent {
    topic: String,
    key: Vec<u8>,
    value: Vec<u8>,
    headers: Vec<(String, Vec<u8>)>,
    id: String,
}

/// A sink in memory: it fails its next `fail` sends, and never answers
/// while `hold` is set (a node that dies before its send lands).
#[derive(Clone, Default)]
struct Sink {
    sent: Arc<Mutex<Vec<Sent>>>,
    fail: Arc<Mutex<usize>>,
    hold: bool,
}

impl OutputSink for Sink {
    fn send<'a>(
        &'a self,
        records: &'a [OutputRecord<'a>],
    ) -> BoxFuture<'a, Result<(), OutputSendError>> {
        async move {
            if self.hold {
                futures::future::pending::<()>().await;
            }
            {
                let mut fail = self.fail.lock();
                if *fail > 0 {
                    *fail -= 1;
                    return Err(OutputSendError("the broker is away".into()));
                }
            }
            self.sent.lock().extend(records.iter().map(|r| Sent {
                topic: r.topic.to_string(),
                key: r.key.to_vec(),
                value: r.value.to_vec(),
                headers: r.headers.to_vec(),
                id: r.id.to_string(),
            }));
            Ok(())
        }
        .boxed()
    }
}

impl Sink {
    fn sent(&self) -> Vec<Sent> {
        self.sent.lock().clone()
    }

    /// Waits (bounded) until it holds `n` outputs, and returns them.
    async fn holds(&self, n: usize) -> Vec<Sent> {
        colo_tests::wait::until_ok(Duration::from_secs(20), || async {
            let sent = self.sent();
            match sent.len() == n {
                true => Ok(sent),
                false => Err(format!("{} sent, expected {n}: {sent:?}", sent.len())),
            }
        })
        .await
    }
}

struct OneNode {
    node: Arc<Node>,
    region: Region<Tally>,
    _cluster: Cluster,
}

fn tallies() -> EntityType<Tally> {
    EntityType::new(TALLIES, |_| Tally::default())
        .with_settings(settings())
        .durable(1)
        .with_outputs([ALERTS])
}

fn node_on(name: &str, store: NodeStore) -> OneNode {
    let cluster = cluster(TALLIES);
    let node = Arc::new(Node::with_state_store(
        cluster.network.transport(name),
        store,
    ));
    let region = node.start_region(tallies()).expect("registers");
    OneNode {
        node,
        region,
        _cluster: cluster,
    }
}

fn local(store: &Arc<dyn StateStore>, sink: &Sink) -> NodeStore {
    NodeStore::new(store.clone(), StateSettings::default()).with_outputs(sink.clone())
}

/// Another entity of `id`'s shard: a message to it starts the shard
/// without starting `id`.
fn neighbour_of(id: &str) -> String {
    let shard = shard_of(id);
    (0..1000)
        .map(|i| format!("n{i}"))
        .find(|other| shard_of(other) == shard && other != id)
        .expect("a neighbour")
}

/// Waits (bounded) until `id`'s stored record holds no output and the
/// shard's index names none: nothing is left to send again.
async fn nothing_left(store: &Arc<dyn StateStore>, id: &str) {
    colo_tests::wait::until_ok(Duration::from_secs(20), || async {
        let record = stored_as(store, TALLIES, id).await.ok_or("no record")?;
        if !record.outbox.is_empty() {
            return Err(format!("{id}'s record still holds {:?}", record.outbox));
        }
        let engine = store.clone();
        let id = id.to_string();
        let indexed = tokio::task::spawn_blocking(move || {
            let mut indexed = false;
            engine
                .timers(TALLIES, shard_of(&id), None, &mut |key, _| {
                    indexed |= key.is_outbox() && key.entity_id == id;
                    ControlFlow::Continue(())
                })
                .expect("index");
            indexed
        })
        .await
        .expect("index thread");
        match indexed {
            false => Ok(()),
            true => Err("its outbox is still indexed".to_string()),
        }
    })
    .await
}

#[tokio::test]
async fn an_output_is_sent_once_its_change_is_durable_with_its_id_and_leaves_the_record() {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = open(&dir);
    let sink = Sink::default();
    let OneNode { region, .. } = node_on("a", local(&store, &sink));
    region.ask("ann", Msg::Add(6), ASK).await.expect("added");
    let err = region
        .ask("ann", Msg::AddThenFail(6), ASK)
        .await
        .expect_err("fails");
    assert!(err.to_string().contains("refused after emitting"), "{err}");
    assert_eq!(region.ask("ann", Msg::Get, ASK).await.expect("got").0, 6);
    region.ask("ann", Msg::Add(6), ASK).await.expect("added");
    region.ask("ann", Msg::Add(6), ASK).await.expect("added");
    let sent = sink.holds(1).await;
    let alert = &sent[0];
    assert_eq!(alert.topic, ALERTS);
    assert_eq!(alert.key, b"ann");
    assert_eq!(alert.value, b"crossed at 12");
    assert_eq!(
        alert.headers,
        vec![("kind".to_string(), b"threshold".to_vec())]
    );
    let shard = shard_of("ann").0;
    assert!(
        alert.id.starts_with(&format!("{TALLIES}/{shard}/")) && alert.id.ends_with("/0"),
        "an ask's output is named by its shard, its start and a count: {}",
        alert.id
    );
    nothing_left(&store, "ann").await;
    assert_eq!(sink.sent().len(), 1, "sent once");
    assert_eq!(OUTPUT_ID_HEADER, "colo-output-id");
}

#[tokio::test]
async fn a_send_that_fails_is_sent_again_once() {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = open(&dir);
    let sink = Sink::default();
    *sink.fail.lock() = 2;
    let OneNode { region, .. } = node_on("a", local(&store, &sink));
    region.ask("bo", Msg::Add(11), ASK).await.expect("added");
    let sent = sink.holds(1).await;
    assert_eq!(sent[0].value, b"crossed at 11");
    nothing_left(&store, "bo").await;
    assert_eq!(sink.sent().len(), 1, "sent once");
}

/// A node that dies with an output written and not sent: the next node
/// on its store finds it through the shard's index, without a message to
/// the entity, sends it, and drops it; a third sends nothing again.
#[tokio::test]
async fn an_output_not_sent_when_its_node_dies_is_sent_by_the_next_node_on_its_store() {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = open(&dir);
    let held = Sink {
        hold: true,
        ..Sink::default()
    };
    let first = node_on("a", local(&store, &held));
    first
        .region
        .ask("cy", Msg::Add(15), ASK)
        .await
        .expect("durable");
    let record = stored_as(&store, TALLIES, "cy").await.expect("stored");
    assert_eq!(record.outbox.len(), 1, "kept with the change");
    first.node.kill().await;
    drop(first);

    let sink = Sink::default();
    let second = node_on("b", local(&store, &sink));
    second
        .region
        .ask(&neighbour_of("cy"), Msg::Get, ASK)
        .await
        .expect("shard started");
    let sent = sink.holds(1).await;
    assert_eq!(sent[0].value, b"crossed at 15");
    assert_eq!(
        sent[0].id, record.outbox[0].id,
        "the id it was written with"
    );
    nothing_left(&store, "cy").await;
    second.node.kill().await;
    drop(second);

    let again = Sink::default();
    let third = node_on("c", local(&store, &again));
    assert_eq!(
        third.region.ask("cy", Msg::Get, ASK).await.expect("got").0,
        15
    );
    nothing_left(&store, "cy").await;
    assert!(again.sent().is_empty(), "nothing sent again");
}

/// The changelog carries an outbox in its entity's record: a node with an
/// empty store that takes the shard over sends what its owner did not.
#[tokio::test]
async fn an_output_moves_with_the_changelog_to_a_node_with_an_empty_store() {
    let broker = crate::changelog::broker(TALLIES);
    let (first_dir, second_dir) = (
        tempfile::tempdir().expect("dir"),
        tempfile::tempdir().expect("dir"),
    );
    let held = Sink {
        hold: true,
        ..Sink::default()
    };
    let first_store = crate::changelog::store(&broker, TALLIES, &open(&first_dir));
    let first = node_on("a", first_store.with_outputs(held));
    first
        .region
        .ask("di", Msg::Add(10), ASK)
        .await
        .expect("durable");
    first.node.kill().await;
    let sink = Sink::default();
    let second_store = open(&second_dir);
    let second = node_on(
        "b",
        crate::changelog::store(&broker, TALLIES, &second_store).with_outputs(sink.clone()),
    );
    second
        .region
        .ask(&neighbour_of("di"), Msg::Get, ASK)
        .await
        .expect("shard started");
    let sent = sink.holds(1).await;
    assert_eq!(sent[0].value, b"crossed at 10");
    nothing_left(&second_store, "di").await;
    assert_eq!(
        second.region.ask("di", Msg::Get, ASK).await.expect("got").0,
        10
    );
}

#[tokio::test]
async fn bad_outputs_are_refused_to_the_handler_and_bad_declarations_to_the_registration() {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = open(&dir);
    let sink = Sink::default();
    let OneNode { region, .. } = node_on("a", local(&store, &sink));
    region.ask("ed", Msg::Add(3), ASK).await.expect("added");
    let (total, said) = region
        .ask("ed", Msg::EmitTo("alert".into()), ASK)
        .await
        .expect("the handler goes on");
    assert_eq!(total, 3, "nothing accepted before is lost");
    assert!(
        said.contains("topic \"alert\" is not one of this entity type's output topics"),
        "{said}"
    );
    region.ask("ed", Msg::Add(8), ASK).await.expect("added");
    assert_eq!(sink.holds(1).await[0].value, b"crossed at 11");

    let plain = cluster("plain-tallies");
    let node = Node::new(plain.network.transport("p"));
    let err = node
        .start_region(
            EntityType::new("plain-tallies", |_| Tally::default())
                .with_settings(settings())
                .with_outputs([ALERTS]),
        )
        .expect_err("not durable");
    assert!(err.to_string().contains("must be durable"), "{err}");
    let err = node
        .start_region(
            EntityType::new("plain-tallies", |_| Tally::default())
                .with_settings(settings())
                .durable(1)
                .with_outputs(["no spaces"]),
        )
        .expect_err("not a topic name");
    assert!(err.to_string().contains("not a Kafka topic name"), "{err}");

    let other = tempfile::tempdir().expect("temp dir");
    let unsent = cluster(TALLIES);
    let node = Node::with_state_store(
        unsent.network.transport("q"),
        NodeStore::new(open(&other), StateSettings::default()),
    );
    let err = node.start_region(tallies()).expect_err("nowhere to send");
    assert_eq!(err, RegistrationError::NoOutputs(TALLIES.into()));
}

/// A plain ask's outputs are named by their shard's start: a node started
/// again on a store without a changelog starts its shards at the same
/// epoch, and its outputs must not take the last run's ids, which a
/// reader would drop as copies.
#[tokio::test]
async fn outputs_of_plain_asks_after_a_restart_have_ids_of_their_own() {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = open(&dir);
    let sink = Sink::default();
    let first = node_on("a", local(&store, &sink));
    first
        .region
        .ask("fa", Msg::Add(10), ASK)
        .await
        .expect("added");
    sink.holds(1).await;
    // Dropped from its record: the next node does not send it again.
    nothing_left(&store, "fa").await;
    first.node.kill().await;
    drop(first);
    let second = node_on("b", local(&store, &sink));
    second
        .region
        .ask(&neighbour_of("fa"), Msg::Add(10), ASK)
        .await
        .expect("added");
    let sent = sink.holds(2).await;
    assert_ne!(sent[0].id, sent[1].id, "{sent:?}");
}

/// With transactions, an output is read (`read_committed`) once its
/// change is in the changelog, in the same transaction: it never enters
/// the entity's record, the sink sends nothing, a failed handler's output
/// is never read, and the next owner, restoring from the changelog, emits
/// nothing again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outputs_in_transactions_are_read_once_with_their_changes() {
    let broker = crate::changelog::broker(TALLIES);
    broker.create_topic(ALERTS, 4, 1).expect("alerts topic");
    let bootstrap = broker.bootstrap_servers();
    let alerts = || {
        let bootstrap = bootstrap.clone();
        async move {
            tokio::task::spawn_blocking(move || {
                colo_connectors::read_outputs(
                    &bootstrap,
                    &[],
                    ALERTS,
                    OUTPUT_ID_HEADER,
                    Duration::from_secs(10),
                )
            })
            .await
            .expect("reader")
            .expect("alerts read")
        }
    };
    let (first_dir, second_dir) = (
        tempfile::tempdir().expect("dir"),
        tempfile::tempdir().expect("dir"),
    );
    let unused = Sink {
        hold: true,
        ..Sink::default()
    };
    let first_store = open(&first_dir);
    let first = node_on(
        "a",
        crate::changelog::transactional_store(&broker, TALLIES, &first_store)
            .with_outputs(unused.clone()),
    );
    first
        .region
        .ask("gu", Msg::Add(6), ASK)
        .await
        .expect("added");
    first
        .region
        .ask("gu", Msg::AddThenFail(6), ASK)
        .await
        .expect_err("fails");
    first
        .region
        .ask("gu", Msg::Add(6), ASK)
        .await
        .expect("durable");
    let read = alerts().await;
    assert_eq!(read.len(), 1, "{read:?}");
    assert_eq!(read[0].value, b"crossed at 12");
    assert_eq!(read[0].key, b"gu");
    let record = stored_as(&first_store, TALLIES, "gu")
        .await
        .expect("stored");
    assert!(
        record.outbox.is_empty(),
        "kept in the record: {:?}",
        record.outbox
    );
    assert!(unused.sent().is_empty(), "sent outside the transaction");
    first.node.kill().await;
    drop(first);

    let second_store = open(&second_dir);
    let second = node_on(
        "b",
        crate::changelog::transactional_store(&broker, TALLIES, &second_store)
            .with_outputs(unused.clone()),
    );
    assert_eq!(
        second
            .region
            .ask("gu", Msg::Add(1), ASK)
            .await
            .expect("added")
            .0,
        13,
        "restored from the changelog"
    );
    let again = alerts().await;
    assert_eq!(
        again.iter().map(|o| o.id.clone()).collect::<Vec<_>>(),
        read.iter().map(|o| o.id.clone()).collect::<Vec<_>>(),
        "emitted again"
    );
}
