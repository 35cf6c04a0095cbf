//! A shard's hand-off: the messages each entity had received are handled,
//! then every entity's stop message runs, side by side, until the deadline;
//! what still runs then is dropped, and what was never handled goes back to
//! the region with the shard's leftovers.

use super::runs::{Done, Kind};
use super::{dropped, log_dropped, Phase, Shard, Stop};
use crate::entity::{Entity, EntityId};
use crate::envelope::Envelope;
use colo_passivation::PassivationReason;
use std::collections::VecDeque;
use std::future::Future;
use std::task::Context;
use tokio::time::Instant;

impl<E: Entity, F: Future<Output = Done<E>>> Shard<E, F> {
    /// Stops every entity: each first handles what it has already received,
    /// then its stop message; all of them side by side. A fenced shard
    /// (its lease ran out) handles nothing more, and drops its entities at
    /// once when even its stop messages are too late.
    pub(super) fn begin_handoff(
        &mut self,
        mut leftovers: VecDeque<Envelope<E>>,
        cx: &mut Context<'_>,
    ) {
        let deadline = Instant::now() + self.entity_type.settings.entity_stop_timeout();
        if !self.serving {
            for busy in self.busy.values_mut() {
                leftovers.extend(busy.waiting.drain(..));
            }
            self.queued = 0;
        }
        self.phase = Phase::HandingOff {
            deadline,
            leftovers,
        };
        self.deadlines.clear();
        if !self.serving && self.lease.past_hard_deadline() {
            tracing::warn!(entity_type = %self.entity_type.name, shard = %self.id, "past the region's lease: dropping the shard's entities without running anything");
            self.force_stop();
            return;
        }
        let ids: Vec<EntityId> = self.entities.keys().cloned().collect();
        for id in ids {
            let busy = self.busy.entry(id.clone()).or_default();
            if busy.stop.is_none() {
                busy.stop = Some(Stop::Last);
            }
            if busy.running.is_none() && !busy.listed {
                busy.listed = true;
                self.runnable.push_back(id.clone());
            }
            if let Some(active) = self.entities.get_mut(&id) {
                active.busy = true;
            }
        }
        self.fill_slots(cx);
    }

    /// When a hand-off must be over: its own deadline, or, for a fenced
    /// shard, the lease's hard deadline if that is earlier.
    pub(super) fn handoff_deadline(&self) -> Option<Instant> {
        let Phase::HandingOff { deadline, .. } = &self.phase else {
            return None;
        };
        if self.serving {
            Some(*deadline)
        } else {
            Some((*deadline).min(self.lease.hard_deadline()))
        }
    }

    pub(super) fn on_timer(&mut self) {
        let now = Instant::now();
        match &mut self.phase {
            Phase::HandingOff { deadline, .. } => {
                let fenced_out = !self.serving && self.lease.past_hard_deadline();
                if now >= *deadline || fenced_out {
                    self.force_stop();
                }
            }
            Phase::Active => {
                // A run that has already ended ignores its cancel.
                while let Some(entry) = self.deadlines.first_entry() {
                    if entry.key().0 > now {
                        break;
                    }
                    entry.remove().cancel();
                }
            }
        }
    }

    /// The hand-off deadline passed: whatever still runs is dropped, and
    /// what still waits goes back to the region.
    pub(super) fn force_stop(&mut self) {
        let aborted = self.runs.abort_all();
        self.running -= aborted.len();
        for (_, kind) in aborted {
            if let Kind::Message(reply) = kind {
                dropped(reply, &self.node, "its shard was handed off by force");
            }
        }
        let Phase::HandingOff { leftovers, .. } = &mut self.phase else {
            return;
        };
        for (_, mut busy) in self.busy.drain() {
            leftovers.extend(busy.waiting.drain(..));
        }
        self.runnable.clear();
        self.queued = 0;
        tracing::warn!(
            entity_type = %self.entity_type.name,
            shard = %self.id,
            entities = self.entities.len(),
            "entities did not stop in time; stopping them by force"
        );
        for _ in 0..self.entities.len() {
            self.metrics.passivated(PassivationReason::HandOff);
        }
        self.drop_entities();
        if let Some(durable) = self.durable.as_mut() {
            durable.abandon(&self.node);
        }
    }

    /// Keeps the timer at the earliest instant the shard must act at.
    pub(super) fn arm_timer(&mut self) {
        let wanted = match &self.phase {
            Phase::HandingOff { .. } => self.handoff_deadline(),
            Phase::Active => self.deadlines.keys().next().map(|(at, _)| *at),
        };
        if wanted != self.timer_at {
            self.timer_at = wanted;
            self.timer = wanted.map(|at| Box::pin(tokio::time::sleep_until(at)));
        }
    }

    /// The region closed the mailbox without a hand-off: it has stopped, and
    /// what the shard holds cannot go anywhere.
    pub(super) fn closed(&mut self) -> VecDeque<Envelope<E>> {
        self.flush_activity();
        self.activity.forget(self.id);
        for (_, kind) in self.runs.abort_all() {
            if let Kind::Message(reply) = kind {
                dropped(reply, &self.node, "its region stopped");
            }
        }
        self.running = 0;
        for (_, busy) in self.busy.drain() {
            for env in busy.waiting {
                dropped(env.reply, &self.node, "its region stopped");
            }
        }
        self.runnable.clear();
        self.queued = 0;
        self.drop_entities();
        if let Some(durable) = self.durable.as_mut() {
            durable.abandon(&self.node);
        }
        VecDeque::new()
    }

    pub(super) fn drop_entities(&mut self) {
        log_dropped(&self.entity_type.name, self.id, &self.entities);
        let n = self.entities.len();
        self.entities.clear();
        self.count_entities(-(n as f64));
    }
}
