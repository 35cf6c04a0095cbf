//! The cluster map (`GET /` of the admin server, and the `/api/cluster`
//! JSON it polls) in a real browser, headless Chromium, while nodes join
//! and leave a Kafka-driven cluster on the test broker.

use colo_tests::process::NodeProcess;
use colo_tests::purchases::Producer;
use colo_tests::user_nodes::{self, kafka_sets, READY};
use colo_tests::{broker::Broker, chromium, http, wait};
use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

/// How long after a node hosts its shards (or leaves) the page may take
/// to show it: it polls every second.
const PAGE_FOLLOWS: Duration = Duration::from_secs(10);

/// Each node card of the page's DOM: its node and the shards it shows.
fn cards(dom: &str) -> BTreeMap<String, BTreeSet<u32>> {
    let mut cards = BTreeMap::new();
    for card in dom.split("<article").skip(1) {
        let card = card.split("</article>").next().unwrap_or("");
        let Some(node) = attribute(card, "data-node") else {
            continue;
        };
        let shards = card
            .split("data-shard=\"")
            .skip(1)
            .filter_map(|s| s.split('"').next()?.parse().ok())
            .collect();
        cards.insert(node, shards);
    }
    cards
}

fn attribute(text: &str, name: &str) -> Option<String> {
    let start = text.find(&format!("{name}=\""))? + name.len() + 2;
    Some(text[start..].split('"').next()?.to_string())
}

/// Waits until the page, as Chromium draws it, passes `check`; returns the
/// cards it showed and how long that took.
async fn page_shows(
    url: &str,
    what: &str,
    deadline: Duration,
    check: impl Fn(&BTreeMap<String, BTreeSet<u32>>) -> bool,
) -> Duration {
    let started = Instant::now();
    let check = &check;
    wait::until_ok(deadline, || async move {
        let url = url.to_string();
        let dom = tokio::task::spawn_blocking(move || chromium::dom(&url))
            .await
            .expect("chromium");
        let cards = cards(&dom);
        if check(&cards) {
            Ok(())
        } else {
            Err(format!("the page never showed {what}: {cards:?}"))
        }
    })
    .await;
    started.elapsed()
}

async fn api(node: &NodeProcess) -> serde_json::Value {
    let (status, body) = http::get(&node.admin, "/api/cluster").await.expect("api");
    assert_eq!(status, 200, "{body}");
    serde_json::from_str(&body).expect("JSON")
}

