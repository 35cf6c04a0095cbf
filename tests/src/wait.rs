//! Waiting for a condition with a deadline instead of sleeping.

use std::future::Future;
use std::time::Duration;

/// Polls `check` every 50 ms until it holds; panics naming `what` after
/// `deadline`.
pub async fn until<F, Fut>(what: &str, deadline: Duration, check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    assert!(
        held_within(deadline, check).await,
        "timed out after {deadline:?} waiting for {what}"
    );
}

/// Polls `check` every 50 ms; whether it held within `deadline`, for
/// callers that add their own report (a node's log, say) when it did not.
pub async fn held_within<F, Fut>(deadline: Duration, mut check: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let end = tokio::time::Instant::now() + deadline;
    loop {
        if check().await {
            return true;
        }
        if tokio::time::Instant::now() >= end {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Polls `check` every 50 ms until it gives a value, and returns it;
/// panics after `deadline` with what it said last (the state a test
/// waited in vain to change).
pub async fn until_ok<T, F, Fut>(deadline: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, String>>,
{
    let end = tokio::time::Instant::now() + deadline;
    loop {
        match check().await {
            Ok(value) => return value,
            Err(last) => assert!(
                tokio::time::Instant::now() < end,
                "timed out after {deadline:?}: {last}"
            ),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
