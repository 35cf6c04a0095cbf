//! The coordinator's store on the cluster's coordinator topic, against the
//! test broker (Apache Kafka): a coordinator started again, on any node, reads its
//! predecessor's state; a deposed coordinator's later writes count for no
//! one, and its snapshots take nothing from its successor; snapshots and
//! the broker's compaction leave the same state; entity
//! types sharing the topic do not see each other's records.

use colo::allocation::{RegionId, ShardId};
use colo::coordinator::ledger::{CoordinatorEvent, CoordinatorState};
use colo::coordinator::store::CoordinatorStore;
use colo::kafka::KafkaCoordinatorStore;
use colo_connectors::Changelog;
use colo_tests::broker::Broker;
use std::ops::ControlFlow;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

const TIMEOUT: Duration = Duration::from_secs(10);

/// A coordinator topic no other test uses, created as colo creates it.
async fn topic(broker: &Broker) -> Arc<Changelog> {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let name = format!(
        "coordinator-store-{}-{}.coordinator",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    );
    colo_tests::kafka::create_compacted(broker.bootstrap(), &name, 1).await;
    Arc::new(Changelog::unbatched(broker.bootstrap(), &[], &name, TIMEOUT).expect("log"))
}

fn registered(region: &str) -> CoordinatorEvent {
    CoordinatorEvent::RegionRegistered {
        region: RegionId::new(region),
    }
}

fn allocated(shard: u32, region: &str) -> CoordinatorEvent {
    CoordinatorEvent::ShardHomeAllocated {
        shard: ShardId(shard),
        region: RegionId::new(region),
    }
}

fn state(events: Vec<CoordinatorEvent>) -> CoordinatorState {
    CoordinatorState::replay(events).expect("the events replay")
}

/// Some regions, homes for `shards` shards, a region gone and its shards
/// placed again: what a coordinator writes over a while.
fn history(shards: u32) -> Vec<CoordinatorEvent> {
    let mut events = vec![registered("a"), registered("b"), registered("c")];
    for shard in 0..shards {
        let region = ["a", "b", "c"][shard as usize % 3];
        events.push(allocated(shard, region));
    }
    events.push(CoordinatorEvent::RegionTerminated {
        region: RegionId::new("c"),
    });
    for shard in (2..shards).step_by(3) {
        events.push(allocated(shard, "a"));
    }
    events.push(CoordinatorEvent::ShardHomeDeallocated { shard: ShardId(0) });
    events
}

