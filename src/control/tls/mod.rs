//! The control plane over TLS 1.3 (opt-in; `spec/control.md`, "TLS"): the
//! same tarpc service and frames as the Unix socket, inside a TLS session
//! (rustls through tokio-rustls, the `ring` provider passed explicitly to
//! every builder: no process-wide default provider is installed or read).
//!
//! The daemon proves itself with its certificate. A client is authorized
//! inside the session, before any frame is decoded, by one of:
//! - a client certificate from the configured CA (mutual TLS), then the
//!   40-byte certificate hello ([`auth::certificate_hello`]); its role is
//!   the one given to its SHA-256 [`CertFingerprint`], else the CA's role;
//! - a token ([`Token`]'s 40-byte hello, as over plain TCP), whose role is
//!   the token file's.
//!
//! The server answers the hello with one byte, as over TCP (`0` accepted,
//! `1` refused, `2` busy). A peer's [`Role`] decides what it may call: a
//! `read` peer's command is answered [`CommandError::Forbidden`]
//! (`steadfast_protocol::control::forbidden`), never run.
//!
//! Invariants, and the tests that check them (`tests/it/control_tls.rs`):
//! - Nothing is decoded before the TLS handshake completed, the client
//!   certificate (if any) verified, and the hello authorized the peer:
//!   `a_certificate_from_another_ca_is_refused`, `an_expired_client_certificate_is_refused`,
//!   `no_client_certificate_is_refused`, `a_token_inside_tls_is_accepted_and_a_wrong_one_refused`.
//! - The TLS handshake and the hello together run under
//!   [`ServerLimits::handshake_timeout`] and hold a slot of the handshake
//!   pool only (as TCP's: the oldest is closed to make room), never an
//!   authorized client's: `a_pre_handshake_flood_does_not_lock_the_operator_out`.
//! - An authorized peer takes a served slot in its role: `read` peers never
//!   hold the slots kept for `operate` ([`ServerLimits::operate_reserve`]):
//!   `read_peers_cannot_take_the_operate_slots`.
//! - A `read` peer's command is refused, typed, and not run; its reads are
//!   answered: `a_read_only_peer_reads_but_is_refused_a_command`.
//! - A peer that closes without TLS's `close_notify` (a killed
//!   `steadfastctl watch`) is closed at once with its calls in flight, as
//!   on the other transports: `a_killed_tls_watcher_gives_its_slot_back_at_once`.
//! - The private key is refused when group or others may read it, or
//!   another user owns it, before its content is read:
//!   `a_loose_private_key_is_refused`.
//! - `TlsServerGuard::reload` (and SIGHUP, the `reload` method, through
//!   the handle's reload hooks) re-reads every file; new connections get the
//!   new certificate, established sessions go on; a reload that fails keeps
//!   the old configuration: `a_reload_serves_the_new_certificate_and_keeps_sessions`.
//!   Through the handle, such a failure is the reload's answer (an error
//!   naming the file and why), the snapshot's `error` until a reload whose
//!   files are all taken, and `steadfast_reload_failures_total`:
//!   `a_refused_reload_is_an_error_until_a_good_one`.

//!
//! The configuration types ([`TlsServerConfig`], [`CertFingerprint`],
//! [`TlsError`]) are always here, so a daemon's command line reads the same
//! with or without TLS; the session itself (rustls and its `ring`
//! provider: serving, dialing, loading the files) is built only with the
//! cargo feature `tls`, off by default, so a daemon that serves no TLS
//! carries none of it (`session`).

use std::fmt;
use std::path::PathBuf;

use steadfast_protocol::command::Role;

#[cfg(doc)]
use super::auth::{self, Token};
pub use super::error::TlsError;
#[cfg(doc)]
use super::limits::ServerLimits;
#[cfg(doc)]
use steadfast_protocol::command::CommandError;

