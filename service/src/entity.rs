//! The entity API: what a user implements and registers.

use crate::output::{Emitted, OutputError, OutputRequests};
use crate::settings::{SettingsError, ShardingSettings};
use crate::timer::{MessageCheck, TimerError, TimerRequest, TimerRequests};
use colo_allocation::{HashExtractor, MessageExtractor, ShardId};
use compact_str::CompactString;
use serde::{de::DeserializeOwned, Serialize};
use std::fmt;
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// An entity's id inside its entity type. Short ids (up to 24 bytes) are kept
/// inline, so routing a message allocates nothing for them.
pub type EntityId = CompactString;

/// A stateful object with a unique id inside its entity type.
///
/// An entity is a plain value owned by its shard's task. It handles one
/// message at a time, in arrival order, so it needs no locking; different
/// entities of a shard run side by side, so a handler may await I/O, or tell
/// or ask any entity (its own shard's included). An idle entity costs only
/// its own size.
pub trait Entity: Send + 'static {
    /// What the entity is told or asked. It crosses nodes, hence serde.
    type Message: Serialize + DeserializeOwned + Send + 'static;
    /// What an ask returns.
    type Reply: Serialize + DeserializeOwned + Send + 'static;

    /// Handles one message. An error (or a panic) drops the entity: it is
    /// logged and counted, the asker gets the error, and the entity is created
    /// anew on its next message.
    fn handle(
        &mut self,
        ctx: &EntityContext,
        message: Self::Message,
    ) -> impl Future<Output = Result<Self::Reply, EntityError>> + Send;
}

/// Where a handler runs: its entity id and shard, and the way to ask for
/// passivation, deletion, durable timers and output records.
#[derive(Debug)]
pub struct EntityContext {
    pub(crate) entity_id: EntityId,
    pub(crate) shard: ShardId,
    passivate: AtomicBool,
    delete: AtomicBool,
    delayed: bool,
    timers: TimerRequests,
    outputs: OutputRequests,
}

impl EntityContext {
    pub(crate) fn new(entity_id: EntityId, shard: ShardId) -> Self {
        Self::with_delay(entity_id, shard, false)
    }

    pub(crate) fn with_delay(entity_id: EntityId, shard: ShardId, delayed: bool) -> Self {
        Self {
            entity_id,
            shard,
            passivate: AtomicBool::new(false),
            delete: AtomicBool::new(false),
            delayed,
            timers: TimerRequests::default(),
            outputs: OutputRequests::default(),
        }
    }

    /// Lets the handler keep timers (a durable entity type's), `firing`
    /// naming the timer whose message it handles, if it does.
    pub(crate) fn with_timers(mut self, check: MessageCheck, firing: Option<String>) -> Self {
        self.timers = TimerRequests::new(Some(check), firing);
        self
    }

    /// Lets the handler emit records to `topics` (a durable entity type's
    /// output topics).
    pub(crate) fn with_outputs(mut self, topics: Arc<[String]>) -> Self {
        self.outputs = OutputRequests::new(topics);
        self
    }

    /// Emits a record to `topic` (one of the entity type's output topics,
    /// [`EntityType::with_outputs`]) as part of handling this message.
    ///
    /// It is kept in the entity's outbox, written with the change this
    /// message makes once the handler succeeds (a failed handler emits
    /// nothing), and sent after that write by an idempotent producer,
    /// to `key`'s murmur2 partition. A message whose effect was applied
    /// already is skipped, so it emits nothing again; an output not sent
    /// when its node dies is sent by the shard's next owner. Its
    /// [`crate::OUTPUT_ID_HEADER`] header holds a deterministic id, by
    /// which a reader drops a record sent twice.
    ///
    /// # Errors
    /// The entity type is not durable, the topic is not one of its output
    /// topics, or the record is larger than [`crate::MAX_OUTPUT_BYTES`].
    pub fn emit(&self, topic: &str, key: &[u8], value: &[u8]) -> Result<(), OutputError> {
        self.outputs.emit(topic, key, value, &[])
    }

