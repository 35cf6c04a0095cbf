//! The `colo` command: `colo run` (a node of the built-in or configured
//! entity types), the client subcommands, `colo produce`, the embedded
//! demo and the passivation simulator. The library it runs on is `colo`;
//! these modules are the command's own.

mod cli;
mod demo;
mod simulate;

use clap::{Parser, Subcommand};
use simulate::{SimulateOptions, TraceFormat};
use std::path::PathBuf;
use std::process::ExitCode;

/// A record is allocated on the consumer's thread and freed on a runtime
/// worker (its key, payload, decoded message and reply slot): the system
/// allocator takes a lock of the allocating thread's arena for each such
/// free, which cost about a fifth of a node's time at full Kafka
/// throughput. mimalloc frees across threads without it.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(
    name = "colo",
    version,
    about = "Stateful, sharded entities next to Kafka"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// The Kafka demo: purchase events through an in-process Kafka cluster
    /// into three in-process nodes; a fourth joins and one leaves while
    /// records flow; progress lines, /metrics, and a summary that checks
    /// every record was handled and every (durable) user's totals.
    Demo {
        /// Purchase events to produce.
        #[arg(long, default_value_t = 30_000, value_parser = clap::value_parser!(u64).range(1..))]
        records: u64,
        /// Users they are spread over.
        #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
        users: u64,
        /// Records per second.
        #[arg(long, default_value_t = 1500, value_parser = clap::value_parser!(u64).range(1..))]
        rate: u64,
        /// Partitions of user-events (= shards).
        #[arg(long, default_value_t = 24, value_parser = clap::value_parser!(u32).range(1..=10_000))]
        partitions: u32,
        /// Where /metrics is served (port 0: any free port).
        #[arg(long, default_value = "127.0.0.1:0")]
        metrics_listen: std::net::SocketAddr,
        /// How often a progress line is printed (2s, 500ms, ...).
        #[arg(long, default_value = "2s", value_parser = progress_period)]
        progress_every: std::time::Duration,
    },
    /// Replays a cache-replacement trace through passivation strategies
    /// under Akka's sharding emulation and prints each one's active rate
    /// (the share of messages that found their entity already active).
    Simulate(SimulateArgs),
    /// Runs a node: gRPC for other nodes and clients, admin HTTP for
    /// metrics and health, a region per configured entity type.
    Run(colo::process::config::RunArgs),
    /// Sends records to a topic, each to its key's murmur2 partition: the
    /// sample's purchase events (protobuf, keyed by user id, writing the
    /// totals each user must reach), or records of one's own from a file
    /// (--records) or a template (--payload).
    Produce(cli::produce::ProduceArgs),
    /// Asks every entity a file names and compares each reply with the one
    /// it expects: the sample's users against the totals `colo produce
    /// --expected` wrote, or, with --ask, any entity type's against a JSON
    /// object of entity id → expected reply. Prints how many match and
    /// each that does not; exits non-zero unless all match.
    Verify(cli::verify::VerifyArgs),
    /// Deletes a stopped cluster's internal data from its brokers: its
    /// coordinator topic and, with --state, its changelog topics. Refuses
    /// while any node of the cluster runs; --dry-run lists what it would
    /// delete.
    RemoveInternalData(cli::remove_internal_data::RemoveArgs),
    #[command(flatten)]
    Client(cli::client::ClientCommand),
}

#[derive(clap::Args)]
struct SimulateArgs {
    /// The trace file; gzip or xz input is decompressed transparently.
    #[arg(long)]
    trace: PathBuf,
    /// lirs, lirs2, corda, arc, simple, address, adapt-size, cache2k or
    /// scarab. Default: from the file name once a .gz/.xz suffix is
    /// dropped (.lirs is lirs, .lirs2 lirs2, .corda corda, .arc arc, .txt
    /// simple), else from a folder named after a format (address/,
    /// adapt_size/, cache2k/, scarab/, corda/, lirs/), else .trace is lirs;
    /// anything else needs --format.
    #[arg(long, value_parser = parse_format)]
    format: Option<TraceFormat>,
    /// Comma-separated: opt, opt-seen, lru, slru, s4lru, mru, lfu, lfuda,
    /// w-tinylfu, w-tinylfu-hc, default-strategy, default (both Akka's
    /// default strategy, = w-tinylfu-hc), lirs, lirs-arc, lirs-tinylfu,
    /// ensemble, next-use, follow-best.
    #[arg(long, value_delimiter = ',', required = true)]
    strategy: Vec<String>,
    /// Comma-separated active-entity limits, totals across regions (with
    /// --weighed: memory budgets in bytes).
    #[arg(long, value_delimiter = ',', required = true,
          value_parser = clap::value_parser!(u64).range(1..))]
    limits: Vec<u64>,
    /// Regions the shards are allocated to (least shards first).
    #[arg(long, default_value_t = 1, conflicts_with = "single",
          value_parser = clap::value_parser!(u32).range(1..=i32::MAX as i64))]
    regions: u32,
    /// Shards ids are spread over: abs(javaStringHashCode(id) % shards).
    #[arg(long, default_value_t = 10, conflicts_with = "single",
          value_parser = clap::value_parser!(u32).range(1..=i32::MAX as i64))]
    shards: u32,
    /// One region with one shard holding the whole limit.
    #[arg(long)]
    single: bool,
    /// The limits are memory budgets in bytes, as a node's
    /// passivation.memory_budget: each entity weighs its size in the
    /// trace, and each shard keeps its policy within its share. Needs a
    /// trace with sizes (adapt-size); not with opt.
    #[arg(long)]
    weighed: bool,
    /// Print CSV: trace,strategy,limit,accesses,activations,active_percent.
    #[arg(long)]
    csv: bool,
    /// Also write an SVG chart of active % against limit to this file.
    #[arg(long, value_name = "FILE.svg")]
    plot: Option<PathBuf>,
}

