//! colo's wire protocol (package `colo.v1`).
//!
//! This crate will hold the `.proto` files and the tonic/prost code generated
//! from them, and nothing else:
//! - node-to-node delivery of envelope batches and ask replies;
//! - the coordinator protocol, one bidirectional stream per region;
//! - the client API (tell, ask, the two inspection queries, shutdown).
//!
//! The sharding runtime in `colo` already moves only bytes across nodes (its
//! transport takes encoded envelopes), so the gRPC transport plugs in here
//! without touching regions, shards or the coordinator.
#![forbid(unsafe_code)]
