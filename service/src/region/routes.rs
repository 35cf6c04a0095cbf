//! The region's routing table: per shard, either its home (a mailbox to a
//! local shard or to the outbound queue of a remote node) or a buffer.
//!
//! Senders route here directly, without a hop through the region task: the
//! per-shard lock makes "decide where" and "enqueue" one step, which is what
//! keeps per-sender order across home changes. Nothing ever waits while
//! holding a lock: a full mailbox is waited for outside it, and the decision
//! is re-checked before the message is placed. A message from this node
//! and one received from another are routed by the same decision
//! (`decide`), which differ only in what they may wait for (`Admission`).

use super::mail::{in_handler, Mail};
use crate::entity::Entity;
use crate::envelope::Envelope;
use crate::error::TellError;
use crate::mailbox::{Mailbox, PushError};
use crate::metrics::RegionMetrics;
use colo_allocation::{RegionId, ShardId};
use parking_lot::Mutex;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;

/// Where a shard lives, seen from this region.
pub(crate) struct Home<E: Entity> {
    pub sink: Arc<Mailbox<Mail<E>>>,
    /// `None` for a shard hosted by this region.
    pub remote: Option<RegionId>,
}

impl<E: Entity> Clone for Home<E> {
    fn clone(&self) -> Self {
        Self {
            sink: self.sink.clone(),
            remote: self.remote.clone(),
        }
    }
}

enum Route<E: Entity> {
    /// Home unknown or handing off. `requested` is set once the region has
    /// been told to ask the coordinator, so a burst asks only once.
    Buffering {
        queue: VecDeque<Envelope<E>>,
        requested: bool,
    },
    Home(Home<E>),
    /// The region has stopped: refuse, so nothing is accepted and then lost.
    Stopped,
}

/// Where a routed message went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Placement {
    /// Into its shard's mailbox on this node.
    Delivered,
    /// On its way to its shard's node.
    Forwarded,
    /// Into the buffer: its shard's home is not known (or moving).
    Buffered,
}

/// Where a message comes from, which decides what routing may do with it.
#[derive(Debug, Clone, Copy)]
enum Admission {
    /// From this node: it may wait for room in a full mailbox, and the
    /// buffer is bounded (`buffer_size`).
    Local,
    /// From another node: placed without waiting, into its home's mailbox
    /// whatever its length or into the buffer whatever its size. Such a
    /// message was accepted by its sender's region and is bounded by the
    /// sender's credit window (see `credits.rs`) instead; a receiver that
    /// made it wait would stall the sender's whole link. `registered`: the
    /// region can learn shard homes now; without it a buffered message
    /// could wait for as long as the coordinator is away, holding its
    /// sender's credit, so it is refused instead, and its sender routes it
    /// again.
    Received { registered: bool },
}

/// What routing under the lock decided.
enum Step<E: Entity> {
    Placed(Placement),
    /// The mailbox is full: wait for room in it.
    Full(Arc<Mailbox<Mail<E>>>, Envelope<E>),
    /// The route changed: route again.
    Retry(Envelope<E>),
}

struct Slot<E: Entity> {
    route: Route<E>,
}

/// The routing table of one region.
pub(crate) struct Routes<E: Entity> {
    slots: Box<[Mutex<Slot<E>>]>,
    buffered: AtomicUsize,
    limit: usize,
    /// How long a sender inside an entity handler waits for a full mailbox.
    handler_wait: Duration,
    entity_type: String,
    /// Tells the region task to ask for a shard's home. Unbounded, but holds
    /// at most one entry per shard and buffering period (see `requested`).
    home_requests: mpsc::UnboundedSender<ShardId>,
    metrics: RegionMetrics,
}

