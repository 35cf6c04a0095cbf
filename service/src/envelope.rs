//! Messages on their way to an entity, in their local and wire forms.

use crate::credits::Credit;
use crate::durability::ShardDurability;
use crate::entity::{Entity, EntityId};
use crate::error::AskError;
use bytes::Bytes;
use colo_allocation::{RegionId, ShardId};
use serde::{Deserialize, Serialize};
use std::sync::{Arc, Weak};
use tokio::sync::oneshot;

/// A message inside a node: typed, with where its reply goes.
pub(crate) struct Envelope<E: Entity> {
    pub entity_id: EntityId,
    pub shard: ShardId,
    pub message: E::Message,
    pub reply: Reply<E::Reply>,
    /// For a message received from another node: its sender's credit,
    /// returned when the envelope is handled or dropped.
    pub credit: Option<Credit>,
    /// Received from another node (whether or not it still holds its
    /// sender's credit).
    pub received: bool,
    /// Received from another node and held by this one when it fenced
    /// itself: it may reach its entity after newer messages from the same
    /// sender, which went to the shard's new home directly.
    pub delayed: bool,
}

impl<E: Entity> Envelope<E> {
    /// An acked record (a source's record whose partition acks it once
    /// handled, such as Kafka's) its partition gave up on: dropped rather than
    /// handled (see [`Reply::Acked`]). So is a copy of a record sent as
    /// an ask (it has an origin) that its partition stopped waiting for:
    /// sent again, or given up; the partition's own copy, or its next
    /// owner's, takes its place.
    pub fn abandoned(&self) -> bool {
        match &self.reply {
            Reply::Acked(waiter, _) => waiter.is_closed(),
            Reply::Local(waiter, Some(cause)) if matches!(**cause, Cause::Record(_)) => {
                waiter.is_closed()
            }
            _ => false,
        }
    }

    /// An acked record handled by this node's shard only (see
    /// [`Reply::Acked`]).
    pub fn local_only(&self) -> bool {
        matches!(self.reply, Reply::Acked(..))
    }

    /// The acked record this message came from, when a durable entity must
    /// know it (to skip a record it applied already).
    pub fn origin(&self) -> Option<&Origin> {
        self.reply.origin()
    }
}

impl<R> Reply<R> {
    /// Why the message was sent, where its entity must know (see
    /// [`Cause`]).
    pub fn cause(&self) -> Option<&Cause> {
        match self {
            Reply::Acked(_, cause) | Reply::Local(_, cause) | Reply::Remote(_, cause) => {
                cause.as_deref()
            }
            Reply::None => None,
        }
    }

    /// The acked record a message came from (see [`Origin`]).
    pub fn origin(&self) -> Option<&Origin> {
        match self.cause()? {
            Cause::Record(origin) => Some(origin),
            Cause::Keyed(_) | Cause::Timer(_) => None,
        }
    }

    /// The idempotency key of a client's tell.
    pub fn idempotency_key(&self) -> Option<&Arc<str>> {
        match self.cause()? {
            Cause::Keyed(key) => Some(key),
            Cause::Record(_) | Cause::Timer(_) => None,
        }
    }
}

/// What an entity must know of why a message was sent, to apply it once:
/// boxed in the envelope's reply, so that the other envelopes stay small.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Cause {
    /// An acked record: a durable entity skips it if it applied it already.
    Record(Origin),
    /// A client's tell with an idempotency key: the entity skips it if it
    /// applied a tell with this key within the retention.
    Keyed(Arc<str>),
    /// A durable timer of the entity come due: applied only if the entity
    /// still has it, due then (it may have fired, been cancelled or moved
    /// since its shard read it), and removed with the change it makes.
    /// Sent by the entity's own shard as an acked message, never
    /// forwarded: a shard that moves leaves its timers to the next owner,
    /// which reads them from its index.
    Timer(colo_state::TimerKey),
}

/// Where a record came from: its source (see [`Origin::source`]) and
/// offset. Set only for durable entity types, boxed so that the other
/// envelopes stay small.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Origin {
    pub source: Arc<str>,
    pub offset: u64,
    /// For a record of its partition's own shard: the offset of its key's
    /// previous record in the partition, while that one's change may not
    /// be durable yet. The entity applies this record only on a state that
    /// includes that one: a start of the shard that ended before writing
    /// it took it along, and a later start must not build on its absence
    /// (its applied offset would then pass the lost record's, and the
    /// lost record, consumed again, would be skipped).
    pub previous: Option<u64>,
}

