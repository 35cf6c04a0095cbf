//! A plain consumer group member, the baseline of the peers bench's moves:
//! what a rebalance costs a partition when nothing but librdkafka consumes
//! it. It reads records and keeps nothing, with the group settings colo's
//! source uses under the classic protocol (cooperative-sticky, heartbeats
//! every 500 ms, offsets committed every 5 s, librdkafka's own), and
//! serves what the bench reads of the peers at `/metrics`: records handled,
//! their latency, and each partition's first record since its assignment
//! here and its last. SIGTERM closes it: it leaves the group.
//!
//! `bare-consumer BOOTSTRAP TOPIC GROUP METRICS_ADDRESS [SESSION_TIMEOUT_MS]`

use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext, Rebalance};
use rdkafka::message::Message;
use rdkafka::{ClientConfig, ClientContext};
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The latency buckets' bounds, in seconds (the peers' own).
const BUCKETS: [f64; 12] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
];

#[derive(Default)]
struct Seen {
    handled: u64,
    /// Records at or below each bound of [`BUCKETS`], then all of them.
    latency: [u64; BUCKETS.len() + 1],
    first: BTreeMap<i32, f64>,
    last: BTreeMap<i32, f64>,
}

impl Seen {
    fn handled(&mut self, partition: i32, timestamp: Option<i64>) {
        let now = now();
        self.handled += 1;
        if let Some(produced) = timestamp.filter(|t| *t > 0) {
            let latency = (now - produced as f64 / 1000.0).max(0.0);
            for (count, bound) in self.latency.iter_mut().zip(BUCKETS) {
                if latency <= bound {
                    *count += 1;
                }
            }
        }
        self.latency[BUCKETS.len()] += 1;
        self.first.entry(partition).or_insert(now);
        self.last.insert(partition, now);
    }

    fn render(&self) -> String {
        let mut out = format!("peer_records_handled_total {}\n", self.handled);
        for (count, bound) in self.latency.iter().zip(BUCKETS) {
            out.push_str(&format!(
                "peer_record_latency_seconds_bucket{{le=\"{bound}\"}} {count}\n"
            ));
        }
        out.push_str(&format!(
            "peer_record_latency_seconds_bucket{{le=\"+Inf\"}} {}\n",
            self.latency[BUCKETS.len()]
        ));
        for (name, by) in [("first", &self.first), ("last", &self.last)] {
            for (partition, at) in by {
                out.push_str(&format!(
                    "peer_partition_{name}_handled_timestamp_seconds{{partition=\"{partition}\"}} {at}\n"
                ));
            }
        }
        out
    }
}

fn now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or_default()
}

/// Forgets a revoked partition's first record: the next assignment here
/// has a first of its own.
struct Context(Arc<Mutex<Seen>>);

impl ClientContext for Context {}

impl ConsumerContext for Context {
    fn pre_rebalance(&self, _: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        if let Rebalance::Revoke(list) = rebalance {
            let mut seen = self.0.lock().expect("seen");
            for element in list.elements() {
                seen.first.remove(&element.partition());
            }
        }
    }
}

fn serve(address: &str, seen: Arc<Mutex<Seen>>) {
    let listener = std::net::TcpListener::bind(address).expect("metrics address");
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let mut request = [0u8; 1024];
            let _ = stream.read(&mut request);
            let body = seen.lock().expect("seen").render();
            let _ = write!(
                stream,
                "HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [bootstrap, topic, group, metrics, rest @ ..] = args.as_slice() else {
        eprintln!(
            "usage: bare-consumer BOOTSTRAP TOPIC GROUP METRICS_ADDRESS [SESSION_TIMEOUT_MS]"
        );
        std::process::exit(2);
    };
    let seen = Arc::new(Mutex::new(Seen::default()));
    serve(metrics, seen.clone());
    let mut config = ClientConfig::new();
    config
        .set("bootstrap.servers", bootstrap)
        .set("group.id", group)
        .set("partition.assignment.strategy", "cooperative-sticky")
        .set("heartbeat.interval.ms", "500")
        .set("fetch.queue.backoff.ms", "10")
        .set("auto.offset.reset", "earliest");
    if let Some(session) = rest.first() {
        config.set("session.timeout.ms", session);
    }
    let consumer: BaseConsumer<Context> = config
        .create_with_context(Context(seen.clone()))
        .expect("consumer");
    consumer.subscribe(&[topic]).expect("subscribe");
    let stop = Arc::new(AtomicBool::new(false));
    let stopping = stop.clone();
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        runtime.block_on(async {
            let mut terminate =
                tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
                    .expect("SIGTERM handler");
            terminate.recv().await;
        });
        stopping.store(true, Ordering::Release);
    });
    while !stop.load(Ordering::Acquire) {
        if let Some(Ok(message)) = consumer.poll(Duration::from_millis(10)) {
            seen.lock()
                .expect("seen")
                .handled(message.partition(), message.timestamp().to_millis());
        }
    }
    // Dropped, it closes: it leaves the group, its partitions revoked in
    // the polls of the close. Unsubscribing first would leave the group
    // only at the session's end (see DEVELOPERS.md).
    drop(consumer);
}
