//! The coordinator over a bare link: what it answers to messages from the
//! network, without regions.

use super::store::InMemoryStore;
use super::CoordinatorHandle;
use crate::protocol::{CoordinatorLink, CoordinatorToRegion, RegionToCoordinator};
use crate::settings::ShardingSettings;
use colo_allocation::{LeastShardAllocationStrategy, LeastShardSettings, RegionId, ShardId};
use std::sync::Arc;
use std::time::Duration;

const SHARDS: u32 = 10;

fn coordinator() -> CoordinatorHandle {
    let settings = ShardingSettings {
        number_of_shards: SHARDS,
        ..ShardingSettings::default()
    };
    let strategy = LeastShardAllocationStrategy::new(LeastShardSettings::default()).unwrap();
    CoordinatorHandle::spawn(
        "t",
        settings,
        Box::new(strategy),
        Arc::new(InMemoryStore::new()),
    )
    .unwrap()
}

async fn register(coordinator: &CoordinatorHandle, region: &RegionId) -> CoordinatorLink {
    register_as(coordinator, region, false).await
}

/// [`register`] as a proxy when `proxy`.
async fn register_as(
    coordinator: &CoordinatorHandle,
    region: &RegionId,
    proxy: bool,
) -> CoordinatorLink {
    let link = coordinator.connect(region.clone()).await.unwrap();
    link.to_coordinator
        .send(RegionToCoordinator::Register {
            region: region.clone(),
            proxy,
            hosted: vec![],
            number_of_shards: SHARDS,
            extractor: 1,
            ping: 1,
        })
        .unwrap();
    link
}

