//! External allocation: something outside the coordinator says where each
//! shard should live, and the coordinator makes it so.
//!
//! In colo's main mode that something is Kafka: the consumer group's
//! rebalance listener on each node tells the coordinator which partitions
//! (shards) the node was assigned, and the coordinator records them through an
//! [`ExternalAllocationClient`]. Because the runtime must also work without
//! Kafka, the client is plain shared state that any code can write.
//!
//! Locations set through the coordinator protocol (a region's
//! `UpdateLocations`, which goes through [`AllocationStrategy::set_locations`])
//! take effect at once: the coordinator hands a shard that lives elsewhere
//! off and places it. Locations written to the client directly take effect
//! at the coordinator's next decision: a shard without a home is allocated
//! to its desired region, and one that lives elsewhere is moved by the next
//! rebalance round. A desired region that is not registered (yet) is
//! ignored until it registers.

use crate::least_shard::least_loaded_region;
use crate::{AllocationStrategy, Allocations, RegionId, ShardId};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

/// Writes and reads the desired shard locations an
/// [`ExternalAllocationStrategy`] follows. Cheap to clone; all clones share
/// one set of locations.
///
/// The lock is a std mutex held only for map operations, never across an
/// await or I/O, so it is safe to call from a Kafka rebalance callback (which
/// blocks the consumer and must return promptly) and from async code.
#[derive(Clone, Debug, Default)]
pub struct ExternalAllocationClient {
    desired: Arc<Mutex<Desired>>,
}

#[derive(Debug, Default)]
struct Desired {
    locations: BTreeMap<ShardId, RegionId>,
    /// Bumped on every change that alters `locations`.
    version: u64,
}

impl ExternalAllocationClient {
    /// A client with no desired locations.
    pub fn new() -> Self {
        Self::default()
    }

    /// Asks for `shard` to live in `region`.
    pub fn set_location(&self, shard: ShardId, region: RegionId) {
        self.set_locations([(shard, region)]);
    }

    /// Asks for several shards at once, as a Kafka assignment delivers them;
    /// readers see all of them or none.
    pub fn set_locations(&self, locations: impl IntoIterator<Item = (ShardId, RegionId)>) {
        // Drained before locking: a lazy iterator that reads this client
        // would otherwise deadlock on the mutex.
        let locations: Vec<(ShardId, RegionId)> = locations.into_iter().collect();
        let mut desired = self.lock();
        let mut changed = false;
        for (shard, region) in locations {
            if desired.locations.get(&shard) != Some(&region) {
                desired.locations.insert(shard, region);
                changed = true;
            }
        }
        if changed {
            desired.version += 1;
        }
    }

    /// Forgets the desired location of `shard`: it stays where it is, and a
    /// later allocation goes back to the default rule. Returns the region
    /// that was desired, if any.
    pub fn clear_location(&self, shard: ShardId) -> Option<RegionId> {
        let mut desired = self.lock();
        let removed = desired.locations.remove(&shard);
        if removed.is_some() {
            desired.version += 1;
        }
        removed
    }

    /// The desired region of `shard`, if one was set.
    pub fn location(&self, shard: ShardId) -> Option<RegionId> {
        self.lock().locations.get(&shard).cloned()
    }

    /// A snapshot of every desired location.
    pub fn locations(&self) -> BTreeMap<ShardId, RegionId> {
        self.lock().locations.clone()
    }

    /// A number that grows whenever the desired locations change, so a
    /// coordinator can tell cheaply whether it has new locations to persist
    /// or a rebalance worth running early.
    pub fn version(&self) -> u64 {
        self.lock().version
    }

    fn lock(&self) -> MutexGuard<'_, Desired> {
        // Nothing under this lock can panic halfway through an update (only
        // map lookups, inserts and removes run there), so a poisoned lock
        // still guards a consistent map; carrying on beats failing every
        // later caller.
        self.desired.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Places shards where an [`ExternalAllocationClient`] says.
///
/// - allocate: the desired region if one is set and registered; otherwise
///   the requester if it is a registered region; otherwise (the requester is
///   a proxy) the least-loaded region.
/// - rebalance: every shard that lives in a region other than its
///   registered desired region, except those already handing off. There is
///   no limit per round: a Kafka assignment has already happened, and each
///   shard left behind is a partition consumed on one node and hosted on
///   another.
#[derive(Clone, Debug, Default)]
pub struct ExternalAllocationStrategy {
    client: ExternalAllocationClient,
}

impl ExternalAllocationStrategy {
    /// A strategy following the locations set through `client` (or any of
    /// its clones).
    pub fn new(client: ExternalAllocationClient) -> Self {
        Self { client }
    }

