//! `colo verify --milestones TOPIC`: the sample's milestones read back
//! from Kafka and checked (`samples::purchases::milestones`), in words.

use colo::process::samples::purchases::MilestonesChecked;

/// What `colo verify` prints of it.
pub fn render(checked: &MilestonesChecked) -> String {
    use std::fmt::Write as _;
    let mut out = format!(
        "{} of {} users who crossed the milestone emitted exactly one to {} ({} records sent twice under the same id, dropped by it)\n",
        checked.once, checked.expected, checked.topic, checked.sent_twice
    );
    for user in checked.missing.iter().take(20) {
        let _ = writeln!(out, "  {user}: crossed it, emitted none");
    }
    for (user, n) in checked.many.iter().take(20) {
        let _ = writeln!(out, "  {user}: emitted {n}, under different ids");
    }
    for user in checked.unexpected.iter().take(20) {
        let _ = writeln!(out, "  {user}: did not cross it, emitted one");
    }
    if checked.malformed > 0 {
        let _ = writeln!(
            out,
            "  {} records without an id or not a milestone",
            checked.malformed
        );
    }
    out
}
