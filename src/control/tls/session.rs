//! The TLS session of the control plane (the cargo feature `tls`):
//! rustls's configurations built from the files of a [`TlsServerConfig`],
//! the accept loop, the handshake and hello under the handshake pool, the
//! reloadable server and the client's dial.

use std::fmt;
use std::io::{self, Read};
use std::net::{IpAddr, SocketAddr};
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::{Arc, PoisonError, RwLock};
use std::time::Duration;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::server::WebPkiClientVerifier;
use rustls::{ClientConfig, RootCertStore, ServerConfig};
use steadfast_protocol::command::Role;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;
use tokio_rustls::{TlsAcceptor, TlsConnector};
use tokio_util::sync::CancellationToken;

#[cfg(doc)]
use steadfast_protocol::command::CommandError;

use super::{CertFingerprint, TlsServerConfig};
use crate::control::auth::{self, HELLO_LEN, Token};
use crate::control::bounds::{Evict, Over, Pool};
use crate::control::error::{ClientError, ControlError, TlsError};
use crate::control::limits::ServerLimits;
use crate::control::server::serve_admitted;
use crate::control::tcp::accept_handshakes;
use crate::embedding::SupervisorHandle;

/// How long a client waits for the TLS handshake and the hello's answer.
const CLIENT_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// The largest certificate, CA or key file read.
const MAX_PEM_LEN: u64 = 1 << 20;

/// The crypto provider every builder is given: rustls's `ring`.
fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

impl CertFingerprint {
    /// The fingerprint of a certificate's DER bytes.
    #[must_use]
    pub fn of_der(der: &[u8]) -> Self {
        let digest = ring::digest::digest(&ring::digest::SHA256, der);
        let mut bytes = [0u8; 32];
        bytes.copy_from_slice(digest.as_ref());
        Self(bytes)
    }

    /// The fingerprint of the first certificate in a PEM file.
    ///
    /// # Errors
    /// [`TlsError`] when the file cannot be read or holds no certificate.
    pub fn of_pem_file(path: impl AsRef<Path>) -> Result<Self, TlsError> {
        let path = path.as_ref();
        let chain = certificates(path)?;
        Ok(Self::of_der(chain[0].as_ref()))
    }
}

/// A file's bytes, opened by its path (a link is followed: a Kubernetes
/// secret's `tls.key -> ..data/tls.key`), checked on the opened descriptor:
/// a regular file of at most [`MAX_PEM_LEN`] bytes; with `private`, also
/// owned by this user and no permission for group or others (refused
/// before a byte is read).
fn read_pem_file(path: &Path, private: bool) -> Result<Vec<u8>, TlsError> {
    let io_err = |source: io::Error| TlsError::Io {
        path: path.to_owned(),
        source,
    };
    // O_NONBLOCK: a FIFO planted at the path is not waited on (it is then
    // refused as not a regular file).
    let fd = rustix::fs::open(
        path,
        rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::CLOEXEC | rustix::fs::OFlags::NONBLOCK,
        rustix::fs::Mode::empty(),
    )
    .map_err(|e| io_err(e.into()))?;
    let file = std::fs::File::from(fd);
    let meta = file.metadata().map_err(io_err)?;
    if !meta.is_file() {
        return Err(TlsError::NotAFile(path.to_owned()));
    }
    let too_large = |len: u64| TlsError::TooLarge {
        path: path.to_owned(),
        len,
    };
    if meta.len() > MAX_PEM_LEN {
        return Err(too_large(meta.len()));
    }
    if private {
        let mode = meta.mode() & 0o7777;
        if mode & 0o077 != 0 {
            return Err(TlsError::KeyTooOpen {
                path: path.to_owned(),
                mode,
            });
        }
        let me = rustix::process::geteuid().as_raw();
        if meta.uid() != me {
            return Err(TlsError::KeyNotOwner {
                path: path.to_owned(),
                owner: meta.uid(),
                me,
            });
        }
    }
    let mut bytes = Vec::new();
    file.take(MAX_PEM_LEN + 1)
        .read_to_end(&mut bytes)
        .map_err(io_err)?;
    if bytes.len() as u64 > MAX_PEM_LEN {
        return Err(too_large(bytes.len() as u64));
    }
    Ok(bytes)
}

