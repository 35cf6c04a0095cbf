//! The client API (`colo.v1.Sharding`): tell and ask any entity of a node's
//! entity types by name, with JSON or postcard payloads; the two inspection
//! queries; and a graceful stop.
//!
//! Requests are checked in `api/request.rs` (bad input is INVALID_ARGUMENT
//! naming the field) and refusals become status codes in [`status`], whose
//! module doc has the table.

mod request;
pub mod status;

pub use request::MAX_TIMEOUT;

use crate::node::Node;
use crate::region::TellOnce;
use colo_proto::v1::sharding_server::{Sharding, ShardingServer};
use colo_proto::v1::{
    AskRequest, AskResponse, ClusterStatsRequest, ClusterStatsResponse, Payload, RegionShardStats,
    RegionStateRequest, RegionStateResponse, ShardState, ShutdownRequest, ShutdownResponse,
    TellRequest, TellResponse,
};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;
use tonic::{Request, Response, Status};

/// The `Sharding` service over one node.
#[derive(Debug)]
pub struct ShardingApi {
    node: Arc<Node>,
    default_timeout: Duration,
    shutdown: watch::Sender<bool>,
}

impl ShardingApi {
    /// The service, ready to add to a tonic server.
    ///
    /// `default_timeout` applies to asks and to both inspection queries that
    /// carry no timeout of their own. `shutdown` is set to `true` by the
    /// Shutdown call; whoever owns the node watches it and runs
    /// [`Node::shutdown`], so that the node stops in one place however the
    /// stop was asked for (a signal, this call).
    pub fn new(
        node: Arc<Node>,
        default_timeout: Duration,
        shutdown: watch::Sender<bool>,
    ) -> ShardingServer<Self> {
        ShardingServer::new(Self {
            node,
            default_timeout,
            shutdown,
        })
    }
}

#[tonic::async_trait]
impl Sharding for ShardingApi {
    async fn tell(&self, request: Request<TellRequest>) -> Result<Response<TellResponse>, Status> {
        let req = request.into_inner();
        let region = request::region(&self.node, &req.entity_type)?;
        let entity_id = request::entity_id(&req.entity_id)?;
        let (content_type, data) = request::payload(req.payload.as_ref())?;
        if let Some(key) = &req.idempotency_key {
            let (shard, once) = region
                .tell_once(entity_id, key, content_type, data, self.default_timeout)
                .await?;
            return Ok(Response::new(TellResponse {
                shard: shard.0,
                buffered: String::new(),
                already_applied: once == TellOnce::AlreadyApplied,
            }));
        }
        let told = region.tell(entity_id, content_type, data).await?;
        Ok(Response::new(TellResponse {
            shard: told.shard.0,
            buffered: told.buffered.unwrap_or_default().to_string(),
            already_applied: false,
        }))
    }

    async fn ask(&self, request: Request<AskRequest>) -> Result<Response<AskResponse>, Status> {
        let req = request.into_inner();
        let region = request::region(&self.node, &req.entity_type)?;
        let entity_id = request::entity_id(&req.entity_id)?;
        let (content_type, data) = request::payload(req.payload.as_ref())?;
        let timeout = request::timeout(req.timeout, self.default_timeout)?;
        let (shard, reply) = region.ask(entity_id, content_type, data, timeout).await?;
        Ok(Response::new(AskResponse {
            shard: shard.0,
            reply: Some(Payload {
                content_type: content_type.as_str().to_string(),
                data: reply.to_vec(),
            }),
        }))
    }

    async fn region_state(
        &self,
        request: Request<RegionStateRequest>,
    ) -> Result<Response<RegionStateResponse>, Status> {
        let req = request.into_inner();
        let region = request::region(&self.node, &req.entity_type)?;
        let timeout = request::timeout(req.timeout, self.default_timeout)?;
        let state = region.state(timeout).await?;
        Ok(Response::new(RegionStateResponse {
            region: region.node().as_str().to_string(),
            shards: state
                .shards
                .into_iter()
                .map(|(shard, ids)| ShardState {
                    shard: shard.0,
                    entity_ids: ids.into_iter().map(String::from).collect(),
                })
                .collect(),
            failed: state.failed.into_iter().map(|s| s.0).collect(),
            coordinator_reachable: state.coordinator_reachable,
        }))
    }

    async fn cluster_stats(
        &self,
        request: Request<ClusterStatsRequest>,
    ) -> Result<Response<ClusterStatsResponse>, Status> {
        let req = request.into_inner();
        let region = request::region(&self.node, &req.entity_type)?;
        let timeout = request::timeout(req.timeout, self.default_timeout)?;
        let stats = region.cluster_stats(timeout).await?;
        let coordinator = self.node.coordinator_of(&req.entity_type);
        Ok(Response::new(ClusterStatsResponse {
            regions: stats
                .regions
                .into_iter()
                .map(|(region, stats)| RegionShardStats {
                    region: region.as_str().to_string(),
                    entities: stats
                        .stats
                        .into_iter()
                        .map(|(shard, n)| (shard.0, n as u64))
                        .collect(),
                    failed: stats.failed.into_iter().map(|s| s.0).collect(),
                    handing_off: stats.handing_off.into_iter().map(|s| s.0).collect(),
                    restoring: stats.restoring.into_iter().map(|s| s.0).collect(),
                })
                .collect(),
            failed_regions: stats
                .failed_regions
                .into_iter()
                .map(|r| r.as_str().to_string())
                .collect(),
            coordinator: coordinator
                .as_ref()
                .map(|c| c.0.clone())
                .unwrap_or_default(),
            coordinator_epoch: coordinator.map_or(0, |c| c.1),
        }))
    }

    /// Fires the shutdown trigger and returns at once: the node's graceful
    /// shutdown has then been started, not completed. Waiting for completion
    /// would hold this call open while the program stops the server that
    /// carries it, and a server that drains its calls before stopping would
    /// wait on itself. Calling it again is harmless.
    async fn shutdown(
        &self,
        request: Request<ShutdownRequest>,
    ) -> Result<Response<ShutdownResponse>, Status> {
        if self.shutdown.receiver_count() == 0 {
            return Err(Status::internal(
                "this node does not listen for shutdown requests",
            ));
        }
        tracing::info!(node = %self.node.id().as_str(), from = ?request.extensions().get::<crate::transport::tls::ConnectionInfo>().and_then(|c| c.remote), "shutdown requested over gRPC");
        self.shutdown.send_replace(true);
        Ok(Response::new(ShutdownResponse {}))
    }
}
