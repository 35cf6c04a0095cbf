//! A node's configuration: a TOML file, then `COLO_<SECTION>__<FIELD>`
//! environment variables, then `--set section.field=value` flags, each
//! overriding the one before. Bad config stops startup with the field's
//! dotted path, the reason and where the value came from.
//!
//! `colo.example.toml` at the repository root documents every field.
//!
//! # Layout
//! - this file: the sections, their defaults, loading and the accessors the
//!   node program uses.
//! - `config/passivation.rs`: `[sharding.passivation]`.
//! - `config/kafka.rs`: `[kafka]` and the ingest settings it gives each
//!   entity type; `config/secrets.rs`: its client properties, secrets read
//!   from files or environment variables.
//! - `config/security.rs`: `[api]`. `[tls]` is the transport's
//!   [`TlsSettings`] and `[state]` the store's [`StateSettings`]: those
//!   sections are the runtime's own types.
//! - `config/overrides.rs`: environment and flag overrides.
//! - `config/validate.rs`: checks across fields after deserializing.
//! - `config/error.rs`: [`ConfigError`] and [`Origin`].
//! - `config/args.rs`: [`RunArgs`], the flags of `colo run`.

mod args;
mod error;
mod kafka;
mod overrides;
mod passivation;
mod secrets;
mod security;
mod validate;

pub use crate::transport::tls::TlsSettings;
pub use args::RunArgs;
pub use error::{ConfigError, Origin};
pub use kafka::KafkaSection;
pub use passivation::{PassivationSection, StrategyName};
pub use secrets::{ClientProperties, ClientValue, SecretSource};
pub use security::ApiSection;

use crate::logging::LogFormat;
use crate::settings::{EntityRecovery, ShardingSettings};
use crate::store::StateSettings;
use colo_allocation::{LeastShardSettings, RegionId};
use overrides::Override;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;
use toml::Table;

/// Everything a `colo run` process needs to know.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeConfig {
    /// `[node]`: this process.
    pub node: NodeSection,
    /// `[coordinator]`: where the coordinator runs and how it watches
    /// regions. May be left out with `[kafka]`: the coordinator is elected.
    #[serde(default)]
    pub coordinator: CoordinatorSection,
    /// `[sharding]`: settings shared by every entity type this node runs.
    #[serde(default)]
    pub sharding: ShardingSection,
    /// `[log]`.
    #[serde(default)]
    pub log: LogSection,
    /// `[state]`: durable entity types' state store.
    #[serde(default)]
    pub state: StateSettings,
    /// `[kafka]`: topics driving entity types. Absent: no Kafka.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kafka: Option<KafkaSection>,
    /// `[tls]`: the gRPC listener over TLS, mutual between nodes. Absent:
    /// plain text (local development).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<TlsSettings>,
    /// `[api]`: how clients of the client API authenticate.
    #[serde(default)]
    pub api: ApiSection,
    /// `[roles]`: entity type to the role a node must have (`node.roles`)
    /// to host its shards. A type not named runs on every node. All nodes
    /// must agree.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub roles: BTreeMap<String, String>,
}

/// `[node]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeSection {
    /// Where the gRPC server listens.
    pub listen: SocketAddr,
    /// How other nodes reach this one, `host:port`; it is also this node's
    /// region id. Unset: `listen`, which must then be a concrete address.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub advertised: Option<String>,
    /// Where the admin HTTP server (metrics, health) listens.
    pub admin_listen: SocketAddr,
    /// The entity types to run, one region each, by name. Empty (the
    /// default): every entity type the program registers (`colo run`: the
    /// built-in `counter`).
    #[serde(default)]
    pub entity_types: Vec<String>,
    /// Run proxy regions (route only, host no shards), e.g. on a gateway.
    #[serde(default)]
    pub proxy: bool,
    /// What this node is for: it hosts the shards of the entity types whose
    /// role (`[roles]`) it has, and of those without one; it routes to the
    /// others' as a proxy.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub roles: Vec<String>,
    /// Where the node keeps what it must remember across restarts. Unset:
    /// `colo-data/<advertised address>` under the working directory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data_dir: Option<PathBuf>,
    /// How long a graceful stop (SIGTERM, Ctrl-C, Shutdown) may take:
    /// shards handed off and buffered messages delivered. Past it the node
    /// stops anyway; what it still held is dropped, counted and logged.
    #[serde(default = "default_shutdown_timeout", with = "humantime_serde")]
    pub shutdown_timeout: Duration,
}

fn default_shutdown_timeout() -> Duration {
    Duration::from_secs(30)
}