/// The certificates in a PEM file (at least one).
fn certificates(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let bytes = read_pem_file(path, false)?;
    let pem = |why: String| TlsError::Pem {
        path: path.to_owned(),
        what: "certificate",
        why,
    };
    let chain = CertificateDer::pem_slice_iter(&bytes)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| pem(e.to_string()))?;
    if chain.is_empty() {
        return Err(pem("no CERTIFICATE block".to_owned()));
    }
    Ok(chain)
}

/// The private key in a PEM file (0600, ours).
fn private_key(path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    let bytes = read_pem_file(path, true)?;
    PrivateKeyDer::from_pem_slice(&bytes).map_err(|e| TlsError::Pem {
        path: path.to_owned(),
        what: "private key",
        why: e.to_string(),
    })
}

/// The roots in a CA file.
fn roots(path: &Path) -> Result<RootCertStore, TlsError> {
    let mut store = RootCertStore::empty();
    for cert in certificates(path)? {
        store.add(cert).map_err(|e| TlsError::Pem {
            path: path.to_owned(),
            what: "CA certificate",
            why: e.to_string(),
        })?;
    }
    Ok(store)
}

fn config_err(error: impl fmt::Display) -> TlsError {
    TlsError::Config(error.to_string())
}

/// One reading of a [`TlsServerConfig`]'s files.
struct Loaded {
    /// rustls's server configuration (certificate, key, client verifier).
    server: Arc<ServerConfig>,
    /// The tokens accepted inside the session, with their roles.
    tokens: Vec<(Token, Role)>,
    /// Client certificate roles (copied from the configuration).
    cert_roles: Vec<(CertFingerprint, Role)>,
    /// The role of a client certificate `cert_roles` does not name; `None`
    /// when no client CA is configured (no certificate can authorize).
    cert_role: Option<Role>,
}

fn load(config: &TlsServerConfig) -> Result<Loaded, TlsError> {
    let tokens = config
        .tokens
        .iter()
        .map(|(path, role)| Ok((Token::read_file(path)?, *role)))
        .collect::<Result<Vec<_>, TlsError>>()?;
    if config.client_ca.is_none() && tokens.is_empty() {
        return Err(TlsError::NoClientAuth);
    }
    if config.client_ca.is_none() && !config.cert_roles.is_empty() {
        return Err(TlsError::Config(
            "client certificate roles are given but no client CA: no client certificate \
             is asked for without one (add TlsServerConfig::client_ca)"
                .to_owned(),
        ));
    }
    let provider = provider();
    let builder = ServerConfig::builder_with_provider(Arc::clone(&provider))
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(config_err)?;
    let builder = match &config.client_ca {
        Some(ca) => {
            let mut verifier =
                WebPkiClientVerifier::builder_with_provider(Arc::new(roots(ca)?), provider);
            if !tokens.is_empty() {
                // A token client need not have a certificate; one that
                // presents a certificate must still present a valid one.
                verifier = verifier.allow_unauthenticated();
            }
            builder.with_client_cert_verifier(verifier.build().map_err(config_err)?)
        }
        None => builder.with_no_client_auth(),
    };
    let server = builder
        .with_single_cert(certificates(&config.cert)?, private_key(&config.key)?)
        .map_err(config_err)?;
    Ok(Loaded {
        server: Arc::new(server),
        tokens,
        cert_roles: config.cert_roles.clone(),
        cert_role: config.client_ca.as_ref().map(|_| config.cert_role),
    })
}

/// Read every file of `config` and build its TLS configuration, as
/// [`serve_tls`] does before it binds: what a daemon's command line checks
/// before it builds its supervisor (`daemon::cli`).
#[cfg(feature = "cli")]
pub(crate) fn check(config: &TlsServerConfig) -> Result<(), TlsError> {
    load(config).map(drop)
}

impl Loaded {
    /// The role `hello` (with the session's verified client certificate,
    /// if any) authorizes; `None`: refused.
    fn authorize(
        &self,
        hello: &[u8; HELLO_LEN],
        peer: Option<&CertificateDer<'_>>,
    ) -> Option<Role> {
        if auth::is_certificate_hello(hello) {
            let cert = peer?;
            let fingerprint = CertFingerprint::of_der(cert.as_ref());
            return self
                .cert_roles
                .iter()
                .find(|(listed, _)| *listed == fingerprint)
                .map(|(_, role)| *role)
                .or(self.cert_role);
        }
        // Every token is compared (no early exit); the highest role of a
        // token that matches wins.
        self.tokens
            .iter()
            .filter(|(token, _)| token.accepts(hello))
            .map(|(_, role)| *role)
            .max()
    }
}

