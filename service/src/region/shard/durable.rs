//! A durable entity type's side of a shard: state loaded when an entity
//! starts, encoded after each message it handles, written behind in
//! batches, and replies held until what they answer is durable.
//!
//! After each message the entity's whole state is encoded (with the source
//! offsets it has applied) into the shard's set of changed entities. So a
//! write never waits for a handler that is running, and an entity dropped
//! before its state was written (passivated, or its handler failed) starts
//! again from its last handled message, out of that set, not from the
//! store's older copy or from nothing.
//!
//! Writes, one at a time: at once when an answer waits for one (what
//! changes meanwhile goes into the next), with `max_dirty` changed
//! entities, or when a Kafka partition waiting for one is half way to its
//! in-flight bound; else every `flush_interval` after a change. While a
//! write runs, its states are still read from here. A write that fails
//! keeps everything: its states go back under the newer ones, its held
//! replies wait on, and it is tried again a flush interval later. What
//! waits for a write: asks from clients and other entities (their replies
//! are held here), and Kafka records (their partition acks them once
//! [`ShardDurability`] says so).
//!
//! A stored state that does not decode stops the shard: every message is
//! refused from then on with the error (naming the entity type, the entity
//! and both state versions), records are left uncommitted, and it is
//! counted. It is never reset.

mod answers;
mod deletions;
mod kept;
mod outbox;
mod timers;
mod write;

pub(super) use write::Writing;

use super::keys::{AppliedKeys, KeyRetention};
use super::loads::{Loaded, Loads};
use super::recovery::{Recovery, Stored};
use super::Map;
use crate::durability::ShardDurability;
use crate::entity::{Entity, EntityId, Requested, StateCodec};
use crate::envelope::{Cause, Reply};
use crate::error::AskError;
use crate::metrics::StateMetrics;
use crate::settings::ShardingSettings;
use crate::store::{restore_until_done, Restore, Restored, Transactions};
use crate::store::{DurableShards, EntityChangelog, NodeStore};
use colo_allocation::ShardId;
use colo_state::{Beside, StateRecord};
use deletions::Deletions;
use kept::{same_topic, state_hash, Applied, Earlier, Kept};
use outbox::ShardOutbox;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use timers::change_timers;
pub(super) use timers::{Fired, Firing, ShardTimers};
use tokio::time::Sleep;

/// A reply that waits for the write that makes its change durable.
type Held<R> = (Reply<R>, Result<R, AskError>);

/// Where an entity's state comes from when it starts.
pub(super) enum Start<E> {
    /// Its state, decoded.
    Entity(E),
    /// No state (or it deleted itself): the factory makes it.
    Fresh,
    /// Being read from the store: its messages wait.
    Loading,
}

/// A write: to the changelog first (if the entity type has one), then to
/// the node's store with the changelog's new checkpoint.
type WriteTask = Pin<Box<dyn Future<Output = Result<(), WriteFailed>> + Send>>;

/// Why a write failed, and whether its transaction committed before (its
/// outputs are sent then, whatever the node's store said).
pub(super) struct WriteFailed {
    why: String,
    committed: bool,
}

/// A shard's restore, while it runs.
type Restoring = Pin<Box<dyn Future<Output = (Restored, Transactions)> + Send>>;

