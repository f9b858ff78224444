//! The control plane over real loopback TLS 1.3 (`spec/control.md`, "TLS"
//! and "Roles"): a real in-process [`steadfast::Supervisor`] served by
//! `steadfast::control::serve_tls`, called by `ControlClient`, by the real
//! `steadfastctl`, or by raw TCP where the test is about a hostile peer.
//! Every certificate is made here, with rcgen, into a temporary directory.

use crate::support::common;
use crate::support::pki;
use crate::support::processes;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use common::*;
use pki::{Ca, write_private};
use rcgen::KeyPair;
use steadfast::Hold;
use steadfast::control::auth::Token;
use steadfast::control::{
    CertFingerprint, ClientError, ControlClient, ControlError, Endpoint, Role, ServerLimits,
    TlsClient, TlsError, TlsServerConfig, TlsServerGuard, serve_tls, serve_tls_with,
};
use steadfast::{CommandError, ExitIntent, SupervisorHandle};
use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;

fn loopback() -> SocketAddr {
    "127.0.0.1:0".parse().expect("an address")
}

/// The usual set: a server CA and its certificate, a client CA and an
/// operator's client certificate.
struct Pki {
    server_ca: Ca,
    client_ca: Ca,
    server: (PathBuf, PathBuf),
    operator: (PathBuf, PathBuf),
}

impl Pki {
    fn new(dir: &Path) -> Self {
        let server_ca = Ca::new(dir, "server-ca");
        let client_ca = Ca::new(dir, "client-ca");
        let server = server_ca.leaf(dir, "daemon", true, false);
        let operator = client_ca.leaf(dir, "operator", false, false);
        Self {
            server_ca,
            client_ca,
            server,
            operator,
        }
    }

    /// The server's configuration: mutual TLS with the client CA
    /// (operate).
    fn mutual(&self) -> TlsServerConfig {
        TlsServerConfig::new(&self.server.0, &self.server.1)
            .client_ca(&self.client_ca.pem, Role::Operate)
    }

    /// A client trusting the server CA, presenting the operator's
    /// certificate: the client most tests dial with.
    fn as_operator(&self) -> TlsClient {
        self.client(Some(&self.operator))
    }

    /// A client trusting the server CA, presenting `cert` (or nothing).
    fn client(&self, cert: Option<&(PathBuf, PathBuf)>) -> TlsClient {
        TlsClient::from_files(
            &self.server_ca.pem,
            cert.map(|(c, k)| (c.as_path(), k.as_path())),
        )
        .expect("a client configuration")
    }
}

/// A running supervisor over `dir`, served over TLS at loopback.
async fn running_on_tls(
    dir: &Path,
    config: TlsServerConfig,
    limits: ServerLimits,
) -> (
    tokio::task::JoinHandle<ExitIntent>,
    SupervisorHandle,
    TlsServerGuard,
) {
    let (run, handle) = supervise(dir, Switch::new(Some(good())).source(), None);
    let server = serve_tls_with(handle.clone(), loopback(), config, limits).expect("serves");
    until(&handle, "running", running).await;
    (run, handle, server)
}

async fn connect(
    addr: SocketAddr,
    tls: TlsClient,
    token: Option<Token>,
) -> Result<ControlClient, ClientError> {
    ControlClient::connect_within(Endpoint::tls(addr, tls, token), Duration::from_secs(20)).await
}

/// The error of a client that presents `cert` (made in the test's dir, beside
/// the usual set; `None`: no certificate) to a daemon serving mutual TLS,
/// which must refuse it (`what` says what was presented).
async fn refused_by_mutual_tls(
    what: &str,
    cert: impl FnOnce(&Path, &Pki) -> Option<(PathBuf, PathBuf)>,
) -> ClientError {
    let tmp = tempfile::tempdir().expect("tempdir");
    let pki = Pki::new(tmp.path());
    let (run, handle, server) =
        running_on_tls(tmp.path(), pki.mutual(), ServerLimits::default()).await;
    let cert = cert(tmp.path(), &pki);
    let refused = connect(server.local_addr(), pki.client(cert.as_ref()), None)
        .await
        .expect_err(what);
    exit(run, &handle, ExitIntent::Halt).await;
    refused
}

