//! The connections a node's servers accept: plain TCP, or TLS whose
//! handshake has finished. Each carries what the handshake proved about
//! the other end ([`ConnectionInfo`]); tonic puts it in every request's
//! extensions, where the access checks and the peer services read it.

use super::credentials::NodeTls;
use super::identity::{host_of, names};
use crate::tasks::TaskSet;
use rustls_pki_types::CertificateDer;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;

/// How long a client may take to finish its TLS handshake: a connection
/// that opens and says nothing must not hold a slot for ever.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// What a server knows of the other end of a connection.
#[derive(Debug, Clone)]
pub struct ConnectionInfo {
    /// The other end's address.
    pub remote: Option<SocketAddr>,
    /// Plain text or TLS, and what the TLS handshake proved.
    pub encryption: Encryption,
}

/// How a connection is carried.
#[derive(Debug, Clone)]
pub enum Encryption {
    /// Plain text (no `[tls]`): nothing is proved.
    Plain,
    /// TLS, with the certificate the other end presented (already checked
    /// to chain to the CA), if it presented one.
    Tls(Option<Arc<CertificateDer<'static>>>),
}

impl ConnectionInfo {
    /// The other end's verified certificate, if it is a TLS connection
    /// that presented one.
    pub fn certificate(&self) -> Option<&CertificateDer<'static>> {
        match &self.encryption {
            Encryption::Tls(certificate) => certificate.as_deref(),
            Encryption::Plain => None,
        }
    }
}

/// Checks that the other end of a connection may speak as the node
/// `claimed` (`host:port`): over TLS its certificate must name the host;
/// over plain text (no `[tls]`) nothing is checked.
///
/// # Errors
/// `PERMISSION_DENIED`, saying why, when the certificate names another host
/// or there is none.
pub fn check_node(info: Option<&ConnectionInfo>, claimed: &str) -> Result<(), tonic::Status> {
    let Some(info) = info.filter(|info| matches!(info.encryption, Encryption::Tls(_))) else {
        return Ok(());
    };
    let host = host_of(claimed);
    match info.certificate() {
        Some(certificate) if names(certificate, host) => Ok(()),
        Some(_) => {
            tracing::warn!(remote = ?info.remote, claimed, "refused a node whose certificate does not name the host it claims");
            Err(tonic::Status::permission_denied(format!(
                "the client certificate does not name {host}, the host of the node {claimed} it claims to be"
            )))
        }
        None => Err(tonic::Status::unauthenticated(
            "a node must present its certificate",
        )),
    }
}

/// One accepted connection.
#[derive(Debug)]
pub enum Connection {
    /// Plain text (no `[tls]`).
    Plain(TcpStream, ConnectionInfo),
    /// After a finished TLS handshake.
    Tls(
        Box<tokio_rustls::server::TlsStream<TcpStream>>,
        ConnectionInfo,
    ),
}

impl Connection {
    fn info(&self) -> &ConnectionInfo {
        match self {
            Connection::Plain(_, info) | Connection::Tls(_, info) => info,
        }
    }
}

impl tonic::transport::server::Connected for Connection {
    type ConnectInfo = ConnectionInfo;

    fn connect_info(&self) -> ConnectionInfo {
        self.info().clone()
    }
}