pub(super) struct DurableShard<E: Entity> {
    codec: StateCodec<E>,
    store: Arc<NodeStore>,
    entity_type: Arc<str>,
    shard: ShardId,
    /// The epoch of this start of the shard, in every record it writes.
    epoch: u64,
    /// Its marker's fingerprint, in every checkpoint it writes (see
    /// `Checkpoint::marker`).
    marker: u64,
    /// Entities whose record an earlier start's key holds, changed here:
    /// once their state under this start's key is durable, a write retires
    /// the earlier key with a tombstone. Never in the same write: a
    /// tombstone that landed without the state after it (librdkafka may
    /// leave gaps) would leave the entity no record at all.
    retiring: Map<Earlier>,
    /// Earlier keys whose entity's state is durable under this start's:
    /// the next write retires them.
    retirable: Map<Earlier>,
    deletions: Deletions,
    /// How long, and how many, idempotency keys an entity keeps.
    retention: KeyRetention,
    changelog: Option<Arc<dyn EntityChangelog>>,
    /// Until it is done, the shard takes no mail.
    restoring: Option<Restoring>,
    /// Remembered entities still to start, once restored.
    recovery: Option<Recovery>,
    kept: Map<Kept>,
    /// Where each changed state is encoded before its state record is made.
    scratch: Vec<u8>,
    /// The size of the state last encoded or decoded: what an entity just
    /// started or changed weighs (see `weights.rs`).
    encoded: usize,
    /// The source topics' names, shared by the entities' applied offsets.
    topics: Vec<Arc<str>>,
    /// Changed since the last write began: each entity's encoded record.
    pub(super) dirty: Map<Vec<u8>>,
    /// Replies waiting for the next write.
    held: Vec<Held<E::Reply>>,
    pub(super) writing: Option<Writing<E::Reply>>,
    /// The number of the next write.
    seq: u64,
    timer: Option<Pin<Box<Sleep>>>,
    /// After a failed write, the next waits a flush interval, whatever
    /// asks for it sooner.
    backoff: Option<Pin<Box<Sleep>>>,
    pub(super) loads: Loads,
    /// Why the shard takes no more messages, once a state did not decode.
    pub(super) broken: Option<String>,
    durability: Arc<ShardDurability>,
    shards: Arc<DurableShards>,
    pub(super) metrics: StateMetrics,
    /// Its entities' timers, its index of them, and those due soon.
    pub(super) timers: ShardTimers,
    /// Its entities' outputs, until each is sent and dropped from its
    /// record.
    pub(super) outbox: ShardOutbox,
}

impl<E: Entity> DurableShard<E> {
    /// A durable shard's start: with a changelog, it restores first.
    /// `settings`: its entity type's (remembering entities, keeping
    /// idempotency keys).
    pub fn new(
        codec: StateCodec<E>,
        store: Arc<NodeStore>,
        entity_type: &str,
        shard: ShardId,
        shards: &Arc<DurableShards>,
        node: &str,
        settings: &ShardingSettings,
    ) -> Self {
        let remember = settings.remember_entities;
        let retention =
            KeyRetention::new(settings.idempotency_retention, settings.idempotency_keys);
        let metrics = StateMetrics::new(entity_type);
        let changelog = store.changelog(entity_type);
        let restoring = changelog.as_ref().map(|changelog| {
            let restore = Arc::new(Restore {
                store: store.store(),
                turns: store.restores().clone(),
                changelog: changelog.clone(),
                entity_type: Arc::from(entity_type),
                shard,
                node: node.to_string(),
                writer: store.shard_writer(entity_type, shard),
                vouched: store.vouched(entity_type),
            });
            Box::pin(restore_until_done(restore, metrics.clone())) as Restoring
        });
        let durability = shards.started(shard, restoring.is_none());
        let outbox = ShardOutbox::new(entity_type, store.outputs());
        Self {
            codec,
            store,
            entity_type: Arc::from(entity_type),
            shard,
            epoch: 0,
            marker: 0,
            retiring: Map::default(),
            retirable: Map::default(),
            deletions: Deletions::default(),
            retention,
            changelog,
            restoring,
            recovery: remember.map(Recovery::new),
            kept: Map::default(),
            scratch: Vec::new(),
            encoded: 0,
            topics: Vec::new(),
            dirty: Map::default(),
            held: Vec::new(),
            writing: None,
            seq: 1,
            timer: None,
            backoff: None,
            loads: Loads::default(),
            broken: None,
            durability,
            shards: shards.clone(),
            metrics,
            timers: ShardTimers::new(entity_type),
            outbox,
        }
    }

