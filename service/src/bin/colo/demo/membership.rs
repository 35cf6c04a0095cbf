//! The demo's membership changes: node-4 joins, then node-2 leaves, each in
//! a task of its own, beside the progress lines.

use super::assignment::GroupAssignor;
use super::{step, DemoError, DemoNode, TalliedUser};
use colo::kafka::{IngestSettings, KafkaIngest};
use colo::process::samples::purchases;
use colo::TaskSet;
use colo::{EntityType, InMemoryNetwork, Node, NodeStore, Region, StateSettings};
use colo_connectors::GroupMember;
use colo_connectors::{Changelog, OutputProducer};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::mpsc;

/// How long a node may take to join (until it hosts its share of the
/// shards) or to leave (until the others host its shards) before the demo
/// gives up: past every bound the steps keep themselves (the rebalance
/// timeout, the hand-off timeout, [`SETTLES_WITHIN`]), so only a hung step
/// reaches it.
const MEMBERSHIP_TIMEOUT: Duration = Duration::from_secs(60);

/// How long a joining node may take to host its share of the shards before
/// node-2 leaves anyway, and the others to host a leaving node's shards
/// before the demo goes on.
const SETTLES_WITHIN: Duration = Duration::from_secs(20);

/// How often a joiner's member epoch is read while the group's
/// coordinator does not count it yet: a fraction of the members' heartbeat
/// interval.
const ADMIT_EVERY: Duration = Duration::from_millis(50);

/// What starting a node takes, cloned into the task that starts node-4.
#[derive(Clone)]
pub(super) struct NodeStarter {
    pub(super) network: InMemoryNetwork,
    pub(super) entity_type: EntityType<TalliedUser>,
    pub(super) ingest: IngestSettings,
    /// Each node's data directory goes under it.
    pub(super) data: std::path::PathBuf,
}

impl NodeStarter {
    pub(super) async fn start(&self, name: &str) -> Result<DemoNode, DemoError> {
        let store = {
            let dir = self.data.join(name);
            let settings = self.ingest.source.clone();
            let entity_type = self.entity_type.name().to_string();
            tokio::task::spawn_blocking(move || {
                let store = NodeStore::open(&dir, StateSettings::default())
                    .map_err(step("open the node's state store"))?;
                let changelog = Changelog::new(
                    &settings.bootstrap_servers,
                    &settings.client,
                    &super::changelog_topic(&entity_type),
                    std::time::Duration::from_secs(30),
                )
                .map_err(step("the changelog"))?;
                let outputs = OutputProducer::new(
                    &settings.bootstrap_servers,
                    &settings.client,
                    std::time::Duration::from_secs(30),
                )
                .map_err(step("the output producer"))?;
                Ok::<_, DemoError>(
                    store
                        .with_changelog(&entity_type, changelog)
                        .with_outputs(outputs),
                )
            })
            .await
            .map_err(step("open the node's state store"))??
        };
        let node = Node::with_state_store(self.network.transport(name), store);
        let region = node
            .start_region(self.entity_type.clone())
            .map_err(step("start region"))?;
        // Off the runtime's threads: the ingest blocks while it reads the
        // topics' metadata.
        let ingest = {
            let (region, settings) = (region.clone(), self.ingest.clone());
            tokio::task::spawn_blocking(move || {
                KafkaIngest::start(region, settings, purchases::purchase_records())
            })
            .await
            .map_err(step("start the Kafka ingest"))?
            .map_err(step("start the Kafka ingest"))?
        };
        let member = ingest.group_member();
        Ok(DemoNode {
            name: name.to_string(),
            member,
            node,
            region,
            ingest,
        })
    }
}

/// The demo's membership changes, each made in a task of its own so that
/// the progress lines go on while the group rebalances and shards hand off.
pub(super) struct Membership {
    phase: Phase,
    starter: NodeStarter,
    /// Gives the group its target assignment at each change.
    assignor: Arc<GroupAssignor>,
    /// Shards of the entity type: all are hosted again once a leave is
    /// done.
    shards: usize,
    pub(super) tasks: TaskSet,
    /// Each change begun, and when.
    moves: Vec<Move>,
    changed: mpsc::Sender<Result<Change, DemoError>>,
    /// Bounded by the one change under way at a time.
    pub(super) changes: mpsc::Receiver<Result<Change, DemoError>>,
}

