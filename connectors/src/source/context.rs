//! The consumer's context: librdkafka's callbacks, run on the poll thread.

use super::feeds::{one, partitions, store_position, Feed, Feeds, Phase};
use super::{AssignedPartition, Gate, Revocation, SourceEvent, TopicPartition};
use crate::ack::Offsets;
use crate::observer::SourceObserver;
use parking_lot::Mutex;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer, ConsumerContext, Rebalance};
use rdkafka::{ClientContext, TopicPartitionList};
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;

/// The consumer's context: turns rebalances into events and waits for the
/// service's answer.
pub(super) struct SourceContext {
    pub(super) feeds: Arc<Mutex<Feeds>>,
    pub(super) events: mpsc::UnboundedSender<SourceEvent>,
    /// Where gates say they opened.
    pub(super) opens: std::sync::mpsc::Sender<(TopicPartition, u64)>,
    pub(super) next_feed: std::sync::atomic::AtomicU64,
    pub(super) timeout: Duration,
    pub(super) observer: Arc<dyn SourceObserver>,
    /// Each partition's end, from librdkafka's statistics.
    pub(super) high_watermarks: Mutex<HashMap<TopicPartition, i64>>,
}

impl SourceContext {
    /// Commits the stored offsets and waits for the broker's answer: true
    /// if they are committed (or nothing was new).
    pub(super) fn commit_sync(&self, consumer: &BaseConsumer<Self>, when: &str) -> bool {
        let started = std::time::Instant::now();
        match consumer.commit_consumer_state(CommitMode::Sync) {
            // Nothing new since the last commit is a commit answered at once:
            // what the revoke or shutdown waited for is done.
            Ok(())
            | Err(rdkafka::error::KafkaError::ConsumerCommit(
                rdkafka::types::RDKafkaErrorCode::NoOffset,
            )) => {
                self.observer.committed(Some(started.elapsed()), true);
                true
            }
            Err(e) => {
                self.observer.committed(Some(started.elapsed()), false);
                tracing::warn!(error = %e, "offsets not committed at {when}");
                false
            }
        }
    }

    pub(super) fn assigned(&self, list: &TopicPartitionList) {
        let mut assigned = Vec::new();
        {
            let mut feeds = self.feeds.lock();
            for tp in partitions(list) {
                let (to_service, records) = mpsc::unbounded_channel();
                let id = self.next_feed.fetch_add(1, Ordering::Relaxed);
                feeds.by.insert(
                    tp.clone(),
                    Feed {
                        id,
                        phase: Phase::Closed,
                        topic: Arc::from(tp.topic.as_str()),
                        to_service,
                        offsets: Arc::default(),
                        held: VecDeque::new(),
                        paused: false,
                        stored: None,
                    },
                );
                assigned.push(AssignedPartition {
                    gate: Gate {
                        partition: tp.clone(),
                        feed: id,
                        opens: self.opens.clone(),
                    },
                    partition: tp,
                    records,
                });
            }
        }
        tracing::info!(partitions = assigned.len(), "kafka partitions assigned");
        if self
            .events
            .send(SourceEvent::Assigned {
                partitions: assigned,
            })
            .is_err()
        {
            tracing::warn!("kafka source: nobody listens to rebalance events");
        }
    }

