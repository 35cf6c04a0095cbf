//! The composite strategy: an admission window in front of a main area,
//! with an admission filter between them and an optional optimizer of the
//! window's size (Akka's `CompositeEntityPassivationStrategy`; with an LRU
//! window, a frequency sketch and an SLRU main area it is Window-TinyLFU).
//!
//! New entities enter the window. An entity the window's policy pushes out
//! is a candidate for the main area: if the main area is full, the filter
//! weighs it against the entity the main area's policy would passivate,
//! and the one estimated to be less frequent is passivated.

use super::area::ActiveArea;
use super::frequency_sketch::{FrequencySketch, SketchHash};
use super::hill_climbing::HillClimbing;
use super::settings::{FrequencySketchSettings, HillClimbingSettings};
use super::{PolicyKey, ReplacementPolicy};

/// The window part of a composite, as built from its settings.
pub(crate) struct AdmissionWindow<K: PolicyKey> {
    pub area: Box<dyn ActiveArea<K>>,
    pub proportion: f64,
    pub minimum_proportion: f64,
    pub maximum_proportion: f64,
    pub optimizer: Option<HillClimbingSettings>,
}

/// The frequency-sketch admission filter; the sketch is rebuilt for every
/// new limit, since its width and reset period follow the limit.
struct AdmissionFilter<K> {
    settings: FrequencySketchSettings,
    sketch: FrequencySketch,
    hash: Option<SketchHash<K>>,
}

impl<K: PolicyKey> AdmissionFilter<K> {
    fn new(settings: FrequencySketchSettings, limit: usize, hash: Option<SketchHash<K>>) -> Self {
        let sketch = Self::sketch(&settings, limit);
        Self {
            settings,
            sketch,
            hash,
        }
    }

    fn increment(&mut self, id: &K) {
        match &self.hash {
            Some(hash) => self.sketch.increment_hash(hash(id)),
            None => self.sketch.increment(id),
        }
    }

    fn frequency(&self, id: &K) -> u64 {
        match &self.hash {
            Some(hash) => self.sketch.frequency_of_hash(hash(id)),
            None => self.sketch.frequency(id),
        }
    }

    fn sketch(settings: &FrequencySketchSettings, limit: usize) -> FrequencySketch {
        FrequencySketch::new(
            limit,
            settings.width_multiplier,
            settings.reset_multiplier,
            settings.depth,
            settings.counter_bits,
        )
    }

    fn set_limit(&mut self, limit: usize) {
        self.sketch = Self::sketch(&self.settings, limit);
    }

    /// Strictly more frequent: on a tie the entity already in the main
    /// area stays.
    fn admit(&self, candidate: &K, victim: &K) -> bool {
        self.frequency(candidate) > self.frequency(victim)
    }
}

/// An admission window, filter and main area behind one
/// [`ReplacementPolicy`]. Built by `ReplacementSettings::build`.
pub struct Composite<K: PolicyKey> {
    limit: usize,
    /// `None`: entities go straight to the filter and the main area.
    window: Option<Box<dyn ActiveArea<K>>>,
    proportion: f64,
    minimum_proportion: f64,
    maximum_proportion: f64,
    window_limit: usize,
    main_limit: usize,
    optimizer: Option<HillClimbing>,
    filter: Option<AdmissionFilter<K>>,
    main: Box<dyn ActiveArea<K>>,
    /// Scratch buffers, kept to avoid allocating per activation.
    candidates: Vec<K>,
    moved: Vec<K>,
    /// Entities that left both areas while the window was resized during
    /// an access, which has no output; handed out with the next
    /// activation or limit change. Akka drops these from tracking; it only
    /// happens when an area's policy keeps more than its limit (LFU or MRU
    /// at a limit of zero).
    pending: Vec<K>,
}

impl<K: PolicyKey> std::fmt::Debug for Composite<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Composite")
            .field("limit", &self.limit)
            .field("window", &self.window.as_ref().map(|w| w.len()))
            .field("main", &self.main.len())
            .field("proportion", &self.proportion)
            .field("window_limit", &self.window_limit)
            .field("main_limit", &self.main_limit)
            .field("optimizer", &self.optimizer)
            .field("filter", &self.filter.as_ref().map(|f| &f.settings))
            .finish_non_exhaustive()
    }
}