impl<E: Entity> Routes<E> {
    pub fn new(
        shards: u32,
        limit: usize,
        handler_wait: Duration,
        entity_type: &str,
        home_requests: mpsc::UnboundedSender<ShardId>,
        metrics: RegionMetrics,
    ) -> Self {
        let slots = (0..shards)
            .map(|_| {
                Mutex::new(Slot {
                    route: Route::Buffering {
                        queue: VecDeque::new(),
                        requested: false,
                    },
                })
            })
            .collect();
        Self {
            slots,
            buffered: AtomicUsize::new(0),
            limit,
            handler_wait,
            entity_type: entity_type.to_string(),
            home_requests,
            metrics,
        }
    }

    fn slot(&self, shard: ShardId) -> &Mutex<Slot<E>> {
        // The extractor never returns a shard at or past number_of_shards
        // (checked at registration), and remote envelopes are checked on
        // arrival; the modulo only keeps a bug from becoming a panic.
        &self.slots[shard.0 as usize % self.slots.len()]
    }

    /// Messages buffered in the whole region.
    pub fn buffered(&self) -> usize {
        self.buffered.load(Ordering::Relaxed)
    }

    /// Routes one message from this node: into its home's mailbox, or into
    /// the buffer.
    ///
    /// # Errors
    /// The message is refused (buffer full, region stopped); it comes back.
    pub async fn route(&self, mut env: Envelope<E>) -> Result<Placement, TellError> {
        loop {
            match self.decide(env, Admission::Local)? {
                Step::Placed(placement) => return Ok(placement),
                Step::Full(sink, back) => {
                    // Wait for room outside the lock, then route again: the
                    // home may have changed meanwhile. Inside a handler the
                    // wait is bounded: the full shard may be waiting for the
                    // very shard this handler runs in.
                    env = back;
                    if !in_handler() {
                        sink.wait_for_space().await;
                    } else if tokio::time::timeout(self.handler_wait, sink.wait_for_space())
                        .await
                        .is_err()
                    {
                        self.metrics.dropped_mailbox_full.increment(1);
                        return Err(TellError::MailboxFull {
                            entity_type: self.entity_type.clone(),
                            waited: self.handler_wait,
                        });
                    }
                }
                Step::Retry(back) => env = back,
            }
        }
    }

    /// Places a message received from another node without waiting (see
    /// [`Admission::Received`]).
    ///
    /// # Errors
    /// The region has stopped, or cannot buffer; the message comes back.
    pub fn place(&self, mut env: Envelope<E>, registered: bool) -> Result<(), TellError> {
        loop {
            match self.decide(env, Admission::Received { registered })? {
                Step::Placed(_) => return Ok(()),
                Step::Retry(back) | Step::Full(_, back) => env = back,
            }
        }
    }

    /// Where a message goes, decided and done under its shard's lock: the
    /// one place that reads a shard's route.
    fn decide(&self, env: Envelope<E>, admission: Admission) -> Result<Step<E>, TellError> {
        let mut slot = self.slot(env.shard).lock();
        match &mut slot.route {
            Route::Home(home) if home.remote.is_some() && env.local_only() => {
                Err(TellError::NotHere(self.entity_type.clone()))
            }
            Route::Home(home) => {
                let pushed = match admission {
                    Admission::Local => home.sink.try_push(Mail::One(env)),
                    Admission::Received { .. } => {
                        home.sink.push(Mail::One(env)).map_err(PushError::Closed)
                    }
                };
                match pushed {
                    Ok(()) if home.remote.is_some() => {
                        self.metrics.forwarded.increment(1);
                        Ok(Step::Placed(Placement::Forwarded))
                    }
                    Ok(()) => Ok(Step::Placed(Placement::Delivered)),
                    Err(PushError::Full(mail)) => {
                        Ok(Step::Full(home.sink.clone(), unwrap_one(mail)))
                    }
                    Err(PushError::Closed(mail)) => {
                        // The home went away (a shard stopped, an outbound
                        // queue closed): buffer and ask again.
                        slot.route = Route::Buffering {
                            queue: VecDeque::new(),
                            requested: false,
                        };
                        Ok(Step::Retry(unwrap_one(mail)))
                    }
                }
            }
            Route::Stopped => Err(TellError::RegionStopped(self.entity_type.clone())),
            Route::Buffering { queue, requested } => {
                match admission {
                    Admission::Local => self.reserve(true)?,
                    Admission::Received { registered: false } => {
                        return Err(TellError::CoordinatorUnreachable(self.entity_type.clone()));
                    }
                    Admission::Received { registered: true } => self.reserve(false)?,
                }
                let shard = env.shard;
                queue.push_back(env);
                if !*requested {
                    *requested = true;
                    let _ = self.home_requests.send(shard);
                }
                Ok(Step::Placed(Placement::Buffered))
            }
        }
    }

