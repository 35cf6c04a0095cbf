use super::*;
use rdkafka::mocking::MockCluster;

const TIMEOUT: Duration = Duration::from_secs(10);

fn read_all(log: &Changelog, partition: i32, from: Option<i64>, until: i64) -> Vec<(i64, String)> {
    let mut seen = Vec::new();
    log.read(partition, from, until, &mut |r| {
        seen.push((r.offset, String::from_utf8_lossy(r.key).into_owned()));
        ControlFlow::Continue(())
    })
    .expect("read");
    seen
}

/// A shard's writes land in its partition, in order, and read back from
/// any offset up to any other.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_land_in_their_partition_in_order_and_read_back_between_offsets() {
    let broker = MockCluster::new(1).expect("mock cluster");
    broker.create_topic("t.e.changelog", 4, 1).expect("topic");
    let log = Changelog::new(&broker.bootstrap_servers(), &[], "t.e.changelog", TIMEOUT)
        .expect("changelog");
    let batch: Vec<(Vec<u8>, Vec<u8>)> = (0..5)
        .map(|i| (format!("e{i}").into_bytes(), vec![i]))
        .collect();
    let offsets = log.write(2, &batch).await.expect("written");
    assert_eq!(offsets, vec![0, 1, 2, 3, 4]);
    let more = log.write(2, &batch[..1]).await.expect("written");
    assert_eq!(more, vec![5]);
    let log = std::sync::Arc::new(log);
    let reader = log.clone();
    let (all, tail, none) = tokio::task::spawn_blocking(move || {
        (
            read_all(&reader, 2, None, 6),
            read_all(&reader, 2, Some(3), 5),
            read_all(&reader, 1, None, i64::MAX),
        )
    })
    .await
    .expect("reader");
    let keys: Vec<&str> = all.iter().map(|(_, k)| k.as_str()).collect();
    assert_eq!(keys, ["e0", "e1", "e2", "e3", "e4", "e0"]);
    assert_eq!(tail, vec![(3, "e3".to_string()), (4, "e4".to_string())]);
    assert!(none.is_empty(), "another partition holds nothing: {none:?}");
    let checker = log.clone();
    let (right, wrong) = tokio::task::spawn_blocking(move || (checker.check(4), checker.check(8)))
        .await
        .expect("checker");
    right.expect("4 partitions for 4 shards");
    let wrong = wrong.expect_err("4 partitions for 8 shards");
    assert!(wrong.to_string().contains("t.e.changelog"), "{wrong}");
}

/// A one-partition changelog `topic` on `broker` with five records,
/// and a read up to offset 8 under way that has read those five (the
/// rest is written only then, after the broker reported the end at 5).
async fn five_read_of_eight(
    broker: &MockCluster<'static, rdkafka::producer::DefaultProducerContext>,
    topic: &str,
) -> (
    std::sync::Arc<Changelog>,
    Vec<(Vec<u8>, Vec<u8>)>,
    tokio::task::JoinHandle<Result<Vec<String>, ChangelogError>>,
) {
    broker.create_topic(topic, 1, 1).expect("topic");
    let log = std::sync::Arc::new(
        Changelog::new(&broker.bootstrap_servers(), &[], topic, TIMEOUT).expect("changelog"),
    );
    let batch: Vec<(Vec<u8>, Vec<u8>)> = (0..5)
        .map(|i| (format!("e{i}").into_bytes(), vec![i]))
        .collect();
    log.write(0, &batch).await.expect("written");
    let (seen_all, wait_for_it) = std::sync::mpsc::channel();
    let reader = log.clone();
    let read = tokio::task::spawn_blocking(move || {
        let mut keys = Vec::new();
        reader
            .read(0, None, 8, &mut |r| {
                keys.push(String::from_utf8_lossy(r.key).into_owned());
                if r.offset == 4 {
                    let _ = seen_all.send(());
                }
                ControlFlow::Continue(())
            })
            .map(|_| keys)
    });
    tokio::task::spawn_blocking(move || wait_for_it.recv_timeout(TIMEOUT))
        .await
        .expect("waiter")
        .expect("the first five read");
    (log, batch, read)
}

/// A broker that reports the partition's end before the offset asked
/// for (its view lagging) does not end the read there: the records up
/// to that offset are read once they come. Before, the read stopped at
/// the reported end, and a restore took its copy for complete.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_goes_on_past_an_end_reported_before_the_offset_asked_for() {
    let broker = MockCluster::new(1).expect("mock cluster");
    let (log, batch, read) = five_read_of_eight(&broker, "t.late.changelog").await;
    log.write(0, &batch[..3]).await.expect("written");
    let keys = read.await.expect("reader").expect("read up to offset 8");
    assert_eq!(keys, ["e0", "e1", "e2", "e3", "e4", "e0", "e1", "e2"]);
}

