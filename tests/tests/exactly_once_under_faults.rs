//! Exactly once under a seeded schedule of faults, checked on the whole
//! history: three `colo run` nodes of the durable sample, their coordinator
//! elected through Kafka, on three Apache Kafka brokers (every topic on
//! all three, two in sync for a write) whose cleaner compacts the
//! changelog every few seconds. Each node runs in a network namespace of
//! its own, so its network can be cut while it runs.
//!
//! While purchases flow (most from `colo produce`, murmur2-partitioned
//! like colo's shards; a share from librdkafka's default partitioner, so
//! outside their key's partition, with undecodable records among them), a
//! schedule drawn from a seed strikes: a node killed (kill -9) and
//! started again, a node frozen (SIGSTOP) past the coordinator's
//! `region_timeout`, a node leaving gracefully and joining again, the
//! elected coordinator's node killed, a broker killed and started again,
//! a node's network cut and healed; one step in three strikes two of
//! them at once (never two brokers, never beside the coordinator's kill).
//!
//! Then the checker reads the whole history: every purchase handled (the
//! nodes' logs of handled (user, sequence) pairs: at least once, each
//! user's in order, a replay only going back); every user's totals exact
//! (each purchase counted once: its count, its amount, its last
//! sequence, no event out of sequence); every undecodable record
//! dead-lettered; every user who crossed the milestone emitted exactly
//! one, as a reader with `read_committed` sees them; and no user live on
//! two nodes at once.
//!
//! Even seeds run the nodes with `kafka.transactional_outputs`: there a
//! milestone read twice, even under the same id, is a violation too.
//!
//! The seed is printed with the schedule. `COLO_FAULT_SEEDS` runs others:
//! `7` reruns seed 7, `1..40` forty of them (README, "Exactly once").

mod common;

use colo_tests::broker::compacting;
use colo_tests::broker_cluster::{BrokerCluster, BROKER_IDS};
use colo_tests::kafka::distinct_dead_letters;
use colo_tests::lifecycle::Lifecycle;
use colo_tests::netns::Network;
use colo_tests::process::{NodeProcess, Program};
use colo_tests::purchases::{handled, verify, Handled, Producer};
use colo_tests::user_nodes::*;
use colo_tests::wait;
use common::{milestones, read_totals, OtherPartitioner};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

/// The environment variable naming the seeds to run: `N` or `A..B`.
const SEEDS: &str = "COLO_FAULT_SEEDS";

/// The seeds the suite runs when `COLO_FAULT_SEEDS` is not set.
const SUITE_SEEDS: [u64; 2] = [1, 2];

/// Faults in one schedule.
const FAULTS: usize = 4;

/// How long the purchases flow, and how fast: long enough for most of a
/// schedule to strike while they do.
const LOAD: Duration = Duration::from_secs(50);
const MURMUR2_RATE: u64 = 80;
const CRC_RATE: u64 = 16;
/// One undecodable record for every this many of the CRC producer's.
const BAD_EVERY: u64 = 20;

/// How long the cluster may take to come back after a fault: the nodes
/// ready again, their groups rebalanced, a broker back in sync.
const RECOVERED: Duration = Duration::from_secs(60);

/// One fault, struck and later undone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fault {
    /// kill -9 of node `node`; undone: started again.
    Kill { node: usize },
    /// SIGSTOP of node `node`; undone: SIGCONT.
    Pause { node: usize },
    /// SIGTERM of node `node` (it hands its shards off and exits);
    /// undone: started again, it joins.
    Leave { node: usize },
    /// kill -9 of whichever node hosts the elected coordinator; undone:
    /// started again.
    KillCoordinator,
    /// kill -9 of broker `broker`; undone: started again, in sync.
    Broker { broker: i32 },
    /// Node `node`'s network cut: no broker, no peer; undone: healed.
    Cut { node: usize },
}

impl Fault {
    /// The node it strikes, when it names one.
    fn node(self) -> Option<usize> {
        match self {
            Fault::Kill { node }
            | Fault::Pause { node }
            | Fault::Leave { node }
            | Fault::Cut { node } => Some(node),
            Fault::KillCoordinator | Fault::Broker { .. } => None,
        }
    }

