//! The demo group's assignor. librdkafka's mock cluster gives a
//! consumer-protocol group a range assignment, recomputed at each join or
//! leave: when node-4 joins, half the partitions move, most between nodes
//! that stay, each node taking its new ones only once it has given up its
//! old ones, so one hand-off waits on another. Apache Kafka's group
//! coordinator assigns with a sticky assignor (its default, `uniform`,
//! keeps each member's partitions up to its share), and the demo shows
//! what colo does on Apache Kafka: so it sets the group's target
//! assignment itself, the same way, at each change it makes.

use colo_connectors::{MemberTarget, MockKafka};
use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::sync::Arc;

/// Sets the target assignment of one consumer-protocol group of the mock
/// cluster, sticky: a member keeps what it holds up to its share, and only
/// what is over a share or was a leaver's moves.
pub(super) struct GroupAssignor {
    broker: Arc<MockKafka>,
    group: String,
    topic: String,
    partitions: i32,
    /// Each partition's member, as last targeted.
    owners: Mutex<BTreeMap<i32, String>>,
}

impl GroupAssignor {
    pub(super) fn new(broker: Arc<MockKafka>, group: &str, topic: &str, partitions: i32) -> Self {
        Self {
            broker,
            group: group.to_string(),
            topic: topic.to_string(),
            partitions,
            owners: Mutex::new(BTreeMap::new()),
        }
    }

    /// Takes over from the mock's own assignment: `held` is what each
    /// member holds now (its member id, its partitions), and the target
    /// keeps it, so nothing moves unless a partition is held twice or by
    /// nobody.
    pub(super) fn take_over(&self, held: &[(String, Vec<i32>)]) -> Result<(), String> {
        {
            let mut owners = self.owners.lock();
            owners.clear();
            for (member, partitions) in held {
                for partition in partitions {
                    owners.entry(*partition).or_insert_with(|| member.clone());
                }
            }
        }
        let members: Vec<String> = held.iter().map(|(member, _)| member.clone()).collect();
        self.assign(&members)
    }

    /// Names `joiner` in the target with no partitions: the cluster counts
    /// a member from its first heartbeat on, and drops a target naming one
    /// it does not count yet, so a joiner's share waits until this one has
    /// reached it (its epoch above 0). The others are not named: their
    /// targets, and their epochs, stay as they are (a commit made under an
    /// epoch that moved meanwhile is refused).
    pub(super) fn admit(&self, joiner: &str) -> Result<(), String> {
        let target = MemberTarget {
            member_id: joiner.to_string(),
            partitions: Vec::new(),
        };
        self.broker
            .assign(&self.group, &[target])
            .map_err(|e| format!("set the group's target assignment: {e}"))
    }

    /// Makes `members` the group's members: each keeps its partitions up
    /// to its share, and the rest (over a share, or a member's no longer
    /// listed) go to the members below theirs.
    pub(super) fn assign(&self, members: &[String]) -> Result<(), String> {
        let mut owners = self.owners.lock();
        let target = sticky(members, &owners, self.partitions);
        let targets: Vec<MemberTarget> = target
            .iter()
            .map(|(member, partitions)| MemberTarget {
                member_id: member.clone(),
                partitions: partitions
                    .iter()
                    .map(|p| (self.topic.clone(), *p))
                    .collect(),
            })
            .collect();
        self.broker
            .assign(&self.group, &targets)
            .map_err(|e| format!("set the group's target assignment: {e}"))?;
        *owners = target
            .into_iter()
            .flat_map(|(member, partitions)| {
                partitions.into_iter().map(move |p| (p, member.clone()))
            })
            .collect();
        Ok(())
    }
}

