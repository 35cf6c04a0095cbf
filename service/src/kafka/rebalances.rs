//! The rebalance events of one entity type's source, answered on this
//! node: assigned partitions get a task each, revoked ones are settled,
//! committed and their shards handed off, lost ones dropped.

use super::records::Kafka;
use super::{IngestHealth, IngestSettings, RecordDecoder};
use crate::entity::Entity;
use crate::envelope::Origin;
use crate::ingest::{partition_shard, DurableAcks, PartitionName, PartitionTask, ShardPlace};
use crate::kafka_view::RebalanceTag;
use crate::logging::{ExpectedWait, Say};
use crate::metrics::KafkaMetrics;
use crate::region::{PlacementError, Region};
use colo_allocation::ShardId;
use colo_connectors::{AssignedPartition, DeadLetters, SourceEvent, TopicPartition};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use tokio::sync::{mpsc, oneshot};

/// The rebalance events of one entity type's source.
pub(super) struct Rebalances<E: Entity> {
    pub(super) region: Region<E>,
    pub(super) settings: Arc<IngestSettings>,
    pub(super) decode: RecordDecoder<E::Message>,
    /// Each assigned partition's task.
    pub(super) partitions: HashMap<TopicPartition, Running>,
    /// Partitions whose shard's release failed, each retried by a task of
    /// its own until the coordinator acknowledges it; dropping the sender
    /// stops the retries (the partition was assigned here again).
    pub(super) releasing: HashMap<TopicPartition, oneshot::Sender<()>>,
    pub(super) health: IngestHealth,
    pub(super) metrics: KafkaMetrics,
    pub(super) dead_letters: DeadLetters,
    /// Shared by the partitions' tasks (see `PartitionTask`).
    pub(super) mismatch_warned: Arc<std::sync::atomic::AtomicBool>,
}

/// An assigned partition's task, as its rebalances see it.
pub(super) struct Running {
    /// Sent or dropped: the task drops its records unhandled and ends.
    give_up: oneshot::Sender<()>,
    /// Ends when the task has: the partition's records ended and every one
    /// was settled, or it gave them up.
    ended: oneshot::Receiver<()>,
}

impl<E: Entity> Rebalances<E> {
    pub(super) async fn run(mut self, mut events: mpsc::UnboundedReceiver<SourceEvent>) {
        while let Some(event) = events.recv().await {
            let started = std::time::Instant::now();
            match event {
                SourceEvent::Assigned { partitions } => {
                    // Kept before the partitions' tasks start, so that
                    // their first records find it: this node's part in an
                    // assignment is handing each partition to its task,
                    // and what the move cost shows as their first records.
                    let tag = self.metrics.rebalance(
                        "assigned",
                        started.elapsed(),
                        partitions.len(),
                        Vec::new(),
                    );
                    self.assigned(partitions, tag);
                }
                SourceEvent::Revoked {
                    partitions,
                    mut revocation,
                } => {
                    let mut steps = Vec::with_capacity(3);
                    let mut step = std::time::Instant::now();
                    let mut timed = |name, metrics: &KafkaMetrics| {
                        steps.push(metrics.revoke_step(name, step.elapsed()));
                        step = std::time::Instant::now();
                    };
                    self.settled(&partitions).await;
                    timed("settle", &self.metrics);
                    revocation.commit().await;
                    timed("commit", &self.metrics);
                    self.release(&partitions, "revoked").await;
                    timed("release", &self.metrics);
                    revocation.done();
                    self.metrics
                        .rebalance("revoked", started.elapsed(), partitions.len(), steps);
                }
                SourceEvent::Lost { partitions } => {
                    self.lost(&partitions).await;
                    self.metrics
                        .rebalance("lost", started.elapsed(), partitions.len(), Vec::new());
                }
                SourceEvent::Failed { reason } => {
                    tracing::error!(entity_type = %self.region.entity_type_name(), %reason, "kafka consumer failed for good: the entity type's records are not consumed on this node, which is not ready; restart it");
                    self.health.fail(reason);
                    let partitions: Vec<TopicPartition> = self.partitions.keys().cloned().collect();
                    self.lost(&partitions).await;
                }
            }
        }
        // The source stopped: nothing will settle or release any more.
        for (_, running) in self.partitions.drain() {
            drop(running.give_up);
            let _ = running.ended.await;
        }
    }

    fn assigned(&mut self, partitions: Vec<AssignedPartition>, tag: RebalanceTag) {
        let assigned_at = std::time::Instant::now();
        for partition in partitions {
            // Its shard is wanted here again: a release still retried would
            // take it away.
            self.releasing.remove(&partition.partition);
            let (finished, ended) = oneshot::channel();
            let (give_up, given_up) = oneshot::channel();
            self.partitions
                .insert(partition.partition.clone(), Running { give_up, ended });
            let progress = self
                .metrics
                .progress(&partition.partition.topic, partition.partition.partition);
            let origin_topic: Arc<str> = Arc::from(partition.partition.topic.as_str());
            let misplaced_source =
                Origin::other_partition(&partition.partition.topic, partition.partition.partition);
            let assigned = partition_shard(
                partition.partition.partition,
                self.region.number_of_shards(),
            )
            .map(|shard| self.region.partition_assigned(origin_topic.clone(), shard));
            let task = PartitionTask::<E, Kafka> {
                region: self.region.clone(),
                settings: self.settings.clone(),
                decode: self.decode.clone(),
                partition: PartitionName {
                    topic: partition.partition.topic,
                    partition: partition.partition.partition,
                },
                metrics: self.metrics.clone(),
                mismatch_warned: self.mismatch_warned.clone(),
                dead_letters: self.dead_letters.clone(),
                arrival: Some((assigned_at, tag)),
                progress,
                shard: ShardPlace::Unknown,
                durable: self.region.is_durable(),
                origin_topic,
                misplaced_source,
                unflushed: DurableAcks::new(
                    self.settings
                        .source
                        .max_in_flight
                        .saturating_mul(colo_connectors::AWAITING_DURABILITY_PER_IN_FLIGHT),
                ),
                rewind: partition.rewind,
                _assigned: assigned,
                revoked: false,
            };
            self.region.context().tasks.spawn(async move {
                task.run(partition.gate, partition.records, given_up).await;
                let _ = finished.send(());
            });
        }
    }

