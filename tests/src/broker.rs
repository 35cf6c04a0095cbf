//! The broker of the Kafka tests and benchmarks: Apache Kafka, one KRaft
//! process that is broker and controller, on loopback ports of its own,
//! its log directory in a temporary directory, stopped by its PID when
//! dropped. Its jars come from Maven Central (`tests/kafka/pom.xml`,
//! copied into `target/kafka/lib` by `tests/kafka/fetch.sh`, which the
//! test command runs and which runs here when they are missing).

use crate::tls::Certs;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::producer::{BaseProducer, Producer};
use rdkafka::ClientConfig;
use security::{Security, Tls};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

mod security;
pub use security::HOST;

/// Any cluster id will do (each broker is a cluster of its own): a UUID,
/// base64 without padding, as `kafka-storage.sh random-uuid` prints them.
const CLUSTER_ID: &str = "Y29sby10ZXN0LWJyb2tlcg";

/// How long a broker may take to answer metadata after it was started.
const STARTED: Duration = Duration::from_secs(60);

/// A running broker.
#[derive(Debug)]
pub struct Broker {
    child: Option<Child>,
    bootstrap: String,
    /// The client properties a client of this broker needs besides
    /// `bootstrap.servers` (SASL's, for [`Broker::start_authenticating`]).
    client: Vec<(String, String)>,
    /// How long formatting its log directory took.
    formatted_in: Duration,
    dir: Dir,
}

/// Where a broker keeps its data, config and log.
#[derive(Debug)]
enum Dir {
    /// Its own, removed with it.
    Own(tempfile::TempDir),
    /// The shared broker's, which outlives the test.
    Shared(PathBuf),
}

impl Dir {
    fn path(&self) -> &Path {
        match self {
            Self::Own(dir) => dir.path(),
            Self::Shared(dir) => dir,
        }
    }
}

/// The environment variable through which the test command hands the
/// tests the broker they share (`BOOTSTRAP=DIR`; `cargo run -p colo-tests
/// --bin shared-broker`). Unset, each test starts its own.
pub const SHARED: &str = "COLO_TEST_BROKER";

/// What a broker is started with beyond the defaults.
#[derive(Debug, Default)]
struct Options {
    /// `server.properties` lines added to the defaults.
    properties: Vec<String>,
    /// What its clients' listener asks of them.
    security: Security,
    /// Its clients' port, when the test chose it.
    port: Option<u16>,
}

impl Broker {
    /// Starts a broker and waits until it answers metadata.
    ///
    /// # Panics
    /// Java or the broker's jars cannot be had, or the broker does not
    /// answer within a minute.
    pub fn start() -> Self {
        match std::env::var(SHARED) {
            Ok(shared) if !shared.is_empty() => Self::shared(&shared),
            _ => Self::start_own(),
        }
    }

    /// Starts a broker of the test's own even where tests share one: for
    /// a test that restarts it or measures it.
    ///
    /// # Panics
    /// As [`Broker::start`].
    pub fn start_own() -> Self {
        Self::start_with(Options::default())
    }

    /// The broker the test command started for the tests to share
    /// (`SHARED` is `bootstrap=DIR`): not stopped when dropped.
    fn shared(shared: &str) -> Self {
        let (bootstrap, dir) = shared
            .split_once('=')
            .unwrap_or_else(|| panic!("{SHARED} is BOOTSTRAP=DIR, not {shared:?}"));
        Self {
            child: None,
            bootstrap: bootstrap.to_string(),
            client: Vec::new(),
            formatted_in: Duration::ZERO,
            dir: Dir::Shared(PathBuf::from(dir)),
        }
    }

    /// Starts a broker whose clients' port is `port` (one from
    /// [`crate::process::free_port`]): a node may be started on it first.
    ///
    /// # Panics
    /// As [`Broker::start`].
    pub fn start_on(port: u16) -> Self {
        Self::start_with(Options {
            port: Some(port),
            ..Options::default()
        })
    }

