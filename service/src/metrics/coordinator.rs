//! The metrics of a coordinator's store on the cluster's coordinator topic:
//! its epoch, whether this node hosts it, and how long reading its state
//! back took, over how many records.

use metrics::Unit;
use std::time::Duration;

pub const COORDINATOR_EPOCH: &str = "colo_coordinator_epoch";
pub const COORDINATOR_HOSTED: &str = "colo_coordinator_hosted";
pub const COORDINATOR_RECOVERY: &str = "colo_coordinator_recovery_seconds";
pub const COORDINATOR_RECOVERY_RECORDS: &str = "colo_coordinator_recovery_records_total";
pub const COORDINATOR_TAKEOVERS: &str = "colo_coordinator_takeovers_total";

pub(super) fn describe() {
    use metrics::{describe_counter, describe_gauge, describe_histogram};
    describe_gauge!(
        COORDINATOR_EPOCH,
        "The epoch of the coordinator this node hosts (it outranks every coordinator of the entity type before it); 0 until its state is read"
    );
    describe_gauge!(
        COORDINATOR_HOSTED,
        "1 while this node hosts the entity type's coordinator, 0 otherwise"
    );
    describe_histogram!(
        COORDINATOR_RECOVERY,
        Unit::Seconds,
        "How long a starting coordinator took to read its state back from the coordinator topic, its epoch record included"
    );
    describe_counter!(
        COORDINATOR_RECOVERY_RECORDS,
        "Coordinator topic records read back by starting coordinators"
    );
    describe_counter!(
        COORDINATOR_TAKEOVERS,
        "Coordinators that started from a predecessor's state on the coordinator topic (not a new cluster's empty one)"
    );
}

/// A coordinator of `entity_type` is hosted here (or no longer).
pub(crate) fn coordinator_hosted(entity_type: &str, hosted: bool) {
    super::describe();
    metrics::gauge!(COORDINATOR_HOSTED, "entity_type" => entity_type.to_string()).set(if hosted {
        1.0
    } else {
        0.0
    });
}

/// A coordinator read its state back: its epoch, how long it took, the
/// records it read, and whether a predecessor had left any.
pub(crate) fn coordinator_recovered(
    entity_type: &str,
    epoch: u64,
    took: Duration,
    records: usize,
    takeover: bool,
) {
    super::describe();
    let et = || entity_type.to_string();
    // An epoch is a time in milliseconds: exact in an f64 for millennia.
    metrics::gauge!(COORDINATOR_EPOCH, "entity_type" => et()).set(epoch as f64);
    metrics::histogram!(COORDINATOR_RECOVERY, "entity_type" => et()).record(took.as_secs_f64());
    metrics::counter!(COORDINATOR_RECOVERY_RECORDS, "entity_type" => et())
        .increment(records as u64);
    let takeovers = metrics::counter!(COORDINATOR_TAKEOVERS, "entity_type" => et());
    takeovers.increment(u64::from(takeover));
}
