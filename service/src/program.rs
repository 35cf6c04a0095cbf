//! `colo run`: one node process. It serves gRPC (the node Link, the
//! coordinator protocol when it hosts the coordinator, the client API,
//! health and reflection) and the admin HTTP server, runs a region per
//! configured entity type, and stops gracefully on SIGTERM, Ctrl-C or the
//! client API's Shutdown: shards are handed off first, then the servers
//! stop.

use crate::admin::{self, Admin, Readiness};
use crate::api::ShardingApi;
use crate::config::{BuiltinEntityType, NodeConfig};
use crate::coordinator::hosting::StaticHosting;
use crate::counter::{Counter, COUNTER};
use crate::entity::EntityType;
use crate::node::Node;
use crate::transport::grpc::{GrpcSettings, GrpcTransport};
use crate::{CoordinatorHandle, InMemoryStore};
use colo_allocation::LeastShardAllocationStrategy;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio_stream::wrappers::TcpListenerStream;

/// How long the servers get to finish open calls once the node has handed
/// its shards off. Other nodes keep their Links open for as long as they
/// live, so the servers are stopped after this whatever is still open.
const SERVER_DRAIN: Duration = Duration::from_secs(2);

/// Why the node could not start or serve.
#[derive(Debug, thiserror::Error)]
pub enum ProgramError {
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
    /// The gRPC server failed.
    #[error("gRPC server failed: {0}")]
    Serve(#[from] tonic::transport::Error),
    /// The admin server failed.
    #[error("admin server failed: {0}")]
    Admin(std::io::Error),
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

/// Runs the node until it is asked to stop.
///
/// # Errors
/// Startup failed (a port taken, a setting the runtime refuses), or a server
/// failed while running.
pub async fn run(config: NodeConfig) -> Result<(), ProgramError> {
    crate::logging::init(config.log.format, &config.log.level)?;
    let metrics = admin::install_recorder()?;
    let grpc_listener = bind("node.listen", config.node.listen).await?;
    let admin_listener = bind("node.admin_listen", config.node.admin_listen).await?;
    let advertised = advertised(&config, &grpc_listener);
    let settings = config.sharding_settings();

    let hosting = Arc::new(StaticHosting::new(config.coordinator.address.clone()));
    if advertised == config.coordinator.address {
        host_coordinators(&config, &hosting)?;
    }
    let grpc_settings = GrpcSettings {
        heartbeat_interval: config.coordinator.heartbeat_interval,
        region_timeout: config.coordinator.region_timeout,
        ..GrpcSettings::default()
    };
    let transport = GrpcTransport::new(&advertised, grpc_settings, hosting);
    let node = Arc::new(Node::new(transport.clone()));
    for entity_type in &config.node.entity_types {
        let started = match entity_type {
            BuiltinEntityType::Counter => {
                let counter = EntityType::new(COUNTER, |_| Counter::default())
                    .with_settings(settings.clone());
                if config.node.proxy {
                    node.start_proxy(counter).map(drop)
                } else {
                    node.start_region(counter).map(drop)
                }
            }
        };
        started.map_err(|e| ProgramError::Settings(e.to_string()))?;
    }

    let (stop, mut stopping) = watch::channel(false);
    tokio::spawn(watch_signals(stop.clone()));
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
    let grpc = tonic::transport::Server::builder()
        .add_service(transport.node_service())
        .add_service(transport.coordinator_service())
        .add_service(ShardingApi::new(node.clone(), config.ask_timeout(), stop))
        .add_service(health_service)
        .add_service(reflection)
        .serve_with_incoming_shutdown(
            TcpListenerStream::new(grpc_listener),
            stopped(servers_stopping.clone()),
        );
    let mut grpc = tokio::spawn(grpc);
    let probe = {
        let node = node.clone();
        move || match node.not_ready() {
            reasons if reasons.is_empty() => Readiness::Ready,
            reasons => Readiness::NotReady(reasons.join("; ")),
        }
    };
    let admin = admin::serve(
        admin_listener,
        Admin::new(metrics, probe),
        stopped(servers_stopping),
    );
    let mut admin = tokio::spawn(admin);
    tracing::info!(node = %advertised, coordinator = %config.coordinator.address, "node serving");

    tokio::select! {
        _ = stopping.wait_for(|stop| *stop) => {}
        result = &mut grpc => return flatten(result).map_err(ProgramError::Serve),
        result = &mut admin => return flatten(result).map_err(ProgramError::Admin),
    }
    tracing::info!(node = %advertised, "stopping: handing shards off");
    health
        .set_service_status("", tonic_health::ServingStatus::NotServing)
        .await;
    node.shutdown().await;
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

/// This node hosts the coordinators: one per entity type, with an
/// in-memory store. Its epoch is the start time, so a restarted coordinator
/// outranks the one before it.
///
/// The in-memory store is lost when the node restarts, while the other
/// nodes may still run shards. A marker in the data directory says whether
/// this node has hosted the coordinator before: if it has, the coordinator
/// waits `region_timeout` for the regions to report what they run before it
/// places other shards; a brand-new cluster places shards at once.
fn host_coordinators(config: &NodeConfig, hosting: &StaticHosting) -> Result<(), ProgramError> {
    let epoch = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(1, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
    let data_dir = config.data_dir();
    for entity_type in &config.node.entity_types {
        let marker = data_dir.join(format!("coordinator-{}.started", entity_type.name()));
        let store = if marker.exists() {
            InMemoryStore::after_loss()
        } else {
            InMemoryStore::new()
        };
        std::fs::create_dir_all(&data_dir)
            .and_then(|()| std::fs::write(&marker, format!("{epoch}\n")))
            .map_err(|source| ProgramError::DataDir {
                path: marker.clone(),
                source,
            })?;
        let strategy = LeastShardAllocationStrategy::new(config.least_shard_settings())
            .map_err(|e| ProgramError::Settings(format!("coordinator.least_shard: {e}")))?;
        let handle = CoordinatorHandle::spawn(
            entity_type.name(),
            config.sharding_settings(),
            Box::new(strategy),
            Arc::new(store),
        )
        .map_err(|e| ProgramError::Settings(format!("sharding.{}: {}", e.field, e.reason)))?;
        hosting.host(handle, epoch, None);
    }
    tracing::info!(
        entity_types = config.node.entity_types.len(),
        epoch,
        "hosting the coordinators"
    );
    Ok(())
}

async fn stopped(mut stop: watch::Receiver<bool>) {
    let _ = stop.wait_for(|stop| *stop).await;
}

/// SIGTERM (what orchestrators send) and Ctrl-C both stop gracefully.
async fn watch_signals(stop: watch::Sender<bool>) {
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

fn flatten<E>(result: Result<Result<(), E>, tokio::task::JoinError>) -> Result<(), E> {
    match result {
        Ok(result) => result,
        // The server task panicked or was aborted: treat it as a stop.
        Err(_) => Ok(()),
    }
}
