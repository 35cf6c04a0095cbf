//! What the region task knows of each shard: one [`ShardPhase`] per shard.
//!
//! A shard with no phase is free: its route (see `routes.rs`, the view
//! senders read) says where it lives, or buffers until its home is asked.
//! Every other state a shard can be in, and everything that waits for it to
//! leave that state, is one value here, changed by the region task's
//! transitions, which take the old phase and put the next one. The routing
//! table is written only from those transitions.
//!
//! Durable state adds its phases here: restoring (between a shard's home
//! being named here and its entities running: `Asked`/free -> `Restoring`
//! -> `Hosted`) and flushing (between its entities stopping and the hand-off
//! being confirmed: `Stopping` -> `Flushing` -> free), each carrying what it
//! waits for, the way `Stopping` does.

use crate::entity::Entity;
use crate::region::shard::ShardHandle;
use colo_allocation::{RegionId, ShardId};
use std::collections::BTreeMap;
use tokio::time::Instant;

/// The state of one shard, seen from the region task.
pub(super) enum ShardPhase<E: Entity> {
    /// Its home is unknown here and was asked of the coordinator at `since`
    /// (for the home-request latency).
    Asked { since: Instant },
    /// Its entities run here.
    Hosted(ShardHandle<E>),
    /// Its entities are stopping here: handing off, found stale, or fenced.
    /// `notify`: the coordinator waits for ShardStopped; `fenced`: the
    /// region fenced itself, so what the shard leaves is marked delayed.
    Stopping {
        notify: bool,
        fenced: bool,
        then: Release,
    },
    /// A hand-off is moving it away from another node, and a barrier behind
    /// everything this region sent the old home has not passed yet: no new
    /// home until it has, so nothing overtakes what went there.
    BarrierPending { then: Release },
    /// Messages sent to its old home may still come back from an outbound
    /// queue that is closing (its node failed or left): held until every
    /// such queue has closed (the queues themselves say which shards they
    /// hold; see `draining.rs`), so that what comes back goes out first.
    Returning { then: Release },
}

impl<E: Entity> ShardPhase<E> {
    /// No home may be set for a shard in this phase.
    pub fn is_held(&self) -> bool {
        matches!(
            self,
            Self::Stopping { .. } | Self::BarrierPending { .. } | Self::Returning { .. }
        )
    }

    /// What waits for the release of a shard in a held phase.
    pub fn release_mut(&mut self) -> Option<&mut Release> {
        match self {
            Self::Stopping { then, .. }
            | Self::BarrierPending { then }
            | Self::Returning { then } => Some(then),
            Self::Hosted(_) | Self::Asked { .. } => None,
        }
    }
}

/// What a held shard owes and has learned meanwhile, settled when it is
/// released.
#[derive(Default)]
pub(super) struct Release {
    /// The coordinator waits for this region's BeginHandOffAck.
    pub ack: bool,
    /// The home the coordinator named meanwhile.
    pub home: Option<RegionId>,
    /// When its home was asked, if the answer has not come.
    pub asked: Option<Instant>,
}

/// Every shard that is not free, by id.
pub(super) struct Shards<E: Entity> {
    phases: BTreeMap<ShardId, ShardPhase<E>>,
}

impl<E: Entity> Default for Shards<E> {
    fn default() -> Self {
        Self {
            phases: BTreeMap::new(),
        }
    }
}

impl<E: Entity> Shards<E> {
    pub fn get(&self, shard: ShardId) -> Option<&ShardPhase<E>> {
        self.phases.get(&shard)
    }

    /// Takes a shard's phase for a transition, which puts the next one.
    pub fn take(&mut self, shard: ShardId) -> Option<ShardPhase<E>> {
        self.phases.remove(&shard)
    }

    pub fn put(&mut self, shard: ShardId, phase: ShardPhase<E>) {
        self.phases.insert(shard, phase);
    }

    /// Puts a phase back, or frees the shard (`None`).
    pub fn restore(&mut self, shard: ShardId, phase: Option<ShardPhase<E>>) {
        if let Some(phase) = phase {
            self.put(shard, phase);
        }
    }

