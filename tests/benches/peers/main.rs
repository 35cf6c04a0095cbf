//! colo beside the systems its users would otherwise pick, on the same
//! broker (Apache Kafka on loopback), machine and records (the sample's
//! purchase events, 12 partitions, murmur2-partitioned as Kafka's Java
//! producer does): Kafka Streams (exactly_once_v2 and at_least_once) and
//! Apache Pekko typed Cluster Sharding fed by Pekko Connectors Kafka (see
//! `peers/`). Every system runs as two processes on the machine's two
//! cores, one system after another:
//!
//! 1. `throughput`: a backlog of `COLO_BENCH_RECORDS` (2,000,000) records
//!    of `COLO_BENCH_USERS` (10,000) users consumed to the end: records/s
//!    from the first record handled to the last, CPU seconds per million
//!    records (both processes, from /proc), peak resident memory;
//! 2. `flow`: at a paced `COLO_BENCH_RATE` (20,000) records/s, each
//!    record's latency (its timestamp to its user's totals updated) p50,
//!    p99 and max, read off the same buckets for every system; then kill
//!    -9 of the second process: how long until every partition flows
//!    again on the survivor (a record of it handled after the kill),
//!    records handled twice, and whether every user's totals are exact at
//!    the end;
//! 3. `moves` (`moves.rs`): at that pace, a second process joins and
//!    leaves gracefully (SIGTERM) `COLO_BENCH_CYCLES` (3) times: for every
//!    moved partition, the pause from its last record handled on the old
//!    owner to its first on the new one, how long the leaving process took
//!    to exit, and records handled twice (`COLO_BENCH_NODES`, 2: the
//!    processes once the joiner is in);
//! 4. `restore` (`restore.rs`): one process handles three records each of
//!    `COLO_BENCH_RESTORE_USERS` (1,000,000) users, its resident memory
//!    per user is read, and it stops; one on an empty disk then takes
//!    their partitions: how long until they flow again, users restored a
//!    second.
//!
//! Each figure is the median of `COLO_BENCH_RUNS` (3) runs, with min and
//! max. `COLO_BENCH_SYSTEMS` picks systems (colo, memory, eos, alos,
//! pekko; and `bare`, a consumer group member that only reads, the
//! baseline of the moves, run only when named);
//! `COLO_BENCH_SESSION_TIMEOUT_MS` sets every system's consumer session
//! timeout (each keeps its default otherwise: 45 s);
//! `COLO_BENCH_GROUP_PROTOCOL=consumer` runs colo's nodes under KIP-848's
//! consumer group protocol (colo only; the broker's heartbeat is 500 ms);
//! `COLO_BENCH_STANDBYS` sets colo's `sharding.standbys` (0);
//! `COLO_BENCH_KILL=coordinator` elects colo's coordinator through Kafka
//! and kills, in `flow`, the process that hosts it;
//! `COLO_BENCH_LOG_LEVEL` (warn) is colo's `log.level`, and
//! `COLO_BENCH_LOG_DIR` a directory where `flow` keeps each run's
//! survivor's log;
//! `COLO_BENCH_WARM_S` (10) and `COLO_BENCH_MEASURE_S` (20) frame the
//! latency, `COLO_BENCH_HOLD_S` (5) is how long each move is left to
//! settle, and `COLO_BENCH_JOIN_WAIT_S` (60) how long a joiner is given to
//! take a partition (Kafka Streams moves a task only to a caught-up
//! warm-up copy, at its next probing rebalance). Arguments pick parts:
//! `cargo bench -p colo-tests --bench peers -- flow`, or `-- moves
//! restore`.

mod figures;
mod moves;
mod restore;
#[path = "../support/mod.rs"]
mod support;
mod systems;

use colo_tests::broker::Broker;
use colo_tests::purchases::Producer;
use figures::{bucket_max, bucket_percentile, latency_between, spread};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};
use support::{cpu_seconds, env};
use systems::{answering, Instance, Observed, Placement, System};

const PARTITIONS: u32 = 12;

fn now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or_default()
}

async fn create_topic(bootstrap: &str, name: &str) {
    let spec = colo_connectors::NewTopicSpec {
        name: name.to_string(),
        partitions: PARTITIONS as i32,
        replication_factor: 1,
        config: Vec::new(),
    };
    colo_connectors::create_missing_topics(bootstrap, &[], &[spec], Duration::from_secs(30))
        .await
        .unwrap_or_else(|e| panic!("topic {name} not created: {e}"));
}

