//! This node's Link to another node: one task per peer that owns the gRPC
//! stream, numbers envelopes, keeps to the receiver's credit window, and
//! survives a broken connection.
//!
//! - Every envelope gets a sequence number that grows for the life of this
//!   node's incarnation. A batch waits in the task until the receiver's
//!   window has room (flow control); it is then sent and kept until acked.
//! - Replies are sent at once, never behind batches waiting for credit.
//! - When the stream breaks (an error, HTTP/2 keepalive, or no ack within
//!   the region timeout) the task connects again and resends what was not
//!   acked, with the same sequence numbers: the receiver skips what it had
//!   already accepted, so nothing is taken twice.
//! - If the receiver turns out to be another incarnation (it restarted), or
//!   left the cluster, what was sent and not acked is reported unconfirmed
//!   (it may or may not have been taken, and must not be sent elsewhere).
//!   While it is only unreachable, that waits (see `LinkTask::connect`);
//!   what was never sent is reported not sent after the region timeout (the
//!   region routes it again).
//! - If the receiver welcomes it into a new inbound epoch (it fenced
//!   itself meanwhile), nothing unacked is resent: the receiver says up to
//!   which sequence number it took, and the rest is reported refused, so
//!   the region routes it again.
//! - A node that stops gracefully asks its Links to finish: each sends what
//!   it holds, waits for its acks, then ends its stream and waits until the
//!   receiver ends its side, which it does only after reading every frame
//!   before the end. Replies are not acked; this is how a stopping node
//!   knows its last ones arrived.

use super::{convert, GrpcSettings};
use crate::credits::WINDOW;
use crate::envelope::{WireEnvelope, WireReply};
use colo_allocation::RegionId;
use colo_proto::v1 as pb;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, oneshot, Notify};
use tokio::time::Instant;

/// Why a batch was not delivered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    /// It was never sent: safe to route again.
    NotSent,
    /// It was sent and the receiver went away before it confirmed it.
    Unconfirmed,
}

/// The first pause between connection attempts, doubled up to the last.
const BACKOFF: (Duration, Duration) = (Duration::from_millis(50), Duration::from_secs(1));

/// Replies kept while the connection is down; a reply beyond is dropped
/// (its asker times out), so a dead peer cannot hold memory.
const MAX_HELD_REPLIES: usize = 4096;

/// Where a batch's outcome goes: how many envelopes were taken.
type Done = oneshot::Sender<Result<u32, Failure>>;

enum Request {
    Deliver {
        batch: Vec<WireEnvelope>,
        done: Done,
    },
    Reply(WireReply),
    /// Told once everything asked for before it was received.
    Finish(oneshot::Sender<()>),
}

/// A handle on the Link to one node.
#[derive(Debug)]
pub struct Peer {
    requests: mpsc::UnboundedSender<Request>,
    gone: Arc<AtomicBool>,
    left: Arc<Left>,
}

/// Who this node is on its Links.
#[derive(Debug, Clone)]
pub struct Local {
    pub node: RegionId,
    pub incarnation: u64,
}

impl Peer {
    /// Starts the Link task towards `address`. `next_sequence` is the
    /// node's, shared by all its Link tasks, so a later task towards the
    /// same node keeps numbering upwards.
    pub fn start(
        local: Local,
        address: String,
        settings: GrpcSettings,
        next_sequence: Arc<AtomicU64>,
        tasks: &crate::tasks::TaskSet,
    ) -> Self {
        let (requests, rx) = mpsc::unbounded_channel();
        let gone = Arc::new(AtomicBool::new(false));
        let left = Arc::new(Left::default());
        let link = LinkTask {
            local,
            address,
            settings,
            next_sequence,
            requests: rx,
            queued: VecDeque::new(),
            unacked: VecDeque::new(),
            replies: VecDeque::new(),
            finishing: Vec::new(),
            taken: 0,
            released: 0,
            receiver: None,
            gone: gone.clone(),
            left: left.clone(),
        };
        tasks.spawn(link.run());
        Self {
            requests,
            gone,
            left,
        }
    }

    /// The task has given up on the node: open a new Link for new work.
    pub fn is_gone(&self) -> bool {
        self.gone.load(Ordering::Acquire)
    }

    /// The coordinator of `entity_type` terminated the node: what it did
    /// not confirm is given up on (see `LinkTask::connect`).
    pub fn node_left(&self, entity_type: &str) {
        self.left.set(entity_type);
    }

