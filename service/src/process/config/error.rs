//! What a bad config looks like to the operator: the field, the reason, and
//! where the bad value came from, so the fix is one edit away.

use std::fmt;
use std::path::PathBuf;

/// Where a value came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origin {
    /// The config file.
    File(PathBuf),
    /// An environment variable, by name.
    Env(String),
    /// A `--set KEY=VALUE` flag, as given.
    Set(String),
    /// A convenience flag such as `--listen`.
    Flag(&'static str),
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::File(path) => write!(f, "in {}", path.display()),
            Self::Env(name) => write!(f, "from {name}"),
            Self::Set(arg) => write!(f, "from --set {arg}"),
            Self::Flag(flag) => write!(f, "from {flag}"),
        }
    }
}

/// A config that cannot start a node. Display reads
/// `invalid config: <field>: <reason> (<origin>)`.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The config file cannot be read.
    #[error("invalid config: cannot read {}: {source}", path.display())]
    Read {
        /// The path as given.
        path: PathBuf,
        /// Why it cannot be read.
        source: std::io::Error,
    },
    /// The config file, an override or its key is not well-formed.
    #[error("invalid config: {origin}: {reason}")]
    Syntax {
        /// The file, variable or flag.
        origin: Origin,
        /// What is wrong with it.
        reason: String,
    },
    /// A field has a value that cannot work.
    #[error("invalid config: {field}: {reason}{}", origin_suffix(origin))]
    Field {
        /// The field's dotted path, e.g. `sharding.number_of_shards`.
        field: String,
        /// Why the value is refused.
        reason: String,
        /// Where the value came from; `None` for a default.
        origin: Option<Origin>,
    },
}

impl ConfigError {
    /// The dotted path of the refused field, if the error is about one.
    pub fn field(&self) -> Option<&str> {
        match self {
            Self::Field { field, .. } => Some(field),
            Self::Read { .. } | Self::Syntax { .. } => None,
        }
    }
}

fn origin_suffix(origin: &Option<Origin>) -> String {
    origin
        .as_ref()
        .map(|o| format!(" ({o})"))
        .unwrap_or_default()
}
