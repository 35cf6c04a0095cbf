//! The `[sharding.passivation]` section: a strategy by name plus the few
//! numbers an operator tunes, mapped onto [`PassivationStrategy`]. Deeper
//! tuning of a replacement policy stays in code ([`ReplacementSettings`]);
//! the presets cover what Akka's reference.conf names.

use colo_passivation::{PassivationStrategy, ReplacementSettings};
use serde::{Deserialize, Serialize};
use std::fmt;
use std::time::Duration;

/// Akka's `default-idle-strategy` timeout, used when `strategy = "idle"`
/// gives none.
const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(120);
/// Akka's `default-strategy` limit, used when a limit strategy gives none.
const DEFAULT_ACTIVE_ENTITY_LIMIT: usize = 100_000;

/// `[sharding.passivation]`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PassivationSection {
    /// `idle` (the default), `none` (or `off`), or a replacement preset
    /// such as `lru`, `default-strategy` (Akka's: W-TinyLFU) or `default`
    /// (colo's: the `next-use` preset).
    pub strategy: StrategyName,
    /// Unset: 120 s for `idle`, no idle timeout for the others; set with a
    /// replacement preset, both apply.
    #[serde(with = "humantime_serde", skip_serializing_if = "Option::is_none")]
    pub idle_timeout: Option<Duration>,
    /// How often idle entities are looked for; unset: half the timeout.
    #[serde(with = "humantime_serde", skip_serializing_if = "Option::is_none")]
    pub idle_interval: Option<Duration>,
    /// The most active entities per region, for a replacement preset;
    /// unset: 100000.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub active_entity_limit: Option<usize>,
    /// The memory the node's active entities may take, for a replacement
    /// preset: shared by every entity type the node runs, each shard
    /// keeping within an even share. Without `active_entity_limit` it is
    /// the only bound; with it, both hold.
    #[serde(
        deserialize_with = "size::deserialize",
        skip_serializing_if = "Option::is_none"
    )]
    pub memory_budget: Option<bytesize::ByteSize>,
}

/// A size as an operator writes it: "512 MiB", "2GiB", "500 kB", or a
/// number of bytes.
mod size {
    use bytesize::ByteSize;
    use serde::{Deserialize, Deserializer};

    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Written {
        Bytes(u64),
        Text(String),
        Other(serde::de::IgnoredAny),
    }

    const HOW: &str = "write it as \"512 MiB\", \"2GiB\", \"500 kB\" or a number of bytes";

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<Option<ByteSize>, D::Error> {
        let size = match Written::deserialize(deserializer)? {
            Written::Bytes(bytes) => ByteSize::b(bytes),
            Written::Text(text) => text
                .trim()
                .parse()
                .map_err(|_| serde::de::Error::custom(format!("{text:?} is not a size: {HOW}")))?,
            Written::Other(_) => {
                return Err(serde::de::Error::custom(format!("not a size: {HOW}")))
            }
        };
        Ok(Some(size))
    }
}

/// A passivation strategy's name, checked when the config is read so the
/// error names the field and the mapping to a strategy cannot fail later.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct StrategyName {
    name: String,
    kind: Kind,
}

#[derive(Debug, Clone, PartialEq)]
enum Kind {
    Idle,
    None,
    Limit(ReplacementSettings),
}

impl StrategyName {
    /// The strategy as written.
    pub fn as_str(&self) -> &str {
        &self.name
    }
}

impl Default for StrategyName {
    /// Akka's default: `idle`.
    fn default() -> Self {
        Self {
            name: "idle".to_string(),
            kind: Kind::Idle,
        }
    }
}

impl TryFrom<String> for StrategyName {
    type Error = String;

    fn try_from(name: String) -> Result<Self, String> {
        let kind = match name.as_str() {
            "idle" => Kind::Idle,
            "none" | "off" => Kind::None,
            preset => Kind::Limit(ReplacementSettings::preset(preset).ok_or_else(|| {
                format!(
                    "unknown passivation strategy `{preset}`, expected idle, none or one of {}",
                    ReplacementSettings::PRESETS.join(", ")
                )
            })?),
        };
        Ok(Self { name, kind })
    }
}

impl From<StrategyName> for String {
    fn from(name: StrategyName) -> Self {
        name.name
    }
}

impl fmt::Display for StrategyName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name)
    }
}

impl PassivationSection {
    /// The node's memory budget in bytes, if it has one.
    pub fn memory_budget_bytes(&self) -> Option<u64> {
        self.memory_budget.map(|b| b.as_u64())
    }

    /// The strategy this section describes. Fields that do not apply to the
    /// strategy are ignored here and refused when the config is loaded.
    pub fn strategy(&self) -> PassivationStrategy {
        let mut strategy = match &self.strategy.kind {
            Kind::None => return PassivationStrategy::none(),
            Kind::Idle => {
                PassivationStrategy::idle(self.idle_timeout.unwrap_or(DEFAULT_IDLE_TIMEOUT))
            }
            Kind::Limit(replacement) => PassivationStrategy {
                idle_timeout: self.idle_timeout,
                // A memory budget is the bound instead of the default
                // count, unless a count is given too.
                active_entity_limit: match self.memory_budget {
                    Some(_) => self.active_entity_limit,
                    None => Some(
                        self.active_entity_limit
                            .unwrap_or(DEFAULT_ACTIVE_ENTITY_LIMIT),
                    ),
                },
                ..PassivationStrategy::limit(0, replacement.clone())
            },
        };
        strategy.idle_interval = self.idle_interval;
        strategy
    }

