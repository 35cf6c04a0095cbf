//! A durable shard's writes: when one is due, what its outcome does, and
//! the write itself: to the shard's changelog partition first, so that the
//! store's checkpoint never runs ahead of the changelog, then to the
//! node's store with that checkpoint, in one durable batch (committed with
//! the other shards' writes of the moment, `store/commit.rs`).

use super::deletions::{Deleted, Deletions};
use super::timers::{add_changes, IndexChanges};
use super::{DurableShard, Earlier, Held, Map, WriteFailed, WriteTask};
use crate::entity::Entity;
use crate::error::AskError;
use crate::node_context::NodeContext;
use crate::store::{removal_keys, removal_tag, state_key, NodeStore};
use crate::store::{ChangelogWrite, EntityChangelog, OutputRecord, ShardTransactions};
use colo_allocation::ShardId;
use colo_state::{Checkpoint, CheckpointKind, Output, WriteBatch};
use std::future::Future;
use std::sync::Arc;
use std::task::{Context, Poll};
use tokio::time::Instant;

/// The write under way.
pub(in crate::region::shard) struct Writing<R> {
    /// Its number (see [`ShardDurability`]).
    seq: u64,
    /// Its states, read by entities that start while it runs.
    pub(super) states: Arc<Map<Vec<u8>>>,
    /// The earlier starts' keys it retires (tombstones).
    retired: Arc<Map<Earlier>>,
    /// The earlier starts' keys of entities it writes, retired by the next
    /// write once it is durable.
    retire_after: Map<Earlier>,
    /// The deletions among its states.
    deleted: Map<Deleted>,
    /// The deleted entities it removes.
    removed: Arc<Map<Deleted>>,
    /// Its changes to the shard's timer index.
    pub(super) timers: Arc<IndexChanges>,
    /// The replies it answers.
    held: Vec<Held<R>>,
    task: WriteTask,
    started: Instant,
}

impl<E: Entity> DurableShard<E> {
    /// Starts a write when one is due and none runs. A shard that does not
    /// serve (its lease ran out: another node may own it now) writes
    /// nothing.
    pub(in crate::region::shard) fn write_if_due(
        &mut self,
        cx: &mut Context<'_>,
        now: bool,
        serving: bool,
    ) -> bool {
        if self.writing.is_some() || !serving {
            return false;
        }
        // Before anything is looked at: a commit that moves after the look
        // below wakes the shard, also when the look finds nothing to write
        // (a deletion's commit came after its write, and the shard slept
        // on until something else woke it).
        self.durability.wake_on_news(cx.waker());
        self.check_removals();
        if self.settled() {
            return false;
        }
        if let Some(backoff) = self.backoff.as_mut() {
            if backoff.as_mut().poll(cx).is_pending() {
                return false;
            }
            self.backoff = None;
        }
        let hurried = self.durability.hurried();
        // An answer waits: written at once, and what changes meanwhile
        // goes into the next write (a busy shard's writes follow one
        // another, each taking all that changed while the last ran).
        // Deleted entities to remove: their offsets were just committed
        // (a commit every few seconds), or they applied none.
        let due = now
            || hurried
            || !self.held.is_empty()
            || self.deletions.due()
            || self.dirty.len() >= self.store.settings().max_dirty
            || match &mut self.timer {
                None => {
                    let interval = self.store.settings().flush_interval;
                    let mut timer = Box::pin(tokio::time::sleep(interval));
                    let fired = timer.as_mut().poll(cx).is_ready();
                    self.timer = Some(timer);
                    fired
                }
                Some(timer) => timer.as_mut().poll(cx).is_ready(),
            };
        if !due {
            return false;
        }
        self.timer = None;
        let states = Arc::new(std::mem::take(&mut self.dirty));
        let retired = Arc::new(std::mem::take(&mut self.retirable));
        let retire_after = states
            .keys()
            .filter_map(|id| Some((id.clone(), self.retiring.remove(id)?)))
            .collect();
        let mut removed = self.deletions.take_due();
        // A deleted entity whose outputs wait keeps its record until they
        // are sent: a removal would leave them nowhere.
        removed.retain(|id, deleted| {
            let held = self.outbox.holds(id);
            if held {
                self.deletions.postpone(id.clone(), deleted.clone());
            }
            !held
        });
        let removed = Arc::new(removed);
        let timers = Arc::new(std::mem::take(&mut self.timers.unwritten));
        let seq = self.seq;
        self.seq += 1;
        let outputs = self.outbox.to_commit(seq, &states);
        let log = match self.outbox.transactions() {
            Some(transactions) => Some(Log::Transactions(transactions.clone(), outputs)),
            None => self.changelog.clone().map(Log::Plain),
        };
        let task = Box::pin(write(
            self.store.clone(),
            log,
            (self.entity_type.clone(), self.shard),
            (self.epoch, self.marker),
            Changes {
                states: states.clone(),
                retired: retired.clone(),
                removed: removed.clone(),
                timers: timers.clone(),
            },
        ));
        self.writing = Some(Writing {
            seq,
            states,
            retired,
            retire_after,
            deleted: self.deletions.take_unwritten(),
            removed,
            timers,
            held: std::mem::take(&mut self.held),
            task,
            started: Instant::now(),
        });
        true
    }

