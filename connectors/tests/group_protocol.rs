//! The source under KIP-848's consumer group protocol (`group.protocol =
//! "consumer"`): the broker assigns and revokes partitions incrementally,
//! and the source's callbacks hold a revoke until the service has settled,
//! committed and handed off, as under the classic protocol. librdkafka's
//! mock cluster speaks this protocol; the test broker does not.

use colo_connectors::{KafkaSource, SourceEvent, SourceSettings};
use colo_tests::kafka::{
    committed_offsets, handed_to_joiner, next_record, opened, source_settings, Assigned,
};
use rdkafka::mocking::MockCluster;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::ClientConfig;
use std::time::Duration;
use tokio::sync::mpsc;

const TOPIC: &str = "events";
const PARTITIONS: i32 = 3;
const PER_PARTITION: i64 = 10;

fn produce(bootstrap: &str, round: i64) {
    let producer: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .create()
        .expect("producer");
    for partition in 0..PARTITIONS {
        for i in 0..PER_PARTITION {
            let payload = (round * PER_PARTITION + i).to_string();
            producer
                .send(
                    BaseRecord::to(TOPIC)
                        .key("k")
                        .payload(&payload)
                        .partition(partition),
                )
                .expect("queued");
        }
    }
    producer.flush(Duration::from_secs(10)).expect("flushed");
}

/// The test helpers' settings without the classic protocol's timeouts,
/// which this protocol leaves to the broker.
fn settings(bootstrap: &str, group: &str) -> SourceSettings {
    SourceSettings {
        client: vec![("group.protocol".into(), "consumer".into())],
        ..source_settings(bootstrap, TOPIC, group)
    }
}

/// Assignments until the source holds every partition: the broker may
/// hand them over in more than one.
async fn all_assigned(events: &mut mpsc::UnboundedReceiver<SourceEvent>) -> Assigned {
    let mut all = Assigned::new();
    while all.len() < PARTITIONS as usize {
        let event = tokio::time::timeout(Duration::from_secs(60), events.recv())
            .await
            .expect("assignments in time")
            .expect("source running");
        match event {
            SourceEvent::Assigned { partitions } => all.extend(opened(partitions)),
            other => panic!("{other:?} before every partition was assigned"),
        }
    }
    all
}

/// Plays a service with nothing in flight: every revoke is committed and
/// handed off at once.
async fn answer_revokes(mut events: mpsc::UnboundedReceiver<SourceEvent>) {
    while let Some(event) = events.recv().await {
        if let SourceEvent::Revoked { mut revocation, .. } = event {
            revocation.commit().await;
            revocation.done();
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_the_consumer_protocol_records_flow_and_a_joiner_starts_after_the_committed_revoke() {
    let cluster = MockCluster::new(1).expect("mock cluster");
    cluster
        .create_topic(TOPIC, PARTITIONS, 1)
        .expect("topic created");
    let bootstrap = cluster.bootstrap_servers();
    produce(&bootstrap, 0);
    let group = "kip-848";
    let (first, mut first_events) =
        KafkaSource::start(settings(&bootstrap, group)).expect("first source");
    let mut partitions = all_assigned(&mut first_events).await;
    for (tp, records) in &mut partitions {
        for expected in 0..PER_PARTITION {
            let record = next_record(records).await;
            assert_eq!(record.offset, expected, "{tp:?} in order");
            record.ack.handled();
        }
    }

    // A second member joins: the broker takes partitions from the first,
    // whose revoke commits what it handled before they move.
    let (second, mut second_events) =
        KafkaSource::start(settings(&bootstrap, group)).expect("second source");
    let (revoked, mut taken) =
        handed_to_joiner(&mut first_events, &mut partitions, &mut second_events).await;
    let offsets = committed_offsets(&bootstrap, TOPIC, group, PARTITIONS);
    for tp in &revoked {
        assert_eq!(offsets.get(&tp.partition), Some(&PER_PARTITION), "{tp:?}");
    }
    // The new owner reads on from there, nothing twice.
    produce(&bootstrap, 1);
    for (tp, records) in &mut taken {
        let record = next_record(records).await;
        assert_eq!(
            record.offset, PER_PARTITION,
            "{tp:?} resumes after the commit"
        );
        record.ack.handled();
    }
    // Closing revokes what each still holds; answered, it goes at once.
    tokio::spawn(answer_revokes(first_events));
    tokio::spawn(answer_revokes(second_events));
    tokio::task::spawn_blocking(move || {
        second.shutdown();
        first.shutdown();
    })
    .await
    .expect("sources stopped");
}
