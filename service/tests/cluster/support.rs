//! What the scenarios share: a probe entity that logs every delivery, a
//! checker that no entity id is ever live in two places, a cluster builder,
//! and polling with a deadline.

use colo::allocation::{AllocationStrategy, LeastShardAllocationStrategy, LeastShardSettings};
use colo::{
    CoordinatorHandle, EntityType, InMemoryNetwork, InMemoryStore, Node, Region, ShardId,
    ShardingSettings,
};
use parking_lot::Mutex;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

pub use colo_tests::recorded::{counter, gauge, gauges, install as metrics};
pub use colo_tests::wait::until as eventually;

mod probe;

pub const ASK: Duration = Duration::from_secs(5);

pub use probe::*;

/// Fast settings so scenarios finish in well under a second of protocol
/// time. Failure detection stays slow enough for a loaded machine: a node
/// that is not killed or partitioned never misses 1.5 s of answers.
pub fn fast_settings(shards: u32) -> ShardingSettings {
    ShardingSettings {
        number_of_shards: shards,
        retry_interval: Duration::from_millis(50),
        rebalance_interval: Duration::from_millis(100),
        handoff_timeout: Duration::from_secs(5),
        shard_start_timeout: Duration::from_secs(1),
        heartbeat_interval: Duration::from_millis(100),
        fence_timeout: Duration::from_millis(1500),
        region_timeout: Duration::from_millis(2500),
        ..ShardingSettings::default()
    }
}

pub fn least_shard_new(absolute: usize, relative: f64) -> Box<dyn AllocationStrategy> {
    Box::new(
        LeastShardAllocationStrategy::new(LeastShardSettings {
            rebalance_absolute_limit: absolute,
            rebalance_relative_limit: relative,
            ..LeastShardSettings::default()
        })
        .expect("valid least-shard settings"),
    )
}

/// A cluster of in-process nodes with one probe entity type.
pub struct Cluster {
    pub name: String,
    pub network: InMemoryNetwork,
    pub settings: ShardingSettings,
    pub world: Arc<World>,
    pub store: InMemoryStore,
    pub coordinator: Option<CoordinatorHandle>,
    pub nodes: BTreeMap<String, (Node, Region<Probe>)>,
}

static NEXT: AtomicU64 = AtomicU64::new(0);

impl Cluster {
    /// A cluster without nodes; `name` is unique per test (metric labels).
    pub fn new(test: &str, settings: ShardingSettings) -> Self {
        // Before any region registers its metrics: a test may read them.
        let _ = metrics();
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        Self {
            name: format!("{test}-{}-{n}", std::process::id()),
            network: InMemoryNetwork::new(),
            settings,
            world: Arc::default(),
            store: InMemoryStore::new(),
            coordinator: None,
            nodes: BTreeMap::new(),
        }
    }

    pub fn entity_type(&self, node: &str) -> EntityType<Probe> {
        probe_entity_type(&self.name, node, self.world.clone(), self.settings.clone())
    }

    pub fn start_coordinator(&mut self, strategy: Box<dyn AllocationStrategy>) {
        let c = CoordinatorHandle::spawn(
            &self.name,
            self.settings.clone(),
            strategy,
            Arc::new(self.store.clone()),
        )
        .expect("valid coordinator settings");
        self.network.host_coordinator(c.clone());
        self.coordinator = Some(c);
    }

    pub fn add_node(&mut self, name: &str) -> Region<Probe> {
        let node = Node::new(self.network.transport(name));
        let region = node
            .start_region(self.entity_type(name))
            .expect("valid entity type");
        self.world
            .regions
            .lock()
            .insert(name.to_string(), region.clone());
        self.nodes.insert(name.to_string(), (node, region.clone()));
        region
    }

    pub fn add_proxy(&mut self, name: &str) -> Region<Probe> {
        let node = Node::new(self.network.transport(name));
        let region = node
            .start_proxy(self.entity_type(name))
            .expect("valid entity type");
        self.nodes.insert(name.to_string(), (node, region.clone()));
        region
    }

    /// A node with `roles` that starts the entity type with `role`, as
    /// every node of a cluster with roles does: a node without the role
    /// runs a proxy.
    pub fn add_node_with_roles(&mut self, name: &str, roles: &[&str], role: &str) -> Region<Probe> {
        let node = Node::new(self.network.transport(name)).with_roles(roles.iter().copied());
        let entity_type = self.entity_type(name).with_role(role);
        let hosts = node.has_role(Some(role));
        self.add_built(name, node, entity_type, hosts)
    }

    /// `node`, built by the caller on this cluster's network, running
    /// `entity_type` (`hosts`: not as a proxy).
    pub fn add_built(
        &mut self,
        name: &str,
        node: Node,
        entity_type: EntityType<Probe>,
        hosts: bool,
    ) -> Region<Probe> {
        let region = node.start_region(entity_type).expect("valid entity type");
        if hosts {
            self.world
                .regions
                .lock()
                .insert(name.to_string(), region.clone());
        }
        self.nodes.insert(name.to_string(), (node, region.clone()));
        region
    }

    pub fn region(&self, name: &str) -> Region<Probe> {
        self.nodes[name].1.clone()
    }

    /// Waits until `n` regions (not proxies) are registered.
    pub async fn await_regions(&self, n: usize) {
        eventually(
            &format!("{n} regions registered"),
            Duration::from_secs(5),
            || async { self.shard_counts().len() == n },
        )
        .await;
    }