    /// The node is a member again: it answers for what it took (its
    /// Welcome says so), so nothing is given up on any more.
    pub fn node_rejoined(&self, entity_type: &str) {
        self.left.clear(entity_type);
    }

    /// Sends a batch; how many envelopes, from the first, the node took.
    pub async fn deliver(&self, batch: Vec<WireEnvelope>) -> Result<u32, Failure> {
        let (done, result) = oneshot::channel();
        if self
            .requests
            .send(Request::Deliver { batch, done })
            .is_err()
        {
            return Err(Failure::NotSent);
        }
        // A task that ends with the batch unanswered never sent it.
        result.await.unwrap_or(Err(Failure::NotSent))
    }

    /// Sends an ask's reply (not acked).
    ///
    /// # Errors
    /// The Link task has stopped.
    pub fn reply(&self, reply: WireReply) -> Result<(), ()> {
        self.requests.send(Request::Reply(reply)).map_err(|_| ())
    }

    /// Resolves once every reply and batch given before has reached the
    /// node (or the task gave up on it: then there is nothing more to do).
    /// Unbounded: its caller bounds it.
    pub async fn finish(&self) {
        let (done, finished) = oneshot::channel();
        if self.requests.send(Request::Finish(done)).is_ok() {
            let _ = finished.await;
        }
    }
}

struct Sent {
    first: u64,
    envelopes: Vec<pb::Envelope>,
    done: Done,
    at: Instant,
}

struct LinkTask {
    local: Local,
    address: String,
    settings: GrpcSettings,
    next_sequence: Arc<AtomicU64>,
    requests: mpsc::UnboundedReceiver<Request>,
    /// Batches not sent yet: waiting for the connection or for credit.
    queued: VecDeque<(Vec<pb::Envelope>, Done)>,
    /// Batches sent and not acked, oldest first.
    unacked: VecDeque<Sent>,
    /// Replies held while the connection is down.
    replies: VecDeque<pb::Reply>,
    /// Whoever waits for what was asked before to arrive.
    finishing: Vec<oneshot::Sender<()>>,
    /// Envelopes sent (first time) and released by the receiver, in all, in
    /// this receiver incarnation: their difference is in its custody.
    taken: u64,
    released: u64,
    /// The receiver's incarnation and inbound epoch, once welcomed.
    receiver: Option<(u64, u64)>,
    gone: Arc<AtomicBool>,
    left: Arc<Left>,
}

/// The entity types whose coordinator terminated the node and does not
/// list it again yet. A Link carries every type's envelopes, so the node
/// has left while one of them says so.
#[derive(Debug, Default)]
struct Left {
    by: parking_lot::Mutex<std::collections::BTreeSet<String>>,
    notify: Notify,
}

impl Left {
    fn set(&self, entity_type: &str) {
        self.by.lock().insert(entity_type.to_string());
        self.notify.notify_waiters();
    }

    fn clear(&self, entity_type: &str) {
        self.by.lock().remove(entity_type);
    }

    fn is_set(&self) -> bool {
        !self.by.lock().is_empty()
    }

    async fn wait(&self) {
        let notified = self.notify.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        if !self.is_set() {
            notified.await;
        }
    }
}

/// How a connection ended.
enum Ended {
    /// Broken: connect again.
    Broken,
    /// Nobody asks for anything any more.
    Idle,
    /// Ended on purpose, everything received: connect again only for
    /// something new.
    Finished,
}

impl LinkTask {
    async fn run(mut self) {
        loop {
            // Connect only when there is something to send.
            if self.nothing_to_send() {
                self.finished();
                match self.requests.recv().await {
                    Some(request) => self.take(request),
                    None => break,
                }
                continue;
            }
            let Some(connection) = self.connect().await else {
                self.give_up();
                break;
            };
            match self.serve(connection).await {
                Ended::Broken | Ended::Finished => continue,
                Ended::Idle => break,
            }
        }
        self.gone.store(true, Ordering::Release);
    }

    fn nothing_to_send(&self) -> bool {
        self.queued.is_empty() && self.unacked.is_empty() && self.replies.is_empty()
    }

    /// Tells whoever waits to finish that it is done.
    fn finished(&mut self) {
        for done in self.finishing.drain(..) {
            let _ = done.send(());
        }
    }

