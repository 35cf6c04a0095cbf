//! What the region task is asked to do: by the region's handles, by its
//! shards and outbound queues, and by its own helper tasks. Rare next to
//! the messages senders route themselves (see `routes.rs`).

use super::placement;
use crate::entity::Entity;
use crate::envelope::Envelope;
use crate::error::QueryError;
use crate::inspection::{ClusterShardingStats, CurrentRegionState};
use colo_allocation::{RegionId, ShardId};
use std::collections::VecDeque;
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};

/// Capacity of the region task's command channel. Commands are rare (queries,
/// hand-off results, undelivered batches); senders wait when it is full.
pub(crate) const COMMAND_CAPACITY: usize = 1024;

/// What the region task is asked to do, by handles and by its own helpers.
pub(crate) enum RegionCmd<E: Entity> {
    /// The task opening the coordinator link is done (or why it was not
    /// reached).
    CoordinatorLinked {
        link: Result<crate::protocol::CoordinatorLink, String>,
    },
    /// A shard finished its hand-off; `leftovers` were still in its mailbox.
    ShardStopped {
        shard: ShardId,
        leftovers: VecDeque<Envelope<E>>,
    },
    /// Everything forwarded to the old home before BeginHandOff arrived there.
    BeginHandOffReady {
        shard: ShardId,
    },
    /// A remote node could not be reached; these go back to the buffer.
    Undeliverable {
        to: RegionId,
        serial: u64,
        envelopes: Vec<Envelope<E>>,
    },
    /// The outbound queue to `to` has ended: nothing more comes back from it.
    OutboundClosed {
        to: RegionId,
        serial: u64,
    },
    State {
        timeout: Duration,
        reply: oneshot::Sender<CurrentRegionState>,
    },
    ClusterStats {
        timeout: Duration,
        reply: oneshot::Sender<Result<ClusterShardingStats, QueryError>>,
    },
    Shutdown {
        done: oneshot::Sender<()>,
    },
    /// Host or release shards through the coordinator.
    Placement {
        request: placement::PlacementRequest,
        reply: placement::PlacementReply,
    },
}

/// Asks the region task to hand off every shard and stop, and waits until
/// it has (at once if it is gone): for its handle and for the node alike.
pub(super) async fn shut_down<E: Entity>(commands: &mpsc::Sender<RegionCmd<E>>) {
    let (done, wait) = oneshot::channel();
    if commands.send(RegionCmd::Shutdown { done }).await.is_ok() {
        let _ = wait.await;
    }
}