    /// The remembered entities to start now, once the shard is restored
    /// (see `recovery.rs`).
    pub fn remembered(&mut self, cx: &mut Context<'_>) -> Stored {
        match self.recovery.as_mut() {
            Some(recovery) if self.restoring.is_none() => {
                recovery.next(&self.store, &self.entity_type, self.shard, cx)
            }
            _ => Vec::new(),
        }
    }

    /// An entity started: remembering does not start it again (see
    /// `recovery.rs`).
    pub fn started(&mut self, id: &EntityId) {
        if let Some(recovery) = self.recovery.as_mut() {
            recovery.started(id);
        }
    }

    /// Whether its state is still being restored: it takes no mail.
    pub fn restoring(&self) -> bool {
        self.restoring.is_some()
    }

    /// Polls the restore, if one runs: true once it is done.
    pub fn poll_restore(&mut self, cx: &mut Context<'_>) -> bool {
        let Some(restoring) = self.restoring.as_mut() else {
            return false;
        };
        let Poll::Ready((restored, transactions)) = restoring.as_mut().poll(cx) else {
            return false;
        };
        self.restoring = None;
        self.outbox.in_transactions(transactions);
        self.epoch = restored.epoch;
        self.marker = restored.marker;
        self.durability.restored();
        true
    }

    /// Why the shard refuses messages, once a state did not decode.
    pub fn broken(&self) -> Option<&str> {
        self.broken.as_deref()
    }

    /// Why a message is not applied, if it is not (only an active entity is
    /// asked): its entity applied it already (a record, skipped and
    /// counted, or a client tell with the same idempotency key), or a
    /// record's key's previous record in its partition is missing from its
    /// entity's state (see `Origin::previous`). One look-up of the entity
    /// answers each: it is made for every record.
    pub fn skips(&self, id: &EntityId, cause: Option<&Cause>) -> Option<AskError> {
        let origin = match cause? {
            Cause::Record(origin) => origin,
            // Fired, cancelled or moved since its index entry was read.
            Cause::Timer(key) => {
                let has = self.kept.get(id).is_some_and(|kept| {
                    kept.timers
                        .iter()
                        .any(|t| t.name == key.name && t.due == key.due)
                });
                return (!has).then_some(AskError::AlreadyApplied);
            }
            Cause::Keyed(key) => {
                let now = crate::clock::unix_ms();
                let kept = self.kept.get(id)?;
                return kept
                    .keys
                    .applied(key, now, self.retention)
                    .then_some(AskError::AlreadyApplied);
            }
        };
        let last = self.kept.get(id).and_then(|kept| {
            kept.applied
                .iter()
                .find(|(source, _)| same_topic(source, &origin.source))
                .map(|(_, last)| *last)
        });
        if last.is_some_and(|last| origin.offset <= last) {
            self.metrics.skipped.increment(1);
            return Some(AskError::AlreadyApplied);
        }
        let previous = origin.previous?;
        last.is_none_or(|last| last < previous)
            .then_some(AskError::PreviousLost)
    }

    /// Where a starting entity's state comes from: what changed here and is
    /// not written yet, or a read from the store (started here).
    pub fn start(&mut self, id: &EntityId) -> Result<Start<E>, String> {
        if let Some(value) = self.unwritten(id) {
            let value = value.clone();
            self.metrics.loaded_memory.increment(1);
            return self.decode(id, &value, false);
        }
        self.loads.push(id.clone());
        Ok(Start::Loading)
    }

    /// The entity's newest record not durable yet, if it has one: what
    /// changed since the last write began, or what that write holds.
    pub(super) fn unwritten(&self, id: &EntityId) -> Option<&Vec<u8>> {
        self.dirty.get(id).or_else(|| {
            self.writing
                .as_ref()
                .and_then(|writing| writing.states.get(id))
        })
    }

    /// The next entity whose state was read (see `loads.rs`).
    pub fn poll_load(&mut self, cx: &mut Context<'_>) -> Poll<Option<Loaded>> {
        self.loads
            .poll_next(&self.store, &self.entity_type, self.shard, cx)
    }