    pub fn is_held(&self, shard: ShardId) -> bool {
        self.get(shard).is_some_and(ShardPhase::is_held)
    }

    /// What waits for a held shard's release. A free (or asked) shard whose
    /// messages may come back from a closing queue becomes `Returning` to
    /// remember it; a hosted shard is never held (its route already points
    /// here, so nothing can be kept from overtaking), and gets `None`.
    pub fn release_of(&mut self, shard: ShardId) -> Option<&mut Release> {
        let phase = self.phases.remove(&shard);
        let phase = match phase {
            None => ShardPhase::Returning {
                then: Release::default(),
            },
            Some(ShardPhase::Asked { since }) => ShardPhase::Returning {
                then: Release {
                    asked: Some(since),
                    ..Release::default()
                },
            },
            Some(other) => other,
        };
        self.phases.entry(shard).or_insert(phase).release_mut()
    }

    /// Shards whose entities run here.
    pub fn hosted(&self) -> impl Iterator<Item = (ShardId, &ShardHandle<E>)> + '_ {
        self.phases.iter().filter_map(|(id, phase)| match phase {
            ShardPhase::Hosted(handle) => Some((*id, handle)),
            _ => None,
        })
    }

    /// Shards with entities here, running or stopping.
    pub fn local(&self) -> impl Iterator<Item = ShardId> + '_ {
        self.phases
            .iter()
            .filter(|(_, phase)| {
                matches!(phase, ShardPhase::Hosted(_) | ShardPhase::Stopping { .. })
            })
            .map(|(id, _)| *id)
    }

    /// Shards whose entities are stopping here (a hand-off, or found stale
    /// or fenced).
    pub fn stopping(&self) -> impl Iterator<Item = ShardId> + '_ {
        self.phases
            .iter()
            .filter(|(_, phase)| matches!(phase, ShardPhase::Stopping { .. }))
            .map(|(id, _)| *id)
    }

    /// Every shard's phase is dropped: the region has stopped. Returns the
    /// hosted shards, to be closed.
    pub fn clear(&mut self) -> Vec<ShardHandle<E>> {
        std::mem::take(&mut self.phases)
            .into_values()
            .filter_map(|phase| match phase {
                ShardPhase::Hosted(handle) => Some(handle),
                _ => None,
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::{ShardPhase, Shards};
    use crate::entity::Tally;
    use colo_allocation::{RegionId, ShardId};
    use tokio::time::Instant;

    #[test]
    fn a_shard_whose_messages_may_come_back_is_held_with_its_unanswered_ask() {
        let mut shards = Shards::<Tally>::default();
        let shard = ShardId(3);
        let since = Instant::now();
        shards.put(shard, ShardPhase::Asked { since });
        assert!(!shards.is_held(shard));
        let then = shards
            .release_of(shard)
            .expect("an asked shard can be held");
        assert_eq!(then.asked, Some(since));
        then.home = Some(RegionId::from("elsewhere"));
        assert!(shards.is_held(shard));
        assert!(matches!(
            shards.get(shard),
            Some(ShardPhase::Returning { then }) if then.home.is_some()
        ));
        // Neither asked nor returning shards have entities here.
        assert_eq!(shards.local().count(), 0);
        assert!(shards.clear().is_empty());
        assert!(shards.get(shard).is_none());
    }

    #[test]
    fn a_held_shard_keeps_its_phase_and_what_it_owes() {
        let mut shards = Shards::<Tally>::default();
        let shard = ShardId(1);
        shards.put(
            shard,
            ShardPhase::Stopping {
                notify: true,
                fenced: false,
                then: super::Release::default(),
            },
        );
        shards.release_of(shard).expect("stopping is held").ack = true;
        assert!(matches!(
            shards.get(shard),
            Some(ShardPhase::Stopping { notify: true, then, .. }) if then.ack
        ));
        assert_eq!(shards.local().collect::<Vec<_>>(), vec![shard]);
    }
}
