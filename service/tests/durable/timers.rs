//! Durable timers on in-process nodes: a timer fires at or after its time,
//! once, also for an entity passivated meanwhile; a cancelled or replaced
//! one does not; one due already fires at once; and a timer outlives its
//! node, fired by a new node on the same store. Bad names and types that
//! keep no state are refused to the handler.

use crate::ledger::{at_once, cluster, open, settings, Cluster, ASK};
use colo::state::StateStore;
use colo::{
    Entity, EntityContext, EntityError, EntityType, Node, NodeStore, Region, StateSettings,
};
use serde::{Deserialize, Serialize};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

const REMINDERS: &str = "reminders";

/// Whether the timer named `flaky` failed its handler once already.
static FLAKY_FAILED: AtomicBool = AtomicBool::new(false);

/// What came due, in order.
#[derive(Debug, Default, Serialize, Deserialize)]
struct Reminders {
    fired: Vec<String>,
}

#[derive(Debug, Serialize, Deserialize)]
enum Msg {
    /// Schedule timer `name` in `ms` (0: at the Unix epoch, long past).
    Remind(String, u64),
    Cancel(String),
    /// What a timer brings.
    Due(String),
    Get,
    Passivate,
}

impl Entity for Reminders {
    type Message = Msg;
    type Reply = Vec<String>;

    async fn handle(&mut self, ctx: &EntityContext, msg: Msg) -> Result<Vec<String>, EntityError> {
        let refused = |e: colo::TimerError| EntityError::new(e.to_string());
        match msg {
            Msg::Remind(name, 0) => ctx
                .schedule(&name, UNIX_EPOCH, &Msg::Due(name.clone()))
                .map_err(refused)?,
            Msg::Remind(name, ms) => ctx
                .schedule_after(&name, Duration::from_millis(ms), &Msg::Due(name.clone()))
                .map_err(refused)?,
            Msg::Cancel(name) => ctx.cancel(&name).map_err(refused)?,
            Msg::Due(name) => {
                if ctx.fired_timer() != Some(name.as_str()) {
                    return Err(EntityError::new(format!("{name} came without its timer")));
                }
                if name == "flaky" && !FLAKY_FAILED.swap(true, Ordering::SeqCst) {
                    return Err(EntityError::new("the first firing of flaky fails"));
                }
                self.fired.push(name);
            }
            Msg::Get => {}
            Msg::Passivate => ctx.passivate(),
        }
        Ok(self.fired.clone())
    }
}

/// A node of a cluster of its own (a restart of the whole cluster, when a
/// second one is started on the same store), its region of reminders.
struct OneNode {
    node: Arc<Node>,
    region: Region<Reminders>,
    _cluster: Cluster,
}

fn node(name: &str, store: &Arc<dyn StateStore>, state: StateSettings) -> OneNode {
    node_on(name, NodeStore::new(store.clone(), state))
}

fn node_on(name: &str, store: NodeStore) -> OneNode {
    let cluster = cluster(REMINDERS);
    let node = Arc::new(Node::with_state_store(
        cluster.network.transport(name),
        store,
    ));
    let region = node
        .start_region(
            EntityType::new(REMINDERS, |_| Reminders::default())
                .with_settings(settings())
                .durable(1),
        )
        .expect("registers");
    OneNode {
        node,
        region,
        _cluster: cluster,
    }
}

/// Waits (bounded) until `id` has fired `expected`, and returns it.
async fn fired(region: &Region<Reminders>, id: &str, expected: &[&str]) -> Vec<String> {
    colo_tests::wait::until_ok(Duration::from_secs(20), || async {
        let fired = region
            .ask(id, Msg::Get, ASK)
            .await
            .map_err(|e| e.to_string())?;
        match fired == expected {
            true => Ok(fired),
            false => Err(format!("{id} fired {fired:?}, expected {expected:?}")),
        }
    })
    .await
}

#[tokio::test]
async fn a_timer_fires_once_after_its_time_and_wakes_a_passivated_entity() {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = open(&dir);
    let OneNode { region, .. } = node("a", &store, StateSettings::default());
    let asked = SystemTime::now();
    region
        .ask("ann", Msg::Remind("tea".into(), 400), ASK)
        .await
        .expect("scheduled");
    region
        .ask("ann", Msg::Passivate, ASK)
        .await
        .expect("passivates");
    fired(&region, "ann", &["tea"]).await;
    assert!(
        asked.elapsed().expect("clock") >= Duration::from_millis(400),
        "fired no sooner than asked"
    );
    // Another timer after it: the first did not fire again meanwhile.
    region
        .ask("ann", Msg::Remind("cake".into(), 300), ASK)
        .await
        .expect("scheduled");
    fired(&region, "ann", &["tea", "cake"]).await;
}

