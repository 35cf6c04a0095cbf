//! Nodes that go silent or lose the coordinator, across processes.

use colo_tests::client::*;
use colo_tests::process::{colo_binary, NodeProcess};
use colo_tests::wait;
use std::collections::BTreeSet;
use std::time::Duration;

/// A node that freezes (kill -STOP: connections open, no heartbeats) is
/// terminated after the region timeout: its entities answer again from
/// other nodes. When it wakes up it registers again, learns that its shards
/// live elsewhere and stops its copies, so no entity stays live twice.
#[tokio::test]
async fn a_silent_node_is_terminated_and_stops_its_copies_when_it_wakes() {
    let (a, b, c) = cluster_of_three().await;
    let ids = ids("silent", 40);
    let mut via_a = a.client().await;
    for id in &ids {
        ask(&mut via_a, id, r#"{"Add":1}"#).await.unwrap();
    }
    let on_b = entities_by_node(&[&b]).await.remove(&b.grpc).unwrap();
    assert!(!on_b.is_empty());

    b.pause();
    for id in &on_b {
        wait::until(
            &format!("{id} answers without b"),
            Duration::from_secs(30),
            || {
                let mut client = via_a.clone();
                async move {
                    ask_within(&mut client, id, r#""Get""#, Duration::from_secs(1))
                        .await
                        .is_ok()
                }
            },
        )
        .await;
    }
    let regions = shards_by_region(&a).await.expect("cluster stats");
    assert!(!regions.contains_key(&b.grpc), "{regions:?}");

    b.resume();
    b.await_ready(READY).await;
    wait::until(
        "every entity lives once",
        Duration::from_secs(30),
        || async {
            try_entities_by_node(&[&a, &b, &c])
                .await
                .is_some_and(|by_node| {
                    let live: usize = by_node.values().map(BTreeSet::len).sum();
                    let distinct: BTreeSet<&String> = by_node.values().flatten().collect();
                    live == distinct.len()
                })
        },
    )
    .await;
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
    let (ok, _, err) = colo(&["tell", "--id", "cli", r#"{"Add":5}"#]);
    assert!(ok, "{err}");
    let (ok, out, err) = colo(&["ask", "--id", "cli", "--json", "Get"]);
    assert!(ok, "{err}");
    let reply: serde_json::Value = serde_json::from_str(out.trim()).expect(&out);
    assert_eq!(reply["reply"], 5, "{out}");
    let (ok, out, err) = colo(&["stats", "--json"]);
    assert!(ok, "{err}");
    assert!(out.contains(&a.grpc), "{out}");
    let (ok, out, err) = colo(&["shards"]);
    assert!(ok, "{err}");
    assert!(out.contains("cli"), "{out}");
    let (ok, _, err) = colo(&["ask", "--id", "cli", r#"{"Sub":1}"#]);
    assert!(!ok);
    assert!(err.contains("INVALID_ARGUMENT"), "{err}");
}
