//! Asks waiting for a reply from another node, by correlation id.

use crate::codec;
use crate::error::AskError;
use bytes::Bytes;
use parking_lot::Mutex;
use serde::de::DeserializeOwned;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use tokio::sync::oneshot;

/// One waiting ask, with its reply type erased so one table serves every
/// entity type.
trait Pending: Send {
    fn complete(self: Box<Self>, result: Result<Bytes, AskError>);
    /// The asker gave up (timed out); the entry can go.
    fn abandoned(&self) -> bool;
}

impl<R: DeserializeOwned + Send + 'static> Pending for oneshot::Sender<Result<R, AskError>> {
    fn complete(self: Box<Self>, result: Result<Bytes, AskError>) {
        let reply =
            result.and_then(|bytes| codec::decode(&bytes).map_err(|e| AskError::Codec(e.0)));
        let _ = self.send(reply);
    }

    fn abandoned(&self) -> bool {
        self.is_closed()
    }
}

/// How many registrations between sweeps of abandoned asks: an ask whose
/// reply never comes (its node died) is removed at the next sweep, so the
/// table stays bounded by the asks actually in flight.
const SWEEP_EVERY: u64 = 4096;

/// The node's table of remote asks.
#[derive(Default)]
pub(crate) struct PendingReplies {
    next: AtomicU64,
    table: Mutex<HashMap<u64, Box<dyn Pending>>>,
}

impl PendingReplies {
    /// Registers an ask's reply channel; returns its correlation id.
    pub fn register<R: DeserializeOwned + Send + 'static>(
        &self,
        tx: oneshot::Sender<Result<R, AskError>>,
    ) -> u64 {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let mut table = self.table.lock();
        if id % SWEEP_EVERY == SWEEP_EVERY - 1 {
            table.retain(|_, p| !p.abandoned());
        }
        table.insert(id, Box::new(tx));
        id
    }

    /// Completes an ask; an unknown id (the asker gave up) is ignored.
    pub fn complete(&self, correlation: u64, result: Result<Bytes, AskError>) {
        let pending = self.table.lock().remove(&correlation);
        if let Some(p) = pending {
            p.complete(result);
        }
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.table.lock().len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn completes_and_sweeps() {
        let table = PendingReplies::default();
        let (tx, rx) = oneshot::channel::<Result<u32, AskError>>();
        let id = table.register(tx);
        table.complete(id, Ok(codec::encode(&7u32).unwrap()));
        assert_eq!(rx.await.unwrap().unwrap(), 7);
        for _ in 0..SWEEP_EVERY {
            let (tx, rx) = oneshot::channel::<Result<u32, AskError>>();
            table.register(tx);
            drop(rx);
        }
        assert!(table.len() <= 2, "abandoned asks are swept");
    }
}