/// The configuration as served now, and how to read it again.
struct Reloadable {
    config: TlsServerConfig,
    current: RwLock<Arc<Loaded>>,
}

impl Reloadable {
    fn current(&self) -> Arc<Loaded> {
        Arc::clone(&self.current.read().unwrap_or_else(PoisonError::into_inner))
    }

    fn reload(&self) -> Result<(), TlsError> {
        let loaded = load(&self.config)?;
        *self.current.write().unwrap_or_else(PoisonError::into_inner) = Arc::new(loaded);
        Ok(())
    }
}

/// A running TLS control server. Dropping it stops accepting and closes
/// every connection.
pub struct TlsServerGuard {
    /// The bound address (with the real port when asked for port 0).
    local_addr: SocketAddr,
    /// Cancels the accept loop and every connection.
    cancel: CancellationToken,
    /// The accept loop.
    task: JoinHandle<()>,
    /// The connections past the handshake (their slots).
    served: Arc<Pool<IpAddr>>,
    /// The configuration, reloadable.
    reloadable: Arc<Reloadable>,
    /// The handle's reload hook (held weakly there: it lives as long as
    /// this guard).
    _hook: Arc<dyn Fn() -> Result<(), String> + Send + Sync>,
}

impl fmt::Debug for TlsServerGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TlsServerGuard")
            .field("local_addr", &self.local_addr)
            .finish_non_exhaustive()
    }
}

impl TlsServerGuard {
    /// The address the server listens on.
    #[must_use]
    pub const fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// How many authorized connections are being served now.
    #[must_use]
    pub fn open_connections(&self) -> usize {
        self.served.len()
    }

    /// Read the certificate, key, client CA and token files again; new
    /// connections get them, established sessions go on as they are. On
    /// an error the configuration served stays the old one.
    ///
    /// # Errors
    /// [`TlsError`] naming the file that is wrong.
    pub fn reload(&self) -> Result<(), TlsError> {
        self.reloadable.reload()
    }

    /// Stop accepting, let served connections finish their calls for up
    /// to `grace`, then close the rest (as
    /// [`TcpServerGuard::shutdown`](crate::control::TcpServerGuard::shutdown)).
    pub async fn shutdown(mut self, grace: Duration) {
        crate::control::bounds::stop_serving(&mut self.task, &self.served, &self.cancel, grace)
            .await;
    }
}

impl Drop for TlsServerGuard {
    fn drop(&mut self) {
        self.cancel.cancel();
        self.task.abort();
    }
}

/// Serve `handle` over TLS 1.3 at `addr` with `config`'s certificate and
/// client authorization, and the default [`ServerLimits`]. Call inside a
/// tokio runtime. A reload of the daemon (SIGHUP, the `reload` method)
/// also reloads `config`'s files (see [`TlsServerGuard::reload`]).
///
/// # Errors
/// [`ControlError::Tls`] when a file is missing, too open or malformed;
/// [`ControlError::Bind`] when `addr` cannot be bound.
pub fn serve_tls(
    handle: SupervisorHandle,
    addr: SocketAddr,
    config: TlsServerConfig,
) -> Result<TlsServerGuard, ControlError> {
    serve_tls_with(handle, addr, config, ServerLimits::default())
}

