//! How the client subcommands prove who they are to a node with `[tls]`:
//! the CA its certificate chains to, and a client certificate or a bearer
//! token. Each flag has an environment variable, so scripts keep secrets
//! out of the command line (which other users of the machine can read).

use super::{error_chain, normalize_addr, ClientCliError, CONNECT_TIMEOUT};
use colo_proto::v1::sharding_client::ShardingClient;
use std::path::{Path, PathBuf};
use tonic::metadata::{Ascii, MetadataValue};
use tonic::service::interceptor::InterceptedService;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity};

/// A client of a node's client API, with its credentials on every call.
pub type Client = ShardingClient<InterceptedService<Channel, BearerToken>>;

/// The flags of a node's client that speak TLS.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct Credentials {
    /// PEM file of the CA the node's certificate chains to; with it the
    /// connection is TLS (and `--addr` may keep `http://` out).
    #[arg(long, env = "COLO_CA", value_name = "FILE.pem")]
    pub ca: Option<PathBuf>,
    /// PEM file of a client certificate (from the cluster's CA), with
    /// `--key`.
    #[arg(long, env = "COLO_CERT", value_name = "FILE.pem", requires = "key")]
    pub cert: Option<PathBuf>,
    /// PEM file of the client certificate's private key.
    #[arg(long, env = "COLO_KEY", value_name = "FILE.pem", requires = "cert")]
    pub key: Option<PathBuf>,
    /// A file whose first line is the bearer token (from the node's
    /// `api.tokens_file`).
    #[arg(
        long,
        env = "COLO_TOKEN_FILE",
        value_name = "FILE",
        conflicts_with = "token"
    )]
    pub token_file: Option<PathBuf>,
    /// The bearer token itself. Prefer `--token-file` or `COLO_TOKEN`: a
    /// flag's value shows in the process list.
    #[arg(long, env = "COLO_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
}

/// Puts `authorization: Bearer <token>` on every call, when there is a
/// token.
#[derive(Clone)]
pub struct BearerToken(Option<MetadataValue<Ascii>>);

impl std::fmt::Debug for BearerToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the token.
        f.debug_tuple("BearerToken")
            .field(&self.0.as_ref().map(|_| "..."))
            .finish()
    }
}

impl tonic::service::Interceptor for BearerToken {
    fn call(
        &mut self,
        mut request: tonic::Request<()>,
    ) -> Result<tonic::Request<()>, tonic::Status> {
        if let Some(token) = &self.0 {
            request
                .metadata_mut()
                .insert("authorization", token.clone());
        }
        Ok(request)
    }
}

impl Credentials {
    async fn bearer(&self) -> Result<BearerToken, ClientCliError> {
        let token = match (&self.token, &self.token_file) {
            (Some(token), _) => token.trim().to_string(),
            (None, Some(path)) => read(path, "--token-file")
                .await?
                .lines()
                .next()
                .unwrap_or_default()
                .trim()
                .to_string(),
            (None, None) => return Ok(BearerToken(None)),
        };
        if token.is_empty() {
            return Err(credentials("the bearer token is empty"));
        }
        if self.ca.is_none() {
            return Err(credentials(
                "a bearer token is sent over TLS only: give --ca (or COLO_CA)",
            ));
        }
        MetadataValue::try_from(format!("Bearer {token}"))
            .map(|value| BearerToken(Some(value)))
            // Never the token in the error.
            .map_err(|_| credentials("the bearer token holds characters a header cannot carry"))
    }

    async fn endpoint(&self, addr: &str) -> Result<Endpoint, ClientCliError> {
        let mut uri = normalize_addr(addr)?;
        let invalid = |reason: String| ClientCliError::Address {
            addr: addr.to_string(),
            reason,
        };
        if self.ca.is_some() {
            if let Some(rest) = uri.strip_prefix("http://") {
                uri = format!("https://{rest}");
            }
        } else if uri.starts_with("https://") {
            return Err(credentials(
                "https needs --ca (or COLO_CA): the CA the node's certificate chains to",
            ));
        }
        let endpoint = Endpoint::from_shared(uri)
            .map_err(|e| invalid(error_chain(&e)))?
            .connect_timeout(CONNECT_TIMEOUT);
        let Some(ca) = &self.ca else {
            return Ok(endpoint);
        };
        let mut tls =
            ClientTlsConfig::new().ca_certificate(Certificate::from_pem(read(ca, "--ca").await?));
        if let (Some(cert), Some(key)) = (&self.cert, &self.key) {
            tls = tls.identity(Identity::from_pem(
                read(cert, "--cert").await?,
                read(key, "--key").await?,
            ));
        }
        endpoint
            .tls_config(tls)
            .map_err(|e| credentials(&format!("TLS: {}", error_chain(&e))))
    }

    /// A client of the node at `addr`, with these credentials.
    ///
    /// # Errors
    /// The address or a credential is invalid, or the node cannot be
    /// reached (a TLS handshake it refused included).
    pub async fn connect(&self, addr: &str) -> Result<Client, ClientCliError> {
        let bearer = self.bearer().await?;
        let endpoint = self.endpoint(addr).await?;
        let uri = endpoint.uri().to_string();
        let channel = endpoint
            .connect()
            .await
            .map_err(|e| ClientCliError::Connect {
                addr: uri,
                reason: error_chain(&e),
            })?;
        Ok(ShardingClient::with_interceptor(channel, bearer))
    }
}

/// Whether the node at `addr` answers HTTP/2's opening bytes the way a
/// TLS server answers anything that is not TLS: with a TLS alert record.
pub async fn serves_tls(addr: &str) -> bool {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    /// A TLS record's content type for an alert.
    const ALERT: u8 = 0x15;
    let Ok(uri) = normalize_addr(addr) else {
        return false;
    };
    let Some(authority) = uri
        .split("://")
        .nth(1)
        .map(|rest| rest.trim_end_matches('/'))
    else {
        return false;
    };
    let probe = async {
        let mut stream = tokio::net::TcpStream::connect(authority).await.ok()?;
        stream
            .write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
            .await
            .ok()?;
        let mut first = [0u8; 1];
        stream.read_exact(&mut first).await.ok()?;
        Some(first[0] == ALERT)
    };
    matches!(
        tokio::time::timeout(CONNECT_TIMEOUT, probe).await,
        Ok(Some(true))
    )
}

fn credentials(reason: &str) -> ClientCliError {
    ClientCliError::Credentials(reason.to_string())
}

async fn read(path: &Path, flag: &str) -> Result<String, ClientCliError> {
    tokio::fs::read_to_string(path)
        .await
        .map_err(|e| ClientCliError::Credentials(format!("{flag} {}: {e}", path.display())))
}