    /// A broker of the test's own whose data survives
    /// [`Broker::restart`] (its log directory is on disk).
    ///
    /// # Panics
    /// As [`Broker::start`].
    pub fn start_durable() -> Self {
        Self::start_own()
    }

    /// Starts a broker whose log cleaner compacts soon: each partition's
    /// active segment rolls every `every` (the cleaner never touches the
    /// active one), and the cleaner looks every `every` at any partition
    /// with something to clean, keeping only the newest record of each
    /// key. Tombstones stay for `every` too (`delete.retention.ms`), then
    /// go at the cleaner's next pass.
    ///
    /// # Panics
    /// As [`Broker::start`], or `every` is not a duration.
    pub fn start_compacting(every: &str) -> Self {
        Self::start_with(Options {
            properties: compacting(every),
            ..Options::default()
        })
    }

    /// Starts a broker whose client listener asks for SASL (SCRAM-SHA-256,
    /// over plain text) and knows the user `user`.
    ///
    /// # Panics
    /// As [`Broker::start`].
    pub fn start_authenticating(user: &str, password: &str) -> Self {
        Self::start_with(Options {
            security: Security::SaslPlaintext(user.to_string(), password.to_string()),
            ..Options::default()
        })
    }

    /// Starts a broker whose client listener speaks TLS only, with the
    /// certificate `certs` has for [`HOST`] (issued now if it has none).
    /// Its clients trust `certs`' CA ([`Broker::client`]).
    ///
    /// # Panics
    /// As [`Broker::start`].
    pub fn start_tls(certs: &Certs) -> Self {
        Self::start_with(Options {
            security: Security::Ssl(Tls::from(certs)),
            ..Options::default()
        })
    }

    /// Starts a broker whose client listener asks for SASL with
    /// SCRAM-SHA-512 over TLS ([`Broker::start_tls`]'s) and knows the user
    /// `user`.
    ///
    /// # Panics
    /// As [`Broker::start`].
    pub fn start_sasl_tls(certs: &Certs, user: &str, password: &str) -> Self {
        Self::start_with(Options {
            security: Security::SaslSsl(Tls::from(certs), user.to_string(), password.to_string()),
            ..Options::default()
        })
    }

