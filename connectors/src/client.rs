//! What every Kafka client of colo starts from: the pass-through client
//! properties, and the one default a secured connection needs.

use rdkafka::config::ClientConfig;

/// Properties that say where a client finds the CA certificates it trusts.
const CA_PROPERTIES: [&str; 3] = ["ssl.ca.location", "ssl.ca.pem", "ssl.ca.certificate.stores"];

/// A client configuration holding `client`, the properties passed through
/// from the config.
///
/// With TLS (`security.protocol` SSL or SASL_SSL) and no CA named, it sets
/// `ssl.ca.location = "probe"`: the OpenSSL built into librdkafka from
/// source looks for CA certificates where its build put them
/// (`/usr/local/ssl`), which most systems lack, so the certificate of a
/// managed Kafka would not verify. `probe` makes librdkafka look in the
/// system's usual places (`/etc/ssl/certs/ca-certificates.crt`, ...).
pub(crate) fn client_config<'a>(
    client: impl IntoIterator<Item = &'a (String, String)>,
) -> ClientConfig {
    let mut config = ClientConfig::new();
    let mut tls = false;
    let mut ca_named = false;
    for (key, value) in client {
        config.set(key, value);
        if key == "security.protocol" {
            tls = matches!(
                value.trim().to_ascii_lowercase().as_str(),
                "ssl" | "sasl_ssl"
            );
        }
        ca_named |= CA_PROPERTIES.contains(&key.as_str());
    }
    if tls && !ca_named {
        config.set("ssl.ca.location", "probe");
    }
    config
}

/// The configuration of a client that is not a consumer (a producer or
/// an admin client) of the cluster at `bootstrap_servers`: the
/// pass-through properties without the consumers' own.
pub(crate) fn non_consumer_config(
    bootstrap_servers: &str,
    client: &[(String, String)],
) -> ClientConfig {
    let mut config = client_config(client.iter().filter(|(key, _)| !consumer_only(key)));
    config.set("bootstrap.servers", bootstrap_servers);
    config
}

/// Properties of consumers only, which the source's pass-through list may
/// hold and a producer (or an admin client) would warn about. `group.*`
/// covers both group protocols' (`group.protocol`, `group.instance.id`,
/// `group.remote.assignor`, `group.protocol.type`).
pub(crate) fn consumer_only(key: &str) -> bool {
    const KEYS: [&str; 8] = [
        "session.timeout.ms",
        "heartbeat.interval.ms",
        "max.poll.interval.ms",
        "auto.offset.reset",
        "isolation.level",
        "check.crcs",
        "enable.partition.eof",
        "partition.assignment.strategy",
    ];
    KEYS.contains(&key)
        || key.starts_with("group.")
        || key.starts_with("fetch.")
        || key.starts_with("queued.")
}

/// A librdkafka log line as tracing says it, at librdkafka's level: for
/// contexts that say some lines otherwise and the rest as librdkafka does.
pub(crate) fn log_at_its_level(level: rdkafka::config::RDKafkaLogLevel, fac: &str, message: &str) {
    use rdkafka::config::RDKafkaLogLevel::{Debug, Info, Notice, Warning};
    match level {
        Debug => tracing::debug!(target: "librdkafka", "librdkafka: {fac} {message}"),
        Info | Notice => tracing::info!(target: "librdkafka", "librdkafka: {fac} {message}"),
        Warning => tracing::warn!(target: "librdkafka", "librdkafka: {fac} {message}"),
        _ => tracing::error!(target: "librdkafka", "librdkafka: {fac} {message}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Managed Kafkas need TLS and SASL (SCRAM or PLAIN); producers compress
    /// with any of Kafka's codecs, and a consumer without the codec cannot
    /// read the batch at all.
    #[test]
    fn librdkafka_is_built_with_tls_sasl_and_every_compression_codec() {
        let (_, version) = rdkafka::util::get_rdkafka_version();
        let features = ClientConfig::new()
            .create_native_config()
            .expect("native config")
            .get("builtin.features")
            .expect("builtin.features");
        let features: Vec<&str> = features.split(',').collect();
        for wanted in [
            "ssl",
            "sasl_plain",
            "sasl_scram",
            "gzip",
            "snappy",
            "lz4",
            "zstd",
        ] {
            assert!(
                features.contains(&wanted),
                "librdkafka {version} lacks {wanted}: {features:?}"
            );
        }
        for mechanism in ["SCRAM-SHA-256", "SCRAM-SHA-512", "PLAIN"] {
            client_config(&props(&[
                ("security.protocol", "SASL_SSL"),
                ("sasl.mechanism", mechanism),
                ("sasl.username", "colo"),
                ("sasl.password", "secret"),
            ]))
            .create::<rdkafka::consumer::BaseConsumer>()
            .unwrap_or_else(|e| panic!("{mechanism}: {e}"));
        }
        for codec in ["none", "gzip", "snappy", "lz4", "zstd"] {
            client_config(&props(&[("compression.type", codec)]))
                .create::<rdkafka::producer::BaseProducer>()
                .unwrap_or_else(|e| panic!("{codec}: {e}"));
        }
    }

    fn props(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    /// A TLS client trusts the system's CA certificates unless told which
    /// to trust; librdkafka takes the probe (it is built with TLS).
    #[test]
    fn a_tls_client_looks_for_the_systems_ca_certificates_unless_told_where() {
        for protocol in ["SSL", "sasl_ssl"] {
            let config = client_config(&props(&[
                ("security.protocol", protocol),
                ("sasl.mechanism", "PLAIN"),
                ("sasl.username", "colo"),
                ("sasl.password", "secret"),
            ]));
            assert_eq!(config.get("ssl.ca.location"), Some("probe"), "{protocol}");
            config
                .create::<rdkafka::producer::BaseProducer>()
                .expect("librdkafka takes it");
        }
        let own = client_config(&props(&[
            ("security.protocol", "SSL"),
            ("ssl.ca.location", "/etc/kafka/ca.pem"),
        ]));
        assert_eq!(own.get("ssl.ca.location"), Some("/etc/kafka/ca.pem"));
        let pem = client_config(&props(&[
            ("security.protocol", "SASL_SSL"),
            ("ssl.ca.pem", "-----BEGIN CERTIFICATE-----"),
        ]));
        assert_eq!(pem.get("ssl.ca.location"), None);
        let plain = client_config(&props(&[("security.protocol", "SASL_PLAINTEXT")]));
        assert_eq!(plain.get("ssl.ca.location"), None);
        assert_eq!(client_config(&props(&[])).get("ssl.ca.location"), None);
    }
}
