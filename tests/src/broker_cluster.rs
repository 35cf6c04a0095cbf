//! Three Apache Kafka brokers for the broker-fault tests: a cluster whose
//! brokers can be killed (SIGKILL) and started again one at a time while
//! colo runs on it, with every topic replicated three times and two
//! replicas in sync required for a write, so that losing one broker loses
//! no acknowledged record.
//!
//! Each broker is a KRaft process that is broker and controller, as the
//! single test broker ([`crate::broker`]) is; the three controllers form a
//! static quorum (`controller.quorum.voters`), so any two of them elect
//! the active controller and the third can be down. They run from the
//! same jars, on loopback ports of their own, their log directories in
//! one temporary directory, stopped by their PIDs when dropped.

use crate::broker::{java, kafka_lib, log4j_config, Run};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::metadata::Metadata;
use rdkafka::producer::{BaseProducer, Producer};
use rdkafka::ClientConfig;
use std::path::PathBuf;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

/// The cluster's id: 16 bytes ("colo-3-brokers!!"), base64 without
/// padding, as `kafka-storage.sh random-uuid` prints them.
const CLUSTER_ID: &str = "Y29sby0zLWJyb2tlcnMhIQ";

/// The brokers' ids, `node.id` 1 to 3.
pub const BROKER_IDS: [i32; 3] = [1, 2, 3];

/// Partitions of `__consumer_offsets`: a group's coordinator is the
/// leader of one of them (see [`offsets_partition`]). Fewer than Kafka's
/// 50 keep its creation short; a multiple of three spreads their leaders
/// evenly. Odd, so that two groups named alike can share a partition (a
/// test picks such names): with an even count, `a.user` and
/// `a.coordinator` never do, as their Java hashes differ in parity
/// whatever `a` is.
pub const OFFSETS_PARTITIONS: i32 = 9;

/// How long the brokers may take to answer metadata, listing each other,
/// and to hand out a producer id: three JVMs starting on two cores.
const STARTED: Duration = Duration::from_secs(90);

/// How long a broker's replicas may take to catch up once it is back.
const IN_SYNC: Duration = Duration::from_secs(60);

/// How long one metadata request may take; a dead broker in the bootstrap
/// list costs librdkafka a connection attempt, not this.
const METADATA: Duration = Duration::from_secs(2);

/// One broker of the cluster.
#[derive(Debug)]
struct Member {
    id: i32,
    /// Its log directory, `server.properties` and logs.
    dir: PathBuf,
    /// `127.0.0.1:port` of its client listener.
    address: String,
    child: Option<Child>,
}

/// Three running brokers.
pub struct BrokerCluster {
    members: Vec<Member>,
    bootstrap: String,
    /// Asks the cluster for metadata (leaders, replicas in sync).
    client: BaseConsumer,
    started_in: Duration,
    _dir: tempfile::TempDir,
}

impl std::fmt::Debug for BrokerCluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BrokerCluster")
            .field("members", &self.members)
            .field("bootstrap", &self.bootstrap)
            .finish_non_exhaustive()
    }
}

impl BrokerCluster {
    /// Formats three log directories and starts the three brokers, then
    /// waits until the cluster lists all three in a metadata answer and a
    /// producer id can be had (its transaction coordinator is loaded, on
    /// a `__transaction_state` replicated three times).
    ///
    /// # Panics
    /// Java or the jars cannot be had, formatting fails, a broker exits,
    /// or the cluster is not ready within 90 s.
    pub fn start() -> Self {
        Self::start_on("127.0.0.1", &[])
    }

