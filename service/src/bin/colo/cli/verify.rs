//! `colo verify`: asks every user of the sample for its totals and compares
//! them with the ones `colo produce --expected` wrote, so that an operator
//! checks a real cluster the way the demo checks itself: every purchase
//! counted exactly once, whatever moved, stopped or crashed meanwhile.

use super::client::{code_name, Client, Credentials, DEFAULT_ADDR};
use colo::codec::ContentType;
use colo::samples::purchases::{Totals, UserStats, USER};
use colo_proto::v1::{AskRequest, Payload};
use futures::stream::{self, StreamExt};
use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::Duration;

/// Users whose difference is printed at most (all are counted).
const SHOWN: usize = 20;

/// `colo verify`'s flags.
#[derive(Debug, Clone, clap::Args)]
pub struct VerifyArgs {
    /// The totals `colo produce --expected FILE.json` wrote.
    #[arg(long, value_name = "FILE.json")]
    pub expected: PathBuf,
    /// A node's gRPC address: any node of the cluster routes each ask to
    /// its user's node.
    #[arg(long, default_value = DEFAULT_ADDR)]
    pub addr: String,
    /// Asks in flight at once.
    #[arg(long, default_value_t = 32, value_parser = clap::value_parser!(u64).range(1..=10_000))]
    pub concurrency: u64,
    /// How long each ask may take.
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
    pub timeout: Duration,
    /// Print one JSON document on stdout instead of text.
    #[arg(long)]
    pub json: bool,
    /// TLS and authentication, for a node with `[tls]`.
    #[command(flatten)]
    pub credentials: Credentials,
}

/// What was found.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Verified {
    pub users: usize,
    pub matching: usize,
    /// Users whose totals differ, with both.
    pub differing: Vec<Difference>,
    /// Users whose ask failed, with why.
    pub failed: Vec<(String, String)>,
}

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Difference {
    pub user: String,
    pub expected: UserStats,
    pub got: UserStats,
}

impl Verified {
    pub fn all_match(&self) -> bool {
        self.matching == self.users
    }
}

/// Why `colo verify` could not run, or found a difference.
#[derive(Debug, thiserror::Error)]
pub enum VerifyError {
    #[error("cannot read {path}: {reason}")]
    Expected { path: PathBuf, reason: String },
    #[error(transparent)]
    Client(#[from] super::client::ClientCliError),
    /// Printed already; the exit status says it.
    #[error("{matching} of {users} users match")]
    Mismatch { matching: usize, users: usize },
}

/// Runs `colo verify` and prints what it found.
///
/// # Errors
/// The file cannot be read, the node cannot be reached, or a user's totals
/// differ or could not be asked (after printing them).
pub async fn run(args: VerifyArgs) -> Result<(), VerifyError> {
    let verified = verify(&args).await?;
    print!("{}", render(&verified, &args));
    if verified.all_match() {
        Ok(())
    } else {
        Err(VerifyError::Mismatch {
            matching: verified.matching,
            users: verified.users,
        })
    }
}

/// Asks every user of the file for its totals.
///
/// # Errors
/// The file cannot be read, or the node cannot be reached.
pub async fn verify(args: &VerifyArgs) -> Result<Verified, VerifyError> {
    let unreadable = |reason: String| VerifyError::Expected {
        path: args.expected.clone(),
        reason,
    };
    let text = std::fs::read_to_string(&args.expected).map_err(|e| unreadable(e.to_string()))?;
    let totals: Totals = serde_json::from_str(&text).map_err(|e| {
        unreadable(format!(
            "not the JSON `colo produce --expected` writes: {e}"
        ))
    })?;
    let client = args.credentials.connect(&args.addr).await?;
    let timeout = args.timeout;
    let asked: Vec<(String, UserStats, Result<UserStats, String>)> = stream::iter(totals.users)
        .map(|(user, expected)| {
            let mut client = client.clone();
            async move {
                let got = ask(&mut client, &user, timeout).await;
                (user, expected, got)
            }
        })
        .buffer_unordered(usize::try_from(args.concurrency).unwrap_or(1))
        .collect()
        .await;
    let mut verified = Verified {
        users: asked.len(),
        matching: 0,
        differing: Vec::new(),
        failed: Vec::new(),
    };
    for (user, expected, got) in asked {
        match got {
            Ok(got) if got == expected => verified.matching += 1,
            Ok(got) => verified.differing.push(Difference {
                user,
                expected,
                got,
            }),
            Err(reason) => verified.failed.push((user, reason)),
        }
    }
    verified.differing.sort_by(|a, b| a.user.cmp(&b.user));
    verified.failed.sort();
    Ok(verified)
}

async fn ask(client: &mut Client, user: &str, timeout: Duration) -> Result<UserStats, String> {
    let mut request = tonic::Request::new(AskRequest {
        entity_type: USER.to_string(),
        entity_id: user.to_string(),
        payload: Some(Payload {
            content_type: ContentType::Json.as_str().to_string(),
            data: b"\"UserStats\"".to_vec(),
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
    serde_json::from_slice(&reply.data)
        .map_err(|e| format!("the reply is not a user's totals: {e}"))
}

/// What `colo verify` prints.
pub fn render(verified: &Verified, args: &VerifyArgs) -> String {
    if args.json {
        let mut json = serde_json::to_string(verified).unwrap_or_default();
        json.push('\n');
        return json;
    }
    let mut out = format!(
        "{} of {} users match {}\n",
        verified.matching,
        verified.users,
        args.expected.display()
    );
    for d in verified.differing.iter().take(SHOWN) {
        let _ = writeln!(
            out,
            "  {}: expected {} purchases, {} items, {} cents (last sequence {}); got {}, {}, {} (last sequence {}, {} out of sequence)",
            d.user,
            d.expected.purchases,
            d.expected.items,
            d.expected.amount_spent,
            d.expected.last_sequence,
            d.got.purchases,
            d.got.items,
            d.got.amount_spent,
            d.got.last_sequence,
            d.got.out_of_sequence
        );
    }
    for (user, reason) in verified.failed.iter().take(SHOWN) {
        let _ = writeln!(out, "  {user}: not asked: {reason}");
    }
    let unshown = (verified.differing.len() + verified.failed.len()).saturating_sub(2 * SHOWN);
    if unshown > 0 {
        let _ = writeln!(out, "  ... and {unshown} more");
    }
    out
}
