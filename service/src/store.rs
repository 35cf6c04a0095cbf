//! The node's state store as the runtime uses it: the store of the node's
//! data directory (colo-state), the write-behind settings, and how a
//! shard's flushes are seen from outside it.
//!
//! Every store call blocks on disk, so none runs on a runtime thread: the
//! calls run on a fixed number of threads of the store's own (`calls.rs`),
//! and its last drop on a blocking thread (an engine's drop waits for its
//! own threads). The shards' writes of one moment go to disk in one commit
//! (`commit.rs`).
//!
//! `restore.rs`: a shard's start with a changelog: its epoch, and its state
//! brought up to date before its entities run (`applier.rs` applies the
//! changelog's records). `standby.rs`: warm copies of shards the node does
//! not host, and `standby_view.rs` what the cluster map shows of them.

mod applier;
mod calls;
mod changelog;
mod commit;
mod outputs;
mod restore;
mod standby;
mod standby_view;

pub(crate) use calls::StoreCalls;
pub use changelog::{
    ChangelogError, ChangelogRecord, ChangelogWrite, EntityChangelog, ShardTransactions,
};
pub use outputs::{OutputRecord, OutputSendError, OutputSink};
pub(crate) use restore::{
    removal_keys, removal_tag, restore_until_done, state_key, Restore, Restored, Transactions,
};
pub(crate) use standby::Standbys;
pub use standby_view::StandbyView;

use crate::durability::ShardDurability;
use crate::settings::SettingsError;
use colo_allocation::ShardId;
use colo_state::{Engine, StateStore, StoreError};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

/// How many threads a node's store reads run on (loads of starting
/// entities, scans of remembered ones). Commits have a thread of their own
/// (one runs at a time, `commit.rs`), so a read never waits behind a sync
/// to disk.
pub(crate) const STORE_CALLS: usize = 8;

/// How many shards of a node restore at once. A restore reads a changelog
/// partition on a thread of its own for as long as it takes, so restores
/// have threads of their own, and most of that time it waits for the
/// broker, so many run at once: with 4, a node starting 24 shards handled
/// 200,000 records at 64,000/s, with 32 at 304,000/s (the Kafka bench,
/// BENCHMARKS.md), the last shards waiting for their turn to restore.
pub(crate) const RESTORES: usize = 32;

/// The lock of a shard's copy in the node's store: its one writer at a
/// time (see [`Restore::writer`]).
pub(crate) type ShardWriter = Arc<tokio::sync::Mutex<()>>;

/// Per shard of an entity type, the standby checkpoint this process's
/// own step wrote last: a later pass from it trusts that the copy came
/// from this changelog without reading its newest start's marker again,
/// which costs a changelog reader of its own.
pub(crate) type Vouched = Arc<Mutex<HashMap<ShardId, colo_state::Checkpoint>>>;

/// Where durable entity types keep their state and how they write it
/// behind; also a node's `[state]` section, so its fields, defaults and
/// checks are written only here.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct StateSettings {
    /// The embedded database under the node's data directory. A data
    /// directory keeps the engine it was created with: the node refuses to
    /// start with the other one. A store opened elsewhere
    /// ([`NodeStore::new`]) has its own.
    pub engine: Engine,
    /// A shard writes its changed entities at least this often. An ask to
    /// a durable entity waits up to this long for its answer, so it is
    /// short; each write is one durable batch (an fsync), so not shorter
    /// than the disk can take.
    #[serde(with = "humantime_serde")]
    pub flush_interval: Duration,
    /// A shard writes at once when this many of its entities have changed
    /// since its last write, which bounds the memory their encoded states
    /// take.
    pub max_dirty: usize,
}

impl Default for StateSettings {
    fn default() -> Self {
        Self {
            engine: Engine::default(),
            flush_interval: Duration::from_millis(100),
            max_dirty: 10_000,
        }
    }
}

impl StateSettings {
    /// Refuses settings a store cannot write behind with.
    ///
    /// # Errors
    /// The first refused field.
    pub fn validate(&self) -> Result<(), SettingsError> {
        if self.flush_interval.is_zero() {
            return Err(SettingsError {
                field: "flush_interval",
                reason: "must be longer than zero (it is how often changed state is written)"
                    .to_string(),
            });
        }
        if self.max_dirty == 0 {
            return Err(SettingsError {
                field: "max_dirty",
                reason: "must be at least 1 (the changed entities that make a shard write at once)"
                    .to_string(),
            });
        }
        Ok(())
    }
}

