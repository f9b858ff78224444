//! The control plane's server: serves a [`SupervisorHandle`] as the
//! control service over a Unix socket (`spec/control.md`): every request
//! goes to [`steadfast_protocol::control::dispatch`], which runs its
//! command's `Execute` impl (`control/execute/`).
//!
//! Invariants, and the tests that check them (all in `tests/it/control.rs`
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
//!   and [`ServerLimits::max_connections_per_peer`] from one uid. A full
//!   bound makes room before it refuses (`bounds`): a connection holding
//!   no request is evicted (the longest idle first; bytes of a frame not
//!   yet whole do not count), then one that is only long-polling
//!   (`watch`, `replace_status`); so an operator's short call always finds
//!   a slot while one is held by an idle, trickling or long-polling
//!   connection. A frame not whole within [`ServerLimits::frame_timeout`]
//!   of its first byte closes its connection.
//!   `tests/it/control_hostile.rs::trickling_connections_do_not_lock_the_operator_out`,
//!   `tests/it/control_hostile.rs::trickling_tcp_connections_do_not_lock_the_operator_out`.
//!   Only a
//!   bound full of connections with other requests in flight refuses, and
//!   then with a typed answer: every accepted connection first gets one
//!   byte from the server, `0` (served) or `2` (busy, then closed), before
//!   the client sends anything — so a busy answer proves nothing was
//!   executed and the client retries, commands included.
//!   `tests/it/control_hostile.rs::idle_connections_do_not_lock_the_operator_out`,
//!   `tests/it/control_hostile.rs::watchers_do_not_make_probe_live_fail`,
//!   `tests/it/control_hostile.rs::a_burst_of_1000_calls_is_all_answered`,
//!   `tests/it/control.rs::in_flight_and_connection_bounds_hold`.
//! - A connection whose peer closed (the read side ended) is closed at once
//!   with its requests in flight, so a killed `steadfastctl watch` gives its
//!   slot back without waiting out its long-poll.
//!   `tests/it/control_hostile.rs::a_killed_watcher_gives_its_slot_back_at_once`.
//! - A request whose deadline passed before it would run (the daemon was
//!   stopped, the frame waited in the socket) is answered with an error
//!   that says why, and never executed: the check is the last thing before
//!   the service method (`codec` carries the time left, less what the
//!   frame spent waiting).
//!   `tests/it/control_hostile.rs::an_abandoned_exit_of_a_connected_client_is_dropped`,
//!   `tests/it/control_hostile.rs::an_abandoned_exit_and_stop_from_steadfastctl_are_not_run`.
//! - The socket is bound through the opened control directory (opened
//!   without following a link)
//!   (`/proc/self/fd/<fd>/…`, so a path over `sun_path`'s 108 bytes still
//!   binds, and a rename of the directory cannot redirect the bind); what
//!   sits at the path is looked at without following a link: a socket
//!   (stale, left by a crashed daemon: replaced, we hold the data-dir lock)
//!   or nothing, else [`ControlError::NotASocket`] naming the path, what is
//!   there and the fix.
//!   `tests/it/control_hostile.rs::a_daemon_refuses_to_run_without_its_control_socket`,
//!   `tests/it/control_hostile.rs::a_socket_path_over_108_bytes_is_served`.
//! - A socket file removed or replaced while served (`rm control.sock`, a
//!   file or another socket put at its path) is noticed within
//!   [`SOCKET_CHECK`] (the path's `(st_dev, st_ino)`, looked at without
//!   following a link through the opened directory, against the file this
//!   server placed) and bound anew the same way as at start (temp name,
//!   0600, rename), the status record naming the new file; logged both
//!   times. If it cannot be (something other than a socket sits there, the
//!   directory is gone), [`ServerGuard::lost`] says why: the daemon
//!   (`daemon::run_with`) exits for a relaunch, as it would not have
//!   started. Not while a replacement runs (its candidate may hold the
//!   path) or after one handed the daemon over.
//!   `tests/it/daemon.rs::a_removed_or_replaced_control_socket_is_bound_again`
//!   (a removed file, another socket, then a regular file: exit 75).
//! - At most
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
//! - Each connection answers lean snapshots (the current attempt only),
//!   stamped with the daemon's `now`, and remembers the last one it sent:
//!   `watch` answers the fields that changed since it (`WireChanges`).
//!   Checked by `tests/it/operator_view.rs::watch_answers_only_what_changed`.
//!   `snapshot` reads the latest published snapshot (the handle's watch
//!   channel, no round trip to the Lifecycle actor) and clones only what
//!   the lean form keeps.
//! - Every served connection runs inside `RepollOnSelfWake` (`repoll`):
//!   tarpc's channel wakes its own task as it answers, and is polled again
//!   in place rather than rescheduled as a yield (which woke another worker
//!   thread per call).

