//! `colo simulate` end to end: the binary on small checked-in traces.
//!
//! The expected figures were worked out by hand (see each test). The
//! fixture `tiny.*` holds the accesses 1 2 3 1 2 4 1 2 3 4 in every format.

use colo::passivation::simulation::sharding::{java_string_hash, shard_of};
use std::path::PathBuf;
use std::process::{Command, Output};

fn fixture(name: &str) -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
        .display()
        .to_string()
}

fn colo(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_colo"))
        .arg("simulate")
        .args(args)
        .output()
        .expect("run colo")
}

fn stdout_ok(args: &[&str]) -> String {
    let out = colo(args);
    assert!(
        out.status.success(),
        "colo simulate {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8 output")
}

fn fails_with(args: &[&str], expected: &[&str]) {
    let out = colo(args);
    assert!(!out.status.success(), "colo simulate {args:?} succeeded");
    let stderr = String::from_utf8_lossy(&out.stderr);
    for part in expected {
        assert!(
            stderr.contains(part),
            "stderr of {args:?} lacks {part:?}: {stderr}"
        );
    }
    assert!(!stderr.contains("panicked"), "{stderr}");
}

/// LRU, one shard: at limit 2 every access misses (the loop of 3-4 ids is
/// longer than the cache); at limit 3 the misses are 1 2 3, 4 (evicts 3),
/// 3 (evicts 4), 4 (evicts 1): 6.
/// OPT at limit 2: misses 1 2 3 (bypassed: next use farthest), 4
/// (bypassed), 3, 4: 6. At limit 3: 1 2 3, 4 (bypassed), 4 again: 5.
#[test]
fn csv_for_a_hand_made_trace() {
    let csv = stdout_ok(&[
        "--trace",
        &fixture("tiny.trace"),
        "--strategy",
        "lru,opt",
        "--limits",
        "2,3",
        "--single",
        "--csv",
    ]);
    assert_eq!(
        csv,
        "trace,strategy,limit,accesses,activations,active_percent\n\
         tiny,lru,2,10,10,0.00\n\
         tiny,lru,3,10,6,40.00\n\
         tiny,opt,2,10,6,40.00\n\
         tiny,opt,3,10,5,50.00\n"
    );
}

/// `0 2 0 1 0 2 0` over 2 shards (even ids in shard 0, odd in shard 1),
/// limit 2. Shard 0 starts with the whole limit; when `1` starts shard 1,
/// both shards get 1 before that access is replayed, so shard 0 passivates
/// one entity. LRU: 0, 2, (0 hit), 1 (shard 0 drops 2), (0 hit), 2, 0: 5
/// activations. OPT: 0, 2, (0), 1 (shard 0 drops 2, used later than 0),
/// (0), 2 (bypassed), (0): 4.
#[test]
fn limit_split_recomputed_when_a_shard_starts() {
    let csv = stdout_ok(&[
        "--trace",
        &fixture("sharded.trace"),
        "--strategy",
        "lru,opt",
        "--limits",
        "2",
        "--shards",
        "2",
        "--csv",
    ]);
    assert_eq!(
        csv,
        "trace,strategy,limit,accesses,activations,active_percent\n\
         sharded,lru,2,7,5,28.57\n\
         sharded,opt,2,7,4,42.86\n"
    );
}

/// Two regions, two shards: each shard goes to its own region, each region
/// gets half of the limit 4, so each shard keeps 2: only the first access
/// of 0, 2 and 1 activates.
#[test]
fn regions_split_the_total_limit() {
    let csv = stdout_ok(&[
        "--trace",
        &fixture("sharded.trace"),
        "--strategy",
        "lru,opt",
        "--limits",
        "4",
        "--shards",
        "2",
        "--regions",
        "2",
        "--csv",
    ]);
    assert!(csv.contains("sharded,lru,4,7,3,57.14\n"), "{csv}");
    assert!(csv.contains("sharded,opt,4,7,3,57.14\n"), "{csv}");
}

