//! The policy side of the passivation trace simulator (`colo simulate`):
//! the strategies a run can use, Akka's sharding emulation, Belady's
//! clairvoyant policy and the lockstep replay of every run. Pure, like the
//! rest of the crate: the trace reading, reports and charts are the
//! command's.
//!
//! # Layout
//! - [`sharding`]: Akka's simulator's shard of an id, least-shard region
//!   allocation and the per-shard limit split.
//! - [`opt`]: Belady's clairvoyant policy, the upper bound.
//! - [`replay`]: every run (strategy x limit) fed the same accesses in
//!   lockstep.

pub mod opt;
pub mod replay;
pub mod sharding;

use crate::settings::ReplacementSettings;
use std::fmt;
use std::sync::Arc;

/// The strategy names `colo simulate` knows: Belady's `opt` and
/// `opt-seen`, then every replacement preset the shards can run.
pub fn strategies() -> impl Iterator<Item = &'static str> {
    ["opt", "opt-seen"]
        .into_iter()
        .chain(ReplacementSettings::PRESETS)
}

/// A strategy of a run: OPT, or a replacement policy preset.
#[derive(Clone)]
pub enum Strategy {
    /// Belady's clairvoyant policy; with `newcomers_first`, clairvoyant
    /// only about entities already seen (`opt-seen`, see [`opt`]).
    Opt {
        /// Newcomers are passivated first, the newest first.
        newcomers_first: bool,
    },
    /// A policy shards use, from a [`ReplacementSettings`] preset.
    Policy {
        /// Its preset name.
        name: String,
        /// Its settings.
        settings: Arc<ReplacementSettings>,
    },
}

impl Strategy {
    /// `opt` or a [`ReplacementSettings::preset`] name; `None` if unknown.
    pub fn from_name(name: &str) -> Option<Strategy> {
        if let "opt" | "opt-seen" = name {
            return Some(Strategy::Opt {
                newcomers_first: name == "opt-seen",
            });
        }
        ReplacementSettings::preset(name).map(|settings| Strategy::Policy {
            name: name.to_owned(),
            settings: Arc::new(settings),
        })
    }

    /// The strategy's name.
    pub fn name(&self) -> &str {
        match self {
            Strategy::Opt { newcomers_first } => {
                if *newcomers_first {
                    "opt-seen"
                } else {
                    "opt"
                }
            }
            Strategy::Policy { name, .. } => name,
        }
    }
}

impl fmt::Debug for Strategy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The outcome of one strategy at one limit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunResult {
    /// The strategy's name.
    pub strategy: String,
    /// The total active-entity limit (a memory budget in bytes, in a
    /// weighed replay).
    pub limit: usize,
    /// Messages replayed.
    pub accesses: u64,
    /// Messages that found their entity inactive and activated it.
    pub activations: u64,
    /// Where the trace gives sizes: the most bytes its active entities
    /// held at once.
    pub peak_bytes: Option<u64>,
}

impl RunResult {
    /// `(1 - activations / accesses) x 100`, exactly.
    pub fn active_percent(&self) -> f64 {
        if self.accesses == 0 {
            return 0.0;
        }
        (1.0 - self.activations as f64 / self.accesses as f64) * 100.0
    }
}

/// A policy broke the `ReplacementPolicy` contract: what it did.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("policy contract broken: {0}")]
pub struct ContractBroken(pub String);
