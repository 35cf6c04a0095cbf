//! The metrics of durable entity state: writes behind, loads, records a
//! durable entity had applied already, states that no longer decode.

use metrics::{Counter, Histogram, Unit};

pub const STATE_WRITES: &str = "colo_state_writes_total";
pub const STATE_WRITE_DURATION: &str = "colo_state_write_seconds";
pub const STATE_WRITTEN_ENTITIES: &str = "colo_state_written_entities_total";
pub const STATE_LOADS: &str = "colo_state_loads_total";
pub const STATE_SKIPPED_RECORDS: &str = "colo_state_skipped_records_total";
pub const STATE_UNDECODABLE: &str = "colo_state_undecodable_total";
pub const STATE_RESTORES: &str = "colo_state_restores_total";
pub const STATE_RESTORE_DURATION: &str = "colo_state_restore_seconds";
pub const STATE_RESTORED_RECORDS: &str = "colo_state_restore_records_total";
pub const STATE_REMOVED_ENTITIES: &str = "colo_state_removed_entities_total";
pub const STANDBY_SHARDS: &str = "colo_state_standby_shards";
pub const STANDBY_RECORDS: &str = "colo_state_standby_records_total";
pub const STANDBY_BYTES: &str = "colo_state_standby_bytes_total";
pub const STANDBY_LAG: &str = "colo_state_standby_lag_records";
pub const STANDBY_FAILURES: &str = "colo_state_standby_failures_total";

pub(super) fn describe() {
    use metrics::{describe_counter, describe_gauge, describe_histogram};
    describe_counter!(
        STATE_WRITES,
        "Writes of durable entity state to the node's store, by outcome (ok, failed: retried, nothing acknowledged meanwhile)"
    );
    describe_histogram!(
        STATE_WRITE_DURATION,
        Unit::Seconds,
        "How long one durable write of a shard's changed entities took"
    );
    describe_counter!(
        STATE_WRITTEN_ENTITIES,
        "Entity states written to the node's store"
    );
    describe_counter!(
        STATE_LOADS,
        "Durable entities started again from stored state, by where it came from: store, memory (changed and not written yet), or none (a new entity)"
    );
    describe_counter!(
        STATE_SKIPPED_RECORDS,
        "Kafka records skipped because their durable entity had applied them already (consumed again after a crash or a rebalance)"
    );
    describe_counter!(
        STATE_UNDECODABLE,
        "Stored entity states that could not be decoded: their shard stops taking messages until the program can read them"
    );
    describe_counter!(
        STATE_RESTORES,
        "Shard starts of durable entity types, by how their state was restored: checkpoint (the node's own copy kept, the changelog's tail read), standby (a standby's copy kept, the tail read), changelog (the whole partition read), or failed (tried again)"
    );
    describe_histogram!(
        STATE_RESTORE_DURATION,
        Unit::Seconds,
        "How long a shard's state restore took, its epoch marker included, by how (checkpoint, standby, changelog)"
    );
    describe_counter!(
        STATE_RESTORED_RECORDS,
        "Changelog records read by shard restores"
    );
    describe_gauge!(
        STANDBY_SHARDS,
        "Shards of a durable entity type this node keeps a standby copy of (sharding.standbys), those it hosts not counted"
    );
    describe_counter!(
        STANDBY_RECORDS,
        "Changelog records the node's standby copies read"
    );
    describe_counter!(
        STANDBY_BYTES,
        Unit::Bytes,
        "Bytes of changelog records (keys and values) the node's standby copies read"
    );
    describe_gauge!(
        STANDBY_LAG,
        "Changelog records the standby copies were behind at their last step, all their shards together (what a start from them would have read)"
    );
    describe_counter!(
        STANDBY_FAILURES,
        "Steps of a standby copy that failed (tried again at the next step)"
    );
    describe_counter!(
        STATE_REMOVED_ENTITIES,
        "Deleted entities removed from the changelog and the node's store (tombstones), once the offsets they applied were committed"
    );
}

/// How a restore went on: from the node's own copy, a standby's, or the
/// whole changelog (`store::RestoredFrom`'s labels).
const RESTORED_FROM: [&str; 3] = ["checkpoint", "standby", "changelog"];

