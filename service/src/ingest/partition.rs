//! One assigned partition's records, from its shard's hosting to the end
//! of its stream.
//!
//! Records are routed in offset order and settled in offset order
//! (`partition/settle.rs`), so an offset is committed only once its record
//! and every one before it were handled or dead-lettered. Each key's
//! records are handled one after another: a record whose key has an
//! earlier record unhandled is held here and routed only once that one is
//! handled. So a retry keeps its place (no later record of its key runs
//! before it), while different keys run side by side.
//!
//! A record of the shard the partition hosts here goes to that shard only
//! (`Reply::Acked`). One in another partition than its key's (a producer
//! with another partitioner put it there) is an ask that follows its shard
//! to whatever node hosts it, with its origin (topic, partition, offset),
//! so that a durable entity applies it once however often it arrives.
//!
//! A record is delivered again only when its delivery failed: its handler
//! failed (up to `max_attempts`, then it is dead-lettered), it was dropped
//! before an entity got it or refused for a while (a node went away
//! unconfirmed, a hand-off), or, sent to another node, no answer came
//! within `delivery_timeout` (that node may have died with it). Failures
//! that do not pass by waiting are bounded too: past `redelivery_timeout`
//! the record is dead-lettered, so no record holds its partition for ever.
//! A record that can never be handled goes to the dead-letter topic at
//! once: undecodable, or refused (an empty entity id, a message that cannot
//! be encoded for another node). While the front record waits, the task
//! says what for, every `delivery_timeout`.
//!
//! The task gives its records up (uncommitted, consumed again) when its
//! partition is lost or revoked: a revoke waits for the records in flight,
//! not for retries, and its bound drops whatever is left wherever it waits
//! (see `Reply::Acked`). It also has the source consume the partition
//! again from its committed offset, routing nothing more, while the
//! partition stays here: when a handled record's change is lost (its shard
//! stopped before writing it: its node fenced itself), when a record finds
//! its key's previous record missing from its entity's state (lost the same
//! way, see `Origin::previous`), or when its own shard runs on another node
//! (placed there while this node was out of touch with its coordinator):
//! the new assignment claims the shard back, and each entity skips what it
//! had made durable.

mod settle;

use super::slots::{Awaiting, Chained, Outcome, Start, Step, Tries};
use super::{partition_shard, Decoder, DurableAcks, Source, SourceRecord};
use crate::entity::{Entity, EntityId};
use crate::envelope::{Cause, Origin};
use crate::error::TellError;
use crate::kafka_view::RebalanceTag;
use crate::logging::{ExpectedWait, Say};
use crate::metrics::{KafkaMetrics, PartitionProgress};
use crate::region::{AssignedShard, PlacementError, Region};
use crate::settings::IngestSettings;
use colo_allocation::ShardId;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;
use tokio::sync::{mpsc, oneshot};

/// A partition's records in hand: its source's records in slots.
type Slots<E, S> = super::slots::Slots<E, <S as Source>::Record>;

/// Which partition of the source a task runs: its topic (the stream its
/// records belong to) and its number.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct PartitionName {
    pub topic: String,
    pub partition: i32,
}

/// Records a partition's task works on at most (routed, or held behind
/// their key's): the others wait in their stream, in the source's
/// in-flight bound all the same. It keeps the task's bookkeeping in the
/// processor's caches when that bound is large, and is far more than the
/// keys a partition has in flight at once.
const WINDOW: usize = 256;

