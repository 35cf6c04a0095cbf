//! A region reached by entity type name with encoded messages, for callers
//! that know no Rust type: the gRPC client API, the CLI behind it.
//!
//! The payload is decoded into the entity type's message here, at the edge,
//! and then travels like any typed message: a local shard gets the value,
//! a remote one the usual postcard bytes. Typed callers keep using
//! [`Region`] and pay for no encoding.

use super::Region;
use crate::codec::ContentType;
use crate::entity::Entity;
use crate::error::QueryError;
use crate::error::{AskError, TellError};
use crate::inspection::{ClusterShardingStats, CurrentRegionState};
use bytes::Bytes;
use colo_allocation::{RegionId, ShardId};
use futures::future::BoxFuture;
use std::time::Duration;

/// Why a tell or ask by name failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ErasedError {
    /// The payload is not a message of the entity type in that content type.
    /// Nothing was sent.
    #[error("payload is not a message of entity type {entity_type:?} in {content_type}: {reason}")]
    Decode {
        /// The entity type.
        entity_type: String,
        /// How the payload claimed to be encoded.
        content_type: ContentType,
        /// The decoder's explanation.
        reason: String,
    },
    /// The entity answered, but its reply cannot be written in the content
    /// type (e.g. JSON and a map with non-string keys).
    #[error("reply of entity type {entity_type:?} cannot be encoded as {content_type}: {reason}")]
    EncodeReply {
        /// The entity type.
        entity_type: String,
        /// The requested content type.
        content_type: ContentType,
        /// The encoder's explanation.
        reason: String,
    },
    /// The region refused the message.
    #[error(transparent)]
    Tell(#[from] TellError),
    /// The ask got no reply.
    #[error(transparent)]
    Ask(AskError),
}

impl From<AskError> for ErasedError {
    fn from(e: AskError) -> Self {
        // A refusal is the same whether it came from a tell or an ask, so a
        // caller has one variant to match for it.
        match e {
            AskError::Tell(e) => ErasedError::Tell(e),
            e => ErasedError::Ask(e),
        }
    }
}

/// What became of a told message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Told {
    /// The entity's shard.
    pub shard: ShardId,
    /// `None` when the message went to its shard; otherwise why it waits in
    /// the buffer ("coordinator unreachable", "waiting for the shard's
    /// home"). It is delivered once the home is known.
    pub buffered: Option<&'static str>,
}

/// What became of a tell with an idempotency key ([`Region::tell_once`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TellOnce {
    /// Its entity applied it now (durably, for a durable entity type).
    Applied,
    /// Its entity had applied a tell with the same key within the entity
    /// type's `idempotency_retention`: not applied again.
    AlreadyApplied,
}

/// A node's region of one entity type, without its Rust types: messages and
/// replies are bytes in a [`ContentType`]. Get one from
/// [`crate::Node::region_by_name`].
pub trait ErasedRegion: Send + Sync + 'static {
    /// The entity type's name.
    fn entity_type(&self) -> &str;

    /// The node this region runs on.
    fn node(&self) -> &RegionId;

    /// See [`Region::is_ready`].
    fn is_ready(&self) -> bool;

    /// See [`Region::coordinator_reachable`].
    fn coordinator_reachable(&self) -> bool;

    /// See [`Region::refused`].
    fn refused(&self) -> Option<String>;

    /// See [`Region::state_failing`].
    fn state_failing(&self) -> Option<String>;

    /// The shard an entity belongs to.
    fn shard_of(&self, entity_id: &str) -> ShardId;

    /// Decodes `payload` as the entity type's message and tells it to the
    /// entity, like [`Region::tell`].
    ///
    /// # Errors
    /// The payload does not decode, or the region refused the message.
    fn tell<'a>(
        &'a self,
        entity_id: &'a str,
        content_type: ContentType,
        payload: &'a [u8],
    ) -> BoxFuture<'a, Result<Told, ErasedError>>;

    /// Decodes `payload` and tells it to the entity once for `key`, like
    /// [`Region::tell_once`], answering its shard and what became of it.
    ///
    /// # Errors
    /// The payload does not decode, the key is invalid, the message was
    /// refused, the entity failed, or no answer came within `timeout`.
    fn tell_once<'a>(
        &'a self,
        entity_id: &'a str,
        key: &'a str,
        content_type: ContentType,
        payload: &'a [u8],
        timeout: Duration,
    ) -> BoxFuture<'a, Result<(ShardId, TellOnce), ErasedError>>;

    /// Decodes `payload`, asks the entity like [`Region::ask`], and answers
    /// the shard and the reply encoded in the same content type.
    ///
    /// # Errors
    /// The payload does not decode, the message was refused, the entity
    /// failed, no reply came within `timeout`, or the reply cannot be
    /// encoded.
    fn ask<'a>(
        &'a self,
        entity_id: &'a str,
        content_type: ContentType,
        payload: &'a [u8],
        timeout: Duration,
    ) -> BoxFuture<'a, Result<(ShardId, Bytes), ErasedError>>;

    /// Like [`Region::state`].
    ///
    /// # Errors
    /// The region has stopped, or did not answer within `timeout`.
    fn state(&self, timeout: Duration) -> BoxFuture<'_, Result<CurrentRegionState, QueryError>>;

    /// Like [`Region::cluster_stats`].
    ///
    /// # Errors
    /// The region has stopped, or the coordinator did not answer in time.
    fn cluster_stats(
        &self,
        timeout: Duration,
    ) -> BoxFuture<'_, Result<ClusterShardingStats, QueryError>>;
}

