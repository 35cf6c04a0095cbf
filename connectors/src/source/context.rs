//! The consumer's context: librdkafka's callbacks, run on the poll thread.

use super::events::{AssignedPartition, Gate, Revocation, Rewind, SourceEvent};
use super::feeds::{
    one, partitions, store_position, Feed, Feeds, Phase, Progress, Taken, Watermarks,
};
use crate::ack::Offsets;
use crate::observer::SourceObserver;
use crate::record::TopicPartition;
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
    /// Where the service asks for partitions to be consumed again.
    pub(super) rewinds: std::sync::mpsc::Sender<(TopicPartition, u64)>,
    pub(super) next_feed: std::sync::atomic::AtomicU64,
    pub(super) timeout: Duration,
    /// How long a commit the source waits for may take.
    pub(super) commit_timeout: Duration,
    pub(super) observer: Arc<dyn SourceObserver>,
    /// Each partition's ends and committed offset, from librdkafka's
    /// statistics.
    pub(super) watermarks: Mutex<HashMap<TopicPartition, Watermarks>>,
    /// Set while the source makes a commit of its own (at a revoke, at
    /// shutdown): librdkafka reports it to the commit callback too, where
    /// it is neither counted nor logged a second time.
    pub(super) committing: std::sync::atomic::AtomicBool,
    /// The consumer itself, for a commit made on a thread of its own (so
    /// that its wait can be bounded); set once it exists.
    pub(super) consumer: std::sync::OnceLock<std::sync::Weak<BaseConsumer<SourceContext>>>,
    /// Set by a rebalance under the classic protocol, taken by the poll
    /// thread once the callback has returned (see `poll::rejoin_unthrottled`).
    pub(super) rebalanced: Option<std::sync::atomic::AtomicBool>,
}

/// How long a rewind waits for the committed offset, and for the seek.
const REWIND_WAIT: Duration = Duration::from_secs(5);

/// How long a refused commit waits before it is tried again.
const COMMIT_RETRY: Duration = Duration::from_millis(200);

/// A commit refused for the member's standing in the group: none can be
/// made before the member joins again, which it does only once the
/// callback that commits has returned, so trying again until
/// `commit_timeout` would only hold the rebalance (and get the member put
/// out of the group, where its join is awaited for a bounded time).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Standing {
    /// The group began another round (RebalanceInProgress), or ended one
    /// this member's generation is older than (IllegalGeneration): expected
    /// when members come and go together.
    Rebalancing,
    /// The member was put out of the group (its session ran out) or fenced
    /// by a newer instance: its partitions are another's already.
    Gone,
    /// The consumer's group handler has ended (librdkafka answers
    /// BrokerDestroy): the consumer closed, as at the end of a node's
    /// shutdown, where librdkafka may still hand the application a revoke
    /// it had queued. The shutdown's own commit came before.
    Closed,
}

impl Standing {
    fn of(error: &rdkafka::error::KafkaError) -> Option<Self> {
        use rdkafka::types::RDKafkaErrorCode::{
            BrokerDestroy, FencedInstanceId, IllegalGeneration, RebalanceInProgress,
            UnknownMemberId,
        };
        match error.rdkafka_error_code()? {
            RebalanceInProgress | IllegalGeneration => Some(Self::Rebalancing),
            UnknownMemberId | FencedInstanceId => Some(Self::Gone),
            BrokerDestroy => Some(Self::Closed),
            _ => None,
        }
    }

    /// The partitions' next owner starts from the last commit: durable
    /// entities skip the records whose effects they already applied, others
    /// handle them again (at least once, as documented).
    fn give_up(self, error: &rdkafka::error::KafkaError, when: &str) {
        match self {
            Self::Rebalancing => {
                tracing::info!(%error, "offsets not committed at {when}: the group is in another round, which this member joins once the commit is given up; the partitions' next owner starts from the last commit")
            }
            Self::Gone => {
                tracing::warn!(%error, "offsets not committed at {when}: the member was put out of the group (its session ran out?); the partitions' next owner starts from the last commit")
            }
            Self::Closed => {
                tracing::info!(%error, "offsets not committed at {when}: the consumer has closed; the partitions' next owner starts from the last commit")
            }
        }
    }
}

