//! The control plane's client: [`ControlClient`] calls any command of a
//! daemon's control service ([`ControlClient::call`] with a
//! [`steadfast_protocol::control::cmd`] value) over its Unix socket, its
//! TCP or TLS port, and hands back its typed answer ([`Snapshot`]s).
//!
//! Invariants:
//! - A refusal comes back as [`ClientError::Command`] carrying the
//!   daemon's [`CommandError`] unchanged (a lifecycle refusal keeps its
//!   [`Refused`]), and *not reaching* a daemon is
//!   always [`ClientError::Connect`], [`ClientError::Auth`],
//!   [`ClientError::Busy`] or [`ClientError::Rpc`] — never a refusal.
//!   Checked by `tests/it/control.rs::a_refusal_arrives_typed` and
//!   `tests/it/control.rs::no_daemon_is_a_connect_error`.
//! - The client reconnects: once its connection is known to be broken (the
//!   daemon closed it, restarted, was relaunched), the next call dials
//!   again. A call that finds the connection already ended before sending
//!   dials first, so nothing was sent on the dead one. A read-only call
//!   (`snapshot`, `watch`) that breaks *in flight* is retried once on a new
//!   connection, and so are the other reads (`journal`, `config_show`,
//!   `reinit_prepare`, which changes nothing); a command is not: it may
//!   have reached the daemon and been
//!   applied before the connection broke, and applying `stop` or `exit`
//!   twice is not the caller's intent — it gets [`ClientError::Rpc`] and
//!   decides (read the snapshot, then act). Checked by
//!   `tests/it/control.rs::the_client_reconnects_after_a_server_restart` and
//!   `tests/it/control.rs::reads_are_retried_once_and_commands_never`.
//! - A busy daemon is waited out: a dial answered busy (the server's first
//!   byte is `2`: the server read nothing, so nothing ran), a Unix socket whose
//!   accept queue is full, or a TCP handshake closed unanswered (evicted
//!   from the handshake pool) is dialled again with a growing, jittered
//!   pause, until the call's deadline; commands too, since the answer
//!   proves they were not executed. Only then does the caller get
//!   [`ClientError::Busy`].
//!   `tests/it/control_hostile.rs::a_burst_of_1000_calls_is_all_answered`.
//! - Over the Unix socket the first request does not wait for the server's
//!   first byte: it is sent once the socket and its listener are checked,
//!   and `Admitting` reads the byte in front of the answer (one round trip
//!   for a command line's one call). A busy byte read after a request was
//!   sent still proves nothing ran (the server reads no frame of a
//!   connection it answered busy, and one whose client went away is never
//!   greeted: its greeting fails), so it is waited out as above;
//!   [`ControlClient::connect_within`] still waits for the byte before it
//!   returns. A call that gives up (its deadline, or dropped) before that
//!   byte came shuts the connection down rather than leave its request
//!   in the socket: the server's greeting then fails and the request is
//!   never read (a request's time left is measured from its arrival, so
//!   nothing else would tell the server it waited).
//!   `tests/it/control.rs::a_pipelined_request_goes_before_the_first_byte`,
//!   `tests/it/control.rs::a_pipelined_call_waits_out_busy_and_is_answered`.
//! - Nothing is sent to a socket the client does not trust: before it
//!   connects, the socket's directory must be owned by this user or root
//!   and writable by no one else, and the socket (not a link) owned by this
//!   user or root; it connects through the opened directory
//!   (`/proc/self/fd/<fd>/<name>`, so a rename after the check cannot
//!   redirect it), then the listening peer's credentials (`SO_PEERCRED`)
//!   must be this user's or root's — or, for a root client, the user that
//!   owns the data dir above the socket's directory when no one else can
//!   write it (a daemon run as a service user). Else
//!   [`ClientError::Untrusted`] names the path, why, and the fix.
//!   `tests/it/control_hostile.rs::a_socket_planted_by_another_user_gets_nothing`.

use std::fmt;
use std::io;
use std::net::SocketAddr;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use steadfast_protocol::control::{
    ChangesError, ControlRequest, ControlResponse, MAX_WATCH_TIMEOUT_MS, Registered,
    ReinitPrepared, WireChanges, WireSnapshot, cmd,
};
use steadfast_protocol::history::JournalAttempt;
use steadfast_protocol::lifecycle::ExitIntent;
use steadfast_protocol::snapshot::{ConfigView, Snapshot};
#[cfg(doc)]
use steadfast_protocol::{command::CommandError, lifecycle::Refused};
use tarpc::ServerError;
use tarpc::client::RpcError;
use tokio::net::UnixStream;
use tokio::sync::{Mutex, watch};

use super::auth::Token;
use super::codec::{self, Bincode1};
use super::conn::Wire;
pub use super::error::ClientError;
use super::error::dial_again;
use super::limits::{self, MAX_SOCKET_PATH};
use steadfast_actors::lifecycle::Hold;

/// How long a command may take by default (a stop waits for the drain).
pub const DEFAULT_CALL_TIMEOUT: Duration = Duration::from_secs(120);

/// Extra time a `watch` call is given beyond its own wait.
const WATCH_MARGIN: Duration = Duration::from_secs(10);

/// A daemon that answered another method than the one called.
fn out_of_turn(answer: &ControlResponse, method: &str) -> ClientError {
    ClientError::Rpc(RpcError::Server(ServerError::new(
        io::ErrorKind::InvalidData,
        format!("the daemon answered another method than {method}: {answer:?}"),
    )))
}

/// Where a daemon's control plane is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Endpoint {
    /// Its Unix socket.
    Unix(PathBuf),
    /// Its TCP port, and the token to present there.
    Tcp {
        /// The address.
        addr: SocketAddr,
        /// The token.
        token: Token,
    },
    /// Its TLS control port (the cargo feature `tls`).
    #[cfg(feature = "tls")]
    Tls {
        /// The address.
        addr: SocketAddr,
        /// The name the daemon's certificate must be for: a DNS name, or
        /// the address's IP (what `Endpoint::tls` gives).
        server_name: String,
        /// The CA to trust the daemon by, and this client's certificate.
        tls: super::tls::TlsClient,
        /// A token to present inside the session; `None`: the client
        /// certificate alone.
        token: Option<Token>,
    },
}