impl AsyncRead for Connection {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Connection::Plain(s, _) => Pin::new(s).poll_read(cx, buf),
            Connection::Tls(s, _) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Connection {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Connection::Plain(s, _) => Pin::new(s).poll_write(cx, buf),
            Connection::Tls(s, _) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Connection::Plain(s, _) => Pin::new(s).poll_write_vectored(cx, bufs),
            Connection::Tls(s, _) => Pin::new(s.as_mut()).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            Connection::Plain(s, _) => s.is_write_vectored(),
            Connection::Tls(s, _) => s.is_write_vectored(),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Connection::Plain(s, _) => Pin::new(s).poll_flush(cx),
            Connection::Tls(s, _) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Connection::Plain(s, _) => Pin::new(s).poll_shutdown(cx),
            Connection::Tls(s, _) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
}

/// The connections accepted on `listener`, TLS ones once their handshake
/// has finished. Handshakes run side by side, so one slow client delays
/// no other. `listener` is served with Nagle's algorithm off, as on the
/// connecting side: Link frames are small (an ask, its ack, a credit
/// update, a reply); with Nagle on, a frame written while the last is
/// unacknowledged waits for the peer's delayed ACK, and every other remote
/// ask took 40 ms.
///
/// The accepting task belongs to `tasks`; it also ends when the receiver
/// is dropped (the server stopped).
pub fn accept(
    listener: TcpListener,
    tls: Option<NodeTls>,
    tasks: &TaskSet,
) -> mpsc::Receiver<Connection> {
    let (sender, connections) = mpsc::channel(64);
    tasks.spawn(accepting(listener, tls, sender));
    connections
}

/// [`accept`]'s connections as a gRPC server's incoming stream.
pub fn incoming(
    listener: TcpListener,
    tls: Option<NodeTls>,
    tasks: &TaskSet,
) -> impl futures::Stream<Item = io::Result<Connection>> {
    use futures::StreamExt;
    tokio_stream::wrappers::ReceiverStream::new(accept(listener, tls, tasks)).map(Ok)
}

async fn accepting(listener: TcpListener, tls: Option<NodeTls>, sender: mpsc::Sender<Connection>) {
    let mut handshakes = tokio::task::JoinSet::new();
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            _ = sender.closed() => return,
            Some(_) = handshakes.join_next(), if !handshakes.is_empty() => continue,
        };
        let (stream, remote) = match accepted {
            Ok(accepted) => accepted,
            Err(e) => {
                // Out of file descriptors, say: wait instead of spinning.
                tracing::warn!(error = %e, "cannot accept a connection");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let Some(tls) = &tls else {
            let info = ConnectionInfo {
                remote: Some(remote),
                encryption: Encryption::Plain,
            };
            if sender.send(Connection::Plain(stream, info)).await.is_err() {
                return;
            }
            continue;
        };
        let acceptor = tokio_rustls::TlsAcceptor::from(tls.server_config());
        let sender = sender.clone();
        handshakes.spawn(async move {
            match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
                Ok(Ok(stream)) => {
                    let certificate = stream
                        .get_ref()
                        .1
                        .peer_certificates()
                        .and_then(|chain| chain.first())
                        .map(|c| Arc::new(c.clone().into_owned()));
                    let info = ConnectionInfo {
                        remote: Some(remote),
                        encryption: Encryption::Tls(certificate),
                    };
                    let _ = sender.send(Connection::Tls(Box::new(stream), info)).await;
                }
                Ok(Err(e)) => {
                    tracing::info!(%remote, error = %e, "TLS handshake refused");
                }
                Err(_) => {
                    tracing::info!(%remote, timeout = ?HANDSHAKE_TIMEOUT, "TLS handshake not finished in time");
                }
            }
        });
    }
}

/// The admin HTTP server's listener over TLS: connections whose handshake
/// finished.
#[derive(Debug)]
pub struct TlsListener {
    connections: mpsc::Receiver<Connection>,
    local: SocketAddr,
}

impl TlsListener {
    /// TLS connections on `listener`, with the node's certificate.
    ///
    /// # Errors
    /// The listener has no local address.
    pub fn new(listener: TcpListener, tls: NodeTls, tasks: &TaskSet) -> io::Result<Self> {
        let local = listener.local_addr()?;
        Ok(Self {
            connections: accept(listener, Some(tls), tasks),
            local,
        })
    }
}

impl axum::serve::Listener for TlsListener {
    type Io = Connection;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Connection, SocketAddr) {
        match self.connections.recv().await {
            Some(connection) => {
                let remote = connection.info().remote.unwrap_or(self.local);
                (connection, remote)
            }
            // The accepting task is gone (the node is stopping): accept
            // nothing more.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        Ok(self.local)
    }
}
