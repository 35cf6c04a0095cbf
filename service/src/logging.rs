//! Process-wide logging: `tracing` events formatted to stderr as text or
//! JSON, filtered by the config's `log.level` unless `RUST_LOG` is set.
//!
//! Stderr, so that a command whose stdout is its output (the demo, the
//! simulator) can log without corrupting it.

mod expected_wait;

pub use expected_wait::{ExpectedWait, Say};

use serde::{Deserialize, Serialize};
use std::io::IsTerminal;
use tracing_subscriber::EnvFilter;

/// How log lines are written.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object per line, for log collectors.
    Json,
}

/// A filter directive that does not parse, named by where it came from.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid log filter in {source_name}: {reason}")]
pub struct LogError {
    /// `RUST_LOG` or `log.level`.
    pub source_name: &'static str,
    /// The parser's complaint.
    pub reason: String,
}

/// The variable that overrides `log.level`, as everywhere in the `tracing`
/// ecosystem, so that an operator can raise verbosity without editing the
/// config file.
const RUST_LOG: &str = "RUST_LOG";

/// Installs the global subscriber. A second call (or a call after another
/// subscriber was installed, as test harnesses do) keeps the subscriber
/// already in place and returns `Ok`: logging is best effort and must never
/// stop a node that is otherwise able to start.
///
/// # Errors
/// `RUST_LOG` (when set and not empty) or `level` is not a valid
/// `EnvFilter` directive.
pub fn init(format: LogFormat, level: &str) -> Result<(), LogError> {
    let filter = filter(level, std::env::var(RUST_LOG).ok().as_deref())?;
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal());
    // The only failure is "a global subscriber is already set": see above.
    let _ = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().try_init(),
    };
    Ok(())
}

/// Checks a `log.level` directive the way [`init`] will parse it, so that
/// config loading can refuse it before anything starts.
///
/// # Errors
/// The directive does not parse.
pub fn validate_level(level: &str) -> Result<(), LogError> {
    filter(level, None).map(drop)
}

fn filter(level: &str, rust_log: Option<&str>) -> Result<EnvFilter, LogError> {
    let (source_name, directive) = match rust_log {
        Some(env) if !env.trim().is_empty() => (RUST_LOG, env),
        _ => ("log.level", level),
    };
    EnvFilter::try_new(directive).map_err(|e| LogError {
        source_name,
        reason: e.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rust_log_overrides_the_configured_level() {
        assert!(filter("info", None).is_ok());
        assert!(filter("info,colo=debug", None).is_ok());
        // A bad RUST_LOG is blamed on RUST_LOG, not on the config.
        let err = filter("info", Some("colo=notalevel")).unwrap_err();
        assert_eq!(err.source_name, "RUST_LOG");
        let err = validate_level("colo=notalevel").unwrap_err();
        assert_eq!(err.source_name, "log.level");
        // An empty RUST_LOG is treated as unset.
        assert!(filter("info", Some("  ")).is_ok());
    }

    #[test]
    fn init_twice_is_harmless() {
        // "off", because the subscriber stays for every other test in this
        // process, and their logs would otherwise flood the test output.
        init(LogFormat::Json, "off").unwrap();
        init(LogFormat::Text, "debug").unwrap();
        tracing::info!("filtered out by the first subscriber");
    }

    #[test]
    fn format_names_are_lowercase() {
        #[derive(Deserialize)]
        struct Log {
            format: LogFormat,
        }
        let log: Log = toml::from_str("format = \"json\"").unwrap();
        assert_eq!(log.format, LogFormat::Json);
        assert!(toml::from_str::<Log>("format = \"JSON\"").is_err());
    }
}
