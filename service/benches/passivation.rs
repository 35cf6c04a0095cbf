//! Per-access cost of each replacement-policy preset at a limit of 100,000,
//! over a skewed synthetic stream (Zipf, exponent 0.9, over 2^20 ids).
//!
//! The stream is generated before timing, and the bench keeps the caller's
//! "is it active" answer in a flat bitmap, so the figures are the policy's
//! own cost: hash map lookups, list updates, sketch increments.
//!
//! `cargo bench -p colo --bench passivation` prints, per preset, the median
//! ns per access over several rounds and the active rate it reached
//! (`COLO_BENCH_ROUNDS` of them, 3 unless set).

mod support;

use colo::passivation::ReplacementSettings;
use std::hint::black_box;
use std::time::Instant;

const LIMIT: usize = 100_000;
const IDS: usize = 1 << 20;
const EXPONENT: f64 = 0.9;
const WARM_UP: usize = 1_000_000;
const MEASURED: usize = 2_000_000;
/// Rounds per preset, unless `COLO_BENCH_ROUNDS` says otherwise.
const ROUNDS: u64 = 3;

/// A deterministic xorshift generator: the same stream on every run.
struct XorShift(u64);

impl XorShift {
    fn next_f64(&mut self) -> f64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// Zipf-distributed ids: rank r is drawn with weight 1 / r^EXPONENT by
/// inverting the cumulative weights, then scattered over the id space by
/// an odd multiplier so popular ids are not neighbours.
fn zipf_stream(len: usize) -> Vec<u64> {
    let mut cumulative = Vec::with_capacity(IDS);
    let mut total = 0.0;
    for rank in 1..=IDS {
        total += 1.0 / (rank as f64).powf(EXPONENT);
        cumulative.push(total);
    }
    let mut rng = XorShift(0x9e37_79b9_7f4a_7c15);
    (0..len)
        .map(|_| {
            let target = rng.next_f64() * total;
            let rank = cumulative.partition_point(|&c| c < target).min(IDS - 1) as u64;
            rank.wrapping_mul(0x9e37_79b9) & (IDS as u64 - 1)
        })
        .collect()
}

/// Replays `stream` through a fresh policy; returns the ns per access of
/// the measured part and its active rate.
fn run(settings: &ReplacementSettings, stream: &[u64]) -> (f64, f64) {
    let mut policy = settings.build::<u64>(LIMIT);
    let mut active = vec![false; IDS];
    let mut passivated = Vec::with_capacity(64);
    let mut replay = |ids: &[u64]| {
        let mut activations = 0usize;
        for &id in ids {
            if active[id as usize] {
                policy.on_access(black_box(&id));
            } else {
                activations += 1;
                active[id as usize] = true;
                passivated.clear();
                policy.on_activate(id, &mut passivated);
                for &gone in &passivated {
                    active[gone as usize] = false;
                }
            }
        }
        activations
    };
    replay(&stream[..WARM_UP]);
    let started = Instant::now();
    let activations = replay(&stream[WARM_UP..]);
    let elapsed = started.elapsed();
    let measured = stream.len() - WARM_UP;
    (
        elapsed.as_nanos() as f64 / measured as f64,
        (1.0 - activations as f64 / measured as f64) * 100.0,
    )
}

fn main() {
    let rounds = usize::try_from(support::env("COLO_BENCH_ROUNDS", ROUNDS).max(1)).unwrap_or(1);
    let stream = zipf_stream(WARM_UP + MEASURED);
    println!(
        "passivation policies: limit {LIMIT}, zipf({EXPONENT}) over {IDS} ids, \
         {WARM_UP} warm-up + {MEASURED} measured accesses, median of {rounds}"
    );
    println!("{:<14} {:>12} {:>10}", "preset", "ns/access", "active %");
    for name in ReplacementSettings::PRESETS {
        let Some(settings) = ReplacementSettings::preset(name) else {
            continue;
        };
        let mut runs: Vec<(f64, f64)> = (0..rounds).map(|_| run(&settings, &stream)).collect();
        runs.sort_by(|a, b| a.0.total_cmp(&b.0));
        let (ns, rate) = runs[rounds / 2];
        println!("{name:<14} {ns:>12.1} {rate:>10.2}");
    }
}
