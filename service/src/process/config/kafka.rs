//! `[kafka]`: the topics whose records drive entity types, and how they are
//! consumed. Absent, the node reads no Kafka.

use super::secrets::ClientProperties;
use crate::settings::IngestSettings;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::time::Duration;

/// `[kafka]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KafkaSection {
    /// `host:port[,host:port...]` of the brokers.
    pub bootstrap_servers: String,
    /// Names the consumer group of each entity type, `<cluster>.<entity
    /// type>`, and its dead-letter topic, `<cluster>.<entity type>.dlq`.
    /// Every node of one cluster names the same.
    #[serde(default = "default_cluster")]
    pub cluster: String,
    /// Entity type name to the topics whose records drive it. Each topic
    /// must have `sharding.number_of_shards` partitions (shard = partition).
    /// An entity type that is not named here is not driven by Kafka.
    #[serde(default)]
    pub topics: BTreeMap<String, Vec<String>>,
    /// Entity type name to its dead-letter topic, where the convention
    /// `<cluster>.<entity type>.dlq` does not suit.
    #[serde(default)]
    pub dead_letter_topics: BTreeMap<String, String>,
    /// Create missing topics at startup: the entity type's topics with
    /// `number_of_shards` partitions, dead-letter topics with one.
    #[serde(default)]
    pub create_topics: bool,
    /// How long startup waits for the brokers' first answer (they may be
    /// starting beside the node); past it the node stops, naming them. The
    /// node serves nothing meanwhile.
    #[serde(default = "default_startup_timeout", with = "humantime_serde")]
    pub startup_timeout: Duration,
    /// The replication factor of topics the node creates.
    #[serde(default = "default_replication_factor")]
    pub replication_factor: i32,
    /// How often the offsets of handled records are committed (and at
    /// every revoke and at shutdown).
    #[serde(default = "default_commit_interval", with = "humantime_serde")]
    pub commit_interval: Duration,
    /// How long a commit at a revoke or at shutdown may take, retries
    /// included; past it the hand-off goes on, and the partition's next
    /// owner handles the records since the last commit again.
    #[serde(default = "default_commit_timeout", with = "humantime_serde")]
    pub commit_timeout: Duration,
    /// Records of one partition being handled at once at most; past it the
    /// partition is paused until some are handled. A durable entity
    /// type's records that were handled and wait only for their write
    /// count apart, against `AWAITING_DURABILITY_PER_IN_FLIGHT` times it.
    /// A record goes round a few tasks, tens of milliseconds each under
    /// load, so the bound caps what a partition handles a second: 1,000
    /// held a backlog to half of what 10,000 lets through. Each record
    /// in hand costs memory, and a revoke waits for them.
    #[serde(default = "default_max_in_flight")]
    pub max_in_flight: usize,
    /// Records of all of an entity type's partitions on this node being
    /// handled at once at most, counted as `max_in_flight` counts them;
    /// past it partitions with records waiting are paused, and resumed in
    /// turn, each first up to its share. The per-partition bound is sized
    /// for a backlog's rate on a few dozen partitions; a node of hundreds
    /// would hold hundreds of times it, in memory and in what a revoke
    /// waits for, without this.
    #[serde(default = "default_max_in_flight_total")]
    pub max_in_flight_total: usize,
    /// How long a revoke (or a graceful stop) waits for the records in
    /// hand to be handled; those left then are not committed, and the
    /// partition's next owner handles them again. Also how long a
    /// partition may make no progress with records waiting before it is
    /// reported stalled (logged at warn), and how long a record sent to
    /// another node (its shard's) waits for an answer before it is sent
    /// again. Otherwise a record is delivered again only when its delivery
    /// failed, never because it waited.
    #[serde(default = "default_delivery_timeout", with = "humantime_serde")]
    pub delivery_timeout: Duration,
    /// Handler failures of one record before it goes to the dead-letter
    /// topic.
    #[serde(default = "default_max_attempts")]
    pub max_attempts: u32,
    /// The pause before a record is delivered again.
    #[serde(default = "default_retry_backoff", with = "humantime_serde")]
    pub retry_backoff: Duration,
    /// How long a record whose deliveries keep failing for a reason that
    /// waiting does not pass (never a handler failure: its shard's node
    /// refuses it or drops it unhandled) is delivered again before it goes
    /// to the dead-letter topic.
    #[serde(default = "default_redelivery_timeout", with = "humantime_serde")]
    pub redelivery_timeout: Duration,
    /// Send the outputs of a durable entity type that emits records in
    /// Kafka transactions, each with the changelog records of the changes
    /// that emitted them: a reader with `read_committed` sees each output
    /// once, without looking at ids. Each shard of such a type has a
    /// producer of its own on its node (it fences the shard's last one).
    /// Off: each output goes after its write, under its id, and a reader
    /// drops the rare copy by that id.
    #[serde(default)]
    pub transactional_outputs: bool,
    /// librdkafka properties passed through to every Kafka client of the
    /// node (security, timeouts), e.g. `"session.timeout.ms" = "10000"`.
    /// Those colo sets itself (`group.id`, offset handling, the assignor)
    /// are refused.
    /// A value may come from a file or an environment variable
    /// (`config/secrets.rs`); secret ones are never shown.
    #[serde(default)]
    pub client: ClientProperties,
}

