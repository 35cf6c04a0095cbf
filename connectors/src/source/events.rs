//! What the source tells the service about the group: partitions assigned
//! (with their records behind a gate), revoked (with a revocation to
//! answer), lost, or the consumer failed.

use crate::record::{Record, TopicPartition};
use tokio::sync::{mpsc, oneshot};

/// A partition assigned to this node, with its records in order once its
/// gate is open.
#[derive(Debug)]
pub struct AssignedPartition {
    pub partition: TopicPartition,
    /// Ends when the partition is revoked or lost.
    pub records: mpsc::UnboundedReceiver<Record>,
    /// Open it once the partition's shard is hosted here.
    pub gate: Gate,
    /// Asks for the partition to be consumed again from its committed
    /// offset.
    pub rewind: Rewind,
}

/// What consumes an assigned partition again from its committed offset,
/// while it stays assigned here: for the records whose effect was lost
/// here (their shard stopped before their state was written, while the
/// partition stayed), which no other owner will consume again. The
/// partition's record stream ends, and it comes again as a new
/// [`SourceEvent::Assigned`] partition behind a closed gate, from its
/// committed offset.
#[derive(Debug, Clone)]
pub struct Rewind {
    pub(super) partition: TopicPartition,
    /// Which assignment of the partition: one rewound or gone already is
    /// not rewound again.
    pub(super) feed: u64,
    pub(super) rewinds: std::sync::mpsc::Sender<(TopicPartition, u64)>,
}

impl Rewind {
    /// Consumes the partition again from its committed offset.
    pub fn rewind(&self) {
        let _ = self.rewinds.send((self.partition.clone(), self.feed));
    }
}

/// What holds an assigned partition's records back until the service can
/// handle them where they were consumed. Dropped unopened (the partition
/// revoked meanwhile, say), the records wait until the partition goes
/// (paused once as many as the in-flight bound wait).
#[derive(Debug)]
pub struct Gate {
    pub(super) partition: TopicPartition,
    /// Which assignment of the partition: a gate of an earlier one opens
    /// nothing.
    pub(super) feed: u64,
    pub(super) opens: std::sync::mpsc::Sender<(TopicPartition, u64)>,
}

impl Gate {
    /// The partition's shard is hosted here: consume it, from its committed
    /// offset as it is now.
    pub fn open(self) {
        let _ = self.opens.send((self.partition, self.feed));
    }
}

/// A revoke the callback waits for, in two steps. Dropped, each step it
/// did not take is taken as not done, and the callback goes on.
#[derive(Debug)]
pub struct Revocation {
    pub(super) settled: Option<std::sync::mpsc::SyncSender<oneshot::Sender<bool>>>,
    pub(super) done: std::sync::mpsc::SyncSender<()>,
}

impl Revocation {
    /// Every record received of the revoked partitions was settled: the
    /// source stores and commits their offsets now, and this says whether
    /// the broker took the commit. It comes before the hand-off because the
    /// partitions' next owner starts once their shards are handed off, from
    /// the offset committed then.
    pub async fn commit(&mut self) -> bool {
        let Some(settled) = self.settled.take() else {
            return false;
        };
        let (reply, answer) = oneshot::channel();
        if settled.send(reply).is_err() {
            return false;
        }
        answer.await.unwrap_or(false)
    }

    /// The revoked partitions' shards were handed off: the callback returns
    /// and the partitions change owner.
    pub fn done(self) {
        let _ = self.done.send(());
    }
}

/// A rebalance of the entity type's group, as this node sees it.
#[derive(Debug)]
pub enum SourceEvent {
    /// Partitions assigned here, each one's records held behind its
    /// [`Gate`].
    Assigned { partitions: Vec<AssignedPartition> },
    /// Partitions revoked. Their record streams have ended: settle what was
    /// received, [`Revocation::commit`], hand their shards off, then
    /// [`Revocation::done`]; the partitions change owner after that.
    Revoked {
        partitions: Vec<TopicPartition>,
        revocation: Revocation,
    },
    /// Partitions lost (the session expired): another node may own them
    /// already. Drop their shards; nothing is committed.
    Lost { partitions: Vec<TopicPartition> },
    /// The consumer failed for good (librdkafka's fatal error: e.g. another
    /// member took its `group.instance.id`): it consumes nothing more, and
    /// its partitions are to be taken as lost. The last event.
    Failed { reason: String },
}
