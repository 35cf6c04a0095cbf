//! Passivation: stopping idle or less valuable entities so a node can host
//! far more entities than fit in memory. Their state stays in the store.
//!
//! # Layout
//! - [`policy`]: the `ReplacementPolicy` trait shards and the simulator share.
//! - [`strategy`]: an entity type's passivation strategy (idle timeout,
//!   limit) and the passivation reasons.
pub mod policy;
pub mod strategy;

pub use policy::{PolicyKey, ReplacementPolicy};
pub use strategy::{PassivationReason, PassivationStrategy};