fn parse_format(s: &str) -> Result<TraceFormat, String> {
    s.parse()
        .map_err(|e: simulate::trace::UnknownFormat| e.to_string())
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if !matches!(cli.command, Command::Run(_)) {
        // `run` sets up logging from its config.
        tracing_subscriber::fmt()
            .with_env_filter(
                tracing_subscriber::EnvFilter::try_from_default_env()
                    .unwrap_or_else(|_| "warn".into()),
            )
            .with_writer(std::io::stderr)
            .init();
    }
    let result = match cli.command {
        Command::Demo {
            records,
            users,
            rate,
            partitions,
            metrics_listen,
            progress_every,
        } => demo(demo::DemoOptions {
            records,
            users: usize::try_from(users).unwrap_or(usize::MAX),
            rate,
            partitions,
            metrics_listen,
            progress_every,
        }),
        Command::Simulate(args) => run_simulation(args),
        Command::Run(args) => run_node(&args),
        Command::Produce(args) => cli::produce::run(&args).map_err(|e| e.to_string()),
        Command::Verify(args) => {
            block_on(async { cli::verify::run(args).await.map_err(|e| e.to_string()) })
        }
        Command::Client(command) => {
            block_on(async { cli::client::run(command).await.map_err(|e| e.to_string()) })
        }
        Command::RemoveInternalData(args) => block_on(async {
            let printed = cli::remove_internal_data::run(args).await?;
            print!("{printed}");
            Ok(())
        }),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("colo: {e}");
            ExitCode::FAILURE
        }
    }
}

fn block_on<T>(f: impl std::future::Future<Output = Result<T, String>>) -> Result<T, String> {
    tokio::runtime::Runtime::new()
        .map_err(|e| format!("cannot start the async runtime: {e}"))?
        .block_on(f)
}

fn run_node(args: &colo::process::config::RunArgs) -> Result<(), String> {
    use colo::process::samples::counter::{Counter, COUNTER};
    use colo::process::samples::purchases::{
        milestone_topic, purchase_records, User, USER, USER_STATE_VERSION,
    };
    // The config is read before anything starts, so a bad one stops the
    // process with the field's name and nothing half-started.
    let program = colo::NodeProgram::from_run_args(args).map_err(|e| e.to_string())?;
    // With Kafka, users emit their milestones to a topic of the cluster's.
    let milestones = program
        .config()
        .kafka
        .as_ref()
        .map(|kafka| milestone_topic(&kafka.cluster));
    let program = program
        .entity_type_with_records(
            |settings| {
                colo::EntityType::new(COUNTER, |_| Counter::default()).with_settings(settings)
            },
            colo::kafka::json_records(),
        )
        .entity_type_with_records(
            |settings| {
                colo::EntityType::new(USER, |_| User::default())
                    .with_settings(settings)
                    .durable(USER_STATE_VERSION)
                    .with_outputs(milestones.clone())
            },
            purchase_records(),
        );
    block_on(async { program.run().await.map_err(|e| e.to_string()) })
}

fn demo(options: demo::DemoOptions) -> Result<(), String> {
    block_on(async { demo::run(options).await.map_err(|e| e.to_string()) })
}

fn run_simulation(args: SimulateArgs) -> Result<(), String> {
    let (regions, shards) = if args.single {
        (1, 1)
    } else {
        (args.regions, args.shards)
    };
    let limits = args
        .limits
        .iter()
        .map(|&l| usize::try_from(l).map_err(|_| format!("limit {l} is too large")))
        .collect::<Result<Vec<_>, _>>()?;
    let options = SimulateOptions {
        trace: args.trace,
        format: args.format,
        strategies: args.strategy,
        limits,
        regions,
        shards,
        weighed: args.weighed,
    };
    let report = simulate::simulate(&options).map_err(|e| e.to_string())?;
    if let Some(path) = &args.plot {
        std::fs::write(path, simulate::plot::svg(&report))
            .map_err(|e| format!("cannot write the plot {}: {e}", path.display()))?;
    }
    if args.csv {
        print!("{}", simulate::report::csv(&report));
    } else {
        print!("{}", simulate::report::table(&report));
    }
    Ok(())
}

/// The demo's progress period: a duration longer than zero.
fn progress_period(text: &str) -> Result<std::time::Duration, String> {
    match humantime::parse_duration(text) {
        Ok(period) if period.is_zero() => Err("must be longer than zero".to_string()),
        Ok(period) => Ok(period),
        Err(e) => Err(e.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::progress_period;
    use std::time::Duration;

    #[test]
    fn a_progress_period_is_a_duration_longer_than_zero() {
        assert_eq!(progress_period("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(progress_period("2s"), Ok(Duration::from_secs(2)));
        assert_eq!(
            progress_period("0s"),
            Err("must be longer than zero".to_string())
        );
        assert!(progress_period("often").is_err());
    }
}
