//! Every metric colo emits: names, descriptions, and the handles the hot path
//! keeps so that counting costs an atomic add, not a registry lookup.
//!
//! Prometheus style: `colo_` prefix, base units, `_total` for counters, and
//! only bounded labels (`entity_type`, `reason`, `outcome`).

mod coordinator;
mod durable_state;
mod outputs;
mod progress;
mod timers;

pub(crate) use coordinator::{
    coordinator_elected, coordinator_election_rejoined, coordinator_hosted, coordinator_recovered,
    coordinator_took_over,
};
pub use coordinator::{
    COORDINATOR_ELECTED_EPOCH, COORDINATOR_EPOCH, COORDINATOR_HOSTED, COORDINATOR_RECOVERY,
    COORDINATOR_RECOVERY_RECORDS, COORDINATOR_REJOINS, COORDINATOR_TAKEOVER, COORDINATOR_TAKEOVERS,
};
pub(crate) use durable_state::{StandbyMetrics, StateMetrics};
pub use durable_state::{
    STANDBY_BYTES, STANDBY_FAILURES, STANDBY_LAG, STANDBY_RECORDS, STANDBY_SHARDS, STATE_LOADS,
    STATE_REMOVED_ENTITIES, STATE_RESTORED_RECORDS, STATE_RESTORES, STATE_RESTORE_DURATION,
    STATE_SKIPPED_RECORDS, STATE_UNDECODABLE, STATE_WRITES, STATE_WRITE_DURATION,
    STATE_WRITTEN_ENTITIES,
};
pub(crate) use outputs::OutputMetrics;
pub use outputs::{
    OUTPUTS_EMITTED, OUTPUTS_PENDING, OUTPUTS_RESENT, OUTPUTS_SENT, OUTPUT_SEND_FAILURES,
};
pub(crate) use progress::PartitionProgress;
pub use progress::{
    KAFKA_FIRST_HANDLED, KAFKA_LAST_HANDLED, KAFKA_RECORD_LATENCY, RECORD_LATENCY_BUCKETS,
};
pub(crate) use timers::TimerMetrics;
pub use timers::{TIMERS_FIRED, TIMERS_PENDING, TIMERS_SCHEDULED, TIMER_LATENESS};

use crate::kafka_view::{KafkaView, PartitionView, RebalanceTag, RevokeStep};
use colo_passivation::PassivationReason;
use metrics::{Counter, Gauge, Histogram, Unit};
use std::sync::{Arc, Once};
use std::time::Duration;

pub const HOSTED_SHARDS: &str = "colo_region_hosted_shards";
pub const HOSTED_ENTITIES: &str = "colo_region_hosted_entities";
pub const ENTITY_MEMORY: &str = "colo_region_entity_memory_bytes";
pub const DELIVERED: &str = "colo_messages_delivered_total";
pub const FORWARDED: &str = "colo_messages_forwarded_total";
pub const BUFFERED: &str = "colo_messages_buffered";
pub const BUFFERED_TOTAL: &str = "colo_messages_buffered_total";
pub const DROPPED: &str = "colo_messages_dropped_total";
pub const ENTITY_FAILURES: &str = "colo_entity_failures_total";
pub const SHARD_HOME_LATENCY: &str = "colo_shard_home_latency_seconds";
pub const HANDOFFS: &str = "colo_handoffs_total";
pub const HANDOFF_DURATION: &str = "colo_handoff_duration_seconds";
pub const REBALANCED_SHARDS: &str = "colo_rebalanced_shards_total";
pub const COORDINATOR_REGIONS: &str = "colo_coordinator_regions";
pub const PASSIVATIONS: &str = "colo_passivations_total";
pub const ACTIVATIONS: &str = "colo_entity_activations_total";
pub const ACTIVE_RATIO: &str = "colo_passivation_active_ratio";
pub const WINDOW_PROPORTION: &str = "colo_passivation_window_proportion";
pub const COORDINATOR_REACHABLE: &str = "colo_region_coordinator_reachable";
pub const SHARD_ENTITIES: &str = "colo_shard_entities";

pub const STALE_REPLIES: &str = "colo_stale_replies_total";