impl<K: PolicyKey> Composite<K> {
    /// A composite holding at most `limit` entities; the areas are resized
    /// to their shares of it here.
    pub(crate) fn new(
        limit: usize,
        window: Option<AdmissionWindow<K>>,
        filter: Option<FrequencySketchSettings>,
        main: Box<dyn ActiveArea<K>>,
        sketch_hash: Option<SketchHash<K>>,
    ) -> Self {
        let (window, proportion, minimum, maximum, optimizer) = match window {
            Some(w) => (
                Some(w.area),
                w.proportion,
                w.minimum_proportion,
                w.maximum_proportion,
                w.optimizer.map(|s| HillClimbing::new(s, limit)),
            ),
            None => (None, 0.0, 0.0, 0.0, None),
        };
        let mut composite = Self {
            limit,
            window,
            proportion,
            minimum_proportion: minimum,
            maximum_proportion: maximum,
            window_limit: 0,
            main_limit: 0,
            optimizer,
            filter: filter.map(|s| AdmissionFilter::new(s, limit, sketch_hash)),
            main,
            candidates: Vec::new(),
            moved: Vec::new(),
            pending: Vec::new(),
        };
        composite.compute_limits();
        let mut none = Vec::new();
        if let Some(window) = composite.window.as_mut() {
            window.set_limit(composite.window_limit, &mut none);
        }
        composite.main.set_limit(composite.main_limit, &mut none);
        composite
    }

    /// The window gets its proportion of the limit, truncated; the main
    /// area the rest.
    fn compute_limits(&mut self) {
        self.window_limit = (self.proportion * self.limit as f64) as usize;
        self.main_limit = self.limit - self.window_limit.min(self.limit);
    }

    /// Offers each candidate pushed out of the window to the main area.
    /// The fullness check uses the composite's main limit, while the main
    /// policy makes room by its own limit (they differ only during a limit
    /// change, where Akka admits before resizing the main area).
    fn admit_candidates(&mut self, passivate: &mut Vec<K>) {
        for candidate in self.candidates.drain(..) {
            let admit = self.main.len() < self.main_limit
                || match (self.main.select(), &self.filter) {
                    (Some(victim), Some(filter)) => filter.admit(&candidate, victim),
                    _ => true,
                };
            if admit {
                self.main.update(candidate, passivate);
            } else {
                passivate.push(candidate);
            }
        }
    }

    /// Applies the optimizer's adjustment, if a sample just completed.
    /// Entities move between the areas; none is passivated.
    fn adapt_window(&mut self) {
        let Some(adjustment) = self.optimizer.as_mut().map(HillClimbing::adjustment) else {
            return;
        };
        if adjustment == 0.0 {
            return;
        }
        let Some(window) = self.window.as_mut() else {
            return;
        };
        self.proportion = (self.proportion + adjustment)
            .min(self.maximum_proportion)
            .max(self.minimum_proportion);
        self.window_limit = (self.proportion * self.limit as f64) as usize;
        self.main_limit = self.limit - self.window_limit.min(self.limit);
        self.moved.clear();
        if adjustment > 0.0 {
            // grow the window with the main area's victims
            window.set_limit(self.window_limit, &mut self.pending);
            self.main.set_limit(self.main_limit, &mut self.moved);
            for id in self.moved.drain(..) {
                window.update(id, &mut self.pending);
            }
        } else {
            // shrink the window into the main area, unfiltered
            self.main.set_limit(self.main_limit, &mut self.pending);
            window.set_limit(self.window_limit, &mut self.moved);
            for id in self.moved.drain(..) {
                self.main.update(id, &mut self.pending);
            }
        }
    }

    /// The window's current share of the limit.
    pub fn proportion(&self) -> f64 {
        self.proportion
    }