impl SourceContext {
    /// Commits the stored offsets and waits for the broker's answer,
    /// trying again while it refuses, for `commit_timeout` at most: true if
    /// they are committed (or nothing was new). Past the bound the caller
    /// goes on; the partitions' next owner then handles the records since
    /// the last commit again. A refusal for the member's standing in the
    /// group ([`Standing`]) ends it at once.
    pub(super) fn commit_within_bound(&self, consumer: &BaseConsumer<Self>, when: &str) -> bool {
        self.committing.store(true, Ordering::Release);
        let committed = self.commit_with_retries(consumer, when);
        self.committing.store(false, Ordering::Release);
        committed
    }

    fn commit_with_retries(&self, consumer: &BaseConsumer<Self>, when: &str) -> bool {
        let deadline = std::time::Instant::now() + self.commit_timeout;
        let mut attempts = 0;
        loop {
            attempts += 1;
            let started = std::time::Instant::now();
            let error = match self.commit_once(consumer, deadline) {
                // Nothing new since the last commit is a commit answered at
                // once: what the revoke or shutdown waited for is done.
                Some(
                    Ok(())
                    | Err(rdkafka::error::KafkaError::ConsumerCommit(
                        rdkafka::types::RDKafkaErrorCode::NoOffset,
                    )),
                ) => {
                    self.observer.committed(Some(started.elapsed()), true);
                    return true;
                }
                Some(Err(e)) => match Standing::of(&e) {
                    Some(standing) => {
                        self.observer.committed(Some(started.elapsed()), false);
                        standing.give_up(&e, when);
                        return false;
                    }
                    None => e.to_string(),
                },
                None => "no answer".to_string(),
            };
            self.observer.committed(Some(started.elapsed()), false);
            if std::time::Instant::now() + COMMIT_RETRY >= deadline {
                tracing::warn!(error, attempts, timeout = ?self.commit_timeout, "offsets not committed at {when} within kafka.commit_timeout: the partitions' next owner handles the records since the last commit again");
                return false;
            }
            tracing::debug!(
                error,
                attempts,
                "offsets not committed at {when}; trying again"
            );
            std::thread::sleep(COMMIT_RETRY);
        }
    }

    /// One synchronous commit, waited for until `deadline`: `None` if it
    /// did not answer by then. librdkafka's synchronous commit waits as
    /// long as the group coordinator takes, so it runs on a thread of its
    /// own while this one waits with a bound.
    fn commit_once(
        &self,
        consumer: &BaseConsumer<Self>,
        deadline: std::time::Instant,
    ) -> Option<rdkafka::error::KafkaResult<()>> {
        let Some(shared) = self.consumer.get().and_then(std::sync::Weak::upgrade) else {
            return Some(consumer.commit_consumer_state(CommitMode::Sync));
        };
        let (answer, answered) = std::sync::mpsc::sync_channel(1);
        let spawned = std::thread::Builder::new()
            .name("kafka-commit".into())
            .spawn(move || {
                let _ = answer.send(shared.commit_consumer_state(CommitMode::Sync));
            });
        if spawned.is_err() {
            return Some(consumer.commit_consumer_state(CommitMode::Sync));
        }
        answered
            .recv_timeout(deadline.saturating_duration_since(std::time::Instant::now()))
            .ok()
    }

    /// The consumer failed for good: every feed ends (their partitions are
    /// as good as lost), and the service is told why.
    pub(super) fn failed(&self, reason: String) {
        let gone: Vec<TopicPartition> = self.feeds.lock().by.drain().map(|(tp, _)| tp).collect();
        for tp in &gone {
            self.observer.partition_gone(tp);
        }
        tracing::error!(%reason, partitions = gone.len(), "kafka consumer failed for good: it consumes nothing more");
        let _ = self.events.send(SourceEvent::Failed { reason });
    }

    pub(super) fn assigned(&self, list: &TopicPartitionList) {
        self.assign(partitions(list));
    }

