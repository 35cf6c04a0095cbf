//! A node: one process's regions, its transport, its table of remote asks,
//! and every task it started (so that it can stop them all).

mod recipient;

use crate::entity::{Entity, EntityType, RegistrationError};
use crate::node_context::{NodeContext, NodeTasks};
use crate::region::{ErasedRegion, Region};
use crate::replies::PendingReplies;
use crate::store::NodeStore;
use crate::transport::Transport;
use colo_allocation::RegionId;
use parking_lot::RwLock;
use recipient::NodeRecipient;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

/// How long a gracefully stopping node waits for its last replies and
/// batches to reach other nodes. Beyond it a receiver is unreachable or
/// stuck, and its askers time out either way.
const LAST_SENDS: std::time::Duration = std::time::Duration::from_secs(5);

/// One node of a cluster: runs a region per entity type.
pub struct Node {
    context: Arc<NodeContext>,
    recipient: Arc<NodeRecipient>,
    /// Every region ever started here, by entity type, for callers that
    /// reach them by name. Kept after shutdown (unlike the recipient's table), so
    /// that such a caller learns the region has stopped rather than that the
    /// entity type does not exist.
    by_name: RwLock<BTreeMap<String, Arc<dyn ErasedRegion>>>,
    /// What this node is for ([`Node::with_roles`]): an entity type with a
    /// role runs its shards only on nodes that have it.
    roles: BTreeSet<String>,
}

impl std::fmt::Debug for Node {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Node")
            .field("id", &self.context.id)
            .finish_non_exhaustive()
    }
}

impl Node {
    /// A node named after its transport's local name, reachable at once.
    /// It runs entity types that are not durable; see
    /// [`Node::with_state_store`] for durable ones.
    pub fn new(transport: Arc<dyn Transport>) -> Self {
        Self::build(transport, None)
    }

    /// A node whose durable entity types keep their state in `store` (one
    /// store per node: [`NodeStore::open`] on the node's data directory).
    pub fn with_state_store(transport: Arc<dyn Transport>, store: NodeStore) -> Self {
        Self::build(transport, Some(Arc::new(store)))
    }

    fn build(transport: Arc<dyn Transport>, store: Option<Arc<NodeStore>>) -> Self {
        crate::metrics::describe();
        let context = Arc::new(NodeContext {
            id: transport.local().clone(),
            incarnation: transport.incarnation(),
            transport: transport.clone(),
            pending: PendingReplies::default(),
            tasks: NodeTasks::default(),
            store,
            kafka: Arc::default(),
            memory: Arc::default(),
        });
        let recipient = Arc::new(NodeRecipient::new(context.clone()));
        transport.attach(recipient.clone());
        Self {
            context,
            recipient,
            by_name: RwLock::default(),
            roles: BTreeSet::new(),
        }
    }

    /// Gives the node its roles, before it starts a region: an entity type
    /// with a role ([`EntityType::with_role`]) hosts shards only on nodes
    /// that have it, and a node without it routes to the type as a proxy.
    /// A node without roles hosts only the types without one.
    pub fn with_roles(mut self, roles: impl IntoIterator<Item = impl Into<String>>) -> Self {
        self.roles = roles.into_iter().map(Into::into).collect();
        self
    }

    /// Gives the node a memory budget for its entities, before it starts a
    /// region: the entity types that passivate with a replacement policy
    /// keep their active entities' estimated memory within it, each shard
    /// within an even share, the policy choosing whom to passivate. An
    /// entity weighs what its entity type reports
    /// ([`EntityType::with_size`]), else its value's size, plus its encoded
    /// state for a durable type (about what it owns on the heap).
    /// 0 bytes: no budget. Beside `active_entity_limit`, both
    /// bounds hold; without it, the budget alone bounds the count.
    pub fn with_memory_budget(self, bytes: u64) -> Self {
        self.context.memory.set(bytes);
        self
    }

    /// The node's roles, sorted.
    pub fn roles(&self) -> impl Iterator<Item = &str> {
        self.roles.iter().map(String::as_str)
    }

    /// Whether this node hosts the shards of an entity type of `role`
    /// (every node hosts those of a type without one).
    pub fn has_role(&self, role: Option<&str>) -> bool {
        role.is_none_or(|role| self.roles.contains(role))
    }

    /// The node's name.
    pub fn id(&self) -> &RegionId {
        &self.context.id
    }

    /// Registers an entity type and starts its region here: a proxy
    /// ([`Node::start_proxy`]) when the type has a role this node has not.
    ///
    /// # Errors
    /// The entity type is invalid or already registered on this node.
    pub fn start_region<E: Entity>(
        &self,
        entity_type: EntityType<E>,
    ) -> Result<Region<E>, RegistrationError> {
        self.start(entity_type, false)
    }

    /// Starts a proxy region: it routes to the entity type's shards but hosts
    /// none, e.g. on a node that only sends.
    ///
    /// # Errors
    /// The entity type is invalid or already registered on this node.
    pub fn start_proxy<E: Entity>(
        &self,
        entity_type: EntityType<E>,
    ) -> Result<Region<E>, RegistrationError> {
        self.start(entity_type, true)
    }

