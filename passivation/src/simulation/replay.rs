//! Replaying accesses through every run (strategy x limit) in lockstep, under
//! Akka's sharding emulation, counting activations.
//!
//! Where the trace gives each access a size, every run also counts the
//! bytes its active entities hold, and its peak. A weighed replay reads its
//! limits as memory budgets: each shard's policy is kept within its share
//! of the budget ([`MemoryBudgeted`]), as a node with
//! `passivation.memory_budget` keeps its shards.

use super::opt::OptShard;
use super::sharding::{shard_limit, Allocation};
use super::{ContractBroken, RunResult, Strategy};
use crate::{MemoryBudgeted, ReplacementPolicy};

/// The replacement state of one active shard in one run.
enum ShardPolicy {
    Opt(OptShard),
    Policy(Box<dyn ReplacementPolicy<u64>>),
}

impl ShardPolicy {
    fn set_limit(&mut self, limit: usize, passivate: &mut Vec<u64>) {
        match self {
            ShardPolicy::Opt(opt) => opt.set_limit(limit, passivate),
            ShardPolicy::Policy(policy) => policy.set_limit(limit, passivate),
        }
    }

    fn len(&self) -> usize {
        match self {
            ShardPolicy::Opt(opt) => opt.len(),
            ShardPolicy::Policy(policy) => policy.len(),
        }
    }

    /// A new share: of the budget in a weighed replay, else of the limit.
    fn set_share(&mut self, share: usize, weighed: bool, passivate: &mut Vec<u64>) {
        match self {
            ShardPolicy::Policy(policy) if weighed => policy.set_budget(share as u64, passivate),
            _ => self.set_limit(share, passivate),
        }
    }
}

/// One strategy at one limit.
struct Run {
    strategy: Strategy,
    limit: usize,
    /// By shard: its policy once the shard is active.
    shards: Vec<Option<ShardPolicy>>,
    /// By interned id: whether the entity is active.
    active: Vec<bool>,
    /// By shard: how many of its entities are active.
    active_in_shard: Vec<usize>,
    /// Reused buffer for the entities a policy passivates.
    passivate: Vec<u64>,
    accesses: u64,
    activations: u64,
    /// `limit` is a memory budget in bytes.
    weighed: bool,
    /// By interned id: the bytes it holds while active (empty until an
    /// access comes with a size).
    held: Vec<u64>,
    /// Bytes the active entities hold now, and at most.
    bytes: u64,
    peak: u64,
}

/// Every run of one simulation, fed the same accesses.
pub struct Replay {
    allocation: Allocation,
    runs: Vec<Run>,
}

impl std::fmt::Debug for Replay {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Replay")
            .field("runs", &self.runs.len())
            .finish_non_exhaustive()
    }
}

/// An access as the replay sees it.
#[derive(Debug, Clone, Copy)]
pub struct Access {
    /// The interned entity id.
    pub id: u32,
    /// Its shard.
    pub shard: u32,
    /// Its position in the trace.
    pub position: u64,
    /// Its size in bytes, where the trace gives one; else 0.
    pub weight: u64,
    /// The position of the next access to the same id; only OPT reads it.
    pub next: u32,
}

impl Replay {
    /// One run per (strategy, limit), strategies outermost; `weighed`: the
    /// limits are memory budgets in bytes (no OPT then: it knows no sizes).
    pub fn new(
        strategies: &[Strategy],
        limits: &[usize],
        shards: u32,
        regions: u32,
        weighed: bool,
    ) -> Self {
        let runs = strategies
            .iter()
            .flat_map(|strategy| {
                limits.iter().map(move |&limit| Run {
                    strategy: strategy.clone(),
                    limit,
                    shards: (0..shards).map(|_| None).collect(),
                    active: Vec::new(),
                    active_in_shard: vec![0; shards as usize],
                    passivate: Vec::new(),
                    accesses: 0,
                    activations: 0,
                    weighed,
                    held: Vec::new(),
                    bytes: 0,
                    peak: 0,
                })
            })
            .collect();
        Self {
            allocation: Allocation::new(shards, regions),
            runs,
        }
    }

    /// Replays one access in every run.
    ///
    /// # Errors
    /// [`ContractBroken`] if a policy breaks its contract.
    pub fn access(&mut self, access: Access) -> Result<(), ContractBroken> {
        let (region, new_shard) = self.allocation.locate(access.shard);
        for run in &mut self.runs {
            if new_shard {
                run.shard_started(access.shard, region, &self.allocation)?;
            }
            run.access(access)?;
        }
        Ok(())
    }

