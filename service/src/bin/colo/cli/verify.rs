//! `colo verify`: asks every entity a file names and compares each answer
//! with the one the file expects, so that an operator checks a real cluster
//! the way the demo checks itself: every event counted exactly once,
//! whatever moved, stopped or crashed meanwhile.
//!
//! Two kinds of file: the sample's, the users' totals `colo produce
//! --expected` writes (asked `UserStats`); and any entity type's, a JSON
//! object of entity id → expected reply, asked the message `--ask` gives,
//! so a program of one's own is checked without a checker of its own.
//!
//! With the sample's file, `--milestones TOPIC` also reads the users'
//! milestones back from Kafka (`milestones.rs`): each emitted exactly once.

mod milestones;

use super::client::{code_name, entity_type, message_json, Client, Credentials, DEFAULT_ADDR};
use colo::codec::ContentType;
use colo::process::samples::purchases::{
    read_back_milestones, MilestonesChecked, Totals, UserStats, USER,
};
use colo_proto::v1::{AskRequest, Payload};
use futures::stream::{self, StreamExt};
use serde_json::Value;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::Duration;

/// Entities whose difference is printed at most (all are counted).
const SHOWN: usize = 20;

/// `colo verify`'s flags.
#[derive(Debug, Clone, clap::Args)]
pub struct VerifyArgs {
    /// What to expect: the totals `colo produce --expected FILE.json` wrote
    /// or, with `--ask`, a JSON object of entity id → expected reply.
    #[arg(long, value_name = "FILE.json")]
    pub expected: PathBuf,
    /// The message each entity is asked, as JSON (a bare word like Level
    /// is taken as the JSON string "Level"); its reply must equal the
    /// file's, as JSON. Without it, the file is the sample's.
    #[arg(long, value_name = "MESSAGE")]
    pub ask: Option<String>,
    /// The entity type asked, with `--ask`. Default: the node's only one.
    #[arg(long = "type", value_name = "ENTITY_TYPE", requires = "ask")]
    pub entity_type: Option<String>,
    /// A node's gRPC address: any node of the cluster routes each ask to
    /// its entity's node.
    #[arg(long, default_value = DEFAULT_ADDR)]
    pub addr: String,
    /// Asks in flight at once.
    #[arg(long, default_value_t = 32, value_parser = clap::value_parser!(u64).range(1..=10_000))]
    pub concurrency: u64,
    /// How long each ask may take.
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
    pub timeout: Duration,
    /// The sample's milestone topic (`<cluster>.user.milestones`): read
    /// back with read_committed, each user who crossed the milestone must
    /// have emitted exactly one.
    #[arg(
        long,
        value_name = "TOPIC",
        requires = "bootstrap_servers",
        conflicts_with = "ask"
    )]
    pub milestones: Option<String>,
    /// The Kafka brokers to read `--milestones` from.
    #[arg(long, requires = "milestones")]
    pub bootstrap_servers: Option<String>,
    /// A librdkafka property for that read, `key=value`; repeatable.
    #[arg(long = "client", value_name = "KEY=VALUE", value_parser = super::produce::key_value)]
    pub client: Vec<(String, String)>,
    /// Print one JSON document on stdout instead of text.
    #[arg(long)]
    pub json: bool,
    /// TLS and authentication, for a node with `[tls]`.
    #[command(flatten)]
    pub credentials: Credentials,
}

/// What was found.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Verified {
    pub entity_type: String,
    pub entities: usize,
    pub matching: usize,
    /// Entities whose reply differs, with both.
    pub differing: Vec<Difference>,
    /// Entities whose ask failed, with why.
    pub failed: Vec<(String, String)>,
    /// The sample's milestones, with `--milestones`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub milestones: Option<MilestonesChecked>,
}

#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Difference {
    pub id: String,
    pub expected: Value,
    pub got: Value,
}

