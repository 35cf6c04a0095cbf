//! colo: stateful, sharded entities next to Kafka.
//!
//! A node runs one [`Region`] per entity type; a region routes messages by
//! entity id to shards, hosts its local shards, and buffers while a shard's
//! home is unknown. One [`coordinator`] per entity type decides where shards
//! live, through a pluggable allocation strategy, and moves them with the
//! hand-off protocol. See DESIGN.md for the vocabulary and the invariants.
//!
//! # Start here
//! - [`Entity`] and [`EntityType`]: what you implement and register.
//! - [`NodeProgram`]: a node process of your own: your entity types, the
//!   config file, gRPC, admin HTTP, metrics, health, graceful shutdown.
//! - [`Node`] and [`Region`]: a node in your own process; tell and ask.
//!
//! # Layout
//! - [`entity`]: the entity API (`Entity`, `EntityType`).
//! - [`settings`]: per entity type settings with Akka's defaults.
//! - [`program`]: the node program (`NodeProgram`) that `colo run` is one
//!   user of; [`config`], its TOML config with env and flag overrides;
//!   [`admin`], its admin HTTP server; [`api`], its gRPC client API.
//! - [`kafka`]: Kafka records driving an entity type: the connector's
//!   source wired to the region (rebalances move shards synchronously;
//!   offsets follow handled records).
//! - [`node`]: a node and its regions; `node_context.rs`, what its regions
//!   and shards share; `tasks.rs`, the task sets that stop with it.
//! - [`region`]: routing, buffering, hosting; `region/routes.rs` is the
//!   routing table, `region/task.rs` the region's state machine (with
//!   `task/contact.rs`, its contact with the coordinator and fencing;
//!   `task/draining.rs` and `task/shutdown.rs`), `region/lease.rs` its
//!   lease, `region/shard.rs` the task that owns a shard's entities,
//!   `region/outbound.rs` the queue to each remote node,
//!   `region/activity.rs` the passivation gauges, `region/placement.rs`
//!   hosting and releasing shards on demand, `region/delivery.rs` messages
//!   whose outcome the sender learns, `region/erased.rs` a
//!   region reached by name with encoded messages; `mailbox.rs`, the
//!   bounded queue in front of a shard or a remote node.
//! - [`coordinator`]: shard homes, rebalancing, hand-off; its handle, its
//!   event-sourced state and store, its members (registration, liveness),
//!   one task per hand-off, and which node hosts it.
//! - [`protocol`]: the coordinator protocol, by direction.
//! - [`envelope`], [`codec`]: messages and the one codec boundary, with the
//!   content types clients may use.
//! - [`transport`]: how nodes reach each other: an in-memory network, and
//!   gRPC between processes; [`credits`], the flow control that keeps a
//!   busy receiver from stalling or being resent to.
//! - [`inspection`]: the region-state and cluster-stats queries.
//! - [`passivation`] (the colo-passivation crate): replacement policies,
//!   their settings and the passivation strategy.
//! - [`metrics`]: every metric name; [`logging`]: the log subscriber.
//! - [`error`]: what senders see.
//! - [`counter`]: the built-in counter entity type.
//! - [`purchases`]: the sample: purchase events from Kafka driving one
//!   entity per user, and the producer of `colo produce`.
//!
//! The `colo` binary's own parts (client subcommands, the embedded demo,
//! the passivation simulator) are modules of this crate too, hidden from
//! these docs.
#![forbid(unsafe_code)]

pub mod admin;
pub mod api;
pub mod codec;
pub mod config;
pub mod coordinator;
pub mod counter;
pub mod credits;
pub mod entity;
pub mod envelope;
pub mod error;
pub mod inspection;
pub mod kafka;
pub mod logging;
mod mailbox;
pub mod metrics;
pub mod node;
mod node_context;
pub use colo_passivation as passivation;
pub mod program;
pub mod protocol;
pub mod purchases;
pub mod region;
mod replies;
pub mod settings;
mod tasks;
pub mod transport;

#[doc(hidden)]
pub mod cli;
#[doc(hidden)]
pub mod demo;
#[doc(hidden)]
pub mod simulate;

pub use codec::ContentType;
pub use colo_allocation as allocation;
pub use colo_allocation::{RegionId, ShardId};
pub use coordinator::{store::InMemoryStore, CoordinatorHandle};
pub use entity::{Entity, EntityContext, EntityError, EntityId, EntityType, RegistrationError};
pub use error::{AskError, TellError};
pub use inspection::{ClusterShardingStats, CurrentRegionState, RegionStats};
pub use node::Node;
pub use program::{NodeProgram, ProgramError};
pub use region::{Delivery, ErasedError, ErasedRegion, PlacementError, QueryError, Region};
pub use settings::{SettingsError, ShardingSettings};
pub use transport::{memory::InMemoryNetwork, Transport, TransportError};