    fn start_with(options: Options) -> Self {
        let lib = kafka_lib();
        let dir = tempfile::tempdir().expect("broker directory");
        let port = options.port.unwrap_or_else(crate::process::free_port);
        let controller = crate::process::free_port();
        let bootstrap = format!("127.0.0.1:{port}");
        let mut properties = vec![
            "process.roles=broker,controller".to_string(),
            "node.id=1".to_string(),
            format!("controller.quorum.bootstrap.servers=127.0.0.1:{controller}"),
            "controller.listener.names=CONTROLLER".to_string(),
            format!("log.dirs={}", dir.path().join("data").display()),
            // One broker: its internal topics cannot be replicated.
            "offsets.topic.replication.factor=1".to_string(),
            "offsets.topic.num.partitions=12".to_string(),
            "transaction.state.log.replication.factor=1".to_string(),
            "transaction.state.log.min.isr=1".to_string(),
            // Made and loaded when the broker starts (see await_metadata):
            // a few partitions rather than 50 keep that short.
            "transaction.state.log.num.partitions=4".to_string(),
            "share.coordinator.state.topic.replication.factor=1".to_string(),
            "share.coordinator.state.topic.min.isr=1".to_string(),
            // A group's first member is assigned at once rather than 3 s
            // later: tests start groups all the time.
            "group.initial.rebalance.delay.ms=0".to_string(),
            // Consumer-protocol (KIP-848) groups: a member found dead
            // after 6 s and heartbeating every 500 ms, as the tests set
            // classic groups' members (their minimums are 45 s and 5 s).
            "group.consumer.min.session.timeout.ms=6000".to_string(),
            "group.consumer.session.timeout.ms=6000".to_string(),
            "group.consumer.min.heartbeat.interval.ms=500".to_string(),
            "group.consumer.heartbeat.interval.ms=500".to_string(),
            // Topics are created by colo (kafka.create_topics) or by the
            // test, with the partition counts they need.
            "auto.create.topics.enable=false".to_string(),
            "num.partitions=1".to_string(),
        ];
        let security = &options.security;
        match security.protocol() {
            None => properties.extend([
                format!("listeners=PLAINTEXT://{bootstrap},CONTROLLER://127.0.0.1:{controller}"),
                format!("advertised.listeners=PLAINTEXT://{bootstrap}"),
                "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT"
                    .to_string(),
                "inter.broker.listener.name=PLAINTEXT".to_string(),
            ]),
            Some(protocol) => {
                // Clients authenticate; the broker talks to itself on a
                // listener of its own.
                let internal = crate::process::free_port();
                properties.extend([
                    format!("listeners=CLIENT://{bootstrap},INTERNAL://127.0.0.1:{internal},CONTROLLER://127.0.0.1:{controller}"),
                    format!("advertised.listeners=CLIENT://{bootstrap},INTERNAL://127.0.0.1:{internal}"),
                    format!("listener.security.protocol.map=CLIENT:{protocol},INTERNAL:PLAINTEXT,CONTROLLER:PLAINTEXT"),
                    "inter.broker.listener.name=INTERNAL".to_string(),
                ]);
                properties.extend(security.listener_properties("client"));
            }
        }
        let client = security.client();
        properties.extend(options.properties);
        let config = dir.path().join("server.properties");
        std::fs::write(&config, properties.join("\n") + "\n").expect("server.properties");
        std::fs::write(
            dir.path().join("log4j2.properties"),
            log4j_config(&dir.path().join("broker.log")),
        )
        .expect("log4j2.properties");

        let mut format = java(&lib, dir.path(), Run::Tool);
        format.args(["kafka.tools.StorageTool", "format", "--standalone", "-t"]);
        format.arg(CLUSTER_ID).arg("-c").arg(&config);
        if let Some((mechanism, user, password)) = options.security.scram() {
            format
                .arg("--add-scram")
                .arg(format!("{mechanism}=[name={user},password={password}]"));
        }
        let formatting = Instant::now();
        let formatted = format.output().expect("run kafka.tools.StorageTool");
        let formatted_in = formatting.elapsed();
        assert!(
            formatted.status.success(),
            "formatting the broker's log directory failed:\n{}{}",
            String::from_utf8_lossy(&formatted.stdout),
            String::from_utf8_lossy(&formatted.stderr)
        );
        let mut broker = Self {
            child: None,
            bootstrap,
            client,
            formatted_in,
            dir: Dir::Own(dir),
        };
        broker.spawn();
        broker
    }

