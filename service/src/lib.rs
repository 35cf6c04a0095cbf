//! colo: stateful, sharded entities next to Kafka.
//!
//! A node runs one [`Region`] per entity type; a region routes messages by
//! entity id to shards, hosts its local shards, and buffers while a shard's
//! home is unknown. One [`coordinator`] per entity type decides where shards
//! live, through a pluggable allocation strategy, and moves them with the
//! hand-off protocol. See DESIGN.md for the vocabulary and the invariants.
//!
//! # Layout
//! - [`entity`]: the entity API (`Entity`, `EntityType`).
//! - [`settings`]: per entity type settings with Akka's defaults.
//! - [`node`]: a node and its regions; `node/context.rs`, what its regions
//!   and shards share; `tasks.rs`, the task sets that stop with it.
//! - [`region`]: routing, buffering, hosting; `region/routes.rs` is the
//!   routing table, `region/task.rs` the region's state machine (with
//!   `task/draining.rs` and `task/shutdown.rs`), `region/shard.rs` the task
//!   that owns a shard's entities, `region/outbound.rs` the queue to each
//!   remote node, `region/activity.rs` the passivation gauges,
//!   `region/erased.rs` a region reached by name with encoded messages;
//!   `mailbox.rs`, the bounded queue in front of a shard or a remote node.
//! - [`coordinator`]: shard homes, rebalancing, hand-off; its handle, its
//!   event-sourced state and store, one task per hand-off, and which node
//!   hosts it (`coordinator/hosting.rs`).
//! - [`protocol`]: the coordinator protocol, by direction.
//! - [`envelope`], [`codec`]: messages and the one codec boundary, with the
//!   content types clients may use.
//! - [`transport`]: how nodes reach each other: an in-memory network, and
//!   gRPC between processes (`transport/grpc.rs`); [`credits`], the flow
//!   control that keeps a busy receiver from stalling or being resent to.
//! - [`inspection`]: the region-state and cluster-stats queries.
//! - [`api`]: the gRPC client API over a node (tell, ask, queries, shutdown).
//! - [`cli`]: the `colo` client subcommands that call it.
//! - [`passivation`]: replacement policies and passivation settings.
//! - [`simulate`]: the passivation trace simulator behind `colo simulate`.
//! - [`config`]: a node's TOML config with env and flag overrides; `colo run`'s flags.
//! - [`program`]: `colo run`, one node process with its servers.
//! - [`admin`]: the admin HTTP server: Prometheus metrics and health probes.
//! - [`logging`]: the process's log subscriber, text or JSON.
//! - [`metrics`]: every metric name.
//! - [`error`]: what senders see.
//! - [`counter`]: the built-in counter entity type; [`demo`]: the embedded demo.
#![forbid(unsafe_code)]

pub mod admin;
pub mod api;
pub mod cli;
pub mod codec;
pub mod config;
pub mod coordinator;
pub mod counter;
pub mod credits;
pub mod demo;
pub mod entity;
pub mod envelope;
pub mod error;
pub mod inspection;
pub mod logging;
mod mailbox;
pub mod metrics;
pub mod node;
pub mod passivation;
pub mod program;
pub mod protocol;
pub mod region;
mod replies;
pub mod settings;
pub mod simulate;
mod tasks;
pub mod transport;

pub use codec::ContentType;
pub use colo_allocation as allocation;
pub use colo_allocation::{RegionId, ShardId};
pub use coordinator::{store::InMemoryStore, CoordinatorHandle};
pub use entity::{Entity, EntityContext, EntityError, EntityId, EntityType, RegistrationError};
pub use error::{AskError, TellError};
pub use inspection::{ClusterShardingStats, CurrentRegionState, RegionStats};
pub use node::Node;
pub use region::{ErasedError, ErasedRegion, QueryError, Region};
pub use settings::{SettingsError, ShardingSettings};
pub use transport::{memory::InMemoryNetwork, Transport, TransportError};