use std::fs;
use std::io;
use std::os::fd::OwnedFd;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use futures::StreamExt;
use steadfast_actors::accept::AcceptBackoff;
use steadfast_protocol::command::Role;
use steadfast_protocol::control::{ControlRequest, ControlResponse, dispatch, forbidden};
use tarpc::ServerError;
use tarpc::context::Context;
use tarpc::server::{BaseChannel, Channel, Serve};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::UnixListener;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::auth;
use super::bounds::{Activity, Evict, Pool, Slot};
use super::codec::{self, ArrivalNotes, Bincode1};
pub use super::error::ControlError;
use super::error::io_err;
use super::execute::ControlService;
use super::limits::through_dir;
pub use super::limits::{MAX_SOCKET_PATH, ServerLimits};
use super::repoll::RepollOnSelfWake;
use crate::embedding::SupervisorHandle;

/// The mode of the control socket.
pub const SOCKET_MODE: u32 = 0o600;

/// A running control server. Dropping it stops accepting, closes every
/// connection, unnames the socket in the status record and removes the
/// socket file (if it is still the one this server bound).
#[derive(Debug)]
pub struct ServerGuard {
    /// Where the socket is.
    path: PathBuf,
    /// The bound socket's (device, inode), so drop removes only our file,
    /// and unnames only our socket in the status record.
    /// (Shared with the accept loop, which binds the path again when a
    /// failed replacement's candidate took it: `Rebind`.)
    identity: Arc<std::sync::Mutex<(u64, u64)>>,
    /// The supervisor served, whose status record names this socket while
    /// it is served (`StatusRecord::set_socket`): a record must never name
    /// a socket file its writer no longer serves, whose inode a later
    /// socket may get.
    handle: SupervisorHandle,
    /// Cancels the accept loop and every connection.
    cancel: CancellationToken,
    /// The accept loop.
    task: JoinHandle<()>,
    /// The served connections' slots.
    pool: Arc<Pool<u32>>,
    /// Ends the socket's watch (`watch_socket`) and any binding anew, at
    /// the withdrawal: a socket removed on purpose is not bound again.
    watching: CancellationToken,
    /// Why the socket could not be bound again, if it could not.
    lost: tokio::sync::watch::Receiver<Option<String>>,
}

/// How often a served control socket's path is looked at: a socket file
/// removed or replaced is bound again within about this long.
pub const SOCKET_CHECK: Duration = Duration::from_secs(1);

impl ServerGuard {
    /// Why the socket, removed or replaced at its path, could not be bound
    /// again (`Some`), while so: a client can no longer reach this server.
    /// `daemon::run_with` exits for a relaunch on it.
    #[must_use]
    pub fn lost(&self) -> tokio::sync::watch::Receiver<Option<String>> {
        self.lost.clone()
    }

    /// The socket's path.
    #[must_use]
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// How many connections are being served now.
    #[must_use]
    pub fn open_connections(&self) -> usize {
        self.pool.len()
    }

    /// Withdraw the socket (below), stop accepting, let the connections
    /// already served finish for up to `grace` (a client whose command
    /// made the daemon end — `exit` — reads its answer and closes), then
    /// close the rest. Dropping the guard instead closes every connection
    /// at once: an answer still being written is lost.
    pub async fn shutdown(mut self, grace: Duration) {
        // First, so no reader trusts the record for a socket that accepts
        // no more (`steadfastctl status` would show a daemon `probe live`
        // finds gone, for as long as the grace runs).
        self.withdraw();
        super::bounds::stop_serving(&mut self.task, &self.pool, &self.cancel, grace).await;
    }