impl<E: Entity> Region<E> {
    fn decode_message(
        &self,
        content_type: ContentType,
        payload: &[u8],
    ) -> Result<E::Message, ErasedError> {
        content_type
            .decode(payload)
            .map_err(|e| ErasedError::Decode {
                entity_type: self.entity_type().to_string(),
                content_type,
                reason: e.0,
            })
    }
}

impl<E: Entity> ErasedRegion for Region<E> {
    fn entity_type(&self) -> &str {
        Region::entity_type(self)
    }

    fn node(&self) -> &RegionId {
        Region::node(self)
    }

    fn is_ready(&self) -> bool {
        Region::is_ready(self)
    }

    fn coordinator_reachable(&self) -> bool {
        Region::coordinator_reachable(self)
    }

    fn refused(&self) -> Option<String> {
        Region::refused(self)
    }

    fn state_failing(&self) -> Option<String> {
        Region::state_failing(self)
    }

    fn shard_of(&self, entity_id: &str) -> ShardId {
        Region::shard_of(self, entity_id)
    }

    fn tell<'a>(
        &'a self,
        entity_id: &'a str,
        content_type: ContentType,
        payload: &'a [u8],
    ) -> BoxFuture<'a, Result<Told, ErasedError>> {
        Box::pin(async move {
            let message = self.decode_message(content_type, payload)?;
            let buffered = self.tell_placed(entity_id, message).await?;
            Ok(Told {
                shard: Region::shard_of(self, entity_id),
                buffered,
            })
        })
    }

    fn tell_once<'a>(
        &'a self,
        entity_id: &'a str,
        key: &'a str,
        content_type: ContentType,
        payload: &'a [u8],
        timeout: Duration,
    ) -> BoxFuture<'a, Result<(ShardId, TellOnce), ErasedError>> {
        Box::pin(async move {
            let message = self.decode_message(content_type, payload)?;
            let once = Region::tell_once(self, entity_id, key, message, timeout).await?;
            Ok((Region::shard_of(self, entity_id), once))
        })
    }

    fn ask<'a>(
        &'a self,
        entity_id: &'a str,
        content_type: ContentType,
        payload: &'a [u8],
        timeout: Duration,
    ) -> BoxFuture<'a, Result<(ShardId, Bytes), ErasedError>> {
        Box::pin(async move {
            let message = self.decode_message(content_type, payload)?;
            let reply = Region::ask(self, entity_id, message, timeout).await?;
            let bytes = content_type
                .encode(&reply)
                .map_err(|e| ErasedError::EncodeReply {
                    entity_type: self.entity_type().to_string(),
                    content_type,
                    reason: e.0,
                })?;
            Ok((Region::shard_of(self, entity_id), bytes))
        })
    }

    fn state(&self, timeout: Duration) -> BoxFuture<'_, Result<CurrentRegionState, QueryError>> {
        Box::pin(Region::state(self, timeout))
    }

    fn cluster_stats(
        &self,
        timeout: Duration,
    ) -> BoxFuture<'_, Result<ClusterShardingStats, QueryError>> {
        Box::pin(Region::cluster_stats(self, timeout))
    }
}
