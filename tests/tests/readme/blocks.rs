//! Running README's blocks as a new user runs them: a block found by the
//! paragraph before it, the nodes it starts in the background stopped by
//! their PIDs however a test ends, and the client commands in a shell
//! that knows `$colo`.

use colo_tests::{http, wait};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the workspace")
        .to_path_buf()
}

/// The indented block that follows the paragraph containing `marker`.
pub fn block_after(readme: &str, marker: &str) -> Vec<String> {
    let start = readme
        .find(marker)
        .unwrap_or_else(|| panic!("README says {marker:?}"));
    readme[start..]
        .lines()
        .skip_while(|l| !l.starts_with("    "))
        .take_while(|l| l.starts_with("    "))
        .map(|l| l[4..].to_string())
        .collect()
}

/// The block after `marker`, with the broker at `bootstrap` where README
/// names 127.0.0.1:9092.
pub fn block_at_broker(readme: &str, marker: &str, bootstrap: &str) -> Vec<String> {
    block_after(readme, marker)
        .into_iter()
        .map(|l| l.replace("127.0.0.1:9092", bootstrap))
        .collect()
}

/// A block's commands, a command continued over lines (`\` at a line's
/// end) on one line.
pub fn commands(lines: Vec<String>) -> Vec<String> {
    let mut commands: Vec<String> = Vec::new();
    let mut continued = false;
    for line in lines {
        match commands.last_mut() {
            Some(last) if continued => last.push_str(line.trim_start()),
            _ => commands.push(line.clone()),
        }
        continued = line.ends_with('\\');
        if continued {
            if let Some(last) = commands.last_mut() {
                last.pop();
            }
        }
    }
    commands
}

/// The nodes the block started, stopped by their PIDs however the test
/// ends, then their data directories removed.
pub struct Started(pub Vec<PathBuf>, pub Vec<u32>);

impl Started {
    pub fn signal(&self, signal: &str) {
        for pid in &self.1 {
            let _ = Command::new("kill")
                .arg(signal)
                .arg(pid.to_string())
                .status();
        }
    }

    /// SIGTERM to every node the block started, which must all stop
    /// within a minute.
    pub async fn stop_on_sigterm(&self, logs: impl Fn() -> String) {
        self.signal("-TERM");
        let stopped = wait::held_within(Duration::from_secs(60), || {
            std::future::ready(!self.running())
        })
        .await;
        assert!(
            stopped,
            "the nodes did not stop on SIGTERM; logs:\n{}",
            logs()
        );
    }

    fn running(&self) -> bool {
        self.1
            .iter()
            .any(|pid| Path::new(&format!("/proc/{pid}")).exists() && !zombie(*pid))
    }
}

pub fn zombie(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        stat.rsplit(')')
            .next()
            .is_some_and(|r| r.trim_start().starts_with('Z'))
    })
}

/// The default data directories of the nodes `lines` start (`--listen
/// host:port` becomes `colo-data/host_port` under the root).
pub fn data_dirs(root: &Path, lines: &[String]) -> Vec<PathBuf> {
    lines
        .iter()
        .filter_map(|l| l.split("--listen ").nth(1)?.split_whitespace().next())
        .map(|address| {
            root.join("colo-data")
                .join(address.replace([':', '/'], "_"))
        })
        .collect()
}

/// Removes the nodes' default data directories (see [`data_dirs`]).
pub fn remove(dirs: &[PathBuf]) {
    for dir in dirs {
        if dir.exists() {
            std::fs::remove_dir_all(dir).expect("remove a node's data directory");
        }
    }
}

/// Runs README `lines` that start nodes, as a user does (in the background
/// of a shell, which prints their PIDs and leaves them running), from
/// fresh data directories; their output goes to `data/block.err`.
pub fn start_block(
    root: &Path,
    lines: &[String],
    data: &Path,
) -> (std::process::ExitStatus, String, Started) {
    let out = data.join("block.out");
    let dirs = data_dirs(root, lines);
    remove(&dirs);
    let mut bash = Command::new("bash");
    // The block may build (`cargo build --release`): as from a shell, so
    // that it reuses what the test command built.
    colo_tests::process::as_from_a_shell(&mut bash);
    let status = bash
        .arg("-c")
        .arg(format!(
            "set -e\n{}\necho PIDS $(jobs -p)",
            lines.join("\n")
        ))
        .current_dir(root)
        .stdout(std::fs::File::create(&out).expect("stdout file"))
        .stderr(std::fs::File::create(data.join("block.err")).expect("stderr file"))
        .status()
        .expect("run bash");
    let printed = std::fs::read_to_string(&out).unwrap_or_default();
    let started = Started(
        dirs,
        printed
            .lines()
            .find_map(|l| l.strip_prefix("PIDS "))
            .unwrap_or_default()
            .split_whitespace()
            .filter_map(|pid| pid.parse().ok())
            .collect(),
    );
    (status, printed, started)
}

impl Drop for Started {
    fn drop(&mut self) {
        self.signal("-KILL");
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while self.running() && std::time::Instant::now() < deadline {
            std::thread::yield_now();
        }
        remove(&self.0);
    }
}

/// Waits until each admin address answers ready, printing the block's
/// logs if one never does.
pub async fn await_ready(admins: &[&str], logs: impl Fn() -> String) {
    for admin in admins {
        let ready = wait::held_within(Duration::from_secs(60), || async {
            matches!(http::get(admin, "/health/ready").await, Ok((200, _)))
        })
        .await;
        assert!(ready, "{admin} not ready; logs:\n{}", logs());
    }
}

/// Runs README's client commands `lines` in a shell of their own that knows
/// `$colo` (the nodes' block's assignment of it), from the project's root,
/// and asserts they succeed: their stdout.
pub fn run_client_block(
    root: &Path,
    nodes: &[String],
    lines: &[String],
    logs: impl Fn() -> String,
) -> String {
    let assignment = nodes
        .iter()
        .find(|l| l.starts_with("colo="))
        .expect("the block names the binary");
    let run = Command::new("bash")
        .arg("-c")
        .arg(format!(
            "set -euo pipefail\n{assignment}\n{}",
            lines.join("\n")
        ))
        .current_dir(root)
        .output()
        .expect("run bash");
    let (stdout, stderr) = (
        String::from_utf8_lossy(&run.stdout).to_string(),
        String::from_utf8_lossy(&run.stderr),
    );
    assert!(
        run.status.success(),
        "{stdout}\n{stderr}\nlogs:\n{}",
        logs()
    );
    stdout
}
