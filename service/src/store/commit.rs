//! Group commit: the state writes of a node's shards that arrive while one
//! commit is being made durable wait, and go together in the next one: one
//! sync to disk for all of them instead of one each. A node of 1,000
//! shards writing every 100 ms would otherwise ask its disk for 10,000
//! syncs a second, and its shards' writes would queue behind each other's.
//!
//! Commits run one at a time on a thread of their own. Each write queues
//! its batch and a commit job; a job takes every batch waiting when it
//! runs, so the jobs queued behind a running commit find their batches in
//! the next one, and those left empty do nothing.

use super::StoreCalls;
use colo_state::{StateStore, WriteBatch};
use parking_lot::Mutex;
use std::sync::Arc;
use tokio::sync::oneshot;

/// A write's outcome: the reason it failed.
type Outcome = Result<(), String>;

/// Writes not taken into a commit yet.
type Waiting = Arc<Mutex<Vec<(WriteBatch, oneshot::Sender<Outcome>)>>>;

#[derive(Debug)]
pub(crate) struct GroupCommit {
    waiting: Waiting,
    /// The one thread commits run on, in turn.
    thread: StoreCalls,
}

impl Default for GroupCommit {
    fn default() -> Self {
        Self {
            waiting: Waiting::default(),
            thread: StoreCalls::new("colo-commit", 1),
        }
    }
}

impl GroupCommit {
    /// Writes `batch` durably with whatever other writes wait when its
    /// commit runs.
    ///
    /// # Errors
    /// The commit failed (none of its writes is durable), or its thread
    /// did.
    pub async fn write(&self, store: &Arc<dyn StateStore>, batch: WriteBatch) -> Outcome {
        let (done, outcome) = oneshot::channel();
        self.waiting.lock().push((batch, done));
        let (waiting, store) = (self.waiting.clone(), store.clone());
        // Answered from the commit's thread: every writer learns its
        // outcome even if the one whose job commits stops waiting.
        let _ = self
            .thread
            .run(move || {
                let taken = std::mem::take(&mut *waiting.lock());
                if taken.is_empty() {
                    return;
                }
                let (batches, dones): (Vec<_>, Vec<_>) = taken.into_iter().unzip();
                let written = store.write_all(&batches).map_err(|e| e.to_string());
                for done in dones {
                    let _ = done.send(written.clone());
                }
            })
            .await;
        // This write's batch went in this job's commit or an earlier one.
        outcome
            .await
            .unwrap_or_else(|_| Err("the state store's commit thread failed".to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use colo_allocation::ShardId;
    use colo_state::{Checkpoint, StoreError};
    use std::ops::ControlFlow;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// Counts commits; each takes a while, as a sync to disk does.
    #[derive(Debug, Default)]
    struct Counting {
        commits: AtomicUsize,
        batches: AtomicUsize,
    }

    impl StateStore for Counting {
        fn write_all(&self, batches: &[WriteBatch]) -> Result<(), StoreError> {
            std::thread::sleep(std::time::Duration::from_millis(20));
            self.commits.fetch_add(1, Ordering::SeqCst);
            self.batches.fetch_add(batches.len(), Ordering::SeqCst);
            Ok(())
        }
        fn load(&self, _: &str, _: ShardId, _: &str) -> Result<Option<Vec<u8>>, StoreError> {
            Ok(None)
        }
        fn scan(
            &self,
            _: &str,
            _: ShardId,
            _: &mut dyn FnMut(&str, &[u8]) -> ControlFlow<()>,
        ) -> Result<(), StoreError> {
            Ok(())
        }
        fn timers(
            &self,
            _: &str,
            _: ShardId,
            _: Option<&colo_state::TimerKey>,
            _: &mut dyn FnMut(colo_state::TimerKey, &[u8]) -> ControlFlow<()>,
        ) -> Result<(), StoreError> {
            Ok(())
        }
        fn checkpoint(&self, _: &str, _: ShardId) -> Result<Option<Checkpoint>, StoreError> {
            Ok(None)
        }
        fn engine(&self) -> colo_state::Engine {
            colo_state::Engine::Fjall
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn writes_that_arrive_during_a_commit_share_the_next_one() {
        let counting = Arc::new(Counting::default());
        let store: Arc<dyn StateStore> = counting.clone();
        let commit = Arc::new(GroupCommit::default());
        let writers: Vec<_> = (0..100)
            .map(|shard| {
                let (commit, store) = (commit.clone(), store.clone());
                tokio::spawn(async move {
                    let mut batch = WriteBatch::new("t");
                    batch.put(ShardId(shard), "e", vec![1]);
                    commit.write(&store, batch).await
                })
            })
            .collect();
        for writer in writers {
            writer.await.expect("writer").expect("written");
        }
        assert_eq!(
            counting.batches.load(Ordering::SeqCst),
            100,
            "every write committed once"
        );
        let commits = counting.commits.load(Ordering::SeqCst);
        assert!(
            commits < 100,
            "100 writes at once took {commits} commits: none shared"
        );
    }
}
