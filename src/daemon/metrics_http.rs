//! The daemon helper's opt-in metrics endpoint: `GET /metrics` over plain
//! HTTP/1.1 on the address [`DaemonOptions::metrics_http`] names (a
//! loopback address such as `127.0.0.1:9464`; anything else is served too,
//! with a warning: the metrics are not secret, but they are not
//! authenticated either). Each response is the supervisor's metrics in
//! OpenMetrics text (`SupervisorHandle::metrics`), then the connection
//! closes. Anything but `GET /metrics` gets 404; a request head over 8 KiB
//! or slower than 5 s is dropped, so a stray client cannot hold a task.
//! `tests/metrics.rs::the_http_endpoint_serves_openmetrics`.
//!
//! [`DaemonOptions::metrics_http`]: super::DaemonOptions::metrics_http

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::supervisor::SupervisorHandle;

/// The content type of OpenMetrics text.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

const MAX_HEAD: usize = 8 * 1024;
const HEAD_TIMEOUT: Duration = Duration::from_secs(5);

/// The endpoint while it is served; dropping it stops accepting.
#[derive(Debug)]
pub(super) struct MetricsServer {
    task: tokio::task::JoinHandle<()>,
}

impl Drop for MetricsServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Bind `addr` and serve `handle`'s metrics there.
pub(super) async fn serve(
    addr: SocketAddr,
    handle: SupervisorHandle,
) -> std::io::Result<MetricsServer> {
    if !addr.ip().is_loopback() {
        tracing::warn!(%addr, "the metrics endpoint is served beyond loopback, unauthenticated");
    }
    let listener = TcpListener::bind(addr).await?;
    tracing::info!(addr = %listener.local_addr()?, "the metrics endpoint is listening");
    let task = tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            };
            let handle = handle.clone();
            tokio::spawn(async move {
                if let Err(error) = answer(stream, &handle).await {
                    tracing::debug!(%error, "a metrics request was not answered");
                }
            });
        }
    });
    Ok(MetricsServer { task })
}

/// Read one request head and answer it.
async fn answer(mut stream: TcpStream, handle: &SupervisorHandle) -> std::io::Result<()> {
    let mut head = Vec::new();
    let mut buf = [0u8; 1024];
    let read_head = async {
        while !head.windows(4).any(|w| w == b"\r\n\r\n") {
            let n = stream.read(&mut buf).await?;
            if n == 0 || head.len() + n > MAX_HEAD {
                return Err(std::io::Error::other("no complete request head"));
            }
            head.extend_from_slice(&buf[..n]);
        }
        Ok(())
    };
    tokio::time::timeout(HEAD_TIMEOUT, read_head)
        .await
        .map_err(|_| std::io::Error::other("the request head took too long"))??;
    let line = head.split(|&b| b == b'\r').next().unwrap_or_default();
    let mut words = line.split(|&b| b == b' ');
    let (method, target) = (words.next(), words.next());
    let wanted = method == Some(b"GET".as_slice())
        && target.is_some_and(|t| t == b"/metrics" || t.starts_with(b"/metrics?"));
    let (status, content_type, body) = if wanted {
        ("200 OK", CONTENT_TYPE, handle.metrics())
    } else {
        (
            "404 Not Found",
            "text/plain; charset=utf-8",
            "not found: GET /metrics\n".to_owned(),
        )
    };
    let response = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(response.as_bytes()).await?;
    stream.shutdown().await
}