impl Verified {
    pub fn all_match(&self) -> bool {
        self.matching == self.entities
            && self
                .milestones
                .as_ref()
                .is_none_or(MilestonesChecked::all_once)
    }
}

/// Why `colo verify` could not run, or found a difference.
#[derive(Debug, thiserror::Error)]
pub enum VerifyError {
    #[error("cannot read {path}: {reason}")]
    Expected { path: PathBuf, reason: String },
    #[error(transparent)]
    Client(#[from] super::client::ClientCliError),
    #[error("cannot read the milestones: {0}")]
    Milestones(String),
    /// Printed already; the exit status says it.
    #[error("{matching} of {entities} {entity_type} entities match, or a milestone was not emitted exactly once")]
    Mismatch {
        entity_type: String,
        matching: usize,
        entities: usize,
    },
}

/// Runs `colo verify` and prints what it found.
///
/// # Errors
/// The file cannot be read, the node cannot be reached, or an entity's
/// reply differs or could not be asked (after printing them).
pub async fn run(args: VerifyArgs) -> Result<(), VerifyError> {
    let verified = verify(&args).await?;
    print!("{}", render(&verified, &args));
    if verified.all_match() {
        Ok(())
    } else {
        Err(VerifyError::Mismatch {
            entity_type: verified.entity_type,
            matching: verified.matching,
            entities: verified.entities,
        })
    }
}

/// What to ask, and of whom: the entity type, the message, and each
/// entity's expected reply; the sample's totals, if the file has them.
struct Plan {
    entity_type: String,
    message: Vec<u8>,
    expected: BTreeMap<String, Value>,
    totals: Option<Totals>,
}

/// Reads the file as the kind of file the flags say it is.
async fn plan(args: &VerifyArgs, client: &mut Client) -> Result<Plan, VerifyError> {
    let unreadable = |reason: String| VerifyError::Expected {
        path: args.expected.clone(),
        reason,
    };
    let text = std::fs::read_to_string(&args.expected).map_err(|e| unreadable(e.to_string()))?;
    let Some(ask) = &args.ask else {
        let totals: Totals = serde_json::from_str(&text).map_err(|e| {
            unreadable(format!(
                "not the JSON `colo produce --expected` writes (for another entity type, give --ask): {e}"
            ))
        })?;
        let expected = totals
            .users
            .clone()
            .into_iter()
            .map(|(user, stats)| {
                let stats = serde_json::to_value(stats)
                    .map_err(|e| unreadable(format!("a user's totals: {e}")))?;
                Ok((user, stats))
            })
            .collect::<Result<_, VerifyError>>()?;
        return Ok(Plan {
            entity_type: USER.to_string(),
            message: b"\"UserStats\"".to_vec(),
            expected,
            totals: Some(totals),
        });
    };
    let expected: BTreeMap<String, Value> = serde_json::from_str(&text).map_err(|e| {
        unreadable(format!(
            "not a JSON object of entity id → expected reply: {e}"
        ))
    })?;
    let message = message_json(ask)?;
    let given = args.entity_type.clone().unwrap_or_default();
    let entity_type = entity_type(client, given).await?;
    Ok(Plan {
        entity_type,
        message,
        expected,
        totals: None,
    })
}

/// Asks every entity of the file for its reply.
///
/// # Errors
/// The file cannot be read, or the node cannot be reached.
pub async fn verify(args: &VerifyArgs) -> Result<Verified, VerifyError> {
    let mut client = args.credentials.connect(&args.addr).await?;
    let plan = plan(args, &mut client).await?;
    let timeout = args.timeout;
    let (entity_type, message) = (&plan.entity_type, &plan.message);
    let asked: Vec<(String, Value, Result<Value, String>)> = stream::iter(plan.expected)
        .map(|(id, expected)| {
            let mut client = client.clone();
            async move {
                let got = ask(&mut client, entity_type, &id, message, timeout).await;
                (id, expected, got)
            }
        })
        .buffer_unordered(usize::try_from(args.concurrency).unwrap_or(1))
        .collect()
        .await;
    let milestones = match (&args.milestones, &args.bootstrap_servers, &plan.totals) {
        (Some(topic), Some(servers), Some(totals)) => Some(
            read_back_milestones(servers, &args.client, topic, totals, Duration::ZERO)
                .await
                .map_err(VerifyError::Milestones)?,
        ),
        _ => None,
    };
    let mut verified = Verified {
        entity_type: plan.entity_type.clone(),
        entities: asked.len(),
        matching: 0,
        differing: Vec::new(),
        failed: Vec::new(),
        milestones,
    };
    for (id, expected, got) in asked {
        match got {
            Ok(got) if got == expected => verified.matching += 1,
            Ok(got) => verified.differing.push(Difference { id, expected, got }),
            Err(reason) => verified.failed.push((id, reason)),
        }
    }
    verified.differing.sort_by(|a, b| a.id.cmp(&b.id));
    verified.failed.sort();
    Ok(verified)
}

async fn ask(
    client: &mut Client,
    entity_type: &str,
    id: &str,
    message: &[u8],
    timeout: Duration,
) -> Result<Value, String> {
    let mut request = tonic::Request::new(AskRequest {
        entity_type: entity_type.to_string(),
        entity_id: id.to_string(),
        payload: Some(Payload {
            content_type: ContentType::Json.as_str().to_string(),
            data: message.to_vec(),
        }),
        timeout: prost_types::Duration::try_from(timeout).ok(),
    });
    request.set_timeout(timeout + Duration::from_secs(1));
    let reply = client
        .ask(request)
        .await
        .map_err(|s| format!("{}: {}", code_name(s.code()), s.message()))?
        .into_inner()
        .reply
        .ok_or("no reply")?;
    serde_json::from_slice(&reply.data).map_err(|e| format!("the reply is not JSON: {e}"))
}

/// What `colo verify` prints.
pub fn render(verified: &Verified, args: &VerifyArgs) -> String {
    if args.json {
        let mut json = serde_json::to_string(verified).unwrap_or_default();
        json.push('\n');
        return json;
    }
    let sample = args.ask.is_none();
    let mut out = if sample {
        format!(
            "{} of {} users match {}\n",
            verified.matching,
            verified.entities,
            args.expected.display()
        )
    } else {
        format!(
            "{} of {} {} entities match {}\n",
            verified.matching,
            verified.entities,
            verified.entity_type,
            args.expected.display()
        )
    };
    for d in verified.differing.iter().take(SHOWN) {
        let _ = match sample.then(|| user_difference(d)).flatten() {
            Some(line) => writeln!(out, "{line}"),
            None => writeln!(out, "  {}: expected {}; got {}", d.id, d.expected, d.got),
        };
    }
    for (id, reason) in verified.failed.iter().take(SHOWN) {
        let _ = writeln!(out, "  {id}: not asked: {reason}");
    }
    let unshown = (verified.differing.len() + verified.failed.len()).saturating_sub(2 * SHOWN);
    if unshown > 0 {
        let _ = writeln!(out, "  ... and {unshown} more");
    }
    if let Some(checked) = &verified.milestones {
        out.push_str(&milestones::render(checked));
    }
    out
}

/// A user's difference in words, when both sides are a user's totals.
fn user_difference(d: &Difference) -> Option<String> {
    let expected: UserStats = serde_json::from_value(d.expected.clone()).ok()?;
    let got: UserStats = serde_json::from_value(d.got.clone()).ok()?;
    Some(format!(
        "  {}: expected {} purchases, {} items, {} cents (last sequence {}); got {}, {}, {} (last sequence {}, {} out of sequence)",
        d.id,
        expected.purchases,
        expected.items,
        expected.amount_spent,
        expected.last_sequence,
        got.purchases,
        got.items,
        got.amount_spent,
        got.last_sequence,
        got.out_of_sequence
    ))
}
