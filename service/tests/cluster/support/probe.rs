//! The probe entity: it logs every delivery into the test's world, which
//! checks that no entity id is ever live in two places, and it is told to
//! stall, fail, panic, passivate or tell another entity on demand.

use super::ASK;
use colo::{Entity, EntityContext, EntityError, EntityType, Region, ShardingSettings};
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// What the probe is told or asked.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum ProbeMsg {
    /// Record sequence number `seq` from sender `from`.
    Record { from: String, seq: u64 },
    /// Where do you live, and how many messages have you handled here?
    Where,
    /// Fail the handler.
    Fail,
    /// Panic in the handler.
    Panic,
    /// The stop message.
    Stop,
    /// Keep the handler busy until the test releases it (a stuck entity).
    Block,
    /// Ask to be passivated after this message.
    Passivate,
    /// From inside the handler, tell `Record { from: "handler", seq }` to
    /// entity `to` of the same entity type.
    TellTo { to: String, seq: u64 },
    /// From inside the handler, ask entity `to` where it lives.
    AskWhere { to: String },
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum ProbeReply {
    Ok,
    At {
        node: String,
        handled: u64,
    },
    /// A tell or ask made by the handler failed, with the error's text.
    Refused(String),
}

/// The reply to `Where` from an entity on `node` that has handled
/// `handled` messages in this incarnation.
pub fn at(node: &str, handled: u64) -> ProbeReply {
    ProbeReply::At {
        node: node.to_string(),
        handled,
    }
}

/// One delivery, as the world saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delivery {
    pub node: String,
    pub from: String,
    pub seq: u64,
    /// Held by a node that fenced itself (see `EntityContext::delayed`).
    pub delayed: bool,
    /// When, since the world was made.
    pub at: Duration,
}

/// Shared by every probe of a test: the deliveries and the live incarnations.
pub struct World {
    /// When the world was made: deliveries are timed from here.
    pub start: std::time::Instant,
    pub log: Mutex<HashMap<String, Vec<Delivery>>>,
    live: Mutex<HashMap<String, String>>,
    pub violations: Mutex<Vec<String>>,
    pub stops: AtomicU64,
    /// Probes on this node stall (until released) once the node has
    /// handled this many records: a consumer that stops keeping up.
    pub stall_node: Mutex<Option<(String, usize)>>,
    /// Stalled and blocked handlers wait for a permit; permits given before
    /// a handler waits are kept, so a release is never missed.
    pub unblock: tokio::sync::Semaphore,
    /// The factory panics for this entity id.
    pub refused_id: Mutex<Option<String>>,
    /// How long the stop message takes.
    pub stop_delay: Mutex<Duration>,
    /// Each node's region, for handlers that tell or ask other entities.
    pub regions: Mutex<HashMap<String, Region<Probe>>>,
    /// Records whose handler fails once, by entity and sequence number.
    pub fail_once: Mutex<BTreeSet<(String, u64)>>,
    /// How long handling a record takes.
    pub record_delay: Mutex<Duration>,
}

impl Default for World {
    fn default() -> Self {
        Self {
            start: std::time::Instant::now(),
            log: Mutex::default(),
            live: Mutex::default(),
            violations: Mutex::default(),
            stops: AtomicU64::default(),
            stall_node: Mutex::default(),
            unblock: tokio::sync::Semaphore::new(0),
            refused_id: Mutex::default(),
            stop_delay: Mutex::default(),
            regions: Mutex::default(),
            fail_once: Mutex::default(),
            record_delay: Mutex::default(),
        }
    }
}

impl World {
    /// Asserts that no entity id was ever live on two nodes at once.
    pub fn assert_never_live_twice(&self) {
        let v = self.violations.lock();
        assert!(v.is_empty(), "entities live in two places at once: {v:?}");
    }

    /// Every `(entity, sender)` stream arrived complete and in order:
    /// sequence numbers 0..n, each exactly once.
    pub fn assert_complete_in_order(&self, expected: &BTreeMap<(String, String), u64>) {
        let log = self.log.lock();
        for ((entity, from), n) in expected {
            let seqs: Vec<u64> = log
                .get(entity)
                .map(|d| {
                    d.iter()
                        .filter(|d| &d.from == from)
                        .map(|d| d.seq)
                        .collect()
                })
                .unwrap_or_default();
            let want: Vec<u64> = (0..*n).collect();
            if seqs != want {
                let at = seqs
                    .iter()
                    .zip(&want)
                    .position(|(a, b)| a != b)
                    .unwrap_or(seqs.len().min(want.len()));
                let around: Vec<(u64, String)> = log[entity]
                    .iter()
                    .filter(|d| &d.from == from)
                    .skip(at.saturating_sub(3))
                    .take(8)
                    .map(|d| (d.seq, d.node.clone()))
                    .collect();
                panic!(
                    "deliveries to {entity} from {from}: {} of {n}, first difference at {at}: {around:?}",
                    seqs.len()
                );
            }
        }
    }

    /// Every `(entity, sender)` stream arrived complete, each message exactly
    /// once, in whatever order.
    pub fn assert_each_exactly_once(&self, expected: &BTreeMap<(String, String), u64>) {
        let log = self.log.lock();
        for ((entity, from), n) in expected {
            let mut seqs: Vec<u64> = log
                .get(entity)
                .map(|d| {
                    d.iter()
                        .filter(|d| &d.from == from)
                        .map(|d| d.seq)
                        .collect()
                })
                .unwrap_or_default();
            seqs.sort_unstable();
            let want: Vec<u64> = (0..*n).collect();
            assert!(
                seqs == want,
                "deliveries to {entity} from {from}: {} of {n}, duplicates or gaps",
                seqs.len()
            );
        }
    }

