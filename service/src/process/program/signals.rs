//! What stops a node from outside: SIGTERM or Ctrl-C (gracefully), and
//! the end of the process that started it.

use std::time::Duration;
use tokio::sync::watch;

/// Exits when the process that started this one is gone (a test runner
/// killed hard, say): a node must not outlive what supervises it.
pub(super) async fn exit_with_the_parent() {
    #[cfg(unix)]
    {
        let parent = std::os::unix::process::parent_id();
        let mut tick = tokio::time::interval(Duration::from_millis(500));
        loop {
            tick.tick().await;
            if std::os::unix::process::parent_id() != parent {
                tracing::error!(parent, "the parent process is gone; exiting");
                std::process::exit(1);
            }
        }
    }
}

/// SIGTERM (what orchestrators send) and Ctrl-C both stop gracefully.
pub(super) async fn watch_signals(stop: watch::Sender<bool>) {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = term.recv() => {}
                    _ = tokio::signal::ctrl_c() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
    tracing::info!("stop signal received");
    let _ = stop.send(true);
}