    /// The status record names the socket no more, and the socket file is
    /// removed if it is still ours. Again at drop: the accept loop may
    /// have bound the path anew (`Rebind`) in between.
    fn withdraw(&self) {
        self.watching.cancel();
        let identity = *self
            .identity
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        self.handle.clear_status_socket(identity);
        if let Ok(meta) = fs::symlink_metadata(&self.path)
            && (meta.dev(), meta.ino()) == identity
        {
            let _ = fs::remove_file(&self.path);
        }
    }
}

impl Drop for ServerGuard {
    fn drop(&mut self) {
        self.cancel.cancel();
        self.task.abort();
        self.withdraw();
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
    let dir = if dir.as_os_str().is_empty() {
        Path::new(".")
    } else {
        dir
    };
    let dir_fd = rustix::fs::open(
        dir,
        rustix::fs::OFlags::DIRECTORY
            | rustix::fs::OFlags::NOFOLLOW
            | rustix::fs::OFlags::CLOEXEC
            | rustix::fs::OFlags::RDONLY,
        rustix::fs::Mode::empty(),
    )
    .map_err(|e| io_err(dir)(e.into()))?;
    let (listener, identity) = bind_in_place(&dir_fd, dir, name, &path)?;
    // Of the path, just renamed into place (a socket descriptor's `fstat`
    // names the socket, not its file): the record now vouches for this file.
    handle.set_status_socket(identity);
    let cancel = CancellationToken::new();
    let pool = Arc::new(Pool::new(
        limits.max_connections,
        limits.max_connections_per_peer,
        Evict::Idle(limits.evict_grace),
    ));
    let identity = Arc::new(std::sync::Mutex::new(identity));
    let (nudge, nudges) = tokio::sync::watch::channel(0);
    let (lost_tx, lost) = tokio::sync::watch::channel(None);
    let watching = CancellationToken::new();
    let watch_dir = dir_fd.try_clone().map_err(io_err(dir))?;
    let rebind = Rebind {
        dir_fd,
        dir: dir.to_owned(),
        name: name.to_owned(),
        path: path.clone(),
        identity: Arc::clone(&identity),
        reclaims: nudges,
        lost: lost_tx,
        watching: watching.clone(),
    };
    tokio::spawn(watch_socket(
        watch_dir,
        name.to_owned(),
        path.clone(),
        Arc::clone(&identity),
        handle.clone(),
        nudge,
        watching.clone(),
    ));
    let task = tokio::spawn(accept_loop(
        listener,
        handle.clone(),
        limits,
        cancel.clone(),
        Arc::clone(&pool),
        rebind,
    ));
    tracing::info!(path = %path.display(), "the control socket is listening");
    Ok(ServerGuard {
        path,
        identity,
        handle,
        cancel,
        task,
        pool,
        watching,
        lost,
    })
}

/// The served socket's watch (see the module doc): every [`SOCKET_CHECK`],
/// whether `name` in `dir_fd` is still the file this server placed
/// (`identity`); if not, the accept loop is nudged to bind it anew
/// (`Rebind::take_back`), as it is when a replacement rolled back (those
/// nudges are passed on from the handle). Ends at the withdrawal.
async fn watch_socket(
    dir_fd: OwnedFd,
    name: std::ffi::OsString,
    path: PathBuf,
    identity: Arc<std::sync::Mutex<(u64, u64)>>,
    handle: SupervisorHandle,
    nudge: tokio::sync::watch::Sender<u64>,
    watching: CancellationToken,
) {
    let side = handle.replace_side();
    let mut reclaims = side.reclaim.subscribe();
    let mut reclaims_open = true;
    let mut tick = tokio::time::interval(SOCKET_CHECK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            () = watching.cancelled() => return,
            changed = reclaims.changed(), if reclaims_open => match changed {
                Ok(()) => nudge.send_modify(|n| *n += 1),
                Err(_) => reclaims_open = false,
            },
            _ = tick.tick() => {
                // A replacement's candidate may hold the path; a roll-back
                // nudges above, a hand-over ends this daemon.
                let replacing = side.reports.borrow().as_ref().is_some_and(|r| r.ended.is_none());
                if replacing || *side.handed_over.borrow() {
                    continue;
                }
                let ours = *identity.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                let named = rustix::fs::statat(&dir_fd, &name, rustix::fs::AtFlags::SYMLINK_NOFOLLOW)
                    .ok()
                    .map(|stat| (stat.st_dev, stat.st_ino));
                if named != Some(ours) {
                    if nudge.receiver_count() == 0 {
                        // The accept loop is gone: nothing to bind for.
                        return;
                    }
                    let what = if named.is_none() { "removed" } else { "replaced" };
                    tracing::warn!(path = %path.display(), "the control socket was {what}; binding it again");
                    nudge.send_modify(|n| *n += 1);
                }
            }
        }
    }
}