#[tokio::test]
async fn the_page_shows_a_joining_node_with_its_shards_and_its_shards_on_the_others_after_it_leaves(
) {
    let broker = Broker::start();
    let (topic, cluster) = user_nodes::unique("cluster-map");
    let mut sets = kafka_sets(broker.bootstrap(), &topic, &cluster);
    // Copies of shards a node does not host, for its map to show.
    sets.push("sharding.standbys=1".to_string());
    let a = user_nodes::start(None, &sets);
    a.await_ready(READY).await;
    let b = user_nodes::start(Some(&a.grpc), &sets);
    b.await_ready(READY).await;
    user_nodes::await_hosting(&b).await;
    let url = format!("http://{}/", a.admin);
    let every_shard: BTreeSet<u32> = (0..12).collect();
    let all_on = |nodes: &[&str], cards: &BTreeMap<String, BTreeSet<u32>>| {
        let shown: BTreeSet<u32> = cards.values().flatten().copied().collect();
        let names: BTreeSet<&str> = cards.keys().map(String::as_str).collect();
        names == nodes.iter().copied().collect() && shown == every_shard
    };
    page_shows(&url, "the first two nodes", PAGE_FOLLOWS * 3, |cards| {
        all_on(&[&a.grpc, &b.grpc], cards)
    })
    .await;

    // Purchases flow meanwhile: entities to count, lag to show.
    let dir = tempfile::tempdir().expect("dir");
    let producer = Producer::start(dir.path(), broker.bootstrap(), &topic, 200, 6000, Some(400));

    // A third node joins: once its region hosts shards, the page shows
    // them on its card.
    let mut c = user_nodes::start(Some(&a.grpc), &sets);
    c.await_ready(READY).await;
    user_nodes::await_hosting(&c).await;
    let took = page_shows(&url, "the third node's shards", PAGE_FOLLOWS, |cards| {
        cards.get(&c.grpc).is_some_and(|shards| !shards.is_empty())
    })
    .await;
    println!("the page showed the joining node's shards {took:?} after it hosted them");
    let shot = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("cluster-map.png");
    let shot_url = url.clone();
    let to = shot.clone();
    tokio::task::spawn_blocking(move || chromium::screenshot(&shot_url, &to))
        .await
        .expect("chromium");
    println!("screenshot: {}", shot.display());

    // The JSON the page polls: the whole cluster's shards, and this node's
    // partitions and rebalances.
    let map = api(&a).await;
    assert_eq!(map["node"], a.grpc);
    assert_eq!(map["entity_types"][0]["name"], "user");
    let nodes = map["entity_types"][0]["nodes"].as_array().expect("nodes");
    assert_eq!(nodes.len(), 3, "{map}");
    let partitions = map["partitions"].as_array().expect("partitions");
    assert!(!partitions.is_empty(), "{map}");
    assert!(partitions.iter().all(|p| p["topic"] == topic.as_str()));
    let rebalances = map["rebalances"].as_array().expect("rebalances");
    assert!(rebalances.iter().any(|r| r["kind"] == "assigned"), "{map}");

    // The move's cost on each side: the steps of the revoke on a node that
    // gave partitions to the joiner, and on the joiner the pause its
    // partitions' first records waited out.
    let revoked_steps = |map: &serde_json::Value| -> Option<Vec<String>> {
        let revoke = map["rebalances"]
            .as_array()?
            .iter()
            .find(|r| r["kind"] == "revoked" && r["partitions"].as_u64() > Some(0))?;
        let steps = revoke["steps"].as_array()?;
        Some(
            steps
                .iter()
                .filter_map(|s| Some(s["step"].as_str()?.to_string()))
                .collect(),
        )
    };
    let (a_map, b_map) = (api(&a).await, api(&b).await);
    let steps = revoked_steps(&a_map)
        .or_else(|| revoked_steps(&b_map))
        .unwrap_or_else(|| panic!("neither gave a partition up: {a_map} {b_map}"));
    assert_eq!(steps, ["settle", "commit", "release"]);
    let arrived = wait::until_ok(PAGE_FOLLOWS, || async {
        let map = api(&c).await;
        let rebalances = map["rebalances"].as_array().cloned().unwrap_or_default();
        rebalances
            .into_iter()
            .find(|r| r["kind"] == "assigned" && r["arrived"].as_u64() > Some(0))
            .ok_or_else(|| format!("no first record handled on the joiner: {map}"))
    })
    .await;
    let pause = arrived["pause_seconds"]
        .as_f64()
        .expect("a pause: records carry timestamps");
    let first = arrived["first_record_seconds"]
        .as_f64()
        .expect("first record");
    assert!(pause >= 0.0 && first >= 0.0, "{arrived}");
    println!("the joiner's partitions paused {pause:.3} s; first record {first:.3} s after their assignment");

    // Every node keeps copies of shards it does not host, with the offset
    // their changelog partition was read to.
    let copies = wait::until_ok(PAGE_FOLLOWS, || async {
        let map = api(&a).await;
        let standbys = map["standbys"].as_array().cloned().unwrap_or_default();
        if standbys.iter().any(|c| c["offset"].as_u64() > Some(0)) {
            Ok(standbys)
        } else {
            Err(format!("no standby copy read yet: {map}"))
        }
    })
    .await;
    let hosted: BTreeSet<u64> = api(&a).await["entity_types"][0]["nodes"]
        .as_array()
        .expect("nodes")
        .iter()
        .filter(|n| n["node"] == a.grpc.as_str())
        .flat_map(|n| n["shards"].as_array().cloned().unwrap_or_default())
        .filter_map(|s| s["shard"].as_u64())
        .collect();
    assert!(
        copies.iter().all(|c| c["entity_type"] == "user"),
        "{copies:?}"
    );
    assert!(
        copies
            .iter()
            .filter_map(|c| c["shard"].as_u64())
            .any(|s| !hosted.contains(&s)),
        "a copy of a shard hosted elsewhere: {copies:?} (hosted here: {hosted:?})"
    );
    // The map shows every node's copies, not only the serving node's: a's
    // map lists which shards b and c keep, from the coordinator.
    let elsewhere = wait::until_ok(PAGE_FOLLOWS, || async {
        let map = api(&a).await;
        let nodes = map["entity_types"][0]["nodes"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let kept: Vec<(String, Vec<u64>)> = nodes
            .iter()
            .filter(|n| n["node"] != a.grpc.as_str())
            .map(|n| {
                let shards = n["standbys"].as_array().cloned().unwrap_or_default();
                (
                    n["node"].as_str().unwrap_or_default().to_string(),
                    shards.iter().filter_map(|s| s.as_u64()).collect(),
                )
            })
            .collect();
        if kept.len() == 2 && kept.iter().all(|(_, shards)| !shards.is_empty()) {
            Ok(kept)
        } else {
            Err(format!("not every other node's copies shown yet: {kept:?}"))
        }
    })
    .await;
    for (node, shards) in &elsewhere {
        let hosted_there: BTreeSet<u64> = api(&a).await["entity_types"][0]["nodes"]
            .as_array()
            .expect("nodes")
            .iter()
            .filter(|n| n["node"] == node.as_str())
            .flat_map(|n| n["shards"].as_array().cloned().unwrap_or_default())
            .filter_map(|s| s["shard"].as_u64())
            .collect();
        assert!(
            shards.iter().any(|s| !hosted_there.contains(s)),
            "{node} keeps copies of shards hosted elsewhere: {shards:?} (hosted there: {hosted_there:?})"
        );
    }

    producer.finished(Duration::from_secs(60)).await;

    // It leaves: its card goes, and its shards show on the other two.
    c.terminate();
    c.exited(Duration::from_secs(60)).await;
    page_shows(
        &url,
        "every shard on the two nodes left",
        user_nodes::FIRST_SHARDS,
        |cards| all_on(&[&a.grpc, &b.grpc], cards),
    )
    .await;
}