    /// The topics this entity may emit to: its entity type's output topics
    /// ([`EntityType::with_outputs`]), none if it is not durable.
    pub fn output_topics(&self) -> &[String] {
        self.outputs.topics()
    }

    /// [`EntityContext::emit`] with headers.
    ///
    /// # Errors
    /// As [`EntityContext::emit`], and a header named
    /// [`crate::OUTPUT_ID_HEADER`].
    pub fn emit_with_headers(
        &self,
        topic: &str,
        key: &[u8],
        value: &[u8],
        headers: &[(&str, &[u8])],
    ) -> Result<(), OutputError> {
        self.outputs.emit(topic, key, value, headers)
    }

    /// Schedules timer `name`: at or after `at_or_after`, `message` (one of
    /// the entity type's own messages) comes to this entity, started again
    /// if it was passivated, on whichever node hosts it then. A timer of
    /// the same name is replaced; one due already fires at once.
    ///
    /// The timer is kept with the entity's state, written with the change
    /// this message makes once the handler succeeds (a failed handler
    /// schedules nothing). It fires at least once, and its firing is
    /// applied once: it is removed in the write of the change its message
    /// made.
    ///
    /// # Errors
    /// The entity type is not durable, the name is empty or longer than
    /// [`crate::MAX_TIMER_NAME`] bytes, or the message is not one of the
    /// entity type's.
    pub fn schedule<M: Serialize>(
        &self,
        name: &str,
        at_or_after: std::time::SystemTime,
        message: &M,
    ) -> Result<(), TimerError> {
        self.timers.schedule(name, at_or_after, message)
    }

    /// [`EntityContext::schedule`] `delay` from now.
    ///
    /// # Errors
    /// As [`EntityContext::schedule`].
    pub fn schedule_after<M: Serialize>(
        &self,
        name: &str,
        delay: std::time::Duration,
        message: &M,
    ) -> Result<(), TimerError> {
        self.timers
            .schedule(name, std::time::SystemTime::now() + delay, message)
    }

    /// Cancels timer `name`, if the entity has one (once the handler
    /// succeeds, like [`EntityContext::schedule`]).
    ///
    /// # Errors
    /// The entity type is not durable, or the name is not a timer name.
    pub fn cancel(&self, name: &str) -> Result<(), TimerError> {
        self.timers.cancel(name)
    }

    /// The timer whose message this is, when a timer brought it.
    pub fn fired_timer(&self) -> Option<&str> {
        self.timers.firing()
    }

    /// What the handler asked of its timers and emitted.
    pub(crate) fn requested(&self) -> Requested {
        Requested {
            timers: self.timers.take(),
            outputs: self.outputs.take(),
        }
    }

    /// Whether this message was held by a node that fenced itself (it lost
    /// its coordinator while the message waited in one of its shards) and
    /// reaches the entity only after that node registered anew: it may come
    /// after newer messages from the same sender. Every other message from
    /// one sender arrives in the order it was told.
    pub fn delayed(&self) -> bool {
        self.delayed
    }

    /// Asks the shard to passivate this entity once the current message is
    /// handled (the stop message runs first, if the entity type has one).
    /// Messages that arrive later go to a new incarnation; none is lost.
    pub fn passivate(&self) {
        self.passivate.store(true, Ordering::Relaxed);
    }

    pub(crate) fn passivation_requested(&self) -> bool {
        self.passivate.load(Ordering::Relaxed)
    }

    /// Deletes this durable entity once the current message is handled: its
    /// stored state is removed (a tombstone in the store and the changelog),
    /// and the entity goes on as the factory makes a new one. For an entity
    /// type that is not durable it only resets the entity.
    pub fn delete(&self) {
        self.delete.store(true, Ordering::Relaxed);
    }

    pub(crate) fn deletion_requested(&self) -> bool {
        self.delete.load(Ordering::Relaxed)
    }

    /// The entity's id.
    pub fn entity_id(&self) -> &str {
        &self.entity_id
    }

