//! Held records handed over under both bounds: each partition's own, and
//! the whole source's (`budget.rs`).

use super::{Feeds, Phase};

impl Feeds {
    /// Hands over held records under both bounds: first each open
    /// partition up to its share of the whole bound, then any, in turn.
    pub(super) fn release_held(&mut self) {
        let Self {
            by,
            max_in_flight,
            budget,
            ..
        } = self;
        budget.recount(by.values().map(|f| f.offsets.lock().unapplied()).sum());
        let share = budget.share(by.len());
        for limit in [share, usize::MAX] {
            for feed in by.values_mut() {
                if !matches!(feed.phase, Phase::Open { .. }) || feed.held.is_empty() {
                    continue;
                }
                // Worked out once per partition: the records handed over
                // meanwhile are exactly what the room counts down.
                let room = {
                    let offsets = feed.offsets.lock();
                    let share = limit.saturating_sub(offsets.unapplied());
                    offsets.room(*max_in_flight).min(share)
                };
                let taken = room.min(budget.room()).min(feed.held.len());
                for _ in 0..taken {
                    if let Some(raw) = feed.held.pop_front() {
                        feed.hand_over(raw);
                    }
                }
                budget.took(taken);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::{open_feed, raw};
    use super::super::Budget;
    use super::*;
    use crate::record::{Record, TopicPartition};
    use std::sync::Arc;
    use tokio::sync::mpsc;

    /// Two partitions under a bound of 4 for the pair: what is over it is
    /// held (nothing dropped), and as acks come, a partition that had
    /// records held gets its share before the first refills.
    #[test]
    fn the_bound_of_all_partitions_holds_records_and_shares_what_frees() {
        let (first, mut first_records) = mpsc::unbounded_channel();
        let mut feeds = open_feed(first);
        feeds.budget = Budget::new(4);
        let (second, mut second_records) = mpsc::unbounded_channel();
        let mut feed = open_feed(second).by.into_values().next().expect("a feed");
        feed.topic = Arc::from("u");
        let u = TopicPartition {
            topic: "u".into(),
            partition: 0,
        };
        feeds.by.insert(u.clone(), feed);
        for offset in 0..6 {
            feeds.push("t", raw(offset));
        }
        for offset in 0..3 {
            feeds.push("u", raw(offset));
        }
        let drain = |records: &mut mpsc::UnboundedReceiver<Record>| {
            std::iter::from_fn(|| records.try_recv().ok()).collect::<Vec<_>>()
        };
        let taken = drain(&mut first_records);
        assert_eq!(taken.len(), 4, "the first partition filled the bound");
        assert!(drain(&mut second_records).is_empty(), "nothing over it");
        let held = |feeds: &Feeds, topic: &str| {
            feeds
                .by
                .iter()
                .find(|(tp, _)| tp.topic == topic)
                .map(|(_, f)| f.held.len())
        };
        assert_eq!((held(&feeds, "t"), held(&feeds, "u")), (Some(2), Some(3)));
        // Two handled: the second partition, below its share (2 of 4), takes
        // them, though the first's held records came before.
        let mut taken = taken.into_iter();
        for record in taken.by_ref().take(2) {
            record.ack.handled();
        }
        // The other two stay in hand (a dropped ack settles its record).
        let _in_hand: Vec<Record> = taken.collect();
        feeds.release_held();
        assert_eq!(drain(&mut second_records).len(), 2);
        assert!(drain(&mut first_records).is_empty());
        assert_eq!((held(&feeds, "t"), held(&feeds, "u")), (Some(2), Some(1)));
    }
}
