//! Who may call what on the gRPC listener, decided before a call reaches
//! its service: the node services need a node's certificate, the client API
//! a client certificate or a bearer token whose scope allows the call,
//! health checks nothing. Without `[tls]` every call is let through (local
//! development; the node warns when that listener is not on loopback).

use super::tokens::{Scope, TokenFile};
use crate::transport::tls::ConnectionInfo;
use futures::future::{Either, Ready};
use std::sync::Arc;
use std::task::{Context, Poll};

/// What the gRPC listener asks of callers.
#[derive(Debug, Clone)]
pub struct Policy {
    /// `[tls]` is set: callers are checked.
    pub tls: bool,
    /// A client certificate (chaining to the CA) opens the client API.
    pub client_certificates: bool,
    /// Bearer tokens for the client API.
    pub tokens: Option<TokenFile>,
}

/// The services on the listener, by how they are guarded.
enum Guarded {
    /// Other nodes: Links and the coordinator protocol.
    Node,
    /// The client API (and reflection): `writes` for calls that change
    /// something.
    Client { writes: bool },
    /// Health checks: probes carry no credentials.
    Open,
}

fn guarded(path: &str) -> Guarded {
    let (service, method) = path
        .trim_start_matches('/')
        .split_once('/')
        .unwrap_or((path, ""));
    match service {
        "colo.v1.Node" | "colo.v1.Coordinator" => Guarded::Node,
        "grpc.health.v1.Health" => Guarded::Open,
        "colo.v1.Sharding" => Guarded::Client {
            writes: !matches!(method, "Ask" | "RegionState" | "ClusterStats"),
        },
        // Reflection reads; anything unknown is refused by the router, but
        // only after the caller proved who it is.
        "grpc.reflection.v1.ServerReflection" | "grpc.reflection.v1alpha.ServerReflection" => {
            Guarded::Client { writes: false }
        }
        _ => Guarded::Client { writes: true },
    }
}

impl Policy {
    /// Whether the call to `path` may go on.
    ///
    /// # Errors
    /// `UNAUTHENTICATED` without (valid) credentials, `PERMISSION_DENIED`
    /// for a read-only token on a call that changes something.
    fn check<B>(&self, request: &http::Request<B>) -> Result<(), tonic::Status> {
        if !self.tls {
            return Ok(());
        }
        let info = request.extensions().get::<ConnectionInfo>();
        let certificate = info.and_then(ConnectionInfo::certificate).is_some();
        match guarded(request.uri().path()) {
            Guarded::Open => Ok(()),
            // Which node the certificate speaks for is checked where the
            // node names itself (Hello, Register).
            Guarded::Node if certificate => Ok(()),
            Guarded::Node => Err(tonic::Status::unauthenticated(
                "node services need a node certificate (mutual TLS)",
            )),
            Guarded::Client { .. } if certificate && self.client_certificates => Ok(()),
            Guarded::Client { writes } => self.token(request, writes),
        }
    }

    fn token<B>(&self, request: &http::Request<B>, writes: bool) -> Result<(), tonic::Status> {
        let presented = request
            .headers()
            .get(http::header::AUTHORIZATION)
            .and_then(|value| value.as_bytes().strip_prefix(b"Bearer "));
        let (Some(tokens), Some(presented)) = (&self.tokens, presented) else {
            return Err(tonic::Status::unauthenticated(if self.tokens.is_some() {
                "no credentials: send a bearer token (authorization: Bearer ...) or a client certificate"
            } else {
                "no credentials: this node takes client certificates only"
            }));
        };
        let Some(client) = tokens.client(presented) else {
            tracing::info!(
                path = request.uri().path(),
                "refused a call with an unknown token"
            );
            return Err(tonic::Status::unauthenticated("unknown token"));
        };
        if writes && client.scope == Scope::ReadOnly {
            tracing::info!(
                client = client.name,
                path = request.uri().path(),
                "refused a read-only token a call that changes state"
            );
            return Err(tonic::Status::permission_denied(format!(
                "token `{}` is read-only: {} needs a read-write token",
                client.name,
                request.uri().path()
            )));
        }
        Ok(())
    }
}

/// The layer that puts [`Policy`] in front of every service of the server.
#[derive(Debug, Clone)]
pub struct AccessLayer {
    policy: Arc<Policy>,
}

impl AccessLayer {
    /// Checks callers against `policy`.
    pub fn new(policy: Policy) -> Self {
        Self {
            policy: Arc::new(policy),
        }
    }
}

impl<S> tower::Layer<S> for AccessLayer {
    type Service = Access<S>;

    fn layer(&self, inner: S) -> Access<S> {
        Access {
            inner,
            policy: self.policy.clone(),
        }
    }
}

/// A service behind [`AccessLayer`].
#[derive(Debug, Clone)]
pub struct Access<S> {
    inner: S,
    policy: Arc<Policy>,
}

impl<S, B> tower::Service<http::Request<B>> for Access<S>
where
    S: tower::Service<http::Request<B>, Response = http::Response<tonic::body::Body>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Either<S::Future, Ready<Result<S::Response, S::Error>>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        match self.policy.check(&request) {
            Ok(()) => Either::Left(self.inner.call(request)),
            Err(status) => Either::Right(futures::future::ready(Ok(status.into_http()))),
        }
    }
}
