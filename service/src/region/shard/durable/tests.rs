use super::waits_for_write;
use crate::envelope::{Origin, Reply};
use crate::error::AskError;
use std::sync::Arc;
use tokio::sync::oneshot;

/// A Kafka record sent to its shard's node as an ask, and found applied
/// already there (a copy sent again): its partition acks it on the
/// answer, so the answer must wait for the write of the state the skip
/// rests on, like an answer to a change.
#[test]
fn a_copy_skipped_as_applied_waits_for_the_write_of_the_state_it_rests_on() {
    let origin = Box::new(Origin {
        source: Arc::from("events/3"),
        offset: 10,
        previous: None,
    });
    let (tx, _rx) = oneshot::channel::<Result<u32, AskError>>();
    let ask = Reply::Local(tx, Some(origin));
    let skipped: Result<u32, AskError> = Err(AskError::AlreadyApplied);
    assert!(waits_for_write(&ask, &skipped, || true));
    assert!(
        !waits_for_write(&ask, &skipped, || false),
        "written: at once"
    );
    assert!(waits_for_write(&ask, &Ok(1), || true));
    let failed: Result<u32, AskError> = Err(AskError::EntityFailed("no".into()));
    assert!(
        !waits_for_write(&ask, &failed, || true),
        "nothing to wait for"
    );
    assert!(!waits_for_write(&Reply::<u32>::None, &Ok(1), || true));
}
