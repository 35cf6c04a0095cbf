//! The sample's purchases end to end: `colo produce` as a process, and what
//! the nodes handled, read from their logs (each handled purchase is a
//! debug line with the user and the event's sequence number), checked
//! against what was produced.

use crate::process::{colo_binary, NodeProcess};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

/// A running `colo produce`.
#[derive(Debug)]
pub struct Producer {
    child: Option<Child>,
    expected: PathBuf,
    output: PathBuf,
}

impl Producer {
    /// Starts `colo produce` to `topic`: `count` events of `users` users,
    /// at `rate` per second if given. The expected totals go to a file in
    /// `dir`.
    pub fn start(
        dir: &Path,
        bootstrap: &str,
        topic: &str,
        users: u64,
        count: u64,
        rate: Option<u64>,
    ) -> Self {
        Self::start_for("user-", dir, bootstrap, topic, users, count, rate)
    }

    /// [`Self::start`] with user ids `<prefix><n>`.
    pub fn start_for(
        prefix: &str,
        dir: &Path,
        bootstrap: &str,
        topic: &str,
        users: u64,
        count: u64,
        rate: Option<u64>,
    ) -> Self {
        let expected = dir.join(format!("{topic}.{prefix}expected.json"));
        let output = dir.join(format!("{topic}.{prefix}produce.log"));
        let out = std::fs::File::create(&output).expect("producer output");
        let err = out.try_clone().expect("producer output");
        let mut command = Command::new(colo_binary());
        command
            .args(["produce", "--quiet", "--exit-with-parent"])
            .args(["--bootstrap-servers", bootstrap])
            .args(["--topic", topic])
            .args(["--users", &users.to_string()])
            .args(["--user-prefix", prefix])
            .args(["--count", &count.to_string()])
            .arg("--expected")
            .arg(&expected)
            // One request in flight: a retried batch cannot overtake the
            // next one, so each user's events stay in order.
            .args(["--client", "max.in.flight.requests.per.connection=1"]);
        if let Some(rate) = rate {
            command.args(["--rate", &rate.to_string()]);
        }
        let child = command
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .expect("start colo produce");
        Self {
            child: Some(child),
            expected,
            output,
        }
    }

    /// The file it writes each user's expected totals to (once finished).
    pub fn expected_file(&self) -> PathBuf {
        self.expected.clone()
    }

    /// Stops it before its count (SIGTERM, as Ctrl-C would): it flushes
    /// what it sent and writes those events' totals. Returns as
    /// [`Self::finished`].
    pub async fn stopped(self, deadline: std::time::Duration) -> BTreeMap<String, u64> {
        if let Some(child) = &self.child {
            let _ = Command::new("kill")
                .args(["-TERM", &child.id().to_string()])
                .status();
        }
        self.finished(deadline).await
    }

    /// Waits for it to finish (within `deadline`) and returns the last
    /// sequence number of every user.
    pub async fn finished(mut self, deadline: std::time::Duration) -> BTreeMap<String, u64> {
        let mut child = self.child.take().expect("running");
        let mut status = None;
        let done = crate::wait::held_within(deadline, || {
            status = child.try_wait().expect("producer status");
            std::future::ready(status.is_some())
        })
        .await;
        let output = std::fs::read_to_string(&self.output).unwrap_or_default();
        assert!(
            done,
            "colo produce did not finish within {deadline:?}: {output}"
        );
        assert!(
            status.is_some_and(|s| s.success()),
            "colo produce failed: {output}"
        );
        let totals: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(&self.expected).expect("expected totals written"),
        )
        .expect("expected totals are JSON");
        totals["users"]
            .as_object()
            .expect("users")
            .iter()
            .map(|(user, stats)| {
                (
                    user.clone(),
                    stats["last_sequence"].as_u64().expect("last_sequence"),
                )
            })
            .collect()
    }
}

