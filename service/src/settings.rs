//! Per entity type settings, with Akka Cluster Sharding's defaults.

use colo_passivation::PassivationStrategy;
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// How one entity type is sharded. Every node of a cluster must use the same
/// `number_of_shards`; the rest may differ per node but rarely should.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ShardingSettings {
    /// How many shards the default extractor spreads entities over. About ten
    /// times the largest expected number of nodes keeps rebalances fine-grained.
    pub number_of_shards: u32,
    /// How often a region retries registration and unanswered home requests.
    pub retry_interval: Duration,
    /// The most messages a region buffers in total while shard homes are
    /// unknown or handing off; past it a sender gets an error.
    pub buffer_size: usize,
    /// How long a hand-off may take; entities that have not stopped on the
    /// stop message by then are dropped.
    pub handoff_timeout: Duration,
    /// How often the coordinator asks the allocation strategy for shards to move.
    pub rebalance_interval: Duration,
    /// How long the coordinator waits for a region to confirm it hosts a shard
    /// before asking again.
    pub shard_start_timeout: Duration,
    /// How many regions must be registered before the coordinator allocates
    /// the first shard, so that the first region does not get every shard.
    pub min_members: usize,
    /// How often a region tells its coordinator it is alive; each heartbeat
    /// is answered, and the answers are what keeps the region hosting.
    pub heartbeat_interval: Duration,
    /// How long a region hosts its shards without an answer from its
    /// coordinator. Past it the region stops them (fences itself) and
    /// serves them again only after registering anew: a region cut off from
    /// its coordinator may already be replaced by another node. The default
    /// (12 s) outlasts an election through Kafka (the election group's 6 s
    /// session, a rebalance round and the takeover), so a coordinator that
    /// moves does not stop the shards of the nodes that survive it.
    pub fence_timeout: Duration,
    /// How long the coordinator waits without hearing from a region before
    /// it terminates the region and places its shards elsewhere. It must
    /// exceed `fence_timeout` by a margin (see [`Self::validate`]), so that
    /// the region has stopped its copies by then.
    pub region_timeout: Duration,
    /// How entities are passivated (Akka's default: idle for 120 s).
    pub passivation: PassivationStrategy,
    /// Capacity of each shard's mailbox: senders wait when a shard is this far
    /// behind, which is the backpressure that keeps memory bounded.
    pub shard_mailbox_capacity: usize,
    /// How many entities of one shard may handle a message at the same time.
    /// Each entity still handles its own messages one at a time, in order;
    /// this bounds how many handlers of a shard await I/O at once.
    pub shard_concurrency: usize,
    /// How long a tell made inside an entity handler waits for room in a
    /// full mailbox before it fails with [`TellError::MailboxFull`]: a
    /// handler must not wait for ever on a shard that may be waiting for
    /// it. Tells from outside handlers wait as long as it takes.
    ///
    /// [`TellError::MailboxFull`]: crate::TellError::MailboxFull
    pub handler_tell_timeout: Duration,
    /// Remember entities (Akka's remember-entities; off by default, as in
    /// Akka): a durable entity type's entities with state in a shard are
    /// started again when the shard starts (after a hand-off, a crash or a
    /// restart), without waiting for a message, at the given rate; and
    /// they are not passivated automatically (no idle timeout, no limit),
    /// only when they ask for it.
    #[serde(default)]
    pub remember_entities: Option<EntityRecovery>,
    /// Standby shards (like Kafka Streams' `num.standby.replicas`; 0, off,
    /// by default): how many nodes besides a shard's host keep a warm copy
    /// of a durable entity type's shard by reading its changelog, so that
    /// a start of the shard there reads only the tail. The coordinator
    /// places a shard on a node keeping its copy when the balance of
    /// shards allows (`AllocationStrategy::allocate_warm`). Kafka, not
    /// colo, decides which node a partition's shard goes to: with one less
    /// than the nodes, each node that may get it has its copy warm.
    #[serde(default)]
    pub standbys: u32,
    /// How long an entity keeps the idempotency key of a client tell it
    /// applied (24 h by default, as Restate's): a retry with the key
    /// within it is answered as applied and not applied again, wherever the
    /// entity runs by then. A durable entity keeps its keys with its state.
    #[serde(default = "default_idempotency_retention")]
    pub idempotency_retention: Duration,
    /// The most idempotency keys an entity keeps (100 by default), the
    /// oldest dropped first: every change of a durable entity writes its
    /// keys with its state. A retry that comes after this many newer keyed
    /// tells of the same entity is applied again.
    #[serde(default = "default_idempotency_keys")]
    pub idempotency_keys: usize,
}

