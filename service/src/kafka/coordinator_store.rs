//! The coordinator's store on Kafka: the one-partition compacted topic
//! `<cluster>.coordinator`, shared by the coordinators of every entity type
//! of the cluster, so that a coordinator started anywhere (after a restart,
//! or on another node) goes on from its predecessor's state.
//!
//! Records, each keyed by its entity type and by the epoch of the
//! coordinator that wrote it, so that two coordinators never write the same
//! key (compaction keeps one record per key):
//! - an epoch record, written first by every coordinator that starts;
//! - events, one record each, keyed by a slot that is reused once the
//!   snapshot after it has made it stale (see `append`);
//! - a snapshot of the whole state every [`COMPACT_EVERY`] events, and
//!   one when a coordinator takes over, each under a key of its own, after
//!   which every earlier record of the entity type gets a tombstone, so
//!   that compaction leaves the last snapshot and what follows it.
//!
//! A coordinator that starts writes its epoch record first and reads the
//! partition up to it: everything a predecessor wrote before is read. If an
//! epoch as high as its own is found there, it writes a higher one and
//! reads on to that. Its epoch record is then the last record it read, and
//! from then on a record written with a lower epoch (a deposed coordinator
//! that has not stopped yet) is ignored by every reader: a record counts
//! only if no record before it in the partition has a higher epoch.
//!
//! Tombstones carry no epoch, so they are fenced by their writer instead: a
//! coordinator writes the tombstones that follow a snapshot only once it
//! has read that no higher epoch came before the snapshot, and stops
//! writing otherwise. And since a deposed coordinator may still write them
//! while its successor reads, a successor's first act is a snapshot of its
//! own: from then on its state rests on nothing a predecessor wrote. Every
//! reader replays what compaction may leave of the partition (each key's
//! last record, at its place), so a reader today reads what one would after
//! the cleaner ran.

use crate::coordinator::ledger::{CoordinatorEvent, CoordinatorState};
use crate::coordinator::store::{CoordinatorStore, StoreError, COMPACT_EVERY};
use colo_connectors::Changelog;
use futures::future::BoxFuture;
use records::{decode, encode, replay, Body, Keys, Read, Value};
use std::ops::ControlFlow;
use std::sync::Arc;

mod records;
#[cfg(test)]
mod tests;

pub(crate) use records::{epoch_of, leader_key, leader_value};

/// The topic has one partition.
const PARTITION: i32 = 0;
/// After a failed write or read (the broker away), the next try.
const RETRY: std::time::Duration = std::time::Duration::from_secs(1);
/// A coordinator's epoch, above every one written before its record.
struct Outranked {
    epoch: u64,
    /// The offset of its epoch record.
    end: i64,
    /// This entity type's records before it.
    records: Vec<Read>,
    /// Whether a predecessor wrote any (before this start's first record).
    takeover: bool,
}

/// Writes an epoch record (`write_epoch`: its offset) and reads what came
/// before it (`read`: from, until); while an epoch as high as its own is
/// there (a clock that went back, a quicker restart, or a coordinator
/// that started meanwhile), writes one above it and reads on, so that no
/// record before its epoch record has an epoch as high.
async fn outrank<W, R>(
    wanted: u64,
    mut write_epoch: impl FnMut(u64) -> W,
    mut read: impl FnMut(i64, i64) -> R,
) -> Result<Outranked, Failure>
where
    W: std::future::Future<Output = Result<i64, Failure>>,
    R: std::future::Future<Output = Result<Vec<Read>, Failure>>,
{
    let mut epoch = wanted.max(1);
    let mut end = write_epoch(epoch).await?;
    let mut records = read(0, end).await?;
    let takeover = !records.is_empty();
    loop {
        let highest = replay(&records).highest;
        if highest < epoch {
            return Ok(Outranked {
                epoch,
                end,
                records,
                takeover,
            });
        }
        let start = end;
        epoch = highest + 1;
        end = write_epoch(epoch).await?;
        records.extend(read(start, end).await?);
    }
}

/// Why a load or a write did not go through.
enum Failure {
    /// The broker did not answer or refused: tried again.
    Kafka(StoreError),
    /// A record cannot be read: trying again reads it again.
    Unreadable(StoreError),
}