    fn take(&mut self, request: Request) {
        match request {
            Request::Deliver { batch, done } => {
                let envelopes = batch.into_iter().map(convert::envelope_to_pb).collect();
                self.queued.push_back((envelopes, done));
            }
            Request::Reply(reply) => {
                if self.replies.len() < MAX_HELD_REPLIES {
                    self.replies.push_back(convert::reply_to_pb(reply));
                }
            }
            Request::Finish(done) => self.finishing.push(done),
        }
    }

    /// Connects and is welcomed; `None` when the node is gone: nothing
    /// listens at its address, it left the cluster, or it stayed
    /// unreachable for the region timeout with nothing of this node's in
    /// its hands.
    ///
    /// After the region timeout, what was never sent goes back to its
    /// region at once (and what comes meanwhile), which routes it again.
    /// What was sent and not acked does not: the node may still take it (a
    /// connection held in the network, a paused peer), so its sender must
    /// neither drop it nor send newer messages elsewhere. It waits until the
    /// node answers again, whose Welcome says what it took, or until the
    /// node leaves the cluster: the coordinator terminates only a region it
    /// has not heard from for the region timeout, which has fenced itself
    /// by then and takes nothing sent before.
    async fn connect(&mut self) -> Option<Connection> {
        let deadline = Instant::now() + self.settings.region_timeout;
        let mut pause = BACKOFF.0;
        let mut silent = false;
        loop {
            if self.left.is_set() {
                tracing::warn!(node = %self.address, "node left the cluster; giving up on what it did not confirm");
                return None;
            }
            match Connection::open(&self.local, &self.address, &self.settings).await {
                Ok((connection, welcome)) => {
                    self.welcomed(welcome);
                    return Some(connection);
                }
                Err(Refusal::Definite(reason)) => {
                    tracing::debug!(node = %self.address, %reason, "node refuses the link");
                    return None;
                }
                Err(Refusal::Maybe(reason)) => {
                    if !silent && Instant::now() + pause >= deadline {
                        silent = true;
                        self.return_queued();
                        if self.unacked.is_empty() {
                            tracing::warn!(node = %self.address, %reason, "node unreachable for the region timeout");
                            return None;
                        }
                        tracing::warn!(node = %self.address, %reason, "node unreachable for the region timeout; what it did not confirm waits until it answers or leaves the cluster");
                    }
                    tracing::debug!(node = %self.address, %reason, "node not reachable; retrying");
                }
            }
            // Keep taking requests while waiting, so that replies and new
            // batches are held (or, once the node is silent, given back)
            // rather than blocking their senders.
            let wait = tokio::time::sleep(pause);
            tokio::pin!(wait);
            loop {
                tokio::select! {
                    () = &mut wait => break,
                    () = self.left.wait() => break,
                    request = self.requests.recv() => match request {
                        Some(request) => {
                            self.take(request);
                            if silent {
                                self.return_queued();
                            }
                        }
                        None => return None,
                    },
                }
            }
            pause = (pause * 2).min(BACKOFF.1);
        }
    }

    /// What was never sent goes back: its region routes it again.
    fn return_queued(&mut self) {
        for (_, done) in self.queued.drain(..) {
            let _ = done.send(Err(Failure::NotSent));
        }
    }

    fn welcomed(&mut self, welcome: pb::Welcome) {
        match self.receiver {
            Some((incarnation, _)) if incarnation != welcome.incarnation => {
                // The node restarted: whatever the old one had not acked may
                // or may not have been taken; the new one starts a fresh
                // window.
                for sent in self.unacked.drain(..) {
                    let _ = sent.done.send(Err(Failure::Unconfirmed));
                }
                self.taken = 0;
            }
            Some((_, epoch)) if epoch != welcome.epoch => {
                // The node fenced itself: it took what it acked and up to
                // `accepted_through`, and will take nothing more of what was
                // sent before. The rest never reached its custody.
                for sent in self.unacked.drain(..) {
                    let count = sent.envelopes.len() as u64;
                    let taken = welcome
                        .accepted_through
                        .saturating_add(1)
                        .saturating_sub(sent.first)
                        .min(count);
                    self.taken = self.taken.saturating_sub(count - taken);
                    let _ = sent.done.send(Ok(u32::try_from(taken).unwrap_or(u32::MAX)));
                }
            }
            _ => {}
        }
        self.receiver = Some((welcome.incarnation, welcome.epoch));
        self.released = welcome.released;
    }

