//! The coordinator's durable state: a plain value changed only by events.
//!
//! Persist the event, then apply it: a coordinator that takes over replays the
//! same events and reaches the same state. `apply` refuses events that would
//! break an invariant (a shard has at most one home; a home is a registered
//! region), which would mean a bug or a corrupt log.

use colo_allocation::{Allocations, RegionId, ShardId};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};

/// What the coordinator persists.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum CoordinatorEvent {
    /// A region that hosts shards registered.
    RegionRegistered { region: RegionId },
    /// A proxy region registered.
    RegionProxyRegistered { region: RegionId },
    /// A region left (gracefully or not); its shards have no home any more.
    RegionTerminated { region: RegionId },
    /// A proxy left.
    RegionProxyTerminated { region: RegionId },
    /// A shard got a home.
    ShardHomeAllocated { shard: ShardId, region: RegionId },
    /// A shard was handed off and has no home until asked for again.
    ShardHomeDeallocated { shard: ShardId },
}

/// An event that does not fit the state.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("event {event:?} refused: {reason}")]
pub struct StateError {
    /// The refused event.
    pub event: CoordinatorEvent,
    /// The broken invariant.
    pub reason: &'static str,
}

/// Regions, proxies and shard homes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CoordinatorState {
    regions: Allocations,
    proxies: BTreeSet<RegionId>,
    shards: BTreeMap<ShardId, RegionId>,
}

impl CoordinatorState {
    /// Applies one event.
    ///
    /// # Errors
    /// The event breaks an invariant; the state is unchanged.
    pub fn apply(&mut self, event: CoordinatorEvent) -> Result<(), StateError> {
        let refuse = |reason| {
            Err(StateError {
                event: event.clone(),
                reason,
            })
        };
        match &event {
            CoordinatorEvent::RegionRegistered { region } => {
                if self.regions.contains_key(region) {
                    return refuse("region already registered");
                }
                self.regions.insert(region.clone(), Vec::new());
            }
            CoordinatorEvent::RegionProxyRegistered { region } => {
                if !self.proxies.insert(region.clone()) {
                    return refuse("proxy already registered");
                }
            }
            CoordinatorEvent::RegionTerminated { region } => {
                let Some(shards) = self.regions.remove(region) else {
                    return refuse("region not registered");
                };
                for shard in shards {
                    self.shards.remove(&shard);
                }
            }
            CoordinatorEvent::RegionProxyTerminated { region } => {
                if !self.proxies.remove(region) {
                    return refuse("proxy not registered");
                }
            }
            CoordinatorEvent::ShardHomeAllocated { shard, region } => {
                if self.shards.contains_key(shard) {
                    return refuse("shard already has a home");
                }
                let Some(hosted) = self.regions.get_mut(region) else {
                    return refuse("home is not a registered region");
                };
                hosted.push(*shard);
                self.shards.insert(*shard, region.clone());
            }
            CoordinatorEvent::ShardHomeDeallocated { shard } => {
                let Some(region) = self.shards.remove(shard) else {
                    return refuse("shard has no home");
                };
                if let Some(hosted) = self.regions.get_mut(&region) {
                    hosted.retain(|s| s != shard);
                }
            }
        }
        Ok(())
    }

    /// Replays events from the start.
    ///
    /// # Errors
    /// The first event that does not fit.
    pub fn replay(events: impl IntoIterator<Item = CoordinatorEvent>) -> Result<Self, StateError> {
        let mut state = Self::default();
        for event in events {
            state.apply(event)?;
        }
        Ok(state)
    }

    /// Registered regions with their shards in allocation order.
    pub fn allocations(&self) -> &Allocations {
        &self.regions
    }

    /// Registered proxies.
    pub fn proxies(&self) -> &BTreeSet<RegionId> {
        &self.proxies
    }

    /// The home of a shard.
    pub fn home(&self, shard: ShardId) -> Option<&RegionId> {
        self.shards.get(&shard)
    }

    /// Whether `region` is a registered (non-proxy) region.
    pub fn is_region(&self, region: &RegionId) -> bool {
        self.regions.contains_key(region)
    }

    /// Whether `region` is a registered proxy.
    pub fn is_proxy(&self, region: &RegionId) -> bool {
        self.proxies.contains(region)
    }

    /// The shards a region hosts.
    pub fn shards_of(&self, region: &RegionId) -> &[ShardId] {
        self.regions.get(region).map(Vec::as_slice).unwrap_or(&[])
    }

