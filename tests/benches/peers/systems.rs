//! The systems the peers benchmark compares, each as two processes on this
//! machine: colo (durable users, and users in memory), Kafka Streams
//! (exactly_once_v2 and at_least_once) and Apache Pekko (typed Cluster
//! Sharding fed by Pekko Connectors Kafka), and what the benchmark reads off
//! each: records handled, each record's latency, and when each partition's
//! first record since its assignment and its last were handled (colo's
//! metrics; the peers serve the same figures, `peers/common`'s `Progress`).

use colo_tests::process::{colo_binary, example_binary, free_port, tests_binary};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// One of the systems compared.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum System {
    ColoDurable,
    ColoInMemory,
    StreamsExactlyOnce,
    StreamsAtLeastOnce,
    Pekko,
    /// A consumer group member that only reads (`tests/src/bin/
    /// bare-consumer.rs`): the moves' baseline, chosen by name only.
    Bare,
}

impl System {
    pub const ALL: [System; 5] = [
        System::ColoDurable,
        System::ColoInMemory,
        System::StreamsExactlyOnce,
        System::StreamsAtLeastOnce,
        System::Pekko,
    ];

    /// Its row's name in the tables.
    pub fn name(self) -> &'static str {
        match self {
            System::ColoDurable => "colo, durable users",
            System::ColoInMemory => "colo, users in memory",
            System::StreamsExactlyOnce => "Kafka Streams, exactly_once_v2",
            System::StreamsAtLeastOnce => "Kafka Streams, at_least_once",
            System::Pekko => "Pekko Cluster Sharding, totals in memory",
            System::Bare => "bare consumer group (librdkafka, cooperative-sticky), the baseline",
        }
    }

    /// The systems `COLO_BENCH_SYSTEMS` names (comma-separated: colo,
    /// memory, eos, alos, pekko), or all.
    pub fn chosen() -> Vec<System> {
        let Ok(names) = std::env::var("COLO_BENCH_SYSTEMS") else {
            return Self::ALL.to_vec();
        };
        names
            .split(',')
            .map(|name| match name.trim() {
                "colo" => System::ColoDurable,
                "memory" => System::ColoInMemory,
                "eos" => System::StreamsExactlyOnce,
                "alos" => System::StreamsAtLeastOnce,
                "pekko" => System::Pekko,
                "bare" => System::Bare,
                other => panic!(
                    "COLO_BENCH_SYSTEMS: no system {other:?} (colo, memory, eos, alos, pekko, bare)"
                ),
            })
            .collect()
    }

    pub fn is_colo(self) -> bool {
        matches!(self, System::ColoDurable | System::ColoInMemory)
    }
}

/// Where a pair of instances runs: the broker, the topic, a group (or
/// application id, or cluster name) of this run's own, and the consumer
/// group's session timeout when the run sets one (each system's default
/// otherwise).
#[derive(Debug, Clone)]
pub struct Placement {
    pub bootstrap: String,
    pub topic: String,
    pub partitions: u32,
    pub group: String,
    pub session_timeout_ms: Option<u64>,
    /// colo's nodes join under the consumer group protocol (KIP-848)
    /// rather than the classic one; the peers' clients have no such mode
    /// (Kafka Streams 4.x refuses it, Pekko's kafka-clients 3.9 has it as
    /// a preview), so a run that asks for it runs colo only.
    pub consumer_protocol: bool,
    /// colo's `sharding.standbys` (0, its default, unless the run says).
    pub standbys: u32,
    /// colo's coordinator is elected through Kafka (no address), so that
    /// the node hosting it can be killed and the other take it over.
    pub elected_coordinator: bool,
}

/// One process of a system.
pub struct Instance {
    pub system: System,
    /// Its gRPC address (colo) or its HTTP address (the peers).
    pub address: String,
    /// Where its metrics are served (`/metrics`).
    metrics: String,
    /// Pekko's remoting port, which a later node joins through.
    remoting: u16,
    child: Option<Child>,
    log: PathBuf,
    _dir: tempfile::TempDir,
}

