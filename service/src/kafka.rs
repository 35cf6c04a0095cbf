//! Kafka, in one room: the records driving an entity type (the
//! connector's source wired to the type's region on this node, below), a
//! durable type's changelog on a compacted topic (`changelog.rs`, the
//! state side's `EntityChangelog`), the records durable entities emit
//! (`outputs.rs`, the state side's `OutputSink`), and the coordinator's store and its
//! leader records on the cluster's coordinator topic
//! ([`KafkaCoordinatorStore`], [`leader`]).
//!
//! Shard = partition, so a record is handled on the node that consumed it.
//! The group's rebalances move shards synchronously:
//! - assigned partitions: each partition's task hosts its shard here
//!   ([`Region::host_shards`]), then opens the partition's gate, and only
//!   then is the partition consumed (from the offset committed then). The
//!   callback does not wait for that: a broker may assign a partition here
//!   before its owner revoked it, and the coordinator moves the shard only
//!   once that owner released it (its claims);
//! - revoked partitions, inside the callback, each step bounded: the
//!   records already received are settled (within `delivery_timeout`; those
//!   left are given up, uncommitted), their offsets committed, then the
//!   shards handed off ([`Region::release_shards`], within
//!   `placement_timeout`), which lets the next owner start. A release that
//!   fails is retried after the callback until the coordinator takes it;
//! - lost partitions: their records in hand are dropped unhandled at once
//!   (another node may own them already), nothing is committed, and their
//!   shards are released.
//!
//! Each partition is one task (the ingest's `ingest/partition.rs`, with
//! Kafka as its source: `records.rs`): its records are settled in
//! offset order, each key's handled in order, a retry in its place; a
//! record that can never be handled goes to the dead-letter topic with the
//! reason and its source topic, partition and offset as headers. Nothing
//! is skipped unrecorded.

mod changelog;
mod coordinator_store;
pub mod leader;
mod outputs;
mod rebalances;
mod records;

pub use colo_connectors::OutputProducer;
pub use coordinator_store::KafkaCoordinatorStore;
pub use records::{json_events, json_records, Ack, JsonEvents, Record, RecordDecoder};

use crate::entity::Entity;
use crate::metrics::KafkaMetrics;
use crate::region::Region;
use colo_connectors::{DeadLetters, KafkaSource, SourceError, SourceSettings, TopicError};
use rebalances::Rebalances;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::oneshot;

/// How an entity type consumes its topics: the ingest's settings with
/// Kafka's source.
pub type IngestSettings = crate::settings::IngestSettings<SourceSettings>;

/// Why an entity type cannot consume its topics.
#[derive(Debug, thiserror::Error)]
pub enum IngestError {
    /// The source could not start, or the broker did not answer.
    #[error(transparent)]
    Source(#[from] SourceError),
    /// The timeouts do not fit together: a hand-off inside a rebalance
    /// callback would be cut short.
    #[error("entity type {entity_type:?}: {reason}")]
    Timeouts { entity_type: String, reason: String },
    /// A topic is missing or its partition count is not the entity type's
    /// number of shards.
    #[error("entity type {entity_type:?}: {error}")]
    Topic {
        entity_type: String,
        error: TopicError,
    },
    /// The dead-letter topic is missing or refused: found out only at the
    /// first bad record, its partition would wait from then on.
    #[error("entity type {entity_type:?}: dead-letter topic {topic:?}, set by kafka.dead_letter_topics.{entity_type} or by the convention <kafka.cluster>.{entity_type}.dlq (kafka.create_topics = true creates it): {error}")]
    DeadLetterTopic {
        entity_type: String,
        topic: String,
        error: Box<SourceError>,
    },
}

/// Whether an ingest still consumes, for the node's readiness: a consumer
/// that failed for good leaves its entity type fed by nothing.
#[derive(Debug, Clone, Default)]
pub struct IngestHealth(Arc<parking_lot::Mutex<Option<String>>>);

impl IngestHealth {
    /// Why the ingest stopped consuming, if it did.
    pub fn failure(&self) -> Option<String> {
        self.0.lock().clone()
    }

