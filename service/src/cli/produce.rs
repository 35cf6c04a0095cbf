//! `colo produce`: the sample's purchase events sent to Kafka, with a
//! progress bar, and the totals the users' entities must reach written to
//! a file.

use crate::purchases::{self, ProduceSettings, Totals};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// The flags of `colo produce`.
#[derive(Debug, Clone, clap::Args)]
#[command(group(clap::ArgGroup::new("bound").required(true).args(["count", "duration"])))]
pub struct ProduceArgs {
    /// The brokers, `host:port[,host:port...]`.
    #[arg(long, default_value = "127.0.0.1:9092")]
    pub bootstrap_servers: String,
    /// The topic.
    #[arg(long, default_value = purchases::USER_EVENTS)]
    pub topic: String,
    /// Users the events are spread over (`user-0` ...).
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u64).range(1..=10_000_000))]
    pub users: u64,
    /// User ids are `<prefix><n>`.
    #[arg(long, default_value = "user-")]
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
    /// The same seed sends the same events.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Where to write the totals each user must reach, as JSON.
    #[arg(long, value_name = "FILE.json")]
    pub expected: Option<PathBuf>,
    /// A librdkafka property, `key=value`; repeatable.
    #[arg(long = "client", value_name = "KEY=VALUE", value_parser = key_value)]
    pub client: Vec<(String, String)>,
    /// No progress bar (it is drawn only on a terminal anyway).
    #[arg(long)]
    pub quiet: bool,
}

fn key_value(s: &str) -> Result<(String, String), String> {
    s.split_once('=')
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .filter(|(k, _)| !k.is_empty())
        .ok_or_else(|| format!("`{s}` is not key=value"))
}

/// Why `colo produce` failed.
#[derive(Debug, thiserror::Error)]
pub enum ProduceCliError {
    #[error(transparent)]
    Produce(#[from] purchases::ProduceError),
    #[error("cannot write {path}: {source}")]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// Sends the events, showing progress, and prints what was sent.
///
/// # Errors
/// See [`ProduceCliError`].
pub fn run(args: &ProduceArgs) -> Result<Totals, ProduceCliError> {
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
    };
    let sent = Arc::new(AtomicU64::new(0));
    let done = Arc::new(AtomicBool::new(false));
    let bar = progress_bar(args);
    let ticker = {
        let (bar, sent, done) = (bar.clone(), sent.clone(), done.clone());
        std::thread::spawn(move || {
            while !done.load(Ordering::Relaxed) {
                bar.set_position(sent.load(Ordering::Relaxed));
                std::thread::park_timeout(Duration::from_millis(100));
            }
        })
    };
    let stop = AtomicBool::new(false);
    let result = purchases::produce(&settings, &stop, &sent);
    done.store(true, Ordering::Relaxed);
    ticker.thread().unpark();
    let _ = ticker.join();
    bar.finish_and_clear();
    let produced = result?;
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

fn progress_bar(args: &ProduceArgs) -> indicatif::ProgressBar {
    if args.quiet {
        return indicatif::ProgressBar::hidden();
    }
    let bar = match args.count {
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
