use super::*;
use crate::area::replay;

fn policy(limit: usize) -> PredictedNextUse<u32> {
    PredictedNextUse::new(limit, 8.0, 16.0)
}

/// Messages of `ids` that found their entity active.
fn hits(p: &mut PredictedNextUse<u32>, ids: &[u32]) -> usize {
    let mut out = Vec::new();
    let mut hits = 0;
    for &id in ids {
        if p.contains(&id) {
            hits += 1;
            p.on_access(&id);
        } else {
            p.on_activate(id, &mut out);
        }
    }
    hits
}

#[test]
fn new_entities_go_first_the_newest_first() {
    let mut p = policy(3);
    // 1 has an interval; 2 and 3 were seen once; 4 is the newest new
    // entity, so it is passivated after its message, then 5 is
    assert_eq!(replay(&mut p, &[1, 1, 2, 3, 4, 5]), vec![4, 5]);
    assert!(p.contains(&1) && p.contains(&2) && p.contains(&3));
    assert_eq!(p.select(), Some(&3));
}

#[test]
fn the_entity_late_the_longest_goes_before_those_on_time() {
    let mut p = policy(2);
    // messages 0..=3: 1 and 2 each twice, expected at 2 and 4; 3 is new
    // at 4 and passivated; back at 5 it is expected at 6, while 1 is 3
    // late (expected at 8) and 2 is 1 late (expected at 6, but seen
    // earlier than 3): 1 goes
    assert_eq!(replay(&mut p, &[1, 1, 2, 2, 3, 3]), vec![3, 1]);
    assert!(p.contains(&2) && p.contains(&3));
}

#[test]
fn the_forecast_is_the_shorter_interval_then_the_longer() {
    let mut history = History {
        last: 100,
        interval: 30,
        previous: 10,
        second: false,
        passivated: Passivated::No,
    };
    assert_eq!(history.forecast(), 110);
    history.second = true;
    assert_eq!(history.forecast(), 130);
    assert_eq!(history.latest_forecast(), 130);
    history.cap_at(120);
    assert_eq!((history.interval, history.previous), (20, 10));
    let once = History {
        last: 5,
        interval: 7,
        ..History::default()
    };
    assert_eq!((once.forecast(), once.latest_forecast()), (12, 12));
}

#[test]
fn a_loop_larger_than_the_limit_keeps_part_of_it_active() {
    // a loop over 10 entities with room for 4: LRU never hits; Belady
    // keeps 3 of them and hits 3 in 10 (one slot turns over)
    let trace: Vec<u32> = (0..10).cycle().take(10 * 50).collect();
    let mut p = policy(4);
    let warm = hits(&mut p, &trace[..100]);
    let steady = hits(&mut p, &trace[100..]);
    assert!(warm < 100);
    assert!(steady >= 3 * 40 - 2, "{steady} hits in 400 messages");
    assert_eq!(p.len(), 4);
}

#[test]
fn sweeps_up_and_down_are_forecast_from_the_interval_before_last() {
    // 0..40 up then down with room for 10: an entity's intervals
    // alternate, so the last interval alone forecasts the wrong turn
    let sweep: Vec<u32> = (0..40).chain((0..40).rev()).collect();
    let trace: Vec<u32> = sweep.iter().copied().cycle().take(80 * 30).collect();
    let mut p = policy(10);
    let rate = hits(&mut p, &trace) as f64 / trace.len() as f64;
    // LRU keeps the 10 entities around each turn: about 11%
    assert!(rate > 0.11, "{rate}");
}

#[test]
fn newcomers_that_come_back_at_once_open_the_window() {
    // every entity gets two messages in a row: without a window the
    // second always misses
    let pairs: Vec<u32> = (0..2000).flat_map(|id| [id, id]).collect();
    let mut p = policy(10);
    let steady = {
        hits(&mut p, &pairs[..400]);
        hits(&mut p, &pairs[400..])
    };
    assert!(p.window >= 1);
    assert_eq!(p.window_proportion(), Some(p.window as f64 / 10.0));
    assert!(steady > 1500, "{steady} of 1800");
    // a loop then shuts it again: the window's room is better spent on
    // entities with a forecast
    let trace: Vec<u32> = (5000..5030).cycle().take(30 * 40).collect();
    hits(&mut p, &trace);
    assert_eq!(p.window, 0);
}

