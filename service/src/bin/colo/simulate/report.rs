//! A simulation's results as CSV or as a readable table.
//!
//! Active % is printed with two decimals computed the way Akka's simulator
//! prints them (`SimulatorStats.activePercent` is a 32-bit float, formatted
//! by Java's `%.2f`, which rounds half up), so figures compare digit for
//! digit with its published tables.

use super::{Report, RunResult};
use std::fmt::Write;

/// The CSV header.
pub const CSV_HEADER: &str = "trace,strategy,limit,accesses,activations,active_percent";

/// `trace,strategy,limit,accesses,activations,active_percent` and one row
/// per run, each line ending in `\n`; a trace with sizes adds
/// `peak_bytes`, the most its active entities held at once.
pub fn csv(report: &Report) -> String {
    let sized = report.runs.iter().any(|r| r.peak_bytes.is_some());
    let mut out = String::from(CSV_HEADER);
    if sized {
        out.push_str(",peak_bytes");
    }
    out.push('\n');
    for run in &report.runs {
        // Writing to a String cannot fail.
        let _ = write!(
            out,
            "{},{},{},{},{},{}",
            csv_field(&report.trace),
            csv_field(&run.strategy),
            run.limit,
            run.accesses,
            run.activations,
            active_percent_2dp(run)
        );
        if sized {
            let _ = write!(out, ",{}", run.peak_bytes.unwrap_or(0));
        }
        out.push('\n');
    }
    out
}

/// Active % per strategy (rows) and limit (columns), under a line that
/// names the trace and the sharding.
pub fn table(report: &Report) -> String {
    let mut limits: Vec<usize> = Vec::new();
    let mut strategies: Vec<&str> = Vec::new();
    for run in &report.runs {
        if !limits.contains(&run.limit) {
            limits.push(run.limit);
        }
        if !strategies.contains(&run.strategy.as_str()) {
            strategies.push(&run.strategy);
        }
    }
    let corner = match report.weighed {
        true => "active % \\ budget (bytes)",
        false => "active % \\ limit",
    };
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{} ({}): {} accesses, {} distinct ids; {} region{}, {} shard{}",
        report.trace,
        report.format,
        thousands(report.accesses),
        thousands(report.distinct_ids),
        report.regions,
        plural(report.regions),
        report.shards,
        plural(report.shards),
    );
    let first = strategies
        .iter()
        .map(|s| s.len())
        .chain([corner.len(), PEAK.len()])
        .max()
        .unwrap_or(0);
    let width = limits
        .iter()
        .map(|l| l.to_string().len())
        .chain([6])
        .max()
        .unwrap_or(6);
    let _ = write!(out, "{corner:<first$}");
    for limit in &limits {
        let _ = write!(out, "  {limit:>width$}");
    }
    out.push('\n');
    // A row per strategy, a column per limit, each cell what `cell` makes
    // of that run.
    let rows = |out: &mut String, cell: &dyn Fn(&RunResult) -> Option<String>| {
        for strategy in &strategies {
            let _ = write!(out, "{strategy:<first$}");
            for limit in &limits {
                let text = report
                    .runs
                    .iter()
                    .find(|r| r.strategy == *strategy && r.limit == *limit)
                    .and_then(cell)
                    .unwrap_or_default();
                let _ = write!(out, "  {text:>width$}");
            }
            out.push('\n');
        }
    };
    rows(&mut out, &|run| Some(active_percent_2dp(run)));
    if report.runs.iter().any(|r| r.peak_bytes.is_some()) {
        let _ = writeln!(out, "{PEAK:<first$}");
        rows(&mut out, &|run| {
            run.peak_bytes
                .map(|peak| format!("{:.2}", peak as f64 / MIB))
        });
    }
    out
}

/// The heading of a trace with sizes' second table.
const PEAK: &str = "peak MiB held";

const MIB: f64 = 1024.0 * 1024.0;

/// Active % with two decimals, as Akka's simulator prints it: computed in
/// 32-bit floats (`(1 - activations / accesses) * 100`), widened to a
/// double, and rounded half up from that double's shortest decimal form.
pub fn active_percent_2dp(run: &RunResult) -> String {
    if run.accesses == 0 {
        return "0.00".to_owned();
    }
    let percent = (1.0f32 - run.activations as f32 / run.accesses as f32) * 100.0f32;
    round_half_up_2dp(&f64::from(percent).to_string())
}

/// Rounds a plain decimal string (no exponent) half up to two decimals.
fn round_half_up_2dp(decimal: &str) -> String {
    let (negative, digits) = match decimal.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, decimal),
    };
    let (int_part, frac_part) = digits.split_once('.').unwrap_or((digits, ""));
    // All the digits up to the hundredths, as one integer of hundredths.
    let mut kept: Vec<u8> = int_part.bytes().map(|b| b - b'0').collect();
    let frac: Vec<u8> = frac_part.bytes().map(|b| b - b'0').collect();
    kept.extend((0..2).map(|i| frac.get(i).copied().unwrap_or(0)));
    if frac.get(2).is_some_and(|&d| d >= 5) {
        let mut i = kept.len();
        loop {
            if i == 0 {
                kept.insert(0, 1);
                break;
            }
            i -= 1;
            if kept[i] == 9 {
                kept[i] = 0;
            } else {
                kept[i] += 1;
                break;
            }
        }
    }
    let split = kept.len() - 2;
    let text: String = kept.iter().map(|d| char::from(b'0' + d)).collect();
    let int_text = text[..split].trim_start_matches('0');
    let int_text = if int_text.is_empty() { "0" } else { int_text };
    let sign = if negative && text.bytes().any(|b| b != b'0') {
        "-"
    } else {
        ""
    };
    format!("{sign}{int_text}.{}", &text[split..])
}

fn csv_field(field: &str) -> String {
    if field.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", field.replace('"', "\"\""))
    } else {
        field.to_owned()
    }
}

fn thousands(n: u64) -> String {
    let digits = n.to_string();
    // The leading group has 1 to 3 digits, every later one exactly 3.
    let lead = match digits.len() % 3 {
        0 => 3.min(digits.len()),
        r => r,
    };
    let mut out = digits[..lead].to_owned();
    for group in digits.as_bytes()[lead..].chunks(3) {
        out.push(',');
        out.push_str(std::str::from_utf8(group).unwrap_or_default());
    }
    out
}

fn plural(n: u32) -> &'static str {
    if n == 1 {
        ""
    } else {
        "s"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounds_half_up_like_java() {
        assert_eq!(round_half_up_2dp("0.125"), "0.13");
        assert_eq!(round_half_up_2dp("99.995"), "100.00");
        assert_eq!(round_half_up_2dp("6.530000209808349"), "6.53");
        assert_eq!(round_half_up_2dp("100"), "100.00");
        assert_eq!(round_half_up_2dp("0.004"), "0.00");
        assert_eq!(round_half_up_2dp("-0.001"), "0.00");
        assert_eq!(thousands(30241), "30,241");
        assert_eq!(thousands(999), "999");
    }

    #[test]
    fn percent_like_akka() {
        let run = |activations, accesses| RunResult {
            strategy: "lru".into(),
            limit: 1,
            accesses,
            activations,
            peak_bytes: None,
        };
        assert_eq!(active_percent_2dp(&run(7, 10)), "30.00");
        assert_eq!(active_percent_2dp(&run(0, 3)), "100.00");
        assert_eq!(active_percent_2dp(&run(2, 3)), "33.33");
        assert_eq!(active_percent_2dp(&run(1, 3)), "66.67");
    }
}