pub const KAFKA_RECORDS: &str = "colo_kafka_records_total";
pub const KAFKA_PARTITIONER_MISMATCHES: &str = "colo_kafka_partitioner_mismatches_total";
pub const KAFKA_REBALANCES: &str = "colo_kafka_rebalances_total";
pub const KAFKA_REBALANCE_DURATION: &str = "colo_kafka_rebalance_callback_seconds";
pub const KAFKA_REVOKE_STEP_DURATION: &str = "colo_kafka_revoke_step_seconds";
pub const KAFKA_LAG: &str = "colo_kafka_consumer_lag";
pub const KAFKA_IN_FLIGHT: &str = "colo_kafka_records_in_flight";
pub const KAFKA_PAUSED: &str = "colo_kafka_partition_paused";
pub const KAFKA_HELD: &str = "colo_kafka_partition_held_records";
pub const KAFKA_WAITING: &str = "colo_kafka_partition_waiting_for_shard";
pub const KAFKA_COMMITS: &str = "colo_kafka_commits_total";
pub const KAFKA_COMMIT_LATENCY: &str = "colo_kafka_commit_latency_seconds";
pub const KAFKA_FIRST_RECORD: &str = "colo_kafka_assignment_to_first_record_seconds";
pub const KAFKA_GIVEN_UP: &str = "colo_kafka_partitions_given_up_total";

/// A Kafka source's metric handles, per topic where it matters.
#[derive(Clone, Debug)]
pub(crate) struct KafkaMetrics {
    entity_type: String,
    /// The same figures as one current picture, for the cluster map.
    view: Arc<KafkaView>,
}

impl KafkaMetrics {
    pub fn new(entity_type: &str, topics: &[String], view: Arc<KafkaView>) -> Self {
        describe();
        for topic in topics {
            for outcome in ["handled", "undecodable", "handler_failed", "refused"] {
                metrics::counter!(KAFKA_RECORDS, "entity_type" => entity_type.to_string(), "topic" => topic.clone(), "outcome" => outcome).increment(0);
            }
            metrics::counter!(KAFKA_PARTITIONER_MISMATCHES, "entity_type" => entity_type.to_string(), "topic" => topic.clone()).increment(0);
            for reason in ["lost", "revoke_timeout"] {
                metrics::counter!(KAFKA_GIVEN_UP, "entity_type" => entity_type.to_string(), "topic" => topic.clone(), "reason" => reason).increment(0);
            }
        }
        for kind in ["assigned", "revoked", "lost"] {
            metrics::counter!(KAFKA_REBALANCES, "entity_type" => entity_type.to_string(), "kind" => kind).increment(0);
        }
        for outcome in ["ok", "failed", "rebalancing"] {
            metrics::counter!(KAFKA_COMMITS, "entity_type" => entity_type.to_string(), "outcome" => outcome).increment(0);
        }
        Self {
            entity_type: entity_type.to_string(),
            view,
        }
    }

    /// The counter of records settled with `outcome` on `topic`, for a
    /// partition's task to keep (one registry lookup, not one per record).
    pub fn records(&self, topic: &str, outcome: &'static str) -> metrics::Counter {
        metrics::counter!(KAFKA_RECORDS, "entity_type" => self.entity_type.clone(), "topic" => topic.to_string(), "outcome" => outcome)
    }

    /// A record settled: `handled`, or dead-lettered as `undecodable` or
    /// `handler_failed`.
    pub fn record(&self, topic: &str, outcome: &'static str) {
        metrics::counter!(KAFKA_RECORDS, "entity_type" => self.entity_type.clone(), "topic" => topic.to_string(), "outcome" => outcome).increment(1);
    }

    /// A record in another partition than its key's murmur2 partition.
    pub fn partitioner_mismatch(&self, topic: &str) {
        metrics::counter!(KAFKA_PARTITIONER_MISMATCHES, "entity_type" => self.entity_type.clone(), "topic" => topic.to_string()).increment(1);
    }

    /// The handles of `partition`'s records as they are handled, for the
    /// partition's task to keep from its assignment here to its end.
    pub fn progress(&self, topic: &str, partition: i32) -> PartitionProgress {
        PartitionProgress::new(
            &self.entity_type,
            topic,
            partition,
            self.records(topic, "handled"),
        )
    }

