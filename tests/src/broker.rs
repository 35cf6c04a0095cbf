//! A Kafka-protocol broker for the tests: tansu, listening on a loopback
//! port with in-memory storage (or, to survive a restart, SQLite in a
//! temporary directory), stopped by its PID when dropped. The test command
//! installs it (`./scripts/test.sh`).

use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A running broker.
#[derive(Debug)]
pub struct Broker {
    child: Option<Child>,
    bootstrap: String,
    storage: String,
    /// `broker` flags after the listener and storage ones.
    flags: Vec<String>,
    log: PathBuf,
    dir: tempfile::TempDir,
}

impl Broker {
    /// Starts tansu on a free loopback port and waits until it accepts
    /// connections.
    ///
    /// # Panics
    /// tansu is not installed, or does not listen within 30 s.
    pub fn start() -> Self {
        Self::start_with(|_| "memory://tansu/".to_string())
    }

    /// Starts tansu storing topics, offsets and groups in SQLite, so that
    /// [`Broker::restart`] finds them again.
    ///
    /// # Panics
    /// As [`Broker::start`].
    pub fn start_durable() -> Self {
        // A path relative to the broker's working directory (its own
        // temporary one): tansu reads the URL's path as relative.
        Self::start_with(|_| "sqlite://tansu.db".to_string())
    }

    /// Starts tansu on SQLite with a maintenance tick every `every`: on
    /// it, topics with `cleanup.policy=compact` are compacted (only the
    /// newest record of each key kept). Its `memory://` storage never
    /// compacts.
    ///
    /// # Panics
    /// As [`Broker::start`].
    pub fn start_compacting(every: &str) -> Self {
        let url = format!("sqlite://tansu.db?maintenance_interval={every}");
        Self::start_with(|_| url)
    }

    /// Starts tansu requiring SASL authentication, with the SCRAM-SHA-256
    /// user `user`. tansu checks SCRAM credentials on its SQLite storage
    /// only, and creates users through a broker that does not ask for
    /// them yet: the user is created first, then the broker restarted with
    /// `--authentication`.
    ///
    /// # Panics
    /// As [`Broker::start`], or the user cannot be created.
    pub fn start_authenticating(user: &str, password: &str) -> Self {
        let mut broker = Self::start_durable();
        let output = Command::new(tansu_binary())
            .args(["user", "create", "--mechanism", "scram256", "--broker"])
            .arg(format!("tcp://{}", broker.bootstrap))
            .args([user, password])
            .output()
            .expect("run tansu user create");
        assert!(
            output.status.success(),
            "tansu user create failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        broker.flags = vec!["--authentication".to_string()];
        broker.restart();
        broker
    }

    fn start_with(storage: impl FnOnce(&std::path::Path) -> String) -> Self {
        let port = crate::process::free_port();
        let dir = tempfile::tempdir().expect("broker directory");
        let mut broker = Self {
            child: None,
            bootstrap: format!("127.0.0.1:{port}"),
            storage: storage(dir.path()),
            flags: Vec::new(),
            log: dir.path().join("tansu.log"),
            dir,
        };
        broker.spawn();
        broker
    }

    fn spawn(&mut self) {
        let tansu = tansu_binary();
        let url = format!("tcp://{}", self.bootstrap);
        let out = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .expect("broker log");
        let err = out.try_clone().expect("broker log");
        let child = Command::new(&tansu)
            .args([
                "broker",
                "--listener-url",
                &url,
                "--advertised-listener-url",
                &url,
            ])
            .args(["--storage-engine", &self.storage])
            .args(&self.flags)
            .current_dir(self.dir.path())
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", tansu.display()));
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(30);
        while TcpStream::connect(&self.bootstrap).is_err() {
            assert!(
                Instant::now() < deadline,
                "tansu did not listen on {} within 30 s; its log:\n{}",
                self.bootstrap,
                self.log()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Kills the broker (SIGKILL: no clean shutdown) and starts it again on
    /// the same port and storage.
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

    /// `host:port` for `bootstrap.servers`.
    pub fn bootstrap(&self) -> &str {
        &self.bootstrap
    }

    /// What the broker printed so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        self.kill();
    }
}

/// tansu on the PATH, or where `cargo install` puts it.
fn tansu_binary() -> PathBuf {
    let on_path = std::env::var_os("PATH").into_iter().flat_map(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join("tansu"))
            .collect::<Vec<_>>()
    });
    let cargo_home = std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".cargo")))
        .map(|home| home.join("bin").join("tansu"));
    on_path
        .chain(cargo_home)
        .find(|path| path.is_file())
        .expect("tansu is not installed: ./scripts/test.sh installs it (cargo install tansu --locked --version 0.6.0 --features dynostore,libsql)")
}