/// One assigned partition's task.
pub(crate) struct PartitionTask<E: Entity, S: Source> {
    pub(crate) region: Region<E>,
    pub(crate) settings: Arc<IngestSettings<S::Settings>>,
    pub(crate) decode: Decoder<S::Record, E::Message>,
    pub(crate) partition: PartitionName,
    pub(crate) metrics: KafkaMetrics,
    /// A record in another partition than its key's was warned about, by
    /// any partition of the entity type's ingest here: a producer with
    /// another partitioner sends many, to every partition (the counter
    /// says how many).
    pub(crate) mismatch_warned: Arc<AtomicBool>,
    pub(crate) dead_letters: S::DeadLetters,
    /// When the partition was assigned here and in which rebalance, until
    /// its first record is handled.
    pub(crate) arrival: Option<(Instant, RebalanceTag)>,
    /// Records handled, each one's latency, and the partition's first and
    /// last record handled here (a move's pause is read off them).
    pub(crate) progress: PartitionProgress,
    /// Where its shard is, once hosting it was asked for.
    pub(crate) shard: ShardPlace,
    /// Whether the entity type's state is durable here: its records carry
    /// their origin (so an entity skips what it applied already), and each
    /// is acked only once the change it made is durable.
    pub(crate) durable: bool,
    /// The partition's topic, shared by the origins of its records that
    /// belong in it.
    pub(crate) origin_topic: Arc<str>,
    /// `topic/partition`, shared by the origins of its records that belong
    /// in other partitions (see `Origin::source`).
    pub(crate) misplaced_source: Arc<str>,
    /// Handled records waiting for their change to be durable before they
    /// are acked (see `ingest/durable_acks.rs`).
    pub(crate) unflushed: DurableAcks<S::Ack>,
    /// Consumes the partition again from its committed offset.
    pub(crate) rewind: S::Rewind,
    /// Says the partition's shard is assigned here while the task runs
    /// (region stats carry it: see `region/assigned.rs`).
    pub(crate) _assigned: Option<AssignedShard>,
    /// Its records' stream has ended: the partition was revoked (or the
    /// node stops). What is in hand settles, but a record whose delivery
    /// failed is left to the partition's next owner rather than tried
    /// again here: a revoke waits for records in flight, never for retries.
    pub(crate) revoked: bool,
}

/// Where a partition's shard is, which says how its records are routed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ShardPlace {
    /// Not asked for yet.
    Unknown,
    /// Hosted here: its records are handled by this node's shard only
    /// (`Reply::Acked`), never forwarded.
    Here,
    /// Kept on another node (another topic's partition of the same number
    /// claims it there, or the coordinator takes no locations from
    /// outside): its records are forwarded to it.
    Elsewhere,
}

impl<E: Entity, S: Source> PartitionTask<E, S> {
    /// Hosts the partition's shard, opens the gate, then handles the
    /// records until their stream ends (revoked) or `give_up` fires or is
    /// dropped (lost, or a revoke's bound reached): then whatever is in
    /// hand is dropped unhandled, its acks reporting it not handled.
    pub(crate) async fn run(
        mut self,
        gate: S::Gate,
        mut records: mpsc::UnboundedReceiver<S::Record>,
        mut give_up: oneshot::Receiver<()>,
    ) {
        tokio::select! {
            biased;
            _ = &mut give_up => return,
            place = self.host() => match place {
                Some(place) => self.shard = place,
                None => return,
            },
            // Revoked or lost before its shard came: no record came either,
            // the gate being closed.
            None = records.recv() => return,
        }
        if let (true, ShardPlace::Here, Some(shard)) = (
            self.durable,
            self.shard,
            partition_shard(self.partition.partition, self.region.number_of_shards()),
        ) {
            // Consumed only once the shard's state is restored.
            tokio::select! {
                biased;
                _ = &mut give_up => return,
                restored = self.region.restored(shard) => if !restored {
                    return;
                },
            }
        }
        S::open(gate);
        let mut slots = Slots::<E, S>::new();
        tokio::select! {
            biased;
            _ = &mut give_up => {}
            () = self.consume(&mut slots, &mut records) => {}
        }
        self.given_up(&slots, &records);
    }

    /// Says, in one line, how many records the task leaves unhandled as it
    /// ends: they are not committed, and are consumed again.
    fn given_up(&self, slots: &Slots<E, S>, records: &mpsc::UnboundedReceiver<S::Record>) {
        let in_hand = slots.queue.len() + records.len();
        let waiting = self.unflushed.len();
        if in_hand + waiting == 0 {
            return;
        }
        let oldest = slots
            .queue
            .front()
            .map(|slot| slot.record.offset())
            .or_else(|| self.unflushed.oldest());
        tracing::warn!(topic = %self.partition.topic, partition = self.partition.partition, records = in_hand + waiting, handled_not_yet_durable = waiting, oldest_offset = ?oldest, "partition's records in hand not handled here: not committed, they are consumed again by the partition's next owner (or by this node after a restart)");
    }

