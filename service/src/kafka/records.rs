//! How a Kafka record becomes a message: the decoders a program passes
//! with its entity types. Pure functions of the record, tested on their own.

use colo_connectors::Record;
use serde::de::DeserializeOwned;
use std::sync::Arc;

/// How a record becomes a message: the entity id and the message, or why
/// the record cannot be one.
pub type RecordDecoder<M> = Arc<dyn Fn(&Record) -> Result<(String, M), String> + Send + Sync>;

/// The default decoder: the key is the entity id (UTF-8), the payload the
/// message as JSON.
pub fn json_records<M: DeserializeOwned + 'static>() -> RecordDecoder<M> {
    Arc::new(|record: &Record| {
        let key = record.key.as_deref().ok_or("the record has no key")?;
        let id = std::str::from_utf8(key).map_err(|_| "the key is not UTF-8".to_string())?;
        let payload = record
            .payload
            .as_deref()
            .ok_or("the record has no payload")?;
        let message = serde_json::from_slice(payload)
            .map_err(|e| format!("the payload is not a message: {e}"))?;
        Ok((id.to_string(), message))
    })
}
