//! The metrics of output records: emitted, sent, sent again, and how many
//! wait to be sent.

use metrics::{Counter, Gauge};

pub const OUTPUTS_EMITTED: &str = "colo_outputs_emitted_total";
pub const OUTPUTS_SENT: &str = "colo_outputs_sent_total";
pub const OUTPUTS_RESENT: &str = "colo_outputs_resent_total";
pub const OUTPUT_SEND_FAILURES: &str = "colo_output_send_failures_total";
pub const OUTPUTS_PENDING: &str = "colo_outputs_pending";

pub(super) fn describe() {
    use metrics::{describe_counter, describe_gauge};
    describe_counter!(
        OUTPUTS_EMITTED,
        "Records emitted by handlers on this node and kept in their entities' outboxes"
    );
    describe_counter!(
        OUTPUTS_SENT,
        "Emitted records the broker acknowledged, sent by this node"
    );
    describe_counter!(
        OUTPUTS_RESENT,
        "Emitted records this node found in a record written before its shard started here, sent (the previous owner may have sent them already: the same id)"
    );
    describe_counter!(
        OUTPUT_SEND_FAILURES,
        "Sends of emitted records that failed (all of the batch is sent again a second later)"
    );
    describe_gauge!(
        OUTPUTS_PENDING,
        "Emitted records in the outboxes of the shards this node hosts, not yet sent"
    );
}

/// A durable entity type's output metric handles.
#[derive(Clone)]
pub(crate) struct OutputMetrics {
    pub emitted: Counter,
    pub sent: Counter,
    pub resent: Counter,
    pub failures: Counter,
    pub pending: Gauge,
}

impl OutputMetrics {
    pub fn new(entity_type: &str) -> Self {
        describe();
        let et = || entity_type.to_string();
        let handles = Self {
            emitted: metrics::counter!(OUTPUTS_EMITTED, "entity_type" => et()),
            sent: metrics::counter!(OUTPUTS_SENT, "entity_type" => et()),
            resent: metrics::counter!(OUTPUTS_RESENT, "entity_type" => et()),
            failures: metrics::counter!(OUTPUT_SEND_FAILURES, "entity_type" => et()),
            pending: metrics::gauge!(OUTPUTS_PENDING, "entity_type" => et()),
        };
        for counter in [
            &handles.emitted,
            &handles.sent,
            &handles.resent,
            &handles.failures,
        ] {
            counter.increment(0);
        }
        handles
    }
}
