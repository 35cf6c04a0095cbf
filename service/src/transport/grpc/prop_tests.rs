//! Every colo.v1 frame another process can send, fed arbitrary input: bytes
//! as prost decodes them, and field values no colo node would send (empty
//! ids, shards past any number of shards, negative or huge durations,
//! unknown enum values). A conversion answers with colo's value or a
//! reason; a panic would kill the task serving a Link or a coordinator
//! stream, and with it every message on it.
//!
//! The strategies here are shared with the Link's own properties in
//! `node_service/prop_tests.rs` and `peer/prop_tests.rs`.

use super::convert::{
    coordinator_message_from_pb, coordinator_message_to_pb, duration_from_pb, envelope_from_pb,
    envelope_to_pb, region_message_from_pb, region_message_to_pb, reply_from_pb, reply_to_pb,
};
use crate::protocol::RegionToCoordinator;
use colo_allocation::ShardId;
use colo_proto::v1 as pb;
use proptest::prelude::*;
use proptest::sample::Index;
use proptest::test_runner::Config;
use prost::Message;
use std::time::Duration;

/// At most 256 cases a property, and no regression files written into the
/// source tree: a failing input found here is kept as a named test instead.
pub(super) fn config() -> Config {
    Config {
        cases: 256,
        failure_persistence: None,
        ..Config::default()
    }
}

/// Text a peer might send: empty, a plausible name, or anything.
pub(super) fn text() -> impl Strategy<Value = String> {
    prop_oneof![Just(String::new()), "[a-z0-9.:]{1,16}", any::<String>()]
}

/// A shard id: in range of a small cluster, or far past any.
pub(super) fn shard() -> impl Strategy<Value = u32> {
    prop_oneof![0u32..8, Just(u32::MAX), any::<u32>()]
}

/// A count, sequence number or ping: the extremes, or anything.
pub(super) fn number() -> impl Strategy<Value = u64> {
    prop_oneof![Just(0u64), Just(1u64), Just(u64::MAX), any::<u64>()]
}

/// A protobuf duration: absent, negative, past the cap, nanos out of range.
fn duration() -> impl Strategy<Value = Option<prost_types::Duration>> {
    let seconds = prop_oneof![
        Just(i64::MIN),
        Just(-1i64),
        0i64..=3601,
        Just(i64::MAX),
        any::<i64>()
    ];
    let nanos = prop_oneof![
        Just(i32::MIN),
        Just(-1i32),
        Just(0i32),
        Just(999_999_999i32),
        Just(1_000_000_000i32),
        Just(i32::MAX),
        any::<i32>()
    ];
    proptest::option::of(
        (seconds, nanos).prop_map(|(seconds, nanos)| prost_types::Duration { seconds, nanos }),
    )
}

fn shards() -> impl Strategy<Value = Vec<u32>> {
    prop::collection::vec(shard(), 0..6)
}

fn region_stats() -> impl Strategy<Value = pb::RegionStats> {
    (
        prop::collection::hash_map(shard(), number(), 0..4),
        shards(),
        shards(),
        shards(),
        shards(),
        shards(),
    )
        .prop_map(
            |(entities, failed, handing_off, restoring, assigned, standbys)| pb::RegionStats {
                entities,
                failed,
                handing_off,
                restoring,
                assigned,
                standbys,
            },
        )
}

fn location() -> impl Strategy<Value = pb::ShardLocation> {
    (shard(), text()).prop_map(|(shard, region)| pb::ShardLocation { shard, region })
}

pub(super) fn envelope() -> impl Strategy<Value = pb::Envelope> {
    let reply_to =
        (text(), number(), number()).prop_map(|(node, correlation, incarnation)| pb::ReplyTo {
            node,
            correlation,
            incarnation,
        });
    (
        text(),
        text(),
        shard(),
        prop::collection::vec(any::<u8>(), 0..16),
        proptest::option::of(reply_to),
        any::<bool>(),
        proptest::option::of((text(), number())),
        proptest::option::of(text()),
    )
        .prop_map(
            |(entity_type, entity_id, shard, payload, reply_to, delayed, origin, key)| {
                pb::Envelope {
                    entity_type,
                    entity_id,
                    shard,
                    payload,
                    reply_to,
                    delayed,
                    origin: origin.map(|(source, offset)| pb::Origin { source, offset }),
                    idempotency_key: key,
                }
            },
        )
}