/// Mutual TLS with a certificate from the client CA: every method, a
/// command included, over a session whose server certificate the client
/// verified for 127.0.0.1.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_good_client_certificate_operates() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let pki = Pki::new(tmp.path());
    let (run, handle, server) =
        running_on_tls(tmp.path(), pki.mutual(), ServerLimits::default()).await;
    let client = connect(server.local_addr(), pki.as_operator(), None)
        .await
        .expect("a good certificate");
    let snapshot = client.snapshot().await.expect("answered");
    assert!(running(&snapshot));
    assert_eq!(snapshot.pid, std::process::id());
    let stopped = client.stop(Hold::None).await.expect("operate: stop");
    assert_eq!(stopped.lifecycle.name(), "stopped");
    client.start().await.expect("operate: start");
    until(&handle, "running again", running).await;
    assert!(
        client
            .metrics()
            .await
            .expect("metrics")
            .contains("transport=\"tls\"")
    );
    exit(run, &handle, ExitIntent::Halt).await;
}

/// A client certificate signed by a CA the daemon does not trust is
/// refused in the handshake: a typed error, nothing served.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_certificate_from_another_ca_is_refused() {
    let refused = refused_by_mutual_tls("another CA's certificate", |dir, _| {
        Some(Ca::new(dir, "stranger-ca").leaf(dir, "stranger", false, false))
    })
    .await;
    assert!(
        matches!(refused, ClientError::CertificateRefused { .. }),
        "{refused:?}"
    );
    assert!(
        refused
            .to_string()
            .contains("not signed by a CA the daemon trusts"),
        "{refused}"
    );
}

/// An expired client certificate from the right CA is refused, and says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_expired_client_certificate_is_refused() {
    let refused = refused_by_mutual_tls("an expired certificate", |dir, pki| {
        Some(pki.client_ca.leaf(dir, "expired", false, true))
    })
    .await;
    assert!(
        matches!(&refused, ClientError::CertificateRefused { why, .. } if why.contains("expired")),
        "{refused:?}"
    );
}

/// No client certificate (and no token) where the daemon requires one.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn no_client_certificate_is_refused() {
    let refused = refused_by_mutual_tls("no certificate", |_, _| None).await;
    assert!(
        matches!(&refused, ClientError::CertificateRefused { why, .. } if why.contains("requires a client certificate")),
        "{refused:?}"
    );
}

/// The client refuses a daemon whose certificate another CA signed, or
/// that is not for the name dialled: typed, and nothing is sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_untrusted_server_certificate_is_refused_by_the_client() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let pki = Pki::new(tmp.path());
    let (run, handle, server) =
        running_on_tls(tmp.path(), pki.mutual(), ServerLimits::default()).await;
    let addr = server.local_addr();
    // Trusting the client CA only: the daemon's certificate is a stranger.
    let wrong_ca = TlsClient::from_files(
        &pki.client_ca.pem,
        Some((pki.operator.0.as_path(), pki.operator.1.as_path())),
    )
    .expect("a client");
    let untrusted = connect(addr, wrong_ca, None).await.expect_err("untrusted");
    assert!(
        matches!(&untrusted, ClientError::ServerUntrusted { why, .. } if why.contains("not signed by the CA given")),
        "{untrusted:?}"
    );
    assert!(!untrusted.is_refusal());
    // The right CA, the wrong name.
    let endpoint = Endpoint::Tls {
        addr,
        server_name: "kvd.example.org".to_owned(),
        tls: pki.as_operator(),
        token: None,
    };
    let misnamed = ControlClient::connect_within(endpoint, Duration::from_secs(20))
        .await
        .expect_err("not for that name");
    assert!(
        matches!(&misnamed, ClientError::ServerUntrusted { why, .. } if why.contains("kvd.example.org")),
        "{misnamed:?}"
    );
    // By the name it is for: answered.
    let endpoint = Endpoint::Tls {
        addr,
        server_name: "localhost".to_owned(),
        tls: pki.as_operator(),
        token: None,
    };
    let client = ControlClient::connect_within(endpoint, Duration::from_secs(20))
        .await
        .expect("named right");
    client.snapshot().await.expect("answered");
    exit(run, &handle, ExitIntent::Halt).await;
}