    async fn consume(
        &mut self,
        slots: &mut Slots<E, S>,
        records: &mut mpsc::UnboundedReceiver<S::Record>,
    ) {
        let mut watch = tokio::time::interval(self.settings.delivery_timeout);
        watch.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        watch.reset();
        let mut watched = None;
        loop {
            if self.rewound_if_lost() {
                return;
            }
            // What came back, in order, without waiting.
            while let Some(outcome) = self.front_outcome_now(slots) {
                let ended = records.is_closed();
                if !self.settle_front(slots, outcome, ended).await || self.rewound_if_lost() {
                    return;
                }
                // A record delivered again and again keeps this loop busy:
                // it is watched here too.
                if futures::FutureExt::now_or_never(watch.tick()).is_some() {
                    self.watch_front(slots, &mut watched);
                }
            }
            self.progress.settled();
            tokio::select! {
                biased;
                () = std::future::poll_fn(|cx| self.unflushed.poll_settled(cx)),
                    if !self.unflushed.is_empty() => {}
                record = records.recv(), if !self.revoked && slots.queue.len() < WINDOW => match record {
                    Some(record) => {
                        self.take(slots, record).await;
                        // What else came is taken in the same wake: one
                        // round of this select per batch, not per record.
                        while slots.queue.len() < WINDOW {
                            let Ok(record) = records.try_recv() else {
                                break;
                            };
                            self.take(slots, record).await;
                        }
                    }
                    None => self.revoked = true,
                },
                outcome = Self::front_outcome(slots), if !slots.queue.is_empty() => {
                    if !self.settle_front(slots, outcome, records.is_closed()).await {
                        return;
                    }
                }
                _ = watch.tick(), if !slots.queue.is_empty() => self.watch_front(slots, &mut watched),
                else => return,
            }
        }
    }

    /// Has the source consume the partition again from its committed offset
    /// if a handled record's change was lost (its shard stopped before
    /// writing it): no later record may be routed then, the front's retry
    /// included (see the module's doc). True if it did.
    fn rewound_if_lost(&mut self) -> bool {
        if !(self.durable && self.unflushed.lost()) {
            return false;
        }
        tracing::warn!(topic = %self.partition.topic, partition = self.partition.partition, "a shard stopped before the changes of handled records were written: the partition is consumed again from its committed offset");
        S::rewind(&self.rewind);
        true
    }

    /// Says what the oldest record in hand waits for when it has been the
    /// oldest since the last look (a `delivery_timeout` ago), and again at
    /// each look while it stays: the source's stall report says that a
    /// partition does not move, this says why.
    fn watch_front(&self, slots: &Slots<E, S>, watched: &mut Option<i64>) {
        let Some(front) = slots.queue.front() else {
            return;
        };
        let offset = front.record.offset();
        if watched.replace(offset) != Some(offset) {
            return;
        }
        let (entity_id, waits_for) = match &front.step {
            Step::Routed { id, .. } => {
                let shard = self.region.shard_of(id);
                let route = self.region.describe_route(shard);
                (
                    Some(id),
                    format!("its entity's answer (shard {shard}: {route})"),
                )
            }
            Step::Answered { id, outcome, .. } => {
                let last = outcome.reason().unwrap_or("handled, waiting to settle");
                (Some(id), format!("its next delivery (last: {last})"))
            }
            Step::Again { id, .. } => (Some(id), "its next delivery".to_string()),
            Step::Held { id, .. } => (Some(id), "an earlier record of its key".to_string()),
            Step::Refused { .. } | Step::Settling => (None, "the dead-letter topic".to_string()),
        };
        tracing::warn!(topic = %self.partition.topic, partition = self.partition.partition, offset, entity_id = ?entity_id, in_hand = slots.queue.len(), waited_more_than = ?self.settings.delivery_timeout, "partition's oldest record in hand waits for {waits_for}");
    }

    /// The front record's outcome if it is in, without waiting. A record to
    /// deliver again or to dead-letter is always ready.
    fn front_outcome_now(&self, slots: &mut Slots<E, S>) -> Option<Option<(Outcome, Start)>> {
        let front = slots.front_mut()?;
        match &mut front.step {
            Step::Routed { reply, .. } => reply.try_answer().map(Some),
            _ => Some(None),
        }
    }

    /// Waits for the front record's outcome; `None` for a record that has
    /// none to wait for (to deliver again, or to dead-letter).
    async fn front_outcome(slots: &mut Slots<E, S>) -> Option<(Outcome, Start)> {
        let front = slots.front_mut()?;
        match &mut front.step {
            Step::Routed { reply, .. } => Some(reply.answer().await),
            _ => None,
        }
    }

