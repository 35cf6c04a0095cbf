//! colo: stateful, sharded entities next to Kafka.
//!
//! A node runs one [`Region`] per entity type; a region routes messages by
//! entity id to shards, hosts its local shards, and buffers while a shard's
//! home is unknown. One coordinator per entity type decides where shards
//! live and moves them with the hand-off protocol. DESIGN.md has the
//! vocabulary and the invariants.
//!
//! # Start here
//! - [`entity`]: what you implement and register ([`Entity`],
//!   [`EntityType`], [`EntityContext`]); [`EntityType::durable`] with a
//!   [`NodeStore`] keeps state across passivation, hand-off and restarts.
//! - [`Node`], [`Region`]: tell and ask ([`Delivery`] when the sender must
//!   learn the outcome, [`ErasedRegion`] to reach a region by name).
//! - [`settings`]: per entity type, Akka's defaults, and an ingest's
//!   settings; [`StateSettings`]: the state store's.
//! - [`kafka`]: Kafka in one room: records driving an entity type,
//!   changelogs, the coordinator's topic and its election.
//! - [`process`]: a node process of your own ([`NodeProgram`]), its
//!   config, gRPC client API, admin HTTP and security; the samples.
//!
//! # The cluster's parts
//! - [`coordinator`]: shard homes, rebalancing, hand-off, its store.
//! - [`transport`]: how nodes reach each other (in memory, gRPC with
//!   credits and TLS).
//! - [`metrics`]: every metric name; [`codec`]: the content types.
//! - [`allocation`], [`passivation`], [`state`]: the colo-allocation,
//!   colo-passivation and colo-state crates.
//!
//! Everything else (the region's routing, shards and mailboxes, envelopes,
//! the coordinator protocol, the durable store's write path) is inside.
#![forbid(unsafe_code)]

pub mod codec;
pub mod coordinator;
pub mod entity;
pub mod kafka;
pub mod metrics;
pub mod process;
pub mod settings;
pub mod transport;

mod clock;
mod credits;
mod durability;
mod envelope;
mod error;
mod ingest;
mod inspection;
mod kafka_view;
mod logging;
mod mailbox;
mod memory_budget;
mod node;
mod node_context;
mod output;
mod protocol;
mod region;
mod replies;
mod store;
mod tasks;
mod timer;

pub use codec::ContentType;
pub use colo_allocation as allocation;
pub use colo_allocation::{RegionId, ShardId};
pub use colo_passivation as passivation;
pub use colo_state as state;
pub use coordinator::{store::InMemoryStore, CoordinatorHandle};
pub use entity::{Entity, EntityContext, EntityError, EntityId, EntityType, RegistrationError};
pub use error::{AskError, QueryError, TellError, MAX_IDEMPOTENCY_KEY};
pub use inspection::{ClusterShardingStats, CurrentRegionState, RegionStats};
pub use node::Node;
pub use output::{OutputError, MAX_OUTPUT_BYTES, OUTPUT_ID_HEADER};
pub use process::program::{NodeProgram, ProgramError};
pub use region::{Delivery, ErasedError, ErasedRegion, PlacementError, Region, TellOnce, Told};
pub use settings::{EntityRecovery, SettingsError, ShardingSettings};
pub use store::{
    ChangelogError, ChangelogRecord, ChangelogWrite, EntityChangelog, NodeStore, OutputRecord,
    OutputSendError, OutputSink, ShardTransactions, StateSettings,
};
pub use tasks::TaskSet;
pub use timer::{TimerError, MAX_TIMER_NAME};
pub use transport::{memory::InMemoryNetwork, Transport, TransportError};