    fn spawn(&mut self) {
        let out = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.path().join("broker.out"))
            .expect("broker output");
        let err = out.try_clone().expect("broker output");
        let child = java(&kafka_lib(), self.dir.path(), Run::Broker)
            .arg("kafka.Kafka")
            .arg(self.dir.path().join("server.properties"))
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start the broker with java: {e}"));
        self.child = Some(child);
        self.await_metadata();
    }

    /// Waits until the broker lists itself in a metadata answer: it then
    /// takes topics, produces and groups.
    fn await_metadata(&mut self) {
        let deadline = Instant::now() + STARTED;
        while TcpStream::connect(&self.bootstrap).is_err() {
            self.assert_running(deadline);
            std::thread::sleep(Duration::from_millis(50));
        }
        let mut config = ClientConfig::new();
        config.set("bootstrap.servers", &self.bootstrap);
        for (key, value) in &self.client {
            config.set(key, value);
        }
        let consumer: BaseConsumer = config.create().expect("metadata client");
        loop {
            match consumer.fetch_metadata(None, Duration::from_secs(2)) {
                Ok(metadata) if !metadata.brokers().is_empty() => break,
                _ => self.assert_running(deadline),
            }
        }
        // A broker loads its transaction coordinator at the first producer
        // id asked of it, and answers "coordinator load in progress" until
        // then, which librdkafka logs as a warning in every idempotent
        // producer of the nodes under test: asked once here, before them.
        let producer: BaseProducer = config
            .set("transactional.id", "colo-tests-broker-ready")
            .create()
            .expect("producer");
        while let Err(e) = producer.init_transactions(Duration::from_secs(5)) {
            self.assert_running(deadline);
            eprintln!("the broker's transaction coordinator is not ready yet: {e}");
        }
    }

    fn assert_running(&mut self, deadline: Instant) {
        let exited = self
            .child
            .as_mut()
            .and_then(|child| child.try_wait().ok().flatten());
        assert!(
            exited.is_none(),
            "the broker exited ({exited:?}); its log:\n{}",
            self.log()
        );
        assert!(
            Instant::now() < deadline,
            "the broker did not answer metadata on {} within {STARTED:?}; its log:\n{}",
            self.bootstrap,
            self.log()
        );
    }

    /// Kills the broker (SIGKILL: no clean shutdown) and starts it again on
    /// the same ports and log directory.
    pub fn restart(&mut self) {
        assert!(
            matches!(self.dir, Dir::Own(_)),
            "the shared broker is not the test's to restart: start one of its own (Broker::start_own)"
        );
        self.kill();
        self.spawn();
    }

    fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// The broker process's id, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// How long formatting its log directory took, before it started.
    pub fn formatted_in(&self) -> Duration {
        self.formatted_in
    }

    /// The protocol of the consumer group `group` as the broker knows it
    /// (`Classic` or `Consumer`), from Kafka's own `kafka-groups.sh
    /// --list`; `None` if it does not know the group.
    ///
    /// # Panics
    /// The tool cannot be run, or fails.
    pub fn group_type(&self, group: &str) -> Option<String> {
        let listed = self.tool("org.apache.kafka.tools.GroupsCommand", &["--list"]);
        let out = String::from_utf8_lossy(&listed.stdout);
        assert!(
            listed.status.success(),
            "kafka-groups --list failed:\n{out}{}",
            String::from_utf8_lossy(&listed.stderr)
        );
        // GROUP TYPE PROTOCOL, under a header.
        out.lines().find_map(|line| {
            let mut columns = line.split_whitespace();
            (columns.next() == Some(group)).then(|| columns.next().unwrap_or_default().to_string())
        })
    }

    /// The members of the consumer group `group` as the broker knows them
    /// now (their client ids), from Kafka's own `kafka-consumer-groups.sh
    /// --describe --members`; empty while the group has none, or is
    /// between generations.
    ///
    /// # Panics
    /// The tool cannot be run.
    pub fn group_members(&self, group: &str) -> Vec<String> {
        let described = self.tool(
            "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand",
            &["--describe", "--members", "--group", group],
        );
        // GROUP CONSUMER-ID HOST CLIENT-ID #PARTITIONS (KIP-848 groups add
        // columns after these), under a header.
        String::from_utf8_lossy(&described.stdout)
            .lines()
            .filter_map(|line| {
                let columns: Vec<&str> = line.split_whitespace().collect();
                (columns.first() == Some(&group) && columns.len() >= 4)
                    .then(|| columns[3].to_string())
            })
            .collect()
    }

    /// Runs one of Kafka's own command-line tools (its class) against this
    /// broker with the clients' settings, and waits for its output.
    ///
    /// # Panics
    /// The tool cannot be run.
    fn tool(&self, class: &str, args: &[&str]) -> std::process::Output {
        // A file of this call's own: tests share a broker's directory.
        let config = tempfile::NamedTempFile::new().expect("tool.properties");
        let lines: Vec<String> = self
            .client
            .iter()
            .map(|(key, value)| format!("{key}={value}"))
            .collect();
        std::fs::write(config.path(), lines.join("\n") + "\n").expect("tool.properties");
        java(&kafka_lib(), self.dir.path(), Run::Tool)
            .arg(class)
            .args(["--bootstrap-server", &self.bootstrap])
            .args(args)
            .arg("--command-config")
            .arg(config.path())
            .output()
            .unwrap_or_else(|e| panic!("run {class}: {e}"))
    }

    /// Its directory: data, config and log.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// `host:port` for `bootstrap.servers`.
    pub fn bootstrap(&self) -> &str {
        &self.bootstrap
    }

    /// The properties a client of this broker sets besides
    /// `bootstrap.servers`: none for plain text, else the security
    /// protocol, the CA to trust and the SASL user.
    pub fn client(&self) -> &[(String, String)] {
        &self.client
    }

    /// What the broker logged so far (warnings and errors, and its start),
    /// and what it printed.
    pub fn log(&self) -> String {
        let read = |name: &str| std::fs::read_to_string(self.dir.path().join(name));
        format!(
            "{}{}",
            read("broker.log").unwrap_or_default(),
            read("broker.out").unwrap_or_default()
        )
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        self.kill();
    }
}