fn placement(broker: &Broker, topic: &str, group: String) -> Placement {
    Placement {
        bootstrap: broker.bootstrap().to_string(),
        topic: topic.to_string(),
        partitions: PARTITIONS,
        group,
        session_timeout_ms: std::env::var("COLO_BENCH_SESSION_TIMEOUT_MS")
            .ok()
            .and_then(|v| v.parse().ok()),
        consumer_protocol: consumer_protocol(),
        standbys: std::env::var("COLO_BENCH_STANDBYS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(0),
        elected_coordinator: kill_coordinator(),
    }
}

/// `COLO_BENCH_KILL`: `instance` (the default: the second process) or
/// `coordinator` (colo's coordinator elected through Kafka, and the
/// process hosting it killed).
fn kill_coordinator() -> bool {
    match std::env::var("COLO_BENCH_KILL").as_deref() {
        Err(_) | Ok("" | "instance") => false,
        Ok("coordinator") => true,
        Ok(other) => panic!("COLO_BENCH_KILL is instance or coordinator, not {other:?}"),
    }
}

/// `COLO_BENCH_GROUP_PROTOCOL`: `classic` (the default) or `consumer`
/// (KIP-848, colo only).
fn consumer_protocol() -> bool {
    match std::env::var("COLO_BENCH_GROUP_PROTOCOL").as_deref() {
        Err(_) | Ok("" | "classic") => false,
        Ok("consumer") => true,
        Ok(other) => panic!("COLO_BENCH_GROUP_PROTOCOL is classic or consumer, not {other:?}"),
    }
}

/// Records in `topic`: the sum of its partitions' end offsets.
fn end_offsets(bootstrap: &str, topic: &str) -> u64 {
    use rdkafka::consumer::{BaseConsumer, Consumer};
    let consumer: BaseConsumer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .create()
        .expect("consumer");
    (0..PARTITIONS as i32)
        .map(|p| {
            let (low, high) = consumer
                .fetch_watermarks(topic, p, Duration::from_secs(10))
                .expect("watermarks");
            u64::try_from(high - low).unwrap_or(0)
        })
        .sum()
}

/// The broker's version, from its jar's name.
fn kafka_version() -> String {
    let lib = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/kafka/lib");
    std::fs::read_dir(lib)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().into_string().ok())
        .find_map(|name| {
            Some(
                name.strip_prefix("kafka_2.13-")?
                    .strip_suffix(".jar")?
                    .to_string(),
            )
        })
        .unwrap_or_else(|| "?".to_string())
}

/// The sample's events of `users` users to `topic` at `rate` a second,
/// for as long as a run needs (an hour at most): the run stops it
/// ([`Producer::stopped`]), and it writes the totals of what it sent.
fn paced(dir: &std::path::Path, broker: &Broker, topic: &str, users: u64, rate: u64) -> Producer {
    Producer::start(
        dir,
        broker.bootstrap(),
        topic,
        users,
        rate * 3600,
        Some(rate),
    )
}

/// A short tag for names: the system's index in [`System::ALL`].
fn tag(system: System) -> usize {
    System::ALL.iter().position(|s| *s == system).unwrap_or(9)
}

/// Starts two instances of `system`, the second joining through the first.
async fn pair(system: System, at: &Placement) -> (Instance, Instance) {
    let mut a = Instance::start(system, at, 0, None);
    answering(&mut a, Duration::from_secs(90)).await;
    let mut b = Instance::start(system, at, 1, Some(&a));
    answering(&mut b, Duration::from_secs(90)).await;
    (a, b)
}

async fn observe(instance: &Instance) -> Observed {
    instance.observe().await.unwrap_or_default()
}

/// Waits, up to `deadline`, until `done` holds of what `instance` reports.
async fn until_observed(
    instance: &Instance,
    what: &str,
    deadline: Duration,
    done: impl Fn(&Observed) -> bool,
) -> Observed {
    match observed_within(instance, deadline, done).await {
        Some(seen) => seen,
        None => panic!(
            "{}: {what} not within {deadline:?}:\n{}",
            instance.system.name(),
            instance.log()
        ),
    }
}