/// `[coordinator]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CoordinatorSection {
    /// The advertised address of the node that hosts the coordinator; every
    /// node of a cluster must name the same one. Empty (the default): the
    /// nodes elect it through Kafka, which needs `[kafka]`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub address: String,
    /// Elected coordinator only: how long the election group waits for a
    /// silent node (Kafka's session timeout) before another is elected.
    #[serde(default = "default_session_timeout", with = "humantime_serde")]
    pub session_timeout: Duration,
    /// Elected coordinator only: how long a node goes without reaching an
    /// elected coordinator, and without being elected, before it joins the
    /// election group again (a broker that left the group's partition
    /// unassigned; DEVELOPERS.md).
    #[serde(default = "default_election_timeout", with = "humantime_serde")]
    pub election_timeout: Duration,
    /// How often a region tells the coordinator it is alive.
    #[serde(default = "default_heartbeat_interval", with = "humantime_serde")]
    pub heartbeat_interval: Duration,
    /// How long a region hosts its shards without an answer from the
    /// coordinator before it stops them (fences itself); several heartbeats,
    /// so one late answer is not a failure, and longer than an election
    /// (`session_timeout` and a rebalance round), so a coordinator that
    /// moves does not stop the surviving nodes' shards.
    #[serde(default = "default_fence_timeout", with = "humantime_serde")]
    pub fence_timeout: Duration,
    /// How long without hearing from a region before the coordinator
    /// terminates it and places its shards elsewhere; it exceeds
    /// `fence_timeout` by at least two heartbeat intervals.
    #[serde(default = "default_region_timeout", with = "humantime_serde")]
    pub region_timeout: Duration,
    /// The least-shard allocation strategy, with Akka's defaults.
    #[serde(default)]
    pub least_shard: LeastShardSettings,
}

impl Default for CoordinatorSection {
    /// Elected through Kafka, with the defaults below.
    fn default() -> Self {
        Self {
            address: String::new(),
            session_timeout: default_session_timeout(),
            election_timeout: default_election_timeout(),
            heartbeat_interval: default_heartbeat_interval(),
            fence_timeout: default_fence_timeout(),
            region_timeout: default_region_timeout(),
            least_shard: LeastShardSettings::default(),
        }
    }
}

fn default_session_timeout() -> Duration {
    Duration::from_secs(6)
}

fn default_election_timeout() -> Duration {
    Duration::from_secs(15)
}

// The runtime's defaults, written once there.
fn default_heartbeat_interval() -> Duration {
    ShardingSettings::default().heartbeat_interval
}

fn default_fence_timeout() -> Duration {
    ShardingSettings::default().fence_timeout
}

fn default_region_timeout() -> Duration {
    ShardingSettings::default().region_timeout
}

/// `[sharding]`: [`ShardingSettings`] with human durations, plus the ask
/// timeout of the client API. Defaults are [`ShardingSettings::default`].
///
/// A section of its own rather than serde on `ShardingSettings`, because
/// the file is shaped for whoever writes it and the settings for the
/// runtime: remembering entities is four flat keys here and one
/// `Option<EntityRecovery>` there, passivation is chosen by a preset's
/// name, and the heartbeat, fence and region timeouts are written under
/// `[coordinator]`, which reads them too. A shared part flattened into
/// both would lose the refusal of unknown keys (serde's `flatten` and
/// `deny_unknown_fields` do not combine). Still defined once where it
/// counts: the defaults are the settings' own, the checks are
/// `ShardingSettings::validate`, and [`NodeConfig::sharding_settings`]
/// names every field, so a field added to the settings and not here does
/// not compile.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ShardingSection {
    /// See [`ShardingSettings::number_of_shards`].
    pub number_of_shards: u32,
    /// See [`ShardingSettings::retry_interval`].
    #[serde(with = "humantime_serde")]
    pub retry_interval: Duration,
    /// See [`ShardingSettings::buffer_size`].
    pub buffer_size: usize,
    /// See [`ShardingSettings::handoff_timeout`].
    #[serde(with = "humantime_serde")]
    pub handoff_timeout: Duration,
    /// See [`ShardingSettings::rebalance_interval`].
    #[serde(with = "humantime_serde")]
    pub rebalance_interval: Duration,
    /// See [`ShardingSettings::shard_start_timeout`].
    #[serde(with = "humantime_serde")]
    pub shard_start_timeout: Duration,
    /// See [`ShardingSettings::min_members`].
    pub min_members: usize,
    /// See [`ShardingSettings::shard_mailbox_capacity`].
    pub shard_mailbox_capacity: usize,
    /// See [`ShardingSettings::shard_concurrency`].
    pub shard_concurrency: usize,
    /// See [`ShardingSettings::handler_tell_timeout`].
    #[serde(with = "humantime_serde")]
    pub handler_tell_timeout: Duration,
    /// How long the client API waits for an entity's reply when the request
    /// sets no deadline (Akka's typical ask timeout: 5 s).
    #[serde(with = "humantime_serde")]
    pub ask_timeout: Duration,
    /// `[sharding.passivation]`.
    pub passivation: PassivationSection,
    /// See [`ShardingSettings::remember_entities`]: durable entity types
    /// only.
    pub remember_entities: bool,
    /// How remembered entities start again: `all` at once, or `constant`
    /// (`entity_recovery_number` every `entity_recovery_frequency`).
    pub entity_recovery_strategy: RecoveryStrategy,
    #[serde(with = "humantime_serde")]
    pub entity_recovery_frequency: Duration,
    pub entity_recovery_number: usize,
    /// See [`ShardingSettings::standbys`]: durable entity types with a
    /// changelog only.
    pub standbys: u32,
}

