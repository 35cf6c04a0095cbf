//! A durable shard's outbox: the records its entities emitted, from the
//! change that emitted them to the write that drops them from the entity's
//! record once the broker has them.
//!
//! Each output goes through phases: written with the change its message
//! made (in the entity's record, `Unwritten` until that write is durable),
//! then sent (`Sending`), then dropped from the record (`Sent` until the
//! entity's record is written without it). A write that fails keeps its
//! outputs unwritten; a send that fails sends them again a second later.
//! So an output leaves only once it is durable, and leaves again only if
//! the node dies between its send and the write that drops it: the next
//! owner sends what the record still holds, under the same id.
//!
//! With transactions (`kafka.transactional_outputs`), the outputs never
//! enter the record: each write takes the outputs of its changes into
//! the transaction that writes their records to the changelog, and they
//! leave the outbox once it commits. A write that does not commit sends
//! none of them, and the next write takes them again.
//!
//! The next owner finds those records through the shard's index in the
//! node's store: an entry due at once, under an empty name
//! ([`TimerKey::outbox`]), written with the record that first holds an
//! output and deleted with the one that holds none any more; a restore
//! puts it back for each restored record with outputs
//! (`store/applier.rs`). When the shard reads it, it reads the entity's
//! record from the store and sends what its outbox holds.

mod ids;
mod transactions;

use super::timers::ShardTimers;
use super::{DurableShard, Earlier, Map};
use crate::entity::{Entity, EntityId};
use crate::envelope::Cause;
use crate::metrics::OutputMetrics;
use crate::output::Emitted;
use crate::store::{OutputRecord, OutputSink, Transactions};
use colo_allocation::ShardId;
use colo_state::{Output, StateRecord, TimerKey};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use tokio::time::Sleep;

/// After a send failed, the next waits this long.
const RETRY: std::time::Duration = std::time::Duration::from_secs(1);

/// The most outputs one send takes.
const MOST_PER_SEND: usize = 10_000;

/// How long after its send an output waits to be dropped from its
/// entity's record by a write of its own. An entity that changes
/// meanwhile drops it with that change, for nothing: with a write of its
/// own per output, a node emitting a record per record handled a quarter
/// as many (BENCHMARKS.md, "Output records"). A node that dies within it
/// leaves the output to be sent again, under the same id.
const DROP_AFTER: std::time::Duration = std::time::Duration::from_secs(1);

/// Where an output is on its way out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// In a record not durable yet: the write numbered `seq` (or a later
    /// one, if that fails) holds it.
    Unwritten {
        seq: u64,
    },
    /// Durable, waiting to be sent.
    Durable,
    Sending,
    /// The broker has it: the entity's next record drops it.
    Sent,
}

struct Pending {
    output: Output,
    phase: Phase,
}

/// An entity's outputs not yet dropped from its record.
struct Entry {
    outputs: Vec<Pending>,
    /// Its last durable record that holds them: what a drop of the sent
    /// ones rewrites when nothing newer waits to be written.
    record: Option<Vec<u8>>,
}

impl Entry {
    fn is_sent(&self, output: &Output) -> bool {
        self.outputs
            .iter()
            .any(|p| p.phase == Phase::Sent && p.output.id == output.id)
    }
}

type Sending = Pin<Box<dyn Future<Output = (Vec<(EntityId, Vec<String>)>, bool)> + Send>>;

/// A read of records the index says hold outputs.
type Finding = Pin<Box<dyn Future<Output = Vec<(EntityId, Option<Vec<u8>>)>> + Send>>;

