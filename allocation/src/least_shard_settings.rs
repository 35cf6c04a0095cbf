//! Settings of the least-shard allocation strategy.

use serde::{Deserialize, Serialize};
use std::fmt;

/// Tuning of [`LeastShardAllocationStrategy`](crate::LeastShardAllocationStrategy).
///
/// Names follow Akka's `akka.cluster.sharding.least-shard-allocation-strategy`.
/// The default is the Akka 2.6.10 algorithm with the limits Akka recommends
/// (`rebalance_absolute_limit` 20, `rebalance_relative_limit` 0.1): it
/// reaches balance in one or two rounds, where the original algorithm moves
/// one shard per round and leaves a restarted node nearly empty for
/// minutes. (Akka keeps the original algorithm as its default only for
/// compatibility.) `rebalance_absolute_limit` 0 selects the original
/// algorithm.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LeastShardSettings {
    /// Most shards moved in one rebalance round. Above 0 selects the newer
    /// algorithm; the lower of this and `rebalance_relative_limit` applies.
    pub rebalance_absolute_limit: usize,
    /// Most shards moved in one round, as a fraction of all allocated shards
    /// (newer algorithm only). At least one shard may always move.
    pub rebalance_relative_limit: f64,
    /// Original algorithm only: a rebalance starts when the busiest region
    /// has more than this many shards over the least busy one; it is also
    /// the most shards started per round. 1 gives the best balance.
    pub rebalance_threshold: usize,
    /// Original algorithm only: the most hand-offs running at once.
    pub max_simultaneous_rebalance: usize,
}

impl Default for LeastShardSettings {
    fn default() -> Self {
        Self {
            rebalance_absolute_limit: 20,
            rebalance_relative_limit: 0.1,
            rebalance_threshold: 1,
            max_simultaneous_rebalance: 3,
        }
    }
}

impl LeastShardSettings {
    /// Whether the Akka 2.6.10 algorithm (absolute and relative limits) is
    /// selected rather than the original threshold algorithm.
    pub fn uses_limits(&self) -> bool {
        self.rebalance_absolute_limit > 0
    }

    /// Checks the settings the way config loading should, before a
    /// coordinator starts with them.
    ///
    /// # Errors
    /// A [`SettingsError`] naming the first bad field: a relative limit
    /// outside (0, 1] (or NaN), a threshold of 0 (the original algorithm
    /// would then never move a shard), or a max simultaneous rebalance of 0
    /// (no rebalance could ever start).
    pub fn validate(&self) -> Result<(), SettingsError> {
        let relative = self.rebalance_relative_limit;
        if !(relative > 0.0 && relative <= 1.0) {
            return Err(SettingsError {
                field: "rebalance_relative_limit",
                reason: "must be above 0 and at most 1",
            });
        }
        if self.rebalance_threshold == 0 {
            return Err(SettingsError {
                field: "rebalance_threshold",
                reason: "must be at least 1",
            });
        }
        if self.max_simultaneous_rebalance == 0 {
            return Err(SettingsError {
                field: "max_simultaneous_rebalance",
                reason: "must be at least 1",
            });
        }
        Ok(())
    }
}

/// A bad allocation-strategy setting. Carries the field name so a bad config
/// stops startup with a message that points at the line to fix.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SettingsError {
    /// The offending field, as named in [`LeastShardSettings`].
    pub field: &'static str,
    /// What the field must satisfy.
    pub reason: &'static str,
}

impl fmt::Display for SettingsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.reason)
    }
}

impl std::error::Error for SettingsError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_akkas_recommended_algorithm_and_valid() {
        let settings = LeastShardSettings::default();
        assert_eq!(settings.rebalance_absolute_limit, 20);
        assert_eq!(settings.rebalance_relative_limit, 0.1);
        assert_eq!(settings.rebalance_threshold, 1);
        assert_eq!(settings.max_simultaneous_rebalance, 3);
        assert!(settings.uses_limits());
        assert_eq!(settings.validate(), Ok(()));
    }

    #[test]
    fn relative_limit_must_be_in_zero_to_one() {
        for bad in [0.0, -0.5, 1.01, f64::NAN, f64::INFINITY] {
            let settings = LeastShardSettings {
                rebalance_relative_limit: bad,
                ..LeastShardSettings::default()
            };
            let err = settings.validate().unwrap_err();
            assert_eq!(err.field, "rebalance_relative_limit", "value {bad}");
        }
        let full = LeastShardSettings {
            rebalance_relative_limit: 1.0,
            ..LeastShardSettings::default()
        };
        assert_eq!(full.validate(), Ok(()));
    }

    #[test]
    fn zero_threshold_and_zero_simultaneous_are_refused() {
        let no_threshold = LeastShardSettings {
            rebalance_threshold: 0,
            ..LeastShardSettings::default()
        };
        assert_eq!(
            no_threshold.validate().unwrap_err().field,
            "rebalance_threshold"
        );
        let no_simultaneous = LeastShardSettings {
            max_simultaneous_rebalance: 0,
            ..LeastShardSettings::default()
        };
        let err = no_simultaneous.validate().unwrap_err();
        assert_eq!(
            err.to_string(),
            "max_simultaneous_rebalance: must be at least 1"
        );
    }
}