/// `sharding.entity_recovery_strategy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RecoveryStrategy {
    #[default]
    All,
    Constant,
}

impl Default for ShardingSection {
    fn default() -> Self {
        let s = ShardingSettings::default();
        Self {
            number_of_shards: s.number_of_shards,
            retry_interval: s.retry_interval,
            buffer_size: s.buffer_size,
            handoff_timeout: s.handoff_timeout,
            rebalance_interval: s.rebalance_interval,
            shard_start_timeout: s.shard_start_timeout,
            min_members: s.min_members,
            shard_mailbox_capacity: s.shard_mailbox_capacity,
            shard_concurrency: s.shard_concurrency,
            handler_tell_timeout: s.handler_tell_timeout,
            ask_timeout: Duration::from_secs(5),
            passivation: PassivationSection::default(),
            remember_entities: false,
            entity_recovery_strategy: RecoveryStrategy::All,
            // Akka's constant-rate defaults.
            entity_recovery_frequency: Duration::from_millis(100),
            entity_recovery_number: 5,
            standbys: s.standbys,
        }
    }
}

/// `[log]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LogSection {
    /// `text` or `json`.
    pub format: LogFormat,
    /// An `EnvFilter` directive such as `info` or `info,colo=debug`;
    /// `RUST_LOG` overrides it.
    pub level: String,
}

impl Default for LogSection {
    fn default() -> Self {
        Self {
            format: LogFormat::Text,
            level: "info".to_string(),
        }
    }
}

impl NodeConfig {
    /// Reads the file at `path` (none: every required field comes from
    /// overrides), applies the `COLO_*` variables among `env`, then `sets`
    /// (`section.field=value`, in order), and checks the result.
    ///
    /// # Errors
    /// The file cannot be read or is not TOML; an override is malformed or
    /// names no field; a field is missing, of the wrong type or refused by
    /// validation. The error names the field and the value's origin.
    pub fn load(
        path: Option<&Path>,
        env: impl IntoIterator<Item = (String, String)>,
        sets: &[String],
    ) -> Result<NodeConfig, ConfigError> {
        let env: std::collections::BTreeMap<String, String> = env.into_iter().collect();
        let mut overrides = overrides::from_env(env.clone())?;
        for set in sets {
            overrides.push(overrides::from_set(set)?);
        }
        Self::load_with(path, overrides, &env)
    }

    fn load_with(
        path: Option<&Path>,
        overrides: Vec<Override>,
        env: &std::collections::BTreeMap<String, String>,
    ) -> Result<Self, ConfigError> {
        let mut table = match path {
            Some(path) => read_table(path)?,
            None => Table::new(),
        };
        for over in &overrides {
            overrides::apply(&mut table, over)?;
        }
        let origins = Origins {
            file: path.map(|p| Origin::File(p.to_path_buf())),
            overrides,
        };
        let mut config: NodeConfig = serde_path_to_error::deserialize(table).map_err(|e| {
            let (field, reason) = field_and_reason(&e.path().to_string(), e.inner().message());
            origins.error(field, reason)
        })?;
        if let Some(kafka) = &mut config.kafka {
            kafka
                .client
                .read(env)
                .map_err(|(field, reason)| origins.error(field, reason))?;
        }
        config
            .validate()
            .map_err(|(field, reason)| origins.error(field, reason))?;
        Ok(config)
    }

    /// This node's address for other nodes, and its region id.
    pub fn advertised(&self) -> String {
        self.node
            .advertised
            .clone()
            .unwrap_or_else(|| self.node.listen.to_string())
    }

