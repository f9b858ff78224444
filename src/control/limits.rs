//! The control plane's bounds: what a server holds at most and for how
//! long ([`ServerLimits`]), and the length a Unix socket address holds
//! ([`MAX_SOCKET_PATH`], and [`through_dir`], the way around it), shared by
//! the client and the servers.

use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::error::ControlError;

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
    /// A connection with no request in flight, none started or answered
    /// for this long, is closed (bytes that make no whole request do not
    /// count). Keep it above the longest call a client waits on (a `watch`
    /// waits at most 60 s).
    pub idle_timeout: Duration,
    /// A frame must be whole within this long of its first byte, or its
    /// connection is closed: a peer that trickles a frame holds nothing.
    pub frame_timeout: Duration,
    /// Slots of [`Self::max_connections`], and of
    /// [`Self::max_connections_per_peer`], that `read` peers may not hold
    /// (TLS: kept for `operate` callers; the Unix socket's and plain TCP's
    /// peers are all `operate`).
    pub operate_reserve: usize,
    /// TCP only: how long a new connection has to send its whole hello
    /// (`auth::HELLO_LEN` bytes) before it is closed.
    pub handshake_timeout: Duration,
    /// A served connection admitted, or whose request started or was
    /// answered, this recently is not evicted to make room (such a client
    /// is about to send); past it, an idle or long-polling one may be.
    pub evict_grace: Duration,
    /// TCP only: connections still in their token handshake, in all. They
    /// have their own pool (never an authenticated client's slots); when
    /// it is full the oldest of them is closed to make room.
    pub max_handshakes: usize,
    /// TCP only: connections in their handshake from one IP address (the
    /// oldest of that address is closed to make room).
    pub max_handshakes_per_peer: usize,
}

impl Default for ServerLimits {
    fn default() -> Self {
        Self {
            max_connections: 64,
            max_connections_per_peer: 32,
            max_in_flight_per_connection: 32,
            idle_timeout: Duration::from_secs(600),
            frame_timeout: Duration::from_secs(5),
            operate_reserve: 4,
            handshake_timeout: Duration::from_secs(5),
            evict_grace: Duration::from_millis(500),
            max_handshakes: 256,
            max_handshakes_per_peer: 128,
        }
    }
}

/// The most bytes of a path a Unix socket address holds (`sun_path` is 108
/// bytes, one of them the terminating NUL).
pub const MAX_SOCKET_PATH: usize = 107;

/// A path naming `name` in the directory open as `dir_fd` that fits a
/// socket address: `/proc/self/fd/<fd>/<name>` (it resolves through the
/// open directory, so neither a long path nor a renamed parent matters),
/// or `path` itself when `/proc` is not mounted and `path` fits.
///
/// # Errors
/// [`ControlError::PathTooLong`] when neither fits.
pub(crate) fn through_dir(
    dir_fd: &impl AsRawFd,
    name: &std::ffi::OsStr,
    path: &Path,
) -> Result<PathBuf, ControlError> {
    let fd_dir = PathBuf::from(format!("/proc/self/fd/{}", dir_fd.as_raw_fd()));
    let short = fd_dir.join(name);
    if fd_dir.is_dir() && short.as_os_str().len() <= MAX_SOCKET_PATH {
        return Ok(short);
    }
    let len = path.as_os_str().len();
    if len <= MAX_SOCKET_PATH {
        return Ok(path.to_owned());
    }
    Err(ControlError::PathTooLong {
        path: path.to_owned(),
        len,
        max: MAX_SOCKET_PATH,
    })
}
