//! The metrics of durable timers: how many wait, how many fired, and how
//! late.

use metrics::{Counter, Gauge, Histogram, Unit};

pub const TIMERS_PENDING: &str = "colo_timers_pending";
pub const TIMERS_SCHEDULED: &str = "colo_timers_scheduled_total";
pub const TIMERS_FIRED: &str = "colo_timers_fired_total";
pub const TIMER_LATENESS: &str = "colo_timer_lateness_seconds";

pub(super) fn describe() {
    use metrics::{describe_counter, describe_gauge, describe_histogram};
    describe_gauge!(
        TIMERS_PENDING,
        "Durable timers waiting in the shards this node hosts (counted from each shard's index when it starts here, then as timers are scheduled, cancelled and fired)"
    );
    describe_counter!(
        TIMERS_SCHEDULED,
        "Durable timers scheduled by handlers on this node (a replaced one counts again)"
    );
    describe_counter!(
        TIMERS_FIRED,
        "Durable timers that came due here, by outcome: applied (their message handled and the timer removed in the same write), stale (the entity had fired, cancelled or moved it already), failed (its handler failed: fired again a second later)"
    );
    describe_histogram!(
        TIMER_LATENESS,
        Unit::Seconds,
        "From a durable timer's due time to its message reaching its entity's shard"
    );
}

/// A durable entity type's timer metric handles.
#[derive(Clone)]
pub(crate) struct TimerMetrics {
    pub pending: Gauge,
    pub scheduled: Counter,
    pub applied: Counter,
    pub stale: Counter,
    pub failed: Counter,
    pub lateness: Histogram,
}

impl TimerMetrics {
    pub fn new(entity_type: &str) -> Self {
        super::describe();
        let et = || entity_type.to_string();
        let fired = |outcome: &'static str| metrics::counter!(TIMERS_FIRED, "entity_type" => et(), "outcome" => outcome);
        let handles = Self {
            pending: metrics::gauge!(TIMERS_PENDING, "entity_type" => et()),
            scheduled: metrics::counter!(TIMERS_SCHEDULED, "entity_type" => et()),
            applied: fired("applied"),
            stale: fired("stale"),
            failed: fired("failed"),
            lateness: metrics::histogram!(TIMER_LATENESS, "entity_type" => et()),
        };
        for counter in [
            &handles.scheduled,
            &handles.applied,
            &handles.stale,
            &handles.failed,
        ] {
            counter.increment(0);
        }
        handles
    }
}
