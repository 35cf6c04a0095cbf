//! Acknowledgements of records, and the offsets they allow to be stored.
//!
//! Every record handed to the service carries an [`Ack`]. Acking it says the
//! record was handled (or dead-lettered); dropping it unacked says it was
//! not, so no path can lose one. A partition's offset advances only over a
//! run of acked records: its stored position is the lowest offset still
//! pending, so a record that was not handled is consumed again after a
//! restart or a rebalance, never skipped.

use parking_lot::Mutex;
use std::collections::VecDeque;
use std::sync::Arc;

/// How many times its in-flight bound a partition may hold in records
/// that were applied and wait only for their change to be durable
/// ([`Ack::applied`]). They cost an ack each, not a record: a durable
/// write then batches what a flush interval brings, rather than what the
/// in-flight bound lets in, and the bound still stops a partition whose
/// writes do not come.
pub const AWAITING_DURABILITY_PER_IN_FLIGHT: usize = 4;

/// One partition's records in the service's hands, and how far its offset
/// may be stored.
///
/// Records are delivered in offset order and mostly settled in it, so the
/// unsettled ones are a window: a queue of the offsets delivered since the
/// lowest unsettled one, each marked once settled, whose settled front is
/// dropped. No allocation per record, unlike a set.
#[derive(Debug, Default)]
pub(crate) struct Offsets {
    /// Offsets delivered from the lowest one still pending on, ascending,
    /// each with whether it was settled.
    window: VecDeque<(i64, bool)>,
    /// Delivered to the service and not settled yet.
    pending: usize,
    /// Of those, the ones applied, waiting only to be durable.
    applied: usize,
    /// The highest offset delivered so far.
    delivered_through: Option<i64>,
    /// The lowest offset whose ack was dropped: the position stays at or
    /// below it.
    failed: Option<i64>,
}

impl Offsets {
    /// A record goes to the service.
    pub fn delivered(&mut self, offset: i64) {
        match self.window.back() {
            Some(&(last, _)) if last >= offset => {
                // Out of order (not from librdkafka): kept sorted.
                let at = self.window.partition_point(|&(o, _)| o < offset);
                if self.window.get(at).is_some_and(|&(o, _)| o == offset) {
                    return;
                }
                self.window.insert(at, (offset, false));
            }
            _ => self.window.push_back((offset, false)),
        }
        self.pending += 1;
        self.delivered_through = Some(self.delivered_through.map_or(offset, |d| d.max(offset)));
    }

    fn settle(&mut self, offset: i64, handled: bool, applied: bool) {
        // Mostly the oldest one: records settle in the order they came.
        let at = match self.window.front() {
            Some(&(front, _)) if front == offset => 0,
            _ => match self.window.binary_search_by_key(&offset, |&(o, _)| o) {
                Ok(at) => at,
                Err(_) => return,
            },
        };
        let Some(entry) = self.window.get_mut(at) else {
            return;
        };
        if entry.1 {
            return;
        }
        entry.1 = true;
        self.pending -= 1;
        if applied {
            self.applied -= 1;
        }
        if !handled {
            self.failed = Some(self.failed.map_or(offset, |f| f.min(offset)));
        }
        while self.window.front().is_some_and(|&(_, settled)| settled) {
            self.window.pop_front();
        }
    }

    /// The highest offset handed to the service so far.
    pub fn delivered_through(&self) -> Option<i64> {
        self.delivered_through
    }

    /// Records in the service's hands.
    pub fn in_flight(&self) -> usize {
        self.pending
    }

    /// Of those, the ones not applied yet: what the in-flight bounds count.
    pub fn unapplied(&self) -> usize {
        self.pending - self.applied
    }

    /// Whether the partition takes another record under its bound of
    /// `max_in_flight`: records not applied yet count against it, and
    /// records applied that wait to be durable against
    /// [`AWAITING_DURABILITY_PER_IN_FLIGHT`] times it.
    pub fn takes_more(&self, max_in_flight: usize) -> bool {
        self.room(max_in_flight) > 0
    }

    /// How many more records the partition takes under its bound of
    /// `max_in_flight` (see [`Offsets::takes_more`]).
    pub fn room(&self, max_in_flight: usize) -> usize {
        let awaiting = max_in_flight.saturating_mul(AWAITING_DURABILITY_PER_IN_FLIGHT);
        max_in_flight
            .saturating_sub(self.unapplied())
            .min(awaiting.saturating_sub(self.pending))
    }

    /// The next offset to consume after a restart: every record below it
    /// was handled. `None` before anything was delivered.
    pub fn position(&self) -> Option<i64> {
        let next = self.delivered_through? + 1;
        let lowest_pending = self.window.front().map_or(next, |&(o, _)| o);
        Some(lowest_pending.min(self.failed.unwrap_or(i64::MAX)))
    }
}

/// The acknowledgement of one record. [`Ack::handled`] says it was handled
/// or dead-lettered; dropped without that, it reports the record not
/// handled.
#[derive(Debug)]
pub struct Ack {
    offsets: Arc<Mutex<Offsets>>,
    offset: i64,
    phase: Phase,
}

/// Where an ack's record is: its partition counts it by this.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Being handled: it holds a place of the in-flight bound.
    Pending,
    /// Applied, waiting only to be durable ([`Ack::applied`]).
    Applied,
    /// Settled, or of no partition ([`Ack::detached`]).
    Settled,
}

