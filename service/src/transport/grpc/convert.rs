//! Between the runtime's types and colo.v1's. Everything that comes off the
//! wire is checked here, so a malformed frame is refused with a reason
//! instead of reaching a region or the coordinator.

use crate::envelope::{ReplyTo, WireEnvelope, WireOrigin, WireReply};
use crate::error::AskError;
use crate::inspection::{ClusterShardingStats, RegionStats};
use crate::protocol::{CoordinatorToRegion, RegionToCoordinator};
use colo_allocation::{RegionId, ShardId};
use colo_proto::v1 as pb;
use pb::coordinator_message::Message as ToRegion;
use pb::region_message::Message as ToCoordinator;
use std::time::Duration;

/// A frame that does not make sense.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("malformed {what}: {reason}")]
pub struct Malformed {
    what: &'static str,
    reason: &'static str,
}

fn malformed(what: &'static str, reason: &'static str) -> Malformed {
    Malformed { what, reason }
}

pub fn envelope_to_pb(env: WireEnvelope) -> pb::Envelope {
    pb::Envelope {
        entity_type: env.entity_type,
        entity_id: env.entity_id.into(),
        shard: env.shard.0,
        payload: env.payload.into(),
        reply_to: env.reply_to.map(|r| pb::ReplyTo {
            node: r.node.to_string(),
            correlation: r.correlation,
            incarnation: r.incarnation,
        }),
        delayed: env.delayed,
        origin: env.origin.map(|o| pb::Origin {
            source: o.source,
            offset: o.offset,
        }),
        idempotency_key: env.idempotency_key,
    }
}

pub fn envelope_from_pb(env: pb::Envelope) -> Result<WireEnvelope, Malformed> {
    if env.entity_type.is_empty() {
        return Err(malformed("envelope", "empty entity_type"));
    }
    if env.entity_id.is_empty() {
        return Err(malformed("envelope", "empty entity_id"));
    }
    let reply_to = match env.reply_to {
        Some(r) if r.node.is_empty() => return Err(malformed("envelope", "empty reply_to.node")),
        Some(r) => Some(ReplyTo {
            node: RegionId::new(r.node),
            incarnation: r.incarnation,
            correlation: r.correlation,
        }),
        None => None,
    };
    // A record's origin comes with an ask only: its partition waits for
    // the answer.
    let origin = match (env.origin, &reply_to) {
        (None, _) => None,
        (Some(_), None) => return Err(malformed("envelope", "an origin without reply_to")),
        (Some(o), Some(_)) if o.source.is_empty() => {
            return Err(malformed("envelope", "empty origin.source"))
        }
        (Some(o), Some(_)) => Some(WireOrigin {
            source: o.source,
            offset: o.offset,
        }),
    };
    // So does a tell's idempotency key (its client waits for the outcome),
    // and never with a record's origin.
    let idempotency_key = match (env.idempotency_key, &reply_to, &origin) {
        (None, _, _) => None,
        (Some(_), None, _) => {
            return Err(malformed("envelope", "an idempotency_key without reply_to"))
        }
        (Some(_), _, Some(_)) => {
            return Err(malformed(
                "envelope",
                "both an origin and an idempotency_key",
            ))
        }
        (Some(key), Some(_), None) if key.is_empty() => {
            return Err(malformed("envelope", "empty idempotency_key"))
        }
        (Some(key), Some(_), None) => Some(key),
    };
    Ok(WireEnvelope {
        entity_type: env.entity_type,
        entity_id: env.entity_id.into(),
        shard: ShardId(env.shard),
        payload: env.payload.into(),
        reply_to,
        delayed: env.delayed,
        origin,
        idempotency_key,
    })
}

pub fn reply_to_pb(reply: WireReply) -> pb::Reply {
    use pb::ask_failure::Kind;
    let failure = |kind: Kind, message: String| {
        pb::reply::Result::Failure(pb::AskFailure {
            kind: kind as i32,
            message,
        })
    };
    let result = match reply.result {
        Ok(payload) => pb::reply::Result::Payload(payload.into()),
        Err(e) => {
            let message = e.to_string();
            match e {
                AskError::Tell(_) => failure(Kind::Refused, message),
                AskError::Timeout(_) => failure(Kind::Timeout, message),
                AskError::EntityFailed(m) => failure(Kind::EntityFailed, m),
                AskError::Dropped(m) => failure(Kind::Dropped, m),
                AskError::Codec(m) => failure(Kind::Codec, m),
                AskError::Unconfirmed(m) => failure(Kind::Unconfirmed, m),
                AskError::AlreadyApplied => failure(Kind::AlreadyApplied, message),
                // Only a record of its partition's own shard here gets it;
                // never sent.
                AskError::PreviousLost => failure(Kind::Dropped, message),
            }
        }
    };
    pb::Reply {
        correlation: reply.correlation,
        incarnation: reply.incarnation,
        result: Some(result),
    }
}

