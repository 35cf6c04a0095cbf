//! What colo stores for one entity, in the local store and in its
//! changelog record alike: the entity's encoded state with what makes it
//! safe to restore and to replay against.
//!
//! - `epoch`: the start of the shard that wrote it. Epochs grow across the
//!   cluster with each start of a shard, so a restore can ignore what a node
//!   that had lost the shard wrote after a newer owner began.
//! - `version`: the entity type's state version when it was written, so a
//!   state that no longer decodes is named with its version, never reset.
//! - `applied`: per source, the offset of the last record applied to this
//!   entity: a record at or below it was applied already and is skipped.
//!   That makes replay after a crash harmless without Kafka transactions.
//!   A source is a topic, for the records in the entity's shard's
//!   partition of it, or `topic/partition` for those a producer with
//!   another partitioner put in another partition (offsets grow within a
//!   partition only; `/` is never in a topic's name).
//!
//! - `earlier`: the earlier starts' keys that may still hold a record of
//!   the entity in its changelog (each start writes under a key of its
//!   own, and retires the one before only once its own record is durable:
//!   a start stopped in between leaves that key behind). A deletion's
//!   tombstones cover them all: a record left under one of them would
//!   otherwise be all that compaction leaves of the entity.
//!
//! - `keys`: the idempotency keys of the client tells it applied, each with
//!   when it was applied (milliseconds since the Unix epoch): a tell
//!   retried with one of them is answered as applied and not applied
//!   again, on whichever node the entity runs next. Kept with the state
//!   so that they are exactly as durable as the change they guard.
//!
//! - `timers`: the entity's durable timers, each with its name, when it is
//!   due (milliseconds since the Unix epoch) and the message it brings.
//!   Kept with the state so that scheduling, cancelling and firing one is
//!   written with the change that made it, and moves and restores with it.
//!
//! - `outbox`: the records the entity emitted and that are not known to
//!   be sent yet, each with its deterministic id. Kept with the state so
//!   that what a message emits is durable exactly when the change it made
//!   is: sent after the write, by whichever node holds the record then,
//!   and dropped from the record once sent.
//!
//! The first byte is the record format, so that a later colo can read what
//! this one wrote: format 1 without `earlier`, format 2 with it after the
//! rest (written only when there are any), format 3 with `earlier` (empty
//! or not) and then `keys` (written only when there are keys), format 4
//! with `earlier`, `keys` and then `timers` (written only when there are
//! timers), format 5 with all of those and then `outbox` (written only
//! when there is an output in it).

use serde::{Deserialize, Serialize};

/// The record format this colo writes when no earlier key is named.
const FORMAT: u8 = 1;

/// The record format that names earlier keys after the rest.
const FORMAT_EARLIER: u8 = 2;

/// The record format with earlier keys and then idempotency keys.
const FORMAT_KEYS: u8 = 3;

/// The record format with earlier keys, idempotency keys and timers.
const FORMAT_TIMERS: u8 = 4;

/// The record format with earlier keys, idempotency keys, timers and an
/// outbox.
const FORMAT_OUTBOX: u8 = 5;

/// A record an entity emitted, kept in its outbox until it is sent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Output {
    /// Deterministic: the same message handled again emits the same ids,
    /// so a reader drops a record sent twice by its id.
    pub id: String,
    pub topic: String,
    pub key: Vec<u8>,
    pub value: Vec<u8>,
    pub headers: Vec<(String, Vec<u8>)>,
}

/// One of an entity's durable timers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Timer {
    /// Its name, unique among the entity's timers.
    pub name: String,
    /// When it is due, in milliseconds since the Unix epoch.
    pub due: u64,
    /// The message it brings its entity, as the entity type encodes it.
    pub message: Vec<u8>,
}

/// What a record carries beside its state and offsets, borrowed from where
/// the runtime keeps it.
#[derive(Debug, Clone, Copy)]
pub struct Beside<'a, K: AsRef<str>> {
    /// Earlier starts' keys (see the module's doc).
    pub earlier: &'a [u64],
    /// Idempotency keys, each with when it was applied.
    pub keys: &'a [(K, u64)],
    pub timers: &'a [Timer],
    /// Emitted records not known to be sent yet.
    pub outbox: &'a [Output],
}