impl Ack {
    pub(crate) fn new(offsets: Arc<Mutex<Offsets>>, offset: i64) -> Self {
        offsets.lock().delivered(offset);
        Self {
            offsets,
            offset,
            phase: Phase::Pending,
        }
    }

    /// An ack of no partition's, for a record made by hand (to check a
    /// decoder on its own, say): acking or dropping it changes nothing.
    pub fn detached() -> Self {
        Self {
            offsets: Arc::new(Mutex::new(Offsets::default())),
            offset: 0,
            phase: Phase::Settled,
        }
    }

    /// The record's offset in its partition.
    pub fn offset(&self) -> i64 {
        self.offset
    }

    /// The record's effect is applied, and only waits to be durable
    /// before [`Ack::handled`]: it no longer counts against its partition's
    /// in-flight bound, which bounds the records being handled, but its
    /// offset is not committed before it is handled.
    pub fn applied(&mut self) {
        if self.phase == Phase::Pending {
            self.phase = Phase::Applied;
            self.offsets.lock().applied += 1;
        }
    }

    /// Settles the record, handled or not, once.
    fn settle(&mut self, handled: bool) {
        let applied = match std::mem::replace(&mut self.phase, Phase::Settled) {
            Phase::Settled => return,
            Phase::Pending => false,
            Phase::Applied => true,
        };
        self.offsets.lock().settle(self.offset, handled, applied);
    }

    /// The record was handled, or written to the dead-letter topic: its
    /// offset may be committed once every record before it is too.
    pub fn handled(mut self) {
        self.settle(true);
    }
}

impl Drop for Ack {
    fn drop(&mut self) {
        if self.phase != Phase::Settled {
            // Not logged at warn here: a partition that gives up its
            // records drops many at once, and says so in one line.
            tracing::debug!(offset = self.offset, "record not handled: its offset is not committed, and it is consumed again after a restart or rebalance");
            self.settle(false);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ack(offsets: &Arc<Mutex<Offsets>>, offset: i64) -> Ack {
        Ack::new(offsets.clone(), offset)
    }

    #[test]
    fn the_position_advances_over_acked_records_only_in_order() {
        let offsets = Arc::new(Mutex::new(Offsets::default()));
        assert_eq!(offsets.lock().position(), None);
        let (a, b, c) = (ack(&offsets, 10), ack(&offsets, 11), ack(&offsets, 12));
        assert_eq!(offsets.lock().in_flight(), 3);
        c.handled();
        assert_eq!(offsets.lock().position(), Some(10), "10 and 11 pending");
        a.handled();
        assert_eq!(offsets.lock().position(), Some(11));
        b.handled();
        assert_eq!(offsets.lock().position(), Some(13), "all handled");
        assert_eq!(offsets.lock().in_flight(), 0);
    }

    #[test]
    fn applied_records_leave_the_bound_but_hold_the_position() {
        let offsets = Arc::new(Mutex::new(Offsets::default()));
        let mut acks: Vec<Ack> = (0..4).map(|o| ack(&offsets, o)).collect();
        assert!(!offsets.lock().takes_more(4), "four in flight of four");
        for ack in &mut acks[..3] {
            ack.applied();
        }
        acks[0].applied();
        assert!(offsets.lock().takes_more(4), "one being handled");
        assert_eq!(offsets.lock().in_flight(), 4);
        assert_eq!(offsets.lock().position(), Some(0), "none durable yet");
        let mut rest = acks.into_iter();
        rest.next().expect("ack").handled();
        drop(rest.next());
        assert_eq!(offsets.lock().position(), Some(1), "the dropped one again");
        assert_eq!(offsets.lock().in_flight(), 2);
        // Applied ones are bounded too, at a multiple of the bound.
        let many = AWAITING_DURABILITY_PER_IN_FLIGHT * 4;
        let mut waiting: Vec<Ack> = (10..10 + many as i64).map(|o| ack(&offsets, o)).collect();
        for ack in &mut waiting {
            ack.applied();
        }
        assert!(!offsets.lock().takes_more(4));
    }

    #[test]
    fn a_dropped_ack_holds_the_position_at_its_record() {
        let offsets = Arc::new(Mutex::new(Offsets::default()));
        let (a, b, c) = (ack(&offsets, 0), ack(&offsets, 1), ack(&offsets, 2));
        a.handled();
        drop(b);
        c.handled();
        assert_eq!(
            offsets.lock().position(),
            Some(1),
            "record 1 is consumed again"
        );
        // Later records acked do not move it past the failed one.
        let d = ack(&offsets, 3);
        d.handled();
        assert_eq!(offsets.lock().position(), Some(1));
    }

    #[test]
    fn offsets_delivered_out_of_order_are_kept_in_order() {
        let offsets = Arc::new(Mutex::new(Offsets::default()));
        let (c, a) = (ack(&offsets, 7), ack(&offsets, 5));
        assert_eq!(offsets.lock().in_flight(), 2);
        c.handled();
        assert_eq!(offsets.lock().position(), Some(5), "5 still pending");
        a.handled();
        assert_eq!(offsets.lock().position(), Some(8));
        assert_eq!(offsets.lock().in_flight(), 0);
    }
}