    /// Counts one more buffered message; `bounded`: refused past
    /// `buffer_size` (a message from this node, see [`Admission`]).
    fn reserve(&self, bounded: bool) -> Result<(), TellError> {
        let before = self.buffered.fetch_add(1, Ordering::Relaxed);
        if bounded && before >= self.limit {
            self.buffered.fetch_sub(1, Ordering::Relaxed);
            self.metrics.dropped_buffer_full.increment(1);
            return Err(TellError::BufferFull {
                entity_type: self.entity_type.clone(),
                limit: self.limit,
            });
        }
        self.metrics.buffered.increment(1.0);
        self.metrics.buffered_total.increment(1);
        Ok(())
    }

    fn release(&self, n: usize) {
        if n > 0 {
            self.buffered.fetch_sub(n, Ordering::Relaxed);
            self.metrics.buffered.decrement(n as f64);
        }
    }

    /// Installs a home and flushes the buffer into it, in one step under the
    /// shard's lock so that nothing routed later can overtake the flush.
    /// Returns `false` (and keeps buffering) when the home has closed.
    pub fn install(&self, shard: ShardId, home: Home<E>) -> bool {
        let mut slot = self.slot(shard).lock();
        if matches!(slot.route, Route::Stopped) {
            return false;
        }
        let queue = match &mut slot.route {
            Route::Buffering { queue, .. } => std::mem::take(queue),
            _ => VecDeque::new(),
        };
        let n = queue.len();
        if n > 0 {
            if let Err(Mail::Batch(queue)) = home.sink.push(Mail::Batch(queue)) {
                if let Route::Buffering { queue: q, .. } = &mut slot.route {
                    *q = queue;
                }
                return false;
            }
        } else if home.sink.is_closed() {
            return false;
        }
        self.release(n);
        if home.remote.is_some() {
            self.metrics.forwarded.increment(n as u64);
        }
        slot.route = Route::Home(home);
        true
    }

    /// Forgets a shard's home and buffers from now on; returns the old home.
    pub fn unset_home(&self, shard: ShardId) -> Option<Home<E>> {
        self.unset_home_if(shard, |_| true)
    }

    /// Like [`Self::unset_home`], only when the home is on another node.
    pub fn unset_remote_home(&self, shard: ShardId) -> Option<Home<E>> {
        self.unset_home_if(shard, |home| home.remote.is_some())
    }

    fn unset_home_if(&self, shard: ShardId, which: impl Fn(&Home<E>) -> bool) -> Option<Home<E>> {
        let mut slot = self.slot(shard).lock();
        if !matches!(&slot.route, Route::Home(home) if which(home)) {
            return None;
        }
        let old = std::mem::replace(
            &mut slot.route,
            Route::Buffering {
                queue: VecDeque::new(),
                requested: false,
            },
        );
        match old {
            Route::Home(home) => Some(home),
            Route::Buffering { .. } | Route::Stopped => None,
        }
    }

    /// Forgets every home on `region`; returns the shards it had.
    pub fn forget_region(&self, region: &RegionId) -> Vec<ShardId> {
        let mut forgotten = Vec::new();
        for (i, slot) in self.slots.iter().enumerate() {
            let mut slot = slot.lock();
            let on_region =
                matches!(&slot.route, Route::Home(Home { remote: Some(r), .. }) if r == region);
            if on_region {
                slot.route = Route::Buffering {
                    queue: VecDeque::new(),
                    requested: false,
                };
                forgotten.push(ShardId(i as u32));
            }
        }
        forgotten
    }

