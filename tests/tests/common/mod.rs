//! Purchases from a producer that partitions otherwise than colo's shards
//! (librdkafka's `consistent_random`, `random`), with undecodable records
//! mixed in: what the tests of misplaced records and of faults send beside
//! `colo produce`. Here rather than in the tests' library, which does not
//! build the colo crate whose sample events it writes.

use colo::process::samples::purchases::{
    encode_event, read_back_milestones, Generator, MilestonesChecked, Totals,
};
use colo_tests::rdkafka::producer::{BaseProducer, BaseRecord, Producer as _};
use colo_tests::rdkafka::ClientConfig;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Purchases sent by a librdkafka producer with `partitioner`, paced,
/// mixed with undecodable records; what they add up to once it is done.
pub struct OtherPartitioner {
    thread: Option<std::thread::JoinHandle<Totals>>,
    /// Where the totals go, as `colo produce --expected` writes them.
    expected: PathBuf,
}

impl OtherPartitioner {
    /// `count` purchases of `users` users `<prefix><n>`, `rate` a second,
    /// with an undecodable record (keyed `bad-<n>`) every `bad_every`.
    #[allow(clippy::too_many_arguments)]
    pub fn start(
        dir: &Path,
        bootstrap: &str,
        topic: &str,
        partitioner: &str,
        prefix: &str,
        users: usize,
        count: u64,
        rate: u64,
        bad_every: Option<u64>,
    ) -> Self {
        let producer: BaseProducer = ClientConfig::new()
            .set("bootstrap.servers", bootstrap)
            .set("partitioner", partitioner)
            // One request in flight, one record a batch: each key's
            // records stay in order, and every offset a consumer starts
            // from begins a batch (the test broker skips the rest of a
            // batch fetched from its middle: DEVELOPERS.md).
            .set("max.in.flight.requests.per.connection", "1")
            .set("batch.num.messages", "1")
            // A record sent again after its answer was lost (a broker
            // killed or paused mid-write) is written once.
            .set("enable.idempotence", "true")
            .create()
            .expect("producer");
        let topic = topic.to_string();
        let mut generator = Generator::new(prefix, users, 11);
        let thread = std::thread::spawn(move || {
            let started = std::time::Instant::now();
            for n in 0..count {
                // Paced: the producer serves its callbacks until the next
                // record is due.
                let due = started + Duration::from_secs_f64(n as f64 / rate as f64);
                while let Some(wait) = due.checked_duration_since(std::time::Instant::now()) {
                    producer.poll(wait);
                }
                if bad_every.is_some_and(|every| n % every == every - 1) {
                    let key = format!("bad-{n}");
                    send(&producer, &topic, key.as_bytes(), b"not a purchase");
                }
                let (user, purchase) = generator.next_event();
                send(
                    &producer,
                    &topic,
                    user.as_bytes(),
                    &encode_event(&user, &purchase),
                );
            }
            producer.flush(Duration::from_secs(30)).expect("flushed");
            generator.totals().clone()
        });
        Self {
            thread: Some(thread),
            expected: dir.join(format!("{prefix}expected.json")),
        }
    }

    /// Where its totals go once finished, as `colo produce --expected`
    /// writes them (what `colo verify` reads).
    pub fn expected_file(&self) -> PathBuf {
        self.expected.clone()
    }

    /// Waits for it to finish; its totals, also written to `expected`.
    pub async fn finished(mut self) -> Totals {
        let thread = self.thread.take().expect("running");
        let totals = tokio::task::spawn_blocking(move || thread.join().expect("producer thread"))
            .await
            .expect("join");
        let json = serde_json::to_string(&totals).expect("totals as JSON");
        std::fs::write(&self.expected, json).expect("write totals");
        totals
    }
}

/// Sends one record, waiting for room in the producer's queue.
fn send(producer: &BaseProducer, topic: &str, key: &[u8], payload: &[u8]) {
    let mut record = BaseRecord::to(topic).key(key).payload(payload);
    loop {
        match producer.send(record) {
            Ok(()) => break,
            Err((_, back)) => {
                producer.poll(Duration::from_millis(50));
                record = back;
            }
        }
    }
    producer.poll(Duration::ZERO);
}

/// The totals a producer wrote (`colo produce --expected`).
#[allow(dead_code)] // Not every test that shares the module reads outputs.
pub fn read_totals(file: &Path) -> Totals {
    let text = std::fs::read_to_string(file).expect("the expected totals");
    serde_json::from_str(&text).expect("totals")
}

/// `cluster`'s milestone topic read back with read_committed and checked
/// against `totals` (several producers' users, merged), again until each
/// user who crossed it emitted exactly one or `within` has passed (the
/// last ones are sent just after their change is durable).
#[allow(dead_code)] // As `read_totals`.
pub async fn milestones(
    bootstrap: &str,
    cluster: &str,
    totals: &Totals,
    within: std::time::Duration,
) -> Result<MilestonesChecked, MilestonesChecked> {
    let topic = colo::process::samples::purchases::milestone_topic(cluster);
    let checked = read_back_milestones(bootstrap, &[], &topic, totals, within)
        .await
        .expect("the milestone topic");
    match checked.all_once() {
        true => Ok(checked),
        false => Err(checked),
    }
}