/// Where the demo's changes are. node-2 leaves only once node-4 hosts its
/// share of the shards: a leave during the join's rounds of the group
/// waits for them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Nothing changed yet; nothing will once every record is produced.
    Before,
    Joining,
    Joined,
    Leaving,
    Done,
}

/// A change of the demo's membership, begun.
pub(super) struct Move {
    pub(super) name: String,
    pub(super) began: Instant,
    /// The shards it moved from one node to another, once it is done.
    pub(super) moved: BTreeSet<u32>,
}

/// A change done, as its task reports it.
pub(super) enum Change {
    Joined {
        /// Boxed: a node is many times the size of the other changes.
        node: Box<DemoNode>,
        took: Duration,
        shards: usize,
        /// Shards the nodes already there took from one another in the
        /// join, once all shards were hosted again: none, when the group's
        /// assignment is sticky.
        swapped: usize,
        /// Every shard whose node changed.
        moved: BTreeSet<u32>,
    },
    Left {
        name: String,
        took: Duration,
        /// Since it began to leave, until the others hosted every shard.
        rehosted: Option<Duration>,
        /// The shards it hosted when it began to leave.
        moved: BTreeSet<u32>,
    },
}

impl Membership {
    pub(super) fn new(starter: NodeStarter, assignor: GroupAssignor, shards: usize) -> Self {
        let (changed, changes) = mpsc::channel(1);
        Self {
            phase: Phase::Before,
            starter,
            assignor: Arc::new(assignor),
            shards,
            tasks: TaskSet::default(),
            moves: Vec::new(),
            changed,
            changes,
        }
    }

    /// Starts the change due once `share` of the records are produced:
    /// node-4 joins past a quarter (while records are produced), node-2
    /// leaves past half once node-4 has joined. Not at 30% and 60%: at the
    /// default rate a tick comes every tenth of the records, and one a
    /// record short would put the change off by a tick.
    pub(super) fn due(&mut self, share: f64, producing: bool, nodes: &mut Vec<DemoNode>) {
        match self.phase {
            Phase::Before if producing && share >= 0.25 => {
                println!(
                    "node-4 joins: the group rebalances and some partitions' shards hand off to it"
                );
                self.moves.push(Move {
                    name: "node-4's join".into(),
                    began: Instant::now(),
                    moved: BTreeSet::new(),
                });
                self.join("node-4", self.shards / (nodes.len() + 1), nodes);
                self.phase = Phase::Joining;
            }
            Phase::Joined if share >= 0.55 && nodes.len() > 1 => {
                let leaving = nodes.remove(1);
                self.moves.push(Move {
                    name: format!("{}'s leave", leaving.name),
                    began: Instant::now(),
                    moved: BTreeSet::new(),
                });
                println!("{} leaves: its partitions are revoked, its shards handed off, its offsets committed", leaving.name);
                self.leave(leaving, nodes);
                self.phase = Phase::Leaving;
            }
            _ => {}
        }
    }

    /// Each change begun so far, and when.
    pub(super) fn moves(&self) -> &[Move] {
        &self.moves
    }

    /// No change is under way or still to come.
    pub(super) fn settled(&self) -> bool {
        matches!(self.phase, Phase::Before | Phase::Done)
    }

    pub(super) fn changed(&mut self, change: Change, nodes: &mut Vec<DemoNode>) {
        match change {
            Change::Joined {
                node,
                took,
                shards,
                swapped,
                moved,
            } => {
                self.moved(moved);
                let plural = if shards == 1 { "" } else { "s" };
                println!(
                    "{} hosts {shards} shard{plural} {:.1}s after it joined (at the members' heartbeats, the others revoke, then it is assigned); the others took {swapped} of one another's",
                    node.name,
                    took.as_secs_f64()
                );
                nodes.push(*node);
                self.phase = Phase::Joined;
            }
            Change::Left {
                name,
                took,
                rehosted,
                moved,
            } => {
                self.moved(moved);
                let shards = self.shards;
                match rehosted {
                    Some(rehosted) => println!(
                        "{name} left in {:.1}s; the others host all {shards} shards {:.1}s after it began to leave (the group's coordinator assigned its partitions at the others' heartbeats)",
                        took.as_secs_f64(),
                        rehosted.as_secs_f64()
                    ),
                    None => println!(
                        "{name} left in {:.1}s; the others do not host all {shards} shards yet",
                        took.as_secs_f64()
                    ),
                }
                self.phase = Phase::Done;
            }
        }
    }

