//! How the peers benchmark turns what it read into table cells: medians
//! with their spread, percentiles of samples, and percentiles of
//! histogram buckets (every system's latency in the same buckets).

use crate::systems::Observed;
use std::collections::BTreeMap;

/// The median, min and max of `values`, as a table cell (an infinite
/// value is a run where it never happened).
pub fn spread(values: &[f64], digits: usize) -> String {
    let mut sorted: Vec<f64> = values.iter().copied().filter(|v| !v.is_nan()).collect();
    if sorted.is_empty() {
        return "-".to_string();
    }
    sorted.sort_by(f64::total_cmp);
    let cell = |v: f64| {
        if v.is_finite() {
            format!("{v:.digits$}")
        } else {
            "never".to_string()
        }
    };
    let median = cell(sorted[sorted.len() / 2]);
    if sorted.len() == 1 {
        return median;
    }
    format!(
        "{median} ({}–{})",
        cell(sorted[0]),
        cell(sorted[sorted.len() - 1])
    )
}

/// Nearest-rank percentile `p` (0 to 1) of `values`.
pub fn percentile(values: &[f64], p: f64) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = (p * sorted.len() as f64).ceil().max(1.0) as usize;
    sorted[rank.min(sorted.len()) - 1]
}

/// Latency percentiles read off bucket counts (`deltas`: bound, records at
/// or below it), interpolated within a bucket as Prometheus'
/// `histogram_quantile` does; the max is the bound of the highest bucket
/// with a record.
pub fn bucket_percentile(deltas: &[(f64, f64)], p: f64) -> f64 {
    let Some(&(_, total)) = deltas.last() else {
        return f64::NAN;
    };
    if total <= 0.0 {
        return f64::NAN;
    }
    let rank = p * total;
    let mut below = (0.0, 0.0);
    for &(bound, count) in deltas {
        if count >= rank {
            if !bound.is_finite() {
                return below.0;
            }
            let within = (rank - below.1) / (count - below.1).max(1.0);
            return below.0 + (bound - below.0) * within.clamp(0.0, 1.0);
        }
        below = (bound, count);
    }
    below.0
}

pub fn bucket_max(deltas: &[(f64, f64)]) -> f64 {
    let total = deltas.last().map_or(0.0, |d| d.1);
    deltas
        .iter()
        .find(|(_, count)| *count >= total)
        .map_or(f64::NAN, |d| d.0)
}

/// The records each latency bucket got between two observations of the
/// same processes.
pub fn latency_between(before: &[&Observed], after: &[&Observed]) -> Vec<(f64, f64)> {
    let mut sum: BTreeMap<u64, f64> = BTreeMap::new();
    for (seen, sign) in after
        .iter()
        .map(|o| (o, 1.0))
        .chain(before.iter().map(|o| (o, -1.0)))
    {
        for &(bound, count) in &seen.latency {
            *sum.entry(bound.to_bits()).or_default() += sign * count;
        }
    }
    let mut deltas: Vec<(f64, f64)> = sum
        .into_iter()
        .map(|(bits, count)| (f64::from_bits(bits), count))
        .collect();
    deltas.sort_by(|a, b| a.0.total_cmp(&b.0));
    deltas
}