/// A token inside the session (no client certificate): the right one is
/// served, a wrong one refused (`ClientError::Auth`).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_token_inside_tls_is_accepted_and_a_wrong_one_refused() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let pki = Pki::new(tmp.path());
    let token_path = tmp.path().join("control.token");
    let token = Token::create_file(&token_path).expect("a token");
    let config = TlsServerConfig::new(&pki.server.0, &pki.server.1)
        .client_ca(&pki.client_ca.pem, Role::Operate)
        .token_file(&token_path, Role::Operate);
    let (run, handle, server) = running_on_tls(tmp.path(), config, ServerLimits::default()).await;
    let addr = server.local_addr();
    let client = connect(addr, pki.client(None), Some(token))
        .await
        .expect("the token");
    assert!(running(&client.snapshot().await.expect("answered")));
    client.stop(Hold::None).await.expect("operate");
    let wrong = connect(addr, pki.client(None), Some(Token::from_bytes([0x55; 32])))
        .await
        .expect_err("a wrong token");
    assert!(matches!(wrong, ClientError::Auth { .. }), "{wrong:?}");
    // Neither a token nor a certificate, where a token would do.
    let nothing = connect(addr, pki.client(None), None)
        .await
        .expect_err("nothing presented");
    assert!(
        matches!(nothing, ClientError::CertificateRefused { .. }),
        "{nothing:?}"
    );
    // A certificate still works beside tokens.
    connect(addr, pki.as_operator(), None)
        .await
        .expect("a certificate")
        .snapshot()
        .await
        .expect("answered");
    exit(run, &handle, ExitIntent::Halt).await;
}

/// A `read` peer (a certificate given `read` by its fingerprint, and a
/// `read` token) reads — snapshot, watch, journal, metrics, config show —
/// and is refused every command, typed (`forbidden`), with nothing run.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_read_only_peer_reads_but_is_refused_a_command() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let pki = Pki::new(tmp.path());
    let viewer = pki.client_ca.leaf(tmp.path(), "viewer", false, false);
    let viewer_print = CertFingerprint::of_pem_file(&viewer.0).expect("a fingerprint");
    let token_path = tmp.path().join("read.token");
    let read_token = Token::create_file(&token_path).expect("a token");
    let config = pki
        .mutual()
        .cert_role(viewer_print, Role::Read)
        .token_file(&token_path, Role::Read);
    let (run, handle, server) = running_on_tls(tmp.path(), config, ServerLimits::default()).await;
    let addr = server.local_addr();
    for client in [
        connect(addr, pki.client(Some(&viewer)), None)
            .await
            .expect("the viewer"),
        connect(addr, pki.client(None), Some(read_token.clone()))
            .await
            .expect("the read token"),
    ] {
        let snapshot = client.snapshot().await.expect("a read");
        assert!(running(&snapshot));
        client
            .watch(&snapshot, Duration::ZERO)
            .await
            .expect("watch is a read");
        client.journal(5).await.expect("journal is a read");
        client.metrics().await.expect("metrics is a read");
        client
            .config_show(None)
            .await
            .expect("config show is a read");
        let refused = client.stop(Hold::None).await.expect_err("a command");
        assert!(refused.is_forbidden(), "{refused:?}");
        assert!(refused.is_refusal());
        let ClientError::Command(CommandError::Forbidden {
            method,
            role,
            needed,
        }) = &refused
        else {
            panic!("{refused:?}");
        };
        assert_eq!(
            (method.as_str(), *role, *needed),
            ("stop", Role::Read, Role::Operate)
        );
        for refused in [
            client.exit(ExitIntent::Halt).await.err(),
            client.restart().await.err(),
            client.config_set("x", "1").await.err(),
            client.reinit_prepare().await.err(),
            client.reload().await.err(),
        ] {
            let refused = refused.expect("refused");
            assert!(refused.is_forbidden(), "{refused:?}");
        }
        assert!(running(&handle.snapshot()), "nothing was run");
    }
    // The operator's certificate still operates.
    let operator = connect(addr, pki.as_operator(), None)
        .await
        .expect("the operator");
    operator.stop(Hold::None).await.expect("operate");
    exit(run, &handle, ExitIntent::Halt).await;
}

