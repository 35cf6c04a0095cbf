//! How a Kafka record becomes a message: the decoders a program passes
//! with its entity types. Pure functions of the record, tested on their own.
//!
//! [`json_records`] reads the payload as the entity's message itself;
//! [`json_events`] reads it as an event type of its own and maps it to a
//! message, because a topic carries facts (`{"celsius": 21.5}`) while an
//! entity's messages usually also include queries no producer writes.

pub use colo_connectors::{Ack, Record};
use serde::de::DeserializeOwned;
use std::marker::PhantomData;
use std::sync::Arc;

/// How a record becomes a message: the entity id and the message, or why
/// the record cannot be one (the reason goes to the dead-letter topic).
/// (The ingest's decoder, for Kafka's records.)
pub type RecordDecoder<M> = crate::ingest::Decoder<Record, M>;

/// The default decoder: the key is the entity id (UTF-8, not empty), the
/// payload the message as JSON.
pub fn json_records<M: DeserializeOwned + 'static>() -> RecordDecoder<M> {
    Arc::new(|record: &Record| {
        let id = key_id(record)?;
        let message = decode_json::<M>(payload(record)?)
            .map_err(|e| format!("the payload is not a {}: {e}", short_type_name::<M>()))?;
        Ok((id, message))
    })
}

/// A decoder of records whose payload is a JSON event of type `V`, mapped
/// to the entity's message with [`JsonEvents::into_messages`]. The entity
/// id is the record's key unless [`JsonEvents::id_from_event`] says
/// otherwise.
///
/// ```
/// use colo::kafka::{json_events, Ack, Record};
/// use serde::Deserialize;
///
/// #[derive(Deserialize)]
/// struct Reading { celsius: f64 }
/// enum ThermometerMsg { Reading(Reading), Average }
///
/// let decode = json_events::<Reading>().into_messages(ThermometerMsg::Reading);
/// let record = Record {
///     topic: "readings".into(), partition: 0, offset: 0, timestamp: None,
///     key: Some(b"sensor-1".to_vec()),
///     payload: Some(br#"{"celsius": 21.5}"#.to_vec()),
///     ack: Ack::detached(),
/// };
/// let (id, message) = decode(&record).unwrap();
/// assert_eq!(id, "sensor-1");
/// assert!(matches!(message, ThermometerMsg::Reading(Reading { celsius: 21.5 })));
/// ```
pub fn json_events<V: DeserializeOwned + 'static>() -> JsonEvents<V> {
    JsonEvents {
        id: EventId::Key,
        event: PhantomData,
    }
}

/// A decoder of JSON events being put together: see [`json_events`].
pub struct JsonEvents<V> {
    id: EventId<V>,
    event: PhantomData<fn() -> V>,
}

/// Where an event's entity id comes from.
enum EventId<V> {
    Key,
    Event(Arc<dyn Fn(&V) -> String + Send + Sync>),
}

impl<V> std::fmt::Debug for JsonEvents<V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let id = match self.id {
            EventId::Key => "the record's key",
            EventId::Event(_) => "the event",
        };
        f.debug_struct("JsonEvents")
            .field("event", &short_type_name::<V>())
            .field("id_from", &id)
            .finish()
    }
}

impl<V: DeserializeOwned + 'static> JsonEvents<V> {
    /// The entity id is the record's key, as UTF-8 (the default). The key
    /// also decides the record's partition, so the record is handled on the
    /// node that consumed it.
    pub fn id_from_key(mut self) -> Self {
        self.id = EventId::Key;
        self
    }

    /// The entity id is read from the decoded event, for topics whose key
    /// is something else (or absent). Such a record is still handled, but
    /// when its key's partition is not the entity's shard it is forwarded to
    /// the shard's node, and counted and warned about as a partitioner
    /// mismatch: key the records by the same id where you can.
    pub fn id_from_event(mut self, id: impl Fn(&V) -> String + Send + Sync + 'static) -> Self {
        self.id = EventId::Event(Arc::new(id));
        self
    }

    /// The decoder: each record's payload decoded as a `V` and turned into
    /// the entity's message by `message`. A record is refused, with the
    /// reason, when its payload is missing or not a `V`, or when its entity
    /// id is missing, not UTF-8 or empty (an entity needs an id).
    pub fn into_messages<M: 'static>(
        self,
        message: impl Fn(V) -> M + Send + Sync + 'static,
    ) -> RecordDecoder<M> {
        let event_type = short_type_name::<V>();
        let id = self.id;
        Arc::new(move |record: &Record| {
            let event: V = decode_json(payload(record)?)
                .map_err(|e| format!("the payload is not a {event_type}: {e}"))?;
            let id = match &id {
                EventId::Key => key_id(record)?,
                EventId::Event(id_of) => {
                    let id = id_of(&event);
                    if id.is_empty() {
                        return Err(format!(
                            "the {event_type}'s entity id is empty: an entity needs an id"
                        ));
                    }
                    id
                }
            };
            Ok((id, message(event)))
        })
    }
}

