//! Kafka records driving an entity type: the connector's source wired to
//! the type's region on this node.
//!
//! Shard = partition, so a record is handled on the node that consumed it.
//! The group's rebalances move shards synchronously:
//! - assigned partitions: each partition's task hosts its shard here
//!   ([`Region::host_shards`]), then opens the partition's gate, and only
//!   then is the partition consumed (from the offset committed then). The
//!   callback does not wait for that: a broker may assign a partition here
//!   before its owner revoked it, and the coordinator moves the shard only
//!   once that owner released it (its claims);
//! - revoked partitions, inside the callback: the records already received
//!   are handled, their offsets committed, then the shards handed off
//!   ([`Region::release_shards`]), which lets the next owner start;
//! - lost partitions: their records are dropped unhandled (another node may
//!   own them already), nothing is committed, and their shards are released.
//!
//! Each partition is one task that routes its records in order and waits for
//! their deliveries in order, so a record's offset is committed only once
//! it and every record before it were handled. A record whose delivery is
//! not confirmed is delivered again (at least once). A record that cannot
//! be decoded, or whose handler fails `max_attempts` times, goes to the
//! dead-letter topic with the reason and its source topic, partition and
//! offset as headers; while that topic cannot be written the partition
//! waits (and is paused at its in-flight bound): nothing is skipped
//! unrecorded.

use crate::entity::Entity;
use crate::error::AskError;
use crate::metrics::KafkaMetrics;
use crate::region::{unanswered, Delivery, PlacementError, Region};
use colo_allocation::ShardId;
use colo_connectors::{
    AssignedPartition, DeadLetters, Gate, KafkaSource, Record, SourceError, SourceEvent,
    SourceSettings, TopicError, TopicPartition,
};
use serde::de::DeserializeOwned;
use std::collections::{BTreeSet, HashMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};

/// How a record becomes a message: the entity id and the message, or why
/// the record cannot be one.
pub type RecordDecoder<M> = Arc<dyn Fn(&Record) -> Result<(String, M), String> + Send + Sync>;

/// The default decoder: the key is the entity id (UTF-8), the payload the
/// message as JSON.
pub fn json_records<M: DeserializeOwned + 'static>() -> RecordDecoder<M> {
    Arc::new(|record: &Record| {
        let key = record.key.as_deref().ok_or("the record has no key")?;
        let id = std::str::from_utf8(key).map_err(|_| "the key is not UTF-8".to_string())?;
        let payload = record
            .payload
            .as_deref()
            .ok_or("the record has no payload")?;
        let message = serde_json::from_slice(payload)
            .map_err(|e| format!("the payload is not a message: {e}"))?;
        Ok((id.to_string(), message))
    })
}

/// How an entity type consumes its topics.
#[derive(Debug, Clone)]
pub struct IngestSettings {
    pub source: SourceSettings,
    /// How long a delivery may take before it is sent again.
    pub delivery_timeout: Duration,
    /// How long hosting or releasing shards may take in a rebalance.
    pub placement_timeout: Duration,
    /// Handler failures of one record before it is given up.
    pub max_attempts: u32,
    /// The pause before a record is delivered again.
    pub retry_backoff: Duration,
    /// Where records that cannot be handled go: `<cluster>.<entity
    /// type>.dlq` by convention.
    pub dead_letter_topic: String,
}

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
}