/// Hundreds of TCP connections that never start (or never finish) a TLS
/// handshake, opened all the while: they hold slots of the handshake pool
/// only, the oldest are closed to make room, and the operator's calls are
/// all answered meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_pre_handshake_flood_does_not_lock_the_operator_out() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let pki = Pki::new(tmp.path());
    let (run, handle, server) =
        running_on_tls(tmp.path(), pki.mutual(), ServerLimits::default()).await;
    let addr = server.local_addr();
    let mut first = TcpStream::connect(addr).await.expect("connect");
    let stop = tokio_util::sync::CancellationToken::new();
    let count = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let flood = tokio::spawn({
        let stop = stop.clone();
        let count = std::sync::Arc::clone(&count);
        async move {
            let mut held = std::collections::VecDeque::new();
            let mut opened = 0usize;
            while !stop.is_cancelled() {
                if let Ok(mut stream) = TcpStream::connect(addr).await {
                    // Every other one says half a ClientHello's header.
                    if opened.is_multiple_of(2) {
                        let _ = tokio::io::AsyncWriteExt::write_all(
                            &mut stream,
                            &[0x16, 0x03, 0x01, 0x40],
                        )
                        .await;
                    }
                    held.push_back(stream);
                    opened += 1;
                    count.store(opened, std::sync::atomic::Ordering::SeqCst);
                }
                if held.len() > 600 {
                    held.pop_front();
                }
                tokio::task::yield_now().await;
            }
            opened
        }
    });
    // Past the handshake pool's share of one address (128) several times
    // over before the operator comes.
    tokio::time::timeout(PATIENCE, async {
        while count.load(std::sync::atomic::Ordering::SeqCst) < 500 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("the flood got going");
    // The first silent connection is closed (evicted, or at the deadline),
    // unanswered.
    let mut buf = [0u8; 64];
    let closed = tokio::time::timeout(PATIENCE, first.read(&mut buf))
        .await
        .expect("the silent connection is closed");
    assert!(matches!(closed, Ok(0) | Err(_)), "{closed:?}");
    for _ in 0..5 {
        let client = connect(addr, pki.as_operator(), None)
            .await
            .expect("the operator gets in during the flood");
        assert!(running(&client.snapshot().await.expect("answered")));
    }
    stop.cancel();
    let opened = flood.await.expect("the flood task");
    assert!(opened >= 500, "the flood opened {opened} connections");
    exit(run, &handle, ExitIntent::Halt).await;
}

/// The daemon's certificate replaced on disk and reloaded — by the
/// `reload` method (SIGHUP's path) — is what new connections get; an
/// established session goes on; a reload over a bad key keeps the old
/// configuration and says why.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_reload_serves_the_new_certificate_and_keeps_sessions() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let pki = Pki::new(tmp.path());
    let (run, handle, server) =
        running_on_tls(tmp.path(), pki.mutual(), ServerLimits::default()).await;
    let addr = server.local_addr();
    let established = connect(addr, pki.as_operator(), None)
        .await
        .expect("the first certificate");
    established.snapshot().await.expect("answered");

    // A new server CA and certificate, written over the served files.
    let new_ca = Ca::new(tmp.path(), "server-ca-2");
    let (cert, key) = new_ca.leaf(tmp.path(), "daemon-2", true, false);
    std::fs::copy(&cert, &pki.server.0).expect("the new certificate");
    write_private(&pki.server.1, &std::fs::read_to_string(&key).expect("key"));
    established.reload().await.expect("the reload method");

    let trusting_new = TlsClient::from_files(
        &new_ca.pem,
        Some((pki.operator.0.as_path(), pki.operator.1.as_path())),
    )
    .expect("a client");
    connect(addr, trusting_new.clone(), None)
        .await
        .expect("new connections get the new certificate")
        .snapshot()
        .await
        .expect("answered");
    let old = connect(addr, pki.as_operator(), None)
        .await
        .expect_err("the old certificate is no longer served");
    assert!(
        matches!(old, ClientError::ServerUntrusted { .. }),
        "{old:?}"
    );
    // The session made before the reload is the same connection: had it
    // been dropped, this client (trusting only the old CA) could not dial
    // again.
    assert!(running(
        &established.snapshot().await.expect("still served")
    ));

    // A bad key: the reload fails, naming it, and the new certificate
    // stays served.
    write_private(&pki.server.1, "not a key");
    let failed = server.reload().expect_err("a bad key");
    assert!(matches!(failed, TlsError::Pem { .. }), "{failed:?}");
    assert!(failed.to_string().contains("daemon.key"), "{failed}");
    connect(addr, trusting_new, None)
        .await
        .expect("still the new certificate")
        .snapshot()
        .await
        .expect("answered");
    exit(run, &handle, ExitIntent::Halt).await;
}

