//! What every region, shard and outbound queue of a node shares: the node's
//! name, its transport, its table of remote asks and its task set.
//!
//! Below the regions, beside the transport it holds, so that regions and
//! shards use it without importing the node, which imports them.

use crate::codec;
use crate::envelope::{AckedAnswer, Reply, WireReply};
use crate::error::AskError;
use crate::replies::PendingReplies;
use crate::tasks::TaskSet;
use crate::transport::Transport;
use colo_allocation::RegionId;
use serde::Serialize;
use std::sync::Arc;

/// Every task a node started. Shards are kept apart so that they can be
/// stopped first when the node dies: their entities must be gone before the
/// coordinator learns of the death and starts them elsewhere.
#[derive(Debug, Default)]
pub(crate) struct NodeTasks {
    pub shards: TaskSet,
    pub others: TaskSet,
}

impl NodeTasks {
    /// Starts a shard's task.
    pub fn spawn_shard(&self, task: impl std::future::Future<Output = ()> + Send + 'static) {
        self.shards.spawn(task);
    }

    /// Starts any other task of the node.
    pub fn spawn(&self, task: impl std::future::Future<Output = ()> + Send + 'static) {
        self.others.spawn(task);
    }

    /// Aborts everything, shards first.
    pub async fn abort_all(&self) {
        self.shards.abort_all().await;
        self.others.abort_all().await;
    }
}

/// What every region, shard and outbound queue of a node shares.
pub(crate) struct NodeContext {
    pub id: RegionId,
    /// This start of the node (see [`Transport::incarnation`]).
    pub incarnation: u64,
    pub transport: Arc<dyn Transport>,
    pub pending: PendingReplies,
    pub tasks: NodeTasks,
    /// Where durable entity types keep their state, if the node has a store.
    pub store: Option<Arc<crate::store::NodeStore>>,
    /// What its Kafka consumers do now, for the cluster map.
    pub kafka: Arc<crate::kafka_view::KafkaView>,
    /// The memory its entities may take, if it has a budget.
    pub memory: Arc<crate::memory_budget::MemoryBudget>,
}

impl NodeContext {
    /// Sends an entity's answer where the asker waits.
    pub fn reply<R: Serialize + Send + 'static>(
        &self,
        reply: Reply<R>,
        result: Result<R, AskError>,
    ) {
        match reply {
            Reply::None => {}
            Reply::Local(tx, _) => {
                let _ = tx.send(result);
            }
            Reply::Acked(tx, _) => {
                let _ = tx.send(AckedAnswer {
                    result,
                    start: None,
                });
            }
            Reply::Remote(to, _) => {
                let result =
                    result.and_then(|r| codec::encode(&r).map_err(|e| AskError::Codec(e.0)));
                if to.node == self.id && to.incarnation == self.incarnation {
                    self.pending.complete(to.correlation, result);
                    return;
                }
                let reply = WireReply {
                    incarnation: to.incarnation,
                    correlation: to.correlation,
                    result,
                };
                if let Err(e) = self.transport.reply(&to.node, reply) {
                    tracing::debug!(error = %e, "ask reply not delivered");
                }
            }
        }
    }
}