/// librdkafka's `session.timeout.ms`, and Apache Kafka's
/// `group.consumer.session.timeout.ms`.
const DEFAULT_GROUP_SESSION_TIMEOUT: Duration = Duration::from_secs(45);

fn default_cluster() -> String {
    "colo".to_string()
}

/// Long enough for a broker started with the node (docker-compose starts
/// both at once) to come up.
fn default_startup_timeout() -> Duration {
    Duration::from_secs(60)
}

fn default_replication_factor() -> i32 {
    1
}

fn default_commit_interval() -> Duration {
    Duration::from_secs(1)
}

fn default_commit_timeout() -> Duration {
    Duration::from_secs(10)
}

/// A durable record stays in hand until its shard has applied it, a round
/// of the partition's task and the shard's of tens of milliseconds under
/// load: at 10,000 a partition of a backlog met its bound about every
/// quarter of a second, and each pause cost it up to a second while
/// librdkafka fetched it again (measured in BENCHMARKS.md).
fn default_max_in_flight() -> usize {
    30_000
}

/// About seven partitions at their bound: the two-node benches' six
/// partitions a node are never held by it, the one-node runs' 12 or 24
/// are, and still run faster than at a bound of 10,000 a partition.
fn default_max_in_flight_total() -> usize {
    200_000
}

fn default_delivery_timeout() -> Duration {
    Duration::from_secs(10)
}

fn default_max_attempts() -> u32 {
    3
}

fn default_retry_backoff() -> Duration {
    Duration::from_millis(100)
}

/// Longer than a hand-off or a dead node's removal (`region_timeout`)
/// takes, which refuse records for a while; a record refused for a minute
/// is refused for good.
fn default_redelivery_timeout() -> Duration {
    Duration::from_secs(60)
}

impl KafkaSection {
    /// The consumer group of `entity_type`.
    pub fn group_id(&self, entity_type: &str) -> String {
        format!("{}.{entity_type}", self.cluster)
    }

    /// The dead-letter topic of `entity_type`.
    pub fn dead_letter_topic(&self, entity_type: &str) -> String {
        self.dead_letter_topics
            .get(entity_type)
            .cloned()
            .unwrap_or_else(|| format!("{}.{entity_type}.dlq", self.cluster))
    }

    /// The topic the cluster's coordinators keep their state in: one
    /// partition, compacted, shared by every entity type.
    pub fn coordinator_topic(&self) -> String {
        format!("{}.coordinator", self.cluster)
    }

    /// The changelog topic of a durable `entity_type`.
    pub fn changelog_topic(&self, entity_type: &str) -> String {
        format!("{}.{entity_type}.changelog", self.cluster)
    }

    /// How long the brokers keep a silent member's partitions in its
    /// entity types' groups: `session.timeout.ms` when the client sets it,
    /// else 45 s (librdkafka's default, and the brokers' default for the
    /// consumer protocol, whose session they set).
    pub fn group_session_timeout(&self) -> Duration {
        self.client
            .pairs()
            .into_iter()
            .find(|(key, _)| key == "session.timeout.ms")
            .and_then(|(_, ms)| ms.trim().parse().ok())
            .map_or(DEFAULT_GROUP_SESSION_TIMEOUT, Duration::from_millis)
    }

    /// The client properties as the connectors take them.
    pub fn client_properties(&self) -> Vec<(String, String)> {
        self.client.pairs()
    }

