//! Debian's Chromium, headless (installed by the test command): a page's
//! DOM after its scripts ran, and screenshots. Each call is a browser of
//! its own with a fresh profile, started with the flags that keep it off
//! the network (this machine has none) and stopped when it returns.

use std::path::Path;
use std::process::Command;

/// How long, in virtual time, a page's scripts may run (its first poll
/// and drawing) before the DOM is read.
const SCRIPT_BUDGET_MS: u32 = 3000;

fn chromium(profile: &Path) -> Command {
    let mut command = Command::new("chromium");
    command
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--window-size=1280,900",
        ])
        .arg(format!("--virtual-time-budget={SCRIPT_BUDGET_MS}"))
        .arg(format!("--user-data-dir={}", profile.display()));
    command
}

/// The DOM of `url` once its scripts ran.
///
/// # Panics
/// Chromium is not installed or fails.
pub fn dom(url: &str) -> String {
    let profile = tempfile::tempdir().expect("profile");
    let out = chromium(profile.path())
        .arg("--dump-dom")
        .arg(url)
        .output()
        .expect("start chromium (./scripts/test.sh installs Debian's chromium)");
    assert!(
        out.status.success(),
        "chromium failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A PNG of `url` once its scripts ran, written to `to`.
///
/// # Panics
/// Chromium is not installed or fails.
pub fn screenshot(url: &str, to: &Path) {
    let profile = tempfile::tempdir().expect("profile");
    let out = chromium(profile.path())
        .arg(format!("--screenshot={}", to.display()))
        .arg(url)
        .output()
        .expect("start chromium");
    assert!(
        out.status.success() && to.exists(),
        "chromium made no screenshot: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}