/// [`serve_tls`] with explicit limits.
///
/// # Errors
/// As [`serve_tls`].
pub fn serve_tls_with(
    handle: SupervisorHandle,
    addr: SocketAddr,
    config: TlsServerConfig,
    limits: ServerLimits,
) -> Result<TlsServerGuard, ControlError> {
    let loaded = load(&config)?;
    let bind_err = |source| ControlError::Bind { addr, source };
    let listener = std::net::TcpListener::bind(addr).map_err(bind_err)?;
    listener.set_nonblocking(true).map_err(bind_err)?;
    let local_addr = listener.local_addr().map_err(bind_err)?;
    let listener = TcpListener::from_std(listener).map_err(bind_err)?;
    let reloadable = Arc::new(Reloadable {
        config,
        current: RwLock::new(Arc::new(loaded)),
    });
    let hook: Arc<dyn Fn() -> Result<(), String> + Send + Sync> = Arc::new({
        let reloadable = Arc::downgrade(&reloadable);
        move || {
            let Some(reloadable) = reloadable.upgrade() else {
                return Ok(());
            };
            match reloadable.reload() {
                Ok(()) => {
                    tracing::info!(%local_addr, "the TLS control port's files were re-read");
                    Ok(())
                }
                Err(error) => {
                    tracing::error!(
                        %local_addr,
                        %error,
                        "the TLS control port's files were not re-read; the old ones stay in use"
                    );
                    Err(format!(
                        "the TLS control port {local_addr} keeps its old files (certificate {}, \
                         key {}): {error}",
                        reloadable.config.cert.display(),
                        reloadable.config.key.display(),
                    ))
                }
            }
        }
    });
    handle.on_reload(Arc::downgrade(&hook));
    let cancel = CancellationToken::new();
    let served = Arc::new(
        Pool::new(
            limits.max_connections,
            limits.max_connections_per_peer,
            Evict::Idle(limits.evict_grace),
        )
        .with_operate_reserve(limits.operate_reserve),
    );
    let task = tokio::spawn(accept_loop(
        listener,
        handle,
        Arc::clone(&reloadable),
        limits,
        cancel.clone(),
        Arc::clone(&served),
    ));
    tracing::info!(%local_addr, "the TLS control port is listening");
    Ok(TlsServerGuard {
        local_addr,
        cancel,
        task,
        served,
        reloadable,
        _hook: hook,
    })
}

async fn accept_loop(
    listener: TcpListener,
    handle: SupervisorHandle,
    reloadable: Arc<Reloadable>,
    limits: ServerLimits,
    cancel: CancellationToken,
    served: Arc<Pool<IpAddr>>,
) {
    accept_handshakes(listener, &handle, &limits, &cancel, "tls", None, |stream, peer, greeting| {
        let handle = handle.clone();
        let loaded = reloadable.current();
        let cancel = cancel.clone();
        let served = Arc::clone(&served);
        tokio::spawn(async move {
            let evicted = greeting.evicted();
            let greeted = tokio::select! {
                () = cancel.cancelled() => return,
                () = evicted.cancelled() => Err("evicted from the handshake pool by newer connections"),
                greeted = tokio::time::timeout(
                    limits.handshake_timeout,
                    handshake(stream, &loaded, |role| served.admit_as(peer.ip(), role)),
                ) => greeted.unwrap_or(Err("no TLS handshake and hello within the handshake timeout")),
            };
            drop(greeting);
            match greeted {
                Ok((stream, slot, role)) => {
                    tracing::debug!(%peer, %role, "TLS control peer authorized");
                    serve_admitted(stream, handle, limits, cancel, slot, role).await;
                }
                // Debug, not warn: a flood of them is what the pool is for,
                // and a line each would flood the log too.
                Err(why) => tracing::debug!(%peer, why, "TLS control handshake failed; closed"),
            }
        });
    })
    .await;
}

/// The TLS handshake (the client's certificate verified by rustls, if it
/// sent one), then the hello read inside the session and answered: with
/// the peer's role and a slot of the served pool for that role; else why
/// not.
async fn handshake<T>(
    stream: TcpStream,
    loaded: &Loaded,
    admit: impl FnOnce(Role) -> Result<T, Over>,
) -> Result<(tokio_rustls::server::TlsStream<TcpStream>, T, Role), &'static str> {
    let acceptor = TlsAcceptor::from(Arc::clone(&loaded.server));
    let mut tls = acceptor
        .accept(stream)
        .await
        .map_err(|_| "the TLS handshake failed (or the client's certificate was refused)")?;
    let mut hello = [0u8; HELLO_LEN];
    tls.read_exact(&mut hello)
        .await
        .map_err(|_| "the connection ended inside the hello")?;
    let peer = tls
        .get_ref()
        .1
        .peer_certificates()
        .and_then(|chain| chain.first());
    let Some(role) = loaded.authorize(&hello, peer) else {
        let _ = answer(&mut tls, auth::ANSWER_REFUSED).await;
        return Err("the hello authorized nothing (no accepted token or certificate)");
    };
    let Ok(slot) = admit(role) else {
        let _ = answer(&mut tls, auth::ANSWER_BUSY).await;
        return Err("too many control connections busy; answered busy");
    };
    answer(&mut tls, auth::ANSWER_ACCEPTED)
        .await
        .map_err(|_| "could not answer the hello")?;
    Ok((tls, slot, role))
}

