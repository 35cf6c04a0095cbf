//! The coordinators' election through Kafka, as one node takes part.
//!
//! Every node joins the election group `<cluster>.coordinator` on the
//! one-partition coordinator topic of the same name, and follows that topic
//! from its first record. The member the group assigns the partition is
//! elected: it writes a leader record (its address, and an epoch above
//! every epoch on the topic) and, once it reads that record back with no
//! higher epoch before it, starts the coordinator of every entity type on
//! the topic's state. It stops them as soon as the partition is revoked or
//! lost, or a leader record above its own appears (a broker may assign the
//! partition to a newcomer before its owner revoked it).
//!
//! The broker's group may also leave the partition unassigned (a leader
//! that died without leaving, on a broker that expires members late): a
//! node none of whose regions reaches a coordinator, and that is not
//! elected, for `coordinator.election_timeout` joins the group again, as a
//! new member. Only then: a rejoin is a rebalance of the group, and a
//! broker that assigns with stale metadata may move the partition away
//! from a live coordinator.
//!
//! The same broker keeps a dead leader's partitions of an entity type's
//! own consumer group without an owner. The elected node watches for it:
//! when shards of a Kafka-driven entity type stay without a home, and
//! without a node whose consumer holds their partition, for
//! `coordinator.election_timeout`, it has its own consumers of that group
//! leave and join again (a Kafka broker moves such partitions when the
//! session times out, long before), and waits twice, then four times as
//! long before the next rejoin while they stay so. A shard whose partition
//! a node holds is waiting for something a rejoin would only set back (its
//! previous owner's release, its restore, a record that does not settle):
//! each rejoin revokes every partition of the node.

use crate::kafka::leader::{leader_key, leader_value, ElectedHosting, Read};
use crate::node::Node;
use crate::process::config::NodeConfig;
use crate::process::program::coordinators::{self, Hosted};
use crate::process::program::ProgramError;
use crate::tasks::TaskSet;
use colo_connectors::{Changelog, Election, ElectionEvent, ElectionSettings, GroupRejoin};
use std::sync::{Arc, OnceLock, Weak};
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

/// How often an unfinished claim is tried again and the regions' contact
/// with their coordinator looked at.
const TICK: Duration = Duration::from_secs(1);
/// Rejoins in a row wait up to 2^REJOIN_BACKOFF election timeouts.
const REJOIN_BACKOFF: u32 = 2;

/// See `Driver::orphan_timeout`.
fn orphan_timeout(election_timeout: Duration, group_session: Duration) -> Duration {
    election_timeout.max(group_session.saturating_mul(2))
}

/// How long to wait before a rejoin after `rejoins` in a row: the timeout,
/// then twice, then four times it.
fn rejoin_wait(timeout: Duration, rejoins: u32) -> Duration {
    timeout * (1 << rejoins.min(REJOIN_BACKOFF))
}
/// How long a revoke waits for this node to stop its coordinators.
const STEP_DOWN_TIMEOUT: Duration = Duration::from_secs(10);

/// Where this node stands in the election.
#[derive(Debug)]
enum Phase {
    /// Not elected: it follows the leader the topic names.
    Following,
    /// Elected by the group at `since`, its leader record not written yet
    /// (the broker refused it, or a higher epoch came first).
    Elected { since: Instant },
    /// Its leader record is at `offset`, with `epoch`: it leads once it
    /// reads the record back with no higher epoch before it.
    Claiming {
        since: Instant,
        epoch: u64,
        offset: i64,
    },
    /// It runs the coordinators, with `epoch`.
    Leading { epoch: u64 },
    /// A higher leader record came while the group still assigns it the
    /// partition: it stopped its coordinators and waits for the revoke.
    Outranked,
}

/// Shards without a home and whose partitions no node's consumer holds,
/// as the elected node watches them.
#[derive(Debug, Clone, Copy)]
enum Orphans {
    None,
    /// Some, since `since` (or since the last rejoin), after `rejoins`
    /// rejoins in a row.
    Since {
        since: Instant,
        rejoins: u32,
    },
}

