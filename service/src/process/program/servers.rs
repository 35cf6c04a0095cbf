//! The node's two listeners: gRPC (other nodes, the coordinator protocol,
//! the client API, health, reflection) and admin HTTP (metrics, health, the
//! cluster map), each over TLS when `[tls]` asks for it, and the warning a
//! node gives when it serves plain text where others can reach it.

use super::ProgramError;
use crate::process::admin::{self, Admin};
use crate::process::security::Security;
use crate::tasks::TaskSet;
use crate::transport::tls::{connection, TlsListener};
use std::future::Future;
use std::net::SocketAddr;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

/// Serves gRPC on `listener` until `shutdown`: callers checked against
/// `[tls]` and `[api]`, connections accepted by a task of `tasks`.
pub(super) fn grpc(
    listener: TcpListener,
    security: &Security,
    services: tonic::service::Routes,
    tasks: &TaskSet,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> JoinHandle<Result<(), tonic::transport::Error>> {
    let incoming = connection::incoming(listener, security.tls().cloned(), tasks);
    let server = tonic::transport::Server::builder()
        .layer(security.access())
        .add_routes(services)
        .serve_with_incoming_shutdown(incoming, shutdown);
    tokio::spawn(server)
}

/// Serves the admin HTTP server on `listener` until `shutdown`, over TLS
/// with `tls.admin`.
pub(super) fn admin(
    listener: TcpListener,
    security: &Security,
    admin: Admin,
    tasks: &TaskSet,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<JoinHandle<std::io::Result<()>>, ProgramError> {
    Ok(match security.admin_tls() {
        Some(tls) => {
            let listener =
                TlsListener::new(listener, tls.clone(), tasks).map_err(ProgramError::Admin)?;
            tokio::spawn(admin::serve(listener, admin, shutdown))
        }
        None => tokio::spawn(admin::serve(listener, admin, shutdown)),
    })
}

/// Warns about each listener that serves plain text on an address other
/// hosts can reach.
pub(super) fn warn_plain_text(security: &Security, grpc: SocketAddr, admin: SocketAddr) {
    if security.tls().is_none() && !grpc.ip().is_loopback() {
        tracing::warn!(listen = %grpc, "the gRPC listener serves plain text on an address other hosts can reach: anyone who reaches it can join as a node and call the client API; set [tls] (README, \"A secured cluster\")");
    }
    if security.admin_tls().is_none() && !admin.ip().is_loopback() {
        tracing::warn!(admin_listen = %admin, "the admin listener serves plain text on an address other hosts can reach (metrics, health and the cluster map; nothing on it changes state); set tls.admin to encrypt it");
    }
}