    /// The fewest events that replay to this state: a snapshot, for a log
    /// that has grown with history nobody needs.
    pub fn snapshot(&self) -> Vec<CoordinatorEvent> {
        let mut events = Vec::new();
        for (region, shards) in &self.regions {
            events.push(CoordinatorEvent::RegionRegistered {
                region: region.clone(),
            });
            // In allocation order, so the replay lists them the same way.
            for shard in shards {
                events.push(CoordinatorEvent::ShardHomeAllocated {
                    shard: *shard,
                    region: region.clone(),
                });
            }
        }
        for region in &self.proxies {
            events.push(CoordinatorEvent::RegionProxyRegistered {
                region: region.clone(),
            });
        }
        events
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(name: &str) -> RegionId {
        RegionId::new(name)
    }

    #[test]
    fn allocation_and_termination() {
        let mut s = CoordinatorState::default();
        s.apply(CoordinatorEvent::RegionRegistered { region: r("a") })
            .unwrap();
        s.apply(CoordinatorEvent::RegionRegistered { region: r("b") })
            .unwrap();
        s.apply(CoordinatorEvent::ShardHomeAllocated {
            shard: ShardId(1),
            region: r("a"),
        })
        .unwrap();
        s.apply(CoordinatorEvent::ShardHomeAllocated {
            shard: ShardId(2),
            region: r("b"),
        })
        .unwrap();
        assert_eq!(s.home(ShardId(1)), Some(&r("a")));
        s.apply(CoordinatorEvent::RegionTerminated { region: r("a") })
            .unwrap();
        assert_eq!(s.home(ShardId(1)), None);
        assert_eq!(s.shards_of(&r("b")), &[ShardId(2)]);
        s.apply(CoordinatorEvent::ShardHomeDeallocated { shard: ShardId(2) })
            .unwrap();
        assert!(s.shards_of(&r("b")).is_empty());
    }

    #[test]
    fn invariants_are_enforced() {
        let mut s = CoordinatorState::default();
        let e = s
            .apply(CoordinatorEvent::ShardHomeAllocated {
                shard: ShardId(1),
                region: r("x"),
            })
            .unwrap_err();
        assert_eq!(e.reason, "home is not a registered region");
        s.apply(CoordinatorEvent::RegionRegistered { region: r("a") })
            .unwrap();
        s.apply(CoordinatorEvent::ShardHomeAllocated {
            shard: ShardId(1),
            region: r("a"),
        })
        .unwrap();
        let before = s.clone();
        assert!(s
            .apply(CoordinatorEvent::ShardHomeAllocated {
                shard: ShardId(1),
                region: r("a")
            })
            .is_err());
        assert!(s
            .apply(CoordinatorEvent::RegionRegistered { region: r("a") })
            .is_err());
        assert!(s
            .apply(CoordinatorEvent::ShardHomeDeallocated { shard: ShardId(9) })
            .is_err());
        assert_eq!(s, before);
    }

    #[test]
    fn a_snapshot_replays_to_the_same_state() {
        let mut s = CoordinatorState::default();
        for event in [
            CoordinatorEvent::RegionRegistered { region: r("a") },
            CoordinatorEvent::RegionRegistered { region: r("b") },
            CoordinatorEvent::RegionProxyRegistered { region: r("p") },
            CoordinatorEvent::ShardHomeAllocated {
                shard: ShardId(7),
                region: r("a"),
            },
            CoordinatorEvent::ShardHomeAllocated {
                shard: ShardId(2),
                region: r("a"),
            },
            CoordinatorEvent::ShardHomeAllocated {
                shard: ShardId(3),
                region: r("b"),
            },
            CoordinatorEvent::ShardHomeDeallocated { shard: ShardId(3) },
            CoordinatorEvent::RegionTerminated { region: r("b") },
        ] {
            s.apply(event).unwrap();
        }
        let snapshot = s.snapshot();
        assert_eq!(snapshot.len(), 4);
        assert_eq!(CoordinatorState::replay(snapshot).unwrap(), s);
    }

    #[test]
    fn replay_reaches_the_same_state() {
        let events = vec![
            CoordinatorEvent::RegionRegistered { region: r("a") },
            CoordinatorEvent::RegionProxyRegistered { region: r("p") },
            CoordinatorEvent::ShardHomeAllocated {
                shard: ShardId(3),
                region: r("a"),
            },
        ];
        let s = CoordinatorState::replay(events).unwrap();
        assert_eq!(s.home(ShardId(3)), Some(&r("a")));
        assert!(s.is_proxy(&r("p")));
    }
}