/// A node's state store, how its shards write to it, and the changelog of
/// each durable entity type that has one.
pub struct NodeStore {
    store: Option<Arc<dyn StateStore>>,
    settings: StateSettings,
    changelogs: HashMap<String, Arc<dyn EntityChangelog>>,
    /// Where the durable entity types' outputs are sent.
    outputs: Option<Arc<dyn OutputSink>>,
    calls: StoreCalls,
    restores: StoreCalls,
    commits: commit::GroupCommit,
    /// Each shard's one writer of its copy at a time (see
    /// [`Restore::writer`]).
    writers: Mutex<HashMap<(String, ShardId), ShardWriter>>,
    vouched: Mutex<HashMap<String, Vouched>>,
    /// The standby copies kept now, for the cluster map.
    standby_copies: standby_view::StandbyCopies,
}

impl std::fmt::Debug for NodeStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeStore")
            .field("engine", &self.store.as_ref().map(|s| s.engine()))
            .field("settings", &self.settings)
            .field("changelogs", &self.changelogs.keys().collect::<Vec<_>>())
            .field("outputs", &self.outputs.is_some())
            .finish()
    }
}

impl NodeStore {
    /// The store of `data_dir` with `settings.engine`. Blocks on disk: call
    /// it from a blocking thread (or before the runtime starts).
    ///
    /// # Errors
    /// The store cannot be opened (see [`colo_state::open`]).
    pub fn open(data_dir: &Path, settings: StateSettings) -> Result<Self, StoreError> {
        let store = colo_state::open(data_dir, settings.engine)?;
        Ok(Self::new(Arc::from(store), settings))
    }

    /// A store opened elsewhere.
    pub fn new(store: Arc<dyn StateStore>, settings: StateSettings) -> Self {
        Self {
            settings: StateSettings {
                engine: store.engine(),
                ..settings
            },
            store: Some(store),
            changelogs: HashMap::new(),
            outputs: None,
            calls: StoreCalls::new("colo-store", STORE_CALLS),
            restores: StoreCalls::new("colo-restore", RESTORES),
            commits: commit::GroupCommit::default(),
            writers: Mutex::default(),
            vouched: Mutex::default(),
            standby_copies: standby_view::StandbyCopies::default(),
        }
    }

    /// Gives a durable entity type a changelog: each write of a shard's
    /// changed entities goes there first, and a shard that starts (here or
    /// on another node) restores from it. Without one, an entity type's
    /// state stays on the node that wrote it.
    pub fn with_changelog(mut self, entity_type: &str, changelog: impl EntityChangelog) -> Self {
        self.changelogs
            .insert(entity_type.to_string(), Arc::new(changelog));
        self
    }

    /// Gives the node's durable entity types a sink for their outputs
    /// ([`crate::EntityType::with_outputs`]): each shard sends its
    /// entities' outboxes there once the write that holds them is durable.
    pub fn with_outputs(mut self, sink: impl OutputSink) -> Self {
        self.outputs = Some(Arc::new(sink));
        self
    }

    pub(crate) fn outputs(&self) -> Option<Arc<dyn OutputSink>> {
        self.outputs.clone()
    }

    pub(crate) fn changelog(&self, entity_type: &str) -> Option<Arc<dyn EntityChangelog>> {
        self.changelogs.get(entity_type).cloned()
    }

    pub fn settings(&self) -> StateSettings {
        self.settings
    }

    /// The threads of the node's store reads.
    pub(crate) fn calls(&self) -> &StoreCalls {
        &self.calls
    }

    /// Writes `batch` durably, in one commit with the other shards' writes
    /// that wait meanwhile (see `commit.rs`).
    ///
    /// # Errors
    /// The commit failed: nothing of `batch` is durable.
    pub(crate) async fn commit(&self, batch: colo_state::WriteBatch) -> Result<(), String> {
        self.commits.write(&self.store(), batch).await
    }

    /// The lock a writer of `entity_type`'s `shard` copy holds: a start's
    /// restore or a standby's step.
    pub(crate) fn shard_writer(&self, entity_type: &str, shard: ShardId) -> ShardWriter {
        self.writers
            .lock()
            .entry((entity_type.to_string(), shard))
            .or_default()
            .clone()
    }

    /// `entity_type`'s standby copies this process's steps left.
    pub(crate) fn vouched(&self, entity_type: &str) -> Vouched {
        self.vouched
            .lock()
            .entry(entity_type.to_string())
            .or_default()
            .clone()
    }

    /// The standby copies kept on this node now.
    pub(crate) fn standby_copies(&self) -> &standby_view::StandbyCopies {
        &self.standby_copies
    }

    /// How the node's shard restores take their turns.
    pub(crate) fn restores(&self) -> &StoreCalls {
        &self.restores
    }

    /// The store itself, for a blocking thread.
    pub(crate) fn store(&self) -> Arc<dyn StateStore> {
        match &self.store {
            Some(store) => store.clone(),
            None => unreachable!("the store is taken only by drop"),
        }
    }
}

