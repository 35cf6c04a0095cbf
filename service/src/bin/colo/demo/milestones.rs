//! The demo's outputs: each user whose spending crosses the milestone
//! emits one record to `demo.user.milestones`, kept with the change that
//! crossed it and sent once that change is durable. At the end the topic
//! is read back as a reader with `read_committed` sees it: each such user
//! must have emitted exactly one, through the joins and leaves.

use super::DemoError;
use colo::process::samples::purchases::{
    milestone_topic, read_back_milestones, MilestonesChecked, Totals,
};
use std::time::Duration;

/// The demo's cluster name, as its topics have it.
const CLUSTER: &str = "demo";

/// How long the last milestones may take to be sent once every record is
/// handled.
const SENT_WITHIN: Duration = Duration::from_secs(30);

pub(super) fn topic() -> String {
    milestone_topic(CLUSTER)
}

/// The milestones read back and checked against what was produced, again
/// until each is there once or [`SENT_WITHIN`] has passed.
pub(super) async fn checked(
    bootstrap: &str,
    expected: &Totals,
) -> Result<MilestonesChecked, DemoError> {
    read_back_milestones(bootstrap, &[], &topic(), expected, SENT_WITHIN)
        .await
        .map_err(|e| DemoError::Step(format!("read the milestones: {e}")))
}
