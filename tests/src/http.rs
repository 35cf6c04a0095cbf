//! A minimal HTTP/1.1 GET, enough for `/metrics` and the health endpoints.

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;

/// Status code and body of `GET path` on `address`.
///
/// # Errors
/// The connection failed or the answer is not HTTP.
pub async fn get(address: &str, path: &str) -> std::io::Result<(u16, String)> {
    get_over(TcpStream::connect(address).await?, address, path).await
}

/// [`get`] over a connection already open to `address` (a TLS one, say).
///
/// # Errors
/// The connection failed or the answer is not HTTP.
pub async fn get_over<S: AsyncRead + AsyncWrite + Unpin>(
    mut stream: S,
    address: &str,
    path: &str,
) -> std::io::Result<(u16, String)> {
    let request = format!("GET {path} HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await?;
    let mut raw = Vec::new();
    // A TLS server may close without close_notify: what was read counts.
    if let Err(e) = stream.read_to_end(&mut raw).await {
        if raw.is_empty() {
            return Err(e);
        }
    }
    let text = String::from_utf8_lossy(&raw).into_owned();
    let bad = || std::io::Error::new(std::io::ErrorKind::InvalidData, "not an HTTP answer");
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(bad)?;
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let chunked = head.lines().any(|line| {
        line.split_once(':').is_some_and(|(name, value)| {
            name.eq_ignore_ascii_case("transfer-encoding") && value.trim() == "chunked"
        })
    });
    let body = if chunked {
        dechunk(body).ok_or_else(bad)?
    } else {
        body.to_string()
    };
    Ok((status, body))
}

/// A chunked body's content (servers such as Prometheus send large
/// answers so).
fn dechunk(mut body: &str) -> Option<String> {
    let mut out = String::new();
    loop {
        let (size, rest) = body.split_once("\r\n")?;
        let size = usize::from_str_radix(size.split(';').next()?.trim(), 16).ok()?;
        if size == 0 {
            return Some(out);
        }
        out.push_str(rest.get(..size)?);
        body = rest.get(size..)?.strip_prefix("\r\n")?;
    }
}