    /// Refuses fields that the chosen strategy would silently ignore.
    ///
    /// # Errors
    /// The field (under `passivation.`) and why.
    pub(super) fn check(&self) -> Result<(), (&'static str, String)> {
        let limit_needs_preset = || {
            (
                "passivation.active_entity_limit",
                format!(
                    "strategy `{}` has no limit; choose a replacement preset such as `default`",
                    self.strategy
                ),
            )
        };
        if let Some(budget) = self.memory_budget {
            if !matches!(self.strategy.kind, Kind::Limit(_)) {
                return Err((
                    "passivation.memory_budget",
                    format!(
                        "strategy `{}` has no replacement policy to choose whom to passivate; choose a replacement preset such as `default`",
                        self.strategy
                    ),
                ));
            }
            if budget.as_u64() == 0 {
                return Err((
                    "passivation.memory_budget",
                    "must be more than zero bytes".to_string(),
                ));
            }
        }
        match self.strategy.kind {
            Kind::None => {
                for (field, set) in [
                    ("passivation.idle_timeout", self.idle_timeout.is_some()),
                    ("passivation.idle_interval", self.idle_interval.is_some()),
                ] {
                    if set {
                        return Err((field, "strategy `none` passivates nothing".to_string()));
                    }
                }
                if self.active_entity_limit.is_some() {
                    return Err(limit_needs_preset());
                }
            }
            Kind::Idle if self.active_entity_limit.is_some() => return Err(limit_needs_preset()),
            Kind::Idle => {}
            Kind::Limit(_) => {
                if self.idle_interval.is_some() && self.idle_timeout.is_none() {
                    return Err((
                        "passivation.idle_interval",
                        "needs an idle_timeout".to_string(),
                    ));
                }
                if self.active_entity_limit == Some(0) {
                    return Err((
                        "passivation.active_entity_limit",
                        "must be at least 1".to_string(),
                    ));
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use colo_passivation::ReplacementSettings;

    fn section(strategy: &str) -> PassivationSection {
        PassivationSection {
            strategy: StrategyName::try_from(strategy.to_string()).unwrap(),
            ..PassivationSection::default()
        }
    }

    #[test]
    fn names_map_onto_akkas_strategies() {
        assert_eq!(
            PassivationSection::default().strategy(),
            PassivationStrategy::default()
        );
        assert_eq!(section("none").strategy(), PassivationStrategy::none());
        assert_eq!(section("off").strategy(), PassivationStrategy::none());
        assert_eq!(
            section("default-strategy").strategy(),
            PassivationStrategy::default_strategy()
        );
        assert_eq!(
            section("default").strategy(),
            PassivationStrategy::limit(100_000, ReplacementSettings::default())
        );
        let lru = PassivationSection {
            idle_timeout: Some(Duration::from_secs(30)),
            active_entity_limit: Some(500),
            ..section("lru")
        }
        .strategy();
        assert_eq!(lru.active_entity_limit, Some(500));
        assert_eq!(lru.idle_timeout, Some(Duration::from_secs(30)));
        assert_eq!(lru.replacement, ReplacementSettings::preset("lru"));
        for preset in ReplacementSettings::PRESETS {
            assert!(section(preset).strategy().validate().is_ok(), "{preset}");
        }
        let err = StrategyName::try_from("arc".to_string()).unwrap_err();
        assert!(err.contains("`arc`") && err.contains("lru"), "{err}");
    }

    #[test]
    fn a_memory_budget_bounds_a_preset_instead_of_the_default_count() {
        let budget = |text: &str| -> PassivationSection {
            toml::from_str(&format!("strategy = \"lru\"\nmemory_budget = {text}")).expect("parses")
        };
        for (written, bytes) in [
            ("\"64 MiB\"", 64 << 20),
            ("\"2GiB\"", 2 << 30),
            ("\"500 kB\"", 500_000),
            ("1048576", 1 << 20),
        ] {
            let section = budget(written);
            assert_eq!(section.memory_budget_bytes(), Some(bytes), "{written}");
            assert!(section.check().is_ok());
            let strategy = section.strategy();
            assert_eq!(strategy.active_entity_limit, None, "the budget alone");
            assert!(strategy.validate().is_ok());
        }
        let both = PassivationSection {
            active_entity_limit: Some(500),
            ..budget("\"1 MiB\"")
        };
        assert_eq!(both.strategy().active_entity_limit, Some(500));
        let idle = PassivationSection {
            strategy: StrategyName::default(),
            ..budget("\"1 MiB\"")
        };
        let (field, reason) = idle.check().unwrap_err();
        assert_eq!(field, "passivation.memory_budget");
        assert!(reason.contains("no replacement policy"), "{reason}");
        let (field, _) = budget("0").check().unwrap_err();
        assert_eq!(field, "passivation.memory_budget");
        for unreadable in ["\"lots\"", "-5", "1.5"] {
            let read: Result<PassivationSection, _> =
                toml::from_str(&format!("strategy = \"lru\"\nmemory_budget = {unreadable}"));
            let error = read.unwrap_err().to_string();
            assert!(error.contains("not a size: write it as"), "{error}");
        }
    }

    #[test]
    fn fields_the_strategy_ignores_are_refused() {
        let limit_without_preset = PassivationSection {
            active_entity_limit: Some(10),
            ..section("idle")
        };
        assert_eq!(
            limit_without_preset.check().unwrap_err().0,
            "passivation.active_entity_limit"
        );
        let idle_with_none = PassivationSection {
            idle_timeout: Some(Duration::from_secs(1)),
            ..section("none")
        };
        assert_eq!(
            idle_with_none.check().unwrap_err().0,
            "passivation.idle_timeout"
        );
        let interval_alone = PassivationSection {
            idle_interval: Some(Duration::from_secs(1)),
            ..section("lru")
        };
        assert_eq!(
            interval_alone.check().unwrap_err().0,
            "passivation.idle_interval"
        );
        assert!(section("w-tinylfu").check().is_ok());
    }
}