#[cfg(feature = "tls")]
mod session;
#[cfg(feature = "tls")]
pub use session::{TlsClient, TlsServerGuard, serve_tls, serve_tls_with};
#[cfg(feature = "tls")]
pub(crate) use session::{check, dial};

/// A certificate's SHA-256 over its DER bytes: how a client certificate is
/// given a role of its own (`openssl x509 -noout -fingerprint -sha256`
/// prints the same bytes, colon-separated).
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct CertFingerprint([u8; 32]);

impl fmt::Debug for CertFingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "CertFingerprint({})", self.to_hex())
    }
}

impl fmt::Display for CertFingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_hex())
    }
}

impl CertFingerprint {
    /// 64 lowercase hex digits.
    #[must_use]
    pub fn to_hex(&self) -> String {
        use fmt::Write as _;
        self.0.iter().fold(String::with_capacity(64), |mut out, b| {
            let _ = write!(out, "{b:02x}");
            out
        })
    }

    /// Parse 64 hex digits, colons allowed between bytes (as `openssl`
    /// prints them), case ignored.
    #[must_use]
    pub fn from_hex(text: &str) -> Option<Self> {
        let digits: Vec<u8> = text.trim().bytes().filter(|b| *b != b':').collect();
        if digits.len() != 64 {
            return None;
        }
        let mut bytes = [0u8; 32];
        for (byte, pair) in bytes.iter_mut().zip(digits.chunks_exact(2)) {
            let hex = std::str::from_utf8(pair).ok()?;
            *byte = u8::from_str_radix(hex, 16).ok()?;
        }
        Some(Self(bytes))
    }
}

/// The old name of [`CertFingerprint`].
#[deprecated(since = "0.1.0", note = "renamed to `CertFingerprint`")]
pub type Fingerprint = CertFingerprint;

/// What a TLS control port serves and whom it lets in. Paths are read at
/// `serve_tls` and again at each reload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsServerConfig {
    /// The daemon's certificate chain (PEM, leaf first).
    pub cert: PathBuf,
    /// Its private key (PEM; mode 0600, owned by the daemon's user).
    pub key: PathBuf,
    /// The CA (PEM, one or more certificates) whose client certificates
    /// are accepted (mutual TLS); `None`: no client certificate is asked
    /// for, clients present a token.
    pub client_ca: Option<PathBuf>,
    /// The role of a client certificate from `client_ca` that
    /// `cert_roles` does not name.
    pub cert_role: Role,
    /// Roles of particular client certificates, by fingerprint.
    pub cert_roles: Vec<(CertFingerprint, Role)>,
    /// Token files (each 0600, as [`Token::read_file`]) accepted inside
    /// the session, each with its role.
    pub tokens: Vec<(PathBuf, Role)>,
}

impl TlsServerConfig {
    /// Serve with `cert` and `key`; add a client CA or a token file.
    #[must_use]
    pub fn new(cert: impl Into<PathBuf>, key: impl Into<PathBuf>) -> Self {
        Self {
            cert: cert.into(),
            key: key.into(),
            client_ca: None,
            cert_role: Role::Operate,
            cert_roles: Vec::new(),
            tokens: Vec::new(),
        }
    }

    /// Accept client certificates from the CA in `ca` (PEM), with `role`
    /// unless [`Self::cert_role`] names the certificate.
    #[must_use]
    pub fn client_ca(mut self, ca: impl Into<PathBuf>, role: Role) -> Self {
        self.client_ca = Some(ca.into());
        self.cert_role = role;
        self
    }

    /// Give the client certificate with `fingerprint` the role `role`.
    #[must_use]
    pub fn cert_role(mut self, fingerprint: CertFingerprint, role: Role) -> Self {
        self.cert_roles.push((fingerprint, role));
        self
    }

    /// Accept the token in `path` inside the session, with `role`.
    #[must_use]
    pub fn token_file(mut self, path: impl Into<PathBuf>, role: Role) -> Self {
        self.tokens.push((path.into(), role));
        self
    }
}
