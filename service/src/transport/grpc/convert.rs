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
mod tests;
