//! The counter through the client API, and the cluster's view through the
//! inspection queries.

use crate::process::NodeProcess;
use colo_proto::v1 as pb;
use pb::sharding_client::ShardingClient;
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;
use tonic::transport::Channel;

/// How long a node may take to become ready.
pub const READY: Duration = Duration::from_secs(30);

/// A JSON payload.
pub fn json(text: &str) -> Option<pb::Payload> {
    Some(pb::Payload {
        content_type: "application/json".into(),
        data: text.as_bytes().to_vec(),
    })
}

/// An ask to the counter `id` with a JSON message and a 10 s timeout.
pub fn ask_request(id: &str, message: &str) -> pb::AskRequest {
    ask_request_to("counter", id, message, Duration::from_secs(10))
}

/// An ask to entity `id` of `entity_type` with a JSON message.
pub fn ask_request_to(
    entity_type: &str,
    id: &str,
    message: &str,
    timeout: Duration,
) -> pb::AskRequest {
    pb::AskRequest {
        entity_type: entity_type.into(),
        entity_id: id.into(),
        payload: json(message),
        timeout: Some(prost_types::Duration {
            seconds: i64::try_from(timeout.as_secs()).unwrap_or(i64::MAX),
            nanos: i32::try_from(timeout.subsec_nanos()).unwrap_or(0),
        }),
    }
}

/// Tells the counter `id` a JSON message; Ok once a region accepted it.
pub async fn tell(
    client: &mut ShardingClient<Channel>,
    id: &str,
    message: &str,
) -> Result<(), tonic::Status> {
    client
        .tell(pb::TellRequest {
            entity_type: "counter".into(),
            entity_id: id.into(),
            payload: json(message),
            idempotency_key: None,
        })
        .await
        .map(drop)
}

/// The counter's value after `message`, as the entity answered it.
pub async fn ask(
    client: &mut ShardingClient<Channel>,
    id: &str,
    message: &str,
) -> Result<i64, tonic::Status> {
    ask_within(client, id, message, Duration::from_secs(10)).await
}

/// The counter's value, or why not, within `timeout`.
pub async fn ask_within(
    client: &mut ShardingClient<Channel>,
    id: &str,
    message: &str,
    timeout: Duration,
) -> Result<i64, tonic::Status> {
    let request = ask_request_to("counter", id, message, timeout);
    let reply = client.ask(request).await?.into_inner();
    let data = reply.reply.map(|p| p.data).unwrap_or_default();
    let text = String::from_utf8(data).map_err(|e| tonic::Status::internal(e.to_string()))?;
    text.trim()
        .parse()
        .map_err(|_| tonic::Status::internal(format!("not a counter value: {text}")))
}

/// Entity ids per region, from each node's RegionState; `None` when a node
/// does not answer.
pub async fn try_entities_by_node(
    nodes: &[&NodeProcess],
) -> Option<BTreeMap<String, BTreeSet<String>>> {
    let mut by_node = BTreeMap::new();
    for node in nodes {
        by_node.insert(node.grpc.clone(), entities_on(node, "counter").await?);
    }
    Some(by_node)
}

/// The entities of `entity_type` active on `node`, from its RegionState;
/// `None` when it does not answer.
pub async fn entities_on(node: &NodeProcess, entity_type: &str) -> Option<BTreeSet<String>> {
    let state = node
        .client()
        .await
        .region_state(pb::RegionStateRequest {
            entity_type: entity_type.into(),
            timeout: None,
        })
        .await
        .ok()?
        .into_inner();
    Some(
        state
            .shards
            .into_iter()
            .flat_map(|s| s.entity_ids)
            .collect(),
    )
}

/// Entity ids per region, from each node's RegionState.
pub async fn entities_by_node(nodes: &[&NodeProcess]) -> BTreeMap<String, BTreeSet<String>> {
    try_entities_by_node(nodes)
        .await
        .expect("every node answers RegionState")
}

/// Shards per region, from the coordinator's view through `via`.
pub async fn shards_by_region(via: &NodeProcess) -> Option<BTreeMap<String, usize>> {
    shards_by_region_through(&mut via.client().await).await
}

/// Shards per region, from the coordinator's view through `client`.
pub async fn shards_by_region_through(
    client: &mut ShardingClient<Channel>,
) -> Option<BTreeMap<String, usize>> {
    let stats = client
        .cluster_stats(pb::ClusterStatsRequest {
            entity_type: "counter".into(),
            timeout: None,
        })
        .await
        .ok()?
        .into_inner();
    Some(
        stats
            .regions
            .into_iter()
            .map(|r| (r.region, r.entities.len()))
            .collect(),
    )
}

/// Three ready nodes; the first hosts the coordinator.
pub async fn cluster_of_three() -> (NodeProcess, NodeProcess, NodeProcess) {
    let a = NodeProcess::start(None, &[]);
    let b = NodeProcess::start(Some(&a.grpc), &[]);
    let c = NodeProcess::start(Some(&a.grpc), &[]);
    for node in [&a, &b, &c] {
        node.await_ready(READY).await;
    }
    (a, b, c)
}

/// `n` distinct entity ids.
pub fn ids(prefix: &str, n: usize) -> Vec<String> {
    (0..n).map(|i| format!("{prefix}-{i}")).collect()
}

/// Asks entity `id` of `entity_type` on `node` (JSON), answered within
/// `timeout`: its reply, as JSON.
///
/// # Errors
/// The ask failed, or its reply is not JSON.
pub async fn ask_json(
    node: &crate::process::NodeProcess,
    entity_type: &str,
    id: &str,
    message: &str,
    timeout: Duration,
) -> Result<serde_json::Value, String> {
    let request = ask_request_to(entity_type, id, message, timeout);
    let reply = node
        .client()
        .await
        .ask(request)
        .await
        .map_err(|status| status.to_string())?
        .into_inner();
    let data = reply.reply.map(|p| p.data).unwrap_or_default();
    serde_json::from_slice(&data).map_err(|e| format!("not a JSON reply: {e}"))
}