    /// Decodes a record and routes it, or holds it behind its key's
    /// unsettled record, or marks it for the dead-letter topic.
    async fn take(&mut self, slots: &mut Slots<E, S>, record: S::Record) {
        let (id, message) = match (self.decode)(&record) {
            Ok((id, _)) if id.is_empty() => {
                let reason = format!("refused: {}", TellError::EmptyEntityId);
                let outcome = "refused";
                return slots.push(record, Step::Refused { reason, outcome }, None);
            }
            Ok((id, message)) => (EntityId::from(id), message),
            Err(reason) => {
                let reason = format!("cannot be decoded: {reason}");
                let outcome = "undecodable";
                return slots.push(record, Step::Refused { reason, outcome }, None);
            }
        };
        let shard = self.check_partition(&id);
        let key = std::hash::BuildHasher::hash_one(&slots.keys, &id);
        let previous = match slots.chain(key) {
            Chained::Held => {
                let message = Box::new(message);
                return slots.push(record, Step::Held { id, message }, Some(key));
            }
            Chained::Route { previous } => previous.or_else(|| self.unflushed.pending(key)),
        };
        let tries = Tries {
            previous,
            ..Tries::default()
        };
        let step = self
            .route(id, Some(shard), message, record.offset(), tries)
            .await;
        slots.push(record, step, Some(key));
    }

    /// Counts, and tells of (once per ingest), a record whose key's
    /// murmur2 partition is another. Its shard, the key's murmur2
    /// partition. Told at info, not as a warning: such a record is handled
    /// exactly like the others, one hop away at most, so there is nothing
    /// an operator must do; the counter is there for one who wants the hop
    /// gone (a producer set to murmur2).
    fn check_partition(&mut self, id: &str) -> ShardId {
        let shard = self.region.shard_of(id);
        if !self.is_own(shard) {
            self.metrics.partitioner_mismatch(&self.partition.topic);
            if !self.mismatch_warned.swap(true, Ordering::Relaxed) {
                tracing::info!(topic = %self.partition.topic, partition = self.partition.partition, entity_id = %id, %shard, "record in another partition than its key's murmur2 partition (a producer with another partitioner?): sent to its shard's node and handled there, one hop away when that is another node; such records are counted in colo_kafka_partitioner_mismatches_total");
            }
        }
        shard
    }

    /// Routes a record's message; `shard` is its key's, when known.
    ///
    /// A record of the shard this partition hosts here goes to that shard
    /// only (`Reply::Acked`). Any other (in another partition than its
    /// key's, or of a partition whose shard another topic keeps on another
    /// node) is an ask that follows its shard wherever it is, with its
    /// origin, so a durable entity applies it once however often it is
    /// sent.
    async fn route(
        &mut self,
        id: EntityId,
        shard: Option<ShardId>,
        message: E::Message,
        offset: i64,
        tries: Tries,
    ) -> Step<E> {
        if self.durable && self.unflushed.lost() {
            // Not routed: the partition is consumed again from its
            // committed offset, this record with it (see `consume`).
            return Step::Again { id, tries };
        }
        let shard = shard.unwrap_or_else(|| self.region.shard_of(&id));
        let origin = self.origin(shard, offset, tries.previous);
        let routed = if self.hosts(shard) {
            let routed = self.region.route_acked(&id, shard, message, origin).await;
            routed.map(Awaiting::Acked)
        } else {
            let routed = self.region.route_tracked(&id, message, origin).await;
            let deadline = tokio::time::Instant::now() + self.settings.delivery_timeout;
            routed.map(|rx| Awaiting::Ask { rx, deadline })
        };
        match routed {
            Ok(reply) => Step::Routed { id, reply, tries },
            Err(e) => match Outcome::refusal(e) {
                Outcome::Refused(reason) => Step::Refused {
                    reason: format!("refused: {reason}"),
                    outcome: "refused",
                },
                outcome => Step::Answered {
                    id,
                    tries,
                    outcome,
                    start: None,
                },
            },
        }
    }

    /// Whether `shard` is the one this partition hosts here: its records
    /// are handled by it only.
    fn hosts(&self, shard: ShardId) -> bool {
        self.shard != ShardPlace::Elsewhere && self.is_own(shard)
    }

