//! What can go wrong in the store, said so that an operator can act on it.

use std::path::PathBuf;

/// A store operation that failed. Nothing of a batch that failed was
/// applied.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The data directory cannot be used (missing permissions, not a
    /// directory, another engine's files).
    #[error("state store at {path}: {reason}")]
    DataDir { path: PathBuf, reason: String },
    /// The engine refused to open its database (corrupt, locked by another
    /// process).
    #[error("state store at {path} cannot be opened ({engine}): {reason}")]
    Open {
        path: PathBuf,
        engine: &'static str,
        reason: String,
    },
    /// A read or write failed (disk full, I/O error).
    #[error("state store ({engine}), entity type {entity_type:?}: {reason}")]
    Io {
        engine: &'static str,
        entity_type: String,
        reason: String,
    },
    /// An entity type name the store cannot keep apart from others.
    #[error(
        "entity type name {0:?} cannot name a state table: use letters, digits, '-', '_' or '.'"
    )]
    EntityTypeName(String),
    /// A stored key that is not one the store wrote.
    #[error("state store, entity type {entity_type:?}: a key of shard {shard} is not valid UTF-8")]
    Key { entity_type: String, shard: u32 },
}

impl StoreError {
    /// A read or write of `engine` that failed, for `entity_type`.
    pub(crate) fn io(engine: &'static str, entity_type: &str, e: impl std::fmt::Display) -> Self {
        Self::Io {
            engine,
            entity_type: entity_type.to_string(),
            reason: e.to_string(),
        }
    }
}