    /// The change under way moved `shards`.
    fn moved(&mut self, shards: BTreeSet<u32>) {
        if let Some(change) = self.moves.last_mut() {
            change.moved = shards;
        }
    }

    /// Starts node `name`, reporting once it hosts `at_least` shards (each
    /// node's share, rounded down): the rounds of the group that hand them
    /// to it are done then. The group's target assignment first keeps what
    /// `nodes` hold, then gives it its share.
    fn join(&self, name: &'static str, at_least: usize, nodes: &[DemoNode]) {
        let (starter, changed) = (self.starter.clone(), self.changed.clone());
        let assignor = self.assignor.clone();
        let members: Vec<_> = nodes
            .iter()
            .map(|node| (node.member.clone(), node.region.clone()))
            .collect();
        let all = self.shards;
        self.tasks.spawn(async move {
            let started = Instant::now();
            let join = async {
                let before = held_partitions(&members).await?;
                assignor.take_over(&before).map_err(DemoError::Step)?;
                let node = starter.start(name).await?;
                let joiner = id_of(node.member.as_ref())?;
                admitted(&assignor, node.member.as_ref(), &joiner).await?;
                let mut ids: Vec<String> = before.iter().map(|(id, _)| id.clone()).collect();
                ids.push(joiner.clone());
                assignor.assign(&ids).map_err(DemoError::Step)?;
                let shards = hosted_shards(&node.region, at_least, SETTLES_WITHIN).await;
                let took = started.elapsed();
                all_hosted(&node.region, all, SETTLES_WITHIN).await;
                let mut after = held_partitions(&members).await?;
                after.push((joiner.clone(), hosted(&node.region).await?));
                let (moved, swapped) = moves(&before, &after, &joiner);
                Ok(Change::Joined {
                    node: Box::new(node),
                    took,
                    shards,
                    swapped,
                    moved,
                })
            };
            let joined = match tokio::time::timeout(MEMBERSHIP_TIMEOUT, join).await {
                Ok(joined) => joined,
                Err(_) => Err(DemoError::Step(format!(
                    "{name} did not join within {MEMBERSHIP_TIMEOUT:?}"
                ))),
            };
            let _ = changed.send(joined).await;
        });
    }

    /// Stops `leaving` gracefully, reporting once the others, as the first
    /// of `remaining` sees them, host every shard again (or could have).
    /// The group's target assignment gives its partitions to the others
    /// first: they take them once it has given them up.
    fn leave(&self, leaving: DemoNode, remaining: &[DemoNode]) {
        let (changed, shards) = (self.changed.clone(), self.shards);
        let assignor = self.assignor.clone();
        let members = remaining
            .iter()
            .map(|node| id_of(node.member.as_ref()))
            .collect::<Result<Vec<_>, _>>();
        let remaining = remaining[0].region.clone();
        self.tasks.spawn(async move {
            let started = Instant::now();
            let name = leaving.name.clone();
            let assigned =
                members.and_then(|members| assignor.assign(&members).map_err(DemoError::Step));
            if let Err(error) = assigned {
                let _ = changed.send(Err(error)).await;
                return;
            }
            let moved: BTreeSet<u32> = match hosted(&leaving.region).await {
                Ok(partitions) => partitions
                    .into_iter()
                    .filter_map(|p| u32::try_from(p).ok())
                    .collect(),
                Err(error) => {
                    let _ = changed.send(Err(error)).await;
                    return;
                }
            };
            let stop = async move {
                leaving.ingest.shutdown().await;
                leaving.node.shutdown().await;
                let took = started.elapsed();
                let rehosted = all_hosted(&remaining, shards, SETTLES_WITHIN)
                    .await
                    .then(|| started.elapsed());
                (took, rehosted)
            };
            let left = match tokio::time::timeout(MEMBERSHIP_TIMEOUT, stop).await {
                Ok((took, rehosted)) => Ok(Change::Left {
                    name,
                    took,
                    rehosted,
                    moved,
                }),
                Err(_) => Err(DemoError::Step(format!(
                    "{name} did not leave within {MEMBERSHIP_TIMEOUT:?}"
                ))),
            };
            let _ = changed.send(left).await;
        });
    }
}

