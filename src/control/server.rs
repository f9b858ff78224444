//! The control plane's server: serves a [`SupervisorHandle`] as the
//! [`Control`] service over a Unix socket (`spec/control.md`).
//!
//! Invariants, and the tests that check them (all in `tests/control.rs`
//! unless named otherwise):
//! - The socket file is mode 0600 from the moment it has its name: it is
//!   bound under a temporary name in the same (0700) directory, given mode
//!   0600, and renamed over the final path — no window in which the final
//!   path is connectable with a looser mode, and no process-wide `umask`
//!   (which would race with every other thread creating files). The rename
//!   also replaces a stale socket left by a crashed daemon.
//!   `the_socket_is_0600_and_the_control_dir_0700`.
//! - A peer whose uid is neither this process's effective uid nor root is
//!   closed before a byte of it is read. `another_uid_is_refused` (runs
//!   only as root with `setpriv`).
//! - Bounds: at most [`ServerLimits::max_connections`] connections at once,
//!   and [`ServerLimits::max_connections_per_peer`] from one uid (more are
//!   closed at accept), at most
//!   [`ServerLimits::max_in_flight_per_connection`] requests in flight on
//!   one (more are answered with tarpc's throttle error), frames of at most
//!   1 MiB (a longer one closes that connection), connections idle for
//!   [`ServerLimits::idle_timeout`] closed, deadlines clamped to
//!   [`codec::MAX_DEADLINE`], `watch` waits capped at 60 s.
//!   `in_flight_and_connection_bounds_hold`, `an_idle_connection_is_closed`, `many_clients_are_all_answered`,
//!   `a_frame_over_the_limit_closes_that_connection_only`,
//!   `random_frames_do_not_hurt_the_daemon`,
//!   `a_deadline_of_u64_max_seconds_is_still_answered`.
//! - Every method answers what the handle answers; a refusal keeps its
//!   typed reason. `every_method_end_to_end`, `a_refusal_arrives_typed`.

use std::fs;
use std::io;
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::Poll;
use std::time::Duration;

use futures::StreamExt;
use steadfast_actors::config::parse_value;
use steadfast_actors::lifecycle::{CommandError, Hold};
use steadfast_protocol::control::{
    Control, ControlAnswer, ControlRefusal, MAX_JOURNAL_ATTEMPTS, ReinitPrepared, WireJournal,
    WireSnapshot, clamp_watch_timeout,
};
use steadfast_protocol::lifecycle::ExitIntent;
use steadfast_protocol::snapshot::{ConfigView, Snapshot};
use tarpc::context::Context;
use tarpc::server::{BaseChannel, Channel};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::UnixListener;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::bounds::Bounds;
use super::codec::{self, Bincode1};
use crate::supervisor::SupervisorHandle;

/// The mode of the control socket.
pub const SOCKET_MODE: u32 = 0o600;

/// Why the control server could not start.
#[derive(Debug, thiserror::Error)]
pub enum ControlError {
    /// The socket could not be bound, given its mode or put in place.
    #[error("the control socket {path}: {source}")]
    Io {
        /// The path involved.
        path: PathBuf,
        /// What failed.
        #[source]
        source: io::Error,
    },
    /// Something other than a socket sits where the socket goes; it is left
    /// alone.
    #[error("{0} exists and is not a socket; not replacing it")]
    NotASocket(PathBuf),
    /// The path has no parent directory or no file name.
    #[error("{0} is not a usable socket path")]
    BadPath(PathBuf),
    /// The TCP address could not be bound.
    #[error("the control port {addr}: {source}")]
    Bind {
        /// The address asked for.
        addr: std::net::SocketAddr,
        /// What failed.
        #[source]
        source: io::Error,
    },
    /// The TCP transport's token could not be read (or created).
    #[error(transparent)]
    Token(#[from] super::auth::TokenError),
}

fn io_err(path: &Path) -> impl FnOnce(io::Error) -> ControlError + '_ {
    move |source| ControlError::Io {
        path: path.to_owned(),
        source,
    }
}

/// The server's bounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServerLimits {
    /// Connections served at once; more are closed as they are accepted.
    pub max_connections: usize,
    /// Connections served at once from one peer (one uid on the Unix
    /// socket, one IP address over TCP); more are closed as they are
    /// accepted.
    pub max_connections_per_peer: usize,
    /// Requests in flight on one connection; more are answered with
    /// tarpc's throttle error.
    pub max_in_flight_per_connection: usize,
    /// A connection on which no byte moved either way for this long is
    /// closed. Keep it above the longest call a client waits on (a `watch`
    /// waits at most 60 s).
    pub idle_timeout: Duration,
    /// TCP only: how long a new connection has to send its whole hello
    /// (`auth::HELLO_LEN` bytes) before it is closed.
    pub handshake_timeout: Duration,
}

