//! The records a source partition's task has in hand, in offset order: each
//! one's step (held behind its key, routed, answered, to be sent again,
//! refused), and each key's chain of held records, so that a key's records
//! are handled one after another while different keys run side by side.

use super::SourceRecord;
use crate::durability::ShardDurability;
use crate::entity::{Entity, EntityId};
use crate::envelope::AckedAnswer;
use crate::error::unanswered;
use crate::error::{AskError, TellError};
use std::collections::{HashMap, VecDeque};
use std::sync::Weak;
use tokio::sync::oneshot;

/// The records in the partition's hands, in offset order, and which keys
/// have one unsettled.
pub(crate) struct Slots<E: Entity, R> {
    pub(crate) queue: VecDeque<Slot<E, R>>,
    /// The sequence number of the front of `queue`: a slot's number is its
    /// position plus this, which stays fixed as the front settles.
    pub(crate) front: u64,
    /// Each key with an unsettled record, by the key's hash: the number of
    /// its last record in the queue. Its records are chained through
    /// [`Slot::next`] from the one routed. Keys whose hashes collide (one
    /// chance in 2^64, with a seed of each task's own) share a chain:
    /// handled one after another, never out of order; the second may then
    /// name the first as its key's previous record (`Origin::previous`),
    /// which at worst has the partition consumed again once.
    pub(crate) busy: HashMap<u64, u64, Prehashed>,
    pub(crate) keys: foldhash::fast::RandomState,
}

/// Hashes a key's hash to itself: the busy keys are hashed once, when a
/// record is taken.
#[derive(Clone, Copy, Default)]
pub(crate) struct Prehashed;

impl std::hash::BuildHasher for Prehashed {
    type Hasher = KeyHash;

    fn build_hasher(&self) -> KeyHash {
        KeyHash(0)
    }
}

/// The hasher of [`Prehashed`].
pub(crate) struct KeyHash(u64);

impl std::hash::Hasher for KeyHash {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        // Only u64 keys are hashed; any other input still hashes.
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(b);
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
}

/// A record in hand.
pub(crate) struct Slot<E: Entity, R> {
    pub(crate) record: R,
    pub(crate) step: Step<E>,
    /// Its key's hash, for a record that has a key.
    pub(crate) key: Option<u64>,
    /// The number of its key's next record in the queue, held behind it.
    pub(crate) next: Option<u64>,
}

/// Where a record in hand is.
pub(crate) enum Step<E: Entity> {
    /// Waits for an earlier record of its key to settle (boxed: most
    /// records are never held, and a slot stays small).
    Held {
        id: EntityId,
        message: Box<E::Message>,
    },
    /// On its way to its entity or there; the outcome comes on `reply`.
    Routed {
        id: EntityId,
        reply: Awaiting<E::Reply>,
        tries: Tries,
    },
    /// Routed (or refused on the way), its outcome in, not settled yet
    /// (records settle in order).
    Answered {
        id: EntityId,
        tries: Tries,
        outcome: Outcome,
        start: Start,
    },
    /// To be delivered again once it is at the front, after the backoff.
    Again { id: EntityId, tries: Tries },
    /// Can never be handled: dead-lettered once at the front.
    Refused {
        reason: String,
        outcome: &'static str,
    },
    /// Taken out while it is being settled.
    Settling,
}

/// The start of the shard that handled a record, when its answer names
/// one (see `AckedAnswer`).
pub(crate) type Start = Option<Weak<ShardDurability>>;

/// Where a routed record's answer comes from.
pub(crate) enum Awaiting<R> {
    /// Its partition's own shard here (`Reply::Acked`), naming the start
    /// of the shard that handled it.
    Acked(oneshot::Receiver<AckedAnswer<R>>),
    /// An ask that follows its shard wherever it is (`Reply::Local`),
    /// sent again if no answer comes by `deadline`: a node that dies with
    /// it answers nothing, and its durable entity skips a copy it applied.
    Ask {
        rx: oneshot::Receiver<Result<R, AskError>>,
        deadline: tokio::time::Instant,
    },
}

/// What an ask's missing answer is reported as.
fn unanswered_ask() -> (Outcome, Start) {
    let reason = "no answer from its shard's node within kafka.delivery_timeout".to_string();
    (Outcome::Waits(reason), None)
}