fn default_idempotency_retention() -> Duration {
    Duration::from_secs(24 * 3600)
}

fn default_idempotency_keys() -> usize {
    100
}

/// How an entity type consumes a source of acked records (for Kafka,
/// `colo::kafka::IngestSettings`): the source's own settings, and how the
/// ingest settles, retries and gives up records, which does not depend on
/// the source.
#[derive(Debug, Clone)]
pub struct IngestSettings<S> {
    /// The source's own settings (for Kafka: brokers, group, topics).
    pub source: S,
    /// How long a revoke (or a graceful stop) waits for the records in
    /// hand to settle; those left then are given up, uncommitted, and
    /// handled again by the partition's next owner. A record is delivered
    /// again only when its delivery failed, never because it waits, but
    /// for a record sent to another node: one unanswered this long is sent
    /// again (that node may have died with it).
    pub delivery_timeout: Duration,
    /// How long hosting or releasing shards may take in a rebalance.
    pub placement_timeout: Duration,
    /// Handler failures of one record before it is dead-lettered.
    pub max_attempts: u32,
    /// How long a record whose deliveries keep failing for a reason that
    /// waiting does not pass (its shard's node refuses it, or drops it
    /// unhandled) is delivered again before it is dead-lettered: no record
    /// holds its partition up for ever.
    pub redelivery_timeout: Duration,
    /// The pause before a record is delivered again.
    pub retry_backoff: Duration,
    /// Where records that cannot be handled go: `<cluster>.<entity
    /// type>.dlq` by convention.
    pub dead_letter_topic: String,
}

/// How remembered entities start again with their shard (Akka's
/// entity-recovery-strategy).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum EntityRecovery {
    /// All at once.
    All,
    /// `number` of them every `frequency`, so that a shard of many
    /// entities does not load them all in one burst.
    Constant { frequency: Duration, number: usize },
}

impl Default for ShardingSettings {
    fn default() -> Self {
        Self {
            number_of_shards: 1000,
            retry_interval: Duration::from_secs(2),
            buffer_size: 100_000,
            handoff_timeout: Duration::from_secs(60),
            rebalance_interval: Duration::from_secs(10),
            shard_start_timeout: Duration::from_secs(10),
            min_members: 1,
            heartbeat_interval: Duration::from_secs(1),
            fence_timeout: Duration::from_secs(12),
            region_timeout: Duration::from_secs(17),
            passivation: PassivationStrategy::default(),
            shard_mailbox_capacity: 1024,
            shard_concurrency: 256,
            handler_tell_timeout: Duration::from_secs(1),
            remember_entities: None,
            standbys: 0,
            idempotency_retention: default_idempotency_retention(),
            idempotency_keys: default_idempotency_keys(),
        }
    }
}

impl From<colo_passivation::StrategyError> for SettingsError {
    fn from(e: colo_passivation::StrategyError) -> Self {
        Self {
            field: e.field,
            reason: e.reason,
        }
    }
}

/// A setting that cannot work, named so the operator can fix it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid setting `{field}`: {reason}")]
pub struct SettingsError {
    /// The setting's name.
    pub field: &'static str,
    /// Why the value is refused.
    pub reason: String,
}

