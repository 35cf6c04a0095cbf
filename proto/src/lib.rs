//! colo's wire protocol, package `colo.v1`: the `.proto` files under
//! `proto/colo/v1/` and the tonic/prost code generated from them.
//!
//! # Layout
//! - `node.proto`: node-to-node delivery, one `Link` stream per sending node
//!   carrying envelope batches (acked in order) and ask replies.
//! - `coordinator.proto`: the coordinator protocol, one bidirectional stream
//!   per region, with heartbeats and the coordinator's epoch.
//! - `client.proto`: tell, ask, the two inspection queries and shutdown.
//! - `purchases.proto`: the sample's purchase events (Kafka record payloads).
//! - [`FILE_DESCRIPTOR_SET`]: the encoded descriptors, for server reflection.
#![forbid(unsafe_code)]

/// The generated messages, clients and servers.
#[allow(missing_docs, missing_debug_implementations, clippy::all)]
pub mod v1 {
    include!(concat!(env!("OUT_DIR"), "/colo.v1.rs"));
}

/// Every colo.v1 file descriptor, encoded, for `tonic-reflection`.
pub const FILE_DESCRIPTOR_SET: &[u8] =
    include_bytes!(concat!(env!("OUT_DIR"), "/colo_descriptor.bin"));
