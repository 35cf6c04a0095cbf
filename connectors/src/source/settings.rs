//! How an entity type's source consumes: its settings, what is checked
//! before librdkafka would find it out in the middle of a rebalance, and
//! the properties the source sets itself.

use crate::error::SourceError;
use rdkafka::config::ClientConfig;
use std::time::Duration;

/// The librdkafka properties the source sets itself: overriding them would
/// break its guarantees.
const OWN_PROPERTIES: [&str; 6] = [
    "bootstrap.servers",
    "group.id",
    "enable.auto.offset.store",
    "enable.auto.commit",
    "auto.commit.interval.ms",
    "partition.assignment.strategy",
];

/// How the source's consumer takes part in its group, from the client
/// property `group.protocol`. Both hand partitions over incrementally, which
/// the source's rebalance callbacks rely on: the classic protocol through
/// the cooperative-sticky assignor colo sets, the consumer protocol
/// (KIP-848) by its nature.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum GroupProtocol {
    /// The members assign partitions among themselves; librdkafka's default.
    Classic,
    /// KIP-848: the broker assigns partitions and sets the session and
    /// heartbeat timeouts itself.
    Consumer,
}

impl GroupProtocol {
    /// The protocol the client properties ask for. colo always sets it on
    /// the consumer, so a change of librdkafka's default (it means to move
    /// to `consumer`) does not change the protocol under a config.
    ///
    /// # Errors
    /// [`SourceError::GroupProtocol`] for another value.
    pub(crate) fn of(client: &[(String, String)]) -> Result<Self, SourceError> {
        match client.iter().rev().find(|(k, _)| k == "group.protocol") {
            None => Ok(Self::Classic),
            Some((_, value)) => match value.trim().to_ascii_lowercase().as_str() {
                "classic" => Ok(Self::Classic),
                "consumer" => Ok(Self::Consumer),
                _ => Err(SourceError::GroupProtocol(value.clone())),
            },
        }
    }

    /// The name librdkafka takes.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Self::Classic => "classic",
            Self::Consumer => "consumer",
        }
    }

    /// The client properties this protocol does not take, each with what
    /// to do instead. librdkafka refuses the consumer protocol's at
    /// creation with a message naming one; the classic protocol ignores
    /// `group.remote.assignor` silently, which would hide a mistake.
    fn refused(self) -> &'static [(&'static str, &'static str)] {
        match self {
            Self::Classic => &[(
                "group.remote.assignor",
                "the broker-side assignor exists only with group.protocol = \"consumer\"; the classic protocol uses colo's cooperative-sticky assignor",
            )],
            Self::Consumer => &[
                (
                    "session.timeout.ms",
                    "the broker sets it (group.consumer.session.timeout.ms)",
                ),
                (
                    "heartbeat.interval.ms",
                    "the broker sets it (group.consumer.heartbeat.interval.ms)",
                ),
                (
                    "group.protocol.type",
                    "it belongs to the classic protocol",
                ),
                (
                    "partition.assignment.strategy",
                    "the broker assigns; choose its assignor with group.remote.assignor",
                ),
            ],
        }
    }
}

/// How an entity type's source consumes.
#[derive(Debug, Clone)]
pub struct SourceSettings {
    pub bootstrap_servers: String,
    /// `<cluster>.<entity type>`.
    pub group_id: String,
    pub topics: Vec<String>,
    /// Further librdkafka properties, passed through (security, timeouts).
    pub client: Vec<(String, String)>,
    /// Records of one partition in the service's hands at most.
    pub max_in_flight: usize,
    /// Records of all the source's partitions in the service's hands at
    /// most.
    pub max_in_flight_total: usize,
    /// How often stored offsets are committed (and on revoke and shutdown).
    pub commit_interval: Duration,
    /// How long a rebalance callback waits for the service before going on.
    pub rebalance_timeout: Duration,
    /// How long a commit the source waits for (at a revoke, at shutdown)
    /// may take, retries included; librdkafka's own has no bound.
    pub commit_timeout: Duration,
    /// How long an assigned partition may make no progress while records
    /// wait (in the service's hands, held back, or not fetched) before it
    /// is reported stalled, at warn, naming its oldest offset.
    pub stall_timeout: Duration,
}

/// librdkafka's default `max.poll.interval.ms`.
const DEFAULT_MAX_POLL_INTERVAL: Duration = Duration::from_secs(300);
/// What the consumer needs besides the callback between two polls.
const POLL_MARGIN: Duration = Duration::from_secs(5);

