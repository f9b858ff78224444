//! The control plane over TCP (opt-in): the same tarpc service and frames
//! as the Unix socket, behind a token handshake that completes before
//! tarpc sees a byte (`spec/control.md`, "TCP").
//!
//! The connection's first bytes are the client's hello
//! ([`auth::HELLO_LEN`] bytes: magic `SFCT`, version 1, three zero bytes,
//! the 32-byte token), read into a fixed stack buffer under
//! [`ServerLimits::handshake_timeout`]. The server answers one byte
//! ([`auth::ANSWER_ACCEPTED`], or [`auth::ANSWER_REFUSED`] /
//! [`auth::ANSWER_BUSY`] and closes). Only after `ANSWER_ACCEPTED` does the
//! connection carry frames.
//!
//! Read [`auth`] for what the token does and does not protect: it is not
//! TLS. Bind loopback (the default the daemon options document); a
//! non-loopback address is served with a warning in the log.
//!
//! Invariants, and the tests that check them (`tests/control_tcp.rs`):
//! - No request frame is decoded before the hello carried the right token:
//!   `no_token_or_a_wrong_token_is_refused_and_the_right_one_answered`.
//! - A silent, short, oversized or garbage hello is closed within the
//!   handshake timeout without allocating; other clients are answered:
//!   `a_hostile_handshake_is_closed_and_the_server_still_answers`.
//! - At most [`ServerLimits::max_connections_per_peer`] connections from
//!   one IP address, [`ServerLimits::max_connections`] in all (counting
//!   those still in their handshake): `connections_per_peer_are_bounded`.
//! - Frames over 1 MiB close that connection and memory stays flat:
//!   `oversized_frames_keep_memory_flat`.
//! - After the handshake a connection is served exactly as on the Unix
//!   socket (`server::serve_admitted`: in-flight bound, idle timeout):
//!   `an_idle_tcp_connection_is_closed`.

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::auth::{self, HELLO_LEN, Token};
use super::bounds::Bounds;
use super::client::ClientError;
use super::server::{ControlError, ServerLimits, serve_admitted};
use crate::supervisor::SupervisorHandle;

/// The loopback address a daemon's control port is usually bound to (the
/// port is the caller's choice).
pub const LOOPBACK: IpAddr = IpAddr::V4(std::net::Ipv4Addr::LOCALHOST);

/// How long a client waits for the server's answer to its hello.
const CLIENT_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// A running TCP control server. Dropping it stops accepting and closes
/// every connection.
#[derive(Debug)]
pub struct TcpServerGuard {
    /// The bound address (with the real port when asked for port 0).
    local_addr: SocketAddr,
    /// Cancels the accept loop and every connection.
    cancel: CancellationToken,
    /// The accept loop.
    task: JoinHandle<()>,
}

impl TcpServerGuard {
    /// The address the server listens on.
    #[must_use]
    pub const fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// Stop serving and wait until the accept loop is gone, so the port is
    /// closed when this returns (dropping the guard only asks the loop to
    /// end: the listener closes once the runtime gets to it).
    pub async fn shutdown(mut self) {
        self.cancel.cancel();
        self.task.abort();
        let _ = (&mut self.task).await;
    }
}

impl Drop for TcpServerGuard {
    fn drop(&mut self) {
        self.cancel.cancel();
        self.task.abort();
    }
}

/// Serve `handle` on TCP at `addr`, accepting clients that present the
/// token held in `token_file` (mode 0600, owned by this user; see
/// [`Token::read_file`]). Default [`ServerLimits`]. Call inside a tokio
/// runtime.
///
/// # Errors
/// [`ControlError::Token`] when the token file is missing, too open or not
/// a token; [`ControlError::Bind`] when `addr` cannot be bound.
pub fn serve_tcp(
    handle: SupervisorHandle,
    addr: SocketAddr,
    token_file: impl AsRef<Path>,
) -> Result<TcpServerGuard, ControlError> {
    let token = Token::read_file(token_file)?;
    serve_tcp_with(handle, addr, token, ServerLimits::default())
}

/// [`serve_tcp`] with the token in hand and explicit limits.
///
/// # Errors
/// [`ControlError::Bind`] when `addr` cannot be bound.
pub fn serve_tcp_with(
    handle: SupervisorHandle,
    addr: SocketAddr,
    token: Token,
    limits: ServerLimits,
) -> Result<TcpServerGuard, ControlError> {
    let bind_err = |source| ControlError::Bind { addr, source };
    let listener = std::net::TcpListener::bind(addr).map_err(bind_err)?;
    listener.set_nonblocking(true).map_err(bind_err)?;
    let local_addr = listener.local_addr().map_err(bind_err)?;
    let listener = TcpListener::from_std(listener).map_err(bind_err)?;
    if !local_addr.ip().is_loopback() {
        tracing::warn!(
            %local_addr,
            "the control port is not on loopback: the token handshake does not encrypt, \
             so the token and every snapshot cross the network in the clear"
        );
    }
    let cancel = CancellationToken::new();
    let task = tokio::spawn(accept_loop(listener, handle, token, limits, cancel.clone()));
    tracing::info!(%local_addr, "the control port is listening");
    Ok(TcpServerGuard {
        local_addr,
        cancel,
        task,
    })
}

