//! What a source reports as it goes, for the service's metrics: this crate
//! names no metric, the service does.

use crate::record::TopicPartition;
use std::time::Duration;

/// An assigned partition, as the poll loop last saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PartitionState {
    /// Records in the service's hands (delivered, not acked yet).
    pub in_flight: usize,
    /// Paused: at its in-flight bound, or with as many records held while
    /// it waits for its shard.
    pub paused: bool,
    /// Records polled but held back: its gate is not open yet, or it is at
    /// its in-flight bound.
    pub held: usize,
    /// Its gate is not open yet: the partition waits for its shard to
    /// start on this node.
    pub waiting_for_shard: bool,
    /// Records between the partition's end (its high watermark, as last
    /// fetched) and the next record to handle (before any came, the
    /// group's committed offset); `None` until librdkafka's statistics
    /// know the partition.
    pub lag: Option<i64>,
}

/// Receives a source's reports. Called from the consumer's thread: keep it
/// short and never block.
pub trait SourceObserver: Send + Sync + 'static {
    /// An assigned partition's state, reported about once a second.
    fn partition(&self, partition: &TopicPartition, state: PartitionState);
    /// The partition is no longer assigned here.
    fn partition_gone(&self, partition: &TopicPartition);
    /// A commit of handled records' offsets was answered, after `latency`
    /// when the source made it and waited (at a revoke or at shutdown);
    /// librdkafka's own periodic commits come without.
    fn committed(&self, latency: Option<Duration>, ok: bool);
    /// librdkafka's commit was refused because the group was rebalancing;
    /// a later commit carries its offsets.
    fn commit_refused_in_rebalance(&self) {}
    /// The group now holds `offset` as the partition's committed offset
    /// (the next record it is consumed from): records below it are not
    /// consumed again, here or by another member. Reported for each
    /// partition of each commit that succeeded.
    fn offset_committed(&self, _partition: &TopicPartition, _offset: i64) {}
}

/// Reports nowhere.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoObserver;

impl SourceObserver for NoObserver {
    fn partition(&self, _: &TopicPartition, _: PartitionState) {}
    fn partition_gone(&self, _: &TopicPartition) {}
    fn committed(&self, _: Option<Duration>, _: bool) {}
}
