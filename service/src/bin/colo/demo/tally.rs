//! The demo's own count of what the users' entities handled, across its
//! nodes: for its progress lines, and to know when every record was.

use super::pauses;
use colo::entity::{Entity, EntityContext, EntityError};
use colo::process::samples::purchases::{self, User, UserMsg, UserStats};
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::LazyLock;

/// What the users' entities handled, across nodes: the demo's own view,
/// for its progress lines and to know when every record was handled. One
/// per process (the demo runs once): a durable entity is read back from
/// its stored state, which holds the user's totals only.
pub(super) static TALLY: LazyLock<Tally> = LazyLock::new(Tally::default);

#[derive(Debug, Default)]
pub(super) struct Tally {
    pub(super) handled: AtomicU64,
    /// Events handled again (a sequence number at or below one seen).
    pub(super) again: AtomicU64,
    /// Events handled before an earlier event of their user: none may be.
    pub(super) ahead: AtomicU64,
    pub(super) last: Mutex<HashMap<String, u64>>,
    pub(super) pauses: pauses::Pauses,
}

/// The sample's user, counted in the tally; stored as the user alone.
#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(transparent)]
pub(super) struct TalliedUser {
    user: User,
}

impl Entity for TalliedUser {
    type Message = UserMsg;
    type Reply = UserStats;

    async fn handle(
        &mut self,
        ctx: &EntityContext,
        message: UserMsg,
    ) -> Result<UserStats, EntityError> {
        if let UserMsg::Purchase(purchase) = &message {
            let tally = &*TALLY;
            tally.handled.fetch_add(1, Ordering::Relaxed);
            let mut last = tally.last.lock();
            let seen = last.entry(ctx.entity_id().to_string()).or_default();
            if purchase.sequence <= *seen {
                tally.again.fetch_add(1, Ordering::Relaxed);
            } else if purchase.sequence > *seen + 1 {
                tally.ahead.fetch_add(1, Ordering::Relaxed);
            }
            *seen = (*seen).max(purchase.sequence);
            drop(last);
            tally.pauses.handled(ctx.entity_id());
        }
        self.user.handle(ctx, message).await
    }
}

pub(super) fn all_handled(tally: &Tally, expected: &purchases::Totals) -> bool {
    missing(tally, expected).is_empty()
}

/// Users whose last event was not handled yet.
pub(super) fn missing(tally: &Tally, expected: &purchases::Totals) -> Vec<String> {
    let last = tally.last.lock();
    expected
        .users
        .iter()
        .filter(|(user, stats)| last.get(*user).copied().unwrap_or(0) < stats.last_sequence)
        .map(|(user, _)| user.clone())
        .collect()
}