    /// A fault drawn from `rng`, with how long it lasts.
    fn drawn(rng: &mut StdRng) -> (Fault, Duration) {
        let node = rng.random_range(0..3);
        let kind = rng.random_range(0..6);
        let mut between =
            |low: f64, high: f64| Duration::from_secs_f64(rng.random_range(low..high));
        match kind {
            0 => (Fault::Kill { node }, between(0.0, 4.0)),
            // Past the region timeout (2.5 s), sometimes past the group's
            // session timeout (6 s) too.
            1 => (Fault::Pause { node }, between(3.0, 9.0)),
            2 => (Fault::Leave { node }, Duration::ZERO),
            3 => (Fault::KillCoordinator, between(0.0, 4.0)),
            4 => (
                Fault::Broker {
                    broker: BROKER_IDS[node],
                },
                between(1.0, 6.0),
            ),
            _ => (Fault::Cut { node }, between(3.0, 10.0)),
        }
    }
}

impl fmt::Display for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Fault::Kill { node } => write!(f, "node {node} killed"),
            Fault::Pause { node } => write!(f, "node {node} frozen"),
            Fault::Leave { node } => write!(f, "node {node} leaves and joins again"),
            Fault::KillCoordinator => write!(f, "the coordinator's node killed"),
            Fault::Broker { broker } => write!(f, "broker {broker} killed"),
            Fault::Cut { node } => write!(f, "node {node} cut off"),
        }
    }
}

/// One step of a schedule: after `gap`, one fault, or two at once (their
/// holds overlapping), each undone after its hold.
#[derive(Debug)]
struct Step {
    gap: Duration,
    faults: Vec<(Fault, Duration)>,
}

/// The faults of one seed.
#[derive(Debug)]
struct Schedule {
    seed: u64,
    steps: Vec<Step>,
}

impl Schedule {
    /// The schedule of `seed`: the same seed, the same faults, in the
    /// same order, with the same timings. One step in three strikes a
    /// second fault while the first holds, on another node or a broker
    /// (never two brokers: a write needs two of three).
    fn of(seed: u64) -> Self {
        let mut rng = StdRng::seed_from_u64(seed);
        let steps = (0..FAULTS)
            .map(|_| {
                let gap = Duration::from_secs_f64(rng.random_range(1.0..5.0));
                let first = Fault::drawn(&mut rng);
                let mut faults = vec![first];
                if rng.random_range(0..3) == 0 {
                    let second = (0..20).map(|_| Fault::drawn(&mut rng)).find(|(f, _)| {
                        let apart = match (first.0.node(), f.node()) {
                            (Some(a), Some(b)) => a != b,
                            _ => true,
                        };
                        let brokers =
                            matches!((first.0, *f), (Fault::Broker { .. }, Fault::Broker { .. }));
                        let coordinator =
                            first.0 == Fault::KillCoordinator || *f == Fault::KillCoordinator;
                        apart && !brokers && !coordinator
                    });
                    faults.extend(second);
                }
                Step { gap, faults }
            })
            .collect();
        Self { seed, steps }
    }
}

impl fmt::Display for Schedule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "seed {}:", self.seed)?;
        for step in &self.steps {
            write!(f, " after {:.1?},", step.gap)?;
            for (n, (fault, hold)) in step.faults.iter().enumerate() {
                let with = if n > 0 { " with" } else { "" };
                write!(f, "{with} {fault}")?;
                if !hold.is_zero() {
                    write!(f, " for {hold:.1?}")?;
                }
            }
            write!(f, ";")?;
        }
        Ok(())
    }
}

/// Whether the seed's nodes send their outputs in transactions: even
/// seeds.
fn in_transactions(seed: u64) -> bool {
    seed.is_multiple_of(2)
}

/// The seeds to run: `COLO_FAULT_SEEDS`, or the suite's.
fn seeds() -> Vec<u64> {
    let Ok(text) = std::env::var(SEEDS) else {
        return SUITE_SEEDS.to_vec();
    };
    let parse = |s: &str| {
        s.trim()
            .parse::<u64>()
            .unwrap_or_else(|e| panic!("{SEEDS}={text:?}: {s:?} is not a seed: {e}"))
    };
    match text.split_once("..") {
        Some((first, end)) => (parse(first)..parse(end)).collect(),
        None => vec![parse(&text)],
    }
}

