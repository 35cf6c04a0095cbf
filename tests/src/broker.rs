//! The broker of the Kafka tests and benchmarks: Apache Kafka, one KRaft
//! process that is broker and controller, on loopback ports of its own,
//! its log directory in a temporary directory, stopped by its PID when
//! dropped. Its jars come from Maven Central (`tests/kafka/pom.xml`,
//! copied into `target/kafka/lib` by `tests/kafka/fetch.sh`, which the
//! test command runs and which runs here when they are missing).

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::producer::{BaseProducer, Producer};
use rdkafka::ClientConfig;
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

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
    dir: tempfile::TempDir,
}

/// What a broker is started with beyond the defaults.
#[derive(Debug, Default)]
struct Options {
    /// `server.properties` lines added to the defaults.
    properties: Vec<String>,
    /// SCRAM-SHA-256 users (name, password), with a SASL listener.
    scram: Option<(String, String)>,
}

impl Broker {
    /// Starts a broker and waits until it answers metadata.
    ///
    /// # Panics
    /// Java or the broker's jars cannot be had, or the broker does not
    /// answer within a minute.
    pub fn start() -> Self {
        Self::start_with(Options::default())
    }

    /// A broker whose data survives [`Broker::restart`]: every broker's
    /// does (its log directory is on disk), so this is [`Broker::start`].
    ///
    /// # Panics
    /// As [`Broker::start`].
    pub fn start_durable() -> Self {
        Self::start()
    }

    /// Starts a broker whose log cleaner compacts soon: each partition's
    /// active segment rolls every `every` (the cleaner never touches the
    /// active one), and the cleaner looks every `every` at any partition
    /// with something to clean, keeping only the newest record of each
    /// key. Tombstones stay for their topic's `delete.retention.ms`.
    ///
    /// # Panics
    /// As [`Broker::start`], or `every` is not a duration.
    pub fn start_compacting(every: &str) -> Self {
        let ms = humantime::parse_duration(every)
            .unwrap_or_else(|e| panic!("{every:?} is not a duration: {e}"))
            .as_millis();
        Self::start_with(Options {
            properties: vec![
                format!("log.roll.ms={ms}"),
                format!("log.cleaner.backoff.ms={ms}"),
                "log.cleaner.min.cleanable.ratio=0.01".to_string(),
                "log.cleaner.min.compaction.lag.ms=0".to_string(),
                "log.segment.delete.delay.ms=0".to_string(),
            ],
            scram: None,
        })
    }

    /// Starts a broker whose client listener asks for SASL (SCRAM-SHA-256,
    /// over plain text) and knows the user `user`.
    ///
    /// # Panics
    /// As [`Broker::start`].
    pub fn start_authenticating(user: &str, password: &str) -> Self {
        Self::start_with(Options {
            properties: Vec::new(),
            scram: Some((user.to_string(), password.to_string())),
        })
    }

    fn start_with(options: Options) -> Self {
        let lib = kafka_lib();
        let dir = tempfile::tempdir().expect("broker directory");
        let port = crate::process::free_port();
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
            // Topics are created by colo (kafka.create_topics) or by the
            // test, with the partition counts they need.
            "auto.create.topics.enable=false".to_string(),
            "num.partitions=1".to_string(),
        ];
        let mut client = Vec::new();
        match &options.scram {
            None => properties.extend([
                format!("listeners=PLAINTEXT://{bootstrap},CONTROLLER://127.0.0.1:{controller}"),
                format!("advertised.listeners=PLAINTEXT://{bootstrap}"),
                "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT"
                    .to_string(),
                "inter.broker.listener.name=PLAINTEXT".to_string(),
            ]),
            Some((user, password)) => {
                // Clients authenticate; the broker talks to itself on a
                // listener of its own.
                let internal = crate::process::free_port();
                properties.extend([
                    format!("listeners=CLIENT://{bootstrap},INTERNAL://127.0.0.1:{internal},CONTROLLER://127.0.0.1:{controller}"),
                    format!("advertised.listeners=CLIENT://{bootstrap},INTERNAL://127.0.0.1:{internal}"),
                    "listener.security.protocol.map=CLIENT:SASL_PLAINTEXT,INTERNAL:PLAINTEXT,CONTROLLER:PLAINTEXT".to_string(),
                    "inter.broker.listener.name=INTERNAL".to_string(),
                    "sasl.enabled.mechanisms=SCRAM-SHA-256".to_string(),
                    "listener.name.client.scram-sha-256.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;".to_string(),
                ]);
                client.extend([
                    (
                        "security.protocol".to_string(),
                        "SASL_PLAINTEXT".to_string(),
                    ),
                    ("sasl.mechanism".to_string(), "SCRAM-SHA-256".to_string()),
                    ("sasl.username".to_string(), user.clone()),
                    ("sasl.password".to_string(), password.clone()),
                ]);
            }
        }
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
        if let Some((user, password)) = &options.scram {
            format
                .arg("--add-scram")
                .arg(format!("SCRAM-SHA-256=[name={user},password={password}]"));
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
            dir,
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

    /// `host:port` for `bootstrap.servers`.
    pub fn bootstrap(&self) -> &str {
        &self.bootstrap
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

/// The broker's jars, fetched first when they are missing (the test
/// command fetches them before any test runs; this is for a test run on
/// its own).
pub(crate) fn kafka_lib() -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the workspace")
        .to_path_buf();
    let lib = root.join("target/kafka/lib");
    if !lib.join(".pom-sha256").is_file() {
        let fetched = Command::new("bash")
            .arg(root.join("tests/kafka/fetch.sh"))
            .output()
            .expect("run tests/kafka/fetch.sh");
        assert!(
            fetched.status.success(),
            "cannot fetch Apache Kafka's jars (tests/kafka/fetch.sh; it needs Maven and Maven Central):\n{}",
            String::from_utf8_lossy(&fetched.stderr)
        );
    }
    lib
}
