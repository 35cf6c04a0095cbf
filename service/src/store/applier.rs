//! Changelog records applied to the node's store by the epoch rule (see
//! `restore.rs`): what a shard's restore and a standby's step share.

use super::restore::{
    deletion_start, entity_of, fingerprint, is_marker, Applied, Ending, Restore, RestoreError,
};
use super::ChangelogRecord;
use colo_state::{
    Checkpoint, CheckpointKind, Op, RecordError, StateRecord, Timer, TimerKey, WriteBatch,
};
use std::collections::HashMap;
use std::ops::ControlFlow;

/// Records applied to the store at most per write.
const BATCH: usize = 10_000;

/// Progress is logged every this many records read.
const PROGRESS_EVERY: u64 = 100_000;

/// Applies changelog records to the store, in batches, by the epoch rule.
pub(super) struct Applier<'a> {
    restore: &'a Restore,
    /// The newest epoch seen so far.
    current: u64,
    /// The newest marker seen so far: its offset and fingerprint, which a
    /// standby's checkpoint keeps.
    newest_marker: (u64, u64),
    batch: WriteBatch,
    /// Where each entity's op sits in `batch`. A changelog's newest
    /// segments are not compacted yet and hold an entity's state once per
    /// flush that changed it (tens of times in a busy minute); the store
    /// keeps only the last, so only the last is written: a restore's cost
    /// goes with the entities rather than with the records.
    staged: HashMap<Box<str>, usize>,
    /// The timers of each staged entity's last record: put in the shard's
    /// timer index with the batch (the changelog carries records, not the
    /// index; see `region/shard/durable/timers.rs`).
    timers: HashMap<Box<str>, Vec<Timer>>,
    read: u64,
    /// Keys and values of the records read, in bytes.
    bytes: u64,
    applied: u64,
    ignored: u64,
    failed: Option<RestoreError>,
    /// The checkpoint the pass went on from: written again unchanged, it
    /// is not written at all (a standby's step that found nothing new).
    resumed: Option<Checkpoint>,
    /// Whether its writes wait for the disk: a start's do (its entities
    /// then write on), a standby's need not (a copy lost in a crash is
    /// read again, its checkpoint lost with it).
    synced: bool,
}

impl<'a> Applier<'a> {
    /// An applier that goes on from a copy whose newest start is the one
    /// at `current`, with marker fingerprint `marker` (0, 0: no copy).
    pub fn new(
        restore: &'a Restore,
        current: u64,
        marker: u64,
        batch: WriteBatch,
        ending: Ending,
    ) -> Self {
        Self {
            synced: matches!(ending, Ending::Start { .. }),
            restore,
            current,
            newest_marker: (current, marker),
            batch,
            staged: HashMap::new(),
            timers: HashMap::new(),
            read: 0,
            bytes: 0,
            applied: 0,
            ignored: 0,
            failed: None,
            resumed: None,
        }
    }

    /// The same, going on from `checkpoint`'s copy.
    pub fn resuming(restore: &'a Restore, checkpoint: Checkpoint, ending: Ending) -> Self {
        let mut applier = Self::new(
            restore,
            checkpoint.epoch,
            checkpoint.marker,
            WriteBatch::new(&*restore.entity_type),
            ending,
        );
        applier.resumed = Some(checkpoint);
        applier
    }

    pub fn visit(&mut self, record: ChangelogRecord<'_>) -> ControlFlow<()> {
        match self.take(record) {
            Ok(()) => ControlFlow::Continue(()),
            Err(e) => {
                self.failed = Some(e);
                ControlFlow::Break(())
            }
        }
    }

    /// Why a record could not be applied, if one could not: the pass
    /// failed, whatever else its read says.
    pub fn failure(&mut self) -> Option<RestoreError> {
        self.failed.take()
    }

