//! The daemon helper's opt-in metrics endpoint: `GET /metrics` over plain
//! HTTP/1.1 on the address [`DaemonOptions::metrics_http`] names (a
//! loopback address such as `127.0.0.1:9464`; anything else is served too,
//! with a warning: the metrics are not secret, but they are not
//! authenticated either). Each response is the supervisor's metrics in
//! OpenMetrics text (`SupervisorHandle::metrics`), then the connection
//! closes. Anything but `GET /metrics` gets 404.
//! `tests/it/metrics.rs::the_http_endpoint_serves_openmetrics`.
//!
//! Anyone who can reach the port can open connections to it, so it is
//! bounded like the control plane (`spec/control.md`, "Metrics"):
//! - **At most [`MAX_CONNECTIONS`] (64) connections at once.** One accepted
//!   past the cap closes the oldest, and the loop accepts again only once
//!   that one's descriptor is closed: a flood of idle connections holds at
//!   most 64 descriptors, and a real scrape, which sends its request at
//!   once and is answered as soon as it is read, still gets through
//!   (closing the newest instead would keep every scrape out while the
//!   flood's connections wait out their deadline).
//!   `tests/it/fds.rs::an_idle_metrics_flood_is_held_to_the_cap`.
//! - **Deadlines.** A request head over 8 KiB, or not complete within 5 s
//!   of the accept, is dropped; an answer not written within 5 s more is
//!   dropped too. So no connection holds a task or a descriptor past 10 s.
//! - **A failed accept pauses, never ends the endpoint**
//!   ([`AcceptBackoff`]): out of descriptors (`EMFILE`), the loop waits
//!   (10 ms doubling to 1 s) and accepts again, with bounded warnings.
//!   `tests/it/fds.rs::a_descriptor_flood_never_wedges_the_daemon`.
//!
//! [`DaemonOptions::metrics_http`]: super::DaemonOptions::metrics_http

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::time::Duration;

use steadfast_actors::accept::AcceptBackoff;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

use crate::embedding::SupervisorHandle;

/// The content type of OpenMetrics text.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Connections served at once; one more closes the oldest.
pub(super) const MAX_CONNECTIONS: usize = 64;

const MAX_HEAD: usize = 8 * 1024;
const HEAD_TIMEOUT: Duration = Duration::from_secs(5);
const WRITE_TIMEOUT: Duration = Duration::from_secs(5);

/// The endpoint while it is served; dropping it stops accepting and closes
/// every connection.
#[derive(Debug)]
pub(super) struct MetricsServer {
    task: JoinHandle<()>,
}

impl Drop for MetricsServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The connections being served, oldest first; dropping it closes them.
#[derive(Default)]
struct Open(VecDeque<JoinHandle<()>>);

impl Open {
    /// Make room for one more: forget the connections that ended, and
    /// close the oldest when [`MAX_CONNECTIONS`] are still open, returning
    /// once its descriptor is closed.
    async fn make_room(&mut self) {
        self.0.retain(|task| !task.is_finished());
        if self.0.len() < MAX_CONNECTIONS {
            return;
        }
        if let Some(oldest) = self.0.pop_front() {
            oldest.abort();
            // The task's stream is closed when the task is dropped.
            let _ = oldest.await;
        }
    }
}

impl Drop for Open {
    fn drop(&mut self) {
        for task in &self.0 {
            task.abort();
        }
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
        let mut backoff = AcceptBackoff::new("metrics endpoint");
        let mut open = Open::default();
        loop {
            let stream = match listener.accept().await {
                Ok((stream, _)) => {
                    backoff.accepted();
                    stream
                }
                Err(error) => {
                    backoff.failed(&error).await;
                    continue;
                }
            };
            open.make_room().await;
            let handle = handle.clone();
            open.0.push_back(tokio::spawn(async move {
                if let Err(error) = answer(stream, &handle).await {
                    tracing::debug!(%error, "a metrics request was not answered");
                }
            }));
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
    let write = async {
        stream.write_all(response.as_bytes()).await?;
        stream.shutdown().await
    };
    tokio::time::timeout(WRITE_TIMEOUT, write)
        .await
        .map_err(|_| std::io::Error::other("the answer took too long to write"))?
}
