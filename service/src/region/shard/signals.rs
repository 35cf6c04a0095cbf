//! What the region sends a shard outside its mailbox's order: signals that
//! must not pile up behind a slow or stuck shard.

use crate::entity::EntityId;
use std::sync::atomic::{AtomicBool, Ordering};
use tokio::sync::oneshot;

/// What the region sends a shard that must not pile up in its mailbox
/// when the shard is slow or stuck: at most one idle tick and one query
/// mail wait there at a time.
#[derive(Default)]
pub(crate) struct ShardSignals {
    pub(super) idle_tick: AtomicBool,
    query_mail: AtomicBool,
    queries: parking_lot::Mutex<Vec<oneshot::Sender<Vec<EntityId>>>>,
}

impl ShardSignals {
    /// Whether an idle tick should be sent: none is waiting already.
    pub fn claim_idle_tick(&self) -> bool {
        !self.idle_tick.swap(true, Ordering::AcqRel)
    }

    /// Adds a query for the live entity ids; whether a query mail should be
    /// sent (none is waiting already).
    pub fn add_query(&self, reply: oneshot::Sender<Vec<EntityId>>) -> bool {
        let mut queries = self.queries.lock();
        queries.retain(|q| !q.is_closed());
        queries.push(reply);
        drop(queries);
        !self.query_mail.swap(true, Ordering::AcqRel)
    }

    pub(super) fn answer_queries(&self, ids: &[EntityId]) {
        self.query_mail.store(false, Ordering::Release);
        for query in std::mem::take(&mut *self.queries.lock()) {
            let _ = query.send(ids.to_vec());
        }
    }
}
