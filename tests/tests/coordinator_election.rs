//! The coordinator elected through Kafka, with `colo run` processes on the
//! test broker and no coordinator address: one node is elected, the others
//! find it on the coordinator topic, and a new one is elected when it dies.

use colo_proto::v1 as pb;
use colo_tests::broker::Broker;
use colo_tests::lifecycle::Lifecycle;
use colo_tests::process::NodeProcess;
use colo_tests::purchases::{at_least_once_in_order_problems, handled, verify, Producer};
use colo_tests::user_nodes::*;
use colo_tests::wait;
use std::collections::BTreeMap;
use std::time::Duration;

/// How long an election may take: the broker holds a joiner 3 s, and a
/// dead leader may need the election timeout and a rejoin.
const ELECTED: Duration = Duration::from_secs(60);

async fn one_coordinator(nodes: &[&NodeProcess]) -> String {
    let found = wait::held_within(ELECTED, || async {
        hosting_coordinator(nodes).await.len() == 1
    })
    .await;
    let mut hosts = hosting_coordinator(nodes).await;
    assert!(
        found && hosts.len() == 1,
        "not exactly one node hosts the coordinator: {hosts:?}\n{}",
        election_logs(nodes)
    );
    hosts.remove(0)
}

/// The election's log lines of `nodes`, for a failure.
fn election_logs(nodes: &[&NodeProcess]) -> String {
    let mut out = String::new();
    for node in nodes {
        out.push_str(&format!("--- {} ---\n", node.grpc));
        for line in node.logs().lines().filter(|l| l.contains("election")) {
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

/// The elected epoch every one of `nodes` knows, once they agree.
async fn agreed_epoch(nodes: &[&NodeProcess]) -> f64 {
    wait::until_ok(ELECTED, || async {
        let mut epochs = Vec::new();
        for node in nodes {
            epochs.push(global_metric(node, "colo_coordinator_elected_epoch").await);
        }
        if epochs[0] > 0.0 && epochs.iter().all(|e| *e == epochs[0]) {
            Ok(epochs[0])
        } else {
            Err(format!("the nodes know these elected epochs: {epochs:?}"))
        }
    })
    .await
}

/// Three nodes started at the same moment elect exactly one coordinator;
/// the other two find it (every node reports the same elected epoch), and
/// every shard is placed. What they wait for meanwhile (a coordinator
/// being elected, shards not placed yet) is how every start goes: none of
/// it is a warning.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_nodes_started_at_once_elect_exactly_one_coordinator() {
    let broker = Broker::start();
    let (topic, cluster) = unique("election-three");
    let mut sets = elected_sets(broker.bootstrap(), &topic, &cluster);
    // The coordinator's timings a user starts with: the tests' shorter ones
    // make a wait of one round of the election group (the broker holds a
    // joiner 3 s) outlast region_timeout.
    for default in [
        r#"coordinator.heartbeat_interval="1s""#,
        r#"coordinator.fence_timeout="5s""#,
        r#"coordinator.region_timeout="10s""#,
        r#"coordinator.election_timeout="15s""#,
    ] {
        sets.push(default.to_string());
    }
    let nodes: Vec<NodeProcess> = (0..3).map(|_| start(None, &sets)).collect();
    let refs: Vec<&NodeProcess> = nodes.iter().collect();
    for node in &refs {
        node.await_ready(ELECTED).await;
    }
    let host = one_coordinator(&refs).await;
    agreed_epoch(&refs).await;
    assert_group_protocol(&broker, &format!("{cluster}.coordinator"));
    await_every_shard_on(&refs, "every shard is hosted").await;
    // Still one, once everything settled.
    assert_eq!(hosting_coordinator(&refs).await, vec![host]);
    let warnings = warnings(&refs);
    assert!(
        warnings.is_empty(),
        "a healthy start warned:\n{}",
        warnings.join("\n")
    );
}

/// Waits until `nodes` host all 12 shards between them.
async fn await_every_shard_on(nodes: &[&NodeProcess], what: &str) {
    wait::until(what, ELECTED, || async {
        let mut hosted = 0.0;
        for node in nodes {
            hosted += metric(node, "colo_region_hosted_shards{").await;
        }
        hosted == 12.0
    })
    .await;
}

/// The lines of `nodes`' logs at WARN or ERROR.
fn warnings(nodes: &[&NodeProcess]) -> Vec<String> {
    nodes
        .iter()
        .flat_map(|node| {
            node.logs()
                .lines()
                .filter(|l| l.contains(r#""level":"WARN""#) || l.contains(r#""level":"ERROR""#))
                .map(|l| format!("{}: {l}", node.grpc))
                .collect::<Vec<_>>()
        })
        .collect()
}

/// A metric without labels.
async fn global_metric(node: &NodeProcess, name: &str) -> f64 {
    let (_, body) = colo_tests::http::get(&node.admin, "/metrics")
        .await
        .expect("metrics");
    body.lines()
        .filter(|l| l.split(' ').next() == Some(name))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// Each shard's home, as the coordinator reached through `via` says, with
/// the coordinator's address and epoch as `via` knows them.
async fn homes(via: &NodeProcess) -> Result<(BTreeMap<u32, String>, String, u64), String> {
    let stats = via
        .client()
        .await
        .cluster_stats(pb::ClusterStatsRequest {
            entity_type: "user".into(),
            timeout: Some(prost_types::Duration {
                seconds: 2,
                nanos: 0,
            }),
        })
        .await
        .map_err(|status| status.to_string())?
        .into_inner();
    if !stats.failed_regions.is_empty() {
        return Err(format!(
            "regions did not answer: {:?}",
            stats.failed_regions
        ));
    }
    let homes = stats
        .regions
        .into_iter()
        .flat_map(|r| {
            let region = r.region;
            r.entities
                .into_keys()
                .map(move |shard| (shard, region.clone()))
        })
        .collect();
    Ok((homes, stats.coordinator, stats.coordinator_epoch))
}

/// The shard homes each coordinator started on `node` read back from the
/// coordinator topic, in the order they started.
fn homes_read_back(node: &NodeProcess) -> Vec<BTreeMap<u32, String>> {
    node.logs()
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|e| e["fields"]["message"] == "shard homes read back")
        .filter(|e| e["fields"]["entity_type"] == "user")
        .filter_map(|e| {
            let homes = e["fields"]["homes"].as_str()?.to_string();
            Some(
                homes
                    .split(',')
                    .filter(|pair| !pair.is_empty())
                    .filter_map(|pair| {
                        let (shard, region) = pair.split_once('=')?;
                        Some((shard.parse().ok()?, region.to_string()))
                    })
                    .collect(),
            )
        })
        .collect()
}

fn purchase(sequence: u64) -> String {
    format!(r#"{{"Purchase":{{"product":"p","quantity":1,"price":100,"sequence":{sequence}}}}}"#)
}

/// A user of the test's own whose entity lives on `on`, asked through
/// `via` so that it starts: its shard's home is `on`.
async fn user_on(via: &NodeProcess, on: &NodeProcess, prefix: &str) -> String {
    for n in 0..96 {
        let user = format!("{prefix}-{n}");
        let request = colo_tests::client::ask_request_to(
            "user",
            &user,
            &purchase(1),
            Duration::from_secs(10),
        );
        via.client()
            .await
            .ask(request)
            .await
            .expect("the first purchase is answered");
        let there = colo_tests::client::entities_on(on, "user")
            .await
            .expect("the node answers");
        if there.contains(&user) {
            return user;
        }
    }
    panic!("no user of 96 lives on {}", on.grpc);
}

/// The issue's failover test: the node hosting the coordinator is killed
/// (kill -9) while records flow. Shards with a home keep handling records
/// while no coordinator runs; an ask to an entity whose shard lost its
/// home waits and then succeeds (asked again only if it had been sent to
/// the killed node before the survivor knew); the new coordinator (another node, a
/// higher epoch) keeps every surviving shard's home; every purchase is
/// handled at least once and in order, no user is live on two nodes at
/// once, and the durable totals are exact.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_coordinators_node_killed_under_load_fails_over_to_another() {
    let broker = Broker::start();
    let dir = tempfile::tempdir().expect("dir");
    let (topic, cluster) = unique("election-kill");
    let sets = elected_sets(broker.bootstrap(), &topic, &cluster);
    let mut nodes: Vec<NodeProcess> = (0..3).map(|_| start(None, &sets)).collect();
    for node in &nodes {
        node.await_ready(ELECTED).await;
    }
    let producer = Producer::start(dir.path(), broker.bootstrap(), &topic, 40, 4000, Some(400));
    for node in &nodes {
        await_hosting(node).await;
    }
    let host = one_coordinator(&nodes.iter().collect::<Vec<_>>()).await;
    let old_epoch = agreed_epoch(&nodes.iter().collect::<Vec<_>>()).await;
    let killed = nodes.iter().position(|n| n.grpc == host).expect("host");
    let mut victim = nodes.remove(killed);
    let survivors: Vec<&NodeProcess> = nodes.iter().collect();
    let orphan = user_on(survivors[0], &victim, "orphan").await;
    let (before, _, _) = wait::until_ok(ELECTED, || async {
        let (homes, at, epoch) = homes(survivors[0]).await?;
        if homes.len() == 12 {
            Ok((homes, at, epoch))
        } else {
            Err(format!("{} shards placed", homes.len()))
        }
    })
    .await;

    let handled_before = handled(&survivors).values().map(Vec::len).sum::<usize>();
    victim.kill();
    let killed_at = humantime::format_rfc3339_micros(std::time::SystemTime::now()).to_string();
    // Asked at once: its shard has no home until the new coordinator
    // places it.
    // Asked again only if the survivor had sent it to the killed node,
    // which went away before confirming it (at most once: a message in
    // flight to a node that dies is not sent again by itself).
    let asked = {
        let mut via = survivors[1].client().await;
        let orphan = orphan.clone();
        tokio::spawn(async move {
            loop {
                let request = colo_tests::client::ask_request_to(
                    "user",
                    &orphan,
                    r#""UserStats""#,
                    Duration::from_secs(120),
                );
                match via.ask(request).await {
                    // The survivor now knows the node is gone: asked again,
                    // the ask waits in its buffer for the shard's new home.
                    Err(status) if status.message().contains("went away") => {}
                    answered => return answered.map(|r| r.into_inner()),
                }
            }
        })
    };
    // While no coordinator runs, the shards with a home go on.
    wait::until("the surviving shards handle records", ELECTED, || {
        let now = handled(&survivors).values().map(Vec::len).sum::<usize>();
        std::future::ready(now >= handled_before + 100)
    })
    .await;
    let new_host = one_coordinator(&survivors).await;
    assert_ne!(new_host, host);
    let new_epoch = agreed_epoch(&survivors).await;
    assert!(new_epoch > old_epoch, "{new_epoch} > {old_epoch}");
    // The new coordinator went on from the shard homes the old one had.
    let new_node = survivors.iter().find(|n| n.grpc == new_host).expect("host");
    let read_back = wait::until_ok(ELECTED, || {
        std::future::ready(
            homes_read_back(new_node)
                .pop()
                .ok_or_else(|| "the new coordinator has not read its state yet".to_string()),
        )
    })
    .await;
    assert_eq!(read_back, before);
    let placed = wait::held_within(ELECTED, || async {
        homes(survivors[0])
            .await
            .is_ok_and(|(homes, _, _)| homes.len() == 12)
    })
    .await;
    if !placed {
        let mut states = Vec::new();
        for node in &survivors {
            let state = node
                .client()
                .await
                .region_state(pb::RegionStateRequest {
                    entity_type: "user".into(),
                    timeout: None,
                })
                .await
                .map(|r| r.into_inner().coordinator_reachable);
            states.push((node.grpc.clone(), state, homes(node).await));
        }
        panic!(
            "not every shard placed; per survivor, whether its region reaches the coordinator and what stats say: {states:#?}\n{}",
            election_logs(&survivors)
        );
    }
    // `colo stats` names the coordinator and its epoch, as they are now.
    let (_, at, epoch) = homes(survivors[0]).await.expect("stats");
    assert_eq!(
        (at.as_str(), epoch as f64),
        (
            one_coordinator(&survivors).await.as_str(),
            agreed_epoch(&survivors).await
        )
    );
    let answer = asked
        .await
        .expect("ask task")
        .expect("the orphan's ask succeeds");
    assert!(answer.reply.is_some());

    let expected_file = producer.expected_file();
    let expected = producer.finished(Duration::from_secs(90)).await;
    let all: Vec<&NodeProcess> = survivors.iter().copied().chain([&victim]).collect();
    await_all_handled(&all, &expected).await;
    let problems = at_least_once_in_order_problems(&handled(&all), &expected);
    assert!(problems.is_empty(), "{problems:#?}");
    let mut lifecycle = Lifecycle::read(&all, "user");
    lifecycle.killed(&victim.grpc, &killed_at);
    let overlaps = lifecycle.overlaps();
    assert!(overlaps.is_empty(), "{overlaps:#?}");
    verify(&expected_file, &survivors[0].grpc)
        .await
        .expect("totals exact");
    let rejoins = {
        let mut n = 0.0;
        for node in &survivors {
            n += global_metric(node, "colo_coordinator_election_rejoins_total").await;
        }
        n
    };
    eprintln!("election group rejoins after the kill: {rejoins}");
}

/// The lines of `node`'s log after `since` (an RFC 3339 instant in the
/// log's own format) whose message contains one of `messages`.
fn said_after(node: &NodeProcess, since: &str, messages: &[&str]) -> Vec<String> {
    node.logs()
        .lines()
        .filter(|line| {
            let Ok(event) = serde_json::from_str::<serde_json::Value>(line) else {
                return false;
            };
            let at = event["timestamp"].as_str().unwrap_or_default();
            let message = event["fields"]["message"].as_str().unwrap_or_default();
            at > since && messages.iter().any(|m| message.contains(m))
        })
        .map(|line| format!("{}: {line}", node.grpc))
        .collect()
}

/// Issue 39: the shards of the nodes that survive the coordinator's node
/// never stop while the coordinator moves. With colo's default timings,
/// their regions outlast the election without fencing; and the elected
/// node leaves the dead node's partitions to the group's session (30 s
/// here, past the 15 s election timeout) rather than having its
/// consumers rejoin, which would revoke its own partitions while the
/// group waits for the dead member. Nothing is handled twice by a
/// survivor that kept its shards, and every total is exact.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_survivors_shards_keep_running_while_the_coordinator_moves() {
    let broker = Broker::start();
    let dir = tempfile::tempdir().expect("dir");
    let (topic, cluster) = unique("election-steady");
    let mut sets = elected_sets(broker.bootstrap(), &topic, &cluster);
    if !consumer_protocol() {
        // Under the consumer protocol the broker sets the session.
        sets.retain(|s| !s.starts_with("kafka.client="));
        sets.push(
            r#"kafka.client={"session.timeout.ms"="30000","heartbeat.interval.ms"="1000"}"#
                .to_string(),
        );
    }
    // colo's own timings, not the tests' shorter ones.
    let defaults = colo::ShardingSettings::default();
    for (field, value) in [
        ("heartbeat_interval", defaults.heartbeat_interval),
        ("fence_timeout", defaults.fence_timeout),
        ("region_timeout", defaults.region_timeout),
        ("election_timeout", Duration::from_secs(15)),
    ] {
        sets.push(format!(r#"coordinator.{field}="{}ms""#, value.as_millis()));
    }
    let mut nodes: Vec<NodeProcess> = (0..3).map(|_| start(None, &sets)).collect();
    for node in &nodes {
        node.await_ready(ELECTED).await;
    }
    // Records flow from before the kill until well after the group has
    // moved the dead node's partitions.
    let producer = Producer::start(
        dir.path(),
        broker.bootstrap(),
        &topic,
        40,
        30_000,
        Some(400),
    );
    for node in &nodes {
        await_hosting(node).await;
    }
    let host = one_coordinator(&nodes.iter().collect::<Vec<_>>()).await;
    let killed = nodes.iter().position(|n| n.grpc == host).expect("host");
    let mut victim = nodes.remove(killed);
    let survivors: Vec<&NodeProcess> = nodes.iter().collect();
    let before_kill: Vec<&NodeProcess> = survivors.iter().copied().chain([&victim]).collect();
    await_every_shard_on(&before_kill, "every shard is hosted").await;
    victim.kill();
    let killed_at = humantime::format_rfc3339_micros(std::time::SystemTime::now()).to_string();
    let new_host = one_coordinator(&survivors).await;
    assert_ne!(new_host, host);
    await_every_shard_on(&survivors, "the survivors host every shard").await;
    let stops: Vec<String> = survivors
        .iter()
        .flat_map(|node| {
            said_after(
                node,
                &killed_at,
                &[
                    "stopping the shards hosted here",
                    "consumers rejoin their groups",
                    "kafka partitions revoked",
                ],
            )
        })
        .collect();
    assert!(
        stops.is_empty(),
        "a survivor stopped shards while the coordinator moved:\n{}",
        stops.join("\n")
    );

    let expected_file = producer.expected_file();
    let expected = producer.finished(Duration::from_secs(120)).await;
    let all: Vec<&NodeProcess> = survivors.iter().copied().chain([&victim]).collect();
    await_all_handled(&all, &expected).await;
    let problems = at_least_once_in_order_problems(&handled(&all), &expected);
    assert!(problems.is_empty(), "{problems:#?}");
    verify(&expected_file, &survivors[0].grpc)
        .await
        .expect("totals exact");
}

/// Whether `node` logged that it stopped its coordinators.
fn stepped_down(node: &NodeProcess) -> bool {
    node.logs().contains("stepped down")
}

/// A deposed coordinator: its node is paused (SIGSTOP) longer than the
/// election group's session timeout, another node is elected with a higher
/// epoch, then the paused node goes on (SIGCONT). It steps down without
/// being elected again, the elected epoch stays the new one, and every
/// guarantee holds: each purchase handled, no user live on two nodes at
/// once, exact totals.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deposed_coordinator_steps_down_and_changes_nothing() {
    let broker = Broker::start();
    let dir = tempfile::tempdir().expect("dir");
    let (topic, cluster) = unique("election-deposed");
    let sets = elected_sets(broker.bootstrap(), &topic, &cluster);
    let nodes: Vec<NodeProcess> = (0..3).map(|_| start(None, &sets)).collect();
    let all: Vec<&NodeProcess> = nodes.iter().collect();
    for node in &all {
        node.await_ready(ELECTED).await;
    }
    let producer = Producer::start(dir.path(), broker.bootstrap(), &topic, 40, 3000, Some(300));
    for node in &all {
        await_hosting(node).await;
    }
    let host = one_coordinator(&all).await;
    let old_epoch = agreed_epoch(&all).await;
    let paused = all.iter().copied().find(|n| n.grpc == host).expect("host");
    let others: Vec<&NodeProcess> = all.iter().copied().filter(|n| n.grpc != host).collect();

    paused.pause();
    let new_host = one_coordinator(&others).await;
    let new_epoch = agreed_epoch(&others).await;
    assert!(new_epoch > old_epoch, "{new_epoch} > {old_epoch}");
    paused.resume();
    wait::until("the deposed coordinator steps down", ELECTED, || async {
        stepped_down(paused) && metric(paused, "colo_coordinator_hosted{").await == 0.0
    })
    .await;
    // Nothing it did on waking outranks the coordinator elected while it
    // slept: the same one leads, with the same epoch, and the woken node
    // follows it.
    assert_eq!(one_coordinator(&all).await, new_host);
    assert_eq!(agreed_epoch(&all).await, new_epoch);

    let expected_file = producer.expected_file();
    let expected = producer.finished(Duration::from_secs(90)).await;
    await_all_handled(&all, &expected).await;
    let problems = at_least_once_in_order_problems(&handled(&all), &expected);
    assert!(problems.is_empty(), "{problems:#?}");
    let overlaps = Lifecycle::read(&all, "user").overlaps();
    assert!(overlaps.is_empty(), "{overlaps:#?}");
    verify(&expected_file, &others[0].grpc)
        .await
        .expect("totals exact");
}