    pub(super) fn revoked(&self, consumer: &BaseConsumer<Self>, list: &TopicPartitionList) {
        let revoked = partitions(list);
        let removed: Vec<(TopicPartition, Feed)> = {
            let mut feeds = self.feeds.lock();
            revoked
                .iter()
                .filter_map(|tp| feeds.by.remove(tp).map(|f| (tp.clone(), f)))
                .collect()
        };
        for tp in &revoked {
            self.observer.partition_gone(tp);
        }
        // librdkafka keeps a partition's pause across its unassignment: one
        // paused here would come back paused if assigned here again, with a
        // new feed that does not know it.
        for (tp, feed) in &removed {
            if feed.paused {
                if let Err(e) = consumer.resume(&one(tp)) {
                    tracing::warn!(topic = %tp.topic, partition = tp.partition, error = %e, "cannot resume a revoked partition");
                }
            }
        }
        if consumer.assignment_lost() {
            tracing::warn!(partitions = revoked.len(), "kafka partitions lost");
            let _ = self.events.send(SourceEvent::Lost {
                partitions: revoked,
            });
            return;
        }
        tracing::info!(partitions = revoked.len(), "kafka partitions revoked");
        // Their streams end with the feeds (the senders dropped here); what
        // the service received it settles now.
        let offsets: Vec<(TopicPartition, Arc<Mutex<Offsets>>)> = removed
            .into_iter()
            .map(|(tp, feed)| (tp, feed.offsets))
            .collect();
        let (settled, settled_wait) = std::sync::mpsc::sync_channel(1);
        let (done, done_wait) = std::sync::mpsc::sync_channel(1);
        let deadline = std::time::Instant::now() + self.timeout;
        let sent = self.events.send(SourceEvent::Revoked {
            partitions: revoked,
            revocation: Revocation {
                settled: Some(settled),
                done,
            },
        });
        if sent.is_err() {
            tracing::warn!("kafka source: nobody listens to rebalance events");
        }
        let reply = wait_until(
            &settled_wait,
            deadline,
            "settling the revoked partitions' records",
        );
        for (tp, offsets) in offsets {
            if let Some(position) = offsets.lock().position() {
                if let Err(e) = store_position(consumer, &tp, position) {
                    tracing::warn!(topic = %tp.topic, partition = tp.partition, error = %e, "offset not stored on revoke");
                }
            }
        }
        let committed = self.commit_sync(consumer, "revoke");
        if let Some(reply) = reply {
            let _ = reply.send(committed);
        }
        if sent.is_ok() {
            wait_until(
                &done_wait,
                deadline,
                "handing off the revoked partitions' shards",
            );
        }
    }
}

/// Waits for the service's answer until `deadline`; `None`, logged, if it
/// does not come.
fn wait_until<T>(
    answer: &std::sync::mpsc::Receiver<T>,
    deadline: std::time::Instant,
    what: &str,
) -> Option<T> {
    let left = deadline.saturating_duration_since(std::time::Instant::now());
    match answer.recv_timeout(left) {
        Ok(value) => Some(value),
        Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
            tracing::warn!("kafka source: {what} not done within the rebalance timeout; going on");
            None
        }
        Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
            tracing::warn!("kafka source: {what} not done; going on");
            None
        }
    }
}

impl ClientContext for SourceContext {
    /// librdkafka's statistics carry each partition's high watermark, which
    /// the lag is measured against.
    fn stats(&self, statistics: rdkafka::Statistics) {
        let mut highs = self.high_watermarks.lock();
        for (topic, t) in statistics.topics {
            for (partition, p) in t.partitions {
                if partition >= 0 && p.hi_offset >= 0 {
                    highs.insert(
                        TopicPartition {
                            topic: topic.clone(),
                            partition,
                        },
                        p.hi_offset,
                    );
                }
            }
        }
    }
}

impl ConsumerContext for SourceContext {
    /// Every commit's outcome, counted: librdkafka's own (on its timer and at
    /// unassignment), and also the source's (at a revoke or at shutdown,
    /// which `commit_sync` counts as well: librdkafka reports a commit made
    /// without a callback of its own here too). Their latency is not known
    /// here.
    ///
    /// A commit the group refuses while it rebalances is expected, and only
    /// counted: under the cooperative protocol a commit made while the group
    /// gathers its members (RebalanceInProgress) or carrying the generation
    /// a round just ended (IllegalGeneration) is refused, the offsets stay
    /// stored, and the next commit carries them: the next periodic one for
    /// the partitions kept, the revoke's for the ones that move, which warns
    /// if it fails. UnknownMemberId is no such refusal: the member was put
    /// out of the group and its partitions are lost, uncommitted.
    fn commit_callback(
        &self,
        result: rdkafka::error::KafkaResult<()>,
        _offsets: &TopicPartitionList,
    ) {
        use rdkafka::error::KafkaError::ConsumerCommit;
        use rdkafka::types::RDKafkaErrorCode::{IllegalGeneration, NoOffset, RebalanceInProgress};
        match result {
            Ok(()) => self.observer.committed(None, true),
            Err(ConsumerCommit(NoOffset)) => {}
            Err(e @ ConsumerCommit(RebalanceInProgress | IllegalGeneration)) => {
                self.observer.commit_refused_in_rebalance();
                tracing::debug!(error = %e, "offsets not committed during a rebalance; a later commit carries them");
            }
            Err(e) => {
                self.observer.committed(None, false);
                tracing::warn!(error = %e, "offsets not committed");
            }
        }
    }

    fn pre_rebalance(&self, consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        match rebalance {
            Rebalance::Assign(list) => self.assigned(list),
            Rebalance::Revoke(list) => self.revoked(consumer, list),
            Rebalance::Error(e) => tracing::warn!(error = %e, "kafka rebalance error"),
        }
    }
}
