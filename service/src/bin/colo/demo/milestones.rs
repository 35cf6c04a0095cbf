//! The demo's outputs: each user whose spending crosses the milestone
//! emits one record to `demo.user.milestones`, kept with the change that
//! crossed it and sent once that change is durable. At the end the topic
//! is read back as a reader with `read_committed` sees it: each such user
//! must have emitted exactly one, through the joins, leaves and crash.

use super::DemoError;
use colo::process::samples::purchases::{
    check_milestones, milestone_topic, MilestonesChecked, Totals,
};
use std::time::{Duration, Instant};

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
    let deadline = Instant::now() + SENT_WITHIN;
    loop {
        let read = tokio::task::spawn_blocking({
            let bootstrap = bootstrap.to_string();
            move || {
                colo_connectors::read_outputs(
                    &bootstrap,
                    &[],
                    &topic(),
                    colo::OUTPUT_ID_HEADER,
                    Duration::from_secs(10),
                )
            }
        })
        .await
        .map_err(|e| DemoError::Step(format!("read the milestones: {e}")))?
        .map_err(|e| DemoError::Step(format!("read the milestones: {e}")))?;
        let checked = check_milestones(&topic(), expected, &read);
        if checked.all_once() || Instant::now() >= deadline {
            return Ok(checked);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
