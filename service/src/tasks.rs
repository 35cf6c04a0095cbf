//! A task set: every task a component starts, so that stopping the
//! component stops them all (a node that dies must leave nothing running
//! behind, or a "dead" node would keep serving).

use parking_lot::Mutex;
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use tokio::task::JoinSet;

/// Tasks started by one component, aborted together.
#[derive(Default)]
pub struct TaskSet {
    set: Mutex<JoinSet<()>>,
    /// Set once the set is aborted: a task spawned after that (say, a region
    /// restarting a shard while it is being aborted) is never started.
    closed: AtomicBool,
}

impl std::fmt::Debug for TaskSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TaskSet")
            .field("closed", &self.closed.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

impl TaskSet {
    /// Starts `task` in this set; does nothing once the set is aborted.
    pub fn spawn(&self, task: impl Future<Output = ()> + Send + 'static) {
        let mut set = self.set.lock();
        if self.closed.load(Ordering::Acquire) {
            return;
        }
        // Finished tasks keep a slot until joined: reap them here, so the
        // set holds only what still runs.
        while set.try_join_next().is_some() {}
        set.spawn(task);
    }

    /// Aborts every task and waits until they are gone; later spawns are
    /// refused.
    pub async fn abort_all(&self) {
        self.closed.store(true, Ordering::Release);
        let mut set = std::mem::take(&mut *self.set.lock());
        set.abort_all();
        while set.join_next().await.is_some() {}
    }

    /// Aborts every task without waiting (for `Drop`).
    pub fn abort_now(&self) {
        self.closed.store(true, Ordering::Release);
        self.set.lock().abort_all();
    }

    /// Tasks still running.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        let mut set = self.set.lock();
        while set.try_join_next().is_some() {}
        set.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn aborted_sets_stop_their_tasks_and_refuse_new_ones() {
        let tasks = TaskSet::default();
        tasks.spawn(std::future::pending());
        tasks.spawn(async {});
        tokio::task::yield_now().await;
        assert_eq!(tasks.len(), 1);
        tasks.abort_all().await;
        assert_eq!(tasks.len(), 0);
        tasks.spawn(std::future::pending());
        assert_eq!(tasks.len(), 0, "spawn after abort is refused");
    }
}
