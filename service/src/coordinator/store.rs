//! Where the coordinator's events are kept.
//!
//! The in-memory store serves the in-process cluster and tests; the Kafka
//! issue adds a store on the `<cluster>.coordinator` topic behind the same
//! trait.

use super::state::CoordinatorEvent;
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

/// Events in memory. Clones share the log, so a coordinator started again
/// with a clone takes over the previous state.
#[derive(Debug, Clone, Default)]
pub struct InMemoryStore {
    events: Arc<Mutex<Vec<CoordinatorEvent>>>,
    lost: bool,
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

    /// A copy of the log.
    pub fn events(&self) -> Vec<CoordinatorEvent> {
        self.events.lock().clone()
    }
}

impl CoordinatorStore for InMemoryStore {
    fn load(&self) -> BoxFuture<'_, Result<Vec<CoordinatorEvent>, StoreError>> {
        let events = self.events();
        Box::pin(async move { Ok(events) })
    }

    fn persist(&self, event: CoordinatorEvent) -> BoxFuture<'_, Result<(), StoreError>> {
        self.events.lock().push(event);
        Box::pin(async { Ok(()) })
    }

    fn may_have_lost_state(&self) -> bool {
        self.lost && self.events.lock().is_empty()
    }
}
