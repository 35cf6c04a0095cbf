//! The sample's milestones checked against what was produced: each user
//! whose spending crossed [`super::MILESTONE_CENTS`] emitted exactly one,
//! under one id, and no other user emitted any. Read back as a downstream
//! reader with `read_committed` sees them. A record sent twice under the
//! same id (a node that died between sending it and dropping it from its
//! entity's record) is what a reader drops by its id: counted, not a
//! failure. What `colo verify --milestones` and the tests check.

use super::{Milestone, Totals};
use colo_connectors::OutputRead;
use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

/// How long one read of the topic may wait for its next record.
const READ_TIMEOUT: Duration = Duration::from_secs(30);

/// What the milestone topic holds, against what was produced.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct MilestonesChecked {
    pub topic: String,
    /// Users whose spending crossed the milestone.
    pub expected: usize,
    /// Of those, the ones with exactly one milestone id.
    pub once: usize,
    /// Crossed, with no milestone.
    pub missing: Vec<String>,
    /// Users with more than one milestone id, with how many.
    pub many: Vec<(String, usize)>,
    /// Milestones of users that did not cross it.
    pub unexpected: Vec<String>,
    /// Records whose id an earlier record had: dropped by a reader.
    pub sent_twice: usize,
    /// Records without an id, or whose value is not a milestone.
    pub malformed: usize,
}

impl MilestonesChecked {
    pub fn all_once(&self) -> bool {
        self.once == self.expected && self.unexpected.is_empty() && self.malformed == 0
    }
}

/// Checks `read` (the topic's records) against `totals`.
pub fn check_milestones(topic: &str, totals: &Totals, read: &[OutputRead]) -> MilestonesChecked {
    let expected: BTreeSet<&str> = totals.milestones().collect();
    let mut ids: BTreeMap<String, BTreeSet<&str>> = BTreeMap::new();
    let mut seen = BTreeSet::new();
    let mut checked = MilestonesChecked {
        topic: topic.to_string(),
        expected: expected.len(),
        ..MilestonesChecked::default()
    };
    for record in read {
        let milestone = serde_json::from_slice::<Milestone>(&record.value).ok();
        let (Some(id), Some(milestone)) = (record.id.as_deref(), milestone) else {
            checked.malformed += 1;
            continue;
        };
        if !seen.insert(id) {
            checked.sent_twice += 1;
            continue;
        }
        ids.entry(milestone.user).or_default().insert(id);
    }
    for user in &expected {
        match ids.get(*user).map_or(0, BTreeSet::len) {
            0 => checked.missing.push((*user).to_string()),
            1 => checked.once += 1,
            n => checked.many.push(((*user).to_string(), n)),
        }
    }
    checked.unexpected = ids
        .keys()
        .filter(|user| !expected.contains(user.as_str()))
        .cloned()
        .collect();
    checked
}

/// `topic` on `bootstrap_servers` read back with read_committed
/// (`client`: librdkafka properties for the read) and checked against
/// `totals`, again until every user who crossed the milestone emitted
/// exactly one or `within` has passed (the last are sent just after their
/// change is durable; `Duration::ZERO`: one read). The last check.
///
/// # Errors
/// The topic cannot be read.
pub async fn read_back_milestones(
    bootstrap_servers: &str,
    client: &[(String, String)],
    topic: &str,
    totals: &Totals,
    within: Duration,
) -> Result<MilestonesChecked, String> {
    let deadline = Instant::now() + within;
    loop {
        let read = tokio::task::spawn_blocking({
            let (servers, client, topic) = (
                bootstrap_servers.to_string(),
                client.to_vec(),
                topic.to_string(),
            );
            move || {
                colo_connectors::read_outputs(
                    &servers,
                    &client,
                    &topic,
                    crate::OUTPUT_ID_HEADER,
                    READ_TIMEOUT,
                )
            }
        })
        .await
        .map_err(|e| e.to_string())?
        .map_err(|e| format!("{topic}: {e}"))?;
        let checked = check_milestones(topic, totals, &read);
        if checked.all_once() || Instant::now() >= deadline {
            return Ok(checked);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::process::samples::purchases::{UserStats, MILESTONE_CENTS};

    fn record(user: &str, id: &str) -> OutputRead {
        let milestone = Milestone {
            user: user.into(),
            amount_spent: MILESTONE_CENTS,
            sequence: 3,
        };
        OutputRead {
            partition: 0,
            offset: 0,
            key: user.as_bytes().to_vec(),
            value: serde_json::to_vec(&milestone).expect("json"),
            id: Some(id.into()),
        }
    }

    #[test]
    fn each_crossing_user_counts_once_and_a_copy_under_the_same_id_is_dropped() {
        let mut totals = Totals::default();
        for (user, spent) in [("a", MILESTONE_CENTS), ("b", MILESTONE_CENTS + 1), ("c", 1)] {
            let stats = UserStats {
                amount_spent: spent,
                ..UserStats::default()
            };
            totals.users.insert(user.into(), stats);
        }
        let read = [record("a", "x/1"), record("a", "x/1"), record("b", "x/2")];
        let checked = check_milestones("t", &totals, &read);
        assert!(checked.all_once(), "{checked:?}");
        assert_eq!((checked.once, checked.sent_twice), (2, 1));

        let read = [record("a", "x/1"), record("a", "x/3"), record("c", "x/4")];
        let checked = check_milestones("t", &totals, &read);
        assert!(!checked.all_once());
        assert_eq!(checked.missing, vec!["b".to_string()]);
        assert_eq!(checked.many, vec![("a".to_string(), 2)]);
        assert_eq!(checked.unexpected, vec!["c".to_string()]);
        let mut bare = record("b", "x/5");
        bare.id = None;
        assert_eq!(check_milestones("t", &totals, &[bare]).malformed, 1);
    }
}