/// A sticky assignment of `partitions` partitions to `members`: each
/// member's share is the partitions over the members, one more for the
/// first of them by most held when they do not divide evenly; a member
/// keeps its lowest partitions up to its share; the others, in order, go
/// each to the member furthest below its share (the first listed of
/// those).
fn sticky(
    members: &[String],
    owners: &BTreeMap<i32, String>,
    partitions: i32,
) -> BTreeMap<String, Vec<i32>> {
    if members.is_empty() {
        return BTreeMap::new();
    }
    let mut held: Vec<Vec<i32>> = members
        .iter()
        .map(|member| {
            owners
                .iter()
                .filter(|(_, owner)| *owner == member)
                .map(|(partition, _)| *partition)
                .collect()
        })
        .collect();
    let total = usize::try_from(partitions).unwrap_or(0);
    let (base, extra) = (total / members.len(), total % members.len());
    let mut by_held: Vec<usize> = (0..members.len()).collect();
    by_held.sort_by_key(|&i| std::cmp::Reverse(held[i].len()));
    let mut share = vec![base; members.len()];
    for &i in by_held.iter().take(extra) {
        share[i] += 1;
    }
    let mut free: Vec<i32> = (0..partitions)
        .filter(|partition| {
            owners
                .get(partition)
                .is_none_or(|owner| !members.contains(owner))
        })
        .collect();
    for (partitions, share) in held.iter_mut().zip(&share) {
        if partitions.len() > *share {
            free.extend(partitions.split_off(*share));
        }
    }
    free.sort_unstable();
    for partition in free {
        let room = |i: usize| share[i].saturating_sub(held[i].len());
        if let Some(i) = (0..members.len())
            .filter(|&i| room(i) > 0)
            .max_by_key(|&i| (room(i), std::cmp::Reverse(i)))
        {
            held[i].push(partition);
        }
    }
    members
        .iter()
        .cloned()
        .zip(held.into_iter().map(|mut partitions| {
            partitions.sort_unstable();
            partitions
        }))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn members(names: &[&str]) -> Vec<String> {
        names.iter().map(|n| n.to_string()).collect()
    }

    fn owners(of: &[(&str, std::ops::Range<i32>)]) -> BTreeMap<i32, String> {
        of.iter()
            .flat_map(|(member, range)| range.clone().map(move |p| (p, member.to_string())))
            .collect()
    }

    fn moved(before: &BTreeMap<i32, String>, after: &BTreeMap<String, Vec<i32>>) -> usize {
        after
            .iter()
            .flat_map(|(member, partitions)| partitions.iter().map(move |p| (p, member)))
            .filter(|(p, member)| before.get(p) != Some(*member))
            .count()
    }

    #[test]
    fn a_joiner_takes_only_its_share_and_the_others_keep_the_rest() {
        let before = owners(&[("a", 0..8), ("b", 8..16), ("c", 16..24)]);
        let after = sticky(&members(&["a", "b", "c", "d"]), &before, 24);
        assert!(after.values().all(|partitions| partitions.len() == 6));
        assert_eq!(moved(&before, &after), 6, "{after:?}");
        assert_eq!(after["a"], vec![0, 1, 2, 3, 4, 5]);
        assert_eq!(after["d"], vec![6, 7, 14, 15, 22, 23]);
    }

    #[test]
    fn a_leavers_partitions_are_spread_and_nothing_else_moves() {
        let before = owners(&[("a", 0..6), ("b", 6..12), ("c", 12..18), ("d", 18..24)]);
        let after = sticky(&members(&["a", "c", "d"]), &before, 24);
        assert!(after.values().all(|partitions| partitions.len() == 8));
        let mut all: Vec<i32> = after.values().flatten().copied().collect();
        all.sort_unstable();
        assert_eq!(all, (0..24).collect::<Vec<_>>(), "each once");
        assert_eq!(moved(&before, &after), 6, "{after:?}");
        assert!(!after.contains_key("b"));
    }

    #[test]
    fn uneven_shares_go_to_those_holding_most() {
        let before = owners(&[("a", 0..3), ("b", 3..10)]);
        let after = sticky(&members(&["a", "b", "c"]), &before, 10);
        assert_eq!(after["b"], vec![3, 4, 5, 6]);
        assert_eq!(after["a"], vec![0, 1, 2]);
        assert_eq!(after["c"], vec![7, 8, 9]);
    }

    #[test]
    fn every_partition_has_one_member_from_nothing() {
        let after = sticky(&members(&["a", "b", "c"]), &BTreeMap::new(), 7);
        let mut all: Vec<i32> = after.values().flatten().copied().collect();
        all.sort_unstable();
        assert_eq!(all, (0..7).collect::<Vec<_>>());
        assert!(after.values().all(|p| (2..=3).contains(&p.len())));
        assert!(sticky(&[], &BTreeMap::new(), 7).is_empty());
    }
}
