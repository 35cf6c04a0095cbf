//! A shard's hand-off as the region task sees it: as a non-owner (stop
//! routing to the old home, ack once what went there has arrived) and as
//! the owner (stop the shard's entities, report when they have stopped).

use super::shards::{Release, ShardPhase};
use super::{mark_delayed, RegionTask};
use crate::entity::Entity;
use crate::envelope::Envelope;
use crate::protocol::RegionToCoordinator;
use crate::region::command::RegionCmd;
use crate::region::mail::Mail;
use colo_allocation::ShardId;
use std::collections::VecDeque;
use tokio::sync::oneshot;

impl<E: Entity> RegionTask<E> {
    /// Non-owners stop routing to the old home and ack once everything they
    /// forwarded there has arrived; the owner keeps delivering until HandOff,
    /// so all of it is handled before the shard stops, in order.
    pub(super) fn begin_handoff(&mut self, shard: ShardId) {
        let mut phase = self.shards.take(shard);
        if let Some(then) = phase.as_mut().and_then(ShardPhase::release_mut) {
            // Its home is moving: a home learned before is stale.
            then.home = None;
        }
        let waits = match &phase {
            Some(ShardPhase::BarrierPending { .. } | ShardPhase::Returning { .. }) => true,
            Some(ShardPhase::Stopping { .. }) => self.is_draining(shard),
            // A hosted shard's route points here: what comes back from a
            // closing queue is delivered here, or buffered for the next
            // home once the shard has stopped; its hand-off does not wait.
            Some(ShardPhase::Hosted(_) | ShardPhase::Asked { .. }) | None => false,
        };
        if waits {
            // What this region sent the old home may not have arrived yet
            // (an earlier hand-off's barrier has not passed, or a batch is
            // unconfirmed): if the old home takes it, it must still host
            // the shard then. Acked once it has arrived or its fate is
            // known; until then the hand-off waits (or times out and is
            // tried again).
            if let Some(then) = phase.as_mut().and_then(ShardPhase::release_mut) {
                then.ack = true;
            }
            self.shards.restore(shard, phase);
            return;
        }
        if let Some(old) = self.shared.routes.unset_remote_home(shard) {
            let (done, passed) = oneshot::channel();
            if old.sink.push(Mail::Barrier(done)).is_ok() {
                // It was routed to another node: free here, or with an ask
                // still unanswered.
                let asked = match phase {
                    Some(ShardPhase::Asked { since }) => Some(since),
                    other => {
                        self.shards.restore(shard, other);
                        None
                    }
                };
                if self.shards.get(shard).is_none() {
                    let then = Release {
                        asked,
                        ..Release::default()
                    };
                    self.shards.put(shard, ShardPhase::BarrierPending { then });
                }
                let commands = self.commands.clone();
                self.shared.node.tasks.spawn(async move {
                    let _ = passed.await;
                    let _ = commands.send(RegionCmd::BeginHandOffReady { shard }).await;
                });
                return;
            }
        }
        self.shards.restore(shard, phase);
        self.send(RegionToCoordinator::BeginHandOffAck { shard });
    }

    /// Stops a local shard: its entities handle what they have received,
    /// then their stop message (a fenced shard handles nothing more, and
    /// stops by its lease's hard deadline).
    pub(super) fn handoff(&mut self, shard: ShardId, notify: bool) {
        self.stop_shard(shard, notify, false);
    }

    /// Stops a local shard (see [`Self::handoff`]); `fenced`: because the
    /// region fenced itself.
    pub(super) fn stop_shard(&mut self, shard: ShardId, notify: bool, fenced: bool) {
        self.shared.routes.unset_home(shard);
        match self.shards.take(shard) {
            Some(ShardPhase::Hosted(handle)) => {
                self.shards.put(
                    shard,
                    ShardPhase::Stopping {
                        notify,
                        fenced,
                        then: Release::default(),
                    },
                );
                // Behind every message routed so far; nothing is routed here
                // after `unset_home`.
                let _ = handle.sink.push(Mail::HandOff);
                let commands = self.commands.clone();
                self.shared.node.tasks.spawn(async move {
                    let leftovers = handle.stopped.await.unwrap_or_default();
                    let _ = commands
                        .send(RegionCmd::ShardStopped { shard, leftovers })
                        .await;
                });
            }
            Some(ShardPhase::Stopping {
                notify: already,
                fenced: was_fenced,
                then,
            }) => {
                self.shards.put(
                    shard,
                    ShardPhase::Stopping {
                        notify: notify || already,
                        fenced: fenced || was_fenced,
                        then,
                    },
                );
            }
            other => {
                // Nothing of it runs here.
                self.shards.restore(shard, other);
                if notify {
                    self.send(RegionToCoordinator::ShardStopped { shard });
                }
            }
        }
    }

    /// A shard's entities have stopped; `leftovers` were still in its
    /// mailbox.
    pub(super) fn on_shard_stopped(
        &mut self,
        shard: ShardId,
        mut leftovers: VecDeque<Envelope<E>>,
    ) {
        let (notify, fenced) = match self.shards.take(shard) {
            Some(ShardPhase::Stopping {
                notify,
                fenced,
                then,
            }) => {
                // Its entities are gone; what came back from its old homes,
                // if anything, still has to.
                self.shards.put(shard, ShardPhase::Returning { then });
                (notify, fenced)
            }
            other => {
                self.shards.restore(shard, other);
                (false, false)
            }
        };
        if fenced {
            mark_delayed(leftovers.iter_mut());
        }
        self.shards_changed();
        self.requeue(shard, leftovers);
        if notify {
            self.send(RegionToCoordinator::ShardStopped { shard });
        }
        self.release(shard);
        tracing::debug!(entity_type = %self.name(), %shard, "shard stopped");
    }

    /// Everything this region sent the old home before BeginHandOff has
    /// arrived there. Acked now, or when the rest of the old home's queue
    /// has come back (see `release`); a home learned while the barrier was
    /// pending waited for it: messages go there only behind those sent to
    /// the old home.
    pub(super) fn on_barrier_passed(&mut self, shard: ShardId) {
        let mut then = match self.shards.take(shard) {
            Some(ShardPhase::BarrierPending { then }) => then,
            other => {
                // Not waiting for this barrier (any more): the hand-off is
                // acked all the same, as soon as nothing can come back.
                let draining = self.is_draining(shard);
                self.shards.restore(shard, other);
                let owed = if draining {
                    self.shards.release_of(shard)
                } else {
                    None
                };
                match owed {
                    Some(then) => then.ack = true,
                    None => self.send(RegionToCoordinator::BeginHandOffAck { shard }),
                }
                return;
            }
        };
        if self.is_draining(shard) {
            then.ack = true;
            self.shards.put(shard, ShardPhase::Returning { then });
            return;
        }
        self.send(RegionToCoordinator::BeginHandOffAck { shard });
        if let Some(since) = then.asked {
            self.shards.put(shard, ShardPhase::Asked { since });
        }
        if let Some(home) = then.home {
            self.on_shard_home(shard, home);
        }
    }
}