#[tokio::test]
async fn a_cancelled_or_replaced_timer_does_not_fire_and_one_due_already_fires_at_once() {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = open(&dir);
    let OneNode { region, .. } = node("a", &store, StateSettings::default());
    for (name, ms) in [("a", 300), ("b", 200), ("c", 900)] {
        region
            .ask("bo", Msg::Remind(name.into(), ms), ASK)
            .await
            .expect("scheduled");
    }
    region
        .ask("bo", Msg::Cancel("a".into()), ASK)
        .await
        .expect("cancelled");
    // Replaced: "b" now comes after "c".
    region
        .ask("bo", Msg::Remind("b".into(), 1_500), ASK)
        .await
        .expect("moved");
    fired(&region, "bo", &["c", "b"]).await;
    region
        .ask("bo", Msg::Remind("past".into(), 0), ASK)
        .await
        .expect("scheduled in the past");
    fired(&region, "bo", &["c", "b", "past"]).await;
}

/// A handler that fails on a timer's message leaves the timer: it fires
/// again (a second later), as the same timer, and is applied then. (A
/// retry once went out under its retry time as if it were its due time:
/// its entity did not know it, and dropped it as fired already.)
#[tokio::test]
async fn a_timer_whose_handler_failed_fires_again_and_is_applied() {
    colo_tests::recorded::install();
    let dir = tempfile::tempdir().expect("temp dir");
    let store = open(&dir);
    let OneNode { region, .. } = node("a", &store, StateSettings::default());
    // The shard runs, and has read its (empty) index, before the timer.
    region.ask("gil", Msg::Get, ASK).await.expect("started");
    region
        .ask("gil", Msg::Remind("flaky".into(), 1_500), ASK)
        .await
        .expect("scheduled");
    fired(&region, "gil", &["flaky"]).await;
    let outcome = |outcome| {
        colo_tests::recorded::counter(
            colo::metrics::TIMERS_FIRED,
            &[("entity_type", REMINDERS), ("outcome", outcome)],
        )
    };
    assert_eq!(
        (outcome("failed"), outcome("applied"), outcome("stale")),
        (1, 1, 0),
        "failed once, then applied, never dropped"
    );
}

#[tokio::test]
async fn a_timer_outlives_its_node_and_fires_on_a_new_node_on_the_same_store() {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = open(&dir);
    let first = node("a", &store, at_once());
    first
        .region
        .ask("cy", Msg::Remind("later".into(), 1_500), ASK)
        .await
        .expect("scheduled");
    first.node.kill().await;
    let again = node("b", &store, StateSettings::default());
    fired(&again.region, "cy", &["later"]).await;
}

/// The changelog carries an entity's timers in its record: a node that
/// restores the shard into an empty store indexes them again and fires
/// them.
#[tokio::test]
async fn a_timer_moves_with_the_changelog_to_a_node_with_an_empty_store() {
    let broker = crate::changelog::broker(REMINDERS);
    let (first_dir, second_dir) = (
        tempfile::tempdir().expect("dir"),
        tempfile::tempdir().expect("dir"),
    );
    let first = node_on(
        "a",
        crate::changelog::store(&broker, REMINDERS, &open(&first_dir)),
    );
    first
        .region
        .ask("fay", Msg::Remind("moved".into(), 2_000), ASK)
        .await
        .expect("scheduled");
    first.node.kill().await;
    let second = node_on(
        "b",
        crate::changelog::store(&broker, REMINDERS, &open(&second_dir)),
    );
    fired(&second.region, "fay", &["moved"]).await;
}

#[tokio::test]
async fn bad_timer_names_and_types_without_state_are_refused_to_the_handler() {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = open(&dir);
    let OneNode { region, .. } = node("a", &store, StateSettings::default());
    let long = "n".repeat(colo::MAX_TIMER_NAME + 1);
    let err = region
        .ask("di", Msg::Remind(long, 100), ASK)
        .await
        .expect_err("too long");
    assert!(
        err.to_string().contains("1 to 256 bytes, it is 257"),
        "{err}"
    );
    let err = region
        .ask("di", Msg::Remind(String::new(), 100), ASK)
        .await
        .expect_err("empty");
    assert!(err.to_string().contains("it is 0"), "{err}");
    assert_eq!(
        region.ask("di", Msg::Get, ASK).await.expect("got"),
        Vec::<String>::new()
    );

    let plain = cluster("plain-reminders");
    let node = Node::new(plain.network.transport("p"));
    let region = node
        .start_region(
            EntityType::new("plain-reminders", |_| Reminders::default()).with_settings(settings()),
        )
        .expect("registers");
    let err = region
        .ask("ed", Msg::Remind("x".into(), 100), ASK)
        .await
        .expect_err("not durable");
    assert!(err.to_string().contains("not durable"), "{err}");
}
