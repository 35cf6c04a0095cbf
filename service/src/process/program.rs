//! The node program: one node process around a [`Node`]. It serves gRPC
//! (the node Link, the coordinator protocol when it hosts the coordinator,
//! the client API, health and reflection) and the admin HTTP server, runs a
//! region per entity type, and stops gracefully on SIGTERM, Ctrl-C or the
//! client API's Shutdown: shards are handed off first (within
//! `node.shutdown_timeout`), then the servers stop.
//!
//! `colo run` is this program with the built-in counter; a binary of one's
//! own registers its entity types the same way:
//!
//! ```no_run
//! # use colo::{Entity, EntityContext, EntityError, EntityType, NodeProgram};
//! # #[derive(Default)] struct Account;
//! # impl Entity for Account { type Message = (); type Reply = ();
//! #   async fn handle(&mut self, _: &EntityContext, _: ()) -> Result<(), EntityError> { Ok(()) } }
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! NodeProgram::from_args()?
//!     .entity_type(|settings| EntityType::new("account", |_| Account).with_settings(settings))
//!     .run()
//!     .await?;
//! # Ok(()) }
//! ```

mod coordinators;
mod kafka;
mod open_store;
mod registration;
mod roles;
mod servers;
mod signals;

use crate::coordinator::hosting::{CoordinatorHosting, StaticHosting};
use crate::entity::{Entity, EntityType};
use crate::kafka::leader::ElectedHosting;
use crate::kafka::{IngestHealth, KafkaIngest, RecordDecoder};
use crate::node::Node;
use crate::process::admin::{self, Admin, Readiness};
use crate::process::api::ShardingApi;
use crate::process::config::{ConfigError, NodeConfig, RunArgs};
use crate::process::security::Security;
use crate::settings::ShardingSettings;
use crate::tasks::TaskSet;
use crate::transport::grpc::{GrpcSettings, GrpcTransport};
use registration::{Registered, Registration};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::watch;

/// How long the servers get to finish open calls once the node has handed
/// its shards off. Other nodes keep their Links open for as long as they
/// live, so the servers are stopped after this whatever is still open.
const SERVER_DRAIN: Duration = Duration::from_secs(2);

