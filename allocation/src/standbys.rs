//! Which regions keep a standby copy of a shard (`sharding.standbys`): the
//! `standbys + 1` regions ranked first for the shard by a hash of both
//! (rendezvous hashing), the shard's host among them or not.
//!
//! Nodes decide for themselves which copies they keep, and the coordinator
//! decides where a shard without a home goes; both rank with this one
//! function over the same regions (the coordinator's registered regions,
//! proxies excepted), so the coordinator knows where the copies are
//! without being told. A region that has just become a keeper (another
//! left) starts its copy at its next step. A hash of the pair, rather than
//! a ring, keeps every other shard's keepers where they were when a region
//! comes or goes.

use crate::{stable_hash, RegionId, ShardId};

/// `regions` ranked for `shard`, the first the most preferred. Ties of the
/// hash (two regions of one shard, 2^-64) go to the greater id, so every
/// node ranks alike.
pub fn ranked<'a>(
    shard: ShardId,
    regions: impl IntoIterator<Item = &'a RegionId>,
) -> Vec<&'a RegionId> {
    let mut ranked: Vec<(u64, &RegionId)> = regions
        .into_iter()
        .map(|region| (stable_hash(&format!("{shard}/{region}")), region))
        .collect();
    ranked.sort_by(|(a, ra), (b, rb)| b.cmp(a).then_with(|| rb.as_str().cmp(ra.as_str())));
    ranked.dedup_by(|(_, a), (_, b)| a == b);
    ranked.into_iter().map(|(_, region)| region).collect()
}

/// The regions that keep a copy of `shard` when each shard has `standbys`
/// copies besides its host's: the first `standbys + 1` of [`ranked`]. The
/// host may be one of them; then only `standbys` of them hold a copy.
pub fn keepers<'a>(
    shard: ShardId,
    regions: impl IntoIterator<Item = &'a RegionId>,
    standbys: u32,
) -> Vec<&'a RegionId> {
    let mut ranked = ranked(shard, regions);
    ranked.truncate(usize::try_from(standbys).map_or(usize::MAX, |n| n.saturating_add(1)));
    ranked
}

/// Whether `region` keeps a copy of `shard` among `regions`.
pub fn keeps(region: &RegionId, regions: &[RegionId], shard: ShardId, standbys: u32) -> bool {
    keepers(shard, regions, standbys).contains(&region)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nodes(n: usize) -> Vec<RegionId> {
        (0..n).map(|i| RegionId::new(format!("n{i}:1"))).collect()
    }

    #[test]
    fn each_shard_has_standbys_plus_one_keepers_and_they_stay_when_a_member_leaves() {
        let members = nodes(5);
        for shard in (0..64).map(ShardId) {
            let keepers: Vec<&RegionId> = members
                .iter()
                .filter(|m| keeps(m, &members, shard, 1))
                .collect();
            assert_eq!(keepers.len(), 2, "shard {shard}");
            let (gone, rest): (Vec<RegionId>, Vec<RegionId>) =
                members.iter().cloned().partition(|m| m == keepers[0]);
            assert!(keeps(keepers[1], &rest, shard, 1), "the other keeper stays");
            assert!(!keeps(&gone[0], &rest, shard, 1), "not a member");
        }
    }

    #[test]
    fn with_standbys_one_less_than_the_nodes_every_node_keeps_every_shard() {
        let members = nodes(3);
        for shard in (0..64).map(ShardId) {
            assert!(members.iter().all(|m| keeps(m, &members, shard, 2)));
        }
        assert!(!keeps(
            &RegionId::new("stranger:1"),
            &members,
            ShardId(0),
            2
        ));
    }

    #[test]
    fn the_first_ranked_of_the_rest_kept_a_copy_when_the_host_leaves() {
        // Whichever keeper hosted the shard, the survivors' first choice
        // was a keeper already: the coordinator's preference finds a warm
        // copy there.
        let members = nodes(4);
        for shard in (0..64).map(ShardId) {
            for host in &members {
                let rest: Vec<RegionId> = members.iter().filter(|m| *m != host).cloned().collect();
                let first = ranked(shard, &rest)[0];
                assert!(keeps(first, &members, shard, 1), "shard {shard}");
                assert_ne!(first, host);
            }
        }
    }

    #[test]
    fn the_ranking_does_not_depend_on_the_order_regions_are_listed_in() {
        let members = nodes(6);
        let reversed: Vec<RegionId> = members.iter().rev().cloned().collect();
        for shard in (0..64).map(ShardId) {
            assert_eq!(ranked(shard, &members), ranked(shard, &reversed));
        }
    }
}