/// A failure's kind survives the trip; refusals and timeouts on the remote
/// node reach the asker as drops with the remote reason, since the asker's
/// own refusal and timeout variants describe its own node.
pub fn reply_from_pb(reply: pb::Reply) -> Result<WireReply, Malformed> {
    use pb::ask_failure::Kind;
    let result = match reply.result {
        Some(pb::reply::Result::Payload(p)) => Ok(p.into()),
        Some(pb::reply::Result::Failure(f)) => Err(match Kind::try_from(f.kind) {
            Ok(Kind::EntityFailed) => AskError::EntityFailed(f.message),
            Ok(Kind::Codec) => AskError::Codec(f.message),
            Ok(Kind::Unconfirmed) => AskError::Unconfirmed(f.message),
            Ok(Kind::AlreadyApplied) => AskError::AlreadyApplied,
            Ok(Kind::Refused | Kind::Timeout | Kind::Dropped | Kind::Unspecified) | Err(_) => {
                AskError::Dropped(f.message)
            }
        }),
        None => return Err(malformed("reply", "no result")),
    };
    Ok(WireReply {
        incarnation: reply.incarnation,
        correlation: reply.correlation,
        result,
    })
}

fn duration_to_pb(d: Duration) -> prost_types::Duration {
    prost_types::Duration {
        seconds: i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
        nanos: i32::try_from(d.subsec_nanos()).unwrap_or(0),
    }
}

/// The longest query timeout taken from the wire; longer ones are cut to
/// it, so that a deadline computed from one cannot overflow.
const MAX_QUERY_TIMEOUT: Duration = Duration::from_secs(3600);

/// A protobuf duration as a std one, at most [`MAX_QUERY_TIMEOUT`];
/// negative or absent is refused.
pub fn duration_from_pb(d: Option<prost_types::Duration>) -> Result<Duration, Malformed> {
    let d = d.ok_or(malformed("duration", "absent"))?;
    let seconds = u64::try_from(d.seconds).map_err(|_| malformed("duration", "negative"))?;
    let nanos = u32::try_from(d.nanos).map_err(|_| malformed("duration", "negative"))?;
    if nanos >= 1_000_000_000 {
        return Err(malformed("duration", "nanos out of range"));
    }
    Ok(Duration::new(seconds, nanos).min(MAX_QUERY_TIMEOUT))
}

fn stats_to_pb(stats: RegionStats) -> pb::RegionStats {
    pb::RegionStats {
        entities: stats
            .stats
            .into_iter()
            .map(|(s, n)| (s.0, n as u64))
            .collect(),
        failed: stats.failed.into_iter().map(|s| s.0).collect(),
        handing_off: stats.handing_off.into_iter().map(|s| s.0).collect(),
        restoring: stats.restoring.into_iter().map(|s| s.0).collect(),
        assigned: stats.assigned.into_iter().map(|s| s.0).collect(),
        standbys: stats.standbys.into_iter().map(|s| s.0).collect(),
    }
}

fn stats_from_pb(stats: pb::RegionStats) -> RegionStats {
    RegionStats {
        stats: stats
            .entities
            .into_iter()
            .map(|(s, n)| (ShardId(s), usize::try_from(n).unwrap_or(usize::MAX)))
            .collect(),
        failed: shards(stats.failed),
        handing_off: shards(stats.handing_off),
        restoring: shards(stats.restoring),
        assigned: shards(stats.assigned),
        standbys: shards(stats.standbys),
    }
}

fn shards(ids: Vec<u32>) -> Vec<ShardId> {
    ids.into_iter().map(ShardId).collect()
}

