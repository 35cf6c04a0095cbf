//! What a region's shards report about their entities, for the active rate
//! and the adaptive window gauges.
//!
//! Shards count in plain fields and flush here every [`FLUSH_EVERY`]
//! messages (and on control mail), so the hot path touches no shared
//! counter; the region turns the totals into gauges on its tick.

use colo_allocation::ShardId;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};

/// How many messages a shard handles between flushes.
pub(crate) const FLUSH_EVERY: u64 = 256;

#[derive(Default)]
pub(crate) struct Activity {
    accesses: AtomicU64,
    activations: AtomicU64,
    windows: Mutex<HashMap<ShardId, f64>>,
    /// Totals at the previous tick, so the active rate covers one interval,
    /// and the last rate, kept through intervals without messages.
    last: Mutex<(u64, u64, Option<f64>)>,
}

/// A shard's counts since its last flush.
#[derive(Debug, Default)]
pub(crate) struct ShardActivity {
    pub accesses: u64,
    pub activations: u64,
}

impl Activity {
    /// Adds a shard's counts and its current window proportion.
    pub fn flush(&self, shard: ShardId, counts: &mut ShardActivity, window: Option<f64>) {
        self.accesses.fetch_add(counts.accesses, Ordering::Relaxed);
        self.activations
            .fetch_add(counts.activations, Ordering::Relaxed);
        *counts = ShardActivity::default();
        if let Some(window) = window {
            self.windows.lock().insert(shard, window);
        }
    }

    /// A shard stopped: its window no longer counts.
    pub fn forget(&self, shard: ShardId) {
        self.windows.lock().remove(&shard);
    }

    /// The share of messages since the previous call that found their
    /// entity active; the previous rate when there were none, `None` before
    /// the first message.
    pub fn active_rate(&self) -> Option<f64> {
        let accesses = self.accesses.load(Ordering::Relaxed);
        let activations = self.activations.load(Ordering::Relaxed);
        let mut last = self.last.lock();
        let (da, dm) = (accesses - last.0, activations - last.1);
        let rate = if da > 0 {
            Some(1.0 - dm as f64 / da as f64)
        } else {
            last.2
        };
        *last = (accesses, activations, rate);
        rate
    }

    /// The mean window proportion of the shards with an adaptive policy.
    pub fn mean_window(&self) -> Option<f64> {
        let windows = self.windows.lock();
        (!windows.is_empty()).then(|| windows.values().sum::<f64>() / windows.len() as f64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rate_covers_the_last_interval() {
        let a = Activity::default();
        assert_eq!(a.active_rate(), None);
        let mut c = ShardActivity {
            accesses: 10,
            activations: 4,
        };
        a.flush(ShardId(0), &mut c, Some(0.25));
        assert_eq!(c.accesses, 0);
        assert_eq!(a.active_rate(), Some(0.6));
        let mut c = ShardActivity {
            accesses: 10,
            activations: 0,
        };
        a.flush(ShardId(1), &mut c, Some(0.75));
        assert_eq!(a.active_rate(), Some(1.0));
        assert_eq!(a.active_rate(), Some(1.0), "kept without new messages");
        assert_eq!(a.mean_window(), Some(0.5));
        a.forget(ShardId(1));
        assert_eq!(a.mean_window(), Some(0.25));
    }
}
