//! A durable entity's life in its shard, beside the shard's own
//! (`lifecycle.rs`): its state read when it starts while its messages wait,
//! what it keeps after each message, its answers held until durable, and a
//! shard stopped by a state it cannot read. The state itself, and its
//! writes, are `durable.rs`'s.

use super::durable::Start;
use super::runs::Done;
use super::{Active, Phase, Shard, Stop, LIFECYCLE};
use crate::entity::{Entity, EntityId, Requested};
use crate::envelope::{Cause, Envelope, Reply};
use crate::error::AskError;
use colo_state::StoreError;
use std::future::Future;
use std::task::{Context, Poll};

impl<E: Entity, F: Future<Output = Done<E>>> Shard<E, F> {
    /// Loads that came back, and the write: whether anything happened.
    pub(super) fn poll_durable(&mut self, cx: &mut Context<'_>) -> bool {
        let serving = self.serving;
        let Some(durable) = self.durable.as_mut() else {
            return false;
        };
        let mut progressed = durable.poll_restore(cx);
        progressed |= durable.poll_write(&self.node, cx);
        progressed |= durable.poll_outbox(cx);
        progressed |= durable.write_if_due(cx, false, serving);
        if serving && matches!(self.phase, Phase::Active) {
            let remembered = match self.durable.as_mut() {
                Some(durable) => durable.remembered(cx),
                None => Vec::new(),
            };
            progressed |= !remembered.is_empty();
            for (id, value) in remembered {
                self.remember(id, &value);
            }
        }
        while let Some(Poll::Ready(Some((id, result)))) =
            self.durable.as_mut().map(|durable| durable.poll_load(cx))
        {
            progressed = true;
            self.loaded(id, result);
        }
        progressed
    }

    /// Entities that started since the last poll wait for a read of their
    /// state that has not begun: the shard's task goes round once more.
    pub(super) fn loads_to_start(&self) -> bool {
        self.durable
            .as_ref()
            .is_some_and(|durable| durable.loads.to_start())
    }

    /// An entity's stored state was read: it starts with its waiting
    /// messages, or the shard stops if its state cannot be read.
    fn loaded(&mut self, id: EntityId, result: Result<Option<Vec<u8>>, StoreError>) {
        let loading = self
            .busy
            .get(&id)
            .is_some_and(|busy| matches!(busy.running, Some(None)));
        let Some(durable) = self.durable.as_mut() else {
            return;
        };
        if !loading || self.entities.contains_key(&id) {
            // Its waiting messages went elsewhere (a forced hand-off).
            return;
        }
        let start = match result {
            Ok(Some(value)) => {
                durable.metrics.loaded_store.increment(1);
                durable.decode_stored(&id, &value)
            }
            Ok(None) => {
                durable.metrics.loaded_none.increment(1);
                Ok(Start::Fresh)
            }
            Err(e) => Err(format!(
                "the stored state of entity {id:?} of entity type {:?} cannot be read: {e}",
                self.entity_type.name
            )),
        };
        let entity = match start {
            Ok(Start::Entity(entity)) => Ok(entity),
            Ok(Start::Fresh) => self.make_fresh(&id),
            Ok(Start::Loading) => unreachable!("a loaded state is not loading"),
            Err(reason) => {
                self.stop_broken(&id, reason);
                return;
            }
        };
        match entity {
            Ok(entity) => self.insert_active(&id, entity),
            Err(reason) => {
                let error = self.entity_failed(&id, reason);
                if let Some(busy) = self.busy.get_mut(&id) {
                    for env in busy.waiting.drain(..) {
                        self.node.reply(env.reply, Err(error.clone()));
                        self.queued -= 1;
                    }
                }
            }
        }
        if let Some(busy) = self.busy.get_mut(&id) {
            busy.running = None;
        }
        self.after_run(&id);
    }

    /// Starts a remembered entity, unless a message started it already (or
    /// it deleted itself: nothing of it is remembered then).
    fn remember(&mut self, id: EntityId, value: &[u8]) {
        if self.entities.contains_key(&id) || self.busy.contains_key(&id) {
            return;
        }
        let Some(durable) = self.durable.as_mut() else {
            return;
        };
        match durable.decode_stored(&id, value) {
            Ok(Start::Entity(entity)) => {
                durable.metrics.loaded_store.increment(1);
                self.insert_active(&id, entity);
            }
            Ok(Start::Fresh | Start::Loading) => durable.forget(&id),
            Err(reason) => self.stop_broken(&id, reason),
        }
    }

    /// A state that cannot be read stops the shard: nothing it holds or is
    /// sent is handled from now on (records stay uncommitted), until a
    /// program that reads it runs.
    fn stop_broken(&mut self, id: &EntityId, reason: String) {
        tracing::error!(entity_type = %self.entity_type.name, shard = %self.id, entity_id = %id, %reason, "shard stopped: a stored entity state cannot be read; no message of the shard is handled until it can");
        if let Some(durable) = self.durable.as_mut() {
            durable.metrics.undecodable.increment(1);
            durable.broken = Some(reason);
        }
        let waiting: Vec<Envelope<E>> = self
            .busy
            .remove(id)
            .map(|busy| busy.waiting.into_iter().collect())
            .unwrap_or_default();
        self.queued -= waiting.len();
        for env in waiting {
            self.refuse_if_broken(env);
        }
    }