/// Bind a Unix socket at `name` in the directory `dir_fd` (`dir` on the
/// path, `path` the whole): under a temp name, made 0600, then renamed
/// over `name` (a stale socket is replaced; anything but a socket there is
/// refused). The listener (non-blocking, on this runtime) and the placed
/// file's `(st_dev, st_ino)`.
fn bind_in_place(
    dir_fd: &OwnedFd,
    dir: &Path,
    name: &std::ffi::OsStr,
    path: &Path,
) -> Result<(UnixListener, (u64, u64)), ControlError> {
    let path = path.to_owned();
    match rustix::fs::statat(dir_fd, name, rustix::fs::AtFlags::SYMLINK_NOFOLLOW) {
        Ok(stat) => {
            let kind = rustix::fs::FileType::from_raw_mode(stat.st_mode);
            if kind != rustix::fs::FileType::Socket {
                return Err(ControlError::NotASocket {
                    path,
                    what: describe(kind),
                });
            }
        }
        Err(rustix::io::Errno::NOENT) => {}
        Err(e) => return Err(io_err(&path)(e.into())),
    }
    let mut tmp_name = std::ffi::OsString::from(".");
    tmp_name.push(name);
    tmp_name.push(format!(".{}.tmp", std::process::id()));
    let tmp = dir.join(&tmp_name);
    match rustix::fs::unlinkat(dir_fd, &tmp_name, rustix::fs::AtFlags::empty()) {
        Ok(()) | Err(rustix::io::Errno::NOENT) => {}
        Err(e) => return Err(io_err(&tmp)(e.into())),
    }
    let bind_path = through_dir(dir_fd, &tmp_name, &tmp)?;
    let listener = std::os::unix::net::UnixListener::bind(&bind_path).map_err(io_err(&tmp))?;
    let placed = rustix::fs::chmodat(
        dir_fd,
        &tmp_name,
        rustix::fs::Mode::from_raw_mode(SOCKET_MODE),
        rustix::fs::AtFlags::empty(),
    )
    .map_err(|e| io_err(&tmp)(e.into()))
    .and_then(|()| {
        rustix::fs::renameat(dir_fd, &tmp_name, dir_fd, name).map_err(|e| io_err(&path)(e.into()))
    });
    if let Err(error) = placed {
        let _ = rustix::fs::unlinkat(dir_fd, &tmp_name, rustix::fs::AtFlags::empty());
        return Err(error);
    }
    let stat = rustix::fs::statat(dir_fd, name, rustix::fs::AtFlags::SYMLINK_NOFOLLOW)
        .map_err(|e| io_err(&path)(e.into()))?;
    listener.set_nonblocking(true).map_err(io_err(&path))?;
    let listener = UnixListener::from_std(listener).map_err(io_err(&path))?;
    Ok((listener, (stat.st_dev, stat.st_ino)))
}

/// What the accept loop needs to bind its path again: a failed
/// replacement's candidate may have bound its own socket there (and
/// removed it as it stopped), or someone removed or replaced the file
/// (`watch_socket`), which leaves this server listening on a socket no
/// name reaches.
struct Rebind {
    dir_fd: OwnedFd,
    dir: PathBuf,
    name: std::ffi::OsString,
    path: PathBuf,
    /// The file this server's socket is, shared with its guard.
    identity: Arc<std::sync::Mutex<(u64, u64)>>,
    /// Bumped by a replacement's roll-back, or by `watch_socket` when the
    /// path no longer names this server's socket.
    reclaims: tokio::sync::watch::Receiver<u64>,
    /// Why the path could not be bound again (`None` once it was).
    lost: tokio::sync::watch::Sender<Option<String>>,
    /// Cancelled at the withdrawal: the socket is not bound again then.
    watching: CancellationToken,
}

