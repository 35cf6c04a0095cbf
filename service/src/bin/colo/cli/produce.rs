//! `colo produce`: records sent to Kafka with a progress bar, keyed by
//! entity id and partitioned with Kafka's murmur2 partitioner, so each
//! lands in its entity's shard. What is sent: the sample's purchase events
//! (`produce/events.rs`, with the totals the users' entities must reach
//! written to a file), or
//! records of one's own, from a file or from a payload template
//! (`produce/own_records.rs`, sent by `produce/sender.rs`).

pub(crate) mod events;
mod own_records;
mod sender;

pub use colo_connectors::PARTITIONER;
use own_records::{read_records, Template};
pub use sender::{check_partitioner, send, SendError, SendSettings, Sent};

use colo::process::samples::purchases::{self, Totals};
use events::ProduceSettings;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// The flags of `colo produce`.
#[derive(Debug, Clone, clap::Args)]
#[command(group(clap::ArgGroup::new("bound").required(true).args(["count", "duration", "records"])))]
pub struct ProduceArgs {
    /// The brokers, `host:port[,host:port...]`.
    #[arg(long, default_value = "127.0.0.1:9092")]
    pub bootstrap_servers: String,
    /// The topic (the sample's by default).
    #[arg(long, default_value = purchases::USER_EVENTS)]
    pub topic: String,
    /// Records of one's own instead of the sample's, one a line: a JSON
    /// object `{"key": "<entity id>", "value": <JSON payload>}`, or
    /// `<entity id><TAB><JSON payload>`; each payload is sent as written.
    #[arg(long, value_name = "FILE")]
    pub records: Option<PathBuf>,
    /// Generated records of one's own instead of the sample's: this JSON
    /// payload with `{key}` (the record's key), `{number}` (its number, from 1)
    /// and `{seq}` (its number among its key's records, from 1) filled in;
    /// keys go round the --keys ids.
    #[arg(long, value_name = "TEMPLATE", conflicts_with = "records")]
    pub payload: Option<String>,
    /// Users (keys) the records are spread over (`user-0` ...).
    #[arg(long, visible_alias = "keys", default_value_t = 1000, conflicts_with = "records", value_parser = clap::value_parser!(u64).range(1..=10_000_000))]
    pub users: u64,
    /// User ids (keys) are `<prefix><n>`.
    #[arg(
        long,
        visible_alias = "key-prefix",
        default_value = "user-",
        conflicts_with = "records"
    )]
    pub user_prefix: String,
    /// Records per second at most; unset: as fast as the broker takes them.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    pub rate: Option<u64>,
    /// Records to send.
    #[arg(long)]
    pub count: Option<u64>,
    /// How long to send, e.g. "30s".
    #[arg(long, value_parser = humantime::parse_duration)]
    pub duration: Option<Duration>,
    /// The same seed sends the same sample events.
    #[arg(long, default_value_t = 1, conflicts_with_all = ["records", "payload"])]
    pub seed: u64,
    /// Where to write the totals each user must reach, as JSON (the sample
    /// only).
    #[arg(long, value_name = "FILE.json", conflicts_with_all = ["records", "payload"])]
    pub expected: Option<PathBuf>,
    /// A librdkafka property, `key=value`; repeatable. `partitioner` may
    /// only be murmur2's: colo's shards are murmur2 partitions.
    #[arg(long = "client", value_name = "KEY=VALUE", value_parser = key_value)]
    pub client: Vec<(String, String)>,
    /// No progress bar (it is drawn only on a terminal anyway).
    #[arg(long)]
    pub quiet: bool,
    /// Exit when the process that started this one is gone (for test
    /// harnesses: a producer must not go on loading the broker after the
    /// run that started it was killed).
    #[arg(long, hide = true)]
    pub exit_with_parent: bool,
}

pub(super) fn key_value(s: &str) -> Result<(String, String), String> {
    s.split_once('=')
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .filter(|(k, _)| !k.is_empty())
        .ok_or_else(|| format!("`{s}` is not key=value"))
}

