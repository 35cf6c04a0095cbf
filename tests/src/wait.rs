//! Waiting for a condition with a deadline instead of sleeping.

use std::future::Future;
use std::time::Duration;

/// Polls `check` every 100 ms until it holds; panics naming `what` after
/// `deadline`.
pub async fn until<F, Fut>(what: &str, deadline: Duration, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let end = tokio::time::Instant::now() + deadline;
    loop {
        if check().await {
            return;
        }
        assert!(
            tokio::time::Instant::now() < end,
            "timed out after {deadline:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