impl Drop for NodeStore {
    fn drop(&mut self) {
        // An engine's drop joins its threads: not on a runtime thread.
        if let (Some(store), Ok(runtime)) =
            (self.store.take(), tokio::runtime::Handle::try_current())
        {
            runtime.spawn_blocking(move || drop(store));
        }
    }
}

/// The durability of a region's local shards, by shard: the shard task
/// puts its own in when it starts; and the shards whose writes fail now,
/// with the last reason, which make the node unready.
#[derive(Debug, Default)]
pub(crate) struct DurableShards {
    running: Mutex<HashMap<ShardId, Arc<ShardDurability>>>,
    /// The shards whose last write failed, with its reason.
    failing: Mutex<std::collections::BTreeMap<ShardId, String>>,
    /// Per source partition (topic, partition), the group's committed
    /// offset as this node's commits last set it. Offsets committed by
    /// other nodes are not here: a deletion whose records came through
    /// another node's partition waits until this node commits past them
    /// (or is kept, as before).
    committed: Mutex<HashMap<String, HashMap<i32, i64>>>,
}

impl DurableShards {
    /// A write of `shard` failed (it is tried again).
    pub fn write_failed(&self, shard: ShardId, reason: String) {
        self.failing.lock().insert(shard, reason);
    }

    /// A write of `shard` succeeded, or the shard stopped.
    pub fn write_settled(&self, shard: ShardId) {
        self.failing.lock().remove(&shard);
    }

    /// Why state is not being written, if a shard's writes fail now.
    pub fn failing(&self) -> Option<String> {
        let failing = self.failing.lock();
        let (_, reason) = failing.iter().next_back()?;
        let shards: Vec<String> = failing.keys().map(ToString::to_string).collect();
        Some(format!(
            "state writes of shard(s) {} failing (retried; nothing they cover is acknowledged): {reason}",
            shards.join(", ")
        ))
    }

    /// The group committed `offset` for `topic`'s `partition`: the local
    /// shards look at their deleted entities again if it moved.
    pub fn offset_committed(&self, topic: &str, partition: i32, offset: i64) {
        let moved = {
            let mut committed = self.committed.lock();
            if !committed.contains_key(topic) {
                committed.insert(topic.to_string(), HashMap::new());
            }
            committed.get_mut(topic).is_some_and(|partitions| {
                let at = partitions.entry(partition).or_insert(-1);
                let moved = *at < offset;
                *at = (*at).max(offset);
                moved
            })
        };
        if moved {
            for durability in self.running.lock().values() {
                durability.commits_moved();
            }
        }
    }

    /// Whether the record at `offset` of `source` (an entity's applied
    /// offset, see [`Origin::source`](crate::envelope::Origin)) is below
    /// its partition's committed offset: no member of the group consumes it
    /// again.
    pub fn committed_past(&self, source: &str, shard: ShardId, offset: u64) -> bool {
        let (topic, partition) = crate::envelope::Origin::partition_of(source, shard);
        self.committed
            .lock()
            .get(topic)
            .and_then(|partitions| partitions.get(&partition))
            .is_some_and(|&committed| u64::try_from(committed).is_ok_and(|c| c > offset))
    }

    /// A shard's task starts (`restored`: it has nothing to restore).
    pub fn started(&self, shard: ShardId, restored: bool) -> Arc<ShardDurability> {
        let durability = Arc::new(ShardDurability::new(restored));
        self.running.lock().insert(shard, durability.clone());
        durability
    }

    /// The shard's task has ended: waiters whose changes were not written
    /// learn it (unless the shard started here again meanwhile).
    pub fn stopped(&self, shard: ShardId, durability: &Arc<ShardDurability>) {
        let mut shards = self.running.lock();
        if shards
            .get(&shard)
            .is_some_and(|d| Arc::ptr_eq(d, durability))
        {
            shards.remove(&shard);
        }
    }

    /// Whether `shard`'s task runs here (from its start, restore included,
    /// to its end).
    pub fn runs(&self, shard: ShardId) -> bool {
        self.running.lock().contains_key(&shard)
    }

    /// Waits until `shard`'s state is restored, if it runs here (false if
    /// its task ended first).
    pub async fn restored(&self, shard: ShardId) -> bool {
        let Some(mut restored) = self.running.lock().get(&shard).map(|d| d.watch_restored()) else {
            return true;
        };
        let done = restored.wait_for(|r| *r).await.is_ok();
        done
    }

    /// The shards running here whose state is still being restored.
    pub fn restoring(&self) -> Vec<ShardId> {
        self.running
            .lock()
            .iter()
            .filter(|(_, d)| !d.is_restored())
            .map(|(shard, _)| *shard)
            .collect()
    }
}
