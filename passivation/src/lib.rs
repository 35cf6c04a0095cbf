//! Passivation: stopping idle or less valuable entities so a node can host
//! far more entities than fit in memory. Their state stays in the store.
//!
//! # Layout
//! - [`policy`]: the `ReplacementPolicy` trait shards and the simulator share.
//! - [`strategy`]: an entity type's passivation strategy (idle timeout,
//!   limit) and the passivation reasons.
//! - [`settings`]: the replacement policy of a limit, with Akka's names and
//!   defaults, the presets and their checks; `from_settings`: `build`, the
//!   policy of one shard made from them.
//! - [`lru`], [`mru`], [`lfu`]: least recently used (plain and segmented),
//!   most recently used, least frequently used (with dynamic aging).
//! - [`lirs`]: low inter-reference recency set, with an adaptive HIR share
//!   (not an Akka policy).
//! - [`next_use`]: predicted next use, Belady's rule on a forecast from
//!   each entity's last two intervals (not an Akka policy).
//! - [`budget`]: any of them kept within a memory budget rather than (or
//!   beside) an entity count: the entities' weight moves its limit.
//! - [`ensemble`]: expert policies run as virtual caches, the shard
//!   following the one with the most recent hits (not an Akka policy).
//! - [`composite`]: admission window + admission filter + main area
//!   (Window-TinyLFU), with [`hill_climbing`] sizing the window and
//!   [`frequency_sketch`] as the filter.
//! - [`simulation`]: the policy side of `colo simulate`: its strategies,
//!   Akka's sharding emulation, Belady's OPT and the lockstep replay.
//! - `recency_list`, `frequency_list`: the O(1), allocation-free
//!   structures under the policies; `area`: what the composite needs from
//!   its areas' policies.
mod area;
pub mod budget;
pub mod composite;
pub mod ensemble;
mod frequency_list;
pub mod frequency_sketch;
mod from_settings;
pub mod hill_climbing;
pub mod lfu;
pub mod lirs;
pub mod lru;
pub mod mru;
pub mod next_use;
pub mod policy;
mod recency_list;
pub mod settings;
pub mod simulation;
pub mod strategy;

pub use budget::MemoryBudgeted;
pub use composite::Composite;
pub use ensemble::Ensemble;
pub use frequency_sketch::{FrequencySketch, SketchHash};
pub use hill_climbing::HillClimbing;
pub use lfu::LeastFrequentlyUsed;
pub use lirs::LowInterReferenceRecencySet;
pub use lru::{LeastRecentlyUsed, SegmentedLeastRecentlyUsed};
pub use mru::MostRecentlyUsed;
pub use next_use::PredictedNextUse;
pub use policy::{PolicyKey, ReplacementPolicy};
pub use settings::{
    AdmissionWindowSettings, CompositeSettings, EnsembleSettings, FrequencySketchSettings,
    HillClimbingSettings, LeastFrequentlyUsedSettings, LeastRecentlyUsedSettings, LirsSettings,
    NextUseSettings, PassivationSettingsError, ReplacementSettings, SegmentedSettings,
};
pub use strategy::{IdleCheck, PassivationReason, PassivationStrategy, StrategyError};