    /// A partition's first record was handled this long after the
    /// partition was assigned here (its shard hosted, then consumed), in
    /// the assignment `tag`, the record `age` old when handled.
    pub fn first_record(
        &self,
        topic: &str,
        tag: RebalanceTag,
        since_assigned: Duration,
        age: Option<Duration>,
    ) {
        self.view.arrived(tag, since_assigned, age);
        metrics::histogram!(KAFKA_FIRST_RECORD, "entity_type" => self.entity_type.clone(), "topic" => topic.to_string()).record(since_assigned.as_secs_f64());
    }

    /// A partition's records in hand were given up uncommitted: it was
    /// `lost`, or a revoke's bound passed (`revoke_timeout`).
    pub fn given_up(&self, topic: &str, reason: &'static str) {
        metrics::counter!(KAFKA_GIVEN_UP, "entity_type" => self.entity_type.clone(), "topic" => topic.to_string(), "reason" => reason).increment(1);
    }

    /// A rebalance of `kind` (assigned, revoked, lost) of `partitions`
    /// partitions, how long this node's part in it took, and a revoke's
    /// `steps`; the cluster map keeps it under the tag returned.
    pub fn rebalance(
        &self,
        kind: &'static str,
        took: Duration,
        partitions: usize,
        steps: Vec<RevokeStep>,
    ) -> RebalanceTag {
        metrics::counter!(KAFKA_REBALANCES, "entity_type" => self.entity_type.clone(), "kind" => kind).increment(1);
        metrics::histogram!(KAFKA_REBALANCE_DURATION, "entity_type" => self.entity_type.clone(), "kind" => kind).record(took.as_secs_f64());
        self.view
            .rebalance(&self.entity_type, kind, took, partitions, steps)
    }

    /// One step of a revoke (settle, commit, release) and how long it
    /// took: a moved partition pauses for their sum, and this says which.
    pub fn revoke_step(&self, step: &'static str, took: Duration) -> RevokeStep {
        metrics::histogram!(KAFKA_REVOKE_STEP_DURATION, "entity_type" => self.entity_type.clone(), "step" => step).record(took.as_secs_f64());
        RevokeStep {
            step,
            seconds: took.as_secs_f64(),
        }
    }
}

/// What the source reports of one assigned partition, as its gauges and
/// the cluster map show it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PartitionGauges {
    pub in_flight: usize,
    pub paused: bool,
    pub held: usize,
    pub waiting_for_shard: bool,
    pub lag: Option<i64>,
}

impl KafkaMetrics {
    /// A partition's state, reported by the source while it is assigned
    /// here.
    pub fn partition(&self, topic: &str, partition: i32, state: PartitionGauges) {
        let labels = [
            ("entity_type", self.entity_type.clone()),
            ("topic", topic.to_string()),
            ("partition", partition.to_string()),
        ];
        metrics::gauge!(KAFKA_IN_FLIGHT, &labels).set(state.in_flight as f64);
        metrics::gauge!(KAFKA_PAUSED, &labels).set(if state.paused { 1.0 } else { 0.0 });
        metrics::gauge!(KAFKA_HELD, &labels).set(state.held as f64);
        metrics::gauge!(KAFKA_WAITING, &labels).set(if state.waiting_for_shard {
            1.0
        } else {
            0.0
        });
        if let Some(lag) = state.lag {
            metrics::gauge!(KAFKA_LAG, &labels).set(lag as f64);
        }
        self.view.partition(PartitionView {
            entity_type: self.entity_type.clone(),
            topic: topic.to_string(),
            partition,
            lag: state.lag,
            in_flight: state.in_flight,
            paused: state.paused,
            waiting_for_shard: state.waiting_for_shard,
        });
    }

    /// A partition is no longer assigned here.
    pub fn partition_gone(&self, topic: &str, partition: i32) {
        self.view
            .partition_gone(&self.entity_type, topic, partition);
        let labels = [
            ("entity_type", self.entity_type.clone()),
            ("topic", topic.to_string()),
            ("partition", partition.to_string()),
        ];
        // Another node reports it now: this one's series read zero.
        for name in [
            KAFKA_IN_FLIGHT,
            KAFKA_PAUSED,
            KAFKA_HELD,
            KAFKA_WAITING,
            KAFKA_LAG,
        ] {
            metrics::gauge!(name, &labels).set(0.0);
        }
    }