/// The record's key as an entity id.
fn key_id(record: &Record) -> Result<String, String> {
    let key = record
        .key
        .as_deref()
        .ok_or("the record has no key (the entity id)")?;
    if key.is_empty() {
        return Err("the record's key is empty: it must be the entity id".to_string());
    }
    let id = std::str::from_utf8(key).map_err(|_| "the key is not UTF-8".to_string())?;
    Ok(id.to_string())
}

/// `bytes` as JSON of type `V`, or why not, naming where in the document
/// it failed (`at items[2].price: ...`): serde's own message names only
/// what it expected there, which for a payload of many fields does not
/// tell a person which one to fix.
fn decode_json<V: DeserializeOwned>(bytes: &[u8]) -> Result<V, String> {
    let mut json = serde_json::Deserializer::from_slice(bytes);
    let value: V = serde_path_to_error::deserialize(&mut json).map_err(|e| {
        let path = e.path().to_string();
        // serde_json's message ends with the line and column; the path,
        // when there is one, says more.
        let inner = e.into_inner();
        let position = format!("line {}, column {}", inner.line(), inner.column());
        let reason = inner.to_string();
        let reason = reason
            .rsplit_once(" at line ")
            .map_or(reason.as_str(), |(reason, _)| reason);
        if path == "." || path.is_empty() {
            format!("{reason} ({position})")
        } else {
            format!("at {path}: {reason} ({position})")
        }
    })?;
    json.end()
        .map_err(|e| format!("trailing characters after the JSON value ({e})"))?;
    Ok(value)
}

fn payload(record: &Record) -> Result<&[u8], String> {
    record
        .payload
        .as_deref()
        .ok_or_else(|| "the record has no payload".to_string())
}

/// `V`'s name without its module paths (`Reading`, `Vec<Reading>`): what a
/// person reading a dead-letter reason knows the type as.
fn short_type_name<V>() -> String {
    let full = std::any::type_name::<V>();
    let mut short = String::with_capacity(full.len());
    // Where the path being read started in `short`: a `::` drops it.
    let mut path_start = 0;
    let mut chars = full.chars().peekable();
    while let Some(c) = chars.next() {
        if c == ':' && chars.peek() == Some(&':') {
            chars.next();
            short.truncate(path_start);
        } else {
            short.push(c);
            if !(c.is_alphanumeric() || c == '_') {
                path_start = short.len();
            }
        }
    }
    short
}

/// Kafka as a source of the ingest: its records and acks, the gate a
/// partition flows through once its shard is hosted, the rewind to its
/// committed offset, and the dead-letter topic.
#[derive(Debug)]
pub(crate) struct Kafka;

impl crate::ingest::Source for Kafka {
    type Settings = colo_connectors::SourceSettings;
    type Record = Record;
    type Ack = Ack;
    type Gate = colo_connectors::Gate;
    type Rewind = colo_connectors::Rewind;
    type DeadLetters = colo_connectors::DeadLetters;

    fn into_ack(record: Record) -> Ack {
        record.ack
    }

    fn open(gate: colo_connectors::Gate) {
        gate.open();
    }

    fn rewind(rewind: &colo_connectors::Rewind) {
        rewind.rewind();
    }