pub(in crate::region::shard) struct ShardOutbox {
    sink: Option<Arc<dyn OutputSink>>,
    entities: Map<Entry>,
    /// Entities whose index entry is written, or goes into the next write.
    indexed: std::collections::HashSet<EntityId>,
    /// Entities with outputs `Durable` (one may be named twice, or have
    /// none any more): what the next send looks at, rather than every
    /// entity with outputs at every turn of the shard.
    ready: Vec<EntityId>,
    sending: Option<Sending>,
    backoff: Option<Pin<Box<Sleep>>>,
    /// Entities whose outputs were sent, oldest first, each with when its
    /// record is rewritten without them (their ids) if a change of the
    /// entity has not dropped them by then.
    to_drop: std::collections::VecDeque<(tokio::time::Instant, EntityId, Vec<String>)>,
    /// Wakes the shard for the first of `to_drop`.
    drop_wake: Option<Pin<Box<Sleep>>>,
    /// Entities the index named, to read.
    to_find: Vec<EntityId>,
    finding: Option<Finding>,
    /// Names this start of the shard in the ids of the outputs of
    /// messages that have no cause to name them by (plain tells and asks,
    /// stop messages): drawn at random, as a shard without a changelog
    /// starts at the same epoch each time.
    start: u64,
    /// Numbers those outputs within this start.
    next: u64,
    /// With transactions: this start's writer of its changelog partition,
    /// opened by its restore (before the shard takes a message), which
    /// takes the outputs of each write's changes rather than the records.
    transactions: Transactions,
    metrics: OutputMetrics,
}

impl ShardOutbox {
    pub fn new(entity_type: &str, sink: Option<Arc<dyn OutputSink>>) -> Self {
        Self {
            sink,
            entities: Map::default(),
            indexed: std::collections::HashSet::new(),
            ready: Vec::new(),
            sending: None,
            backoff: None,
            to_drop: std::collections::VecDeque::new(),
            drop_wake: None,
            to_find: Vec::new(),
            finding: None,
            start: rand::random(),
            next: 0,
            transactions: None,
            metrics: OutputMetrics::new(entity_type),
        }
    }

    /// Whether nothing waits to be sent or dropped (a hand-off ends once
    /// it is so, or its bound passes).
    pub fn is_empty(&self) -> bool {
        self.entities.is_empty() && self.to_find.is_empty() && self.finding.is_none()
    }

    pub fn holds(&self, id: &EntityId) -> bool {
        self.entities.contains_key(id)
    }

    /// A write is durable: the outputs it held may be sent, and its
    /// records are the entities' last durable ones. Looked up from the
    /// write's records, as many as the write itself had to encode: every
    /// unwritten output is in one of them (its change put its entity's
    /// record in the write, or in the failed one whose records this one
    /// took).
    pub fn written(&mut self, seq: u64, states: &Map<Vec<u8>>) {
        if self.transactions.is_some() {
            return self.committed(seq, states);
        }
        for (id, record) in states {
            let Some(entry) = self.entities.get_mut(id) else {
                continue;
            };
            entry.record = Some(record.clone());
            let mut ready = false;
            for pending in &mut entry.outputs {
                if matches!(pending.phase, Phase::Unwritten { seq: s } if s <= seq) {
                    pending.phase = Phase::Durable;
                    ready = true;
                }
            }
            if ready {
                self.ready.push(id.clone());
            }
        }
    }

    /// The index named `id`: its record is read, unless its outputs are
    /// known here already.
    pub fn found(&mut self, id: EntityId) {
        if !self.entities.contains_key(&id) {
            self.to_find.push(id);
        }
    }