#[test]
fn memory_stays_bounded_and_every_passivated_entity_was_active() {
    let mut p = policy(50);
    let mut active = std::collections::HashSet::new();
    let mut seed = 7u64;
    let mut out = Vec::new();
    for step in 0..50_000u32 {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        let id = (seed % 3000) as u32 % (200 + step / 100);
        if p.contains(&id) {
            p.on_access(&id);
        } else {
            p.on_activate(id, &mut out);
            active.insert(id);
            for gone in out.drain(..) {
                assert!(active.remove(&gone), "{gone} was not active");
            }
        }
        if step % 5000 == 4999 {
            p.on_remove(&id);
            active.remove(&id);
        }
        assert_eq!(p.len(), active.len());
        assert!(p.len() <= 50);
    }
    assert!(p.list.len() <= 50 + 8 * 50);
    assert!(active.iter().all(|id| p.contains(id)));
}

#[test]
fn a_new_limit_rebuilds_the_ring_and_keeps_the_forecasts() {
    let mut p = policy(100);
    let trace: Vec<u32> = (0..150).cycle().take(150 * 10).collect();
    hits(&mut p, &trace);
    let mut out = Vec::new();
    // a wide limit: buckets span several messages
    p.set_limit(100_000, &mut out);
    assert!(out.is_empty());
    assert!(p.width > 1 && p.buckets == MAX_BUCKETS);
    let steady = hits(&mut p, &trace);
    assert_eq!(steady, trace.len() - 50, "only the first turn misses");
    // and back to a narrow one: entities go, the loop still hits
    p.set_limit(20, &mut out);
    assert_eq!(out.len(), 130);
    assert!(p.width <= 8 && p.buckets == MIN_BUCKETS);
    assert_eq!(p.len(), 20);
    let steady = hits(&mut p, &trace);
    assert!(steady > 100, "{steady}");
    assert!(p.list.len() <= 20 + 8 * 20);
}

/// Checks that every entity on time is filed under its forecast's
/// bucket, within the ring, and that the bitmaps match the buckets.
fn check_ring(p: &PredictedNextUse<u32>) {
    for bucket in 0..p.buckets {
        let level = RING + bucket;
        let filled = p.list.level_len(level) > 0;
        let bit = p.occupancy.words[bucket / 64] & (1 << (bucket % 64)) != 0;
        assert_eq!(filled, bit, "bucket {bucket}");
        let mut at = p.list.most_recent(level);
        while let Some(slot) = at {
            let due = p.history(slot).forecast() / p.width;
            assert!(due.saturating_sub(p.next_due) < p.buckets as u64, "{due}");
            assert_eq!(p.ring_bucket(due.max(p.next_due)), bucket);
            at = p.list.less_recent(slot);
        }
    }
    for word in 0..p.occupancy.words.len() {
        let summary = p.occupancy.summary & (1 << word) != 0;
        assert_eq!(summary, p.occupancy.words[word] != 0);
    }
}

#[test]
fn forecasts_stay_in_the_ring_through_limit_changes_and_removals() {
    for seed in 1..=40u64 {
        let mut p = policy(100);
        let mut out = Vec::new();
        let mut state = seed;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        for step in 0..6_000u32 {
            let r = next();
            // a hot loop, a long loop and a sprinkling of strays
            let id = match r % 10 {
                0..=5 => step % 40,
                6..=8 => 1_000 + step % 700,
                _ => 10_000 + (r % 5_000) as u32,
            };
            if p.contains(&id) {
                p.on_access(&id);
            } else {
                p.on_activate(id, &mut out);
            }
            match next() % 500 {
                0 => p.set_limit((next() % 300) as usize, &mut out),
                1 => p.on_remove(&id),
                _ => {}
            }
            out.clear();
            assert!(p.len() <= p.limit);
            assert!(p.window <= p.limit);
        }
        check_ring(&p);
    }
}

#[test]
fn a_huge_limit_does_not_overflow() {
    let mut p = policy(10);
    let mut out = Vec::new();
    p.set_limit(usize::MAX, &mut out);
    assert_eq!(hits(&mut p, &[1, 2, 1, 2, 3, 1]), 3);
    p.set_limit(1, &mut out);
    assert_eq!(p.len(), 1);
    check_ring(&p);
}

#[test]
fn a_smaller_limit_narrows_the_window() {
    // blocks of six newcomers, each sent twice: the window opens to six
    let trace: Vec<u32> = (0..500u32)
        .flat_map(|block| {
            let ids: Vec<u32> = (0..6).map(|i| block * 6 + i).collect();
            ids.iter().chain(ids.iter()).copied().collect::<Vec<_>>()
        })
        .collect();
    let mut p = policy(10);
    hits(&mut p, &trace);
    assert_eq!(p.window, 6);
    let mut out = Vec::new();
    p.set_limit(2, &mut out);
    assert_eq!(p.window, 2);
    assert_eq!(p.window_proportion(), Some(1.0));
    assert!(p.list.level_len(WINDOW) <= 2);
}
