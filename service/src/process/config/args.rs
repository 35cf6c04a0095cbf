//! The flags of `colo run`.

use super::error::{ConfigError, Origin};
use super::overrides::{self, Override, ENV_PREFIX};
use super::NodeConfig;
use std::path::PathBuf;

/// `colo run`: where the config comes from. Precedence, lowest first: the
/// file, `COLO_<SECTION>__<FIELD>` variables, the address flags, `--set`.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct RunArgs {
    /// The TOML config file (see colo.example.toml). Without it, required
    /// fields must come from COLO_* variables or flags.
    #[arg(long, value_name = "PATH")]
    pub config: Option<PathBuf>,
    /// Sets one field, e.g. `--set sharding.number_of_shards=50`; values
    /// are TOML when they parse, else strings. Repeatable; applied last.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub set: Vec<String>,
    /// Shorthand for `--set node.listen=ADDR`.
    #[arg(long, value_name = "ADDR")]
    pub listen: Option<String>,
    /// Shorthand for `--set node.admin_listen=ADDR`.
    #[arg(long, value_name = "ADDR")]
    pub admin_listen: Option<String>,
    /// Shorthand for `--set coordinator.address=ADDR`.
    #[arg(long, value_name = "ADDR")]
    pub coordinator: Option<String>,
    /// Exit when the process that started this one is gone (for test
    /// harnesses: a node must not outlive a runner that was killed).
    #[arg(long, hide = true)]
    pub exit_with_parent: bool,
}

impl RunArgs {
    /// The node's config from these flags and the process environment.
    ///
    /// # Errors
    /// See [`NodeConfig::load`]; also a `COLO_*` variable that is not
    /// UTF-8.
    pub fn load(&self) -> Result<NodeConfig, ConfigError> {
        self.load_from(process_env()?)
    }

    /// [`Self::load`] with an explicit environment, for tests and embedders.
    ///
    /// # Errors
    /// See [`NodeConfig::load`].
    pub fn load_from(
        &self,
        env: impl IntoIterator<Item = (String, String)>,
    ) -> Result<NodeConfig, ConfigError> {
        let env: std::collections::BTreeMap<String, String> = env.into_iter().collect();
        let mut all = overrides::from_env(env.clone())?;
        all.extend(self.flag_overrides());
        for set in &self.set {
            all.push(overrides::from_set(set)?);
        }
        NodeConfig::load_with(self.config.as_deref(), all, &env)
    }

    fn flag_overrides(&self) -> Vec<Override> {
        [
            ("--listen", "node.listen", &self.listen),
            ("--admin-listen", "node.admin_listen", &self.admin_listen),
            ("--coordinator", "coordinator.address", &self.coordinator),
        ]
        .into_iter()
        .filter_map(|(flag, path, value)| {
            value
                .as_deref()
                .map(|raw| overrides::from_flag(flag, path, raw))
        })
        .collect()
    }
}

/// The environment without `std::env::vars`'s panic on a non-UTF-8
/// variable: foreign ones are skipped, ours are refused by name.
fn process_env() -> Result<Vec<(String, String)>, ConfigError> {
    let mut vars = Vec::new();
    for (name, value) in std::env::vars_os() {
        let Ok(name) = name.into_string() else {
            continue;
        };
        match value.into_string() {
            Ok(value) => vars.push((name, value)),
            Err(_) if name.starts_with(ENV_PREFIX) => {
                return Err(ConfigError::Syntax {
                    origin: Origin::Env(name),
                    reason: "is not UTF-8".to_string(),
                })
            }
            Err(_) => {}
        }
    }
    Ok(vars)
}
