//! The control plane (`spec/control.md`): a tarpc service over a Unix
//! socket, or opt-in over TCP behind a token handshake, so an operator
//! (`steadfastctl`) or a script drives a daemon.
//!
//! - [`serve_unix`] serves a [`crate::SupervisorHandle`] on a socket (mode
//!   0600, peer uid checked before any frame is read).
//! - [`serve_tcp`] serves it on a TCP port (loopback by default); a client
//!   presents a token before any frame is decoded.
//! - `serve_tls` serves it over TLS 1.3 (rustls): mutual TLS or a token
//!   inside the session, each peer with a role (`read`, `operate`);
//!   certificates reloaded with the daemon ([`TlsServerConfig`]).
//! - [`ControlClient`] calls any of them, and reconnects.
//! - [`auth`]: the token ([`auth::Token`]: its 0600 file, the handshake
//!   bytes, the constant-time comparison) and why plain TCP is loopback
//!   only.
//! - [`codec`]: the frames both sides use (bincode 1.3.3, 1 MiB limit,
//!   deadlines clamped on the server).
//!
//! Each name has one path: the servers, the client and their settings
//! here; the token and the hello's bytes in [`auth`], the frames in
//! [`codec`]. The service trait and its wire values live in the pure core,
//! [`steadfast_protocol::control`]. Checked end to end by
//! `tests/it/control.rs`, `tests/it/control_tcp.rs`, `tests/it/control_tls.rs` and
//! `tests/it/ctl.rs`.

pub mod auth;
// Real sockets under real deadlines: the simulation serves no connection.
#[allow(clippy::disallowed_methods)]
mod bounds;
// Real sockets under real deadlines: the simulation serves no connection.
#[allow(clippy::disallowed_methods)]
mod client;
// Real sockets under real deadlines: the simulation serves no connection.
#[allow(clippy::disallowed_methods)]
pub mod codec;
// Real sockets under real deadlines: the simulation serves no connection.
#[allow(clippy::disallowed_methods)]
pub(crate) mod conn;
mod error;
mod execute;
mod limits;
mod repoll;
// Real sockets under real deadlines: the simulation serves no connection.
#[allow(clippy::disallowed_methods)]
mod server;
mod tcp;
// `daemon::cli` checks a TLS config before the supervisor is built.
pub(crate) mod tls;

pub use client::{
    ClientError, ControlClient, DEFAULT_CALL_TIMEOUT, Endpoint, SocketFile, socket_file,
};
/// The service the commands are carried out by, for the commands whose
/// impls live above the control plane (`reload`, `replace`).
pub(crate) use execute::ControlService;
pub use server::{
    ControlError, MAX_SOCKET_PATH, SOCKET_CHECK, SOCKET_MODE, ServerGuard, ServerLimits,
    serve_unix, serve_unix_with,
};
pub use steadfast_protocol::command::Role;
pub use steadfast_protocol::control::WireSnapshot;
pub use tcp::{LOOPBACK, TcpServerGuard, serve_tcp, serve_tcp_with};
#[allow(deprecated)] // the old name of `CertFingerprint`, for one release
pub use tls::Fingerprint;
pub use tls::{CertFingerprint, TlsError, TlsServerConfig};
#[cfg(feature = "tls")]
pub use tls::{TlsClient, TlsServerGuard, serve_tls, serve_tls_with};

/// One connection's control service over a supervisor, without a
/// transport: a command is answered by the same code a socket's connection
/// runs ([`steadfast_protocol::control::dispatch`] and each command's
/// `Execute`), its role check aside. What a simulation reads as an
/// operator's `status --json` and `watch` (it serves no socket); not for
/// embedding.
#[doc(hidden)]
pub struct InProcess(execute::ControlService);

impl InProcess {
    /// A new connection to `handle`.
    #[must_use]
    pub fn new(handle: crate::embedding::SupervisorHandle) -> Self {
        Self(execute::ControlService::new(handle))
    }

    /// `command`'s answer on this connection.
    ///
    /// # Errors
    /// The command's own error, as a socket's connection answers it.
    ///
    /// # Panics
    /// Never: the registry answers every command in its own variant.
    pub async fn call<C: steadfast_protocol::control::Registered>(
        &self,
        command: C,
    ) -> steadfast_protocol::control::Answer<C> {
        let response =
            steadfast_protocol::control::dispatch(self.0.clone(), command.into_request()).await;
        match C::answer(response) {
            Ok(answer) => answer,
            Err(other) => panic!("the registry answered {other:?} out of turn"),
        }
    }
}

/// Where the control socket of the daemon over `data_dir` is:
/// `<data_dir>/.steadfast/control.sock`.
#[must_use]
pub fn socket_path(data_dir: &std::path::Path) -> std::path::PathBuf {
    steadfast_actors::control_dir::ControlDir::under(data_dir).join("control.sock")
}

/// Why [`read_journal`] could not read a journal: the control directory's
/// error, naming the file (mid-file corruption, a bad header, a link or a
/// file that is not ours).
pub use steadfast_actors::control_dir::ControlDirError as JournalReadError;

/// The last `limit` attempts the journal of `data_dir` records, read
/// directly from the file — for when no daemon answers (`steadfastctl
/// journal --data-dir DIR`). Read-only: no link is followed, nothing is
/// created or written, the data dir's lock is neither taken nor needed, so
/// it is safe beside a running daemon too. A torn tail (an append in
/// flight) is ignored; mid-file corruption is an error.
///
/// # Errors
/// [`JournalReadError`], naming the file.
pub fn read_journal(
    data_dir: &std::path::Path,
    limit: usize,
) -> Result<Vec<steadfast_protocol::history::JournalAttempt>, JournalReadError> {
    let records = steadfast_actors::control_dir::read_journal_of(data_dir)?;
    Ok(steadfast_protocol::history::attempts(&records, limit))
}
