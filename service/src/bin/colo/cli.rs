//! The `colo` subcommands that live in the library, so that they can be
//! tested without starting a process.
//!
//! - [`client`]: tell, ask and the inspection queries against a node.
//! - [`produce`]: records sent to Kafka on their shards' partitions: the
//!   sample's purchase events, or one's own.

pub mod client;
pub mod produce;
