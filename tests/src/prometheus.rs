//! A real Prometheus (Debian's `prometheus`, installed by the test
//! command) on a loopback port, scraping test nodes with the repository's
//! scrape config and rules, its ports rewritten; queried through its HTTP
//! API. Stopped by its PID when dropped.

use crate::http;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// The repository's deploy files.
pub fn deploy_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy")
}

/// A running Prometheus.
#[derive(Debug)]
pub struct Prometheus {
    pub address: String,
    child: Option<Child>,
    log: PathBuf,
    _dir: tempfile::TempDir,
}

impl Prometheus {
    /// Starts Prometheus with `config` (YAML text; rule files it names are
    /// read from where it says) and waits until it is ready.
    ///
    /// # Panics
    /// `prometheus` is not installed, or not ready within 30 s.
    pub async fn start(config: &str) -> Self {
        let dir = tempfile::tempdir().expect("prometheus directory");
        let path = dir.path().join("prometheus.yml");
        std::fs::write(&path, config).expect("write prometheus config");
        let address = format!("127.0.0.1:{}", crate::process::free_port());
        let log = dir.path().join("prometheus.log");
        let out = std::fs::File::create(&log).expect("log file");
        let child = Command::new("prometheus")
            .arg(format!("--config.file={}", path.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.path().join("data").display()
            ))
            .arg(format!("--web.listen-address={address}"))
            .stdin(Stdio::null())
            .stdout(out.try_clone().expect("log file"))
            .stderr(out)
            .spawn()
            .expect("start prometheus (./scripts/test.sh installs Debian's prometheus)");
        let prometheus = Self {
            address,
            child: Some(child),
            log,
            _dir: dir,
        };
        let ready = crate::wait::held_within(Duration::from_secs(30), || async {
            matches!(
                http::get(&prometheus.address, "/-/ready").await,
                Ok((200, _))
            )
        })
        .await;
        assert!(ready, "prometheus not ready:\n{}", prometheus.log());
        prometheus
    }

    /// An instant query: the API's whole answer, or its error.
    pub async fn query(&self, expr: &str) -> Result<serde_json::Value, String> {
        let path = format!("/api/v1/query?query={}", encode(expr));
        let (status, body) = http::get(&self.address, &path)
            .await
            .map_err(|e| e.to_string())?;
        let answer: serde_json::Value =
            serde_json::from_str(&body).map_err(|e| format!("{e}: {body}"))?;
        if status != 200 || answer["status"] != "success" {
            return Err(format!("{expr}: HTTP {status}: {body}"));
        }
        Ok(answer)
    }

    /// The result vector of an instant query (empty when it has no series).
    pub async fn vector(&self, expr: &str) -> Result<Vec<serde_json::Value>, String> {
        let answer = self.query(expr).await?;
        Ok(answer["data"]["result"]
            .as_array()
            .cloned()
            .unwrap_or_default())
    }

    /// The sum of an instant query's values (0 without series).
    pub async fn sum(&self, expr: &str) -> Result<f64, String> {
        Ok(self
            .vector(expr)
            .await?
            .iter()
            .filter_map(|s| s["value"][1].as_str()?.parse::<f64>().ok())
            .sum())
    }

    /// Its log, for a failure.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Percent-encodes a query parameter.
fn encode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}