impl Default for ServerLimits {
    fn default() -> Self {
        Self {
            max_connections: 64,
            max_connections_per_peer: 32,
            max_in_flight_per_connection: 32,
            idle_timeout: Duration::from_secs(600),
            handshake_timeout: Duration::from_secs(5),
        }
    }
}

/// A running control server. Dropping it stops accepting, closes every
/// connection and removes the socket file (if it is still the one this
/// server bound).
#[derive(Debug)]
pub struct ServerGuard {
    /// Where the socket is.
    path: PathBuf,
    /// The bound socket's (device, inode), so drop removes only our file.
    identity: (u64, u64),
    /// Cancels the accept loop and every connection.
    cancel: CancellationToken,
    /// The accept loop.
    task: JoinHandle<()>,
}

impl ServerGuard {
    /// The socket's path.
    #[must_use]
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for ServerGuard {
    fn drop(&mut self) {
        self.cancel.cancel();
        self.task.abort();
        if let Ok(meta) = fs::symlink_metadata(&self.path)
            && (meta.dev(), meta.ino()) == self.identity
        {
            let _ = fs::remove_file(&self.path);
        }
    }
}

/// Serve `handle` on the Unix socket at `path` with the default
/// [`ServerLimits`]. Call inside a tokio runtime.
///
/// `path`'s directory should be private (the control directory is 0700);
/// a stale socket at `path` is replaced, so call this only while holding
/// the data directory's lock (a [`crate::Supervisor`] does).
///
/// # Errors
/// [`ControlError`] when the socket cannot be bound or put in place.
pub fn serve_unix(
    handle: SupervisorHandle,
    path: impl AsRef<Path>,
) -> Result<ServerGuard, ControlError> {
    serve_unix_with(handle, path, ServerLimits::default())
}

/// [`serve_unix`] with explicit limits.
///
/// # Errors
/// As [`serve_unix`].
pub fn serve_unix_with(
    handle: SupervisorHandle,
    path: impl AsRef<Path>,
    limits: ServerLimits,
) -> Result<ServerGuard, ControlError> {
    let path = path.as_ref().to_owned();
    let (Some(dir), Some(name)) = (path.parent(), path.file_name()) else {
        return Err(ControlError::BadPath(path));
    };
    match fs::symlink_metadata(&path) {
        Ok(meta) if !meta.file_type().is_socket() => {
            return Err(ControlError::NotASocket(path));
        }
        Ok(_) | Err(_) => {}
    }
    let mut tmp_name = std::ffi::OsString::from(".");
    tmp_name.push(name);
    tmp_name.push(format!(".{}.tmp", std::process::id()));
    let tmp = dir.join(tmp_name);
    match fs::remove_file(&tmp) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(io_err(&tmp)(e)),
        _ => {}
    }
    let listener = std::os::unix::net::UnixListener::bind(&tmp).map_err(io_err(&tmp))?;
    let placed = fs::set_permissions(&tmp, fs::Permissions::from_mode(SOCKET_MODE))
        .map_err(io_err(&tmp))
        .and_then(|()| fs::rename(&tmp, &path).map_err(io_err(&path)));
    if let Err(error) = placed {
        let _ = fs::remove_file(&tmp);
        return Err(error);
    }
    let meta = fs::symlink_metadata(&path).map_err(io_err(&path))?;
    listener.set_nonblocking(true).map_err(io_err(&path))?;
    let listener = UnixListener::from_std(listener).map_err(io_err(&path))?;
    let cancel = CancellationToken::new();
    let task = tokio::spawn(accept_loop(listener, handle, limits, cancel.clone()));
    tracing::info!(path = %path.display(), "the control socket is listening");
    Ok(ServerGuard {
        path,
        identity: (meta.dev(), meta.ino()),
        cancel,
        task,
    })
}

/// Whether a peer with `uid` may talk to this daemon.
fn peer_allowed(uid: u32) -> bool {
    uid == 0 || uid == rustix::process::geteuid().as_raw()
}

