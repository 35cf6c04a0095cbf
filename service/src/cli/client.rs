//! `colo tell`, `colo ask`, `colo shards`, `colo stats`: a node's client API
//! from the shell. Messages are typed as JSON and sent as
//! `application/json`, so any entity type can be reached without code.
//!
//! Output is a short human line or table, or with `--json` one JSON document
//! on stdout for scripts. A failed call is a [`ClientCliError`] whose text
//! starts with the gRPC status code.

use crate::api::MAX_TIMEOUT;
use crate::codec::ContentType;
use crate::counter::COUNTER;
use colo_proto::v1::sharding_client::ShardingClient;
use colo_proto::v1::{
    AskRequest, ClusterStatsRequest, ClusterStatsResponse, Payload, RegionStateRequest,
    RegionStateResponse, TellRequest,
};
use serde::Serialize;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::Write as _;
use std::time::Duration;
use tonic::transport::{Channel, Endpoint};

/// Where a node listens unless `--addr` says otherwise.
pub const DEFAULT_ADDR: &str = "http://127.0.0.1:7001";

/// How long to wait for a node to accept the connection.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// How long a tell may wait: a tell waits while the shard's mailbox is full,
/// and a command line must not wait forever on a stuck node.
const TELL_DEADLINE: Duration = Duration::from_secs(30);

/// How many entity ids `shards` lists per shard before it only counts them.
const IDS_SHOWN: usize = 10;

/// What every client subcommand needs: the node, the entity type, the output.
#[derive(Debug, Clone, clap::Args)]
pub struct Target {
    /// The node's gRPC address; `http://` is assumed when there is no scheme.
    #[arg(long, default_value = DEFAULT_ADDR)]
    pub addr: String,
    /// The entity type.
    #[arg(long = "type", value_name = "ENTITY_TYPE", default_value = COUNTER)]
    pub entity_type: String,
    /// Print one JSON document on stdout instead of text.
    #[arg(long)]
    pub json: bool,
}

/// Client subcommands of `colo`.
#[derive(Debug, Clone, clap::Subcommand)]
pub enum ClientCommand {
    /// Sends a message to an entity, e.g. `colo tell --id a '{"Add":5}'`.
    Tell {
        #[command(flatten)]
        target: Target,
        /// The entity id.
        #[arg(long)]
        id: String,
        /// The message as JSON; a bare word like Get is taken as the JSON
        /// string "Get" (a unit variant).
        message: String,
    },
    /// Sends a message to an entity and prints its reply, e.g.
    /// `colo ask --id a '"Get"'`.
    Ask {
        #[command(flatten)]
        target: Target,
        /// The entity id.
        #[arg(long)]
        id: String,
        /// The message as JSON; a bare word is taken as a JSON string.
        message: String,
        /// How long to wait for the reply, e.g. 5s; the node's default when
        /// absent.
        #[arg(long, value_parser = humantime::parse_duration)]
        timeout: Option<Duration>,
    },
    /// Lists the shards the node hosts for the entity type, with their
    /// entities.
    Shards {
        #[command(flatten)]
        target: Target,
        /// How long each shard may take to answer; the node's default when
        /// absent.
        #[arg(long, value_parser = humantime::parse_duration)]
        timeout: Option<Duration>,
    },
    /// Counts entities per region and shard across the cluster.
    Stats {
        #[command(flatten)]
        target: Target,
        /// How long the regions may take to answer; the node's default when
        /// absent.
        #[arg(long, value_parser = humantime::parse_duration)]
        timeout: Option<Duration>,
    },
}

