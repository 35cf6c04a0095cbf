//! Which node a certificate speaks for: the hosts in its subject
//! alternative names. A node's name is its advertised `host:port`, and the
//! certificate must name that host, so a certificate issued to one node
//! cannot be used to act as another (on another host).

use rustls_pki_types::{CertificateDer, ServerName};

/// The host of `host:port` (an IPv6 host without its brackets).
pub fn host_of(address: &str) -> &str {
    let host = address
        .rsplit_once(':')
        .map_or(address, |(host, _port)| host);
    host.strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host)
}

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

#[cfg(test)]
mod tests {
    use super::host_of;

    #[test]
    fn the_host_of_an_address_drops_port_and_brackets() {
        assert_eq!(host_of("colo-1:7001"), "colo-1");
        assert_eq!(host_of("127.0.0.1:7001"), "127.0.0.1");
        assert_eq!(host_of("[::1]:7001"), "::1");
    }
}