    pub(crate) fn fail(&self, reason: String) {
        *self.0.lock() = Some(reason);
    }
}

/// A running Kafka ingest of one entity type.
#[derive(Debug)]
pub struct KafkaIngest {
    health: IngestHealth,
    source: Option<KafkaSource>,
    /// Says the rebalance events are all answered and the dead-letter
    /// producer is closed.
    ended: Option<oneshot::Receiver<()>>,
}

impl KafkaIngest {
    /// Starts consuming into `region`, once every topic is checked to have
    /// the entity type's number of shards as its partition count (shard =
    /// partition). The entity type's extractor should put a key in the shard
    /// Kafka's partitioner puts it in (the murmur2 extractor): a record found
    /// elsewhere is still handled, but forwarded, counted and warned about.
    /// Blocks while it reads the topics' metadata.
    ///
    /// # Errors
    /// See [`IngestError`].
    pub fn start<E: Entity>(
        region: Region<E>,
        settings: IngestSettings,
        decode: RecordDecoder<E::Message>,
    ) -> Result<Self, IngestError> {
        let entity_type = region.entity_type_name().to_string();
        settings.source.validate()?;
        let handoff_timeout = region.handoff_timeout();
        let timeouts = |reason: String| IngestError::Timeouts {
            entity_type: entity_type.clone(),
            reason,
        };
        if settings.placement_timeout < handoff_timeout {
            return Err(timeouts(format!(
                "placement_timeout ({:?}) must be at least the hand-off timeout ({handoff_timeout:?}): releasing a revoked partition's shards runs a hand-off",
                settings.placement_timeout
            )));
        }
        let revoke =
            settings.placement_timeout + settings.delivery_timeout + settings.source.commit_timeout;
        if settings.source.rebalance_timeout < revoke {
            return Err(timeouts(format!(
                "the rebalance timeout ({:?}) must be at least delivery_timeout + commit_timeout + placement_timeout ({revoke:?}): a revoke waits for the records in flight, their commit, then the hand-off",
                settings.source.rebalance_timeout,
            )));
        }
        if region.passivates() && !region.is_durable() {
            // Found by trying it as a new user would: a temperature
            // aggregator's devices answered empty figures minutes after
            // their last reading, their records long committed.
            tracing::warn!(
                %entity_type,
                "entity state is kept in memory only: a passivated entity's state is gone, and the records that built it are committed and not read again; make the entity type durable (EntityType::durable) to keep its state, or turn passivation off (sharding.passivation.strategy = \"none\", or PassivationStrategy::none() in code) to keep every entity while its shard runs on this node"
            );
        }
        let counts =
            colo_connectors::partition_counts(&settings.source, settings.placement_timeout)?;
        colo_connectors::check_partition_counts(&counts, region.number_of_shards()).map_err(
            |error| IngestError::Topic {
                entity_type: entity_type.clone(),
                error,
            },
        )?;
        colo_connectors::check_topic_usable(
            &settings.source.bootstrap_servers,
            &settings.source.client,
            &settings.dead_letter_topic,
            settings.placement_timeout,
        )
        .map_err(|error| IngestError::DeadLetterTopic {
            entity_type: entity_type.clone(),
            topic: settings.dead_letter_topic.clone(),
            error: Box::new(error),
        })?;
        let metrics = KafkaMetrics::new(
            &entity_type,
            &settings.source.topics,
            region.context().kafka.clone(),
        );
        let dead_letters = DeadLetters::new(
            &settings.source.bootstrap_servers,
            &settings.source.client,
            &settings.dead_letter_topic,
            settings.delivery_timeout,
        )?;
        let observer = Observer {
            metrics: metrics.clone(),
            durable: region.durable_shards(),
        };
        let (source, events) =
            KafkaSource::start_observed(settings.source.clone(), Arc::new(observer))?;
        let node = region.context().clone();
        let health = IngestHealth::default();
        let rebalances = Rebalances {
            region,
            settings: Arc::new(settings),
            decode,
            partitions: HashMap::new(),
            releasing: HashMap::new(),
            health: health.clone(),
            metrics,
            dead_letters,
            mismatch_warned: Arc::default(),
        };
        let (finished, ended) = oneshot::channel();
        node.tasks.spawn(async move {
            rebalances.run(events).await;
            let _ = finished.send(());
        });
        Ok(Self {
            health,
            source: Some(source),
            ended: Some(ended),
        })
    }

    /// Whether it still consumes; see [`IngestHealth`].
    pub fn health(&self) -> IngestHealth {
        self.health.clone()
    }

    /// What has its consumer leave its group and join it again.
    pub fn group_rejoin(&self) -> Option<colo_connectors::GroupRejoin> {
        self.source.as_ref().map(KafkaSource::group_rejoin)
    }

    /// Its consumer as a member of its group: its member id and epoch
    /// under the consumer protocol (KIP-848), for a mock cluster's target
    /// assignment.
    pub fn group_member(&self) -> Option<colo_connectors::GroupMember> {
        self.source.as_ref().map(KafkaSource::group_member)
    }

    /// Stops consuming: the partitions are revoked (their shards handed
    /// off) and what was handled is committed.
    pub async fn shutdown(mut self) {
        if let Some(source) = self.source.take() {
            let _ = tokio::task::spawn_blocking(move || source.shutdown()).await;
        }
        if let Some(ended) = self.ended.take() {
            let _ = ended.await;
        }
    }
}

/// What the consumer reports: to the metrics, and its commits to the
/// region's durable shards, whose deleted entities are removed once the
/// offsets they applied are committed.
struct Observer {
    metrics: KafkaMetrics,
    durable: Arc<crate::store::DurableShards>,
}

impl colo_connectors::SourceObserver for Observer {
    fn partition(
        &self,
        partition: &colo_connectors::TopicPartition,
        state: colo_connectors::PartitionState,
    ) {
        let gauges = crate::metrics::PartitionGauges {
            in_flight: state.in_flight,
            paused: state.paused,
            held: state.held,
            waiting_for_shard: state.waiting_for_shard,
            lag: state.lag,
        };
        self.metrics
            .partition(&partition.topic, partition.partition, gauges);
    }

    fn partition_gone(&self, partition: &colo_connectors::TopicPartition) {
        self.metrics
            .partition_gone(&partition.topic, partition.partition);
    }

    fn committed(&self, latency: Option<Duration>, ok: bool) {
        self.metrics.committed(latency, ok);
    }

    fn commit_refused_in_rebalance(&self) {
        self.metrics.commit_refused_in_rebalance();
    }

    fn offset_committed(&self, partition: &colo_connectors::TopicPartition, offset: i64) {
        self.durable
            .offset_committed(&partition.topic, partition.partition, offset);
    }
}
