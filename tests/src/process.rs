//! `colo run` as a child process, configured by a generated TOML file, its
//! output kept in a log file that a failing test prints.

use colo_proto::v1::sharding_client::ShardingClient;
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::Duration;
use tonic::transport::Channel;

/// The `colo` binary built from the current source: built (or found up to
/// date) once per test process with the cargo that builds the tests, into
/// the tests' own target directory, so a test never runs a stale binary.
pub fn colo_binary() -> PathBuf {
    binary("colo", "colo", &["--bin", "colo"])
}

/// Runs `colo verify` with `args` again until it passes or a minute has
/// passed (a shard that moves or restores meanwhile answers late; a wrong
/// reply never comes right). Its output, or why it failed (its last
/// output, with the differences).
pub async fn colo_verify(args: &[&str]) -> Result<String, String> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let mut command = Command::new(colo_binary());
        command.arg("verify").args(args).stdin(Stdio::null());
        let output = tokio::task::spawn_blocking(move || command.output())
            .await
            .expect("colo verify thread")
            .expect("run colo verify");
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        if output.status.success() {
            return Ok(text);
        }
        if std::time::Instant::now() >= deadline {
            return Err(text);
        }
    }
}

/// An example binary of the colo crate, built like [`colo_binary`].
pub fn example_binary(name: &str) -> PathBuf {
    package_example("colo", name)
}

/// The binary of a crate of the workspace named after it (a program of
/// one's own such as `examples/inventory`), built like [`colo_binary`].
pub fn crate_binary(package: &str) -> PathBuf {
    binary(package, package, &["--bin", package])
}

/// A binary of this crate (`tests/src/bin/`), built like [`colo_binary`].
pub fn tests_binary(name: &str) -> PathBuf {
    binary("colo-tests", name, &["--bin", name])
}

/// An example binary of a crate of the workspace, built like
/// [`colo_binary`].
pub fn package_example(package: &str, name: &str) -> PathBuf {
    binary(package, name, &["--example", name])
}

fn binary(package: &str, name: &str, what: &[&str]) -> PathBuf {
    use std::collections::HashMap;
    use std::sync::{Mutex, OnceLock};
    static BUILT: OnceLock<Mutex<HashMap<String, PathBuf>>> = OnceLock::new();
    let built = BUILT.get_or_init(Mutex::default);
    let mut built = built.lock().expect("build table");
    if let Some(path) = built.get(name) {
        return path.clone();
    }
    let exe = std::env::current_exe().expect("test executable path");
    let profile_dir = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("target profile directory");
    let target_dir = profile_dir.parent().expect("target directory");
    // Built in the profile of the test or bench that asks: a bench must
    // measure a release build of today's code, not whatever an earlier
    // build left in its profile's directory.
    let profile = match profile_dir.file_name().and_then(|n| n.to_str()) {
        Some("debug") | None => "dev",
        Some(other) => other,
    };
    let mut cargo = Command::new(env!("CARGO"));
    as_from_a_shell(&mut cargo);
    let status = cargo
        .args([
            "build",
            "--quiet",
            "--locked",
            "--profile",
            profile,
            "-p",
            package,
        ])
        .args(what)
        .arg("--target-dir")
        .arg(target_dir)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .status()
        .expect("run cargo build");
    assert!(status.success(), "cargo build -p {package} {what:?} failed");
    let file = format!("{name}{}", std::env::consts::EXE_SUFFIX);
    let path = if what[0] == "--example" {
        profile_dir.join("examples").join(file)
    } else {
        profile_dir.join(file)
    };
    assert!(path.exists(), "{} not built", path.display());
    built.insert(name.to_string(), path.clone());
    path
}

