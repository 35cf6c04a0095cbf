//! The region's contact with its coordinator: the link, registration,
//! heartbeats, and fencing.
//!
//! Link states: unlinked (a task may be opening a link) -> registering
//! (Register sent) -> registered; a broken link, or a fence, goes back to
//! unlinked. Independently of the link, the coordinator's answers to
//! heartbeats renew the region's lease: without an answer for
//! `fence_timeout` the region stops its shards, because the coordinator,
//! which has not heard from it either, may hand them to another region
//! `region_timeout` after it last did.

use super::{Phase, RegionTask};
use crate::entity::Entity;
use crate::inspection::RegionStats;
use crate::logging::{ExpectedWait, Say};
use crate::protocol::{CoordinatorLink, CoordinatorToRegion, RegionToCoordinator};
use crate::region::command::RegionCmd;
use crate::region::placement::{PlacementError, PlacementReply, PlacementRequest};
use crate::region::shared::ContactView;
use std::collections::VecDeque;
use std::time::Duration;
use tokio::sync::mpsc;
use tokio::time::Instant;

/// How many unanswered pings are remembered: far more than are ever in
/// flight while the coordinator answers; when it does not, the oldest are
/// forgotten (an answer to them would be stale anyway).
const MAX_PINGS: usize = 64;

struct Link {
    to: mpsc::UnboundedSender<RegionToCoordinator>,
    from: mpsc::UnboundedReceiver<CoordinatorToRegion>,
    /// The coordinator has answered on this link: it is reachable.
    heard: bool,
}

enum LinkState {
    /// No link; `connecting`: a task is opening one.
    Unlinked { connecting: bool },
    /// Register sent on this link, not answered yet.
    Registering(Link),
    /// Registered with the coordinator on this link.
    Registered(Link),
}

/// The region's side of its coordinator link, with its lease bookkeeping.
pub(super) struct Contact {
    state: LinkState,
    /// Registrations and heartbeats not answered yet, by ping, with the time
    /// they were sent.
    pings: VecDeque<(u64, Instant)>,
    next_ping: u64,
    /// The send time of the newest answered ping: the coordinator heard this
    /// region at or after it. `None` before the first answer and after a
    /// fence.
    last_answer: Option<Instant>,
    /// The lease ran out and the region stopped its shards: it stays fenced
    /// until it has registered anew (an answer to a heartbeat meanwhile
    /// renews the lease, not the registration).
    fenced: bool,
    /// Has registered once: with the region running, what readiness means.
    registered_once: bool,
    /// The last registration refusal, logged once.
    refused: Option<String>,
    /// How long the coordinator has been out of reach: expected while the
    /// cluster forms or elects it, a warning only past `region_timeout`.
    outage: ExpectedWait,
}

impl Default for Contact {
    fn default() -> Self {
        Self {
            state: LinkState::Unlinked { connecting: false },
            pings: VecDeque::new(),
            next_ping: 0,
            last_answer: None,
            fenced: false,
            registered_once: false,
            refused: None,
            outage: ExpectedWait::Idle,
        }
    }
}

impl Contact {
    /// The next message from the coordinator; pending without a link,
    /// `None` when the link has closed.
    pub async fn recv(&mut self) -> Option<CoordinatorToRegion> {
        match &mut self.state {
            LinkState::Registering(link) | LinkState::Registered(link) => link.from.recv().await,
            LinkState::Unlinked { .. } => std::future::pending().await,
        }
    }

    pub fn is_registered(&self) -> bool {
        matches!(self.state, LinkState::Registered(_))
    }

    pub fn last_answer(&self) -> Option<Instant> {
        self.last_answer
    }

    /// What senders may know of this contact, `running`: the region is not
    /// leaving.
    pub fn view(&self, running: bool) -> ContactView {
        ContactView {
            ready: self.registered_once && running,
            reachable: matches!(
                &self.state,
                LinkState::Registering(link) | LinkState::Registered(link) if link.heard
            ),
            registered: self.is_registered(),
            fenced: self.fenced,
        }
    }

    fn sender(&self) -> Option<&mpsc::UnboundedSender<RegionToCoordinator>> {
        match &self.state {
            LinkState::Registering(link) | LinkState::Registered(link) => Some(&link.to),
            LinkState::Unlinked { .. } => None,
        }
    }

