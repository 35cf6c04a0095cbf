//! A Kafka-protocol broker for the tests: tansu, listening on a loopback
//! port with in-memory storage, stopped by its PID when dropped. The test
//! command installs it (`./scripts/test.sh`).

use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A running broker.
#[derive(Debug)]
pub struct Broker {
    child: Child,
    bootstrap: String,
    log: PathBuf,
    _dir: tempfile::TempDir,
}

impl Broker {
    /// Starts tansu on a free loopback port and waits until it accepts
    /// connections.
    ///
    /// # Panics
    /// tansu is not installed, or does not listen within 30 s.
    pub fn start() -> Self {
        let tansu = tansu_binary();
        let port = crate::process::free_port();
        let url = format!("tcp://127.0.0.1:{port}");
        let dir = tempfile::tempdir().expect("broker directory");
        let log = dir.path().join("tansu.log");
        let out = std::fs::File::create(&log).expect("broker log");
        let err = out.try_clone().expect("broker log");
        let child = Command::new(&tansu)
            .args([
                "broker",
                "--listener-url",
                &url,
                "--advertised-listener-url",
                &url,
            ])
            .args(["--storage-engine", "memory://tansu/"])
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", tansu.display()));
        let broker = Self {
            child,
            bootstrap: format!("127.0.0.1:{port}"),
            log,
            _dir: dir,
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        while TcpStream::connect(&broker.bootstrap).is_err() {
            assert!(
                Instant::now() < deadline,
                "tansu did not listen on {} within 30 s; its log:\n{}",
                broker.bootstrap,
                broker.log()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        broker
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
        let _ = self.child.kill();
        let _ = self.child.wait();
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
