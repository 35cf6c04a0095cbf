//! `[api]`, and how it goes with `[tls]` (the transport's `TlsSettings`):
//! who may reach a node, and how they prove it.
//!
//! One gRPC listener carries node-to-node traffic, the coordinator protocol
//! and the client API, so TLS is on for all three or for none: a cluster
//! cannot be half encrypted by mistake. The admin listener (metrics, health,
//! the cluster map) stays plain unless `tls.admin` is set, because
//! scrapers and probes expect it; nothing on it changes state.

use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use std::time::Duration;

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
    /// How long an entity keeps a client tell's idempotency key (24 h): a
    /// retry with it within this long is answered as applied and not
    /// applied again.
    #[serde(default = "day", with = "humantime_serde")]
    pub idempotency_retention: Duration,
    /// The most idempotency keys an entity keeps, the oldest dropped first.
    #[serde(default = "hundred")]
    pub idempotency_keys: usize,
}

impl Default for ApiSection {
    fn default() -> Self {
        Self {
            tokens_file: None,
            client_certificates: true,
            idempotency_retention: day(),
            idempotency_keys: hundred(),
        }
    }
}

fn day() -> Duration {
    Duration::from_secs(24 * 3600)
}

fn hundred() -> usize {
    100
}

fn yes() -> bool {
    true
}

#[cfg(test)]
mod tests {
    use crate::process::config::NodeConfig;
    use std::path::Path;

    const NODE: &str = "[node]\nlisten = \"127.0.0.1:7001\"\nadmin_listen = \"127.0.0.1:9001\"\n[coordinator]\naddress = \"127.0.0.1:7001\"\n";

    fn load(sets: &[&str]) -> Result<NodeConfig, String> {
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("colo.toml");
        std::fs::write(&path, NODE).expect("write");
        let sets: Vec<String> = sets.iter().map(|s| s.to_string()).collect();
        NodeConfig::load(Some(&path), Vec::new(), &sets).map_err(|e| e.to_string())
    }

    const TLS: [&str; 3] = [
        "tls.ca=/c/ca.pem",
        "tls.cert=/c/node.pem",
        "tls.key=/c/node.key",
    ];

    #[test]
    fn tls_and_tokens_parse_with_their_defaults() {
        let plain = load(&[]).unwrap();
        assert!(plain.tls.is_none());
        assert!(plain.api.client_certificates && plain.api.tokens_file.is_none());
        let mut sets = TLS.to_vec();
        sets.push("api.tokens_file=/c/tokens");
        let c = load(&sets).unwrap();
        let tls = c.tls.expect("[tls]");
        assert_eq!(tls.cert, Path::new("/c/node.pem"));
        assert!(!tls.admin);
        assert_eq!(tls.reload_interval, std::time::Duration::from_secs(10));
        assert_eq!(c.api.tokens_file.as_deref(), Some(Path::new("/c/tokens")));
    }

    #[test]
    fn tokens_without_tls_and_an_api_no_client_can_call_are_refused() {
        let error = load(&["api.tokens_file=/c/tokens"]).unwrap_err();
        assert!(error.contains("api.tokens_file: needs [tls]"), "{error}");
        let mut sets = TLS.to_vec();
        sets.push("api.client_certificates=false");
        let error = load(&sets).unwrap_err();
        assert!(
            error.contains("api.client_certificates: is false and api.tokens_file is not set"),
            "{error}"
        );
        let error = load(&["tls.ca=/c/ca.pem", "tls.cert=/c/node.pem"]).unwrap_err();
        assert!(
            error.contains("tls.key"),
            "a half-configured [tls]: {error}"
        );
    }

    #[test]
    fn the_examples_tls_and_api_sections_parse() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../colo.example.toml");
        let text = std::fs::read_to_string(path).expect("example");
        let start = text.find("#[tls]").expect("a [tls] section");
        let end = text.find("# [kafka]").expect("[kafka] after it");
        let sections: String = text[start..end]
            .lines()
            .filter(|line| !line.starts_with("##") && !line.starts_with("# "))
            .map(|line| line.strip_prefix('#').unwrap_or(line))
            .collect::<Vec<_>>()
            .join("\n");
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("colo.toml");
        std::fs::write(&path, format!("{NODE}{sections}\n")).expect("write");
        let c = NodeConfig::load(Some(&path), Vec::new(), &[]).expect("parses");
        assert!(c.tls.is_some() && c.api.tokens_file.is_some());
    }
}
