//! How long each shard's records stopped being handled while the demo's
//! membership changed: for each shard, the gap between one record handled
//! and the next, kept when it is long; the summary gives the longest within
//! each change (a join, a leave), of the shards it moved and of those that
//! stayed. A moved partition's pause is such a gap: from its last record
//! handled on the old owner to its first on the new.

use colo::allocation::{KafkaMurmur2Extractor, MessageExtractor};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// Gaps shorter than this are not kept: at the demo's rates a shard's
/// records come every few tens of milliseconds.
const KEPT_FROM: Duration = Duration::from_millis(100);

/// Each shard's last handled record, and the long gaps seen so far.
#[derive(Default)]
pub(super) struct Pauses {
    /// The users' shards, once the demo knows its partitions.
    shards: OnceLock<KafkaMurmur2Extractor>,
    seen: Mutex<Seen>,
}

#[derive(Default)]
struct Seen {
    last: HashMap<u32, Instant>,
    /// Each long gap's shard, when it ended, and how long it was.
    long: Vec<(u32, Instant, Duration)>,
}

impl std::fmt::Debug for Pauses {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pauses")
            .field("long", &self.seen.lock().long.len())
            .finish()
    }
}

impl Pauses {
    /// The user ids' shards are their murmur2 partitions of `partitions`.
    pub(super) fn track(&self, shards: KafkaMurmur2Extractor) {
        let _ = self.shards.set(shards);
    }

    /// A record of `user` was handled now.
    pub(super) fn handled(&self, user: &str) {
        self.handled_at(user, Instant::now());
    }

    fn handled_at(&self, user: &str, now: Instant) {
        let Some(shards) = self.shards.get() else {
            return;
        };
        let shard = shards.shard_id(user).0;
        let mut seen = self.seen.lock();
        if let Some(before) = seen.last.insert(shard, now) {
            let gap = now.duration_since(before);
            if gap >= KEPT_FROM {
                seen.long.push((shard, now, gap));
            }
        }
    }

    /// The longest gap of a shard `of` that ended at or after `from` and
    /// before `until` (no bound: until now), if one was long enough to be
    /// kept.
    pub(super) fn longest(
        &self,
        from: Instant,
        until: Option<Instant>,
        of: impl Fn(u32) -> bool,
    ) -> Option<Duration> {
        self.seen
            .lock()
            .long
            .iter()
            .filter(|(shard, ended, _)| {
                of(*shard) && *ended >= from && until.is_none_or(|until| *ended < until)
            })
            .map(|(_, _, gap)| *gap)
            .max()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shards_long_gap_is_found_within_the_change_it_ended_in() {
        let pauses = Pauses::default();
        let shards = KafkaMurmur2Extractor::new(4).expect("extractor");
        // A user of another shard, whose record does not end user-1's gap.
        let other = (2..)
            .map(|n| format!("user-{n}"))
            .find(|user| shards.shard_id(user) != shards.shard_id("user-1"))
            .expect("another shard's user");
        let shards_of = {
            let shards = shards.clone();
            move |user: &str| shards.shard_id(user).0
        };
        pauses.track(shards);
        let start = Instant::now();
        let later = start + Duration::from_millis(150);
        pauses.handled_at("user-1", start);
        pauses.handled_at(&other, start + Duration::from_millis(10));
        pauses.handled_at("user-1", later);
        let any = |_| true;
        assert_eq!(
            pauses.longest(start, None, any),
            Some(Duration::from_millis(150))
        );
        let moved = shards_of("user-1");
        assert_eq!(
            pauses.longest(start, None, |shard| shard != moved),
            None,
            "none of another shard"
        );
        let after = later + Duration::from_millis(1);
        assert_eq!(pauses.longest(after, None, any), None, "none ends after");
        assert_eq!(
            pauses.longest(start, Some(later), any),
            None,
            "none ends before"
        );
    }
}
