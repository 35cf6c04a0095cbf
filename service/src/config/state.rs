//! `[state]`: where durable entity types keep their state, and how often
//! they write it.

use crate::store::StateSettings;
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// The node's state store engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EngineName {
    /// fjall: the default, the faster on colo's workload (BENCHMARKS.md).
    #[default]
    Fjall,
    /// sled 0.34.
    Sled,
}

impl EngineName {
    pub fn engine(self) -> colo_state::Engine {
        match self {
            EngineName::Fjall => colo_state::Engine::Fjall,
            EngineName::Sled => colo_state::Engine::Sled,
        }
    }
}

/// `[state]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct StateSection {
    /// The embedded database under `node.data_dir`. A data directory keeps
    /// the engine it was created with: the node refuses to start with the
    /// other one.
    pub engine: EngineName,
    /// See [`StateSettings::flush_interval`].
    #[serde(with = "humantime_serde")]
    pub flush_interval: Duration,
    /// See [`StateSettings::max_dirty`].
    pub max_dirty: usize,
}

impl Default for StateSection {
    fn default() -> Self {
        let settings = StateSettings::default();
        Self {
            engine: EngineName::default(),
            flush_interval: settings.flush_interval,
            max_dirty: settings.max_dirty,
        }
    }
}

impl StateSection {
    pub fn settings(&self) -> StateSettings {
        StateSettings {
            flush_interval: self.flush_interval,
            max_dirty: self.max_dirty,
        }
    }
}
