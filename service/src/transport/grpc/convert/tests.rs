//! Every message survives the trip through protobuf, and a malformed one
//! is refused.

use super::*;
use bytes::Bytes;
use std::collections::BTreeMap;

#[test]
fn envelopes_and_replies_survive_the_trip() {
    let env = WireEnvelope {
        entity_type: "counter".into(),
        entity_id: "a".into(),
        shard: ShardId(7),
        payload: Bytes::from_static(b"\x01\x02"),
        reply_to: Some(ReplyTo {
            node: RegionId::new("127.0.0.1:1"),
            incarnation: 77,
            correlation: 9,
        }),
        delayed: true,
        origin: Some(WireOrigin {
            source: "user-events/3".into(),
            offset: 41,
        }),
        idempotency_key: None,
    };
    assert_eq!(
        envelope_from_pb(envelope_to_pb(env.clone())),
        Ok(env.clone())
    );
    let keyed = WireEnvelope {
        origin: None,
        idempotency_key: Some("order-7".into()),
        ..env.clone()
    };
    assert_eq!(
        envelope_from_pb(envelope_to_pb(keyed.clone())),
        Ok(keyed.clone())
    );
    let both = WireEnvelope {
        idempotency_key: Some("order-7".into()),
        ..env.clone()
    };
    assert!(envelope_from_pb(envelope_to_pb(both)).is_err());
    let unasked = WireEnvelope {
        reply_to: None,
        ..keyed
    };
    assert!(envelope_from_pb(envelope_to_pb(unasked)).is_err());
    let ok = WireReply {
        incarnation: 77,
        correlation: 3,
        result: Ok(Bytes::from_static(b"x")),
    };
    assert_eq!(reply_from_pb(reply_to_pb(ok.clone())), Ok(ok));
    let failed = WireReply {
        incarnation: 77,
        correlation: 4,
        result: Err(AskError::EntityFailed("boom".into())),
    };
    assert_eq!(reply_from_pb(reply_to_pb(failed.clone())), Ok(failed));
    // "May or may not have been handled" stays that across nodes.
    let unconfirmed = WireReply {
        incarnation: 77,
        correlation: 5,
        result: Err(AskError::Unconfirmed("node c went away".into())),
    };
    assert_eq!(
        reply_from_pb(reply_to_pb(unconfirmed.clone())),
        Ok(unconfirmed)
    );
}

#[test]
fn malformed_frames_are_refused() {
    let empty = pb::Envelope::default();
    assert!(envelope_from_pb(empty).is_err());
    assert!(reply_from_pb(pb::Reply::default()).is_err());
    assert!(region_message_from_pb(pb::RegionMessage::default()).is_err());
    let negative = prost_types::Duration {
        seconds: -1,
        nanos: 0,
    };
    assert!(duration_from_pb(Some(negative)).is_err());
}

#[test]
fn every_protocol_message_survives_the_trip() {
    let stats = RegionStats {
        stats: BTreeMap::from([(ShardId(1), 3)]),
        failed: vec![ShardId(2)],
        handing_off: vec![ShardId(4)],
        restoring: vec![ShardId(2)],
        assigned: vec![ShardId(1), ShardId(5)],
        standbys: vec![ShardId(6)],
    };
    let up = [
        RegionToCoordinator::Register {
            region: RegionId::new("r"),
            proxy: false,
            hosted: vec![ShardId(1)],
            number_of_shards: 12,
            extractor: 0xfeed,
            ping: 3,
        },
        RegionToCoordinator::Heartbeat { ping: 4 },
        RegionToCoordinator::GetShardHome { shard: ShardId(1) },
        RegionToCoordinator::ShardStarted { shard: ShardId(1) },
        RegionToCoordinator::BeginHandOffAck { shard: ShardId(1) },
        RegionToCoordinator::ShardStopped { shard: ShardId(1) },
        RegionToCoordinator::GracefulShutdown,
        RegionToCoordinator::GetClusterStats {
            request: 1,
            timeout: Duration::from_millis(1500),
        },
        RegionToCoordinator::RegionStats {
            request: 1,
            stats: stats.clone(),
        },
        RegionToCoordinator::UpdateLocations {
            request: 5,
            locations: vec![
                (ShardId(1), RegionId::new("r")),
                (ShardId(7), RegionId::new("s")),
            ],
            source: "t.events".into(),
        },
        RegionToCoordinator::ReleaseShards {
            request: 6,
            shards: vec![ShardId(2), ShardId(3)],
            source: String::new(),
        },
    ];
    for m in up {
        let back = region_message_from_pb(region_message_to_pb("t", m.clone()));
        assert_eq!(back.ok(), Some(m.clone()), "{m:?}");
    }
    let down = [
        CoordinatorToRegion::RegisterAck { ping: 3 },
        CoordinatorToRegion::RegisterRefused {
            reason: "no".into(),
        },
        CoordinatorToRegion::HeartbeatAck { ping: 4 },
        CoordinatorToRegion::ShardHome {
            shard: ShardId(1),
            region: RegionId::new("r"),
        },
        CoordinatorToRegion::HostShard { shard: ShardId(1) },
        CoordinatorToRegion::BeginHandOff { shard: ShardId(1) },
        CoordinatorToRegion::HandOff { shard: ShardId(1) },
        CoordinatorToRegion::RegionTerminated {
            region: RegionId::new("r"),
        },
        CoordinatorToRegion::Members {
            regions: vec![RegionId::new("r"), RegionId::new("s")],
            proxies: vec![RegionId::new("s")],
        },
        CoordinatorToRegion::GetRegionStats {
            request: 2,
            timeout: Duration::from_secs(1),
        },
        CoordinatorToRegion::ClusterStats {
            request: 2,
            stats: ClusterShardingStats {
                regions: BTreeMap::from([(RegionId::new("r"), stats)]),
                failed_regions: vec![RegionId::new("s")],
            },
        },
        CoordinatorToRegion::PlacementDone {
            request: 5,
            failed: vec![],
            refused: None,
            elsewhere: vec![ShardId(4)],
        },
        CoordinatorToRegion::PlacementDone {
            request: 6,
            failed: vec![ShardId(1)],
            refused: Some("not external".into()),
            elsewhere: vec![],
        },
    ];
    for m in down {
        let pb = coordinator_message_to_pb(5, m.clone());
        assert_eq!(pb.epoch, 5);
        let back = coordinator_message_from_pb(pb.message.unwrap());
        assert_eq!(back.ok(), Some(m.clone()), "{m:?}");
    }
}
