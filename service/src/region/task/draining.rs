//! Holding shards whose messages are still coming back from a failed or
//! departed node, and the outbound queues themselves.

use super::{Queue, RegionTask, ShardPhase};
use crate::entity::Entity;
use crate::envelope::Envelope;
use crate::mailbox::Mailbox;
use crate::region::mail::Mail;
use crate::region::outbound;
use colo_allocation::{RegionId, ShardId};
use std::collections::VecDeque;
use std::sync::Arc;

impl<E: Entity> RegionTask<E> {
    /// Whether messages sent to the shard's old home may still come back.
    pub(super) fn is_draining(&self, shard: ShardId) -> bool {
        self.draining
            .values()
            .any(|shards| shards.contains_key(&shard))
    }

    /// A queue that held messages of `shard` has closed, or its entities
    /// have stopped here: once nothing more can come back, a `Returning`
    /// shard is free again. Its hand-off is acked if one waits, and the
    /// home learned meanwhile applied, or asked for if messages wait.
    /// (Asking with nothing waiting would make a shard this region released
    /// come straight back to it.)
    pub(super) fn release(&mut self, shard: ShardId) {
        if self.is_draining(shard) {
            return;
        }
        match self.shards.take(shard) {
            Some(ShardPhase::Returning { then }) => {
                if then.ack {
                    self.send(crate::protocol::RegionToCoordinator::BeginHandOffAck { shard });
                }
                if let Some(since) = then.asked {
                    self.shards.put(shard, ShardPhase::Asked { since });
                }
                match then.home {
                    Some(home) => self.on_shard_home(shard, home),
                    None if self.shared.routes.is_waiting(shard) => self.ask_home(shard),
                    None => {}
                }
            }
            Some(ShardPhase::Stopping {
                notify,
                fenced,
                mut then,
            }) => {
                // Stopping here and nothing more to come back: the hand-off
                // that waited for that need not wait for the stop.
                if std::mem::take(&mut then.ack) {
                    self.send(crate::protocol::RegionToCoordinator::BeginHandOffAck { shard });
                }
                let phase = ShardPhase::Stopping {
                    notify,
                    fenced,
                    then,
                };
                self.shards.put(shard, phase);
            }
            other @ Some(ShardPhase::BarrierPending { .. } | ShardPhase::Hosted(_)) => {
                self.shards.restore(shard, other);
            }
            other @ (Some(ShardPhase::Asked { .. }) | None) => {
                self.shards.restore(shard, other);
                if self.shared.routes.is_waiting(shard) {
                    self.ask_home(shard);
                }
            }
        }
    }

    /// Stops routing to `node` and holds its shards until its current
    /// outbound queue has given back whatever it could not deliver.
    /// `terminated`: the coordinator has placed the node's shards elsewhere
    /// without a hand-off, so nothing more goes there (taken late, a
    /// message would be forwarded to the new home behind newer ones): the
    /// queue gives back everything it has not handed to the transport.
    pub(super) fn start_draining(&mut self, node: &RegionId, terminated: bool) {
        if terminated {
            // Every queue to it: the current one, and those already
            // draining after it went silent.
            for ((to, _), give_back) in &self.give_back {
                if to == node {
                    give_back.store(true, std::sync::atomic::Ordering::Release);
                }
            }
        }
        let forgotten = self.shared.routes.forget_region(node);
        let Some(queue) = self.outbound.remove(node) else {
            return; // nothing queued for it
        };
        // Closing ends the queue once it has given back what it holds.
        queue.sink.close();
        let held = self
            .draining
            .entry((node.clone(), queue.serial))
            .or_default();
        for &shard in &forgotten {
            held.entry(shard).or_default();
        }
        for shard in forgotten {
            self.shards.release_of(shard);
        }
    }

    pub(super) fn outbound_to(&mut self, region: &RegionId) -> Arc<Mailbox<Mail<E>>> {
        if let Some(queue) = self.outbound.get(region).filter(|q| !q.sink.is_closed()) {
            return queue.sink.clone();
        }
        let serial = self.next_queue;
        self.next_queue += 1;
        let give_back: Arc<std::sync::atomic::AtomicBool> = Arc::default();
        self.give_back
            .insert((region.clone(), serial), give_back.clone());
        let sink = outbound::start(outbound::Outbound {
            to: region.clone(),
            serial,
            entity_type: Arc::from(self.name()),
            node: self.shared.node.clone(),
            metrics: self.shared.metrics.clone(),
            region: self.commands.clone(),
            silent_after: self.shared.entity_type.settings.region_timeout,
            give_back,
        });
        let queue = Queue {
            serial,
            sink: sink.clone(),
        };
        self.outbound.insert(region.clone(), queue);
        sink
    }

    /// Puts accepted messages back in front of the shard's buffer, or routes
    /// them if the shard has a home again.
    pub(super) fn requeue(&mut self, shard: ShardId, messages: VecDeque<Envelope<E>>) {
        if let Some(back) = self.shared.routes.prepend(shard, messages) {
            // Held shards are buffering, so this only happens when the region
            // has stopped; routing refuses them then.
            let shared = self.shared.clone();
            self.shared.node.tasks.spawn(async move {
                for env in back {
                    let _ = shared.routes.route(env).await;
                }
            });
        }
    }
}
