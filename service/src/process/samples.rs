//! Samples, not the library's API: the entity types the `colo` binary
//! serves without a program of one's own, and what the README's examples,
//! the embedded demo and the tests run. Read them as examples of the API;
//! a program of one's own registers its own entity types instead.
//!
//! - [`counter`]: a counter per id, asked over gRPC.
//! - [`purchases`]: purchase events from Kafka driving one entity per user,
//!   their decoder, and the events `colo produce` and the demo send (the
//!   binary sends them: `bin/colo/cli/produce/events.rs`).

pub mod counter;
pub mod purchases;