fn now() -> String {
    humantime::format_rfc3339_micros(std::time::SystemTime::now()).to_string()
}

/// What the schedule did that the at-most-one checker must know: the
/// moments a node was killed, and the spans it was frozen.
#[derive(Debug, Default)]
struct Struck {
    kills: Vec<(String, String)>,
    pauses: Vec<(String, String, String)>,
}

/// Three nodes in the network's hosts, electing their coordinator,
/// ready.
async fn three_nodes(network: &Network, sets: &[String]) -> Vec<NodeProcess> {
    let sets: Vec<&str> = sets.iter().map(String::as_str).collect();
    let nodes: Vec<NodeProcess> = network
        .hosts()
        .iter()
        .map(|host| NodeProcess::start_in(host, Program::Colo, None, &sets))
        .collect();
    for node in &nodes {
        node.await_ready(RECOVERED).await;
    }
    nodes
}

/// Waits until every node answers ready again.
async fn all_ready(nodes: &[NodeProcess]) {
    for node in nodes {
        node.await_ready(RECOVERED).await;
    }
}

/// What undoing a struck fault takes.
#[derive(Debug)]
enum Undo {
    Restart { node: usize },
    Resume { node: usize, from: String },
    Broker { broker: i32 },
    Heal { node: usize },
}

/// Strikes `fault`.
async fn begin(
    fault: Fault,
    nodes: &mut [NodeProcess],
    brokers: &mut BrokerCluster,
    network: &Network,
    struck: &mut Struck,
) -> Undo {
    eprintln!("[{}] {fault}", now());
    match fault {
        Fault::Kill { node } => {
            struck.kills.push((nodes[node].grpc.clone(), now()));
            nodes[node].kill();
            Undo::Restart { node }
        }
        Fault::Pause { node } => {
            let from = now();
            nodes[node].pause();
            Undo::Resume { node, from }
        }
        Fault::Leave { node } => {
            nodes[node].terminate();
            let status = nodes[node].exited(RECOVERED).await;
            // Its log is printed as it drops, the failure repeated after it.
            assert!(status.success(), "node {node} left with {status}");
            Undo::Restart { node }
        }
        Fault::KillCoordinator => {
            let host = wait::until_ok(RECOVERED, || async {
                let refs: Vec<&NodeProcess> = nodes.iter().collect();
                match hosting_coordinator(&refs).await.as_slice() {
                    [one] => Ok(one.clone()),
                    other => Err(format!("coordinator hosts: {other:?}")),
                }
            })
            .await;
            let node = nodes
                .iter()
                .position(|n| n.grpc == host)
                .expect("the host is a node");
            struck.kills.push((host, now()));
            nodes[node].kill();
            Undo::Restart { node }
        }
        Fault::Broker { broker } => {
            brokers.kill(broker);
            Undo::Broker { broker }
        }
        Fault::Cut { node } => {
            network.cut(node);
            Undo::Heal { node }
        }
    }
}

/// Undoes a struck fault.
fn end(
    undo: Undo,
    nodes: &mut [NodeProcess],
    brokers: &mut BrokerCluster,
    network: &Network,
    struck: &mut Struck,
) {
    let what = format!("{undo:?}");
    match undo {
        Undo::Restart { node } => nodes[node].restart(),
        Undo::Resume { node, from } => {
            // Before SIGCONT: the node may log at once after it.
            let to = now();
            nodes[node].resume();
            struck.pauses.push((nodes[node].grpc.clone(), from, to));
        }
        Undo::Broker { broker } => tokio::task::block_in_place(|| {
            brokers.start_again(broker);
            brokers.await_in_sync();
        }),
        Undo::Heal { node } => network.heal(node),
    }
    eprintln!("[{}] undone: {what}", now());
}

/// Strikes a step's faults, undoes each after its hold, then waits until
/// the cluster is whole.
async fn strike(
    step: &Step,
    nodes: &mut [NodeProcess],
    brokers: &mut BrokerCluster,
    network: &Network,
    struck: &mut Struck,
) {
    let started = tokio::time::Instant::now();
    let mut held = Vec::new();
    for (fault, hold) in &step.faults {
        let undo = begin(*fault, nodes, brokers, network, struck).await;
        held.push((started + *hold, undo));
    }
    held.sort_by_key(|(at, _)| *at);
    for (at, undo) in held {
        tokio::time::sleep_until(at).await;
        end(undo, nodes, brokers, network, struck);
    }
    all_ready(nodes).await;
    eprintln!("[{}] the cluster is whole again", now());
}

