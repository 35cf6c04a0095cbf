//! A TCP proxy between a node and what dials it, to cut the network in
//! tests: it forwards bytes, holds them (a partition: nothing crosses, and
//! connections stay open as TCP keeps retrying), or breaks every
//! connection at once.

use std::sync::Arc;
use std::sync::Mutex;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinSet;

/// What the proxy does with traffic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Forward,
    /// Nothing crosses, either way; what was sent waits (in socket buffers)
    /// until the proxy forwards again.
    Hold,
}

/// A proxy on a loopback port in front of `target`. Dropping it stops it
/// and closes every connection through it.
#[derive(Debug)]
pub struct Proxy {
    /// Where to dial instead of the target.
    pub address: String,
    mode: watch::Sender<Mode>,
    connections: Arc<Mutex<JoinSet<()>>>,
    accept: tokio::task::JoinHandle<()>,
}

impl Proxy {
    /// Starts a proxy to `target` (`host:port`).
    pub async fn start(target: &str) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind proxy");
        Self::start_on(listener, target)
    }

    /// Starts a proxy to `target` on a listener bound already.
    pub fn start_on(listener: TcpListener, target: &str) -> Proxy {
        let address = listener.local_addr().expect("proxy address").to_string();
        let (mode, watch) = watch::channel(Mode::Forward);
        let connections = Arc::new(Mutex::new(JoinSet::new()));
        let target = target.to_string();
        let accept = tokio::spawn({
            let connections = connections.clone();
            async move {
                loop {
                    let Ok((inbound, _)) = listener.accept().await else {
                        return;
                    };
                    let (target, watch) = (target.clone(), watch.clone());
                    let mut set = connections.lock().expect("proxy connections");
                    while set.try_join_next().is_some() {}
                    set.spawn(relay(inbound, target, watch));
                }
            }
        });
        Proxy {
            address,
            mode,
            connections,
            accept,
        }
    }

    /// Holds all traffic, both ways, as a network partition would.
    pub fn partition(&self) {
        self.mode.send_replace(Mode::Hold);
    }

    /// Forwards again.
    pub fn heal(&self) {
        self.mode.send_replace(Mode::Forward);
    }

    /// Closes every connection through the proxy (both ends see it end);
    /// new ones are accepted.
    pub fn break_connections(&self) {
        self.connections
            .lock()
            .expect("proxy connections")
            .abort_all();
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.accept.abort();
        self.break_connections();
    }
}

async fn relay(inbound: TcpStream, target: String, mode: watch::Receiver<Mode>) {
    let Ok(outbound) = TcpStream::connect(&target).await else {
        return;
    };
    let _ = inbound.set_nodelay(true);
    let _ = outbound.set_nodelay(true);
    let (in_read, in_write) = inbound.into_split();
    let (out_read, out_write) = outbound.into_split();
    tokio::select! {
        () = copy(in_read, out_write, mode.clone()) => {}
        () = copy(out_read, in_write, mode) => {}
    }
}

/// Copies bytes while the proxy forwards; while it holds, reads nothing.
async fn copy(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    mut mode: watch::Receiver<Mode>,
) {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        if mode.wait_for(|m| *m == Mode::Forward).await.is_err() {
            return;
        }
        let n = tokio::select! {
            read = from.read(&mut buf) => match read {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            },
            // A partition starts while waiting to read: hold.
            _ = mode.wait_for(|m| *m == Mode::Hold) => continue,
        };
        // Bytes read before a partition are held until it heals.
        if mode.wait_for(|m| *m == Mode::Forward).await.is_err() {
            return;
        }
        if to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}