pub(super) fn reply() -> impl Strategy<Value = pb::Reply> {
    use pb::reply::Result as R;
    let kind = prop_oneof![0i32..=7, any::<i32>()];
    let result = prop_oneof![
        prop::collection::vec(any::<u8>(), 0..16).prop_map(R::Payload),
        (kind, text()).prop_map(|(kind, message)| R::Failure(pb::AskFailure { kind, message })),
    ];
    (number(), number(), proptest::option::of(result)).prop_map(
        |(correlation, incarnation, result)| pb::Reply {
            correlation,
            incarnation,
            result,
        },
    )
}

fn link_frame() -> impl Strategy<Value = pb::LinkFrame> {
    use pb::link_frame::Frame;
    let frame = prop_oneof![
        (text(), number())
            .prop_map(|(node, incarnation)| Frame::Hello(pb::Hello { node, incarnation })),
        (number(), prop::collection::vec(envelope(), 0..4)).prop_map(
            |(first_sequence, envelopes)| Frame::Batch(pb::Batch {
                first_sequence,
                envelopes
            })
        ),
        reply().prop_map(Frame::Reply),
    ];
    proptest::option::of(frame).prop_map(|frame| pb::LinkFrame { frame })
}

fn region_message() -> impl Strategy<Value = pb::RegionMessage> {
    use pb::region_message::Message as M;
    let register = (text(), any::<bool>(), shards(), shard(), number(), number()).prop_map(
        |(region, proxy, hosted, number_of_shards, extractor, ping)| {
            M::Register(pb::Register {
                region,
                proxy,
                hosted,
                number_of_shards,
                extractor,
                ping,
            })
        },
    );
    let message = prop_oneof![
        register,
        number().prop_map(|ping| M::Heartbeat(pb::Heartbeat { ping })),
        shard().prop_map(|shard| M::GetShardHome(pb::GetShardHome { shard })),
        shard().prop_map(|shard| M::ShardStarted(pb::ShardStarted { shard })),
        shard().prop_map(|shard| M::BeginHandOffAck(pb::BeginHandOffAck { shard })),
        shard().prop_map(|shard| M::ShardStopped(pb::ShardStopped { shard })),
        Just(M::GracefulShutdown(pb::GracefulShutdown {})),
        (number(), duration()).prop_map(|(request, timeout)| M::GetClusterStats(
            pb::GetClusterStats { request, timeout }
        )),
        (number(), proptest::option::of(region_stats())).prop_map(|(request, stats)| {
            M::RegionStats(pb::RegionStatsReply { request, stats })
        }),
        (number(), prop::collection::vec(location(), 0..4), text()).prop_map(
            |(request, locations, source)| {
                M::UpdateLocations(pb::UpdateLocations {
                    locations,
                    request,
                    source,
                })
            }
        ),
        (number(), shards(), text()).prop_map(|(request, shards, source)| M::ReleaseShards(
            pb::ReleaseShards {
                request,
                shards,
                source
            }
        )),
    ];
    (text(), proptest::option::of(message)).prop_map(|(entity_type, message)| pb::RegionMessage {
        entity_type,
        message,
    })
}

