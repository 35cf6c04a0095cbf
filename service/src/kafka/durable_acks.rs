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

use crate::store::ShardDurability;
use colo_allocation::ShardId;
use colo_connectors::Ack;
use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Weak};
use std::task::{Context, Poll};

/// The durable write a shard waits for: resolves with the number of its
/// last durable write, and whether the shard has stopped.
type Flushed = Pin<Box<dyn Future<Output = (u64, bool)> + Send + Sync>>;

/// One shard's acks waiting for its writes.
struct ShardAcks {
    shard: ShardId,
    durability: Weak<ShardDurability>,
    /// (write number, ack), in the order handled.
    acks: VecDeque<(u64, Ack)>,
    waiting: Option<Flushed>,
    /// The last write asked for.
    hurried: u64,
}

impl ShardAcks {
    /// Asks for the write the newest acks wait for, once, when many wait.
    fn hurry_if_many(&mut self, hurry_at: usize, durability: &ShardDurability) {
        let Some(&(newest, _)) = self.acks.back() else {
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
pub(super) struct DurableAcks {
    shards: Vec<ShardAcks>,
    /// With this many acks waiting for one shard, it is asked to write
    /// now: half the partition's in-flight bound, so that the write is
    /// durable before the partition stops taking records.
    hurry_at: usize,
    /// A handled record's change will never be written: its shard stopped
    /// first.
    lost: bool,
}

impl DurableAcks {
    /// For a partition of at most `max_in_flight` records in flight.
    pub fn new(max_in_flight: usize) -> Self {
        Self {
            shards: Vec::new(),
            hurry_at: (max_in_flight / 2).max(1),
            lost: false,
        }
    }

    /// Whether a handled record's change was lost (its shard stopped
    /// before writing it), as far as is known without waiting.
    pub fn lost(&mut self) -> bool {
        if !self.lost && !self.is_empty() {
            let mut cx = Context::from_waker(std::task::Waker::noop());
            let _ = self.poll_settled(&mut cx);
        }
        self.lost
    }

    pub fn is_empty(&self) -> bool {
        self.shards.iter().all(|s| s.acks.is_empty())
    }

    /// `ack`'s record changed state in `shard`, which runs here: acked at
    /// once if that is durable already, else once it is. `current` finds
    /// the shard's durability when this start of the shard is not known
    /// here yet. Without one (the shard stopped meanwhile: fenced, or its
    /// hand-off gave up) nobody can say the change was written: the ack is
    /// dropped, and the record consumed again.
    pub fn push(
        &mut self,
        shard: ShardId,
        ack: Ack,
        current: impl FnOnce() -> Option<Arc<ShardDurability>>,
    ) {
        // Each start of a shard numbers its writes anew: its acks wait in
        // an entry of their own, never behind another start's numbers.
        let live = self
            .shards
            .iter()
            .enumerate()
            .find_map(|(at, s)| (s.shard == shard).then(|| Some((at, s.durability.upgrade()?))))
            .flatten();
        let (at, durability) = match live {
            Some(found) => found,
            None => {
                let Some(durability) = current() else {
                    drop(ack);
                    self.lost = true;
                    return;
                };
                self.shards.push(ShardAcks {
                    shard,
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
        entry.acks.push_back((seq, ack));
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
            while entry.acks.front().is_some_and(|(seq, _)| *seq <= flushed) {
                if let Some((_, ack)) = entry.acks.pop_front() {
                    ack.handled();
                }
            }
            if stopped {
                // Dropped unacked: the partition is consumed again.
                self.lost |= !entry.acks.is_empty();
                entry.acks.clear();
                continue;
            }
            if let (Some(&(next, _)), Some(durability)) =
                (entry.acks.front(), entry.durability.upgrade())
            {
                entry.waiting = Some(wait_for(&durability, next));
                entry.hurry_if_many(self.hurry_at, &durability);
            } else if !entry.acks.is_empty() {
                self.lost = true;
                entry.acks.clear();
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