/// Why a client subcommand failed.
#[derive(Debug, thiserror::Error)]
pub enum ClientCliError {
    /// `--addr` is not a usable address.
    #[error("invalid --addr {addr:?}: {reason}")]
    Address {
        /// As given.
        addr: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The node could not be reached.
    #[error("cannot connect to {addr}: {reason}")]
    Connect {
        /// The normalized address.
        addr: String,
        /// The transport's explanation, with its causes.
        reason: String,
    },
    /// The message is not JSON.
    #[error("message is not JSON: {0}")]
    Message(serde_json::Error),
    /// `--timeout` cannot be sent.
    #[error("invalid --timeout: {0}")]
    Timeout(String),
    /// The node answered with an error.
    #[error("{}: {}", code_name(.0.code()), .0.message())]
    Status(tonic::Status),
    /// Stdout could not be written.
    #[error("cannot write the output: {0}")]
    Output(#[from] std::io::Error),
}

impl From<tonic::Status> for ClientCliError {
    fn from(status: tonic::Status) -> Self {
        ClientCliError::Status(status)
    }
}

/// Runs a client subcommand and prints its result on stdout.
///
/// # Errors
/// The address, message or timeout is invalid, the node cannot be reached,
/// the node refused the call (the error's text starts with the status code),
/// or stdout cannot be written. The caller prints it on stderr and exits
/// non-zero.
pub async fn run(cmd: ClientCommand) -> Result<(), ClientCliError> {
    let text = execute(cmd).await?;
    let mut stdout = std::io::stdout().lock();
    stdout.write_all(text.as_bytes())?;
    stdout.flush()?;
    Ok(())
}

/// Runs a client subcommand and returns what it would print.
///
/// # Errors
/// As [`run`], except for writing.
pub async fn execute(cmd: ClientCommand) -> Result<String, ClientCliError> {
    match cmd {
        ClientCommand::Tell {
            target,
            id,
            message,
        } => {
            let data = message_json(&message)?;
            let mut client = connect(&target.addr).await?;
            let mut request = tonic::Request::new(TellRequest {
                entity_type: target.entity_type.clone(),
                entity_id: id.clone(),
                payload: Some(json_payload(data)),
            });
            request.set_timeout(TELL_DEADLINE);
            let response = client.tell(request).await?.into_inner();
            let outcome = TellOutcome {
                entity_type: target.entity_type,
                entity_id: id,
                shard: response.shard,
            };
            Ok(render_tell(&outcome, target.json))
        }
        ClientCommand::Ask {
            target,
            id,
            message,
            timeout,
        } => {
            let data = message_json(&message)?;
            let mut client = connect(&target.addr).await?;
            let mut request = tonic::Request::new(AskRequest {
                entity_type: target.entity_type.clone(),
                entity_id: id.clone(),
                payload: Some(json_payload(data)),
                timeout: proto_timeout(timeout)?,
            });
            set_deadline(&mut request, timeout);
            let response = client.ask(request).await?.into_inner();
            let outcome = AskOutcome {
                entity_type: target.entity_type,
                entity_id: id,
                shard: response.shard,
                reply: reply_json(response.reply.as_ref()),
            };
            Ok(render_ask(&outcome, target.json))
        }
        ClientCommand::Shards { target, timeout } => {
            let mut client = connect(&target.addr).await?;
            let mut request = tonic::Request::new(RegionStateRequest {
                entity_type: target.entity_type.clone(),
                timeout: proto_timeout(timeout)?,
            });
            set_deadline(&mut request, timeout);
            let response = client.region_state(request).await?.into_inner();
            Ok(render_shards(&ShardsOutcome::from(response), target.json))
        }
        ClientCommand::Stats { target, timeout } => {
            let mut client = connect(&target.addr).await?;
            let mut request = tonic::Request::new(ClusterStatsRequest {
                entity_type: target.entity_type.clone(),
                timeout: proto_timeout(timeout)?,
            });
            set_deadline(&mut request, timeout);
            let response = client.cluster_stats(request).await?.into_inner();
            Ok(render_stats(&StatsOutcome::from(response), target.json))
        }
    }
}

/// `--addr` as a URI: people type `host:port`, tonic wants a scheme.
///
/// # Errors
/// The address is empty or not a valid URI.
pub fn normalize_addr(addr: &str) -> Result<String, ClientCliError> {
    let invalid = |reason: String| ClientCliError::Address {
        addr: addr.to_string(),
        reason,
    };
    let trimmed = addr.trim();
    if trimmed.is_empty() {
        return Err(invalid("it is empty".into()));
    }
    let uri = if trimmed.contains("://") {
        trimmed.to_string()
    } else {
        format!("http://{trimmed}")
    };
    let endpoint = Endpoint::from_shared(uri.clone()).map_err(|e| invalid(error_chain(&e)))?;
    if endpoint.uri().host().is_none_or(str::is_empty) {
        return Err(invalid("it has no host".into()));
    }
    Ok(uri)
}

async fn connect(addr: &str) -> Result<ShardingClient<Channel>, ClientCliError> {
    let uri = normalize_addr(addr)?;
    let endpoint = Endpoint::from_shared(uri.clone())
        .map_err(|e| ClientCliError::Address {
            addr: addr.to_string(),
            reason: error_chain(&e),
        })?
        .connect_timeout(CONNECT_TIMEOUT);
    let channel = endpoint
        .connect()
        .await
        .map_err(|e| ClientCliError::Connect {
            addr: uri,
            reason: error_chain(&e),
        })?;
    Ok(ShardingClient::new(channel))
}

/// The message to send: JSON as typed, or a bare word (`Get`) as the JSON
/// string it stands for, because shells eat the quotes of `"Get"`.
///
/// # Errors
/// The text is neither JSON nor a bare word.
pub fn message_json(text: &str) -> Result<Vec<u8>, ClientCliError> {
    let text = text.trim();
    match serde_json::from_str::<serde_json::Value>(text) {
        Ok(_) => Ok(text.as_bytes().to_vec()),
        Err(e) => {
            let bare_word = !text.is_empty()
                && text.chars().all(|c| c.is_alphanumeric() || c == '_')
                && text.chars().next().is_some_and(char::is_alphabetic);
            if bare_word {
                serde_json::to_vec(text).map_err(ClientCliError::Message)
            } else {
                Err(ClientCliError::Message(e))
            }
        }
    }
}

fn json_payload(data: Vec<u8>) -> Payload {
    Payload {
        content_type: ContentType::Json.as_str().to_string(),
        data,
    }
}

/// The reply as JSON; a reply in another content type (a node should not
/// send one) is shown as text rather than lost.
fn reply_json(reply: Option<&Payload>) -> serde_json::Value {
    match reply {
        None => serde_json::Value::Null,
        Some(p) => serde_json::from_slice(&p.data).unwrap_or_else(|_| {
            serde_json::Value::String(String::from_utf8_lossy(&p.data).into_owned())
        }),
    }
}

fn proto_timeout(
    timeout: Option<Duration>,
) -> Result<Option<prost_types::Duration>, ClientCliError> {
    timeout
        .map(|t| {
            prost_types::Duration::try_from(t).map_err(|e| ClientCliError::Timeout(e.to_string()))
        })
        .transpose()
}

/// A gRPC deadline a little past the node's own, so that the node's answer
/// (say, a query listing failed shards) arrives rather than a bare
/// DEADLINE_EXCEEDED. Too long a timeout gets none: the node refuses it.
fn set_deadline<T>(request: &mut tonic::Request<T>, timeout: Option<Duration>) {
    if let Some(t) = timeout.filter(|t| *t <= MAX_TIMEOUT) {
        request.set_timeout(t + t / 4 + Duration::from_secs(1));
    }
}

/// An error and its causes on one line: tonic's transport errors say only
/// "transport error" at the top.
fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        let _ = write!(text, ": {cause}");
        source = cause.source();
    }
    text
}

