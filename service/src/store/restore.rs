//! A durable shard's start where its entity type has a changelog: its
//! epoch taken, and its state brought up to date in the node's store
//! before any of its entities runs.
//!
//! Epochs: a shard's start writes an epoch marker to its changelog
//! partition, and the marker's offset is the start's epoch. A marker's key
//! begins with the byte 0xFF, which no entity id (UTF-8) has, and is the
//! start's own: compaction keeps the newest record of each key, so markers
//! that shared one key (the empty key, as they did before; still read as
//! markers) left only the newest, and the look-through below found no
//! other start once the one it needed was compacted away. A marker per
//! start stays for good: a record each time a shard starts.
//!
//! Offsets only grow and are never shared, so epochs grow across the
//! cluster with each start of the shard, without asking anyone, and two
//! starts racing for one shard (a node paused past its lease, a partition
//! assigned twice for a while) get different ones: the later marker wins.
//!
//! Every state record carries the epoch of the start that wrote it, and is
//! keyed by its entity and that epoch ([`state_key`]): a start writes its
//! entity's state under a key of its own, and with its first write of the
//! entity a tombstone for the key of the start before. A node that lost
//! the shard and wrote anyway (cut off, paused, its writes landing late)
//! writes under its own start's key, so compaction never drops a newer
//! start's record for its: of an entity's records, a restore takes the one
//! of the newest start (of one start, the last). A deposed start's late
//! record is then taken only when no newer start wrote its entity, and it
//! is right then for what Kafka records changed: it holds the offsets it
//! applied, those records were never acknowledged, and the next owner
//! skips them as applied. (An ask's change carries no offset: it may take
//! effect this way, like an ask whose answer was lost.) Keys of one start
//! per entity (no epoch: before this) are read the same way.
//!
//! A deleted entity is removed once the offsets it applied are committed:
//! tombstones for each key that may hold a record of it, tagged with the
//! start that deleted it. Such a tombstone deletes the entity from the
//! store unless a newer start's record of it is kept; an untagged
//! tombstone of a start's key only retires that key, its entity written
//! under a newer one.
//!
//! Kafka's cleaner drops a tombstone once the topic's
//! `delete.retention.ms` has passed: a copy that missed an entity's
//! removal could then keep the entity for good. A copy whose changelog
//! lost records after its checkpoint (an offset missing) is dropped, and
//! the whole partition read: whatever that copy would have missed, a full
//! read never needed. (Kafka Streams drops a task's local state once it
//! was away for `state.cleanup.delay.ms`.)
//!
//! What is read: with a checkpoint in the node's store (this node had the
//! shard before), only the changelog after it, like Kafka Streams'
//! checkpoint file. But first the records between this node's own last
//! marker and its checkpoint are looked through for another start's marker:
//! one there means another node owned the shard while this one still wrote
//! (it was deposed unknowingly), so its copy may hold writes a restore must
//! ignore; it is dropped and the whole partition read instead. So is a copy
//! whose own marker is not where its checkpoint says (by the fingerprint
//! the checkpoint keeps of it): the copy came from another changelog, one
//! since deleted and made anew, whose offsets mean nothing here. Without a
//! checkpoint, the whole partition is read into an empty shard.

mod passes;

use super::{ChangelogError, ChangelogRecord, EntityChangelog, ShardTransactions};
use crate::metrics::StateMetrics;
use colo_allocation::ShardId;
use colo_state::{Checkpoint, CheckpointKind, StateRecord, StateStore, StoreError, WriteBatch};
use std::ops::ControlFlow;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The first byte of an epoch marker's key: no UTF-8 text, so no entity
/// id, begins with it.
const MARKER_TAG: u8 = 0xFF;

/// Between an entity id and the epoch in a state record's key: in no UTF-8
/// text, so in no entity id, and not the marker's tag.
const EPOCH_TAG: u8 = 0xFE;

/// A state record's key: the entity, and the start that writes it.
pub(crate) fn state_key(id: &str, epoch: u64) -> Vec<u8> {
    let mut key = Vec::with_capacity(id.len() + 9);
    key.extend_from_slice(id.as_bytes());
    key.push(EPOCH_TAG);
    key.extend_from_slice(&epoch.to_be_bytes());
    key
}

