//! Where the coordinator's events are kept.
//!
//! The in-memory store serves the in-process cluster, tests and nodes
//! without Kafka; `kafka/coordinator_store.rs` keeps the events on the cluster's
//! `<cluster>.coordinator` topic behind the same trait.

use super::ledger::CoordinatorEvent;
use futures::future::BoxFuture;
use parking_lot::Mutex;
use std::sync::Arc;

/// The store failed; the coordinator cannot go on without losing decisions.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("coordinator store: {0}")]
pub struct StoreError(pub String);

/// Durable storage for coordinator events.
pub trait CoordinatorStore: Send + Sync + 'static {
    /// Every event persisted so far, oldest first.
    fn load(&self) -> BoxFuture<'_, Result<Vec<CoordinatorEvent>, StoreError>>;
    /// Appends an event; the coordinator applies it only once this returns Ok.
    fn persist(&self, event: CoordinatorEvent) -> BoxFuture<'_, Result<(), StoreError>>;

    /// Whether an empty log may mean lost state rather than a new cluster:
    /// a coordinator that starts empty then waits `region_timeout` for
    /// regions to report the shards they run before it places any other,
    /// so that none starts twice. False by default: an empty log is a new
    /// cluster, and shards are placed at once.
    fn may_have_lost_state(&self) -> bool {
        false
    }
}

/// Events kept before the log is compacted to a snapshot: a few thousand
/// small events, against a snapshot of one event per region and shard.
pub const COMPACT_EVERY: usize = 4096;

/// Events in memory. Clones share the log, so a coordinator started again
/// with a clone takes over the previous state. Every [`COMPACT_EVERY`]
/// events the log is replaced by a snapshot of the state it replays to, so
/// a long-running coordinator's memory stays bounded by its state.
#[derive(Debug, Clone)]
pub struct InMemoryStore {
    log: Arc<Mutex<Log>>,
    lost: bool,
    compact_every: usize,
}

/// The events, and how many of them the last compaction left: a snapshot
/// as long as `compact_every` (thousands of shards) must not make every
/// event compact again.
#[derive(Debug, Default)]
struct Log {
    events: Vec<CoordinatorEvent>,
    snapshot: usize,
}

impl Default for InMemoryStore {
    fn default() -> Self {
        Self {
            log: Arc::default(),
            lost: false,
            compact_every: COMPACT_EVERY,
        }
    }
}

impl InMemoryStore {
    /// An empty log for a new cluster: nothing runs yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty log that replaces one that was lost (the node hosting the
    /// coordinator restarted, say): regions may still run shards, and the
    /// coordinator waits for them to report them (see
    /// [`CoordinatorStore::may_have_lost_state`]).
    pub fn after_loss() -> Self {
        Self {
            lost: true,
            ..Self::default()
        }
    }

    /// Compacts after `events` events rather than [`COMPACT_EVERY`].
    pub fn compacting_every(mut self, events: usize) -> Self {
        self.compact_every = events.max(1);
        self
    }

    /// A copy of the log.
    pub fn events(&self) -> Vec<CoordinatorEvent> {
        self.log.lock().events.clone()
    }
}

impl CoordinatorStore for InMemoryStore {
    fn load(&self) -> BoxFuture<'_, Result<Vec<CoordinatorEvent>, StoreError>> {
        let events = self.events();
        Box::pin(async move { Ok(events) })
    }

    fn persist(&self, event: CoordinatorEvent) -> BoxFuture<'_, Result<(), StoreError>> {
        let mut log = self.log.lock();
        log.events.push(event);
        if log.events.len() - log.snapshot >= self.compact_every {
            // The log replays by construction (the coordinator checked every
            // event against the state first); if it did not, keep it as it
            // is for the coordinator to report.
            if let Ok(state) = super::ledger::CoordinatorState::replay(log.events.iter().cloned()) {
                log.events = state.snapshot();
            }
            log.snapshot = log.events.len();
        }
        Box::pin(async { Ok(()) })
    }

    fn may_have_lost_state(&self) -> bool {
        self.lost && self.log.lock().events.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::coordinator::ledger::CoordinatorState;
    use colo_allocation::{RegionId, ShardId};

    #[tokio::test]
    async fn the_log_is_compacted_to_a_snapshot_that_replays_the_same() {
        let store = InMemoryStore::new().compacting_every(16);
        let a = RegionId::new("a");
        store
            .persist(CoordinatorEvent::RegionRegistered { region: a.clone() })
            .await
            .unwrap();
        // A shard moving back and forth forever: history nobody needs.
        for _ in 0..100 {
            store
                .persist(CoordinatorEvent::ShardHomeAllocated {
                    shard: ShardId(1),
                    region: a.clone(),
                })
                .await
                .unwrap();
            store
                .persist(CoordinatorEvent::ShardHomeDeallocated { shard: ShardId(1) })
                .await
                .unwrap();
        }
        store
            .persist(CoordinatorEvent::ShardHomeAllocated {
                shard: ShardId(2),
                region: a.clone(),
            })
            .await
            .unwrap();
        let events = store.load().await.unwrap();
        assert!(events.len() < 16, "{} events kept", events.len());
        let state = CoordinatorState::replay(events).unwrap();
        assert_eq!(state.home(ShardId(2)), Some(&a));
        assert_eq!(state.home(ShardId(1)), None);
    }

    #[tokio::test]
    async fn a_snapshot_longer_than_the_interval_is_not_compacted_again_at_every_event() {
        let store = InMemoryStore::new().compacting_every(4);
        let a = RegionId::new("a");
        store
            .persist(CoordinatorEvent::RegionRegistered { region: a.clone() })
            .await
            .unwrap();
        for shard in 0..10 {
            store
                .persist(CoordinatorEvent::ShardHomeAllocated {
                    shard: ShardId(shard),
                    region: a.clone(),
                })
                .await
                .unwrap();
        }
        // The snapshot alone is 11 events now, more than the interval.
        let mut compactions = 0;
        let mut before = store.events().len();
        for _ in 0..20 {
            store
                .persist(CoordinatorEvent::ShardHomeDeallocated { shard: ShardId(0) })
                .await
                .unwrap();
            store
                .persist(CoordinatorEvent::ShardHomeAllocated {
                    shard: ShardId(0),
                    region: a.clone(),
                })
                .await
                .unwrap();
            let after = store.events().len();
            if after <= before {
                compactions += 1;
            }
            before = after;
        }
        assert!(compactions <= 10, "{compactions} compactions for 40 events");
        let state = CoordinatorState::replay(store.events()).unwrap();
        assert_eq!(state.home(ShardId(0)), Some(&a));
    }
}