impl Beside<'_, &'static str> {
    /// Nothing beside.
    pub const NOTHING: Self = Beside {
        earlier: &[],
        keys: &[],
        timers: &[],
        outbox: &[],
    };
}
/// One entity's stored state.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StateRecord {
    pub epoch: u64,
    pub version: u32,
    /// (source, offset of the last record of that source applied), by
    /// source: a topic, or `topic/partition` (see the module's doc).
    pub applied: Vec<(String, u64)>,
    /// The state as the entity type encodes it; `None`: the entity deleted
    /// itself. A deletion is a record, not an absence, so that it keeps the
    /// applied offsets: a record replayed from before the deletion is
    /// still known as applied.
    #[serde(deserialize_with = "state_bytes::deserialize")]
    pub state: Option<Vec<u8>>,
    /// The earlier starts whose keys may still hold a record of the entity
    /// (see the module's doc).
    #[serde(skip)]
    pub earlier: Vec<u64>,
    /// The idempotency keys of the tells it applied, with when (see the
    /// module's doc).
    #[serde(skip)]
    pub keys: Vec<(String, u64)>,
    /// Its durable timers (see the module's doc).
    #[serde(skip)]
    pub timers: Vec<Timer>,
    /// Its emitted records not known to be sent yet (see the module's
    /// doc).
    #[serde(skip)]
    pub outbox: Vec<Output>,
}

/// The same record, borrowed: what the runtime encodes without copying the
/// offsets it keeps per entity, whatever string type names their topics
/// (postcard writes both alike).
#[derive(Serialize)]
struct RecordRef<'a, T: AsRef<str>> {
    epoch: u64,
    version: u32,
    #[serde(serialize_with = "topics_as_str")]
    applied: &'a [(T, u64)],
    #[serde(serialize_with = "state_bytes::serialize")]
    state: Option<&'a [u8]>,
}

/// The state as bytes rather than as a sequence of `u8`, which serde would
/// make of a byte slice otherwise: postcard writes both alike (a length,
/// then the bytes), and reads one as the other, but a sequence is written
/// and read a byte at a time (a state is encoded at every message).
mod state_bytes {
    use serde::de::{Deserializer, Error, SeqAccess, Visitor};
    use serde::ser::Serializer;

    pub(super) fn serialize<S: Serializer>(
        state: &Option<&[u8]>,
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        match state {
            Some(bytes) => serializer.serialize_some(&Bytes(bytes)),
            None => serializer.serialize_none(),
        }
    }

    struct Bytes<'a>(&'a [u8]);

    impl serde::Serialize for Bytes<'_> {
        fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
            serializer.serialize_bytes(self.0)
        }
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<Option<Vec<u8>>, D::Error> {
        deserializer.deserialize_option(OptionalBytes)
    }

    struct OptionalBytes;

    impl<'de> Visitor<'de> for OptionalBytes {
        type Value = Option<Vec<u8>>;

        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("an entity's state, or none")
        }

        fn visit_none<E: Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }

        fn visit_some<D: Deserializer<'de>>(
            self,
            deserializer: D,
        ) -> Result<Self::Value, D::Error> {
            deserializer.deserialize_bytes(StateBytes).map(Some)
        }
    }

    struct StateBytes;

    impl<'de> Visitor<'de> for StateBytes {
        type Value = Vec<u8>;

        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("an entity's state")
        }

        fn visit_bytes<E: Error>(self, bytes: &[u8]) -> Result<Self::Value, E> {
            Ok(bytes.to_vec())
        }

        fn visit_byte_buf<E: Error>(self, bytes: Vec<u8>) -> Result<Self::Value, E> {
            Ok(bytes)
        }

        /// A format that writes bytes as a sequence.
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
            // A length read off a damaged record allocates no more than this.
            let mut bytes = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(4096));
            while let Some(byte) = seq.next_element()? {
                bytes.push(byte);
            }
            Ok(bytes)
        }
    }
}

