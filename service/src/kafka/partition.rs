//! One assigned partition's records: routed to their entities, settled,
//! dead-lettered when they cannot be handled.

use super::{IngestSettings, RecordDecoder};
use crate::entity::Entity;
use crate::error::AskError;
use crate::metrics::KafkaMetrics;
use crate::region::{unanswered, Delivery, PlacementError, Region};
use colo_allocation::ShardId;
use colo_connectors::{DeadLetters, Gate, Record, TopicPartition};
use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};

/// One partition's records, routed in order, settled in order.
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
    pub(super) assigned_at: Option<std::time::Instant>,
    /// Records handled, the one counter touched per record.
    pub(super) handled: metrics::Counter,
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
    pub(super) async fn run(mut self, gate: Gate, mut records: mpsc::UnboundedReceiver<Record>) {
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