pub fn region_message_to_pb(entity_type: &str, message: RegionToCoordinator) -> pb::RegionMessage {
    let message = match message {
        RegionToCoordinator::Register {
            region,
            proxy,
            hosted,
            number_of_shards,
            extractor,
            ping,
        } => ToCoordinator::Register(pb::Register {
            region: region.to_string(),
            proxy,
            hosted: hosted.into_iter().map(|s| s.0).collect(),
            number_of_shards,
            extractor,
            ping,
        }),
        RegionToCoordinator::Heartbeat { ping } => ToCoordinator::Heartbeat(pb::Heartbeat { ping }),
        RegionToCoordinator::GetShardHome { shard } => {
            ToCoordinator::GetShardHome(pb::GetShardHome { shard: shard.0 })
        }
        RegionToCoordinator::ShardStarted { shard } => {
            ToCoordinator::ShardStarted(pb::ShardStarted { shard: shard.0 })
        }
        RegionToCoordinator::BeginHandOffAck { shard } => {
            ToCoordinator::BeginHandOffAck(pb::BeginHandOffAck { shard: shard.0 })
        }
        RegionToCoordinator::ShardStopped { shard } => {
            ToCoordinator::ShardStopped(pb::ShardStopped { shard: shard.0 })
        }
        RegionToCoordinator::GracefulShutdown => {
            ToCoordinator::GracefulShutdown(pb::GracefulShutdown {})
        }
        RegionToCoordinator::GetClusterStats { request, timeout } => {
            ToCoordinator::GetClusterStats(pb::GetClusterStats {
                request,
                timeout: Some(duration_to_pb(timeout)),
            })
        }
        RegionToCoordinator::RegionStats { request, stats } => {
            ToCoordinator::RegionStats(pb::RegionStatsReply {
                request,
                stats: Some(stats_to_pb(stats)),
            })
        }
        RegionToCoordinator::UpdateLocations {
            request,
            locations,
            source,
        } => ToCoordinator::UpdateLocations(pb::UpdateLocations {
            request,
            source,
            locations: locations
                .into_iter()
                .map(|(shard, region)| pb::ShardLocation {
                    shard: shard.0,
                    region: region.to_string(),
                })
                .collect(),
        }),
        RegionToCoordinator::ReleaseShards {
            request,
            shards,
            source,
        } => ToCoordinator::ReleaseShards(pb::ReleaseShards {
            request,
            shards: shards.into_iter().map(|s| s.0).collect(),
            source,
        }),
    };
    pb::RegionMessage {
        entity_type: entity_type.to_string(),
        message: Some(message),
    }
}

pub fn region_message_from_pb(
    message: pb::RegionMessage,
) -> Result<RegionToCoordinator, Malformed> {
    let what = "region message";
    let message = message.message.ok_or(malformed(what, "empty"))?;
    Ok(match message {
        ToCoordinator::Register(r) => {
            if r.region.is_empty() {
                return Err(malformed(what, "register without a region"));
            }
            RegionToCoordinator::Register {
                region: RegionId::new(r.region),
                proxy: r.proxy,
                hosted: shards(r.hosted),
                number_of_shards: r.number_of_shards,
                extractor: r.extractor,
                ping: r.ping,
            }
        }
        ToCoordinator::Heartbeat(h) => RegionToCoordinator::Heartbeat { ping: h.ping },
        ToCoordinator::GetShardHome(m) => RegionToCoordinator::GetShardHome {
            shard: ShardId(m.shard),
        },
        ToCoordinator::ShardStarted(m) => RegionToCoordinator::ShardStarted {
            shard: ShardId(m.shard),
        },
        ToCoordinator::BeginHandOffAck(m) => RegionToCoordinator::BeginHandOffAck {
            shard: ShardId(m.shard),
        },
        ToCoordinator::ShardStopped(m) => RegionToCoordinator::ShardStopped {
            shard: ShardId(m.shard),
        },
        ToCoordinator::GracefulShutdown(_) => RegionToCoordinator::GracefulShutdown,
        ToCoordinator::GetClusterStats(m) => RegionToCoordinator::GetClusterStats {
            request: m.request,
            timeout: duration_from_pb(m.timeout)?,
        },
        ToCoordinator::RegionStats(m) => RegionToCoordinator::RegionStats {
            request: m.request,
            stats: stats_from_pb(m.stats.unwrap_or_default()),
        },
        ToCoordinator::UpdateLocations(u) => {
            let mut locations = Vec::with_capacity(u.locations.len());
            for l in u.locations {
                if l.region.is_empty() {
                    return Err(malformed(what, "a location without a region"));
                }
                locations.push((ShardId(l.shard), RegionId::new(l.region)));
            }
            RegionToCoordinator::UpdateLocations {
                request: u.request,
                locations,
                source: u.source,
            }
        }
        ToCoordinator::ReleaseShards(m) => RegionToCoordinator::ReleaseShards {
            request: m.request,
            shards: shards(m.shards),
            source: m.source,
        },
    })
}