/// The value of the counter `name` (a sample line `name value`) in the
/// supervisor's OpenMetrics text; 0 when it is absent.
fn counter(handle: &SupervisorHandle, name: &str) -> f64 {
    handle
        .metrics()
        .lines()
        .find_map(|line| line.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or(0.0)
}

/// `spec/control.md`, "The snapshot's error" and "TLS": a reload whose
/// key is refused — missing, too open, another user's, garbage, empty,
/// encrypted, or the key of another certificate — is an error of the
/// `reload` call that names the key file and why; the snapshot's `error`
/// says it, `steadfast_reload_failures_total` counts it, and the old
/// certificate is still served to new clients. A reload whose files are
/// all good then clears the error.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_refused_reload_is_an_error_until_a_good_one() {
    use std::os::unix::fs::PermissionsExt;
    let tmp = tempfile::tempdir().expect("tempdir");
    let pki = Pki::new(tmp.path());
    let (run, handle, server) =
        running_on_tls(tmp.path(), pki.mutual(), ServerLimits::default()).await;
    let addr = server.local_addr();
    let operator = connect(addr, pki.as_operator(), None)
        .await
        .expect("the operator connects");
    let good_key = std::fs::read_to_string(&pki.server.1).expect("the key");
    let other_key = KeyPair::generate().expect("a key").serialize_pem();
    let key = pki.server.1.clone();
    let root = rustix::process::geteuid().is_root();
    // Each variant: its name, and how it spoils the key.
    type Spoil<'a> = (&'static str, Box<dyn Fn() + 'a>);
    let variants: Vec<Spoil<'_>> = vec![
        (
            "missing",
            Box::new(|| std::fs::remove_file(&key).expect("rm the key")),
        ),
        (
            "0644",
            Box::new(|| {
                write_private(&key, &good_key);
                std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o644))
                    .expect("chmod");
            }),
        ),
        ("garbage", Box::new(|| write_private(&key, "not a key\n"))),
        ("empty", Box::new(|| write_private(&key, ""))),
        (
            "encrypted",
            Box::new(|| {
                write_private(
                    &key,
                    "-----BEGIN ENCRYPTED PRIVATE KEY-----\nMIGbMFcGCSqGSIb3DQEFDTBKMCkGCSqGSIb3\n\
                     -----END ENCRYPTED PRIVATE KEY-----\n",
                );
            }),
        ),
        ("mismatched", Box::new(|| write_private(&key, &other_key))),
        (
            "foreign-owned",
            Box::new(|| {
                write_private(&key, &good_key);
                if root {
                    std::os::unix::fs::chown(&key, Some(65534), Some(65534)).expect("chown");
                } else {
                    // Not root: a key nobody may read stands in.
                    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o000))
                        .expect("chmod");
                }
            }),
        ),
    ];
    let mut failures = 0.0;
    for (name, make) in &variants {
        make();
        let refused = operator.reload().await.expect_err(name);
        failures += 1.0;
        let said = refused.to_string();
        eprintln!("{name}: {said}");
        assert!(
            matches!(&refused, ClientError::Command(CommandError::Failed(_))),
            "{name}: a typed failure: {refused:?}"
        );
        assert!(said.contains("daemon.key"), "{name}: names the key: {said}");
        let shown = handle.snapshot().error.unwrap_or_default();
        assert!(
            shown.contains("daemon.key") && shown.contains("keeps its old files"),
            "{name}: the snapshot says it: {shown:?}"
        );
        assert_eq!(
            counter(&handle, "steadfast_reload_failures_total"),
            failures,
            "{name}: counted"
        );
        connect(addr, pki.as_operator(), None)
            .await
            .unwrap_or_else(|e| panic!("{name}: the old certificate is still served: {e}"))
            .snapshot()
            .await
            .expect("answered");
    }
    write_private(&key, &good_key);
    let answer = operator.reload().await.expect("a good reload");
    assert_eq!(answer.error, None, "a good reload clears its error");
    assert_eq!(handle.snapshot().error, None);
    assert_eq!(
        counter(&handle, "steadfast_reload_failures_total"),
        failures,
        "a good reload is not a failure"
    );
    assert!(running(&handle.snapshot()), "the runtime ran throughout");
    exit(run, &handle, ExitIntent::Halt).await;
}

/// A private key group or others may read is refused before it is read,
/// with the fix; so is a configuration that authorizes no one.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_loose_private_key_is_refused() {
    use std::os::unix::fs::PermissionsExt;
    let tmp = tempfile::tempdir().expect("tempdir");
    let pki = Pki::new(tmp.path());
    let (run, handle) = supervise(tmp.path(), Switch::new(Some(good())).source(), None);
    std::fs::set_permissions(&pki.server.1, std::fs::Permissions::from_mode(0o640)).expect("chmod");
    let refused = serve_tls(handle.clone(), loopback(), pki.mutual()).expect_err("a loose key");
    assert!(
        matches!(
            &refused,
            ControlError::Tls(TlsError::KeyTooOpen { mode: 0o640, .. })
        ),
        "{refused:?}"
    );
    assert!(refused.to_string().contains("chmod 600"), "{refused}");
    // The client's key is held to the same rule.
    std::fs::set_permissions(&pki.operator.1, std::fs::Permissions::from_mode(0o644))
        .expect("chmod");
    let client = TlsClient::from_files(
        &pki.server_ca.pem,
        Some((pki.operator.0.as_path(), pki.operator.1.as_path())),
    )
    .expect_err("a loose client key");
    assert!(matches!(client, TlsError::KeyTooOpen { .. }), "{client:?}");
    std::fs::set_permissions(&pki.server.1, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    let nobody = serve_tls(
        handle.clone(),
        loopback(),
        TlsServerConfig::new(&pki.server.0, &pki.server.1),
    )
    .expect_err("no client CA, no token");
    assert!(
        matches!(nobody, ControlError::Tls(TlsError::NoClientAuth)),
        "{nobody:?}"
    );
    exit(run, &handle, ExitIntent::Halt).await;
}