    fn ping(&mut self) -> u64 {
        self.next_ping += 1;
        self.pings.push_back((self.next_ping, Instant::now()));
        if self.pings.len() > MAX_PINGS {
            self.pings.pop_front();
        }
        self.next_ping
    }

    /// An answer to `ping`: its send time, when it is newer than the last
    /// answer's.
    fn answered(&mut self, ping: u64) -> Option<Instant> {
        let mut sent = None;
        while let Some(&(p, at)) = self.pings.front() {
            if p > ping {
                break;
            }
            self.pings.pop_front();
            if p == ping {
                sent = Some(at);
            }
        }
        let sent = sent?;
        if self.last_answer.is_some_and(|last| last >= sent) {
            return None;
        }
        self.last_answer = Some(sent);
        if let LinkState::Registering(link) | LinkState::Registered(link) = &mut self.state {
            link.heard = true;
        }
        Some(sent)
    }

    /// RegisterAck on a link that was registering.
    fn registered(&mut self) {
        if let LinkState::Registering(link) =
            std::mem::replace(&mut self.state, LinkState::Unlinked { connecting: false })
        {
            self.state = LinkState::Registered(link);
        }
        self.registered_once = true;
        self.refused = None;
        self.fenced = false;
    }

    fn fence(&mut self) {
        self.fenced = true;
        self.last_answer = None;
    }

    fn unlink(&mut self) {
        self.state = LinkState::Unlinked { connecting: false };
        // Answers on another link are not answers to these.
        self.pings.clear();
    }

    /// Leaves the link for good: what was sent on it still goes out, and
    /// the receiver returned ends once the coordinator has read it all and
    /// closed its end.
    fn leave(&mut self) -> Option<mpsc::UnboundedReceiver<CoordinatorToRegion>> {
        let state = std::mem::replace(&mut self.state, LinkState::Unlinked { connecting: false });
        match state {
            LinkState::Registering(Link { from, .. })
            | LinkState::Registered(Link { from, .. }) => Some(from),
            LinkState::Unlinked { .. } => None,
        }
    }
}

impl<E: Entity> RegionTask<E> {
    pub(super) fn send(&mut self, message: RegionToCoordinator) {
        let Some(to) = self.contact.sender() else {
            return;
        };
        if to.send(message).is_err() {
            self.link_lost();
        }
    }

    /// What the retry tick does for the contact: open a link, register
    /// again, ask for the homes buffered messages wait for.
    pub(super) fn contact_tick(&mut self) {
        match &self.contact.state {
            LinkState::Unlinked { connecting: false } => self.connect(),
            LinkState::Unlinked { connecting: true } => {}
            LinkState::Registering(_) => self.register(),
            LinkState::Registered(_) => {
                self.ask_waiting_homes();
                if matches!(self.phase, Phase::ShuttingDown { .. }) && !self.shared.proxy {
                    self.send(RegionToCoordinator::GracefulShutdown);
                }
            }
        }
    }

    /// Opens the coordinator link in its own task: connecting over a network
    /// can take seconds, and the region task must keep handling hand-offs
    /// and returned messages meanwhile.
    fn connect(&mut self) {
        self.contact.state = LinkState::Unlinked { connecting: true };
        let transport = self.shared.node.transport.clone();
        let (entity_type, region) = (self.name().to_string(), self.shared.id.clone());
        let commands = self.commands.clone();
        self.shared.node.tasks.spawn(async move {
            let link = transport.connect_coordinator(&entity_type, region).await;
            let _ = commands
                .send(RegionCmd::CoordinatorLinked {
                    link: link.map_err(|e| e.to_string()),
                })
                .await;
        });
    }

    /// A connect failed. A cluster forming, or electing its coordinator,
    /// has none to reach for a while: said at info, and as a warning once
    /// it lasts `region_timeout` (past which the coordinator itself would
    /// give up on a silent region).
    fn say_unreachable(&mut self, error: &str) {
        let bound = self.shared.entity_type.settings.region_timeout;
        let say = self.contact.outage.waits(bound);
        let entity_type = self.name();
        match say {
            Say::Began => {
                tracing::info!(%entity_type, %error, "coordinator unreachable, as while a cluster forms or elects it; messages for shards without a known home are buffered")
            }
            Say::Overdue(lasted) => {
                tracing::warn!(%entity_type, %error, ?lasted, "coordinator unreachable for longer than region_timeout; messages for shards without a known home are buffered")
            }
            Say::Nothing => tracing::debug!(%entity_type, %error, "coordinator still unreachable"),
        }
    }