impl SourceSettings {
    /// Checks what librdkafka would only find out in the middle of a
    /// rebalance.
    ///
    /// # Errors
    /// See [`SourceError`].
    pub fn validate(&self) -> Result<(), SourceError> {
        if self.topics.is_empty() {
            return Err(SourceError::NoTopics);
        }
        if self.max_in_flight == 0 || self.max_in_flight_total == 0 {
            return Err(SourceError::NoInFlight);
        }
        let protocol = GroupProtocol::of(&self.client)?;
        for (key, _) in &self.client {
            if let Some((_, instead)) = protocol.refused().iter().find(|(k, _)| k == key) {
                return Err(SourceError::ProtocolProperty {
                    key: key.clone(),
                    protocol: protocol.name(),
                    instead,
                });
            }
            if OWN_PROPERTIES.contains(&key.as_str()) {
                return Err(SourceError::OwnProperty(key.clone()));
            }
        }
        if let Some((_, level)) = self.client.iter().find(|(k, _)| k == "isolation.level") {
            if level.trim() != "read_committed" {
                return Err(SourceError::Isolation(level.clone()));
            }
        }
        // Under both protocols the member has this long to answer a
        // rebalance: the classic protocol throws out a member that does not
        // poll for it, and the consumer protocol sends it to the broker as
        // the member's rebalance timeout, within which a revoke must be
        // acknowledged.
        let max_poll_interval = match self
            .client
            .iter()
            .find(|(k, _)| k == "max.poll.interval.ms")
        {
            Some((key, value)) => Duration::from_millis(value.trim().parse().map_err(|_| {
                SourceError::Milliseconds {
                    key: key.clone(),
                    value: value.clone(),
                }
            })?),
            None => DEFAULT_MAX_POLL_INTERVAL,
        };
        if max_poll_interval < self.rebalance_timeout + POLL_MARGIN {
            return Err(SourceError::PollInterval {
                max_poll_interval,
                rebalance_timeout: self.rebalance_timeout,
                margin: POLL_MARGIN,
            });
        }
        Ok(())
    }
}

impl SourceSettings {
    /// The consumer's librdkafka configuration, once the settings are
    /// checked: the client properties, then those the source sets itself,
    /// then its defaults where the client properties set none.
    ///
    /// # Errors
    /// See [`SourceError`].
    pub(super) fn consumer_config(&self) -> Result<ClientConfig, SourceError> {
        self.validate()?;
        let protocol = GroupProtocol::of(&self.client)?;
        let mut config = crate::client::client_config(&self.client);
        config.set("group.protocol", protocol.name());
        if protocol == GroupProtocol::Classic {
            config.set("partition.assignment.strategy", "cooperative-sticky");
            if !self
                .client
                .iter()
                .any(|(k, _)| k == "heartbeat.interval.ms")
            {
                config.set("heartbeat.interval.ms", CLASSIC_HEARTBEAT_MS);
            }
        }
        config
            .set("bootstrap.servers", &self.bootstrap_servers)
            .set("group.id", &self.group_id)
            .set("enable.auto.offset.store", "false")
            // librdkafka's default, set so that a change of it does not
            // change what colo handles: a transactional producer's records
            // once their transaction commits, never if it aborts.
            .set("isolation.level", "read_committed")
            // librdkafka commits what was stored every commit_interval, and
            // when partitions are unassigned; the source commits itself,
            // and waits, at every revoke and at shutdown.
            .set("enable.auto.commit", "true")
            .set(
                "auto.commit.interval.ms",
                self.commit_interval
                    .as_millis()
                    .clamp(1, i32::MAX as u128)
                    .to_string(),
            );
        for (key, value) in DEFAULT_PROPERTIES {
            if !self.client.iter().any(|(k, _)| k == key) {
                config.set(key, value);
            }
        }
        Ok(config)
    }
}

/// librdkafka's `fetch.queue.backoff.ms` unless the client properties set
/// it.
pub const FETCH_QUEUE_BACKOFF_MS: &str = "10";