    /// A record read back from the node's store: as [`Self::decode`], and a
    /// deletion is removed once its offsets are committed.
    pub(super) fn decode_stored(
        &mut self,
        id: &EntityId,
        value: &[u8],
    ) -> Result<Start<E>, String> {
        // Rewritten here while it was read (its sent outputs dropped).
        if let Some(newer) = self.unwritten(id).cloned() {
            return self.decode(id, &newer, false);
        }
        let start = self.decode(id, value, true)?;
        if let (Start::Fresh, Some(kept)) = (&start, self.kept.get(id)) {
            if let Some(written) = kept.written {
                self.deletions.stored(id, kept.deleted_by(written));
            }
        }
        Ok(start)
    }

    /// A record read back (`stored`: from the store, else not written
    /// yet): the entity, or why it cannot be.
    fn decode(&mut self, id: &EntityId, value: &[u8], stored: bool) -> Result<Start<E>, String> {
        let record = StateRecord::decode(value).map_err(|e| {
            format!(
                "the stored state of entity {id:?} of entity type {:?} is unreadable: {e}",
                self.entity_type
            )
        })?;
        let hash = record.state.as_deref().map(|s| state_hash(Some(s)));
        self.encoded = record.state.as_ref().map_or(0, Vec::len);
        let start = match &record.state {
            None => Start::Fresh,
            Some(state) => Start::Entity((self.codec.decode)(state).map_err(|e| {
                format!(
                    "the stored state of entity {id:?} of entity type {:?} (state version {}; this program's is {}) cannot be decoded: {e}",
                    self.entity_type, record.version, self.codec.version
                )
            })?),
        };
        if stored {
            self.stored_outbox(id, &record, value);
        }
        let applied = record
            .applied
            .into_iter()
            .map(|(topic, last)| (self.topic(&topic), last))
            .collect();
        self.kept.insert(
            id.clone(),
            Kept {
                applied,
                state: hash,
                written: Some(record.epoch),
                earlier: record.earlier.into_iter().collect(),
                keys: AppliedKeys::from_record(record.keys),
                timers: record.timers,
                outbox: record.outbox,
            },
        );
        Ok(start)
    }

    /// A new entity (no state, or deleted) starts as the factory made it:
    /// what it is now is what a message that changes nothing leaves.
    pub fn fresh(&mut self, id: &EntityId, entity: &E) {
        let state = self
            .encode(entity)
            .ok()
            .map(|state| state_hash(Some(state)));
        let kept = self.kept.entry(id.clone()).or_default();
        kept.state = state;
    }

    /// An entity's state, encoded into the shard's scratch buffer.
    fn encode(&mut self, entity: &E) -> Result<&[u8], String> {
        self.scratch.clear();
        (self.codec.encode)(entity, &mut self.scratch)?;
        self.encoded = self.scratch.len();
        Ok(&self.scratch)
    }

    /// An entity handled a message (`cause`: the record it came from, the
    /// client tell's idempotency key, or the timer that fired): its state,
    /// or its deletion, goes into the next write, with what it applied,
    /// the timers it scheduled and cancelled and the records it emitted
    /// (`requested`).
    ///
    /// # Errors
    /// The state cannot be encoded: the entity is dropped as failed.
    pub fn changed(
        &mut self,
        id: &EntityId,
        entity: Option<&E>,
        cause: Option<&Cause>,
        requested: Requested,
    ) -> Result<(), String> {
        // Encoded into the scratch buffer, then copied once into the
        // state record (an allocation less for each message).
        let mut scratch = std::mem::take(&mut self.scratch);
        scratch.clear();
        let encoded = match entity {
            Some(entity) => (self.codec.encode)(entity, &mut scratch).map(|()| true),
            None => Ok(false),
        };
        let changed = encoded
            .map_err(|e| format!("its state cannot be encoded: {e}"))
            .map(|encoded| {
                let state = encoded.then_some(scratch.as_slice());
                self.changed_to(id, state, cause, requested);
            });
        self.encoded = scratch.len();
        self.scratch = scratch;
        changed
    }

