//! The in-flight bound of a whole source: records of all its partitions in
//! the service's hands at most (`max_in_flight_total`), beside each
//! partition's own bound. A node of hundreds of partitions would otherwise
//! hold hundreds of times a partition's bound, in memory and in what a
//! revoke waits for.

/// Records in the service's hands across the source's partitions (those
/// not applied yet, as a partition's own bound counts them), recounted
/// from the partitions' acks at each maintenance and counted up at each
/// record handed over in between: never below what is in hand, since an
/// ack only lowers it and is counted at the next recount.
#[derive(Debug)]
pub(super) struct Budget {
    bound: usize,
    in_hand: usize,
}

impl Budget {
    pub(super) fn new(bound: usize) -> Self {
        Self { bound, in_hand: 0 }
    }

    pub(super) fn recount(&mut self, in_hand: usize) {
        self.in_hand = in_hand;
    }

    /// Whether another record may be handed over.
    pub(super) fn takes(&self) -> bool {
        self.room() > 0
    }

    /// How many more records may be handed over.
    pub(super) fn room(&self) -> usize {
        self.bound.saturating_sub(self.in_hand)
    }

    pub(super) fn took(&mut self, records: usize) {
        self.in_hand += records;
    }

    /// What each of `partitions` partitions may have in hand before the
    /// others with records held had their turn: none is starved by
    /// partitions that refill first.
    pub(super) fn share(&self, partitions: usize) -> usize {
        (self.bound / partitions.max(1)).max(1)
    }
}