async fn write_all(store: &KafkaCoordinatorStore, events: &[CoordinatorEvent]) {
    for event in events {
        store.persist(event.clone()).await.expect("persisted");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_coordinator_started_again_reads_its_predecessors_state_and_outranks_it() {
    let broker = Broker::start();
    let log = topic(&broker).await;
    let first = KafkaCoordinatorStore::new(log.clone(), "user", 100);
    assert!(first.load().await.expect("loaded").is_empty());
    assert_eq!(first.epoch().await, 100);
    let events = history(30);
    write_all(&first, &events).await;

    // Started again with an epoch from a clock that went back.
    let second = KafkaCoordinatorStore::new(log.clone(), "user", 7);
    let read = second.load().await.expect("loaded");
    assert_eq!(state(read), state(events.clone()));
    assert_eq!(second.epoch().await, 101);

    // And once more, after the second wrote on.
    write_all(&second, &[allocated(0, "b")]).await;
    let third = KafkaCoordinatorStore::new(log, "user", 200);
    let mut expected = events;
    expected.push(allocated(0, "b"));
    assert_eq!(state(third.load().await.expect("loaded")), state(expected));
    assert_eq!(third.epoch().await, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deposed_coordinators_later_writes_count_for_no_one() {
    let broker = Broker::start();
    let log = topic(&broker).await;
    let deposed = KafkaCoordinatorStore::new(log.clone(), "user", 1);
    deposed.load().await.expect("loaded");
    write_all(&deposed, &[registered("a"), allocated(1, "a")]).await;

    let next = KafkaCoordinatorStore::new(log.clone(), "user", 2);
    let read = next.load().await.expect("loaded");
    assert_eq!(read, [registered("a"), allocated(1, "a")]);
    // The deposed one has not noticed yet and writes on; so does the new.
    write_all(&deposed, &[allocated(2, "a"), registered("z")]).await;
    write_all(&next, &[registered("b"), allocated(3, "b")]).await;

    let reader = KafkaCoordinatorStore::new(log, "user", 3);
    let read = reader.load().await.expect("loaded");
    assert_eq!(
        read,
        [
            registered("a"),
            allocated(1, "a"),
            registered("b"),
            allocated(3, "b")
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn entity_types_sharing_the_topic_read_only_their_own_records() {
    let broker = Broker::start();
    let log = topic(&broker).await;
    let users = KafkaCoordinatorStore::new(log.clone(), "user", 5);
    let counters = KafkaCoordinatorStore::new(log.clone(), "counter", 5);
    users.load().await.expect("loaded");
    counters.load().await.expect("loaded");
    write_all(&users, &[registered("u"), allocated(1, "u")]).await;
    write_all(&counters, &[registered("c")]).await;
    let users = KafkaCoordinatorStore::new(log.clone(), "user", 6);
    assert_eq!(
        users.load().await.expect("loaded"),
        [registered("u"), allocated(1, "u")]
    );
    let counters = KafkaCoordinatorStore::new(log, "counter", 6);
    assert_eq!(counters.load().await.expect("loaded"), [registered("c")]);
}

/// What the partition holds now: its records (tombstones too), the
/// offset after the last (what was written: compaction keeps offsets), and
/// the offset of its first tombstone, if any.
#[derive(Debug, Clone, Copy)]
struct Held {
    all: u64,
    end: i64,
    first_tombstone: Option<i64>,
}

async fn read_log(log: &Arc<Changelog>) -> Held {
    let log = log.clone();
    tokio::task::spawn_blocking(move || {
        let (mut end, mut first_tombstone) = (0, None);
        // Up to an offset no test reaches: the read ends at the partition's
        // end.
        let all = log
            .read(0, None, i64::MAX, &mut |record| {
                if record.value.is_none() {
                    first_tombstone.get_or_insert(record.offset);
                }
                end = record.offset + 1;
                ControlFlow::Continue(())
            })
            .expect("read");
        Held {
            all,
            end,
            first_tombstone,
        }
    })
    .await
    .expect("reader")
}

/// Kafka's log cleaner compacts the coordinator topic (every segment but
/// the active one; the broker rolls a segment at the first write a second
/// after the segment began) and removes its tombstones once their
/// `delete.retention.ms` passed: a coordinator started after it reads the
/// same state.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_snapshots_and_compaction_a_new_coordinator_reads_the_same_state() {
    let broker = Broker::start_compacting("1s");
    let log = topic(&broker).await;
    // 111 events.
    let events = history(80);
    let store = KafkaCoordinatorStore::new(log.clone(), "user", 1).compacting_every(10);
    store.load().await.expect("loaded");
    let (first, rest) = events.split_at(80);
    let (second, third) = rest.split_at(15);
    write_all(&store, first).await;
    let first_end = read_log(&log).await.end;
    // A segment must be older than a second when the next write comes, or
    // it stays the active one, which the cleaner never touches: a time the
    // broker counts, not a state to await.
    let roll = Duration::from_millis(1100);
    tokio::time::sleep(roll).await;
    write_all(&store, second).await;
    // Every 10 events a snapshot, then tombstones for what it covers:
    // compaction drops the events a snapshot covers.
    let compacted = colo_tests::wait::held_within(Duration::from_secs(60), || async {
        let held = read_log(&log).await;
        held.all < u64::try_from(held.end).unwrap_or(0) / 2
    })
    .await;
    assert!(
        compacted,
        "not compacted: {:?}\n{}",
        read_log(&log).await,
        broker.log()
    );
    // The tombstones of the first events stay for delete.retention.ms
    // after that pass; the next pass, once more is written in another
    // segment, drops them.
    tokio::time::sleep(roll).await;
    write_all(&store, third).await;
    let dropped = colo_tests::wait::held_within(Duration::from_secs(60), || async {
        let held = read_log(&log).await;
        held.first_tombstone
            .is_none_or(|offset| offset >= first_end)
    })
    .await;
    assert!(
        dropped,
        "tombstones before offset {first_end} kept: {:?}\n{}",
        read_log(&log).await,
        broker.log()
    );
    let reader = KafkaCoordinatorStore::new(log, "user", 2);
    assert_eq!(state(reader.load().await.expect("loaded")), state(events));
}

/// Whether the partition still holds the record at `offset`.
async fn holds(log: &Arc<Changelog>, offset: i64) -> bool {
    let log = log.clone();
    tokio::task::spawn_blocking(move || {
        let mut held = false;
        log.read(0, Some(offset), offset + 1, &mut |record| {
            held |= record.offset == offset;
            ControlFlow::Continue(())
        })
        .expect("read");
        held
    })
    .await
    .expect("reader")
}

/// A coordinator deposed while it runs may still reach its next snapshot
/// and its tombstones. After Kafka's cleaner ran, a coordinator started
/// later reads its successor's state whole, and the deposed one is told
/// it is deposed rather than writing on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deposed_coordinators_snapshot_takes_nothing_from_its_successors_state() {
    let broker = Broker::start_compacting("1s");
    let log = topic(&broker).await;
    let deposed = KafkaCoordinatorStore::new(log.clone(), "user", 1).compacting_every(3);
    deposed.load().await.expect("loaded");
    write_all(&deposed, &[registered("a"), allocated(1, "a")]).await;
    // Its first event: after the epoch record, before the second event.
    let first_event = read_log(&log).await.end - 2;

    let next = KafkaCoordinatorStore::new(log.clone(), "user", 2);
    assert_eq!(
        next.load().await.expect("loaded"),
        [registered("a"), allocated(1, "a")]
    );
    write_all(&next, &[registered("b")]).await;
    // The deposed one's third event reaches its snapshot.
    let refused = deposed.persist(allocated(2, "a")).await;
    let error = refused.expect_err("a deposed coordinator's snapshot is refused");
    assert!(error.0.contains("deposed"), "{error}");
    assert!(
        deposed.persist(allocated(4, "a")).await.is_err(),
        "a deposed coordinator writes nothing more"
    );
    // A segment rolls at the first write a second after it began (a time
    // the broker counts, not a state to await); the cleaner then drops the
    // first events, whose keys have tombstones.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    write_all(&next, &[allocated(3, "b")]).await;
    let cleaned = colo_tests::wait::held_within(Duration::from_secs(60), || async {
        !holds(&log, first_event).await
    })
    .await;
    assert!(
        cleaned,
        "the cleaner kept offset {first_event}: {:?}\n{}",
        read_log(&log).await,
        broker.log()
    );
    let reader = KafkaCoordinatorStore::new(log, "user", 3);
    assert_eq!(
        state(reader.load().await.expect("loaded")),
        state(vec![
            registered("a"),
            allocated(1, "a"),
            registered("b"),
            allocated(3, "b")
        ])
    );
}
