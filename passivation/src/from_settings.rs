//! Policies built from their settings: one shard's policy, a composite's
//! areas, an ensemble's experts. Apart from the settings so that the
//! settings (names, defaults, presets, checks) import no policy, and the
//! policies that take settings of their own (a composite's filter and
//! optimizer, LIRS's) import only those.

use super::area::ActiveArea;
use super::composite::{AdmissionWindow, Composite};
use super::ensemble::Ensemble;
use super::frequency_sketch::SketchHash;
use super::lfu::LeastFrequentlyUsed;
use super::lirs::LowInterReferenceRecencySet;
use super::lru::{LeastRecentlyUsed, SegmentedLeastRecentlyUsed};
use super::mru::MostRecentlyUsed;
use super::next_use::PredictedNextUse;
use super::settings::{
    CompositeSettings, EnsembleSettings, LeastRecentlyUsedSettings, LirsSettings,
    ReplacementSettings, SegmentedSettings,
};
use super::{PolicyKey, ReplacementPolicy};

impl ReplacementSettings {
    /// A policy for one shard, holding at most `limit` entities. Expects
    /// settings that passed [`ReplacementSettings::validate`]; out-of-range
    /// values are clamped rather than refused here.
    pub fn build<K: PolicyKey>(&self, limit: usize) -> Box<dyn ReplacementPolicy<K>> {
        match self {
            Self::Composite(composite) => Box::new(composite.build(limit, None)),
            // The other policies are exactly what a composite's area is.
            simple => simple.build_area(limit),
        }
    }

    /// [`ReplacementSettings::build`], with the frequency sketch (if any)
    /// hashing keys with `hash` instead of foldhash. For the simulator, to
    /// count exactly as Akka does (see [`SketchHash`]); other policies
    /// ignore it.
    pub fn build_with_sketch_hash<K: PolicyKey>(
        &self,
        limit: usize,
        hash: SketchHash<K>,
    ) -> Box<dyn ReplacementPolicy<K>> {
        match self {
            Self::Composite(composite) => Box::new(composite.build(limit, Some(hash))),
            simple => simple.build(limit),
        }
    }

    /// The policy of a composite's area (a composite inside a composite
    /// is refused by `validate`; here its main area stands in for it).
    pub(super) fn build_area<K: PolicyKey>(&self, limit: usize) -> Box<dyn ActiveArea<K>> {
        match self {
            Self::LeastRecentlyUsed(LeastRecentlyUsedSettings { segmented: None }) => {
                Box::new(LeastRecentlyUsed::new(limit))
            }
            Self::LeastRecentlyUsed(LeastRecentlyUsedSettings {
                segmented: Some(segmented),
            }) => Box::new(segmented.build(limit)),
            Self::MostRecentlyUsed => Box::new(MostRecentlyUsed::new(limit)),
            Self::LeastFrequentlyUsed(lfu) => {
                Box::new(LeastFrequentlyUsed::new(limit, lfu.dynamic_aging))
            }
            Self::Composite(composite) => composite.main.build_area(limit),
            Self::LowInterReferenceRecencySet(lirs) => Box::new(lirs.build(limit)),
            Self::Ensemble(ensemble) => Box::new(ensemble.build(limit)),
            Self::NextUse(next_use) => Box::new(PredictedNextUse::new(
                limit,
                next_use.history_multiplier,
                next_use.interval_cap_multiplier,
            )),
        }
    }
}

impl EnsembleSettings {
    pub(crate) fn build<K: PolicyKey>(&self, limit: usize) -> Ensemble<K> {
        let experts = self
            .experts
            .iter()
            .map(|expert| match expert {
                // the experts need membership, which a composite has
                ReplacementSettings::Composite(composite) => {
                    Box::new(composite.build(limit, None)) as Box<dyn ActiveArea<K>>
                }
                other => other.build_area(limit),
            })
            .collect();
        Ensemble::new(
            limit,
            experts,
            self.period_multiplier,
            self.margin_multiplier,
        )
    }
}

impl LirsSettings {
    pub(super) fn build<K: PolicyKey>(&self, limit: usize) -> LowInterReferenceRecencySet<K> {
        let mut lirs =
            LowInterReferenceRecencySet::new(limit, self.hir_proportion, self.history_multiplier);
        if let Some(filter) = &self.frequency_filter {
            lirs = lirs.with_frequency_filter(filter.clone());
        }
        if self.ghost_sizing {
            return lirs.with_ghost_sizing(self.minimum_proportion, self.maximum_proportion);
        }
        match &self.optimizer {
            Some(hc) => {
                lirs.with_optimizer(hc.clone(), self.minimum_proportion, self.maximum_proportion)
            }
            None => lirs,
        }
    }
}

impl SegmentedSettings {
    pub(super) fn build<K: PolicyKey>(&self, limit: usize) -> SegmentedLeastRecentlyUsed<K> {
        if self.truncate_levels {
            SegmentedLeastRecentlyUsed::with_truncated_levels(limit, self.effective_proportions())
        } else {
            SegmentedLeastRecentlyUsed::new(limit, self.effective_proportions())
        }
    }
}

impl CompositeSettings {
    pub(super) fn build<K: PolicyKey>(
        &self,
        limit: usize,
        hash: Option<SketchHash<K>>,
    ) -> Composite<K> {
        let window = self.window.as_ref().map(|w| AdmissionWindow {
            area: w.policy.build_area(limit),
            proportion: w.proportion,
            minimum_proportion: w.minimum_proportion,
            maximum_proportion: w.maximum_proportion,
            optimizer: w.optimizer.clone(),
        });
        Composite::new(
            limit,
            window,
            self.filter.clone(),
            self.main.build_area(limit),
            hash,
        )
    }
}
