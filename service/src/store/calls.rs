//! The threads a node's store calls run on: a fixed number per kind of
//! call, started with the store and ended with it.
//!
//! Every store call blocks on disk, so none runs on a runtime thread. Nor
//! on the runtime's blocking pool: that pool starts a thread whenever none
//! is idle at the instant of a call, up to 512, and keeps it ten seconds;
//! a burst of entities that start at once (each read from the store) took
//! it to hundreds of threads, each with its own allocator heap (measured:
//! 517 threads and 500 MiB resident for 20,000 counters started at once,
//! 224 threads with the calls limited by a semaphore, `benches/memory.rs`).
//! Here the calls queue, and a fixed set of threads takes them in turn.

use parking_lot::Mutex;
use std::panic::AssertUnwindSafe;
use std::sync::mpsc;
use std::sync::Arc;
use tokio::sync::oneshot;

type Job = Box<dyn FnOnce() + Send>;

/// A kind of store call's threads; clones share them, and they end once
/// every clone is dropped.
#[derive(Debug, Clone)]
pub(crate) struct StoreCalls(mpsc::Sender<Job>);

impl StoreCalls {
    /// `threads` threads named `name`.
    ///
    /// # Panics
    /// The system refuses a thread (at the node's start, as a runtime
    /// that cannot start its workers does).
    pub fn new(name: &str, threads: usize) -> Self {
        let (jobs, queue) = mpsc::channel::<Job>();
        let queue = Arc::new(Mutex::new(queue));
        for _ in 0..threads.max(1) {
            let queue = queue.clone();
            std::thread::Builder::new()
                .name(name.to_string())
                .spawn(move || loop {
                    // One thread waits for the next call; the others wait
                    // for the lock.
                    let job = queue.lock().recv();
                    let Ok(job) = job else {
                        return;
                    };
                    // A call that panics fails alone (its caller learns
                    // it), not the thread.
                    let _ = std::panic::catch_unwind(AssertUnwindSafe(job));
                })
                .expect("a thread for the node's store calls");
        }
        Self(jobs)
    }

    /// Runs `call` on one of the threads, once one is free. It runs to its
    /// end even if the caller stops waiting.
    ///
    /// # Errors
    /// The call panicked.
    pub async fn run<T: Send + 'static>(
        &self,
        call: impl FnOnce() -> T + Send + 'static,
    ) -> Result<T, String> {
        let (done, result) = oneshot::channel();
        let job: Job = Box::new(move || {
            let _ = done.send(call());
        });
        self.0
            .send(job)
            .map_err(|_| "the node's state store is closed".to_string())?;
        result
            .await
            .map_err(|_| "a state store call failed (its thread panicked)".to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[tokio::test]
    async fn calls_run_on_the_fixed_threads_and_a_panic_fails_only_its_call() {
        let calls = StoreCalls::new("colo-test-calls", 2);
        let running = Arc::new(AtomicUsize::new(0));
        let most = Arc::new(AtomicUsize::new(0));
        let all: Vec<_> = (0..20)
            .map(|i| {
                let (calls, running, most) = (calls.clone(), running.clone(), most.clone());
                tokio::spawn(async move {
                    calls
                        .run(move || {
                            let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                            most.fetch_max(now, Ordering::SeqCst);
                            std::thread::sleep(std::time::Duration::from_millis(5));
                            running.fetch_sub(1, Ordering::SeqCst);
                            let name = std::thread::current().name().map(str::to_string);
                            (i, name)
                        })
                        .await
                })
            })
            .collect();
        for call in all {
            let (_, name) = call.await.expect("task").expect("call");
            assert_eq!(name.as_deref(), Some("colo-test-calls"));
        }
        assert!(most.load(Ordering::SeqCst) <= 2, "at most two at once");
        let failed = calls.run(|| panic!("a bug in a store")).await;
        assert!(failed.is_err(), "{failed:?}");
        let after = calls.run(|| 7).await;
        assert_eq!(after, Ok(7), "the threads go on after a panic");
    }
}