/// The status code as gRPC spells it, which is what people search for.
pub fn code_name(code: tonic::Code) -> &'static str {
    use tonic::Code;
    match code {
        Code::Ok => "OK",
        Code::Cancelled => "CANCELLED",
        Code::Unknown => "UNKNOWN",
        Code::InvalidArgument => "INVALID_ARGUMENT",
        Code::DeadlineExceeded => "DEADLINE_EXCEEDED",
        Code::NotFound => "NOT_FOUND",
        Code::AlreadyExists => "ALREADY_EXISTS",
        Code::PermissionDenied => "PERMISSION_DENIED",
        Code::ResourceExhausted => "RESOURCE_EXHAUSTED",
        Code::FailedPrecondition => "FAILED_PRECONDITION",
        Code::Aborted => "ABORTED",
        Code::OutOfRange => "OUT_OF_RANGE",
        Code::Unimplemented => "UNIMPLEMENTED",
        Code::Internal => "INTERNAL",
        Code::Unavailable => "UNAVAILABLE",
        Code::DataLoss => "DATA_LOSS",
        Code::Unauthenticated => "UNAUTHENTICATED",
    }
}

/// A tell's result.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TellOutcome {
    /// The entity type.
    pub entity_type: String,
    /// The entity id.
    pub entity_id: String,
    /// The entity's shard.
    pub shard: u32,
}