/// Shards of `number_of_shards` that no region hosts, hands off, restores
/// or consumes the partition of.
fn unheld_shards(stats: &crate::inspection::ClusterShardingStats, number_of_shards: u32) -> usize {
    let held: std::collections::BTreeSet<u32> = stats
        .regions
        .values()
        .flat_map(|r| {
            r.stats
                .keys()
                .chain(&r.failed)
                .chain(&r.handing_off)
                .chain(&r.restoring)
                .chain(&r.assigned)
                .map(|s| s.0)
        })
        .filter(|s| *s < number_of_shards)
        .collect();
    (number_of_shards as usize).saturating_sub(held.len())
}

/// This node's part in the election, running.
pub(in crate::process::program) struct Electing {
    stop: Option<oneshot::Sender<()>>,
    tasks: TaskSet,
    done: Option<oneshot::Receiver<()>>,
    node: Arc<OnceLock<Weak<Node>>>,
    ingests: Arc<OnceLock<Vec<GroupRejoin>>>,
}

impl Electing {
    /// Joins the election group and follows the coordinator topic.
    pub(in crate::process::program) async fn start(
        config: &NodeConfig,
        types: Vec<Hosted>,
        hosting: Arc<ElectedHosting>,
    ) -> Result<Self, ProgramError> {
        let Some(log) = super::coordinator_topic(config).await? else {
            return Err(ProgramError::Settings(
                "an elected coordinator needs [kafka]".into(),
            ));
        };
        let kafka = config
            .kafka
            .as_ref()
            .ok_or_else(|| ProgramError::Settings("an elected coordinator needs [kafka]".into()))?;
        let settings = ElectionSettings {
            bootstrap_servers: kafka.bootstrap_servers.clone(),
            client: kafka.client_properties(),
            group_id: kafka.coordinator_topic(),
            topic: kafka.coordinator_topic(),
            member: hosting.address().to_string(),
            session_timeout: config.coordinator.session_timeout,
            step_down_timeout: STEP_DOWN_TIMEOUT,
        };
        let (election, events) = Election::start(settings).map_err(|e| {
            ProgramError::Settings(format!("the coordinator's election group: {e}"))
        })?;
        for t in &types {
            crate::metrics::coordinator_hosted(&t.name, false);
        }
        let node = Arc::new(OnceLock::new());
        let ingests = Arc::new(OnceLock::new());
        let driver = Driver {
            node: node.clone(),
            ingests: ingests.clone(),
            orphans: Orphans::None,
            config: config.clone(),
            types,
            hosting,
            log,
            election,
            phase: Phase::Following,
            alive: Instant::now(),
            rejoins: 0,
        };
        let (stop, stopped) = oneshot::channel();
        let (finished, done) = oneshot::channel();
        let tasks = TaskSet::default();
        tasks.spawn(async move {
            driver.run(events, stopped).await;
            let _ = finished.send(());
        });
        Ok(Self {
            stop: Some(stop),
            tasks,
            done: Some(done),
            node,
            ingests,
        })
    }

    /// This node's consumers of the Kafka-driven entity types, which it has
    /// rejoin their groups when it leads and shards stay without a home.
    pub(in crate::process::program) fn watch_ingests(&self, ingests: Vec<GroupRejoin>) {
        let _ = self.ingests.set(ingests);
    }

    /// The node whose regions say whether they reach a coordinator: until
    /// it is set, none does.
    pub(in crate::process::program) fn watch_regions(&self, node: &Arc<Node>) {
        let _ = self.node.set(Arc::downgrade(node));
    }

    /// Stops this node's coordinators and leaves the election group, so
    /// that another node is elected at once; within `limit`.
    pub(in crate::process::program) async fn shutdown(mut self, limit: Duration) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(done) = self.done.take() {
            if tokio::time::timeout(limit, done).await.is_err() {
                tracing::warn!(timeout = ?limit, "the election group was not left in time");
            }
        }
        self.tasks.abort_all().await;
    }
}

