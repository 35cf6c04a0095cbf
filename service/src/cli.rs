//! The `colo` subcommands that live in the library, so that they can be
//! tested without starting a process.
//!
//! - [`client`]: tell, ask and the inspection queries against a node.
//! - [`produce`]: the sample's purchase events sent to Kafka.

pub mod client;
pub mod produce;