    pub(super) fn on_linked(&mut self, link: Result<CoordinatorLink, String>) {
        if !matches!(self.contact.state, LinkState::Unlinked { connecting: true }) {
            return; // unreachable: one connect at a time
        }
        if let Err(error) = &link {
            self.say_unreachable(error);
        }
        match link {
            Ok(link) if !matches!(self.phase, Phase::Stopped) => {
                self.contact.state = LinkState::Registering(Link {
                    to: link.to_coordinator,
                    from: link.from_coordinator,
                    heard: false,
                });
                self.register();
            }
            _ => self.contact.state = LinkState::Unlinked { connecting: false },
        }
    }

    /// Registers, naming the shards that run here: after a lost link the
    /// coordinator may have forgotten them, and must not start them twice.
    fn register(&mut self) {
        let hosted = self.shards.hosted().map(|(shard, _)| shard).collect();
        let ping = self.contact.ping();
        let extractor = &self.shared.extractor;
        let message = RegionToCoordinator::Register {
            region: self.shared.id.clone(),
            proxy: self.shared.proxy,
            hosted,
            number_of_shards: extractor.number_of_shards(),
            extractor: crate::region::shared::extractor_fingerprint(extractor.as_ref()),
            ping,
        };
        self.send(message);
    }

    pub(super) fn send_heartbeat(&mut self) {
        if self.contact.sender().is_some() {
            let ping = self.contact.ping();
            self.send(RegionToCoordinator::Heartbeat { ping });
        }
    }

    /// The coordinator answered `ping`: the region holds its shards until
    /// `fence_timeout` after that ping was sent.
    fn on_answer(&mut self, ping: u64) {
        let Some(sent) = self.contact.answered(ping) else {
            return;
        };
        let settings = &self.shared.entity_type.settings;
        let fence_at = sent + settings.fence_timeout;
        self.shared
            .lease
            .renew(fence_at, sent + settings.region_timeout);
        self.fence_timer.as_mut().reset(fence_at);
        let overdue = self.contact.outage.is_overdue();
        if let Some(lasted) = self.contact.outage.ended() {
            if overdue {
                tracing::info!(entity_type = %self.name(), ?lasted, "coordinator reachable again");
            }
        }
        self.publish_contact();
    }

    /// Publishes what senders may know of the contact (see
    /// [`ContactView`]); called after every change to it.
    pub(super) fn publish_contact(&self) {
        let view = self.contact.view(matches!(self.phase, Phase::Running));
        self.shared
            .metrics
            .coordinator_reachable
            .set(if view.reachable { 1.0 } else { 0.0 });
        self.shared
            .contact
            .publish(view, self.contact.refused.as_deref());
    }

    /// The coordinator went away: keep serving known homes while the lease
    /// holds, buffer the rest, and register again when it is back.
    ///
    /// A coordinator that moves (a new one elected while a cluster forms, or
    /// its node stopping) breaks the link as a matter of course: said at
    /// info, and a warning only when no coordinator is reached again within
    /// `region_timeout`.
    pub(super) fn link_lost(&mut self) {
        if self.contact.is_registered() {
            let bound = self.shared.entity_type.settings.region_timeout;
            match self.contact.outage.waits(bound) {
                Say::Overdue(lasted) => {
                    tracing::warn!(entity_type = %self.name(), ?lasted, "lost the coordinator link again, unreachable for longer than region_timeout; reconnecting")
                }
                Say::Began | Say::Nothing => {
                    tracing::info!(entity_type = %self.name(), "lost the coordinator link; reconnecting")
                }
            }
        }
        self.unlink();
    }

    /// The region stops. Its entities' last replies go out first: once the
    /// coordinator has heard that the region left, the other nodes learn
    /// that this one is gone, and an asker may give up on it. Then it
    /// leaves its link and waits (up to `bound` each) until the coordinator
    /// has closed it, and so has read everything this region sent, its
    /// last ShardStopped included: the node's process usually ends next,
    /// and a message still on its way would end with it, leaving that
    /// shard here in the coordinator's eyes until the region timeout.
    pub(super) async fn leave_link(&mut self, bound: Duration) {
        self.shared.node.transport.finish_sending(bound).await;
        let leaving = self.contact.leave();
        self.unlink();
        let Some(mut from) = leaving else {
            return;
        };
        let closed = async { while from.recv().await.is_some() {} };
        if tokio::time::timeout(bound, closed).await.is_err() {
            tracing::warn!(entity_type = %self.name(), ?bound, "the coordinator did not close the link of a stopping region in time; stopping all the same");
        }
    }