impl Drop for Producer {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Runs `colo verify` against the node at `addr`: every user's totals
/// asked and compared with `expected` (what `colo produce --expected`
/// wrote), again until they all match or a minute has passed (a shard that
/// moves or restores meanwhile answers late; a wrong total never comes
/// right). Its output, or why it failed (its last output, with the
/// mismatches).
pub async fn verify(expected: &Path, addr: &str) -> Result<String, String> {
    let expected = expected.display().to_string();
    crate::process::colo_verify(&["--timeout", "20s", "--expected", &expected, "--addr", addr])
        .await
}

/// [`verify`], and the users' milestones read back from `topic` on
/// `bootstrap` (`colo verify --milestones`): each user who crossed it
/// emitted exactly one.
pub async fn verify_with_milestones(
    expected: &Path,
    addr: &str,
    bootstrap: &str,
    topic: &str,
) -> Result<String, String> {
    let expected = expected.display().to_string();
    crate::process::colo_verify(&[
        "--timeout",
        "20s",
        "--expected",
        &expected,
        "--addr",
        addr,
        "--milestones",
        topic,
        "--bootstrap-servers",
        bootstrap,
    ])
    .await
}

/// One handled purchase, as a node logged it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Handled {
    /// RFC 3339, comparable as text.
    pub at: String,
    pub sequence: u64,
    pub node: String,
}

/// Every user's handled purchases across `nodes`, in time order.
pub fn handled(nodes: &[&NodeProcess]) -> BTreeMap<String, Vec<Handled>> {
    let mut by_user: BTreeMap<String, Vec<Handled>> = BTreeMap::new();
    for node in nodes {
        for line in node.logs().lines() {
            let Ok(event) = serde_json::from_str::<serde_json::Value>(line) else {
                continue;
            };
            if event["target"] != "colo::purchases" {
                continue;
            }
            let fields = &event["fields"];
            let (Some(user), Some(sequence), Some(at)) = (
                fields["entity_id"].as_str(),
                fields["sequence"].as_u64(),
                event["timestamp"].as_str(),
            ) else {
                continue;
            };
            by_user.entry(user.to_string()).or_default().push(Handled {
                at: at.to_string(),
                sequence,
                node: node.grpc.clone(),
            });
        }
    }
    for list in by_user.values_mut() {
        list.sort();
    }
    by_user
}

/// Whether every user's last event was handled.
pub fn all_handled(
    handled: &BTreeMap<String, Vec<Handled>>,
    expected: &BTreeMap<String, u64>,
) -> bool {
    expected.iter().all(|(user, last)| {
        handled
            .get(user)
            .is_some_and(|list| list.iter().any(|h| h.sequence == *last))
    })
}

/// At least once, in order: every event handled, and none before every
/// earlier event of its user was (a replay goes back, it never skips).
pub fn at_least_once_in_order_problems(
    handled: &BTreeMap<String, Vec<Handled>>,
    expected: &BTreeMap<String, u64>,
) -> Vec<String> {
    let mut problems = Vec::new();
    for (user, last) in expected {
        let list = handled.get(user).map(Vec::as_slice).unwrap_or_default();
        let mut through = 0;
        for h in list {
            if h.sequence > through + 1 {
                problems.push(format!(
                    "{user}: event {} handled on {} at {} before event {}",
                    h.sequence,
                    h.node,
                    h.at,
                    through + 1
                ));
                break;
            }
            through = through.max(h.sequence);
        }
        if through < *last {
            problems.push(format!("{user}: handled through {through} of {last}"));
        }
    }
    problems
}

/// Exactly once, in order: each user's events handled 1, 2, ... last.
pub fn exactly_once_problems(
    handled: &BTreeMap<String, Vec<Handled>>,
    expected: &BTreeMap<String, u64>,
) -> Vec<String> {
    let mut problems = Vec::new();
    for (user, last) in expected {
        let sequences: Vec<u64> = handled
            .get(user)
            .map(|l| l.iter().map(|h| h.sequence).collect())
            .unwrap_or_default();
        let wanted: Vec<u64> = (1..=*last).collect();
        if sequences != wanted {
            let list = &handled[user];
            let first_bad = sequences
                .iter()
                .zip(&wanted)
                .position(|(a, b)| a != b)
                .unwrap_or(sequences.len().min(wanted.len()));
            problems.push(format!(
                "{user}: {} handled for {} events; first difference at position {first_bad}: {:?}",
                sequences.len(),
                last,
                list.get(first_bad.saturating_sub(1)..(first_bad + 2).min(list.len()))
            ));
        }
    }
    problems
}