impl Rebind {
    /// The listener to serve from now on: `None` when the path still names
    /// this server's socket (nothing to do), or when it cannot be bound
    /// again (logged; the old listener goes on, unnamed).
    fn take_back(&self, handle: &SupervisorHandle) -> Option<UnixListener> {
        if self.watching.is_cancelled() {
            return None;
        }
        let current = *self
            .identity
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let named = rustix::fs::statat(
            &self.dir_fd,
            &self.name,
            rustix::fs::AtFlags::SYMLINK_NOFOLLOW,
        )
        .ok()
        .map(|stat| (stat.st_dev, stat.st_ino));
        if named == Some(current) {
            handle.set_status_socket(current);
            return None;
        }
        match bind_in_place(&self.dir_fd, &self.dir, &self.name, &self.path) {
            Ok((listener, identity)) => {
                *self
                    .identity
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner) = identity;
                handle.set_status_socket(identity);
                tracing::info!(path = %self.path.display(), "the control socket is listening again");
                self.lost.send_replace(None);
                Some(listener)
            }
            Err(error) => {
                let first = self.lost.borrow().is_none();
                if first {
                    tracing::error!(path = %self.path.display(), %error, "the control socket could not be bound again");
                }
                self.lost.send_replace(Some(error.to_string()));
                None
            }
        }
    }
}

/// What a file type is, in words.
const fn describe(kind: rustix::fs::FileType) -> &'static str {
    match kind {
        rustix::fs::FileType::RegularFile => "a regular file",
        rustix::fs::FileType::Directory => "a directory",
        rustix::fs::FileType::Symlink => "a symbolic link",
        rustix::fs::FileType::Fifo => "a fifo",
        rustix::fs::FileType::CharacterDevice => "a character device",
        rustix::fs::FileType::BlockDevice => "a block device",
        rustix::fs::FileType::Socket => "a socket",
        _ => "a file of an unknown type",
    }
}

/// Whether a peer with `uid` may talk to this daemon.
fn peer_allowed(uid: u32) -> bool {
    uid == 0 || uid == rustix::process::geteuid().as_raw()
}