    /// Leaves the link (the region fenced itself, or lost it).
    pub(super) fn unlink(&mut self) {
        self.contact.unlink();
        self.publish_contact();
        for (_, waiter) in self.placements_waiting.drain() {
            let _ = waiter.send(Err(PlacementError::CoordinatorUnreachable));
        }
    }

    pub(super) fn on_fence_timer(&mut self) {
        let Some(last) = self.contact.last_answer() else {
            return;
        };
        let fence_at = last + self.shared.entity_type.settings.fence_timeout;
        if Instant::now() < fence_at {
            self.fence_timer.as_mut().reset(fence_at);
            return;
        }
        self.fence(last);
    }

    /// No answer from the coordinator for `fence_timeout` since `last`: it
    /// may already have handed this region's shards to another region, so
    /// they stop here. Their stop messages may run until `region_timeout`
    /// after `last`, when the coordinator may start them elsewhere; a region
    /// that finds itself past that (it was paused) drops its copies without
    /// running anything. What is sent meanwhile waits in the buffer until
    /// the region has registered anew.
    fn fence(&mut self, last: Instant) {
        self.shared.lease.fence();
        // Shards already handing off are stopped as fenced too, so that
        // what they leave is marked.
        let shards: Vec<_> = self.shards.local().collect();
        tracing::warn!(
            entity_type = %self.name(),
            region = %self.shared.id,
            silent = ?last.elapsed(),
            shards = shards.len(),
            "no answer from the coordinator within the fence timeout: stopping the shards hosted here; messages are buffered until it answers"
        );
        for shard in shards {
            self.stop_shard(shard, false, true);
        }
        // What other nodes send from now on is marked as it arrives.
        self.contact.fence();
        self.publish_contact();
        // What other nodes sent during the outage and gave up on may still
        // be on its way: it must not be taken after they have sent newer
        // messages elsewhere. Once the transport returns, what it took
        // before is in the buffer, and is marked with the rest.
        self.shared.node.transport.fence_inbound();
        self.mark_held_delayed();
        // A coordinator that does not answer is probably not there: look
        // for it again.
        self.unlink();
    }

    /// Claims again, by topic, the shards whose Kafka partitions this
    /// node's consumers hold (see `region/assigned.rs`): a coordinator
    /// elected anew knows no claims, and a shard this region stopped when it
    /// fenced itself would otherwise wait for a record or an ask to be
    /// placed again (or be placed with whoever asks first). Each claim is a
    /// placement of its own, answered in the background.
    fn claim_assigned(&self) {
        if self.shared.proxy {
            return;
        }
        let timeout = self.shared.entity_type.settings.handoff_timeout;
        for (topic, shards) in self.shared.assignments.by_topic() {
            let region = crate::region::Region {
                shared: self.shared.clone(),
                commands: self.commands.clone(),
            };
            self.shared.node.tasks.spawn(async move {
                if let Err(e) = region.claim_shards(shards, &topic, timeout).await {
                    tracing::debug!(entity_type = %region.entity_type_name(), %topic, error = %e, "the shards of assigned partitions not claimed again at registration");
                }
            });
        }
    }