/// Each node's member id and the partitions it holds: its hosted shards,
/// shard = partition.
async fn held_partitions(
    nodes: &[(Option<GroupMember>, Region<TalliedUser>)],
) -> Result<Vec<(String, Vec<i32>)>, DemoError> {
    let mut held = Vec::with_capacity(nodes.len());
    for (member, region) in nodes {
        held.push((id_of(member.as_ref())?, hosted(region).await?));
    }
    Ok(held)
}

/// The partitions `region` holds: its hosted shards, shard = partition.
async fn hosted(region: &Region<TalliedUser>) -> Result<Vec<i32>, DemoError> {
    let state = region
        .state(Duration::from_secs(5))
        .await
        .map_err(step("read a node's shards"))?;
    Ok(state
        .shards
        .keys()
        .filter_map(|shard| i32::try_from(shard.0).ok())
        .collect())
}

/// The shards held by another member `after` than `before`, and how many
/// of them went to another member than `joiner` from one that held them.
fn moves(
    before: &[(String, Vec<i32>)],
    after: &[(String, Vec<i32>)],
    joiner: &str,
) -> (BTreeSet<u32>, usize) {
    let holders = |held: &[(String, Vec<i32>)]| -> BTreeMap<i32, String> {
        held.iter()
            .flat_map(|(member, partitions)| partitions.iter().map(move |p| (*p, member.clone())))
            .collect()
    };
    let (before, after) = (holders(before), holders(after));
    let changed: Vec<(&i32, &String)> = after
        .iter()
        .filter(|(partition, member)| before.get(partition) != Some(member))
        .collect();
    let swapped = changed
        .iter()
        .filter(|(partition, member)| *member != joiner && before.contains_key(partition))
        .count();
    let moved = changed
        .iter()
        .filter_map(|(partition, _)| u32::try_from(**partition).ok())
        .collect();
    (moved, swapped)
}

/// A member's id, which the demo's group (consumer protocol) always has.
fn id_of(member: Option<&GroupMember>) -> Result<String, DemoError> {
    member
        .and_then(GroupMember::id)
        .map(str::to_string)
        .ok_or_else(|| {
            DemoError::Step(
                "a node's consumer has no member id: the demo's group uses the consumer protocol"
                    .into(),
            )
        })
}

/// Has the group's coordinator count `joiner` a member, naming it with no
/// partitions until its epoch says it does (see [`GroupAssignor::admit`]).
async fn admitted(
    assignor: &GroupAssignor,
    joiner: Option<&GroupMember>,
    id: &str,
) -> Result<(), DemoError> {
    let deadline = Instant::now() + SETTLES_WITHIN;
    let mut every = tokio::time::interval(ADMIT_EVERY);
    loop {
        every.tick().await;
        assignor.admit(id).map_err(DemoError::Step)?;
        let member = joiner.cloned();
        let epoch = tokio::task::spawn_blocking(move || member.and_then(|member| member.epoch()))
            .await
            .map_err(step("read the joiner's member epoch"))?;
        if epoch.is_some_and(|epoch| epoch > 0) {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(DemoError::Step(format!(
                "the group's coordinator did not count the joining node a member within {SETTLES_WITHIN:?}"
            )));
        }
    }
}

/// The shards `region` hosts once they are `at_least`, or after `within`.
async fn hosted_shards(region: &Region<TalliedUser>, at_least: usize, within: Duration) -> usize {
    let deadline = Instant::now() + within;
    let mut every = tokio::time::interval(Duration::from_millis(100));
    loop {
        every.tick().await;
        let hosted = region
            .state(Duration::from_secs(1))
            .await
            .map_or(0, |state| state.shards.len());
        if hosted >= at_least || Instant::now() >= deadline {
            return hosted;
        }
    }
}

/// Whether the cluster, as `region` sees it, hosts all `shards` within
/// `within`.
async fn all_hosted(region: &Region<TalliedUser>, shards: usize, within: Duration) -> bool {
    let deadline = Instant::now() + within;
    let mut every = tokio::time::interval(Duration::from_millis(100));
    loop {
        every.tick().await;
        let hosted = region
            .cluster_stats(Duration::from_secs(1))
            .await
            .map_or(0, |stats| {
                stats.regions.values().map(|r| r.stats.len()).sum()
            });
        if hosted >= shards {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
    }
}