/// A path as an argument (the test's paths are UTF-8).
fn s(path: &Path) -> String {
    path.to_str().expect("utf-8").to_owned()
}

/// `steadfastctl`'s flags to reach `addr` over TLS, trusting `ca` and
/// presenting `cert`.
fn tls_flags(addr: &str, ca: &Path, cert: &(PathBuf, PathBuf)) -> Vec<String> {
    vec![
        "--tls".to_owned(),
        addr.to_owned(),
        "--ca".to_owned(),
        s(ca),
        "--cert".to_owned(),
        s(&cert.0),
        "--key".to_owned(),
        s(&cert.1),
    ]
}

async fn steadfastctl(args: Vec<String>) -> std::process::Output {
    processes::ctl_async(args).await
}

/// The real `steadfastctl` over TLS: `--tls --ca --cert --key` status and
/// a command; a read-only certificate is refused the command (exit 3,
/// `forbidden`); an untrusted daemon is named as such; the same through
/// `--client-config FILE`.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn steadfastctl_over_tls() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let pki = Pki::new(tmp.path());
    let viewer = pki.client_ca.leaf(tmp.path(), "viewer", false, false);
    let config = pki.mutual().cert_role(
        CertFingerprint::of_pem_file(&viewer.0).expect("a fingerprint"),
        Role::Read,
    );
    let (run, handle, server) = running_on_tls(tmp.path(), config, ServerLimits::default()).await;
    let addr = server.local_addr().to_string();
    let tls_args = |cert: &(PathBuf, PathBuf), ca: &Path| tls_flags(&addr, ca, cert);
    let with = |mut base: Vec<String>, rest: &[&str]| {
        base.extend(rest.iter().map(|&a| a.to_owned()));
        base
    };

    let out = steadfastctl(with(
        tls_args(&pki.operator, &pki.server_ca.pem),
        &["status", "--json"],
    ))
    .await;
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let snapshot: steadfast::protocol::snapshot::Snapshot =
        serde_json::from_slice(&out.stdout).expect("the JSON is a snapshot");
    assert!(running(&snapshot));

    let out = steadfastctl(with(tls_args(&viewer, &pki.server_ca.pem), &["status"])).await;
    assert_eq!(out.status.code(), Some(0), "a read peer reads");
    let out = steadfastctl(with(tls_args(&viewer, &pki.server_ca.pem), &["stop"])).await;
    assert_eq!(out.status.code(), Some(3), "a refusal");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("forbidden") && stderr.contains("read"),
        "{stderr}"
    );
    assert!(running(&handle.snapshot()), "nothing was run");

    let out = steadfastctl(with(
        tls_args(&pki.operator, &pki.client_ca.pem),
        &["status"],
    ))
    .await;
    assert_eq!(out.status.code(), Some(4), "status: unknown");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("certificate is not trusted"), "{stderr}");

    // The same from a client config file.
    let file = tmp.path().join("client.toml");
    std::fs::write(
        &file,
        format!(
            "tls = \"{addr}\"\nca = \"{}\"\ncert = \"{}\"\nkey = \"{}\"\n",
            s(&pki.server_ca.pem),
            s(&pki.operator.0),
            s(&pki.operator.1)
        ),
    )
    .expect("write");
    let out = steadfastctl(vec![
        "--client-config".to_owned(),
        s(&file),
        "stop".to_owned(),
    ])
    .await;
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(handle.snapshot().lifecycle.name(), "stopped");

    let usage = steadfastctl(vec!["--tls".to_owned(), addr.clone(), "status".to_owned()]).await;
    assert_eq!(usage.status.code(), Some(2), "--tls needs --ca");
    exit(run, &handle, ExitIntent::Halt).await;
}