    /// [`BrokerCluster::start`] with the brokers' client listeners on
    /// `host` (a bridge's address, for nodes in network namespaces: see
    /// [`crate::netns`]) and `extra` added to each broker's
    /// `server.properties` (a compacting log cleaner:
    /// [`crate::broker::compacting`]). The controllers stay on loopback.
    ///
    /// # Panics
    /// As [`BrokerCluster::start`].
    pub fn start_on(host: &str, extra: &[String]) -> Self {
        let starting = Instant::now();
        let lib = kafka_lib();
        let dir = tempfile::tempdir().expect("cluster directory");
        let ports: Vec<(u16, u16)> = BROKER_IDS
            .iter()
            .map(|_| (crate::process::free_port(), crate::process::free_port()))
            .collect();
        let voters = BROKER_IDS
            .iter()
            .zip(&ports)
            .map(|(id, (_, controller))| format!("{id}@127.0.0.1:{controller}"))
            .collect::<Vec<_>>()
            .join(",");
        let mut members = Vec::new();
        for (id, (port, controller)) in BROKER_IDS.iter().zip(&ports) {
            let member_dir = dir.path().join(format!("broker-{id}"));
            std::fs::create_dir(&member_dir).expect("broker directory");
            let address = format!("{host}:{port}");
            let mut properties =
                server_properties(*id, &address, *controller, &voters, &member_dir);
            properties.extend_from_slice(extra);
            std::fs::write(
                member_dir.join("server.properties"),
                properties.join("\n") + "\n",
            )
            .expect("server.properties");
            std::fs::write(
                member_dir.join("log4j2.properties"),
                log4j_config(&member_dir.join("broker.log")),
            )
            .expect("log4j2.properties");
            members.push(Member {
                id: *id,
                dir: member_dir,
                address,
                child: None,
            });
        }
        // Each format is a JVM of its own: side by side, they take the time
        // of one.
        std::thread::scope(|scope| {
            for member in &members {
                let lib = &lib;
                scope.spawn(move || {
                    // A static quorum: no --standalone nor
                    // --initial-controllers, as controller.quorum.voters
                    // names the three.
                    let formatted = java(lib, &member.dir, Run::Tool)
                        .args(["kafka.tools.StorageTool", "format", "-t", CLUSTER_ID, "-c"])
                        .arg(member.dir.join("server.properties"))
                        .output()
                        .expect("run kafka.tools.StorageTool");
                    assert!(
                        formatted.status.success(),
                        "formatting broker {}'s log directory failed:\n{}{}",
                        member.id,
                        String::from_utf8_lossy(&formatted.stdout),
                        String::from_utf8_lossy(&formatted.stderr)
                    );
                });
            }
        });
        let bootstrap = members
            .iter()
            .map(|m| m.address.as_str())
            .collect::<Vec<_>>()
            .join(",");
        let client = ClientConfig::new()
            .set("bootstrap.servers", &bootstrap)
            .create()
            .expect("metadata client");
        let mut cluster = Self {
            members,
            bootstrap,
            client,
            started_in: Duration::ZERO,
            _dir: dir,
        };
        for id in BROKER_IDS {
            cluster.spawn(id);
        }
        cluster.await_ready(starting + STARTED);
        cluster.started_in = starting.elapsed();
        cluster
    }

    /// `host:port,host:port,host:port` for `bootstrap.servers`.
    pub fn bootstrap(&self) -> &str {
        &self.bootstrap
    }

    /// How long [`BrokerCluster::start`] took, formatting included.
    pub fn started_in(&self) -> Duration {
        self.started_in
    }

    /// Broker `id`'s process id, while it runs.
    pub fn pid(&self, id: i32) -> Option<u32> {
        self.member(id).child.as_ref().map(Child::id)
    }