/// Purchases handled on a node after it was frozen, by entities whose
/// life there began before the freeze and ended after it: a frozen node
/// that comes back must stop what others took over without applying
/// anything more. Closes those lives at the freeze for the overlap check.
fn applied_after_a_freeze(
    lifecycle: &mut Lifecycle,
    handled: &BTreeMap<String, Vec<Handled>>,
    struck: &Struck,
) -> Vec<String> {
    let mut problems = Vec::new();
    for (node, from, to) in &struck.pauses {
        for (id, lives) in lifecycle.lives.iter_mut() {
            for life in lives.iter_mut() {
                let open_through = life.stopped.as_deref().is_none_or(|s| s > to.as_str());
                if life.node != *node || life.started.as_str() >= from.as_str() || !open_through {
                    continue;
                }
                let end = life.stopped.clone().unwrap_or_else(|| "~".to_string());
                let late: Vec<u64> = handled
                    .get(id)
                    .into_iter()
                    .flatten()
                    .filter(|h| h.node == *node && h.at.as_str() > to.as_str() && h.at < end)
                    .map(|h| h.sequence)
                    .collect();
                if !late.is_empty() {
                    problems.push(format!(
                        "{id} on {node}, frozen from {from} to {to}, applied {late:?} before stopping at {end}"
                    ));
                }
                life.stopped = Some(from.clone());
                life.reason = Some("frozen".to_string());
            }
        }
    }
    problems
}

/// Copies the nodes' logs where they outlive the test, for a failing
/// seed's history; the directory.
fn kept_logs(seed: u64, nodes: &[&NodeProcess]) -> String {
    let dir = std::env::temp_dir().join(format!("colo-faults-{}-seed-{seed}", std::process::id()));
    let kept = std::fs::create_dir_all(&dir).and_then(|()| {
        nodes.iter().enumerate().try_for_each(|(n, node)| {
            std::fs::write(dir.join(format!("node-{n}.log")), node.logs())
        })
    });
    match kept {
        Ok(()) => dir.display().to_string(),
        Err(e) => format!("not kept: {e}"),
    }
}

