//! Nodes that go silent or lose the coordinator, across processes.

use colo_tests::client::*;
use colo_tests::lifecycle::{Lifecycle, JSON_LOGS};
use colo_tests::process::{colo_binary, NodeProcess};
use colo_tests::proxy::Proxy;
use colo_tests::{http, wait};
use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// A node that freezes (kill -STOP: connections open, no heartbeats) for
/// longer than the region timeout is replaced: its entities start on other
/// nodes. When it wakes up it checks the age of its coordinator's last
/// answer before it handles anything, so its stale copies answer nothing:
/// an ask through it reaches the new home.
#[tokio::test]
async fn a_paused_node_answers_nothing_from_its_stale_copies_after_waking() {
    let a = NodeProcess::start(None, &JSON_LOGS);
    let b = NodeProcess::start(Some(&a.grpc), &JSON_LOGS);
    let c = NodeProcess::start(Some(&a.grpc), &JSON_LOGS);
    for node in [&a, &b, &c] {
        node.await_ready(READY).await;
    }
    let ids = ids("paused", 40);
    let mut via_a = a.client().await;
    for id in &ids {
        assert_eq!(ask(&mut via_a, id, r#"{"Add":5}"#).await.unwrap(), 5);
    }
    let on_b = entities_by_node(&[&b]).await.remove(&b.grpc).unwrap();
    let x = on_b.iter().next().expect("an entity on b").clone();

    b.pause();
    // Once b is terminated, x starts again elsewhere: its state is in
    // memory only, so the new copy starts from 0, and b's copy, had it
    // answered, would say 5.
    wait::until("x answers without b", Duration::from_secs(30), || {
        let mut client = via_a.clone();
        let x = x.clone();
        async move {
            ask_within(&mut client, &x, r#""Get""#, Duration::from_secs(1))
                .await
                .is_ok_and(|count| count == 0)
        }
    })
    .await;
    assert_eq!(ask(&mut via_a, &x, r#"{"Add":3}"#).await.unwrap(), 3);

    b.resume();
    // At once, through b: its stale copy (5) must not answer.
    let mut via_b = b.client().await;
    assert_eq!(ask(&mut via_b, &x, r#""Get""#).await.unwrap(), 3);
    // b dropped its copies without running anything.
    let lives = Lifecycle::read(&[&b], "counter");
    for id in &on_b {
        let life = lives.lives[id].iter().find(|l| l.node == b.grpc).unwrap();
        assert_eq!(life.reason.as_deref(), Some("dropped"), "{id}: {life:?}");
    }
    let all = Lifecycle::read(&[&a, &b, &c], "counter");
    let after_wake: Vec<_> = all.overlaps();
    // b's copies were live (frozen) while the new ones started: what
    // matters is that they handled nothing once awake, checked above.
    assert!(
        after_wake.iter().all(|o| o.contains(&b.grpc)),
        "{after_wake:?}"
    );
}

/// A node cut off from the coordinator (its coordinator stream held by a
/// proxy, as a network partition would) fences itself before its shards
/// start elsewhere: across tells through a node on each side, no entity is
/// ever live on two nodes, and once the partition heals every node reads
/// the same value.
#[tokio::test]
async fn a_node_cut_off_from_the_coordinator_never_serves_next_to_the_new_home() {
    let a = NodeProcess::start(None, &JSON_LOGS);
    let proxy = Proxy::start(&a.grpc).await;
    let b = NodeProcess::start(Some(&proxy.address), &JSON_LOGS);
    let c = NodeProcess::start(Some(&a.grpc), &JSON_LOGS);
    for node in [&a, &b, &c] {
        node.await_ready(READY).await;
    }
    let ids = ids("cut", 40);
    let mut via_a = a.client().await;
    for id in &ids {
        ask(&mut via_a, id, r#"{"Add":1}"#).await.unwrap();
    }
    let on_b: Vec<String> = entities_by_node(&[&b])
        .await
        .remove(&b.grpc)
        .unwrap()
        .into_iter()
        .collect();
    assert!(!on_b.is_empty());

    // Tells through a node on each side of the partition.
    let stop = Arc::new(AtomicBool::new(false));
    let mut senders = Vec::new();
    for node in [&a, &b] {
        let (mut client, ids, stop) = (node.client().await, on_b.clone(), stop.clone());
        senders.push(tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                for id in &ids {
                    let _ = tell(&mut client, id, r#"{"Add":1}"#).await;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }));
    }
    proxy.partition();
    // b's entities move once the coordinator has terminated b.
    wait::until(
        "b's entities live elsewhere",
        Duration::from_secs(30),
        || async {
            try_entities_by_node(&[&a, &c])
                .await
                .is_some_and(|by_node| {
                    on_b.iter()
                        .all(|id| by_node.values().any(|ids| ids.contains(id)))
                })
        },
    )
    .await;
    proxy.heal();
    wait::until("b registered again", Duration::from_secs(30), || async {
        shards_by_region(&b).await.is_some_and(|r| r.len() == 3)
    })
    .await;
    stop.store(true, Ordering::Relaxed);
    for sender in senders {
        sender.await.unwrap();
    }
    // Every node reads the same value: one copy of each entity.
    let mut via_b = b.client().await;
    let mut via_c = c.client().await;
    for id in &on_b {
        let value = ask(&mut via_a, id, r#""Get""#).await.unwrap();
        assert_eq!(
            ask(&mut via_b, id, r#""Get""#).await.unwrap(),
            value,
            "{id}"
        );
        assert_eq!(
            ask(&mut via_c, id, r#""Get""#).await.unwrap(),
            value,
            "{id}"
        );
    }
    let overlaps = Lifecycle::read(&[&a, &b, &c], "counter").overlaps();
    assert!(
        overlaps.is_empty(),
        "entities live on two nodes at once: {overlaps:#?}"
    );
}

/// The node hosting the coordinator is killed: the others keep serving the
/// entities whose homes they know. Restarted with the same config, its
/// coordinator starts with no state and learns the homes from the regions
/// as they register again; every entity answers and lives once.
#[tokio::test]
async fn a_restarted_coordinator_node_relearns_homes_from_the_regions() {
    // No rebalancing, so that every shard stays where it runs: the new
    // coordinator would otherwise move some to the restarted, empty node.
    let sets = ["sharding.rebalance_interval=1h"];
    let mut a = NodeProcess::start(None, &sets);
    let b = NodeProcess::start(Some(&a.grpc), &sets);
    let c = NodeProcess::start(Some(&a.grpc), &sets);
    for node in [&a, &b, &c] {
        node.await_ready(READY).await;
    }
    let ids = ids("coord", 40);
    let mut via_b = b.client().await;
    for id in &ids {
        ask(&mut via_b, id, r#"{"Add":1}"#).await.unwrap();
    }
    let before = entities_by_node(&[&a, &b, &c]).await;
    let on_c = before[&c.grpc].clone();
    assert!(!on_c.is_empty());

    a.kill();
    // Known homes on live nodes: served with no coordinator at all.
    for id in &on_c {
        assert_eq!(
            ask(&mut via_b, id, r#"{"Add":1}"#).await.unwrap(),
            2,
            "{id}"
        );
    }
    a.restart();
    a.await_ready(READY).await;
    for node in [&b, &c] {
        node.await_ready(READY).await;
    }
    // The restarted node knows no home and asks its new coordinator, which
    // learned from c that c runs those shards: the entities are found
    // there, state intact, rather than started afresh.
    let mut via_a = a.client().await;
    for id in &on_c {
        assert_eq!(ask(&mut via_a, id, r#""Get""#).await.unwrap(), 2, "{id}");
    }
    for id in &ids {
        ask(&mut via_a, id, r#""Get""#).await.unwrap();
    }
    let after = entities_by_node(&[&a, &b, &c]).await;
    let live: usize = after.values().map(BTreeSet::len).sum();
    assert_eq!(live, ids.len(), "an entity lives twice: {after:?}");
}

/// The client subcommands against a running node, as a user types them.
/// `colo run` runs two entity types, so they need `--type`, and say so.
#[tokio::test]
async fn the_client_commands_tell_ask_and_inspect() {
    let a = NodeProcess::start(None, &[]);
    a.await_ready(READY).await;
    let colo = |args: &[&str]| {
        let out = std::process::Command::new(colo_binary())
            .args(args)
            .args(["--addr", &a.grpc])
            .output()
            .expect("run colo");
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (ok, _, err) = colo(&["tell", "--type", "counter", "--id", "cli", r#"{"Add":5}"#]);
    assert!(ok, "{err}");
    let (ok, out, err) = colo(&["ask", "--type", "counter", "--id", "cli", "--json", "Get"]);
    assert!(ok, "{err}");
    let reply: serde_json::Value = serde_json::from_str(out.trim()).expect(&out);
    assert_eq!(reply["reply"], 5, "{out}");
    assert_eq!(reply["entity_type"], "counter", "{out}");
    let (ok, out, err) = colo(&["stats", "--type", "counter", "--json"]);
    assert!(ok, "{err}");
    assert!(out.contains(&a.grpc), "{out}");
    let (ok, out, err) = colo(&["shards", "--type", "counter"]);
    assert!(ok, "{err}");
    assert!(out.contains("cli"), "{out}");
    let (ok, _, err) = colo(&["ask", "--type", "counter", "--id", "cli", r#"{"Sub":1}"#]);
    assert!(!ok);
    assert!(err.contains("INVALID_ARGUMENT"), "{err}");
    for command in [
        &["ask", "--id", "cli", "Get"][..],
        &["tell", "--id", "cli", r#"{"Add":1}"#],
        &["stats"],
    ] {
        let (ok, out, err) = colo(command);
        assert!(!ok, "{command:?}: {out}");
        assert!(
            err.contains(
                "colo: the node runs several entity types (counter, user): name one with --type"
            ),
            "{command:?}: {err}"
        );
    }
    let (_, out, _) = colo(&["ask", "--type", "counter", "--id", "cli", "Get"]);
    assert!(
        out.contains("replied 5"),
        "the tell without --type was not sent: {out}"
    );
}

/// With its coordinator gone a node says so: at warn level in its log, in
/// the answer to a tell whose message now waits, in the answer to a stats
/// query, in its region state, in a metric; it stays ready (it still serves
/// the shards it hosts, like Akka's sharding health check once registered);
/// and SIGTERM stops it promptly, since nothing can be handed off.
#[tokio::test]
async fn a_node_without_its_coordinator_says_so_and_still_stops_promptly() {
    let mut a = NodeProcess::start(None, &[]);
    let mut b = NodeProcess::start(Some(&a.grpc), &[]);
    a.await_ready(READY).await;
    b.await_ready(READY).await;
    let mut via_b = b.client().await;
    for id in ids("away", 20) {
        ask(&mut via_b, &id, r#"{"Add":1}"#).await.unwrap();
    }
    a.kill();
    wait::until("b sees the coordinator gone", Duration::from_secs(30), || async {
        matches!(
            http::get(&b.admin, "/metrics").await,
            Ok((200, body)) if body.contains(r#"colo_region_coordinator_reachable{entity_type="counter"} 0"#)
        )
    })
    .await;
    let colo = |args: &[&str]| {
        let out = std::process::Command::new(colo_binary())
            .args(args)
            .args(["--addr", &b.grpc])
            .output()
            .expect("run colo");
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    // An id nobody used: its shard may have no known home.
    let fresh = (0..)
        .map(|i| format!("fresh-{i}"))
        .find(|id| {
            let (ok, out, _) = colo(&["tell", "--type", "counter", "--id", id, r#"{"Add":1}"#]);
            ok && out.contains("buffered: coordinator unreachable")
        })
        .expect("a tell that waits for the coordinator");
    assert!(fresh.starts_with("fresh-"));
    let (ok, _, err) = colo(&["stats", "--type", "counter"]);
    assert!(!ok);
    assert!(err.contains("coordinator unreachable"), "{err}");
    let (ok, out, _) = colo(&["shards", "--type", "counter"]);
    assert!(ok && out.contains("coordinator unreachable"), "{out}");
    let (status, _) = http::get(&b.admin, "/health/ready").await.unwrap();
    assert_eq!(status, 200, "still ready without the coordinator");
    assert!(b.logs().contains("WARN"), "{}", b.logs());
    assert!(b.logs().contains("coordinator"), "{}", b.logs());
    b.terminate();
    let status = b.exited(Duration::from_secs(10)).await;
    assert!(status.success(), "{status}");
}