    fn start<E: Entity>(
        &self,
        entity_type: EntityType<E>,
        proxy: bool,
    ) -> Result<Region<E>, RegistrationError> {
        let entity_type = entity_type.validated()?;
        let has_role = self.has_role(entity_type.role());
        if !has_role {
            tracing::info!(entity_type = %entity_type.name, role = entity_type.role(), roles = ?self.roles, "the entity type's shards run on nodes with its role, which this node has not: it routes to them as a proxy");
        }
        let proxy = proxy || !has_role;
        let passivation = &entity_type.settings.passivation;
        if !proxy
            && passivation.replacement.is_some()
            && passivation.active_entity_limit.is_none()
            && self.context.memory.bytes().is_none()
        {
            tracing::warn!(entity_type = %entity_type.name, "a replacement policy without an active-entity limit, on a node without a memory budget: it passivates nothing (set PassivationStrategy::active_entity_limit, or Node::with_memory_budget)");
        }
        if entity_type.is_durable() && !proxy {
            match &self.context.store {
                None => return Err(RegistrationError::NoStateStore(entity_type.name)),
                Some(store) if !entity_type.outputs.is_empty() && store.outputs().is_none() => {
                    return Err(RegistrationError::NoOutputs(entity_type.name));
                }
                Some(store) if store.changelog(&entity_type.name).is_none() => {
                    tracing::warn!(entity_type = %entity_type.name, "durable entity type without a changelog: its state stays in this node's store; a shard that moves to another node starts there without it, and finds an older copy if it comes back (a node program gives every durable type a changelog when it has [kafka])");
                }
                Some(_) => {}
            }
        }
        let changelog = entity_type.is_durable()
            && self
                .context
                .store
                .as_ref()
                .is_some_and(|store| store.changelog(&entity_type.name).is_some());
        if entity_type.settings.standbys > 0 && !proxy && !changelog {
            // `[sharding]` applies to every entity type of a node program.
            tracing::warn!(entity_type = %entity_type.name, "sharding.standbys applies to durable entity types with a changelog only; not to this one");
        }
        let mut regions = self.recipient.regions.write();
        if regions.contains_key(&entity_type.name) {
            return Err(RegistrationError::AlreadyRegistered(entity_type.name));
        }
        let (region, inbound) = Region::start(entity_type, proxy, self.context.clone());
        regions.insert(region.entity_type().to_string(), inbound);
        self.by_name
            .write()
            .insert(region.entity_type().to_string(), Arc::new(region.clone()));
        Ok(region)
    }

    /// What this node's Kafka consumers do now (the cluster map shows it).
    pub(crate) fn kafka_view(&self) -> &crate::kafka_view::KafkaView {
        &self.context.kafka
    }

    /// The standby copies this node keeps now (the cluster map shows them).
    pub(crate) fn standby_copies(&self) -> Vec<crate::store::StandbyView> {
        self.context
            .store
            .as_ref()
            .map(|store| store.standby_copies().views())
            .unwrap_or_default()
    }

    /// The names of the entity types this node has started a region for
    /// (proxies included), sorted.
    pub fn entity_types(&self) -> Vec<String> {
        self.by_name.read().keys().cloned().collect()
    }

    /// This node's region of an entity type, reached with encoded messages:
    /// for callers that know the entity type only by name.
    pub fn region_by_name(&self, entity_type: &str) -> Option<Arc<dyn ErasedRegion>> {
        self.by_name.read().get(entity_type).cloned()
    }

    /// Where the coordinator of `entity_type` is, as this node knows it:
    /// the hosting node's address and its epoch (0 where not known).
    pub fn coordinator_of(&self, entity_type: &str) -> Option<(String, u64)> {
        self.context.transport.coordinator_of(entity_type)
    }

    /// Why the node is not ready for traffic, per entity type whose region
    /// is not: never registered with a coordinator (with the coordinator's
    /// refusal, if any), leaving, or a durable type whose state writes fail
    /// now. Empty when the node is ready.
    pub fn not_ready(&self) -> Vec<String> {
        self.by_name
            .read()
            .iter()
            .filter_map(|(name, region)| {
                if !region.is_ready() {
                    return Some(match region.refused() {
                        Some(reason) => format!("{name} refused: {reason}"),
                        None => format!("{name} not registered"),
                    });
                }
                region
                    .state_failing()
                    .map(|reason| format!("{name}: {reason}"))
            })
            .collect()
    }

    /// Gracefully stops every region of the node: each hands off its shards
    /// to the other nodes and delivers its buffered messages first.
    pub async fn shutdown(&self) {
        let regions: Vec<_> = self.recipient.regions.read().values().cloned().collect();
        futures::future::join_all(regions.iter().map(|r| r.shutdown())).await;
        self.recipient.regions.write().clear();
        self.context.transport.detach();
        self.recipient.close();
        // The process usually ends next: the entities' last replies must
        // have left first.
        self.context.transport.finish_sending(LAST_SENDS).await;
    }

    /// Stops the node at once, as a crash would: no hand-off, entities
    /// dropped, other nodes find it unreachable and its coordinator links
    /// close.
    pub async fn kill(&self) {
        self.context.transport.abort();
        self.recipient.close();
        for region in self.recipient.regions.read().values() {
            region.stop_accepting();
        }
        self.context.tasks.abort_all().await;
        self.recipient.regions.write().clear();
    }
}
