//! Where a durable entity type's outputs go once the write that holds
//! them is durable: a sink the shards send each outbox to. The store and
//! the shards know only this trait; Kafka's idempotent producer is one
//! implementation of it (`kafka/outputs.rs`), as its topic is one of the
//! changelog.

use futures::future::BoxFuture;

/// One output to send.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OutputRecord<'a> {
    pub topic: &'a str,
    pub key: &'a [u8],
    pub value: &'a [u8],
    /// The handler's headers; the sink adds the id's.
    pub headers: &'a [(String, Vec<u8>)],
    /// Its deterministic id (see `crate::output`).
    pub id: &'a str,
}

impl<'a> From<&'a colo_state::Output> for OutputRecord<'a> {
    fn from(o: &'a colo_state::Output) -> Self {
        Self {
            topic: &o.topic,
            key: &o.key,
            value: &o.value,
            headers: &o.headers,
            id: &o.id,
        }
    }
}

/// Why outputs could not all be sent: the sink's own error, whose text
/// says which topic.
#[derive(Debug, thiserror::Error)]
#[error(transparent)]
pub struct OutputSendError(pub Box<dyn std::error::Error + Send + Sync>);

/// Where the outputs of a node's durable entity types are sent.
pub trait OutputSink: Send + Sync + 'static {
    /// Sends `records`; done once the destination has them all.
    ///
    /// # Errors
    /// A record was not taken within the sink's bound: the caller sends
    /// them all again (the id of each tells a reader the copies apart).
    fn send<'a>(
        &'a self,
        records: &'a [OutputRecord<'a>],
    ) -> BoxFuture<'a, Result<(), OutputSendError>>;
}
