//! The examples and the embedded demo, run as a user runs them: each must
//! work, not only compile.

use colo_tests::process::{colo_binary, example_binary, package_example};
use std::process::Command;

fn run(binary: std::path::PathBuf, args: &[&str]) -> String {
    let out = Command::new(&binary)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("run {}: {e}", binary.display()));
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{} {args:?} failed ({}):\n{stdout}\n{}",
        binary.display(),
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// README's example, with Akka's default timings: a brand-new cluster
/// answers at once (the example asks with a 1 s timeout).
#[test]
fn the_quickstart_example_tells_and_asks() {
    let out = run(example_binary("quickstart"), &[]);
    assert_eq!(out.trim(), "user-42 = 5");
}

#[test]
fn the_custom_allocation_strategy_example_runs() {
    let out = run(package_example("colo-allocation", "custom_strategy"), &[]);
    assert!(!out.trim().is_empty(), "{out}");
}

/// `colo demo`, smaller than its defaults: three nodes, a fourth joining,
/// placement before and after, and why moved counters start again.
#[test]
fn the_demo_runs_and_explains_what_moved() {
    let out = run(
        colo_binary(),
        &["demo", "--entities", "300", "--shards", "12"],
    );
    for expected in [
        "three nodes, 12 shards",
        "every counter reads 10",
        "shard placement before the rebalance",
        "node-4 joins",
        "shard placement after the rebalance",
        "entity state is kept in memory only",
        "all nodes shut down gracefully",
    ] {
        assert!(out.contains(expected), "no {expected:?} in:\n{out}");
    }
}