    /// The client this strategy reads, for handing to whoever sets locations.
    pub fn client(&self) -> &ExternalAllocationClient {
        &self.client
    }
}

impl AllocationStrategy for ExternalAllocationStrategy {
    fn allocate(
        &mut self,
        requester: &RegionId,
        shard: ShardId,
        current: &Allocations,
    ) -> Option<RegionId> {
        if let Some(desired) = self.client.location(shard) {
            if current.contains_key(&desired) {
                return Some(desired);
            }
        }
        // Akka answers with the requester here; a proxy cannot host a shard,
        // so colo falls back to spreading by load instead.
        if current.contains_key(requester) {
            return Some(requester.clone());
        }
        least_loaded_region(current).cloned()
    }

    fn rebalance(
        &mut self,
        current: &Allocations,
        in_progress: &BTreeSet<ShardId>,
    ) -> BTreeSet<ShardId> {
        let desired = self.client.locations();
        if desired.is_empty() {
            return BTreeSet::new();
        }
        current
            .iter()
            .flat_map(|(region, hosted)| hosted.iter().map(move |shard| (region, shard)))
            .filter(|(_, shard)| !in_progress.contains(shard))
            .filter(|(region, shard)| match desired.get(shard) {
                Some(target) => target != *region && current.contains_key(target),
                None => false,
            })
            .map(|(_, shard)| *shard)
            .collect()
    }

    fn set_locations(&mut self, locations: &[(ShardId, RegionId)]) -> bool {
        self.client.set_locations(locations.iter().cloned());
        true
    }