/// A `steadfastctl watch` over TLS, killed (so its connection ends without
/// TLS's `close_notify`) while its long-poll is in flight, gives its slot
/// back at once: with one slot in all and no eviction, the next client is
/// served well within the watch's 60 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_killed_tls_watcher_gives_its_slot_back_at_once() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let pki = Pki::new(tmp.path());
    let limits = ServerLimits {
        max_connections: 1,
        max_connections_per_peer: 1,
        evict_grace: Duration::from_secs(3600),
        ..ServerLimits::default()
    };
    let (run, handle, server) = running_on_tls(tmp.path(), pki.mutual(), limits).await;
    let mut watcher = std::process::Command::new(processes::steadfastctl())
        .args(tls_flags(
            &server.local_addr().to_string(),
            &pki.server_ca.pem,
            &pki.operator,
        ))
        .arg("watch")
        .stdout(std::process::Stdio::null())
        .spawn()
        .expect("steadfastctl watch");
    tokio::time::timeout(PATIENCE, async {
        while server.open_connections() == 0 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("the watcher is served");
    // Its first answer is the whole snapshot; then it long-polls.
    tokio::time::sleep(Duration::from_millis(300)).await;
    watcher.kill().expect("kill");
    let _ = watcher.wait();
    let client = ControlClient::connect_within(
        Endpoint::tls(server.local_addr(), pki.as_operator(), None),
        Duration::from_secs(20),
    )
    .await
    .expect("the killed watcher's slot came back");
    client.snapshot().await.expect("answered");
    drop(client);
    exit(run, &handle, ExitIntent::Halt).await;
}

/// Read-only peers (a dashboard's certificate) that fill every slot they
/// may hold cannot take the slots kept for `operate`: with 3 slots, one
/// kept for operate, and no eviction (a long grace), the third viewer is
/// answered busy and the operator's `stop` gets in. Before the fix: the
/// viewers took every slot and the operator was answered busy.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn read_peers_cannot_take_the_operate_slots() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let pki = Pki::new(tmp.path());
    let viewer = pki.client_ca.leaf(tmp.path(), "viewer", false, false);
    let viewer_print = CertFingerprint::of_pem_file(&viewer.0).expect("a fingerprint");
    let limits = ServerLimits {
        max_connections: 3,
        max_connections_per_peer: 3,
        operate_reserve: 1,
        evict_grace: Duration::from_secs(3600),
        ..ServerLimits::default()
    };
    let config = pki.mutual().cert_role(viewer_print, Role::Read);
    let (run, handle, server) = running_on_tls(tmp.path(), config, limits).await;
    let addr = server.local_addr();
    let mut viewers = Vec::new();
    for _ in 0..3 {
        match ControlClient::connect_within(
            Endpoint::tls(addr, pki.client(Some(&viewer)), None),
            Duration::from_secs(2),
        )
        .await
        {
            Ok(client) => {
                client.snapshot().await.expect("a viewer reads");
                viewers.push(client);
            }
            Err(error) => {
                assert!(matches!(error, ClientError::Busy { .. }), "{error:?}");
                break;
            }
        }
    }
    eprintln!("{} viewers admitted of 3 slots", viewers.len());
    let operator = ControlClient::connect_within(
        Endpoint::tls(addr, pki.as_operator(), None),
        Duration::from_secs(5),
    )
    .await
    .expect("the operator gets a slot beside the viewers");
    let stopped = operator.stop(Hold::None).await.expect("operate");
    assert_eq!(stopped.lifecycle.name(), "stopped");
    assert_eq!(viewers.len(), 2, "the viewers' share is 2 of 3");
    drop(viewers);
    exit(run, &handle, ExitIntent::Halt).await;
}

/// `daemon::run_with` with `control_tls(…)`: the port answers a client
/// certificate, and an `exit` over TLS ends the daemon.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_daemon_serves_tls_through_its_options() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let pki = Pki::new(tmp.path());
    let (supervisor, handle) = steadfast::Supervisor::builder(tmp.path(), TestService::default())
        .config(Switch::new(Some(good())).source())
        .timings(test_timings())
        .build()
        .expect("a supervisor");
    let addr = std::net::TcpListener::bind(loopback())
        .and_then(|l| l.local_addr())
        .expect("a free port");
    let options = steadfast::daemon::DaemonOptions::new()
        .signals(false)
        .control_tls(addr, pki.mutual());
    let daemon = tokio::spawn(steadfast::daemon::run_with(
        supervisor,
        handle.clone(),
        options,
    ));
    until(&handle, "running", running).await;
    let client = connect(addr, pki.as_operator(), None)
        .await
        .expect("the daemon's TLS port answers");
    client.exit(ExitIntent::Halt).await.expect("exit over TLS");
    let intent = tokio::time::timeout(PATIENCE, daemon)
        .await
        .expect("the daemon ends")
        .expect("task")
        .expect("the control planes were served");
    assert_eq!(intent, steadfast::daemon::ExitReason::Halt);
}

