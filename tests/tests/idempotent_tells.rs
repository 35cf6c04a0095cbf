//! Idempotent client tells on Apache Kafka: three `colo run` nodes of the
//! durable sample electing their coordinator, each user's changelog on the
//! broker. Purchases are told with an idempotency key each and retried
//! through other nodes, while the node hosting most users is killed
//! (kill -9), its shards move to the others, and it starts again, taking
//! its share back. Every retry of a purchase applied before is answered
//! as applied, on whichever node its user runs by then, and every user's
//! totals count each purchase once.

use colo_proto::v1 as pb;
use colo_tests::broker::Broker;
use colo_tests::client::{entities_on, json};
use colo_tests::process::NodeProcess;
use colo_tests::user_nodes::*;
use std::time::Duration;
use tokio::time::Instant;

/// How long a purchase may take to find its user while shards move: a
/// dead node's partitions move after the group's session timeout (6 s).
const KNOWN: Duration = Duration::from_secs(90);

fn purchase(sequence: u64) -> String {
    format!(r#"{{"Purchase":{{"product":"tea","quantity":2,"price":250,"sequence":{sequence}}}}}"#)
}

/// Tells `user` its purchase `sequence` with its key through `node`,
/// again while the outcome is unknown (the node cannot reach the user's
/// shard yet, or did not answer in time): whether the user had applied it
/// already.
async fn tell_once(node: &NodeProcess, user: &str, sequence: u64) -> bool {
    let deadline = Instant::now() + KNOWN;
    let mut client = node.client().await;
    loop {
        let request = pb::TellRequest {
            entity_type: "user".into(),
            entity_id: user.into(),
            payload: json(&purchase(sequence)),
            idempotency_key: Some(format!("{user}/{sequence}")),
        };
        match client.tell(request).await {
            Ok(told) => return told.into_inner().already_applied,
            Err(status)
                if matches!(
                    status.code(),
                    tonic::Code::Unavailable | tonic::Code::DeadlineExceeded
                ) && Instant::now() < deadline =>
            {
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(status) => panic!("{user}/{sequence} through {}: {status}", node.grpc),
        }
    }
}

/// Each purchase of `sequences` through one node, then its retry through
/// the next, which must find it applied.
async fn tell_all(
    sequences: std::ops::RangeInclusive<u64>,
    users: &[String],
    nodes: &[NodeProcess],
) {
    for sequence in sequences {
        for (n, user) in users.iter().enumerate() {
            let first = &nodes[(n + sequence as usize) % nodes.len()];
            let retry = &nodes[(n + sequence as usize + 1) % nodes.len()];
            // The first may find it applied: an earlier try timed out
            // after its user applied it.
            tell_once(first, user, sequence).await;
            assert!(
                tell_once(retry, user, sequence).await,
                "{user}/{sequence}: its retry through {} was applied again",
                retry.grpc
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keyed_tells_are_applied_once_through_a_kill_9_and_moves() {
    let broker = Broker::start();
    let (topic, cluster) = unique("idempotent_tells");
    let sets = elected_sets(broker.bootstrap(), &topic, &cluster);
    let mut nodes: Vec<NodeProcess> = (0..3).map(|_| start(None, &sets)).collect();
    for node in &nodes {
        node.await_ready(READY).await;
    }
    for node in &nodes {
        await_hosting(node).await;
    }
    let users: Vec<String> = (0..12).map(|n| format!("keyed-{n}")).collect();
    tell_all(1..=10, &users, &nodes).await;

    // The node hosting most users dies; every purchase so far is retried
    // through the others while its shards move.
    let mut most = (0, 0);
    for (i, node) in nodes.iter().enumerate() {
        let hosted = entities_on(node, "user").await.map_or(0, |e| e.len());
        if hosted > most.1 {
            most = (i, hosted);
        }
    }
    let victim = most.0;
    nodes[victim].kill();
    for sequence in 1..=10 {
        for user in &users {
            let through = &nodes[(victim + 1 + sequence as usize % 2) % 3];
            assert!(
                tell_once(through, user, sequence).await,
                "{user}/{sequence} applied again after the kill"
            );
        }
    }
    nodes[victim].restart();
    nodes[victim].await_ready(READY).await;
    await_hosting(&nodes[victim]).await;
    tell_all(11..=20, &users, &nodes).await;
    // Once more, everything, through the node that came back.
    for sequence in 1..=20 {
        for user in &users {
            assert!(tell_once(&nodes[victim], user, sequence).await);
        }
    }

    for user in &users {
        let totals = ask_user(&nodes[0], user, r#""UserStats""#, Duration::from_secs(30))
            .await
            .expect("totals");
        assert_eq!(totals["purchases"], 20, "{user}: {totals}");
        assert_eq!(totals["items"], 40, "{user}: {totals}");
        assert_eq!(totals["out_of_sequence"], 0, "{user}: {totals}");
        assert_eq!(totals["last_sequence"], 20, "{user}: {totals}");
    }
}
