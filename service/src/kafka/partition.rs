//! One assigned partition's records, from its shard's hosting to the end
//! of its stream.
//!
//! Records are routed in offset order and settled in offset order, so an
//! offset is committed only once its record and every one before it were
//! handled or dead-lettered. Each key's records are handled one after
//! another: a record whose key has an earlier record unsettled is held here
//! and routed only once that one is settled. So a retry keeps its place (no
//! later record of its key runs before it), while different keys run side
//! by side.
//!
//! A record is delivered again only when its delivery is known to have
//! failed: its handler failed (up to `max_attempts`, then it is
//! dead-lettered), it was dropped before an entity got it, or the node that
//! took it went away without confirming it. Never because it waited its
//! turn: a record behind slow work of its key waits as long as that takes,
//! and the source warns about a partition that stops progressing. A record
//! that can never be handled goes to the dead-letter topic at once:
//! undecodable, or refused (an empty entity id, a message that cannot be
//! encoded for another node).
//!
//! The task gives its records up when its partition is lost, or when a
//! revoke's bound is reached: they are dropped unhandled wherever they wait
//! (see `Reply::Record`), left uncommitted, and consumed again by the
//! partition's next owner. It also gives them up when a handled record's
//! change is lost (its shard stopped before writing it: its node fenced
//! itself) while the partition stays here: no next owner would consume it
//! again, so the task has the source rewind the partition to its committed
//! offset, and routes nothing more (a later record of the same entity,
//! applied first, would have the entity skip the lost one).

use super::durable_acks::DurableAcks;
use super::slots::{Outcome, Slots, Step};
use super::{IngestSettings, RecordDecoder};
use crate::entity::{Entity, EntityId};
use crate::envelope::Origin;
use crate::error::unanswered;
use crate::error::TellError;
use crate::metrics::KafkaMetrics;
use crate::region::{PlacementError, Region};
use colo_allocation::ShardId;
use colo_connectors::{Ack, DeadLetters, Gate, Record, Rewind, TopicPartition};
use std::sync::Arc;
use std::time::Instant;
use tokio::sync::{mpsc, oneshot};

/// Records a partition's task works on at most (routed, or held behind
/// their key's): the others wait in their stream, in the source's
/// in-flight bound all the same. It keeps the task's bookkeeping in the
/// processor's caches when that bound is large, and is far more than the
/// keys a partition has in flight at once.
const WINDOW: usize = 256;

/// One assigned partition's task.
pub(super) struct PartitionTask<E: Entity> {
    pub(super) region: Region<E>,
    pub(super) settings: Arc<IngestSettings>,
    pub(super) decode: RecordDecoder<E::Message>,
    pub(super) partition: TopicPartition,
    pub(super) metrics: KafkaMetrics,
    /// A record in the wrong partition was warned about (once per
    /// partition: a producer with another partitioner sends many).
    pub(super) mismatch_warned: bool,
    pub(super) dead_letters: DeadLetters,
    /// When the partition was assigned here, until its first record is
    /// handled.
    pub(super) assigned_at: Option<Instant>,
    /// Records handled, the one counter touched per record.
    pub(super) handled: metrics::Counter,
    /// Where its shard is, once hosting it was asked for.
    pub(super) shard: ShardPlace,
    /// Whether the entity type's state is durable here: its records carry
    /// their origin (so an entity skips what it applied already), and each
    /// is acked only once the change it made is durable.
    pub(super) durable: bool,
    /// The partition's topic, shared by its records' origins.
    pub(super) origin_topic: Arc<str>,
    /// Handled records waiting for their change to be durable before they
    /// are acked (see `durable_acks.rs`).
    pub(super) unflushed: DurableAcks,
    /// Consumes the partition again from its committed offset.
    pub(super) rewind: Rewind,
}

/// Where a partition's shard is, which says how its records are routed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum ShardPlace {
    /// Not asked for yet.
    Unknown,
    /// Hosted here: its records are handled by this node's shard only
    /// (`Reply::Record`), never forwarded.
    Here,
    /// Kept on another node (another topic's partition of the same number
    /// claims it there, or the coordinator takes no locations from
    /// outside): its records are forwarded to it.
    Elsewhere,
}