async fn accept_loop(
    listener: UnixListener,
    handle: SupervisorHandle,
    limits: ServerLimits,
    cancel: CancellationToken,
) {
    let bounds = Bounds::new(limits.max_connections, limits.max_connections_per_peer);
    loop {
        let accepted = tokio::select! {
            () = cancel.cancelled() => return,
            accepted = listener.accept() => accepted,
        };
        let stream = match accepted {
            Ok((stream, _)) => stream,
            Err(error) => {
                // Out of descriptors, mostly: wait a little rather than spin.
                tracing::warn!(%error, "control socket accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let uid = match stream.peer_cred() {
            Ok(cred) if peer_allowed(cred.uid()) => cred.uid(),
            Ok(cred) => {
                tracing::warn!(uid = cred.uid(), "control peer of another uid closed");
                continue;
            }
            Err(error) => {
                tracing::warn!(%error, "control peer without credentials closed");
                continue;
            }
        };
        let admission = match bounds.admit(uid) {
            Ok(admission) => admission,
            Err(over) => {
                tracing::warn!(
                    ?over,
                    uid,
                    "too many control connections; closing a new one"
                );
                continue;
            }
        };
        tokio::spawn(serve_admitted(
            stream,
            handle.clone(),
            limits,
            cancel.clone(),
            admission,
        ));
    }
}

/// Serve one admitted connection until it ends, goes idle for
/// [`ServerLimits::idle_timeout`] or the server stops; `admission` (its
/// slots in the connection bounds) is held until then. Both transports end
/// here: the Unix socket once the peer's uid is checked, TCP once the
/// token handshake succeeded.
pub(crate) async fn serve_admitted<S, A>(
    stream: S,
    handle: SupervisorHandle,
    limits: ServerLimits,
    cancel: CancellationToken,
    admission: A,
) where
    S: AsyncRead + AsyncWrite + Send + Unpin + 'static,
{
    let last_activity = Arc::new(AtomicU64::new(0));
    let epoch = Instant::now();
    let stream = Activity {
        inner: stream,
        epoch,
        last: Arc::clone(&last_activity),
    };
    let connection = serve_connection(stream, handle, limits);
    let idle = idle_watch(epoch, limits.idle_timeout, last_activity);
    tokio::select! {
        () = cancel.cancelled() => {}
        () = connection => {}
        () = idle => tracing::debug!("idle control connection closed"),
    }
    drop(admission);
}

/// Resolves once no byte has moved on the connection for `timeout`.
async fn idle_watch(epoch: Instant, timeout: Duration, last: Arc<AtomicU64>) {
    loop {
        let last_ms = last.load(Ordering::Relaxed);
        let idle_since = epoch + Duration::from_millis(last_ms);
        let deadline = idle_since + timeout;
        if Instant::now() >= deadline {
            return;
        }
        tokio::time::sleep_until(deadline).await;
    }
}

/// A stream that records when a byte last moved, in milliseconds since
/// `epoch` (shared with [`idle_watch`]).
struct Activity<S> {
    /// The connection.
    inner: S,
    /// When the connection was accepted.
    epoch: Instant,
    /// Milliseconds after `epoch` at which a byte last moved.
    last: Arc<AtomicU64>,
}

impl<S> Activity<S> {
    fn touch(&self) {
        let ms = u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.last.store(ms, Ordering::Relaxed);
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Activity<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        if buf.filled().len() > before {
            self.touch();
        }
        polled
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Activity<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write(cx, data);
        if matches!(polled, Poll::Ready(Ok(n)) if n > 0) {
            self.touch();
        }
        polled
    }

    fn poll_flush(
        mut self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(
        mut self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

async fn serve_connection<S>(stream: Activity<S>, handle: SupervisorHandle, limits: ServerLimits)
where
    S: AsyncRead + AsyncWrite + Send + Unpin + 'static,
{
    let transport = tarpc::serde_transport::new(codec::framed(stream), Bincode1::server());
    BaseChannel::with_defaults(transport)
        .max_concurrent_requests(limits.max_in_flight_per_connection)
        .execute(ControlService { handle }.serve())
        .for_each_concurrent(None, |answer| answer)
        .await;
}

/// The [`Control`] service over one supervisor.
#[derive(Clone)]
struct ControlService {
    handle: SupervisorHandle,
}

fn answer(result: Result<Snapshot, CommandError>) -> ControlAnswer {
    match result {
        Ok(snapshot) => Ok(WireSnapshot::from_snapshot(&snapshot)),
        Err(error) => Err(refusal(error)),
    }
}

fn refusal(error: CommandError) -> ControlRefusal {
    match error {
        CommandError::Refused(refused) => refused.into(),
        CommandError::Durability(error) => ControlRefusal::Durability(error),
        CommandError::Unavailable => ControlRefusal::Unavailable,
        CommandError::Invalid(error) => ControlRefusal::Invalid(error),
        CommandError::Failed(error) => ControlRefusal::Failed(error),
    }
}

impl Control for ControlService {
    async fn snapshot(self, _: Context) -> ControlAnswer {
        Ok(WireSnapshot::from_snapshot(&self.handle.snapshot()))
    }

    async fn watch(self, _: Context, after_version: u64, timeout_ms: u64) -> ControlAnswer {
        let mut snapshots = self.handle.watch();
        let newer = async {
            loop {
                if snapshots.borrow_and_update().version > after_version {
                    return;
                }
                if snapshots.changed().await.is_err() {
                    // The supervisor is gone: answer what it last published.
                    return;
                }
            }
        };
        let wait = Duration::from_millis(clamp_watch_timeout(timeout_ms));
        let _ = tokio::time::timeout(wait, newer).await;
        let snapshot = snapshots.borrow().clone();
        Ok(WireSnapshot::from_snapshot(&snapshot))
    }

    async fn start(self, _: Context) -> ControlAnswer {
        answer(self.handle.start().await)
    }

    async fn stop(self, _: Context, hold: bool) -> ControlAnswer {
        let hold = if hold {
            Hold::AcrossRelaunch
        } else {
            Hold::None
        };
        answer(self.handle.stop(hold).await)
    }

    async fn restart(self, _: Context) -> ControlAnswer {
        answer(self.handle.restart().await)
    }

    async fn retry(self, _: Context) -> ControlAnswer {
        answer(self.handle.retry().await)
    }

    async fn exit(self, _: Context, intent: ExitIntent) -> ControlAnswer {
        answer(self.handle.exit(intent).await)
    }

    async fn journal(self, _: Context, limit: u32) -> Result<WireJournal, ControlRefusal> {
        let limit = limit.min(MAX_JOURNAL_ATTEMPTS) as usize;
        self.handle
            .journal(limit)
            .await
            .map(|attempts| WireJournal::from_attempts(&attempts))
            .map_err(refusal)
    }

    async fn config_set(self, _: Context, leaf: String, value: String) -> ControlAnswer {
        answer(self.handle.config_set(&leaf, parse_value(&value)).await)
    }

    async fn config_unset(self, _: Context, leaf: String) -> ControlAnswer {
        answer(self.handle.config_unset(&leaf).await)
    }

    async fn config_show(
        self,
        _: Context,
        leaf: Option<String>,
    ) -> Result<ConfigView, ControlRefusal> {
        self.handle
            .config_show(leaf.as_deref())
            .await
            .map_err(refusal)
    }

    async fn reinit_prepare(self, _: Context) -> Result<ReinitPrepared, ControlRefusal> {
        self.handle
            .reinit_prepare()
            .await
            .map(|c| ReinitPrepared {
                token: c.token,
                epoch: c.epoch,
            })
            .map_err(refusal)
    }

    async fn reinit(self, _: Context, token: String) -> ControlAnswer {
        answer(self.handle.reinit(&token).await)
    }

    // -- Replacement (issue 7) --
    async fn replace(
        self,
        _: Context,
        request: steadfast_protocol::control::ReplaceRequest,
    ) -> steadfast_protocol::control::ReplaceAnswer {
        let budgets = steadfast_protocol::replacement::Budgets {
            setup: Duration::from_millis(request.setup_budget_ms),
            drain: request.drain_budget_ms.map(Duration::from_millis),
        };
        let report = crate::replace::replace_binary(
            &self.handle,
            request.binary.into(),
            request.mode,
            budgets,
        )
        .await
        .map_err(ControlRefusal::Replace)?;
        Ok(replace_status(&self.handle, Some(report)))
    }

    async fn replace_status(
        self,
        _: Context,
        after_seq: u64,
        timeout_ms: u64,
    ) -> steadfast_protocol::control::ReplaceAnswer {
        let mut reports = self.handle.replace_reports();
        let newer = async {
            loop {
                if reports
                    .borrow_and_update()
                    .as_ref()
                    .is_some_and(|r| r.seq > after_seq)
                {
                    return;
                }
                if reports.changed().await.is_err() {
                    return;
                }
            }
        };
        let wait = Duration::from_millis(clamp_watch_timeout(timeout_ms));
        let _ = tokio::time::timeout(wait, newer).await;
        let report = reports.borrow().clone();
        Ok(replace_status(&self.handle, report))
    }
}

/// Who answers, and `report`.
fn replace_status(
    handle: &SupervisorHandle,
    report: Option<steadfast_protocol::replacement::Report>,
) -> steadfast_protocol::control::ReplaceStatus {
    let snapshot = handle.snapshot();
    steadfast_protocol::control::ReplaceStatus {
        pid: snapshot.pid,
        identity: snapshot.identity,
        version: handle.version().map(str::to_owned),
        report,
    }
}
