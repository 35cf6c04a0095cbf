//! The ingest of acked records, whatever their source: a source hands a
//! partition's records over in offset order, each with an acknowledgement,
//! and takes back each record's ack once its effect is applied (and, for a
//! durable entity type, written). What a partition task keeps in between
//! does not depend on the source, and lives here: the records in hand,
//! each key's in order ([`slots`]), and the handled records of durable
//! types waiting for their write ([`durable_acks`]). Kafka's records are
//! one source (`kafka/`); another log, or a durable timer, would be one
//! beside it.

pub(crate) mod durable_acks;
pub(crate) mod slots;

pub(crate) use durable_acks::DurableAcks;

/// A record a partition of a source hands over, in offset order.
pub(crate) trait SourceRecord {
    /// Its place in its partition: offsets grow within one partition.
    fn offset(&self) -> i64;
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
