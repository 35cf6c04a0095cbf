//! How an entity type's source consumes: its settings, what is checked
//! before librdkafka would find it out in the middle of a rebalance, and
//! the properties the source sets itself.

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
    /// How often stored offsets are committed (and on revoke and shutdown).
    pub commit_interval: Duration,
    /// How long a rebalance callback waits for the service before going on.
    pub rebalance_timeout: Duration,
}

/// Why a source could not start.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    /// librdkafka refused the configuration or the subscription.
    #[error("kafka: {0}")]
    Kafka(#[from] rdkafka::error::KafkaError),
    /// A client property the source sets itself.
    #[error("client property {0:?} is set by colo and cannot be overridden")]
    OwnProperty(String),
    /// Nothing to consume.
    #[error("no topics to consume")]
    NoTopics,
    /// `max_in_flight` must be at least 1.
    #[error("max_in_flight must be at least 1")]
    NoInFlight,
    /// A rebalance callback may block for `rebalance_timeout`; the consumer
    /// does not poll meanwhile, and one that does not poll for
    /// `max.poll.interval.ms` is thrown out of the group in the middle of
    /// its hand-off.
    #[error("max.poll.interval.ms ({max_poll_interval:?}) must exceed the rebalance timeout ({rebalance_timeout:?}) by at least {margin:?}, or a hand-off inside the rebalance callback gets the node thrown out of the group")]
    PollInterval {
        max_poll_interval: Duration,
        rebalance_timeout: Duration,
        margin: Duration,
    },
    /// A client property that must be a number of milliseconds.
    #[error("client property {key:?} must be a number of milliseconds, not {value:?}")]
    Milliseconds { key: String, value: String },
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
        if self.max_in_flight == 0 {
            return Err(SourceError::NoInFlight);
        }
        for (key, _) in &self.client {
            if OWN_PROPERTIES.contains(&key.as_str()) {
                return Err(SourceError::OwnProperty(key.clone()));
            }
        }
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
        let mut config = crate::client::client_config(&self.client);
        config
            .set("bootstrap.servers", &self.bootstrap_servers)
            .set("group.id", &self.group_id)
            .set("partition.assignment.strategy", "cooperative-sticky")
            .set("enable.auto.offset.store", "false")
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
            commit_interval: Duration::from_secs(5),
            rebalance_timeout: Duration::from_secs(60),
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
    }
}
