//! End-to-end test support: `colo run` processes on loopback ports, and
//! clients for their gRPC and admin HTTP endpoints.
//!
//! # Layout
//! - [`broker`]: Apache Kafka (KRaft, one process) on loopback ports.
//! - [`broker_cluster`]: three Apache Kafka brokers, every topic
//!   replicated on all three, for the broker-fault tests.
//! - [`prometheus`]: a real Prometheus scraping test nodes, queried through
//!   its HTTP API; [`deploy`]: the repository's compose file, Dockerfile
//!   and Prometheus and Grafana files, read as a deployment sees them.
//! - [`chromium`]: headless Chromium: a page's DOM after its scripts ran,
//!   and screenshots.
//! - [`client`]: asks to the built-in counter and the inspection queries.
//! - [`process`]: a node process started from a generated config, stopped
//!   by its PID when dropped.
//! - [`kafka`]: a group's committed offsets, a Kafka source's
//!   assignments and records awaited with a deadline, and what a
//!   dead-letter topic holds.
//! - [`http`]: a minimal HTTP/1.1 GET for the admin endpoints.
//! - [`lifecycle`]: the at-most-one checker across processes, from logs.
//! - [`purchases`]: `colo produce` as a process, and the purchases the
//!   nodes handled checked against what was produced.
//! - [`user_nodes`]: nodes of the sample's user entity type on a broker:
//!   their settings, metrics and logs, and waiting for their shards and
//!   for every purchase handled.
//! - [`recorded`]: metrics recorded in a test process, read back by name
//!   and labels.
//! - [`netns`]: hosts with networks of their own (network namespaces on
//!   a bridge), whose links a test cuts and heals.
//! - [`proxy`]: a TCP proxy that forwards, holds (a partition) or breaks
//!   connections.
//! - [`tls`]: certificates made by `scripts/certs.sh`, and clients that
//!   present them or a bearer token.
//! - [`wait`]: waiting for a condition with a deadline.
//! - `rdkafka`, re-exported: tests drive a broker directly with it (records
//!   produced or read, the mock cluster's injected errors), so the crates
//!   under test need not depend on it.
#![forbid(unsafe_code)]

pub mod broker;
pub mod broker_cluster;
pub mod chromium;
pub mod client;
pub mod deploy;
pub mod http;
pub mod kafka;
pub mod lifecycle;
pub mod netns;
pub mod process;
pub mod prometheus;
pub mod proxy;
pub mod purchases;
pub mod recorded;
pub mod tls;
pub mod user_nodes;
pub mod wait;

pub use rdkafka;
