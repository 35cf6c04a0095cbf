//! The sample, after Akka's kafka-to-sharding one: users' purchase events
//! (protobuf, topic `user-events`) drive one entity per user that keeps
//! running totals, asked with the `UserStats` query:
//!
//! ```text
//! colo ask --type user --id user-7 UserStats
//! ```
//!
//! - this file: the `user` entity type, its messages and its totals, and
//!   the milestone a user emits once its spending crosses
//!   [`MILESTONE_CENTS`] (to the type's output topic, when it has one:
//!   `colo run` gives it `<cluster>.user.milestones`);
//! - `purchases/records.rs`: purchase events to messages, the entity id
//!   read from the decoded event;
//! - `purchases/milestones.rs`: the milestones read back, checked against
//!   what was produced;
//! - `purchases/generate.rs`: the events `colo produce` and the demo send,
//!   with the totals they must add up to (the binary sends them to Kafka:
//!   `colo produce`).

mod generate;
mod milestones;
mod records;

pub use generate::{Generator, Totals};
pub use milestones::{check_milestones, read_back_milestones, MilestonesChecked};
pub use records::{encode_event, purchase_records};

use crate::entity::{Entity, EntityContext, EntityError};
use serde::{Deserialize, Serialize};

/// The entity type name of the sample's users.
pub const USER: &str = "user";

/// The log target of each handled purchase (debug level).
pub const PURCHASES_LOG: &str = "colo::purchases";

/// The state version of a durable [`User`]: raise it when its fields
/// change.
pub const USER_STATE_VERSION: u32 = 1;

/// The sample's topic.
pub const USER_EVENTS: &str = "user-events";

/// The spending, in cents, whose crossing a user emits a milestone for.
pub const MILESTONE_CENTS: i64 = 200_000;

/// The topic `colo run` gives the sample's users for their milestones.
pub fn milestone_topic(cluster: &str) -> String {
    format!("{cluster}.{USER}.milestones")
}

/// What a user emits, once, when its spending crosses [`MILESTONE_CENTS`]
/// (JSON, keyed by the user's id).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Milestone {
    pub user: String,
    /// In cents, after the purchase that crossed it.
    pub amount_spent: i64,
    /// The sequence number of that purchase.
    pub sequence: u64,
}

/// One purchase of a user.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Purchase {
    pub product: String,
    pub quantity: u32,
    /// Of one item, in cents.
    pub price: i64,
    /// The producer's count of this user's events, from 1.
    pub sequence: u64,
}

/// What a user entity is told or asked.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum UserMsg {
    /// A purchase event; answers the totals after it.
    Purchase(Purchase),
    /// Answers the totals.
    UserStats,
}

/// A user's running totals.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct UserStats {
    /// Purchase events handled.
    pub purchases: u64,
    /// Items bought.
    pub items: u64,
    /// In cents.
    pub amount_spent: i64,
    /// The sequence number of the last event handled.
    pub last_sequence: u64,
    /// Events whose sequence number did not follow the last one's: a
    /// replay (at least once) or a gap. Zero while records arrive exactly
    /// once and in order.
    pub out_of_sequence: u64,
}

impl UserStats {
    /// Adds a purchase. The first event an entity sees may have any
    /// sequence number (a user kept in memory only starts from zero again
    /// when it is created anew).
    pub fn add(&mut self, purchase: &Purchase) -> Result<(), EntityError> {
        if self.last_sequence != 0 && purchase.sequence != self.last_sequence + 1 {
            self.out_of_sequence += 1;
        }
        let amount = purchase
            .price
            .checked_mul(i64::from(purchase.quantity))
            .and_then(|a| self.amount_spent.checked_add(a))
            .ok_or_else(|| EntityError::new("amount spent overflows"))?;
        self.amount_spent = amount;
        self.purchases += 1;
        self.items += u64::from(purchase.quantity);
        self.last_sequence = purchase.sequence;
        Ok(())
    }
}

/// A user: running totals. `colo run` registers it durable
/// ([`USER_STATE_VERSION`]): its totals survive hand-offs, passivation and
/// restarts, and each purchase event counts once.
#[derive(Debug, Default, Clone, Serialize, Deserialize)]
pub struct User {
    stats: UserStats,
}

impl Entity for User {
    type Message = UserMsg;
    type Reply = UserStats;

    async fn handle(
        &mut self,
        ctx: &EntityContext,
        message: UserMsg,
    ) -> Result<UserStats, EntityError> {
        if let UserMsg::Purchase(purchase) = &message {
            let before = self.stats.amount_spent;
            self.stats.add(purchase)?;
            let crossed = before < MILESTONE_CENTS && self.stats.amount_spent >= MILESTONE_CENTS;
            if let (true, Some(topic)) = (crossed, ctx.output_topics().first()) {
                let milestone = Milestone {
                    user: ctx.entity_id().to_string(),
                    amount_spent: self.stats.amount_spent,
                    sequence: purchase.sequence,
                };
                let value = serde_json::to_vec(&milestone)
                    .map_err(|e| EntityError::new(format!("a milestone: {e}")))?;
                ctx.emit(topic, ctx.entity_id().as_bytes(), &value)
                    .map_err(|e| EntityError::new(e.to_string()))?;
            }
            // What an operator (and the end-to-end tests) follow to see
            // each event handled, in order, once.
            tracing::debug!(target: PURCHASES_LOG, entity_id = %ctx.entity_id(), sequence = purchase.sequence, "purchase handled");
        }
        Ok(self.stats.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn purchase(sequence: u64) -> Purchase {
        Purchase {
            product: "tea".into(),
            quantity: 2,
            price: 350,
            sequence,
        }
    }

    #[test]
    fn totals_add_up_and_a_replay_or_a_gap_is_counted() {
        let mut stats = UserStats::default();
        for seq in [5, 6, 7] {
            stats.add(&purchase(seq)).expect("added");
        }
        assert_eq!(
            (stats.purchases, stats.items, stats.amount_spent),
            (3, 6, 2100)
        );
        assert_eq!(stats.out_of_sequence, 0, "a first event may be any");
        stats.add(&purchase(7)).expect("replay");
        stats.add(&purchase(9)).expect("gap");
        assert_eq!(stats.out_of_sequence, 2);
    }

    #[test]
    fn an_amount_that_overflows_fails_the_handler() {
        let mut stats = UserStats::default();
        let huge = Purchase {
            price: i64::MAX,
            ..purchase(1)
        };
        assert!(stats.add(&huge).is_err());
        assert_eq!(stats, UserStats::default(), "nothing half-added");
    }
}
