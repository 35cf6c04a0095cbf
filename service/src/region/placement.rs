//! Placing shards on demand, for a Kafka rebalance listener: "host these
//! shards here and return once they have started", "release these shards
//! and return once they have stopped". Both go through the coordinator (its
//! `UpdateLocations` and `ReleaseShards`), which moves the shards at once
//! instead of at its next rebalance round, so a listener can finish a
//! hand-off inside the rebalance callback, before a partition changes owner.

use super::Region;
use crate::entity::Entity;
use colo_allocation::ShardId;
use std::time::Duration;
use tokio::sync::oneshot;

/// What a region asks its coordinator to do with some shards, for a
/// source of claims (a topic; empty for none).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum PlacementRequest {
    /// Run them on this region.
    Host {
        shards: Vec<ShardId>,
        source: String,
    },
    /// Stop running them on this region.
    Release {
        shards: Vec<ShardId>,
        source: String,
    },
}

/// Why shards could not be placed or released.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlacementError {
    /// The coordinator refused the request: its allocation strategy takes
    /// no locations from outside (only the external strategy does), or a
    /// region it names is not registered.
    #[error("refused by the coordinator: {0}")]
    Refused(String),
    /// These shards' hand-offs failed (they stay where they were); the
    /// others were placed.
    #[error("the hand-off of shards {0:?} failed; they stay where they were")]
    Failed(Vec<ShardId>),
    /// These shards stay on another region, where another source's claim
    /// keeps them (the same-numbered partition of another topic is
    /// consumed there); the others were placed.
    #[error("shards {0:?} stay on another region, which another topic's partition of the same number keeps them on")]
    Elsewhere(Vec<ShardId>),
    /// Not done within the timeout. The coordinator goes on with it: the
    /// shards may still get there.
    #[error("not done within {0:?}")]
    Timeout(Duration),
    /// The coordinator does not answer this region now.
    #[error("coordinator unreachable")]
    CoordinatorUnreachable,
    /// The region has stopped.
    #[error("region has stopped")]
    Stopped,
    /// A shard id at or past the entity type's `number_of_shards`.
    #[error("shard {shard} is out of range: this entity type has {number_of_shards} shards")]
    OutOfRange {
        shard: ShardId,
        number_of_shards: u32,
    },
}

/// A placement waiting for the coordinator's answer.
pub(crate) type PlacementReply = oneshot::Sender<Result<(), PlacementError>>;

impl<E: Entity> Region<E> {
    /// Starts these shards on this region now, handing off any that run
    /// elsewhere first, and returns once every one has started here: the
    /// step of a Kafka assignment before its partitions are consumed. The
    /// coordinator must use the external allocation strategy, which then
    /// keeps them here.
    ///
    /// # Errors
    /// See [`PlacementError`]; on a timeout the move goes on.
    pub async fn host_shards(
        &self,
        shards: impl IntoIterator<Item = ShardId>,
        timeout: Duration,
    ) -> Result<(), PlacementError> {
        self.claim_shards(shards, "", timeout).await
    }

    /// [`Self::host_shards`] for a source of claims (the topic whose
    /// partitions were assigned): a shard another live region claims for
    /// the same source waits until that claim ends; one another source's
    /// claim keeps on another region stays there
    /// ([`PlacementError::Elsewhere`]).
    ///
    /// # Errors
    /// See [`PlacementError`]; on a timeout the move goes on.
    pub(crate) async fn claim_shards(
        &self,
        shards: impl IntoIterator<Item = ShardId>,
        source: &str,
        timeout: Duration,
    ) -> Result<(), PlacementError> {
        let shards = self.checked(shards)?;
        let source = source.to_string();
        self.placement(PlacementRequest::Host { shards, source }, timeout)
            .await
    }

    /// Hands these shards off from this region now and returns once none of
    /// them runs here (their entities' stop messages have run and messages
    /// for them wait in the other regions' buffers): the step of a Kafka
    /// revoke before its offsets are committed. Shards not running here are
    /// done already.
    ///
    /// # Errors
    /// See [`PlacementError`]; on a timeout the hand-off goes on.
    pub async fn release_shards(
        &self,
        shards: impl IntoIterator<Item = ShardId>,
        timeout: Duration,
    ) -> Result<(), PlacementError> {
        self.unclaim_shards(shards, "", timeout).await
    }

    /// [`Self::release_shards`], ending this region's claims of `source`.
    ///
    /// # Errors
    /// See [`PlacementError`]; on a timeout the hand-off goes on.
    pub(crate) async fn unclaim_shards(
        &self,
        shards: impl IntoIterator<Item = ShardId>,
        source: &str,
        timeout: Duration,
    ) -> Result<(), PlacementError> {
        let shards = self.checked(shards)?;
        let source = source.to_string();
        self.placement(PlacementRequest::Release { shards, source }, timeout)
            .await
    }

    fn checked(
        &self,
        shards: impl IntoIterator<Item = ShardId>,
    ) -> Result<Vec<ShardId>, PlacementError> {
        let number_of_shards = self.shared.entity_type.settings.number_of_shards;
        let shards: Vec<ShardId> = shards.into_iter().collect();
        match shards.iter().find(|s| s.0 >= number_of_shards) {
            Some(&shard) => Err(PlacementError::OutOfRange {
                shard,
                number_of_shards,
            }),
            None => Ok(shards),
        }
    }

    async fn placement(
        &self,
        request: PlacementRequest,
        timeout: Duration,
    ) -> Result<(), PlacementError> {
        let (reply, answer) = oneshot::channel();
        let exchange = async {
            if !self.send_placement(request, reply).await {
                return Err(PlacementError::Stopped);
            }
            answer.await.map_err(|_| PlacementError::Stopped)?
        };
        tokio::time::timeout(timeout, exchange)
            .await
            .map_err(|_| PlacementError::Timeout(timeout))?
    }
}
