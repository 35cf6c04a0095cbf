//! A region: per node and entity type, routes messages by entity id to
//! shards, hosts local shards, buffers while a shard has no known home, and
//! speaks the coordinator protocol.
//!
//! Senders route through the shared `routes::Routes` table; the region task
//! only handles what changes it: coordinator messages, hand-offs, undelivered
//! batches, queries and shutdown. Its phases: connecting -> registering ->
//! active -> shutting down -> stopped.

pub(crate) mod activity;
mod erased;
pub(crate) mod outbound;
pub(crate) mod routes;
pub(crate) mod shard;
mod task;

use crate::codec;
use crate::entity::{Entity, EntityId, EntityType};
use crate::envelope::{Envelope, Reply, WireEnvelope};
use crate::error::{AskError, TellError};
use crate::inspection::{ClusterShardingStats, CurrentRegionState};
use crate::metrics::RegionMetrics;
use crate::node::context::NodeContext;
use colo_allocation::{MessageExtractor, RegionId, ShardId};
use futures::future::BoxFuture;
use routes::{Refused, Routes};
use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};

pub use erased::{ErasedError, ErasedRegion};

/// Capacity of the region task's command channel. Commands are rare (queries,
/// hand-off results, undelivered batches); senders wait when it is full.
const COMMAND_CAPACITY: usize = 1024;

/// What the region task is asked to do, by handles and by its own helpers.
pub(crate) enum RegionCmd<E: Entity> {
    /// The task opening the coordinator link is done (`None`: not reached).
    CoordinatorLinked {
        link: Option<crate::protocol::CoordinatorLink>,
    },
    /// A shard finished its hand-off; `leftovers` were still in its mailbox.
    ShardStopped {
        shard: ShardId,
        leftovers: VecDeque<Envelope<E>>,
    },
    /// Everything forwarded to the old home before BeginHandOff arrived there.
    BeginHandOffReady {
        shard: ShardId,
    },
    /// A remote node could not be reached; these go back to the buffer.
    Undeliverable {
        to: RegionId,
        serial: u64,
        envelopes: Vec<Envelope<E>>,
    },
    /// The outbound queue to `to` has ended: nothing more comes back from it.
    OutboundClosed {
        to: RegionId,
        serial: u64,
    },
    State {
        timeout: Duration,
        reply: oneshot::Sender<CurrentRegionState>,
    },
    ClusterStats {
        timeout: Duration,
        reply: oneshot::Sender<ClusterShardingStats>,
    },
    Shutdown {
        done: oneshot::Sender<()>,
    },
}

/// What routing needs, shared by every handle and the region task.
pub(crate) struct Shared<E: Entity> {
    pub id: RegionId,
    pub entity_type: Arc<EntityType<E>>,
    pub extractor: Arc<dyn MessageExtractor>,
    pub routes: Routes<E>,
    pub proxy: bool,
    pub node: Arc<NodeContext>,
    pub metrics: RegionMetrics,
    pub activity: Arc<activity::Activity>,
    /// Registered with a coordinator and not leaving: what readiness means.
    pub registered: std::sync::atomic::AtomicBool,
}

impl<E: Entity> Shared<E> {
    async fn route(&self, env: Envelope<E>) -> Result<(), Refused<E>> {
        self.routes.route(env).await
    }
}

/// A region as the node sees it: where the transport hands received
/// envelopes, and how the node stops it.
pub(crate) trait RegionInbound: Send + Sync + 'static {
    /// Routes an envelope received from another node; `false` when the
    /// region has stopped and the sender must keep it.
    fn deliver(&self, env: WireEnvelope) -> BoxFuture<'_, bool>;
    /// Refuses new messages (the node is dying).
    fn stop_accepting(&self);
    /// Hands off every shard and stops.
    fn shutdown(&self) -> BoxFuture<'_, ()>;
}

struct Inbound<E: Entity> {
    shared: Arc<Shared<E>>,
    commands: mpsc::Sender<RegionCmd<E>>,
}