impl ShardingSettings {
    /// Checks every field; the entity type is refused at registration when one
    /// is wrong, instead of failing later under load.
    ///
    /// At most one live copy of an entity rests on the timeouts: a region
    /// stops its shards `fence_timeout` after the send time of its last
    /// answered heartbeat, and the coordinator places them elsewhere only
    /// `region_timeout` after it last heard from the region, which is no
    /// earlier. `region_timeout` must exceed `fence_timeout` by at least two
    /// heartbeat intervals, and the stop messages of a fenced region must
    /// finish within that margin (they are cut off at `region_timeout`).
    /// This assumes that the clocks of both processes run at about the same
    /// rate, and that a process that was paused (stopped, swapped out, a VM
    /// suspended) checks the age of its last answer before it handles any
    /// message, which regions do. It is the same assumption Akka makes with
    /// its removal margin after downing.
    ///
    /// # Errors
    /// The first field whose value cannot work.
    pub fn validate(&self) -> Result<(), SettingsError> {
        let err = |field, reason: &str| {
            Err(SettingsError {
                field,
                reason: reason.to_string(),
            })
        };
        if self.number_of_shards == 0 {
            return err("number_of_shards", "must be at least 1");
        }
        if self.idempotency_retention.is_zero() {
            return err("idempotency_retention", "must be longer than zero");
        }
        if self.idempotency_keys == 0 {
            return err("idempotency_keys", "must be at least 1");
        }
        if let Some(EntityRecovery::Constant { frequency, number }) = self.remember_entities {
            if frequency.is_zero() || number == 0 {
                return err(
                    "entity_recovery",
                    "a constant rate needs a frequency longer than zero and at least 1 entity",
                );
            }
        }
        for (field, value) in [
            ("retry_interval", self.retry_interval),
            ("handoff_timeout", self.handoff_timeout),
            ("rebalance_interval", self.rebalance_interval),
            ("shard_start_timeout", self.shard_start_timeout),
            ("heartbeat_interval", self.heartbeat_interval),
        ] {
            if value.is_zero() {
                return err(field, "must be longer than zero");
            }
        }
        if self.fence_timeout < self.heartbeat_interval * 3 {
            return Err(SettingsError {
                field: "fence_timeout",
                reason: format!(
                    "must be at least three heartbeat intervals ({}), so one late answer does not fence a region",
                    humantime::format_duration(self.heartbeat_interval * 3)
                ),
            });
        }
        if self.region_timeout < self.fence_timeout + self.heartbeat_interval * 2 {
            return Err(SettingsError {
                field: "region_timeout",
                reason: format!(
                    "must exceed fence_timeout by at least two heartbeat intervals (at least {}), so a silent region has stopped its shards before they start elsewhere",
                    humantime::format_duration(self.fence_timeout + self.heartbeat_interval * 2)
                ),
            });
        }
        if self.buffer_size == 0 {
            return err("buffer_size", "must be at least 1");
        }
        if self.min_members == 0 {
            return err("min_members", "must be at least 1");
        }
        if self.shard_mailbox_capacity == 0 {
            return err("shard_mailbox_capacity", "must be at least 1");
        }
        if self.shard_concurrency == 0 {
            return err("shard_concurrency", "must be at least 1");
        }
        if self.handler_tell_timeout.is_zero() {
            return err("handler_tell_timeout", "must be longer than zero");
        }
        self.passivation.validate().map_err(SettingsError::from)
    }

    /// How long a shard waits for its entities to handle the stop message
    /// before dropping them: Akka's `(handoff_timeout - 5 s).max(1 s)`, capped
    /// by the timeout itself so short test timeouts stay consistent.
    pub fn entity_stop_timeout(&self) -> Duration {
        self.handoff_timeout
            .saturating_sub(Duration::from_secs(5))
            .max(Duration::from_secs(1))
            .min(self.handoff_timeout)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_akkas() {
        let s = ShardingSettings::default();
        assert_eq!(s.number_of_shards, 1000);
        assert_eq!(s.retry_interval, Duration::from_secs(2));
        assert_eq!(s.buffer_size, 100_000);
        assert_eq!(s.handoff_timeout, Duration::from_secs(60));
        assert_eq!(s.rebalance_interval, Duration::from_secs(10));
        assert_eq!(s.shard_start_timeout, Duration::from_secs(10));
        assert!(s.validate().is_ok());
        assert_eq!(s.entity_stop_timeout(), Duration::from_secs(55));
    }

    #[test]
    fn invalid_fields_are_named() {
        let s = ShardingSettings {
            number_of_shards: 0,
            ..Default::default()
        };
        assert_eq!(s.validate().unwrap_err().field, "number_of_shards");
        let s = ShardingSettings {
            handoff_timeout: Duration::ZERO,
            ..Default::default()
        };
        let e = s.validate().unwrap_err();
        assert_eq!(e.field, "handoff_timeout");
        assert!(e.to_string().contains("handoff_timeout"));
        let s = ShardingSettings {
            buffer_size: 0,
            ..Default::default()
        };
        assert_eq!(s.validate().unwrap_err().field, "buffer_size");
    }
}
