//! The consumer's thread.

use super::context::SourceContext;
use super::feeds::{Feeds, RawRecord};
use crate::record::TopicPartition;
use parking_lot::Mutex;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::TopicPartitionList;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// How often, at most, held records are handed over, offsets stored and
/// partitions paused or resumed while records keep coming.
const MAINTAIN_EVERY: Duration = Duration::from_millis(5);

/// Records polled in a row before the clock is read again (for the
/// maintenance below and the reports): at a million records a second, a
/// reading every few dozen microseconds.
const CLOCK_EVERY: u32 = 32;

/// How often the partitions' states are reported.
const REPORT_EVERY: Duration = Duration::from_secs(1);

/// How long a poll waits for a record: also how long an opened gate may
/// wait for the poll thread.
const POLL_WAIT: Duration = Duration::from_millis(10);

/// How long opening gates waits for the committed offsets, and how long
/// it waits to ask again when they did not come.
const COMMITTED_WAIT: Duration = Duration::from_secs(5);
const COMMITTED_RETRY: Duration = Duration::from_millis(500);

/// The consumer's thread: poll, hand records to their partitions, open
/// gates, keep the in-flight bound and store what was handled (librdkafka
/// commits it).
/// What the service asks of the poll thread.
pub(super) struct Asks<'a> {
    /// Gates opened.
    pub opened: &'a std::sync::mpsc::Receiver<(TopicPartition, u64)>,
    /// Partitions to consume again from their committed offset.
    pub rewound: &'a std::sync::mpsc::Receiver<(TopicPartition, u64)>,
    /// Set: leave the group and join it again.
    pub rejoin: &'a super::GroupRejoin,
    pub topics: &'a [String],
}

pub(super) fn poll(
    consumer: &BaseConsumer<SourceContext>,
    feeds: &Mutex<Feeds>,
    asks: Asks<'_>,
    stop: &AtomicBool,
) {
    let Asks {
        opened,
        rewound,
        rejoin,
        topics,
    } = asks;
    let mut last_report = std::time::Instant::now();
    let mut last_maintain = std::time::Instant::now();
    let mut idle = false;
    // Records polled since the clock was last read: reading it per record
    // costs as much as a record.
    let mut since_clock = 0u32;
    let mut opening = Vec::new();
    let mut open_again = std::time::Instant::now();
    while !stop.load(Ordering::Acquire) {
        // Not under the lock: the rebalance callback runs in here and
        // takes it.
        match consumer.poll(POLL_WAIT) {
            Some(Ok(message)) => {
                let raw = RawRecord {
                    partition: message.partition(),
                    offset: message.offset(),
                    timestamp: message.timestamp().to_millis(),
                    key: message.key().map(<[u8]>::to_vec),
                    payload: message.payload().map(<[u8]>::to_vec),
                };
                feeds.lock().push(message.topic(), raw);
                since_clock += 1;
                if since_clock < CLOCK_EVERY {
                    continue;
                }
            }
            // rust-rdkafka passes on only the code of librdkafka's error
            // (not the topic, partition, offset or text it names); a
            // partition that stops progressing is named by the reports.
            Some(Err(e)) => {
                if failed(consumer) {
                    return;
                }
                tracing::warn!(code = ?e.rdkafka_error_code(), error = %e, "kafka consumer error");
            }
            None => idle = true,
        }
        since_clock = 0;
        rejoin_unthrottled(consumer, topics);
        if rejoin.asked() {
            // The revoke of every partition runs in a later poll, then the
            // consumer joins as a new member.
            tracing::warn!("leaving the consumer group and joining it again");
            consumer.unsubscribe();
            let names: Vec<&str> = topics.iter().map(String::as_str).collect();
            if let Err(e) = consumer.subscribe(&names) {
                tracing::error!(error = %e, "the consumer group was not joined again");
            }
        }
        for (tp, feed) in rewound.try_iter() {
            consumer.context().rewind(consumer, &tp, feed);
        }
        opening.extend(opened.try_iter());
        if !opening.is_empty() && open_again <= std::time::Instant::now() {
            if open_gates(consumer, feeds, &mut opening) {
                idle = true;
            } else {
                open_again = std::time::Instant::now() + COMMITTED_RETRY;
            }
        }
        // Not after every record: storing offsets and pausing or resuming
        // partitions costs more than a record, and a few milliseconds'
        // delay changes neither the commits nor the in-flight bound much.
        if idle || last_maintain.elapsed() >= MAINTAIN_EVERY {
            last_maintain = std::time::Instant::now();
            idle = false;
            feeds.lock().maintain(consumer);
        }
        if last_report.elapsed() >= REPORT_EVERY {
            last_report = std::time::Instant::now();
            if failed(consumer) {
                return;
            }
            let watermarks = consumer.context().watermarks.lock().clone();
            feeds
                .lock()
                .report(&watermarks, &*consumer.context().observer);
        }
    }
    feeds.lock().maintain(consumer);
    consumer.context().commit_within_bound(consumer, "shutdown");
}