/// A running Kafka ingest of one entity type.
#[derive(Debug)]
pub struct KafkaIngest {
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
        if settings.source.rebalance_timeout
            < settings.placement_timeout + settings.delivery_timeout
        {
            return Err(timeouts(format!(
                "the rebalance timeout ({:?}) must be at least placement_timeout + delivery_timeout ({:?}): a revoke waits for the records in flight, then for the hand-off",
                settings.source.rebalance_timeout,
                settings.placement_timeout + settings.delivery_timeout
            )));
        }
        let counts =
            colo_connectors::partition_counts(&settings.source, settings.placement_timeout)?;
        colo_connectors::check_partition_counts(&counts, region.number_of_shards()).map_err(
            |error| IngestError::Topic {
                entity_type: entity_type.clone(),
                error,
            },
        )?;
        let metrics = KafkaMetrics::new(&entity_type, &settings.source.topics);
        let dead_letters = DeadLetters::new(
            &settings.source.bootstrap_servers,
            &settings.source.client,
            &settings.dead_letter_topic,
            settings.delivery_timeout,
        )?;
        let (source, events) =
            KafkaSource::start_observed(settings.source.clone(), Arc::new(metrics.clone()))?;
        let node = region.context().clone();
        let rebalances = Rebalances {
            region,
            settings: Arc::new(settings),
            decode,
            partitions: HashMap::new(),
            metrics,
            dead_letters,
        };
        let (finished, ended) = oneshot::channel();
        node.tasks.spawn(async move {
            rebalances.run(events).await;
            let _ = finished.send(());
        });
        Ok(Self {
            source: Some(source),
            ended: Some(ended),
        })
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

/// The rebalance events of one entity type's source.
struct Rebalances<E: Entity> {
    region: Region<E>,
    settings: Arc<IngestSettings>,
    decode: RecordDecoder<E::Message>,
    /// Each assigned partition's task, which ends when the partition's
    /// records have ended and every one was settled.
    partitions: HashMap<TopicPartition, oneshot::Receiver<()>>,
    metrics: KafkaMetrics,
    dead_letters: DeadLetters,
}

impl<E: Entity> Rebalances<E> {
    async fn run(mut self, mut events: mpsc::UnboundedReceiver<SourceEvent>) {
        while let Some(event) = events.recv().await {
            let started = std::time::Instant::now();
            match event {
                SourceEvent::Assigned { partitions } => {
                    self.assigned(partitions);
                    self.metrics.rebalance("assigned", started.elapsed());
                }
                SourceEvent::Revoked {
                    partitions,
                    mut revocation,
                } => {
                    self.settled(&partitions).await;
                    revocation.commit().await;
                    self.release(&partitions, "revoked").await;
                    revocation.done();
                    self.metrics.rebalance("revoked", started.elapsed());
                }
                SourceEvent::Lost { partitions } => {
                    // Their streams ended; what is left unsettled is
                    // consumed again by the partitions' next owner, which
                    // gets the shards once they are released here.
                    self.lost(&partitions).await;
                    self.metrics.rebalance("lost", started.elapsed());
                }
            }
        }
    }

    fn assigned(&mut self, partitions: Vec<AssignedPartition>) {
        let assigned_at = std::time::Instant::now();
        for partition in partitions {
            let (finished, ended) = oneshot::channel();
            self.partitions.insert(partition.partition.clone(), ended);
            let handled = self.metrics.records(&partition.partition.topic, "handled");
            let task = PartitionTask {
                region: self.region.clone(),
                settings: self.settings.clone(),
                decode: self.decode.clone(),
                partition: partition.partition,
                metrics: self.metrics.clone(),
                mismatch_warned: false,
                dead_letters: self.dead_letters.clone(),
                assigned_at: Some(assigned_at),
                handled,
            };
            self.region.context().tasks.spawn(async move {
                task.run(partition.gate, partition.records).await;
                let _ = finished.send(());
            });
        }
    }

    /// Waits until every record received of `partitions` was settled (their
    /// streams have ended).
    async fn settled(&mut self, partitions: &[TopicPartition]) {
        for tp in partitions {
            if let Some(ended) = self.partitions.remove(tp) {
                let _ = ended.await;
            }
        }
    }

    /// The partitions' records are dropped unhandled: the next owner
    /// consumes them from the last commit.
    async fn lost(&mut self, partitions: &[TopicPartition]) {
        for tp in partitions {
            self.partitions.remove(tp);
        }
        self.release(partitions, "lost").await;
    }