    /// The shard the entity lives in.
    pub fn shard(&self) -> ShardId {
        self.shard
    }
}

/// What a handler that succeeded asked for beside its change: kept with
/// it, in the same write.
#[derive(Debug, Default)]
pub(crate) struct Requested {
    pub timers: Vec<TimerRequest>,
    pub outputs: Vec<Emitted>,
}

/// A handler's failure, reported to the asker as text.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct EntityError(pub String);

impl EntityError {
    /// An error with a message.
    pub fn new(message: impl Into<String>) -> Self {
        Self(message.into())
    }
}

type Factory<E> = Arc<dyn Fn(&EntityId) -> E + Send + Sync>;

/// How a durable entity type's state is written and read back: the entity
/// value itself, with serde (postcard), under the type's state version.
/// Plain functions made where the serde bounds hold, so that the [`Entity`]
/// trait and the types that are not durable carry no serde bound for state.
pub(crate) struct StateCodec<E> {
    pub version: u32,
    /// Appends the encoded state to the buffer: a shard encodes an
    /// entity's state after every message, into a buffer it reuses.
    pub encode: fn(&E, &mut Vec<u8>) -> Result<(), String>,
    pub decode: fn(&[u8]) -> Result<E, String>,
}

impl<E> Clone for StateCodec<E> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<E> Copy for StateCodec<E> {}

fn encode_state<E: Serialize>(entity: &E, out: &mut Vec<u8>) -> Result<(), String> {
    *out = postcard::to_extend(entity, std::mem::take(out)).map_err(|e| e.to_string())?;
    Ok(())
}

fn decode_state<E: DeserializeOwned>(bytes: &[u8]) -> Result<E, String> {
    postcard::from_bytes(bytes).map_err(|e| e.to_string())
}
type StopMessage<M> = Arc<dyn Fn() -> M + Send + Sync>;
type Size<E> = Arc<dyn Fn(&E) -> usize + Send + Sync>;

/// An entity type: a name, an entity factory, a message extractor and
/// settings. A node runs one region per entity type.
pub struct EntityType<E: Entity> {
    pub(crate) name: String,
    pub(crate) factory: Factory<E>,
    pub(crate) extractor: Option<Arc<dyn MessageExtractor>>,
    pub(crate) settings: ShardingSettings,
    pub(crate) stop_message: Option<StopMessage<E::Message>>,
    pub(crate) state: Option<StateCodec<E>>,
    pub(crate) role: Option<String>,
    pub(crate) size: Option<Size<E>>,
    /// The topics its entities may emit to.
    pub(crate) outputs: Arc<[String]>,
}

impl<E: Entity> Clone for EntityType<E> {
    fn clone(&self) -> Self {
        Self {
            name: self.name.clone(),
            factory: self.factory.clone(),
            extractor: self.extractor.clone(),
            settings: self.settings.clone(),
            stop_message: self.stop_message.clone(),
            state: self.state,
            role: self.role.clone(),
            size: self.size.clone(),
            outputs: self.outputs.clone(),
        }
    }
}

impl<E: Entity> fmt::Debug for EntityType<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EntityType")
            .field("name", &self.name)
            .field("settings", &self.settings)
            .field("state_version", &self.state.map(|s| s.version))
            .field("role", &self.role)
            .finish_non_exhaustive()
    }
}