impl Origin {
    /// The source of the records of `topic`'s partition `partition` that
    /// belong in other partitions (a producer with another partitioner put
    /// them there): `topic/partition`. The records of a shard's own
    /// partition have the topic as their source. Offsets grow within one
    /// partition only, so each partition an entity's records come from
    /// needs a source of its own; `/` is never in a topic's name, so the
    /// two kinds cannot meet.
    pub fn other_partition(topic: &str, partition: i32) -> Arc<str> {
        Arc::from(format!("{topic}/{partition}"))
    }

    /// The topic and partition of a source's records, for an entity of
    /// `shard` (see [`Origin::other_partition`]).
    pub fn partition_of(source: &str, shard: ShardId) -> (&str, i32) {
        let own = i32::try_from(shard.0).unwrap_or(i32::MAX);
        match source.rsplit_once('/') {
            Some((topic, partition)) => match partition.parse() {
                Ok(partition) => (topic, partition),
                Err(_) => (source, own),
            },
            None => (source, own),
        }
    }

    pub fn to_wire(&self) -> WireOrigin {
        WireOrigin {
            source: self.source.to_string(),
            offset: self.offset,
        }
    }

    pub fn from_wire(wire: WireOrigin) -> Self {
        Self {
            source: Arc::from(wire.source),
            offset: wire.offset,
            previous: None,
        }
    }
}

/// An [`Origin`] on its way to another node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WireOrigin {
    pub source: String,
    pub offset: u64,
}

/// Where the answer to a message goes.
pub(crate) enum Reply<R> {
    /// A tell: nobody waits.
    None,
    /// An ask from this node. An acked record that may be handled on
    /// another node (its shard is not its partition's here: a producer with
    /// another partitioner put it in another partition than its key's, or
    /// another topic's partition keeps its shard elsewhere) is one too,
    /// awaited by its partition, with its origin: it follows its shard
    /// wherever it is, and the entity skips it if it applied it already.
    /// A client's tell with an idempotency key is one too, with its key.
    Local(oneshot::Sender<Result<R, AskError>>, Option<Box<Cause>>),
    /// An acked record's delivery, awaited by its partition on this node,
    /// which consumes it where its shard lives. Unlike an ask, it is
    /// handled by this node's shard only, never forwarded: a shard that
    /// left this node took the partition with it (released, or the node
    /// was fenced), and the partition's next owner consumes the record
    /// again from the last commit. And once its partition stops waiting
    /// (lost, or its revoke gave up on it) it is handled nowhere: handling
    /// this copy too would run it twice and out of order.
    Acked(oneshot::Sender<AckedAnswer<R>>, Option<Box<Cause>>),
    /// An ask from another node (or one that left this node and came back),
    /// with its cause (an acked record's origin, a keyed tell's key). Boxed: it is
    /// rare, and keeps every envelope within one cache line.
    Remote(Box<ReplyTo>, Option<Box<Cause>>),
}

/// The answer to an acked record handled by its partition's own shard
/// ([`Reply::Acked`]): the entity's, and, from a durable shard, the start
/// of the shard that handled it. Its change is durable only once that start
/// has written it: a start that ended first never will, and the record
/// must be consumed again, whatever start runs by the time its partition
/// settles it.
#[derive(Debug)]
pub(crate) struct AckedAnswer<R> {
    pub result: Result<R, AskError>,
    pub start: Option<Weak<ShardDurability>>,
}

/// The node and correlation id an ask's reply is sent back to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplyTo {
    /// The node waiting for the reply.
    pub node: RegionId,
    /// That node's incarnation: a node restarted at the same address since
    /// drops the reply, which could otherwise complete a new ask that
    /// happens to have the same correlation id.
    pub incarnation: u64,
    /// Its correlation id on that node.
    pub correlation: u64,
}

/// A message between nodes: the payload is encoded by the entity type's
/// codec, so a transport moves it without knowing the type.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WireEnvelope {
    /// The entity type's name.
    pub entity_type: String,
    /// The target entity.
    pub entity_id: EntityId,
    /// Its shard, as the sender's extractor computed it.
    pub shard: ShardId,
    /// The encoded message.
    pub payload: Bytes,
    /// Where the reply goes, for an ask.
    pub reply_to: Option<ReplyTo>,
    /// Held by a node that fenced itself (see [`Envelope`]).
    pub delayed: bool,
    /// For an acked record's ask: where the record came from.
    pub origin: Option<WireOrigin>,
    /// For a client's tell sent as an ask: its idempotency key.
    pub idempotency_key: Option<String>,
}

/// The answer to a remote ask.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WireReply {
    /// The asking node's incarnation the reply is for.
    pub incarnation: u64,
    /// The asker's correlation id.
    pub correlation: u64,
    /// The encoded reply, or why there is none.
    pub result: Result<Bytes, AskError>,
}