#[cfg(feature = "tls")]
impl Endpoint {
    /// A TLS endpoint whose certificate must be for `addr`'s IP address.
    #[must_use]
    pub fn tls(addr: SocketAddr, tls: super::tls::TlsClient, token: Option<Token>) -> Self {
        Self::Tls {
            addr,
            server_name: addr.ip().to_string(),
            tls,
            token,
        }
    }
}

impl fmt::Display for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Unix(path) => write!(f, "{}", path.display()),
            Self::Tcp { addr, .. } => write!(f, "{addr}"),
            #[cfg(feature = "tls")]
            Self::Tls { addr, .. } => write!(f, "tls://{addr}"),
        }
    }
}

/// One dialled connection.
#[derive(Debug)]
struct Connection {
    /// Its frames, driven by the calls on it (`conn`): broken means the
    /// connection is gone (and nothing more can be sent on it).
    wire: Arc<Wire>,
    /// Which dial this is, so a failure seen on an old connection does not
    /// drop a newer one.
    generation: u64,
    /// The server's first byte (Unix socket), as the connection's reads
    /// found it; [`Admission::Accepted`] from the start over TCP and TLS,
    /// whose dial waited for it.
    admission: watch::Receiver<Admission>,
}

/// What the server's first byte on a Unix connection said (`spec/control.md`,
/// "The server's first byte"). The client sends its first request without
/// waiting for it; [`Admitting`] reads it in front of the first answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Admission {
    /// Not read yet.
    Pending,
    /// `0`: served, frames follow.
    Accepted,
    /// `2`: no slot; the server closed without reading anything.
    Busy,
    /// The connection ended before its first byte.
    Closed,
    /// A first byte that is not a steadfast answer.
    Other(u8),
}

impl Connection {
    /// Why this connection was never served: see [`Self::unserved_by`].
    fn unserved(&self, endpoint: &Endpoint) -> Option<ClientError> {
        Self::unserved_by(&self.admission, endpoint)
    }

    /// Why a connection with `admission` was never served, once a call on
    /// it broke: the error the caller gets instead of the transport's
    /// (`Busy`: dial again). `None` when it was admitted (the call's own
    /// error stands).
    fn unserved_by(
        admission: &watch::Receiver<Admission>,
        endpoint: &Endpoint,
    ) -> Option<ClientError> {
        let connect_err = |kind, why: String| ClientError::Connect {
            endpoint: endpoint.to_string(),
            source: io::Error::new(kind, why),
        };
        match *admission.borrow() {
            Admission::Accepted => None,
            Admission::Busy => Some(ClientError::Busy {
                endpoint: endpoint.to_string(),
            }),
            Admission::Pending | Admission::Closed => Some(connect_err(
                io::ErrorKind::ConnectionReset,
                "the daemon closed the connection before serving it (is this user allowed?)"
                    .to_owned(),
            )),
            Admission::Other(byte) => Some(connect_err(
                io::ErrorKind::InvalidData,
                format!("not a steadfast control socket (it first sent {byte:#04x})"),
            )),
        }
    }
}

/// A Unix connection whose first byte is the server's admission
/// ([`Admission`]): it is taken out of the stream before tarpc's frames, and
/// a busy or foreign first byte ends the stream with an error (the calls in
/// flight fail, and [`Connection::unserved`] says why).
struct Admitting {
    inner: UnixStream,
    admission: watch::Sender<Admission>,
}

impl Admitting {
    fn settle(&self, admission: Admission) {
        self.admission.send_replace(admission);
    }

    fn pending(&self) -> bool {
        *self.admission.borrow() == Admission::Pending
    }

    /// The server's first byte, seen: an error unless it is `0`.
    fn admit(&self, byte: u8) -> io::Result<()> {
        let (admission, kind) = match byte {
            super::auth::ANSWER_ACCEPTED => (Admission::Accepted, None),
            super::auth::ANSWER_BUSY => (Admission::Busy, Some(io::ErrorKind::ConnectionRefused)),
            other => (Admission::Other(other), Some(io::ErrorKind::InvalidData)),
        };
        self.settle(admission);
        match kind {
            None => Ok(()),
            Some(kind) => Err(io::Error::new(
                kind,
                "the daemon did not serve this connection",
            )),
        }
    }
}

impl tokio::io::AsyncRead for Admitting {
    fn poll_read(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<io::Result<()>> {
        use std::task::Poll;
        let this = self.get_mut();
        while this.pending() {
            let before = buf.filled().len();
            match std::pin::Pin::new(&mut this.inner).poll_read(cx, buf) {
                Poll::Ready(Ok(())) => {}
                other => return other,
            }
            let got = buf.filled().len() - before;
            if got == 0 {
                this.settle(Admission::Closed);
                return Poll::Ready(Ok(()));
            }
            let first = buf.filled()[before];
            // The frames that came with it stay; the byte goes.
            buf.filled_mut()[before..].copy_within(1.., 0);
            buf.set_filled(before + got - 1);
            this.admit(first)?;
            if got > 1 {
                return Poll::Ready(Ok(()));
            }
        }
        std::pin::Pin::new(&mut this.inner).poll_read(cx, buf)
    }
}

impl tokio::io::AsyncWrite for Admitting {
    fn poll_write(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        data: &[u8],
    ) -> std::task::Poll<io::Result<usize>> {
        let this = self.get_mut();
        let polled = std::pin::Pin::new(&mut this.inner).poll_write(cx, data);
        if let std::task::Poll::Ready(Err(_)) = &polled {
            this.written_off();
        }
        polled
    }