/// What `instances` have handled in all once they handle no more, and
/// with what `gone` handled, at least `produced` (or after five minutes:
/// a system that stopped handling records shows it as fewer handled than
/// produced). The bare consumer's count misses what its leaving process
/// read after the bench's last look at it: it need only stop growing.
async fn settled(instances: &[Instance], gone: f64, produced: u64) -> f64 {
    let produced = match instances.first().map(|i| i.system) {
        Some(System::Bare) => 0,
        _ => produced,
    };
    let end = Instant::now() + Duration::from_secs(300);
    let mut before = f64::NAN;
    loop {
        let mut now = 0.0;
        for instance in instances {
            now += observe(instance).await.handled;
        }
        if (now == before && now + gone >= produced as f64) || Instant::now() >= end {
            return now;
        }
        before = now;
        tokio::time::sleep(Duration::from_secs(3)).await;
    }
}

/// How the partitions flowed on `instance` after `since`.
struct Resumed {
    /// Each partition's first record handled after `since`.
    taken: BTreeMap<i32, f64>,
    /// The partitions `instance` was handling at `since` (a record in the
    /// second before it), its own: the longest any went without a record
    /// until every partition flowed, read as often as its metrics answer
    /// (every 50 ms or so).
    own_pause: f64,
}

/// When `instance` handled its first record of each of `partitions`
/// after `since` (waited for up to `deadline`; `None` if one did not flow
/// by then). A partition assigned to it again after `since` reports its
/// first record exactly; one it held all along (Pekko's consumer may keep
/// a partition whose entities lived on the other node) is seen by its
/// last record moving past `since`, to within the reading interval.
async fn resumed(
    instance: &Instance,
    partitions: &[i32],
    since: f64,
    deadline: Duration,
) -> Option<Resumed> {
    let end = Instant::now() + deadline;
    let mut taken = BTreeMap::new();
    let mut own: Option<BTreeMap<i32, f64>> = None;
    let mut own_pause = 0.0f64;
    while taken.len() < partitions.len() {
        if let Some(seen) = instance.observe().await {
            let own = own.get_or_insert_with(|| {
                seen.last
                    .iter()
                    .filter(|(_, t)| **t > since - 1.0)
                    .map(|(p, t)| (*p, *t))
                    .collect()
            });
            for (p, previous) in own.iter_mut() {
                let latest = seen
                    .last
                    .get(p)
                    .copied()
                    .unwrap_or(*previous)
                    .max(*previous);
                own_pause = own_pause.max(latest - *previous);
                *previous = latest;
            }
            for p in partitions {
                let after = |t: Option<&f64>| t.copied().filter(|t| *t > since);
                if let Some(t) = after(seen.first.get(p)).or(after(seen.last.get(p))) {
                    taken.entry(*p).or_insert(t);
                }
            }
        }
        if Instant::now() >= end {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // One still waiting for its next record has paused since its last.
    let now = now();
    for previous in own.unwrap_or_default().values() {
        own_pause = own_pause.max(now - previous);
    }
    Some(Resumed { taken, own_pause })
}

/// What `instance` reports once `done` holds of it, or `None` if it does
/// not within `deadline`.
async fn observed_within(
    instance: &Instance,
    deadline: Duration,
    done: impl Fn(&Observed) -> bool,
) -> Option<Observed> {
    let end = Instant::now() + deadline;
    loop {
        if let Some(seen) = instance.observe().await {
            if done(&seen) {
                return Some(seen);
            }
        }
        if Instant::now() >= end {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn throughput(broker: &Broker, systems: &[System], dir: &std::path::Path) {
    let records = env("COLO_BENCH_RECORDS", 2_000_000);
    let users = env("COLO_BENCH_USERS", 10_000);
    let runs = env("COLO_BENCH_RUNS", 3);
    let topic = format!("peers-{}.backlog", std::process::id());
    create_topic(broker.bootstrap(), &topic).await;
    Producer::start(dir, broker.bootstrap(), &topic, users, records, None)
        .finished(Duration::from_secs(1800))
        .await;
    println!("throughput: a backlog of {records} records of {users} users, {PARTITIONS} partitions, two processes of each system; median of {runs} runs (min–max)");
    println!("| system | records/s | CPU s per million records (both processes) | peak resident MiB per process |");
    println!("|---|---:|---:|---:|");
    for &system in systems {
        let (mut rates, mut cpus, mut resident) = (Vec::new(), Vec::new(), Vec::new());
        for run in 1..=runs {
            let group = format!("peers-{}-t{}-{run}", std::process::id(), tag(system));
            let at = placement(broker, &topic, group);
            // Both start at once and are read from the start: a backlog
            // small enough goes to the first before the second answers.
            let a = Instance::start(system, &at, 0, None);
            let b = Instance::start(system, &at, 1, Some(&a));
            let cpu = || cpu_seconds(a.pid()) + cpu_seconds(b.pid());
            let mut first = None;
            // Whether the first reading with a record handled saw them
            // all: a backlog too small to time at this reading interval.
            let mut at_once = false;
            let deadline = Instant::now() + Duration::from_secs(1800);
            loop {
                let handled = observe(&a).await.handled + observe(&b).await.handled;
                if handled > 0.0 && first.is_none() {
                    first = Some((Instant::now(), cpu()));
                    at_once = handled >= records as f64;
                }
                if handled >= records as f64 {
                    break;
                }
                assert!(
                    Instant::now() < deadline,
                    "{} handled {handled} of {records}:\n{}\n{}",
                    system.name(),
                    a.log(),
                    b.log()
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            let (started, cpu_then) = first.expect("a record handled");
            if at_once {
                // Printed as "-" rather than a rate of no time at all.
                rates.push(f64::NAN);
                cpus.push(f64::NAN);
            } else {
                rates.push(records as f64 / started.elapsed().as_secs_f64());
                cpus.push((cpu() - cpu_then) * 1e6 / records as f64);
            }
            resident.push(a.peak_resident().max(b.peak_resident()) as f64 / (1 << 20) as f64);
        }
        println!(
            "| {} | {} | {} | {} |",
            system.name(),
            spread(&rates, 0),
            spread(&cpus, 2),
            spread(&resident, 0)
        );
    }
}

/// One flow run's figures.
#[derive(Default)]
struct Flow {
    p50: f64,
    p99: f64,
    max: f64,
    /// Per partition of the killed process: kill to its first record on
    /// the survivor, the slowest.
    recovery: f64,
    /// The survivor's own partitions: the longest any paused meanwhile.
    own_pause: f64,
    twice: f64,
    exact: bool,
}

async fn flow(broker: &Broker, systems: &[System], dir: &std::path::Path) {
    let rate = env("COLO_BENCH_RATE", 20_000);
    let users = env("COLO_BENCH_USERS", 10_000);
    let runs = env("COLO_BENCH_RUNS", 3);
    let warm = Duration::from_secs(env("COLO_BENCH_WARM_S", 10));
    let measure = Duration::from_secs(env("COLO_BENCH_MEASURE_S", 20));
    let session = placement(broker, "", String::new())
        .session_timeout_ms
        .unwrap_or(45_000);
    println!("flow: {rate} records/s of {users} users, {PARTITIONS} partitions, two processes of each system; latency over {measure:?} after {warm:?}, then kill -9 of one process; median of {runs} runs (min–max)");
    let mut rows = Vec::new();
    for &system in systems {
        let mut figures = Vec::new();
        for run in 1..=runs {
            let name = format!("peers-{}-f{}-{run}", std::process::id(), tag(system));
            let topic = format!("{name}.purchases");
            create_topic(broker.bootstrap(), &topic).await;
            let at = placement(broker, &topic, name);
            let (mut a, mut b) = pair(system, &at).await;
            // Until the survivor has taken the partitions over, and a few
            // seconds more; stopped then.
            let producer = paced(dir, broker, &at.topic, users, rate);
            let expected = producer.expected_file();
            for instance in [&a, &b] {
                until_observed(
                    instance,
                    "a record handled",
                    Duration::from_secs(120),
                    |o| o.handled > 0.0,
                )
                .await;
            }
            tokio::time::sleep(warm).await;
            let before = [observe(&a).await, observe(&b).await];
            tokio::time::sleep(measure).await;
            let (after_a, after_b) = (observe(&a).await, observe(&b).await);
            let deltas = latency_between(&[&before[0], &before[1]], &[&after_a, &after_b]);
            if at.elected_coordinator && system.is_colo() {
                assert!(
                    after_a.coordinator != after_b.coordinator,
                    "one process hosts the coordinator"
                );
                if after_a.coordinator {
                    std::mem::swap(&mut a, &mut b);
                }
            }
            // kill -9 of the second process (or of the coordinator's),
            // right after reading it.
            let last_b = observe(&b).await;
            b.kill();
            let killed_at = now();
            // Every partition, not only the ones the killed process
            // consumed: which those were is the consumer's, and where a
            // record is handled is the entity's (Pekko's may differ). One
            // the survivor handles all along flows again at once; one
            // that stops with the kill flows again when it is handled
            // after it.
            let moved: Vec<i32> = (0..PARTITIONS as i32).collect();
            // A system that does not take them over within the deadline
            // is reported so (never), not waited for.
            let taken = resumed(
                &a,
                &moved,
                killed_at,
                Duration::from_millis(session) + Duration::from_secs(120),
            )
            .await;
            let own_pause = taken.as_ref().map_or(f64::INFINITY, |t| t.own_pause);
            let recovery = match &taken {
                Some(resumed) => resumed
                    .taken
                    .values()
                    .map(|t| t - killed_at)
                    .fold(0.0, f64::max),
                None => {
                    eprintln!(
                        "{}: the killed process's partitions did not flow again on the survivor",
                        system.name()
                    );
                    f64::INFINITY
                }
            };
            tokio::time::sleep(Duration::from_secs(5)).await;
            producer.stopped(Duration::from_secs(120)).await;
            let produced = end_offsets(broker.bootstrap(), &at.topic);
            // Everything handled: the survivor's count stops moving.
            let settled = settled(std::slice::from_ref(&a), last_b.handled, produced).await;
            let wrong = a.wrong_totals(&expected).await;
            if let Ok(logs) = std::env::var("COLO_BENCH_LOG_DIR") {
                let path = std::path::Path::new(&logs).join(format!("{}-survivor.log", at.group));
                std::fs::write(&path, a.log()).expect("the survivor's log written");
            }
            figures.push(Flow {
                p50: bucket_percentile(&deltas, 0.5),
                p99: bucket_percentile(&deltas, 0.99),
                max: bucket_max(&deltas),
                recovery,
                own_pause,
                twice: settled + last_b.handled - produced as f64,
                exact: wrong.is_empty(),
            });
        }
        rows.push((system, figures));
    }
    println!("| system | latency p50 ms | p99 ms | max ms (bucket bound) | kill -9: until every partition flows again, s | the survivor's own partitions meanwhile: longest pause, s | records handled twice | every user's totals exact |");
    println!("|---|---:|---:|---:|---:|---:|---:|---|");
    for (system, figures) in rows {
        let column = |f: fn(&Flow) -> f64| figures.iter().map(f).collect::<Vec<_>>();
        let exact = figures.iter().filter(|f| f.exact).count();
        println!(
            "| {} | {} | {} | {} | {} | {} | {} | {exact} of {} runs |",
            system.name(),
            spread(&column(|f| f.p50 * 1e3), 1),
            spread(&column(|f| f.p99 * 1e3), 1),
            spread(&column(|f| f.max * 1e3), 0),
            spread(&column(|f| f.recovery), 2),
            spread(&column(|f| f.own_pause), 2),
            spread(&column(|f| f.twice), 0),
            figures.len()
        );
    }
}

fn main() {
    let filters: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    let wanted =
        |part: &str| filters.is_empty() || filters.iter().any(|f| part.contains(f.as_str()));
    let systems = System::chosen();
    assert!(
        !consumer_protocol() || systems.iter().all(|s| s.is_colo()),
        "COLO_BENCH_GROUP_PROTOCOL=consumer runs colo only: set COLO_BENCH_SYSTEMS=colo,memory"
    );
    if systems.iter().any(|s| {
        matches!(
            s,
            System::StreamsExactlyOnce | System::StreamsAtLeastOnce | System::Pekko
        )
    }) {
        systems::build_peers();
    }
    support::runtime().block_on(async {
        let broker = Broker::start();
        let dir = tempfile::tempdir().expect("dir");
        println!(
            "broker: Apache Kafka {} on loopback; this machine: {} cores",
            kafka_version(),
            std::thread::available_parallelism().map_or(0, |n| n.get())
        );
        // The bare consumer keeps no state: it is a baseline of moves only.
        let stateful: Vec<System> = systems
            .iter()
            .copied()
            .filter(|s| *s != System::Bare)
            .collect();
        if wanted("throughput") {
            throughput(&broker, &stateful, dir.path()).await;
        }
        if wanted("flow") {
            flow(&broker, &stateful, dir.path()).await;
        }
        if wanted("moves") {
            moves::moves(&broker, &systems, dir.path()).await;
        }
        if wanted("restore") {
            restore::restore(&broker, &stateful, dir.path()).await;
        }
    });
}
