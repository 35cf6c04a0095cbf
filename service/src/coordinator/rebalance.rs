//! One hand-off, driven by the coordinator: its own small task with its own
//! deadline, reporting `RebalanceDone { shard, ok }`.
//!
//! BeginHandOff to every region -> every region acks -> HandOff to the owner
//! -> ShardStopped. A region that is terminated meanwhile counts as having
//! answered: it is terminated only after `region_timeout` of silence, by
//! which time it has stopped its shards itself.

use crate::protocol::CoordinatorToRegion;
use colo_allocation::{RegionId, ShardId};
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;
use tokio::sync::mpsc;
use tokio::time::Instant;

/// What the coordinator forwards to a running hand-off: never dropped (a
/// lost ack would stall the hand-off until its deadline), so the channel
/// is unbounded; the protocol bounds it to one ack and one departure per
/// region and one ShardStopped.
#[derive(Debug)]
pub(crate) enum WorkerInput {
    /// A region acked BeginHandOff.
    Ack(RegionId),
    /// The owner reported ShardStopped.
    Stopped(RegionId),
    /// A region left the cluster.
    RegionGone(RegionId),
}

/// A hand-off to run.
pub(crate) struct HandOffPlan {
    pub shard: ShardId,
    pub owner: RegionId,
    /// Every region and proxy to notify, with its link (weak: a link the
    /// coordinator drops must close, not be kept open by a hand-off).
    pub regions: BTreeMap<RegionId, mpsc::WeakUnboundedSender<CoordinatorToRegion>>,
    pub timeout: Duration,
}

/// Runs the hand-off; `true` when the owner stopped the shard in time.
pub(crate) async fn run(
    plan: HandOffPlan,
    mut input: mpsc::UnboundedReceiver<WorkerInput>,
) -> bool {
    let deadline = Instant::now() + plan.timeout;
    let shard = plan.shard;
    let mut waiting: BTreeSet<RegionId> = BTreeSet::new();
    for (region, link) in &plan.regions {
        let sent = link
            .upgrade()
            .is_some_and(|l| l.send(CoordinatorToRegion::BeginHandOff { shard }).is_ok());
        if sent {
            waiting.insert(region.clone());
        } else {
            // Its link is gone: the region left or was terminated since
            // the plan was made (a graceful leave racing a rebalance), and
            // its shards are the coordinator's to place anyway.
            tracing::info!(%shard, %region, "region's link gone before BeginHandOff: not waiting for its ack");
        }
    }
    let mut owner_gone = false;
    while !waiting.is_empty() {
        match tokio::time::timeout_at(deadline, input.recv()).await {
            Ok(Some(WorkerInput::Ack(region))) => {
                waiting.remove(&region);
            }
            Ok(Some(WorkerInput::RegionGone(region))) => {
                owner_gone |= region == plan.owner;
                waiting.remove(&region);
            }
            Ok(Some(WorkerInput::Stopped(_))) => {}
            Ok(None) => return false,
            Err(_) => {
                tracing::warn!(%shard, waiting = ?waiting, "hand-off timed out waiting for BeginHandOffAck");
                return false;
            }
        }
    }
    if owner_gone {
        return true;
    }
    // An owner without a link may still run the shard (its lease holds
    // until it fences itself): the hand-off fails, and the shard moves once
    // the owner is terminated.
    let sent = plan
        .regions
        .get(&plan.owner)
        .and_then(mpsc::WeakUnboundedSender::upgrade)
        .is_some_and(|l| l.send(CoordinatorToRegion::HandOff { shard }).is_ok());
    if !sent {
        tracing::warn!(%shard, owner = %plan.owner, "could not send HandOff");
        return false;
    }
    loop {
        match tokio::time::timeout_at(deadline, input.recv()).await {
            Ok(Some(WorkerInput::Stopped(region) | WorkerInput::RegionGone(region)))
                if region == plan.owner =>
            {
                return true
            }
            Ok(Some(_)) => {}
            Ok(None) => return false,
            Err(_) => {
                tracing::warn!(%shard, owner = %plan.owner, "hand-off timed out waiting for ShardStopped");
                return false;
            }
        }
    }
}
