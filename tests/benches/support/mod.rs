//! What the benchmarks of `colo run` processes share: their knobs, the
//! nodes' metrics and memory, and percentiles.

// Each bench is a crate of its own and uses a part of this.
#![allow(dead_code)]

use colo_tests::process::NodeProcess;
use std::time::Duration;

/// A knob of the bench from the environment, or its default.
/// The `--set`s of a node of the sample's users reading `topic` of
/// `shards` partitions, creating its topics, as `cluster`.
pub fn user_node_sets(bootstrap: &str, topic: &str, cluster: &str, shards: u32) -> Vec<String> {
    vec![
        r#"node.entity_types=["user"]"#.to_string(),
        format!("sharding.number_of_shards={shards}"),
        format!(r#"kafka.bootstrap_servers="{bootstrap}""#),
        format!(r#"kafka.cluster="{cluster}""#),
        format!(r#"kafka.topics.user=["{topic}"]"#),
        "kafka.create_topics=true".to_string(),
    ]
}

pub fn env(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The runtime the bench drives its nodes from: two workers, as the
/// machine has two cores.
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime")
}

/// A metric's value on `node` (the sum of its series with `label`); 0 when
/// the node does not answer.
pub async fn metric(node: &NodeProcess, name: &str, label: &str) -> f64 {
    let Ok((_, body)) = colo_tests::http::get(&node.admin, "/metrics").await else {
        return 0.0;
    };
    body.lines()
        .filter(|l| l.starts_with(name) && l.contains(label))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// The node's resident set now, in bytes (`VmRSS`), and its peak
/// (`VmHWM`).
pub fn resident(node: &NodeProcess) -> (u64, u64) {
    let Some(pid) = node.pid() else {
        return (0, 0);
    };
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .map_or(0, |kb| kb * 1024)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

/// The nearest-rank percentile `p` (0 to 100) of `samples`.
pub fn percentile(samples: &[Duration], p: f64) -> Duration {
    let mut sorted = samples.to_vec();
    sorted.sort();
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil().max(1.0) as usize;
    sorted[rank.min(sorted.len()) - 1]
}

/// The CPU time a process has used, user and system, in seconds: where a
/// node's rate is bound by the two cores it shares, this says what each
/// record costs it.
pub fn cpu_seconds(pid: Option<u32>) -> f64 {
    let Some(stat) = pid.and_then(|pid| std::fs::read_to_string(format!("/proc/{pid}/stat")).ok())
    else {
        return f64::NAN;
    };
    // The fields after the command's closing parenthesis; utime and stime
    // are the 14th and 15th of the line, in USER_HZ (100 on Linux).
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest.split_whitespace().collect())
        .unwrap_or_default();
    let ticks = |i: usize| fields.get(i).and_then(|f| f.parse::<f64>().ok());
    match (ticks(11), ticks(12)) {
        (Some(user), Some(system)) => (user + system) / 100.0,
        _ => f64::NAN,
    }
}

/// A node's rate: records per second from its first handled record to the
/// last, and the CPU seconds it used meanwhile per million records.
pub struct Rate {
    pub records_per_second: f64,
    pub cpu_per_million: f64,
}

/// The handled records' counter, as [`through_all`] takes it.
pub const HANDLED: (&str, &str) = ("colo_kafka_records_total{", "outcome=\"handled\"");

/// A node of `program` (`sets`: its `--set`s) in a group of its own, the
/// records already on its topic: its rate from its first handled record
/// to the `count`-th (two minutes at most).
pub async fn through(program: colo_tests::process::Program, sets: &[String], count: u64) -> Rate {
    through_all(program, sets, count, &[HANDLED]).await
}

/// [`through`], until each of `counters` (name, label) reaches `count`.
pub async fn through_all(
    program: colo_tests::process::Program,
    sets: &[String],
    count: u64,
    counters: &[(&str, &str)],
) -> Rate {
    use std::time::Instant;
    let sets: Vec<&str> = sets.iter().map(String::as_str).collect();
    let node = NodeProcess::start_program(program, None, &sets);
    node.await_ready(Duration::from_secs(30)).await;
    let handled = || async {
        let mut least = f64::INFINITY;
        for (name, label) in counters {
            least = least.min(metric(&node, name, label).await);
        }
        least
    };
    let mut first = None;
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut tick = tokio::time::interval(Duration::from_millis(20));
    loop {
        tick.tick().await;
        let done = handled().await;
        if done > 0.0 && first.is_none() {
            first = Some((Instant::now(), cpu_seconds(node.pid())));
        }
        if done as u64 >= count {
            break;
        }
        if Instant::now() > deadline {
            let (_, body) = colo_tests::http::get(&node.admin, "/metrics")
                .await
                .unwrap_or_default();
            let kafka: Vec<&str> = body
                .lines()
                .filter(|l| l.starts_with("colo_kafka") && !l.contains("_bucket"))
                .collect();
            panic!(
                "the node handled only {done} of {count}:\n{}",
                kafka.join("\n")
            );
        }
    }
    let (started, cpu) = first.expect("a record");
    Rate {
        records_per_second: count as f64 / started.elapsed().as_secs_f64(),
        cpu_per_million: (cpu_seconds(node.pid()) - cpu) * 1e6 / count as f64,
    }
}
