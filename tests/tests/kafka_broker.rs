//! The Kafka source against Apache Kafka (on
//! loopback): a consumer group with the cooperative-sticky assignor, offset
//! commits, and a member joining.

use colo_connectors::KafkaSource;
use colo_tests::broker::Broker;
use colo_tests::kafka::{
    assigned, committed_offsets, handed_to_joiner, handed_to_joiner_settling, next_record,
    source_settings, Held,
};
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::ClientConfig;
use std::time::Duration;

const PARTITIONS: i32 = 3;
const PER_PARTITION: i64 = 10;

async fn create_topic(bootstrap: &str, topic: &str) {
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .create()
        .expect("admin client");
    let results = admin
        .create_topics(
            &[NewTopic::new(topic, PARTITIONS, TopicReplication::Fixed(1))],
            &AdminOptions::new().operation_timeout(Some(Duration::from_secs(10))),
        )
        .await
        .expect("create topics");
    for result in results {
        result.expect("topic created");
    }
}

async fn produce(bootstrap: &str, topic: &str) {
    for partition in 0..PARTITIONS {
        for i in 0..PER_PARTITION {
            produce_to(bootstrap, topic, partition, &i.to_string()).await;
        }
    }
}

async fn produce_to(bootstrap: &str, topic: &str, partition: i32, payload: &str) {
    let producer: FutureProducer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .create()
        .expect("producer");
    producer
        .send(
            FutureRecord::to(topic)
                .key("k")
                .payload(payload)
                .partition(partition),
            Duration::from_secs(10),
        )
        .await
        .expect("produced");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn offsets_follow_handled_records_and_a_joining_member_starts_after_them() {
    let broker = Broker::start();
    let bootstrap = broker.bootstrap().to_string();
    let topic = format!("source-{}", std::process::id());
    let group = format!("{topic}.probe");
    create_topic(&bootstrap, &topic).await;
    produce(&bootstrap, &topic).await;

    let (first, mut first_events) =
        KafkaSource::start(source_settings(&bootstrap, &topic, &group)).expect("first source");
    let mut partitions = assigned(&mut first_events).await;
    assert_eq!(partitions.len(), PARTITIONS as usize);
    // Every partition handled up to record 6; record 7 of each is kept
    // unacked, and what follows it is acked.
    let mut held = Vec::new();
    for records in partitions.values_mut() {
        for expected in 0..PER_PARTITION {
            let record = next_record(records).await;
            assert_eq!(record.offset, expected, "in order");
            if expected == 7 {
                held.push(record.ack);
            } else {
                record.ack.handled();
            }
        }
    }
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let offsets = committed_offsets(&bootstrap, &topic, &group, PARTITIONS);
        if offsets.values().all(|&o| o == 7) && offsets.len() == PARTITIONS as usize {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "committed {offsets:?}; broker log:\n{}",
            broker.log()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // A second member joins: the partitions the first gives up were not
    // handled past 7, so their new owner starts at record 7.
    let (second, mut second_events) =
        KafkaSource::start(source_settings(&bootstrap, &topic, &group)).expect("second source");
    let (_revoked, mut taken) =
        handed_to_joiner(&mut first_events, &mut partitions, &mut second_events).await;
    for (tp, records) in &mut taken {
        let first_record = next_record(records).await;
        assert_eq!(
            first_record.offset, 7,
            "{tp:?} resumes at the unhandled record"
        );
        first_record.ack.handled();
    }
    drop(held);
    // Nobody answers their closing revokes now: they go on at once.
    drop((first_events, second_events));
    tokio::task::spawn_blocking(move || {
        second.shutdown();
        first.shutdown();
    })
    .await
    .unwrap();
}

/// The service settles what it received of a revoked partition when the
/// revoke comes, and the revoke's commit carries it: nothing was acked
/// before the second member joined, so no periodic commit could have.
/// The partitions' new owner starts after the settled records.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_settled_at_the_revoke_are_committed_before_the_partitions_change_owner() {
    let broker = Broker::start();
    let bootstrap = broker.bootstrap().to_string();
    let topic = format!("settled-{}", std::process::id());
    let group = format!("{topic}.probe");
    create_topic(&bootstrap, &topic).await;
    produce(&bootstrap, &topic).await;

    let (first, mut first_events) =
        KafkaSource::start(source_settings(&bootstrap, &topic, &group)).expect("first source");
    let mut partitions = assigned(&mut first_events).await;
    let mut held = Held::new();
    for (tp, records) in &mut partitions {
        for _ in 0..PER_PARTITION {
            held.entry(tp.clone())
                .or_default()
                .push(next_record(records).await.ack);
        }
    }
    let before = committed_offsets(&bootstrap, &topic, &group, PARTITIONS);
    assert!(
        before.values().all(|&o| o == 0),
        "nothing committed before the join: {before:?}"
    );

    let (second, mut second_events) =
        KafkaSource::start(source_settings(&bootstrap, &topic, &group)).expect("second source");
    let (revoked, mut taken) = handed_to_joiner_settling(
        &mut first_events,
        &mut partitions,
        &mut held,
        &mut second_events,
    )
    .await;
    let offsets = committed_offsets(&bootstrap, &topic, &group, PARTITIONS);
    for tp in &revoked {
        assert_eq!(
            offsets.get(&tp.partition),
            Some(&PER_PARTITION),
            "{tp:?}: committed at the revoke; broker log:\n{}",
            broker.log()
        );
    }
    // One more record to each taken partition: it is the first the new
    // owner gets.
    for tp in taken.keys() {
        produce_to(&bootstrap, &topic, tp.partition, "after").await;
    }
    for (tp, records) in &mut taken {
        let record = next_record(records).await;
        assert_eq!(
            record.offset, PER_PARTITION,
            "{tp:?} resumes after the settled records"
        );
        record.ack.handled();
    }
    drop((held, first_events, second_events));
    tokio::task::spawn_blocking(move || {
        second.shutdown();
        first.shutdown();
    })
    .await
    .unwrap();
}