    /// Puts messages that were already accepted back in front of the shard's
    /// buffer (they were sent before anything buffered now). If the shard has
    /// a home again, returns them to be routed normally.
    ///
    /// They are this region's now: a message from another node returns its
    /// sender's credit here, since it may wait as long as the coordinator is
    /// away (they are bounded by what the shard or queue they come from
    /// held).
    pub fn prepend(
        &self,
        shard: ShardId,
        mut messages: VecDeque<Envelope<E>>,
    ) -> Option<VecDeque<Envelope<E>>> {
        if messages.is_empty() {
            return None;
        }
        for env in &mut messages {
            env.credit = None;
        }
        let mut slot = self.slot(shard).lock();
        match &mut slot.route {
            Route::Buffering { queue, requested } => {
                let n = messages.len();
                let mut messages = messages;
                messages.append(queue);
                *queue = messages;
                // Already accepted: counted, but never refused.
                self.buffered.fetch_add(n, Ordering::Relaxed);
                self.metrics.buffered.increment(n as f64);
                if !*requested {
                    *requested = true;
                    let _ = self.home_requests.send(shard);
                }
                None
            }
            Route::Home(_) | Route::Stopped => Some(messages),
        }
    }

    /// Visits every buffered message.
    pub fn for_each_buffered(&self, mut mark: impl FnMut(&mut Envelope<E>)) {
        for slot in self.slots.iter() {
            if let Route::Buffering { queue, .. } = &mut slot.lock().route {
                queue.iter_mut().for_each(&mut mark);
            }
        }
    }

    /// Where messages for `shard` go now, in words, for a log line about
    /// a message that waits.
    pub fn describe(&self, shard: ShardId) -> String {
        match &self.slot(shard).lock().route {
            Route::Buffering { queue, requested } => format!(
                "buffered here ({} messages), its home {}",
                queue.len(),
                if *requested {
                    "asked of the coordinator"
                } else {
                    "not asked yet"
                }
            ),
            Route::Home(Home { remote: None, .. }) => "hosted here".to_string(),
            Route::Home(Home {
                remote: Some(node), ..
            }) => format!("hosted on {node}"),
            Route::Stopped => "the region has stopped".to_string(),
        }
    }

    /// Whether messages wait for `shard`'s home.
    pub fn is_waiting(&self, shard: ShardId) -> bool {
        self.slots.get(shard.0 as usize).is_some_and(|slot| {
            matches!(&slot.lock().route, Route::Buffering { queue, .. } if !queue.is_empty())
        })
    }

    /// Shards with buffered messages, which need a home.
    pub fn waiting_shards(&self) -> Vec<ShardId> {
        (0..self.slots.len())
            .filter_map(|i| {
                let slot = self.slots[i].lock();
                match &slot.route {
                    Route::Buffering { queue, .. } if !queue.is_empty() => Some(ShardId(i as u32)),
                    _ => None,
                }
            })
            .collect()
    }

    /// Stops routing: every later message is refused, and what is still
    /// buffered is dropped (the region has no way left to deliver it).
    /// Returns how many were dropped.
    pub fn stop(&self) -> usize {
        let mut dropped = 0;
        for slot in self.slots.iter() {
            let mut slot = slot.lock();
            if let Route::Buffering { queue, .. } = &mut slot.route {
                dropped += queue.len();
            }
            slot.route = Route::Stopped;
        }
        self.release(dropped);
        dropped
    }
}

fn unwrap_one<E: Entity>(mail: Mail<E>) -> Envelope<E> {
    match mail {
        Mail::One(env) => env,
        // `route` only ever sends `Mail::One`, and a failed send returns
        // exactly what was sent.
        _ => unreachable!("route sends only single envelopes"),
    }
}