/// Idempotency keys, whatever string type holds them (postcard writes
/// them as a `Vec<(String, u64)>` reads them).
struct KeysRef<'a, K: AsRef<str>>(&'a [(K, u64)]);

impl<K: AsRef<str>> Serialize for KeysRef<'_, K> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(self.0.iter().map(|(key, at)| (key.as_ref(), *at)))
    }
}

fn topics_as_str<T: AsRef<str>, S: serde::Serializer>(
    applied: &&[(T, u64)],
    serializer: S,
) -> Result<S::Ok, S::Error> {
    serializer.collect_seq(applied.iter().map(|(topic, last)| (topic.as_ref(), *last)))
}

impl Output {
    /// At most the bytes it takes encoded.
    fn room(&self) -> usize {
        let headers: usize = self
            .headers
            .iter()
            .map(|(k, v)| 10 + k.len() + v.len())
            .sum();
        25 + self.id.len() + self.topic.len() + self.key.len() + self.value.len() + headers
    }
}

/// A stored value that is not a record this colo can read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RecordError {
    #[error("empty state record")]
    Empty,
    #[error("state record of format {0}, but this colo reads formats {FORMAT} to {FORMAT_OUTBOX}: it was written by a newer colo")]
    Format(u8),
    #[error("malformed state record: {0}")]
    Malformed(String),
}

impl StateRecord {
    pub fn new(epoch: u64, version: u32, state: Option<Vec<u8>>) -> Self {
        Self {
            epoch,
            version,
            applied: Vec::new(),
            state,
            earlier: Vec::new(),
            keys: Vec::new(),
            timers: Vec::new(),
            outbox: Vec::new(),
        }
    }

    pub fn encode(&self) -> Vec<u8> {
        Self::encode_parts(
            self.epoch,
            self.version,
            &self.applied,
            self.state.as_deref(),
            Beside {
                earlier: &self.earlier,
                keys: &self.keys,
                timers: &self.timers,
                outbox: &self.outbox,
            },
        )
    }

    /// Encodes a record from its parts, as [`StateRecord::encode`] would.
    pub fn encode_parts<T: AsRef<str>, K: AsRef<str>>(
        epoch: u64,
        version: u32,
        applied: &[(T, u64)],
        state: Option<&[u8]>,
        beside: Beside<'_, K>,
    ) -> Vec<u8> {
        let mut out = Vec::new();
        Self::encode_parts_into(&mut out, epoch, version, applied, state, beside);
        out
    }

