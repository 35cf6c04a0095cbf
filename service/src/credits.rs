//! Flow control between nodes: a receiving node keeps at most a window of
//! each sender's envelopes in its custody.
//!
//! A message another node accepted must never be refused, and a receiver
//! must never stall a whole link because one shard is slow (every other
//! shard's messages, and the replies, would wait behind it). So a receiver
//! takes every envelope at once, wherever it goes (a shard mailbox, its
//! buffer, an outbound queue), and the envelope carries a [`Credit`] until
//! its handler starts (or it is dropped). A sender that has a window's worth
//! in the receiver's custody waits: a busy receiver slows the sender down,
//! and is never mistaken for a dead one.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use tokio::sync::Notify;

/// Envelopes of one sender a receiver holds at most. Enough to keep a link
/// busy (several batches in flight), small enough that a receiver with a
/// few dozen senders holds a bounded number of messages for a stuck shard.
pub const WINDOW: u64 = 4096;

/// One sender incarnation's credit at one receiver.
#[derive(Debug)]
pub struct Credits {
    window: u64,
    /// Envelopes taken into custody, in all (the sender's count).
    taken: AtomicU64,
    /// Envelopes released from custody, in all.
    released: AtomicU64,
    /// Wakes whoever waits for released credit.
    released_notify: Notify,
    /// The receiver is gone: nobody will release anything any more.
    closed: AtomicBool,
}

/// The receiver is gone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Closed;

impl Credits {
    pub fn new(window: u64) -> Arc<Self> {
        Arc::new(Self {
            window: window.max(1),
            taken: AtomicU64::new(0),
            released: AtomicU64::new(0),
            released_notify: Notify::new(),
            closed: AtomicBool::new(false),
        })
    }

    /// Waits until `n` more envelopes fit in the window (a batch larger
    /// than the window waits for an empty one), then takes them.
    ///
    /// # Errors
    /// The receiver is gone; nothing was taken.
    pub async fn acquire(&self, n: u64) -> Result<(), Closed> {
        let n = n.min(self.window);
        loop {
            let released = self.released_notify.notified();
            tokio::pin!(released);
            released.as_mut().enable();
            if self.closed.load(Ordering::Acquire) {
                return Err(Closed);
            }
            let taken = self.taken.load(Ordering::Acquire);
            let in_custody = taken - self.released.load(Ordering::Acquire).min(taken);
            if in_custody + n <= self.window
                && self
                    .taken
                    .compare_exchange(taken, taken + n, Ordering::AcqRel, Ordering::Acquire)
                    .is_ok()
            {
                return Ok(());
            }
            if in_custody + n <= self.window {
                continue; // another sender took credit meanwhile: look again
            }
            released.await;
        }
    }

    /// Takes `n` without waiting: for a receiver whose sender keeps to the
    /// window on its side of a network link.
    pub fn take(&self, n: u64) {
        self.taken.fetch_add(n, Ordering::AcqRel);
    }

    /// `n` envelopes left custody without a guard (refused, dropped, or
    /// already accepted before).
    pub fn release(&self, n: u64) {
        if n > 0 {
            self.released.fetch_add(n, Ordering::AcqRel);
            self.released_notify.notify_waiters();
        }
    }

    /// The guard of one accepted envelope.
    pub fn guard(self: &Arc<Self>) -> Credit {
        Credit(self.clone())
    }

    /// Released in all, for the sender's account.
    pub fn released(&self) -> u64 {
        self.released.load(Ordering::Acquire)
    }

    /// Waits until more has been released than `seen`.
    ///
    /// # Errors
    /// The receiver is gone: nothing more will be released.
    pub async fn released_since(&self, seen: u64) -> Result<(), Closed> {
        loop {
            let released = self.released_notify.notified();
            tokio::pin!(released);
            released.as_mut().enable();
            if self.closed.load(Ordering::Acquire) {
                return Err(Closed);
            }
            if self.released() > seen {
                return Ok(());
            }
            released.await;
        }
    }

    /// The receiver is gone: waiting senders learn it at once.
    pub fn close(&self) {
        self.closed.store(true, Ordering::Release);
        self.released_notify.notify_waiters();
    }
}

/// One envelope in a receiver's custody: dropping it (the handler started,
/// or the envelope was dropped) returns the credit to its sender.
#[derive(Debug)]
pub struct Credit(Arc<Credits>);

impl Drop for Credit {
    fn drop(&mut self) {
        self.0.release(1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn a_sender_waits_for_credit_and_a_closed_receiver_fails_it() {
        let credits = Credits::new(2);
        credits.acquire(2).await.unwrap();
        let guards = [credits.guard(), credits.guard()];
        let waiting = tokio::spawn({
            let credits = credits.clone();
            async move { credits.acquire(1).await }
        });
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(!waiting.is_finished(), "the window is full");
        drop(guards);
        assert_eq!(waiting.await.unwrap(), Ok(()));
        assert_eq!(credits.released(), 2);
        let blocked = tokio::spawn({
            let credits = credits.clone();
            async move { credits.acquire(2).await }
        });
        tokio::time::sleep(Duration::from_millis(20)).await;
        credits.close();
        assert_eq!(blocked.await.unwrap(), Err(Closed));
    }
}