/// An ask's result.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AskOutcome {
    /// The entity type.
    pub entity_type: String,
    /// The entity id.
    pub entity_id: String,
    /// The entity's shard.
    pub shard: u32,
    /// The entity's reply.
    pub reply: serde_json::Value,
}

/// One region's shards, sorted by shard.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ShardsOutcome {
    /// The node the region runs on.
    pub region: String,
    /// Shard -> its live entity ids.
    pub shards: BTreeMap<u32, Vec<String>>,
    /// Shards that did not answer in time.
    pub failed: Vec<u32>,
}

impl From<RegionStateResponse> for ShardsOutcome {
    fn from(r: RegionStateResponse) -> Self {
        let mut failed = r.failed;
        failed.sort_unstable();
        Self {
            region: r.region,
            shards: r
                .shards
                .into_iter()
                .map(|s| (s.shard, s.entity_ids))
                .collect(),
            failed,
        }
    }
}

/// Every region's entity counts, sorted by region and shard.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StatsOutcome {
    /// Region -> its shards' entity counts.
    pub regions: BTreeMap<String, RegionCounts>,
    /// Regions that did not answer in time.
    pub failed_regions: Vec<String>,
}

/// One region's entity counts.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RegionCounts {
    /// Shard -> live entities.
    pub shards: BTreeMap<u32, u64>,
    /// Shards that did not answer in time.
    pub failed: Vec<u32>,
}

impl From<ClusterStatsResponse> for StatsOutcome {
    fn from(r: ClusterStatsResponse) -> Self {
        let mut failed_regions = r.failed_regions;
        failed_regions.sort_unstable();
        Self {
            regions: r
                .regions
                .into_iter()
                .map(|region| {
                    let mut failed = region.failed;
                    failed.sort_unstable();
                    let counts = RegionCounts {
                        shards: region.entities.into_iter().collect(),
                        failed,
                    };
                    (region.region, counts)
                })
                .collect(),
            failed_regions,
        }
    }
}

fn json_line(value: &impl Serialize) -> String {
    // These outcome types hold only strings, numbers and JSON values, which
    // always serialize.
    let mut text = serde_json::to_string(value).unwrap_or_else(|e| format!("{{\"error\":{e:?}}}"));
    text.push('\n');
    text
}

/// A tell's output.
pub fn render_tell(outcome: &TellOutcome, json: bool) -> String {
    if json {
        return json_line(outcome);
    }
    format!(
        "told {}/{} (shard {})\n",
        outcome.entity_type, outcome.entity_id, outcome.shard
    )
}

/// An ask's output: the reply, as compact JSON.
pub fn render_ask(outcome: &AskOutcome, json: bool) -> String {
    if json {
        return json_line(outcome);
    }
    format!(
        "{}/{} (shard {}) replied {}\n",
        outcome.entity_type, outcome.entity_id, outcome.shard, outcome.reply
    )
}

/// A region's shards as a table: shard, entity count, the first ids.
pub fn render_shards(outcome: &ShardsOutcome, json: bool) -> String {
    if json {
        return json_line(outcome);
    }
    let entities: usize = outcome.shards.values().map(Vec::len).sum();
    let mut text = format!(
        "region {}: {} shards, {} entities\n",
        outcome.region,
        outcome.shards.len(),
        entities
    );
    if !outcome.shards.is_empty() {
        text.push_str("shard  entities  ids\n");
        for (shard, ids) in &outcome.shards {
            let mut shown = ids
                .iter()
                .take(IDS_SHOWN)
                .map(String::as_str)
                .collect::<Vec<_>>()
                .join(", ");
            if ids.len() > IDS_SHOWN {
                let _ = write!(shown, ", ... (+{} more)", ids.len() - IDS_SHOWN);
            }
            let _ = writeln!(text, "{shard:>5}  {:>8}  {shown}", ids.len());
        }
    }
    if !outcome.failed.is_empty() {
        let _ = writeln!(
            text,
            "shards that did not answer: {}",
            join(&outcome.failed)
        );
    }
    text
}