    fn location_released(&mut self, shard: ShardId, region: &RegionId) {
        let mut desired = self.client.lock();
        if desired.locations.get(&shard) == Some(region) {
            desired.locations.remove(&shard);
            desired.version += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn region(name: &str) -> RegionId {
        RegionId::new(name)
    }

    fn allocations(regions: &[(&str, &[u32])]) -> Allocations {
        regions
            .iter()
            .map(|(name, shards)| (region(name), shards.iter().copied().map(ShardId).collect()))
            .collect()
    }

    fn shards(ids: &[u32]) -> BTreeSet<ShardId> {
        ids.iter().copied().map(ShardId).collect()
    }

    #[test]
    fn locations_from_the_coordinator_protocol_are_taken_and_released() {
        let client = ExternalAllocationClient::new();
        let mut strategy = ExternalAllocationStrategy::new(client.clone());
        assert!(strategy.set_locations(&[(ShardId(1), region("b")), (ShardId(2), region("b"))]));
        assert_eq!(client.location(ShardId(1)), Some(region("b")));
        let version = client.version();
        // Released by another region: b's location stands.
        strategy.location_released(ShardId(1), &region("a"));
        assert_eq!(client.location(ShardId(1)), Some(region("b")));
        assert_eq!(client.version(), version);
        // Released by b: forgotten, so it is not placed back there.
        strategy.location_released(ShardId(1), &region("b"));
        assert_eq!(client.location(ShardId(1)), None);
        assert!(client.version() > version);
        // A strategy that decides on its own takes none.
        let mut least = crate::LeastShardAllocationStrategy::default();
        assert!(!least.set_locations(&[(ShardId(1), region("b"))]));
    }

    #[test]
    fn allocates_to_the_desired_region() {
        let client = ExternalAllocationClient::new();
        client.set_location(ShardId(1), region("b"));
        let mut strategy = ExternalAllocationStrategy::new(client);
        let current = allocations(&[("a", &[]), ("b", &[])]);
        assert_eq!(
            strategy.allocate(&region("a"), ShardId(1), &current),
            Some(region("b"))
        );
    }

    #[test]
    fn without_a_desired_region_the_requester_hosts() {
        let mut strategy = ExternalAllocationStrategy::default();
        let current = allocations(&[("a", &[1, 2]), ("b", &[])]);
        assert_eq!(
            strategy.allocate(&region("a"), ShardId(3), &current),
            Some(region("a"))
        );
    }

    #[test]
    fn an_unregistered_desired_region_falls_back_to_the_requester() {
        let client = ExternalAllocationClient::new();
        client.set_location(ShardId(1), region("gone"));
        let mut strategy = ExternalAllocationStrategy::new(client);
        let current = allocations(&[("a", &[]), ("b", &[])]);
        assert_eq!(
            strategy.allocate(&region("b"), ShardId(1), &current),
            Some(region("b"))
        );
    }

    #[test]
    fn a_proxy_requester_gets_the_least_loaded_region() {
        let mut strategy = ExternalAllocationStrategy::default();
        let current = allocations(&[("a", &[1, 2]), ("b", &[3])]);
        assert_eq!(
            strategy.allocate(&region("proxy"), ShardId(4), &current),
            Some(region("b"))
        );
        assert_eq!(
            strategy.allocate(&region("proxy"), ShardId(4), &Allocations::new()),
            None
        );
    }

    #[test]
    fn rebalance_moves_shards_away_from_the_wrong_region() {
        let client = ExternalAllocationClient::new();
        let mut strategy = ExternalAllocationStrategy::new(client.clone());
        let current = allocations(&[("a", &[1, 2, 3]), ("b", &[4])]);
        assert!(strategy.rebalance(&current, &BTreeSet::new()).is_empty());

        // A Kafka assignment gives partitions 2 and 3 to b, and 4 to b again.
        client.set_locations([
            (ShardId(2), region("b")),
            (ShardId(3), region("b")),
            (ShardId(4), region("b")),
        ]);
        assert_eq!(
            strategy.rebalance(&current, &BTreeSet::new()),
            shards(&[2, 3])
        );
    }

    #[test]
    fn rebalance_skips_shards_in_progress_and_unregistered_targets() {
        let client = ExternalAllocationClient::new();
        client.set_locations([
            (ShardId(1), region("b")),
            (ShardId(2), region("b")),
            (ShardId(3), region("c")),
        ]);
        let mut strategy = ExternalAllocationStrategy::new(client);
        let current = allocations(&[("a", &[1, 2, 3]), ("b", &[])]);
        assert_eq!(strategy.rebalance(&current, &shards(&[1])), shards(&[2]));
    }

    #[test]
    fn rebalance_ignores_desired_shards_that_are_not_allocated() {
        let client = ExternalAllocationClient::new();
        client.set_location(ShardId(9), region("a"));
        let mut strategy = ExternalAllocationStrategy::new(client);
        let current = allocations(&[("a", &[1]), ("b", &[2])]);
        assert!(strategy.rebalance(&current, &BTreeSet::new()).is_empty());
    }

    #[test]
    fn clients_share_locations_and_count_changes() {
        let client = ExternalAllocationClient::new();
        let other = client.clone();
        assert_eq!(client.version(), 0);

        other.set_location(ShardId(1), region("a"));
        assert_eq!(client.location(ShardId(1)), Some(region("a")));
        assert_eq!(client.version(), 1);

        // Setting what is already desired is not a change.
        client.set_locations([(ShardId(1), region("a"))]);
        assert_eq!(client.version(), 1);

        client.set_locations([(ShardId(1), region("b")), (ShardId(2), region("b"))]);
        assert_eq!(client.version(), 2, "one bulk update, one change");
        assert_eq!(
            other.locations(),
            BTreeMap::from([(ShardId(1), region("b")), (ShardId(2), region("b"))])
        );

        assert_eq!(other.clear_location(ShardId(1)), Some(region("b")));
        assert_eq!(other.clear_location(ShardId(1)), None);
        assert_eq!(client.version(), 3);
        assert_eq!(client.location(ShardId(1)), None);
    }

    #[test]
    fn client_is_usable_from_other_threads() {
        let client = ExternalAllocationClient::new();
        let writers: Vec<_> = (0..4u32)
            .map(|t| {
                let client = client.clone();
                std::thread::spawn(move || {
                    for i in 0..100u32 {
                        client.set_location(ShardId(t * 100 + i), RegionId::new(format!("n{t}")));
                    }
                })
            })
            .collect();
        for writer in writers {
            writer.join().unwrap();
        }
        assert_eq!(client.locations().len(), 400);
    }
}
