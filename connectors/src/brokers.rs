//! Whether the brokers take the node's credentials, asked once at startup:
//! librdkafka retries a refused SASL login for ever, and every client of the
//! node would wait in silence. A refusal is an error the operator sees at
//! once, with librdkafka's reason and never the secret.

use crate::client::non_consumer_config;
use parking_lot::Mutex;
use rdkafka::client::ClientContext;
use rdkafka::error::KafkaError;
use rdkafka::producer::{BaseProducer, Producer};
use rdkafka::types::RDKafkaErrorCode;
use std::time::{Duration, Instant};

/// Why the brokers could not be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BrokerError {
    /// The brokers refused the credentials (SASL) or the TLS handshake.
    #[error("the brokers at {bootstrap_servers} refused the node's credentials: {reason}")]
    Refused {
        /// As configured.
        bootstrap_servers: String,
        /// librdkafka's reason, secrets scrubbed.
        reason: String,
    },
    /// No broker answered within the time startup waits.
    #[error("the brokers at {bootstrap_servers} did not answer within {waited:?} (kafka.startup_timeout); last error: {last_error}")]
    Unreachable {
        /// As configured.
        bootstrap_servers: String,
        waited: Duration,
        /// librdkafka's, secrets scrubbed.
        last_error: String,
    },
    /// The client could not be created (a property librdkafka refuses).
    #[error("kafka client: {0}")]
    Client(String),
}

/// How a check ended without a refusal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reached {
    /// The brokers answered a metadata request.
    Answered,
    /// They did not answer within the time given (down, or not started
    /// yet); the node goes on and its clients keep trying. The last error
    /// librdkafka gave, if any.
    NoAnswer(Option<String>),
}

/// Records the errors librdkafka reports while the check runs.
#[derive(Default)]
struct Watch {
    refused: Mutex<Option<String>>,
    last: Mutex<Option<String>>,
}

impl ClientContext for Watch {
    fn error(&self, error: KafkaError, reason: &str) {
        let refused = matches!(
            error.rdkafka_error_code(),
            Some(RDKafkaErrorCode::Authentication | RDKafkaErrorCode::SSL)
        );
        if refused {
            self.refused
                .lock()
                .get_or_insert_with(|| reason.to_string());
        }
        *self.last.lock() = Some(reason.to_string());
    }
}

impl rdkafka::producer::ProducerContext for Watch {
    type DeliveryOpaque = ();

    fn delivery(&self, _: &rdkafka::message::DeliveryResult<'_>, _: ()) {}
}

/// Asks the brokers at `bootstrap_servers` for their metadata with the
/// pass-through `client` properties, for at most `within`. `secrets` are
/// scrubbed from any reason shown.
///
/// # Errors
/// The brokers refused the credentials or the TLS handshake, or the
/// properties do not make a client.
pub async fn check_brokers(
    bootstrap_servers: &str,
    client: &[(String, String)],
    secrets: &[String],
    within: Duration,
) -> Result<Reached, BrokerError> {
    let config = non_consumer_config(bootstrap_servers, client);
    let bootstrap = bootstrap_servers.to_string();
    let secrets = secrets.to_vec();
    let scrub = move |text: String| {
        secrets.iter().fold(text, |text, secret| {
            text.replace(secret.as_str(), "<redacted>")
        })
    };
    tokio::task::spawn_blocking(move || {
        // A producer: it sends nothing, and unlike a consumer without a
        // group its poll serves librdkafka's error callbacks.
        let producer: BaseProducer<Watch> = config
            .create_with_context(Watch::default())
            .map_err(|e| BrokerError::Client(scrub(e.to_string())))?;
        let watch = producer.context();
        let end = Instant::now() + within;
        loop {
            let answered = producer
                .client()
                .fetch_metadata(None, Duration::from_millis(500))
                .is_ok();
            producer.poll(Duration::ZERO);
            if let Some(reason) = watch.refused.lock().clone() {
                return Err(BrokerError::Refused {
                    bootstrap_servers: bootstrap,
                    reason: scrub(reason),
                });
            }
            if answered {
                return Ok(Reached::Answered);
            }
            if Instant::now() >= end {
                return Ok(Reached::NoAnswer(watch.last.lock().clone().map(&scrub)));
            }
        }
    })
    .await
    .map_err(|e| BrokerError::Client(e.to_string()))?
}