impl<E: Entity> PartitionTask<E> {
    /// Hosts the partition's shard, opens the gate, then handles the
    /// records until their stream ends (revoked) or `give_up` fires or is
    /// dropped (lost, or a revoke's bound reached): then whatever is in
    /// hand is dropped unhandled, its acks reporting it not handled.
    pub(super) async fn run(
        mut self,
        gate: Gate,
        mut records: mpsc::UnboundedReceiver<Record>,
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
        if self.durable && self.shard == ShardPlace::Here {
            // Consumed only once the shard's state is restored.
            let shard = ShardId(u32::try_from(self.partition.partition).unwrap_or(u32::MAX));
            tokio::select! {
                biased;
                _ = &mut give_up => return,
                restored = self.region.restored(shard) => if !restored {
                    return;
                },
            }
        }
        gate.open();
        tokio::select! {
            biased;
            _ = &mut give_up => {}
            () = self.consume(&mut records) => {}
        }
    }

    async fn consume(&mut self, records: &mut mpsc::UnboundedReceiver<Record>) {
        let mut slots = Slots::new();
        let mut open = true;
        loop {
            if self.durable && self.unflushed.lost() {
                tracing::warn!(topic = %self.partition.topic, partition = self.partition.partition, "a shard stopped before the changes of handled records were written: the partition is consumed again from its committed offset");
                self.rewind.rewind();
                return;
            }
            // What came back, in order, without waiting.
            while let Some(outcome) = self.front_outcome_now(&mut slots) {
                if !self.settle_front(&mut slots, outcome).await {
                    return;
                }
            }
            tokio::select! {
                biased;
                () = std::future::poll_fn(|cx| self.unflushed.poll_settled(cx)),
                    if !self.unflushed.is_empty() => {}
                record = records.recv(), if open && slots.queue.len() < WINDOW => match record {
                    Some(record) => self.take(&mut slots, record).await,
                    None => open = false,
                },
                outcome = Self::front_outcome(&mut slots), if !slots.queue.is_empty() => {
                    if !self.settle_front(&mut slots, outcome).await {
                        return;
                    }
                }
                else => return,
            }
        }
    }

    /// The front record's outcome if it is in, without waiting. A record to
    /// deliver again or to dead-letter is always ready.
    fn front_outcome_now(&self, slots: &mut Slots<E>) -> Option<Option<Outcome>> {
        let front = slots.front_mut()?;
        match &mut front.step {
            Step::Routed { reply, .. } => match reply.try_recv() {
                Ok(result) => Some(Some(Outcome::of(result.map(drop)))),
                Err(oneshot::error::TryRecvError::Closed) => {
                    Some(Some(Outcome::of(Err(unanswered()))))
                }
                Err(oneshot::error::TryRecvError::Empty) => None,
            },
            _ => Some(None),
        }
    }

    /// Waits for the front record's outcome; `None` for a record that has
    /// none to wait for (to deliver again, or to dead-letter).
    async fn front_outcome(slots: &mut Slots<E>) -> Option<Outcome> {
        let front = slots.front_mut()?;
        match &mut front.step {
            Step::Routed { reply, .. } => {
                let result = match reply.await {
                    Ok(result) => result.map(drop),
                    Err(_) => Err(unanswered()),
                };
                Some(Outcome::of(result))
            }
            _ => None,
        }
    }

    /// Decodes a record and routes it, or holds it behind its key's
    /// unsettled record, or marks it for the dead-letter topic.
    async fn take(&mut self, slots: &mut Slots<E>, record: Record) {
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
        if slots.chain(key) {
            let message = Box::new(message);
            return slots.push(record, Step::Held { id, message }, Some(key));
        }
        let step = self.route(id, Some(shard), message, record.offset, 0).await;
        slots.push(record, step, Some(key));
    }

    /// Warns (once) about a record whose key's murmur2 partition is another.
    /// Its shard, the key's murmur2 partition.
    fn check_partition(&mut self, id: &str) -> ShardId {
        let shard = self.region.shard_of(id);
        if i64::from(shard.0) != i64::from(self.partition.partition) {
            self.metrics.partitioner_mismatch(&self.partition.topic);
            if !self.mismatch_warned {
                self.mismatch_warned = true;
                tracing::warn!(topic = %self.partition.topic, partition = self.partition.partition, entity_id = %id, %shard, "record in another partition than its key's murmur2 partition (a producer with another partitioner?): handled, but on the shard's node, not here");
            }
        }
        shard
    }

