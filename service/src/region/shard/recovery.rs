//! Remember entities (Akka's remember-entities): once a durable shard is
//! restored, the entities with state in the node's store are read in one
//! scan of the shard and started without a message, all at once or a
//! number every interval (Akka's entity-recovery-strategy), so that a
//! shard of many entities does not load them in one burst.

use crate::entity::EntityId;
use crate::settings::EntityRecovery;
use crate::store::NodeStore;
use colo_allocation::ShardId;
use colo_state::StoreError;
use std::collections::{HashSet, VecDeque};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::time::{Instant, Sleep};

/// Remember entities: the shard's stored entities, read once it is
/// restored and started at the recovery strategy's rate.
pub(super) struct Recovery {
    strategy: EntityRecovery,
    phase: RecoveryPhase,
    timer: Option<Pin<Box<Sleep>>>,
    /// Entities started otherwise (by a message) while remembered ones
    /// are still to start: the scan's copy of their state may be older
    /// than what they made since, and one that stopped again stays
    /// stopped until its next message, as after an explicit passivation.
    started: HashSet<EntityId>,
}

/// A shard's stored entities: id and stored record.
pub(super) type Stored = Vec<(EntityId, Vec<u8>)>;

/// The shard's scan, on a store call (the outer error: its thread failed).
type Scan = Pin<Box<dyn Future<Output = Result<Result<Stored, StoreError>, String>> + Send>>;

enum RecoveryPhase {
    /// Not read yet.
    Unread,
    Reading(Scan),
    /// Read: those not started yet.
    Starting(VecDeque<(EntityId, Vec<u8>)>),
    Done,
}

impl Recovery {
    pub(super) fn new(strategy: EntityRecovery) -> Self {
        Self {
            strategy,
            phase: RecoveryPhase::Unread,
            timer: None,
            started: HashSet::new(),
        }
    }

    /// An entity of the shard started: it is not started again from the
    /// scan.
    pub(super) fn started(&mut self, id: &EntityId) {
        if !matches!(self.phase, RecoveryPhase::Done) {
            self.started.insert(id.clone());
        }
    }
}

impl Recovery {
    /// The remembered entities of `shard` to start now: all, or the next
    /// ones of the constant rate; none while the store is read or the
    /// rate's timer runs.
    pub(super) fn next(
        &mut self,
        store: &NodeStore,
        entity_type: &Arc<str>,
        shard: ShardId,
        cx: &mut Context<'_>,
    ) -> Stored {
        let recovery = self;
        loop {
            match &mut recovery.phase {
                RecoveryPhase::Unread => {
                    let (calls, store) = (store.calls().clone(), store.store());
                    let entity_type = entity_type.clone();
                    recovery.phase = RecoveryPhase::Reading(Box::pin(async move {
                        calls
                            .run(move || {
                                let mut found = Vec::new();
                                store.scan(&entity_type, shard, &mut |id, value| {
                                    found.push((EntityId::from(id), value.to_vec()));
                                    std::ops::ControlFlow::Continue(())
                                })?;
                                Ok(found)
                            })
                            .await
                    }));
                }
                RecoveryPhase::Reading(task) => match task.as_mut().poll(cx) {
                    Poll::Pending => return Vec::new(),
                    Poll::Ready(Ok(Ok(found))) => {
                        tracing::info!(entity_type = %entity_type, %shard, entities = found.len(), "starting the shard's remembered entities");
                        recovery.phase = RecoveryPhase::Starting(found.into());
                    }
                    Poll::Ready(Ok(Err(e))) => {
                        tracing::error!(entity_type = %entity_type, %shard, error = %e, "the shard's remembered entities cannot be read; they start on their next message");
                        recovery.phase = RecoveryPhase::Done;
                    }
                    Poll::Ready(Err(e)) => {
                        tracing::error!(entity_type = %entity_type, %shard, error = %e, "the read of the remembered entities failed; they start on their next message");
                        recovery.phase = RecoveryPhase::Done;
                    }
                },
                RecoveryPhase::Starting(pending) => {
                    let number = match recovery.strategy {
                        EntityRecovery::All => pending.len(),
                        EntityRecovery::Constant { frequency, number } => {
                            let timer = recovery.timer.get_or_insert_with(|| {
                                Box::pin(tokio::time::sleep(Duration::ZERO))
                            });
                            if timer.as_mut().poll(cx).is_pending() {
                                return Vec::new();
                            }
                            timer.as_mut().reset(Instant::now() + frequency);
                            // Registers the next wake-up.
                            let _ = timer.as_mut().poll(cx);
                            number
                        }
                    };
                    let started = &recovery.started;
                    let batch: Vec<_> = pending
                        .drain(..number.min(pending.len()))
                        .filter(|(id, _)| !started.contains(id))
                        .collect();
                    if pending.is_empty() {
                        recovery.phase = RecoveryPhase::Done;
                        recovery.timer = None;
                        recovery.started = HashSet::new();
                    }
                    return batch;
                }
                RecoveryPhase::Done => return Vec::new(),
            }
        }
    }
}