    /// The node's data directory (see [`NodeSection::data_dir`]).
    pub fn data_dir(&self) -> PathBuf {
        match &self.node.data_dir {
            Some(dir) => dir.clone(),
            None => Path::new("colo-data").join(self.advertised().replace([':', '/'], "_")),
        }
    }

    /// [`Self::advertised`] as the region id the coordinator knows.
    pub fn region_id(&self) -> RegionId {
        RegionId::new(self.advertised())
    }

    /// Whether this node runs the coordinator by configuration: its
    /// advertised address is the configured coordinator address, compared
    /// as strings since both are region ids.
    pub fn hosts_coordinator(&self) -> bool {
        self.coordinator.address == self.advertised()
    }

    /// Whether the nodes elect the coordinator through Kafka: no
    /// coordinator address is configured.
    pub fn elects_coordinator(&self) -> bool {
        self.coordinator.address.is_empty()
    }

    /// The settings of each entity type this node runs.
    pub fn sharding_settings(&self) -> ShardingSettings {
        let s = &self.sharding;
        ShardingSettings {
            number_of_shards: s.number_of_shards,
            retry_interval: s.retry_interval,
            buffer_size: s.buffer_size,
            handoff_timeout: s.handoff_timeout,
            rebalance_interval: s.rebalance_interval,
            shard_start_timeout: s.shard_start_timeout,
            min_members: s.min_members,
            heartbeat_interval: self.coordinator.heartbeat_interval,
            fence_timeout: self.coordinator.fence_timeout,
            region_timeout: self.coordinator.region_timeout,
            passivation: s.passivation.strategy(),
            shard_mailbox_capacity: s.shard_mailbox_capacity,
            shard_concurrency: s.shard_concurrency,
            handler_tell_timeout: s.handler_tell_timeout,
            remember_entities: s
                .remember_entities
                .then_some(match s.entity_recovery_strategy {
                    RecoveryStrategy::All => EntityRecovery::All,
                    RecoveryStrategy::Constant => EntityRecovery::Constant {
                        frequency: s.entity_recovery_frequency,
                        number: s.entity_recovery_number,
                    },
                }),
            standbys: s.standbys,
            idempotency_retention: self.api.idempotency_retention,
            idempotency_keys: self.api.idempotency_keys,
        }
    }

    /// The least-shard allocation strategy's settings.
    pub fn least_shard_settings(&self) -> LeastShardSettings {
        self.coordinator.least_shard.clone()
    }

    /// The client API's deadline for requests that carry none.
    pub fn ask_timeout(&self) -> Duration {
        self.sharding.ask_timeout
    }
}

fn read_table(path: &Path) -> Result<Table, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    text.parse::<Table>().map_err(|e| ConfigError::Syntax {
        origin: Origin::File(path.to_path_buf()),
        reason: e.to_string().trim_end().to_string(),
    })
}

/// Turns serde's "missing field `x`" at `a.b` into `a.b.x: is required`,
/// so that every error starts with the full path of the field to fix.
fn field_and_reason(path: &str, message: &str) -> (String, String) {
    let missing = message
        .strip_prefix("missing field `")
        .and_then(|rest| rest.strip_suffix('`'));
    match (path, missing) {
        (".", Some(name)) => (name.to_string(), "is required".to_string()),
        (_, Some(name)) => (format!("{path}.{name}"), "is required".to_string()),
        _ => (path.to_string(), message.to_string()),
    }
}

/// Where each value came from: the last override at or above a field's
/// path; else the last one below it (an unknown section such as `shardng`
/// exists only because an override under it created it); else the file.
struct Origins {
    file: Option<Origin>,
    overrides: Vec<Override>,
}

impl Origins {
    fn of(&self, field: &str) -> Option<Origin> {
        let last = |within: fn(&str, &str) -> bool| {
            self.overrides
                .iter()
                .rev()
                .find(|over| within(field, &over.dotted()))
        };
        last(is_within)
            .or_else(|| last(|field, over| is_within(over, field)))
            .map(|over| over.origin.clone())
            .or_else(|| self.file.clone())
    }

    fn error(&self, field: String, reason: String) -> ConfigError {
        ConfigError::Field {
            origin: self.of(&field),
            field,
            reason,
        }
    }
}

/// Whether `path` is `ancestor` or a field or element inside it.
fn is_within(path: &str, ancestor: &str) -> bool {
    path.strip_prefix(ancestor)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with('.') || rest.starts_with('['))
}

#[cfg(test)]
mod tests;
