//! The admin HTTP server: `GET /metrics` for Prometheus, `GET /health/live`
//! and `GET /health/ready` for orchestrators, and the cluster map for
//! people (`GET /`, and `GET /api/cluster` that it polls:
//! `admin/cluster_map.rs`). It runs on its own port so that scrapes and
//! probes never compete with gRPC traffic and can be firewalled
//! separately. Nothing on it changes state.

mod cluster_map;

pub use cluster_map::{ClusterMap, EntityTypeMap, NodeShards, ShardView};

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use cluster_map::ClusterMapSource;
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder};
use parking_lot::Mutex;
use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

pub use metrics_exporter_prometheus::{BuildError, PrometheusHandle};

/// Prometheus's text exposition format, version 0.0.4.
const PROMETHEUS_TEXT: &str = "text/plain; version=0.0.4";
const PLAIN_TEXT: &str = "text/plain; charset=utf-8";

/// How often histogram samples are folded into their buckets between
/// scrapes. Without it, samples recorded while nobody scrapes pile up in
/// memory (the exporter only drains them on upkeep); 5 s is the exporter's
/// own default for its built-in upkeep task, which we do not use because it
/// comes with an HTTP listener of its own.
const UPKEEP_INTERVAL: Duration = Duration::from_secs(5);

/// Bucket bounds of every `*_seconds` histogram: from a local shard-home
/// lookup (a millisecond) to a slow hand-off (a minute). Buckets rather than
/// the exporter's default summaries, because buckets can be aggregated
/// across nodes in PromQL and summaries cannot.
const SECONDS_BUCKETS: &[f64] = &[
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
];

/// Whether this node should receive traffic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Readiness {
    /// Registered and hosting what it was assigned.
    Ready,
    /// Not yet (or no longer), with a short reason for the probe's log.
    NotReady(String),
}

/// Tells `/health/ready` whether the node is ready. The node program
/// answers from its regions' status; a closure works too.
pub trait ReadinessProbe: Send + Sync + 'static {
    /// The node's readiness now. Called on every probe, so it must be cheap
    /// and must not block.
    fn readiness(&self) -> Readiness;
}

impl<F> ReadinessProbe for F
where
    F: Fn() -> Readiness + Send + Sync + 'static,
{
    fn readiness(&self) -> Readiness {
        self()
    }
}

/// What the admin server serves from.
#[derive(Clone)]
pub struct Admin {
    metrics: PrometheusHandle,
    readiness: Arc<dyn ReadinessProbe>,
    /// The node whose cluster map `/` shows, if any.
    map: Option<Arc<ClusterMapSource>>,
}

impl Admin {
    /// An admin server's state: the recorder's handle (see
    /// [`install_recorder`]) and the readiness probe.
    pub fn new(metrics: PrometheusHandle, readiness: impl ReadinessProbe) -> Self {
        Self {
            metrics,
            readiness: Arc::new(readiness),
            map: None,
        }
    }

    /// Serves the cluster map of `node` too: the page at `/` and its JSON
    /// at `/api/cluster`.
    #[must_use]
    pub fn with_cluster_map(mut self, node: Arc<crate::node::Node>) -> Self {
        self.map = Some(Arc::new(ClusterMapSource::new(node)));
        self
    }
}

impl fmt::Debug for Admin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Admin").finish_non_exhaustive()
    }
}

/// The handle of the process's metrics recorder, installing it on the first
/// call. Later calls return the same handle, so tests and embedders may
/// call it freely. Spawns nothing: histogram upkeep runs inside [`serve`]
/// (periodically and before each scrape), so a process that records
/// metrics without serving them should call
/// [`PrometheusHandle::run_upkeep`] itself now and then.
///
/// Metric descriptions ([`crate::metrics::describe`]) are registered right
/// after installation, since the recorder drops descriptions given before
/// it exists.
///
/// # Errors
/// Another metrics recorder is already installed in this process.
pub fn install_recorder() -> Result<PrometheusHandle, BuildError> {
    // A lock rather than a `OnceLock` so a failed install can be reported
    // (and retried) instead of being cached or panicking.
    static HANDLE: Mutex<Option<PrometheusHandle>> = Mutex::new(None);
    let mut slot = HANDLE.lock();
    if let Some(handle) = slot.as_ref() {
        return Ok(handle.clone());
    }
    let handle = PrometheusBuilder::new()
        .set_buckets_for_metric(
            Matcher::Full(crate::metrics::KAFKA_RECORD_LATENCY.to_string()),
            crate::metrics::RECORD_LATENCY_BUCKETS,
        )?
        .set_buckets_for_metric(Matcher::Suffix("_seconds".to_string()), SECONDS_BUCKETS)?
        .install_recorder()?;
    crate::metrics::describe();
    *slot = Some(handle.clone());
    Ok(handle)
}

