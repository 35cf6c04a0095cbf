//! Standby shards: a node keeps a warm copy of shards of a durable entity
//! type that it does not host, by reading their changelog partitions into
//! its store as a restore reads them (`restore.rs`, [`Ending::Standby`]),
//! so that a start of such a shard here reads only the tail. A standby
//! never writes to the changelog and never answers a message: its copy
//! sits in the store under a standby's checkpoint, and only a start of the
//! shard here takes it over. The copy has one writer at a time (the
//! shard's lock, [`Restore::writer`]): a start waits for a step under way
//! and goes on from where it ended, and a step finds the shard running
//! and leaves it alone.
//!
//! Which node keeps which shard: of the regions the coordinator lists (not
//! its proxies), the `standbys + 1` ranked first for the shard by a hash of
//! both (`colo_allocation::standbys`), the shard's host excepted, so copies
//! stay put as members come and go, but for those of the members that
//! came or went. The coordinator ranks alike, and places a shard without a
//! home on a keeper when the balance of shards allows it. Kafka, not colo,
//! decides which node a partition's shard goes to; with `standbys` one
//! less than the nodes, every node that may get it has it warm. A copy a
//! node no longer keeps stays in its store, a tail behind: a start there
//! still reads only what it lacks.
//!
//! Every [`STEP`], each kept shard's partition is read from its checkpoint
//! to its end: the copies lag by about that much.

use super::restore::Applied;
use super::restore::{Ending, Restore, RestoreError, RestoredFrom};
use super::EntityChangelog;
use super::{DurableShards, NodeStore};
use crate::metrics::StandbyMetrics;
use colo_allocation::standbys::keeps;
use colo_allocation::{RegionId, ShardId};
use std::sync::Arc;
use std::time::Duration;

/// How often the standbys read their partitions' new records.
pub(crate) const STEP: Duration = Duration::from_secs(1);

/// The regions the coordinator listed last, its proxies excepted, as the
/// region publishes them.
pub(crate) type MembersOf = tokio::sync::watch::Receiver<Vec<RegionId>>;

/// One entity type's standby shards on this node.
pub(crate) struct Standbys {
    store: Arc<NodeStore>,
    changelog: Arc<dyn EntityChangelog>,
    entity_type: Arc<str>,
    number_of_shards: u32,
    standbys: u32,
    node: RegionId,
    members: MembersOf,
    /// The shards running here, whose copy is the start's own.
    hosted: Arc<DurableShards>,
    metrics: StandbyMetrics,
}

impl Standbys {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        store: Arc<NodeStore>,
        changelog: Arc<dyn EntityChangelog>,
        entity_type: &str,
        number_of_shards: u32,
        standbys: u32,
        node: RegionId,
        members: MembersOf,
        hosted: Arc<DurableShards>,
    ) -> Self {
        Self {
            store,
            changelog,
            entity_type: Arc::from(entity_type),
            number_of_shards,
            standbys,
            node,
            members,
            hosted,
            metrics: StandbyMetrics::new(entity_type),
        }
    }

    /// Keeps the copies, a round of steps every [`STEP`] and at once when
    /// the members change (a node that joins has its copies warm before
    /// the group's second round gives it partitions), until the node's
    /// task set ends.
    pub async fn run(mut self) {
        tracing::info!(entity_type = %self.entity_type, standbys = self.standbys, "standby shards kept");
        let mut tick = tokio::time::interval(STEP);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                changed = self.members.changed() => {
                    if changed.is_err() {
                        return;
                    }
                }
            }
            self.round().await;
        }
    }

    /// One step of each kept shard, one after another: side by side, they
    /// took the node's two cores in bursts and its records' latency p99
    /// from 69 ms to 195 ms (BENCHMARKS.md).
    async fn round(&self) {
        let members = self.members.borrow().clone();
        let kept: Vec<ShardId> = (0..self.number_of_shards)
            .map(ShardId)
            .filter(|shard| keeps(&self.node, &members, *shard, self.standbys))
            .filter(|shard| !self.hosted.runs(*shard))
            .collect();
        self.metrics.shards(kept.len());
        let copies = self.store.standby_copies();
        copies.keep(&self.entity_type, &kept);
        let mut lag = 0;
        for shard in kept {
            match self.step(shard).await {
                Ok(Some(applied)) => {
                    lag += applied.read;
                    self.metrics.records(applied.read, applied.bytes);
                    let reached = (applied.read, applied.checkpoint.offset);
                    copies.stepped(&self.entity_type, shard, Ok(reached));
                }
                Ok(None) => {}
                Err(e) => {
                    self.metrics.failed();
                    copies.stepped(&self.entity_type, shard, Err(e.to_string()));
                    tracing::warn!(entity_type = %self.entity_type, %shard, error = %e, retry_in = ?STEP, "a standby's copy of the shard could not be brought up to date");
                }
            }
        }
        self.metrics.lag(lag);
    }

    /// Brings the copy of `shard` up to its partition's end, unless the
    /// shard runs here (`None`).
    async fn step(&self, shard: ShardId) -> Result<Option<Applied>, RestoreError> {
        let restore = Arc::new(Restore {
            store: self.store.store(),
            turns: self.store.restores().clone(),
            changelog: self.changelog.clone(),
            entity_type: self.entity_type.clone(),
            shard,
            node: self.node.to_string(),
            writer: self.store.shard_writer(&self.entity_type, shard),
            vouched: self.store.vouched(&self.entity_type),
        });
        let _writer = restore.writer.clone().lock_owned().await;
        if self.hosted.runs(shard) {
            return Ok(None);
        }
        let local = restore.checkpoint().await?;
        let this = restore.clone();
        let pass = self
            .store
            .restores()
            .run(move || this.pass(local, Ending::Standby))
            .await
            .map_err(RestoreError::Thread)??;
        if pass.from == RestoredFrom::Changelog && local.is_some() {
            tracing::info!(entity_type = %self.entity_type, %shard, read = pass.applied.read, "a standby's copy read the whole partition again");
        }
        Ok(Some(pass.applied))
    }
}