/// Where a store is in its coordinator's life.
#[derive(Debug, Default)]
enum Phase {
    #[default]
    Unloaded,
    Serving(Inner),
    /// A coordinator with a higher epoch has started: nothing more is
    /// written.
    Deposed {
        epoch: u64,
        by: u64,
    },
}

/// Why a snapshot did not go through.
enum Halt {
    Store(StoreError),
    /// A record of epoch `by` came before the snapshot.
    Deposed {
        by: u64,
    },
}

/// What the store holds between writes.
#[derive(Debug)]
struct Inner {
    /// This coordinator's epoch.
    epoch: u64,
    /// The offset up to which this coordinator has read that no higher
    /// epoch wrote: its epoch record's at first.
    checked: i64,
    /// Snapshots written within the epoch (the next one's key comes from
    /// it).
    snapshots: u64,
    /// The number of the next event within the epoch (its key's slot
    /// comes from it).
    next: u64,
    /// The state the events replay to, for the next snapshot.
    state: CoordinatorState,
    /// Events since the last snapshot.
    events_since: usize,
    /// Keys of this entity type that a snapshot supersedes: tombstoned
    /// after the next one.
    superseded: Vec<Vec<u8>>,
    /// Keys written (or read) since the last snapshot.
    since_snapshot: Vec<Vec<u8>>,
}

/// One entity type's coordinator store on the cluster's coordinator topic.
pub struct KafkaCoordinatorStore {
    log: Arc<Changelog>,
    entity_type: String,
    keys: Keys,
    /// The epoch it starts with, unless the topic holds a higher one.
    wanted: u64,
    compact_every: usize,
    phase: tokio::sync::Mutex<Phase>,
}

impl std::fmt::Debug for KafkaCoordinatorStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KafkaCoordinatorStore")
            .field("topic", &self.log.topic())
            .field("entity_type", &self.entity_type)
            .finish_non_exhaustive()
    }
}

impl KafkaCoordinatorStore {
    /// The store of `entity_type`'s coordinator on `log` (the cluster's
    /// coordinator topic), starting with epoch `epoch` or, if the topic
    /// holds one as high, one above the highest there.
    pub fn new(log: Arc<Changelog>, entity_type: &str, epoch: u64) -> Self {
        Self {
            log,
            entity_type: entity_type.to_string(),
            keys: Keys::new(entity_type),
            wanted: epoch,
            compact_every: COMPACT_EVERY,
            phase: tokio::sync::Mutex::default(),
        }
    }

    /// Writes a snapshot after `events` events rather than
    /// [`COMPACT_EVERY`].
    #[must_use]
    pub fn compacting_every(mut self, events: usize) -> Self {
        self.compact_every = events.max(1);
        self
    }

    /// This coordinator's epoch: 0 until its state is loaded.
    pub async fn epoch(&self) -> u64 {
        match &*self.phase.lock().await {
            Phase::Unloaded => 0,
            Phase::Serving(inner) => inner.epoch,
            Phase::Deposed { epoch, .. } => *epoch,
        }
    }

    fn deposed(&self, epoch: u64, by: u64) -> StoreError {
        StoreError(format!(
            "the coordinator of epoch {epoch} (entity type {:?}) is deposed: one of epoch {by} started on topic {}",
            self.entity_type,
            self.log.topic()
        ))
    }

    fn failed(&self, what: &str, e: impl std::fmt::Display) -> StoreError {
        StoreError(format!(
            "{what} on topic {} (entity type {:?}): {e}",
            self.log.topic(),
            self.entity_type
        ))
    }

    async fn write(&self, key: &[u8], value: &Value) -> Result<i64, Failure> {
        let offsets = self
            .log
            .write(PARTITION, &[(key, encode(value))])
            .await
            .map_err(|e| Failure::Kafka(self.failed("write", e)))?;
        offsets
            .first()
            .copied()
            .ok_or_else(|| Failure::Kafka(self.failed("write", "no offset acknowledged")))
    }

    /// Tries until the broker answers: the coordinator cannot go on
    /// without it, so it waits (and says so, as `what`). A record that
    /// cannot be read stops it.
    async fn until_answered<T, F>(
        &self,
        what: &str,
        mut attempt: impl FnMut() -> F,
    ) -> Result<T, StoreError>
    where
        F: std::future::Future<Output = Result<T, Failure>>,
    {
        loop {
            match attempt().await {
                Ok(done) => return Ok(done),
                Err(Failure::Unreadable(e)) => return Err(e),
                Err(Failure::Kafka(e)) => {
                    tracing::warn!(entity_type = %self.entity_type, error = %e, retry_in = ?RETRY, "{what}; tried again");
                    tokio::time::sleep(RETRY).await;
                }
            }
        }
    }

