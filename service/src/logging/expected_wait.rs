//! Waits that are normal while a cluster forms: a region that cannot reach
//! its coordinator yet (it is being elected, or its node is starting), a
//! partition whose shard is not placed yet. Each start of a node goes
//! through them, so saying them as warnings would teach operators to read
//! past warnings; only one that outlasts its bound is one.

use std::time::{Duration, Instant};

/// Where a wait is: the caller logs what [`ExpectedWait::waits`] says.
#[derive(Debug, Clone, Copy, Default)]
pub enum ExpectedWait {
    /// Not waiting.
    #[default]
    Idle,
    /// Waiting since then, said at info.
    Since(Instant),
    /// Waiting past the bound, said once as a warning: what follows is
    /// debug until the wait ends.
    Overdue(Instant),
}

/// What to say of a wait at one of its attempts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Say {
    /// The wait just began: info.
    Began,
    /// The wait outlasted its bound just now, having lasted this long: warn.
    Overdue(Duration),
    /// Said already: debug at most.
    Nothing,
}

impl ExpectedWait {
    /// An attempt failed and the wait goes on: what to say of it, given its
    /// bound.
    pub fn waits(&mut self, bound: Duration) -> Say {
        self.waits_at(Instant::now(), bound)
    }

    fn waits_at(&mut self, now: Instant, bound: Duration) -> Say {
        let (next, say) = match *self {
            ExpectedWait::Idle => (ExpectedWait::Since(now), Say::Began),
            ExpectedWait::Since(since) if now.duration_since(since) >= bound => (
                ExpectedWait::Overdue(since),
                Say::Overdue(now.duration_since(since)),
            ),
            waiting => (waiting, Say::Nothing),
        };
        *self = next;
        say
    }

    /// The wait ended: how long it lasted, if it was one.
    pub fn ended(&mut self) -> Option<Duration> {
        match std::mem::take(self) {
            ExpectedWait::Idle => None,
            ExpectedWait::Since(since) | ExpectedWait::Overdue(since) => Some(since.elapsed()),
        }
    }

    /// Whether it was said as a warning: its end is worth saying too.
    pub fn is_overdue(&self) -> bool {
        matches!(self, ExpectedWait::Overdue(_))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A wait is said once when it starts, once more when it outlasts its
    /// bound, and not at the attempts between.
    #[test]
    fn a_wait_is_info_then_one_warning_past_its_bound() {
        let bound = Duration::from_secs(10);
        let start = Instant::now();
        let mut wait = ExpectedWait::default();
        assert_eq!(wait.waits_at(start, bound), Say::Began);
        assert_eq!(
            wait.waits_at(start + Duration::from_secs(9), bound),
            Say::Nothing
        );
        assert_eq!(
            wait.waits_at(start + Duration::from_secs(11), bound),
            Say::Overdue(Duration::from_secs(11))
        );
        assert!(wait.is_overdue());
        assert_eq!(
            wait.waits_at(start + Duration::from_secs(30), bound),
            Say::Nothing
        );
        assert!(wait.ended().is_some());
        assert_eq!(
            wait.waits_at(start + Duration::from_secs(31), bound),
            Say::Began
        );
    }
}
