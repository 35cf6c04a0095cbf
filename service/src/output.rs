//! Records a handler emits, as it asks for them: `EntityContext::emit`
//! notes each, and its shard keeps them in the entity's outbox, in the
//! state record written with the change the handler made, once the
//! handler has succeeded. A handler that fails emits nothing, as it
//! changes nothing.
//!
//! Sent after that write is durable, by an idempotent producer, and
//! dropped from the record once the broker has them: a message whose
//! effect is applied already (a record replayed after a crash) is skipped,
//! so it emits nothing again, and an output written but not sent when its
//! node dies is sent by the shard's next owner. Each output carries a
//! deterministic id in its [`OUTPUT_ID_HEADER`] header, made of what
//! caused it and its place among that message's outputs, so that a reader
//! drops the rare record sent twice (a node that died between sending and
//! dropping it from the record).

use std::sync::Arc;

/// The header whose value is an output's deterministic id.
pub const OUTPUT_ID_HEADER: &str = "colo-output-id";

/// The most bytes an output's key, value and headers take together: below
/// the broker's default `message.max.bytes` (1 MiB) with room for the
/// record's framing.
pub const MAX_OUTPUT_BYTES: usize = 1_000_000;

/// Why a record was not emitted. Nothing of the handler's is lost: it may
/// go on, and what it emitted before still stands.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OutputError {
    /// Only a durable entity type keeps an outbox: it lives in the state
    /// record.
    #[error("this entity type is not durable: its outputs are kept with the entity's state until they are sent (EntityType::durable)")]
    NotDurable,
    /// The topic is not one the entity type declared: a declared topic is
    /// checked to exist when the node starts, so that an output is never
    /// kept for a topic that will not take it.
    #[error("topic {topic:?} is not one of this entity type's output topics ({declared:?}; EntityType::with_outputs)")]
    UndeclaredTopic {
        topic: String,
        declared: Vec<String>,
    },
    /// Key, value and headers are larger than [`MAX_OUTPUT_BYTES`].
    #[error("an output to {topic:?} of {len} bytes: at most {MAX_OUTPUT_BYTES} bytes of key, value and headers")]
    TooLarge { topic: String, len: usize },
    /// A header named [`OUTPUT_ID_HEADER`]: the output's id goes there.
    #[error("header {OUTPUT_ID_HEADER:?} is the output's id, set by colo")]
    ReservedHeader,
}

/// One record a handler emitted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Emitted {
    pub topic: String,
    pub key: Vec<u8>,
    pub value: Vec<u8>,
    pub headers: Vec<(String, Vec<u8>)>,
}

/// The records of one handler run, kept in its context.
#[derive(Debug, Default)]
pub(crate) struct OutputRequests {
    /// The entity type's output topics; `None`: it is not durable.
    topics: Option<Arc<[String]>>,
    emitted: parking_lot::Mutex<Vec<Emitted>>,
}

impl OutputRequests {
    pub fn new(topics: Arc<[String]>) -> Self {
        Self {
            topics: Some(topics),
            emitted: parking_lot::Mutex::default(),
        }
    }

    pub fn emit(
        &self,
        topic: &str,
        key: &[u8],
        value: &[u8],
        headers: &[(&str, &[u8])],
    ) -> Result<(), OutputError> {
        let topics = self.topics.as_ref().ok_or(OutputError::NotDurable)?;
        if !topics.iter().any(|t| t == topic) {
            return Err(OutputError::UndeclaredTopic {
                topic: topic.to_string(),
                declared: topics.to_vec(),
            });
        }
        if headers.iter().any(|(name, _)| *name == OUTPUT_ID_HEADER) {
            return Err(OutputError::ReservedHeader);
        }
        let len = key.len()
            + value.len()
            + headers
                .iter()
                .map(|(name, value)| name.len() + value.len())
                .sum::<usize>();
        if len > MAX_OUTPUT_BYTES {
            return Err(OutputError::TooLarge {
                topic: topic.to_string(),
                len,
            });
        }
        self.emitted.lock().push(Emitted {
            topic: topic.to_string(),
            key: key.to_vec(),
            value: value.to_vec(),
            headers: headers
                .iter()
                .map(|(name, value)| (name.to_string(), value.to_vec()))
                .collect(),
        });
        Ok(())
    }

    /// The topics it may emit to: none for a type that is not durable.
    pub fn topics(&self) -> &[String] {
        self.topics.as_deref().unwrap_or_default()
    }

    /// What the run emitted, for its shard to keep.
    pub fn take(&self) -> Vec<Emitted> {
        std::mem::take(&mut *self.emitted.lock())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_output_needs_a_durable_type_a_declared_topic_and_room() {
        let none = OutputRequests::default();
        assert_eq!(
            none.emit("a", b"k", b"v", &[]),
            Err(OutputError::NotDurable)
        );
        let kept = OutputRequests::new(Arc::from(vec!["alerts".to_string()]));
        let err = kept.emit("alert", b"k", b"v", &[]).expect_err("undeclared");
        assert!(err.to_string().contains("\"alert\" is not one"), "{err}");
        let big = vec![0; MAX_OUTPUT_BYTES];
        let err = kept.emit("alerts", b"k", &big, &[]).expect_err("too large");
        assert!(err.to_string().contains("1000001 bytes"), "{err}");
        let err = kept
            .emit("alerts", b"k", b"v", &[(OUTPUT_ID_HEADER, b"x")])
            .expect_err("reserved");
        assert_eq!(err, OutputError::ReservedHeader);
        kept.emit("alerts", b"k", b"v", &[("h", b"1")])
            .expect("emitted");
        assert_eq!(
            kept.take(),
            vec![Emitted {
                topic: "alerts".into(),
                key: b"k".to_vec(),
                value: b"v".to_vec(),
                headers: vec![("h".into(), b"1".to_vec())],
            }]
        );
        assert!(kept.take().is_empty());
    }
}
