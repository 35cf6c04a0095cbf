//! `[tls]` and `[api]`: who may reach a node, and how they prove it.
//!
//! One gRPC listener carries node-to-node traffic, the coordinator protocol
//! and the client API, so TLS is on for all three or for none: a cluster
//! cannot be half encrypted by mistake. The admin listener (metrics, health,
//! the cluster map) stays plain unless `tls.admin` is set, because
//! scrapers and probes expect it; nothing on it changes state.

use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use std::time::Duration;

/// `[tls]`: the gRPC listener over TLS, and mutual TLS between nodes.
///
/// Every node presents `cert`; a peer is accepted only if its certificate
/// chains to `ca` and names the host of the node address it claims. The
/// files are read again when they change, so a rotated certificate needs
/// no restart.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlsSection {
    /// PEM file of the CA certificate(s) that node (and client)
    /// certificates chain to.
    pub ca: PathBuf,
    /// PEM file of this node's certificate chain. Its subject alternative
    /// names must include the host of `node.advertised`.
    pub cert: PathBuf,
    /// PEM file of this node's private key (PKCS#8, PKCS#1 or SEC1).
    pub key: PathBuf,
    /// Serve the admin HTTP server over TLS too, with the same certificate.
    #[serde(default)]
    pub admin: bool,
    /// How often the files are checked for a change.
    #[serde(default = "default_reload_interval", with = "humantime_serde")]
    pub reload_interval: Duration,
}

fn default_reload_interval() -> Duration {
    Duration::from_secs(10)
}

/// `[api]`: how clients of the gRPC client API authenticate.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApiSection {
    /// A file of bearer tokens, one per line: `NAME SCOPE TOKEN`, where
    /// SCOPE is `read-write` or `read-only` (ask, shards, stats). Needs
    /// `[tls]`: a token sent in plain text can be read off the network.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokens_file: Option<PathBuf>,
    /// With `[tls]`: a client presenting a certificate that chains to
    /// `tls.ca` may call everything.
    #[serde(default = "yes")]
    pub client_certificates: bool,
}

impl Default for ApiSection {
    fn default() -> Self {
        Self {
            tokens_file: None,
            client_certificates: true,
        }
    }
}

fn yes() -> bool {
    true
}
