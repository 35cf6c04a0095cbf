//! `colo tell`, `colo ask`, `colo shards`, `colo stats`: a node's client API
//! from the shell. Messages are typed as JSON and sent as
//! `application/json`, so any entity type can be reached without code.
//!
//! Output is a short human line or table, or with `--json` one JSON document
//! on stdout for scripts. A failed call is a [`ClientCliError`] whose text
//! starts with the gRPC status code.

use colo::codec::ContentType;
use colo::process::api::MAX_TIMEOUT;
use colo_proto::v1::{AskRequest, ClusterStatsRequest, Payload, RegionStateRequest, TellRequest};
use std::fmt::Write as _;
use std::io::Write as _;
use std::time::Duration;
use tonic::transport::Endpoint;

mod credentials;
mod output;

pub use credentials::{Client, Credentials};

pub use output::{
    render_ask, render_shards, render_stats, render_tell, AskOutcome, ShardsOutcome, StatsOutcome,
    TellOutcome,
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
    /// The entity type. Default: the node's only one; a node that runs
    /// several needs it named. (Empty when not given: no entity type has
    /// an empty name.)
    #[arg(
        long = "type",
        value_name = "ENTITY_TYPE",
        default_value = "",
        hide_default_value = true
    )]
    pub entity_type: String,
    /// Print one JSON document on stdout instead of text.
    #[arg(long)]
    pub json: bool,
    /// TLS and authentication, for a node with `[tls]`.
    #[command(flatten)]
    pub credentials: Credentials,
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
        /// Applies the tell once however often it is retried with this key
        /// (1 to 256 bytes, kept with the entity's state for
        /// api.idempotency_retention): the command then waits for the
        /// outcome, and says when the entity had applied it already.
        #[arg(long)]
        idempotency_key: Option<String>,
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