/// The broker away for a while during a read: the read goes on once it
/// is back. Before, it failed at once (found by a benchmark whose
/// broker, busy cleaning, dropped its reader's connection).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_goes_on_through_its_broker_away_for_a_while() {
    let broker = MockCluster::new(1).expect("mock cluster");
    let (log, batch, read) = five_read_of_eight(&broker, "t.away.changelog").await;
    broker.broker_down(1).expect("down");
    // How long the broker is away: the fault, not a wait for a state.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    broker.broker_up(1).expect("up");
    log.write(0, &batch[..3]).await.expect("written");
    let keys = read.await.expect("reader").expect("read up to offset 8");
    assert_eq!(keys, ["e0", "e1", "e2", "e3", "e4", "e0", "e1", "e2"]);
}

/// An end that never reaches the offset asked for is an error once no
/// record came for the timeout, not a short read taken as whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_whose_partition_ends_short_of_the_offset_asked_for_fails() {
    let broker = MockCluster::new(1).expect("mock cluster");
    broker
        .create_topic("t.short.changelog", 1, 1)
        .expect("topic");
    // A read stalls after 1 s without a record; the write before it has
    // the usual time (a loaded machine once took longer than 1 s for it).
    let log = std::sync::Arc::new(
        Changelog::writing_within(
            &broker.bootstrap_servers(),
            &[],
            "t.short.changelog",
            Duration::from_secs(1),
            TIMEOUT,
        )
        .expect("changelog"),
    );
    let batch: Vec<(Vec<u8>, Vec<u8>)> = (0..5)
        .map(|i| (format!("e{i}").into_bytes(), vec![i]))
        .collect();
    log.write(0, &batch).await.expect("written");
    let reader = log.clone();
    let read = tokio::task::spawn_blocking(move || {
        reader.read(0, None, 8, &mut |_| ControlFlow::Continue(()))
    })
    .await
    .expect("reader");
    match read {
        Err(ChangelogError::Stalled { until: 8, .. }) => {}
        other => panic!("expected the read to stall short of offset 8, got {other:?}"),
    }
}

/// A write that finds librdkafka's queue full while its broker is away
/// gives up within its bound, as a write whose records all got in does:
/// the records it could not queue in time are not queued later, when
/// another node may own what they hold. Before, it waited for room as
/// long as that took: here each record the whole bound behind the one
/// before it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_that_finds_the_queue_full_gives_up_within_its_bound() {
    let broker = MockCluster::new(1).expect("mock cluster");
    broker
        .create_topic("t.full.changelog", 1, 1)
        .expect("topic");
    let bound = Duration::from_secs(1);
    // Room for one record: the second finds the queue full.
    let client = [("queue.buffering.max.messages".to_string(), "1".to_string())];
    let log = Changelog::writing_within(
        &broker.bootstrap_servers(),
        &client,
        "t.full.changelog",
        TIMEOUT,
        bound,
    )
    .expect("changelog");
    broker.broker_down(1).expect("down");
    let batch: Vec<(Vec<u8>, Vec<u8>)> = (0..4)
        .map(|i| (format!("e{i}").into_bytes(), vec![i]))
        .collect();
    let started = std::time::Instant::now();
    let written = log.write(0, &batch).await;
    let took = started.elapsed();
    assert!(written.is_err(), "the broker is away: {written:?}");
    assert!(
        took < bound * 2,
        "gave up after {took:?}; its bound is {bound:?}"
    );
}

/// A tombstone has no value: what it means beyond its key being gone
/// (the runtime's say whether an entity was deleted) reads back as its
/// tag.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_records_tag_reads_back_with_it() {
    let broker = MockCluster::new(1).expect("mock cluster");
    broker.create_topic("t.tag.changelog", 1, 1).expect("topic");
    let log = Changelog::new(&broker.bootstrap_servers(), &[], "t.tag.changelog", TIMEOUT)
        .expect("changelog");
    let writes = [
        ChangelogWrite::value(b"a", b"1"),
        ChangelogWrite {
            tag: Some(b"deleted"),
            ..ChangelogWrite::tombstone(b"a")
        },
        ChangelogWrite::tombstone(b"b"),
    ];
    log.write_or_delete(0, &writes).await.expect("written");
    let log = std::sync::Arc::new(log);
    let read = tokio::task::spawn_blocking(move || {
        let mut read = Vec::new();
        log.read(0, None, 3, &mut |r| {
            read.push((r.value.is_some(), r.tag.map(<[u8]>::to_vec)));
            ControlFlow::Continue(())
        })
        .expect("read");
        read
    })
    .await
    .expect("reader");
    assert_eq!(
        read,
        [
            (true, None),
            (false, Some(b"deleted".to_vec())),
            (false, None)
        ]
    );
}