    /// A commit of the source's offsets ended, `ok` or not.
    pub fn committed(&self, latency: Option<Duration>, ok: bool) {
        let outcome = if ok { "ok" } else { "failed" };
        metrics::counter!(KAFKA_COMMITS, "entity_type" => self.entity_type.clone(), "outcome" => outcome).increment(1);
        if let Some(latency) = latency {
            metrics::histogram!(KAFKA_COMMIT_LATENCY, "entity_type" => self.entity_type.clone())
                .record(latency.as_secs_f64());
        }
    }

    /// A commit was refused because the group was rebalancing.
    pub fn commit_refused_in_rebalance(&self) {
        metrics::counter!(KAFKA_COMMITS, "entity_type" => self.entity_type.clone(), "outcome" => "rebalancing").increment(1);
    }
}

/// A reply meant for an earlier incarnation of this node (it restarted at
/// the same address since the ask): dropped and counted.
pub fn stale_reply() {
    metrics::counter!(STALE_REPLIES).increment(1);
}

/// An envelope from another node that could not be read at all (no entity
/// type to label it with): counted under `reason="malformed"`.
pub fn malformed_envelope() {
    metrics::counter!(DROPPED, "entity_type" => "", "reason" => "malformed").increment(1);
}

/// Registers descriptions with the installed recorder; cheap to call again.
pub fn describe() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        use metrics::{describe_counter, describe_gauge, describe_histogram};
        describe_gauge!(HOSTED_SHARDS, "Shards hosted by this node's region");
        describe_gauge!(HOSTED_ENTITIES, "Live entities in this node's region");
        describe_gauge!(
            ENTITY_MEMORY,
            Unit::Bytes,
            "Estimated memory of the region's live entities, where the node has a memory budget (passivation.memory_budget)"
        );
        describe_counter!(DELIVERED, "Messages handled by an entity on this node");
        describe_counter!(
            FORWARDED,
            "Messages forwarded to the region of another node"
        );
        describe_gauge!(
            BUFFERED,
            "Messages buffered while their shard home is unknown"
        );
        describe_counter!(BUFFERED_TOTAL, "Messages that were buffered at least once");
        describe_counter!(DROPPED, "Messages refused or lost, by reason");
        describe_counter!(ENTITY_FAILURES, "Entity handlers that failed or panicked");
        describe_counter!(
            STALE_REPLIES,
            "Ask replies dropped because they were meant for an earlier incarnation of this node"
        );
        describe_histogram!(
            SHARD_HOME_LATENCY,
            Unit::Seconds,
            "Time from asking the coordinator for a shard home to the answer"
        );
        describe_counter!(
            HANDOFFS,
            "Shard hand-offs run by the coordinator, by outcome"
        );
        describe_histogram!(
            HANDOFF_DURATION,
            Unit::Seconds,
            "Duration of shard hand-offs"
        );
        describe_counter!(
            REBALANCED_SHARDS,
            "Shards chosen by the rebalance loop to move"
        );
        describe_gauge!(
            COORDINATOR_REGIONS,
            "Regions registered with the coordinator"
        );
        describe_counter!(
            PASSIVATIONS,
            "Entities passivated, by reason (idle, limit, explicit, hand-off)"
        );
        describe_counter!(ACTIVATIONS, "Entities created for a message");
        describe_gauge!(
            ACTIVE_RATIO,
            "Share of messages in the last interval that found their entity active"
        );
        describe_gauge!(
            WINDOW_PROPORTION,
            "Mean admission window of the adaptive passivation policies, as a share of the limit"
        );
        describe_gauge!(
            SHARD_ENTITIES,
            "Live entities per hosted shard (0 once the shard left this node)"
        );
        describe_gauge!(
            COORDINATOR_REACHABLE,
            "1 while the coordinator answers this region's heartbeats, 0 once the region has fenced itself or lost its link"
        );
        describe_counter!(
            KAFKA_RECORDS,
            "Kafka records settled, by topic and outcome: handled, or dead-lettered as undecodable, refused (an empty entity id, a message that cannot be encoded), handler_failed (max_attempts failures) or undeliverable (not delivered for redelivery_timeout)"
        );
        describe_counter!(
            KAFKA_PARTITIONER_MISMATCHES,
            "Kafka records found in another partition than the murmur2 partition of their key (handled, but not where their shard lives)"
        );
        describe_counter!(
            KAFKA_REBALANCES,
            "Kafka consumer group rebalances seen by this node, by kind (assigned, revoked, lost)"
        );
        describe_histogram!(
            KAFKA_REBALANCE_DURATION,
            Unit::Seconds,
            "How long this node's part of a rebalance took (hosting or handing off the shards)"
        );
        describe_histogram!(
            KAFKA_REVOKE_STEP_DURATION,
            Unit::Seconds,
            "How long each step of a revoke took, by step: settle (the revoked partitions' records in hand handled), commit (their offsets), release (their shards handed off)"
        );
        describe_gauge!(
            KAFKA_LAG,
            "Records between each assigned partition's end and the next record to handle (0 once the partition left this node)"
        );
        describe_gauge!(
            KAFKA_IN_FLIGHT,
            "Records of each assigned partition being handled (delivered, not settled yet)"
        );
        describe_gauge!(
            KAFKA_PAUSED,
            "1 while an assigned partition is paused: at its in-flight bound (kafka.max_in_flight), with records held under the bound of all the entity type's partitions (kafka.max_in_flight_total), or with as many records held while it waits for its shard"
        );
        describe_gauge!(
            KAFKA_HELD,
            "Records of an assigned partition polled but held back: it waits for its shard, or is at its in-flight bound"
        );
        describe_gauge!(
            KAFKA_WAITING,
            "1 while an assigned partition waits for its shard to start on this node (its previous owner has not released it): its records are held"
        );
        describe_counter!(
            KAFKA_COMMITS,
            "Offset commits of handled records, by outcome: ok, failed, or rebalancing (refused while the group rebalanced; a later commit carries the offsets)"
        );
        describe_histogram!(
            KAFKA_COMMIT_LATENCY,
            Unit::Seconds,
            "How long the broker took to answer an offset commit made at a revoke or at shutdown (the ones a hand-off waits for)"
        );
        describe_histogram!(
            KAFKA_FIRST_RECORD,
            Unit::Seconds,
            "From a partition's assignment to this node to its first record handled here (the shard's start included)"
        );
        describe_counter!(
            KAFKA_GIVEN_UP,
            "Partitions whose records in hand were given up uncommitted (their next owner handles them again), by reason: lost (the session expired) or revoke_timeout (not settled within kafka.delivery_timeout at a revoke)"
        );
        durable_state::describe();
        coordinator::describe();
        progress::describe();
        timers::describe();
        outputs::describe();
        // Node-wide series exist, at zero, before anything happens.
        metrics::counter!(STALE_REPLIES).increment(0);
        metrics::counter!(DROPPED, "entity_type" => "", "reason" => "malformed").increment(0);
    });
}

