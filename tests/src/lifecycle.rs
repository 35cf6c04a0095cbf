//! The at-most-one checker across processes: where each entity lived, and
//! when, from the nodes' logs.
//!
//! Nodes started with [`JSON_LOGS`] log every entity start and stop (target
//! `colo::entity`, debug level) as JSON lines with a timestamp. All nodes of
//! a test run on one machine, so their clocks agree: an entity live on two
//! nodes at once shows as two overlapping intervals.

use crate::process::NodeProcess;
use std::collections::BTreeMap;

/// `--set` overrides that make a node log entity lifecycles as JSON.
pub const JSON_LOGS: [&str; 2] = ["log.format=json", "log.level=info,colo=debug"];

/// One entity's life on one node: from its start to its stop (`None`: still
/// live when the log was read).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Life {
    pub node: String,
    pub started: String,
    pub stopped: Option<String>,
    /// Why it stopped, as the node logged it.
    pub reason: Option<String>,
}

/// Every entity's lives, by entity id, in log order per node.
#[derive(Debug, Default)]
pub struct Lifecycle {
    pub lives: BTreeMap<String, Vec<Life>>,
}

impl Lifecycle {
    /// Reads the lives of every entity of `entity_type` from the nodes' logs.
    pub fn read(nodes: &[&NodeProcess], entity_type: &str) -> Lifecycle {
        let mut lifecycle = Lifecycle::default();
        for node in nodes {
            for line in node.logs().lines() {
                let Ok(event) = serde_json::from_str::<serde_json::Value>(line) else {
                    continue;
                };
                if event["target"] != "colo::entity" {
                    continue;
                }
                let fields = &event["fields"];
                if fields["entity_type"] != entity_type {
                    continue;
                }
                let (Some(id), Some(at)) =
                    (fields["entity_id"].as_str(), event["timestamp"].as_str())
                else {
                    continue;
                };
                let lives = lifecycle.lives.entry(id.to_string()).or_default();
                match fields["message"].as_str() {
                    Some("entity started") => lives.push(Life {
                        node: node.grpc.clone(),
                        started: at.to_string(),
                        stopped: None,
                        reason: None,
                    }),
                    Some("entity stopped") => {
                        let open = lives
                            .iter_mut()
                            .rev()
                            .find(|l| l.node == node.grpc && l.stopped.is_none());
                        if let Some(life) = open {
                            life.stopped = Some(at.to_string());
                            life.reason = fields["reason"].as_str().map(str::to_string);
                        }
                    }
                    _ => {}
                }
            }
        }
        lifecycle
    }

    /// Ends the open lives on `node` that started before `at`: the node was
    /// killed then, so nothing of before lived on after it (lives of a
    /// restart after `at` stay as they are).
    pub fn killed(&mut self, node: &str, at: &str) {
        for lives in self.lives.values_mut() {
            for life in lives.iter_mut() {
                if life.node == node && life.stopped.is_none() && life.started.as_str() < at {
                    life.stopped = Some(at.to_string());
                    life.reason = Some("killed".to_string());
                }
            }
        }
    }

    /// Every pair of lives of one entity on two nodes that overlap in time.
    /// Timestamps are RFC 3339 with a fixed number of digits, so they
    /// compare as text.
    pub fn overlaps(&self) -> Vec<String> {
        let mut found = Vec::new();
        for (id, lives) in &self.lives {
            for (i, a) in lives.iter().enumerate() {
                for b in &lives[i + 1..] {
                    if a.node == b.node {
                        continue;
                    }
                    let a_end = a.stopped.as_deref().unwrap_or("~");
                    let b_end = b.stopped.as_deref().unwrap_or("~");
                    if a.started.as_str() < b_end && b.started.as_str() < a_end {
                        found.push(format!("{id}: {a:?} and {b:?}"));
                    }
                }
            }
        }
        found
    }
}