    /// Everything pending fails: sent and unacked as unconfirmed, the rest
    /// as not sent.
    fn give_up(&mut self) {
        for sent in self.unacked.drain(..) {
            let _ = sent.done.send(Err(Failure::Unconfirmed));
        }
        for (_, done) in self.queued.drain(..) {
            let _ = done.send(Err(Failure::NotSent));
        }
        self.replies.clear();
        self.finished();
    }

    async fn serve(&mut self, mut connection: Connection) -> Ended {
        // What was not acked goes again, first, in order: the receiver skips
        // what it had already taken.
        for sent in &mut self.unacked {
            sent.at = Instant::now();
            connection.send_batch(sent.first, sent.envelopes.clone());
        }
        while let Some(reply) = self.replies.pop_front() {
            connection.send(pb::link_frame::Frame::Reply(reply));
        }
        loop {
            self.send_what_fits(&mut connection);
            // Replies go out as they come here, so nothing to send is
            // nothing queued or unacked.
            if !self.finishing.is_empty() && self.nothing_to_send() {
                return self.finish(connection).await;
            }
            let ack_deadline = self
                .unacked
                .front()
                .map(|s| s.at + self.settings.region_timeout);
            tokio::select! {
                request = self.requests.recv() => match request {
                    Some(Request::Reply(reply)) => {
                        connection.send(pb::link_frame::Frame::Reply(convert::reply_to_pb(reply)));
                    }
                    Some(request) => self.take(request),
                    None => return Ended::Idle,
                },
                answer = connection.answers.message() => match answer {
                    Ok(Some(answer)) => {
                        if !self.answered(answer) {
                            return Ended::Broken;
                        }
                    }
                    Ok(None) | Err(_) => {
                        tracing::debug!(node = %self.address, "link broke; reconnecting");
                        return Ended::Broken;
                    }
                },
                () = sleep_until(ack_deadline) => {
                    // Alive but silent (stopped, stuck, cut off): the
                    // connection is given up; the batch is not resent
                    // elsewhere, only on a new connection to the node.
                    tracing::warn!(node = %self.address, timeout = ?self.settings.region_timeout, "no ack from node; reconnecting");
                    return Ended::Broken;
                }
            }
        }
    }

    /// Ends the stream with everything sent and acked, and waits (at most
    /// the region timeout) until the receiver ends its side: it has then
    /// read every frame, the last replies among them.
    async fn finish(&mut self, connection: Connection) -> Ended {
        let Connection {
            frames,
            mut answers,
        } = connection;
        drop(frames);
        let ended = tokio::time::timeout(self.settings.region_timeout, async {
            while let Ok(Some(answer)) = answers.message().await {
                self.answered(answer);
            }
        })
        .await;
        if ended.is_err() {
            tracing::debug!(node = %self.address, "link did not end in time");
        }
        self.finished();
        Ended::Finished
    }

    /// Sends queued batches while the receiver's window has room.
    fn send_what_fits(&mut self, connection: &mut Connection) {
        while let Some((envelopes, _)) = self.queued.front() {
            let n = envelopes.len() as u64;
            let in_custody = self.taken.saturating_sub(self.released);
            if in_custody > 0 && in_custody + n > WINDOW {
                return;
            }
            let Some((envelopes, done)) = self.queued.pop_front() else {
                return;
            };
            let first = self.next_sequence.fetch_add(n.max(1), Ordering::AcqRel) + 1;
            self.taken += n;
            connection.send_batch(first, envelopes.clone());
            self.unacked.push_back(Sent {
                first,
                envelopes,
                done,
                at: Instant::now(),
            });
        }
    }

    /// Handles one answer; `false` when it makes no sense (the stream is
    /// then dropped).
    fn answered(&mut self, answer: pb::LinkAnswer) -> bool {
        use pb::link_answer::Answer;
        match answer.answer {
            Some(Answer::Ack(ack)) => {
                let Some(sent) = self.unacked.pop_front() else {
                    tracing::warn!(node = %self.address, "ack without a batch; dropping the link");
                    return false;
                };
                if sent.first != ack.first_sequence {
                    tracing::warn!(node = %self.address, "ack out of order; dropping the link");
                    self.unacked.push_front(sent);
                    return false;
                }
                let _ = sent.done.send(Ok(ack.accepted));
                true
            }
            Some(Answer::Credit(credit)) => {
                self.released = self.released.max(credit.released);
                true
            }
            Some(Answer::Welcome(_)) | None => true,
        }
    }
}

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}

mod connection;
#[cfg(test)]
mod prop_tests;

use connection::{Connection, Refusal};
