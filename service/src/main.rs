//! The `colo` command.

use clap::{Parser, Subcommand};
use std::process::ExitCode;

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
    /// Runs an in-process cluster of three nodes, adds a fourth, and prints
    /// shard placement before and after the rebalance.
    Demo {
        /// Counters to create.
        #[arg(long, default_value_t = 5000)]
        entities: usize,
        /// Shards of the counter entity type.
        #[arg(long, default_value_t = 60, value_parser = clap::value_parser!(u32).range(1..=100_000))]
        shards: u32,
        /// Additions told to each counter.
        #[arg(long, default_value_t = 10)]
        adds: usize,
    },
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()),
        )
        .init();
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("colo: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = match cli.command {
        Command::Demo {
            entities,
            shards,
            adds,
        } => runtime.block_on(colo::demo::run(colo::demo::DemoOptions {
            entities,
            shards,
            adds_per_entity: adds,
        })),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("colo: {e}");
            ExitCode::FAILURE
        }
    }
}
