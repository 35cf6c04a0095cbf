//! A bounded, single-consumer mailbox for shards and outbound queues.
//!
//! Built on a locked `VecDeque` rather than a channel because its consumer
//! takes everything queued in one step (one lock per batch, not per message)
//! and is woken only when the mailbox goes from empty to non-empty: with a
//! thousand shards fed round-robin, that halves the cost of a tell compared
//! with a tokio channel per shard (see BENCHMARKS.md). Closing is explicit:
//! the region closes a mailbox when it stops routing to it.
//!
//! The consumer can be polled ([`Mailbox::poll_recv_all`]), so a shard that
//! also drives its entities' handlers waits on both in one poll loop.

use futures::task::AtomicWaker;
use parking_lot::Mutex;
use std::collections::VecDeque;
use std::sync::Arc;
use std::task::{Context, Poll};
use tokio::sync::Notify;

/// Why an item was not queued; the item comes back.
#[derive(Debug)]
pub(crate) enum PushError<T> {
    /// At capacity: wait with [`Mailbox::wait_for_space`] and try again.
    Full(T),
    /// Closed: route the item elsewhere.
    Closed(T),
}

struct State<T> {
    queue: VecDeque<T>,
    closed: bool,
}

pub(crate) struct Mailbox<T> {
    state: Mutex<State<T>>,
    /// Wakes the one consumer. It registers before it looks at the queue
    /// again, so a push between its check and its wait is never missed.
    ready: AtomicWaker,
    /// Wakes senders waiting for room.
    space: Notify,
    capacity: usize,
}

impl<T> Mailbox<T> {
    pub fn new(capacity: usize) -> Self {
        Self {
            state: Mutex::new(State {
                queue: VecDeque::new(),
                closed: false,
            }),
            ready: AtomicWaker::new(),
            space: Notify::new(),
            capacity: capacity.max(1),
        }
    }

    /// Queues an item if there is room.
    pub fn try_push(&self, item: T) -> Result<(), PushError<T>> {
        let state = self.state.lock();
        if state.closed {
            return Err(PushError::Closed(item));
        }
        if state.queue.len() >= self.capacity {
            return Err(PushError::Full(item));
        }
        self.push_locked(state, item);
        Ok(())
    }

    /// Queues an item whatever the length: for a flushed buffer (itself
    /// bounded by `buffer_size`) and for control items, which must never
    /// wait behind senders.
    pub fn push(&self, item: T) -> Result<(), T> {
        let state = self.state.lock();
        if state.closed {
            return Err(item);
        }
        self.push_locked(state, item);
        Ok(())
    }

    fn push_locked(&self, mut state: parking_lot::MutexGuard<'_, State<T>>, item: T) {
        let wake = state.queue.is_empty();
        state.queue.push_back(item);
        drop(state);
        if wake {
            self.ready.wake();
        }
    }

    /// Returns once there is room or the mailbox is closed.
    pub async fn wait_for_space(&self) {
        loop {
            let notified = self.space.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            {
                let state = self.state.lock();
                if state.closed || state.queue.len() < self.capacity {
                    return;
                }
            }
            notified.await;
        }
    }

    /// Moves everything queued into `into` (which the caller has emptied);
    /// waits while nothing is queued. `false` once closed and empty.
    pub async fn recv_all(&self, into: &mut VecDeque<T>) -> bool {
        std::future::poll_fn(|cx| self.poll_recv_all(into, cx)).await
    }

    /// [`Self::recv_all`] as a poll: `Ready(true)` with items moved into
    /// `into`, `Ready(false)` once closed and empty, `Pending` (the task is
    /// woken by the next push or the close) otherwise. One consumer only.
    pub fn poll_recv_all(&self, into: &mut VecDeque<T>, cx: &mut Context<'_>) -> Poll<bool> {
        if let Some(ready) = self.try_take(into) {
            return Poll::Ready(ready);
        }
        self.ready.register(cx.waker());
        // Again after registering: a push in between woke nobody.
        match self.try_take(into) {
            Some(ready) => Poll::Ready(ready),
            None => Poll::Pending,
        }
    }

    fn try_take(&self, into: &mut VecDeque<T>) -> Option<bool> {
        let mut state = self.state.lock();
        if !state.queue.is_empty() {
            std::mem::swap(into, &mut state.queue);
            drop(state);
            if into.len() >= self.capacity {
                self.space.notify_waiters();
            }
            return Some(true);
        }
        state.closed.then_some(false)
    }

    /// Refuses every later push; the consumer still gets what is queued.
    pub fn close(&self) {
        self.state.lock().closed = true;
        self.ready.wake();
        self.space.notify_waiters();
    }

    /// Closes and takes what is still queued (the consumer is stopping).
    pub fn close_and_drain(&self) -> VecDeque<T> {
        let mut state = self.state.lock();
        state.closed = true;
        let rest = std::mem::take(&mut state.queue);
        drop(state);
        self.space.notify_waiters();
        rest
    }

    pub fn is_closed(&self) -> bool {
        self.state.lock().closed
    }
}

/// The consuming end. Dropping it (the consumer finished, or its task was
/// aborted with its node) closes the mailbox, so that no sender waits for
/// room that will never come.
pub(crate) struct Consumer<T>(pub Arc<Mailbox<T>>);

impl<T> Drop for Consumer<T> {
    fn drop(&mut self) {
        self.0.close();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn batches_bounds_and_close() {
        let m = Mailbox::new(2);
        m.try_push(1).unwrap();
        m.try_push(2).unwrap();
        assert!(matches!(m.try_push(3), Err(PushError::Full(3))));
        m.push(3).unwrap(); // control items pass the bound
        let mut got = VecDeque::new();
        assert!(m.recv_all(&mut got).await);
        assert_eq!(got, [1, 2, 3]);
        m.try_push(4).unwrap();
        m.close();
        assert!(matches!(m.try_push(5), Err(PushError::Closed(5))));
        got.clear();
        assert!(m.recv_all(&mut got).await);
        assert_eq!(got, [4]);
        got.clear();
        assert!(!m.recv_all(&mut got).await);
    }

    #[tokio::test]
    async fn waiting_sender_and_consumer_are_woken() {
        let m = Arc::new(Mailbox::new(1));
        m.try_push(1).unwrap();
        let sender = tokio::spawn({
            let m = m.clone();
            async move {
                m.wait_for_space().await;
                m.try_push(2).unwrap();
            }
        });
        let mut got = VecDeque::new();
        assert!(m.recv_all(&mut got).await);
        sender.await.unwrap();
        got.clear();
        assert!(m.recv_all(&mut got).await);
        assert_eq!(got, [2]);
        let consumer = tokio::spawn({
            let m = m.clone();
            async move {
                let mut got = VecDeque::new();
                m.recv_all(&mut got).await;
                got
            }
        });
        tokio::task::yield_now().await;
        m.try_push(3).unwrap();
        assert_eq!(consumer.await.unwrap(), [3]);
    }
}
