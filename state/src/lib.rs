//! colo's node-local state store: where durable entities keep their state,
//! one database per node under its data directory.
//!
//! The store knows nothing of entities or Kafka: it keeps values by entity
//! type, shard and entity id, plus one checkpoint per
//! shard (how far the shard's changelog is reflected here), and applies
//! each [`WriteBatch`] atomically and durably. The runtime batches writes
//! (write-behind) and calls it from a blocking thread; nothing here awaits.
//!
//! # Start here
//! - [`open`]: the store of a data directory, with the [`Engine`] chosen
//!   in settings.
//! - [`StateStore`]: what the runtime asks of any engine.
//! - [`WriteBatch`]: the puts, deletes and checkpoints applied together.
//! - [`StoreError`]: what went wrong, naming the path or entity type.
//! - [`StateRecord`]: what is stored for one entity, in the store and its
//!   changelog alike: the state, its version, the epoch that wrote it and
//!   the source offsets applied to it.
//!
//! # Inside
//! - `keys`: how entity ids, checkpoints and timers are laid out, so that
//!   one shard is one contiguous range (a restore is one scan) and its
//!   timers are read in the order they are due.
//! - `fjall_engine` (the default), `sled_engine`: the two engines.

mod batch;
mod engine;
mod error;
mod fjall_engine;
mod keys;
mod open;
mod record;
mod sled_engine;

pub use batch::{Checkpoint, CheckpointKind, Op, TimerKey, WriteBatch};
pub use engine::{Engine, StateStore};
pub use error::StoreError;
pub use open::open;
pub use record::{Beside, Output, RecordError, StateRecord, Timer};