/// Why an entity type was refused at registration.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RegistrationError {
    /// The name is empty or has characters that would break metric labels
    /// and wire names.
    #[error("invalid entity type name {0:?}: use 1 to 128 characters from [A-Za-z0-9_.-]")]
    InvalidName(String),
    /// The role is empty or has characters that would break metric labels
    /// and config keys.
    #[error("invalid role {0:?}: use 1 to 128 characters from [A-Za-z0-9_.-]")]
    InvalidRole(String),
    /// A setting cannot work.
    #[error(transparent)]
    Settings(#[from] SettingsError),
    /// The extractor and the settings disagree on the number of shards.
    #[error("the message extractor has {extractor} shards but number_of_shards is {settings}")]
    ShardCountMismatch {
        /// Shards of the extractor.
        extractor: u32,
        /// `number_of_shards` of the settings.
        settings: u32,
    },
    /// This node already runs a region for the entity type.
    #[error("entity type {0:?} is already registered on this node")]
    AlreadyRegistered(String),
    /// A durable entity type on a node without a state store.
    #[error("entity type {0:?} is durable, but this node has no state store (Node::with_state_store; a node program opens one under node.data_dir)")]
    NoStateStore(String),
    /// An entity type with output topics on a node whose store has no
    /// sink for them.
    #[error("entity type {0:?} emits records, but this node's store has nowhere to send them (NodeStore::with_outputs; a node program sends them to its [kafka] brokers)")]
    NoOutputs(String),
}

impl<E: Entity + Serialize + DeserializeOwned> EntityType<E> {
    /// Makes the entity type durable: each entity's value is its state,
    /// kept in the node's state store with serde, written behind in batches
    /// (`state.flush_interval`, `state.max_dirty`) and read back when the
    /// entity starts again (after passivation, a failed handler, a restart).
    ///
    /// `version` names the shape of the state: raise it when the entity's
    /// fields change. A stored state that no longer decodes is never reset:
    /// its shard stops taking messages with an error naming the entity and
    /// both versions. An ask or a client's tell to a durable entity is
    /// answered once its change is durable, and a Kafka record's offset is
    /// committed only then; a record the entity had applied already (a
    /// replay after a crash) is skipped.
    pub fn durable(mut self, version: u32) -> Self {
        self.state = Some(StateCodec {
            version,
            encode: encode_state::<E>,
            decode: decode_state::<E>,
        });
        self
    }
}

impl<E: Entity> EntityType<E> {
    /// An entity type with default settings and the default extractor
    /// (`stable_hash(entity id) % number_of_shards`).
    pub fn new(
        name: impl Into<String>,
        factory: impl Fn(&EntityId) -> E + Send + Sync + 'static,
    ) -> Self {
        Self {
            name: name.into(),
            factory: Arc::new(factory),
            extractor: None,
            settings: ShardingSettings::default(),
            stop_message: None,
            state: None,
            role: None,
            size: None,
            outputs: Arc::from(Vec::new()),
        }
    }

    /// Replaces the settings.
    pub fn with_settings(mut self, settings: ShardingSettings) -> Self {
        self.settings = settings;
        self
    }

    /// Replaces the extractor, e.g. with Kafka's murmur2 partitioner so a
    /// record and an ask for the same key meet in the same shard. Its number
    /// of shards must equal `number_of_shards`.
    pub fn with_extractor(mut self, extractor: impl MessageExtractor) -> Self {
        self.extractor = Some(Arc::new(extractor));
        self
    }

    /// The message each entity handles before it is stopped for a hand-off,
    /// for entities that must clean up. Without one, entities are dropped.
    pub fn with_stop_message(
        mut self,
        stop: impl Fn() -> E::Message + Send + Sync + 'static,
    ) -> Self {
        self.stop_message = Some(Arc::new(stop));
        self
    }

    /// Runs the entity type's shards only on nodes with `role` (Akka's
    /// `withRole`): a node without it that starts the type starts a proxy
    /// region instead, which routes to the shards and hosts none. Its
    /// coordinator places shards on the nodes with the role, and of a
    /// type driven by Kafka records, only those join its consumer group.
    /// Use it to keep a type's state and load on the machines sized for
    /// it, and to let the others send to it all the same.
    pub fn with_role(mut self, role: impl Into<String>) -> Self {
        self.role = Some(role.into());
        self
    }

    /// How much memory an entity takes, in bytes, as the node's memory
    /// budget counts it ([`crate::Node::with_memory_budget`]). Without it
    /// an entity weighs the size of its value, plus its encoded state if
    /// the type is durable (about what it owns on the heap; a type that is
    /// not durable has it uncounted). Called
    /// after every message it handles, so it should be cheap: a length
    /// times an item's size, say.
    pub fn with_size(mut self, size: impl Fn(&E) -> usize + Send + Sync + 'static) -> Self {
        self.size = Some(Arc::new(size));
        self
    }