impl<E: Entity> RegionInbound for Inbound<E> {
    fn deliver(&self, env: WireEnvelope) -> BoxFuture<'_, bool> {
        Box::pin(async move {
            let shared = &self.shared;
            let reply = env
                .reply_to
                .map_or(Reply::None, |to| Reply::Remote(Box::new(to)));
            let in_range = env.shard.0 < shared.extractor.number_of_shards();
            let message = match codec::decode::<E::Message>(&env.payload) {
                Ok(m) if in_range => m,
                Ok(_) | Err(_) => {
                    shared.metrics.dropped_bad_payload.increment(1);
                    tracing::warn!(entity_type = %shared.entity_type.name, entity_id = %env.entity_id, shard = %env.shard, "received message cannot be decoded or has an unknown shard; dropped");
                    shard::dropped(
                        reply,
                        &shared.node,
                        "message cannot be decoded by the receiving node",
                    );
                    return true;
                }
            };
            let envelope = Envelope {
                entity_id: env.entity_id,
                shard: env.shard,
                message,
                reply,
            };
            match shared.route(envelope).await {
                Ok(()) => true,
                Err(Refused {
                    error: TellError::RegionStopped(_),
                    ..
                }) => false,
                Err(Refused { error, envelope }) => {
                    // The sending node already accepted it; it is lost here,
                    // so it is counted, logged and an asker is told why.
                    shared.metrics.dropped_undeliverable.increment(1);
                    tracing::warn!(entity_type = %shared.entity_type.name, %error, "received message refused by this region; dropped");
                    shared
                        .node
                        .reply(envelope.reply, Err(AskError::Tell(error)));
                    true
                }
            }
        })
    }

    fn stop_accepting(&self) {
        self.shared.routes.stop();
        self.shared.metrics.hosted_shards.set(0.0);
    }

    fn shutdown(&self) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            let (done, wait) = oneshot::channel();
            if self
                .commands
                .send(RegionCmd::Shutdown { done })
                .await
                .is_ok()
            {
                let _ = wait.await;
            }
        })
    }
}

/// A handle on this node's region of one entity type: tell and ask entities
/// by id, wherever they live. Cheap to clone.
pub struct Region<E: Entity> {
    shared: Arc<Shared<E>>,
    commands: mpsc::Sender<RegionCmd<E>>,
}

impl<E: Entity> Clone for Region<E> {
    fn clone(&self) -> Self {
        Self {
            shared: self.shared.clone(),
            commands: self.commands.clone(),
        }
    }
}

impl<E: Entity> std::fmt::Debug for Region<E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Region")
            .field("entity_type", &self.shared.entity_type.name)
            .field("node", &self.shared.id)
            .field("proxy", &self.shared.proxy)
            .finish()
    }
}

/// An inspection query got no answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QueryError {
    /// No answer within the timeout (e.g. no coordinator reachable).
    #[error("no answer within {0:?}")]
    Timeout(Duration),
    /// The region has stopped.
    #[error("region has stopped")]
    Stopped,
}

impl<E: Entity> Region<E> {
    pub(crate) fn start(
        entity_type: EntityType<E>,
        proxy: bool,
        node: Arc<NodeContext>,
    ) -> (Self, Arc<dyn RegionInbound>) {
        let metrics = RegionMetrics::new(&entity_type.name);
        let (home_tx, home_rx) = mpsc::unbounded_channel();
        let (commands, command_rx) = mpsc::channel(COMMAND_CAPACITY);
        let Some(extractor) = entity_type.extractor.clone() else {
            // `validated` always sets the extractor; Node::start calls it first.
            unreachable!("entity type registered without validation")
        };
        let routes = Routes::new(
            extractor.number_of_shards(),
            entity_type.settings.buffer_size,
            entity_type.settings.handler_tell_timeout,
            &entity_type.name,
            home_tx,
            metrics.clone(),
        );
        let shared = Arc::new(Shared {
            id: node.id.clone(),
            entity_type: Arc::new(entity_type),
            extractor,
            routes,
            proxy,
            node: node.clone(),
            metrics,
            activity: Arc::default(),
            registered: std::sync::atomic::AtomicBool::new(false),
        });
        let task = task::RegionTask::new(shared.clone(), commands.clone());
        node.tasks.spawn(task.run(command_rx, home_rx));
        let inbound = Arc::new(Inbound {
            shared: shared.clone(),
            commands: commands.clone(),
        });
        (Self { shared, commands }, inbound)
    }

    /// The entity type's name.
    pub fn entity_type(&self) -> &str {
        &self.shared.entity_type.name
    }

    /// The node this region runs on.
    pub fn node(&self) -> &RegionId {
        &self.shared.id
    }