    /// What a message emitted, into the entity's outbox (`outbox`, its
    /// record's) and the shard's, `Unwritten` until write `seq` (the one
    /// that will hold the change) is durable; the sent outputs are dropped
    /// from the record here. `what`: the entity type and the shard, which
    /// name the outputs. True if the outbox changed.
    pub fn change(
        &mut self,
        timers: &mut ShardTimers,
        id: &EntityId,
        outbox: &mut Vec<Output>,
        (cause, emitted): (Option<&Cause>, Vec<Emitted>),
        what: (&str, ShardId),
        seq: u64,
    ) -> bool {
        let mut changed = false;
        if let Some(entry) = self.entities.get_mut(id) {
            let before = outbox.len();
            outbox.retain(|o| !entry.is_sent(o));
            changed = outbox.len() != before;
            entry.outputs.retain(|p| p.phase != Phase::Sent);
        }
        if !emitted.is_empty() {
            let ids = self.ids(what, id, cause, emitted.len());
            self.metrics.emitted.increment(emitted.len() as u64);
            self.metrics.pending.increment(emitted.len() as f64);
            let entry = self.entities.entry(id.clone()).or_insert(Entry {
                outputs: Vec::new(),
                record: None,
            });
            for (emitted, id) in emitted.into_iter().zip(ids) {
                let output = Output {
                    id,
                    topic: emitted.topic,
                    key: emitted.key,
                    value: emitted.value,
                    headers: emitted.headers,
                };
                if self.transactions.is_none() {
                    outbox.push(output.clone());
                }
                entry.outputs.push(Pending {
                    output,
                    phase: Phase::Unwritten { seq },
                });
            }
            changed = true;
        }
        if changed {
            self.index(timers, id, !outbox.is_empty());
        }
        changed
    }

    /// The index entry of the entity's outbox, as its next record has
    /// outputs or not; an entity with none left leaves the shard's outbox.
    fn index(&mut self, timers: &mut ShardTimers, id: &EntityId, has_outputs: bool) {
        if has_outputs {
            if self.indexed.insert(id.clone()) {
                timers.mark_outbox(TimerKey::outbox(id.as_str()), true);
            }
        } else {
            if self.indexed.remove(id) {
                timers.mark_outbox(TimerKey::outbox(id.as_str()), false);
            }
            // With transactions, its outputs wait for their write here
            // only.
            if self.entities.get(id).is_none_or(|e| e.outputs.is_empty()) {
                self.entities.remove(id);
            }
        }
    }

    /// The outputs not sent yet, out of the pending gauge once the shard
    /// stops.
    pub fn stopped(&mut self) {
        let pending = self
            .entities
            .values()
            .flat_map(|e| e.outputs.iter())
            .filter(|p| p.phase != Phase::Sent)
            .count();
        self.metrics.pending.decrement(pending as f64);
        self.entities.clear();
    }
}

impl<E: Entity> DurableShard<E> {
    /// A record read back from the store: outputs its outbox holds that
    /// this start does not know of are durable, to send (the last owner
    /// may have sent them).
    pub(super) fn stored_outbox(&mut self, id: &EntityId, record: &StateRecord, value: &[u8]) {
        if record.outbox.is_empty() || self.outbox.entities.contains_key(id) {
            return;
        }
        self.outbox.indexed.insert(id.clone());
        self.outbox.ready.push(id.clone());
        self.outbox
            .metrics
            .pending
            .increment(record.outbox.len() as f64);
        self.outbox.entities.insert(
            id.clone(),
            Entry {
                outputs: record
                    .outbox
                    .iter()
                    .map(|output| Pending {
                        output: output.clone(),
                        phase: Phase::Durable,
                    })
                    .collect(),
                record: Some(value.to_vec()),
            },
        );
    }

    /// Reads the records the index named, sends what is durable, and
    /// drops what was sent. True if anything moved.
    pub fn poll_outbox(&mut self, cx: &mut Context<'_>) -> bool {
        let mut progressed = self.poll_find(cx);
        if let Some(sending) = self.outbox.sending.as_mut() {
            if let Poll::Ready((sent, ok)) = sending.as_mut().poll(cx) {
                self.outbox.sending = None;
                progressed = true;
                self.sent(sent, ok);
            }
        }
        progressed |= self.poll_drops(Some(cx));
        if let Some(backoff) = self.outbox.backoff.as_mut() {
            if backoff.as_mut().poll(cx).is_pending() {
                return progressed;
            }
            self.outbox.backoff = None;
        }
        progressed | self.start_send(cx)
    }