async fn accept_loop(
    mut listener: UnixListener,
    handle: SupervisorHandle,
    limits: ServerLimits,
    cancel: CancellationToken,
    pool: Arc<Pool<u32>>,
    mut rebind: Rebind,
) {
    let mut reclaims_open = true;
    let mut backoff = AcceptBackoff::new("control socket");
    loop {
        let accepted = tokio::select! {
            () = cancel.cancelled() => return,
            changed = rebind.reclaims.changed(), if reclaims_open => {
                match changed {
                    Ok(()) => {
                        if let Some(again) = rebind.take_back(&handle) {
                            listener = again;
                        }
                    }
                    Err(_) => reclaims_open = false,
                }
                continue;
            }
            accepted = listener.accept() => accepted,
        };
        let mut stream = match accepted {
            Ok((stream, _)) => {
                backoff.accepted();
                stream
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
        let slot = match pool.admit(uid) {
            Ok(slot) => slot,
            Err(over) => {
                tracing::warn!(
                    ?over,
                    uid,
                    "too many control connections busy; answering busy"
                );
                // One byte into an empty socket buffer never blocks.
                let _ = stream.try_write(&[auth::ANSWER_BUSY]);
                continue;
            }
        };
        handle.count_connection("unix");
        let handle = handle.clone();
        let cancel = cancel.clone();
        tokio::spawn(async move {
            let greeted = tokio::time::timeout(
                limits.handshake_timeout,
                stream.write_all(&[auth::ANSWER_ACCEPTED]),
            )
            .await;
            if matches!(greeted, Ok(Ok(()))) {
                serve_admitted(stream, handle, limits, cancel, slot, Role::Operate).await;
            }
        });
    }
}

/// Serve one admitted connection until it ends, its peer closes, it goes
/// idle for [`ServerLimits::idle_timeout`], a frame of it is not whole
/// within [`ServerLimits::frame_timeout`] of its first byte, it is evicted
/// or the server stops; `slot` (its place in the connection bounds) is
/// held until then.
/// Both transports end here: the Unix socket once the peer's uid is
/// checked, TCP once the token handshake succeeded.
pub(crate) async fn serve_admitted<S, K>(
    stream: S,
    handle: SupervisorHandle,
    limits: ServerLimits,
    cancel: CancellationToken,
    slot: Slot<K>,
    role: Role,
) where
    S: AsyncRead + AsyncWrite + Send + Unpin + 'static,
    K: std::hash::Hash + Eq,
{
    let activity = slot.activity();
    let peer_closed = CancellationToken::new();
    let stream = Watched {
        inner: stream,
        activity: Arc::clone(&activity),
        peer_closed: peer_closed.clone(),
        frame: FrameProgress::default(),
    };
    let evicted = slot.evicted();
    let connection = serve_connection(stream, handle, limits, Arc::clone(&activity), role);
    let idle = idle_watch(limits.idle_timeout, Arc::clone(&activity));
    let trickle = frame_watch(limits.frame_timeout, activity);
    // tarpc's channel wakes itself as it answers: polled again in place
    // rather than rescheduled as a yield that wakes another worker.
    RepollOnSelfWake::new(async {
        tokio::select! {
            // In this order: a stopped server answers nothing more, even a
            // call that arrived in the same wake as the stop (an unbiased
            // select served one now and then: a dropped `ServerGuard` still
            // answered the next call on a kept connection).
            biased;
            () = cancel.cancelled() => {}
            () = connection => {}
            () = peer_closed.cancelled() => tracing::debug!("control peer closed; its calls dropped"),
            () = evicted.cancelled() => tracing::debug!("control connection evicted to make room"),
            () = idle => tracing::debug!("idle control connection closed"),
            () = trickle => tracing::debug!("a control frame was not whole within the frame deadline; connection closed"),
        }
    })
    .await;
    drop(slot);
}

/// Resolves once a frame has been partly received for `timeout` (from its
/// first byte).
async fn frame_watch(timeout: Duration, activity: Arc<Activity>) {
    loop {
        let Some(since) = activity.frame_since() else {
            activity.frame_began().await;
            continue;
        };
        if Instant::now() >= since + timeout {
            return;
        }
        tokio::time::sleep_until(since + timeout).await;
    }
}

/// Where the connection is in its frames (a 4-byte big-endian length, then
/// that many bytes), as [`Watched`] reads them.
#[derive(Default)]
struct FrameProgress {
    /// Bytes of the length read so far (0 to 3).
    head_len: usize,
    /// The length's bytes read so far.
    head: [u8; 4],
    /// Bytes of the body still to come.
    body_left: u64,
    /// A frame is partly received.
    in_frame: bool,
}

impl FrameProgress {
    /// Account for `bytes`, read in order, in `activity`: a frame begins
    /// with its first byte and ends with its last.
    fn read(&mut self, mut bytes: &[u8], activity: &Activity) {
        while !bytes.is_empty() {
            if !self.in_frame {
                self.in_frame = true;
                activity.frame_begins();
            }
            if self.head_len < 4 {
                let take = (4 - self.head_len).min(bytes.len());
                self.head[self.head_len..self.head_len + take].copy_from_slice(&bytes[..take]);
                self.head_len += take;
                bytes = &bytes[take..];
                if self.head_len == 4 {
                    self.body_left = u64::from(u32::from_be_bytes(self.head));
                }
            } else {
                let take = usize::try_from(self.body_left)
                    .unwrap_or(usize::MAX)
                    .min(bytes.len());
                self.body_left -= take as u64;
                bytes = &bytes[take..];
            }
            if self.head_len == 4 && self.body_left == 0 {
                self.head_len = 0;
                self.in_frame = false;
                activity.frame_ends();
            }
        }
    }
}

/// Resolves once the connection has held nothing for `timeout`: no
/// request in flight, none started or answered (bytes do not count).
async fn idle_watch(timeout: Duration, activity: Arc<Activity>) {
    loop {
        let deadline = activity.last() + timeout;
        if Instant::now() < deadline {
            tokio::time::sleep_until(deadline).await;
        } else if activity.in_flight() {
            // Its request's end counts as activity: look again later.
            tokio::time::sleep(timeout / 4).await;
        } else {
            return;
        }
    }
}

/// A stream that follows the frames read (a frame's first and last byte,
/// in the connection's [`Activity`], for the frame deadline) and says when
/// the peer closed its side.
struct Watched<S> {
    /// The connection.
    inner: S,
    /// What the pool sees of it.
    activity: Arc<Activity>,
    /// Cancelled when a read found the end of the stream.
    peer_closed: CancellationToken,
    /// Where the peer is in its frames.
    frame: FrameProgress,
}

impl<S: AsyncRead + Unpin> AsyncRead for Watched<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let room = buf.remaining() > 0;
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        if buf.filled().len() > before {
            let this = &mut *self;
            this.frame.read(&buf.filled()[before..], &this.activity);
        } else if room && matches!(polled, Poll::Ready(Ok(()))) {
            self.peer_closed.cancel();
        } else if let Poll::Ready(Err(error)) = &polled
            && matches!(
                error.kind(),
                io::ErrorKind::UnexpectedEof | io::ErrorKind::ConnectionReset
            )
        {
            // A TLS peer that closed without `close_notify` (a killed
            // `steadfastctl`), or one that closed with bytes of ours unread
            // (a Unix peer is then told `ECONNRESET`: a client that closes
            // with the greeting unread): an end like any other.
            // Frames are length-delimited, so a cut one is still seen as cut.
            self.peer_closed.cancel();
            return Poll::Ready(Ok(()));
        }
        polled
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Watched<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, data)
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

async fn serve_connection<S>(
    stream: Watched<S>,
    handle: SupervisorHandle,
    limits: ServerLimits,
    activity: Arc<Activity>,
    role: Role,
) where
    S: AsyncRead + AsyncWrite + Send + Unpin + 'static,
{
    let notes = Arc::new(ArrivalNotes::default());
    let transport = tarpc::serde_transport::new(
        codec::framed(stream),
        Bincode1::server_noting(Arc::clone(&notes)),
    );
    let service = ControlService::new(handle);
    let serve = Guarded {
        inner: tarpc::server::serve(move |_: Context, request| async move {
            Ok(dispatch(service, request).await)
        }),
        activity,
        role,
        notes,
    };
    BaseChannel::with_defaults(transport)
        .max_concurrent_requests(limits.max_in_flight_per_connection)
        .execute(serve)
        .for_each_concurrent(None, |answer| answer)
        .await;
}

/// The service as one connection serves it: counts its requests in flight
/// for the pool (long-polls apart), answers a method its peer's role does
/// not permit with `CommandError::Forbidden` (never running it), and drops
/// a request whose deadline has passed — the last check before the service
/// method runs it.
#[derive(Clone)]
struct Guarded<S> {
    /// The generated service.
    inner: S,
    /// The connection's activity in the pool.
    activity: Arc<Activity>,
    /// What the peer may do (`Operate` on the Unix socket and plain TCP).
    role: Role,
    /// Why requests of this connection arrived with no time left.
    notes: Arc<ArrivalNotes>,
}

impl<S> Serve for Guarded<S>
where
    S: Serve<Req = ControlRequest, Resp = ControlResponse>,
{
    type Req = ControlRequest;
    type Resp = S::Resp;

    async fn serve(self, cx: Context, request: ControlRequest) -> Result<S::Resp, ServerError> {
        let _in_flight = self.activity.request(request.is_long_poll());
        if let Some(refusal) = forbidden(&request, self.role) {
            tracing::warn!(role = %self.role, "a control request its peer's role does not permit; refused");
            return Ok(refusal);
        }
        if std::time::Instant::now() >= cx.deadline {
            let why = self
                .notes
                .take()
                .unwrap_or_else(|| "it waited in the daemon past the time it had left".to_owned());
            tracing::warn!(
                why,
                "a control request's deadline passed before it ran; not executed"
            );
            return Err(ServerError::new(
                io::ErrorKind::TimedOut,
                format!(
                    "the request's deadline passed before it could run; it was not executed: {why}"
                ),
            ));
        }
        self.inner.serve(cx, request).await
    }
}
