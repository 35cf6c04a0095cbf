//! A durable entity type's changelog, as the state side needs it: a log
//! per shard that each write of changed entities goes to first, and that a
//! shard starting anywhere restores from. The store and the shards know
//! only this trait; Kafka's topic is one implementation of it
//! (`kafka/changelog.rs`), as the coordinator's log is one of
//! `CoordinatorStore`.

use super::OutputRecord;
use futures::future::BoxFuture;
use std::ops::ControlFlow;

/// One record read back from a changelog.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChangelogRecord<'a> {
    pub offset: i64,
    pub key: &'a [u8],
    /// `None` for a tombstone.
    pub value: Option<&'a [u8]>,
    /// As written (see [`ChangelogWrite::tag`]).
    pub tag: Option<&'a [u8]>,
}

/// One record to write to a changelog.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChangelogWrite<'a> {
    pub key: &'a [u8],
    /// `None` for a tombstone.
    pub value: Option<&'a [u8]>,
    /// Read back with the record: a tombstone has no value, so what it
    /// means beyond its key being gone (the runtime's tombstones say
    /// whether an entity was deleted or only moved to another key) travels
    /// here.
    pub tag: Option<&'a [u8]>,
}

/// Why a changelog could not be written or read: its log's own error,
/// whose text says which log and partition.
#[derive(Debug, thiserror::Error)]
#[error(transparent)]
pub struct ChangelogError(pub Box<dyn std::error::Error + Send + Sync>);

/// A durable entity type's changelog: one partition per shard.
pub trait EntityChangelog: Send + Sync + 'static {
    /// Writes `records` to `partition`, in order; returns the offset of
    /// each once the log has them all.
    ///
    /// # Errors
    /// A record was not taken within the log's bound: none of them counts
    /// as written then (the caller writes them all again).
    fn write<'a>(
        &'a self,
        partition: i32,
        records: &'a [ChangelogWrite<'a>],
    ) -> BoxFuture<'a, Result<Vec<i64>, ChangelogError>>;

    /// With transactions: the writer of `partition` for a start of its
    /// shard, opened (fencing the last start's, wherever it runs, and
    /// aborting what that one left open). `None`: this changelog writes
    /// without transactions, each write by [`EntityChangelog::write`] and
    /// each output on its own.
    fn transactions(
        &self,
        partition: i32,
    ) -> Option<BoxFuture<'_, Result<Box<dyn ShardTransactions>, ChangelogError>>> {
        let _ = partition;
        None
    }

    /// Reads `partition` from `from` (`None`: its first record) up to
    /// `until`, exclusive (`i64::MAX`: to whatever end the log reports),
    /// handing each record to `visit` until it breaks. Blocking: called
    /// from a blocking thread. Returns the records read.
    ///
    /// # Errors
    /// The partition cannot be read, or stalled before `until`.
    fn read(
        &self,
        partition: i32,
        from: Option<i64>,
        until: i64,
        visit: &mut dyn FnMut(ChangelogRecord<'_>) -> ControlFlow<()>,
    ) -> Result<u64, ChangelogError>;
}

/// A start's writer of its shard's partition in transactions (see
/// [`EntityChangelog::transactions`]): each write's records and the
/// outputs its entities emitted go in one, so an output is read (with
/// `read_committed`) once its change is in the changelog, and never
/// otherwise.
pub trait ShardTransactions: Send + Sync + 'static {
    /// Writes `records` and sends `outputs` in one transaction; returns
    /// each record's offset once it committed.
    ///
    /// # Errors
    /// It did not commit: none of it counts as written (the caller writes
    /// it all again), or a later start of the shard fenced this one.
    fn write<'a>(
        &'a self,
        records: &'a [ChangelogWrite<'a>],
        outputs: &'a [OutputRecord<'a>],
    ) -> BoxFuture<'a, Result<Vec<i64>, ChangelogError>>;
}