/// Every reader yields 1 2 3 1 2 4 1 2 3 4, so every format gives the
/// figures of the hand-made trace; compressed input is recognised by its
/// magic bytes.
#[test]
fn every_reader_reads_the_same_accesses() {
    let cases: &[(&str, Option<&str>)] = &[
        ("tiny.trace", None),
        ("tiny.trace.gz", None),
        ("tiny.trace.xz", None),
        ("tiny.txt", None),
        ("tiny.trace", Some("simple")),
        ("tiny.lirs2", None),
        ("tiny.corda", None),
        ("tiny.corda.gz", Some("corda")),
        ("tiny.arc", None),
        // The broader corpus' formats, told by the folder they are in (as
        // the published corpus is laid out) or named.
        ("address/tiny.trace", None),
        ("address/tiny.trace", Some("address")),
        ("adapt_size/tiny.trace", None),
        ("cache2k/tiny.trace", None),
        ("scarab/tiny.trace", None),
        ("scarab/tiny.trace", Some("scarab")),
    ];
    for (file, format) in cases {
        let path = fixture(file);
        let mut args = vec![
            "--trace",
            &path,
            "--strategy",
            "lru,opt",
            "--limits",
            "3",
            "--single",
            "--csv",
        ];
        if let Some(format) = format {
            args.extend(["--format", format]);
        }
        let csv = stdout_ok(&args);
        // A trace with sizes (adapt-size) adds the peak bytes held after
        // the columns every format has.
        let rows: Vec<String> = csv
            .lines()
            .skip(1)
            .map(|row| {
                let columns: Vec<&str> = row.split(',').collect();
                columns[1..6].join(",")
            })
            .collect();
        assert_eq!(rows, ["lru,3,10,6,40.00", "opt,3,10,5,50.00"], "{file}");
    }
}

/// `5 CRLF, * CRLF, CRLF, 7 CRLF, 5`: `*` is skipped, the blank line is the
/// id "" (as in Akka's reader), CR is dropped, and the last line needs no
/// newline: accesses "5" "" "7" "5", 3 activations.
#[test]
fn lirs_keeps_blank_lines_and_skips_stars() {
    let csv = stdout_ok(&[
        "--trace",
        &fixture("marks.trace"),
        "--strategy",
        "opt",
        "--limits",
        "10",
        "--single",
        "--csv",
    ]);
    assert!(csv.ends_with("marks,opt,10,4,3,25.00\n"), "{csv}");
}

#[test]
fn java_string_hash_vectors() {
    assert_eq!(java_string_hash("0"), 48);
    assert_eq!(java_string_hash("10"), 1567);
    assert_eq!(java_string_hash("abc"), 96354);
    assert_eq!(java_string_hash(""), 0);
    assert_eq!(java_string_hash("1234567890"), -2_054_162_789);
    assert_eq!(java_string_hash("polygenelubricants"), i32::MIN);
    // Java: Math.abs(-2054162789 % 10) == 9
    assert_eq!(shard_of("1234567890", 10), 9);
    assert_eq!(shard_of("0", 10), 8);
    assert_eq!(shard_of("10", 10), 7);
}

#[test]
fn readable_table_and_svg_plot() {
    let plot = std::env::temp_dir().join(format!("colo-simulate-{}.svg", std::process::id()));
    let plot_arg = plot.display().to_string();
    let table = stdout_ok(&[
        "--trace",
        &fixture("tiny.trace"),
        "--strategy",
        "opt,lru",
        "--limits",
        "2,3",
        "--single",
        "--plot",
        &plot_arg,
    ]);
    assert!(
        table.starts_with("tiny (lirs): 10 accesses, 4 distinct ids"),
        "{table}"
    );
    assert!(
        table
            .lines()
            .any(|l| l.starts_with("opt") && l.ends_with("40.00   50.00")),
        "{table}"
    );
    let svg = std::fs::read_to_string(&plot).expect("plot written");
    let _ = std::fs::remove_file(&plot);
    assert!(svg.starts_with("<svg"), "{svg}");
    assert_eq!(svg.matches("<polyline").count(), 2, "{svg}");
    assert!(
        svg.contains(">opt</text>") && svg.contains(">lru</text>"),
        "{svg}"
    );
}

#[test]
fn unknown_strategy_is_refused() {
    fails_with(
        &[
            "--trace",
            &fixture("tiny.trace"),
            "--strategy",
            "lru,fifo",
            "--limits",
            "2",
        ],
        &["unknown strategy 'fifo'", "known: opt, opt-seen, lru"],
    );
}

#[test]
fn missing_file_is_refused() {
    fails_with(
        &[
            "--trace",
            &fixture("nope.trace"),
            "--strategy",
            "lru",
            "--limits",
            "2",
        ],
        &["cannot read trace", "nope.trace"],
    );
}

#[test]
fn binary_data_read_as_lirs_is_refused() {
    fails_with(
        &[
            "--trace",
            &fixture("tiny.lirs2"),
            "--format",
            "lirs",
            "--strategy",
            "lru",
            "--limits",
            "2",
        ],
        &["not valid lirs: line 1", "not a decimal id"],
    );
}

#[test]
fn truncated_lirs2_record_is_refused() {
    fails_with(
        &[
            "--trace",
            &fixture("truncated.lirs2"),
            "--strategy",
            "lru",
            "--limits",
            "2",
        ],
        &["not valid lirs2: byte offset 4", "2 of its 4 bytes"],
    );
}