/// The next message the coordinator sends on `link` that `pick` keeps.
async fn next<T>(
    link: &mut CoordinatorLink,
    mut pick: impl FnMut(CoordinatorToRegion) -> Option<T>,
) -> T {
    let wait = async {
        loop {
            let message = link.from_coordinator.recv().await.expect("link open");
            if let Some(found) = pick(message) {
                return found;
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(10), wait)
        .await
        .expect("the coordinator answers")
}

fn members(message: CoordinatorToRegion) -> Option<Vec<RegionId>> {
    match message {
        CoordinatorToRegion::Members { regions, .. } => Some(regions),
        _ => None,
    }
}

#[tokio::test]
async fn a_shard_out_of_range_from_the_wire_is_never_allocated() {
    let coordinator = coordinator();
    let region = RegionId::new("r");
    let mut link = register(&coordinator, &region).await;
    for shard in [SHARDS, u32::MAX, 3] {
        link.to_coordinator
            .send(RegionToCoordinator::GetShardHome {
                shard: ShardId(shard),
            })
            .unwrap();
    }
    // Answered in order: the first answer about any shard is about 3.
    let first = next(&mut link, |m| match m {
        CoordinatorToRegion::ShardHome { shard, .. } | CoordinatorToRegion::HostShard { shard } => {
            Some(shard)
        }
        _ => None,
    })
    .await;
    // Allocation of the requester's shards is immediate: had 10 or MAX been
    // allocated, their HostShard would have come first.
    assert_eq!(first, ShardId(3));
}

#[tokio::test]
async fn every_region_learns_the_members_when_one_registers_or_leaves() {
    let coordinator = coordinator();
    let (a, b) = (RegionId::new("a"), RegionId::new("b"));
    let mut link_a = register(&coordinator, &a).await;
    assert_eq!(next(&mut link_a, members).await, vec![a.clone()]);
    let mut link_b = register(&coordinator, &b).await;
    assert_eq!(next(&mut link_b, members).await, vec![a.clone(), b.clone()]);
    assert_eq!(next(&mut link_a, members).await, vec![a.clone(), b.clone()]);
    // b hosts nothing: leaving its link terminates it at once.
    drop(link_b);
    assert_eq!(next(&mut link_a, members).await, vec![a.clone()]);
}

/// A proxy hosts nothing and keeps no standby copies: the members list
/// says which regions are proxies, so that nodes rank copies' keepers over
/// the same regions the coordinator places shards on.
#[tokio::test]
async fn the_members_list_names_its_proxies() {
    let coordinator = coordinator();
    let (a, p) = (RegionId::new("a"), RegionId::new("p"));
    let mut link_a = register(&coordinator, &a).await;
    next(&mut link_a, members).await;
    let _link_p = register_as(&coordinator, &p, true).await;
    let listed = next(&mut link_a, |message| match message {
        CoordinatorToRegion::Members { regions, proxies } => Some((regions, proxies)),
        _ => None,
    })
    .await;
    assert_eq!(listed, (vec![a, p.clone()], vec![p]));
}

#[tokio::test]
async fn a_region_whose_extractor_places_entities_elsewhere_is_refused() {
    let coordinator = coordinator();
    let (a, b) = (RegionId::new("a"), RegionId::new("b"));
    let mut link_a = register(&coordinator, &a).await;
    next(&mut link_a, members).await;
    let mut link_b = coordinator.connect(b.clone()).await.unwrap();
    link_b
        .to_coordinator
        .send(RegionToCoordinator::Register {
            region: b,
            proxy: false,
            hosted: vec![],
            number_of_shards: SHARDS,
            extractor: 2,
            ping: 1,
        })
        .unwrap();
    let reason = next(&mut link_b, |m| match m {
        CoordinatorToRegion::RegisterRefused { reason } => Some(reason),
        CoordinatorToRegion::RegisterAck { .. } => panic!("registered"),
        _ => None,
    })
    .await;
    assert!(
        reason.contains("extractor") && reason.contains(&format!("{:016x}", 2)),
        "{reason}"
    );
}

#[tokio::test]
async fn a_region_that_is_not_registered_gets_no_heartbeat_answer() {
    let coordinator = coordinator();
    let region = RegionId::new("gone");
    // A region the coordinator terminated (or never registered) has no
    // lease to renew: its heartbeats go unanswered until it registers.
    let mut link = coordinator.connect(region.clone()).await.unwrap();
    link.to_coordinator
        .send(RegionToCoordinator::Heartbeat { ping: 7 })
        .unwrap();
    link.to_coordinator
        .send(RegionToCoordinator::Register {
            region,
            proxy: false,
            hosted: vec![],
            number_of_shards: SHARDS,
            extractor: 1,
            ping: 8,
        })
        .unwrap();
    // Answered in order: had the heartbeat been answered, its ack would
    // come first.
    let first = next(&mut link, |m| match m {
        CoordinatorToRegion::HeartbeatAck { ping } | CoordinatorToRegion::RegisterAck { ping } => {
            Some(ping)
        }
        _ => None,
    })
    .await;
    assert_eq!(
        first, 8,
        "the heartbeat of an unregistered region was answered"
    );
}

/// A region that answers the coordinator's hand-off protocol at once and
/// passes its placement answers on, as `(request, failed, elsewhere)`.
struct Answering {
    to_coordinator: tokio::sync::mpsc::UnboundedSender<RegionToCoordinator>,
    placements: tokio::sync::mpsc::UnboundedReceiver<(u64, Vec<ShardId>, Vec<ShardId>)>,
}

async fn answering(coordinator: &CoordinatorHandle, region: &RegionId) -> Answering {
    let link = register(coordinator, region).await;
    let CoordinatorLink {
        to_coordinator,
        mut from_coordinator,
        ..
    } = link;
    let (done, placements) = tokio::sync::mpsc::unbounded_channel();
    let answer = to_coordinator.clone();
    tokio::spawn(async move {
        while let Some(message) = from_coordinator.recv().await {
            let reply = match message {
                CoordinatorToRegion::HostShard { shard } => {
                    Some(RegionToCoordinator::ShardStarted { shard })
                }
                CoordinatorToRegion::BeginHandOff { shard } => {
                    Some(RegionToCoordinator::BeginHandOffAck { shard })
                }
                CoordinatorToRegion::HandOff { shard } => {
                    Some(RegionToCoordinator::ShardStopped { shard })
                }
                CoordinatorToRegion::PlacementDone {
                    request,
                    failed,
                    elsewhere,
                    ..
                } => {
                    let _ = done.send((request, failed, elsewhere));
                    None
                }
                _ => None,
            };
            if let Some(reply) = reply {
                let _ = answer.send(reply);
            }
        }
    });
    Answering {
        to_coordinator,
        placements,
    }
}

fn external_coordinator() -> CoordinatorHandle {
    let settings = ShardingSettings {
        number_of_shards: SHARDS,
        ..ShardingSettings::default()
    };
    CoordinatorHandle::spawn(
        "t",
        settings,
        Box::new(colo_allocation::ExternalAllocationStrategy::new(
            colo_allocation::ExternalAllocationClient::new(),
        )),
        Arc::new(InMemoryStore::new()),
    )
    .unwrap()
}

fn host(request: u64, shard: u32, region: &RegionId, topic: &str) -> RegionToCoordinator {
    RegionToCoordinator::UpdateLocations {
        request,
        locations: vec![(ShardId(shard), region.clone())],
        source: topic.to_string(),
    }
}

async fn placed(region: &mut Answering) -> (u64, Vec<ShardId>, Vec<ShardId>) {
    tokio::time::timeout(Duration::from_secs(10), region.placements.recv())
        .await
        .expect("a placement answer")
        .expect("region link open")
}

/// An entity type fed by two topics: b's claim of topic t1 on shard 3,
/// which a claims for t1 (a partition assigned twice, a stale owner),
/// waits for a's release, however often b asks again; b's claim of t2 is
/// answered at once, the shard staying on a. Once a releases, b's waiting
/// requests are all answered: none is left behind.
#[tokio::test]
async fn a_claim_waits_for_the_same_topics_stale_owner_but_not_for_another_topics() {
    let coordinator = external_coordinator();
    let (a, b) = (RegionId::new("a"), RegionId::new("b"));
    let mut region_a = answering(&coordinator, &a).await;
    let mut region_b = answering(&coordinator, &b).await;
    region_a.to_coordinator.send(host(1, 3, &a, "t1")).unwrap();
    assert_eq!(placed(&mut region_a).await, (1, vec![], vec![]));

    // b asks for the t1 claim three times (each earlier ask timed out).
    for request in 1..=3 {
        region_b
            .to_coordinator
            .send(host(request, 3, &b, "t1"))
            .unwrap();
    }
    // Its t2 claim leaves the shard on a, answered at once.
    region_b.to_coordinator.send(host(4, 3, &b, "t2")).unwrap();
    assert_eq!(placed(&mut region_b).await, (4, vec![], vec![ShardId(3)]));

    region_a
        .to_coordinator
        .send(RegionToCoordinator::ReleaseShards {
            request: 2,
            shards: vec![ShardId(3)],
            source: "t1".into(),
        })
        .unwrap();
    assert_eq!(placed(&mut region_a).await, (2, vec![], vec![]));
    let mut answered: Vec<u64> = Vec::new();
    for _ in 1..=3 {
        let (request, failed, elsewhere) = placed(&mut region_b).await;
        assert!(failed.is_empty() && elsewhere.is_empty(), "{request}");
        answered.push(request);
    }
    answered.sort_unstable();
    assert_eq!(answered, [1, 2, 3], "every ask of b is answered once");
}

/// A node killed and started again at once (the same address, a new
/// process) registers on a new link running nothing: the claims of its
/// earlier process end, and a location that waited for one goes ahead.
/// Its new process claims again what its new assignment gives it.
#[tokio::test]
async fn a_region_back_on_a_new_link_keeps_no_claim_of_a_shard_it_does_not_run() {
    let coordinator = external_coordinator();
    let (a, b) = (RegionId::new("a"), RegionId::new("b"));
    let mut region_a = answering(&coordinator, &a).await;
    let mut region_b = answering(&coordinator, &b).await;
    region_a.to_coordinator.send(host(1, 3, &a, "t1")).unwrap();
    assert_eq!(placed(&mut region_a).await, (1, vec![], vec![]));
    region_b.to_coordinator.send(host(1, 3, &b, "t1")).unwrap();

    let _restarted = answering(&coordinator, &a).await;
    assert_eq!(
        placed(&mut region_b).await,
        (1, vec![], vec![]),
        "b's location no longer waits for a claim of a's earlier process"
    );
}

/// The copies of a shard are where the nodes put them, ranked over every
/// registered region: a keeper that cannot take the shard now (leaving,
/// or unlinked) is left out, and its place is not given to a region that
/// keeps no copy.
#[test]
fn the_warm_regions_are_the_keepers_that_can_take_the_shard_now() {
    let registered = |names: &[&str]| -> colo_allocation::Allocations {
        names.iter().map(|n| (RegionId::new(*n), vec![])).collect()
    };
    let all = registered(&["a", "b", "c"]);
    let regions: Vec<RegionId> = all.keys().cloned().collect();
    let shard = (0..)
        .map(ShardId)
        .find(|shard| {
            let order = colo_allocation::standbys::ranked(*shard, &regions);
            order.iter().map(|r| r.as_str()).collect::<Vec<_>>() == ["c", "b", "a"]
        })
        .expect("a shard ranking c, b, a");
    let active = registered(&["a", "b"]);
    assert_eq!(
        super::warm_regions(&all, &active, shard, 1),
        vec![RegionId::new("b")],
        "c and b keep the copies; c is leaving; a keeps none"
    );
    assert_eq!(
        super::warm_regions(&all, &all, shard, 1),
        vec![RegionId::new("c"), RegionId::new("b")]
    );
}
