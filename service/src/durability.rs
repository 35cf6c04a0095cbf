//! How far a shard's changes are durable: what a shard's writer moves on,
//! and what those who must wait for a change to be durable (a Kafka
//! partition before it commits, an ask before it is answered) look at.
//! Apart from the store, which writes, so that the messages carrying it
//! to its waiters need nothing else of the store.

use futures::task::AtomicWaker;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::task::Waker;
use tokio::sync::watch;

/// How far a shard's changes are durable, for those who must wait for it
/// (a Kafka partition commits a record's offset only once the change the
/// record made is durable).
///
/// Changes are numbered by the write they go into: `changed` is the
/// number of the last write that took a change, `flushed` the last write
/// that is durable. A change made before a reader looks at `changed` is
/// durable once `flushed` reaches what it saw.
#[derive(Debug)]
pub(crate) struct ShardDurability {
    changed: AtomicU64,
    flushed: watch::Sender<u64>,
    /// Its state is restored: its entities may run, its records be
    /// consumed.
    restored: watch::Sender<bool>,
    /// A waiter cannot go on until the next write: the shard writes now
    /// rather than at its flush interval.
    hurry: AtomicBool,
    /// The shard task, woken when hurried.
    shard: AtomicWaker,
    /// A source's committed offset moved since the shard last looked: its
    /// deleted entities may be removed now.
    commits: AtomicBool,
}

impl ShardDurability {
    pub fn new(restored: bool) -> Self {
        Self {
            changed: AtomicU64::new(0),
            flushed: watch::Sender::new(0),
            restored: watch::Sender::new(restored),
            hurry: AtomicBool::new(false),
            shard: AtomicWaker::new(),
            commits: AtomicBool::new(false),
        }
    }

    /// A committed offset moved: the shard task is woken to look.
    pub fn commits_moved(&self) {
        self.commits.store(true, Ordering::Release);
        self.shard.wake();
    }

    /// Whether a committed offset moved since the last call.
    pub fn take_commits_moved(&self) -> bool {
        self.commits.swap(false, Ordering::AcqRel)
    }

    /// Asks for the next write now: a Kafka partition whose records wait
    /// for it would otherwise reach its bound of records waiting to be
    /// durable and stop taking records until the flush interval.
    pub fn hurry(&self) {
        self.hurry.store(true, Ordering::Release);
        self.shard.wake();
    }

    /// The shard task (`waker`) is woken at the next ask for a write or the
    /// next committed offset that moves, whatever it decides now: a look
    /// that finds nothing to do must still be told of what comes after it.
    pub fn wake_on_news(&self, waker: &Waker) {
        self.shard.register(waker);
    }

    /// Whether a write was asked for since the last call (the shard task
    /// registered with [`Self::wake_on_news`] is woken at the next ask).
    pub fn hurried(&self) -> bool {
        self.hurry.swap(false, Ordering::AcqRel)
    }

    /// Its state is restored.
    pub fn restored(&self) {
        self.restored.send_replace(true);
    }

    /// Whether its state is restored, and how that moves.
    pub fn watch_restored(&self) -> watch::Receiver<bool> {
        self.restored.subscribe()
    }

    /// Whether its state is restored now.
    pub fn is_restored(&self) -> bool {
        *self.restored.borrow()
    }

    /// A change went into write `seq`.
    pub fn changed(&self, seq: u64) {
        self.changed.fetch_max(seq, Ordering::AcqRel);
    }

    /// Write `seq` is durable.
    pub fn flushed(&self, seq: u64) {
        self.flushed.send_if_modified(|f| {
            let newer = seq > *f;
            if newer {
                *f = seq;
            }
            newer
        });
    }

    /// The number of the last write that took a change.
    pub fn changed_seq(&self) -> u64 {
        self.changed.load(Ordering::Acquire)
    }

    /// The number of the last durable write.
    pub fn flushed_seq(&self) -> u64 {
        *self.flushed.borrow()
    }

    /// The number of the last durable write, and how it moves.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.flushed.subscribe()
    }
}