    /// Registered with the coordinator (so the shards it is given are
    /// hosted as they are assigned) and not shutting down.
    pub fn is_registered(&self) -> bool {
        self.shared
            .registered
            .load(std::sync::atomic::Ordering::Acquire)
    }

    /// The shard an entity belongs to.
    pub fn shard_of(&self, entity_id: &str) -> ShardId {
        self.shared.extractor.shard_id(entity_id)
    }

    fn envelope(
        &self,
        entity_id: &str,
        message: E::Message,
        reply: Reply<E::Reply>,
    ) -> Result<Envelope<E>, TellError> {
        if entity_id.is_empty() {
            return Err(TellError::EmptyEntityId);
        }
        Ok(Envelope {
            entity_id: EntityId::from(entity_id),
            shard: self.shared.extractor.shard_id(entity_id),
            message,
            reply,
        })
    }

    /// Sends a message to an entity, creating it if needed. Returns once the
    /// message is accepted (delivered to a mailbox, forwarded, or buffered);
    /// waits while the target shard's mailbox is full, which is the
    /// backpressure that bounds memory.
    ///
    /// Inside an entity handler that wait is bounded by
    /// `handler_tell_timeout`, after which the tell fails with
    /// [`TellError::MailboxFull`]: a handler never waits for ever on a shard
    /// that may be waiting for it.
    ///
    /// # Errors
    /// The buffer is full, the id is empty, the region has stopped, or (in a
    /// handler) the target's mailbox stayed full.
    pub async fn tell(&self, entity_id: &str, message: E::Message) -> Result<(), TellError> {
        let env = self.envelope(entity_id, message, Reply::None)?;
        self.shared
            .route(env)
            .await
            .map_err(|refused| refused.error)
    }

    /// Sends a message and waits for the entity's reply.
    ///
    /// # Errors
    /// The message was refused, the entity failed, or no reply came within
    /// `timeout` (the message may still be handled later).
    pub async fn ask(
        &self,
        entity_id: &str,
        message: E::Message,
        timeout: Duration,
    ) -> Result<E::Reply, AskError> {
        let (tx, rx) = oneshot::channel();
        let env = self.envelope(entity_id, message, Reply::Local(tx))?;
        let exchange = async {
            self.shared
                .route(env)
                .await
                .map_err(|refused| refused.error)?;
            rx.await.map_err(|_| {
                AskError::Dropped("the message was dropped before it was handled".into())
            })?
        };
        tokio::time::timeout(timeout, exchange)
            .await
            .map_err(|_| AskError::Timeout(timeout))?
    }

    /// This region's shards and the entities alive in each.
    ///
    /// # Errors
    /// The region has stopped, or did not answer within `timeout`.
    pub async fn state(&self, timeout: Duration) -> Result<CurrentRegionState, QueryError> {
        let (reply, rx) = oneshot::channel();
        self.query(RegionCmd::State { timeout, reply }, rx, timeout)
            .await
    }

    /// For every region of the cluster, shard -> number of live entities.
    ///
    /// # Errors
    /// The region has stopped, or the coordinator did not answer within
    /// `timeout` (regions that answer late are listed as failed instead).
    pub async fn cluster_stats(
        &self,
        timeout: Duration,
    ) -> Result<ClusterShardingStats, QueryError> {
        let (reply, rx) = oneshot::channel();
        self.query(RegionCmd::ClusterStats { timeout, reply }, rx, timeout)
            .await
    }

    async fn query<T>(
        &self,
        cmd: RegionCmd<E>,
        rx: oneshot::Receiver<T>,
        timeout: Duration,
    ) -> Result<T, QueryError> {
        // A little more than the query's own deadline, so a late answer that
        // lists failed shards still arrives.
        let outer = timeout + timeout / 4 + Duration::from_millis(50);
        let exchange = async {
            self.commands
                .send(cmd)
                .await
                .map_err(|_| QueryError::Stopped)?;
            rx.await.map_err(|_| QueryError::Stopped)
        };
        tokio::time::timeout(outer, exchange)
            .await
            .map_err(|_| QueryError::Timeout(timeout))?
    }

    /// Hands off every local shard to other regions, delivers every buffered
    /// message, then stops. Messages told after this returns are refused.
    pub async fn shutdown(&self) {
        let (done, wait) = oneshot::channel();
        if self
            .commands
            .send(RegionCmd::Shutdown { done })
            .await
            .is_ok()
        {
            let _ = wait.await;
        }
    }
}