/// A durable entity type's metric handles.
#[derive(Clone)]
pub(crate) struct StateMetrics {
    pub writes_ok: Counter,
    pub writes_failed: Counter,
    pub write_duration: Histogram,
    pub written: Counter,
    pub loaded_store: Counter,
    pub loaded_memory: Counter,
    pub loaded_none: Counter,
    pub skipped: Counter,
    pub undecodable: Counter,
    pub restore_failures: Counter,
    pub removed: Counter,
    restores: [Counter; 3],
    restore_duration: [Histogram; 3],
    restored_records: Counter,
}

impl StateMetrics {
    pub fn new(entity_type: &str) -> Self {
        super::describe();
        let et = || entity_type.to_string();
        let loads = |from: &'static str| metrics::counter!(STATE_LOADS, "entity_type" => et(), "from" => from);
        let handles = Self {
            writes_ok: metrics::counter!(STATE_WRITES, "entity_type" => et(), "outcome" => "ok"),
            writes_failed: metrics::counter!(STATE_WRITES, "entity_type" => et(), "outcome" => "failed"),
            write_duration: metrics::histogram!(STATE_WRITE_DURATION, "entity_type" => et()),
            written: metrics::counter!(STATE_WRITTEN_ENTITIES, "entity_type" => et()),
            loaded_store: loads("store"),
            loaded_memory: loads("memory"),
            loaded_none: loads("none"),
            skipped: metrics::counter!(STATE_SKIPPED_RECORDS, "entity_type" => et()),
            undecodable: metrics::counter!(STATE_UNDECODABLE, "entity_type" => et()),
            restore_failures: metrics::counter!(STATE_RESTORES, "entity_type" => et(), "from" => "failed"),
            restores: RESTORED_FROM
                .map(|from| metrics::counter!(STATE_RESTORES, "entity_type" => et(), "from" => from)),
            restore_duration: RESTORED_FROM.map(
                |from| metrics::histogram!(STATE_RESTORE_DURATION, "entity_type" => et(), "from" => from),
            ),
            restored_records: metrics::counter!(STATE_RESTORED_RECORDS, "entity_type" => et()),
            removed: metrics::counter!(STATE_REMOVED_ENTITIES, "entity_type" => et()),
        };
        for counter in [
            &handles.writes_ok,
            &handles.writes_failed,
            &handles.written,
            &handles.skipped,
            &handles.undecodable,
            &handles.restore_failures,
            &handles.restores[0],
            &handles.restores[1],
            &handles.restores[2],
            &handles.restored_records,
            &handles.removed,
        ] {
            counter.increment(0);
        }
        handles
    }

    /// A shard's state was restored `from` a copy (see
    /// `store::RestoredFrom`), in `took`, reading `records`.
    pub fn restored(&self, from: &str, took: std::time::Duration, records: u64) {
        let how = RESTORED_FROM.iter().position(|f| *f == from).unwrap_or(0);
        self.restores[how].increment(1);
        self.restore_duration[how].record(took.as_secs_f64());
        self.restored_records.increment(records);
    }
}

/// A durable entity type's standby copies' metric handles.
#[derive(Clone)]
pub(crate) struct StandbyMetrics {
    shards: metrics::Gauge,
    records: Counter,
    bytes: Counter,
    lag: metrics::Gauge,
    failures: Counter,
}

impl StandbyMetrics {
    pub fn new(entity_type: &str) -> Self {
        super::describe();
        let et = || entity_type.to_string();
        let handles = Self {
            shards: metrics::gauge!(STANDBY_SHARDS, "entity_type" => et()),
            records: metrics::counter!(STANDBY_RECORDS, "entity_type" => et()),
            bytes: metrics::counter!(STANDBY_BYTES, "entity_type" => et()),
            lag: metrics::gauge!(STANDBY_LAG, "entity_type" => et()),
            failures: metrics::counter!(STANDBY_FAILURES, "entity_type" => et()),
        };
        handles.records.increment(0);
        handles.bytes.increment(0);
        handles.failures.increment(0);
        handles
    }

    /// The shards kept now.
    pub fn shards(&self, kept: usize) {
        self.shards.set(kept as f64);
    }

    /// A step read `read` changelog records of `bytes` bytes.
    pub fn records(&self, read: u64, bytes: u64) {
        self.records.increment(read);
        self.bytes.increment(bytes);
    }

    /// What the last round of steps read, all kept shards together.
    pub fn lag(&self, read: u64) {
        self.lag.set(read as f64);
    }

    pub fn failed(&self) {
        self.failures.increment(1);
    }
}