    fn take(&mut self, record: ChangelogRecord<'_>) -> Result<(), RestoreError> {
        self.read += 1;
        let value = record.value.map_or(0, <[u8]>::len);
        self.bytes += (record.key.len() + value) as u64;
        if self.read.is_multiple_of(PROGRESS_EVERY) {
            tracing::info!(entity_type = %self.restore.entity_type, shard = %self.restore.shard, read = self.read, offset = record.offset, "restoring");
        }
        let offset = u64::try_from(record.offset).unwrap_or(0);
        if is_marker(record.key) {
            self.current = self.current.max(offset);
            if offset >= self.newest_marker.0 {
                self.newest_marker = (offset, fingerprint(record.key));
            }
            return Ok(());
        }
        let bad = |error: String| RestoreError::Record {
            offset: record.offset,
            error,
        };
        let (id, keyed_by_start) = entity_of(record.key).map_err(bad)?;
        let shard = self.restore.shard;
        let deleted = || Op::Delete {
            shard,
            entity_id: id.to_string(),
        };
        match (record.value, deletion_start(record.tag)) {
            // A deleted entity removed (see `region/shard/durable/
            // deletions.rs`): gone, unless a newer start wrote it since.
            (None, Some(start)) => {
                if start < self.current && !self.newest_of(id, start)? {
                    self.ignored += 1;
                    return Ok(());
                }
                self.stage(id, deleted());
            }
            // A start's key retired by a later start that wrote the entity
            // under its own: for compaction, nothing for the state.
            (None, None) if keyed_by_start => return Ok(()),
            // Not written by colo, but a tombstone means the entity is gone.
            (None, None) => self.stage(id, deleted()),
            (Some(value), _) => {
                let state =
                    StateRecord::decode(value).map_err(|e: RecordError| bad(e.to_string()))?;
                if state.epoch < self.current && !self.newest_of(id, state.epoch)? {
                    self.ignored += 1;
                    return Ok(());
                }
                self.current = self.current.max(state.epoch);
                let mut timers = state.timers;
                if !state.outbox.is_empty() {
                    // Sent by the shard once it starts (see
                    // `region/shard/durable/outbox.rs`).
                    timers.push(Timer {
                        name: String::new(),
                        due: 0,
                        message: Vec::new(),
                    });
                }
                match timers.is_empty() {
                    true => self.timers.remove(id),
                    false => self.timers.insert(id.into(), timers),
                };
                self.stage(
                    id,
                    Op::Put {
                        shard,
                        entity_id: id.to_string(),
                        value: value.to_vec(),
                    },
                );
            }
        }
        self.applied += 1;
        if self.batch.ops.len() >= BATCH {
            self.flush()?;
        }
        Ok(())
    }

    /// Puts `op` in the batch in place of the entity's earlier one, if any.
    fn stage(&mut self, id: &str, op: Op) {
        if matches!(op, Op::Delete { .. }) {
            self.timers.remove(id);
        }
        match self
            .staged
            .get(id)
            .and_then(|&at| self.batch.ops.get_mut(at))
        {
            Some(earlier) => *earlier = op,
            None => {
                self.staged.insert(id.into(), self.batch.ops.len());
                self.batch.ops.push(op);
            }
        }
    }

    fn flush(&mut self) -> Result<(), RestoreError> {
        self.index_timers();
        self.staged.clear();
        let full = std::mem::replace(&mut self.batch, WriteBatch::new(&*self.restore.entity_type));
        self.write(&full)
    }

    /// The staged entities' timers into the batch's index.
    fn index_timers(&mut self) {
        let shard = self.restore.shard;
        for (id, timers) in self.timers.drain() {
            for timer in timers {
                let key = TimerKey {
                    due: timer.due,
                    entity_id: id.to_string(),
                    name: timer.name,
                };
                self.batch.put_timer(shard, key, timer.message);
            }
        }
    }

    fn write(&self, batch: &WriteBatch) -> Result<(), RestoreError> {
        match self.synced {
            true => self.restore.store.write(batch)?,
            false => self.restore.store.write_unsynced(batch)?,
        }
        Ok(())
    }

    /// Whether a state of start `epoch`, older than one seen before it, is
    /// its entity's newest so far: nothing of a later start is kept for
    /// the entity (compaction may have left only this one of its records,
    /// a deposed start's that landed late).
    /// Rare (a deposed start's write that landed late): what was read so
    /// far is written first, and the store asked.
    fn newest_of(&mut self, id: &str, epoch: u64) -> Result<bool, RestoreError> {
        if !self.batch.ops.is_empty() {
            self.flush()?;
        }
        let kept = self
            .restore
            .store
            .load(&self.restore.entity_type, self.restore.shard, id)?
            .and_then(|value| StateRecord::decode(&value).ok())
            .map(|state| state.epoch);
        Ok(kept.is_none_or(|kept| kept <= epoch))
    }

    /// Writes the rest with the checkpoint `ending` calls for, `next` being
    /// the offset after the last record read.
    pub fn finish(mut self, ending: Ending, next: i64) -> Result<Applied, RestoreError> {
        if let Some(e) = self.failed.take() {
            return Err(e);
        }
        let checkpoint = match ending {
            Ending::Start { epoch, mark } => {
                let epoch = u64::try_from(epoch).unwrap_or(0);
                Checkpoint {
                    offset: epoch + 1,
                    epoch,
                    marker: mark,
                    kind: CheckpointKind::Start,
                }
            }
            Ending::Standby => {
                let (at, marker) = self.newest_marker;
                Checkpoint {
                    offset: u64::try_from(next).unwrap_or(0),
                    epoch: self.current,
                    // A newest start known from its states alone (its
                    // marker not read: one of the markers of before, all
                    // under one key, compacted away) is checked by its
                    // offset only.
                    marker: if at == self.current { marker } else { 0 },
                    kind: CheckpointKind::Standby,
                }
            }
        };
        self.index_timers();
        if self.resumed != Some(checkpoint) || !self.batch.is_empty() {
            self.batch.checkpoint(self.restore.shard, checkpoint);
            self.write(&self.batch)?;
        }
        Ok(Applied {
            read: self.read,
            bytes: self.bytes,
            applied: self.applied,
            ignored: self.ignored,
            checkpoint,
        })
    }
}
