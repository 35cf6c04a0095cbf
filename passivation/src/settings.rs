//! The replacement policy of a limit-based passivation strategy, with the
//! names and defaults of the passivation section of Akka's reference.conf,
//! plus named presets for the simulator.
//!
//! Enums are externally tagged and nothing is flattened, so the settings
//! round-trip through postcard (our wire codec) as well as through
//! self-describing formats; names are kebab-case like Akka's keys.

use super::frequency_sketch::{COUNTER_BITS, MAX_DEPTH};
use serde::{Deserialize, Serialize};

/// Which entities to passivate once a shard reaches its share of the
/// active-entity limit (Akka's `replacement` and `admission` sections).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ReplacementSettings {
    /// Least recently used, optionally segmented.
    LeastRecentlyUsed(LeastRecentlyUsedSettings),
    /// Most recently used.
    MostRecentlyUsed,
    /// Least frequently used, optionally with dynamic aging.
    LeastFrequentlyUsed(LeastFrequentlyUsedSettings),
    /// An admission window and filter in front of a main area
    /// (Window-TinyLFU when the window is LRU and the filter a sketch).
    Composite(Box<CompositeSettings>),
    /// Low inter-reference recency set (LIRS).
    LowInterReferenceRecencySet(LirsSettings),
    /// Expert policies run as virtual caches; the shard follows the one
    /// with the most recent hits.
    Ensemble(EnsembleSettings),
    /// Passivates the entity expected last, forecasting each entity's
    /// next message from its last two intervals.
    NextUse(NextUseSettings),
}

/// The settings of predicted next use (not an Akka policy, see
/// [`PredictedNextUse`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "kebab-case")]
pub struct NextUseSettings {
    /// Passivated entities remembered, as a multiple of the limit.
    /// Default 8, as for LIRS: a shorter memory cannot see the intervals
    /// of a loop over several times the limit.
    pub history_multiplier: f64,
    /// Intervals are capped at this multiple of the limit. Default 16:
    /// an entity seen less often is passivated before one seen within it
    /// anyway, and the cap bounds the forecast ring.
    pub interval_cap_multiplier: f64,
}

impl Default for NextUseSettings {
    fn default() -> Self {
        Self {
            history_multiplier: 8.0,
            interval_cap_multiplier: 16.0,
        }
    }
}

/// The settings of an ensemble (not an Akka policy): experts that run
/// as virtual caches of the whole limit, and the shard follows the one
/// with the most recent virtual hits (see [`Ensemble`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "kebab-case")]
pub struct EnsembleSettings {
    /// The experts, at least one, none itself an ensemble; the first leads
    /// until another one scores more. Default: `lirs-tinylfu`, then
    /// `w-tinylfu-hc`.
    pub experts: Vec<ReplacementSettings>,
    /// Hits are halved every `period_multiplier x limit` messages. Default
    /// 10, the frequency sketch's reset period.
    pub period_multiplier: f64,
    /// Another expert leads once its hits exceed the leader's by more than
    /// `margin_multiplier x limit`. Default 1: moving the active set over
    /// to a new leader costs up to `limit` misses.
    pub margin_multiplier: f64,
}

impl Default for EnsembleSettings {
    fn default() -> Self {
        Self {
            experts: vec![
                ReplacementSettings::LowInterReferenceRecencySet(
                    ReplacementSettings::lirs_tinylfu_settings(),
                ),
                ReplacementSettings::w_tinylfu(true),
            ],
            period_multiplier: 10.0,
            margin_multiplier: 1.0,
        }
    }
}

impl EnsembleSettings {
    /// The `follow-best` preset: `next-use`, `w-tinylfu-hc` and `lru`,
    /// the shard following whichever had more of the recent messages
    /// active. Between them they cover loops and scans (next-use),
    /// long-term frequency (W-TinyLFU) and popularity that shifts (LRU);
    /// PASSIVATION.md has how it was tuned and what it gives.
    pub fn follow_best() -> Self {
        Self {
            experts: vec![
                ReplacementSettings::NextUse(NextUseSettings::default()),
                ReplacementSettings::w_tinylfu(true),
                ReplacementSettings::lru(),
            ],
            period_multiplier: 40.0,
            margin_multiplier: 0.5,
        }
    }
}