impl<R> Awaiting<R> {
    /// The answer if it is in; a channel dropped unanswered means the
    /// record was not handled.
    pub(crate) fn try_answer(&mut self) -> Option<(Outcome, Start)> {
        use oneshot::error::TryRecvError;
        match self {
            Awaiting::Acked(rx) => match rx.try_recv() {
                Ok(answer) => Some((Outcome::of(answer.result.map(drop)), answer.start)),
                Err(TryRecvError::Closed) => Some((Outcome::of(Err(unanswered())), None)),
                Err(TryRecvError::Empty) => None,
            },
            Awaiting::Ask { rx, deadline } => match rx.try_recv() {
                Ok(result) => Some((Outcome::of(result.map(drop)), None)),
                Err(TryRecvError::Closed) => Some((Outcome::of(Err(unanswered())), None)),
                Err(TryRecvError::Empty) if tokio::time::Instant::now() >= *deadline => {
                    Some(unanswered_ask())
                }
                Err(TryRecvError::Empty) => None,
            },
        }
    }

    /// Waits for the answer.
    pub(crate) async fn answer(&mut self) -> (Outcome, Start) {
        match self {
            Awaiting::Acked(rx) => match rx.await {
                Ok(answer) => (Outcome::of(answer.result.map(drop)), answer.start),
                Err(_) => (Outcome::of(Err(unanswered())), None),
            },
            Awaiting::Ask { rx, deadline } => match tokio::time::timeout_at(*deadline, rx).await {
                Ok(Ok(result)) => (Outcome::of(result.map(drop)), None),
                Ok(Err(_)) => (Outcome::of(Err(unanswered())), None),
                Err(_) => unanswered_ask(),
            },
        }
    }
}

/// How a record's deliveries went so far: what bounds its retries.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Tries {
    /// Its handler's failures (up to `max_attempts`).
    pub(crate) failures: u32,
    /// Since when its deliveries have failed in a row for a reason that
    /// does not pass by waiting (up to `redelivery_timeout`).
    pub(crate) undelivered_since: Option<std::time::Instant>,
    /// The offset of its key's previous record, whose change may not be
    /// durable yet when it was routed (`Origin::previous`).
    pub(crate) previous: Option<i64>,
}

/// Whether a record taken in is routed now or held behind its key's.
pub(crate) enum Chained {
    /// Held until its key's unsettled record is handled.
    Held,
    /// Routed now; `previous`: its key's last record, handled and not
    /// settled yet, if there is one.
    Route { previous: Option<i64> },
}

/// A held record to route now: its number, key and message.
pub(crate) type Next<E> = Option<(u64, EntityId, Box<<E as Entity>::Message>)>;

/// What became of the front record's latest delivery.
pub(crate) enum Outcome {
    Handled,
    /// The handler failed (or its reply could not be decoded): counts
    /// toward `max_attempts`.
    Failed(String),
    /// It never reached a handler, or its node went away unconfirmed:
    /// delivered again, up to `redelivery_timeout`.
    NotDelivered(String),
    /// Refused for a while only (a full buffer, a coordinator away):
    /// delivered again, without a bound, since waiting is what passes it.
    Waits(String),
    /// A record of the partition's own shard, which runs on another node
    /// while the partition is consumed here: the partition must claim its
    /// shard back (its claim was lost with a coordinator, say).
    Moved(String),
    /// It can never be handled.
    Refused(String),
    /// Its key's previous record was lost with the start of its shard
    /// that handled it: the partition is consumed again.
    Lost(String),
}

impl Outcome {
    /// Why it was not handled, for a log line (`None`: it was).
    pub(crate) fn reason(&self) -> Option<&str> {
        match self {
            Outcome::Handled => None,
            Outcome::Failed(reason)
            | Outcome::NotDelivered(reason)
            | Outcome::Waits(reason)
            | Outcome::Moved(reason)
            | Outcome::Refused(reason)
            | Outcome::Lost(reason) => Some(reason),
        }
    }

