//! The passivation trace simulator behind `colo simulate`: replays a
//! cache-replacement trace through the very replacement policies shards use,
//! under Akka's sharding emulation, and measures the active rate (the share
//! of accesses that found their entity already active).
//!
//! # Layout
//! - [`trace`]: the trace formats and their readers, with transparent gzip
//!   and xz decompression.
//! - The policy side, pure and in colo-passivation
//!   (`colo_passivation::simulation`): [`sharding`], Akka's simulator's
//!   shard of an id, least-shard region allocation and the per-shard limit
//!   split; [`opt`], Belady's clairvoyant policy, the upper bound; the
//!   replay of every run (strategy x limit) fed the same accesses in
//!   lockstep.
//! - [`report`]: the CSV and the readable table; [`plot`]: the SVG chart.
//!
//! The trace is streamed once for all runs; with `opt` among the strategies
//! it is first read into memory (4 bytes per access) to know each access's
//! next use.

pub mod plot;
pub mod report;
pub mod trace;

use colo_passivation::simulation::replay::{Access, Replay};
pub use colo_passivation::simulation::{
    opt, sharding, strategies, ContractBroken, RunResult, Strategy,
};
use std::collections::HashMap;
use std::path::PathBuf;
pub use trace::{TraceError, TraceFormat};

/// What to simulate.
#[derive(Debug, Clone)]
pub struct SimulateOptions {
    /// The trace file.
    pub trace: PathBuf,
    /// Its format; `None` infers it from the file name
    /// ([`TraceFormat::infer`]).
    pub format: Option<TraceFormat>,
    /// Strategy names, from [`strategies`].
    pub strategies: Vec<String>,
    /// Active-entity limits, totals across regions.
    pub limits: Vec<usize>,
    /// Regions shards are spread over (Akka's simulator: 1).
    pub regions: u32,
    /// Shards ids are spread over (Akka's simulator: 10).
    pub shards: u32,
    /// The limits are memory budgets in bytes, and each entity weighs its
    /// size in the trace (a format with sizes: adapt-size).
    pub weighed: bool,
}

/// Every run of a simulation.
#[derive(Debug, Clone)]
pub struct Report {
    /// The trace's name ([`trace::trace_name`]).
    pub trace: String,
    /// The format it was read as.
    pub format: TraceFormat,
    /// The limits were memory budgets in bytes.
    pub weighed: bool,
    /// Regions simulated.
    pub regions: u32,
    /// Shards simulated.
    pub shards: u32,
    /// Accesses in the trace.
    pub accesses: u64,
    /// Distinct ids in the trace.
    pub distinct_ids: u64,
    /// One per (strategy, limit), strategies in the order asked, then limits.
    pub runs: Vec<RunResult>,
}