    /// The results, in run order.
    pub fn finish(self) -> Vec<RunResult> {
        self.runs
            .into_iter()
            .map(|run| RunResult {
                strategy: run.strategy.name().to_owned(),
                limit: run.limit,
                accesses: run.accesses,
                activations: run.activations,
                peak_bytes: (!run.held.is_empty()).then_some(run.peak),
            })
            .collect()
    }
}

impl Run {
    /// `shard` just became active in `region` (it is already counted there):
    /// as in Akka's simulator, its policy is created for the per-region
    /// limit, then every shard of the region, the new one included, gets its
    /// new share, all before the access that activated the shard.
    fn shard_started(
        &mut self,
        shard: u32,
        region: u32,
        allocation: &Allocation,
    ) -> Result<(), ContractBroken> {
        let per_region = self.limit / allocation.regions() as usize;
        self.shards[shard as usize] = Some(match &self.strategy {
            Strategy::Opt { newcomers_first } => ShardPolicy::Opt(if *newcomers_first {
                OptShard::newcomers_first(per_region)
            } else {
                OptShard::new(per_region)
            }),
            Strategy::Policy { settings, .. } if self.weighed => ShardPolicy::Policy(Box::new(
                MemoryBudgeted::new(per_region as u64, None, |limit| settings.build(limit)),
            )),
            Strategy::Policy { settings, .. } => ShardPolicy::Policy(settings.build(per_region)),
        });
        let region_shards = allocation.shards_of(region);
        let share = shard_limit(self.limit, allocation.regions(), region_shards.len());
        for &other in region_shards {
            let Some(policy) = self.shards[other as usize].as_mut() else {
                continue;
            };
            policy.set_share(share, self.weighed, &mut self.passivate);
            self.settle(other)?;
        }
        Ok(())
    }

    fn access(&mut self, access: Access) -> Result<(), ContractBroken> {
        self.accesses += 1;
        let id = access.id as usize;
        if id >= self.active.len() {
            self.active.resize(id + 1, false);
        }
        let was_active = self.active[id];
        if !was_active {
            self.activations += 1;
            self.active[id] = true;
            self.active_in_shard[access.shard as usize] += 1;
        }
        let key = u64::from(access.id);
        match self.shards[access.shard as usize].as_mut() {
            Some(ShardPolicy::Opt(opt)) => {
                opt.access(key, access.position, access.next, &mut self.passivate)
            }
            Some(ShardPolicy::Policy(policy)) => {
                if was_active {
                    policy.on_access(&key);
                } else {
                    policy.on_activate(key, &mut self.passivate);
                }
                if self.weighed {
                    policy.set_weight(&key, access.weight, &mut self.passivate);
                }
            }
            // Every access locates its shard first, which starts it.
            None => unreachable!("an accessed shard is active"),
        }
        if access.weight > 0 || !self.held.is_empty() {
            if id >= self.held.len() {
                self.held.resize(id + 1, 0);
            }
            self.bytes = self.bytes - self.held[id] + access.weight;
            self.held[id] = access.weight;
        }
        self.settle(access.shard)?;
        self.peak = self.peak.max(self.bytes);
        Ok(())
    }

    /// Marks what the policy of `shard` just passivated as inactive, and
    /// checks that the policy tracks no more than is active.
    fn settle(&mut self, shard: u32) -> Result<(), ContractBroken> {
        for gone in self.passivate.drain(..) {
            let slot = usize::try_from(gone)
                .ok()
                .and_then(|i| self.active.get_mut(i))
                .filter(|active| **active);
            let Some(slot) = slot else {
                return Err(ContractBroken(format!(
                    "{} passivated entity #{gone} of shard {shard}, which is not active",
                    self.strategy.name()
                )));
            };
            *slot = false;
            self.active_in_shard[shard as usize] -= 1;
            if let Some(held) = self.held.get_mut(gone as usize) {
                self.bytes -= std::mem::take(held);
            }
        }
        // A policy may hold back passivations it decided during an access
        // (which has no output) until its next activation or limit change,
        // so it can track fewer entities than are active, never more.
        let tracked = self.shards[shard as usize]
            .as_ref()
            .map_or(0, ShardPolicy::len);
        let active = self.active_in_shard[shard as usize];
        if tracked > active {
            return Err(ContractBroken(format!(
                "{} tracks {tracked} entities in shard {shard} at limit {}, but only {active} are active",
                self.strategy.name(),
                self.limit
            )));
        }
        Ok(())
    }
}