/// Why `colo produce` failed.
#[derive(Debug, thiserror::Error)]
pub enum ProduceCliError {
    #[error(transparent)]
    Produce(#[from] colo_connectors::ProduceError),
    /// Records of one's own could not be read or sent.
    #[error(transparent)]
    Send(#[from] SendError),
    #[error("cannot write {path}: {source}")]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// Sends the records, showing progress, and prints what was sent.
///
/// # Errors
/// See [`ProduceCliError`].
pub fn run(args: &ProduceArgs) -> Result<(), ProduceCliError> {
    check_partitioner(&args.client).map_err(SendError::Input)?;
    if args.exit_with_parent {
        exit_with_the_parent();
    }
    if args.records.is_some() || args.payload.is_some() {
        return run_own(args).map(drop);
    }
    run_sample(args).map(drop)
}

/// Watches, on a thread of its own, for the parent to go (its process
/// id changes as this one is adopted), and exits then.
fn exit_with_the_parent() {
    #[cfg(unix)]
    {
        let parent = std::os::unix::process::parent_id();
        std::thread::spawn(move || loop {
            std::thread::sleep(Duration::from_millis(500));
            if std::os::unix::process::parent_id() != parent {
                eprintln!("colo produce: the process that started it is gone; exiting");
                std::process::exit(1);
            }
        });
    }
}

/// Records of one's own: the file's, or the template's.
fn run_own(args: &ProduceArgs) -> Result<Sent, ProduceCliError> {
    let settings = SendSettings {
        bootstrap_servers: args.bootstrap_servers.clone(),
        topic: args.topic.clone(),
        client: args.client.clone(),
        rate: args.rate,
        duration: args.duration,
    };
    let sent = Arc::new(AtomicU64::new(0));
    let result = if let Some(path) = &args.records {
        // Read whole before anything is sent: a bad line stops the command
        // with nothing half-sent.
        let records = read_records(path).map_err(SendError::Input)?;
        let count = records.len() as u64;
        with_progress(progress_bar(args.quiet, Some(count)), &sent, || {
            send(&settings, records.into_iter().map(Ok), &sent)
        })
    } else {
        let text = args.payload.as_deref().unwrap_or_default();
        let template =
            Template::new(text, &args.user_prefix, args.users).map_err(SendError::Input)?;
        let records = (1..).map(|n| template.record(n));
        with_progress(progress_bar(args.quiet, args.count), &sent, || {
            match args.count {
                Some(count) => send(
                    &settings,
                    records.take(usize::try_from(count).unwrap_or(usize::MAX)),
                    &sent,
                ),
                None => send(&settings, records, &sent),
            }
        })
    };
    let done = result?;
    let seconds = done.elapsed.as_secs_f64().max(1e-9);
    println!(
        "sent {} records of {} keys to {} in {:.1} s ({:.0} records/s), partitioned with {PARTITIONER}",
        done.records,
        done.keys,
        args.topic,
        seconds,
        done.records as f64 / seconds
    );
    Ok(done)
}

/// Runs `work` while a thread draws `sent` on `bar`.
fn with_progress<T>(
    bar: indicatif::ProgressBar,
    sent: &Arc<AtomicU64>,
    work: impl FnOnce() -> T,
) -> T {
    let done = Arc::new(AtomicBool::new(false));
    let ticker = {
        let (bar, sent, done) = (bar.clone(), sent.clone(), done.clone());
        std::thread::spawn(move || {
            while !done.load(Ordering::Relaxed) {
                bar.set_position(sent.load(Ordering::Relaxed));
                std::thread::park_timeout(Duration::from_millis(100));
            }
        })
    };
    let result = work();
    done.store(true, Ordering::Relaxed);
    ticker.thread().unpark();
    let _ = ticker.join();
    bar.finish_and_clear();
    result
}

/// SIGTERM or Ctrl-C ends the run early, as its count or its duration
/// would: what was sent is flushed, and the totals written are those of
/// the events sent (a run stopped by hand keeps what it produced).
fn stop_on_signal(stop: Arc<AtomicBool>) {
    std::thread::spawn(move || {
        let Ok(runtime) = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
        else {
            return;
        };
        let signalled = runtime.block_on(async {
            use tokio::signal::unix::{signal, SignalKind};
            let Ok(mut term) = signal(SignalKind::terminate()) else {
                return tokio::signal::ctrl_c().await.is_ok();
            };
            tokio::select! {
                _ = term.recv() => true,
                interrupted = tokio::signal::ctrl_c() => interrupted.is_ok(),
            }
        });
        if signalled {
            stop.store(true, Ordering::Relaxed);
        }
    });
}

/// The sample's purchase events.
fn run_sample(args: &ProduceArgs) -> Result<Totals, ProduceCliError> {
    let settings = ProduceSettings {
        bootstrap_servers: args.bootstrap_servers.clone(),
        topic: args.topic.clone(),
        client: args.client.clone(),
        users: usize::try_from(args.users).unwrap_or(usize::MAX),
        user_prefix: args.user_prefix.clone(),
        rate: args.rate,
        count: args.count,
        duration: args.duration,
        seed: args.seed,
        partitioning: colo_connectors::Partitioning::Shards,
    };
    let sent = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    stop_on_signal(stop.clone());
    let produced = with_progress(progress_bar(args.quiet, args.count), &sent, || {
        events::produce(&settings, &stop, &sent)
    })?;
    let totals = produced.totals;
    let seconds = produced.elapsed.as_secs_f64().max(1e-9);
    println!(
        "sent {} purchase events of {} users to {} in {:.1} s ({:.0} records/s)",
        totals.records,
        totals.users.len(),
        args.topic,
        seconds,
        totals.records as f64 / seconds
    );
    if let Some(path) = &args.expected {
        let json = serde_json::to_string_pretty(&totals).map_err(|e| ProduceCliError::Write {
            path: path.clone(),
            source: std::io::Error::other(e),
        })?;
        std::fs::write(path, json + "\n").map_err(|source| ProduceCliError::Write {
            path: path.clone(),
            source,
        })?;
        println!("expected totals per user: {}", path.display());
    }
    Ok(totals)
}

fn progress_bar(quiet: bool, count: Option<u64>) -> indicatif::ProgressBar {
    if quiet {
        return indicatif::ProgressBar::hidden();
    }
    let bar = match count {
        Some(count) => indicatif::ProgressBar::new(count),
        None => indicatif::ProgressBar::no_length(),
    };
    let style = indicatif::ProgressStyle::with_template(
        "{spinner} {pos}/{len} records sent, {per_sec}, {elapsed_precise}",
    );
    if let Ok(style) = style {
        bar.set_style(style);
    }
    bar
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Debug, clap::Parser)]
    struct Cli {
        #[command(flatten)]
        produce: ProduceArgs,
    }

    fn parse(args: &[&str]) -> Result<ProduceArgs, String> {
        Cli::try_parse_from(std::iter::once("produce").chain(args.iter().copied()))
            .map(|cli| cli.produce)
            .map_err(|e| e.to_string())
    }

    #[test]
    fn own_records_come_from_a_file_or_a_template_and_the_sample_keeps_its_flags() {
        let args = parse(&["--records", "r.jsonl", "--rate", "10"]).unwrap();
        assert_eq!(args.records, Some(PathBuf::from("r.jsonl")));
        let args = parse(&[
            "--payload",
            r#"{"celsius": {seq}.5}"#,
            "--keys",
            "10",
            "--key-prefix",
            "sensor-",
            "--duration",
            "5s",
        ])
        .unwrap();
        assert_eq!((args.users, args.user_prefix.as_str()), (10, "sensor-"));
        let args = parse(&["--count", "5", "--expected", "e.json"]).unwrap();
        assert!(args.records.is_none() && args.payload.is_none());
        for (bad, why) in [
            (&["--payload", "{}"][..], "--count"),
            (&["--records", "r", "--count", "5"], "cannot be used with"),
            (
                &["--records", "r", "--payload", "{}"],
                "cannot be used with",
            ),
            (&["--records", "r", "--keys", "3"], "cannot be used with"),
            (
                &["--payload", "{}", "--count", "1", "--expected", "e"],
                "cannot be used with",
            ),
        ] {
            let err = parse(bad).expect_err(why);
            assert!(err.contains(why), "{bad:?}: {err}");
        }
    }
}