/// Why a simulation could not run.
#[derive(Debug, thiserror::Error)]
pub enum SimulateError {
    /// A strategy name is not one of [`strategies`].
    #[error("unknown strategy '{0}' (known: {known})", known = strategies().collect::<Vec<_>>().join(", "))]
    UnknownStrategy(String),
    /// No strategy or no limit was given.
    #[error("nothing to simulate: give at least one strategy and one limit")]
    NothingToRun,
    /// Regions or shards out of range.
    #[error("{0}")]
    Sharding(String),
    /// The trace's format is not given and its name does not tell.
    #[error(
        "cannot tell the format of trace {} from its name; pass --format lirs|lirs2|corda|arc|simple|address|adapt-size|cache2k|scarab",
        .0.display()
    )]
    UnknownFormat(PathBuf),
    /// The trace could not be read.
    #[error(transparent)]
    Trace(#[from] TraceError),
    /// The trace has no access.
    #[error("trace {} has no accesses", .0.display())]
    EmptyTrace(PathBuf),
    /// A weighed simulation of a trace without sizes, or with OPT.
    #[error("{0}")]
    Weighed(String),
    /// The trace has more distinct ids, or OPT more accesses, than fit.
    #[error("trace {} is too large to simulate: {what}", path.display())]
    TooLarge {
        /// The trace file.
        path: PathBuf,
        /// What overflows.
        what: &'static str,
    },
    /// A policy broke the `ReplacementPolicy` contract.
    #[error(transparent)]
    Policy(#[from] ContractBroken),
}

/// Runs every strategy at every limit over the trace.
///
/// # Errors
/// [`SimulateError`]: unknown strategies or format, bad sharding numbers,
/// an unreadable or malformed trace, or a policy that breaks its contract.
pub fn simulate(options: &SimulateOptions) -> Result<Report, SimulateError> {
    if options.strategies.is_empty() || options.limits.is_empty() {
        return Err(SimulateError::NothingToRun);
    }
    let strategies = options
        .strategies
        .iter()
        .map(|name| {
            Strategy::from_name(name).ok_or_else(|| SimulateError::UnknownStrategy(name.clone()))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let max = i32::MAX as u32;
    if options.shards == 0 || options.shards > max || options.regions == 0 || options.regions > max
    {
        return Err(SimulateError::Sharding(format!(
            "shards and regions must be between 1 and {max} (got {} shards, {} regions)",
            options.shards, options.regions
        )));
    }
    let format = options
        .format
        .or_else(|| TraceFormat::infer(&options.trace))
        .ok_or_else(|| SimulateError::UnknownFormat(options.trace.clone()))?;
    let path = &options.trace;
    if options.weighed {
        if strategies.iter().any(|s| matches!(s, Strategy::Opt { .. })) {
            return Err(SimulateError::Weighed(
                "--weighed: OPT knows no sizes; leave opt and opt-seen out".into(),
            ));
        }
        if format != TraceFormat::AdaptSize {
            return Err(SimulateError::Weighed(format!(
                "--weighed needs a trace with sizes (adapt-size); {} is {format}",
                path.display()
            )));
        }
    }
    let mut reader = trace::TraceReader::open(path, format)?;
    let mut ids = Interner::new(options.shards);
    let mut replay = Replay::new(
        &strategies,
        &options.limits,
        options.shards,
        options.regions,
        options.weighed,
    );
    let mut text = String::new();
    let too_large = |what| SimulateError::TooLarge {
        path: path.clone(),
        what,
    };
    let accesses = if strategies.iter().any(|s| matches!(s, Strategy::Opt { .. })) {
        // OPT needs every access's next use, so the trace is read whole.
        let mut trace = Vec::new();
        let mut sizes = Vec::new();
        while reader.next_id(&mut text)? {
            trace.push(ids.intern(&text).ok_or_else(|| too_large("too many ids"))?);
            if let Some(size) = reader.size() {
                sizes.push(size);
            }
            if trace.len() >= opt::NEVER as usize {
                return Err(too_large("OPT handles fewer than 2^32 - 1 accesses"));
            }
        }
        let next = opt::next_uses(&trace);
        for (position, (&id, &next)) in trace.iter().zip(&next).enumerate() {
            replay.access(Access {
                id,
                shard: ids.shard(id),
                position: position as u64,
                next,
                weight: sizes.get(position).copied().unwrap_or(0),
            })?;
        }
        trace.len() as u64
    } else {
        let mut position = 0u64;
        while reader.next_id(&mut text)? {
            let id = ids.intern(&text).ok_or_else(|| too_large("too many ids"))?;
            replay.access(Access {
                id,
                shard: ids.shard(id),
                position,
                next: opt::NEVER,
                weight: reader.size().unwrap_or(0),
            })?;
            position += 1;
        }
        position
    };
    if accesses == 0 {
        return Err(SimulateError::EmptyTrace(path.clone()));
    }
    Ok(Report {
        trace: trace::trace_name(path),
        format,
        weighed: options.weighed,
        regions: options.regions,
        shards: options.shards,
        accesses,
        distinct_ids: ids.len() as u64,
        runs: replay.finish(),
    })
}

/// Ids as dense numbers, with the shard of each computed once from its text.
struct Interner {
    shards: u32,
    numbers: HashMap<Box<str>, u32, foldhash::fast::RandomState>,
    shard_of: Vec<u32>,
}

impl Interner {
    fn new(shards: u32) -> Self {
        Self {
            shards,
            numbers: HashMap::default(),
            shard_of: Vec::new(),
        }
    }

    /// The number of `id`; `None` once `u32` numbers run out.
    fn intern(&mut self, id: &str) -> Option<u32> {
        if let Some(&n) = self.numbers.get(id) {
            return Some(n);
        }
        let n = u32::try_from(self.shard_of.len()).ok()?;
        self.numbers.insert(id.into(), n);
        self.shard_of.push(sharding::shard_of(id, self.shards));
        Some(n)
    }

    fn shard(&self, id: u32) -> u32 {
        self.shard_of[id as usize]
    }

    fn len(&self) -> usize {
        self.shard_of.len()
    }
}
