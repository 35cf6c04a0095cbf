//! What a test broker's client listener asks of its clients: plain text,
//! SASL (SCRAM) over plain text or TLS, or TLS alone, and the
//! `server.properties` lines and client properties that go with each.

use crate::tls::Certs;
use std::path::PathBuf;

/// The security of a broker's client listener. The broker talks to itself
/// (controller, replication) in plain text on listeners of its own.
#[derive(Debug, Default)]
pub(super) enum Security {
    #[default]
    Plaintext,
    /// SASL with SCRAM-SHA-256 over plain text, for the user (name,
    /// password).
    SaslPlaintext(String, String),
    /// TLS, with a certificate for [`HOST`].
    Ssl(Tls),
    /// SASL with SCRAM-SHA-512 over TLS.
    SaslSsl(Tls, String, String),
}

/// The broker's side of TLS: its key and certificate, one PEM file as
/// Kafka's PEM key store wants it, and the CA its clients trust.
#[derive(Debug, Clone)]
pub(super) struct Tls {
    key_and_cert: PathBuf,
    ca: PathBuf,
}

impl Tls {
    pub(super) fn from(certs: &Certs) -> Self {
        if !certs.cert(HOST).is_file() {
            certs.issue(&[HOST]);
        }
        let key = std::fs::read_to_string(certs.key(HOST)).expect("the broker's key");
        let cert = std::fs::read_to_string(certs.cert(HOST)).expect("the broker's certificate");
        let key_and_cert = certs.path("broker-keystore.pem");
        std::fs::write(&key_and_cert, key + &cert).expect("the broker's key store");
        Self {
            key_and_cert,
            ca: certs.ca(),
        }
    }

    /// The listener's `server.properties` lines.
    fn properties(&self, listener: &str) -> Vec<String> {
        let prefix = format!("listener.name.{listener}.");
        vec![
            format!("{prefix}ssl.keystore.type=PEM"),
            format!(
                "{prefix}ssl.keystore.location={}",
                self.key_and_cert.display()
            ),
            format!("{prefix}ssl.truststore.type=PEM"),
            format!("{prefix}ssl.truststore.location={}", self.ca.display()),
        ]
    }
}

impl Security {
    /// The client listener's `security.protocol`, if it is not plain text.
    pub(super) fn protocol(&self) -> Option<&'static str> {
        match self {
            Self::Plaintext => None,
            Self::SaslPlaintext(..) => Some("SASL_PLAINTEXT"),
            Self::Ssl(_) => Some("SSL"),
            Self::SaslSsl(..) => Some("SASL_SSL"),
        }
    }

    /// The SCRAM mechanism and its user, added when the log directory is
    /// formatted (the broker keeps SCRAM credentials in its metadata log).
    pub(super) fn scram(&self) -> Option<(&'static str, &str, &str)> {
        match self {
            Self::Plaintext | Self::Ssl(_) => None,
            Self::SaslPlaintext(user, password) => Some(("SCRAM-SHA-256", user, password)),
            Self::SaslSsl(_, user, password) => Some(("SCRAM-SHA-512", user, password)),
        }
    }

    /// The `server.properties` lines of the client listener `listener`.
    pub(super) fn listener_properties(&self, listener: &str) -> Vec<String> {
        let mut properties = Vec::new();
        if let Self::Ssl(tls) | Self::SaslSsl(tls, ..) = self {
            properties.extend(tls.properties(listener));
        }
        if let Some((mechanism, _, _)) = self.scram() {
            properties.extend([
                format!("sasl.enabled.mechanisms={mechanism}"),
                format!(
                    "listener.name.{listener}.{}.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;",
                    mechanism.to_lowercase()
                ),
            ]);
        }
        properties
    }

    /// What a client of the listener sets besides `bootstrap.servers`.
    pub(super) fn client(&self) -> Vec<(String, String)> {
        let mut client = Vec::new();
        if let Some(protocol) = self.protocol() {
            client.push(("security.protocol", protocol.to_string()));
        }
        if let Self::Ssl(tls) | Self::SaslSsl(tls, ..) = self {
            client.push(("ssl.ca.location", tls.ca.display().to_string()));
        }
        if let Some((mechanism, user, password)) = self.scram() {
            client.extend([
                ("sasl.mechanism", mechanism.to_string()),
                ("sasl.username", user.to_string()),
                ("sasl.password", password.to_string()),
            ]);
        }
        client
            .into_iter()
            .map(|(key, value)| (key.to_string(), value))
            .collect()
    }
}

/// The host the brokers' certificates are for: clients verify it.
pub const HOST: &str = "127.0.0.1";
