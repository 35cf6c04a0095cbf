//! Handled records of a durable entity type, waiting for the state they
//! changed to be written before they are acked (and their offsets may be
//! committed).
//!
//! A record's change goes into the write its shard numbers next; the
//! record is acked once that write is durable ([`ShardDurability`]). All
//! records handled between two writes wait for the same number, so the
//! partition keeps them in order and one wait per shard, not one per
//! record: a record costs a queue push, and a write acks them all at once.
//! If the shard stops before its write (its node fenced, a hand-off that
//! gave up), the acks are dropped and the loss noted: the partition is
//! then consumed again from its committed offset, here or by its next
//! owner, and each entity skips what it had made durable.

use super::slots::Prehashed;
use super::SourceAck;
use crate::durability::ShardDurability;
use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Weak};
use std::task::{Context, Poll};

/// The durable write a shard waits for: resolves with the number of its
/// last durable write, and whether the shard has stopped.
type Flushed = Pin<Box<dyn Future<Output = (u64, bool)> + Send + Sync>>;

/// One shard's acks waiting for its writes.
struct ShardAcks<A> {
    durability: Weak<ShardDurability>,
    /// (write number, ack, its key's hash), in the order handled.
    acks: VecDeque<(u64, A, Option<u64>)>,
    waiting: Option<Flushed>,
    /// The last write asked for.
    hurried: u64,
}

impl<A> ShardAcks<A> {
    /// Asks for the write the newest acks wait for, once, when many wait.
    fn hurry_if_many(&mut self, hurry_at: usize, durability: &ShardDurability) {
        let Some(&(newest, _, _)) = self.acks.back() else {
            return;
        };
        if self.acks.len() >= hurry_at && newest > self.hurried {
            self.hurried = newest;
            durability.hurry();
        }
    }
}

/// Every shard's acks waiting in one partition (usually one shard: the
/// partition's own).
pub(crate) struct DurableAcks<A> {
    shards: Vec<ShardAcks<A>>,
    /// With this many acks waiting for one shard, it is asked to write
    /// now: half of what the partition may hold waiting to be durable, so
    /// that the write is durable before the partition stops taking
    /// records. Below it, the shard writes at its flush interval.
    hurry_at: usize,
    /// A handled record's change will never be written: its shard stopped
    /// first.
    lost: bool,
    /// Per key (by hash) with a record waiting here, the offset of its
    /// newest: a later record of the key must find it in its entity's
    /// state (`Origin::previous`).
    /// Keyed by the hash itself: no hashing again at each record.
    pending: HashMap<u64, i64, Prehashed>,
}

/// Forgets a key's pending record once it is settled, unless a newer one
/// of the key waits.
fn settled_key(pending: &mut HashMap<u64, i64, Prehashed>, key: Option<u64>, offset: i64) {
    if let Some(key) = key {
        if pending.get(&key) == Some(&offset) {
            pending.remove(&key);
        }
    }
}

impl<A: SourceAck> DurableAcks<A> {
    /// For a partition whose source holds at most `awaiting` of its
    /// records waiting to be durable.
    pub fn new(awaiting: usize) -> Self {
        Self {
            shards: Vec::new(),
            hurry_at: (awaiting / 2).max(1),
            lost: false,
            pending: HashMap::default(),
        }
    }

    /// The offset of the newest record of the key (by hash) whose change
    /// waits to be durable here, if one does.
    pub fn pending(&self, key: u64) -> Option<i64> {
        self.pending.get(&key).copied()
    }

    /// Whether a handled record's change was lost (its shard stopped
    /// before writing it), as far as is known without waiting.
    ///
    /// Asked before every record is routed: only a shard whose start has
    /// ended can lose a change, so its waits are polled only then, not at
    /// every record (polling them cost as much as routing one).
    pub fn lost(&mut self) -> bool {
        let ended = |s: &ShardAcks<A>| !s.acks.is_empty() && s.durability.strong_count() == 0;
        if !self.lost && self.shards.iter().any(ended) {
            let mut cx = Context::from_waker(std::task::Waker::noop());
            let _ = self.poll_settled(&mut cx);
        }
        self.lost
    }

    pub fn is_empty(&self) -> bool {
        self.shards.iter().all(|s| s.acks.is_empty())
    }

    /// Handled records waiting for their write.
    pub fn len(&self) -> usize {
        self.shards.iter().map(|s| s.acks.len()).sum()
    }

    /// The offset of the oldest of them.
    pub fn oldest(&self) -> Option<i64> {
        self.shards
            .iter()
            .filter_map(|s| s.acks.front().map(|(_, ack, _)| ack.offset()))
            .min()
    }

