//! The process around the runtime: what a `colo run` node (or a program
//! of one's own, [`program::NodeProgram`]) adds to the library's nodes and
//! regions. It builds on the runtime and the Kafka room; nothing below it
//! imports it.
//!
//! - [`program`]: a node process: your entity types, the config file,
//!   gRPC, admin HTTP, metrics, health, graceful shutdown.
//! - [`config`]: the node's TOML config, env and flag overrides; its
//!   sections are the runtime's settings types where it has them.
//! - [`admin`]: the admin HTTP server (metrics, health, the cluster map).
//! - [`api`]: the gRPC client API.
//! - [`security`]: who may call which service, and how they prove it.
//! - [`samples`]: the built-in entity types, examples rather than API.

pub mod admin;
pub mod api;
pub mod config;
pub mod program;
pub mod samples;
pub mod security;
