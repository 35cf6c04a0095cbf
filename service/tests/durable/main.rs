//! Durable entity types: state kept in each node's store, written behind,
//! carried between nodes by a changelog, restored where a shard starts.

mod ledger;

mod changelog;
mod compaction;
mod handoff;
mod kafka;
mod local;
mod outputs;
mod remember;
mod standby;
mod timers;
