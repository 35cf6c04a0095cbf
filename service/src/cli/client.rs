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
use colo_proto::v1::{AskRequest, ClusterStatsRequest, Payload, RegionStateRequest, TellRequest};
use std::fmt::Write as _;
use std::io::Write as _;
use std::time::Duration;
use tonic::transport::{Channel, Endpoint};

mod output;

pub use output::{
    render_ask, render_shards, render_stats, render_tell, AskOutcome, RegionCounts, ShardsOutcome,
    StatsOutcome, TellOutcome,
};

/// Where a node listens unless `--addr` says otherwise.
pub const DEFAULT_ADDR: &str = "http://127.0.0.1:7001";

/// How long to wait for a node to accept the connection.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// How long a tell may wait: a tell waits while the shard's mailbox is full,
/// and a command line must not wait forever on a stuck node.
const TELL_DEADLINE: Duration = Duration::from_secs(30);

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
                buffered: (!response.buffered.is_empty()).then_some(response.buffered),
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

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

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
}