    /// An entity's state after a message: `None` once it is deleted.
    fn changed_to(
        &mut self,
        id: &EntityId,
        state: Option<&[u8]>,
        cause: Option<&Cause>,
        requested: Requested,
    ) {
        let Requested { timers, outputs } = requested;
        let kept = match self.kept.get_mut(id) {
            Some(kept) => kept,
            None => self.kept.entry(id.clone()).or_default(),
        };
        let fired = match cause {
            Some(Cause::Timer(key)) => Some(key),
            _ => None,
        };
        let timers_changed = change_timers(
            &mut self.timers,
            id,
            &mut kept.timers,
            (fired, timers, state.is_none()),
        );
        let outbox_changed = self.outbox.change(
            &mut self.timers,
            id,
            &mut kept.outbox,
            (cause, outputs),
            (&self.entity_type, self.shard),
            self.seq,
        );
        let hash = state_hash(state);
        // A keyed tell is written even if it changed nothing: its key is.
        if cause.is_none() && !timers_changed && !outbox_changed && kept.state == Some(hash) {
            return;
        }
        let origin = match cause {
            Some(Cause::Record(origin)) => Some(origin),
            Some(Cause::Timer(_)) => None,
            Some(Cause::Keyed(key)) => {
                kept.keys
                    .add(key.clone(), crate::clock::unix_ms(), self.retention);
                None
            }
            None => {
                if !kept.keys.is_empty() {
                    kept.keys.prune(crate::clock::unix_ms(), self.retention);
                }
                None
            }
        };
        kept.state = Some(hash);
        if let Some(earlier) = kept.written.filter(|&start| start != self.epoch) {
            if !kept.earlier.contains(&earlier) {
                kept.earlier.push(earlier);
            }
            self.retiring.insert(id.clone(), kept.earlier.clone());
        }
        kept.written = Some(self.epoch);
        if let Some(origin) = origin {
            match kept
                .applied
                .iter_mut()
                .find(|(topic, _)| same_topic(topic, &origin.source))
            {
                Some((topic, last)) => {
                    *last = (*last).max(origin.offset);
                    if !Arc::ptr_eq(topic, &origin.source) {
                        // Compared by pointer from now on.
                        *topic = origin.source.clone();
                    }
                }
                None => kept.applied.push((origin.source.clone(), origin.offset)),
            }
        }
        match &state {
            Some(_) => self.deletions.revived(id),
            None => self.deletions.deleted(id, kept.deleted_by(self.epoch)),
        }
        let (epoch, version, applied) = (self.epoch, self.codec.version, &kept.applied);
        let beside = Beside {
            earlier: &kept.earlier,
            keys: kept.keys.as_slice(),
            timers: &kept.timers,
            outbox: &kept.outbox,
        };
        match self.dirty.get_mut(id) {
            Some(value) => {
                StateRecord::encode_parts_into(value, epoch, version, applied, state, beside);
            }
            None => {
                let value = StateRecord::encode_parts(epoch, version, applied, state, beside);
                self.dirty.insert(id.clone(), value);
            }
        }
        self.durability.changed(self.seq);
    }

    /// The size of the state last encoded or decoded, in bytes.
    pub fn encoded_size(&self) -> usize {
        self.encoded
    }

    /// A source topic's shared name, for offsets read back from a record.
    fn topic(&mut self, name: &str) -> Arc<str> {
        if let Some(topic) = self.topics.iter().find(|topic| ***topic == *name) {
            return topic.clone();
        }
        let topic: Arc<str> = Arc::from(name);
        self.topics.push(topic.clone());
        topic
    }

    /// The entity is gone from memory (its unwritten state stays here).
    pub fn forget(&mut self, id: &EntityId) {
        self.kept.remove(id);
    }
}

impl<E: Entity> Drop for DurableShard<E> {
    fn drop(&mut self) {
        self.timers.stopped();
        self.outbox.stopped();
        self.shards.stopped(self.shard, &self.durability);
        self.shards.write_settled(self.shard);
    }
}

#[cfg(test)]
mod tests;