/// librdkafka's `heartbeat.interval.ms` with the classic protocol unless
/// the client properties set it. A member learns of a rebalance at its
/// next heartbeat, and a cooperative join takes two rounds: with
/// librdkafka's 3 s, a joining node waited about 6 s for its shards, and
/// a partition revoked in the first round paused until the joiner's next
/// heartbeat. Under KIP-848 the broker sets the interval.
pub const CLASSIC_HEARTBEAT_MS: &str = "500";

/// librdkafka properties the source sets unless the client properties do:
/// - `statistics.interval.ms`: the partitions' ends, for the lag;
/// - `auto.offset.reset`: a group without commits reads from the start;
/// - `fetch.queue.backoff.ms`: librdkafka stops fetching for this long
///   once its local queue is past its thresholds; its 1 s default leaves
///   the poll thread idle after it drained the queue in a fraction of that.
pub(super) const DEFAULT_PROPERTIES: [(&str, &str); 3] = [
    ("statistics.interval.ms", "1000"),
    ("auto.offset.reset", "earliest"),
    ("fetch.queue.backoff.ms", FETCH_QUEUE_BACKOFF_MS),
];

#[cfg(test)]
mod tests {
    use super::*;

    fn settings() -> SourceSettings {
        SourceSettings {
            bootstrap_servers: "127.0.0.1:9092".into(),
            group_id: "c.t".into(),
            topics: vec!["t".into()],
            client: vec![],
            max_in_flight: 10,
            max_in_flight_total: 100,
            commit_interval: Duration::from_secs(5),
            rebalance_timeout: Duration::from_secs(60),
            commit_timeout: Duration::from_secs(10),
            stall_timeout: Duration::from_secs(10),
        }
    }

    #[test]
    fn the_poll_interval_must_outlast_a_blocking_rebalance_callback() {
        assert!(settings().validate().is_ok(), "librdkafka's 300 s default");
        let mut short = settings();
        short.client = vec![("max.poll.interval.ms".into(), "30000".into())];
        let error = short.validate().unwrap_err().to_string();
        assert!(
            error.contains("max.poll.interval.ms") && error.contains("60s"),
            "{error}"
        );
        let mut garbled = settings();
        garbled.client = vec![("max.poll.interval.ms".into(), "5 minutes".into())];
        assert!(garbled
            .validate()
            .unwrap_err()
            .to_string()
            .contains("5 minutes"));
    }

    #[test]
    fn properties_the_source_relies_on_cannot_be_overridden() {
        let mut s = settings();
        s.client = vec![("enable.auto.offset.store".into(), "true".into())];
        assert!(
            matches!(s.validate(), Err(SourceError::OwnProperty(k)) if k == "enable.auto.offset.store")
        );
        let mut s = settings();
        s.topics.clear();
        assert!(matches!(s.validate(), Err(SourceError::NoTopics)));
        let mut s = settings();
        s.max_in_flight = 0;
        assert!(matches!(s.validate(), Err(SourceError::NoInFlight)));
        let mut s = settings();
        s.max_in_flight_total = 0;
        assert!(matches!(s.validate(), Err(SourceError::NoInFlight)));
    }

    /// A joining node takes its partitions within a heartbeat or two, not
    /// librdkafka's 3 s each; a member's own choice stands.
    #[test]
    fn classic_members_heartbeat_often_unless_told_otherwise() {
        let config = settings().consumer_config().expect("config");
        assert_eq!(
            config.get("heartbeat.interval.ms"),
            Some(CLASSIC_HEARTBEAT_MS)
        );
        let own = with_client(&[("heartbeat.interval.ms", "3000")]);
        let config = own.consumer_config().expect("config");
        assert_eq!(config.get("heartbeat.interval.ms"), Some("3000"));
        let broker_set = with_client(&[("group.protocol", "consumer")]);
        let config = broker_set.consumer_config().expect("config");
        assert_eq!(config.get("heartbeat.interval.ms"), None);
    }