    /// Polls the write under way: done, its replies go; failed, it is kept
    /// for the next one.
    pub(in crate::region::shard) fn poll_write(
        &mut self,
        node: &NodeContext,
        cx: &mut Context<'_>,
    ) -> bool {
        let Some(writing) = self.writing.as_mut() else {
            return false;
        };
        let Poll::Ready(result) = writing.task.as_mut().poll(cx) else {
            return false;
        };
        let Some(writing) = self.writing.take() else {
            return false;
        };
        self.metrics
            .write_duration
            .record(writing.started.elapsed().as_secs_f64());
        match result {
            Ok(()) => {
                self.shards.write_settled(self.shard);
                self.metrics.writes_ok.increment(1);
                self.metrics.written.increment(writing.states.len() as u64);
                self.durability.flushed(writing.seq);
                self.outbox.written(writing.seq, &writing.states);
                self.retirable.extend(writing.retire_after);
                self.deletions.written(writing.deleted);
                let gone = writing.retired.iter().chain(
                    writing
                        .removed
                        .iter()
                        .map(|(id, deleted)| (id, &deleted.keys)),
                );
                for (id, keys) in gone {
                    if let Some(kept) = self.kept.get_mut(id) {
                        kept.earlier.retain(|start| !keys.contains(start));
                    }
                }
                if !writing.removed.is_empty() {
                    self.metrics.removed.increment(writing.removed.len() as u64);
                }
                for (reply, result) in writing.held {
                    node.reply(reply, result);
                }
            }
            Err(WriteFailed { why: e, committed }) => {
                if committed {
                    // Its outputs are read: the next write, which takes
                    // its records again, must not send them again.
                    self.outbox.written(writing.seq, &writing.states);
                }
                self.shards.write_failed(self.shard, e.clone());
                self.metrics.writes_failed.increment(1);
                tracing::error!(entity_type = %self.entity_type, shard = %self.shard, entities = writing.states.len(), error = %e, "entity state could not be written; nothing it covers is acknowledged, and it is tried again");
                // What changed since the write began is in `dirty` now, not
                // yet with the write's own states.
                let removed = Arc::try_unwrap(writing.removed).unwrap_or_else(|r| (*r).clone());
                let dirty = &self.dirty;
                self.deletions
                    .failed(writing.deleted, removed, |id| dirty.contains_key(id));
                let states = Arc::try_unwrap(writing.states).unwrap_or_else(|s| (*s).clone());
                for (id, value) in states {
                    self.dirty.entry(id).or_insert(value);
                }
                let retired = Arc::try_unwrap(writing.retired).unwrap_or_else(|r| (*r).clone());
                self.retirable.extend(retired);
                // The index changes made since the write began are newer.
                for (key, change) in writing.timers.iter() {
                    self.timers
                        .unwritten
                        .entry(key.clone())
                        .or_insert_with(|| change.clone());
                }
                self.retiring.extend(writing.retire_after);
                let mut held = writing.held;
                held.append(&mut self.held);
                self.held = held;
                // Its number is taken by the next write, which holds it all.
                self.durability.changed(self.seq);
                let interval = self.store.settings().flush_interval;
                self.backoff = Some(Box::pin(tokio::time::sleep(interval)));
            }
        }
        true
    }

    /// Whether nothing waits to be written: no changed state, no earlier
    /// key to retire, no deleted entity to remove, no change to the timer
    /// index.
    pub fn settled(&self) -> bool {
        self.dirty.is_empty()
            && self.retirable.is_empty()
            && !self.deletions.due()
            && self.timers.unwritten.is_empty()
    }

    /// Once a committed offset moved, the deleted entities whose offsets
    /// are all committed now are removed by the next write.
    pub fn check_removals(&mut self) {
        if self.deletions.waiting() && self.durability.take_commits_moved() {
            let (shards, shard) = (&self.shards, self.shard);
            self.deletions
                .check(|source, offset| shards.committed_past(source, shard, offset));
        }
    }