/// What runs in a `java` process.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Run {
    /// A tool that runs for a second: compiled by the quick compiler only.
    Tool,
    /// The broker, with a heap of Kafka's default size.
    Broker,
}

/// `java` with the broker's class path and logging config, run in `dir`.
pub(crate) fn java(lib: &Path, dir: &Path, run: Run) -> Command {
    let mut java = Command::new("java");
    match run {
        Run::Tool => java.args(["-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC"]),
        Run::Broker => java.args(["-Xms256m", "-Xmx1g"]),
    };
    java.arg(format!(
        "-Dlog4j2.configurationFile={}",
        dir.join("log4j2.properties").display()
    ))
    .arg("-cp")
    .arg(format!("{}/*", lib.display()))
    .current_dir(dir);
    java
}

/// Warnings and errors to `file`, with the lines that say the broker
/// started and stopped.
pub(crate) fn log4j_config(file: &Path) -> String {
    format!(
        "status = error
appender.file.type = File
appender.file.name = FILE
appender.file.fileName = {}
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = warn
rootLogger.appenderRef.file.ref = FILE
logger.server.name = kafka.server.KafkaRaftServer
logger.server.level = info
",
        file.display()
    )
}

/// The broker's jars, fetched first when they are missing or the pom
/// changed (the test command fetches them before any test runs; this is
/// for a test run on its own), checked once per test process.
pub(crate) fn kafka_lib() -> PathBuf {
    static FETCHED: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    FETCHED.get_or_init(fetch).clone()
}

/// Runs `tests/kafka/fetch.sh`, which does nothing when the jars match the
/// pom (a changed pom fetches again).
fn fetch() -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the workspace")
        .to_path_buf();
    let fetched = Command::new("bash")
        .arg(root.join("tests/kafka/fetch.sh"))
        .output()
        .expect("run tests/kafka/fetch.sh");
    assert!(
        fetched.status.success(),
        "cannot fetch Apache Kafka's jars (tests/kafka/fetch.sh; it needs Maven and Maven Central):\n{}",
        String::from_utf8_lossy(&fetched.stderr)
    );
    root.join("target/kafka/lib")
}

/// The `server.properties` lines of a broker whose log cleaner compacts
/// every `every` ([`Broker::start_compacting`]).
///
/// # Panics
/// `every` is not a duration.
pub fn compacting(every: &str) -> Vec<String> {
    let ms = humantime::parse_duration(every)
        .unwrap_or_else(|e| panic!("{every:?} is not a duration: {e}"))
        .as_millis();
    vec![
        format!("log.roll.ms={ms}"),
        format!("log.cleaner.backoff.ms={ms}"),
        "log.cleaner.min.cleanable.ratio=0.01".to_string(),
        "log.cleaner.min.compaction.lag.ms=0".to_string(),
        // Tombstones go at the next pass after `every`, rather than a day
        // later.
        format!("log.cleaner.delete.retention.ms={ms}"),
        "log.segment.delete.delay.ms=0".to_string(),
    ]
}