#[test]
fn corrupt_gzip_is_refused() {
    fails_with(
        &[
            "--trace",
            &fixture("truncated.trace.gz"),
            "--strategy",
            "lru",
            "--limits",
            "2",
        ],
        &["cannot read trace", "corrupt or truncated gzip data"],
    );
}

#[test]
fn bad_arc_line_is_refused() {
    fails_with(
        &[
            "--trace",
            &fixture("bad.arc"),
            "--strategy",
            "lru",
            "--limits",
            "2",
        ],
        &[
            "not valid arc: line 2",
            "expected \"start count\"",
            "foo bar",
        ],
    );
}

/// `5 100`, `5 200`, `5 100`: one ID at two sizes is two entities, as
/// Caffeine reads the CDN trace (40,240 pairs where there are 36,815 IDs).
#[test]
fn adapt_size_ids_are_id_and_size_pairs() {
    let csv = stdout_ok(&[
        "--trace",
        &fixture("adapt_size/sizes.trace"),
        "--strategy",
        "opt",
        "--limits",
        "10",
        "--single",
        "--csv",
    ]);
    // A trace with sizes adds the most bytes held at once: both pairs.
    assert!(csv.ends_with("sizes,opt,10,3,2,33.33,300\n"), "{csv}");
}

/// `--weighed`: the limit is a memory budget, each entity weighs its size.
/// At 250 bytes, LRU holds `5:100` and `5:200` (300) only for a moment: the
/// 200-byte one pushes the other out, and `5:100` back pushes it out in
/// turn. Three activations, never more than 200 bytes held after an
/// access. Counted by entities, a limit of 2 holds both (300 bytes).
#[test]
fn weighed_runs_keep_the_budget_a_count_does_not() {
    let weighed = stdout_ok(&[
        "--trace",
        &fixture("adapt_size/sizes.trace"),
        "--strategy",
        "lru",
        "--limits",
        "250",
        "--single",
        "--weighed",
        "--csv",
    ]);
    assert!(
        weighed.ends_with("sizes,lru,250,3,3,0.00,200\n"),
        "{weighed}"
    );
    let counted = stdout_ok(&[
        "--trace",
        &fixture("adapt_size/sizes.trace"),
        "--strategy",
        "lru",
        "--limits",
        "2",
        "--single",
        "--csv",
    ]);
    assert!(
        counted.ends_with("sizes,lru,2,3,2,33.33,300\n"),
        "{counted}"
    );
    let table = stdout_ok(&[
        "--trace",
        &fixture("adapt_size/sizes.trace"),
        "--strategy",
        "lru",
        "--limits",
        "250",
        "--weighed",
    ]);
    assert!(table.contains("active % \\ budget (bytes)"), "{table}");
    assert!(table.contains("peak MiB held"), "{table}");
}

#[test]
fn a_weighed_run_needs_sizes_and_no_opt() {
    fails_with(
        &[
            "--trace",
            &fixture("tiny.trace"),
            "--strategy",
            "lru",
            "--limits",
            "100",
            "--weighed",
        ],
        &["--weighed needs a trace with sizes (adapt-size)"],
    );
    fails_with(
        &[
            "--trace",
            &fixture("adapt_size/sizes.trace"),
            "--strategy",
            "lru,opt",
            "--limits",
            "100",
            "--weighed",
        ],
        &["OPT knows no sizes"],
    );
}

#[test]
fn bad_address_line_is_refused() {
    fails_with(
        &[
            "--trace",
            &fixture("bad.address"),
            "--format",
            "address",
            "--strategy",
            "lru",
            "--limits",
            "2",
        ],
        &[
            "bad.address is not valid address: line 2",
            "expected \"TYPE 0xADDRESS SIZE\"",
            "l zz 4",
        ],
    );
}

#[test]
fn bad_adapt_size_line_is_refused() {
    fails_with(
        &[
            "--trace",
            &fixture("bad.adapt-size"),
            "--format",
            "adapt-size",
            "--strategy",
            "lru",
            "--limits",
            "2",
        ],
        &[
            "bad.adapt-size is not valid adapt-size: line 2",
            "TIMESTAMP ID SIZE",
            "2 5",
        ],
    );
}

#[test]
fn truncated_cache2k_record_is_refused() {
    fails_with(
        &[
            "--trace",
            &fixture("truncated.cache2k"),
            "--format",
            "cache2k",
            "--strategy",
            "lru",
            "--limits",
            "2",
        ],
        &[
            "truncated.cache2k is not valid cache2k: byte offset 4",
            "2 of its 4 bytes",
        ],
    );
}

