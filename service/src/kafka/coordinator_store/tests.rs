//! The coordinator topic's replay, epochs and record format.

use super::records::*;
use super::*;
use colo_allocation::{RegionId, ShardId};

fn event(epoch: u64, key: &str, event: CoordinatorEvent) -> Read {
    Read {
        key: key.as_bytes().to_vec(),
        value: Some(Value {
            epoch,
            body: Body::Event(event),
        }),
    }
}

fn allocated(shard: u32, region: &str) -> CoordinatorEvent {
    CoordinatorEvent::ShardHomeAllocated {
        shard: ShardId(shard),
        region: RegionId::new(region),
    }
}

#[test]
fn a_record_after_a_higher_epoch_is_ignored() {
    let records = vec![
        event(
            1,
            "a",
            CoordinatorEvent::RegionRegistered {
                region: RegionId::new("r"),
            },
        ),
        Read {
            key: b"e2".to_vec(),
            value: Some(Value {
                epoch: 2,
                body: Body::Epoch,
            }),
        },
        // The deposed coordinator of epoch 1 writes on.
        event(1, "b", allocated(0, "r")),
        event(2, "c", allocated(1, "r")),
    ];
    let replayed = replay(&records);
    assert_eq!(replayed.events.len(), 2, "{:?}", replayed.events);
    assert_eq!(replayed.events[1], allocated(1, "r"));
    assert_eq!(replayed.ignored, 1);
    assert_eq!(replayed.highest, 2);
}

#[test]
fn a_snapshot_replaces_what_came_before_and_supersedes_its_keys() {
    let registered = CoordinatorEvent::RegionRegistered {
        region: RegionId::new("r"),
    };
    let records = vec![
        event(1, "a", registered.clone()),
        event(1, "b", allocated(0, "r")),
        Read {
            key: b"s1".to_vec(),
            value: Some(Value {
                epoch: 1,
                body: Body::Snapshot(vec![registered.clone(), allocated(0, "r")]),
            }),
        },
        event(1, "c", allocated(1, "r")),
    ];
    let replayed = replay(&records);
    assert_eq!(
        replayed.events,
        [registered, allocated(0, "r"), allocated(1, "r")]
    );
    assert_eq!(replayed.superseded, [b"a".to_vec(), b"b".to_vec()]);
    assert_eq!(replayed.since_snapshot, [b"s1".to_vec(), b"c".to_vec()]);
}

#[test]
fn a_replay_reads_what_compaction_may_leave() {
    let records = vec![
        event(1, "a", allocated(0, "r")),
        event(1, "b", allocated(1, "r")),
        // A tombstone removes what its key held; a key written again
        // counts at its last place.
        Read {
            key: b"a".to_vec(),
            value: None,
        },
        event(1, "c", allocated(2, "r")),
        event(1, "b", allocated(3, "r")),
    ];
    let replayed = replay(&records);
    assert_eq!(replayed.events, [allocated(2, "r"), allocated(3, "r")]);
}

/// A coordinator that starts while this one raises its epoch above a
/// predecessor's writes an epoch higher still between this one's two
/// epoch records: this one goes above that too (it took the rival's
/// state for its own, and deleted its records, before).
#[tokio::test]
async fn an_epoch_written_while_this_one_rises_is_outranked_too() {
    let log = std::sync::Mutex::new(vec![epoch_record(5)]);
    let writes = std::sync::atomic::AtomicU32::new(0);
    let outranked = outrank(
        5,
        |epoch| {
            let mut log = log.lock().expect("log");
            if writes.fetch_add(1, std::sync::atomic::Ordering::Relaxed) == 1 {
                // The rival, between this one's two epoch records.
                log.push(epoch_record(7));
            }
            log.push(epoch_record(epoch));
            std::future::ready(Ok(i64::try_from(log.len()).expect("offset") - 1))
        },
        |from, until| {
            let log = log.lock().expect("log");
            let range =
                usize::try_from(from).expect("from")..usize::try_from(until).expect("until");
            std::future::ready(Ok(log[range]
                .iter()
                .map(|r| Read {
                    key: r.key.clone(),
                    value: r.value.clone(),
                })
                .collect()))
        },
    )
    .await
    .unwrap_or_else(|_| panic!("outranked"));
    assert_eq!(outranked.epoch, 8, "above the rival's 7");
    assert!(outranked.takeover);
}

fn epoch_record(epoch: u64) -> Read {
    Read {
        key: format!("user\0epoch\0{epoch:020}").into_bytes(),
        value: Some(Value {
            epoch,
            body: Body::Epoch,
        }),
    }
}

#[test]
fn a_value_of_another_format_is_refused_with_its_format() {
    let value = Value {
        epoch: 3,
        body: Body::Epoch,
    };
    assert_eq!(decode(&encode(&value)), Ok(value));
    let mut newer = encode(&Value {
        epoch: 3,
        body: Body::Epoch,
    });
    newer[0] = 9;
    assert!(decode(&newer).unwrap_err().contains("format 9"));
}
