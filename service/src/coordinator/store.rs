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
}

/// Events in memory. Clones share the log, so a coordinator started again
/// with a clone takes over the previous state.
#[derive(Debug, Clone, Default)]
pub struct InMemoryStore {
    events: Arc<Mutex<Vec<CoordinatorEvent>>>,
}

impl InMemoryStore {
    /// An empty log.
    pub fn new() -> Self {
        Self::default()
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
}