    /// Refuses a message if its shard is stopped; gives it back otherwise.
    pub(super) fn refuse_if_broken(&mut self, env: Envelope<E>) -> Option<Envelope<E>> {
        let Some(reason) = self.durable.as_ref().and_then(|d| d.broken()) else {
            return Some(env);
        };
        let error = AskError::Dropped(format!("its shard is stopped: {reason}"));
        self.node.reply(env.reply, Err(error));
        None
    }

    /// What an entity keeps after a message it handled: its state goes to
    /// the next write (or its deletion, and the factory makes it anew).
    ///
    /// # Errors
    /// Its state cannot be encoded, or the factory failed after a deletion.
    pub(super) fn keep(
        &mut self,
        id: &EntityId,
        entity: E,
        deleted: bool,
        cause: Option<&Cause>,
        requested: Requested,
    ) -> Result<E, String> {
        match (self.durable.as_mut(), cause) {
            (Some(durable), _) => {
                durable.changed(id, (!deleted).then_some(&entity), cause, requested)?;
            }
            // Reset or not, it applied the tell.
            (None, Some(Cause::Keyed(key))) => {
                let now = crate::clock::unix_ms();
                self.memory_keys.entry(id.clone()).or_default().add(
                    key.clone(),
                    now,
                    self.retention,
                );
            }
            (None, _) => {}
        }
        if deleted {
            drop(entity);
            let fresh = self.make_entity(id)?;
            if let Some(durable) = self.durable.as_mut() {
                durable.fresh(id, &fresh);
            }
            let weight = self.weight_of(&fresh);
            self.weighed(id, weight);
            return Ok(fresh);
        }
        let weight = self.weight_of(&entity);
        self.weighed(id, weight);
        Ok(entity)
    }

    /// Answers a handled message: a durable entity's once its change is
    /// durable.
    pub(super) fn answer(
        &mut self,
        id: &EntityId,
        reply: Reply<E::Reply>,
        result: Result<E::Reply, AskError>,
    ) {
        match self.durable.as_mut() {
            Some(durable) => durable.answer(&self.node, id, reply, result),
            None => self.node.reply(reply, result),
        }
    }

    /// A new entity from the factory, for a durable type noted as such.
    ///
    /// # Errors
    /// The factory panicked; the reason.
    pub(super) fn make_fresh(&mut self, id: &EntityId) -> Result<E, String> {
        let entity = self.make_entity(id)?;
        if let Some(durable) = self.durable.as_mut() {
            durable.fresh(id, &entity);
        }
        Ok(entity)
    }

    /// Puts a started entity among the active ones.
    pub(super) fn insert_active(&mut self, id: &EntityId, entity: E) {
        if let Some(durable) = self.durable.as_mut() {
            durable.started(id);
        }
        // One that starts while its shard hands off (its stored state was
        // still being read when the hand-off began) handles what waits for
        // it and stops like the others.
        if matches!(self.phase, Phase::HandingOff { .. }) {
            let busy = self.busy.entry(id.clone()).or_default();
            busy.stop.get_or_insert(Stop::Last);
            if busy.running.is_none() && !busy.listed {
                busy.listed = true;
                self.runnable.push_back(id.clone());
            }
        }
        self.count_entities(1.0);
        self.metrics.activations.increment(1);
        self.counts.activations += 1;
        tracing::debug!(target: LIFECYCLE, entity_type = %self.entity_type.name, shard = %self.id, entity_id = %id, "entity started");
        let busy = self.busy.contains_key(id);
        let weight = self.weight_of(&entity);
        self.entities.insert(
            id.clone(),
            Active {
                entity: Some(entity),
                touched: self.clock,
                busy,
            },
        );
        if let Some(policy) = &mut self.policy {
            policy.on_activate(id.clone(), &mut self.evicted);
        }
        self.weighed(id, weight);
    }

    /// Whether the shard's state is settled for its hand-off to end: all
    /// written (a write started if needed), or, for a fenced shard, nothing
    /// written at all.
    pub(super) fn durable_settled(&mut self, cx: &mut Context<'_>) -> bool {
        let serving = self.serving;
        let Some(durable) = self.durable.as_mut() else {
            return true;
        };
        if !serving {
            durable.abandon(&self.node);
            return true;
        }
        if durable.writing.is_some() || !durable.loads.is_empty() {
            return false;
        }
        // A revoke commits before its hand-off: deleted entities whose
        // offsets that commit passed are removed by the last write, with
        // the outputs sent dropped from their records.
        durable.check_removals();
        durable.poll_drops(None);
        if durable.settled() {
            // Its outputs are sent first, and dropped from their records:
            // the next owner would send them again.
            return durable.outbox.is_empty();
        }
        if durable.write_if_due(cx, true, serving) {
            // Polled on the next round, which nothing else may bring: the
            // last write of a hand-off may hold nothing anyone waits for
            // (earlier keys retired).
            cx.waker().wake_by_ref();
        }
        false
    }
}
