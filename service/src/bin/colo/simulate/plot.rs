//! A small hand-written SVG chart of active % against limit, one line per
//! strategy, with a legend. Limits are spaced evenly in increasing order
//! (they usually double), the y axis spans whole tens around the data.

use super::Report;
use std::fmt::Write;

const WIDTH: f64 = 760.0;
const HEIGHT: f64 = 440.0;
const LEFT: f64 = 60.0;
const RIGHT: f64 = 170.0;
const TOP: f64 = 40.0;
const BOTTOM: f64 = 50.0;
/// Distinguishable colours (Tableau 10), cycled past ten strategies.
const COLOURS: [&str; 10] = [
    "#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7",
    "#9c755f", "#bab0ac",
];

/// The chart as an SVG document.
pub fn svg(report: &Report) -> String {
    let mut limits: Vec<usize> = report.runs.iter().map(|r| r.limit).collect();
    limits.sort_unstable();
    limits.dedup();
    let mut strategies: Vec<&str> = Vec::new();
    for run in &report.runs {
        if !strategies.contains(&run.strategy.as_str()) {
            strategies.push(&run.strategy);
        }
    }
    let values = report.runs.iter().map(|r| r.active_percent());
    let low = values.clone().fold(f64::INFINITY, f64::min);
    let high = values.fold(f64::NEG_INFINITY, f64::max);
    let (y_min, y_max) = if low.is_finite() {
        let lo = ((low / 10.0).floor() * 10.0).max(0.0);
        let hi = ((high / 10.0).ceil() * 10.0).min(100.0);
        if hi > lo {
            (lo, hi)
        } else {
            (lo.min(90.0), lo.min(90.0) + 10.0)
        }
    } else {
        (0.0, 100.0)
    };
    let plot_w = WIDTH - LEFT - RIGHT;
    let plot_h = HEIGHT - TOP - BOTTOM;
    let x_of = |limit: usize| {
        let i = limits.iter().position(|&l| l == limit).unwrap_or(0);
        if limits.len() <= 1 {
            LEFT + plot_w / 2.0
        } else {
            LEFT + plot_w * i as f64 / (limits.len() - 1) as f64
        }
    };
    let y_of = |percent: f64| TOP + plot_h * (1.0 - (percent - y_min) / (y_max - y_min));

    let mut out = String::new();
    // Writing to a String cannot fail.
    let _ = writeln!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" viewBox="0 0 {WIDTH} {HEIGHT}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(out, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let _ = writeln!(
        out,
        r#"<text x="{}" y="22" text-anchor="middle" font-size="15">{}: active % by limit ({} shard{}, {} region{})</text>"#,
        LEFT + plot_w / 2.0,
        escape(&report.trace),
        report.shards,
        if report.shards == 1 { "" } else { "s" },
        report.regions,
        if report.regions == 1 { "" } else { "s" },
    );
    // Horizontal grid and y labels, every 10 points.
    let mut tick = y_min;
    while tick <= y_max + 1e-9 {
        let y = y_of(tick);
        let _ = writeln!(
            out,
            r##"<line x1="{LEFT}" y1="{y:.1}" x2="{:.1}" y2="{y:.1}" stroke="#ddd"/><text x="{:.1}" y="{:.1}" text-anchor="end">{tick:.0}</text>"##,
            LEFT + plot_w,
            LEFT - 8.0,
            y + 4.0
        );
        tick += 10.0;
    }
    for &limit in &limits {
        let x = x_of(limit);
        let _ = writeln!(
            out,
            r##"<line x1="{x:.1}" y1="{TOP}" x2="{x:.1}" y2="{:.1}" stroke="#eee"/><text x="{x:.1}" y="{:.1}" text-anchor="middle">{limit}</text>"##,
            TOP + plot_h,
            TOP + plot_h + 18.0
        );
    }
    let _ = writeln!(
        out,
        r##"<rect x="{LEFT}" y="{TOP}" width="{plot_w}" height="{plot_h}" fill="none" stroke="#888"/>"##
    );
    let _ = writeln!(
        out,
        r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">active-entity limit</text>"#,
        LEFT + plot_w / 2.0,
        HEIGHT - 12.0
    );
    let _ = writeln!(
        out,
        r#"<text transform="translate(16 {:.1}) rotate(-90)" text-anchor="middle">active %</text>"#,
        TOP + plot_h / 2.0
    );
    for (i, strategy) in strategies.iter().enumerate() {
        let colour = COLOURS[i % COLOURS.len()];
        let mut points: Vec<(f64, f64)> = report
            .runs
            .iter()
            .filter(|r| r.strategy == *strategy)
            .map(|r| (x_of(r.limit), y_of(r.active_percent())))
            .collect();
        points.sort_by(|a, b| a.0.total_cmp(&b.0));
        let path: Vec<String> = points
            .iter()
            .map(|(x, y)| format!("{x:.1},{y:.1}"))
            .collect();
        let _ = writeln!(
            out,
            r#"<polyline points="{}" fill="none" stroke="{colour}" stroke-width="2"/>"#,
            path.join(" ")
        );
        for (x, y) in &points {
            let _ = writeln!(
                out,
                r#"<circle cx="{x:.1}" cy="{y:.1}" r="3" fill="{colour}"/>"#
            );
        }
        let ly = TOP + 10.0 + 20.0 * i as f64;
        let lx = WIDTH - RIGHT + 20.0;
        let _ = writeln!(
            out,
            r#"<line x1="{lx}" y1="{ly}" x2="{}" y2="{ly}" stroke="{colour}" stroke-width="3"/><text x="{}" y="{}">{}</text>"#,
            lx + 24.0,
            lx + 30.0,
            ly + 4.0,
            escape(strategy)
        );
    }
    out.push_str("</svg>\n");
    out
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}
