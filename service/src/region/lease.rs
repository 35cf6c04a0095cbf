//! A region's lease: until when its shards may handle messages.
//!
//! A lease has generations. A shard holds the generation it started under;
//! a fence ends that generation for good, and the region's next answer
//! renews a new one, for shards started from then on. A shard stopped by a
//! fence therefore never handles anything again, even if its region has
//! registered anew by the time it takes its hand-off.
//!
//! The region renews it from its coordinator's answers to heartbeats, and
//! its shards check it before they handle mail. A process that was paused
//! (kill -STOP, a suspended VM) resumes with its tasks in any order, so a
//! shard must not wait for its region's timer to tell it the lease ran out:
//! it reads the clock itself. It reads a coarse monotonic clock (a few
//! nanoseconds, millisecond resolution) at each turn of its task and again
//! before each message starts, since a process paused mid-turn resumes in
//! the middle of its batch.
//!
//! A shard that found its lease run out holds what it is sent, and its
//! unwritten state, until the lease holds again. A late answer can renew
//! it without a fence (the region's fence timer had not fired yet), and
//! then nothing may be sent to the shard again: so the renewal wakes every
//! shard that saw it run out, rather than leaving their held asks to time
//! out.

use std::sync::atomic::{AtomicU64, Ordering};
use std::task::Waker;
use tokio::time::Instant;

/// A region's lease: its current generation.
#[derive(Debug, Default)]
pub(crate) struct Lease {
    current: parking_lot::Mutex<std::sync::Arc<Generation>>,
}

impl Lease {
    /// The generation shards started now run under.
    pub fn current(&self) -> std::sync::Arc<Generation> {
        self.current.lock().clone()
    }

    /// The coordinator answered: the current generation holds until
    /// `valid_until`, and nothing of it may run past `hard_until`.
    pub fn renew(&self, valid_until: Instant, hard_until: Instant) {
        self.current.lock().renew(valid_until, hard_until);
    }

    /// A fence: the current generation ends (its hard deadline stays), and
    /// a new one waits for the next answer.
    pub fn fence(&self) {
        let mut current = self.current.lock();
        current.revoke();
        *current = std::sync::Arc::default();
    }
}

/// Until when the shards of one lease generation may handle messages, and
/// until when anything of them may run at all.
#[derive(Debug, Default)]
pub(crate) struct Generation {
    /// In coarse clock ticks; 0: never (not registered yet, or fenced).
    valid_until: AtomicU64,
    /// In coarse clock ticks: when the coordinator may start the shards
    /// elsewhere. A stop message of a fenced region must end before it.
    hard_until: AtomicU64,
    /// The shards that found it run out, woken when it is renewed.
    waiting: parking_lot::Mutex<Vec<Waker>>,
}

/// A runtime instant as coarse clock ticks.
///
/// The runtime clock can be paused in tests while the coarse clock cannot,
/// so an instant is carried over as "the same time from now" on the coarse
/// clock; with a running clock both are the same.
fn to_ticks(at: Instant) -> u64 {
    let left = coarsetime::Duration::from(at.saturating_duration_since(Instant::now()));
    (coarsetime::Instant::now() + left).as_ticks().max(1)
}

impl Generation {
    /// Shards may handle messages until `valid_until`, and nothing of
    /// them may run past `hard_until`.
    fn renew(&self, valid_until: Instant, hard_until: Instant) {
        self.hard_until
            .store(to_ticks(hard_until), Ordering::Release);
        self.valid_until
            .store(to_ticks(valid_until), Ordering::Release);
        self.wake_waiting();
    }

    /// Ends the generation now; the hard deadline stays. The shards that
    /// wait for it are woken to see that it ended.
    fn revoke(&self) {
        self.valid_until.store(0, Ordering::Release);
        self.wake_waiting();
    }

    fn wake_waiting(&self) {
        let waiting = std::mem::take(&mut *self.waiting.lock());
        for waker in waiting {
            waker.wake();
        }
    }

    /// Whether shards may handle messages now.
    pub fn is_valid(&self) -> bool {
        coarsetime::Instant::now().as_ticks() < self.valid_until.load(Ordering::Acquire)
    }

    /// Whether shards may handle messages now; if not, `waker` is woken
    /// when the generation is renewed or ends.
    pub fn is_valid_or_wake(&self, waker: &Waker) -> bool {
        if self.is_valid() {
            return true;
        }
        {
            let mut waiting = self.waiting.lock();
            if !waiting.iter().any(|w| w.will_wake(waker)) {
                waiting.push(waker.clone());
            }
        }
        // Renewed between the first look and the registration: its wake
        // may have gone before this waker was there.
        self.is_valid()
    }

    /// Whether even a stop message is too late: the coordinator may have
    /// started the shards elsewhere.
    pub fn past_hard_deadline(&self) -> bool {
        coarsetime::Instant::now().as_ticks() >= self.hard_until.load(Ordering::Acquire)
    }

    /// The last instant anything of a fenced region's shards may run; now
    /// when there never was a lease.
    pub fn hard_deadline(&self) -> Instant {
        let hard = self.hard_until.load(Ordering::Acquire);
        let now = coarsetime::Instant::now().as_ticks();
        let left = coarsetime::Duration::from_ticks(hard.saturating_sub(now));
        Instant::now() + std::time::Duration::from(left)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn a_lease_holds_until_its_deadline_and_a_fence_ends_it_for_good() {
        let lease = Lease::default();
        let first = lease.current();
        assert!(!first.is_valid(), "no lease before the first answer");
        let hour = Instant::now() + Duration::from_secs(3600);
        lease.renew(Instant::now() + Duration::from_secs(60), hour);
        assert!(first.is_valid());
        lease.fence();
        assert!(!first.is_valid());
        assert!(first.hard_deadline() > Instant::now() + Duration::from_secs(3000));
        // Answers after the fence renew a new generation, not the old one.
        lease.renew(Instant::now() + Duration::from_secs(60), hour);
        assert!(!first.is_valid());
        let second = lease.current();
        assert!(second.is_valid());
        lease.renew(Instant::now() + Duration::from_millis(30), hour);
        std::thread::sleep(Duration::from_millis(60));
        assert!(
            !second.is_valid(),
            "the coarse clock runs while nobody looks"
        );
    }

    #[tokio::test]
    async fn a_shard_that_found_its_lease_run_out_is_woken_when_it_is_renewed() {
        let lease = Lease::default();
        let generation = lease.current();
        let hour = Instant::now() + Duration::from_secs(3600);
        // A shard that looks while the lease has run out waits, and is
        // woken by the renewal alone: nothing else is sent to it.
        let waiting = {
            let generation = generation.clone();
            tokio::spawn(std::future::poll_fn(move |cx| {
                if generation.is_valid_or_wake(cx.waker()) {
                    std::task::Poll::Ready(())
                } else {
                    std::task::Poll::Pending
                }
            }))
        };
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished());
        lease.renew(Instant::now() + Duration::from_secs(60), hour);
        tokio::time::timeout(Duration::from_secs(10), waiting)
            .await
            .expect("the renewal woke the shard")
            .expect("the shard's task ran");
        assert!(
            generation.waiting.lock().is_empty(),
            "woken wakers are let go"
        );
    }
}