impl ClientCommand {
    /// The node, entity type and output the command names.
    pub fn target(&self) -> &Target {
        match self {
            ClientCommand::Tell { target, .. }
            | ClientCommand::Ask { target, .. }
            | ClientCommand::Shards { target, .. }
            | ClientCommand::Stats { target, .. } => target,
        }
    }
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
    /// An error with what it most likely means.
    #[error("{error} ({hint})")]
    Hinted {
        /// The error.
        error: Box<ClientCliError>,
        /// What to try.
        hint: &'static str,
    },
    /// A TLS or token flag cannot be used (never shows a token).
    #[error("invalid credentials: {0}")]
    Credentials(String),
    /// The message is not JSON.
    #[error("message is not JSON: {0}")]
    Message(serde_json::Error),
    /// `--timeout` cannot be sent.
    #[error("invalid --timeout: {0}")]
    Timeout(String),
    /// `--type` is missing and the node does not run exactly one entity
    /// type.
    #[error("{0}")]
    EntityType(String),
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
    let plain = cmd.target().credentials.ca.is_none();
    let addr = cmd.target().addr.clone();
    let text = match execute(cmd).await {
        Ok(text) => text,
        // A plain-text call to a TLS listener fails in several ways (a
        // protocol error, a reset, a cancelled call): ask the node.
        Err(error) if plain && credentials::serves_tls(&addr).await => {
            return Err(ClientCliError::Hinted {
                error: Box::new(error),
                hint: "the node serves TLS: give --ca (or COLO_CA)",
            })
        }
        Err(error) => return Err(error),
    };
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
            idempotency_key,
            message,
        } => {
            let data = message_json(&message)?;
            let mut client = target.credentials.connect(&target.addr).await?;
            let entity_type = entity_type(&mut client, target.entity_type).await?;
            let mut request = tonic::Request::new(TellRequest {
                entity_type: entity_type.clone(),
                entity_id: id.clone(),
                payload: Some(json_payload(data)),
                idempotency_key,
            });
            request.set_timeout(TELL_DEADLINE);
            let response = client.tell(request).await?.into_inner();
            let outcome = TellOutcome {
                entity_type,
                entity_id: id,
                shard: response.shard,
                buffered: (!response.buffered.is_empty()).then_some(response.buffered),
                already_applied: response.already_applied,
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
            let mut client = target.credentials.connect(&target.addr).await?;
            let entity_type = entity_type(&mut client, target.entity_type).await?;
            let mut request = tonic::Request::new(AskRequest {
                entity_type: entity_type.clone(),
                entity_id: id.clone(),
                payload: Some(json_payload(data)),
                timeout: proto_timeout(timeout)?,
            });
            set_deadline(&mut request, timeout);
            let response = client.ask(request).await?.into_inner();
            let outcome = AskOutcome {
                entity_type,
                entity_id: id,
                shard: response.shard,
                reply: reply_text(response.reply.as_ref()),
            };
            Ok(render_ask(&outcome, target.json))
        }
        ClientCommand::Shards { target, timeout } => {
            let mut client = target.credentials.connect(&target.addr).await?;
            let entity_type = entity_type(&mut client, target.entity_type).await?;
            let mut request = tonic::Request::new(RegionStateRequest {
                entity_type,
                timeout: proto_timeout(timeout)?,
            });
            set_deadline(&mut request, timeout);
            let response = client.region_state(request).await?.into_inner();
            Ok(render_shards(&ShardsOutcome::from(response), target.json))
        }
        ClientCommand::Stats { target, timeout } => {
            let mut client = target.credentials.connect(&target.addr).await?;
            let entity_type = entity_type(&mut client, target.entity_type).await?;
            let mut request = tonic::Request::new(ClusterStatsRequest {
                entity_type,
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

/// The reply as JSON text, as the node wrote it: parsing it into a
/// `serde_json::Value` would print some floats one step off in their last
/// digit (serde_json's default float parsing does not round-trip). A reply
/// that is not JSON (a node should not send one) is shown as a JSON string
/// rather than lost.
pub fn reply_text(reply: Option<&Payload>) -> String {
    let Some(payload) = reply else {
        return "null".to_string();
    };
    let is_json = serde_json::from_slice::<serde::de::IgnoredAny>(&payload.data).is_ok();
    match std::str::from_utf8(&payload.data) {
        Ok(text) if is_json => output::compact_json(text),
        _ => serde_json::Value::from(String::from_utf8_lossy(&payload.data)).to_string(),
    }
}

/// A name no entity type can have (names are made of `[A-Za-z0-9_.-]`):
/// asked about it, a node answers with the entity types it runs.
const NO_ENTITY_TYPE: &str = "?";

/// The entity type `--type` names (`given`, empty when it names none), or
/// else the node's only one.
///
/// No call of the client API lists a node's entity types, but a region
/// lookup that fails names them (`... is not known on this node; known:
/// counter, user`), so the node is asked for the region of a name no
/// entity type can have: one cheap call that touches no shard.
///
/// # Errors
/// The node runs several entity types (the error names them), or its
/// answer does not list them.
pub async fn entity_type(client: &mut Client, given: String) -> Result<String, ClientCliError> {
    if !given.is_empty() {
        return Ok(given);
    }
    let mut request = tonic::Request::new(RegionStateRequest {
        entity_type: NO_ENTITY_TYPE.to_string(),
        timeout: None,
    });
    request.set_timeout(CONNECT_TIMEOUT);
    let status = client.region_state(request).await.err();
    let known = status.as_ref().and_then(known_entity_types);
    match known.as_deref() {
        Some([only]) => Ok(only.clone()),
        Some(several) if !several.is_empty() => Err(ClientCliError::EntityType(format!(
            "the node runs several entity types ({}): name one with --type",
            several.join(", ")
        ))),
        _ => Err(ClientCliError::EntityType(format!(
            "cannot learn the node's entity types ({}): name one with --type",
            status.map_or_else(
                || "it answered for an entity type named \"?\"".to_string(),
                |s| format!("{}: {}", code_name(s.code()), s.message())
            )
        ))),
    }
}

/// The entity types a node's refusal of an unknown one lists, in its
/// order; `None` when the refusal is not that one.
pub fn known_entity_types(status: &tonic::Status) -> Option<Vec<String>> {
    if status.code() != tonic::Code::InvalidArgument {
        return None;
    }
    let (_, list) = status.message().rsplit_once("; known: ")?;
    // A running node has at least one entity type (a program that registers
    // none does not start), so its "none" is read as a type of that name.
    let names: Vec<String> = list.split(", ").map(str::to_string).collect();
    let valid = |name: &String| {
        !name.is_empty()
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'))
    };
    names.iter().all(valid).then_some(names)
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
mod against_a_node;

#[cfg(test)]
mod tests;
