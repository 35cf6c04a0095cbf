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
    let link = coordinator.connect(region.clone()).await.unwrap();
    link.to_coordinator
        .send(RegionToCoordinator::Register {
            region: region.clone(),
            proxy: false,
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
        CoordinatorToRegion::Members { regions } => Some(regions),
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
