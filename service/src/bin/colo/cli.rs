//! The `colo` subcommands that live in the library, so that they can be
//! tested without starting a process.
//!
//! - [`client`]: tell, ask and the inspection queries against a node.
//! - [`produce`]: records sent to Kafka on their shards' partitions: the
//!   sample's purchase events, or one's own.
//! - [`verify`]: the sample's users asked for their totals, compared with
//!   what `produce --expected` wrote.
//! - [`remove_internal_data`]: a stopped cluster's coordinator topic (and
//!   changelogs) deleted from its brokers.

pub mod client;
pub mod produce;
pub mod remove_internal_data;
pub mod verify;