/// The settings of LIRS (not an Akka policy).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "kebab-case")]
pub struct LirsSettings {
    /// Share of the limit for HIR entities (at least one). Default 0.01.
    pub hir_proportion: f64,
    /// Passivated HIR entities remembered, as a multiple of the limit.
    /// Default 8 (shards' limits are small: a short history cannot see
    /// the reuse distances LIRS ranks by).
    pub history_multiplier: f64,
    /// Smallest HIR share the optimizer may choose. Default 0.01.
    pub minimum_proportion: f64,
    /// Largest HIR share the optimizer may choose. Default 1.0.
    pub maximum_proportion: f64,
    /// Adaptive sizing of the HIR share (hill climbing that also turns at
    /// a bound); `None` keeps it fixed. Default on.
    pub optimizer: Option<HillClimbingSettings>,
    /// Size the HIR share from ghost hits, as ARC does, instead of with
    /// the optimizer (which is then ignored). Default off.
    pub ghost_sizing: bool,
    /// TinyLFU admission of new entities: one not remembered in the LIRS
    /// stack that would displace the oldest active HIR entity is rejected
    /// (passivated after its message, remembered as HIR) if this sketch
    /// estimates it strictly less frequent. It acts only with ghost
    /// sizing, and only while ghost hits of HIR entities that new ones
    /// displaced outnumber returns of rejected ones (bounded by the
    /// limit). `None` (the default): no filter.
    pub frequency_filter: Option<FrequencySketchSettings>,
}

impl Default for LirsSettings {
    fn default() -> Self {
        Self {
            hir_proportion: 0.01,
            history_multiplier: 8.0,
            minimum_proportion: 0.01,
            maximum_proportion: 1.0,
            optimizer: Some(HillClimbingSettings::default()),
            ghost_sizing: false,
            frequency_filter: None,
        }
    }
}

/// Akka's `least-recently-used` section.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "kebab-case")]
pub struct LeastRecentlyUsedSettings {
    /// Segmented LRU levels; `None` is plain LRU (Akka: `levels = none`).
    pub segmented: Option<SegmentedSettings>,
}

/// Akka's `least-recently-used.segmented` section.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct SegmentedSettings {
    /// Number of levels.
    pub levels: usize,
    /// Fractions of the limit per level, lowest first; empty divides the
    /// limit evenly among the levels.
    #[serde(default)]
    pub proportions: Vec<f64>,
    /// Truncate every level's share, as Akka 2.6.18 did, instead of giving
    /// level 0 what the upper levels leave (Akka's current rounding, the
    /// default). The levels may then add up to less than the limit; Akka's
    /// published SLRU/S4LRU simulator figures were made this way.
    #[serde(default)]
    pub truncate_levels: bool,
}

impl SegmentedSettings {
    /// The proportions to build with: the configured ones, or even ones.
    pub fn effective_proportions(&self) -> Vec<f64> {
        if self.proportions.is_empty() {
            let levels = self.levels.max(1);
            vec![1.0 / levels as f64; levels]
        } else {
            self.proportions.clone()
        }
    }
}

/// Akka's `least-frequently-used` section.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "kebab-case")]
pub struct LeastFrequentlyUsedSettings {
    /// Age frequencies as entities are passivated (LFU-DA). Default off.
    pub dynamic_aging: bool,
}

/// A composite strategy (Akka's `admission` section with the main
/// `replacement`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct CompositeSettings {
    /// Where new entities enter; `None` admits them straight to the main
    /// area through the filter (Akka: window `policy = none`).
    pub window: Option<AdmissionWindowSettings>,
    /// Who may enter the main area; `None` always admits (Akka:
    /// `filter = none`).
    pub filter: Option<FrequencySketchSettings>,
    /// The main area's policy (not itself composite).
    pub main: ReplacementSettings,
}

/// Akka's `admission.window` section.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "kebab-case")]
pub struct AdmissionWindowSettings {
    /// The window's own policy (not itself composite). Default LRU.
    pub policy: ReplacementSettings,
    /// Initial share of the limit. Default 0.01.
    pub proportion: f64,
    /// Smallest share the optimizer may choose. Default 0.01.
    pub minimum_proportion: f64,
    /// Largest share the optimizer may choose. Default 1.0.
    pub maximum_proportion: f64,
    /// Adaptive sizing; `None` keeps the initial proportion (Akka:
    /// `optimizer = off`, the default).
    pub optimizer: Option<HillClimbingSettings>,
}

impl Default for AdmissionWindowSettings {
    fn default() -> Self {
        Self {
            policy: ReplacementSettings::lru(),
            proportion: 0.01,
            minimum_proportion: 0.01,
            maximum_proportion: 1.0,
            optimizer: None,
        }
    }
}