/// The cluster's counts as a table: one row per region and a total.
pub fn render_stats(outcome: &StatsOutcome, json: bool) -> String {
    if json {
        return json_line(outcome);
    }
    let width = outcome
        .regions
        .keys()
        .map(String::len)
        .chain(["region".len(), "total".len()])
        .max()
        .unwrap_or_default();
    let mut text = format!("{:<width$}  shards  entities\n", "region");
    let (mut shards, mut entities) = (0usize, 0u64);
    for (region, counts) in &outcome.regions {
        let n: u64 = counts.shards.values().sum();
        shards += counts.shards.len();
        entities += n;
        let _ = write!(text, "{region:<width$}  {:>6}  {n:>8}", counts.shards.len());
        if !counts.failed.is_empty() {
            let _ = write!(text, "  (shards not answering: {})", join(&counts.failed));
        }
        text.push('\n');
    }
    let _ = writeln!(text, "{:<width$}  {shards:>6}  {entities:>8}", "total");
    if !outcome.failed_regions.is_empty() {
        let _ = writeln!(
            text,
            "regions that did not answer: {}",
            outcome.failed_regions.join(", ")
        );
    }
    text
}

fn join(shards: &[u32]) -> String {
    shards
        .iter()
        .map(u32::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;
    use colo_proto::v1::{RegionShardStats, ShardState};

    #[derive(Debug, clap::Parser)]
    struct Cli {
        #[command(subcommand)]
        command: ClientCommand,
    }

    #[test]
    fn subcommands_parse_with_defaults() {
        let cli = Cli::try_parse_from(["colo", "ask", "--id", "a", "\"Get\"", "--timeout", "5s"])
            .unwrap();
        let ClientCommand::Ask {
            target,
            id,
            message,
            timeout,
        } = cli.command
        else {
            panic!("not an ask: {cli:?}");
        };
        assert_eq!(target.addr, DEFAULT_ADDR);
        assert_eq!(target.entity_type, "counter");
        assert!(!target.json);
        assert_eq!((id.as_str(), message.as_str()), ("a", "\"Get\""));
        assert_eq!(timeout, Some(Duration::from_secs(5)));

        let cli = Cli::try_parse_from([
            "colo", "stats", "--addr", "n2:7002", "--type", "device", "--json",
        ])
        .unwrap();
        let ClientCommand::Stats { target, timeout } = cli.command else {
            panic!("not stats: {cli:?}");
        };
        assert_eq!(
            (
                target.addr.as_str(),
                target.entity_type.as_str(),
                target.json
            ),
            ("n2:7002", "device", true)
        );
        assert_eq!(timeout, None);
        assert!(
            Cli::try_parse_from(["colo", "tell", "{\"Add\":1}"]).is_err(),
            "--id is required"
        );
    }

    #[test]
    fn addresses_get_a_scheme_when_they_have_none() {
        assert_eq!(
            normalize_addr("127.0.0.1:7001").unwrap(),
            "http://127.0.0.1:7001"
        );
        assert_eq!(
            normalize_addr(" localhost:7002 ").unwrap(),
            "http://localhost:7002"
        );
        assert_eq!(normalize_addr("http://n1:7001").unwrap(), "http://n1:7001");
        assert_eq!(normalize_addr("https://n1:443").unwrap(), "https://n1:443");
        assert_eq!(normalize_addr("[::1]:7001").unwrap(), "http://[::1]:7001");
        for bad in ["", "  ", "http://", "not an address"] {
            let err = normalize_addr(bad).unwrap_err();
            assert!(
                matches!(err, ClientCliError::Address { .. }),
                "{bad:?}: {err}"
            );
            assert!(err.to_string().contains("--addr"), "{err}");
        }
    }

    #[test]
    fn messages_are_json_or_a_bare_word() {
        assert_eq!(message_json("{\"Add\":5}").unwrap(), b"{\"Add\":5}");
        assert_eq!(message_json(" \"Get\" ").unwrap(), b"\"Get\"");
        assert_eq!(message_json("Get").unwrap(), b"\"Get\"");
        assert_eq!(message_json("42").unwrap(), b"42");
        for bad in ["{Add:5}", "", "Add 5", "'Get'"] {
            assert!(
                matches!(message_json(bad), Err(ClientCliError::Message(_))),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn status_errors_start_with_the_code() {
        let err = ClientCliError::from(tonic::Status::invalid_argument(
            "entity_id must not be empty",
        ));
        assert_eq!(
            err.to_string(),
            "INVALID_ARGUMENT: entity_id must not be empty"
        );
        assert_eq!(code_name(tonic::Code::Unavailable), "UNAVAILABLE");
    }

    #[test]
    fn tell_and_ask_print_a_line_or_json() {
        let tell = TellOutcome {
            entity_type: "counter".into(),
            entity_id: "a".into(),
            shard: 7,
        };
        assert_eq!(render_tell(&tell, false), "told counter/a (shard 7)\n");
        let json: serde_json::Value = serde_json::from_str(&render_tell(&tell, true)).unwrap();
        assert_eq!(
            json,
            serde_json::json!({"entity_type": "counter", "entity_id": "a", "shard": 7})
        );

        let ask = AskOutcome {
            entity_type: "counter".into(),
            entity_id: "a".into(),
            shard: 7,
            reply: reply_json(Some(&json_payload(b"5".to_vec()))),
        };
        assert_eq!(render_ask(&ask, false), "counter/a (shard 7) replied 5\n");
        let json: serde_json::Value = serde_json::from_str(&render_ask(&ask, true)).unwrap();
        assert_eq!(json["reply"], serde_json::json!(5));
        assert_eq!(json["shard"], serde_json::json!(7));
    }

    #[test]
    fn shards_print_a_table_with_few_ids() {
        let response = RegionStateResponse {
            region: "node-1".into(),
            shards: vec![
                ShardState {
                    shard: 12,
                    entity_ids: (0..12).map(|i| format!("e{i}")).collect(),
                },
                ShardState {
                    shard: 3,
                    entity_ids: vec!["a".into(), "b".into()],
                },
            ],
            failed: vec![9, 4],
        };
        let outcome = ShardsOutcome::from(response);
        let text = render_shards(&outcome, false);
        assert_eq!(
            text,
            "region node-1: 2 shards, 14 entities\n\
             shard  entities  ids\n    \
                 3         2  a, b\n   \
                12        12  e0, e1, e2, e3, e4, e5, e6, e7, e8, e9, ... (+2 more)\n\
             shards that did not answer: 4, 9\n"
        );
        let json: serde_json::Value = serde_json::from_str(&render_shards(&outcome, true)).unwrap();
        assert_eq!(json["region"], "node-1");
        assert_eq!(json["shards"]["3"], serde_json::json!(["a", "b"]));
        assert_eq!(json["failed"], serde_json::json!([4, 9]));

        let empty = ShardsOutcome::from(RegionStateResponse {
            region: "node-2".into(),
            shards: vec![],
            failed: vec![],
        });
        assert_eq!(
            render_shards(&empty, false),
            "region node-2: 0 shards, 0 entities\n"
        );
    }

    #[test]
    fn stats_print_a_row_per_region_and_a_total() {
        let response = ClusterStatsResponse {
            regions: vec![
                RegionShardStats {
                    region: "node-2".into(),
                    entities: [(1, 4), (2, 0)].into_iter().collect(),
                    failed: vec![5],
                },
                RegionShardStats {
                    region: "node-1".into(),
                    entities: [(0, 3)].into_iter().collect(),
                    failed: vec![],
                },
            ],
            failed_regions: vec!["node-3".into()],
        };
        let outcome = StatsOutcome::from(response);
        assert_eq!(
            render_stats(&outcome, false),
            "region  shards  entities\n\
             node-1       1         3\n\
             node-2       2         4  (shards not answering: 5)\n\
             total        3         7\n\
             regions that did not answer: node-3\n"
        );
        let json: serde_json::Value = serde_json::from_str(&render_stats(&outcome, true)).unwrap();
        assert_eq!(
            json["regions"]["node-2"]["shards"]["1"],
            serde_json::json!(4)
        );
        assert_eq!(json["failed_regions"], serde_json::json!(["node-3"]));
    }
}