    /// Releases the shards of `partitions` that no partition still assigned
    /// here shares (another topic's partition of the same number keeps it).
    async fn release(&self, partitions: &[TopicPartition], why: &str) {
        let kept: BTreeSet<i32> = self.partitions.keys().map(|tp| tp.partition).collect();
        let released = shards_of(partitions.iter().filter(|tp| !kept.contains(&tp.partition)));
        if let Err(e) = self
            .region
            .release_shards(released, self.settings.placement_timeout)
            .await
        {
            tracing::warn!(entity_type = %self.region.entity_type_name(), error = %e, "{why} partitions' shards not released");
        }
    }
}

fn shards_of<'a>(partitions: impl Iterator<Item = &'a TopicPartition>) -> Vec<ShardId> {
    let shards: BTreeSet<ShardId> = partitions
        .filter_map(|tp| u32::try_from(tp.partition).ok().map(ShardId))
        .collect();
    shards.into_iter().collect()
}

/// One partition's records, routed in order, settled in order.
struct PartitionTask<E: Entity> {
    region: Region<E>,
    settings: Arc<IngestSettings>,
    decode: RecordDecoder<E::Message>,
    partition: TopicPartition,
    metrics: KafkaMetrics,
    /// A record in the wrong partition was warned about (once per
    /// partition: a producer with another partitioner sends many).
    mismatch_warned: bool,
    dead_letters: DeadLetters,
    /// When the partition was assigned here, until its first record is
    /// handled.
    assigned_at: Option<std::time::Instant>,
    /// Records handled, the one counter touched per record.
    handled: metrics::Counter,
}

/// Turns of a partition's task between two checks of its oldest record's
/// deadline while records keep coming.
const DEADLINE_CHECK_EVERY: u32 = 32;

/// A record routed and waiting for its outcome. The partition's records
/// settle in order, so only the oldest one's reply is awaited (with its
/// deadline); the others' replies wait in their channels. That keeps the
/// path free of a boxed future and a timer per record.
struct InFlight<R> {
    record: Record,
    id: String,
    routed: Routed<R>,
    /// When its delivery counts as unconfirmed.
    deadline: tokio::time::Instant,
}

/// Where a routed record's outcome comes from.
enum Routed<R> {
    Sent(oneshot::Receiver<Result<R, AskError>>),
    /// It failed without a reply: it could not be routed, or its deadline
    /// passed (taken once, when it is settled).
    Failed(Option<AskError>),
}

impl<R> InFlight<R> {
    /// Its outcome if it is in, without waiting (the deadline is kept by
    /// [`Self::outcome`], which the task waits on whenever no record
    /// comes).
    fn outcome_now(&mut self, timeout: Duration) -> Option<Result<R, AskError>> {
        match &mut self.routed {
            Routed::Failed(e) => Some(Err(e.take().unwrap_or(AskError::Timeout(timeout)))),
            Routed::Sent(reply) => match reply.try_recv() {
                Ok(result) => Some(result),
                Err(oneshot::error::TryRecvError::Closed) => Some(Err(unanswered())),
                Err(oneshot::error::TryRecvError::Empty) => None,
            },
        }
    }

    /// Past its deadline (its reply not in): it counts as unconfirmed, and
    /// is delivered again. True if it expired.
    fn expire(&mut self, timeout: Duration) -> bool {
        let expired =
            matches!(self.routed, Routed::Sent(_)) && tokio::time::Instant::now() >= self.deadline;
        if expired {
            self.routed = Routed::Failed(Some(AskError::Timeout(timeout)));
        }
        expired
    }

    /// Waits for its outcome until its deadline.
    async fn outcome(&mut self, timeout: Duration) -> Result<R, AskError> {
        if let Some(result) = self.outcome_now(timeout) {
            return result;
        }
        let Routed::Sent(reply) = &mut self.routed else {
            return Err(AskError::Timeout(timeout));
        };
        match tokio::time::timeout_at(self.deadline, reply).await {
            Ok(Ok(result)) => result,
            Ok(Err(_)) => Err(unanswered()),
            Err(_) => Err(AskError::Timeout(timeout)),
        }
    }
}