    /// Routes a record's message; `shard` is its key's, when known.
    async fn route(
        &mut self,
        id: EntityId,
        shard: Option<ShardId>,
        message: E::Message,
        offset: i64,
        failures: u32,
    ) -> Step<E> {
        if self.durable && self.unflushed.lost() {
            // Not routed: the partition is consumed again from its
            // committed offset, this record with it (see `consume`).
            return Step::Again { id, failures };
        }
        let routed = match self.shard {
            ShardPlace::Here | ShardPlace::Unknown => {
                let shard = shard.unwrap_or_else(|| self.region.shard_of(&id));
                let origin = self.origin(shard, offset);
                self.region.route_record(&id, shard, message, origin).await
            }
            ShardPlace::Elsewhere => self.region.route_tracked(&id, message).await,
        };
        match routed {
            Ok(reply) => Step::Routed {
                id,
                reply,
                failures,
            },
            Err(e) => match Outcome::refusal(e) {
                Outcome::Refused(reason) => Step::Refused {
                    reason: format!("refused: {reason}"),
                    outcome: "refused",
                },
                _ => Step::Again { id, failures },
            },
        }
    }

    /// Settles the front record by its outcome (`None`: it has none, it is
    /// to be delivered again or dead-lettered). False once the region has
    /// stopped: the records in hand stay unacked, consumed again later.
    async fn settle_front(&mut self, slots: &mut Slots<E>, outcome: Option<Outcome>) -> bool {
        let Some(front) = slots.front_mut() else {
            return true;
        };
        let step = std::mem::replace(&mut front.step, Step::Settling);
        let (id, failures) = match (step, outcome) {
            (Step::Refused { reason, outcome }, _) => {
                return self.dead_letter_front(slots, &reason, outcome).await;
            }
            (Step::Routed { id, failures, .. }, Some(outcome))
            | (
                Step::Answered {
                    id,
                    failures,
                    outcome,
                },
                _,
            ) => match outcome {
                Outcome::Handled => {
                    self.handled.increment(1);
                    if let Some(assigned_at) = self.assigned_at.take() {
                        self.metrics
                            .first_record(&self.partition.topic, assigned_at.elapsed());
                    }
                    let shard = self.region.shard_of(&id);
                    self.ack_front(slots, Some(shard)).await;
                    return true;
                }
                Outcome::Failed(reason) => {
                    let failures = failures + 1;
                    if failures >= self.settings.max_attempts {
                        let reason = format!("the handler failed {failures} times: {reason}");
                        return self
                            .dead_letter_front(slots, &reason, "handler_failed")
                            .await;
                    }
                    tracing::debug!(entity_id = %id, %reason, failures, "record's handler failed; delivered again");
                    (id, failures)
                }
                Outcome::Refused(reason) => {
                    let reason = format!("refused: {reason}");
                    return self.dead_letter_front(slots, &reason, "refused").await;
                }
                Outcome::NotDelivered(reason) => {
                    tracing::debug!(entity_id = %id, %reason, "record not delivered; delivered again");
                    (id, failures)
                }
            },
            (Step::Again { id, failures }, _) => (id, failures),
            (Step::Held { id, message }, _) => {
                // Its key's earlier record settled before it reached the
                // front (held records are routed then): route it now.
                let offset = front.record.offset;
                let step = self.route(id, None, *message, offset, 0).await;
                if let Some(front) = slots.front_mut() {
                    front.step = step;
                }
                return true;
            }
            (Step::Routed { .. } | Step::Settling, None) | (Step::Settling, Some(_)) => {
                unreachable!("a routed record at the front is settled with its outcome")
            }
        };
        if self.region.is_stopped() {
            return false;
        }
        tokio::time::sleep(self.settings.retry_backoff).await;
        let Some(front) = slots.front_mut() else {
            return true;
        };
        let offset = front.record.offset;
        front.step = match (self.decode)(&front.record) {
            Ok((_, message)) => self.route(id, None, message, offset, failures).await,
            // The decoder took it before: it is not pure. Dead-lettered
            // with its key's later records let go.
            Err(reason) => {
                let reason = format!("cannot be decoded: {reason}");
                return self.dead_letter_front(slots, &reason, "undecodable").await;
            }
        };
        true
    }