    /// Nothing more is written (the shard was fenced, or its hand-off or
    /// region gave up): whatever waits learns that it was not made durable.
    pub fn abandon(&mut self, node: &NodeContext) {
        if !self.dirty.is_empty() || self.writing.is_some() {
            tracing::warn!(entity_type = %self.entity_type, shard = %self.shard, entities = self.dirty.len(), "entity state not written (the shard stopped without it): what it covers was not acknowledged and is done again");
        }
        self.dirty.clear();
        self.retiring.clear();
        self.retirable.clear();
        self.timers.unwritten.clear();
        self.deletions = Deletions::default();
        let writing = self.writing.take().map(|w| w.held).unwrap_or_default();
        for (reply, _) in writing.into_iter().chain(self.held.drain(..)) {
            node.reply(
                reply,
                Err(AskError::Dropped(
                    "its change was not made durable (its shard stopped)".into(),
                )),
            );
        }
    }
}

/// What one write changes.
pub(super) struct Changes {
    /// Each changed entity's record, under this start's key.
    pub states: Arc<Map<Vec<u8>>>,
    /// Earlier starts' keys made stale by an earlier write: a tombstone
    /// each.
    pub retired: Arc<Map<Earlier>>,
    /// Deleted entities whose offsets are committed: a tombstone tagged
    /// with their deletion's start for each key that may hold a record of
    /// them, the key of one start per entity included, and a delete in
    /// the store (see `deletions.rs`).
    pub removed: Arc<Map<Deleted>>,
    /// Changes to the shard's timer index, in the store only (a restore
    /// makes the index anew from the records: `store/applier.rs`).
    pub timers: Arc<IndexChanges>,
}

/// Where a write goes before the node's store, if its entity type has a
/// changelog.
pub(super) enum Log {
    /// The entity type's changelog.
    Plain(Arc<dyn EntityChangelog>),
    /// This start's transactions, with the outputs of the write's changes.
    Transactions(Arc<dyn ShardTransactions>, Vec<Output>),
}

/// One changelog record of a write, its key owned.
struct Record<'a> {
    key: Vec<u8>,
    value: Option<&'a [u8]>,
    tag: Option<[u8; 8]>,
}

pub(super) async fn write(
    store: Arc<NodeStore>,
    log: Option<Log>,
    (entity_type, shard): (Arc<str>, ShardId),
    (epoch, marker): (u64, u64),
    changes: Changes,
) -> Result<(), WriteFailed> {
    let Changes {
        states,
        retired,
        removed,
        timers,
    } = changes;
    let mut checkpoint = None;
    if let Some(log) = &log {
        let retired = retired.iter().flat_map(|(id, earlier)| {
            earlier.iter().map(move |start| Record {
                key: state_key(id.as_str(), *start),
                value: None,
                tag: None,
            })
        });
        let removed = removed.iter().flat_map(|(id, deleted)| {
            let tag = Some(removal_tag(deleted.start));
            removal_keys(id.as_str(), &deleted.keys).map(move |key| Record {
                key,
                value: None,
                tag,
            })
        });
        let written = states.iter().map(|(id, value)| Record {
            key: state_key(id.as_str(), epoch),
            value: Some(value.as_slice()),
            tag: None,
        });
        let records: Vec<Record<'_>> = retired.chain(removed).chain(written).collect();
        let writes: Vec<ChangelogWrite<'_>> = records
            .iter()
            .map(|record| ChangelogWrite {
                key: &record.key,
                value: record.value,
                tag: record.tag.as_ref().map(<[u8; 8]>::as_slice),
            })
            .collect();
        let partition = i32::try_from(shard.0).unwrap_or(i32::MAX);
        let offsets = match log {
            Log::Plain(changelog) => changelog.write(partition, &writes).await,
            Log::Transactions(transactions, outputs) => {
                let outputs: Vec<OutputRecord<'_>> = outputs.iter().map(Into::into).collect();
                transactions.write(&writes, &outputs).await
            }
        }
        .map_err(|e| WriteFailed {
            why: e.to_string(),
            committed: false,
        })?;
        checkpoint = offsets.iter().max().map(|last| Checkpoint {
            offset: u64::try_from(*last).unwrap_or(0) + 1,
            epoch,
            marker,
            kind: CheckpointKind::Start,
        });
    }
    let mut batch = WriteBatch::new(&*entity_type);
    for id in removed.keys() {
        batch.delete(shard, id.as_str());
    }
    for (id, value) in states.iter() {
        batch.put(shard, id.as_str(), value.clone());
    }
    add_changes(&mut batch, shard, &timers);
    if let Some(checkpoint) = checkpoint {
        batch.checkpoint(shard, checkpoint);
    }
    store.commit(batch).await.map_err(|why| WriteFailed {
        why,
        committed: matches!(log, Some(Log::Transactions(..))),
    })
}
