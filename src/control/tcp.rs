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
//! Invariants, and the tests that check them (`tests/it/control_tcp.rs`):
//! - No request frame is decoded before the hello carried the right token:
//!   `no_token_or_a_wrong_token_is_refused_and_the_right_one_answered`.
//! - A silent, short, oversized or garbage hello is closed within the
//!   handshake timeout without allocating; other clients are answered:
//!   `a_hostile_handshake_is_closed_and_the_server_still_answers`.
//! - Two pools (`bounds`): connections still in their handshake hold a slot
//!   of the handshake pool only ([`ServerLimits::max_handshakes`] in all,
//!   [`ServerLimits::max_handshakes_per_peer`] from one IP address; when
//!   full, the oldest handshake is closed to make room — a real client
//!   says its hello at once, so silent connections cannot hold the way in);
//!   an authenticated connection moves to the served pool
//!   ([`ServerLimits::max_connections`], and
//!   [`ServerLimits::max_connections_per_peer`] from one IP address), where
//!   an idle or long-polling connection is evicted before a newcomer is
//!   answered busy (`2`, after its hello: nothing was executed).
//!   `connections_per_peer_are_bounded`,
//!   `tests/it/control_hostile.rs::silent_tcp_connections_do_not_lock_the_operator_out`.
//! - Frames over 1 MiB close that connection and memory stays flat:
//!   `oversized_frames_keep_memory_flat`.
//! - After the handshake a connection is served exactly as on the Unix
//!   socket (`server::serve_admitted`: in-flight bound, idle timeout):
//!   `an_idle_tcp_connection_is_closed`.
//! - A failed accept (out of descriptors) pauses the loop and accepts
//!   again, never ends it, for TCP and TLS alike (`accept_handshakes`,
//!   on `steadfast_actors::accept::AcceptBackoff`): its pacing is
//!   `accept::tests::an_exhausted_table_pauses_and_recovers`; the same
//!   backoff over a real full table is `tests/it/fds.rs`.

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use steadfast_actors::accept::AcceptBackoff;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::auth::{self, HELLO_LEN, Token};
use super::bounds::{Evict, Pool, Slot};
use super::error::{ClientError, ControlError};
use super::limits::ServerLimits;
use super::server::serve_admitted;
use crate::embedding::SupervisorHandle;
use steadfast_protocol::command::Role;

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
    /// The connections past the handshake (their slots).
    served: Arc<Pool<IpAddr>>,
}