    /// Refuses what deserializing lets through.
    pub(super) fn check(&self) -> Result<(), (String, String)> {
        let refuse =
            |field: &str, reason: &str| Err((format!("kafka.{field}"), reason.to_string()));
        if self.bootstrap_servers.trim().is_empty() {
            return refuse("bootstrap_servers", "must name at least one broker");
        }
        if self.cluster.is_empty() || !self.cluster.chars().all(topic_char) {
            return refuse(
                "cluster",
                "must be non-empty and use only letters, digits, '.', '_' and '-' (it names groups and topics)",
            );
        }
        for (entity_type, topics) in &self.topics {
            if topics.is_empty() {
                return refuse(&format!("topics.{entity_type}"), "names no topic");
            }
            if let Some(bad) = topics
                .iter()
                .find(|t| t.is_empty() || !t.chars().all(topic_char))
            {
                return Err((
                    format!("kafka.topics.{entity_type}"),
                    format!("`{bad}` is not a topic name (letters, digits, '.', '_' and '-')"),
                ));
            }
        }
        for (entity_type, topic) in &self.dead_letter_topics {
            if !self.topics.contains_key(entity_type) {
                return Err((
                    format!("kafka.dead_letter_topics.{entity_type}"),
                    "names an entity type kafka.topics does not".to_string(),
                ));
            }
            if topic.is_empty() || !topic.chars().all(topic_char) {
                return Err((
                    format!("kafka.dead_letter_topics.{entity_type}"),
                    format!("`{topic}` is not a topic name"),
                ));
            }
        }
        if self.startup_timeout.is_zero() {
            return refuse("startup_timeout", "must be longer than zero");
        }
        if self.replication_factor < 1 {
            return refuse("replication_factor", "must be at least 1");
        }
        if self.commit_interval.is_zero() {
            return refuse("commit_interval", "must be longer than zero");
        }
        if self.commit_timeout.is_zero() {
            return refuse("commit_timeout", "must be longer than zero");
        }
        if self.max_in_flight == 0 {
            return refuse("max_in_flight", "must be at least 1");
        }
        if self.max_in_flight_total == 0 {
            return refuse("max_in_flight_total", "must be at least 1");
        }
        if self.delivery_timeout.is_zero() {
            return refuse("delivery_timeout", "must be longer than zero");
        }
        if self.max_attempts == 0 {
            return refuse("max_attempts", "must be at least 1");
        }
        if self.redelivery_timeout.is_zero() {
            return refuse("redelivery_timeout", "must be longer than zero");
        }
        Ok(())
    }
}

fn topic_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')
}

impl super::NodeConfig {
    /// How `entity_type` consumes its topics, if `[kafka]` names it.
    ///
    /// A revoke waits for the partition's records in flight (at most
    /// `delivery_timeout`), their commit (at most `commit_timeout`), then
    /// for the shards' release (a hand-off, at most `handoff_timeout`); an
    /// assignment for the shards' start. The rebalance callback's timeout
    /// is the sum, so none is cut short.
    pub fn ingest_settings(
        &self,
        entity_type: &str,
    ) -> Option<IngestSettings<colo_connectors::SourceSettings>> {
        let kafka = self.kafka.as_ref()?;
        let topics = kafka.topics.get(entity_type)?;
        let placement_timeout = self
            .sharding
            .handoff_timeout
            .max(self.sharding.shard_start_timeout);
        Some(IngestSettings {
            source: colo_connectors::SourceSettings {
                bootstrap_servers: kafka.bootstrap_servers.clone(),
                group_id: kafka.group_id(entity_type),
                topics: topics.clone(),
                client: kafka.client_properties(),
                max_in_flight: kafka.max_in_flight,
                max_in_flight_total: kafka.max_in_flight_total,
                commit_interval: kafka.commit_interval,
                rebalance_timeout: placement_timeout
                    + kafka.delivery_timeout
                    + kafka.commit_timeout,
                commit_timeout: kafka.commit_timeout,
                stall_timeout: kafka.delivery_timeout,
            },
            delivery_timeout: kafka.delivery_timeout,
            placement_timeout,
            max_attempts: kafka.max_attempts,
            redelivery_timeout: kafka.redelivery_timeout,
            retry_backoff: kafka.retry_backoff,
            dead_letter_topic: kafka.dead_letter_topic(entity_type),
        })
    }
}
