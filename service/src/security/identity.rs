//! Which node a certificate speaks for: the hosts in its subject
//! alternative names. A node's name is its advertised `host:port`, and the
//! certificate must name that host, so a certificate issued to one node
//! cannot be used to act as another (on another host).

use super::connection::{ConnectionInfo, Encryption};
use rustls_pki_types::{CertificateDer, ServerName};

/// Whether `certificate` names `host` (a DNS name or an IP address) in its
/// subject alternative names.
pub fn names(certificate: &CertificateDer<'_>, host: &str) -> bool {
    let Ok(name) = ServerName::try_from(host) else {
        return false;
    };
    webpki::EndEntityCert::try_from(certificate)
        .and_then(|cert| cert.verify_is_valid_for_subject_name(&name))
        .is_ok()
}

/// Checks that the other end of a connection may speak as the node
/// `claimed` (`host:port`): over TLS its certificate must name the host;
/// over plain text (no `[tls]`) nothing is checked.
///
/// # Errors
/// `PERMISSION_DENIED`, saying why, when the certificate names another host
/// or there is none.
pub fn check_node(info: Option<&ConnectionInfo>, claimed: &str) -> Result<(), tonic::Status> {
    let Some(info) = info.filter(|info| matches!(info.encryption, Encryption::Tls(_))) else {
        return Ok(());
    };
    let host = super::credentials::host_of(claimed);
    match info.certificate() {
        Some(certificate) if names(certificate, host) => Ok(()),
        Some(_) => {
            tracing::warn!(remote = ?info.remote, claimed, "refused a node whose certificate does not name the host it claims");
            Err(tonic::Status::permission_denied(format!(
                "the client certificate does not name {host}, the host of the node {claimed} it claims to be"
            )))
        }
        None => Err(tonic::Status::unauthenticated(
            "a node must present its certificate",
        )),
    }
}
