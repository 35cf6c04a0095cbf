//! A region: per node and entity type, routes messages by entity id to
//! shards, hosts local shards, buffers while a shard has no known home, and
//! speaks the coordinator protocol.
//!
//! Senders route through the shared `routes::Routes` table; the region task
//! only handles what changes it: coordinator messages, hand-offs, undelivered
//! batches, queries and shutdown. Its state is three explicit machines (see
//! `task.rs`): the region's phase (running -> shutting down -> stopped), its
//! contact with the coordinator (unlinked -> registering -> registered),
//! published to senders as one view, and one phase per shard, where durable
//! state adds its own. Everything below this module is private to it.

mod activity;
mod assigned;
mod command;
mod delivery;
mod erased;
mod lease;
mod mail;
mod outbound;
mod placement;
mod recipient;
mod routes;
mod shard;
mod shared;
mod task;

use crate::entity::{Entity, EntityId, EntityType};
use crate::envelope::{AckedAnswer, Cause, Envelope, Reply};
use crate::error::{check_idempotency_key, replied, AskError, QueryError, TellError};
use crate::inspection::{ClusterShardingStats, CurrentRegionState};
use crate::metrics::RegionMetrics;
use crate::node_context::NodeContext;
use colo_allocation::{RegionId, ShardId};
use routes::Routes;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};

pub(crate) use assigned::AssignedShard;
use command::{shut_down, RegionCmd, COMMAND_CAPACITY};
pub use delivery::Delivery;
pub use erased::{ErasedError, ErasedRegion, TellOnce, Told};
pub use placement::PlacementError;
use recipient::ReceivingHalf;
pub(crate) use recipient::{Placed, RegionRecipient};
use shared::Shared;

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

impl<E: Entity> Region<E> {
    /// Hands a placement to the region task (`placement.rs` builds it);
    /// false if the task has stopped.
    async fn send_placement(
        &self,
        request: placement::PlacementRequest,
        reply: placement::PlacementReply,
    ) -> bool {
        self.commands
            .send(RegionCmd::Placement { request, reply })
            .await
            .is_ok()
    }