impl TcpServerGuard {
    /// The address the server listens on.
    #[must_use]
    pub const fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// Stop accepting and wait until the accept loop is gone (the port is
    /// closed), let the connections already served finish their calls for
    /// up to `grace` (as [`ServerGuard::shutdown`](super::ServerGuard::shutdown):
    /// the answer to the `exit` that ended the daemon is written), then
    /// close the rest. Dropping the guard only asks the loop to end and
    /// closes every connection at once.
    pub async fn shutdown(mut self, grace: Duration) {
        super::bounds::stop_serving(&mut self.task, &self.served, &self.cancel, grace).await;
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
    let served = Arc::new(Pool::new(
        limits.max_connections,
        limits.max_connections_per_peer,
        Evict::Idle(limits.evict_grace),
    ));
    let task = tokio::spawn(accept_loop(
        listener,
        handle,
        token,
        limits,
        cancel.clone(),
        Arc::clone(&served),
    ));
    tracing::info!(%local_addr, "the control port is listening");
    Ok(TcpServerGuard {
        local_addr,
        cancel,
        task,
        served,
    })
}

async fn accept_loop(
    listener: TcpListener,
    handle: SupervisorHandle,
    token: Token,
    limits: ServerLimits,
    cancel: CancellationToken,
    served: Arc<Pool<IpAddr>>,
) {
    let busy = Some(auth::ANSWER_BUSY);
    accept_handshakes(listener, &handle, &limits, &cancel, "tcp", busy, |stream, peer, greeting| {
        let handle = handle.clone();
        let token = token.clone();
        let cancel = cancel.clone();
        let served = Arc::clone(&served);
        tokio::spawn(async move {
            let evicted = greeting.evicted();
            let greeted = tokio::select! {
                () = cancel.cancelled() => return,
                () = evicted.cancelled() => Err("evicted from the handshake pool by newer connections"),
                greeted = handshake(stream, &token, limits.handshake_timeout, || served.admit(peer.ip())) => greeted,
            };
            drop(greeting);
            match greeted {
                Ok((stream, slot)) => {
                    serve_admitted(stream, handle, limits, cancel, slot, Role::Operate).await;
                }
                Err(why) => tracing::warn!(%peer, why, "control handshake failed; closed"),
            }
        });
    })
    .await;
}

/// The accept loop both TCP-based transports share: accept until `cancel`,
/// give each connection a slot of its own handshake pool (the oldest
/// handshake is closed to make room, so a flood of silent connections never
/// takes a served slot), set `TCP_NODELAY` (small frames, one round trip
/// each), count it under `transport` and hand it to `handshake`. With a
/// zero-sized pool there is no room: the connection is sent `busy` (plain
/// TCP's busy answer) and closed; TLS cannot say anything before its
/// handshake, passes `None` and just closes.
pub(super) async fn accept_handshakes(
    listener: TcpListener,
    handle: &SupervisorHandle,
    limits: &ServerLimits,
    cancel: &CancellationToken,
    transport: &'static str,
    busy: Option<u8>,
    mut handshake: impl FnMut(TcpStream, SocketAddr, Slot<IpAddr>),
) {
    let handshakes = Pool::new(
        limits.max_handshakes,
        limits.max_handshakes_per_peer,
        Evict::Oldest,
    );
    let mut backoff = AcceptBackoff::new(format!("control port ({transport})"));
    loop {
        let accepted = tokio::select! {
            () = cancel.cancelled() => return,
            accepted = listener.accept() => accepted,
        };
        let (stream, peer) = match accepted {
            Ok(accepted) => {
                backoff.accepted();
                accepted
            }
            Err(error) => {
                // Out of descriptors, mostly: pause and accept again, never
                // end (the warnings are bounded).
                tokio::select! {
                    () = cancel.cancelled() => return,
                    () = backoff.failed(&error) => {}
                }
                continue;
            }
        };
        let Ok(greeting) = handshakes.admit(peer.ip()) else {
            if let Some(busy) = busy {
                let _ = stream.try_write(&[busy]);
            }
            continue;
        };
        let _ = stream.set_nodelay(true);
        handle.count_connection(transport);
        handshake(stream, peer, greeting);
    }
}

/// Read the hello (a fixed-size stack buffer, under `timeout`) and answer
/// it: with the token, a slot of the served pool (`admit`) and the stream
/// back; else why not (the peer has been told — refused, or busy when no
/// slot could be made — and the stream is dropped).
async fn handshake<T>(
    mut stream: TcpStream,
    token: &Token,
    timeout: Duration,
    admit: impl FnOnce() -> Result<T, super::bounds::Over>,
) -> Result<(TcpStream, T), &'static str> {
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
    let Ok(slot) = admit() else {
        let _ = tokio::time::timeout(timeout, stream.write_all(&[auth::ANSWER_BUSY])).await;
        return Err("too many control connections busy; answered busy");
    };
    match tokio::time::timeout(timeout, stream.write_all(&[auth::ANSWER_ACCEPTED])).await {
        Ok(Ok(())) => Ok((stream, slot)),
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
        .map_err(|error| {
            // Reset inside the handshake: closed with our hello unread (the
            // handshake pool made room for newer connections). Nothing was
            // sent past the hello: say so, so the caller may dial again.
            if error.kind() == io::ErrorKind::ConnectionReset {
                connect_err(io::Error::new(
                    io::ErrorKind::ConnectionAborted,
                    "the server closed the connection during the handshake",
                ))
            } else {
                connect_err(error)
            }
        })?;
    match (n, answer) {
        (1, auth::ANSWER_ACCEPTED) => Ok(stream),
        (1, auth::ANSWER_REFUSED) => Err(ClientError::Auth {
            endpoint: endpoint(),
        }),
        (1, auth::ANSWER_BUSY) => Err(ClientError::Busy {
            endpoint: endpoint(),
        }),
        // Unanswered: the handshake pool made room for newer connections
        // (nothing was sent past the hello), or the hello timed out.
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