/// A memory trace read as lirs (a `.trace` outside a format's folder)
/// fails on its first line, naming the formats to try.
#[test]
fn an_address_trace_read_as_lirs_names_the_other_formats() {
    fails_with(
        &[
            "--trace",
            &fixture("address/tiny.trace"),
            "--format",
            "lirs",
            "--strategy",
            "lru",
            "--limits",
            "2",
        ],
        &["not valid lirs: line 1", "not a decimal id", "address"],
    );
}

#[test]
fn unknown_format_is_refused() {
    let manifest = format!("{}/Cargo.toml", env!("CARGO_MANIFEST_DIR"));
    fails_with(
        &["--trace", &manifest, "--strategy", "lru", "--limits", "2"],
        &["cannot tell the format", "--format"],
    );
    fails_with(
        &[
            "--trace",
            &fixture("tiny.trace"),
            "--format",
            "csv",
            "--strategy",
            "lru",
            "--limits",
            "2",
        ],
        &["unknown trace format 'csv'"],
    );
}

/// The corpus figures PASSIVATION.md reports (`scripts/passivation_corpus.py`
/// writes them): by row (trace, shards, limit), each strategy's active %.
fn corpus(
) -> std::collections::BTreeMap<(String, u32, u64), std::collections::BTreeMap<String, f64>> {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../scripts/passivation_corpus.csv"
    );
    let text = std::fs::read_to_string(path).expect("the corpus figures");
    let mut lines = text.lines();
    assert_eq!(
        lines.next(),
        Some("trace,family,split,shards,limit,strategy,active_percent")
    );
    let mut rows = std::collections::BTreeMap::<_, std::collections::BTreeMap<_, _>>::new();
    for line in lines {
        let f: Vec<&str> = line.split(',').collect();
        let key = (
            f[0].to_string(),
            f[3].parse().unwrap(),
            f[4].parse().unwrap(),
        );
        rows.entry(key)
            .or_default()
            .insert(f[5].to_string(), f[6].parse().unwrap());
    }
    rows
}

/// The `default` preset obeys PASSIVATION.md's rule on the whole corpus:
/// the policy closest to OPT on average among those never more than 1
/// point below the better of LRU and W-TinyLFU with hill climbing on any
/// row, or Akka's default strategy if no policy qualifies.
#[test]
fn the_default_preset_is_the_one_the_corpus_rule_picks() {
    use colo::passivation::ReplacementSettings;
    let rows = corpus();
    assert_eq!(rows.len(), 200, "rows of the corpus");
    let policies: Vec<&String> = rows
        .values()
        .next()
        .unwrap()
        .keys()
        .filter(|s| !s.starts_with("opt"))
        .collect();
    let mut chosen: Option<(&str, f64)> = None;
    for policy in policies {
        let qualifies = rows
            .values()
            .all(|v| v[policy] >= v["lru"].max(v["w-tinylfu-hc"]) - 1.0);
        let mean = rows.values().map(|v| v["opt"] - v[policy]).sum::<f64>() / rows.len() as f64;
        if qualifies && chosen.is_none_or(|(_, best)| mean < best) {
            chosen = Some((policy, mean));
        }
    }
    let chosen = chosen.map_or("default-strategy", |(p, _)| p);
    assert_eq!(
        ReplacementSettings::preset("default"),
        ReplacementSettings::preset(chosen),
        "the rule picks {chosen}"
    );
}

/// The recorded corpus figures are what this simulator gives: cs with 5
/// shards, every strategy, replayed now.
#[test]
fn the_corpus_figures_are_reproduced() {
    let rows = corpus();
    let cs: Vec<_> = rows
        .iter()
        .filter(|((t, s, _), _)| t == "cs" && *s == 5)
        .collect();
    assert_eq!(cs.len(), 6);
    let limits: Vec<String> = cs.iter().map(|((_, _, l), _)| l.to_string()).collect();
    let strategies: Vec<&str> = cs[0].1.keys().map(String::as_str).collect();
    let trace = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../shared/traces/lirs/cs.trace.gz"
    );
    let csv = stdout_ok(&[
        "--trace",
        trace,
        "--strategy",
        &strategies.join(","),
        "--limits",
        &limits.join(","),
        "--shards",
        "5",
        "--csv",
    ]);
    for line in csv.lines().skip(1) {
        let f: Vec<&str> = line.split(',').collect();
        let recorded = rows[&("cs".to_string(), 5, f[2].parse().unwrap())][f[1]];
        assert_eq!(format!("{recorded:.2}"), f[5], "{line}");
    }
}