impl<E: Entity> PartitionTask<E> {
    async fn run(mut self, gate: Gate, mut records: mpsc::UnboundedReceiver<Record>) {
        tokio::select! {
            hosted = self.host() => if !hosted {
                return;
            },
            // Revoked or lost before its shard came: no record came either,
            // the gate being closed.
            None = records.recv() => return,
        }
        gate.open();
        let timeout = self.settings.delivery_timeout;
        let mut in_flight: VecDeque<InFlight<E::Reply>> = VecDeque::new();
        let mut open = true;
        let mut turns = 0u32;
        loop {
            // What came back, in order, without waiting.
            while let Some(result) = in_flight.front_mut().and_then(|f| f.outcome_now(timeout)) {
                if let Some(front) = in_flight.pop_front() {
                    self.settle(front.record, &front.id, Delivery::from(result))
                        .await;
                }
            }
            // The oldest record's deadline is kept while the task waits for
            // it; while records keep coming the task does not wait, so the
            // deadline is also checked every few turns (not every turn: a
            // clock reading per record costs).
            turns = turns.wrapping_add(1);
            if turns.is_multiple_of(DEADLINE_CHECK_EVERY)
                && in_flight.front_mut().is_some_and(|f| f.expire(timeout))
            {
                continue;
            }
            tokio::select! {
                biased;
                record = records.recv(), if open => match record {
                    Some(record) => {
                        if let Some(routed) = self.route(record).await {
                            in_flight.push_back(routed);
                        }
                    }
                    None => open = false,
                },
                result = async {
                    match in_flight.front_mut() {
                        Some(front) => front.outcome(timeout).await,
                        None => std::future::pending().await,
                    }
                }, if !in_flight.is_empty() => {
                    if let Some(front) = in_flight.pop_front() {
                        self.settle(front.record, &front.id, Delivery::from(result)).await;
                    }
                }
                else => break,
            }
        }
    }

    /// Hosts the partition's shard here, asking again until it is: a shard
    /// another node's assignment still claims comes once that node released
    /// it. False if the region stopped.
    ///
    /// With one topic, a claim by another node can only be a partition
    /// assigned twice for a while (its owner revokes it at its next round),
    /// so the partition waits for it, whatever it takes: consuming it
    /// meanwhile would hand its records to two nodes. With several topics,
    /// another node may own the same-numbered partition of another topic
    /// for good: after one placement timeout the partition is consumed
    /// anyway, its records forwarded to the shard's node.
    async fn host(&self) -> bool {
        let Ok(shard) = u32::try_from(self.partition.partition).map(ShardId) else {
            return true;
        };
        let waits_for_good = self.settings.source.topics.len() <= 1;
        let mut warned = false;
        loop {
            match self
                .region
                .host_shards([shard], self.settings.placement_timeout)
                .await
            {
                Ok(()) => return true,
                Err(PlacementError::Stopped) => return false,
                Err(e @ (PlacementError::Refused(_) | PlacementError::OutOfRange { .. })) => {
                    // Asking again changes nothing: consumed anyway, its
                    // records routed to wherever the shard is.
                    tracing::warn!(topic = %self.partition.topic, partition = self.partition.partition, error = %e, "partition's shard not hosted here; its records are forwarded");
                    return true;
                }
                Err(e) if !waits_for_good => {
                    tracing::warn!(topic = %self.partition.topic, partition = self.partition.partition, error = %e, "partition's shard not hosted here (another topic's partition of the same number may be assigned elsewhere); its records are forwarded");
                    return true;
                }
                Err(e) => {
                    if !warned {
                        warned = true;
                        tracing::warn!(topic = %self.partition.topic, partition = self.partition.partition, error = %e, "partition's shard not hosted here yet; the partition waits");
                    }
                    tokio::time::sleep(self.settings.retry_backoff).await;
                }
            }
        }
    }