pub fn coordinator_message_to_pb(
    epoch: u64,
    message: CoordinatorToRegion,
) -> pb::CoordinatorMessage {
    let message = match message {
        CoordinatorToRegion::RegisterAck { ping } => {
            ToRegion::RegisterAck(pb::RegisterAck { ping })
        }
        CoordinatorToRegion::RegisterRefused { reason } => {
            ToRegion::RegisterRefused(pb::RegisterRefused { reason })
        }
        CoordinatorToRegion::HeartbeatAck { ping } => {
            ToRegion::HeartbeatAck(pb::HeartbeatAck { ping })
        }
        CoordinatorToRegion::ShardHome { shard, region } => ToRegion::ShardHome(pb::ShardHome {
            location: Some(pb::ShardLocation {
                shard: shard.0,
                region: region.to_string(),
            }),
        }),
        CoordinatorToRegion::HostShard { shard } => {
            ToRegion::HostShard(pb::HostShard { shard: shard.0 })
        }
        CoordinatorToRegion::BeginHandOff { shard } => {
            ToRegion::BeginHandOff(pb::BeginHandOff { shard: shard.0 })
        }
        CoordinatorToRegion::HandOff { shard } => ToRegion::HandOff(pb::HandOff { shard: shard.0 }),
        CoordinatorToRegion::RegionTerminated { region } => {
            ToRegion::RegionTerminated(pb::RegionTerminated {
                region: region.to_string(),
            })
        }
        CoordinatorToRegion::Members { regions, proxies } => ToRegion::Members(pb::Members {
            regions: regions.iter().map(ToString::to_string).collect(),
            proxies: proxies.iter().map(ToString::to_string).collect(),
        }),
        CoordinatorToRegion::GetRegionStats { request, timeout } => {
            ToRegion::GetRegionStats(pb::GetRegionStats {
                request,
                timeout: Some(duration_to_pb(timeout)),
            })
        }
        CoordinatorToRegion::ClusterStats { request, stats } => {
            ToRegion::ClusterStats(pb::ClusterStats {
                request,
                regions: stats
                    .regions
                    .into_iter()
                    .map(|(r, s)| (r.to_string(), stats_to_pb(s)))
                    .collect(),
                failed_regions: stats.failed_regions.iter().map(|r| r.to_string()).collect(),
            })
        }
        CoordinatorToRegion::PlacementDone {
            request,
            failed,
            refused,
            elsewhere,
        } => ToRegion::PlacementDone(pb::PlacementDone {
            request,
            failed: failed.into_iter().map(|s| s.0).collect(),
            refused,
            elsewhere: elsewhere.into_iter().map(|s| s.0).collect(),
        }),
    };
    pb::CoordinatorMessage {
        epoch,
        message: Some(message),
    }
}

pub fn coordinator_message_from_pb(message: ToRegion) -> Result<CoordinatorToRegion, Malformed> {
    let what = "coordinator message";
    Ok(match message {
        ToRegion::RegisterAck(m) => CoordinatorToRegion::RegisterAck { ping: m.ping },
        ToRegion::RegisterRefused(m) => CoordinatorToRegion::RegisterRefused { reason: m.reason },
        ToRegion::HeartbeatAck(m) => CoordinatorToRegion::HeartbeatAck { ping: m.ping },
        ToRegion::ShardHome(m) => {
            let l = m
                .location
                .ok_or(malformed(what, "shard home without a location"))?;
            if l.region.is_empty() {
                return Err(malformed(what, "shard home without a region"));
            }
            CoordinatorToRegion::ShardHome {
                shard: ShardId(l.shard),
                region: RegionId::new(l.region),
            }
        }
        ToRegion::HostShard(m) => CoordinatorToRegion::HostShard {
            shard: ShardId(m.shard),
        },
        ToRegion::BeginHandOff(m) => CoordinatorToRegion::BeginHandOff {
            shard: ShardId(m.shard),
        },
        ToRegion::HandOff(m) => CoordinatorToRegion::HandOff {
            shard: ShardId(m.shard),
        },
        ToRegion::RegionTerminated(m) => CoordinatorToRegion::RegionTerminated {
            region: RegionId::new(m.region),
        },
        ToRegion::Members(m) => CoordinatorToRegion::Members {
            regions: m.regions.into_iter().map(RegionId::new).collect(),
            proxies: m.proxies.into_iter().map(RegionId::new).collect(),
        },
        ToRegion::GetRegionStats(m) => CoordinatorToRegion::GetRegionStats {
            request: m.request,
            timeout: duration_from_pb(m.timeout)?,
        },
        ToRegion::ClusterStats(m) => CoordinatorToRegion::ClusterStats {
            request: m.request,
            stats: ClusterShardingStats {
                regions: m
                    .regions
                    .into_iter()
                    .map(|(r, s)| (RegionId::new(r), stats_from_pb(s)))
                    .collect(),
                failed_regions: m.failed_regions.into_iter().map(RegionId::new).collect(),
            },
        },
        ToRegion::PlacementDone(m) => CoordinatorToRegion::PlacementDone {
            request: m.request,
            failed: shards(m.failed),
            refused: m.refused,
            elsewhere: shards(m.elsewhere),
        },
    })
}

#[cfg(test)]
mod tests {
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
}