fn coordinator_message() -> impl Strategy<Value = pb::CoordinatorMessage> {
    use pb::coordinator_message::Message as M;
    let cluster_stats = (
        number(),
        prop::collection::hash_map(text(), region_stats(), 0..3),
        prop::collection::vec(text(), 0..3),
    )
        .prop_map(|(request, regions, failed_regions)| {
            M::ClusterStats(pb::ClusterStats {
                request,
                regions,
                failed_regions,
            })
        });
    let message = prop_oneof![
        number().prop_map(|ping| M::RegisterAck(pb::RegisterAck { ping })),
        text().prop_map(|reason| M::RegisterRefused(pb::RegisterRefused { reason })),
        number().prop_map(|ping| M::HeartbeatAck(pb::HeartbeatAck { ping })),
        proptest::option::of(location())
            .prop_map(|location| M::ShardHome(pb::ShardHome { location })),
        shard().prop_map(|shard| M::HostShard(pb::HostShard { shard })),
        shard().prop_map(|shard| M::BeginHandOff(pb::BeginHandOff { shard })),
        shard().prop_map(|shard| M::HandOff(pb::HandOff { shard })),
        text().prop_map(|region| M::RegionTerminated(pb::RegionTerminated { region })),
        (
            prop::collection::vec(text(), 0..4),
            prop::collection::vec(text(), 0..2)
        )
            .prop_map(|(regions, proxies)| M::Members(pb::Members { regions, proxies })),
        (number(), duration()).prop_map(|(request, timeout)| M::GetRegionStats(
            pb::GetRegionStats { request, timeout }
        )),
        cluster_stats,
        (number(), shards(), proptest::option::of(text()), shards()).prop_map(
            |(request, failed, refused, elsewhere)| M::PlacementDone(pb::PlacementDone {
                request,
                failed,
                refused,
                elsewhere
            })
        ),
    ];
    (number(), proptest::option::of(message))
        .prop_map(|(epoch, message)| pb::CoordinatorMessage { epoch, message })
}

/// A valid encoding with a few bytes overwritten and perhaps cut short:
/// unlike random bytes, it mostly gets past prost's first tag.
fn garbled(mut bytes: Vec<u8>, flips: Vec<(Index, u8)>, cut: Option<Index>) -> Vec<u8> {
    if bytes.is_empty() {
        return bytes;
    }
    for (at, byte) in flips {
        let i = at.index(bytes.len());
        bytes[i] = byte;
    }
    if let Some(cut) = cut {
        bytes.truncate(cut.index(bytes.len()));
    }
    bytes
}

/// What arrives on a stream of `M`s: random bytes, a frame built from
/// arbitrary fields, or such a frame garbled.
pub(super) fn wire<M: Message + 'static, S: Strategy<Value = M> + 'static>(
    frames: impl Fn() -> S,
) -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        prop::collection::vec(any::<u8>(), 0..128),
        frames().prop_map(|m| m.encode_to_vec()),
        (
            frames(),
            prop::collection::vec((any::<Index>(), any::<u8>()), 0..4),
            any::<Option<Index>>(),
        )
            .prop_map(|(m, flips, cut)| garbled(m.encode_to_vec(), flips, cut)),
    ]
}

/// The frame in `bytes`, or `None` where prost refuses them (the stream
/// ends there, before colo sees anything).
pub(super) fn decoded<M: Message + Default>(bytes: &[u8]) -> Option<M> {
    M::decode(bytes).ok()
}

/// A refusal must say why: it is logged, or sent back as the status.
fn has_a_reason<T>(result: &Result<T, super::convert::Malformed>) -> Result<(), TestCaseError> {
    if let Err(e) = result {
        let shown = e.to_string();
        prop_assert!(shown.starts_with("malformed "), "{}", shown);
        prop_assert!(shown.len() > "malformed ".len(), "{}", shown);
    }
    Ok(())
}

/// Sent on through colo.v1 bytes, as a node forwarding it would.
fn reencoded<M: Message + Default>(m: M) -> M {
    M::decode(m.encode_to_vec().as_slice()).expect("prost decodes what it encoded")
}

