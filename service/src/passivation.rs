//! Passivation: stopping idle or less valuable entities so a node can host
//! far more entities than fit in memory. Their state stays in the store.
//!
//! # Layout
//! - [`policy`]: the `ReplacementPolicy` trait shards and the simulator share.
pub mod policy;

pub use policy::{PolicyKey, ReplacementPolicy};
