//! The rebalance events of one entity type's source, answered on this
//! node: assigned partitions get a task each, revoked ones are settled,
//! committed and their shards handed off, lost ones dropped.

use super::partition::PartitionTask;
use super::{IngestSettings, RecordDecoder};
use crate::entity::Entity;
use crate::metrics::KafkaMetrics;
use crate::region::Region;
use colo_allocation::ShardId;
use colo_connectors::{AssignedPartition, DeadLetters, SourceEvent, TopicPartition};
use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use tokio::sync::{mpsc, oneshot};

/// The rebalance events of one entity type's source.
pub(super) struct Rebalances<E: Entity> {
    pub(super) region: Region<E>,
    pub(super) settings: Arc<IngestSettings>,
    pub(super) decode: RecordDecoder<E::Message>,
    /// Each assigned partition's task, which ends when the partition's
    /// records have ended and every one was settled.
    pub(super) partitions: HashMap<TopicPartition, oneshot::Receiver<()>>,
    pub(super) metrics: KafkaMetrics,
    pub(super) dead_letters: DeadLetters,
}

impl<E: Entity> Rebalances<E> {
    pub(super) async fn run(mut self, mut events: mpsc::UnboundedReceiver<SourceEvent>) {
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