    pub(super) fn on_coordinator(&mut self, message: CoordinatorToRegion) {
        match message {
            CoordinatorToRegion::RegisterAck { ping } => {
                if let LinkState::Registering(_) = self.contact.state {
                    self.contact.registered();
                    tracing::info!(entity_type = %self.name(), region = %self.shared.id, proxy = self.shared.proxy, "registered with the coordinator");
                }
                self.on_answer(ping);
                self.publish_contact();
                self.ask_waiting_homes();
                if matches!(self.phase, Phase::ShuttingDown { .. }) && !self.shared.proxy {
                    self.send(RegionToCoordinator::GracefulShutdown);
                } else {
                    self.claim_assigned();
                }
            }
            CoordinatorToRegion::RegisterRefused { reason } => {
                if self.contact.refused.as_ref() != Some(&reason) {
                    tracing::error!(entity_type = %self.name(), region = %self.shared.id, %reason, "the coordinator refused this region; it keeps trying");
                    self.contact.refused = Some(reason);
                    self.publish_contact();
                }
            }
            CoordinatorToRegion::HeartbeatAck { ping } => self.on_answer(ping),
            CoordinatorToRegion::ShardHome { shard, region } => self.on_shard_home(shard, region),
            CoordinatorToRegion::HostShard { shard } => {
                if !self.shared.proxy && !matches!(self.phase, Phase::Stopped) {
                    if self.shards.is_held(shard) {
                        // Messages from before may still come back: host it
                        // once they have.
                        if let Some(then) = self.shards.release_of(shard) {
                            then.home = Some(self.shared.id.clone());
                        }
                    } else {
                        self.host_locally(shard);
                    }
                    self.send(RegionToCoordinator::ShardStarted { shard });
                }
            }
            CoordinatorToRegion::BeginHandOff { shard } => self.begin_handoff(shard),
            CoordinatorToRegion::HandOff { shard } => self.handoff(shard, true),
            CoordinatorToRegion::RegionTerminated { region } => {
                self.shared
                    .node
                    .transport
                    .node_terminated(&self.shared.entity_type.name, &region);
                self.start_draining(&region, true);
                self.ask_waiting_homes();
            }
            CoordinatorToRegion::Members { regions, proxies } => {
                let hosts = regions.iter().filter(|r| !proxies.contains(r));
                self.shared.members.send_replace(hosts.cloned().collect());
                self.shared.node.transport.members(self.name(), regions);
            }
            CoordinatorToRegion::GetRegionStats { request, timeout } => {
                let Some(link) = self.contact.sender().cloned() else {
                    return;
                };
                let query = self.query_shards(timeout);
                let handing_off = self.shards.stopping().collect();
                let restoring = self.shared.durable.restoring();
                let assigned = self.shared.assignments.shards();
                let standbys = self
                    .shared
                    .node
                    .store
                    .as_ref()
                    .map_or_else(Vec::new, |store| {
                        store.standby_copies().shards(&self.shared.entity_type.name)
                    });
                self.shared.node.tasks.spawn(async move {
                    let state = query.await;
                    let stats = RegionStats {
                        stats: state
                            .shards
                            .iter()
                            .map(|(s, ids)| (*s, ids.len()))
                            .collect(),
                        failed: state.failed,
                        handing_off,
                        restoring,
                        assigned,
                        standbys,
                    };
                    let _ = link.send(RegionToCoordinator::RegionStats { request, stats });
                });
            }
            CoordinatorToRegion::ClusterStats { request, stats } => {
                if let Some(waiter) = self.stats_waiting.remove(&request) {
                    let _ = waiter.send(Ok(stats));
                }
            }
            CoordinatorToRegion::PlacementDone {
                request,
                failed,
                refused,
                elsewhere,
            } => {
                if let Some(waiter) = self.placements_waiting.remove(&request) {
                    let outcome = match (refused, failed.is_empty(), elsewhere.is_empty()) {
                        (Some(reason), _, _) => Err(PlacementError::Refused(reason)),
                        (None, false, _) => Err(PlacementError::Failed(failed)),
                        (None, true, false) => Err(PlacementError::Elsewhere(elsewhere)),
                        (None, true, true) => Ok(()),
                    };
                    let _ = waiter.send(outcome);
                }
            }
        }
    }

    /// Asks the coordinator to host or release shards; answered when its
    /// `PlacementDone` arrives. Only on a registered link: the coordinator
    /// answers on the link it was asked on, so placements waiting when the
    /// link goes fail at once (the caller may ask again).
    pub(super) fn ask_placement(&mut self, request: PlacementRequest, reply: PlacementReply) {
        if !self.contact.is_registered() {
            let _ = reply.send(Err(PlacementError::CoordinatorUnreachable));
            return;
        }
        let id = self.next_request;
        self.next_request += 1;
        self.placements_waiting.insert(id, reply);
        self.send(match request {
            PlacementRequest::Host { shards, source } => RegionToCoordinator::UpdateLocations {
                request: id,
                locations: shards
                    .into_iter()
                    .map(|shard| (shard, self.shared.id.clone()))
                    .collect(),
                source,
            },
            PlacementRequest::Release { shards, source } => RegionToCoordinator::ReleaseShards {
                request: id,
                shards,
                source,
            },
        });
    }
}