/// Akka's `admission.window.hill-climbing` section.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "kebab-case")]
pub struct HillClimbingSettings {
    /// Sample every `adjust_multiplier x limit` accesses. Default 10.
    pub adjust_multiplier: f64,
    /// The first step (and the step after a restart). Default 0.0625.
    pub initial_step: f64,
    /// A change in active rate that restarts the climb. Default 0.05.
    pub restart_threshold: f64,
    /// Decay of the step per sample. Default 0.98.
    pub step_decay: f64,
}

impl Default for HillClimbingSettings {
    fn default() -> Self {
        Self {
            adjust_multiplier: 10.0,
            initial_step: 0.0625,
            restart_threshold: 0.05,
            step_decay: 0.98,
        }
    }
}

/// Akka's `admission.frequency-sketch` section.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "kebab-case")]
pub struct FrequencySketchSettings {
    /// Rows (hash functions), 1 to 8. Default 4.
    pub depth: usize,
    /// Bits per counter: 2, 4, 8, 16, 32 or 64. Default 4.
    pub counter_bits: u32,
    /// Counters per row = multiplier x limit (rounded up to a power of
    /// two); a power of two. Default 4.
    pub width_multiplier: usize,
    /// Halve the counters after `reset_multiplier x limit` increments.
    /// Default 10.
    pub reset_multiplier: f64,
}

impl Default for FrequencySketchSettings {
    fn default() -> Self {
        Self {
            depth: 4,
            counter_bits: 4,
            width_multiplier: 4,
            reset_multiplier: 10.0,
        }
    }
}

/// A replacement setting that cannot work.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("passivation.{field}: {reason}")]
pub struct PassivationSettingsError {
    /// The setting's path, e.g. `window.proportion`.
    pub field: String,
    /// Why the value is refused.
    pub reason: String,
}

/// False for NaN too, unlike `!(x <= 0.0)`.
fn above_zero(x: f64) -> bool {
    x > 0.0
}

fn refuse(field: &str, reason: &str) -> Result<(), PassivationSettingsError> {
    Err(PassivationSettingsError {
        field: field.to_string(),
        reason: reason.to_string(),
    })
}

impl Default for ReplacementSettings {
    /// colo's default: Akka's default strategy, W-TinyLFU with hill
    /// climbing. The default must never be more than 1 point below the
    /// better of LRU and W-TinyLFU with hill climbing on any row of the
    /// trace corpus; no other policy of colo's meets that (PASSIVATION.md).
    fn default() -> Self {
        Self::w_tinylfu(true)
    }
}

impl ReplacementSettings {
    /// The preset names [`ReplacementSettings::preset`] knows.
    pub const PRESETS: [&'static str; 16] = [
        "lru",
        "slru",
        "s4lru",
        "mru",
        "lfu",
        "lfuda",
        "w-tinylfu",
        "w-tinylfu-hc",
        "default",
        "default-strategy",
        "lirs",
        "lirs-arc",
        "lirs-tinylfu",
        "ensemble",
        "next-use",
        "follow-best",
    ];

    /// A named preset: `lru`, `slru` (2 levels, [0.2, 0.8]), `s4lru` (4
    /// even levels), `mru`, `lfu`, `lfuda` (dynamic aging), `w-tinylfu`
    /// (LRU window 1%, frequency sketch, SLRU main), `w-tinylfu-hc` (the
    /// same with hill climbing), `default-strategy` (Akka's default
    /// strategy, equal to `w-tinylfu-hc`), `default` (colo's default,
    /// Akka's default strategy too, see [`ReplacementSettings::default`])
    /// and `lirs` (not
    /// an Akka policy: LIRS with an adaptive HIR share, see
    /// [`LirsSettings`]) and `lirs-arc` (the same, its HIR share sized
    /// from ghost hits as ARC does instead of by hill climbing, see
    /// [`LirsSettings::ghost_sizing`]) and `lirs-tinylfu` (`lirs-arc`
    /// with a TinyLFU filter on new entities, see
    /// [`LirsSettings::frequency_filter`]) and `ensemble` (not an Akka
    /// policy: `lirs-tinylfu` and `w-tinylfu-hc` as virtual caches, the
    /// shard following the one with more recent hits, see
    /// [`EnsembleSettings`]) and `next-use` (not an Akka policy: the
    /// entity expected last is passivated, see [`NextUseSettings`]) and
    /// `follow-best` (not an Akka policy: the shard follows whichever of
    /// `next-use`, `w-tinylfu-hc` and `lru` has had more recent hits, see
    /// [`EnsembleSettings::follow_best`]).
    ///
    /// `slru` and `s4lru` truncate every level's share
    /// ([`SegmentedSettings::truncate_levels`]) so that they reproduce
    /// Akka's published simulator figures, which predate Akka's current
    /// rounding; the composites' SLRU main area uses the current rounding,
    /// as Akka's composite strategy always has.
    pub fn preset(name: &str) -> Option<ReplacementSettings> {
        Some(match name {
            "lru" => Self::lru(),
            "slru" => Self::slru(true),
            "s4lru" => Self::LeastRecentlyUsed(LeastRecentlyUsedSettings {
                segmented: Some(SegmentedSettings {
                    levels: 4,
                    proportions: Vec::new(),
                    truncate_levels: true,
                }),
            }),
            "mru" => Self::MostRecentlyUsed,
            "lfu" => Self::LeastFrequentlyUsed(LeastFrequentlyUsedSettings {
                dynamic_aging: false,
            }),
            "lfuda" => Self::LeastFrequentlyUsed(LeastFrequentlyUsedSettings {
                dynamic_aging: true,
            }),
            "w-tinylfu" => Self::w_tinylfu(false),
            "w-tinylfu-hc" | "default-strategy" | "default" => Self::w_tinylfu(true),
            "lirs" => Self::LowInterReferenceRecencySet(LirsSettings::default()),
            "lirs-arc" => Self::LowInterReferenceRecencySet(Self::lirs_arc_settings()),
            "lirs-tinylfu" => Self::LowInterReferenceRecencySet(Self::lirs_tinylfu_settings()),
            "ensemble" => Self::Ensemble(EnsembleSettings::default()),
            "next-use" => Self::NextUse(NextUseSettings::default()),
            "follow-best" => Self::Ensemble(EnsembleSettings::follow_best()),
            _ => return None,
        })
    }