/// `steadfastctl --inventory` over TLS: two daemons served over mutual
/// TLS beside one on its Unix socket, seen by one call; an entry whose CA
/// does not sign its daemon's certificate is that daemon's own failure,
/// named, and a read-only certificate's entry is refused a command while
/// the others restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_inventory_reaches_daemons_over_tls() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let pki = Pki::new(tmp.path());
    let viewer = pki.client_ca.leaf(tmp.path(), "viewer", false, false);
    let (a_dir, b_dir, c_dir) = (
        tmp.path().join("a"),
        tmp.path().join("b"),
        tmp.path().join("c"),
    );
    for dir in [&a_dir, &b_dir, &c_dir] {
        std::fs::create_dir(dir).expect("mkdir");
    }
    let read_only = pki.mutual().cert_role(
        CertFingerprint::of_pem_file(&viewer.0).expect("a fingerprint"),
        Role::Read,
    );
    let (run_a, a, server_a) = running_on_tls(&a_dir, read_only, ServerLimits::default()).await;
    let (run_b, b, server_b) = running_on_tls(&b_dir, pki.mutual(), ServerLimits::default()).await;
    let (run_c, c) = supervise(&c_dir, Switch::new(Some(good())).source(), None);
    let _socket =
        steadfast::control::serve_unix(c.clone(), steadfast::control::socket_path(&c_dir))
            .expect("serves the socket");
    until(&c, "running", running).await;

    let entry = |name: &str, addr: SocketAddr, ca: &Path, cert: &(PathBuf, PathBuf)| {
        format!(
            "[[daemon]]\nname = \"{name}\"\ntls = \"{addr}\"\nca = \"{}\"\ncert = \"{}\"\nkey = \"{}\"\n",
            s(ca),
            s(&cert.0),
            s(&cert.1)
        )
    };
    let inventory = tmp.path().join("fleet.toml");
    let write = |wrong_ca: bool| {
        let ca_of_b = if wrong_ca {
            &pki.client_ca.pem
        } else {
            &pki.server_ca.pem
        };
        std::fs::write(
            &inventory,
            format!(
                "{}{}[[daemon]]\nname = \"c\"\ndata_dir = \"{}\"\n",
                entry("a", server_a.local_addr(), &pki.server_ca.pem, &viewer),
                entry("b", server_b.local_addr(), ca_of_b, &pki.operator),
                s(&c_dir)
            ),
        )
        .expect("write the inventory");
    };
    let fleet = |args: &[&str]| {
        let mut all = vec!["--inventory".to_owned(), s(&inventory)];
        all.extend(args.iter().map(|&a| a.to_owned()));
        steadfastctl(all)
    };

    write(false);
    let out = fleet(&["status", "--json"]).await;
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let daemons = doc["daemons"].as_array().expect("daemons");
    assert_eq!(daemons.len(), 3);
    assert_eq!(daemons[0]["transport"], "tls");
    assert_eq!(daemons[0]["state"], "running", "{doc}");
    assert_eq!(daemons[1]["state"], "running", "{doc}");
    assert_eq!(daemons[2]["state"], "running", "{doc}");

    // The read-only certificate of `a` is refused the restart; b and c
    // restart.
    let attempt = |h: &SupervisorHandle| match h.snapshot().lifecycle {
        steadfast::protocol::lifecycle::LifecycleState::Running { attempt, .. } => {
            Some(attempt.get())
        }
        _ => None,
    };
    let before = (attempt(&a), attempt(&b), attempt(&c));
    let out = fleet(&["restart", "--all", "--wait"]).await;
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    assert!(stderr.contains("1 refused: a"), "{stderr}");
    let line_a = stdout
        .lines()
        .find(|l| l.starts_with('a'))
        .expect("a's line");
    assert!(line_a.contains("forbidden"), "{stdout}");
    until(&b, "running again", running).await;
    until(&c, "running again", running).await;
    assert_eq!(attempt(&a), before.0, "a was not restarted");
    assert_ne!(attempt(&b), before.1, "b was restarted");
    assert_ne!(attempt(&c), before.2, "c was restarted");

    // b's entry trusts the wrong CA: b alone is unreachable, named.
    write(true);
    let out = fleet(&["status", "--json"]).await;
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(4), "{stderr}");
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(doc["unreachable"], serde_json::json!(["b"]), "{doc}");
    assert!(
        doc["daemons"][1]["error"]
            .as_str()
            .is_some_and(|e| e.contains("not trusted")),
        "{doc}"
    );

    for (run, handle) in [(run_a, a), (run_b, b), (run_c, c)] {
        exit(run, &handle, ExitIntent::Halt).await;
    }
}