async fn accept_loop(
    listener: TcpListener,
    handle: SupervisorHandle,
    token: Token,
    limits: ServerLimits,
    cancel: CancellationToken,
) {
    let bounds = Bounds::new(limits.max_connections, limits.max_connections_per_peer);
    loop {
        let accepted = tokio::select! {
            () = cancel.cancelled() => return,
            accepted = listener.accept() => accepted,
        };
        let (stream, peer) = match accepted {
            Ok(accepted) => accepted,
            Err(error) => {
                tracing::warn!(%error, "control port accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let admission = match bounds.admit(peer.ip()) {
            Ok(admission) => admission,
            Err(over) => {
                tracing::warn!(%peer, ?over, "too many control connections; closing a new one");
                // One byte into an empty socket buffer never blocks; if it
                // does not fit, the close alone says it.
                let _ = stream.try_write(&[auth::ANSWER_BUSY]);
                continue;
            }
        };
        // Small frames, one round trip each: do not wait to coalesce them.
        let _ = stream.set_nodelay(true);
        let handle = handle.clone();
        let token = token.clone();
        let cancel = cancel.clone();
        tokio::spawn(async move {
            let greeted = tokio::select! {
                () = cancel.cancelled() => return,
                greeted = handshake(stream, &token, limits.handshake_timeout) => greeted,
            };
            match greeted {
                Ok(stream) => serve_admitted(stream, handle, limits, cancel, admission).await,
                Err(why) => tracing::warn!(%peer, why, "control handshake failed; closed"),
            }
        });
    }
}

/// Read the hello (a fixed-size stack buffer, under `timeout`) and answer
/// it: the stream back when it carried `token`, else why not (the peer has
/// been told and the stream is dropped).
async fn handshake(
    mut stream: TcpStream,
    token: &Token,
    timeout: Duration,
) -> Result<TcpStream, &'static str> {
    let mut hello = [0u8; HELLO_LEN];
    match tokio::time::timeout(timeout, stream.read_exact(&mut hello)).await {
        Err(_) => return Err("no hello within the handshake timeout"),
        Ok(Err(_)) => return Err("the connection ended inside the hello"),
        Ok(Ok(_)) => {}
    }
    if !token.accepts(&hello) {
        let _ = tokio::time::timeout(timeout, stream.write_all(&[auth::ANSWER_REFUSED])).await;
        return Err("wrong hello or token");
    }
    match tokio::time::timeout(timeout, stream.write_all(&[auth::ANSWER_ACCEPTED])).await {
        Ok(Ok(())) => Ok(stream),
        _ => Err("could not answer the hello"),
    }
}

/// The client's side: connect to `addr`, present `token`, and hand back the
/// stream once the server accepted it.
pub(crate) async fn dial(addr: SocketAddr, token: &Token) -> Result<TcpStream, ClientError> {
    let endpoint = || addr.to_string();
    let connect_err = |source| ClientError::Connect {
        endpoint: endpoint(),
        source,
    };
    let timed_out = || connect_err(io::Error::from(io::ErrorKind::TimedOut));
    let mut stream = tokio::time::timeout(CLIENT_HANDSHAKE_TIMEOUT, TcpStream::connect(addr))
        .await
        .map_err(|_| timed_out())?
        .map_err(connect_err)?;
    let _ = stream.set_nodelay(true);
    let greeted = async {
        stream.write_all(&token.hello()).await?;
        let mut answer = [0u8; 1];
        let n = stream.read(&mut answer).await?;
        Ok::<_, io::Error>((n, answer[0]))
    };
    let (n, answer) = tokio::time::timeout(CLIENT_HANDSHAKE_TIMEOUT, greeted)
        .await
        .map_err(|_| timed_out())?
        .map_err(connect_err)?;
    match (n, answer) {
        (1, auth::ANSWER_ACCEPTED) => Ok(stream),
        (1, auth::ANSWER_REFUSED) => Err(ClientError::Auth {
            endpoint: endpoint(),
        }),
        (1, auth::ANSWER_BUSY) => Err(ClientError::Busy {
            endpoint: endpoint(),
        }),
        (0, _) => Err(connect_err(io::Error::new(
            io::ErrorKind::ConnectionAborted,
            "the server closed the connection during the handshake",
        ))),
        (_, other) => Err(connect_err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("not a steadfast control port (answered {other:#04x} to the hello)"),
        ))),
    }
}
