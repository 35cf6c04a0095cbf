//! The records a partition's task has in hand, in offset order: each
//! one's step (held behind its key, routed, answered, to be sent again,
//! refused), and each key's chain of held records, so that a key's records
//! are handled one after another while different keys run side by side.

use crate::entity::{Entity, EntityId};
use crate::error::unanswered;
use crate::error::{AskError, TellError};
use colo_connectors::Record;
use std::collections::{HashMap, VecDeque};
use tokio::sync::oneshot;

/// The records in the partition's hands, in offset order, and which keys
/// have one unsettled.
pub(super) struct Slots<E: Entity> {
    pub(super) queue: VecDeque<Slot<E>>,
    /// The sequence number of the front of `queue`: a slot's number is its
    /// position plus this, which stays fixed as the front settles.
    pub(super) front: u64,
    /// Each key with an unsettled record, by the key's hash: the number of
    /// its last record in the queue. Its records are chained through
    /// [`Slot::next`] from the one routed. Keys whose hashes collide share
    /// a chain: handled one after another, never out of order.
    pub(super) busy: HashMap<u64, u64, Prehashed>,
    pub(super) keys: foldhash::fast::RandomState,
}

/// Hashes a key's hash to itself: the busy keys are hashed once, when a
/// record is taken.
#[derive(Clone, Copy, Default)]
pub(super) struct Prehashed;

impl std::hash::BuildHasher for Prehashed {
    type Hasher = KeyHash;

    fn build_hasher(&self) -> KeyHash {
        KeyHash(0)
    }
}

/// The hasher of [`Prehashed`].
pub(super) struct KeyHash(u64);

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
pub(super) struct Slot<E: Entity> {
    pub(super) record: Record,
    pub(super) step: Step<E>,
    /// Its key's hash, for a record that has a key.
    pub(super) key: Option<u64>,
    /// The number of its key's next record in the queue, held behind it.
    pub(super) next: Option<u64>,
}

/// Where a record in hand is.
pub(super) enum Step<E: Entity> {
    /// Waits for an earlier record of its key to settle (boxed: most
    /// records are never held, and a slot stays small).
    Held {
        id: EntityId,
        message: Box<E::Message>,
    },
    /// On its way to its entity or there; the outcome comes on `reply`.
    Routed {
        id: EntityId,
        reply: oneshot::Receiver<Result<E::Reply, AskError>>,
        failures: u32,
    },
    /// Routed, its outcome in, not settled yet (records settle in order).
    Answered {
        id: EntityId,
        failures: u32,
        outcome: Outcome,
    },
    /// To be delivered again once it is at the front, after the backoff.
    Again { id: EntityId, failures: u32 },
    /// Can never be handled: dead-lettered once at the front.
    Refused {
        reason: String,
        outcome: &'static str,
    },
    /// Taken out while it is being settled.
    Settling,
}

/// A held record to route now: its number, key and message.
pub(super) type Next<E> = Option<(u64, EntityId, Box<<E as Entity>::Message>)>;

/// What became of the front record's latest delivery.
pub(super) enum Outcome {
    Handled,
    /// The handler failed (or its reply could not be decoded): counts
    /// toward `max_attempts`.
    Failed(String),
    /// It never reached a handler, or its node went away unconfirmed.
    NotDelivered(String),
    /// It can never be handled.
    Refused(String),
}

impl Outcome {
    pub(super) fn of(result: Result<(), AskError>) -> Self {
        match result {
            Ok(()) | Err(AskError::AlreadyApplied) => Outcome::Handled,
            Err(e @ (AskError::EntityFailed(_) | AskError::Codec(_))) => {
                Outcome::Failed(e.to_string())
            }
            Err(AskError::Tell(e)) => Outcome::refusal(e),
            Err(e @ (AskError::Dropped(_) | AskError::Unconfirmed(_) | AskError::Timeout(_))) => {
                Outcome::NotDelivered(e.to_string())
            }
        }
    }

    pub(super) fn refusal(e: TellError) -> Self {
        match e {
            TellError::EmptyEntityId | TellError::Codec(_) => Outcome::Refused(e.to_string()),
            e => Outcome::NotDelivered(e.to_string()),
        }
    }
}

impl<E: Entity> Slot<E> {
    /// Whether it was handled, its reply taken in if it came.
    pub(super) fn handled(&mut self) -> bool {
        if let Step::Routed { reply, .. } = &mut self.step {
            let result = match reply.try_recv() {
                Ok(result) => result.map(drop),
                Err(oneshot::error::TryRecvError::Closed) => Err(unanswered()),
                Err(oneshot::error::TryRecvError::Empty) => return false,
            };
            if let Step::Routed { id, failures, .. } =
                std::mem::replace(&mut self.step, Step::Settling)
            {
                let outcome = Outcome::of(result);
                self.step = Step::Answered {
                    id,
                    failures,
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

impl<E: Entity> Slots<E> {
    pub(super) fn new() -> Self {
        Self {
            queue: VecDeque::new(),
            front: 0,
            busy: HashMap::with_hasher(Prehashed),
            keys: foldhash::fast::RandomState::default(),
        }
    }

    pub(super) fn next_number(&self) -> u64 {
        self.front + self.queue.len() as u64
    }

    pub(super) fn push(&mut self, record: Record, step: Step<E>, key: Option<u64>) {
        self.queue.push_back(Slot {
            record,
            step,
            key,
            next: None,
        });
    }

    /// Chains the next record, of key `key`, behind the key's unsettled
    /// ones: true if it must be held, false if it is routed now (the key
    /// had none, or only handled ones waiting to settle in order).
    pub(super) fn chain(&mut self, key: u64) -> bool {
        let number = self.next_number();
        match self.busy.entry(key) {
            std::collections::hash_map::Entry::Occupied(mut tail) => {
                let last = std::mem::replace(tail.get_mut(), number);
                let Some(slot) = self.queue.get_mut((last - self.front) as usize) else {
                    return false;
                };
                // Every record of a key routed before its last one was
                // handled (a record is routed only then): once the last is
                // handled too, the next may go.
                if slot.handled() {
                    return false;
                }
                slot.next = Some(number);
                true
            }
            std::collections::hash_map::Entry::Vacant(tail) => {
                tail.insert(number);
                false
            }
        }
    }

    /// Takes the settled front out: returns its record, and the next
    /// record of its key if one is held, to be routed now.
    pub(super) fn pop(&mut self) -> Option<(Record, Next<E>)> {
        let slot = self.queue.pop_front()?;
        let number = self.front;
        self.front += 1;
        let Some(key) = slot.key else {
            return Some((slot.record, None));
        };
        let Some(next) = slot.next else {
            if self.busy.get(&key) == Some(&number) {
                self.busy.remove(&key);
            }
            return Some((slot.record, None));
        };
        let held = self
            .queue
            .get_mut((next - self.front) as usize)
            .map(|slot| std::mem::replace(&mut slot.step, Step::Settling));
        let next = match held {
            Some(Step::Held { id, message }) => Some((next, id, message)),
            _ => unreachable!("a record chained behind another is held until that one settles"),
        };
        Some((slot.record, next))
    }

    pub(super) fn front_mut(&mut self) -> Option<&mut Slot<E>> {
        self.queue.front_mut()
    }
}
