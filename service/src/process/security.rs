//! Who may reach a node's listeners, and how they prove it (`[tls]`,
//! `[api]`): the node's TLS (the transport's [`NodeTls`], with
//! `[tls]`), the client API's bearer tokens ([`TokenFile`],
//! `security/tokens.rs`) and who may call which service ([`AccessLayer`],
//! `security/access.rs`), all reloaded when their files change.
//!
//! Kafka's credentials are `[kafka.client]`'s (`config/secrets.rs`): they
//! go to librdkafka and never into a log line or an error.

mod access;
mod tokens;

pub use access::{Access, AccessLayer, Policy};
pub use tokens::{Client, Scope, TokenFile, MIN_TOKEN_LENGTH};

use crate::process::config::NodeConfig;
use crate::transport::tls::{CredentialsError, NodeTls};
use std::path::PathBuf;
use std::time::Duration;

/// Why the node's security files could not be loaded. Never carries a
/// key's or a token's bytes.
#[derive(Debug, thiserror::Error)]
pub enum SecurityError {
    /// A file cannot be read, or `[tls]`'s do not load.
    #[error(transparent)]
    Credentials(#[from] CredentialsError),
    /// A line of the tokens file is not `NAME SCOPE TOKEN`.
    #[error("api.tokens_file: {}: line {line}: {reason}", path.display())]
    Tokens {
        /// The file.
        path: PathBuf,
        /// The line, from 1 (0: the file as a whole).
        line: usize,
        /// What is wrong (never the token).
        reason: String,
    },
}

/// What a node's listeners ask of whoever connects, from `[tls]` and
/// `[api]`.
#[derive(Debug, Clone)]
pub struct Security {
    tls: Option<NodeTls>,
    tokens: Option<TokenFile>,
    client_certificates: bool,
    admin_tls: bool,
    reload_interval: Duration,
}

impl Security {
    /// Loads the files `config` names, for the node advertised at
    /// `advertised`.
    ///
    /// # Errors
    /// A file cannot be read or does not load.
    pub async fn load(config: &NodeConfig, advertised: &str) -> Result<Self, SecurityError> {
        let tls = match &config.tls {
            Some(section) => Some(NodeTls::load(section, advertised).await?),
            None => None,
        };
        let tokens = match &config.api.tokens_file {
            Some(path) => Some(TokenFile::load(path).await?),
            None => None,
        };
        Ok(Self {
            tls,
            tokens,
            client_certificates: config.api.client_certificates,
            admin_tls: config.tls.as_ref().is_some_and(|t| t.admin),
            reload_interval: config
                .tls
                .as_ref()
                .map_or(Duration::from_secs(10), |t| t.reload_interval),
        })
    }

    /// The node's TLS material, with `[tls]`.
    pub fn tls(&self) -> Option<&NodeTls> {
        self.tls.as_ref()
    }

    /// The node's TLS material for the admin server, if it is served over
    /// TLS.
    pub fn admin_tls(&self) -> Option<&NodeTls> {
        self.tls.as_ref().filter(|_| self.admin_tls)
    }

    /// The access checks of the gRPC listener.
    pub fn access(&self) -> AccessLayer {
        AccessLayer::new(Policy {
            tls: self.tls.is_some(),
            client_certificates: self.client_certificates,
            tokens: self.tokens.clone(),
        })
    }

    /// Reads the files again every `tls.reload_interval`, for as long as it
    /// runs (the node's task set holds it).
    pub async fn watch(self) {
        if self.tls.is_none() && self.tokens.is_none() {
            return;
        }
        let mut tick = tokio::time::interval(self.reload_interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tick.tick().await;
        loop {
            tick.tick().await;
            if let Some(tls) = &self.tls {
                match tls.reload().await {
                    Ok(true) => {
                        tracing::info!("TLS certificate files changed: new connections use them")
                    }
                    Ok(false) => {}
                    Err(e) => {
                        tracing::warn!(error = %e, "TLS certificate files changed but do not load; the last good ones stay in use")
                    }
                }
            }
            if let Some(tokens) = &self.tokens {
                match tokens.reload().await {
                    Ok(true) => tracing::info!("tokens file changed: new calls use it"),
                    Ok(false) => {}
                    Err(e) => {
                        tracing::warn!(error = %e, "tokens file changed but does not load; the last good tokens stay in use")
                    }
                }
            }
        }
    }
}