    /// Whether `shard` is this partition's (shard = partition).
    fn is_own(&self, shard: ShardId) -> bool {
        partition_shard(self.partition.partition, self.region.number_of_shards()) == Some(shard)
    }

    /// A record's origin, for a durable entity type: what lets its entity
    /// skip it if it applied it already. Its source is the topic for the
    /// records of the entity's shard's partition, the topic and this
    /// partition for the others (see `Origin::source`).
    /// `previous`: its key's previous record's offset while that one may
    /// not be durable (see `Origin::previous`), checked for the records
    /// this partition's own shard handles here (an ask is answered only
    /// once durable).
    fn origin(&self, shard: ShardId, offset: i64, previous: Option<i64>) -> Option<Box<Cause>> {
        if !self.durable {
            return None;
        }
        let offset = u64::try_from(offset).ok()?;
        let source = if self.is_own(shard) {
            self.origin_topic.clone()
        } else {
            self.misplaced_source.clone()
        };
        let previous = previous
            .filter(|_| self.hosts(shard))
            .and_then(|p| u64::try_from(p).ok());
        Some(Box::new(Cause::Record(Origin {
            source,
            offset,
            previous,
        })))
    }
}

impl<E: Entity, S: Source> PartitionTask<E, S> {
    /// Hosts the partition's shard here, asking again until it is, and
    /// claims it for the partition's topic; says where the shard is, or
    /// `None` if the region stopped.
    ///
    /// A claim of the same topic by another node can only be the partition
    /// assigned twice for a while (its owner revokes it at its next round,
    /// or lost it and releases it): the partition waits for it, whatever it
    /// takes, since consuming it meanwhile would hand its records to two
    /// nodes. A shard another topic's partition of the same number keeps on
    /// another node (an entity type fed by several topics) stays there: the
    /// partition is consumed at once, its records forwarded to the shard.
    async fn host(&self) -> Option<ShardPlace> {
        let Some(shard) = partition_shard(self.partition.partition, self.region.number_of_shards())
        else {
            tracing::warn!(
                entity_type = %self.region.entity_type_name(),
                topic = %self.partition.topic,
                partition = self.partition.partition,
                number_of_shards = self.region.number_of_shards(),
                "partition past the entity type's shards (partitions added to the topic under running nodes?): consumed here, each record sent to its key's shard; a node started now refuses the topic"
            );
            return Some(ShardPlace::Elsewhere);
        };
        // Expected while the cluster forms (no coordinator yet): a warning
        // only once it lasts `delivery_timeout`, the bound past which a
        // partition's stall is reported.
        let mut wait = ExpectedWait::Idle;
        loop {
            match self
                .region
                .claim_shards(
                    [shard],
                    &self.partition.topic,
                    self.settings.placement_timeout,
                )
                .await
            {
                Ok(()) => return Some(ShardPlace::Here),
                Err(PlacementError::Stopped) => return None,
                Err(e @ PlacementError::Elsewhere(_)) => {
                    tracing::info!(topic = %self.partition.topic, partition = self.partition.partition, error = %e, "partition's shard runs on another node; its records are forwarded there");
                    return Some(ShardPlace::Elsewhere);
                }
                Err(e @ (PlacementError::Refused(_) | PlacementError::OutOfRange { .. })) => {
                    // Asking again changes nothing: consumed anyway, its
                    // records routed to wherever the shard is.
                    tracing::warn!(topic = %self.partition.topic, partition = self.partition.partition, error = %e, "partition's shard not hosted here; its records are forwarded");
                    return Some(ShardPlace::Elsewhere);
                }
                Err(e) => {
                    let (topic, partition) = (&self.partition.topic, self.partition.partition);
                    match wait.waits(self.settings.delivery_timeout) {
                        Say::Began => {
                            tracing::info!(%topic, partition, error = %e, "partition's shard not placed yet (the cluster is forming, or its coordinator is away); the partition waits")
                        }
                        Say::Overdue(lasted) => {
                            tracing::warn!(%topic, partition, error = %e, ?lasted, "partition's shard still not placed after kafka.delivery_timeout; the partition waits")
                        }
                        Say::Nothing => {}
                    }
                    tokio::time::sleep(self.settings.retry_backoff).await;
                }
            }
        }
    }
}