    /// The current limits of the window and the main area.
    pub fn area_limits(&self) -> (usize, usize) {
        (self.window_limit, self.main_limit)
    }
}

impl<K: PolicyKey> ReplacementPolicy<K> for Composite<K> {
    /// Like Akka, a new limit also starts a fresh frequency sketch and a
    /// new optimizer sample size, even when the limit is unchanged.
    fn set_limit(&mut self, limit: usize, passivate: &mut Vec<K>) {
        passivate.append(&mut self.pending);
        self.limit = limit;
        self.compute_limits();
        if let Some(optimizer) = self.optimizer.as_mut() {
            optimizer.set_limit(limit);
        }
        if let Some(filter) = self.filter.as_mut() {
            filter.set_limit(limit);
        }
        self.candidates.clear();
        if let Some(window) = self.window.as_mut() {
            window.set_limit(self.window_limit, &mut self.candidates);
        }
        self.admit_candidates(passivate);
        self.main.set_limit(self.main_limit, passivate);
    }

    /// The sketch counts the entity before anything else, so a candidate
    /// is weighed with this very message included.
    fn on_activate(&mut self, id: K, passivate: &mut Vec<K>) {
        if self.contains(&id) {
            self.on_access(&id);
            return;
        }
        passivate.append(&mut self.pending);
        if let Some(filter) = self.filter.as_mut() {
            filter.increment(&id);
        }
        if let Some(optimizer) = self.optimizer.as_mut() {
            optimizer.record_passive();
        }
        self.candidates.clear();
        match self.window.as_mut() {
            Some(window) => window.update(id, &mut self.candidates),
            None => self.candidates.push(id),
        }
        self.admit_candidates(passivate);
        self.adapt_window();
    }

    fn on_access(&mut self, id: &K) {
        if let Some(filter) = self.filter.as_mut() {
            filter.increment(id);
        }
        let in_window = self.window.as_ref().is_some_and(|w| w.contains(id));
        if in_window {
            if let Some(window) = self.window.as_mut() {
                window.on_access(id);
            }
        } else if self.main.contains(id) {
            self.main.on_access(id);
        } else {
            // not active: a caller bug; nothing to track
            return;
        }
        if let Some(optimizer) = self.optimizer.as_mut() {
            optimizer.record_active();
        }
        self.adapt_window();
    }

    fn on_remove(&mut self, id: &K) {
        if let Some(window) = self.window.as_mut() {
            window.on_remove(id);
        }
        self.main.on_remove(id);
        self.pending.retain(|p| p != id);
    }

    fn len(&self) -> usize {
        self.window.as_ref().map_or(0, |w| w.len()) + self.main.len()
    }

    fn window_proportion(&self) -> Option<f64> {
        self.optimizer.as_ref().map(|_| self.proportion)
    }
}

impl<K: PolicyKey> ActiveArea<K> for Composite<K> {
    fn contains(&self, id: &K) -> bool {
        self.window.as_ref().is_some_and(|w| w.contains(id)) || self.main.contains(id)
    }

