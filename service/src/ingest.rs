//! The ingest of acked records, whatever their source: a source hands a
//! partition's records over in offset order, each with an acknowledgement,
//! and takes back each record's ack once its effect is applied (and, for a
//! durable entity type, written). What a partition task keeps in between
//! does not depend on the source, and lives here: the records in hand,
//! each key's in order ([`slots`]), and the handled records of durable
//! types waiting for their write ([`durable_acks`]), and the partition's
//! task that routes, retries, settles and acks them ([`partition`]),
//! generic over the [`Source`]. Kafka is one source (`kafka/`: its
//! records, rebalances and commits); another log, or a durable timer,
//! would be one beside it.

pub(crate) mod durable_acks;
pub(crate) mod partition;
pub(crate) mod slots;

pub(crate) use durable_acks::DurableAcks;
pub(crate) use partition::{PartitionName, PartitionTask, ShardPlace};

use colo_allocation::ShardId;
use std::future::Future;
use std::sync::Arc;

/// How a partition's task reads a record: its entity id and message, or
/// why it cannot be handled.
pub type Decoder<R, M> = Arc<dyn Fn(&R) -> Result<(String, M), String> + Send + Sync>;

/// A source of acked records, as a partition's task uses it beyond its
/// records: the gate that starts the partition's flow, a rewind to its
/// committed offset, and where a record that can never be handled goes.
/// Kafka is one (`kafka::Kafka`).
pub(crate) trait Source: Send + Sync + 'static {
    /// The source's own settings (see `IngestSettings`).
    type Settings: Send + Sync + 'static;
    type Record: SourceRecord + Send + Sync + 'static;
    type Ack: SourceAck + Send + 'static;
    /// Opened once the partition's shard is hosted (and restored): only
    /// then does the partition flow.
    type Gate: Send + 'static;
    /// Has the source consume the partition again from its committed
    /// offset.
    type Rewind: Send + Sync + 'static;
    /// Where records that can never be handled are written.
    type DeadLetters: Send + Sync + 'static;

    /// A record's ack, the record done with.
    fn into_ack(record: Self::Record) -> Self::Ack;
    fn open(gate: Self::Gate);
    fn rewind(rewind: &Self::Rewind);
    /// Writes `record` with `reason`; returns once it is kept.
    fn dead_letter(
        dead_letters: &Self::DeadLetters,
        record: &Self::Record,
        reason: &str,
    ) -> impl Future<Output = Result<(), String>> + Send;
    /// Where [`Source::dead_letter`] writes, for logs.
    fn dead_letter_topic(dead_letters: &Self::DeadLetters) -> &str;
}

/// The shard of a partition (shard = partition); `None` for a partition
/// number no shard has: one added to the topic under running nodes, past
/// the entity type's `number_of_shards` (Kafka's are never negative). Such
/// a partition is consumed all the same, each record sent to its key's
/// shard, as a record in another partition than its key's is.
pub(crate) fn partition_shard(partition: i32, number_of_shards: u32) -> Option<ShardId> {
    u32::try_from(partition)
        .ok()
        .filter(|p| *p < number_of_shards)
        .map(ShardId)
}

/// A record a partition of a source hands over, in offset order.
pub(crate) trait SourceRecord {
    /// Its place in its partition: offsets grow within one partition.
    fn offset(&self) -> i64;
    /// When it was produced, in milliseconds since the Unix epoch, if the
    /// source knows.
    fn timestamp(&self) -> Option<i64>;
}

/// The acknowledgement of one record, whose drop unhandled reports the
/// record as not handled (it is consumed again from the last commit).
pub(crate) trait SourceAck {
    /// The offset of the record it acknowledges.
    fn offset(&self) -> i64;
    /// Its record's effect is applied and waits only for its write: it no
    /// longer counts against the partition's records in flight.
    fn applied(&mut self);
    /// Its record is handled for good: its offset may be committed.
    fn handled(self);
}
