//! Metrics recorded in a test process, read back by name and labels.
//!
//! In-process scenarios check what an operator would read on a dashboard.
//! The recorder is installed once per test binary and keeps running
//! totals: tests that read at the same time never erase each other's
//! values.

use metrics::{Counter, Gauge, Histogram, Key, KeyName, Metadata, Recorder, SharedString, Unit};
use metrics_util::registry::{AtomicStorage, Registry};
use std::collections::BTreeSet;
use std::sync::atomic::Ordering;
use std::sync::{Arc, OnceLock};

/// Every metric recorded in this test binary, by key: counters hold
/// running totals and gauges their last value, so readers never erase
/// what another test reads.
type Recorded = Registry<Key, AtomicStorage>;

/// The test binary's recorder: metrics-util's registry, the storage the
/// Prometheus exporter keeps its values in, so the tests build the
/// metrics stack with the node's own features.
struct Tally(Arc<Recorded>);

impl Recorder for Tally {
    fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}

    fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
        self.0
            .get_or_create_counter(key, |c| Counter::from_arc(c.clone()))
    }

    fn register_gauge(&self, key: &Key, _: &Metadata<'_>) -> Gauge {
        self.0
            .get_or_create_gauge(key, |g| Gauge::from_arc(g.clone()))
    }

    fn register_histogram(&self, key: &Key, _: &Metadata<'_>) -> Histogram {
        self.0
            .get_or_create_histogram(key, |h| Histogram::from_arc(h.clone()))
    }
}

/// The test binary's recorder, installed on first use: call it before
/// anything records what a test reads.
pub fn install() -> &'static Recorded {
    static RECORDED: OnceLock<Arc<Recorded>> = OnceLock::new();
    RECORDED.get_or_init(|| {
        let recorded = Arc::new(Registry::atomic());
        metrics::set_global_recorder(Tally(recorded.clone()))
            .expect("no other recorder in this test binary");
        recorded
    })
}

type MetricKey = (String, BTreeSet<(String, String)>);

fn key_of(key: &Key) -> MetricKey {
    let labels = key
        .labels()
        .map(|l| (l.key().to_string(), l.value().to_string()))
        .collect();
    (key.name().to_string(), labels)
}

/// The counter with exactly these labels, if anything registered it.
fn counter_value(wanted: &MetricKey) -> Option<u64> {
    let mut found = None;
    install().visit_counters(|key, counter| {
        if key_of(key) == *wanted {
            found = Some(counter.load(Ordering::Acquire));
        }
    });
    found
}

/// The gauge with exactly these labels, if anything registered it.
fn gauge_value(wanted: &MetricKey) -> Option<f64> {
    let mut found = None;
    install().visit_gauges(|key, gauge| {
        if key_of(key) == *wanted {
            found = Some(f64::from_bits(gauge.load(Ordering::Acquire)));
        }
    });
    found
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
    counter_value(&metric_key(name, labels)).unwrap_or(0)
}

/// The value of a gauge with exactly these labels, once something set it
/// to a value other than zero.
pub fn gauge(name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    gauge_value(&metric_key(name, labels)).filter(|g| *g != 0.0)
}

/// Several gauges read together (0 for an absent one).
pub fn gauges(keys: &[(&str, &[(&str, &str)])]) -> Vec<f64> {
    keys.iter()
        .map(|(name, labels)| gauge_value(&metric_key(name, labels)).unwrap_or(0.0))
        .collect()
}
