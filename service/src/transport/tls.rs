//! TLS between nodes: the node's certificate, key and CA, reloaded when
//! the files change ([`NodeTls`], `tls/credentials.rs`); the connections the
//! gRPC listener accepts, handshakes done, with what each proved
//! ([`connection`]); and which node a certificate speaks for
//! ([`identity`], [`check_node`]).
//!
//! The `[tls]` section is [`TlsSettings`], so its fields are written here
//! once. Who may call which service, and the client API's tokens, are the
//! process's (`process/security.rs`).

pub mod connection;
mod credentials;
pub mod identity;

pub use connection::{check_node, Connection, ConnectionInfo, TlsListener};
pub use credentials::NodeTls;
pub use identity::host_of;

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
pub struct TlsSettings {
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

/// Why a file of the node's credentials (its certificates and key, or
/// another the process reads the same way) could not be loaded. Never
/// carries a key's bytes.
#[derive(Debug, thiserror::Error)]
pub enum CredentialsError {
    /// A file cannot be read.
    #[error("{field}: cannot read {}: {source}", path.display())]
    Read {
        /// The config field naming the file.
        field: &'static str,
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A file holds no usable PEM, or its parts do not go together.
    #[error("{field}: {}: {reason}", path.display())]
    Pem {
        /// The config field naming the file.
        field: &'static str,
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// The node's certificate does not name the host it is advertised at.
    #[error("tls.cert: {} does not name {host}, the host of node.advertised: other nodes would refuse it", path.display())]
    NotNamed {
        /// The certificate file.
        path: PathBuf,
        /// The advertised host.
        host: String,
    },
}

/// The contents of the file `field` names, off the runtime's threads.
pub(crate) async fn read_file(
    field: &'static str,
    path: &std::path::Path,
) -> Result<Vec<u8>, CredentialsError> {
    tokio::fs::read(path)
        .await
        .map_err(|source| CredentialsError::Read {
            field,
            path: path.to_path_buf(),
            source,
        })
}
