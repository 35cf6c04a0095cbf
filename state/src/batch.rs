//! A write batch: everything one flush of one entity type makes durable,
//! applied all or nothing, so that a checkpoint never runs ahead of the
//! states it covers.

use colo_allocation::ShardId;

/// How far a shard's changelog partition is reflected in the store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Checkpoint {
    /// The next changelog offset a restore reads.
    pub offset: u64,
    /// The epoch of the shard's start that wrote the store's copy last: a
    /// restore here checks that no other start came between (see the
    /// runtime's restore).
    pub epoch: u64,
    /// A fingerprint of that start's epoch marker, which names the
    /// changelog the copy came from: a changelog made anew may hold
    /// another start's marker at the same offset. 0: a checkpoint written
    /// before checkpoints had it.
    pub marker: u64,
    /// Whose copy the store holds.
    pub kind: CheckpointKind,
}

/// Whose copy of a shard a checkpoint vouches for.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum CheckpointKind {
    /// A start of the shard on this node wrote it: the store holds that
    /// start's own writes, which a restore checks against the changelog
    /// (another start may have come while this one still wrote).
    #[default]
    Start,
    /// A standby wrote it: every changelog record below `offset` applied
    /// in order, as a restore applies them, and nothing else. `epoch` is
    /// then the newest start the copy has seen, and `marker` that start's
    /// marker.
    Standby,
}

/// One change to an entity type's state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    /// An entity's encoded state (with whatever the runtime records beside
    /// it: version, applied offsets, epoch).
    Put {
        shard: ShardId,
        entity_id: String,
        value: Vec<u8>,
    },
    /// The entity deleted itself: its state is gone.
    Delete { shard: ShardId, entity_id: String },
    /// How far the shard's changelog is reflected here.
    Checkpoint {
        shard: ShardId,
        checkpoint: Checkpoint,
    },
    /// Every state and the checkpoint of a shard go: the shard is restored
    /// from the changelog alone.
    ClearShard { shard: ShardId },
    /// A timer of an entity in its shard's index, due at `due`
    /// (milliseconds since the Unix epoch), with the message it brings.
    PutTimer {
        shard: ShardId,
        timer: TimerKey,
        message: Vec<u8>,
    },
    /// A timer gone from the index: fired, cancelled or moved.
    DeleteTimer { shard: ShardId, timer: TimerKey },
}

/// Where a timer sits in its shard's index: when it is due, whose it is
/// and its name.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TimerKey {
    /// Milliseconds since the Unix epoch.
    pub due: u64,
    pub entity_id: String,
    pub name: String,
}

impl TimerKey {
    /// The index entry that says an entity's record holds outputs not
    /// known to be sent: due at once, under a name no timer has (a
    /// timer's name is never empty), so a shard that starts finds it
    /// first, with the timers already due.
    pub fn outbox(entity_id: impl Into<String>) -> Self {
        Self {
            due: 0,
            entity_id: entity_id.into(),
            name: String::new(),
        }
    }

    /// Whether it is an outbox's entry rather than a timer's.
    pub fn is_outbox(&self) -> bool {
        self.name.is_empty()
    }
}

/// Changes to one entity type's state, applied together.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WriteBatch {
    pub entity_type: String,
    pub ops: Vec<Op>,
}

impl WriteBatch {
    pub fn new(entity_type: impl Into<String>) -> Self {
        Self {
            entity_type: entity_type.into(),
            ops: Vec::new(),
        }
    }

    pub fn put(&mut self, shard: ShardId, entity_id: impl Into<String>, value: Vec<u8>) {
        self.ops.push(Op::Put {
            shard,
            entity_id: entity_id.into(),
            value,
        });
    }

    pub fn delete(&mut self, shard: ShardId, entity_id: impl Into<String>) {
        self.ops.push(Op::Delete {
            shard,
            entity_id: entity_id.into(),
        });
    }

    pub fn checkpoint(&mut self, shard: ShardId, checkpoint: Checkpoint) {
        self.ops.push(Op::Checkpoint { shard, checkpoint });
    }

    pub fn put_timer(&mut self, shard: ShardId, timer: TimerKey, message: Vec<u8>) {
        self.ops.push(Op::PutTimer {
            shard,
            timer,
            message,
        });
    }

    pub fn delete_timer(&mut self, shard: ShardId, timer: TimerKey) {
        self.ops.push(Op::DeleteTimer { shard, timer });
    }

    pub fn clear_shard(&mut self, shard: ShardId) {
        self.ops.push(Op::ClearShard { shard });
    }

    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }
}