    /// `ack`'s record changed state in its shard: acked at once if that is
    /// durable already, else once it is. `start` is the start of the shard
    /// that handled it, as its answer named it; a record is settled in
    /// offset order, maybe long after it was handled, and only that start
    /// can write its change: if it has ended (fenced, or its hand-off gave
    /// up), even with the shard started here again since, nobody can say
    /// the change was written, and the ack is dropped, the record consumed
    /// again (as it is when the answer named no start, which a durable
    /// shard's never does). `key`: its key's hash (see [`Self::pending`]).
    pub fn push(&mut self, mut ack: A, key: Option<u64>, start: Option<Weak<ShardDurability>>) {
        let Some(handler) = start.and_then(|start| start.upgrade()) else {
            drop(ack);
            self.lost = true;
            return;
        };
        // Each start of a shard numbers its writes anew: its acks wait in
        // an entry of their own, never behind another start's numbers.
        let live = self.shards.iter().enumerate().find_map(|(at, s)| {
            let durability = s.durability.upgrade()?;
            Arc::ptr_eq(&durability, &handler).then_some((at, durability))
        });
        let (at, durability) = match live {
            Some(found) => found,
            None => {
                let durability = handler;
                self.shards.push(ShardAcks {
                    durability: Arc::downgrade(&durability),
                    acks: VecDeque::new(),
                    waiting: None,
                    hurried: 0,
                });
                (self.shards.len() - 1, durability)
            }
        };
        let seq = durability.changed_seq();
        let entry = &mut self.shards[at];
        if entry.acks.is_empty() && durability.flushed_seq() >= seq {
            return ack.handled();
        }
        if let Some(key) = key {
            self.pending.insert(key, ack.offset());
        }
        // Applied: it waits for the write here, off the partition's
        // in-flight bound.
        ack.applied();
        entry.acks.push_back((seq, ack, key));
        entry.hurry_if_many(self.hurry_at, &durability);
        if entry.waiting.is_none() {
            entry.waiting = Some(wait_for(&durability, seq));
        }
    }

    /// Acks what became durable; drops what its shard will never write.
    /// Ready once something was settled.
    pub fn poll_settled(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        let mut settled = false;
        for entry in &mut self.shards {
            let Some(waiting) = entry.waiting.as_mut() else {
                continue;
            };
            let Poll::Ready((flushed, stopped)) = waiting.as_mut().poll(cx) else {
                continue;
            };
            entry.waiting = None;
            settled = true;
            while entry
                .acks
                .front()
                .is_some_and(|(seq, _, _)| *seq <= flushed)
            {
                if let Some((_, ack, key)) = entry.acks.pop_front() {
                    settled_key(&mut self.pending, key, ack.offset());
                    ack.handled();
                }
            }
            if stopped {
                // Dropped unacked: the partition is consumed again.
                self.lost |= !entry.acks.is_empty();
                for (_, ack, key) in entry.acks.drain(..) {
                    settled_key(&mut self.pending, key, ack.offset());
                }
                continue;
            }
            if let (Some(&(next, _, _)), Some(durability)) =
                (entry.acks.front(), entry.durability.upgrade())
            {
                entry.waiting = Some(wait_for(&durability, next));
                entry.hurry_if_many(self.hurry_at, &durability);
            } else if !entry.acks.is_empty() {
                self.lost = true;
                for (_, ack, key) in entry.acks.drain(..) {
                    settled_key(&mut self.pending, key, ack.offset());
                }
            }
        }
        self.shards
            .retain(|s| !s.acks.is_empty() || s.durability.strong_count() > 0);
        if settled {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    }
}

/// Waits until write `seq` of the shard is durable, or the shard stops.
fn wait_for(durability: &ShardDurability, seq: u64) -> Flushed {
    let mut flushed = durability.subscribe();
    Box::pin(async move {
        let done = flushed.wait_for(|f| *f >= seq).await.is_ok();
        let last = *flushed.borrow();
        (last, !done && last < seq)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An ack that only knows its offset.
    struct Detached;

    impl SourceAck for Detached {
        fn offset(&self) -> i64 {
            0
        }
        fn applied(&mut self) {}
        fn handled(self) {}
    }

    /// A record handled by one start of its shard, whose change that start
    /// never wrote (it was fenced), settles after the shard started again
    /// on the same node: the new start has nothing unwritten, but the
    /// record's change is not in it. The record is consumed again, not
    /// acked.
    #[test]
    fn a_record_whose_start_ended_unwritten_is_not_acked_against_the_next_start() {
        let mut acks = DurableAcks::new(100);
        let first = Arc::new(ShardDurability::new(true));
        first.changed(1);
        let handled_by = Arc::downgrade(&first);
        drop(first);
        // The shard started again here, with nothing unwritten.
        let _second = Arc::new(ShardDurability::new(true));
        acks.push(Detached, None, Some(handled_by));
        assert!(acks.lost(), "consumed again from the committed offset");
    }

    /// The start that handled a waiting record ends before writing it: the
    /// next look before routing a record sees the loss, without a poll of
    /// the partition's task in between.
    #[test]
    fn a_start_that_ends_with_records_waiting_is_seen_as_lost() {
        let mut acks = DurableAcks::new(100);
        let start = Arc::new(ShardDurability::new(true));
        start.changed(1);
        acks.push(Detached, Some(7), Some(Arc::downgrade(&start)));
        assert!(!acks.lost(), "its start still runs");
        drop(start);
        assert!(acks.lost(), "consumed again from the committed offset");
        assert_eq!(acks.pending(7), None, "the key waits for nothing now");
    }

    /// The same start still runs: the record waits for its write, then is
    /// acked.
    #[test]
    fn a_record_waits_for_the_write_of_the_start_that_handled_it() {
        let mut acks = DurableAcks::new(100);
        let start = Arc::new(ShardDurability::new(true));
        start.changed(1);
        acks.push(Detached, Some(7), Some(Arc::downgrade(&start)));
        assert_eq!(acks.pending(7), Some(0), "key 7's record waits");
        assert_eq!(acks.len(), 1, "waits for write 1");
        start.flushed(1);
        let mut cx = Context::from_waker(std::task::Waker::noop());
        assert!(acks.poll_settled(&mut cx).is_ready());
        assert!(acks.is_empty() && !acks.lost());
        assert_eq!(acks.pending(7), None);
    }
}