/// The start that wrote a state record, from its key (or, keyed by the
/// entity alone, from its value).
fn written_by(record: &ChangelogRecord<'_>) -> Option<u64> {
    match record.key.iter().position(|&b| b == EPOCH_TAG) {
        Some(at) => Some(u64::from_be_bytes(
            record.key.get(at + 1..)?.try_into().ok()?,
        )),
        None => Some(StateRecord::decode(record.value?).ok()?.epoch),
    }
}

/// A state record's entity, and whether its key names a start (else it is
/// the entity id alone, as written before).
pub(super) fn entity_of(key: &[u8]) -> Result<(&str, bool), String> {
    let (id, keyed_by_start) = match key.iter().position(|&b| b == EPOCH_TAG) {
        Some(at) => (&key[..at], true),
        None => (key, false),
    };
    let id = std::str::from_utf8(id).map_err(|_| "its key is not an entity id (UTF-8)")?;
    Ok((id, keyed_by_start))
}

/// The keys of the tombstones that remove a deleted entity: each start's
/// in `starts`, and the key of the entity alone (written before keys per
/// start), each tagged with [`removal_tag`] of the deleting start.
pub(crate) fn removal_keys<'a>(
    id: &'a str,
    starts: &'a [u64],
) -> impl Iterator<Item = Vec<u8>> + 'a {
    starts
        .iter()
        .map(move |start| state_key(id, *start))
        .chain(std::iter::once(id.as_bytes().to_vec()))
}

/// The tag of a tombstone that removes an entity: the start that deleted
/// it (an untagged tombstone only retires its key).
pub(crate) fn removal_tag(start: u64) -> [u8; 8] {
    start.to_be_bytes()
}

/// The start that deleted an entity, from the tag of a tombstone that
/// removes it; `None` for a tombstone that only retires a key.
pub(super) fn deletion_start(tag: Option<&[u8]>) -> Option<u64> {
    Some(u64::from_be_bytes(tag?.try_into().ok()?))
}

/// Whether a changelog record is an epoch marker: a key that begins with
/// [`MARKER_TAG`], or the empty key that every marker had before.
pub(crate) fn is_marker(key: &[u8]) -> bool {
    key.first().is_none_or(|&b| b == MARKER_TAG)
}

/// A key of this start's own for its marker: the tag, the node, the shard,
/// the time and the process's count of starts, so that no other start's
/// marker has it (a node started again has another time).
fn marker_key(node: &str, shard: ShardId) -> Vec<u8> {
    static STARTS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let start = STARTS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let mut key = vec![MARKER_TAG];
    key.extend_from_slice(format!("{node}/{shard}/{nanos}/{start}").as_bytes());
    key
}

/// What a checkpoint keeps of its start's marker key: never 0, which
/// stands for a checkpoint written before checkpoints kept it.
pub(super) fn fingerprint(marker_key: &[u8]) -> u64 {
    xxhash_rust::xxh3::xxh3_64(marker_key).max(1)
}

/// Why a restore failed (it is tried again; the shard serves nothing
/// meanwhile).
#[derive(Debug, thiserror::Error)]
pub(crate) enum RestoreError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Changelog(#[from] ChangelogError),
    #[error("changelog record at offset {offset} cannot be read: {error}")]
    Record { offset: i64, error: String },
    #[error("the restore's thread failed: {0}")]
    Thread(String),
}

/// Which copy a restore went on from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RestoredFrom {
    /// The copy a start of the shard here left: only the tail read.
    Checkpoint,
    /// A standby's copy: only the tail read.
    Standby,
    /// No copy that could be kept: the whole partition read.
    Changelog,
}

impl RestoredFrom {
    pub fn label(self) -> &'static str {
        match self {
            Self::Checkpoint => "checkpoint",
            Self::Standby => "standby",
            Self::Changelog => "changelog",
        }
    }
}

/// A finished restore.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Restored {
    /// This start's epoch: every state it writes carries it.
    pub epoch: u64,
    /// Its marker's fingerprint, for its checkpoints.
    pub marker: u64,
    /// Changelog records read and applied or ignored (markers included;
    /// not those looked through for another start's marker).
    pub read: u64,
    /// States taken from the records read.
    pub applied: u64,
    /// States of a deposed owner, ignored.
    pub ignored: u64,
    pub from: RestoredFrom,
    pub took: Duration,
}

/// What a pass over the changelog ends in.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Ending {
    /// A start of the shard here, whose marker is at `epoch` with
    /// fingerprint `mark`: the copy is brought up to the marker and
    /// checkpointed as the start's.
    Start { epoch: i64, mark: u64 },
    /// A standby's step: the copy is brought up to the partition's end, as
    /// the broker answering reports it, and checkpointed as a standby's.
    Standby,
}