    /// Gives each of `assigned` a new feed behind a closed gate, and tells
    /// the service.
    fn assign(&self, partitions: Vec<TopicPartition>) {
        let mut assigned = Vec::new();
        {
            let mut feeds = self.feeds.lock();
            for tp in partitions {
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
                        taken: Taken::default(),
                        progress: Progress::new(),
                    },
                );
                assigned.push(AssignedPartition {
                    gate: Gate {
                        partition: tp.clone(),
                        feed: id,
                        opens: self.opens.clone(),
                    },
                    rewind: Rewind {
                        partition: tp.clone(),
                        feed: id,
                        rewinds: self.rewinds.clone(),
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

    /// Consumes `tp` again from its committed offset, if its assignment
    /// `feed` is still the current one: its feed ends (the service's stream
    /// with it), the consumer goes back to the committed offset, and the
    /// partition comes again as newly assigned. The committed offset is
    /// read on this thread, bounded like an opening gate's.
    pub(super) fn rewind(&self, consumer: &BaseConsumer<Self>, tp: &TopicPartition, feed: u64) {
        let removed = {
            let mut feeds = self.feeds.lock();
            match feeds.by.get(tp) {
                Some(current) if current.id == feed => feeds.by.remove(tp),
                _ => None,
            }
        };
        let Some(removed) = removed else {
            return;
        };
        if removed.paused {
            if let Err(e) = consumer.resume(&one(tp)) {
                tracing::warn!(topic = %tp.topic, partition = tp.partition, error = %e, "cannot resume a rewound partition");
            }
        }
        let committed = consumer
            .committed_offsets(one(tp), REWIND_WAIT)
            .ok()
            .and_then(|list| {
                list.find_partition(&tp.topic, tp.partition)
                    .map(|e| e.offset())
            });
        let to = match committed {
            Some(offset @ rdkafka::Offset::Offset(_)) => offset,
            // Nothing committed: from the partition's start, as a group
            // without commits reads it.
            _ => rdkafka::Offset::Beginning,
        };
        if let Err(e) = consumer.seek(&tp.topic, tp.partition, to, REWIND_WAIT) {
            tracing::error!(topic = %tp.topic, partition = tp.partition, error = %e, "partition not rewound: the records after its committed offset are consumed again only by its next owner");
        } else {
            tracing::warn!(topic = %tp.topic, partition = tp.partition, offset = ?to, "partition consumed again from its committed offset");
        }
        self.assign(vec![tp.clone()]);
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
        // The event is dropped at once when nobody listens: kept, its
        // revocation would keep the waits below waiting until the bound.
        let sent = self
            .events
            .send(SourceEvent::Revoked {
                partitions: revoked,
                revocation: Revocation {
                    settled: Some(settled),
                    done,
                },
            })
            .is_ok();
        if !sent {
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
                    // librdkafka refuses (State) the offset of a partition
                    // its assignment no longer holds: one already taken from
                    // this member (put out of the group, which is warned
                    // about where it is seen). As with a commit given up,
                    // the next owner starts from the last commit.
                    if e.rdkafka_error_code() == Some(rdkafka::types::RDKafkaErrorCode::State) {
                        tracing::info!(topic = %tp.topic, partition = tp.partition, error = %e, "offset not stored on revoke: the partition is no longer this member's; its next owner starts from the last commit");
                        continue;
                    }
                    tracing::warn!(topic = %tp.topic, partition = tp.partition, error = %e, "offset not stored on revoke");
                }
            }
        }
        let committed = self.commit_within_bound(consumer, "revoke");
        if let Some(reply) = reply {
            let _ = reply.send(committed);
        }
        if sent {
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
    /// librdkafka's statistics carry each partition's ends, which the lag
    /// is measured against, and the committed offset it read at
    /// assignment, which gives the lag before any record came.
    fn stats(&self, statistics: rdkafka::Statistics) {
        let mut watermarks = self.watermarks.lock();
        for (topic, t) in statistics.topics {
            for (partition, p) in t.partitions {
                if partition < 0 {
                    continue;
                }
                let known = |offset: i64| (offset >= 0).then_some(offset);
                watermarks.insert(
                    TopicPartition {
                        topic: topic.clone(),
                        partition,
                    },
                    Watermarks {
                        high: known(p.hi_offset),
                        low: known(p.lo_offset),
                        committed: known(p.committed_offset),
                    },
                );
            }
        }
    }
}

impl ConsumerContext for SourceContext {
    /// librdkafka's own commits' outcomes (on its timer and at
    /// unassignment), counted; their latency is not known here. librdkafka
    /// reports the source's own commits (at a revoke or at shutdown) here
    /// too: those are counted and logged where the source waits for them.
    ///
    /// A commit the group refuses while it rebalances is expected, and only
    /// counted: under the cooperative protocol a commit made while the group
    /// gathers its members (RebalanceInProgress) or carrying the generation
    /// a round just ended (IllegalGeneration) is refused, the offsets stay
    /// stored, and the next commit carries them: the next periodic one for
    /// the partitions kept, the revoke's for the ones that move (which gives
    /// up at once on such a refusal, see `Standing`, and warns on others).
    /// UnknownMemberId is no such refusal: the member was put out of the
    /// group and its partitions are lost, uncommitted.
    fn commit_callback(
        &self,
        result: rdkafka::error::KafkaResult<()>,
        offsets: &TopicPartitionList,
    ) {
        use rdkafka::error::KafkaError::ConsumerCommit;
        use rdkafka::types::RDKafkaErrorCode::{IllegalGeneration, NoOffset, RebalanceInProgress};
        if result.is_ok() {
            for element in offsets.elements() {
                if let (Ok(()), rdkafka::Offset::Offset(offset)) =
                    (element.error(), element.offset())
                {
                    let partition = TopicPartition {
                        topic: element.topic().to_string(),
                        partition: element.partition(),
                    };
                    self.observer.offset_committed(&partition, offset);
                }
            }
        }
        if self.committing.load(Ordering::Acquire) {
            // The source's own commit: counted and logged where it waits.
            return;
        }
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
        if let Some(rebalanced) = &self.rebalanced {
            rebalanced.store(true, Ordering::Release);
        }
        match rebalance {
            Rebalance::Assign(list) => self.assigned(list),
            Rebalance::Revoke(list) => self.revoked(consumer, list),
            Rebalance::Error(e) => tracing::warn!(error = %e, "kafka rebalance error"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rdkafka::config::ClientConfig;
    use rdkafka::mocking::MockCluster;
    use std::sync::atomic::AtomicUsize;

    /// The source's own commits that failed.
    #[derive(Default)]
    struct FailedCommits(AtomicUsize);

    impl SourceObserver for FailedCommits {
        fn partition(&self, _: &TopicPartition, _: crate::PartitionState) {}
        fn partition_gone(&self, _: &TopicPartition) {}
        fn committed(&self, latency: Option<Duration>, ok: bool) {
            if latency.is_some() && !ok {
                self.0.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// A consumer whose group handler has ended (closed, as at the end of
    /// a shutdown, where librdkafka may still hand the application a
    /// revoke it had queued) can commit nothing more: the commit is given
    /// up at its first refusal. Before, it was tried again every 200 ms
    /// until `commit_timeout`, holding the node's shutdown for ten seconds
    /// and warning, as a demo run once did.
    #[test]
    fn a_commit_after_the_consumer_closed_is_given_up_at_once() {
        let cluster = MockCluster::new(1).expect("mock cluster");
        cluster.create_topic("closed", 1, 1).expect("topic");
        let failed = Arc::new(FailedCommits::default());
        let (events, _received) = mpsc::unbounded_channel();
        let (opens, _opened) = std::sync::mpsc::channel();
        let (rewinds, _rewound) = std::sync::mpsc::channel();
        let context = SourceContext {
            feeds: Arc::new(Mutex::new(Feeds {
                by: HashMap::new(),
                max_in_flight: 1,
                budget: super::super::Budget::new(1),
                stall_timeout: Duration::from_secs(1),
            })),
            events,
            opens,
            rewinds,
            next_feed: std::sync::atomic::AtomicU64::new(0),
            timeout: Duration::from_secs(1),
            commit_timeout: Duration::from_secs(2),
            observer: failed.clone(),
            watermarks: Mutex::new(HashMap::new()),
            committing: std::sync::atomic::AtomicBool::new(false),
            consumer: std::sync::OnceLock::new(),
            rebalanced: None,
        };
        let consumer: BaseConsumer<SourceContext> = ClientConfig::new()
            .set("bootstrap.servers", cluster.bootstrap_servers())
            .set("group.id", "closed")
            .create_with_context(context)
            .expect("consumer");
        let mut assignment = TopicPartitionList::new();
        assignment
            .add_partition_offset("closed", 0, rdkafka::Offset::Offset(0))
            .expect("partition");
        consumer.assign(&assignment).expect("assigned");
        consumer.close_queue().expect("closing");
        while !consumer.closed() {
            consumer.poll(Duration::from_millis(50));
        }
        assert!(!consumer.context().commit_within_bound(&consumer, "revoke"));
        assert_eq!(failed.0.load(Ordering::Relaxed), 1, "tried once");
    }
}