/// A region's metric handles.
#[derive(Clone)]
pub(crate) struct RegionMetrics {
    pub hosted_shards: Gauge,
    pub hosted_entities: Gauge,
    pub entity_memory: Gauge,
    pub delivered: Counter,
    pub forwarded: Counter,
    pub buffered: Gauge,
    pub buffered_total: Counter,
    pub dropped_buffer_full: Counter,
    pub dropped_undeliverable: Counter,
    pub dropped_bad_payload: Counter,
    pub dropped_wrong_shard: Counter,
    pub dropped_mailbox_full: Counter,
    pub dropped_unconfirmed: Counter,
    pub dropped_abandoned: Counter,
    pub entity_failures: Counter,
    pub shard_home_latency: Histogram,
    pub activations: Counter,
    pub active_ratio: Gauge,
    pub window_proportion: Gauge,
    pub coordinator_reachable: Gauge,
    passivations: [Counter; 4],
}

impl RegionMetrics {
    pub fn new(entity_type: &str) -> Self {
        initialise(entity_type);
        let et = entity_type.to_string();
        let dropped = |reason: &'static str| metrics::counter!(DROPPED, "entity_type" => et.clone(), "reason" => reason);
        Self {
            hosted_shards: metrics::gauge!(HOSTED_SHARDS, "entity_type" => et.clone()),
            hosted_entities: metrics::gauge!(HOSTED_ENTITIES, "entity_type" => et.clone()),
            entity_memory: metrics::gauge!(ENTITY_MEMORY, "entity_type" => et.clone()),
            delivered: metrics::counter!(DELIVERED, "entity_type" => et.clone()),
            forwarded: metrics::counter!(FORWARDED, "entity_type" => et.clone()),
            buffered: metrics::gauge!(BUFFERED, "entity_type" => et.clone()),
            buffered_total: metrics::counter!(BUFFERED_TOTAL, "entity_type" => et.clone()),
            dropped_buffer_full: dropped("buffer_full"),
            dropped_undeliverable: dropped("undeliverable"),
            dropped_bad_payload: dropped("bad_payload"),
            dropped_wrong_shard: dropped("wrong_shard"),
            dropped_mailbox_full: dropped("mailbox_full"),
            dropped_unconfirmed: dropped("unconfirmed"),
            dropped_abandoned: dropped("abandoned"),
            entity_failures: metrics::counter!(ENTITY_FAILURES, "entity_type" => et.clone()),
            shard_home_latency: metrics::histogram!(SHARD_HOME_LATENCY, "entity_type" => et.clone()),
            activations: metrics::counter!(ACTIVATIONS, "entity_type" => et.clone()),
            active_ratio: metrics::gauge!(ACTIVE_RATIO, "entity_type" => et.clone()),
            window_proportion: metrics::gauge!(WINDOW_PROPORTION, "entity_type" => et.clone()),
            coordinator_reachable: metrics::gauge!(COORDINATOR_REACHABLE, "entity_type" => et.clone()),
            passivations: [
                PassivationReason::Idle,
                PassivationReason::Limit,
                PassivationReason::Explicit,
                PassivationReason::HandOff,
            ]
            .map(|r| metrics::counter!(PASSIVATIONS, "entity_type" => et.clone(), "reason" => r.as_str())),
        }
    }