    /// Writes until the broker takes it: the coordinator cannot decide
    /// anything before its decision is stored.
    async fn write_until_taken(&self, key: &[u8], value: &Value) -> Result<i64, StoreError> {
        self.until_answered("coordinator state not written", || self.write(key, value))
            .await
    }

    /// This entity type's records from `from` up to `until`, exclusive.
    async fn read(&self, from: i64, until: i64) -> Result<Vec<Read>, Failure> {
        let log = self.log.clone();
        let prefix = self.keys.prefix.clone();
        // Err: the broker's; Ok(Err): a record that cannot be read.
        let read =
            tokio::task::spawn_blocking(move || -> Result<Result<Vec<Read>, String>, String> {
                let mut records = Vec::new();
                let mut bad = None;
                log.read(PARTITION, Some(from), until, &mut |record| {
                    if !record.key.starts_with(prefix.as_bytes()) {
                        return ControlFlow::Continue(());
                    }
                    let value = match record.value.map(decode).transpose() {
                        Ok(value) => value,
                        Err(e) => {
                            bad = Some(format!("the record at offset {}: {e}", record.offset));
                            return ControlFlow::Break(());
                        }
                    };
                    records.push(Read {
                        key: record.key.to_vec(),
                        value,
                    });
                    ControlFlow::Continue(())
                })
                .map_err(|e| e.to_string())?;
                Ok(match bad {
                    Some(bad) => Err(bad),
                    None => Ok(records),
                })
            })
            .await
            .map_err(|e| Failure::Kafka(self.failed("read", e)))?;
        match read {
            Ok(Ok(records)) => Ok(records),
            Ok(Err(bad)) => Err(Failure::Unreadable(self.failed("read", bad))),
            Err(e) => Err(Failure::Kafka(self.failed("read", e))),
        }
    }

    /// Loads until the broker answers; a record that cannot be read stops
    /// it (the coordinator reports it and does not start), and so does a
    /// successor found while taking over.
    async fn load_state(&self) -> Result<Vec<CoordinatorEvent>, StoreError> {
        self.until_answered("coordinator state not read", || self.try_load())
            .await
    }

    /// Writes the epoch record of `epoch`: its offset.
    async fn write_epoch(&self, epoch: u64) -> Result<i64, Failure> {
        let value = Value {
            epoch,
            body: Body::Epoch,
        };
        self.write(&self.keys.epoch(epoch), &value).await
    }

    async fn try_load(&self) -> Result<Vec<CoordinatorEvent>, Failure> {
        let started = std::time::Instant::now();
        let mut phase = self.phase.lock().await;
        let Outranked {
            epoch,
            end,
            mut records,
            takeover,
        } = outrank(
            self.wanted,
            |epoch| self.write_epoch(epoch),
            |from, until| self.read(from, until),
        )
        .await?;
        let ours = self.keys.epoch(epoch);
        records.push(Read {
            key: ours,
            value: Some(Value {
                epoch,
                body: Body::Epoch,
            }),
        });
        let replayed = replay(&records);
        if replayed.ignored > 0 {
            tracing::warn!(entity_type = %self.entity_type, ignored = replayed.ignored, "coordinator records of a deposed coordinator ignored");
        }
        let state = CoordinatorState::replay(replayed.events.iter().cloned()).unwrap_or_default();
        let mut inner = Inner {
            epoch,
            checked: end,
            snapshots: 0,
            next: 0,
            state,
            events_since: 0,
            superseded: replayed.superseded,
            since_snapshot: replayed.since_snapshot,
        };
        if takeover {
            // A deposed predecessor may still write tombstones for records
            // this state rests on.
            match self.snapshot(&mut inner).await {
                Ok(()) => {}
                Err(Halt::Deposed { by }) => {
                    *phase = Phase::Deposed { epoch, by };
                    return Err(Failure::Unreadable(self.deposed(epoch, by)));
                }
                Err(Halt::Store(e)) => return Err(Failure::Unreadable(e)),
            }
        }
        *phase = Phase::Serving(inner);
        let took = started.elapsed();
        crate::metrics::coordinator_recovered(
            &self.entity_type,
            epoch,
            took,
            records.len(),
            takeover,
        );
        tracing::info!(entity_type = %self.entity_type, topic = %self.log.topic(), epoch, events = replayed.events.len(), records = records.len(), ?took, "coordinator state read from its topic");
        Ok(replayed.events)
    }