    /// Records of aborted transactions are never handled: colo reads
    /// committed records only, and refuses a config that would not.
    #[test]
    fn only_committed_records_are_read() {
        let config = settings().consumer_config().expect("config");
        assert_eq!(config.get("isolation.level"), Some("read_committed"));
        let explicit = with_client(&[("isolation.level", "read_committed")]);
        assert!(explicit.consumer_config().is_ok());
        let error = with_client(&[("isolation.level", "read_uncommitted")])
            .validate()
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("isolation.level")
                && error.contains("read_uncommitted")
                && error.contains("abort"),
            "{error}"
        );
    }

    fn with_client(client: &[(&str, &str)]) -> SourceSettings {
        SourceSettings {
            client: client
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            ..settings()
        }
    }

    /// librdkafka checks a consumer's configuration when it is created.
    fn created(config: &ClientConfig) -> Result<(), rdkafka::error::KafkaError> {
        config.create::<rdkafka::consumer::BaseConsumer>().map(drop)
    }

    #[test]
    fn the_classic_protocol_is_set_with_the_cooperative_assignor_whatever_librdkafkas_default() {
        let config = settings().consumer_config().expect("config");
        assert_eq!(config.get("group.protocol"), Some("classic"));
        assert_eq!(
            config.get("partition.assignment.strategy"),
            Some("cooperative-sticky")
        );
        created(&config).expect("librdkafka takes it");
        let explicit = with_client(&[("group.protocol", "classic")])
            .consumer_config()
            .expect("config");
        assert_eq!(explicit.get("group.protocol"), Some("classic"));
        created(&explicit).expect("librdkafka takes it");
    }

    #[test]
    fn the_consumer_protocol_gets_only_the_properties_it_takes() {
        let config = with_client(&[
            ("group.protocol", "consumer"),
            ("group.remote.assignor", "uniform"),
            ("max.poll.interval.ms", "300000"),
        ])
        .consumer_config()
        .expect("config");
        assert_eq!(config.get("group.protocol"), Some("consumer"));
        assert_eq!(config.get("partition.assignment.strategy"), None);
        assert_eq!(config.get("group.remote.assignor"), Some("uniform"));
        created(&config).expect("librdkafka takes it");
    }

    #[test]
    fn a_property_the_consumer_protocol_refuses_stops_the_start_naming_it() {
        let accepted = with_client(&[("group.protocol", "consumer")])
            .consumer_config()
            .expect("config");
        for key in [
            "session.timeout.ms",
            "heartbeat.interval.ms",
            "group.protocol.type",
            "partition.assignment.strategy",
        ] {
            let value = match key {
                "group.protocol.type" => "consumer",
                "partition.assignment.strategy" => "cooperative-sticky",
                _ => "10000",
            };
            // librdkafka refuses each of them too, at creation...
            let mut raw = accepted.clone();
            raw.set(key, value);
            let refused = created(&raw).expect_err(key).to_string();
            assert!(refused.contains(key), "{refused}");
            // ...and the source says so before, naming the property and
            // what to do instead.
            let error = with_client(&[("group.protocol", "consumer"), (key, value)])
                .validate()
                .expect_err(key)
                .to_string();
            assert!(
                error.contains(&format!("{key:?}"))
                    && error.contains("group.protocol = \"consumer\""),
                "{error}"
            );
        }
        let heartbeat = with_client(&[
            ("group.protocol", "consumer"),
            ("heartbeat.interval.ms", "500"),
        ])
        .validate()
        .expect_err("broker side")
        .to_string();
        assert!(
            heartbeat.contains("group.consumer.heartbeat.interval.ms"),
            "{heartbeat}"
        );
    }

    #[test]
    fn the_protocol_must_be_one_librdkafka_has_and_fit_its_properties() {
        let error = with_client(&[("group.protocol", "kip848")])
            .validate()
            .expect_err("no such protocol")
            .to_string();
        assert!(
            error.contains("group.protocol") && error.contains("kip848"),
            "{error}"
        );
        let error = with_client(&[("group.remote.assignor", "uniform")])
            .validate()
            .expect_err("classic has no broker-side assignor")
            .to_string();
        assert!(error.contains("\"group.remote.assignor\""), "{error}");
        let error = with_client(&[("partition.assignment.strategy", "range")])
            .validate()
            .expect_err("colo's assignor")
            .to_string();
        assert!(error.contains("set by colo"), "{error}");
        assert_eq!(
            GroupProtocol::of(&[("group.protocol".into(), " Consumer ".into())]).ok(),
            Some(GroupProtocol::Consumer)
        );
    }

    #[test]
    fn the_consumer_protocols_rebalance_timeout_must_outlast_a_blocking_rebalance_callback() {
        let error = with_client(&[
            ("group.protocol", "consumer"),
            ("max.poll.interval.ms", "30000"),
        ])
        .validate()
        .expect_err("a 60 s rebalance timeout")
        .to_string();
        assert!(error.contains("max.poll.interval.ms"), "{error}");
    }
}
