//! What the source hands the service: a consumed record and the partition
//! it came from. Their own module because the observer, the dead-letter
//! producer and the source all speak of them.

use crate::ack::Ack;
use std::sync::Arc;

/// A partition of a topic.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TopicPartition {
    pub topic: String,
    pub partition: i32,
}

/// A consumed record. Its [`Ack`] must be acked once the record was handled
/// or dead-lettered; dropped unacked, the record is consumed again later.
#[derive(Debug)]
pub struct Record {
    /// Shared by every record of the partition.
    pub topic: Arc<str>,
    pub partition: i32,
    pub offset: i64,
    /// When it was produced (or appended, on a topic that keeps the
    /// broker's time), in milliseconds since the Unix epoch; `None` when
    /// the record has no timestamp.
    pub timestamp: Option<i64>,
    pub key: Option<Vec<u8>>,
    pub payload: Option<Vec<u8>>,
    pub ack: Ack,
}