    async fn append(&self, event: CoordinatorEvent) -> Result<(), StoreError> {
        let mut phase = self.phase.lock().await;
        let inner = match &mut *phase {
            Phase::Serving(inner) => inner,
            Phase::Deposed { epoch, by } => return Err(self.deposed(*epoch, *by)),
            Phase::Unloaded => {
                return Err(StoreError(format!(
                    "the coordinator of entity type {:?} writes before its state was read",
                    self.entity_type
                )))
            }
        };
        let epoch = inner.epoch;
        // Slots, not numbers: the events between two snapshots take one
        // half of 2 × compact_every slots, the next ones the other half,
        // so a slot is written again only after the tombstone that the
        // snapshot between wrote for it. Compaction then keeps one record
        // per slot, and the partition stays as long as the state and the
        // events since its snapshot however long the coordinator runs
        // (with a number per event, each left a tombstone, which Kafka
        // keeps for the topic's delete.retention.ms).
        let slot = inner.next % (2 * self.compact_every as u64);
        let key = self.keys.event(epoch, slot);
        self.write_until_taken(
            &key,
            &Value {
                epoch,
                body: Body::Event(event.clone()),
            },
        )
        .await?;
        inner.next += 1;
        let _ = inner.state.apply(event);
        inner.since_snapshot.push(key);
        inner.events_since += 1;
        if inner.events_since >= self.compact_every {
            match self.snapshot(inner).await {
                Ok(()) => {}
                Err(Halt::Store(e)) => return Err(e),
                Err(Halt::Deposed { by }) => {
                    *phase = Phase::Deposed { epoch, by };
                    return Err(self.deposed(epoch, by));
                }
            }
        }
        Ok(())
    }

    /// Writes the state as a snapshot, then, unless a higher epoch came
    /// before it, tombstones every earlier key: compaction keeps the
    /// snapshot and what follows.
    async fn snapshot(&self, inner: &mut Inner) -> Result<(), Halt> {
        let epoch = inner.epoch;
        let key = self.keys.snapshot(epoch, inner.snapshots);
        inner.snapshots += 1;
        let events = inner.state.snapshot();
        let at = self
            .write_until_taken(
                &key,
                &Value {
                    epoch,
                    body: Body::Snapshot(events),
                },
            )
            .await
            .map_err(Halt::Store)?;
        let between = self
            .until_answered("coordinator topic not read", || {
                self.read(inner.checked, at)
            })
            .await
            .map_err(Halt::Store)?;
        let higher = between
            .iter()
            .filter_map(|read| read.value.as_ref())
            .map(|value| value.epoch)
            .max()
            .filter(|&highest| highest > epoch);
        if let Some(by) = higher {
            tracing::warn!(entity_type = %self.entity_type, epoch, by, "coordinator deposed: its snapshot came after a successor's start, and it writes nothing more");
            return Err(Halt::Deposed { by });
        }
        inner.checked = at;
        let mut stale = std::mem::take(&mut inner.superseded);
        stale.append(&mut inner.since_snapshot);
        stale.retain(|k| *k != key);
        // The epoch record stays: it is what fences a deposed coordinator's
        // later records for readers that start after compaction.
        let ours = self.keys.epoch(epoch);
        stale.retain(|k| *k != ours);
        inner.since_snapshot = vec![ours, key];
        inner.events_since = 0;
        if let Err(e) = self.log.delete(PARTITION, &stale).await {
            // Nothing is lost: the records stay until the next snapshot.
            tracing::warn!(entity_type = %self.entity_type, error = %e, "superseded coordinator records not deleted; tried again at the next snapshot");
            inner.superseded = stale;
        }
        Ok(())
    }
}

impl CoordinatorStore for KafkaCoordinatorStore {
    fn load(&self) -> BoxFuture<'_, Result<Vec<CoordinatorEvent>, StoreError>> {
        Box::pin(self.load_state())
    }

    fn persist(&self, event: CoordinatorEvent) -> BoxFuture<'_, Result<(), StoreError>> {
        Box::pin(self.append(event))
    }
}