/// One schedule on `brokers`, checked.
async fn run(schedule: &Schedule, brokers: &mut BrokerCluster, network: &Network) {
    eprintln!(
        "[{}] {schedule}{}",
        now(),
        match in_transactions(schedule.seed) {
            true => " (outputs in transactions)",
            false => "",
        }
    );
    let rerun = format!(
        "rerun: {SEEDS}={} cargo nextest run -p colo-tests --test exactly_once_under_faults",
        schedule.seed
    );
    let dir = tempfile::tempdir().expect("dir");
    let (topic, cluster) = unique(&format!("faults-{}", schedule.seed));
    let mut sets = elected_sets(brokers.bootstrap(), &topic, &cluster);
    sets.push("kafka.replication_factor=3".to_string());
    let transactional = in_transactions(schedule.seed);
    if transactional {
        sets.push("kafka.transactional_outputs=true".to_string());
    }
    let mut nodes = three_nodes(network, &sets).await;
    for node in &nodes {
        await_hosting(node).await;
    }
    let bootstrap = brokers.bootstrap().to_string();
    let murmur2_count = MURMUR2_RATE * LOAD.as_secs();
    let murmur2 = Producer::start_for(
        "m-user-",
        dir.path(),
        &bootstrap,
        &topic,
        40,
        murmur2_count,
        Some(MURMUR2_RATE),
    );
    let crc = OtherPartitioner::start(
        dir.path(),
        &bootstrap,
        &topic,
        "consistent_random",
        "c-user-",
        20,
        CRC_RATE * LOAD.as_secs(),
        CRC_RATE,
        Some(BAD_EVERY),
    );
    {
        let refs: Vec<&NodeProcess> = nodes.iter().collect();
        until_handled(&refs, 200).await;
    }

    let mut struck = Struck::default();
    for step in &schedule.steps {
        tokio::time::sleep(step.gap).await;
        strike(step, &mut nodes, brokers, network, &mut struck).await;
    }

    let murmur2_file = murmur2.expected_file();
    let murmur2 = murmur2.finished(Duration::from_secs(120)).await;
    let crc_file = crc.expected_file();
    let crc = crc.finished().await;
    eprintln!("[{}] the producers finished", now());
    let refs: Vec<&NodeProcess> = nodes.iter().collect();
    let crc_last: BTreeMap<String, u64> = crc
        .users
        .iter()
        .map(|(user, stats)| (user.clone(), stats.last_sequence))
        .collect();
    await_all_handled(&refs, &murmur2).await;
    await_all_handled(&refs, &crc_last).await;

    // Totals: each purchase counted once, in order.
    for (expected, what) in [(&murmur2_file, "murmur2"), (&crc_file, "consistent_random")] {
        if let Err(mismatch) = verify(expected, &nodes[0].grpc).await {
            panic!(
                "{schedule}\n{what} users' totals differ from what was produced: {mismatch}\n{rerun}\nthe nodes' logs: {}",
                kept_logs(schedule.seed, &refs)
            );
        }
    }
    // Outputs: each user who crossed the milestone emitted exactly one,
    // as a reader with read_committed sees them, the rare copy under the
    // same id dropped; in transactions, no copy at all.
    let mut everyone = read_totals(&murmur2_file);
    everyone.users.extend(crc.users.clone());
    match milestones(&bootstrap, &cluster, &everyone, Duration::from_secs(60)).await {
        Ok(checked) if transactional && checked.sent_twice > 0 => panic!(
            "{schedule}\nin transactions, {} milestones were read twice: {checked:#?}\n{rerun}\nthe nodes' logs: {}",
            checked.sent_twice,
            kept_logs(schedule.seed, &refs)
        ),
        Ok(checked) => eprintln!(
            "[{}] {} milestones each emitted once ({} sent twice under the same id)",
            now(),
            checked.once,
            checked.sent_twice
        ),
        Err(checked) => panic!(
            "{schedule}\nmilestones not emitted exactly once: {checked:#?}\n{rerun}\nthe nodes' logs: {}",
            kept_logs(schedule.seed, &refs)
        ),
    }
    // The handled log: at least once, each user's in order.
    let history = handled(&refs);
    let mut problems = colo_tests::purchases::at_least_once_in_order_problems(&history, &murmur2);
    problems.extend(colo_tests::purchases::at_least_once_in_order_problems(
        &history, &crc_last,
    ));
    // Never two live copies.
    let mut lifecycle = Lifecycle::read(&refs, "user");
    for (node, at) in &struck.kills {
        lifecycle.killed(node, at);
    }
    problems.extend(applied_after_a_freeze(&mut lifecycle, &history, &struck));
    problems.extend(lifecycle.overlaps());
    if !problems.is_empty() {
        eprintln!("{problems:#?}");
        panic!(
            "{schedule}\n{} problems, the first: {}\n{rerun}\nthe nodes' logs: {}",
            problems.len(),
            problems[0],
            kept_logs(schedule.seed, &refs)
        );
    }

    // Every undecodable record dead-lettered (a repeat, after a kill,
    // carries the same source offset).
    let bad = usize::try_from(crc.records / BAD_EVERY).expect("count");
    let dlq = format!("{cluster}.user.dlq");
    let group = format!("{cluster}.dlq-reader");
    let letters =
        tokio::task::spawn_blocking(move || distinct_dead_letters(&bootstrap, &dlq, &group, bad))
            .await
            .expect("dead letters");
    assert_eq!(
        letters, bad,
        "{schedule}: undecodable records dead-lettered\n{rerun}"
    );
    eprintln!("[{}] seed {}: no violation", now(), schedule.seed);
}

/// The seeds' schedules, one after another on one broker cluster and one
/// network: each with a topic, a cluster name and nodes of its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_seeded_schedule_of_faults_counts_every_purchase_once_in_order() {
    let network = Network::new(3).unwrap_or_else(|e| {
        panic!("network namespaces for the nodes (needs root and iproute2): {e}")
    });
    let mut brokers = BrokerCluster::start_on(network.gateway(), &compacting("3s"));
    eprintln!("[{}] brokers ready in {:?}", now(), brokers.started_in());
    for seed in seeds() {
        run(&Schedule::of(seed), &mut brokers, &network).await;
    }
}
