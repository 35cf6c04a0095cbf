//! How a data directory gets its store: the engine chosen in settings,
//! checked against what the directory already holds.

use crate::engine::{Engine, StateStore};
use crate::error::StoreError;
use crate::{fjall_engine, sled_engine};
use std::path::Path;

/// Opens (or creates) the store of a data directory with `engine`.
///
/// A directory that already holds the other engine's store is refused
/// rather than silently started empty beside it: switching engines would
/// otherwise look like every entity's state vanished.
///
/// # Errors
/// The directory cannot be created or used, holds the other engine's store,
/// or the database cannot be opened (corrupt, or locked by another node).
pub fn open(data_dir: &Path, engine: Engine) -> Result<Box<dyn StateStore>, StoreError> {
    std::fs::create_dir_all(data_dir).map_err(|e| StoreError::DataDir {
        path: data_dir.to_path_buf(),
        reason: e.to_string(),
    })?;
    for other in Engine::ALL.into_iter().filter(|e| *e != engine) {
        let theirs = data_dir.join(other.file_name());
        if theirs.exists() {
            return Err(StoreError::DataDir {
                path: data_dir.to_path_buf(),
                reason: format!(
                    "it holds a {other} store ({}) but state.engine is {engine}: set state.engine = \"{other}\", or move that store away to start empty",
                    theirs.display()
                ),
            });
        }
    }
    let path = data_dir.join(engine.file_name());
    Ok(match engine {
        Engine::Fjall => Box::new(fjall_engine::FjallStore::open(&path)?),
        Engine::Sled => Box::new(sled_engine::SledStore::open(&path)?),
    })
}