    /// Waits until every record received of `partitions` was settled (their
    /// streams have ended), for `delivery_timeout` at most: the records
    /// still unsettled then are given up, left uncommitted, and handled
    /// again by the partitions' next owner, so a record that never settles
    /// cannot hold a rebalance up.
    async fn settled(&mut self, partitions: &[TopicPartition]) {
        let deadline = tokio::time::Instant::now() + self.settings.delivery_timeout;
        for tp in partitions {
            let Some(mut running) = self.partitions.remove(tp) else {
                continue;
            };
            if tokio::time::timeout_at(deadline, &mut running.ended)
                .await
                .is_err()
            {
                drop(running.give_up);
                let _ = running.ended.await;
                self.metrics.given_up(&tp.topic, "revoke_timeout");
                tracing::warn!(topic = %tp.topic, partition = tp.partition, timeout = ?self.settings.delivery_timeout, "revoked partition's records not settled within kafka.delivery_timeout: those left are not committed, and the partition's next owner handles them again");
            }
        }
    }

    /// The partitions' records in hand are dropped unhandled, at once,
    /// wherever they wait (another node may own the partitions already, and
    /// consumes them from the last commit); then their shards are released.
    async fn lost(&mut self, partitions: &[TopicPartition]) {
        for tp in partitions {
            if let Some(running) = self.partitions.remove(tp) {
                drop(running.give_up);
                let _ = running.ended.await;
                self.metrics.given_up(&tp.topic, "lost");
            }
        }
        self.release(partitions, "lost").await;
    }

    /// Releases the shards of `partitions`, ending this node's claims of
    /// their topics (the coordinator keeps a shard here that another topic's
    /// partition of the same number still claims). A release that fails is
    /// retried in the background until the coordinator acknowledges it or
    /// the region stops: the partitions' next owner waits for it.
    async fn release(&mut self, partitions: &[TopicPartition], why: &'static str) {
        let mut by_topic: BTreeMap<&str, Vec<&TopicPartition>> = BTreeMap::new();
        for tp in partitions {
            by_topic.entry(&tp.topic).or_default().push(tp);
        }
        for (topic, partitions) in by_topic {
            let shards = shards_of(&self.region, partitions.iter().copied());
            let Err(e) = self
                .region
                .unclaim_shards(shards.clone(), topic, self.settings.placement_timeout)
                .await
            else {
                continue;
            };
            if matches!(e, PlacementError::Stopped) {
                return;
            }
            // A cluster forming moves partitions before its coordinator is
            // reachable: a warning only if the retries outlast
            // placement_timeout.
            tracing::info!(entity_type = %self.region.entity_type_name(), %topic, ?shards, error = %e, "{why} partitions' shards not released yet; retried until the coordinator takes the release (their next owner waits for it)");
            self.releasing.retain(|_, retrying| !retrying.is_closed());
            for tp in partitions {
                let (retrying, stop) = oneshot::channel();
                self.releasing.insert(tp.clone(), retrying);
                let region = self.region.clone();
                let settings = self.settings.clone();
                self.region.context().tasks.spawn(release_until_done(
                    region,
                    settings,
                    tp.clone(),
                    why,
                    stop,
                ));
            }
        }
    }
}

/// Asks for the release of `partition`'s shard until the coordinator
/// acknowledges it, the region stops, or `stop` fires (the partition is
/// assigned here again).
async fn release_until_done<E: Entity>(
    region: Region<E>,
    settings: Arc<IngestSettings>,
    partition: TopicPartition,
    why: &'static str,
    mut stop: oneshot::Receiver<()>,
) {
    let Some(&shard) = shards_of(&region, std::iter::once(&partition)).first() else {
        return;
    };
    let mut wait = ExpectedWait::Idle;
    let _began = wait.waits(settings.placement_timeout);
    loop {
        tokio::select! {
            biased;
            _ = &mut stop => return,
            () = tokio::time::sleep(settings.retry_backoff) => {}
        }
        let released = tokio::select! {
            biased;
            _ = &mut stop => return,
            released = region.unclaim_shards([shard], &partition.topic, settings.placement_timeout) => released,
        };
        match released {
            Ok(()) => {
                tracing::info!(entity_type = %region.entity_type_name(), %shard, "{why} partition's shard released after retries");
                return;
            }
            Err(PlacementError::Stopped) => return,
            Err(e) => match wait.waits(settings.placement_timeout) {
                Say::Overdue(lasted) => {
                    tracing::warn!(entity_type = %region.entity_type_name(), %shard, error = %e, ?lasted, "{why} partition's shard still not released after kafka.placement_timeout; retried until the coordinator takes the release (its next owner waits for it)")
                }
                Say::Began | Say::Nothing => {
                    tracing::debug!(entity_type = %region.entity_type_name(), %shard, error = %e, "shard release retried")
                }
            },
        }
    }
}

fn shards_of<'a, E: Entity>(
    region: &Region<E>,
    partitions: impl Iterator<Item = &'a TopicPartition>,
) -> Vec<ShardId> {
    let shards: BTreeSet<ShardId> = partitions
        .filter_map(|tp| partition_shard(tp.partition, region.number_of_shards()))
        .collect();
    shards.into_iter().collect()
}