struct Driver {
    /// The node, once it exists: its regions' contact with their
    /// coordinator is what says a coordinator runs.
    node: Arc<OnceLock<Weak<Node>>>,
    /// This node's consumers of Kafka-driven entity types, once started.
    ingests: Arc<OnceLock<Vec<GroupRejoin>>>,
    /// While leading: whether Kafka-driven entity types have shards
    /// without a home and without an assigned partition.
    orphans: Orphans,
    config: NodeConfig,
    types: Vec<Hosted>,
    hosting: Arc<ElectedHosting>,
    log: Arc<Changelog>,
    election: Election,
    phase: Phase,
    /// When this node last was elected, read a new leader record, had a
    /// region reach a coordinator, or joined the group again.
    alive: Instant,
    /// Rejoins since then.
    rejoins: u32,
}

impl Driver {
    async fn run(
        mut self,
        mut events: mpsc::UnboundedReceiver<ElectionEvent>,
        mut stop: oneshot::Receiver<()>,
    ) {
        let mut tick = tokio::time::interval(TICK);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = &mut stop => break,
                event = events.recv() => match event {
                    Some(event) => self.on_event(event).await,
                    None => break,
                },
                _ = tick.tick() => self.on_tick().await,
            }
        }
        self.step_down("this node stops");
        // Closed before the member leaves, so that its last revoke does
        // not wait for an answer no one gives.
        drop(events);
        let election = self.election;
        let _ = tokio::task::spawn_blocking(move || election.shutdown()).await;
    }

    async fn on_event(&mut self, event: ElectionEvent) {
        match event {
            ElectionEvent::Elected => {
                tracing::info!("elected by the coordinator's election group");
                self.phase = match std::mem::replace(&mut self.phase, Phase::Following) {
                    Phase::Following | Phase::Outranked => self.claim(Instant::now()).await,
                    other => other,
                };
            }
            ElectionEvent::Deposed(step_down) => {
                self.step_down("the election group revoked its partition");
                self.phase = Phase::Following;
                step_down.done();
            }
            ElectionEvent::Record { offset, value, .. } => {
                self.on_record(offset, value.as_deref()).await;
            }
        }
    }

    async fn on_record(&mut self, offset: i64, value: Option<&[u8]>) {
        let read = match self.hosting.read(value) {
            Ok(read) => read,
            Err(e) => {
                tracing::warn!(offset, error = %e, "coordinator topic record not read");
                return;
            }
        };
        if let Read::NewLeader(leader) = &read {
            // The epoch advanced: a node was just elected. Its coordinators
            // get a whole timeout to be reached before this node rejoins
            // (a rejoin now would restart the group's round, and could move
            // the partition away from it).
            self.alive = Instant::now();
            self.rejoins = 0;
            crate::metrics::coordinator_elected(leader.epoch);
            tracing::info!(epoch = leader.epoch, address = %leader.address, "the coordinator topic names a new elected coordinator");
        }
        self.phase = match std::mem::replace(&mut self.phase, Phase::Following) {
            Phase::Claiming {
                since,
                epoch,
                offset: mine,
            } => {
                if offset < mine && self.hosting.highest() >= epoch {
                    // An epoch as high came before this claim: claim above.
                    self.claim(since).await
                } else if offset < mine {
                    Phase::Claiming {
                        since,
                        epoch,
                        offset: mine,
                    }
                } else {
                    self.lead(since, epoch).await
                }
            }
            Phase::Leading { epoch } => match read {
                Read::NewLeader(leader) if leader.epoch > epoch => {
                    self.step_down("a coordinator with a higher epoch was elected");
                    Phase::Outranked
                }
                _ => Phase::Leading { epoch },
            },
            other => other,
        };
    }

    async fn on_tick(&mut self) {
        self.phase = match std::mem::replace(&mut self.phase, Phase::Following) {
            Phase::Elected { since } => self.claim(since).await,
            other => other,
        };
        if matches!(self.phase, Phase::Leading { .. }) {
            self.watch_orphans().await;
        } else {
            self.orphans = Orphans::None;
        }
        let alive = match &self.phase {
            Phase::Elected { .. } | Phase::Claiming { .. } | Phase::Leading { .. } => true,
            Phase::Following | Phase::Outranked => self.regions_reach_a_coordinator(),
        };
        if alive {
            self.alive = Instant::now();
            self.rejoins = 0;
        }
        // Each rejoin in a row waits twice as long as the one before (up to
        // REJOIN_BACKOFF times the timeout): a rejoin starts a new round of
        // the group, and on a slow broker rounds that keep being restarted
        // never assign the partition.
        let wait = rejoin_wait(self.config.coordinator.election_timeout, self.rejoins);
        if self.alive.elapsed() >= wait {
            tracing::warn!(?wait, leader = ?self.hosting.leader(), "no coordinator reachable and not elected: joining the election group again");
            crate::metrics::coordinator_election_rejoined();
            self.election.rejoin();
            self.alive = Instant::now();
            self.rejoins += 1;
        }
    }

    /// While leading: whether a Kafka-driven entity type has shards that
    /// neither run anywhere nor have their partition held by any node's
    /// consumer, for how long; past [`Self::orphan_timeout`] (then twice,
    /// then four times it, while they stay so), this node's consumers
    /// rejoin their groups. A shard whose partition is held waits for
    /// something a rejoin would only set back (a release, a restore, a
    /// stuck record); one a region that does not answer may hold is not
    /// counted as without a home either.
    async fn watch_orphans(&mut self) {
        let Some(node) = self.node.get().and_then(Weak::upgrade) else {
            return;
        };
        let mut orphans = 0;
        for t in self.types.iter().filter(|t| t.follows_partitions) {
            let Some(region) = node.region_by_name(&t.name) else {
                continue;
            };
            let Ok(stats) = region.cluster_stats(TICK).await else {
                return;
            };
            if !stats.failed_regions.is_empty() {
                // Not known: neither counted nor cleared.
                return;
            }
            orphans += unheld_shards(&stats, t.settings.number_of_shards);
        }
        if orphans == 0 {
            self.orphans = Orphans::None;
            return;
        }
        let (since, rejoins) = match self.orphans {
            Orphans::None => (Instant::now(), 0),
            Orphans::Since { since, rejoins } => (since, rejoins),
        };
        let wait = rejoin_wait(self.orphan_timeout(), rejoins);
        if since.elapsed() >= wait {
            tracing::warn!(orphans, ?wait, "shards of Kafka-driven entity types neither run anywhere nor have their partitions assigned to any node: this node's consumers rejoin their groups");
            for ingest in self.ingests.get().into_iter().flatten() {
                ingest.rejoin();
            }
            self.orphans = Orphans::Since {
                since: Instant::now(),
                rejoins: rejoins + 1,
            };
        } else {
            self.orphans = Orphans::Since { since, rejoins };
        }
    }

    /// How long shards may stay without a home or an assigned partition
    /// before this node's consumers rejoin: `election_timeout`, and at
    /// least twice the groups' session timeout. A dead node's region goes
    /// silent at once, but the brokers keep its partitions assigned to it
    /// until its session times out; a rejoin before that moves nothing and
    /// revokes every partition of this node while the group waits for the
    /// dead member (the survivor of a coordinator's node killed with the
    /// default 45 s session stopped its own partitions for 22 s so).
    fn orphan_timeout(&self) -> Duration {
        let session = self
            .config
            .kafka
            .as_ref()
            .map_or(Duration::ZERO, |kafka| kafka.group_session_timeout());
        orphan_timeout(self.config.coordinator.election_timeout, session)
    }

    /// Whether a region of this node has a live link to a coordinator
    /// now (its heartbeats answered).
    fn regions_reach_a_coordinator(&self) -> bool {
        let Some(node) = self.node.get().and_then(Weak::upgrade) else {
            return false;
        };
        node.entity_types().iter().any(|name| {
            node.region_by_name(name)
                .is_some_and(|region| region.coordinator_reachable())
        })
    }

    /// Writes a leader record with an epoch above every one read.
    async fn claim(&mut self, since: Instant) -> Phase {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
        let epoch = now.max(self.hosting.highest() + 1);
        let record = (
            leader_key(epoch),
            leader_value(epoch, self.hosting.address()),
        );
        match self.log.write(0, &[record]).await {
            Ok(offsets) => match offsets.first() {
                Some(&offset) => {
                    tracing::info!(epoch, offset, "leader record written");
                    Phase::Claiming {
                        since,
                        epoch,
                        offset,
                    }
                }
                None => Phase::Elected { since },
            },
            Err(e) => {
                tracing::warn!(error = %e, retry_in = ?TICK, "leader record not written; tried again");
                Phase::Elected { since }
            }
        }
    }

    /// Its leader record read back with no higher epoch before it: starts
    /// the coordinators.
    async fn lead(&mut self, since: Instant, epoch: u64) -> Phase {
        let mut started = 0;
        for t in &self.types {
            let store = super::coordinator_store(&self.log, &t.name, epoch);
            match coordinators::spawn(
                &self.config,
                &t.name,
                &t.settings,
                t.follows_partitions,
                store,
            ) {
                Ok(handle) => {
                    self.hosting.host(handle, epoch);
                    crate::metrics::coordinator_hosted(&t.name, true);
                    started += 1;
                }
                Err(e) => {
                    tracing::error!(entity_type = %t.name, error = %e, "coordinator not started");
                }
            }
        }
        crate::metrics::coordinator_took_over(since.elapsed());
        tracing::info!(epoch, entity_types = started, took = ?since.elapsed(), "hosting the coordinators");
        // Earlier leader records are no one's now: compaction may drop
        // them.
        let below: Vec<Vec<u8>> = self
            .hosting
            .leader_epochs_below(epoch)
            .into_iter()
            .map(leader_key)
            .collect();
        if !below.is_empty() {
            if let Err(e) = self.log.delete(0, &below).await {
                tracing::debug!(error = %e, "earlier leader records not tombstoned");
            }
        }
        Phase::Leading { epoch }
    }

    fn step_down(&mut self, why: &str) {
        let stopped = self.hosting.step_down();
        if stopped > 0 {
            for t in &self.types {
                crate::metrics::coordinator_hosted(&t.name, false);
            }
            tracing::info!(coordinators = stopped, why, "stepped down");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{orphan_timeout, unheld_shards};
    use crate::inspection::{ClusterShardingStats, RegionStats};
    use colo_allocation::{RegionId, ShardId};
    use std::collections::BTreeMap;
    use std::time::Duration;

    fn region(hosted: &[u32], assigned: &[u32]) -> RegionStats {
        RegionStats {
            stats: hosted.iter().map(|s| (ShardId(*s), 1)).collect(),
            assigned: assigned.iter().copied().map(ShardId).collect(),
            ..RegionStats::default()
        }
    }

    #[test]
    fn a_shard_whose_partition_a_node_holds_is_not_without_a_home() {
        let stats = ClusterShardingStats {
            regions: BTreeMap::from([
                // Shard 2's partition is assigned to b, which waits for its
                // previous owner's release.
                (RegionId::new("a:1"), region(&[0, 1], &[0, 1])),
                (RegionId::new("b:1"), region(&[], &[2])),
            ]),
            failed_regions: Vec::new(),
        };
        assert_eq!(unheld_shards(&stats, 4), 1, "shard 3 only");
        assert_eq!(unheld_shards(&stats, 3), 0);
    }

    #[test]
    fn shards_without_a_home_wait_out_the_groups_session_before_a_rejoin() {
        let secs = Duration::from_secs;
        // The default 45 s session: a dead member keeps its partitions that
        // long, so the election's 15 s would rejoin too early.
        assert_eq!(orphan_timeout(secs(15), secs(45)), secs(90));
        // The tests' 6 s session: the election's timeout is the longer.
        assert_eq!(orphan_timeout(secs(15), secs(6)), secs(15));
    }
}