async fn answer<S: tokio::io::AsyncWrite + Unpin>(stream: &mut S, byte: u8) -> io::Result<()> {
    stream.write_all(&[byte]).await?;
    stream.flush().await
}

/// A client's TLS configuration: the CA it trusts the daemon's certificate
/// from, and its own certificate and key (for mutual TLS), read from files.
/// Cheap to clone; two are equal when they are the same reading.
#[derive(Clone)]
pub struct TlsClient {
    /// rustls's client configuration.
    config: Arc<ClientConfig>,
    /// Whether a client certificate is presented.
    has_cert: bool,
}

impl fmt::Debug for TlsClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TlsClient")
            .field("client_certificate", &self.has_cert)
            .finish_non_exhaustive()
    }
}

impl PartialEq for TlsClient {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.config, &other.config)
    }
}

impl Eq for TlsClient {}

impl TlsClient {
    /// Trust daemon certificates from the CA in `ca` (PEM); present the
    /// certificate and key in `cert_and_key` (PEM; the key 0600, ours), if
    /// given.
    ///
    /// # Errors
    /// [`TlsError`] naming the file that is missing, too open or malformed.
    pub fn from_files(ca: &Path, cert_and_key: Option<(&Path, &Path)>) -> Result<Self, TlsError> {
        let builder = ClientConfig::builder_with_provider(provider())
            .with_protocol_versions(&[&rustls::version::TLS13])
            .map_err(config_err)?
            .with_root_certificates(roots(ca)?);
        let config = match cert_and_key {
            Some((cert, key)) => builder
                .with_client_auth_cert(certificates(cert)?, private_key(key)?)
                .map_err(config_err)?,
            None => builder.with_no_client_auth(),
        };
        Ok(Self {
            config: Arc::new(config),
            has_cert: cert_and_key.is_some(),
        })
    }
}

/// What a TLS failure the client saw means, in words, and whose side it is.
fn classify(endpoint: &str, server_name: &str, error: io::Error) -> ClientError {
    use rustls::{AlertDescription, CertificateError};
    let rustls_error = error
        .get_ref()
        .and_then(|inner| inner.downcast_ref::<rustls::Error>())
        .cloned();
    let endpoint = endpoint.to_owned();
    match rustls_error {
        Some(rustls::Error::InvalidCertificate(why)) => {
            let why = match why {
                CertificateError::UnknownIssuer | CertificateError::BadSignature => {
                    "it is not signed by the CA given (--ca)".to_owned()
                }
                CertificateError::Expired | CertificateError::ExpiredContext { .. } => {
                    "it has expired".to_owned()
                }
                CertificateError::NotValidForName
                | CertificateError::NotValidForNameContext { .. } => {
                    format!("it is not for {server_name} (--server-name names the one it is for)")
                }
                other => format!("{other:?}"),
            };
            ClientError::ServerUntrusted { endpoint, why }
        }
        Some(rustls::Error::AlertReceived(alert)) => {
            let why = match alert {
                AlertDescription::CertificateExpired => "it has expired".to_owned(),
                AlertDescription::UnknownCA | AlertDescription::BadCertificate => {
                    "it is not signed by a CA the daemon trusts".to_owned()
                }
                AlertDescription::CertificateRequired => {
                    "the daemon requires a client certificate (--cert and --key)".to_owned()
                }
                AlertDescription::CertificateRevoked => "it is revoked".to_owned(),
                other => format!("the daemon's TLS alert {other:?}"),
            };
            ClientError::CertificateRefused { endpoint, why }
        }
        Some(other) => ClientError::Connect {
            endpoint,
            source: io::Error::new(io::ErrorKind::InvalidData, other.to_string()),
        },
        // Closed or reset inside the handshake: the handshake pool made
        // room for newer connections. Nothing was sent past the hello: say
        // so, so the caller may dial again.
        None if matches!(
            error.kind(),
            io::ErrorKind::ConnectionReset | io::ErrorKind::UnexpectedEof
        ) =>
        {
            ClientError::Connect {
                endpoint,
                source: io::Error::new(
                    io::ErrorKind::ConnectionAborted,
                    "the server closed the connection during the handshake",
                ),
            }
        }
        None => ClientError::Connect {
            endpoint,
            source: error,
        },
    }
}

