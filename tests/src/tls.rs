//! Certificates for nodes with `[tls]`, made by the repository's
//! `scripts/certs.sh` (as README tells users to), and clients that present
//! them or a bearer token.

use colo_proto::v1::sharding_client::ShardingClient;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, ServerName};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use tonic::metadata::MetadataValue;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity};

/// A CA and certificates it signed, in a directory of their own.
#[derive(Debug)]
pub struct Certs {
    dir: tempfile::TempDir,
}

impl Certs {
    /// A new CA, with a certificate for each of `names`.
    pub fn make(names: &[&str]) -> Self {
        let certs = Self {
            dir: tempfile::tempdir().expect("temp dir"),
        };
        certs.issue(names);
        certs
    }

    /// Certificates for `names` from this CA; an existing one is replaced
    /// (a new key, a new serial).
    pub fn issue(&self, names: &[&str]) {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/certs.sh");
        let output = Command::new("bash")
            .arg(script)
            .arg(self.dir.path())
            .args(names)
            .output()
            .expect("run scripts/certs.sh");
        assert!(
            output.status.success(),
            "scripts/certs.sh failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    }

    /// The CA certificate's file.
    pub fn ca(&self) -> PathBuf {
        self.dir.path().join("ca.pem")
    }

    /// The certificate file of `name`.
    pub fn cert(&self, name: &str) -> PathBuf {
        self.dir.path().join(format!("{name}.pem"))
    }

    /// The private key file of `name`.
    pub fn key(&self, name: &str) -> PathBuf {
        self.dir.path().join(format!("{name}.key"))
    }

    /// A file in the directory (for a tokens file, say).
    pub fn path(&self, file: &str) -> PathBuf {
        self.dir.path().join(file)
    }

    /// The `--set` overrides of a node whose certificate is `name`'s,
    /// reloaded every 200 ms.
    pub fn node_sets(&self, name: &str) -> Vec<String> {
        vec![
            format!("tls.ca={}", self.ca().display()),
            format!("tls.cert={}", self.cert(name).display()),
            format!("tls.key={}", self.key(name).display()),
            "tls.reload_interval=200ms".to_string(),
        ]
    }

    /// The DER of `name`'s certificate as the file holds it now.
    pub fn der(&self, name: &str) -> Vec<u8> {
        CertificateDer::from_pem_file(self.cert(name))
            .expect("a PEM certificate")
            .to_vec()
    }

    /// A TLS channel to the node at `address` trusting this CA, presenting
    /// `identity`'s certificate when given.
    ///
    /// # Errors
    /// The connection or its handshake failed.
    pub async fn channel(
        &self,
        address: &str,
        identity: Option<&str>,
    ) -> Result<Channel, tonic::transport::Error> {
        let ca = std::fs::read(self.ca()).expect("read the CA");
        let mut tls = ClientTlsConfig::new().ca_certificate(Certificate::from_pem(ca));
        if let Some(name) = identity {
            let cert = std::fs::read(self.cert(name)).expect("read the certificate");
            let key = std::fs::read(self.key(name)).expect("read the key");
            tls = tls.identity(Identity::from_pem(cert, key));
        }
        Endpoint::from_shared(format!("https://{address}"))?
            .tls_config(tls)?
            .connect()
            .await
    }

    /// A client of the node at `address`'s client API, presenting
    /// `identity`'s certificate.
    pub async fn client(&self, address: &str, identity: &str) -> ShardingClient<Channel> {
        let channel = self
            .channel(address, Some(identity))
            .await
            .unwrap_or_else(|e| panic!("TLS connection to {address}: {e:?}"));
        ShardingClient::new(channel)
    }

    /// A rustls client config trusting this CA, without a certificate of
    /// its own.
    fn rustls_client(&self, alpn: &[u8]) -> Arc<rustls::ClientConfig> {
        let mut roots = rustls::RootCertStore::empty();
        for ca in CertificateDer::pem_file_iter(self.ca()).expect("read the CA") {
            roots
                .add(ca.expect("a CA certificate"))
                .expect("a usable CA");
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .expect("TLS versions")
            .with_root_certificates(roots)
            .with_no_client_auth();
        config.alpn_protocols = vec![alpn.to_vec()];
        Arc::new(config)
    }

    /// The certificate the server at `address` presents to a new
    /// connection (its DER).
    ///
    /// # Errors
    /// The connection or its handshake failed.
    pub async fn served_certificate(&self, address: &str) -> std::io::Result<Vec<u8>> {
        let stream = self.tls_stream(address, b"h2").await?;
        let (_, connection) = stream.get_ref();
        Ok(connection
            .peer_certificates()
            .and_then(|chain| chain.first())
            .expect("the server presents a certificate")
            .to_vec())
    }

    async fn tls_stream(
        &self,
        address: &str,
        alpn: &[u8],
    ) -> std::io::Result<tokio_rustls::client::TlsStream<tokio::net::TcpStream>> {
        let host = address.rsplit_once(':').expect("host:port").0;
        let name = ServerName::try_from(host.to_string()).expect("a host name");
        let tcp = tokio::net::TcpStream::connect(address).await?;
        tokio_rustls::TlsConnector::from(self.rustls_client(alpn))
            .connect(name, tcp)
            .await
    }

    /// `GET path` over HTTPS from the server at `address`: its status and
    /// body.
    ///
    /// # Errors
    /// The connection or its handshake failed, or the answer is not HTTP.
    pub async fn https_get(&self, address: &str, path: &str) -> std::io::Result<(u16, String)> {
        let stream = self.tls_stream(address, b"http/1.1").await?;
        crate::http::get_over(stream, address, path).await
    }
}

/// Puts `authorization: Bearer <token>` on every call.
#[derive(Debug, Clone)]
pub struct Bearer(MetadataValue<tonic::metadata::Ascii>);

impl tonic::service::Interceptor for Bearer {
    fn call(
        &mut self,
        mut request: tonic::Request<()>,
    ) -> Result<tonic::Request<()>, tonic::Status> {
        request
            .metadata_mut()
            .insert("authorization", self.0.clone());
        Ok(request)
    }
}

/// A client of the client API that sends `token` with every call.
pub fn with_token(
    channel: Channel,
    token: &str,
) -> ShardingClient<InterceptedService<Channel, Bearer>> {
    let value = MetadataValue::try_from(format!("Bearer {token}")).expect("a header value");
    ShardingClient::with_interceptor(channel, Bearer(value))
}