/// How long the metadata asked for after a rebalance may take: the poll
/// thread waits for it (the group's heartbeats and joins do not).
const METADATA_WAIT: Duration = Duration::from_millis(500);

/// After a rebalance under the classic protocol, asks the broker for the
/// topics' metadata, so that this member's next JoinGroup goes out as soon
/// as the group asks for it.
///
/// librdkafka sends a member's JoinGroup at most once a second
/// (`rkcg_join_intvl`), and clears that interval after a rebalance only on
/// the member that revoked partitions. A join of the cooperative protocol
/// takes two rounds: the members that revoked nothing (the joiner among
/// them) joined the first less than a second before the second begins, so
/// the second waited for their interval, and the moved partitions, revoked
/// in the first round, paused for about a second plus the restore
/// (BENCHMARKS.md). librdkafka clears the interval whenever a metadata
/// response comes in (`rdkafka_metadata.c`), so one is asked for here,
/// once per rebalance: the joiner joins the second round at its next
/// heartbeat. A metadata request that fails or is slow costs nothing but
/// that: the interval stays, as without this.
fn rejoin_unthrottled(consumer: &BaseConsumer<SourceContext>, topics: &[String]) {
    let Some(rebalanced) = &consumer.context().rebalanced else {
        return;
    };
    if !rebalanced.swap(false, Ordering::AcqRel) {
        return;
    }
    let Some(topic) = topics.first() else {
        return;
    };
    if let Err(e) = consumer.fetch_metadata(Some(topic), METADATA_WAIT) {
        tracing::debug!(%topic, error = %e, "metadata after a rebalance not read: the member's next join may wait up to a second");
    }
}

/// Whether librdkafka raised a fatal error: the consumer can do nothing
/// more, so the service is told (and logs it) and the poll loop ends.
fn failed(consumer: &BaseConsumer<SourceContext>) -> bool {
    let Some((code, reason)) = consumer.client().fatal_error() else {
        return false;
    };
    let reason = format!("{reason} ({code:?})");
    consumer.context().failed(reason);
    true
}

/// Opens the gates asked for whose assignment still holds: reads their
/// committed offsets (one request for all), below which records are
/// dropped. False, keeping them to open, if the offsets did not come.
fn open_gates(
    consumer: &BaseConsumer<SourceContext>,
    feeds: &Mutex<Feeds>,
    opening: &mut Vec<(TopicPartition, u64)>,
) -> bool {
    {
        let feeds = feeds.lock();
        opening.retain(|(tp, id)| feeds.closed(tp, *id));
    }
    if opening.is_empty() {
        return true;
    }
    let mut list = TopicPartitionList::new();
    for (tp, _) in opening.iter() {
        list.add_partition(&tp.topic, tp.partition);
    }
    // Not under the lock: this waits for the broker.
    let committed = match consumer.committed_offsets(list, COMMITTED_WAIT) {
        Ok(committed) => committed,
        Err(e) => {
            tracing::warn!(partitions = opening.len(), error = %e, "committed offsets not read; the partitions wait");
            return false;
        }
    };
    let mut feeds = feeds.lock();
    for (tp, id) in opening.drain(..) {
        let floor = committed
            .find_partition(&tp.topic, tp.partition)
            .and_then(|e| match e.offset() {
                rdkafka::Offset::Offset(offset) => Some(offset),
                _ => None,
            });
        feeds.open(&tp, id, floor);
    }
    true
}
