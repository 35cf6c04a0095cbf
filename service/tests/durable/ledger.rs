//! The durable entity the tests use, and a node running it on its own.

use colo::allocation::{HashExtractor, LeastShardAllocationStrategy, LeastShardSettings};
use colo::state::{Engine, StateRecord, StateStore};
use colo::{
    CoordinatorHandle, Entity, EntityContext, EntityError, EntityType, InMemoryNetwork,
    InMemoryStore, Node, NodeStore, Region, ShardingSettings, StateSettings,
};
use colo_allocation::MessageExtractor;
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use std::time::Duration;

pub const LEDGER: &str = "ledger";
pub const SHARDS: u32 = 8;
pub const ASK: Duration = Duration::from_secs(10);

/// An account's balance: the entity's whole value is its state.
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct Ledger {
    pub balance: i64,
    pub entries: u32,
}

#[derive(Debug, Serialize, Deserialize)]
pub enum LedgerMsg {
    Add(i64),
    /// Adds, then fails: the change must not be kept.
    AddThenFail(i64),
    Get,
    Passivate,
    Delete,
}

impl Entity for Ledger {
    type Message = LedgerMsg;
    type Reply = (i64, u32);

    async fn handle(
        &mut self,
        ctx: &EntityContext,
        message: LedgerMsg,
    ) -> Result<(i64, u32), EntityError> {
        match message {
            LedgerMsg::Add(n) => {
                self.balance += n;
                self.entries += 1;
            }
            LedgerMsg::AddThenFail(n) => {
                self.balance += n;
                return Err(EntityError::new("refused after adding"));
            }
            LedgerMsg::Get => {}
            LedgerMsg::Passivate => ctx.passivate(),
            LedgerMsg::Delete => ctx.delete(),
        }
        Ok((self.balance, self.entries))
    }
}

pub fn settings() -> ShardingSettings {
    ShardingSettings {
        number_of_shards: SHARDS,
        retry_interval: Duration::from_millis(50),
        ..ShardingSettings::default()
    }
}

pub fn ledger(version: u32) -> EntityType<Ledger> {
    EntityType::new(LEDGER, |_| Ledger::default())
        .with_settings(settings())
        .durable(version)
}

/// A network with the ledger's coordinator: nodes join it one by one.
pub struct Cluster {
    pub network: InMemoryNetwork,
    pub coordinator: CoordinatorHandle,
    pub entity_type: String,
}

/// A cluster whose entity type is named `entity_type` (tests that read
/// metrics use a name of their own). Shards are never rebalanced: they
/// move only when a node leaves, when a test says so.
pub fn cluster(entity_type: &str) -> Cluster {
    cluster_with(entity_type, settings())
}

/// [`cluster`] whose coordinator has other sharding settings (its
/// `rebalance_interval` is still an hour).
pub fn cluster_with(entity_type: &str, settings: ShardingSettings) -> Cluster {
    // What the nodes log, shown with a failing test's output.
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new("info"))
        .with_test_writer()
        .try_init();
    let network = InMemoryNetwork::new();
    let strategy = LeastShardAllocationStrategy::new(LeastShardSettings::default())
        .expect("least-shard settings");
    let settings = ShardingSettings {
        rebalance_interval: Duration::from_secs(3600),
        ..settings
    };
    let coordinator = CoordinatorHandle::spawn(
        entity_type,
        settings,
        Box::new(strategy),
        Arc::new(InMemoryStore::new()),
    )
    .expect("coordinator settings");
    network.host_coordinator(coordinator.clone());
    Cluster {
        network,
        coordinator,
        entity_type: entity_type.to_string(),
    }
}

impl Cluster {
    /// Node `name`, its ledger region writing to `store`.
    pub fn node(&self, name: &str, store: NodeStore, version: u32) -> OneNode {
        self.node_with(name, store, settings(), version)
    }

    /// [`Cluster::node`] with other sharding settings.
    pub fn node_with(
        &self,
        name: &str,
        store: NodeStore,
        settings: ShardingSettings,
        version: u32,
    ) -> OneNode {
        let node = Arc::new(Node::with_state_store(self.network.transport(name), store));
        let entity_type = EntityType::new(self.entity_type.clone(), |_| Ledger::default())
            .with_settings(settings)
            .durable(version);
        let region = node.start_region(entity_type).expect("ledger registers");
        OneNode {
            node,
            region,
            _coordinator: self.coordinator.clone(),
        }
    }
}

/// A node and its ledger region.
pub struct OneNode {
    pub node: Arc<Node>,
    pub region: Region<Ledger>,
    pub _coordinator: CoordinatorHandle,
}

/// A node on a network of its own, its ledger writing to `store`.
pub fn start(store: &Arc<dyn StateStore>, state: StateSettings, version: u32) -> OneNode {
    cluster(LEDGER).node("a", NodeStore::new(store.clone(), state), version)
}

pub fn open(dir: &tempfile::TempDir) -> Arc<dyn StateStore> {
    Arc::from(colo::state::open(dir.path(), Engine::Fjall).expect("store opens"))
}

/// Writes at once, whatever changed: a reply then says its change is in
/// the store.
pub fn at_once() -> StateSettings {
    StateSettings {
        flush_interval: Duration::from_secs(3600),
        max_dirty: 1,
        ..StateSettings::default()
    }
}

pub fn shard_of(id: &str) -> colo::ShardId {
    HashExtractor::new(SHARDS).expect("shards").shard_id(id)
}

/// What the store holds for `id`, decoded.
pub async fn stored(store: &Arc<dyn StateStore>, id: &str) -> Option<StateRecord> {
    stored_as(store, LEDGER, id).await
}

/// What the store holds for `id` of `entity_type`, decoded.
pub async fn stored_as(
    store: &Arc<dyn StateStore>,
    entity_type: &str,
    id: &str,
) -> Option<StateRecord> {
    let store = store.clone();
    let (entity_type, id) = (entity_type.to_string(), id.to_string());
    tokio::task::spawn_blocking(move || {
        store
            .load(&entity_type, shard_of(&id), &id)
            .expect("load")
            .map(|value| StateRecord::decode(&value).expect("a record"))
    })
    .await
    .expect("load thread")
}