    pub(crate) fn start(
        entity_type: EntityType<E>,
        proxy: bool,
        node: Arc<NodeContext>,
    ) -> (Self, Arc<dyn RegionRecipient>) {
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
            lease: Arc::default(),
            contact: shared::PublishedContact::default(),
            durable: Arc::default(),
            assignments: Arc::default(),
            members: tokio::sync::watch::Sender::default(),
        });
        let task = task::RegionTask::new(shared.clone(), commands.clone());
        node.tasks.spawn(task.run(command_rx, home_rx));
        if let Some(standbys) = standbys_of(&shared) {
            node.tasks.spawn(standbys.run());
        }
        let inbound = Arc::new(ReceivingHalf {
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

    /// Ready for traffic: registered with a coordinator once, and not
    /// shutting down. It stays ready while the coordinator is away (the
    /// region serves the shards it knows and buffers the rest); see
    /// [`Self::coordinator_reachable`].
    pub fn is_ready(&self) -> bool {
        self.shared.contact.view().ready
    }

    /// Whether the coordinator answers this region now.
    pub fn coordinator_reachable(&self) -> bool {
        self.shared.contact.view().reachable
    }

    /// Why the coordinator refuses this region, if it does (it disagrees
    /// with the cluster on the number of shards or the extractor).
    pub fn refused(&self) -> Option<String> {
        self.shared.contact.refused()
    }

    /// Why a durable entity type's state is not being written now (a shard
    /// whose writes fail: a disk full, the changelog's broker away), if so.
    /// Nothing such a write covers is acknowledged meanwhile.
    pub fn state_failing(&self) -> Option<String> {
        self.shared.durable.failing()
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
            credit: None,
            received: false,
            delayed: false,
        })
    }

    /// Sends a message to an entity, creating it if needed. Returns once the
    /// message is accepted (delivered to a mailbox, forwarded, or buffered);
    /// waits while the target shard's mailbox is full, which is the
    /// backpressure that bounds memory.
    ///
    /// Delivery: the message is handled at most once, after the messages
    /// this region was told earlier for the same entity (unless it was on
    /// another node when that node fenced itself: then the handler sees
    /// [`EntityContext::delayed`](crate::EntityContext::delayed)); it is
    /// lost only if a node holding it dies first.
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
        self.tell_placed(entity_id, message).await.map(drop)
    }

    /// [`Self::tell`], saying why the message waits when it does.
    async fn tell_placed(
        &self,
        entity_id: &str,
        message: E::Message,
    ) -> Result<Option<&'static str>, TellError> {
        let env = self.envelope(entity_id, message, Reply::None)?;
        let placement = self.shared.routes.route(env).await?;
        Ok(match placement {
            routes::Placement::Buffered if !self.coordinator_reachable() => {
                Some("coordinator unreachable")
            }
            routes::Placement::Buffered => Some("waiting for the shard's home"),
            routes::Placement::Delivered | routes::Placement::Forwarded => None,
        })
    }

    /// Sends a message and waits for the entity's reply.
    ///
    /// Delivery: as [`Self::tell`]; the answer is the entity's reply or an
    /// error, and a timeout means the message may or may not be handled.
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
        let exchange = async { replied(self.route_tracked(entity_id, message, None).await?).await };
        tokio::time::timeout(timeout, exchange)
            .await
            .map_err(|_| AskError::Timeout(timeout))?
    }

    /// Tells `message` to `entity_id` once for `key`, however often it is
    /// retried: the entity applies it unless it applied a tell with the
    /// same key within the entity type's `idempotency_retention` (and among
    /// its last `idempotency_keys`), wherever it runs by then. Returns once
    /// the outcome is known: applied (durably, for a durable entity type),
    /// or applied before. A tell whose handler failed changed nothing and
    /// keeps no key: retried, it runs again.
    ///
    /// # Errors
    /// The key is empty or longer than [`crate::MAX_IDEMPOTENCY_KEY`]
    /// bytes, the message was refused, the entity failed, or no answer came
    /// within `timeout` (the tell may still be applied: retry it with the
    /// same key).
    pub async fn tell_once(
        &self,
        entity_id: &str,
        key: &str,
        message: E::Message,
        timeout: Duration,
    ) -> Result<TellOnce, AskError> {
        check_idempotency_key(key)?;
        let cause = Some(Box::new(Cause::Keyed(Arc::from(key))));
        let exchange =
            async { replied(self.route_tracked(entity_id, message, cause).await?).await };
        match tokio::time::timeout(timeout, exchange).await {
            Err(_) => Err(AskError::Timeout(timeout)),
            Ok(Ok(_)) => Ok(TellOnce::Applied),
            Ok(Err(AskError::AlreadyApplied)) => Ok(TellOnce::AlreadyApplied),
            Ok(Err(e)) => Err(e),
        }
    }

    /// Routes a message whose outcome the caller waits for itself (a
    /// source's partition routes its records in order and waits for them
    /// in order), wherever its shard is. `cause`: the acked record it is, or
    /// a client tell's idempotency key, if any (see [`Reply::Local`]).
    pub(crate) async fn route_tracked(
        &self,
        entity_id: &str,
        message: E::Message,
        cause: Option<Box<Cause>>,
    ) -> Result<oneshot::Receiver<Result<E::Reply, AskError>>, TellError> {
        let (tx, rx) = oneshot::channel();
        let env = self.envelope(entity_id, message, Reply::Local(tx, cause))?;
        self.shared.routes.route(env).await?;
        Ok(rx)
    }

    /// Routes an acked record's message to `entity_id`, of `shard` (its
    /// extractor's: the caller has it already); its outcome comes on the
    /// returned channel. Dropping the channel gives the record up: wherever
    /// it waits, it is dropped before an entity gets it (see
    /// [`Reply::Acked`]).
    pub(crate) async fn route_acked(
        &self,
        entity_id: &EntityId,
        shard: ShardId,
        message: E::Message,
        origin: Option<Box<Cause>>,
    ) -> Result<oneshot::Receiver<AckedAnswer<E::Reply>>, TellError> {
        if entity_id.is_empty() {
            return Err(TellError::EmptyEntityId);
        }
        let (tx, rx) = oneshot::channel();
        let env = Envelope {
            entity_id: entity_id.clone(),
            shard,
            message,
            reply: Reply::Acked(tx, origin),
            credit: None,
            received: false,
            delayed: false,
        };
        self.shared.routes.route(env).await?;
        Ok(rx)
    }

    /// Whether its entities' state is durable here: then a record's offset
    /// is committed only once the change it made is durable
    /// ([`Region::durable_wait`]).
    pub(crate) fn is_durable(&self) -> bool {
        self.shared.entity_type.is_durable() && self.shared.node.store.is_some()
    }

    /// Its local durable shards, told of committed offsets by its ingest.
    pub(crate) fn durable_shards(&self) -> Arc<crate::store::DurableShards> {
        self.shared.durable.clone()
    }

    /// Waits until `shard`'s state is restored, if it is durable and runs
    /// here; false if its task ended first.
    pub(crate) async fn restored(&self, shard: ShardId) -> bool {
        self.shared.durable.restored(shard).await
    }

    /// The node this region runs on, for the tasks that serve it.
    pub(crate) fn context(&self) -> &Arc<NodeContext> {
        &self.shared.node
    }

    /// The entity type's name.
    pub(crate) fn entity_type_name(&self) -> &str {
        &self.shared.entity_type.name
    }

    /// How long a hand-off of this entity type may take.
    pub(crate) fn handoff_timeout(&self) -> Duration {
        self.shared.entity_type.settings.handoff_timeout
    }

    /// Whether the entity type passivates entities on its own: an idle
    /// timeout, or a replacement policy with an active-entity limit or the
    /// node's memory budget.
    pub(crate) fn passivates(&self) -> bool {
        let passivation = &self.shared.entity_type.settings.passivation;
        let bounded =
            passivation.active_entity_limit.is_some() || self.shared.node.memory.bytes().is_some();
        passivation.idle_timeout.is_some() || (bounded && passivation.replacement.is_some())
    }

    /// Notes that `topic`'s partition of `shard` is assigned to this
    /// node's consumer, until the returned value is dropped (see
    /// `assigned.rs`).
    pub(crate) fn partition_assigned(&self, topic: Arc<str>, shard: ShardId) -> AssignedShard {
        self.shared.assignments.hold(topic, shard)
    }

    /// Where messages for `shard` go now, in words (see
    /// `Routes::describe`).
    pub(crate) fn describe_route(&self, shard: ShardId) -> String {
        self.shared.routes.describe(shard)
    }

    /// The entity type's number of shards.
    pub(crate) fn number_of_shards(&self) -> u32 {
        self.shared.entity_type.settings.number_of_shards
    }

    /// The region's task has ended.
    pub(crate) fn is_stopped(&self) -> bool {
        self.commands.is_closed()
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
            .await?
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
        shut_down(&self.commands).await;
    }
}

/// The region's standby shards (`store/standby.rs`), when its entity type
/// is durable with a changelog and `sharding.standbys` asks for copies.
fn standbys_of<E: Entity>(shared: &Arc<Shared<E>>) -> Option<crate::store::Standbys> {
    let settings = &shared.entity_type.settings;
    if shared.proxy || settings.standbys == 0 || !shared.entity_type.is_durable() {
        return None;
    }
    let store = shared.node.store.clone()?;
    let changelog = store.changelog(&shared.entity_type.name)?;
    let members = shared.members.subscribe();
    Some(crate::store::Standbys::new(
        store,
        changelog,
        &shared.entity_type.name,
        shared.extractor.number_of_shards(),
        settings.standbys,
        shared.id.clone(),
        members,
        shared.durable.clone(),
    ))
}