    /// [`StateRecord::encode_parts`] into `out`, which is cleared first: an
    /// entity changed again before its last state was written reuses that
    /// state's buffer rather than allocating one per message.
    pub fn encode_parts_into<T: AsRef<str>, K: AsRef<str>>(
        out: &mut Vec<u8>,
        epoch: u64,
        version: u32,
        applied: &[(T, u64)],
        state: Option<&[u8]>,
        beside: Beside<'_, K>,
    ) {
        let Beside {
            earlier,
            keys,
            timers,
            outbox,
        } = beside;
        // Room for it all at once (a varint of a u64 takes at most 10
        // bytes, of a u32 or a length 5): format, epoch, version, the
        // offsets' count, each topic with its offset, the state's tag and
        // the state.
        let topics: usize = applied
            .iter()
            .map(|(topic, _)| 5 + topic.as_ref().len() + 10)
            .sum();
        let key_bytes: usize = keys
            .iter()
            .map(|(key, _)| 5 + key.as_ref().len() + 10)
            .sum();
        let room = 1
            + 10
            + 5
            + 5
            + topics
            + 1
            + state.map_or(0, |s| 5 + s.len())
            + 5
            + 10 * earlier.len()
            + 5
            + key_bytes
            + timers
                .iter()
                .map(|t| 5 + t.name.len() + 10 + 5 + t.message.len())
                .sum::<usize>()
            + outbox.iter().map(Output::room).sum::<usize>();
        let mut buffer = std::mem::take(out);
        buffer.clear();
        buffer.reserve(room);
        buffer.push(if !outbox.is_empty() {
            FORMAT_OUTBOX
        } else if !timers.is_empty() {
            FORMAT_TIMERS
        } else if !keys.is_empty() {
            FORMAT_KEYS
        } else if earlier.is_empty() {
            FORMAT
        } else {
            FORMAT_EARLIER
        });
        let record = RecordRef {
            epoch,
            version,
            applied,
            state,
        };
        // Serializing plain integers, strings and bytes into a Vec cannot
        // fail; `Malformed` covers the reverse.
        let mut encoded = match postcard::to_extend(&record, buffer) {
            Ok(encoded) => encoded,
            Err(e) => unreachable!("a state record always encodes: {e}"),
        };
        let after_keys = !timers.is_empty() || !outbox.is_empty();
        if !earlier.is_empty() || !keys.is_empty() || after_keys {
            encoded = match postcard::to_extend(earlier, encoded) {
                Ok(encoded) => encoded,
                Err(e) => unreachable!("a state record always encodes: {e}"),
            };
        }
        if !keys.is_empty() || after_keys {
            encoded = match postcard::to_extend(&KeysRef(keys), encoded) {
                Ok(encoded) => encoded,
                Err(e) => unreachable!("a state record always encodes: {e}"),
            };
        }
        if after_keys {
            encoded = match postcard::to_extend(timers, encoded) {
                Ok(encoded) => encoded,
                Err(e) => unreachable!("a state record always encodes: {e}"),
            };
        }
        if !outbox.is_empty() {
            encoded = match postcard::to_extend(outbox, encoded) {
                Ok(encoded) => encoded,
                Err(e) => unreachable!("a state record always encodes: {e}"),
            };
        }
        *out = encoded;
    }

    /// # Errors
    /// The value is empty, of a format this colo does not know, or not a
    /// record.
    pub fn decode(value: &[u8]) -> Result<Self, RecordError> {
        let (&format, rest) = value.split_first().ok_or(RecordError::Empty)?;
        if !(FORMAT..=FORMAT_OUTBOX).contains(&format) {
            return Err(RecordError::Format(format));
        }
        let malformed = |e: postcard::Error| RecordError::Malformed(e.to_string());
        let (mut record, mut tail) = postcard::take_from_bytes::<Self>(rest).map_err(malformed)?;
        if format >= FORMAT_EARLIER {
            (record.earlier, tail) = postcard::take_from_bytes(tail).map_err(malformed)?;
        }
        if format >= FORMAT_KEYS {
            (record.keys, tail) = postcard::take_from_bytes(tail).map_err(malformed)?;
        }
        if format >= FORMAT_TIMERS {
            (record.timers, tail) = postcard::take_from_bytes(tail).map_err(malformed)?;
        }
        if format >= FORMAT_OUTBOX {
            (record.outbox, tail) = postcard::take_from_bytes(tail).map_err(malformed)?;
        }
        if !tail.is_empty() {
            return Err(RecordError::Malformed(format!(
                "{} bytes after the record",
                tail.len()
            )));
        }
        Ok(record)
    }

    /// The offset of the last record of `topic` applied to this entity.
    pub fn applied(&self, topic: &str) -> Option<u64> {
        self.applied
            .iter()
            .find(|(t, _)| t == topic)
            .map(|(_, offset)| *offset)
    }

    /// Whether the record at `offset` of `topic` was applied already (a
    /// replay after a crash, or a record consumed again after a rebalance).
    pub fn has_applied(&self, topic: &str, offset: u64) -> bool {
        self.applied(topic).is_some_and(|last| offset <= last)
    }

    /// Notes that the record at `offset` of `topic` is applied. Offsets of a
    /// topic only grow: an older one leaves the record as it is.
    pub fn mark_applied(&mut self, topic: &str, offset: u64) {
        match self.applied.iter_mut().find(|(t, _)| t == topic) {
            Some((_, last)) => *last = (*last).max(offset),
            None => self.applied.push((topic.to_string(), offset)),
        }
    }
}

#[cfg(test)]
mod tests;
