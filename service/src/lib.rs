//! colo: stateful, sharded entities next to Kafka.
//!
//! A node runs one [`Region`] per entity type; a region routes messages by
//! entity id to shards, hosts its local shards, and buffers while a shard's
//! home is unknown. One [`coordinator`] per entity type decides where shards
//! live, through a pluggable allocation strategy, and moves them with the
//! hand-off protocol. See DESIGN.md for the vocabulary and the invariants.
//!
//! # Start here
//! - [`Entity`], [`EntityType`], [`EntityContext`]: what you implement and
//!   register ([`entity`] has the rest of the entity API).
//! - [`EntityType::durable`], [`NodeStore`], [`StateSettings`]: entities
//!   whose state survives passivation, hand-off and restarts, in the node's
//!   state store ([`state`], the colo-state crate) written behind in
//!   batches.
//! - [`NodeProgram`]: a node process of your own: your entity types, the
//!   config file, gRPC, admin HTTP, metrics, health, graceful shutdown.
//! - [`Node`] and [`Region`]: a node in your own process; tell and ask
//!   ([`Delivery`] when the sender must learn the outcome, [`ErasedRegion`]
//!   to reach a region by name with encoded messages).
//! - [`kafka`]: Kafka records driving an entity type: the connector's
//!   source wired to the region (rebalances move shards synchronously;
//!   offsets follow handled records), and the decoders a program uses.
//!
//! # What a program configures
//! - [`ShardingSettings`] ([`settings`]): per entity type, Akka's defaults.
//! - [`passivation`] (the colo-passivation crate): replacement policies,
//!   their settings and the passivation strategy.
//! - [`allocation`] (the colo-allocation crate): allocation strategies and
//!   message extractors, Kafka's partitioner among them.
//! - [`config`]: the node program's TOML config, env and flag overrides.
//!
//! # What it sees
//! - [`AskError`], [`TellError`]: what senders see.
//! - [`CurrentRegionState`], [`ClusterShardingStats`]: the region-state
//!   and cluster-stats queries.
//! - [`metrics`]: every metric name; [`admin`]: the admin HTTP server
//!   (metrics, health); [`api`]: the gRPC client API; [`codec`]: the content
//!   types clients may use.
//!
//! # The cluster's parts
//! - [`coordinator`]: shard homes, rebalancing, hand-off: its handle
//!   ([`CoordinatorHandle`]), its event-sourced state and store
//!   ([`InMemoryStore`], or the cluster's coordinator topic with
//!   `[kafka]`), its members, and which node hosts it: the one configured,
//!   or the one elected through Kafka ([`kafka::leader`]).
//! - [`transport`]: how nodes reach each other: [`InMemoryNetwork`] within
//!   a process (tests), gRPC between processes; [`credits`], the flow
//!   control that keeps a busy receiver from stalling or being resent to.
//! - [`TaskSet`]: every task a component starts, stopped together.
//! - [`security`]: mutual TLS between nodes, the client API's
//!   certificates and bearer tokens, reloaded when their files change.
//!
//! # Samples
//! - [`samples`], examples rather than API: the built-in counter entity
//!   type, and the purchases sample (Kafka events driving one entity per
//!   user, and the producer of `colo produce`).
//!
//! # Inside (not public)
//! The node (`node.rs`, `node_context.rs`), the region (`region.rs` and
//! `region/`: the routing table, the region task and its contact with the
//! coordinator, the shard task, the outbound queues, the lease), the
//! coordinator protocol (`protocol.rs`), envelopes (`envelope.rs`), the
//! bounded mailboxes, the table of remote asks and the log subscriber.
//!
//! The `colo` binary's own parts (client subcommands, `colo produce`, the
//! embedded demo, the passivation simulator's command) are the binary's
//! modules (`src/bin/colo/`), not the library's.
#![forbid(unsafe_code)]

pub mod admin;
pub mod api;
mod clock;
pub mod codec;
pub mod config;
pub mod coordinator;
pub mod credits;
mod durability;
pub mod entity;
mod envelope;
mod error;
mod inspection;
pub mod kafka;
mod kafka_view;
mod logging;
mod mailbox;
pub mod metrics;
mod node;
mod node_context;
mod program;
mod protocol;
mod region;
mod replies;
pub mod samples;
pub mod security;
pub mod settings;
mod store;
mod tasks;
pub mod transport;

pub use codec::ContentType;
pub use colo_allocation as allocation;
pub use colo_allocation::{RegionId, ShardId};
pub use colo_passivation as passivation;
pub use colo_state as state;
pub use coordinator::{store::InMemoryStore, CoordinatorHandle};
pub use entity::{Entity, EntityContext, EntityError, EntityId, EntityType, RegistrationError};
pub use error::QueryError;
pub use error::{AskError, TellError};
pub use inspection::{ClusterShardingStats, CurrentRegionState, RegionStats};
pub use node::Node;
pub use program::{NodeProgram, ProgramError};
pub use region::{Delivery, ErasedError, ErasedRegion, PlacementError, Region, Told};
pub use settings::{EntityRecovery, SettingsError, ShardingSettings};
pub use store::{
    ChangelogError, ChangelogRecord, ChangelogWrite, EntityChangelog, NodeStore, StateSettings,
};
pub use tasks::TaskSet;
pub use transport::{memory::InMemoryNetwork, Transport, TransportError};