/// Serves the admin routes on `listener` until `shutdown` completes, then
/// finishes the requests in flight and returns.
///
/// # Errors
/// The listener fails in a way the server cannot recover from.
pub async fn serve<L>(
    listener: L,
    admin: Admin,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()>
where
    L: axum::serve::Listener,
    L::Addr: std::fmt::Debug,
{
    let upkeep = AbortOnDrop(tokio::spawn(upkeep(admin.metrics.clone())));
    let router = Router::new()
        .route("/", get(page))
        .route("/api/cluster", get(cluster))
        .route("/metrics", get(metrics))
        .route("/health/live", get(live))
        .route("/health/ready", get(ready))
        .with_state(admin);
    let served = axum::serve(listener, router)
        .with_graceful_shutdown(shutdown)
        .await;
    drop(upkeep);
    served
}

async fn upkeep(metrics: PrometheusHandle) {
    let mut tick = tokio::time::interval(UPKEEP_INTERVAL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        metrics.run_upkeep();
    }
}

/// Stops the upkeep task with the server, also when `serve`'s future is
/// dropped rather than completed.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

async fn metrics(State(admin): State<Admin>) -> impl IntoResponse {
    // Upkeep first so the scrape includes the latest histogram samples.
    admin.metrics.run_upkeep();
    (
        [(header::CONTENT_TYPE, PROMETHEUS_TEXT)],
        admin.metrics.render(),
    )
}

async fn page(State(admin): State<Admin>) -> Response {
    match admin.map {
        Some(_) => Html(cluster_map::PAGE).into_response(),
        None => StatusCode::NOT_FOUND.into_response(),
    }
}

async fn cluster(State(admin): State<Admin>) -> Response {
    match admin.map {
        Some(map) => match serde_json::to_string(&*map.map().await) {
            Ok(body) => ([(header::CONTENT_TYPE, "application/json")], body).into_response(),
            Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
        },
        None => StatusCode::NOT_FOUND.into_response(),
    }
}

/// Answers while the process can serve HTTP at all: a liveness probe
/// should restart a wedged process, not one that is merely not ready.
async fn live() -> impl IntoResponse {
    ([(header::CONTENT_TYPE, PLAIN_TEXT)], "live")
}

async fn ready(State(admin): State<Admin>) -> impl IntoResponse {
    match admin.readiness.readiness() {
        Readiness::Ready => (
            StatusCode::OK,
            [(header::CONTENT_TYPE, PLAIN_TEXT)],
            "ready".to_string(),
        ),
        Readiness::NotReady(reason) => (
            StatusCode::SERVICE_UNAVAILABLE,
            [(header::CONTENT_TYPE, PLAIN_TEXT)],
            reason,
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::SocketAddr;
    use std::sync::atomic::{AtomicBool, Ordering};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::{TcpListener, TcpStream};

    struct Response {
        status: u16,
        content_type: String,
        body: String,
    }

    /// One HTTP/1.1 GET on a fresh connection; `Connection: close` lets us
    /// read to the end instead of parsing the body's length.
    async fn get(addr: SocketAddr, path: &str) -> Response {
        let mut stream = TcpStream::connect(addr).await.unwrap();
        let request = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
        stream.write_all(request.as_bytes()).await.unwrap();
        let mut raw = String::new();
        stream.read_to_string(&mut raw).await.unwrap();
        let (head, body) = raw.split_once("\r\n\r\n").unwrap();
        let mut lines = head.lines();
        let status = lines.next().unwrap().split(' ').nth(1).unwrap();
        let content_type = lines
            .filter_map(|line| line.split_once(": "))
            .find(|(name, _)| name.eq_ignore_ascii_case("content-type"))
            .map(|(_, value)| value.to_string())
            .unwrap_or_default();
        Response {
            status: status.parse().unwrap(),
            content_type,
            body: body.to_string(),
        }
    }

    async fn start(admin: Admin) -> (SocketAddr, tokio::sync::oneshot::Sender<()>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        tokio::spawn(async move {
            serve(listener, admin, async {
                let _ = stopped.await;
            })
            .await
            .unwrap();
        });
        (addr, stop)
    }

    #[tokio::test]
    async fn readiness_flips_from_503_to_200() {
        let handle = install_recorder().unwrap();
        let ready = Arc::new(AtomicBool::new(false));
        let probe = {
            let ready = ready.clone();
            move || {
                if ready.load(Ordering::Relaxed) {
                    Readiness::Ready
                } else {
                    Readiness::NotReady("no coordinator yet".to_string())
                }
            }
        };
        let (addr, _stop) = start(Admin::new(handle, probe)).await;

        let live = get(addr, "/health/live").await;
        assert_eq!((live.status, live.body.as_str()), (200, "live"));
        let not_ready = get(addr, "/health/ready").await;
        assert_eq!(not_ready.status, 503);
        assert_eq!(not_ready.body, "no coordinator yet");
        assert!(not_ready.content_type.starts_with("text/plain"));

        ready.store(true, Ordering::Relaxed);
        let now_ready = get(addr, "/health/ready").await;
        assert_eq!((now_ready.status, now_ready.body.as_str()), (200, "ready"));
        assert_eq!(get(addr, "/nothing").await.status, 404);
    }

    #[tokio::test]
    async fn metrics_show_a_counter_in_prometheus_text() {
        let handle = install_recorder().unwrap();
        // A second install is the same recorder, not an error.
        let again = install_recorder().unwrap();
        metrics::counter!("colo_admin_test_increments_total").increment(3);
        metrics::histogram!("colo_admin_test_duration_seconds").record(0.02);
        let (addr, _stop) = start(Admin::new(handle, || Readiness::Ready)).await;

        let scrape = get(addr, "/metrics").await;
        assert_eq!(scrape.status, 200);
        assert_eq!(scrape.content_type, "text/plain; version=0.0.4");
        assert!(
            scrape.body.contains("colo_admin_test_increments_total 3"),
            "{}",
            scrape.body
        );
        assert!(
            scrape
                .body
                .contains("colo_admin_test_duration_seconds_bucket{le=\"0.025\"} 1"),
            "{}",
            scrape.body
        );
        assert!(again
            .render()
            .contains("colo_admin_test_increments_total 3"));
    }

    #[tokio::test]
    async fn serve_returns_after_shutdown() {
        let handle = install_recorder().unwrap();
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let server = tokio::spawn(serve(
            listener,
            Admin::new(handle, || Readiness::Ready),
            async {
                let _ = stopped.await;
            },
        ));
        stop.send(()).unwrap();
        tokio::time::timeout(Duration::from_secs(5), server)
            .await
            .unwrap()
            .unwrap()
            .unwrap();
    }
}