    async fn dead_letter(
        dead_letters: &colo_connectors::DeadLetters,
        record: &Record,
        reason: &str,
    ) -> Result<(), String> {
        dead_letters
            .send(record, reason)
            .await
            .map_err(|e| e.to_string())
    }

    fn dead_letter_topic(dead_letters: &colo_connectors::DeadLetters) -> &str {
        dead_letters.topic()
    }
}

impl crate::ingest::SourceRecord for Record {
    fn offset(&self) -> i64 {
        self.offset
    }

    fn timestamp(&self) -> Option<i64> {
        self.timestamp
    }
}

/// A dropped ack reports its record not handled: it is consumed again.
impl crate::ingest::SourceAck for Ack {
    fn offset(&self) -> i64 {
        Ack::offset(self)
    }

    fn applied(&mut self) {
        Ack::applied(self);
    }

    fn handled(self) {
        Ack::handled(self);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(payload: &[u8]) -> Record {
        Record {
            topic: "stock".into(),
            partition: 0,
            offset: 0,
            timestamp: None,
            key: Some(b"sku-1".to_vec()),
            payload: Some(payload.to_vec()),
            ack: Ack::detached(),
        }
    }

    #[derive(Debug, serde::Deserialize)]
    #[allow(dead_code)] // read only by Debug
    struct StockEvent {
        sku: String,
        delta: i64,
        lines: Vec<Line>,
    }

    #[derive(Debug, serde::Deserialize)]
    #[allow(dead_code)] // read only by Debug
    struct Line {
        price: u64,
    }

    fn refusal(payload: &[u8]) -> String {
        let decode = json_events::<StockEvent>().into_messages(|event| event);
        match decode(&record(payload)) {
            Ok(decoded) => panic!("decoded {decoded:?}"),
            Err(reason) => reason,
        }
    }

    /// A dead letter's reason tells the person reading it what the record
    /// should have been and which part of it was wrong.
    #[test]
    fn a_refused_payload_names_the_event_type_and_where_it_failed() {
        assert_eq!(
            refusal(b"[1,2,3]"),
            "the payload is not a StockEvent: at [0]: invalid type: integer `1`, expected a string (line 1, column 2)"
        );
        assert_eq!(
            refusal(br#"{"sku": "a", "delta": 1, "lines": [{"price": 1}, {"price": -2}]}"#),
            "the payload is not a StockEvent: at lines[1].price: invalid value: integer `-2`, expected u64 (line 1, column 61)"
        );
        assert_eq!(
            refusal(br#"{"sku": "a"}"#),
            "the payload is not a StockEvent: missing field `delta` (line 1, column 12)"
        );
        assert_eq!(
            refusal(br#"{"sku": "a", "delta": 1, "lines": []} x"#),
            "the payload is not a StockEvent: trailing characters after the JSON value (trailing characters at line 1 column 39)"
        );
        let decode = json_records::<StockEvent>();
        let reason = decode(&record(b"{\"sku\": 5}")).expect_err("refused");
        assert_eq!(
            reason,
            "the payload is not a StockEvent: at sku: invalid type: integer `5`, expected a string (line 1, column 9)"
        );
    }

    /// README's example of a dead letter's reason.
    #[test]
    fn readmes_refused_reading_reads_as_shown() {
        #[derive(Debug, serde::Deserialize)]
        #[allow(dead_code)] // read only by Debug
        struct Reading {
            celsius: f64,
        }
        let decode = json_events::<Reading>().into_messages(|reading| reading);
        let reason = decode(&record(br#"{"celsius": "warm"}"#)).expect_err("refused");
        let readme = include_str!("../../../README.md").replace('\n', " ");
        assert!(readme.contains(&format!("(`{reason}`)")), "{reason}");
    }

    #[test]
    fn type_names_lose_their_module_paths() {
        assert_eq!(short_type_name::<String>(), "String");
        assert_eq!(
            short_type_name::<Vec<std::time::Duration>>(),
            "Vec<Duration>"
        );
        assert_eq!(
            short_type_name::<(u8, std::collections::BTreeMap<String, u8>)>(),
            "(u8, BTreeMap<String, u8>)"
        );
    }
}
