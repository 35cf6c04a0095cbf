//! Metrics recorded in a test process, read back by name and labels.
//!
//! In-process scenarios check what an operator would read on a dashboard.
//! The recorder is installed once per test binary; every reader goes
//! through one running tally, because a snapshot of the recorder resets
//! what it reads: tests that read at the same time never erase each
//! other's values.

use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};
use parking_lot::{Mutex, MutexGuard};
use std::collections::{BTreeSet, HashMap};
use std::sync::OnceLock;

/// The test binary's recorder, installed on first use: call it before
/// anything records what a test reads.
pub fn install() -> &'static Snapshotter {
    static SNAPSHOTTER: OnceLock<Snapshotter> = OnceLock::new();
    SNAPSHOTTER.get_or_init(|| {
        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        recorder
            .install()
            .expect("no other recorder in this test binary");
        snapshotter
    })
}

type MetricKey = (String, BTreeSet<(String, String)>);
type Seen = (HashMap<MetricKey, u64>, HashMap<MetricKey, f64>);

/// Everything recorded so far: counters as running totals, gauges as their
/// last value.
fn seen() -> MutexGuard<'static, Seen> {
    static SEEN: OnceLock<Mutex<Seen>> = OnceLock::new();
    let mut seen = SEEN.get_or_init(Mutex::default).lock();
    for (key, _, _, value) in install().snapshot().into_vec() {
        let labels = key
            .key()
            .labels()
            .map(|l| (l.key().to_string(), l.value().to_string()))
            .collect();
        let key = (key.key().name().to_string(), labels);
        match value {
            DebugValue::Counter(delta) => *seen.0.entry(key).or_default() += delta,
            DebugValue::Gauge(g) => {
                seen.1.insert(key, g.into_inner());
            }
            DebugValue::Histogram(_) => {}
        }
    }
    seen
}

fn metric_key(name: &str, labels: &[(&str, &str)]) -> MetricKey {
    (
        name.to_string(),
        labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
    )
}

/// The value of a counter with exactly these labels (0 when absent).
pub fn counter(name: &str, labels: &[(&str, &str)]) -> u64 {
    seen()
        .0
        .get(&metric_key(name, labels))
        .copied()
        .unwrap_or(0)
}

/// The value of a gauge with exactly these labels, once something set it
/// to a value other than zero.
pub fn gauge(name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    seen()
        .1
        .get(&metric_key(name, labels))
        .copied()
        .filter(|g| *g != 0.0)
}

/// Several gauges read at one instant, for values set together (0 for an
/// absent one).
pub fn gauges(keys: &[(&str, &[(&str, &str)])]) -> Vec<f64> {
    let seen = seen();
    keys.iter()
        .map(|(name, labels)| {
            seen.1
                .get(&metric_key(name, labels))
                .copied()
                .unwrap_or(0.0)
        })
        .collect()
}