    /// Kills broker `id` (SIGKILL to the process started for it: no clean
    /// shutdown, no leadership handed over).
    pub fn kill(&mut self, id: i32) {
        if let Some(mut child) = self.member_mut(id).child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Freezes broker `id` (SIGSTOP to the process started for it): its
    /// connections stay open and it answers nothing, heartbeats to the
    /// controller and fetches as a follower included, until
    /// [`BrokerCluster::resume`] or until the controller fences it
    /// (`broker.session.timeout.ms`).
    ///
    /// # Panics
    /// It is not running, or `kill` fails.
    pub fn pause(&self, id: i32) {
        self.signal(id, "-STOP");
    }

    /// Lets a paused broker `id` go on (SIGCONT).
    ///
    /// # Panics
    /// As [`BrokerCluster::pause`].
    pub fn resume(&self, id: i32) {
        self.signal(id, "-CONT");
    }

    fn signal(&self, id: i32, signal: &str) {
        let pid = self
            .pid(id)
            .unwrap_or_else(|| panic!("broker {id} is not running"));
        let status = std::process::Command::new("kill")
            .arg(signal)
            .arg(pid.to_string())
            .status()
            .expect("run kill");
        assert!(status.success(), "kill {signal} {pid} failed");
    }

    /// Starts broker `id` again on its ports and log directory, and waits
    /// until it answers metadata that lists it: it has caught up with the
    /// cluster's metadata and the controller unfenced it. Its replicas may
    /// still be catching up ([`BrokerCluster::await_in_sync`]).
    ///
    /// # Panics
    /// It exits or does not answer within 90 s.
    pub fn start_again(&mut self, id: i32) {
        self.kill(id);
        self.spawn(id);
        let deadline = Instant::now() + STARTED;
        let own: BaseConsumer = ClientConfig::new()
            .set("bootstrap.servers", &self.member(id).address)
            .create()
            .expect("metadata client");
        loop {
            if let Ok(metadata) = own.fetch_metadata(None, METADATA) {
                if metadata.brokers().iter().any(|b| b.id() == id) {
                    return;
                }
            }
            self.assert_running(deadline, &format!("broker {id} answers metadata again"));
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The leader of each partition of `topic`, by partition, as the
    /// cluster's metadata says now (a broker just killed stays leader
    /// until the controller fences it). Waits until the topic exists and
    /// every partition has a leader.
    ///
    /// # Panics
    /// Not so within 60 s.
    pub fn leaders(&self, topic: &str) -> Vec<i32> {
        let deadline = Instant::now() + IN_SYNC;
        loop {
            let mut last = String::from("no metadata answer");
            if let Ok(metadata) = self.client.fetch_metadata(Some(topic), METADATA) {
                match metadata.topics().iter().find(|t| t.name() == topic) {
                    Some(t) if t.error().is_none() && !t.partitions().is_empty() => {
                        let mut leaders: Vec<(i32, i32)> = t
                            .partitions()
                            .iter()
                            .map(|p| (p.id(), p.leader()))
                            .collect();
                        leaders.sort_unstable();
                        if leaders.iter().all(|(_, leader)| *leader >= 0) {
                            return leaders.into_iter().map(|(_, leader)| leader).collect();
                        }
                        last = format!("partitions without a leader: {leaders:?}");
                    }
                    other => last = format!("the topic's metadata: {other:?}"),
                }
            }
            assert!(
                Instant::now() < deadline,
                "{topic}'s leaders are not known within {IN_SYNC:?}: {last}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The brokers holding a replica of `topic`'s `partition`, leader
    /// first.
    ///
    /// # Panics
    /// As [`BrokerCluster::leaders`], or the topic has no such partition.
    pub fn replicas_of(&self, topic: &str, partition: i32) -> Vec<i32> {
        let leader = self.leader_of(topic, partition);
        let metadata = self
            .client
            .fetch_metadata(Some(topic), METADATA)
            .expect("metadata");
        let mut replicas: Vec<i32> = metadata
            .topics()
            .iter()
            .filter(|t| t.name() == topic)
            .flat_map(|t| t.partitions())
            .filter(|p| p.id() == partition)
            .flat_map(|p| p.replicas().to_vec())
            .collect();
        replicas.sort_by_key(|&id| (id != leader, id));
        replicas
    }

    /// The leader of `topic`'s `partition` ([`BrokerCluster::leaders`]).
    ///
    /// # Panics
    /// As [`BrokerCluster::leaders`], or the topic has no such partition.
    pub fn leader_of(&self, topic: &str, partition: i32) -> i32 {
        let leaders = self.leaders(topic);
        *usize::try_from(partition)
            .ok()
            .and_then(|p| leaders.get(p))
            .unwrap_or_else(|| panic!("{topic} has no partition {partition}: {leaders:?}"))
    }

    /// The broker that coordinates consumer group `group`: the leader of
    /// the `__consumer_offsets` partition the group's offsets and
    /// membership are written to ([`offsets_partition`]). That partition
    /// exists once some group has asked for its coordinator.
    ///
    /// # Panics
    /// As [`BrokerCluster::leaders`].
    pub fn group_coordinator(&self, group: &str) -> i32 {
        self.leader_of("__consumer_offsets", offsets_partition(group))
    }

    /// Waits until every replica of every partition is in sync with its
    /// leader: a broker started again has caught up, and another may be
    /// killed without leaving a partition below `min.insync.replicas`.
    ///
    /// # Panics
    /// Not so within 60 s.
    pub fn await_in_sync(&mut self) {
        let deadline = Instant::now() + IN_SYNC;
        loop {
            let behind = match self.client.fetch_metadata(None, METADATA) {
                Ok(metadata) => out_of_sync(&metadata),
                Err(e) => vec![format!("no metadata answer: {e}")],
            };
            if behind.is_empty() {
                return;
            }
            self.assert_running(
                deadline,
                &format!("every replica in sync; not yet: {behind:?}"),
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// What each broker logged so far (warnings and errors, and its
    /// starts) and printed, for a failing test.
    pub fn log(&self) -> String {
        let mut out = String::new();
        for member in &self.members {
            let read = |name: &str| std::fs::read_to_string(member.dir.join(name));
            out.push_str(&format!(
                "--- broker {} ({}) ---\n{}{}",
                member.id,
                member.address,
                read("broker.log").unwrap_or_default(),
                read("broker.out").unwrap_or_default()
            ));
        }
        out
    }

    fn member(&self, id: i32) -> &Member {
        self.members
            .iter()
            .find(|m| m.id == id)
            .unwrap_or_else(|| panic!("no broker {id}: the ids are {BROKER_IDS:?}"))
    }

    fn member_mut(&mut self, id: i32) -> &mut Member {
        self.members
            .iter_mut()
            .find(|m| m.id == id)
            .unwrap_or_else(|| panic!("no broker {id}: the ids are {BROKER_IDS:?}"))
    }

    fn spawn(&mut self, id: i32) {
        let member = self.member_mut(id);
        let out = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(member.dir.join("broker.out"))
            .expect("broker output");
        let err = out.try_clone().expect("broker output");
        let child = java(&kafka_lib(), &member.dir, Run::Broker)
            .arg("kafka.Kafka")
            .arg(member.dir.join("server.properties"))
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start broker {id} with java: {e}"));
        member.child = Some(child);
    }

    /// Waits until metadata lists the three brokers, then until a producer
    /// id can be had: the transaction coordinator is loaded at the first
    /// one asked, and answers "coordinator load in progress" until then
    /// (which the nodes' idempotent producers would log as warnings).
    fn await_ready(&mut self, deadline: Instant) {
        loop {
            match self.client.fetch_metadata(None, METADATA) {
                Ok(metadata) if metadata.brokers().len() == BROKER_IDS.len() => break,
                _ => self.assert_running(deadline, "metadata listing three brokers"),
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let producer: BaseProducer = ClientConfig::new()
            .set("bootstrap.servers", &self.bootstrap)
            .set("transactional.id", "colo-tests-broker-cluster-ready")
            .create()
            .expect("producer");
        while let Err(e) = producer.init_transactions(Duration::from_secs(5)) {
            self.assert_running(deadline, &format!("a producer id (last: {e})"));
        }
    }

    /// Panics, with the brokers' logs, when one of those started has
    /// exited or `deadline` has passed waiting for `what`.
    fn assert_running(&mut self, deadline: Instant, what: &str) {
        for member in &mut self.members {
            let exited = member
                .child
                .as_mut()
                .and_then(|child| child.try_wait().ok().flatten());
            if let Some(status) = exited {
                let id = member.id;
                panic!("broker {id} exited ({status}); the logs:\n{}", self.log());
            }
        }
        assert!(
            Instant::now() < deadline,
            "the brokers did not give {what} in time; their logs:\n{}",
            self.log()
        );
    }
}

impl Drop for BrokerCluster {
    fn drop(&mut self) {
        for id in BROKER_IDS {
            self.kill(id);
        }
    }
}

/// Broker `id`'s `server.properties`.
fn server_properties(
    id: i32,
    address: &str,
    controller: u16,
    voters: &str,
    dir: &std::path::Path,
) -> Vec<String> {
    vec![
        "process.roles=broker,controller".to_string(),
        format!("node.id={id}"),
        format!("controller.quorum.voters={voters}"),
        "controller.listener.names=CONTROLLER".to_string(),
        format!("listeners=PLAINTEXT://{address},CONTROLLER://127.0.0.1:{controller}"),
        format!("advertised.listeners=PLAINTEXT://{address}"),
        "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT".to_string(),
        "inter.broker.listener.name=PLAINTEXT".to_string(),
        format!("log.dirs={}", dir.join("data").display()),
        // Every topic, internal or not, on all three brokers, and a write
        // acknowledged (acks=all) only once two have it: a broker killed
        // loses nothing that was acknowledged.
        "default.replication.factor=3".to_string(),
        "min.insync.replicas=2".to_string(),
        "offsets.topic.replication.factor=3".to_string(),
        format!("offsets.topic.num.partitions={OFFSETS_PARTITIONS}"),
        "transaction.state.log.replication.factor=3".to_string(),
        "transaction.state.log.min.isr=2".to_string(),
        // Made and loaded when the cluster starts (see await_ready): a few
        // partitions rather than 50 keep that short.
        "transaction.state.log.num.partitions=4".to_string(),
        "share.coordinator.state.topic.replication.factor=3".to_string(),
        "share.coordinator.state.topic.min.isr=2".to_string(),
        // A killed broker is fenced (its leaderships move, it leaves every
        // in-sync set) 4 s after its last heartbeat rather than Kafka's
        // 9 s: the tests' records wait for that.
        "broker.session.timeout.ms=4000".to_string(),
        "broker.heartbeat.interval.ms=500".to_string(),
        // A group's first member is assigned at once rather than 3 s
        // later: tests start groups all the time.
        "group.initial.rebalance.delay.ms=0".to_string(),
        // Topics are created by colo (kafka.create_topics) or by the
        // test, with the partition counts they need.
        "auto.create.topics.enable=false".to_string(),
        "num.partitions=1".to_string(),
    ]
}

/// The partitions of `metadata` with a replica out of the in-sync set or
/// no leader, named.
fn out_of_sync(metadata: &Metadata) -> Vec<String> {
    let mut behind = Vec::new();
    for topic in metadata.topics() {
        for partition in topic.partitions() {
            let mut isr = partition.isr().to_vec();
            let mut replicas = partition.replicas().to_vec();
            isr.sort_unstable();
            replicas.sort_unstable();
            if partition.leader() < 0 || isr != replicas {
                behind.push(format!(
                    "{}/{}: leader {}, replicas {replicas:?}, in sync {isr:?}",
                    topic.name(),
                    partition.id(),
                    partition.leader()
                ));
            }
        }
    }
    behind
}

/// The `__consumer_offsets` partition of `group`, as Kafka's group
/// coordinator places it: `Utils.abs(group.hashCode()) % partitions`, with
/// Java's `String.hashCode` (over UTF-16 code units, wrapping).
pub fn offsets_partition(group: &str) -> i32 {
    let hash = group
        .encode_utf16()
        .fold(0i32, |h, c| h.wrapping_mul(31).wrapping_add(i32::from(c)));
    // Kafka's Utils.abs: 0 for i32::MIN, whose absolute value overflows.
    let abs = if hash == i32::MIN { 0 } else { hash.abs() };
    abs % OFFSETS_PARTITIONS
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Java's `"colo.user".hashCode()` is 1_919_120_234 and
    /// `"polygenelubricants".hashCode()` is `Integer.MIN_VALUE`.
    #[test]
    fn offsets_partition_follows_javas_string_hash() {
        assert_eq!(offsets_partition("colo.user"), 1_919_120_234 % 9);
        assert_eq!(offsets_partition("polygenelubricants"), 0);
        assert_eq!(offsets_partition(""), 0);
    }
}
