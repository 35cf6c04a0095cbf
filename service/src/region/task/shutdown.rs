//! Graceful shutdown: hand every shard off, deliver every buffered message,
//! drain the outbound queues, then stop.

use super::{Phase, RegionTask};
use crate::entity::Entity;
use crate::protocol::RegionToCoordinator;
use crate::region::command::RegionCmd;
use crate::region::mail::Mail;
use std::collections::VecDeque;
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

impl<E: Entity> RegionTask<E> {
    pub(super) fn begin_shutdown(&mut self, done: oneshot::Sender<()>) {
        self.shutdown_waiters.push(done);
        match self.phase {
            Phase::Running => {}
            Phase::ShuttingDown { .. } => return,
            Phase::Stopped => {
                for waiter in self.shutdown_waiters.drain(..) {
                    let _ = waiter.send(());
                }
                return;
            }
        }
        let settings = &self.shared.entity_type.settings;
        let deadline = Instant::now() + settings.handoff_timeout * 2;
        tracing::info!(entity_type = %self.name(), region = %self.shared.id, "graceful shutdown");
        self.phase = Phase::ShuttingDown { deadline };
        // A leaving region is no longer ready: traffic should go elsewhere.
        self.publish_contact();
        if self.contact.is_registered() && !self.shared.proxy {
            self.send(RegionToCoordinator::GracefulShutdown);
        }
    }

    /// Done when no shard is hosted and nothing is buffered; then every
    /// outbound queue is drained before the region stops. Without a
    /// coordinator nothing can be handed off: the region stops its shards
    /// itself, and what it buffered has nowhere to go.
    pub(super) async fn continue_shutdown(
        &mut self,
        deadline: Instant,
        commands: &mut mpsc::Receiver<RegionCmd<E>>,
    ) {
        if !self.contact.is_registered() {
            let active: Vec<_> = self.shards.hosted().map(|(shard, _)| shard).collect();
            if !active.is_empty() {
                tracing::warn!(entity_type = %self.name(), shards = active.len(), "stopping without the coordinator: shards stop here without a hand-off");
            }
            for shard in active {
                self.handoff(shard, false);
            }
            if self.shards.local().next().is_none() && self.draining.is_empty() {
                self.stop().await;
                return;
            }
        }
        if self.idle() {
            let barriers: Vec<_> = self.outbound.values().map(|q| q.sink.clone()).collect();
            let drained = futures::future::join_all(barriers.into_iter().map(|sink| async move {
                let (done, passed) = oneshot::channel();
                if sink.push(Mail::Barrier(done)).is_ok() {
                    let _ = passed.await;
                }
            }));
            if tokio::time::timeout_at(deadline, drained).await.is_err() {
                tracing::warn!(entity_type = %self.name(), "outbound queues not drained before the shutdown deadline");
            }
            // A queue that failed while draining gave messages back: route
            // them (and go round again) rather than stop without them.
            while let Ok(cmd) = commands.try_recv() {
                self.on_command(cmd);
            }
            if self.idle() || Instant::now() >= deadline {
                self.stop().await;
            }
        } else if Instant::now() >= deadline {
            tracing::warn!(
                entity_type = %self.name(),
                hosted = self.shards.local().count(),
                buffered = self.shared.routes.buffered(),
                "graceful shutdown did not finish in time; stopping"
            );
            self.stop().await;
        }
    }

    /// Nothing hosted, buffered or on its way back.
    pub(super) fn idle(&self) -> bool {
        self.shards.local().next().is_none()
            && self.draining.is_empty()
            && self.shared.routes.buffered() == 0
    }

    pub(super) async fn stop(&mut self) {
        self.phase = Phase::Stopped;
        let returned: usize = self
            .draining
            .values()
            .flat_map(|s| s.values())
            .map(VecDeque::len)
            .sum();
        self.draining.clear();
        let dropped = self.shared.routes.stop() + returned;
        if dropped > 0 {
            tracing::warn!(entity_type = %self.name(), dropped, "region stopped with buffered messages");
            self.shared
                .metrics
                .dropped_undeliverable
                .increment(dropped as u64);
        }
        // Closing the mailboxes ends the shards (dropping their entities) and
        // the outbound queues (after what they still hold).
        for handle in self.shards.clear() {
            handle.sink.close();
        }
        self.shared.metrics.hosted_shards.set(0.0);
        for (_, queue) in self.outbound.drain() {
            queue.sink.close();
        }
        // Leaving the link tells the coordinator this region is gone.
        let bound = self.shared.entity_type.settings.handoff_timeout;
        self.leave_link(bound).await;
        for waiter in self.shutdown_waiters.drain(..) {
            let _ = waiter.send(());
        }
        tracing::info!(entity_type = %self.name(), region = %self.shared.id, "region stopped");
    }
}
