//! The control plane's errors, shared by its client and its servers (Unix,
//! TCP, TLS): each transport's file uses them, none defines one another
//! file needs, so no file of `control/` depends on another in a circle.

use std::io;
use std::path::{Path, PathBuf};

use steadfast_protocol::command::CommandError;
use steadfast_protocol::lifecycle::Refused;
use tarpc::client::RpcError;

use super::auth::TokenError;

/// Why a control call did not give a snapshot.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The daemon could not be reached (no daemon, wrong path or address,
    /// no permission, the handshake timed out).
    #[error("cannot connect to {endpoint}: {source}")]
    Connect {
        /// The socket's path or the TCP address.
        endpoint: String,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// TCP or TLS: the daemon refused the token (missing, wrong, or not a
    /// steadfast hello).
    #[error("{endpoint} refused the token (is --token-file the daemon's token file?)")]
    Auth {
        /// The TCP address.
        endpoint: String,
    },
    /// The daemon answered busy (every slot is held by a connection with a
    /// call in flight) until the call's deadline; nothing was executed.
    #[error(
        "{endpoint} has too many control calls in flight; nothing was executed: try again later"
    )]
    Busy {
        /// The socket's path or the TCP address.
        endpoint: String,
    },
    /// The socket is not one this user may trust with a command (another
    /// user owns it, or its directory, or may write in its directory); no
    /// byte was sent to it.
    #[error("{path}: not trusted, nothing was sent: {why}")]
    Untrusted {
        /// The socket's path.
        path: PathBuf,
        /// Why, and the fix.
        why: String,
    },
    /// TLS: the daemon's certificate is not trusted (not signed by the CA
    /// given, expired, or not for the name dialled); nothing was sent.
    #[error("{endpoint}: the daemon's certificate is not trusted, nothing was sent: {why}")]
    ServerUntrusted {
        /// The address.
        endpoint: String,
        /// Why, in words.
        why: String,
    },
    /// TLS: the daemon refused this client's certificate (expired, from a
    /// CA it does not trust, missing, or given no role).
    #[error("{endpoint} refused this client's certificate: {why}")]
    CertificateRefused {
        /// The address.
        endpoint: String,
        /// Why, in words.
        why: String,
    },
    /// The daemon was reached and refused the command (or could not
    /// acknowledge it): the daemon's own [`CommandError`], unchanged.
    #[error("{0}")]
    Command(CommandError),
    /// The call failed on the way: the transport (the connection closed,
    /// the deadline passed, the server shed it). The next call dials again.
    #[error("the call failed: {0}")]
    Rpc(#[from] RpcError),
    /// The daemon answered something that is not a snapshot.
    #[error("the daemon's snapshot does not parse: {0}")]
    Malformed(#[from] serde_json::Error),
}

impl ClientError {
    /// Whether the daemon refused the call for this peer's role (a `read`
    /// peer asked for a command): [`CommandError::Forbidden`].
    #[must_use]
    pub const fn is_forbidden(&self) -> bool {
        matches!(self, Self::Command(CommandError::Forbidden { .. }))
    }

    /// The lifecycle's refusal, when the daemon answered one.
    #[must_use]
    pub const fn refused(&self) -> Option<&Refused> {
        match self {
            Self::Command(error) => error.refused(),
            _ => None,
        }
    }

    /// Whether the daemon was reached and refused (as opposed to not
    /// reached at all).
    #[must_use]
    pub const fn is_refusal(&self) -> bool {
        matches!(self, Self::Command(_))
    }

    /// Whether the deadline passed before an answer came: the call's, or
    /// the dial's (the daemon accepted no connection, or never said its
    /// first byte, in time: nothing was sent).
    #[must_use]
    pub fn is_deadline(&self) -> bool {
        match self {
            Self::Rpc(RpcError::DeadlineExceeded) => true,
            Self::Connect { source, .. } => source.kind() == io::ErrorKind::TimedOut,
            _ => false,
        }
    }

    /// Whether a dial that met this error gives up with it rather than
    /// dialling again until its deadline: everything but a daemon that
    /// said busy and a way in that was full. So an error of
    /// `client::socket_file` that ends a dial is the very answer a dial would
    /// give at that moment, without a runtime or a connect.
    #[must_use]
    pub fn ends_a_dial(&self) -> bool {
        !dial_again(self)
    }

    /// Whether the daemon is gone: it cannot be dialled, or the connection
    /// closed under the call (and, for a read, under its one retry).
    #[must_use]
    pub fn is_gone(&self) -> bool {
        match self {
            Self::Connect { .. } => !self.is_deadline(),
            _ => matches!(
                self,
                Self::Rpc(RpcError::Shutdown | RpcError::Channel(_) | RpcError::Send(_))
            ),
        }
    }
}

/// Whether a failed dial may be tried again: the daemon said busy before
/// anything was sent, or the way in was full.
pub(super) fn dial_again(error: &ClientError) -> bool {
    match error {
        ClientError::Busy { .. } => true,
        ClientError::Connect { source, .. } => matches!(
            source.kind(),
            io::ErrorKind::WouldBlock | io::ErrorKind::ConnectionAborted
        ),
        _ => false,
    }
}

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
    #[error(
        "{path} is {what}, not a socket; it is left alone: move it away (or remove it) \
         and start the daemon again"
    )]
    NotASocket {
        /// The socket's path.
        path: PathBuf,
        /// What is there: "a regular file", "a directory", "a symbolic link", …
        what: &'static str,
    },
    /// The socket's path is over `sun_path`'s limit and `/proc/self/fd`
    /// (the way around it) is not available.
    #[error(
        "the control socket path {path} is {len} bytes, over the {max}-byte limit of a unix \
         socket path, and /proc is not mounted to bind it through its directory: use a \
         shorter data directory path"
    )]
    PathTooLong {
        /// The socket's path.
        path: PathBuf,
        /// Its length in bytes.
        len: usize,
        /// The most a socket address holds.
        max: usize,
    },
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
    Token(#[from] TokenError),
    /// The TLS transport's certificate, key, client CA or tokens could not
    /// be used.
    #[error("the TLS control port: {0}")]
    Tls(#[from] TlsError),
}

/// A [`ControlError::Io`] about `path`.
pub(super) fn io_err(path: &Path) -> impl FnOnce(io::Error) -> ControlError + '_ {
    move |source| ControlError::Io {
        path: path.to_owned(),
        source,
    }
}