    fn select(&self) -> Option<&K> {
        self.main.select()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::settings::{CompositeSettings, ReplacementSettings};

    /// An LRU window of `proportion`, optionally hill climbing, a default
    /// sketch, and an LRU main area.
    fn tiny_lfu(limit: usize, proportion: f64, hill_climbing: bool) -> Composite<u32> {
        let window = AdmissionWindow {
            area: Box::new(crate::LeastRecentlyUsed::new(limit)),
            proportion,
            minimum_proportion: 0.01,
            maximum_proportion: 1.0,
            optimizer: hill_climbing.then(HillClimbingSettings::default),
        };
        Composite::new(
            limit,
            Some(window),
            Some(FrequencySketchSettings::default()),
            Box::new(crate::LeastRecentlyUsed::new(limit)),
            None,
        )
    }

    fn activate(policy: &mut Composite<u32>, ids: impl IntoIterator<Item = u32>) -> Vec<u32> {
        let mut out = Vec::new();
        for id in ids {
            policy.on_activate(id, &mut out);
        }
        out
    }

    #[test]
    fn window_gets_its_proportion_truncated_and_main_the_rest() {
        assert_eq!(tiny_lfu(1000, 0.01, false).area_limits(), (10, 990));
        assert_eq!(tiny_lfu(150, 0.01, false).area_limits(), (1, 149));
        assert_eq!(tiny_lfu(99, 0.01, false).area_limits(), (0, 99));
        let mut policy = tiny_lfu(99, 0.01, false);
        policy.set_limit(1000, &mut Vec::new());
        assert_eq!(policy.area_limits(), (10, 990));
        let settings = ReplacementSettings::Composite(Box::new(CompositeSettings {
            window: None,
            filter: None,
            main: ReplacementSettings::MostRecentlyUsed,
        }));
        let mut no_window = settings.build::<u32>(3);
        assert_eq!(no_window.window_proportion(), None);
        let mut out = Vec::new();
        for id in 1..=4 {
            no_window.on_activate(id, &mut out);
        }
        // no window, no filter: straight into the MRU main area
        assert_eq!(out, vec![3]);
    }

    #[test]
    fn filter_admits_only_candidates_more_frequent_than_the_victim() {
        // window 1, main 9
        let mut policy = tiny_lfu(10, 0.1, false);
        assert_eq!(activate(&mut policy, 1..=10), Vec::<u32>::new());
        assert_eq!(policy.window.as_ref().map(|w| w.len()), Some(1));
        assert_eq!(policy.main.len(), 9);
        // 10 leaves the window; it ties with main's LRU (1): the
        // incumbent stays
        assert_eq!(activate(&mut policy, [11]), vec![10]);
        assert_eq!(activate(&mut policy, [12]), vec![11]);
        // 12 is seen twice more while in the window: it now beats 1
        policy.on_access(&12);
        policy.on_access(&12);
        assert_eq!(activate(&mut policy, [13]), vec![1]);
        assert!(policy.main.contains(&12));
        assert_eq!(policy.len(), 10);
    }

    #[test]
    fn an_empty_window_sends_the_new_entity_itself_to_the_filter() {
        // window 0, main 5
        let mut policy = tiny_lfu(5, 0.01, false);
        assert_eq!(activate(&mut policy, 1..=5), Vec::<u32>::new());
        assert_eq!(activate(&mut policy, [6]), vec![6]);
        // the sketch remembers 6 although it was never admitted
        assert_eq!(activate(&mut policy, [6]), vec![1]);
        assert!(policy.contains(&6));
    }

    #[test]
    fn a_caller_supplied_sketch_hash_replaces_foldhash() {
        // every key hashes alike: a candidate never beats the victim
        let settings = ReplacementSettings::preset("w-tinylfu").unwrap();
        let mut policy = settings.build_with_sketch_hash::<u32>(200, std::sync::Arc::new(|_| 7));
        let mut out = Vec::new();
        for id in 0..400 {
            policy.on_activate(id, &mut out);
        }
        // window 2, main 198: the first 200 fit, then each candidate ties
        assert_eq!(out, (198..398).collect::<Vec<u32>>());
    }

    #[test]
    fn hill_climbing_grows_the_window_when_the_active_rate_drops() {
        // limit 100: a sample every 1000 accesses
        let mut policy = tiny_lfu(100, 0.01, true);
        assert_eq!(policy.window_proportion(), Some(0.01));
        let mut out = activate(&mut policy, 0..50);
        for i in 0..950u32 {
            policy.on_access(&(i % 50));
        }
        // first sample (rate 0.95): a step down, held at the minimum
        assert_eq!(policy.window_proportion(), Some(0.01));
        out.extend(activate(&mut policy, 1000..2000));
        // the rate fell to 0: the climb turns, the window grows
        assert_eq!(policy.window_proportion(), Some(0.01 + 0.0625));
        assert_eq!(policy.area_limits(), (7, 93));
        assert_eq!(policy.window.as_ref().map(|w| w.len()), Some(7));
        assert_eq!(policy.len(), 100);
        assert_eq!(out.len(), 1050 - 100);
    }
}
