//! The metrics of a coordinator's store on the cluster's coordinator topic:
//! its epoch, whether this node hosts it, and how long reading its state
//! back took, over how many records; and of the election that places it.

use metrics::Unit;
use std::time::Duration;

pub const COORDINATOR_EPOCH: &str = "colo_coordinator_epoch";
pub const COORDINATOR_HOSTED: &str = "colo_coordinator_hosted";
pub const COORDINATOR_RECOVERY: &str = "colo_coordinator_recovery_seconds";
pub const COORDINATOR_RECOVERY_RECORDS: &str = "colo_coordinator_recovery_records_total";
pub const COORDINATOR_TAKEOVERS: &str = "colo_coordinator_takeovers_total";
pub const COORDINATOR_ELECTED_EPOCH: &str = "colo_coordinator_elected_epoch";
pub const COORDINATOR_TAKEOVER: &str = "colo_coordinator_takeover_seconds";
pub const COORDINATOR_REJOINS: &str = "colo_coordinator_election_rejoins_total";

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
    describe_gauge!(
        COORDINATOR_ELECTED_EPOCH,
        "The epoch of the elected coordinator, as this node read it on the coordinator topic; 0 while none is known"
    );
    describe_histogram!(
        COORDINATOR_TAKEOVER,
        Unit::Seconds,
        "From this node's election (the election group assigned it the coordinator topic's partition) to its coordinators started, its leader record written and read back"
    );
    describe_counter!(
        COORDINATOR_REJOINS,
        "Times this node joined the election group again because no coordinator was reachable for coordinator.election_timeout"
    );
}

/// The coordinator topic names a new elected coordinator.
pub(crate) fn coordinator_elected(epoch: u64) {
    super::describe();
    // An epoch is a time in milliseconds: exact in an f64 for millennia.
    metrics::gauge!(COORDINATOR_ELECTED_EPOCH).set(epoch as f64);
}

/// This node, elected, started its coordinators `took` after its election.
pub(crate) fn coordinator_took_over(took: Duration) {
    super::describe();
    metrics::histogram!(COORDINATOR_TAKEOVER).record(took.as_secs_f64());
}

/// This node joined the election group again.
pub(crate) fn coordinator_election_rejoined() {
    super::describe();
    metrics::counter!(COORDINATOR_REJOINS).increment(1);
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