    /// Decodes and routes a record; `None` if it cannot be a message.
    async fn route(&mut self, record: Record) -> Option<InFlight<E::Reply>> {
        match (self.decode)(&record) {
            Ok((id, message)) => {
                let shard = self.region.shard_of(&id);
                if i64::from(shard.0) != i64::from(self.partition.partition) {
                    self.metrics.partitioner_mismatch(&self.partition.topic);
                    if !self.mismatch_warned {
                        self.mismatch_warned = true;
                        tracing::warn!(topic = %self.partition.topic, partition = self.partition.partition, entity_id = %id, %shard, "record in another partition than its key's murmur2 partition (a producer with another partitioner?): handled, but on the shard's node, not here");
                    }
                }
                let routed = match self.region.route_tracked(&id, message).await {
                    Ok(reply) => Routed::Sent(reply),
                    Err(e) => Routed::Failed(Some(AskError::from(e))),
                };
                // From when it reached its entity's mailbox (routing may
                // wait for room in it).
                let deadline = tokio::time::Instant::now() + self.settings.delivery_timeout;
                Some(InFlight {
                    record,
                    id,
                    routed,
                    deadline,
                })
            }
            Err(reason) => {
                self.dead_letter(
                    record,
                    &format!("cannot be decoded: {reason}"),
                    "undecodable",
                )
                .await;
                None
            }
        }
    }

    /// Acks a handled record; delivers one again until it is handled, or
    /// gives it up after `max_attempts` handler failures.
    async fn settle(&mut self, record: Record, id: &str, mut delivery: Delivery<E::Reply>) {
        let mut failures = 0;
        loop {
            match delivery {
                Delivery::Handled(_) => {
                    self.handled.increment(1);
                    if let Some(assigned_at) = self.assigned_at.take() {
                        self.metrics
                            .first_record(&self.partition.topic, assigned_at.elapsed());
                    }
                    record.ack.handled();
                    return;
                }
                Delivery::Failed(reason) => {
                    failures += 1;
                    if failures >= self.settings.max_attempts {
                        let reason = format!("the handler failed {failures} times: {reason}");
                        self.dead_letter(record, &reason, "handler_failed").await;
                        return;
                    }
                }
                Delivery::NotDelivered(reason) | Delivery::Unconfirmed(reason) => {
                    if self.region.is_stopped() {
                        // Not acked: consumed again after a restart.
                        return;
                    }
                    tracing::debug!(entity_id = id, %reason, "record delivered again");
                }
            }
            tokio::time::sleep(self.settings.retry_backoff).await;
            delivery = match (self.decode)(&record) {
                Ok((id, message)) => {
                    self.region
                        .deliver(&id, message, self.settings.delivery_timeout)
                        .await
                }
                Err(reason) => Delivery::Failed(reason),
            };
        }
    }

    /// Writes `record` to the dead-letter topic, waiting (and retrying)
    /// while it cannot be written, then acks it. Unacked if the region
    /// stops meanwhile: consumed again after a restart.
    async fn dead_letter(&self, record: Record, reason: &str, outcome: &'static str) {
        let mut warned = false;
        loop {
            match self.dead_letters.send(&record, reason).await {
                Ok(()) => {
                    tracing::warn!(topic = %self.partition.topic, partition = self.partition.partition, offset = record.offset, dead_letter_topic = %self.dead_letters.topic(), %reason, "record dead-lettered");
                    self.metrics.record(&self.partition.topic, outcome);
                    record.ack.handled();
                    return;
                }
                Err(e) => {
                    if !warned {
                        warned = true;
                        tracing::error!(topic = %self.partition.topic, partition = self.partition.partition, offset = record.offset, dead_letter_topic = %self.dead_letters.topic(), error = %e, "dead-letter topic cannot be written; the partition waits");
                    }
                    if self.region.is_stopped() {
                        return;
                    }
                    tokio::time::sleep(self.settings.retry_backoff).await;
                }
            }
        }
    }
}
