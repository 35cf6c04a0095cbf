//! The passivation strategy of an entity type, with Akka's names and
//! defaults: idle timeout, an active-entity limit with a replacement policy,
//! both, or none.

use super::ReplacementPolicy;
use crate::entity::EntityId;
use serde::{Deserialize, Serialize};
use std::time::Duration;

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
    /// as in Akka.
    pub active_entity_limit: Option<usize>,
}

impl Default for PassivationStrategy {
    /// Akka's `default-idle-strategy`: idle entities stop after two minutes.
    fn default() -> Self {
        Self {
            idle_timeout: Some(Duration::from_secs(120)),
            idle_interval: None,
            active_entity_limit: None,
        }
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
        }
    }

    /// Idle passivation after `timeout`, checked every half of it.
    pub fn idle(timeout: Duration) -> Self {
        Self {
            idle_timeout: Some(timeout),
            idle_interval: None,
            active_entity_limit: None,
        }
    }

    /// The idle check: every `interval`, entities untouched for at least
    /// `ticks` whole intervals are passivated, so an entity goes between
    /// `timeout` and `timeout + interval` after its last message (as with
    /// Akka's periodic check) without reading the clock per message.
    pub(crate) fn idle_check(&self) -> Option<IdleCheck> {
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
    pub(crate) fn policy(
        &self,
        _shard_limit: usize,
    ) -> Option<Box<dyn ReplacementPolicy<EntityId>>> {
        None
    }

    /// Each shard's share of the region's limit.
    pub(crate) fn shard_limit(&self, active_shards: usize) -> Option<usize> {
        self.active_entity_limit
            .map(|limit| limit / active_shards.max(1))
    }

    /// Checks the strategy.
    ///
    /// # Errors
    /// The field that cannot work, and why.
    pub fn validate(&self) -> Result<(), crate::settings::SettingsError> {
        let err = |field, reason: &str| {
            Err(crate::settings::SettingsError {
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
        Ok(())
    }
}

/// The periodic idle check derived from the strategy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct IdleCheck {
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
        assert!(PassivationStrategy::none().idle_check().is_none());
        let odd = PassivationStrategy {
            idle_timeout: Some(Duration::from_secs(10)),
            idle_interval: Some(Duration::from_secs(3)),
            active_entity_limit: None,
        };
        assert_eq!(odd.idle_check().unwrap().ticks, 4);
        assert!(PassivationStrategy::idle(Duration::ZERO)
            .validate()
            .is_err());
    }
}
