//! Purchase events made up for the sample, with the totals they add up to,
//! so that whoever produced them can check what the entities report.

use super::{Purchase, UserStats};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Products and their prices in cents.
const PRODUCTS: [(&str, i64); 8] = [
    ("tea", 350),
    ("coffee", 420),
    ("notebook", 1299),
    ("pencil", 99),
    ("headphones", 7999),
    ("backpack", 4950),
    ("lamp", 2599),
    ("mug", 850),
];

/// What a run of events adds up to, per user.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Totals {
    /// Events made.
    pub records: u64,
    /// Each user's totals after every event was handled once, in order.
    pub users: BTreeMap<String, UserStats>,
}

/// Purchase events of `users` users (`user-0` ... by default), a random user each,
/// numbered per user from 1. The same seed makes the same events.
#[derive(Debug)]
pub struct Generator {
    users: Vec<String>,
    rng: StdRng,
    totals: Totals,
}

impl Totals {
    /// The users whose spending crossed [`super::MILESTONE_CENTS`]: each
    /// emits one milestone.
    pub fn milestones(&self) -> impl Iterator<Item = &str> {
        self.users
            .iter()
            .filter(|(_, stats)| stats.amount_spent >= super::MILESTONE_CENTS)
            .map(|(user, _)| user.as_str())
    }
}

impl Generator {
    /// Events of `users` users (at least one), named `<prefix><n>`.
    pub fn new(prefix: &str, users: usize, seed: u64) -> Self {
        Self {
            users: (0..users.max(1)).map(|i| format!("{prefix}{i}")).collect(),
            rng: StdRng::seed_from_u64(seed),
            totals: Totals::default(),
        }
    }

    /// The next event: its user and purchase.
    pub fn next_event(&mut self) -> (String, Purchase) {
        let user = self.users[self.rng.random_range(0..self.users.len())].clone();
        let (product, price) = PRODUCTS[self.rng.random_range(0..PRODUCTS.len())];
        let stats = self.totals.users.entry(user.clone()).or_default();
        let purchase = Purchase {
            product: product.to_string(),
            quantity: self.rng.random_range(1..=5),
            price,
            sequence: stats.last_sequence + 1,
        };
        // Prices and quantities are small: no overflow in any realistic run.
        let _ = stats.add(&purchase);
        self.totals.records += 1;
        (user, purchase)
    }

    /// The totals of the events made so far.
    pub fn totals(&self) -> &Totals {
        &self.totals
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_are_numbered_per_user_and_the_totals_follow_them() {
        let mut generator = Generator::new("user-", 3, 7);
        let mut seen: BTreeMap<String, UserStats> = BTreeMap::new();
        for _ in 0..100 {
            let (user, purchase) = generator.next_event();
            let stats = seen.entry(user).or_default();
            assert_eq!(purchase.sequence, stats.last_sequence + 1);
            stats.add(&purchase).expect("added");
        }
        assert_eq!(generator.totals().records, 100);
        assert_eq!(generator.totals().users, seen);
        assert!(seen.values().all(|s| s.out_of_sequence == 0));
        let mut again = Generator::new("user-", 3, 7);
        let first = again.next_event();
        assert_eq!(
            first,
            Generator::new("user-", 3, 7).next_event(),
            "same seed, same events"
        );
    }
}
