//! The passivation strategy of an entity type, with Akka's names and
//! defaults: idle timeout, an active-entity limit with a replacement policy,
//! both, or none.

use super::{PolicyKey, ReplacementPolicy, ReplacementSettings};
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// A strategy that cannot work: the field (as the config names it) and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid setting `{field}`: {reason}")]
pub struct StrategyError {
    pub field: &'static str,
    pub reason: String,
}

/// How a region passivates its entities.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PassivationStrategy {
    /// Passivate entities that received no message for this long; `None`
    /// disables it. Akka's default strategy: 120 s.
    pub idle_timeout: Option<Duration>,
    /// How often idle entities are looked for; `None` means half the timeout.
    pub idle_interval: Option<Duration>,
    /// The most active entities per region, divided evenly among the
    /// region's active shards. Without a replacement policy it is ignored,
    /// as in Akka. A replacement policy without it is bounded by the
    /// node's memory budget alone (and by nothing on a node without one).
    pub active_entity_limit: Option<usize>,
    /// Which entities to passivate once a shard reaches its share of the
    /// limit.
    pub replacement: Option<ReplacementSettings>,
}

impl Default for PassivationStrategy {
    /// Akka's `default-idle-strategy`: idle entities stop after two minutes.
    fn default() -> Self {
        Self::idle(Duration::from_secs(120))
    }
}

impl PassivationStrategy {
    /// No automatic passivation (Akka's `none`/`off`); explicit passivation
    /// still works.
    pub fn none() -> Self {
        Self {
            idle_timeout: None,
            idle_interval: None,
            active_entity_limit: None,
            replacement: None,
        }
    }

    /// Idle passivation after `timeout`, checked every half of it.
    pub fn idle(timeout: Duration) -> Self {
        Self {
            idle_timeout: Some(timeout),
            ..Self::none()
        }
    }

    /// An active-entity limit per region with a replacement policy, and no
    /// idle timeout (set `idle_timeout` as well to combine them).
    pub fn limit(active_entity_limit: usize, replacement: ReplacementSettings) -> Self {
        Self {
            active_entity_limit: Some(active_entity_limit),
            replacement: Some(replacement),
            ..Self::none()
        }
    }

    /// Akka's `default-strategy`: at most 100,000 active entities per region,
    /// chosen by W-TinyLFU (an LRU admission window sized by hill climbing,
    /// a frequency-sketch filter, a segmented-LRU main area); no idle timeout.
    pub fn default_strategy() -> Self {
        Self::limit(100_000, ReplacementSettings::w_tinylfu(true))
    }

    /// The idle check: every `interval`, entities untouched for at least
    /// `ticks` whole intervals are passivated, so an entity goes between
    /// `timeout` and `timeout + interval` after its last message (as with
    /// Akka's periodic check) without reading the clock per message.
    pub fn idle_check(&self) -> Option<IdleCheck> {
        let timeout = self.idle_timeout?;
        let interval = self.idle_interval.unwrap_or(timeout / 2);
        let ticks = timeout.as_nanos().div_ceil(interval.as_nanos().max(1)) as u64;
        Some(IdleCheck {
            interval,
            ticks: ticks.max(1),
        })
    }

    /// A shard's policy for its share of the limit, when the strategy is
    /// limit-based.
    pub fn policy<K: PolicyKey>(
        &self,
        shard_limit: usize,
    ) -> Option<Box<dyn ReplacementPolicy<K>>> {
        Some(self.replacement.as_ref()?.build(shard_limit))
    }

    /// Each shard's share of the region's limit; `None` without a policy.
    pub fn shard_limit(&self, active_shards: usize) -> Option<usize> {
        self.replacement.as_ref()?;
        self.active_entity_limit
            .map(|limit| limit / active_shards.max(1))
    }

    /// Checks the strategy.
    ///
    /// # Errors
    /// The field that cannot work, and why.
    pub fn validate(&self) -> Result<(), StrategyError> {
        let err = |field, reason: &str| {
            Err(StrategyError {
                field,
                reason: reason.to_string(),
            })
        };
        if self.idle_timeout.is_some_and(|t| t.is_zero()) {
            return err(
                "passivation.idle_timeout",
                "must be longer than zero (or none)",
            );
        }
        if self.idle_interval.is_some_and(|t| t.is_zero()) {
            return err(
                "passivation.idle_interval",
                "must be longer than zero (or default)",
            );
        }
        if let Some(replacement) = &self.replacement {
            replacement.validate().map_err(|e| StrategyError {
                field: "passivation.replacement",
                reason: e.to_string(),
            })?;
        }
        Ok(())
    }
}

/// The periodic idle check derived from the strategy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IdleCheck {
    pub interval: Duration,
    pub ticks: u64,
}

/// Why an entity was passivated (the `reason` label of the metric).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PassivationReason {
    /// No message for the idle timeout.
    Idle,
    /// The active-entity limit was reached and the policy chose it.
    Limit,
    /// The entity asked for it.
    Explicit,
    /// Its shard was handed off.
    HandOff,
}

impl PassivationReason {
    /// The metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Idle => "idle",
            Self::Limit => "limit",
            Self::Explicit => "explicit",
            Self::HandOff => "handoff",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_is_akkas_idle_strategy() {
        let s = PassivationStrategy::default();
        assert_eq!(s.idle_timeout, Some(Duration::from_secs(120)));
        let check = s.idle_check().unwrap();
        assert_eq!(check.interval, Duration::from_secs(60));
        assert_eq!(check.ticks, 2);
        assert_eq!(s.shard_limit(3), None);
        assert!(PassivationStrategy::none().idle_check().is_none());
        let odd = PassivationStrategy {
            idle_interval: Some(Duration::from_secs(3)),
            ..PassivationStrategy::idle(Duration::from_secs(10))
        };
        assert_eq!(odd.idle_check().unwrap().ticks, 4);
        assert!(PassivationStrategy::idle(Duration::ZERO)
            .validate()
            .is_err());
    }

    #[test]
    fn default_strategy_divides_the_limit() {
        let s = PassivationStrategy::default_strategy();
        assert_eq!(s.active_entity_limit, Some(100_000));
        assert!(s.idle_timeout.is_none());
        assert!(s.validate().is_ok());
        assert_eq!(s.shard_limit(3), Some(33_333));
        assert!(s.policy::<u32>(10).is_some());
        // Without a limit the node's memory budget bounds it: no share
        // of a count to give the shards.
        let without_limit = PassivationStrategy {
            active_entity_limit: None,
            ..s
        };
        assert!(without_limit.validate().is_ok());
        assert_eq!(without_limit.shard_limit(3), None);
    }
}