    /// The Kafka topics its entities may emit records to
    /// ([`EntityContext::emit`]). A durable type's only: the outputs wait
    /// in the entity's state record until they are sent. A node that
    /// hosts the type checks that each exists when it starts, so an
    /// output is never kept for a topic that will not take it.
    pub fn with_outputs<T: Into<String>>(mut self, topics: impl IntoIterator<Item = T>) -> Self {
        let topics: Vec<String> = topics.into_iter().map(Into::into).collect();
        self.outputs = Arc::from(topics);
        self
    }

    /// The topics its entities may emit to.
    pub fn outputs(&self) -> &[String] {
        &self.outputs
    }

    /// The role a node must have to host its shards; `None`: any node.
    pub fn role(&self) -> Option<&str> {
        self.role.as_deref()
    }

    /// Whether its entities' state is durable (see [`EntityType::durable`]).
    pub fn is_durable(&self) -> bool {
        self.state.is_some()
    }

    /// The entity type's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Checks the name, the settings and the extractor, and fills in the
    /// default extractor.
    ///
    /// # Errors
    /// A [`RegistrationError`] naming what is wrong.
    pub(crate) fn validated(mut self) -> Result<Self, RegistrationError> {
        if !is_name(&self.name) {
            return Err(RegistrationError::InvalidName(self.name));
        }
        if let Some(role) = self.role.take_if(|role| !is_name(role)) {
            return Err(RegistrationError::InvalidRole(role));
        }
        self.settings.validate()?;
        if let Some(topic) = self.outputs.iter().find(|t| !is_topic_name(t)) {
            return Err(RegistrationError::Settings(SettingsError {
                field: "outputs",
                reason: format!("{topic:?} is not a Kafka topic name: use 1 to 249 characters from [A-Za-z0-9._-]"),
            }));
        }
        if !self.outputs.is_empty() && self.state.is_none() {
            return Err(RegistrationError::Settings(SettingsError {
                field: "outputs",
                reason: "an entity's outputs wait in its state record until they are sent: the entity type must be durable (EntityType::durable)".into(),
            }));
        }
        if self.settings.remember_entities.is_some() && self.state.is_none() {
            return Err(RegistrationError::Settings(SettingsError {
                field: "remember_entities",
                reason: "it remembers the entities that have state: the entity type must be durable (EntityType::durable)".into(),
            }));
        }
        let extractor = match self.extractor.take() {
            Some(extractor) => extractor,
            None => Arc::new(
                HashExtractor::new(self.settings.number_of_shards).map_err(|e| SettingsError {
                    field: "number_of_shards",
                    reason: e.to_string(),
                })?,
            ),
        };
        if extractor.number_of_shards() != self.settings.number_of_shards {
            return Err(RegistrationError::ShardCountMismatch {
                extractor: extractor.number_of_shards(),
                settings: self.settings.number_of_shards,
            });
        }
        self.extractor = Some(extractor);
        Ok(self)
    }
}

/// Whether `name` is a name Kafka takes for a topic.
fn is_topic_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 249
        && name != "."
        && name != ".."
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
}

/// Whether `name` may name an entity type or a role: 1 to 128 characters
/// from `[A-Za-z0-9_.-]`, so that it fits a metric label, a wire name and a
/// config key as it is.
pub(crate) fn is_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 128
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
}

/// The runtime's own tests' entity: a sum of what it is told, durable or
/// not, so they need nothing of the samples above them.
#[cfg(test)]
#[derive(Debug, Default, Clone, serde::Serialize, serde::Deserialize)]
pub(crate) struct Tally(pub u64);

#[cfg(test)]
impl Entity for Tally {
    type Message = u64;
    type Reply = u64;

    async fn handle(&mut self, _: &EntityContext, add: u64) -> Result<u64, EntityError> {
        self.0 += add;
        Ok(self.0)
    }
}