/// Leaves out of `command`'s environment what cargo sets for a test
/// process (the package's name, version and directory) and a shell does not
/// have. A cargo build run with them would see ring's build script as
/// stale (it reruns when one of them differs), and with it rebuild every
/// crate above ring, each time a test and a shell take turns.
pub fn as_from_a_shell(command: &mut Command) {
    for (name, _) in std::env::vars_os() {
        let Some(name) = name.to_str() else { continue };
        if name.starts_with("CARGO_PKG_")
            || name.starts_with("CARGO_BIN_")
            || matches!(
                name,
                "CARGO_MANIFEST_DIR"
                    | "CARGO_MANIFEST_PATH"
                    | "CARGO_CRATE_NAME"
                    | "CARGO_PRIMARY_PACKAGE"
                    | "CARGO_TARGET_TMPDIR"
            )
        {
            command.env_remove(name);
        }
    }
}

/// A loopback port nobody listens on now, and never handed out before in
/// this test process: a killed node's port stays its own for its restart,
/// even while other tests start nodes. It lies below the kernel's range of
/// ephemeral ports: a client that keeps connecting to a dead node's port
/// (a peer, a proxy) could otherwise be given that very port as its own
/// source port (a TCP self-connect) and hold it when the node restarts.
/// Another process may still take it before the node binds it; on this
/// machine the window is small enough.
pub fn free_port() -> u16 {
    static GIVEN: std::sync::Mutex<std::collections::BTreeSet<u16>> =
        std::sync::Mutex::new(std::collections::BTreeSet::new());
    let below = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|range| range.split_whitespace().next()?.parse::<u16>().ok())
        .unwrap_or(32768)
        .max(2048);
    let low = below / 2;
    let span = u32::from(below - low);
    // Test processes that run side by side start at different places.
    let mut candidate = std::process::id() % span;
    for _ in 0..span {
        candidate = (candidate + 7919) % span;
        let port = low + candidate as u16;
        let mut given = GIVEN.lock().expect("port table");
        if !given.contains(&port) && std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            given.insert(port);
            return port;
        }
    }
    panic!("no free loopback port below {below}");
}