impl Instance {
    /// Starts instance `n` (from 0) of `system`; `first` is instance 0, the
    /// one a later instance joins through (colo's coordinator, Pekko's
    /// seed).
    pub fn start(system: System, at: &Placement, n: usize, first: Option<&Instance>) -> Self {
        let dir = tempfile::tempdir().expect("instance dir");
        let log = dir.path().join("out.log");
        let out = std::fs::File::create(&log).expect("log file");
        let err = out.try_clone().expect("log file");
        let (mut command, address, metrics, remoting) = if system.is_colo() {
            colo_command(system, at, dir.path(), first)
        } else if system == System::Bare {
            bare_command(at)
        } else {
            java_command(system, at, dir.path(), n, first)
        };
        let child = command
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .unwrap_or_else(|e| panic!("start {}: {e}", system.name()));
        Self {
            system,
            address,
            metrics,
            remoting,
            child: Some(child),
            log,
            _dir: dir,
        }
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// kill -9.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// SIGTERM: each system's graceful stop.
    pub fn terminate(&self) {
        if let Some(pid) = self.pid() {
            let _ = Command::new("kill")
                .args(["-TERM", &pid.to_string()])
                .status();
        }
    }

    /// Whether the process has exited.
    pub fn exited(&mut self) -> bool {
        match self.child.as_mut().map(Child::try_wait) {
            Some(Ok(Some(_))) | None => {
                self.child = None;
                true
            }
            _ => false,
        }
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// What it reports now; `None` while it does not answer.
    pub async fn observe(&self) -> Option<Observed> {
        // Bounded: a process that takes the connection and never answers
        // (stopping, say) must not hold the bench's loops past their
        // deadlines.
        let metrics = colo_tests::http::get(&self.metrics, "/metrics");
        match tokio::time::timeout(Duration::from_secs(5), metrics).await {
            Ok(Ok((200, body))) => Some(Observed::parse(self.system, &body)),
            _ => None,
        }
    }

    /// Its peak resident set, in bytes (`VmHWM`).
    pub fn peak_resident(&self) -> u64 {
        self.status_bytes("VmHWM:")
    }

    /// Its resident set now, in bytes (`VmRSS`).
    pub fn resident(&self) -> u64 {
        self.status_bytes("VmRSS:")
    }

    /// A figure of `/proc/<pid>/status` given in kB, in bytes.
    fn status_bytes(&self, field: &str) -> u64 {
        let Some(pid) = self.pid() else { return 0 };
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
        status
            .lines()
            .find_map(|l| l.strip_prefix(field))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .map_or(0, |kb| kb * 1024)
    }

    /// Each user's totals as this instance answers them, compared with
    /// `expected` (`colo produce --expected`): the users whose purchases,
    /// items or amount differ (none when every one is exact).
    pub async fn wrong_totals(&self, expected: &Path) -> Vec<String> {
        if self.system.is_colo() {
            let expected = expected.display().to_string();
            let args = [
                "--timeout",
                "20s",
                "--expected",
                &expected,
                "--addr",
                &self.address,
            ];
            return match colo_tests::process::colo_verify(&args).await {
                Ok(_) => Vec::new(),
                Err(report) => report.lines().map(str::to_string).collect(),
            };
        }
        let text = std::fs::read_to_string(expected).expect("expected totals");
        let expected: serde_json::Value = serde_json::from_str(&text).expect("expected JSON");
        let mut wrong = Vec::new();
        for (user, totals) in expected["users"].as_object().expect("users") {
            let got = match colo_tests::http::get(&self.address, &format!("/users/{user}")).await {
                Ok((200, body)) => serde_json::from_str::<serde_json::Value>(&body).ok(),
                _ => None,
            };
            let same = got.as_ref().is_some_and(|got| {
                ["purchases", "items", "amount_spent"]
                    .iter()
                    .all(|field| got[field] == totals[field])
            });
            if !same {
                wrong.push(format!("{user}: expected {totals}, got {got:?}"));
            }
        }
        wrong
    }
}

impl Drop for Instance {
    fn drop(&mut self) {
        self.kill();
    }
}

/// `colo run` (durable users) or the `users_in_memory` example, with
/// colo's defaults but for where it listens, the Kafka topic it consumes
/// and its shards: one per partition.
fn colo_command(
    system: System,
    at: &Placement,
    dir: &Path,
    first: Option<&Instance>,
) -> (Command, String, String, u16) {
    let grpc = format!("127.0.0.1:{}", free_port());
    let admin = format!("127.0.0.1:{}", free_port());
    let coordinator = match first {
        _ if at.elected_coordinator => String::new(),
        Some(first) => first.address.clone(),
        None => grpc.clone(),
    };
    let mut command = match system {
        System::ColoDurable => {
            let mut command = Command::new(colo_binary());
            command.arg("run");
            command
        }
        _ => Command::new(example_binary("users_in_memory")),
    };
    let mut client = String::new();
    if at.consumer_protocol {
        // The broker sets the session timeout and the heartbeat.
        client = r#"kafka.client={"group.protocol"="consumer"}"#.to_string();
    } else if let Some(ms) = at.session_timeout_ms {
        client = format!(r#"kafka.client={{"session.timeout.ms"="{ms}"}}"#);
    }
    let sets = [
        format!(r#"node.listen="{grpc}""#),
        format!(r#"node.admin_listen="{admin}""#),
        format!(r#"node.data_dir="{}""#, dir.join("data").display()),
        format!(r#"coordinator.address="{coordinator}""#),
        r#"node.entity_types=["user"]"#.to_string(),
        format!("sharding.number_of_shards={}", at.partitions),
        format!(r#"kafka.bootstrap_servers="{}""#, at.bootstrap),
        format!(r#"kafka.cluster="{}""#, at.group),
        format!(r#"kafka.topics.user=["{}"]"#, at.topic),
        // Its changelog (durable users) made as Kafka Streams makes its
        // internal topics.
        "kafka.create_topics=true".to_string(),
        format!(
            r#"log.level="{}""#,
            std::env::var("COLO_BENCH_LOG_LEVEL").unwrap_or_else(|_| "warn".to_string())
        ),
        client,
        format!("sharding.standbys={}", at.standbys),
    ];
    command.arg("--exit-with-parent");
    for set in sets.iter().filter(|s| !s.is_empty()) {
        command.args(["--set", set]);
    }
    (command, grpc, admin, 0)
}

/// The bare consumer: the group settings of colo's source, its session
/// timeout when the run sets one.
fn bare_command(at: &Placement) -> (Command, String, String, u16) {
    let metrics = format!("127.0.0.1:{}", free_port());
    let mut command = Command::new(tests_binary("bare-consumer"));
    command.args([&at.bootstrap, &at.topic, &at.group, &metrics]);
    if let Some(ms) = at.session_timeout_ms {
        command.arg(ms.to_string());
    }
    (command, metrics.clone(), metrics, 0)
}

/// The peers' shaded jars, built by [`build_peers`].
fn peer_jar(system: System) -> PathBuf {
    let (dir, name) = match system {
        System::Pekko => ("pekko", "pekko-peer"),
        _ => ("kafka-streams", "kafka-streams-peer"),
    };
    peers_dir()
        .join(dir)
        .join("target")
        .join(format!("{name}-0.1.0.jar"))
}

fn peers_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../peers")
}

/// Builds the peers with Maven (their dependencies come from Maven
/// Central, once).
pub fn build_peers() {
    let status = Command::new("mvn")
        .args(["-q", "-B", "package", "-DskipTests"])
        .current_dir(peers_dir())
        .status()
        .expect("run mvn");
    assert!(status.success(), "the peers did not build");
}

/// The JVM's flags: its defaults (G1 on this machine, a heap of up to a
/// quarter of its memory), and the process dies with the benchmark.
fn java_command(
    system: System,
    at: &Placement,
    dir: &Path,
    n: usize,
    first: Option<&Instance>,
) -> (Command, String, String, u16) {
    let http = format!("127.0.0.1:{}", free_port());
    let mut command = Command::new("java");
    command.arg("-jar").arg(peer_jar(system));
    command
        .env("PEER_BOOTSTRAP", &at.bootstrap)
        .env("PEER_TOPIC", &at.topic)
        .env(
            "PEER_HTTP_PORT",
            http.rsplit(':').next().unwrap_or_default(),
        );
    if let Some(ms) = at.session_timeout_ms {
        command.env("PEER_SESSION_TIMEOUT_MS", ms.to_string());
    }
    let mut remoting = 0;
    match system {
        System::Pekko => {
            let port = free_port();
            remoting = port;
            let seed = first.map_or(port, |f| f.remoting);
            command
                .env("PEER_GROUP", &at.group)
                .env("PEER_PARTITIONS", at.partitions.to_string())
                .env("PEER_PORT", port.to_string())
                .env("PEER_SEEDS", seed.to_string());
        }
        _ => {
            let guarantee = if system == System::StreamsExactlyOnce {
                "exactly_once_v2"
            } else {
                "at_least_once"
            };
            command
                .env("PEER_APPLICATION_ID", &at.group)
                .env("PEER_GUARANTEE", guarantee)
                .env("PEER_THREADS", "1")
                .env("PEER_STATE_DIR", dir.join(format!("state-{n}")));
        }
    }
    (command, http.clone(), http, remoting)
}

/// What an instance reports at one moment.
#[derive(Debug, Default, Clone)]
pub struct Observed {
    /// Records handled (their effect on their user's totals applied).
    pub handled: f64,
    /// Each record's latency: (bucket bound in seconds, records at or
    /// below it), the last bound infinite.
    pub latency: Vec<(f64, f64)>,
    /// Each partition's first record since it was assigned here, and its
    /// last, in seconds since the Unix epoch.
    pub first: BTreeMap<i32, f64>,
    pub last: BTreeMap<i32, f64>,
    /// It hosts colo's coordinator.
    pub coordinator: bool,
}

impl Observed {
    fn parse(system: System, text: &str) -> Self {
        let (handled, latency, first, last) = if system.is_colo() {
            (
                "colo_kafka_records_total{",
                "colo_kafka_record_latency_seconds_bucket{",
                "colo_kafka_partition_first_handled_timestamp_seconds{",
                "colo_kafka_partition_last_handled_timestamp_seconds{",
            )
        } else {
            (
                "peer_records_handled_total",
                "peer_record_latency_seconds_bucket{",
                "peer_partition_first_handled_timestamp_seconds{",
                "peer_partition_last_handled_timestamp_seconds{",
            )
        };
        let mut seen = Observed::default();
        let mut buckets: BTreeMap<u64, f64> = BTreeMap::new();
        for line in text.lines() {
            let Some(value) = line.rsplit(' ').next().and_then(|v| v.parse::<f64>().ok()) else {
                continue;
            };
            if line.starts_with("colo_coordinator_hosted{") && value == 1.0 {
                seen.coordinator = true;
            } else if line.starts_with(handled)
                && (!system.is_colo() || line.contains(r#"outcome="handled""#))
            {
                seen.handled += value;
            } else if line.starts_with(latency) {
                let bound = label(line, "le").map_or(f64::INFINITY, |le| {
                    le.parse::<f64>().unwrap_or(f64::INFINITY)
                });
                *buckets.entry(bound.to_bits()).or_default() += value;
            } else if line.starts_with(first) || line.starts_with(last) {
                let Some(partition) = label(line, "partition").and_then(|p| p.parse().ok()) else {
                    continue;
                };
                let into = if line.starts_with(first) {
                    &mut seen.first
                } else {
                    &mut seen.last
                };
                if value > 0.0 {
                    into.insert(partition, value);
                }
            }
        }
        seen.latency = buckets
            .into_iter()
            .map(|(bits, count)| (f64::from_bits(bits), count))
            .collect();
        seen.latency.sort_by(|a, b| a.0.total_cmp(&b.0));
        seen
    }
}

/// A label's value on a Prometheus line.
fn label<'a>(line: &'a str, name: &str) -> Option<&'a str> {
    let start = line.find(&format!("{name}=\""))? + name.len() + 2;
    let rest = &line[start..];
    Some(&rest[..rest.find('"')?])
}

/// Waits up to `deadline` for an instance's metrics to answer.
pub async fn answering(instance: &mut Instance, deadline: Duration) {
    let end = std::time::Instant::now() + deadline;
    let mut answered = false;
    while !answered && std::time::Instant::now() < end && !instance.exited() {
        answered = instance.observe().await.is_some();
        if !answered {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    assert!(
        answered,
        "{} did not answer within {deadline:?} (or exited):\n{}",
        instance.system.name(),
        instance.log()
    );
}