    /// The front record is settled: acked, and the next record of its key,
    /// if one is held, routed.
    /// `shard`: where the handled record's entity lives (`None`: it changed
    /// nothing, it was dead-lettered).
    async fn ack_front(&mut self, slots: &mut Slots<E>, shard: Option<ShardId>) {
        let Some((record, next)) = slots.pop() else {
            return;
        };
        self.settle_ack(record.ack, shard);
        if let Some((number, id, message)) = next {
            let at = (number - slots.front) as usize;
            let Some(offset) = slots.queue.get(at).map(|slot| slot.record.offset) else {
                return;
            };
            let step = self.route(id, None, *message, offset, 0).await;
            if let Some(slot) = slots.queue.get_mut(at) {
                slot.step = step;
            }
        }
    }

    /// A record's origin, for a durable entity type whose entity lives in
    /// the record's partition: what lets the entity skip it if it applied
    /// it already. A record in another partition than its key's carries
    /// none (it is applied at least once; DEVELOPERS.md).
    fn origin(&self, shard: ShardId, offset: i64) -> Option<Box<Origin>> {
        if !self.durable {
            return None;
        }
        let offset = u64::try_from(offset).ok()?;
        (i64::from(shard.0) == i64::from(self.partition.partition)).then(|| {
            Box::new(Origin {
                topic: self.origin_topic.clone(),
                offset,
            })
        })
    }

    /// Acks a settled record: at once, or, for a durable entity type, once
    /// what its shard changed so far is durable.
    fn settle_ack(&mut self, ack: Ack, shard: Option<ShardId>) {
        match shard {
            // Handled by a shard here (`Reply::Record`): acked once its
            // change is written.
            Some(shard) if self.durable && self.shard != ShardPlace::Elsewhere => {
                let region = &self.region;
                self.unflushed.push(shard, ack, || region.durability(shard));
            }
            // Dead-lettered (it changed nothing), not durable, or forwarded
            // to the shard's node, which answered once its change was
            // written.
            _ => ack.handled(),
        }
    }
}

impl<E: Entity> PartitionTask<E> {
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
        let Ok(shard) = u32::try_from(self.partition.partition).map(ShardId) else {
            return Some(ShardPlace::Elsewhere);
        };
        let mut warned = false;
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
                    if !warned {
                        warned = true;
                        tracing::warn!(topic = %self.partition.topic, partition = self.partition.partition, error = %e, "partition's shard not hosted here yet; the partition waits");
                    }
                    tokio::time::sleep(self.settings.retry_backoff).await;
                }
            }
        }
    }

    /// Writes the front record to the dead-letter topic, waiting (and
    /// retrying) while it cannot be written, then acks it. False if the
    /// region stops meanwhile: unacked, consumed again after a restart.
    async fn dead_letter_front(
        &mut self,
        slots: &mut Slots<E>,
        reason: &str,
        outcome: &'static str,
    ) -> bool {
        let mut warned = false;
        loop {
            let Some(front) = slots.front_mut() else {
                return true;
            };
            let offset = front.record.offset;
            match self.dead_letters.send(&front.record, reason).await {
                Ok(()) => {
                    tracing::warn!(topic = %self.partition.topic, partition = self.partition.partition, offset, dead_letter_topic = %self.dead_letters.topic(), %reason, "record dead-lettered");
                    self.metrics.record(&self.partition.topic, outcome);
                    self.ack_front(slots, None).await;
                    return true;
                }
                Err(e) => {
                    if !warned {
                        warned = true;
                        tracing::error!(topic = %self.partition.topic, partition = self.partition.partition, offset, dead_letter_topic = %self.dead_letters.topic(), error = %e, "dead-letter topic cannot be written; the partition waits");
                    }
                    if self.region.is_stopped() {
                        return false;
                    }
                    tokio::time::sleep(self.settings.retry_backoff).await;
                }
            }
        }
    }
}
