//! The examples and the embedded demo, run as a user runs them: each must
//! work, not only compile.

use colo_tests::process::{colo_binary, example_binary, package_example};
use std::process::Command;

fn run(binary: std::path::PathBuf, args: &[&str]) -> String {
    let out = Command::new(&binary)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("run {}: {e}", binary.display()));
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{} {args:?} failed ({}):\n{stdout}\n{}",
        binary.display(),
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// README's example, with Akka's default timings: a brand-new cluster
/// answers at once (the example asks with a 1 s timeout).
#[test]
fn the_quickstart_example_tells_and_asks() {
    let out = run(example_binary("quickstart"), &[]);
    assert_eq!(out.trim(), "user-42 = 5");
}

/// README's durable timers: the reminder comes to the cart passivated
/// meanwhile and to the one still active, and not to the one checked out.
#[test]
fn the_timers_example_reminds_the_carts_left_alone() {
    let out = run(example_binary("timers"), &[]);
    assert_eq!(
        out.trim(),
        "cart-1: 1 item, 1 reminder\ncart-2: 1 item, 0 reminder\ncart-3: 1 item, 1 reminder"
    );
}

/// README's output records: the account that passed the limit emitted
/// one alert, read back with its id; the one that did not, none.
#[test]
fn the_outputs_example_emits_one_alert_with_its_id() {
    let out = run(example_binary("outputs"), &[]);
    let alerts: Vec<&str> = out.lines().filter(|l| l.starts_with("alerts:")).collect();
    assert_eq!(alerts.len(), 1, "{out}");
    assert!(
        alerts[0]
            .starts_with("alerts: ann \"balance passed 1000: 1200\" (colo-output-id: account/"),
        "{out}"
    );
}

#[test]
fn the_custom_allocation_strategy_example_runs() {
    let out = run(package_example("colo-allocation", "custom_strategy"), &[]);
    assert!(!out.trim().is_empty(), "{out}");
}

/// `colo demo`, smaller than its defaults: purchase events through the
/// in-process Kafka cluster into three nodes, a fourth joining and one
/// leaving while records flow, progress printed and `/metrics` served
/// meanwhile, and a summary that found every record handled. A healthy run
/// logs no warning and no error: a new user reads each as something wrong.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_kafka_demo_runs_hands_off_and_handles_every_record() {
    use std::io::BufRead;
    let mut child = Command::new(colo_binary())
        .args([
            "demo",
            "--records",
            "9000",
            "--rate",
            "1000",
            "--users",
            "200",
        ])
        // Twelve partitions: three nodes' ranges and four's overlap, so a
        // range assignment (the mock's own) would move partitions between
        // the three that stay.
        .args(["--partitions", "12"])
        // Lines often enough that a join or a leave, which take a few of
        // the group's heartbeats (half a second or more), has some between
        // its start and its end.
        .args(["--progress-every", "250ms"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("start colo demo");
    let stdout = child.stdout.take().expect("stdout");
    let mut stderr = child.stderr.take().expect("stderr");
    let logged = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = std::io::Read::read_to_string(&mut stderr, &mut text);
        text
    });
    let (lines, mut seen) = tokio::sync::mpsc::unbounded_channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if lines.send(line).is_err() {
                break;
            }
        }
    });
    let mut out = String::new();
    let mut scraped: Option<String> = None;
    let mut checked = false;
    while let Some(line) = seen.recv().await {
        if scraped.is_none() {
            if let Some(address) = line
                .split("http://")
                .nth(1)
                .and_then(|rest| rest.strip_suffix("/metrics"))
            {
                scraped = Some(address.to_string());
            }
        }
        let progress = line.starts_with('[');
        out.push_str(&line);
        out.push('\n');
        // Once records are handled, the metrics show them.
        if progress && !checked && !line.contains("handled      0") {
            if let Some(address) = &scraped {
                checked = true;
                let (status, body) = colo_tests::http::get(address, "/metrics")
                    .await
                    .expect("metrics answer while the demo runs");
                assert_eq!(status, 200);
                assert!(
                    body.contains("colo_kafka_records_total"),
                    "no Kafka metrics:\n{body}"
                );
            }
        }
    }
    let status = child.wait().expect("demo exits");
    let logged = logged.join().expect("stderr read");
    assert!(status.success(), "demo failed:\n{out}\n{logged}");
    let alarming: Vec<&str> = logged
        .lines()
        .filter(|line| line.contains("WARN") || line.contains("ERROR"))
        .collect();
    assert!(
        alarming.is_empty(),
        "a healthy demo logged warnings or errors:\n{}",
        alarming.join("\n")
    );
    assert!(checked, "metrics never scraped:\n{out}");
    for expected in [
        "three nodes consume in the group demo.user",
        "node-4 joins",
        "leaves: its partitions are revoked",
        "summary:",
        "produced 9000 purchase events",
        "every record was handled, each user's in order",
        "every user's totals equal what was produced",
        "every user who spent past the milestone emitted exactly one",
        "the longest pause of a moved shard's records",
        "the longest pause of a shard's records that stayed on its node",
        "s in node-4's join (",
        "s in node-2's leave (",
        // The group's assignment is sticky, as Apache Kafka's: a join
        // moves the joiner's share only, never a partition from one node
        // that stays to another.
        "the others took 0 of one another's",
    ] {
        assert!(out.contains(expected), "no {expected:?} in:\n{out}");
    }
    // A join and a leave take a few of the group's heartbeats: the
    // progress lines, one every 250 ms, go on while they run. A leave once
    // took 0.2 s, with no progress line to print between.
    for (begins, ends) in [(" joins:", " hosts "), (" leaves:", " left in ")] {
        let lines: Vec<&str> = out.lines().collect();
        let from = lines.iter().position(|l| l.contains(begins));
        let to = lines.iter().position(|l| l.contains(ends));
        let (Some(from), Some(to)) = (from, to) else {
            panic!("no {begins:?} or {ends:?} in:\n{out}");
        };
        // The first duration the line that ends it names ("... 2.9s ...").
        let took = lines[to]
            .split_whitespace()
            .find_map(|word| {
                word.trim_end_matches([';', ',', ')'])
                    .strip_suffix('s')?
                    .parse::<f64>()
                    .ok()
            })
            .unwrap_or_else(|| panic!("no duration in {:?}", lines[to]));
        assert!(
            took < 0.5 || lines[from..to].iter().any(|l| l.starts_with('[')),
            "no progress between {begins:?} and {ends:?}, {took} s apart:\n{out}"
        );
    }
}