/// Why the node could not start or serve.
#[derive(Debug, thiserror::Error)]
pub enum ProgramError {
    /// The config could not be read.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// A listen address could not be bound.
    #[error("invalid config: {field}: cannot listen on {address}: {source}")]
    Bind {
        /// The config field naming the address.
        field: &'static str,
        /// The address.
        address: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
    /// The metrics recorder could not be installed.
    #[error("cannot install the metrics recorder: {0}")]
    Metrics(#[from] admin::BuildError),
    /// The log subscriber could not be set up.
    #[error(transparent)]
    Log(#[from] crate::logging::LogError),
    /// A setting the node needs is unusable.
    #[error("invalid config: {0}")]
    Settings(String),
    /// The data directory cannot be written.
    #[error("invalid config: node.data_dir: cannot write {path}: {source}")]
    DataDir {
        /// The file that could not be written.
        path: std::path::PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A certificate, key or tokens file named by `[tls]` or `[api]`
    /// cannot be used.
    #[error("invalid config: {0}")]
    Security(#[from] crate::process::security::SecurityError),
    /// The gRPC server failed.
    #[error("gRPC server failed: {0}")]
    Serve(#[from] tonic::transport::Error),
    /// The admin server failed.
    #[error("admin server failed: {0}")]
    Admin(std::io::Error),
    /// The state store of `node.data_dir` cannot be opened.
    #[error("state store: {0}")]
    State(#[from] colo_state::StoreError),
    /// An entity type's Kafka ingest could not start (a topic missing or
    /// with another partition count, the broker unreachable).
    #[error("kafka: {0}")]
    Kafka(#[from] crate::kafka::IngestError),
    /// The brokers refused the node's credentials (`[kafka.client]`).
    #[error("kafka: {0}")]
    Brokers(#[from] kafka::BrokerError),
}

/// The command line of a node program: the flags of `colo run`.
#[derive(Debug, clap::Parser)]
#[command(
    about = "Runs a colo node: gRPC for other nodes and clients, admin HTTP for metrics and health"
)]
struct ProgramArgs {
    #[command(flatten)]
    run: RunArgs,
}

/// A node program being put together: its config and its entity types.
pub struct NodeProgram {
    config: NodeConfig,
    entity_types: Vec<Box<dyn Registration>>,
    exit_with_parent: bool,
}

impl std::fmt::Debug for NodeProgram {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeProgram")
            .field("config", &self.config)
            .field(
                "entity_types",
                &self
                    .entity_types
                    .iter()
                    .map(|t| t.name())
                    .collect::<Vec<_>>(),
            )
            .finish()
    }
}

impl NodeProgram {
    /// A program configured by the process's command line (the flags of
    /// `colo run`: `--config`, `--set`, ...) and `COLO_*` variables.
    /// `--help` prints the flags and exits, as a bad flag does with the
    /// reason.
    ///
    /// # Errors
    /// The config cannot be read or is invalid; the error names the field.
    pub fn from_args() -> Result<Self, ConfigError> {
        let args = <ProgramArgs as clap::Parser>::parse();
        Self::from_run_args(&args.run)
    }

    /// A program configured by flags parsed elsewhere (say, a subcommand of
    /// one's own command line that flattens [`RunArgs`]).
    ///
    /// # Errors
    /// The config cannot be read or is invalid; the error names the field.
    pub fn from_run_args(args: &RunArgs) -> Result<Self, ConfigError> {
        let mut program = Self::new(args.load()?);
        program.exit_with_parent = args.exit_with_parent;
        Ok(program)
    }

    /// A program with this config.
    pub fn new(config: NodeConfig) -> Self {
        Self {
            config,
            entity_types: Vec::new(),
            exit_with_parent: false,
        }
    }

    /// The config the program runs with.
    pub fn config(&self) -> &NodeConfig {
        &self.config
    }

    /// Registers an entity type: `make` gets the settings of the config's
    /// `[sharding]` and `[coordinator]` sections and returns the entity
    /// type (with those settings, or its own). The node runs it unless
    /// `node.entity_types` names others.
    pub fn entity_type<E: Entity>(
        mut self,
        make: impl FnOnce(ShardingSettings) -> EntityType<E>,
    ) -> Self {
        let entity_type = make(self.config.sharding_settings());
        self.entity_types.push(Box::new(Registered {
            entity_type,
            records: None,
        }));
        self
    }

    /// Registers an entity type that Kafka records can drive: when
    /// `[kafka.topics]` names it, the node consumes those topics in the
    /// group `<kafka.cluster>.<entity type>`, `decode` turns each record
    /// into the entity id and the message (`colo::kafka::json_records()`:
    /// the key is the id, the payload JSON), and the group's partition
    /// assignment decides where its shards live (shard = partition, Kafka's
    /// murmur2 partitioner places its entities).
    pub fn entity_type_with_records<E: Entity>(
        mut self,
        make: impl FnOnce(ShardingSettings) -> EntityType<E>,
        decode: RecordDecoder<E::Message>,
    ) -> Self {
        let entity_type = make(self.config.sharding_settings());
        self.entity_types.push(Box::new(Registered {
            entity_type,
            records: Some(decode),
        }));
        self
    }

    /// Runs the node until it is asked to stop.
    ///
    /// # Errors
    /// Startup failed (a port taken, an entity type the config names but
    /// the program does not register, a setting the runtime refuses), or a
    /// server failed while running.
    pub async fn run(mut self) -> Result<(), ProgramError> {
        let entity_types = self.selected()?;
        run(self.config, entity_types, self.exit_with_parent).await
    }

    /// The registered entity types `node.entity_types` selects (all when it
    /// is empty), in its order.
    fn selected(&mut self) -> Result<Vec<Box<dyn Registration>>, ProgramError> {
        let wanted = &self.config.node.entity_types;
        let mut all = std::mem::take(&mut self.entity_types);
        if wanted.is_empty() {
            if all.is_empty() {
                return Err(ProgramError::Settings(
                    "the program registers no entity type".into(),
                ));
            }
            return Ok(all);
        }
        let known: Vec<String> = all.iter().map(|t| t.name().to_string()).collect();
        let mut selected = Vec::new();
        for name in wanted {
            let Some(at) = all.iter().position(|t| t.name() == name) else {
                return Err(ProgramError::Settings(format!(
                    "node.entity_types: `{name}` is not an entity type of this program (it registers: {})",
                    known.join(", ")
                )));
            };
            selected.push(all.swap_remove(at));
        }
        Ok(selected)
    }
}

async fn bind(field: &'static str, address: SocketAddr) -> Result<TcpListener, ProgramError> {
    TcpListener::bind(address)
        .await
        .map_err(|source| ProgramError::Bind {
            field,
            address,
            source,
        })
}

/// A Kafka-driven entity type's ingest: `None` while it starts.
type Ingesting = (String, Option<IngestHealth>);

/// Why the Kafka-driven entity types keep the node from being ready: an
/// ingest still starting, or one whose consumer failed for good.
fn kafka_not_ready(ingests: &[Ingesting]) -> Vec<String> {
    ingests
        .iter()
        .filter_map(|(name, health)| match health {
            None => Some(format!("entity type {name:?}: kafka consumer starting")),
            Some(health) => health
                .failure()
                .map(|reason| format!("entity type {name:?}: kafka consumer failed: {reason}")),
        })
        .collect()
}

/// Runs the node until it is asked to stop.
async fn run(
    config: NodeConfig,
    entity_types: Vec<Box<dyn Registration>>,
    exit_with_parent: bool,
) -> Result<(), ProgramError> {
    crate::logging::init(config.log.format, &config.log.level)?;
    let metrics = admin::install_recorder()?;
    let grpc_listener = bind("node.listen", config.node.listen).await?;
    let admin_listener = bind("node.admin_listen", config.node.admin_listen).await?;
    let advertised = advertised(&config, &grpc_listener);
    let security = Security::load(&config, &advertised).await?;
    let tasks = TaskSet::default();
    tasks.spawn(security.clone().watch());

    let mut entity_types = entity_types;
    roles::assign(&config, &mut entity_types)?;
    let kafka_driven = kafka::check(&config, &mut entity_types)?;
    kafka::check_brokers(&config).await?;
    if !config.node.proxy {
        kafka::create_topics(&config, &entity_types).await?;
    }
    let types: Vec<coordinators::Hosted> = entity_types
        .iter()
        .map(|t| {
            let mut settings = t.settings().clone();
            // Copies are kept of durable types with a changelog only (with
            // [kafka], every durable type has one): another type's
            // coordinator has no copies to prefer.
            if !t.is_durable() || config.kafka.is_none() {
                settings.standbys = 0;
            }
            coordinators::Hosted {
                name: t.name().to_string(),
                settings,
                follows_partitions: kafka_driven.contains(t.name()),
            }
        })
        .collect();
    let (hosting, electing): (Arc<dyn CoordinatorHosting>, _) = if config.elects_coordinator() {
        let hosting = Arc::new(ElectedHosting::new(advertised.clone()));
        let electing = kafka::candidacy::Electing::start(&config, types, hosting.clone()).await?;
        (hosting, Some(electing))
    } else {
        let hosting = Arc::new(StaticHosting::new(config.coordinator.address.clone()));
        if advertised == config.coordinator.address {
            let on_topic = kafka::coordinator_stores(&config).await?;
            coordinators::host(&config, &types, &hosting, on_topic)?;
        } else {
            coordinators::hosted_elsewhere(&types);
        }
        (hosting, None)
    };
    let grpc_settings = GrpcSettings {
        heartbeat_interval: config.coordinator.heartbeat_interval,
        region_timeout: config.coordinator.region_timeout,
        tls: security.tls().cloned(),
        ..GrpcSettings::default()
    };
    let transport = GrpcTransport::new(&advertised, grpc_settings, hosting);
    let node = Arc::new(
        match open_store::open_store(&config, &entity_types).await? {
            Some(store) => Node::with_state_store(transport.clone(), store),
            None => Node::new(transport.clone()),
        }
        .with_roles(config.node.roles.iter().cloned())
        .with_memory_budget(
            config
                .sharding
                .passivation
                .memory_budget_bytes()
                .unwrap_or(0),
        ),
    );
    if let Some(electing) = &electing {
        electing.watch_regions(&node);
    }
    let mut starting = Vec::new();
    // Each Kafka-driven entity type's ingest, `None` while it starts: the
    // node is ready only once each consumes.
    let ingest_health: Arc<parking_lot::Mutex<Vec<Ingesting>>> = Arc::default();
    for entity_type in entity_types {
        let name = entity_type.name().to_string();
        let ingest = config.ingest_settings(&name);
        if let Some(started) = entity_type.start(&node, config.node.proxy, ingest)? {
            ingest_health.lock().push((name, None));
            starting.push(started);
        }
    }

    let (stop, mut stopping) = watch::channel(false);
    tokio::spawn(signals::watch_signals(stop.clone()));
    if exit_with_parent {
        tokio::spawn(signals::exit_with_the_parent());
    }
    let (health, health_service) = tonic_health::server::health_reporter();
    health
        .set_service_status("", tonic_health::ServingStatus::Serving)
        .await;
    let reflection = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(colo_proto::FILE_DESCRIPTOR_SET)
        .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
        .build_v1()
        .map_err(|e| ProgramError::Settings(format!("server reflection: {e}")))?;
    let (servers_stop, servers_stopping) = watch::channel(false);
    let routes = tonic::service::Routes::new(transport.node_service())
        .add_service(transport.coordinator_service())
        .add_service(ShardingApi::new(node.clone(), config.ask_timeout(), stop))
        .add_service(health_service)
        .add_service(reflection);
    servers::warn_plain_text(&security, config.node.listen, config.node.admin_listen);
    let mut grpc = servers::grpc(
        grpc_listener,
        &security,
        routes,
        &tasks,
        stopped(servers_stopping.clone()),
    );
    let probe = {
        let node = node.clone();
        let ingest_health = ingest_health.clone();
        move || {
            let mut reasons = node.not_ready();
            reasons.extend(kafka_not_ready(&ingest_health.lock()));
            if reasons.is_empty() {
                Readiness::Ready
            } else {
                Readiness::NotReady(reasons.join("; "))
            }
        }
    };
    let mut admin = servers::admin(
        admin_listener,
        &security,
        Admin::new(metrics, probe).with_cluster_map(node.clone()),
        &tasks,
        stopped(servers_stopping),
    )?;
    let mut ingests = Vec::new();
    for (at, started) in starting.into_iter().enumerate() {
        match started.await {
            Ok(Ok(ingest)) => {
                if let Some((_, health)) = ingest_health.lock().get_mut(at) {
                    *health = Some(ingest.health());
                }
                ingests.push(ingest);
            }
            Ok(Err(e)) => return Err(ProgramError::Kafka(e)),
            Err(e) => return Err(ProgramError::Settings(format!("kafka ingest: {e}"))),
        }
    }
    if let Some(electing) = &electing {
        electing.watch_ingests(
            ingests
                .iter()
                .filter_map(KafkaIngest::group_rejoin)
                .collect(),
        );
    }
    let coordinator = if config.elects_coordinator() {
        "elected"
    } else {
        config.coordinator.address.as_str()
    };
    tracing::info!(node = %advertised, coordinator, kafka_ingests = ingests.len(), "node serving");

    tokio::select! {
        _ = stopping.wait_for(|stop| *stop) => {}
        result = &mut grpc => return flatten(result).map_err(ProgramError::Serve),
        result = &mut admin => return flatten(result).map_err(ProgramError::Admin),
    }
    let limit = config.node.shutdown_timeout;
    tracing::info!(node = %advertised, timeout = ?limit, "stopping: handing shards off");
    health
        .set_service_status("", tonic_health::ServingStatus::NotServing)
        .await;
    // The partitions first: their revoke hands their shards off and
    // commits what was handled, while the node still serves.
    let stopping_all = async {
        for ingest in ingests {
            ingest.shutdown().await;
        }
        node.shutdown().await;
        // Its shards handed off (through the coordinator, wherever it
        // is): then it steps down, and another node is elected at once.
        if let Some(electing) = electing {
            electing.shutdown(limit).await;
        }
    };
    if tokio::time::timeout(limit, stopping_all).await.is_err() {
        tracing::warn!(node = %advertised, timeout = ?limit, "graceful stop did not finish within node.shutdown_timeout; stopping now");
        node.kill().await;
    }
    let _ = servers_stop.send(true);
    let drained = tokio::time::timeout(SERVER_DRAIN, async {
        let _ = (&mut grpc).await;
        let _ = (&mut admin).await;
    })
    .await;
    if drained.is_err() {
        grpc.abort();
        admin.abort();
    }
    tasks.abort_all().await;
    tracing::info!(node = %advertised, "stopped");
    Ok(())
}

/// The address others reach this node at: configured, or the bound one
/// (when the config asked for port 0).
fn advertised(config: &NodeConfig, listener: &TcpListener) -> String {
    match (&config.node.advertised, listener.local_addr()) {
        (Some(address), _) => address.clone(),
        (None, Ok(bound)) => bound.to_string(),
        (None, Err(_)) => config.advertised(),
    }
}

async fn stopped(mut stop: watch::Receiver<bool>) {
    let _ = stop.wait_for(|stop| *stop).await;
}

fn flatten<E>(result: Result<Result<(), E>, tokio::task::JoinError>) -> Result<(), E> {
    match result {
        Ok(result) => result,
        // The server task panicked or was aborted: treat it as a stop.
        Err(_) => Ok(()),
    }
}

#[cfg(test)]
mod tests;
