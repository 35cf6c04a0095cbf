//! Settling a partition's front record, in offset order: acked once
//! handled (for a durable entity type, once the start of the shard that
//! handled it has written its change), delivered again after a failure
//! that may pass, dead-lettered when it can never be handled, or given up
//! with the rest of the records in hand when the partition must be
//! consumed again.

use super::super::slots::{Outcome, Start, Step, Tries};
use super::super::{Source, SourceAck, SourceRecord};
use super::{PartitionTask, Slots};
use crate::entity::Entity;
use colo_allocation::ShardId;
use std::time::{Duration, Instant};

impl<E: Entity, S: Source> PartitionTask<E, S> {
    /// Settles the front record by its outcome (`None`: it has none, it is
    /// to be delivered again or dead-lettered). False once the records in
    /// hand are given up: the region has stopped, the partition is to be
    /// consumed again (its shard runs elsewhere, or a record's key lost its
    /// previous record), or a record to deliver again was revoked with its
    /// partition (its next owner delivers it; `ended`: the partition's
    /// stream has ended, which a record retried at the front is the first
    /// to see); they stay unacked, consumed again later.
    pub(crate) async fn settle_front(
        &mut self,
        slots: &mut Slots<E, S>,
        outcome: Option<(Outcome, Start)>,
        ended: bool,
    ) -> bool {
        let Some(front) = slots.front_mut() else {
            return true;
        };
        let offset = front.record.offset();
        let timestamp = front.record.timestamp();
        let step = std::mem::replace(&mut front.step, Step::Settling);
        let (id, tries) = match (step, outcome) {
            (Step::Refused { reason, outcome }, _) => {
                return self.dead_letter_front(slots, &reason, outcome).await;
            }
            (Step::Routed { id, mut tries, .. }, Some((outcome, start)))
            | (
                Step::Answered {
                    id,
                    mut tries,
                    outcome,
                    start,
                },
                _,
            ) => match outcome {
                Outcome::Handled => {
                    let age = self.progress.handled(timestamp);
                    if let Some((assigned_at, tag)) = self.arrival.take() {
                        self.metrics.first_record(
                            &self.partition.topic,
                            tag,
                            assigned_at.elapsed(),
                            age.map(Duration::from_secs_f64),
                        );
                    }
                    let shard = self.region.shard_of(&id);
                    self.ack_front(slots, Some((shard, start))).await;
                    return true;
                }
                Outcome::Failed(reason) => {
                    let failures = tries.failures + 1;
                    if failures >= self.settings.max_attempts {
                        let reason = format!("the handler failed {failures} times: {reason}");
                        return self
                            .dead_letter_front(slots, &reason, "handler_failed")
                            .await;
                    }
                    tracing::debug!(entity_id = %id, %reason, failures, "record's handler failed; delivered again");
                    let tries = Tries {
                        failures,
                        undelivered_since: None,
                        ..tries
                    };
                    (id, tries)
                }
                Outcome::Refused(reason) => {
                    let reason = format!("refused: {reason}");
                    return self.dead_letter_front(slots, &reason, "refused").await;
                }
                Outcome::NotDelivered(reason) => {
                    let since = *tries.undelivered_since.get_or_insert_with(Instant::now);
                    if since.elapsed() >= self.settings.redelivery_timeout {
                        let reason = format!(
                            "not delivered for {:?} (kafka.redelivery_timeout): {reason}",
                            since.elapsed()
                        );
                        return self
                            .dead_letter_front(slots, &reason, "undeliverable")
                            .await;
                    }
                    tracing::debug!(entity_id = %id, %reason, "record not delivered; delivered again");
                    (id, tries)
                }
                Outcome::Waits(reason) => {
                    tracing::debug!(entity_id = %id, %reason, "record refused for now; delivered again");
                    (id, tries)
                }
                Outcome::Lost(ref reason) | Outcome::Moved(ref reason) => {
                    // Given up either way; consumed again here unless the
                    // partition is leaving this node.
                    if !self.revoked && !self.region.is_stopped() {
                        let why = if matches!(outcome, Outcome::Moved(_)) {
                            "partition's shard runs on another node while the partition is consumed here (placed there while this node was out of touch with its coordinator): the partition is consumed again from its committed offset and claims its shard back"
                        } else {
                            "a record was not applied: the partition is consumed again from its committed offset"
                        };
                        tracing::warn!(topic = %self.partition.topic, partition = self.partition.partition, offset, %reason, "{why}");
                        S::rewind(&self.rewind);
                    }
                    return false;
                }
            },
            (Step::Again { id, tries }, _) => (id, tries),
            (Step::Held { id, message }, _) => {
                // Its key's earlier record settled before it reached the
                // front (held records are routed then): route it now.
                let tries = Tries {
                    previous: front.key.and_then(|key| self.unflushed.pending(key)),
                    ..Tries::default()
                };
                let step = self.route(id, None, *message, offset, tries).await;
                if let Some(front) = slots.front_mut() {
                    front.step = step;
                }
                return true;
            }
            (Step::Routed { .. } | Step::Settling, None) | (Step::Settling, Some(_)) => {
                unreachable!("a routed record at the front is settled with its outcome")
            }
        };
        if self.region.is_stopped() || self.revoked || ended {
            // Revoked: the partition's next owner delivers it again, and a
            // revoke waits for records in flight, not for retries.
            return false;
        }
        // The batch's clock reading is not kept across the wait.
        self.progress.settled();
        tokio::time::sleep(self.settings.retry_backoff).await;
        let Some(front) = slots.front_mut() else {
            return true;
        };
        front.step = match (self.decode)(&front.record) {
            Ok((_, message)) => self.route(id, None, message, offset, tries).await,
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
    /// `handled`: where the handled record's entity lives, and the start of
    /// the shard that handled it if its answer named one (`None`: it
    /// changed nothing, it was dead-lettered).
    async fn ack_front(&mut self, slots: &mut Slots<E, S>, handled: Option<(ShardId, Start)>) {
        let Some((record, key, next)) = slots.pop() else {
            return;
        };
        self.settle_ack(S::into_ack(record), key, handled);
        if let Some((number, id, message)) = next {
            let at = (number - slots.front) as usize;
            let Some(offset) = slots.queue.get(at).map(|slot| slot.record.offset()) else {
                return;
            };
            // The record just settled may wait for its write: the next one
            // must find it in its entity's state.
            let tries = Tries {
                previous: key.and_then(|key| self.unflushed.pending(key)),
                ..Tries::default()
            };
            let step = self.route(id, None, *message, offset, tries).await;
            if let Some(slot) = slots.queue.get_mut(at) {
                slot.step = step;
            }
        }
    }

    /// Acks a settled record: at once, or, for a durable entity type, once
    /// what its shard changed so far is durable.
    fn settle_ack(&mut self, ack: S::Ack, key: Option<u64>, handled: Option<(ShardId, Start)>) {
        match handled {
            // Handled by this partition's shard here (`Reply::Acked`):
            // acked once the start of the shard that handled it has
            // written its change.
            Some((shard, start)) if self.durable && self.hosts(shard) => {
                self.unflushed.push(ack, key, start);
            }
            // Dead-lettered (it changed nothing), not durable, or an ask
            // (`Reply::Local`), answered once its change was written.
            _ => ack.handled(),
        }
    }

    /// Writes the front record to the dead-letter topic, waiting (and
    /// retrying) while it cannot be written, then acks it. False if the
    /// region stops meanwhile: unacked, consumed again after a restart.
    async fn dead_letter_front(
        &mut self,
        slots: &mut Slots<E, S>,
        reason: &str,
        outcome: &'static str,
    ) -> bool {
        let mut warned = false;
        loop {
            let Some(front) = slots.front_mut() else {
                return true;
            };
            let offset = front.record.offset();
            match S::dead_letter(&self.dead_letters, &front.record, reason).await {
                Ok(()) => {
                    tracing::warn!(topic = %self.partition.topic, partition = self.partition.partition, offset, dead_letter_topic = %S::dead_letter_topic(&self.dead_letters), %reason, "record dead-lettered");
                    self.metrics.record(&self.partition.topic, outcome);
                    self.ack_front(slots, None).await;
                    return true;
                }
                Err(e) => {
                    if !warned {
                        warned = true;
                        tracing::error!(topic = %self.partition.topic, partition = self.partition.partition, offset, dead_letter_topic = %S::dead_letter_topic(&self.dead_letters), error = %e, "dead-letter topic cannot be written; the partition waits");
                    }
                    if self.region.is_stopped() {
                        return false;
                    }
                    self.progress.settled();
                    tokio::time::sleep(self.settings.retry_backoff).await;
                }
            }
        }
    }
}
