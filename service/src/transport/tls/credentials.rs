//! The node's certificate, key and CA, read from their PEM files and read
//! again when the files change: a rotated certificate is used by the next
//! connection, in both directions, without a restart.
//!
//! A change that does not load (a key that does not match its certificate
//! because only one file was replaced yet, say) keeps the last good files in
//! use and is tried again on the next check.

use super::identity::{host_of, names};
use super::TlsSettings;
use super::{read_file, CredentialsError};
use parking_lot::RwLock;
use rustls::server::WebPkiClientVerifier;
use rustls::{RootCertStore, ServerConfig};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The three files' contents, as last loaded.
#[derive(Clone, PartialEq, Eq)]
struct Pems {
    ca: Vec<u8>,
    cert: Vec<u8>,
    key: Vec<u8>,
}

/// What the files make.
struct Material {
    pems: Pems,
    server: Arc<ServerConfig>,
}

/// The node's TLS material: the server's config for accepted connections,
/// the client's for connections it opens. Cheap to clone; every clone sees
/// a reload.
#[derive(Clone)]
pub struct NodeTls {
    files: Arc<Files>,
    current: Arc<RwLock<Arc<Material>>>,
}

struct Files {
    ca: PathBuf,
    cert: PathBuf,
    key: PathBuf,
    /// The host this node's certificate must name (of `node.advertised`).
    host: String,
}

impl std::fmt::Debug for NodeTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeTls")
            .field("cert", &self.files.cert)
            .finish_non_exhaustive()
    }
}

impl PartialEq for NodeTls {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.current, &other.current)
    }
}

impl Eq for NodeTls {}

impl NodeTls {
    /// Reads the files of `section` for the node advertised at `advertised`.
    ///
    /// # Errors
    /// A file cannot be read or holds no usable PEM, the key does not match
    /// the certificate, or the certificate does not name the node's host.
    pub async fn load(section: &TlsSettings, advertised: &str) -> Result<Self, CredentialsError> {
        let files = Files {
            ca: section.ca.clone(),
            cert: section.cert.clone(),
            key: section.key.clone(),
            host: host_of(advertised).to_string(),
        };
        let pems = files.read().await?;
        let material = files.build(pems)?;
        Ok(Self {
            files: Arc::new(files),
            current: Arc::new(RwLock::new(Arc::new(material))),
        })
    }

    /// The server's config for the next accepted connection.
    pub fn server_config(&self) -> Arc<ServerConfig> {
        self.current.read().server.clone()
    }

    /// The client's config for the next connection to the node (or
    /// server) whose certificate must name `host`: this node's certificate
    /// as its identity, the CA as the only root.
    pub fn client_config(&self, host: &str) -> tonic::transport::ClientTlsConfig {
        let pems = self.current.read().pems.clone();
        tonic::transport::ClientTlsConfig::new()
            .ca_certificate(tonic::transport::Certificate::from_pem(pems.ca))
            .identity(tonic::transport::Identity::from_pem(pems.cert, pems.key))
            .domain_name(host)
    }

    /// Reads the files again; uses them if they changed and load. Returns
    /// whether the files in use changed.
    ///
    /// # Errors
    /// The changed files do not load; the last good ones stay in use.
    pub async fn reload(&self) -> Result<bool, CredentialsError> {
        let pems = self.files.read().await?;
        if self.current.read().pems == pems {
            return Ok(false);
        }
        let material = self.files.build(pems)?;
        *self.current.write() = Arc::new(material);
        Ok(true)
    }
}

impl Files {
    async fn read(&self) -> Result<Pems, CredentialsError> {
        Ok(Pems {
            ca: read_file("tls.ca", &self.ca).await?,
            cert: read_file("tls.cert", &self.cert).await?,
            key: read_file("tls.key", &self.key).await?,
        })
    }

    fn build(&self, pems: Pems) -> Result<Material, CredentialsError> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let bad = |field: &'static str, path: &Path, reason: String| CredentialsError::Pem {
            field,
            path: path.to_path_buf(),
            reason,
        };
        let mut roots = RootCertStore::empty();
        for ca in CertificateDer::pem_slice_iter(&pems.ca) {
            let ca = ca.map_err(|e| bad("tls.ca", &self.ca, e.to_string()))?;
            roots
                .add(ca)
                .map_err(|e| bad("tls.ca", &self.ca, e.to_string()))?;
        }
        if roots.is_empty() {
            return Err(bad("tls.ca", &self.ca, "holds no certificate".into()));
        }
        let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&pems.cert)
            .collect::<Result<_, _>>()
            .map_err(|e| bad("tls.cert", &self.cert, e.to_string()))?;
        let Some(leaf) = chain.first() else {
            return Err(bad("tls.cert", &self.cert, "holds no certificate".into()));
        };
        if !names(leaf, &self.host) {
            return Err(CredentialsError::NotNamed {
                path: self.cert.clone(),
                host: self.host.clone(),
            });
        }
        // Never the key's bytes in an error: only what kind of problem.
        let key = PrivateKeyDer::from_pem_slice(&pems.key).map_err(|_| {
            bad(
                "tls.key",
                &self.key,
                "holds no PEM private key (PKCS#8, PKCS#1 or SEC1)".into(),
            )
        })?;
        let verifier =
            WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone())
                // Clients of the client API may come with a token instead; the
                // access check decides per service.
                .allow_unauthenticated()
                .build()
                .map_err(|e| bad("tls.ca", &self.ca, e.to_string()))?;
        let mut server = ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| bad("tls.cert", &self.cert, e.to_string()))?
            .with_client_cert_verifier(verifier)
            .with_single_cert(chain, key)
            .map_err(|e| {
                bad(
                    "tls.key",
                    &self.key,
                    format!("does not go with tls.cert: {e}"),
                )
            })?;
        server.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        Ok(Material {
            pems,
            server: Arc::new(server),
        })
    }
}