    pub fn passivated(&self, reason: PassivationReason) {
        self.passivations[reason as usize].increment(1);
    }

    /// A shard's gauge of live entities.
    pub fn shard_entities(&self, entity_type: &str, shard: colo_allocation::ShardId) -> Gauge {
        metrics::gauge!(SHARD_ENTITIES, "entity_type" => entity_type.to_string(), "shard" => shard.to_string())
    }
}

/// Registers the series of an entity type that only some nodes, or only
/// some events, would otherwise create, at zero: a dashboard then finds
/// every series on every node from the start, and `rate()` sees the first
/// event.
fn initialise(entity_type: &str) {
    let et = || entity_type.to_string();
    for outcome in ["completed", "failed"] {
        metrics::counter!(HANDOFFS, "entity_type" => et(), "outcome" => outcome).increment(0);
    }
    let _ = metrics::histogram!(HANDOFF_DURATION, "entity_type" => et());
    metrics::counter!(REBALANCED_SHARDS, "entity_type" => et()).increment(0);
    metrics::counter!(ENTITY_FAILURES, "entity_type" => et()).increment(0);
    metrics::counter!(ACTIVATIONS, "entity_type" => et()).increment(0);
}

pub(crate) fn handoff_finished(entity_type: &str, ok: bool, took: Duration) {
    let outcome = if ok { "completed" } else { "failed" };
    metrics::counter!(HANDOFFS, "entity_type" => entity_type.to_string(), "outcome" => outcome)
        .increment(1);
    metrics::histogram!(HANDOFF_DURATION, "entity_type" => entity_type.to_string())
        .record(took.as_secs_f64());
}

pub(crate) fn rebalance_started(entity_type: &str, shards: usize) {
    metrics::counter!(REBALANCED_SHARDS, "entity_type" => entity_type.to_string())
        .increment(shards as u64);
}

pub(crate) fn coordinator_regions(entity_type: &str, regions: usize) {
    metrics::gauge!(COORDINATOR_REGIONS, "entity_type" => entity_type.to_string())
        .set(regions as f64);
}