    pub(crate) fn of(result: Result<(), AskError>) -> Self {
        match result {
            Ok(()) | Err(AskError::AlreadyApplied) => Outcome::Handled,
            Err(e @ AskError::PreviousLost) => Outcome::Lost(e.to_string()),
            Err(e @ (AskError::EntityFailed(_) | AskError::Codec(_))) => {
                Outcome::Failed(e.to_string())
            }
            Err(AskError::Tell(e)) => Outcome::refusal(e),
            Err(e @ (AskError::Dropped(_) | AskError::Unconfirmed(_) | AskError::Timeout(_))) => {
                Outcome::NotDelivered(e.to_string())
            }
        }
    }

    pub(crate) fn refusal(e: TellError) -> Self {
        match e {
            // A record carries no idempotency key: never here, refused.
            TellError::EmptyEntityId
            | TellError::Codec(_)
            | TellError::InvalidIdempotencyKey(_) => Outcome::Refused(e.to_string()),
            TellError::BufferFull { .. }
            | TellError::MailboxFull { .. }
            | TellError::CoordinatorUnreachable(_)
            | TellError::RegionStopped(_) => Outcome::Waits(e.to_string()),
            TellError::NotHere(_) => Outcome::Moved(e.to_string()),
        }
    }
}

impl<E: Entity, R> Slot<E, R> {
    /// Whether it was handled, its reply taken in if it came.
    pub(crate) fn handled(&mut self) -> bool {
        if let Step::Routed { reply, .. } = &mut self.step {
            let Some((outcome, start)) = reply.try_answer() else {
                return false;
            };
            if let Step::Routed { id, tries, .. } =
                std::mem::replace(&mut self.step, Step::Settling)
            {
                self.step = Step::Answered {
                    id,
                    tries,
                    start,
                    outcome,
                };
            }
        }
        matches!(
            self.step,
            Step::Answered {
                outcome: Outcome::Handled,
                ..
            }
        )
    }
}

impl<E: Entity, R: SourceRecord> Slots<E, R> {
    pub(crate) fn new() -> Self {
        Self {
            queue: VecDeque::new(),
            front: 0,
            busy: HashMap::with_hasher(Prehashed),
            keys: foldhash::fast::RandomState::default(),
        }
    }

    pub(crate) fn next_number(&self) -> u64 {
        self.front + self.queue.len() as u64
    }

    pub(crate) fn push(&mut self, record: R, step: Step<E>, key: Option<u64>) {
        self.queue.push_back(Slot {
            record,
            step,
            key,
            next: None,
        });
    }

    /// Chains the next record, of key `key`, behind the key's unsettled
    /// ones: held, or routed now (the key had none, or only handled ones
    /// waiting to settle in order).
    pub(crate) fn chain(&mut self, key: u64) -> Chained {
        let number = self.next_number();
        match self.busy.entry(key) {
            std::collections::hash_map::Entry::Occupied(mut tail) => {
                let last = std::mem::replace(tail.get_mut(), number);
                let Some(slot) = self.queue.get_mut((last - self.front) as usize) else {
                    return Chained::Route { previous: None };
                };
                // Every record of a key routed before its last one was
                // handled (a record is routed only then): once the last is
                // handled too, the next may go.
                if slot.handled() {
                    let previous = Some(slot.record.offset());
                    return Chained::Route { previous };
                }
                slot.next = Some(number);
                Chained::Held
            }
            std::collections::hash_map::Entry::Vacant(tail) => {
                tail.insert(number);
                Chained::Route { previous: None }
            }
        }
    }

    /// Takes the settled front out: returns its record, its key, and the
    /// next record of its key if one is held, to be routed now.
    pub(crate) fn pop(&mut self) -> Option<(R, Option<u64>, Next<E>)> {
        let slot = self.queue.pop_front()?;
        let number = self.front;
        self.front += 1;
        let Some(key) = slot.key else {
            return Some((slot.record, None, None));
        };
        let Some(next) = slot.next else {
            if self.busy.get(&key) == Some(&number) {
                self.busy.remove(&key);
            }
            return Some((slot.record, Some(key), None));
        };
        let held = self
            .queue
            .get_mut((next - self.front) as usize)
            .map(|slot| std::mem::replace(&mut slot.step, Step::Settling));
        let next = match held {
            Some(Step::Held { id, message }) => Some((next, id, message)),
            _ => unreachable!("a record chained behind another is held until that one settles"),
        };
        Some((slot.record, Some(key), next))
    }

    pub(crate) fn front_mut(&mut self) -> Option<&mut Slot<E, R>> {
        self.queue.front_mut()
    }
}