/// Which node program a process runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Program {
    /// `colo run`, with the built-in counter.
    Colo,
    /// An example of the colo crate that is a node program of its own, with
    /// the entity types it registers.
    Example(&'static str),
    /// The same, with environment variables of its own (what an example
    /// takes beside `colo run`'s flags).
    ExampleWith(&'static str, &'static [(&'static str, &'static str)]),
    /// A crate of the workspace that is a node program of its own.
    Crate(&'static str),
}

impl Program {
    /// The binary and the arguments before the config's.
    fn command(&self) -> (PathBuf, Vec<&'static str>) {
        match self {
            Program::Colo => (colo_binary(), vec!["run"]),
            Program::Example(name) | Program::ExampleWith(name, _) => {
                (example_binary(name), vec![])
            }
            Program::Crate(name) => (crate_binary(name), vec![]),
        }
    }
}

/// One node of a test cluster.
#[derive(Debug)]
pub struct NodeProcess {
    /// The node's advertised gRPC address (`127.0.0.1:port`).
    pub grpc: String,
    /// Its admin HTTP address.
    pub admin: String,
    program: Program,
    /// The network namespace it runs in, if not this machine's own.
    namespace: Option<String>,
    config: PathBuf,
    sets: Vec<String>,
    log: PathBuf,
    child: Option<Child>,
    _dir: tempfile::TempDir,
}

impl NodeProcess {
    /// Starts a `colo run` node whose coordinator lives at `coordinator`
    /// (its own address when `None`); `sets` are `--set key=value`
    /// overrides.
    pub fn start(coordinator: Option<&str>, sets: &[&str]) -> Self {
        Self::start_program(Program::Colo, coordinator, sets)
    }

    /// Starts a node of `program`, like [`Self::start`].
    pub fn start_program(program: Program, coordinator: Option<&str>, sets: &[&str]) -> Self {
        Self::start_on("127.0.0.1", program, coordinator, sets)
    }

    /// Starts a node of `program` listening on the loopback address `host`
    /// (any of 127.0.0.0/8 on Linux): nodes on different hosts have
    /// certificates that name different hosts.
    pub fn start_on(
        host: &str,
        program: Program,
        coordinator: Option<&str>,
        sets: &[&str],
    ) -> Self {
        Self::launch(host, None, program, coordinator, sets)
    }

    /// Starts a node of `program` inside the network namespace of `host`,
    /// listening on its address: a node whose network a test can cut
    /// ([`crate::netns::Network::cut`]).
    pub fn start_in(
        host: &crate::netns::Host,
        program: Program,
        coordinator: Option<&str>,
        sets: &[&str],
    ) -> Self {
        Self::launch(
            &host.address,
            Some(host.namespace.clone()),
            program,
            coordinator,
            sets,
        )
    }

    fn launch(
        host: &str,
        namespace: Option<String>,
        program: Program,
        coordinator: Option<&str>,
        sets: &[&str],
    ) -> Self {
        let grpc = format!("{host}:{}", free_port());
        let admin = format!("{host}:{}", free_port());
        let coordinator = coordinator.unwrap_or(&grpc);
        let dir = tempfile::tempdir().expect("temp dir");
        let config = dir.path().join("colo.toml");
        let data_dir = dir.path().join("data");
        let data_dir = data_dir.display();
        let text = format!(
            r#"[node]
listen = "{grpc}"
admin_listen = "{admin}"
data_dir = "{data_dir}"

[coordinator]
address = "{coordinator}"
heartbeat_interval = "200ms"
fence_timeout = "1500ms"
region_timeout = "2500ms"

[sharding]
number_of_shards = 12
retry_interval = "200ms"
rebalance_interval = "500ms"
handoff_timeout = "10s"
shard_start_timeout = "2s"

[log]
level = "info,colo=debug"
"#
        );
        std::fs::write(&config, text).expect("write config");
        let log = dir.path().join("colo.log");
        let mut node = Self {
            program,
            namespace,
            sets: sets.iter().map(|s| s.to_string()).collect(),
            grpc,
            admin,
            config,
            log,
            child: None,
            _dir: dir,
        };
        node.spawn();
        node
    }

    fn spawn(&mut self) {
        remember_panics();
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .expect("open log file");
        let err = log.try_clone().expect("clone log file");
        let (binary, leading) = self.program.command();
        // `ip netns exec` enters the namespace and executes the node in its
        // place: the process started is the node.
        let mut command = match &self.namespace {
            Some(namespace) => {
                let mut command = Command::new("ip");
                command.args(["netns", "exec", namespace]).arg(binary);
                command
            }
            None => Command::new(binary),
        };
        if let Program::ExampleWith(_, env) = &self.program {
            command.envs(env.iter().copied());
        }
        // A node exits with its test process, however that one ends.
        let child = command
            .args(leading)
            .arg("--exit-with-parent")
            .arg("--config")
            .arg(&self.config)
            .args(self.sets.iter().flat_map(|s| ["--set", s.as_str()]))
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(err)
            .spawn()
            .expect("start colo run");
        self.child = Some(child);
    }

    /// Removes the node's data directory (its state store, what it
    /// remembers of the coordinator), while it is stopped: the node starts
    /// again as on a new machine.
    pub fn clear_data_dir(&self) {
        assert!(self.child.is_none(), "node still running");
        let data = self._dir.path().join("data");
        if data.exists() {
            std::fs::remove_dir_all(&data).expect("remove the data directory");
        }
    }

    /// Starts the node again with the same config, after it stopped.
    pub fn restart(&mut self) {
        assert!(self.child.is_none(), "node still running");
        self.spawn();
    }

    /// The process ID, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// kill -9: the process dies at once, without a hand-off.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// kill -STOP: the process freezes with its connections open, as a
    /// stuck node would; it sends no heartbeat and answers nothing. Returns
    /// once every thread of it is stopped: `kill` returns when the signal
    /// is sent, and a thread already running goes on until the kernel
    /// stops it, long enough to answer a request sent right after (a CI
    /// run saw a paused node answer at once).
    pub fn pause(&self) {
        self.signal("-STOP");
        let pid = self.pid().expect("node running");
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while !all_threads_stopped(pid) {
            assert!(
                std::time::Instant::now() < deadline,
                "node {pid} not stopped 10 s after SIGSTOP"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// kill -CONT: the process goes on where it froze.
    pub fn resume(&self) {
        self.signal("-CONT");
    }

    /// kill -TERM: what an orchestrator sends to stop a node gracefully.
    pub fn terminate(&self) {
        self.signal("-TERM");
    }

    /// kill -INT: Ctrl-C in a terminal.
    pub fn interrupt(&self) {
        self.signal("-INT");
    }

    fn signal(&self, signal: &str) {
        let pid = self.pid().expect("node running");
        let status = Command::new("kill")
            .arg(signal)
            .arg(pid.to_string())
            .status()
            .expect("run kill");
        assert!(status.success(), "kill {signal} {pid} failed");
    }

    /// Waits for the process to exit on its own.
    pub async fn exited(&mut self, deadline: Duration) -> ExitStatus {
        let child = self.child.as_mut().expect("node running");
        let mut status = None;
        let exited = crate::wait::held_within(deadline, || {
            status = child.try_wait().expect("child status");
            std::future::ready(status.is_some())
        })
        .await;
        assert!(
            exited,
            "node {} did not exit within {deadline:?}; log:\n{}",
            self.grpc,
            self.logs()
        );
        self.child = None;
        status.expect("exit status")
    }

    /// Everything the process printed.
    pub fn logs(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Whether `/health/ready` answers 200.
    pub async fn ready(&self) -> bool {
        matches!(
            crate::http::get(&self.admin, "/health/ready").await,
            Ok((200, _))
        )
    }

    /// Waits until the node is ready, printing its log if it never is.
    pub async fn await_ready(&self, deadline: Duration) {
        let ready = crate::wait::held_within(deadline, || self.ready()).await;
        // Its log is printed as it drops, the failure repeated after it.
        assert!(ready, "node {} not ready within {deadline:?}", self.grpc);
    }

    /// A client of the node's Sharding API.
    pub async fn client(&self) -> ShardingClient<Channel> {
        ShardingClient::connect(format!("http://{}", self.grpc))
            .await
            .unwrap_or_else(|e| panic!("connect to {}: {e}", self.grpc))
    }

    /// The channel to the node's gRPC server.
    pub async fn channel(&self) -> Channel {
        Channel::from_shared(format!("http://{}", self.grpc))
            .expect("valid address")
            .connect()
            .await
            .unwrap_or_else(|e| panic!("connect to {}: {e}", self.grpc))
    }
}

/// Whether every thread of process `pid` is stopped by a signal (state
/// `T` in `/proc/<pid>/task/<tid>/stat`).
fn all_threads_stopped(pid: u32) -> bool {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return false;
    };
    tasks.flatten().all(|task| {
        std::fs::read_to_string(task.path().join("stat")).is_ok_and(|stat| {
            // The state follows the command's closing parenthesis.
            stat.rsplit_once(')')
                .and_then(|(_, rest)| rest.split_whitespace().next())
                .is_some_and(|state| state == "T")
        })
    })
}

impl Drop for NodeProcess {
    fn drop(&mut self) {
        self.kill();
        // A failing test shows what every one of its nodes logged, then
        // its failure again: the end of a long run's log names it.
        if std::thread::panicking() {
            eprintln!(
                "----- log of node {} -----\n{}----- end of log of node {} -----",
                self.grpc,
                self.logs(),
                self.grpc
            );
            if let Some(failure) = LAST_PANIC.lock().ok().and_then(|last| last.clone()) {
                eprintln!("----- the test's failure, above: {failure}");
            }
        }
    }
}

/// The last panic of this test process, as its hook printed it.
static LAST_PANIC: std::sync::Mutex<Option<String>> = std::sync::Mutex::new(None);

/// Keeps each panic's message for the nodes' logs to end with, once per
/// process; the hook before it still prints it where it happens.
fn remember_panics() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let before = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if let Ok(mut last) = LAST_PANIC.lock() {
                *last = Some(info.to_string());
            }
            before(info);
        }));
    });
}