/// The client's side: connect to `addr`, verify the daemon's certificate
/// for `server_name`, present the token (or, without one, the certificate
/// hello) and hand back the session once the server accepted it.
pub(crate) async fn dial(
    addr: SocketAddr,
    server_name: &str,
    client: &TlsClient,
    token: Option<&Token>,
) -> Result<tokio_rustls::client::TlsStream<TcpStream>, ClientError> {
    let endpoint = addr.to_string();
    let connect_err = |source| ClientError::Connect {
        endpoint: endpoint.clone(),
        source,
    };
    let timed_out = || connect_err(io::Error::from(io::ErrorKind::TimedOut));
    let name = ServerName::try_from(server_name.to_owned()).map_err(|_| {
        connect_err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{server_name} is not a server name or an IP address"),
        ))
    })?;
    let stream = tokio::time::timeout(CLIENT_HANDSHAKE_TIMEOUT, TcpStream::connect(addr))
        .await
        .map_err(|_| timed_out())?
        .map_err(connect_err)?;
    let _ = stream.set_nodelay(true);
    let connector = TlsConnector::from(Arc::clone(&client.config));
    let session = async {
        let mut tls = connector.connect(name, stream).await?;
        let hello = token.map_or_else(auth::certificate_hello, Token::hello);
        tls.write_all(&hello).await?;
        tls.flush().await?;
        let mut answer = [0u8; 1];
        let n = tls.read(&mut answer).await?;
        Ok::<_, io::Error>((tls, n, answer[0]))
    };
    let (tls, n, answer) = tokio::time::timeout(CLIENT_HANDSHAKE_TIMEOUT, session)
        .await
        .map_err(|_| timed_out())?
        .map_err(|error| classify(&endpoint, server_name, error))?;
    match (n, answer) {
        (1, auth::ANSWER_ACCEPTED) => Ok(tls),
        (1, auth::ANSWER_REFUSED) if token.is_some() => Err(ClientError::Auth { endpoint }),
        (1, auth::ANSWER_REFUSED) => Err(ClientError::CertificateRefused {
            endpoint,
            why: if client.has_cert {
                "the daemon gives it no role".to_owned()
            } else {
                "none was presented, and no token (--cert and --key, or --token-file)".to_owned()
            },
        }),
        (1, auth::ANSWER_BUSY) => Err(ClientError::Busy { endpoint }),
        (0, _) => Err(connect_err(io::Error::new(
            io::ErrorKind::ConnectionAborted,
            "the server closed the connection during the handshake",
        ))),
        (_, other) => Err(connect_err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("not a steadfast control port (it answered {other:#04x})"),
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fingerprints_round_trip_as_hex_with_or_without_colons() {
        let fingerprint = CertFingerprint::of_der(b"not really a certificate");
        let hex = fingerprint.to_hex();
        assert_eq!(CertFingerprint::from_hex(&hex), Some(fingerprint));
        let colons = hex
            .as_bytes()
            .chunks(2)
            .map(|pair| std::str::from_utf8(pair).expect("ascii").to_uppercase())
            .collect::<Vec<_>>()
            .join(":");
        assert_eq!(CertFingerprint::from_hex(&colons), Some(fingerprint));
        assert_eq!(CertFingerprint::from_hex(&hex[..62]), None);
        assert_eq!(
            CertFingerprint::from_hex(&format!("{}zz", &hex[..62])),
            None
        );
    }

    #[test]
    fn a_configuration_that_authorizes_no_one_is_refused() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let config = TlsServerConfig::new(tmp.path().join("cert"), tmp.path().join("key"));
        assert!(matches!(load(&config), Err(TlsError::NoClientAuth)));
        let token = tmp.path().join("token");
        Token::create_file(&token).expect("a token");
        let roles_without_ca = config
            .token_file(&token, Role::Read)
            .cert_role(CertFingerprint::of_der(b"x"), Role::Operate);
        let refused = load(&roles_without_ca).err().expect("refused");
        assert!(
            matches!(&refused, TlsError::Config(why) if why.contains("no client CA")),
            "{refused:?}"
        );
    }
}
