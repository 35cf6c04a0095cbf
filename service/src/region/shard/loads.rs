//! A durable shard's reads of its starting entities' states from the
//! store: one read at a time per shard, of every entity that waits for
//! one (up to [`MOST_PER_READ`]), so that a burst of starting entities
//! costs a few store calls rather than a blocking thread each.

use crate::entity::EntityId;
use crate::store::NodeStore;
use colo_allocation::ShardId;
use colo_state::StoreError;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

/// An entity's read: its stored record, if any.
pub(super) type Loaded = (EntityId, Result<Option<Vec<u8>>, StoreError>);

/// The most entities one read takes: a read holds one of the node's store
/// calls, which others wait for.
const MOST_PER_READ: usize = 1024;

type Reading = Pin<Box<dyn Future<Output = Vec<Loaded>> + Send>>;

#[derive(Default)]
pub(super) struct Loads {
    /// Entities whose read has not started.
    waiting: Vec<EntityId>,
    reading: Option<Reading>,
    /// A read's results not handed out yet.
    read: std::vec::IntoIter<Loaded>,
}

impl Loads {
    /// `id` waits for its state.
    pub fn push(&mut self, id: EntityId) {
        self.waiting.push(id);
    }

    /// Nothing is read or waits to be.
    pub fn is_empty(&self) -> bool {
        self.waiting.is_empty() && self.reading.is_none() && self.read.len() == 0
    }

    /// Entities wait and no read runs: the next poll starts one.
    pub fn to_start(&self) -> bool {
        !self.waiting.is_empty() && self.reading.is_none()
    }

    /// The next entity read; starts a read when none runs and entities
    /// wait. `None`: nothing more for now.
    pub fn poll_next(
        &mut self,
        store: &NodeStore,
        entity_type: &Arc<str>,
        shard: ShardId,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Loaded>> {
        loop {
            if let Some(loaded) = self.read.next() {
                return Poll::Ready(Some(loaded));
            }
            if let Some(reading) = self.reading.as_mut() {
                let Poll::Ready(read) = reading.as_mut().poll(cx) else {
                    return Poll::Pending;
                };
                self.reading = None;
                self.read = read.into_iter();
                continue;
            }
            if self.waiting.is_empty() {
                return Poll::Ready(None);
            }
            let n = self.waiting.len().min(MOST_PER_READ);
            let ids: Vec<EntityId> = self.waiting.drain(..n).collect();
            self.reading = Some(Box::pin(read(store, entity_type.clone(), shard, ids)));
        }
    }
}

/// Reads `ids` in one store call. If its thread fails, each entity gets
/// the failure as its read's (its shard stops, as for any read error,
/// rather than leaving the entity waiting for ever).
fn read(
    store: &NodeStore,
    entity_type: Arc<str>,
    shard: ShardId,
    ids: Vec<EntityId>,
) -> impl Future<Output = Vec<Loaded>> + Send + 'static {
    let (calls, store) = (store.calls().clone(), store.store());
    let engine = store.engine().name();
    async move {
        let asked = ids.clone();
        let kind = entity_type.clone();
        let read = calls
            .run(move || {
                ids.into_iter()
                    .map(|id| {
                        let loaded = store.load(&kind, shard, &id);
                        (id, loaded)
                    })
                    .collect::<Vec<_>>()
            })
            .await;
        read.unwrap_or_else(|reason| {
            asked
                .into_iter()
                .map(|id| {
                    let error = StoreError::Io {
                        engine,
                        entity_type: entity_type.to_string(),
                        reason: reason.clone(),
                    };
                    (id, Err(error))
                })
                .collect()
        })
    }
}