    /// Shard homes as the coordinator's persisted events say.
    pub fn homes(&self) -> BTreeMap<ShardId, String> {
        let state = colo::coordinator::ledger::CoordinatorState::replay(self.store.events())
            .expect("coordinator events replay");
        state
            .allocations()
            .iter()
            .flat_map(|(r, shards)| shards.iter().map(move |s| (*s, r.to_string())))
            .collect()
    }

    /// Shards per registered region.
    pub fn shard_counts(&self) -> BTreeMap<String, usize> {
        let state = colo::coordinator::ledger::CoordinatorState::replay(self.store.events())
            .expect("coordinator events replay");
        state
            .allocations()
            .iter()
            .map(|(r, s)| (r.to_string(), s.len()))
            .collect()
    }

    /// `n` entity ids of `shard`, found by the extractor.
    pub fn ids_in(&self, shard: u32, n: usize) -> Vec<String> {
        let region = self.nodes.values().next().expect("a node").1.clone();
        (0..)
            .map(|i| format!("s{shard}-{i}"))
            .filter(|id| region.shard_of(id) == ShardId(shard))
            .take(n)
            .collect()
    }

    /// Touches one entity in every shard so that every shard gets a home.
    pub async fn touch_all_shards(&self, via: &str) -> BTreeMap<ShardId, String> {
        let region = self.region(via);
        let mut ids = BTreeMap::new();
        let mut i = 0u64;
        while ids.len() < self.settings.number_of_shards as usize {
            let id = format!("e{i}");
            ids.entry(region.shard_of(&id)).or_insert(id);
            i += 1;
        }
        for id in ids.values() {
            region
                .ask(id, ProbeMsg::Where, ASK)
                .await
                .expect("touch ask");
        }
        ids
    }
}

/// Tells `Record` messages round-robin over `ids` from one sender until
/// stopped; returns how many each entity was sent.
pub struct Sender {
    stop: Arc<std::sync::atomic::AtomicBool>,
    task: tokio::task::JoinHandle<BTreeMap<(String, String), u64>>,
}

impl Sender {
    /// A refused tell (a full buffer while homes are unknown) is not
    /// accepted: the sender backs off and sends the same sequence number
    /// again, as a client should.
    pub fn start(region: Region<Probe>, from: &str, ids: Vec<String>) -> Self {
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = stop.clone();
        let from = from.to_string();
        let task = tokio::spawn(async move {
            let mut sent: BTreeMap<(String, String), u64> = BTreeMap::new();
            while !flag.load(Ordering::Relaxed) {
                for id in &ids {
                    let seq = sent.entry((id.clone(), from.clone())).or_insert(0);
                    let record = ProbeMsg::Record {
                        from: from.clone(),
                        seq: *seq,
                    };
                    match region.tell(id, record).await {
                        Ok(()) => *seq += 1,
                        Err(colo::TellError::BufferFull { .. }) => {
                            tokio::time::sleep(Duration::from_millis(20)).await;
                        }
                        Err(e) => panic!("tell refused: {e}"),
                    }
                }
                tokio::task::yield_now().await;
            }
            sent
        });
        Self { stop, task }
    }

    pub async fn stop(self) -> BTreeMap<(String, String), u64> {
        self.stop.store(true, Ordering::Relaxed);
        self.task.await.expect("sender task")
    }
}

/// Waits until every message sent has been delivered somewhere.
pub async fn all_delivered(world: &World, sent: &BTreeMap<(String, String), u64>) {
    let total: u64 = sent.values().sum();
    eventually(
        "every sent message delivered",
        Duration::from_secs(20),
        || async { world.delivered() as u64 >= total },
    )
    .await;
}

/// Wraps a strategy and records the size of every non-empty rebalance round.
pub struct CountingRounds {
    pub inner: Box<dyn AllocationStrategy>,
    pub rounds: Arc<Mutex<Vec<usize>>>,
}

impl AllocationStrategy for CountingRounds {
    fn allocate(
        &mut self,
        requester: &colo::RegionId,
        shard: ShardId,
        current: &colo::allocation::Allocations,
    ) -> Option<colo::RegionId> {
        self.inner.allocate(requester, shard, current)
    }

    fn rebalance(
        &mut self,
        current: &colo::allocation::Allocations,
        in_progress: &BTreeSet<ShardId>,
    ) -> BTreeSet<ShardId> {
        let chosen = self.inner.rebalance(current, in_progress);
        if !chosen.is_empty() {
            self.rounds.lock().push(chosen.len());
        }
        chosen
    }
}

/// Whether the shard counts differ by at most one and add up to `total`.
pub fn balanced(counts: &BTreeMap<String, usize>, total: usize) -> bool {
    let max = counts.values().max().copied().unwrap_or(0);
    let min = counts.values().min().copied().unwrap_or(0);
    counts.values().sum::<usize>() == total && max - min <= 1
}

/// What this test process logs, for scenarios that check what an operator
/// reads. Installed once per process (the test runner gives each test a
/// process of its own).
pub fn logs() -> &'static Logs {
    static LOGS: OnceLock<Logs> = OnceLock::new();
    LOGS.get_or_init(|| {
        let logs = Logs(Arc::default());
        let sink = logs.0.clone();
        let _ = tracing_subscriber::fmt()
            .with_ansi(false)
            .with_env_filter(tracing_subscriber::EnvFilter::new("info"))
            .with_writer(move || LogSink(sink.clone()))
            .try_init();
        logs
    })
}

/// The captured log lines.
pub struct Logs(Arc<Mutex<Vec<u8>>>);

impl Logs {
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock()).into_owned()
    }
}

struct LogSink(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for LogSink {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}