    fn lirs_tinylfu_settings() -> LirsSettings {
        LirsSettings {
            frequency_filter: Some(FrequencySketchSettings::default()),
            ..Self::lirs_arc_settings()
        }
    }

    fn lirs_arc_settings() -> LirsSettings {
        LirsSettings {
            optimizer: None,
            ghost_sizing: true,
            ..LirsSettings::default()
        }
    }

    pub(crate) fn lru() -> Self {
        Self::LeastRecentlyUsed(LeastRecentlyUsedSettings::default())
    }

    fn slru(truncate_levels: bool) -> Self {
        Self::LeastRecentlyUsed(LeastRecentlyUsedSettings {
            segmented: Some(SegmentedSettings {
                levels: 2,
                proportions: vec![0.2, 0.8],
                truncate_levels,
            }),
        })
    }

    pub(crate) fn w_tinylfu(hill_climbing: bool) -> Self {
        Self::Composite(Box::new(CompositeSettings {
            window: Some(AdmissionWindowSettings {
                optimizer: hill_climbing.then(HillClimbingSettings::default),
                ..AdmissionWindowSettings::default()
            }),
            filter: Some(FrequencySketchSettings::default()),
            main: Self::slru(false),
        }))
    }

    /// Checks the settings.
    ///
    /// # Errors
    /// The first field that cannot work, and why.
    pub fn validate(&self) -> Result<(), PassivationSettingsError> {
        self.validate_at("replacement")
    }