impl Ending {
    fn until(self) -> i64 {
        match self {
            Self::Start { epoch, .. } => epoch,
            Self::Standby => i64::MAX,
        }
    }
}

/// What a pass applied.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Applied {
    pub read: u64,
    /// What those records' keys and values came to, in bytes.
    pub bytes: u64,
    pub applied: u64,
    pub ignored: u64,
    /// The checkpoint the pass left.
    pub checkpoint: Checkpoint,
}

/// What a pass did.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Pass {
    pub applied: Applied,
    pub from: RestoredFrom,
}

/// What a shard's restore works on.
pub(crate) struct Restore {
    pub store: Arc<dyn StateStore>,
    /// The node's restores' turns (see [`super::RESTORES`]).
    pub turns: super::StoreCalls,
    pub changelog: Arc<dyn EntityChangelog>,
    pub entity_type: Arc<str>,
    pub shard: ShardId,
    /// Named in the marker, for whoever reads the changelog.
    pub node: String,
    /// The shard's copy in this node's store has one writer at a time: a
    /// start's restore, or a standby's step (see `standby.rs`).
    pub writer: super::ShardWriter,
    /// The entity type's standby copies this process's own steps left (see
    /// [`super::Vouched`]).
    pub vouched: super::Vouched,
}

/// A shard's transactional writer, when its changelog has transactions.
pub(crate) type Transactions = Option<Arc<dyn ShardTransactions>>;

/// Restores until it works: a shard that cannot restore serves nothing
/// (its messages wait), and says why each time. With transactions, the
/// start's writer is opened first: that aborts what the last start left
/// open, which a read of the partition would otherwise wait behind.
pub(crate) async fn restore_until_done(
    restore: Arc<Restore>,
    metrics: StateMetrics,
) -> (Restored, Transactions) {
    let mut backoff = Duration::from_millis(100);
    let mut transactions = None;
    loop {
        tracing::info!(entity_type = %restore.entity_type, shard = %restore.shard, "restoring shard state");
        match restore.clone().run(&mut transactions).await {
            Ok(restored) => {
                metrics.restored(restored.from.label(), restored.took, restored.read);
                tracing::info!(
                    entity_type = %restore.entity_type,
                    shard = %restore.shard,
                    epoch = restored.epoch,
                    read = restored.read,
                    applied = restored.applied,
                    ignored = restored.ignored,
                    from = restored.from.label(),
                    took = ?restored.took,
                    "shard state restored"
                );
                return (restored, transactions);
            }
            Err(e) => {
                metrics.restore_failures.increment(1);
                tracing::error!(entity_type = %restore.entity_type, shard = %restore.shard, error = %e, retry_in = ?backoff, "shard state cannot be restored; the shard serves nothing until it is");
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(10));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each start's marker has a key of its own, which no entity id has:
    /// compaction keeps them all. The empty key of the markers written
    /// before is still a marker.
    /// A start's key for an entity reads back as the entity, whatever its
    /// id holds; a key of the id alone, as written before, too.
    #[test]
    fn a_state_records_key_names_its_entity_and_its_start() {
        for id in ["acct-1", "", "caf\u{e9}\u{0}x", "ends-with-\u{ff}"] {
            let key = state_key(id, 0x0102_0304_0506_07FE);
            assert_eq!(entity_of(&key), Ok((id, true)), "{id:?}");
            assert!(!is_marker(&key), "{id:?}");
            assert_eq!(entity_of(id.as_bytes()), Ok((id, false)));
        }
        assert_ne!(state_key("a", 1), state_key("a", 2));
        assert!(entity_of(&[0xC3, 0x28]).is_err());
    }

    #[test]
    fn each_start_marks_the_changelog_with_a_key_of_its_own_that_no_entity_has() {
        let first = marker_key("a:1", ShardId(3));
        let second = marker_key("a:1", ShardId(3));
        assert_ne!(first, second, "two starts of one shard on one node");
        assert!(is_marker(&first) && is_marker(&second));
        assert!(std::str::from_utf8(&first).is_err(), "not an entity id");
        assert!(is_marker(b""), "the markers' key before");
        assert!(!is_marker(b"acct-1") && !is_marker("ÿ-user".as_bytes()));
    }
}