    /// Rewrites the records of the entities whose outputs were sent
    /// [`DROP_AFTER`] ago, or all of them (`cx` = `None`: a hand-off). True
    /// if one was.
    pub fn poll_drops(&mut self, cx: Option<&mut Context<'_>>) -> bool {
        let now = tokio::time::Instant::now();
        let mut dropped = false;
        while let Some((at, _, _)) = self.outbox.to_drop.front() {
            if cx.is_some() && *at > now {
                break;
            }
            if let Some((_, id, sent)) = self.outbox.to_drop.pop_front() {
                dropped |= self.drop_sent(&id, &sent);
            }
        }
        let (Some(cx), Some((at, _, _))) = (cx, self.outbox.to_drop.front()) else {
            self.outbox.drop_wake = None;
            return dropped;
        };
        let at = *at;
        let wake = self
            .outbox
            .drop_wake
            .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(at)));
        if wake.deadline() != at {
            wake.as_mut().reset(at);
        }
        if wake.as_mut().poll(cx).is_ready() {
            self.outbox.drop_wake = None;
            cx.waker().wake_by_ref();
        }
        dropped
    }

    fn poll_find(&mut self, cx: &mut Context<'_>) -> bool {
        if self.outbox.finding.is_none() && !self.outbox.to_find.is_empty() {
            let ids = std::mem::take(&mut self.outbox.to_find);
            let (calls, store) = (self.store.calls().clone(), self.store.store());
            let (entity_type, shard) = (self.entity_type.clone(), self.shard);
            self.outbox.finding = Some(Box::pin(async move {
                let asked = ids.clone();
                let read = calls
                    .run(move || {
                        ids.into_iter()
                            .map(|id| {
                                let value = store.load(&entity_type, shard, &id);
                                (id, value.ok().flatten())
                            })
                            .collect::<Vec<_>>()
                    })
                    .await;
                read.unwrap_or_else(|_| asked.into_iter().map(|id| (id, None)).collect())
            }));
        }
        let Some(finding) = self.outbox.finding.as_mut() else {
            return false;
        };
        let Poll::Ready(found) = finding.as_mut().poll(cx) else {
            return false;
        };
        self.outbox.finding = None;
        for (id, value) in found {
            // Changed here since: what this start keeps is newer.
            if self.outbox.entities.contains_key(&id) || self.unwritten(&id).is_some() {
                continue;
            }
            let record = value
                .as_deref()
                .and_then(|value| Some((StateRecord::decode(value).ok()?, value)));
            match record {
                Some((record, value)) if !record.outbox.is_empty() => {
                    let n = record.outbox.len() as u64;
                    self.stored_outbox(&id, &record, value);
                    self.outbox.metrics.resent.increment(n);
                }
                // An entry that outlived its outputs.
                _ => self
                    .timers
                    .mark_outbox(TimerKey::outbox(id.as_str()), false),
            }
        }
        cx.waker().wake_by_ref();
        true
    }

    fn start_send(&mut self, cx: &mut Context<'_>) -> bool {
        let Some(sink) = self.outbox.sink.clone() else {
            return false;
        };
        if self.outbox.sending.is_some() || self.serving_stopped() {
            return false;
        }
        let mut batch: Vec<(EntityId, Vec<Output>)> = Vec::new();
        let mut n = 0;
        let ready = std::mem::take(&mut self.outbox.ready);
        for id in ready {
            let Some(entry) = self.outbox.entities.get_mut(&id) else {
                continue;
            };
            if n >= MOST_PER_SEND {
                self.outbox.ready.push(id);
                continue;
            }
            let mut outputs = Vec::new();
            for pending in &mut entry.outputs {
                if pending.phase == Phase::Durable {
                    pending.phase = Phase::Sending;
                    outputs.push(pending.output.clone());
                    n += 1;
                }
            }
            if !outputs.is_empty() {
                batch.push((id, outputs));
            }
        }
        if batch.is_empty() {
            return false;
        }
        self.outbox.sending = Some(Box::pin(async move {
            let records: Vec<OutputRecord<'_>> = batch
                .iter()
                .flat_map(|(_, outputs)| outputs.iter())
                .map(Into::into)
                .collect();
            let result = sink.send(&records).await;
            if let Err(e) = &result {
                tracing::warn!(outputs = records.len(), error = %e, "emitted records not sent; sent again in a second");
            }
            let ok = result.is_ok();
            drop(records);
            let ids = batch
                .into_iter()
                .map(|(id, outputs)| (id, outputs.into_iter().map(|o| o.id).collect()))
                .collect();
            (ids, ok)
        }));
        cx.waker().wake_by_ref();
        true
    }

    /// A send ended: on success its outputs are dropped from their
    /// entities' records; else they are sent again after [`RETRY`].
    fn sent(&mut self, sent: Vec<(EntityId, Vec<String>)>, ok: bool) {
        let mut count = 0;
        for (id, ids) in sent {
            let Some(entry) = self.outbox.entities.get_mut(&id) else {
                continue;
            };
            for pending in &mut entry.outputs {
                if pending.phase == Phase::Sending && ids.contains(&pending.output.id) {
                    pending.phase = if ok { Phase::Sent } else { Phase::Durable };
                    count += 1;
                }
            }
            if ok {
                let at = tokio::time::Instant::now() + DROP_AFTER;
                self.outbox.to_drop.push_back((at, id, ids));
            } else {
                self.outbox.ready.push(id);
            }
        }
        if ok {
            self.outbox.metrics.sent.increment(count);
            self.outbox.metrics.pending.decrement(count as f64);
        } else {
            self.outbox.metrics.failures.increment(1);
            self.outbox.backoff = Some(Box::pin(tokio::time::sleep(RETRY)));
        }
    }

    /// Drops the entity's sent outputs from its newest record: the one
    /// waiting to be written, rewritten in place, or else its last durable
    /// one, written again under this start's key. Nothing if a change of
    /// the entity dropped those of `sent` since (a busy entity drops each
    /// with its next change). True if it rewrote one.
    fn drop_sent(&mut self, id: &EntityId, sent: &[String]) -> bool {
        let Some(entry) = self.outbox.entities.get(id).filter(|e| {
            e.outputs
                .iter()
                .any(|p| p.phase == Phase::Sent && sent.contains(&p.output.id))
        }) else {
            return false;
        };
        let newest = self.unwritten(id).or(entry.record.as_ref());
        let Some(mut record) = newest.and_then(|value| StateRecord::decode(value).ok()) else {
            return false;
        };
        record.outbox.retain(|o| !entry.is_sent(o));
        if let Some(kept) = self.kept.get_mut(id) {
            kept.outbox.retain(|o| !entry.is_sent(o));
        }
        if record.epoch != self.epoch {
            // Its record is under an earlier start's key: this start's
            // key takes it, and retires that one once durable.
            if !record.earlier.contains(&record.epoch) {
                record.earlier.push(record.epoch);
            }
            record.epoch = self.epoch;
            let earlier: Earlier = record.earlier.iter().copied().collect();
            self.retiring.insert(id.clone(), earlier.clone());
            if let Some(kept) = self.kept.get_mut(id) {
                kept.written = Some(self.epoch);
                kept.earlier = earlier;
            }
        }
        if let Some(entry) = self.outbox.entities.get_mut(id) {
            entry.outputs.retain(|p| p.phase != Phase::Sent);
        }
        self.outbox
            .index(&mut self.timers, id, !record.outbox.is_empty());
        self.dirty.insert(id.clone(), record.encode());
        self.durability.changed(self.seq);
        true
    }

    fn serving_stopped(&self) -> bool {
        self.restoring() || self.broken.is_some()
    }
}
