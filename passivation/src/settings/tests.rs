use super::*;

#[test]
fn every_preset_builds_and_validates() {
    for name in ReplacementSettings::PRESETS {
        let settings = ReplacementSettings::preset(name).unwrap();
        settings.validate().unwrap();
        let mut policy = settings.build::<u64>(100);
        let mut out = Vec::new();
        for id in 0..1000u64 {
            if !policy.is_empty() && id.is_multiple_of(3) {
                policy.on_access(&(id - 1));
            }
            policy.on_activate(id, &mut out);
        }
        assert!(policy.len() <= 100, "{name}: {}", policy.len());
        assert_eq!(policy.len() + out.len(), 1000, "{name}");
    }
    assert!(ReplacementSettings::preset("arc").is_none());
    let bad = ReplacementSettings::LowInterReferenceRecencySet(LirsSettings {
        hir_proportion: 1.5,
        ..LirsSettings::default()
    });
    assert_eq!(
        bad.validate().unwrap_err().field,
        "replacement.lirs.hir-proportion"
    );
    assert_eq!(
        ReplacementSettings::preset("default"),
        Some(ReplacementSettings::default())
    );
}

/// The caller's view (what it activated minus what it was told to
/// passivate) always equals what the policy tracks, through limit
/// changes and removals, for every preset.
#[test]
fn every_preset_tracks_exactly_the_active_entities() {
    use std::collections::HashSet;
    for name in ReplacementSettings::PRESETS {
        let mut policy = ReplacementSettings::preset(name).unwrap().build::<u64>(64);
        let mut active = HashSet::new();
        let mut out = Vec::new();
        let mut limit = 64;
        let mut state = 0x2545_f491_4f6c_dd1du64;
        for step in 0..20_000u64 {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            // skewed: half the accesses go to 16 hot ids
            let id = if state.is_multiple_of(2) {
                state % 16
            } else {
                state % 500
            };
            out.clear();
            match step {
                5_000 | 12_000 => {
                    limit = if step == 5_000 { 20 } else { 90 };
                    policy.set_limit(limit, &mut out);
                }
                _ if step.is_multiple_of(97) => {
                    policy.on_remove(&id);
                    active.remove(&id);
                }
                _ if active.contains(&id) => policy.on_access(&id),
                _ => {
                    active.insert(id);
                    policy.on_activate(id, &mut out);
                }
            }
            for gone in &out {
                assert!(active.remove(gone), "{name}: {gone} passivated twice");
            }
            assert_eq!(policy.len(), active.len(), "{name} at step {step}");
            assert!(policy.len() <= limit, "{name} over its limit at {step}");
        }
    }
}

#[test]
fn default_strategy_is_akkas() {
    let Some(ReplacementSettings::Composite(c)) = ReplacementSettings::preset("default-strategy")
    else {
        panic!("composite expected");
    };
    let window = c.window.unwrap();
    assert_eq!(window.policy, ReplacementSettings::lru());
    assert_eq!(window.proportion, 0.01);
    assert_eq!(window.minimum_proportion, 0.01);
    assert_eq!(window.maximum_proportion, 1.0);
    assert_eq!(window.optimizer, Some(HillClimbingSettings::default()));
    assert_eq!(c.filter, Some(FrequencySketchSettings::default()));
    assert_eq!(c.main, ReplacementSettings::slru(false));
}

#[test]
fn validate_names_the_field() {
    let bad = ReplacementSettings::LeastRecentlyUsed(LeastRecentlyUsedSettings {
        segmented: Some(SegmentedSettings {
            levels: 2,
            proportions: vec![0.5, 0.6],
            truncate_levels: false,
        }),
    });
    let err = bad.validate().unwrap_err();
    assert_eq!(
        err.field,
        "replacement.least-recently-used.segmented.proportions"
    );
    let mut composite = CompositeSettings {
        window: Some(AdmissionWindowSettings::default()),
        filter: Some(FrequencySketchSettings {
            counter_bits: 3,
            ..FrequencySketchSettings::default()
        }),
        main: ReplacementSettings::MostRecentlyUsed,
    };
    let err = ReplacementSettings::Composite(Box::new(composite.clone()))
        .validate()
        .unwrap_err();
    assert_eq!(err.field, "replacement.frequency-sketch.counter-bits");
    composite.filter = None;
    composite.window = Some(AdmissionWindowSettings {
        minimum_proportion: 0.5,
        maximum_proportion: 0.2,
        ..AdmissionWindowSettings::default()
    });
    let err = ReplacementSettings::Composite(Box::new(composite.clone()))
        .validate()
        .unwrap_err();
    assert_eq!(err.field, "replacement.window.minimum-proportion");
    composite.window = None;
    composite.main = ReplacementSettings::w_tinylfu(true);
    assert!(ReplacementSettings::Composite(Box::new(composite))
        .validate()
        .is_err());
}

#[test]
fn settings_round_trip_through_the_wire_codec() {
    for name in ReplacementSettings::PRESETS {
        let settings = ReplacementSettings::preset(name).unwrap();
        let bytes = postcard::to_stdvec(&settings).unwrap();
        let back: ReplacementSettings = postcard::from_bytes(&bytes).unwrap();
        assert_eq!(back, settings);
    }
}
