//! A partition's records as this node handles them: how long after it was
//! produced each record was handled (its Kafka timestamp to its handler's
//! answer: what a user waits before a query sees its effect), and when
//! this node handled the partition's first record since it was assigned
//! here and its last one. A partition that moves pauses from its last
//! record on the old owner to its first on the new: the two timestamps,
//! read off both nodes, measure each move's pause.

use metrics::{Counter, Gauge, Histogram};
use std::time::{SystemTime, UNIX_EPOCH};

pub const KAFKA_RECORD_LATENCY: &str = "colo_kafka_record_latency_seconds";
pub const KAFKA_FIRST_HANDLED: &str = "colo_kafka_partition_first_handled_timestamp_seconds";
pub const KAFKA_LAST_HANDLED: &str = "colo_kafka_partition_last_handled_timestamp_seconds";

/// Bucket bounds of the record latency: finer than the other `*_seconds`
/// histograms' where records usually are (a few milliseconds), so that a
/// percentile read off the buckets says more than its order of magnitude.
pub const RECORD_LATENCY_BUCKETS: &[f64] = &[
    0.0005, 0.001, 0.002, 0.003, 0.005, 0.0075, 0.01, 0.015, 0.02, 0.03, 0.05, 0.075, 0.1, 0.15,
    0.2, 0.3, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 5.0, 7.5, 10.0, 15.0, 20.0, 30.0, 60.0, 120.0,
];

/// One assigned partition's handles, kept by its task: a record costs a
/// histogram sample and nothing else shared. The clock is read once per
/// batch of records the task settles in one wake, and the handled counter
/// added to and the last record's gauge stored once for the batch
/// (reading the clock for each record cost as much as routing it; a
/// counter shared by every partition, bumped per record, moved its cache
/// line between the cores at each).
pub(crate) struct PartitionProgress {
    latency: Histogram,
    handled: Counter,
    first: Gauge,
    last: Gauge,
    /// Nothing handled yet since the partition was assigned here.
    fresh: bool,
    /// The batch being settled, until [`Self::settled`]: the clock read at
    /// its first record, and the records handled in it.
    batch: Option<(f64, u64)>,
}

impl PartitionProgress {
    pub fn new(entity_type: &str, topic: &str, partition: i32, handled: Counter) -> Self {
        let labels = [
            ("entity_type", entity_type.to_string()),
            ("topic", topic.to_string()),
            ("partition", partition.to_string()),
        ];
        Self {
            latency: metrics::histogram!(KAFKA_RECORD_LATENCY, "entity_type" => entity_type.to_string(), "topic" => topic.to_string()),
            handled,
            first: metrics::gauge!(KAFKA_FIRST_HANDLED, &labels),
            last: metrics::gauge!(KAFKA_LAST_HANDLED, &labels),
            fresh: true,
            batch: None,
        }
    }

    /// A record with Kafka timestamp `timestamp` (milliseconds since the
    /// Unix epoch) was handled in the batch being settled. Its latency, in
    /// seconds: none without a timestamp.
    pub fn handled(&mut self, timestamp: Option<i64>) -> Option<f64> {
        let (now, handled) = self.batch.get_or_insert_with(|| (wall_clock(), 0));
        *handled += 1;
        // A producer's clock may be ahead of this node's, or unset (-1
        // is read as none): no negative latency is made up.
        let latency = timestamp
            .filter(|t| *t > 0)
            .map(|produced| (*now - produced as f64 / 1000.0).max(0.0));
        if let Some(latency) = latency {
            self.latency.record(latency);
        }
        if self.fresh {
            self.fresh = false;
            self.first.set(*now);
        }
        latency
    }

    /// The batch of records settled in one wake of the partition's task is
    /// done: its records are counted, the last one's time stored, and the
    /// next batch reads the clock again. Called before the task waits.
    pub fn settled(&mut self) {
        if let Some((now, handled)) = self.batch.take() {
            self.handled.increment(handled);
            self.last.set(now);
        }
    }
}

impl Drop for PartitionProgress {
    fn drop(&mut self) {
        self.settled();
    }
}

fn wall_clock() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or_default()
}

pub(super) fn describe() {
    use metrics::{describe_gauge, describe_histogram, Unit};
    describe_histogram!(
        KAFKA_RECORD_LATENCY,
        Unit::Seconds,
        "From a Kafka record's timestamp (when it was produced) to its handler's answer here: how long before its effect can be read"
    );
    describe_gauge!(
        KAFKA_FIRST_HANDLED,
        "When this node handled the first record of the partition since it was assigned here, in seconds since the Unix epoch"
    );
    describe_gauge!(
        KAFKA_LAST_HANDLED,
        "When this node last handled a record of the partition, in seconds since the Unix epoch (kept after the partition left: a move pauses from the old owner's last record to the new owner's first)"
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use metrics_exporter_prometheus::{Matcher, PrometheusBuilder};

    fn series<'a>(text: &'a str, name: &str) -> Vec<&'a str> {
        text.lines().filter(|l| l.starts_with(name)).collect()
    }

    #[test]
    fn the_first_record_since_the_assignment_and_the_last_are_kept() {
        let recorder = PrometheusBuilder::new()
            .set_buckets_for_metric(
                Matcher::Full(KAFKA_RECORD_LATENCY.to_string()),
                RECORD_LATENCY_BUCKETS,
            )
            .expect("buckets")
            .build_recorder();
        let handle = recorder.handle();
        let produced = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis() as i64)
            .unwrap_or_default();
        metrics::with_local_recorder(&recorder, || {
            let handled = metrics::counter!("handled_total");
            let mut progress = PartitionProgress::new("user", "events", 3, handled);
            progress.handled(Some(produced - 40));
            progress.handled(None);
            progress.settled();
            progress.handled(Some(-1));
        });
        // A record's age when handled (what a move's first record says
        // of its pause): none without a timestamp, never negative.
        let handled = metrics::counter!("unrecorded");
        let mut progress = PartitionProgress::new("user", "events", 4, handled);
        assert_eq!(progress.handled(None), None);
        assert_eq!(progress.handled(Some(-1)), None);
        assert_eq!(progress.handled(Some(produced + 60_000)), Some(0.0));
        let age = progress.handled(Some(produced - 2_000)).expect("an age");
        assert!((2.0..60.0).contains(&age), "{age}");
        let text = handle.render();
        // Counted per batch, the last one when the partition's task ends.
        assert_eq!(
            series(&text, "handled_total"),
            ["handled_total 3"],
            "{text}"
        );
        let value = |name: &str| -> f64 {
            let line = series(&text, name);
            assert_eq!(line.len(), 1, "{text}");
            assert!(line[0].contains(r#"partition="3""#), "{}", line[0]);
            line[0]
                .rsplit(' ')
                .next()
                .and_then(|v| v.parse().ok())
                .expect("a value")
        };
        let (first, last) = (value(KAFKA_FIRST_HANDLED), value(KAFKA_LAST_HANDLED));
        assert!(
            first * 1000.0 >= produced as f64 && last >= first,
            "{first} then {last}"
        );
        let count = series(&text, &format!("{KAFKA_RECORD_LATENCY}_count"));
        assert!(
            count[0].ends_with(" 1"),
            "only a record with a timestamp: {text}"
        );
        let below_40ms = series(&text, &format!("{KAFKA_RECORD_LATENCY}_bucket"))
            .into_iter()
            .find(|l| l.contains(r#"le="0.03""#))
            .expect("a bucket at 30 ms");
        assert!(below_40ms.ends_with(" 0"), "{below_40ms}");
    }
}