/// The shards a region message names on the wire, in order.
fn named_shards(m: &pb::RegionMessage) -> Vec<u32> {
    use pb::region_message::Message as M;
    match &m.message {
        Some(M::GetShardHome(m)) => vec![m.shard],
        Some(M::ShardStarted(m)) => vec![m.shard],
        Some(M::BeginHandOffAck(m)) => vec![m.shard],
        Some(M::ShardStopped(m)) => vec![m.shard],
        Some(M::UpdateLocations(m)) => m.locations.iter().map(|l| l.shard).collect(),
        Some(M::ReleaseShards(m)) => m.shards.clone(),
        _ => Vec::new(),
    }
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn arbitrary_bytes_from_a_link_are_refused_with_a_reason_never_a_panic(
        bytes in wire(link_frame),
    ) {
        use pb::link_frame::Frame;
        let Some(frame) = decoded::<pb::LinkFrame>(&bytes) else { return Ok(()) };
        match frame.frame {
            // Checked where a Link starts: a node name, nothing to convert.
            Some(Frame::Hello(_)) | None => {}
            Some(Frame::Batch(batch)) => {
                for env in batch.envelopes {
                    let (shard, reply_to) = (env.shard, env.reply_to.clone());
                    let converted = envelope_from_pb(env);
                    has_a_reason(&converted)?;
                    if let Ok(env) = converted {
                        prop_assert!(!env.entity_type.is_empty());
                        prop_assert!(!env.entity_id.is_empty());
                        // Unchanged, so that the receiving region can check
                        // it against its own extractor.
                        prop_assert_eq!(env.shard, ShardId(shard));
                        prop_assert_eq!(
                            env.reply_to.map(|r| r.node.to_string()),
                            reply_to.map(|r| r.node)
                        );
                    }
                }
            }
            Some(Frame::Reply(reply)) => has_a_reason(&reply_from_pb(reply))?,
        }
    }

    #[test]
    fn an_envelope_colo_accepts_means_the_same_when_sent_on(env in envelope()) {
        if let Ok(accepted) = envelope_from_pb(env) {
            let again = envelope_from_pb(reencoded(envelope_to_pb(accepted.clone())));
            prop_assert_eq!(again, Ok(accepted));
        }
    }

    #[test]
    fn a_reply_colo_accepts_means_the_same_when_sent_on(reply in reply()) {
        let accepted = reply_from_pb(reply.clone());
        has_a_reason(&accepted)?;
        match accepted {
            Ok(accepted) => {
                let again = reply_from_pb(reencoded(reply_to_pb(accepted.clone())));
                prop_assert_eq!(again, Ok(accepted));
            }
            Err(_) => prop_assert!(reply.result.is_none(), "only a reply without a result is refused"),
        }
    }

    #[test]
    fn arbitrary_bytes_from_a_region_are_refused_with_a_reason_never_a_panic(
        bytes in wire(region_message),
    ) {
        let Some(frame) = decoded::<pb::RegionMessage>(&bytes) else { return Ok(()) };
        let shards = named_shards(&frame);
        let converted = region_message_from_pb(frame.clone());
        has_a_reason(&converted)?;
        let Ok(message) = converted else { return Ok(()) };
        // Shards past the cluster's reach the coordinator as they were
        // sent: it alone knows number_of_shards and ignores them.
        let ids: Vec<u32> = message.shards().into_iter().map(|s| s.0).collect();
        prop_assert_eq!(ids, shards);
        if let RegionToCoordinator::GetClusterStats { timeout, .. } = &message {
            prop_assert!(*timeout <= Duration::from_secs(3600));
        }
        let again = region_message_from_pb(reencoded(region_message_to_pb(
            &frame.entity_type,
            message.clone(),
        )));
        prop_assert_eq!(again, Ok(message));
    }

    #[test]
    fn arbitrary_bytes_from_a_coordinator_are_refused_with_a_reason_never_a_panic(
        bytes in wire(coordinator_message),
    ) {
        let Some(frame) = decoded::<pb::CoordinatorMessage>(&bytes) else { return Ok(()) };
        // A frame without a message is skipped by the link, unconverted.
        let Some(inner) = frame.message else { return Ok(()) };
        let converted = coordinator_message_from_pb(inner);
        has_a_reason(&converted)?;
        let Ok(message) = converted else { return Ok(()) };
        let again = reencoded(coordinator_message_to_pb(frame.epoch, message.clone()));
        prop_assert_eq!(again.epoch, frame.epoch);
        let again = again.message.map(coordinator_message_from_pb);
        prop_assert_eq!(again, Some(Ok(message)));
    }

    #[test]
    fn arbitrary_durations_are_capped_at_an_hour_or_refused_with_a_reason(d in duration()) {
        let converted = duration_from_pb(d);
        has_a_reason(&converted)?;
        let Some(d) = d else {
            prop_assert!(converted.is_err(), "an absent duration is refused");
            return Ok(());
        };
        let valid = d.seconds >= 0 && (0..1_000_000_000).contains(&d.nanos);
        prop_assert_eq!(converted.is_ok(), valid, "{:?}", d);
        if let Ok(converted) = converted {
            let exact = Duration::new(d.seconds.unsigned_abs(), d.nanos.unsigned_abs());
            prop_assert_eq!(converted, exact.min(Duration::from_secs(3600)));
        }
    }
}