    fn poll_flush(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<io::Result<()>> {
        std::pin::Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<io::Result<()>> {
        std::pin::Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

impl Admitting {
    /// A write failed before the first byte was read: a server that
    /// answered busy and closed before the request was written (the write
    /// then fails with `EPIPE`) left its byte in this socket; read it
    /// without waiting, so the call says busy rather than broken.
    fn written_off(&self) {
        if !self.pending() {
            return;
        }
        let mut byte = [0u8; 1];
        match rustix::net::recv(&self.inner, &mut byte, rustix::net::RecvFlags::DONTWAIT) {
            Ok((1, _)) => {
                let _ = self.admit(byte[0]);
            }
            Ok(_) => self.settle(Admission::Closed),
            Err(_) => {}
        }
    }
}

/// Whether a user id may serve this client: this user, root, or — for a
/// root client — the service user that owns the data dir the socket's
/// directory sits in (see [`service_user`]).
fn trusted_uid(uid: u32, dir_fd: &OwnedFd, service: &ServiceUser) -> bool {
    uid == 0 || uid == rustix::process::geteuid().as_raw() || Some(uid) == service.uid(dir_fd)
}

/// [`service_user`] of an opened socket directory, looked up when first
/// asked: only an owner or a peer that is neither root nor this user needs
/// it, so the usual call (everything this user's or root's) opens no `..`.
#[derive(Default)]
struct ServiceUser(std::cell::OnceCell<Option<u32>>);

impl ServiceUser {
    /// The service user of `dir_fd` (always the same directory).
    fn uid(&self, dir_fd: &OwnedFd) -> Option<u32> {
        *self.0.get_or_init(|| service_user(dir_fd))
    }
}

/// The user a root client may also trust: the owner of the directory above
/// the socket's (the data dir), when neither group nor others can write that
/// directory. A daemon often runs as a service user (`User=kvd` under
/// systemd) while the operator runs `sudo steadfastctl`; only that data
/// dir's owner can have made the control dir in it, so its socket is the
/// daemon's, not another user's. For any other client, `None`: the server
/// drops a peer that is neither the daemon's uid nor root anyway.
/// `tests/it/control_hostile.rs::a_root_operator_reaches_a_service_users_daemon`.
fn service_user(dir_fd: &OwnedFd) -> Option<u32> {
    if rustix::process::geteuid().as_raw() != 0 {
        return None;
    }
    // `..` of the opened directory: the data dir it really sits in, whatever
    // the path now names.
    let parent = rustix::fs::openat(
        dir_fd,
        "..",
        rustix::fs::OFlags::DIRECTORY | rustix::fs::OFlags::CLOEXEC | rustix::fs::OFlags::RDONLY,
        rustix::fs::Mode::empty(),
    )
    .ok()?;
    let stat = rustix::fs::fstat(&parent).ok()?;
    (stat.st_mode & 0o022 == 0).then_some(stat.st_uid)
}

/// Check the socket at `path` and its directory before anything is sent
/// (see the module's invariants): the opened directory, and the path to
/// connect to through it.
fn checked_socket(path: &Path) -> Result<(OwnedFd, PathBuf, ServiceUser), ClientError> {
    let (dir_fd, _, service) = checked_file(path)?;
    let name = path.file_name().unwrap_or_default();
    let through = through_proc(&dir_fd, name).map_or_else(|| through_dir(&dir_fd, path), Ok)?;
    Ok((dir_fd, through, service))
}

/// The checks of [`checked_socket`], on the files alone: the opened
/// directory, the socket file's `stat` (`AT_SYMLINK_NOFOLLOW`), and the
/// trusted-uid rule's lookups.
fn checked_file(path: &Path) -> Result<(OwnedFd, rustix::fs::Stat, ServiceUser), ClientError> {
    let untrusted = |why: String| ClientError::Untrusted {
        path: path.to_owned(),
        why,
    };
    let connect_err = |source: io::Error| ClientError::Connect {
        endpoint: path.display().to_string(),
        source,
    };
    let (Some(dir), Some(name)) = (path.parent(), path.file_name()) else {
        return Err(untrusted("not a socket path".to_owned()));
    };
    let dir = if dir.as_os_str().is_empty() {
        Path::new(".")
    } else {
        dir
    };
    let dir_fd = rustix::fs::open(
        dir,
        rustix::fs::OFlags::DIRECTORY | rustix::fs::OFlags::CLOEXEC | rustix::fs::OFlags::RDONLY,
        rustix::fs::Mode::empty(),
    )
    .map_err(|e| connect_err(e.into()))?;
    let dir_stat = rustix::fs::fstat(&dir_fd).map_err(|e| connect_err(e.into()))?;
    let service = ServiceUser::default();
    if !trusted_uid(dir_stat.st_uid, &dir_fd, &service) {
        return Err(untrusted(format!(
            "its directory {} is owned by uid {}, not by this user or root (another user may \
             have replaced it: check who did, then restart the daemon)",
            dir.display(),
            dir_stat.st_uid
        )));
    }
    if dir_stat.st_mode & 0o022 != 0 {
        return Err(untrusted(format!(
            "its directory {} has mode {:o}: others may replace the socket (chmod 700 it)",
            dir.display(),
            dir_stat.st_mode & 0o7777
        )));
    }
    let stat = rustix::fs::statat(&dir_fd, name, rustix::fs::AtFlags::SYMLINK_NOFOLLOW)
        .map_err(|e| connect_err(e.into()))?;
    if rustix::fs::FileType::from_raw_mode(stat.st_mode) != rustix::fs::FileType::Socket {
        return Err(untrusted(
            "it is not a socket (a link or a file is not followed): point at the daemon's \
             control.sock"
                .to_owned(),
        ));
    }
    if !trusted_uid(stat.st_uid, &dir_fd, &service) {
        return Err(untrusted(format!(
            "the socket is owned by uid {}, not by this user or root",
            stat.st_uid
        )));
    }
    Ok((dir_fd, stat, service))
}

/// `/proc/self/fd/<fd>/<name>` when it fits a socket address, without
/// asking whether `/proc` is mounted: [`dial_once`] asks only when a
/// connect through it finds nothing (then [`through_dir`] decides, as it
/// would have). One stat of `/proc` less per dial.
fn through_proc(dir_fd: &OwnedFd, name: &std::ffi::OsStr) -> Option<PathBuf> {
    use std::os::fd::AsRawFd as _;
    use std::os::unix::ffi::OsStrExt as _;
    let mut through = format!("/proc/self/fd/{}/", dir_fd.as_raw_fd()).into_bytes();
    through.extend_from_slice(name.as_bytes());
    (through.len() <= MAX_SOCKET_PATH).then(|| {
        PathBuf::from(<std::ffi::OsString as std::os::unix::ffi::OsStringExt>::from_vec(through))
    })
}

/// [`limits::through_dir`] for the socket at `path`, opened as
/// `dir_fd`: through `/proc` when it is mounted and the path fits, else
/// `path` itself when it fits.
fn through_dir(dir_fd: &OwnedFd, path: &Path) -> Result<PathBuf, ClientError> {
    let name = path.file_name().unwrap_or_default();
    limits::through_dir(dir_fd, name, path).map_err(|e| ClientError::Connect {
        endpoint: path.display().to_string(),
        source: io::Error::new(io::ErrorKind::InvalidInput, e.to_string()),
    })
}

/// A Unix control socket's file, as [`socket_file`] checked it.
#[derive(Debug)]
pub struct SocketFile {
    /// The socket's directory, opened and checked (a file in it is read
    /// through this, not through the path again).
    pub dir: OwnedFd,
    /// The socket file's `(st_dev, st_ino)` (of the path, not followed).
    pub id: (u64, u64),
    /// The socket file's owner: trusted as a dial trusts it (this user,
    /// root, or for a root client the data dir's service user).
    pub uid: u32,
}

/// The Unix control socket's file at `path`, with every check a dial makes
/// before it connects (the module's invariants: the directory's owner and
/// mode, the socket's type and owner, no link followed), and without
/// connecting: the daemon is not woken. What `steadfastctl status` checks
/// before it trusts the status record beside the socket, which names the
/// socket file its writer serves.
///
/// # Errors
/// As a dial's before it connects: [`ClientError::Connect`] (no directory,
/// no socket file), [`ClientError::Untrusted`]; where
/// [`ClientError::ends_a_dial`] says so (each of these today), a dial would
/// end with that same error.
pub fn socket_file(path: &Path) -> Result<SocketFile, ClientError> {
    let (dir, stat, _) = checked_file(path)?;
    Ok(SocketFile {
        dir,
        id: (stat.st_dev, stat.st_ino),
        uid: stat.st_uid,
    })
}

/// Dial `endpoint` once. Unix socket: every check, connect, and the
/// listener's credentials; the server's first byte is not waited for (the
/// first request goes at once, [`Admitting`] reads the byte before its
/// answer). TCP and TLS: the handshake, through the server's answer.
async fn dial_once(
    endpoint: &Endpoint,
    generation: u64,
    clock_offset_ms: i64,
) -> Result<Connection, ClientError> {
    match endpoint {
        Endpoint::Unix(path) => {
            let connect_err = |source| ClientError::Connect {
                endpoint: path.display().to_string(),
                source,
            };
            let (dir_fd, through, service) = checked_socket(path)?;
            let stream = match UnixStream::connect(&through).await {
                // Not there through `/proc`: is `/proc` mounted at all?
                // (The socket itself was there a moment ago.)
                Err(error) if error.kind() == io::ErrorKind::NotFound => {
                    match through_dir(&dir_fd, path)? {
                        plain if plain != through => UnixStream::connect(&plain).await,
                        _ => Err(error),
                    }
                }
                connected => connected,
            }
            .map_err(connect_err)?;
            let peer = stream.peer_cred().map_err(connect_err)?;
            if !trusted_uid(peer.uid(), &dir_fd, &service) {
                return Err(ClientError::Untrusted {
                    path: path.clone(),
                    why: format!(
                        "the process listening on it runs as uid {}, not as this user or root",
                        peer.uid()
                    ),
                });
            }
            let probe = probe(&stream);
            let (admission, admitted) = watch::channel(Admission::Pending);
            let stream = Admitting {
                inner: stream,
                admission,
            };
            Ok(start(stream, probe, generation, admitted, clock_offset_ms))
        }
        Endpoint::Tcp { addr, token } => {
            let stream = super::tcp::dial(*addr, token).await?;
            let probe = probe(&stream);
            Ok(start(
                stream,
                probe,
                generation,
                accepted(),
                clock_offset_ms,
            ))
        }
        #[cfg(feature = "tls")]
        Endpoint::Tls {
            addr,
            server_name,
            tls,
            token,
        } => {
            let stream = super::tls::dial(*addr, server_name, tls, token.as_ref()).await?;
            let probe = probe(stream.get_ref().0);
            Ok(start(
                stream,
                probe,
                generation,
                accepted(),
                clock_offset_ms,
            ))
        }
    }
}

/// The admission of a connection whose dial already read it.
fn accepted() -> watch::Receiver<Admission> {
    watch::channel(Admission::Accepted).1
}

/// The pause before dialling a busy daemon again: growing (2 ms doubling
/// to 250 ms) and jittered, so a burst spreads out instead of coming back
/// together.
struct Backoff {
    pause: Duration,
    jitter: u64,
}

impl Backoff {
    fn new() -> Self {
        Self {
            pause: Duration::from_millis(2),
            jitter: u64::from(std::process::id())
                ^ u64::try_from(
                    std::time::SystemTime::now()
                        .duration_since(std::time::UNIX_EPOCH)
                        .map_or(0, |d| d.as_nanos()),
                )
                .unwrap_or(0),
        }
    }

    /// Sleep the next pause; `false` (without sleeping) when it would end
    /// at or after `deadline`.
    async fn wait(&mut self, deadline: Instant, why: &ClientError) -> bool {
        // splitmix64 step: each client pauses differently.
        self.jitter = self.jitter.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let spread = (self.jitter >> 33) % (u64::try_from(self.pause.as_millis()).unwrap_or(1) + 1);
        let wait = self.pause + Duration::from_millis(spread);
        if Instant::now() + wait >= deadline {
            return false;
        }
        tracing::debug!(error = %why, ?wait, "the control plane is busy; dialling again");
        tokio::time::sleep(wait).await;
        self.pause = (self.pause * 2).min(Duration::from_millis(250));
        true
    }
}

/// Dial `endpoint`, waiting out a full way in (see [`dial_again`]) with a
/// [`Backoff`] until `deadline`.
async fn dial(
    endpoint: &Endpoint,
    generation: u64,
    deadline: Instant,
    clock_offset_ms: i64,
) -> Result<Connection, ClientError> {
    let mut backoff = Backoff::new();
    let mut turned_away = None;
    loop {
        let attempt = tokio::time::timeout_at(
            deadline.into(),
            dial_once(endpoint, generation, clock_offset_ms),
        )
        .await;
        let error = match attempt {
            Ok(Ok(connection)) => return Ok(connection),
            Ok(Err(error)) => error,
            Err(_) => return Err(stayed_busy(endpoint, turned_away)),
        };
        if !dial_again(&error) || !backoff.wait(deadline, &error).await {
            return Err(error);
        }
        turned_away = Some(error);
    }
}

/// The error of a dial whose deadline passed while it waited: the daemon's
/// last answer when it had turned this caller away (busy, a full way in),
/// so a caller that was only ever turned away hears why — however long its
/// last handshake took — and a timeout otherwise.
fn stayed_busy(endpoint: &Endpoint, turned_away: Option<ClientError>) -> ClientError {
    turned_away.unwrap_or_else(|| timed_out(endpoint))
}

/// No answer within the deadline, before a call was served.
fn timed_out(endpoint: &Endpoint) -> ClientError {
    ClientError::Connect {
        endpoint: endpoint.to_string(),
        source: io::Error::new(
            io::ErrorKind::TimedOut,
            "no answer from the daemon within the call's deadline",
        ),
    }
}

/// A duplicate of `socket`, for [`Wire::peer_closed`] (`None` if the
/// descriptor table is full: the check is then skipped).
fn probe(socket: &impl std::os::fd::AsFd) -> Option<OwnedFd> {
    socket.as_fd().try_clone_to_owned().ok()
}

/// Put tarpc's frames over a connected stream, driven by the calls on it
/// (`conn`): no dispatch task.
fn start<S>(
    stream: S,
    probe: Option<OwnedFd>,
    generation: u64,
    admission: watch::Receiver<Admission>,
    clock_offset_ms: i64,
) -> Connection
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + 'static,
{
    let transport = tarpc::serde_transport::new(
        codec::framed(stream),
        Bincode1::client_with_clock_offset(clock_offset_ms),
    );
    let pending = admission.clone();
    let unserved = move || *pending.borrow() == Admission::Pending;
    Connection {
        wire: Arc::new(Wire::new(transport, probe).unserved_while(unserved)),
        generation,
        admission,
    }
}

/// Whether `error` means the connection is gone (rather than one call
/// failing on a live connection).
const fn is_broken(error: &RpcError) -> bool {
    matches!(
        error,
        RpcError::Shutdown | RpcError::Send(_) | RpcError::Channel(_)
    )
}

/// A client of a daemon's control plane, over its Unix socket or its TCP
/// port. Cheap to clone; calls on clones share the connection. Reconnects
/// by itself: see the module's documentation for what is retried.
#[derive(Clone, Debug)]
pub struct ControlClient {
    /// Where the daemon is.
    endpoint: Arc<Endpoint>,
    /// The current connection, if one is believed alive.
    connection: Arc<Mutex<Option<Connection>>>,
    /// The deadline given to each command.
    timeout: Duration,
    /// Milliseconds added to this client's clock readings (tests only:
    /// [`Self::with_clock_offset_ms`]).
    clock_offset_ms: i64,
}

impl ControlClient {
    /// Connect to the socket at `path`. Call inside a tokio runtime.
    ///
    /// # Errors
    /// [`ClientError::Connect`] when nothing answers at `path`.
    pub async fn connect_unix(path: impl AsRef<Path>) -> Result<Self, ClientError> {
        Self::connect(Endpoint::Unix(path.as_ref().to_owned())).await
    }

    /// Connect to a daemon's TCP control port at `addr` and present `token`
    /// (read it with [`Token::read_file`]). Call inside a tokio runtime.
    ///
    /// # Errors
    /// [`ClientError::Connect`] when nothing answers at `addr` (or the
    /// handshake times out), [`ClientError::Auth`] when the token is
    /// refused, [`ClientError::Busy`] when the daemon has too many
    /// connections.
    pub async fn connect_tcp(addr: SocketAddr, token: Token) -> Result<Self, ClientError> {
        Self::connect(Endpoint::Tcp { addr, token }).await
    }

    /// Connect to `endpoint` now (so a wrong address fails here, not at the
    /// first call).
    ///
    /// # Errors
    /// As [`Self::connect_unix`] and [`Self::connect_tcp`].
    pub async fn connect(endpoint: Endpoint) -> Result<Self, ClientError> {
        Self::connect_within(endpoint, DEFAULT_CALL_TIMEOUT).await
    }

    /// Connect to `endpoint` now, waiting out a busy daemon for at most
    /// `timeout`, and give each call `timeout` (as [`Self::with_timeout`]).
    /// Over the Unix socket this waits for the server's first byte (so a
    /// busy daemon is [`ClientError::Busy`] here); [`Self::connect_pipelined`]
    /// does not.
    ///
    /// # Errors
    /// As [`Self::connect_unix`] and [`Self::connect_tcp`];
    /// [`ClientError::Busy`] when the daemon stayed busy for `timeout`;
    /// [`ClientError::Untrusted`] when another user owns the socket.
    pub async fn connect_within(
        endpoint: Endpoint,
        timeout: Duration,
    ) -> Result<Self, ClientError> {
        let deadline = Instant::now() + timeout;
        let mut backoff = Backoff::new();
        let mut turned_away = None;
        loop {
            let connection = match dial(&endpoint, 0, deadline, 0).await {
                Ok(connection) => connection,
                Err(error) if error.is_deadline() && turned_away.is_some() => {
                    return Err(stayed_busy(&endpoint, turned_away));
                }
                Err(error) => return Err(error),
            };
            // No call reads yet: read the first byte here. A connection
            // that ends or breaks before it reads as closed below.
            let settled = tokio::time::timeout_at(
                deadline.into(),
                std::future::poll_fn(|cx| {
                    loop {
                        let polled = connection.wire.poll_idle(cx);
                        if *connection.admission.borrow() != Admission::Pending
                            || connection.wire.is_broken()
                        {
                            return std::task::Poll::Ready(());
                        }
                        if polled.is_pending() {
                            return std::task::Poll::Pending;
                        }
                    }
                }),
            )
            .await;
            if settled.is_err() {
                return Err(stayed_busy(&endpoint, turned_away));
            }
            match connection.unserved(&endpoint) {
                None => {
                    return Ok(Self {
                        endpoint: Arc::new(endpoint),
                        connection: Arc::new(Mutex::new(Some(connection))),
                        timeout,
                        clock_offset_ms: 0,
                    });
                }
                Some(busy @ ClientError::Busy { .. }) => {
                    if !backoff.wait(deadline, &busy).await {
                        return Err(busy);
                    }
                    turned_away = Some(busy);
                }
                Some(error) => return Err(error),
            }
        }
    }

    /// [`Self::connect_within`] without waiting for the Unix server's first
    /// byte: the socket and its listener are checked (nothing goes to one
    /// this user may not trust) and connected, and the first call is sent
    /// at once; its answer comes after the byte on the same connection — one
    /// round trip for a command line's one call instead of two. A busy
    /// answer still proves nothing was read (the server reads no frame of a
    /// connection it answered busy), so the call dials again, a command too,
    /// until its deadline, then [`ClientError::Busy`]; a connection closed
    /// before its first byte fails the call with [`ClientError::Connect`].
    /// TCP and TLS dial as [`Self::connect_within`] (the token or the
    /// certificate is answered before any frame is sent).
    /// `tests/it/control.rs::a_pipelined_call_waits_out_busy_and_is_answered`.
    ///
    /// # Errors
    /// As [`Self::connect_within`], but a busy daemon is only known at the
    /// first call.
    pub async fn connect_pipelined(
        endpoint: Endpoint,
        timeout: Duration,
    ) -> Result<Self, ClientError> {
        let connection = dial(&endpoint, 0, Instant::now() + timeout, 0).await?;
        Ok(Self {
            endpoint: Arc::new(endpoint),
            connection: Arc::new(Mutex::new(Some(connection))),
            timeout,
            clock_offset_ms: 0,
        })
    }

    /// Where this client calls.
    #[must_use]
    pub fn endpoint(&self) -> &Endpoint {
        &self.endpoint
    }

    /// A live connection, its generation and admission: the current one,
    /// or a new one (dialled until `deadline`) when there is none, it is
    /// broken, or (`check`: before a command) the kernel says the daemon
    /// already closed it — nothing is then sent on it.
    async fn raw(
        &self,
        deadline: Instant,
        check: bool,
    ) -> Result<(Arc<Wire>, u64, watch::Receiver<Admission>), ClientError> {
        let mut slot = self.connection.lock().await;
        if let Some(connection) = slot.as_ref()
            && !connection.wire.is_broken()
            && !(check && connection.wire.peer_closed())
        {
            return Ok((
                Arc::clone(&connection.wire),
                connection.generation,
                connection.admission.clone(),
            ));
        }
        let generation = slot.as_ref().map_or(0, |c| c.generation + 1);
        *slot = None;
        let connection = dial(&self.endpoint, generation, deadline, self.clock_offset_ms).await?;
        let raw = (
            Arc::clone(&connection.wire),
            generation,
            connection.admission.clone(),
        );
        *slot = Some(connection);
        Ok(raw)
    }

    /// Forget connection `generation` after it broke (the next call dials).
    async fn broke(&self, generation: u64) {
        let mut slot = self.connection.lock().await;
        if slot.as_ref().is_some_and(|c| c.generation == generation) {
            *slot = None;
        }
    }

    /// Send the request `request` makes on a live connection, with
    /// `timeout` as its deadline (a read's counts from each attempt, a
    /// command's from the call). When the connection breaks under it: a
    /// connection the server never served (busy: dial again with a
    /// [`Backoff`] until the deadline, whatever the call; closed before its
    /// first byte: [`ClientError::Connect`]) says so; else a read
    /// (`replay`) is sent once more on a new connection, and a command's
    /// error is the caller's (it may have been applied). The next call
    /// dials either way.
    async fn send(
        &self,
        replay: bool,
        timeout: Duration,
        request: impl Fn() -> ControlRequest,
    ) -> Result<ControlResponse, ClientError> {
        let deadline = Instant::now() + self.timeout;
        let command_deadline = Instant::now() + timeout;
        let mut backoff = Backoff::new();
        let mut replayed = false;
        loop {
            let (wire, generation, admission) = self.raw(deadline, !replay).await?;
            let call_deadline = if replay {
                Instant::now() + timeout
            } else {
                command_deadline
            };
            let error = match wire.call(request(), call_deadline).await {
                Err(error) if is_broken(&error) => error,
                answer => return Ok(answer?),
            };
            self.broke(generation).await;
            let unserved = Connection::unserved_by(&admission, &self.endpoint);
            match unserved {
                Some(busy @ ClientError::Busy { .. }) => {
                    if !backoff.wait(deadline, &busy).await {
                        return Err(busy);
                    }
                }
                Some(error) => return Err(error),
                None if replay && !replayed => {
                    replayed = true;
                    tracing::debug!(%error, "the control connection broke; retrying a read once");
                }
                None => return Err(error.into()),
            }
        }
    }

    /// Read this client's clock `offset_ms` milliseconds off (negative:
    /// behind) on the connections it dials from now on (the current one
    /// is let go): a test's stand-in for a client machine whose clock is
    /// skewed. Not for use outside tests.
    #[doc(hidden)]
    #[must_use]
    pub fn with_clock_offset_ms(mut self, offset_ms: i64) -> Self {
        self.clock_offset_ms = offset_ms;
        self.connection = Arc::new(Mutex::new(None));
        self
    }

    /// Give each command this long (default [`DEFAULT_CALL_TIMEOUT`]).
    #[must_use]
    pub const fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Call `command` and wait for its answer: the one way every method is
    /// called. A
    /// [`REPLAYABLE`](steadfast_protocol::control::Command::REPLAYABLE) one
    /// (a read) is sent once more on a new connection if the connection
    /// breaks under it; a command is sent once, on a connection the daemon
    /// has not closed, never twice (it may have been applied).
    ///
    /// # Errors
    /// [`ClientError::Command`] with the daemon's reason, or the transport's
    /// [`ClientError`].
    pub async fn call<C: Registered>(&self, command: C) -> Result<C::Reply, ClientError> {
        self.call_within(command, self.timeout).await
    }

    /// [`Self::call`] with `timeout` as its deadline.
    async fn call_within<C: Registered>(
        &self,
        command: C,
        timeout: Duration,
    ) -> Result<C::Reply, ClientError> {
        let response = self
            .send(C::REPLAYABLE, timeout, || command.clone().into_request())
            .await?;
        C::answer(response)
            .map_err(|other| out_of_turn(&other, C::NAME))?
            .map_err(ClientError::Command)
    }

    /// [`Self::call`] of a command answered with a snapshot (`start`,
    /// `restart`, `config_set`, …): the snapshot after it.
    ///
    /// # Errors
    /// As [`Self::call`]; [`ClientError::Malformed`] when the snapshot does
    /// not parse.
    pub async fn command<C: Registered<Reply = WireSnapshot>>(
        &self,
        command: C,
    ) -> Result<Snapshot, ClientError> {
        Ok(self.call(command).await?.into_snapshot()?)
    }

    /// The latest snapshot.
    ///
    /// # Errors
    /// [`ClientError`]: the call failed on the way.
    pub async fn snapshot(&self) -> Result<Snapshot, ClientError> {
        self.command(cmd::Snapshot).await
    }

    /// The first snapshot whose version is greater than `have`'s, or the
    /// current one after `timeout` (the server caps it at 60 s). The daemon
    /// sends only the fields that changed since `have` (when `have` is
    /// what it last sent on this connection; otherwise the whole snapshot),
    /// and they are applied to `have` here.
    ///
    /// # Errors
    /// As [`Self::snapshot`].
    pub async fn watch(&self, have: &Snapshot, timeout: Duration) -> Result<Snapshot, ClientError> {
        let changes = self.watch_changes(have.version, timeout).await?;
        match changes.apply(have) {
            Ok(snapshot) => Ok(snapshot),
            Err(ChangesError::Json(error)) => Err(ClientError::Malformed(error)),
            // Changes for another base than the one asked after: not for
            // this snapshot; read the whole one.
            Err(ChangesError::OtherBase { .. }) => self.snapshot().await,
        }
    }

    /// The `watch` method's own answer: the fields that changed since
    /// version `after_version` (if that is what this connection last
    /// received), else the whole snapshot. [`Self::watch`] applies it.
    ///
    /// # Errors
    /// As [`Self::snapshot`].
    pub async fn watch_changes(
        &self,
        after_version: u64,
        timeout: Duration,
    ) -> Result<WireChanges, ClientError> {
        let ms = u64::try_from(timeout.as_millis())
            .unwrap_or(u64::MAX)
            .min(MAX_WATCH_TIMEOUT_MS);
        let wait = Duration::from_millis(ms) + WATCH_MARGIN;
        let command = cmd::Watch {
            after_version,
            timeout_ms: ms,
        };
        self.call_within(command, wait).await
    }

    /// Boot a stopped runtime (clears a hold).
    ///
    /// # Errors
    /// [`ClientError::Command`] with the lifecycle's reason, or as
    /// [`Self::snapshot`].
    pub async fn start(&self) -> Result<Snapshot, ClientError> {
        self.command(cmd::Start).await
    }

    /// Stop the runtime; answered once the drain has settled.
    ///
    /// # Errors
    /// As [`Self::start`].
    pub async fn stop(&self, hold: Hold) -> Result<Snapshot, ClientError> {
        self.command(cmd::Stop { hold }).await
    }

    /// Stop the runtime and boot it again, once the daemon has resolved the
    /// new config: a config that does not resolve is refused
    /// (`config_invalid`, the error in the refusal's `detail`) and the
    /// runtime keeps serving.
    ///
    /// # Errors
    /// As [`Self::start`].
    pub async fn restart(&self) -> Result<Snapshot, ClientError> {
        self.command(cmd::Restart { force: false }).await
    }

    /// [`Self::restart`] without the preflight (`restart --force`): drains
    /// even when the new config does not resolve.
    ///
    /// # Errors
    /// As [`Self::start`].
    pub async fn restart_forced(&self) -> Result<Snapshot, ClientError> {
        self.command(cmd::Restart { force: true }).await
    }

    /// Retry a failed boot now.
    ///
    /// # Errors
    /// As [`Self::start`].
    pub async fn retry(&self) -> Result<Snapshot, ClientError> {
        self.command(cmd::Retry).await
    }

    /// Restart, stop or start the running runtime's supervised child
    /// `name`; answered once its stop and start are done, with the child as
    /// status shows it.
    ///
    /// # Errors
    /// [`ClientError::Command`] with [`CommandError::Child`] when no child
    /// of that name runs or it is in the wrong state for `op`; as
    /// [`Self::start`].
    pub async fn child(
        &self,
        name: &str,
        op: steadfast_protocol::children::ChildOp,
    ) -> Result<steadfast_protocol::children::ChildView, ClientError> {
        let wire = self
            .call(cmd::Child {
                name: name.to_owned(),
                op,
            })
            .await?;
        Ok(serde_json::from_str(&wire.json)?)
    }

    /// Re-read the config now, as SIGHUP does.
    ///
    /// # Errors
    /// As [`Self::start`].
    pub async fn reload(&self) -> Result<Snapshot, ClientError> {
        self.command(cmd::Reload).await
    }

    /// End the daemon's process after a drain.
    ///
    /// # Errors
    /// As [`Self::start`].
    pub async fn exit(&self, intent: ExitIntent) -> Result<Snapshot, ClientError> {
        self.command(cmd::Exit { intent }).await
    }

    /// The daemon's metrics, as OpenMetrics text (ending `# EOF`).
    ///
    /// # Errors
    /// As [`Self::snapshot`].
    pub async fn metrics(&self) -> Result<String, ClientError> {
        self.call(cmd::Metrics).await
    }

    /// The last `limit` attempts the journal records, with their phases,
    /// across the runs it still holds, oldest first.
    ///
    /// # Errors
    /// [`ClientError::Command`] when the daemon cannot read its journal, or
    /// as [`Self::snapshot`].
    pub async fn journal(&self, limit: u32) -> Result<Vec<JournalAttempt>, ClientError> {
        Ok(self.call(cmd::Journal { limit }).await?.into_attempts()?)
    }

    /// Set `leaf` of the daemon's override tier to `value` (TOML text; a
    /// bare word is a string).
    ///
    /// # Errors
    /// [`ClientError::Command`] for a malformed leaf or no override tier, or
    /// as [`Self::start`].
    pub async fn config_set(&self, leaf: &str, value: &str) -> Result<Snapshot, ClientError> {
        self.command(cmd::ConfigSet {
            leaf: leaf.to_owned(),
            value: value.to_owned(),
        })
        .await
    }

    /// Remove `leaf` from the daemon's override tier.
    ///
    /// # Errors
    /// As [`Self::config_set`].
    pub async fn config_unset(&self, leaf: &str) -> Result<Snapshot, ClientError> {
        self.command(cmd::ConfigUnset {
            leaf: leaf.to_owned(),
        })
        .await
    }

    /// The override tier (or one `leaf` of it) and the effective value.
    ///
    /// # Errors
    /// As [`Self::config_set`].
    pub async fn config_show(&self, leaf: Option<&str>) -> Result<ConfigView, ClientError> {
        self.call(cmd::ConfigShow {
            leaf: leaf.map(str::to_owned),
        })
        .await
    }

    /// Prepare a re-initialization: the confirmation for [`Self::reinit`].
    ///
    /// # Errors
    /// [`ClientError::Command`] unless the runtime is stopped, or as
    /// [`Self::snapshot`].
    pub async fn reinit_prepare(&self) -> Result<ReinitPrepared, ClientError> {
        self.call(cmd::ReinitPrepare).await
    }

    /// Re-initialize the stopped runtime with a confirmation from
    /// [`Self::reinit_prepare`]; answered once the wipe settled.
    ///
    /// # Errors
    /// [`ClientError::Command`] (`stale_confirmation` for a token of another
    /// epoch), [`ClientError::Command`] when the wipe failed, or as
    /// [`Self::snapshot`].
    pub async fn reinit(&self, token: &str) -> Result<Snapshot, ClientError> {
        self.command(cmd::Reinit {
            token: token.to_owned(),
        })
        .await
    }

    // -- Replacement --

    /// Start replacing the daemon's binary; answered once started, with the
    /// first report.
    ///
    /// # Errors
    /// [`ClientError::Command`] with the typed reason, or as
    /// [`Self::snapshot`].
    pub async fn replace(
        &self,
        request: steadfast_protocol::control::ReplaceRequest,
    ) -> Result<steadfast_protocol::control::ReplaceStatus, ClientError> {
        // A command: never replayed after a broken connection (the
        // transaction may have started).
        self.call(request).await
    }

    /// The replacement status once its report's `seq` passes `after_seq`, or
    /// as it is after `timeout` (the server caps it at 60 s). With a zero
    /// timeout: who answers (pid, identity, version) and the latest report.
    ///
    /// # Errors
    /// As [`Self::snapshot`].
    pub async fn replace_status(
        &self,
        after_seq: u64,
        timeout: Duration,
    ) -> Result<steadfast_protocol::control::ReplaceStatus, ClientError> {
        let ms = u64::try_from(timeout.as_millis())
            .unwrap_or(u64::MAX)
            .min(MAX_WATCH_TIMEOUT_MS);
        let wait = Duration::from_millis(ms).max(self.timeout.min(WATCH_MARGIN)) + WATCH_MARGIN;
        let command = cmd::ReplaceStatus {
            after_seq,
            timeout_ms: ms,
        };
        self.call_within(command, wait).await
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    /// Each way [`socket_file`] finds no daemon to dial ends a dial with
    /// that very error (`steadfastctl status` and `probe ready` answer it
    /// without a runtime); a busy daemon does not end one.
    #[test]
    fn what_socket_file_refuses_ends_a_dial() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let control = tmp.path().join("control");
        let mut refused = Vec::new();
        refused.push(socket_file(&tmp.path().join("gone").join(SOCKET)));
        std::fs::create_dir(&control).expect("mkdir");
        std::fs::set_permissions(&control, std::fs::Permissions::from_mode(0o700)).expect("chmod");
        refused.push(socket_file(&control.join(SOCKET)));
        std::fs::write(control.join(SOCKET), b"not a socket").expect("write");
        refused.push(socket_file(&control.join(SOCKET)));
        std::fs::set_permissions(&control, std::fs::Permissions::from_mode(0o777)).expect("chmod");
        refused.push(socket_file(&control.join(SOCKET)));
        let kinds: Vec<String> = refused
            .into_iter()
            .map(|r| {
                let error = r.expect_err("no daemon to dial");
                assert!(error.ends_a_dial(), "{error}");
                match error {
                    ClientError::Connect { source, .. } => format!("{:?}", source.kind()),
                    ClientError::Untrusted { .. } => "untrusted".to_owned(),
                    other => panic!("not a dial's error: {other}"),
                }
            })
            .collect();
        assert_eq!(kinds, ["NotFound", "NotFound", "untrusted", "untrusted"]);
        let busy = ClientError::Busy {
            endpoint: "x".to_owned(),
        };
        assert!(!busy.ends_a_dial(), "a busy daemon is dialled again");
    }

    /// A daemon that answered busy and then took the rest of the deadline
    /// over its next handshake stayed busy: the caller hears busy (dial
    /// again later), not a timeout that reads as "no daemon here". The
    /// listener answers the first hello busy and never answers the rest.
    #[tokio::test]
    async fn a_deadline_after_a_busy_answer_is_busy() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        let server = tokio::spawn(async move {
            let mut held = Vec::new();
            for n in 0.. {
                let (mut stream, _) = listener.accept().await.expect("accept");
                let mut hello = [0u8; crate::control::auth::HELLO_LEN];
                stream.read_exact(&mut hello).await.expect("hello");
                if n == 0 {
                    stream
                        .write_all(&[crate::control::auth::ANSWER_BUSY])
                        .await
                        .expect("busy");
                }
                held.push(stream);
            }
        });
        let token = Token::from_bytes([7; crate::control::auth::TOKEN_LEN]);
        let Err(error) = ControlClient::connect_within(
            Endpoint::Tcp { addr, token },
            Duration::from_millis(400),
        )
        .await
        else {
            panic!("admitted by a listener that never admits");
        };
        assert!(matches!(error, ClientError::Busy { .. }), "{error:?}");
        server.abort();
    }

    const SOCKET: &str = "control.sock";
}