/// Why a TLS file or configuration could not be used.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A file could not be opened or read.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// What failed.
        #[source]
        source: io::Error,
    },
    /// The private key can be read or written by group or others.
    #[error("the private key {path} has mode {mode:o}; it must be 0600 (chmod 600 it)")]
    KeyTooOpen {
        /// The file.
        path: PathBuf,
        /// Its permission bits.
        mode: u32,
    },
    /// The private key belongs to another user.
    #[error("the private key {path} is owned by uid {owner}, not by this user ({me})")]
    KeyNotOwner {
        /// The file.
        path: PathBuf,
        /// Its owner.
        owner: u32,
        /// This process's effective uid.
        me: u32,
    },
    /// Not a regular file (a FIFO, a device, a directory).
    #[error("{0} is not a regular file")]
    NotAFile(PathBuf),
    /// Over 1 MiB: not read.
    #[error("{path} holds {len} bytes, over the 1 MiB limit for a PEM file")]
    TooLarge {
        /// The file.
        path: PathBuf,
        /// Its length (at least this much).
        len: u64,
    },
    /// The file holds no PEM item of the kind wanted, or a malformed one.
    #[error("{path} holds no usable {what} (PEM): {why}")]
    Pem {
        /// The file.
        path: PathBuf,
        /// What was looked for: "certificate", "private key".
        what: &'static str,
        /// Why.
        why: String,
    },
    /// rustls refused the configuration (a key that does not match the
    /// certificate, a CA it cannot use).
    #[error("the TLS configuration is refused: {0}")]
    Config(String),
    /// A token file of the configuration.
    #[error(transparent)]
    Token(#[from] TokenError),
    /// Neither a client CA nor a token: no client could ever be authorized.
    #[error("a TLS control port needs a client CA or a token file to authorize its clients")]
    NoClientAuth,
}
