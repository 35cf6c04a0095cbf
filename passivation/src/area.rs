//! What the composite strategy needs from the policies of its admission
//! window and main area, beyond what a shard needs: membership, the entity
//! the policy would passivate next, and a combined access-or-activate.

use super::{PolicyKey, ReplacementPolicy};

/// A replacement policy used as an area of the composite strategy (Akka's
/// `ActiveEntities`).
pub(crate) trait ActiveArea<K: PolicyKey>: ReplacementPolicy<K> {
    /// Whether `id` is tracked by this area.
    fn contains(&self, id: &K) -> bool;

    /// The entity this policy would passivate next to make room: the
    /// victim the admission filter weighs a candidate against.
    fn select(&self) -> Option<&K>;

    /// An access if `id` is tracked, an activation otherwise: how entities
    /// move between the window and the main area.
    fn update(&mut self, id: K, passivate: &mut Vec<K>) {
        if self.contains(&id) {
            self.on_access(&id);
        } else {
            self.on_activate(id, passivate);
        }
    }
}

/// Replays `script` through `policy`: each number is a message for that
/// entity, an activation when the policy does not track it. Returns the
/// entities passivated, in order.
#[cfg(test)]
pub(crate) fn replay<A: ActiveArea<u32>>(policy: &mut A, script: &[u32]) -> Vec<u32> {
    let mut out = Vec::new();
    for &id in script {
        if policy.contains(&id) {
            policy.on_access(&id);
        } else {
            policy.on_activate(id, &mut out);
        }
    }
    out
}
