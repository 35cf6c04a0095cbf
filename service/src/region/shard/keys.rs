//! The idempotency keys of the client tells an entity applied, each with
//! when: a tell retried with one of them within the entity type's
//! `idempotency_retention` is answered as applied and not applied again.
//!
//! A durable entity keeps them in its state record (`colo-state`'s
//! `StateRecord::keys`), written with the change the tell made, so they
//! move, restore and survive a crash with it. An entity kept in memory
//! keeps them beside it in its shard, for as long as it lives there: its
//! state does not outlive it either. A tell whose handler failed changed
//! nothing and keeps no key: its retry runs.

use std::sync::Arc;
use std::time::Duration;

/// An entity's applied keys, oldest first.
#[derive(Debug, Clone, Default)]
pub(super) struct AppliedKeys(Vec<(Arc<str>, u64)>);

/// How long keys are kept and how many, from the entity type's settings.
#[derive(Debug, Clone, Copy)]
pub(super) struct KeyRetention {
    retention_ms: u64,
    most: usize,
}

impl KeyRetention {
    pub fn new(retention: Duration, most: usize) -> Self {
        Self {
            retention_ms: u64::try_from(retention.as_millis()).unwrap_or(u64::MAX),
            most: most.max(1),
        }
    }

    fn expired(&self, at: u64, now: u64) -> bool {
        now.saturating_sub(at) >= self.retention_ms
    }
}

impl AppliedKeys {
    /// The keys a stored record names.
    pub fn from_record(keys: Vec<(String, u64)>) -> Self {
        Self(
            keys.into_iter()
                .map(|(key, at)| (Arc::from(key), at))
                .collect(),
        )
    }

    /// Whether a tell with `key` was applied within the retention.
    pub fn applied(&self, key: &str, now: u64, retention: KeyRetention) -> bool {
        self.0
            .iter()
            .any(|(kept, at)| &**kept == key && !retention.expired(*at, now))
    }

    /// Drops the keys past the retention; whether any went.
    pub fn prune(&mut self, now: u64, retention: KeyRetention) -> bool {
        let before = self.0.len();
        self.0.retain(|(_, at)| !retention.expired(*at, now));
        self.0.len() != before
    }

    /// A tell with `key` was applied now: kept, the oldest dropped past the
    /// most an entity keeps.
    pub fn add(&mut self, key: Arc<str>, now: u64, retention: KeyRetention) {
        self.prune(now, retention);
        self.0.retain(|(kept, _)| *kept != key);
        let excess = (self.0.len() + 1).saturating_sub(retention.most);
        self.0.drain(..excess);
        self.0.push((key, now));
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// As a record writes them.
    pub fn as_slice(&self) -> &[(Arc<str>, u64)] {
        &self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_kept_for_the_retention_and_the_oldest_go_past_the_most() {
        let retention = KeyRetention::new(Duration::from_secs(10), 3);
        let mut keys = AppliedKeys::default();
        keys.add("a".into(), 1_000, retention);
        assert!(keys.applied("a", 10_999, retention));
        assert!(!keys.applied("a", 11_000, retention), "past the retention");
        assert!(!keys.applied("b", 2_000, retention));
        for (key, at) in [("b", 2_000), ("c", 3_000), ("d", 4_000)] {
            keys.add(key.into(), at, retention);
        }
        assert!(!keys.applied("a", 4_000, retention), "the oldest of four");
        assert!(keys.applied("b", 4_000, retention) && keys.applied("d", 4_000, retention));
        assert!(keys.prune(12_500, retention));
        assert_eq!(keys.as_slice().len(), 2, "b expired");
        keys.add("d".into(), 12_600, retention);
        assert_eq!(keys.as_slice().len(), 2, "a key applied again is kept once");
    }
}
