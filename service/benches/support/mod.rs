//! What the service's benchmarks share: the node on a network of its own
//! with its entity type's coordinator, its store opened off the runtime,
//! and the knobs by which the test command runs a bench smaller than its
//! README run.

// Each bench is a crate of its own and uses a part of this.
#![allow(dead_code)]

use colo::allocation::{LeastShardAllocationStrategy, LeastShardSettings};
use colo::state::Engine;
use colo::{
    CoordinatorHandle, InMemoryNetwork, InMemoryStore, Node, NodeStore, ShardingSettings,
    StateSettings,
};
use std::path::Path;
use std::sync::Arc;

/// A node for `entity_type` (least-shard allocation), with `store` if its
/// type is durable.
pub fn one_node(entity_type: &str, settings: &ShardingSettings, store: Option<NodeStore>) -> Node {
    one_node_of(&[entity_type], settings, store)
}

/// A node for several entity types, a coordinator each.
pub fn one_node_of(
    entity_types: &[&str],
    settings: &ShardingSettings,
    store: Option<NodeStore>,
) -> Node {
    let network = InMemoryNetwork::new();
    for entity_type in entity_types {
        network.host_coordinator(
            CoordinatorHandle::spawn(
                entity_type,
                settings.clone(),
                Box::new(
                    LeastShardAllocationStrategy::new(LeastShardSettings::default())
                        .expect("settings"),
                ),
                Arc::new(InMemoryStore::new()),
            )
            .expect("coordinator"),
        );
    }
    match store {
        Some(store) => Node::with_state_store(network.transport("a"), store),
        None => Node::new(network.transport("a")),
    }
}

/// The node's store under `dir`, default state settings, opened on a
/// blocking thread (opening reads the disk).
pub async fn open_store(dir: &Path, engine: Engine) -> NodeStore {
    let path = dir.to_path_buf();
    tokio::task::spawn_blocking(move || {
        NodeStore::open(
            &path,
            StateSettings {
                engine,
                ..StateSettings::default()
            },
        )
        .expect("store")
    })
    .await
    .expect("open")
}

/// A knob of the bench from the environment, or its default.
pub fn env(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The process's resident set and its peak, in bytes, and its threads.
pub fn resident() -> (u64, u64, u64) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|n| n.parse::<u64>().ok())
            .unwrap_or(0)
    };
    (
        field("VmRSS:") * 1024,
        field("VmHWM:") * 1024,
        field("Threads:"),
    )
}

/// Bytes in MiB.
pub fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

/// A runtime of two workers, as the machine has cores.
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime")
}

/// The case this process was started for (its argument in `var`, see
/// [`each_case_in_a_process`]), if it was.
///
/// # Panics
/// `var` names no case.
pub fn this_case<C: Copy>(var: &str, cases: &[C], arg: impl Fn(C) -> &'static str) -> Option<C> {
    let wanted = std::env::var(var).ok()?;
    let found = cases.iter().copied().find(|c| arg(*c) == wanted);
    Some(found.unwrap_or_else(|| panic!("no case {wanted:?}")))
}

/// Runs this bench again for each case, one process after another, `var`
/// naming the case's argument: one case's freed memory is not the next's.
///
/// # Panics
/// A case's process failed.
pub fn each_case_in_a_process<C: Copy>(
    var: &str,
    cases: &[C],
    arg: impl Fn(C) -> &'static str,
    name: impl Fn(C) -> &'static str,
) {
    let exe = std::env::current_exe().expect("this bench");
    for case in cases {
        let status = std::process::Command::new(&exe)
            .env(var, arg(*case))
            .status()
            .expect("case process");
        assert!(status.success(), "{} failed", name(*case));
    }
}