    fn validate_at(&self, at: &str) -> Result<(), PassivationSettingsError> {
        match self {
            Self::LeastRecentlyUsed(LeastRecentlyUsedSettings {
                segmented: Some(segmented),
            }) => {
                let field = format!("{at}.least-recently-used.segmented");
                if segmented.levels == 0 {
                    return refuse(&format!("{field}.levels"), "must be at least 1");
                }
                let proportions = &segmented.proportions;
                if proportions.is_empty() {
                    return Ok(());
                }
                let field = format!("{field}.proportions");
                if proportions.len() != segmented.levels {
                    return refuse(&field, "must be empty or have one entry per level");
                }
                if proportions.iter().any(|p| !(0.0..=1.0).contains(p)) {
                    return refuse(&field, "each must be between 0 and 1");
                }
                let sum: f64 = proportions.iter().sum();
                if (sum - 1.0).abs() > 1e-6 {
                    return refuse(&field, "must add up to 1");
                }
                Ok(())
            }
            Self::LeastRecentlyUsed(_) | Self::MostRecentlyUsed | Self::LeastFrequentlyUsed(_) => {
                Ok(())
            }
            Self::LowInterReferenceRecencySet(lirs) => {
                let at = format!("{at}.lirs");
                if !(0.0..=1.0).contains(&lirs.hir_proportion) {
                    return refuse(&format!("{at}.hir-proportion"), "must be between 0 and 1");
                }
                if !(0.0..=f64::MAX).contains(&lirs.history_multiplier) {
                    return refuse(&format!("{at}.history-multiplier"), "must be at least 0");
                }
                if !(0.0..=1.0).contains(&lirs.minimum_proportion)
                    || !(0.0..=1.0).contains(&lirs.maximum_proportion)
                    || lirs.minimum_proportion > lirs.maximum_proportion
                {
                    return refuse(
                        &format!("{at}.minimum-proportion"),
                        "proportions must be between 0 and 1, minimum not above maximum",
                    );
                }
                Ok(())
            }
            Self::Composite(composite) => composite.validate_at(at),
            Self::NextUse(next_use) => {
                let at = format!("{at}.next-use");
                if !(0.0..=f64::MAX).contains(&next_use.history_multiplier) {
                    return refuse(&format!("{at}.history-multiplier"), "must be at least 0");
                }
                if !(1.0..=65536.0).contains(&next_use.interval_cap_multiplier) {
                    return refuse(
                        &format!("{at}.interval-cap-multiplier"),
                        "must be between 1 and 65536",
                    );
                }
                Ok(())
            }
            Self::Ensemble(ensemble) => {
                let at = format!("{at}.ensemble");
                if !above_zero(ensemble.period_multiplier) {
                    return refuse(&format!("{at}.period-multiplier"), "must be above 0");
                }
                if !(0.0..=f64::MAX).contains(&ensemble.margin_multiplier) {
                    return refuse(&format!("{at}.margin-multiplier"), "must be at least 0");
                }
                let at = format!("{at}.experts");
                if ensemble.experts.is_empty() {
                    return refuse(&at, "must name at least one expert");
                }
                for expert in &ensemble.experts {
                    if matches!(expert, Self::Ensemble(_)) {
                        return refuse(&at, "cannot itself be an ensemble");
                    }
                    expert.validate_at(&at)?;
                }
                Ok(())
            }
        }
    }
}

impl CompositeSettings {
    fn validate_at(&self, at: &str) -> Result<(), PassivationSettingsError> {
        if matches!(self.main, ReplacementSettings::Composite(_)) {
            return refuse(&format!("{at}.main"), "cannot itself be composite");
        }
        self.main.validate_at(&format!("{at}.main"))?;
        if let Some(window) = &self.window {
            let at = format!("{at}.window");
            if matches!(window.policy, ReplacementSettings::Composite(_)) {
                return refuse(&format!("{at}.policy"), "cannot itself be composite");
            }
            window.policy.validate_at(&format!("{at}.policy"))?;
            for (name, value) in [
                ("proportion", window.proportion),
                ("minimum-proportion", window.minimum_proportion),
                ("maximum-proportion", window.maximum_proportion),
            ] {
                if !(0.0..=1.0).contains(&value) {
                    return refuse(&format!("{at}.{name}"), "must be between 0 and 1");
                }
            }
            if window.minimum_proportion > window.maximum_proportion {
                return refuse(
                    &format!("{at}.minimum-proportion"),
                    "must not exceed maximum-proportion",
                );
            }
            if let Some(hill) = &window.optimizer {
                let at = format!("{at}.hill-climbing");
                if !above_zero(hill.adjust_multiplier) {
                    return refuse(&format!("{at}.adjust-multiplier"), "must be above 0");
                }
                if !above_zero(hill.initial_step) || hill.initial_step > 1.0 {
                    return refuse(&format!("{at}.initial-step"), "must be in (0, 1]");
                }
                if !(0.0..=f64::MAX).contains(&hill.restart_threshold) {
                    return refuse(&format!("{at}.restart-threshold"), "must be at least 0");
                }
                if !above_zero(hill.step_decay) || hill.step_decay > 1.0 {
                    return refuse(&format!("{at}.step-decay"), "must be in (0, 1]");
                }
            }
        }
        if let Some(sketch) = &self.filter {
            let at = format!("{at}.frequency-sketch");
            if !(1..=MAX_DEPTH).contains(&sketch.depth) {
                return refuse(&format!("{at}.depth"), "must be between 1 and 8");
            }
            if !COUNTER_BITS.contains(&sketch.counter_bits) {
                return refuse(
                    &format!("{at}.counter-bits"),
                    "must be 2, 4, 8, 16, 32 or 64",
                );
            }
            if !sketch.width_multiplier.is_power_of_two() {
                return refuse(
                    &format!("{at}.width-multiplier"),
                    "must be a power of two (1, 2, 4, ...)",
                );
            }
            if !above_zero(sketch.reset_multiplier) {
                return refuse(&format!("{at}.reset-multiplier"), "must be above 0");
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