    /// Releases every stalled or blocked handler, now and from now on.
    pub fn release_all(&self) {
        self.unblock
            .add_permits(tokio::sync::Semaphore::MAX_PERMITS / 2);
    }

    async fn wait_for_release(&self) {
        if let Ok(permit) = self.unblock.acquire().await {
            permit.forget();
        }
    }

    pub fn delivered(&self) -> usize {
        self.log.lock().values().map(Vec::len).sum()
    }

    pub fn delivered_on(&self, node: &str) -> usize {
        self.log
            .lock()
            .values()
            .flatten()
            .filter(|d| d.node == node)
            .count()
    }
}

pub struct Probe {
    id: String,
    node: String,
    handled: u64,
    world: Arc<World>,
}

/// The probe entity type on `node`, with the probe's stop message.
pub fn probe_entity_type(
    name: &str,
    node: &str,
    world: Arc<World>,
    settings: ShardingSettings,
) -> EntityType<Probe> {
    let node = node.to_string();
    EntityType::new(name, move |id| Probe::new(id, &node, world.clone()))
        .with_settings(settings)
        .with_stop_message(|| ProbeMsg::Stop)
}

impl Probe {
    pub fn new(id: &str, node: &str, world: Arc<World>) -> Self {
        if world.refused_id.lock().as_deref() == Some(id) {
            panic!("factory refuses {id}");
        }
        let previous = world.live.lock().insert(id.to_string(), node.to_string());
        if let Some(other) = previous {
            world
                .violations
                .lock()
                .push(format!("{id} started on {node} while live on {other}"));
        }
        Self {
            id: id.to_string(),
            node: node.to_string(),
            handled: 0,
            world,
        }
    }
}

impl Probe {
    /// Messages this incarnation handled.
    pub fn handled(&self) -> u64 {
        self.handled
    }
}

impl Drop for Probe {
    fn drop(&mut self) {
        let mut live = self.world.live.lock();
        if live.get(&self.id) == Some(&self.node) {
            live.remove(&self.id);
        }
    }
}

impl Entity for Probe {
    type Message = ProbeMsg;
    type Reply = ProbeReply;

    async fn handle(
        &mut self,
        ctx: &EntityContext,
        message: ProbeMsg,
    ) -> Result<ProbeReply, EntityError> {
        self.handled += 1;
        match message {
            ProbeMsg::Record { from, seq } => {
                let stall = self
                    .world
                    .stall_node
                    .lock()
                    .as_ref()
                    .is_some_and(|(node, after)| {
                        *node == self.node && self.world.delivered_on(node) >= *after
                    });
                if stall {
                    self.world.wait_for_release().await;
                }
                if self.world.fail_once.lock().remove(&(self.id.clone(), seq)) {
                    return Err(EntityError::new(format!("record {seq} fails once")));
                }
                let delay = *self.world.record_delay.lock();
                if !delay.is_zero() {
                    tokio::time::sleep(delay).await;
                }
                self.world
                    .log
                    .lock()
                    .entry(self.id.clone())
                    .or_default()
                    .push(Delivery {
                        node: self.node.clone(),
                        from,
                        seq,
                        delayed: ctx.delayed(),
                        at: self.world.start.elapsed(),
                    });
                Ok(ProbeReply::Ok)
            }
            ProbeMsg::Where => Ok(ProbeReply::At {
                node: self.node.clone(),
                handled: self.handled,
            }),
            ProbeMsg::Fail => Err(EntityError::new("asked to fail")),
            ProbeMsg::Panic => panic!("asked to panic"),
            ProbeMsg::Passivate => {
                ctx.passivate();
                Ok(ProbeReply::Ok)
            }
            ProbeMsg::Block => {
                self.world.wait_for_release().await;
                Ok(ProbeReply::Ok)
            }
            ProbeMsg::Stop => {
                let delay = *self.world.stop_delay.lock();
                if !delay.is_zero() {
                    tokio::time::sleep(delay).await;
                }
                self.world.stops.fetch_add(1, Ordering::Relaxed);
                Ok(ProbeReply::Ok)
            }
            ProbeMsg::TellTo { to, seq } => {
                let region = self.world.regions.lock().get(&self.node).cloned();
                let Some(region) = region else {
                    return Err(EntityError::new("no region to tell through"));
                };
                let record = ProbeMsg::Record {
                    from: "handler".into(),
                    seq,
                };
                Ok(match region.tell(&to, record).await {
                    Ok(()) => ProbeReply::Ok,
                    Err(e) => ProbeReply::Refused(e.to_string()),
                })
            }
            ProbeMsg::AskWhere { to } => {
                let region = self.world.regions.lock().get(&self.node).cloned();
                let Some(region) = region else {
                    return Err(EntityError::new("no region to ask through"));
                };
                Ok(match region.ask(&to, ProbeMsg::Where, ASK).await {
                    Ok(reply) => reply,
                    Err(e) => ProbeReply::Refused(e.to_string()),
                })
            }
        }
    }
}
