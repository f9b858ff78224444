//! The control plane over its real Unix socket (`spec/control.md`): a real
//! in-process [`steadfast::Supervisor`] running the test service, served by
//! `steadfast::control::serve_unix`, called by `ControlClient` — or by raw
//! bytes, where the test is about what a hostile or broken peer sends.

use crate::support::common;
use crate::support::common::nz;
use crate::support::processes;

use std::io::{Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixStream as StdUnixStream;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bincode::Options;
use common::*;
use serde::Serialize;
use steadfast::control::codec::options;
use steadfast::control::{
    ClientError, ControlClient, ServerGuard, ServerLimits, serve_unix, serve_unix_with,
};
use steadfast::protocol::control::{ControlRequest, ControlResponse, MAX_FRAME_LEN};
use steadfast::protocol::lifecycle::{LifecycleState, RefusedBecause, StopReason};
use steadfast::{CommandError, ExitIntent, Hold, SupervisorHandle};

fn socket(dir: &Path) -> std::path::PathBuf {
    steadfast_actors::control_dir::ControlDir::under(dir).join("control.sock")
}

fn serve(dir: &Path, handle: &SupervisorHandle) -> ServerGuard {
    serve_unix(handle.clone(), socket(dir)).expect("the control socket binds")
}

/// [`serve`] with `limits`.
fn serve_with(dir: &Path, handle: &SupervisorHandle, limits: ServerLimits) -> ServerGuard {
    serve_unix_with(handle.clone(), socket(dir), limits).expect("serves")
}

/// What the server sends a raw connection to the socket under `dir`
/// before it closes it (read off the runtime, for `PATIENCE` at most).
async fn said_before_the_close(dir: &Path) -> Vec<u8> {
    let path = socket(dir);
    tokio::task::spawn_blocking(move || {
        let mut raw = StdUnixStream::connect(&path).expect("connect");
        raw.set_read_timeout(Some(PATIENCE)).expect("timeout");
        let mut said = Vec::new();
        let _ = raw.read_to_end(&mut said);
        said
    })
    .await
    .expect("task")
}

async fn connect(dir: &Path) -> ControlClient {
    ControlClient::connect_unix(socket(dir))
        .await
        .expect("connects")
}

/// Every method of the service, end to end, answers what the handle would.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_method_end_to_end() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let switch = Switch::new(Some(good()));
    let (run, handle) = supervise(tmp.path(), switch.source(), None);
    let _server = serve(tmp.path(), &handle);
    let client = connect(tmp.path()).await;

    let up = until(&handle, "running", running).await;
    let seen = client.snapshot().await.expect("snapshot");
    assert!(seen.version >= up.version);
    assert!(running(&seen));
    assert_eq!(seen.pid, std::process::id());

    // watch: nothing newer arrives, so the current one comes back after the wait.
    let started = std::time::Instant::now();
    let same = client
        .watch(&seen, Duration::from_millis(300))
        .await
        .expect("watch");
    assert_eq!(same.version, seen.version);
    assert!(started.elapsed() >= Duration::from_millis(250));

    // watch: a stop publishes newer snapshots; the long-poll returns the first.
    let watcher = {
        let client = client.clone();
        let after = seen.clone();
        tokio::spawn(async move { client.watch(&after, Duration::from_secs(20)).await })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    let stopped = client.stop(Hold::None).await.expect("stop");
    assert!(matches!(
        stopped.lifecycle,
        LifecycleState::Stopped {
            reason: StopReason::OperatorRequest,
            ..
        }
    ));
    assert!(!stopped.hold);
    let newer = watcher.await.expect("task").expect("watch");
    assert!(newer.version > seen.version);

    client.start().await.expect("start");
    until(&handle, "running again", running).await;

    let held = client
        .stop(Hold::AcrossRelaunch)
        .await
        .expect("stop --hold");
    assert!(held.hold);
    client.start().await.expect("start clears the hold");
    let up = until(&handle, "running a third time", running).await;
    assert!(!up.hold);

    client.restart().await.expect("restart");
    until(&handle, "running after restart", |s| {
        running(s) && s.attempts.last().is_some_and(|a| a.attempt == nz(4))
    })
    .await;

    // retry: a held failure (a config that does not resolve), then a retry.
    // A restart into it is refused by the preflight and the
    // runtime keeps serving; a forced one drains into the held failure.
    switch.set(None);
    let refusal = client
        .restart()
        .await
        .expect_err("a restart into a bad config is refused");
    assert!(refusal.to_string().contains("config_invalid"), "{refusal}");
    assert!(
        running(&handle.snapshot()),
        "{:?}",
        handle.snapshot().lifecycle
    );
    client
        .restart_forced()
        .await
        .expect("restart --force into a bad config");
    until(&handle, "a held failure", failed).await;
    switch.set(Some(good()));
    client.retry().await.expect("retry");
    until(&handle, "running after retry", running).await;

    let exiting = client.exit(ExitIntent::Relaunch).await.expect("exit");
    assert!(
        matches!(
            exiting.lifecycle,
            LifecycleState::Draining { .. } | LifecycleState::Exiting { .. }
        ),
        "{:?}",
        exiting.lifecycle
    );
    let ended = tokio::time::timeout(PATIENCE, run)
        .await
        .expect("ends")
        .expect("task");
    assert_eq!(ended, ExitIntent::Relaunch);
}

/// A refusal crosses the wire as the lifecycle's typed reason.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_refusal_arrives_typed() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (run, handle) = supervise(tmp.path(), Switch::new(Some(good())).source(), None);
    let _server = serve(tmp.path(), &handle);
    let client = connect(tmp.path()).await;
    until(&handle, "running", running).await;

    let refused = client.start().await.expect_err("already running");
    let ClientError::Command(CommandError::Refused(refused)) = &refused else {
        panic!("not a refusal: {refused:?}");
    };
    assert_eq!(refused.reason, RefusedBecause::RuntimeRunning);
    assert_eq!(refused.state, "running");
    assert!(!refused.event.is_empty());

    let refused = client.retry().await.expect_err("nothing failed");
    assert!(
        matches!(&refused, ClientError::Command(CommandError::Refused(r)) if r.reason == RefusedBecause::RuntimeNotFailed),
        "{refused:?}"
    );
    assert!(refused.is_refusal());
    exit(run, &handle, ExitIntent::Halt).await;
}

/// Nothing listening is a connect error, never a refusal.
#[tokio::test]
async fn no_daemon_is_a_connect_error() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let error = ControlClient::connect_unix(tmp.path().join("nothing.sock"))
        .await
        .expect_err("nothing listens");
    assert!(matches!(error, ClientError::Connect { .. }), "{error:?}");
    assert!(!error.is_refusal());
}

/// The socket is 0600 inside the 0700 control directory, and a stale
/// socket file left by a crashed daemon is replaced.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_socket_is_0600_and_the_control_dir_0700() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (run, handle) = supervise(tmp.path(), Switch::new(Some(good())).source(), None);
    let path = socket(tmp.path());
    // A stale socket, bound and abandoned (as a crashed daemon leaves it).
    drop(std::os::unix::net::UnixListener::bind(&path).expect("stale bind"));
    assert!(path.exists());

    let server = serve(tmp.path(), &handle);
    let mode = |p: &Path| std::fs::metadata(p).expect("stat").permissions().mode() & 0o7777;
    assert_eq!(mode(&path), 0o600);
    assert_eq!(mode(path.parent().expect("dir")), 0o700);
    connect(tmp.path()).await.snapshot().await.expect("answers");

    drop(server);
    assert!(!path.exists(), "the guard removes its socket");
    exit(run, &handle, ExitIntent::Halt).await;
}

/// 16 clients, each on its own connection, 1,000 snapshot calls each: all
/// answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn many_clients_are_all_answered() {
    const CLIENTS: usize = 16;
    const CALLS: usize = 1_000;
    let tmp = tempfile::tempdir().expect("tempdir");
    let (run, handle) = supervise(tmp.path(), Switch::new(Some(good())).source(), None);
    let _server = serve(tmp.path(), &handle);
    until(&handle, "running", running).await;

    let mut tasks = Vec::new();
    for _ in 0..CLIENTS {
        let client = connect(tmp.path()).await;
        tasks.push(tokio::spawn(async move {
            let mut answered = 0;
            for _ in 0..CALLS {
                client.snapshot().await.expect("answered");
                answered += 1;
            }
            answered
        }));
    }
    let mut total = 0;
    for task in tasks {
        total += task.await.expect("task");
    }
    assert_eq!(total, CLIENTS * CALLS);
    exit(run, &handle, ExitIntent::Halt).await;
}

/// Read until the peer closes (or `PATIENCE` passes): whether it closed.
fn closed_by_peer(stream: &mut StdUnixStream) -> bool {
    stream
        .set_read_timeout(Some(PATIENCE))
        .expect("read timeout");
    let mut buf = [0u8; 4096];
    loop {
        match stream.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return true,
            Err(_) => return false,
        }
    }
}

/// A frame whose length prefix is over 1 MiB closes that connection before
/// anything is buffered; other clients are still answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_frame_over_the_limit_closes_that_connection_only() {
    // It counts panics (or measures RSS) process-wide: alone in a process.
    if !alone_in_process(
        module_path!(),
        "a_frame_over_the_limit_closes_that_connection_only",
    ) {
        return;
    }
    count_panics();
    let tmp = tempfile::tempdir().expect("tempdir");
    let (run, handle) = supervise(tmp.path(), Switch::new(Some(good())).source(), None);
    let _server = serve(tmp.path(), &handle);
    let other = connect(tmp.path()).await;
    until(&handle, "running", running).await;

    let path = socket(tmp.path());
    let closed = tokio::task::spawn_blocking(move || {
        let mut stream = StdUnixStream::connect(&path).expect("connect");
        let len = u32::try_from(MAX_FRAME_LEN + 1).expect("fits");
        stream.write_all(&len.to_be_bytes()).expect("prefix");
        // Some of the body too: the server must not wait for all of it.
        let _ = stream.write_all(&[0u8; 4096]);
        closed_by_peer(&mut stream)
    })
    .await
    .expect("task");
    assert!(closed, "the server closed the oversized connection");
    other.snapshot().await.expect("another client is answered");
    connect(tmp.path())
        .await
        .snapshot()
        .await
        .expect("a new client is answered");
    assert_eq!(panics(), 0);
    exit(run, &handle, ExitIntent::Halt).await;
}

/// splitmix64: a seeded generator, enough for fuzz bytes.
struct SplitMix(u64);

impl SplitMix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

/// 100,000 frames of seeded random bytes (valid length prefixes, random
/// bodies, some starting like a request) on 2,000 connections: no panic, and
/// the daemon still answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn random_frames_do_not_hurt_the_daemon() {
    // It counts panics (or measures RSS) process-wide: alone in a process.
    if !alone_in_process(module_path!(), "random_frames_do_not_hurt_the_daemon") {
        return;
    }
    const CONNECTIONS: usize = 2_000;
    const FRAMES_PER_CONNECTION: usize = 50;
    count_panics();
    let tmp = tempfile::tempdir().expect("tempdir");
    let (run, handle) = supervise(tmp.path(), Switch::new(Some(good())).source(), None);
    let _server = serve(tmp.path(), &handle);
    until(&handle, "running", running).await;

    let path = socket(tmp.path());
    let (sent, closed) = tokio::task::spawn_blocking(move || {
        let mut rng = SplitMix(0x5EED_F00D);
        let mut sent = 0usize;
        let mut closed = 0usize;
        for _ in 0..CONNECTIONS {
            let Ok(mut stream) = StdUnixStream::connect(&path) else {
                continue;
            };
            let mut bytes = Vec::new();
            for _ in 0..FRAMES_PER_CONNECTION {
                let len = usize::try_from(rng.next() % 96).expect("small");
                let mut body: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
                // A quarter start like a request (variant 0), to get past
                // the first byte into the deadline and the message.
                // (After the 8-byte absolute deadline that leads a frame.)
                if rng.next().is_multiple_of(4) && body.len() > 8 {
                    body[8] = 0;
                }
                bytes.extend_from_slice(&u32::try_from(len).expect("fits").to_be_bytes());
                bytes.extend_from_slice(&body);
                sent += 1;
            }
            // The server may close mid-write: that is its right. Then wait
            // for it to close (at the first frame that does not decode, or
            // at our end of stream), so every connection is really read.
            let _ = stream.write_all(&bytes);
            let _ = stream.shutdown(std::net::Shutdown::Write);
            if closed_by_peer(&mut stream) {
                closed += 1;
            }
        }
        (sent, closed)
    })
    .await
    .expect("task");
    assert_eq!(sent, CONNECTIONS * FRAMES_PER_CONNECTION);
    assert_eq!(closed, CONNECTIONS, "the server ends every connection");

    let answered = tokio::time::timeout(PATIENCE, async {
        loop {
            if let Ok(client) = ControlClient::connect_unix(socket(tmp.path())).await
                && client.snapshot().await.is_ok()
            {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    assert!(answered.is_ok(), "the daemon answers after the noise");
    assert_eq!(panics(), 0, "nothing panicked");
    exit(run, &handle, ExitIntent::Halt).await;
}

/// tarpc's request frame, spelled out so a test can send a deadline no
/// `Instant` can hold.
#[derive(Serialize)]
enum RawClientMessage {
    Request(RawRequest),
}

#[derive(Serialize)]
struct RawRequest {
    context: RawContext,
    id: u64,
    message: ControlRequest,
}

#[derive(Serialize)]
struct RawContext {
    deadline: Duration,
    trace_context: tarpc::trace::Context,
}

/// A request whose deadline is as far as a frame can say (`u64::MAX` ms
/// since the epoch, and `u64::MAX` seconds of tarpc's relative deadline) is
/// clamped, answered, and nothing panics.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_deadline_of_u64_max_seconds_is_still_answered() {
    // It counts panics (or measures RSS) process-wide: alone in a process.
    if !alone_in_process(
        module_path!(),
        "a_deadline_of_u64_max_seconds_is_still_answered",
    ) {
        return;
    }
    count_panics();
    let tmp = tempfile::tempdir().expect("tempdir");
    let (run, handle) = supervise(tmp.path(), Switch::new(Some(good())).source(), None);
    let _server = serve(tmp.path(), &handle);
    until(&handle, "running", running).await;

    let path = socket(tmp.path());
    let answer = tokio::task::spawn_blocking(move || {
        let frame = options()
            .serialize(&RawClientMessage::Request(RawRequest {
                context: RawContext {
                    deadline: Duration::new(u64::MAX, 999_999_999),
                    trace_context: tarpc::trace::Context::default(),
                },
                id: 7,
                message: ControlRequest::Snapshot {},
            }))
            .expect("encodes");
        let mut stream = StdUnixStream::connect(&path).expect("connect");
        stream.set_read_timeout(Some(PATIENCE)).expect("timeout");
        let mut greeting = [0u8; 1];
        stream
            .read_exact(&mut greeting)
            .expect("the server's greeting");
        assert_eq!(greeting, [steadfast::control::auth::ANSWER_ACCEPTED]);
        // The absolute deadline that leads a request frame: as far as it
        // goes, on top of tarpc's own relative one.
        let len = u32::try_from(8 + frame.len()).expect("fits");
        stream.write_all(&len.to_be_bytes()).expect("prefix");
        stream.write_all(&u64::MAX.to_le_bytes()).expect("deadline");
        stream.write_all(&frame).expect("frame");
        let mut len = [0u8; 4];
        stream.read_exact(&mut len).expect("an answer's length");
        let mut body = vec![0u8; u32::from_be_bytes(len) as usize];
        stream.read_exact(&mut body).expect("an answer");
        let response: tarpc::Response<ControlResponse> =
            options().deserialize(&body).expect("a response");
        response
    })
    .await
    .expect("task");
    assert_eq!(answer.request_id, 7);
    let Ok(ControlResponse::Snapshot(Ok(wire))) = answer.message else {
        panic!("not a snapshot: {:?}", answer.message);
    };
    assert!(running(&wire.into_snapshot().expect("json")));
    connect(tmp.path())
        .await
        .snapshot()
        .await
        .expect("still answers");
    assert_eq!(panics(), 0);
    exit(run, &handle, ExitIntent::Halt).await;
}

/// A peer of another uid is closed before any frame is read, even when the
/// socket's mode would let it connect. Runs only as root with `setpriv`
/// (the client is `steadfastctl` as `nobody`); otherwise says why it skips.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn another_uid_is_refused() {
    if !processes::root_with(&[processes::SETPRIV]) {
        return;
    }
    let tmp = tempfile::tempdir().expect("tempdir");
    let (run, handle) = supervise(tmp.path(), Switch::new(Some(good())).source(), None);
    let server = serve(tmp.path(), &handle);
    until(&handle, "running", running).await;
    // Open the way through the file system on purpose: the uid check is the
    // line of defence under test.
    let path = server.path().to_owned();
    for dir in [tmp.path(), path.parent().expect("dir")] {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    }
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o666)).expect("chmod");

    let ctl = processes::steadfastctl();
    let as_nobody = tokio::task::spawn_blocking({
        let path = path.clone();
        move || {
            processes::as_nobody(&ctl)
                .arg("--socket")
                .arg(&path)
                .arg("status")
                .output()
                .expect("runs")
        }
    })
    .await
    .expect("task");
    let stderr = String::from_utf8_lossy(&as_nobody.stderr);
    assert_eq!(
        as_nobody.status.code(),
        Some(4),
        "status: unknown: {stderr}"
    );
    assert!(as_nobody.stdout.is_empty());
    // The owner (root) is still answered.
    connect(tmp.path())
        .await
        .snapshot()
        .await
        .expect("root is answered");
    exit(run, &handle, ExitIntent::Halt).await;
}

/// The bounds hold: a request beyond the in-flight limit of one connection
/// is shed with tarpc's throttle error (the others still answer), and a
/// connection beyond the connection limit, when none can be evicted, is
/// answered busy (typed: `ClientError::Busy` once the client's deadline to
/// dial again passed; one byte, `2`, on the wire) and closed.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn in_flight_and_connection_bounds_hold() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (run, handle) = supervise(tmp.path(), Switch::new(Some(good())).source(), None);
    let limits = ServerLimits {
        max_connections: 1,
        max_in_flight_per_connection: 2,
        // Nothing is idle long enough to be evicted: the bound must say busy.
        evict_grace: Duration::from_secs(3600),
        ..ServerLimits::default()
    };
    let _server = serve_with(tmp.path(), &handle, limits);
    let up = until(&handle, "running", running).await;
    let client = connect(tmp.path()).await;

    // Two long-polls fill the connection's in-flight budget…
    let waits: Vec<_> = (0..2)
        .map(|_| {
            let (client, up) = (client.clone(), up.clone());
            tokio::spawn(async move { client.watch(&up, Duration::from_secs(2)).await })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(300)).await;
    // …so a third call on it is shed, not queued without bound.
    let shed = client
        .snapshot()
        .await
        .expect_err("over the in-flight limit");
    assert!(
        matches!(&shed, ClientError::Rpc(tarpc::client::RpcError::Server(e)) if e.detail.contains("throttled")),
        "{shed:?}"
    );
    assert!(!shed.is_refusal());
    // A second connection is over the connection limit: answered busy.
    let endpoint = steadfast::control::Endpoint::Unix(socket(tmp.path()));
    let busy = ControlClient::connect_within(endpoint, Duration::from_millis(300))
        .await
        .expect_err("over the connection limit");
    assert!(matches!(busy, ClientError::Busy { .. }), "{busy:?}");
    assert!(!busy.is_refusal());
    let said = said_before_the_close(tmp.path()).await;
    assert_eq!(
        said,
        [steadfast::control::auth::ANSWER_BUSY],
        "busy, then closed"
    );

    for wait in waits {
        wait.await
            .expect("task")
            .expect("the admitted calls are answered");
    }
    client
        .snapshot()
        .await
        .expect("answered once the budget frees");
    exit(run, &handle, ExitIntent::Halt).await;
}

/// `ControlClient::connect_pipelined`: the first call goes without waiting
/// for the server's first byte, and a busy answer read after it is still
/// typed and waited out. A server holding its only slot for a busy client:
/// a pipelined snapshot and a pipelined command both end as
/// `ClientError::Busy` (never `Rpc`, never a refusal); a pipelined
/// snapshot with more patience is answered once the slot frees (it dialled
/// again); a pipelined call on a served connection is answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_pipelined_call_waits_out_busy_and_is_answered() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (run, handle) = supervise(tmp.path(), Switch::new(Some(good())).source(), None);
    let limits = ServerLimits {
        max_connections: 1,
        // Nothing is idle long enough to be evicted: the bound must say busy.
        evict_grace: Duration::from_secs(3600),
        ..ServerLimits::default()
    };
    let _server = serve_with(tmp.path(), &handle, limits);
    until(&handle, "running", running).await;
    let endpoint = steadfast::control::Endpoint::Unix(socket(tmp.path()));
    let holder = ControlClient::connect_pipelined(endpoint.clone(), PATIENCE)
        .await
        .expect("connects");
    assert!(running(
        &holder.snapshot().await.expect("the first is served")
    ));

    let short = Duration::from_millis(300);
    let busy = ControlClient::connect_pipelined(endpoint.clone(), short)
        .await
        .expect("connecting does not wait for the first byte");
    let read = busy
        .snapshot()
        .await
        .expect_err("over the connection limit");
    assert!(matches!(read, ClientError::Busy { .. }), "{read:?}");
    let command = busy.retry().await.expect_err("over the connection limit");
    assert!(matches!(command, ClientError::Busy { .. }), "{command:?}");
    assert!(!command.is_refusal());

    let patient = ControlClient::connect_pipelined(endpoint, PATIENCE)
        .await
        .expect("connects");
    let waiting = tokio::spawn(async move { patient.snapshot().await });
    tokio::time::sleep(Duration::from_millis(200)).await;
    drop(holder);
    let answered = waiting
        .await
        .expect("task")
        .expect("answered once the slot freed");
    assert!(running(&answered));
    exit(run, &handle, ExitIntent::Halt).await;
}

/// Over a listener that reads before it answers: a pipelined call's request
/// arrives before the server has said anything (the client did not wait for
/// the first byte), and the busy byte the listener then answers is typed
/// (`ClientError::Busy`), dialled again until the deadline. A connection
/// closed before its first byte is a connect error, not a transport one.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_pipelined_request_goes_before_the_first_byte() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let path = tmp.path().join("fake.sock");
    let listener = std::os::unix::net::UnixListener::bind(&path).expect("binds");
    let answer = Arc::new(std::sync::Mutex::new(steadfast::control::auth::ANSWER_BUSY));
    let early = Arc::new(AtomicUsize::new(0));
    std::thread::spawn({
        let (answer, early) = (Arc::clone(&answer), Arc::clone(&early));
        move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { return };
                stream.set_read_timeout(Some(PATIENCE)).expect("timeout");
                let mut first = [0u8; 64];
                if stream.read(&mut first).is_ok_and(|n| n > 0) {
                    early.fetch_add(1, Ordering::SeqCst);
                }
                let byte = *answer.lock().expect("lock");
                if byte != u8::MAX {
                    let _ = stream.write_all(&[byte]);
                }
            }
        }
    });
    let endpoint = steadfast::control::Endpoint::Unix(path);
    let client = ControlClient::connect_pipelined(endpoint.clone(), Duration::from_millis(500))
        .await
        .expect("connects");
    let busy = client.snapshot().await.expect_err("the listener says busy");
    assert!(matches!(busy, ClientError::Busy { .. }), "{busy:?}");
    assert!(
        early.load(Ordering::SeqCst) >= 2,
        "the request came before the first byte, and was dialled again"
    );
    *answer.lock().expect("lock") = u8::MAX;
    let client = ControlClient::connect_pipelined(endpoint, Duration::from_secs(2))
        .await
        .expect("connects");
    let closed = client.stop(Hold::None).await.expect_err("closed unserved");
    assert!(
        matches!(&closed, ClientError::Connect { source, .. } if source.kind() == std::io::ErrorKind::ConnectionReset),
        "{closed:?}"
    );
}

/// A connection on which nothing moves for the idle timeout is closed; one
/// that keeps calling is not.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_idle_connection_is_closed() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (run, handle) = supervise(tmp.path(), Switch::new(Some(good())).source(), None);
    let limits = ServerLimits {
        idle_timeout: Duration::from_millis(400),
        ..ServerLimits::default()
    };
    let _server = serve_with(tmp.path(), &handle, limits);
    until(&handle, "running", running).await;

    let busy = connect(tmp.path()).await;
    let path = socket(tmp.path());
    let silent = tokio::task::spawn_blocking(move || {
        let started = std::time::Instant::now();
        let mut stream = StdUnixStream::connect(&path).expect("connect");
        (closed_by_peer(&mut stream), started.elapsed())
    });
    // Meanwhile the busy client calls every 100 ms for over twice the timeout.
    for _ in 0..10 {
        busy.snapshot().await.expect("a busy connection stays open");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (closed, after) = silent.await.expect("task");
    assert!(closed, "the silent connection was closed");
    assert!(
        after >= Duration::from_millis(350),
        "closed after {after:?}"
    );
    assert!(after < Duration::from_secs(10), "closed after {after:?}");
    exit(run, &handle, ExitIntent::Halt).await;
}

/// The per-peer bound on the Unix socket: one uid gets at most
/// `max_connections_per_peer` connections even when the total has room.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn connections_per_uid_are_bounded() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (run, handle) = supervise(tmp.path(), Switch::new(Some(good())).source(), None);
    let limits = ServerLimits {
        max_connections_per_peer: 1,
        // Nothing is idle long enough to be evicted: the bound must say busy.
        evict_grace: Duration::from_secs(3600),
        ..ServerLimits::default()
    };
    let _server = serve_with(tmp.path(), &handle, limits);
    until(&handle, "running", running).await;
    let first = connect(tmp.path()).await;
    first.snapshot().await.expect("the first is answered");
    let said = said_before_the_close(tmp.path()).await;
    assert_eq!(
        said,
        [steadfast::control::auth::ANSWER_BUSY],
        "a second connection of the same uid is answered busy and closed"
    );
    first.snapshot().await.expect("the first is still answered");
    exit(run, &handle, ExitIntent::Halt).await;
}

/// The client outlives its server: the server stops (the next call is a
/// connect error, not a hang), is served again on the same path, and later
/// the whole supervisor is restarted over the same data directory; each
/// time the same `ControlClient` dials again and its snapshot succeeds.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_client_reconnects_after_a_server_restart() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (run, handle) = supervise(tmp.path(), Switch::new(Some(good())).source(), None);
    let server = serve(tmp.path(), &handle);
    until(&handle, "running", running).await;
    let client = connect(tmp.path()).await;
    let first = client.snapshot().await.expect("answered");

    drop(server);
    let down = client.snapshot().await.expect_err("nothing serves");
    assert!(matches!(down, ClientError::Connect { .. }), "{down:?}");
    let server = serve(tmp.path(), &handle);
    let again = client.snapshot().await.expect("answered after a redial");
    assert_eq!(again.epoch, first.epoch);

    // A restarted supervisor (as after a relaunch): a new run over the same
    // data directory, served on the same path.
    exit(run, &handle, ExitIntent::Halt).await;
    drop(server);
    let (run, handle) = supervise(tmp.path(), Switch::new(Some(good())).source(), None);
    let _server = serve(tmp.path(), &handle);
    until(&handle, "running again", running).await;
    let relaunched = client.snapshot().await.expect("answered by the new run");
    assert!(
        matches!(
            relaunched.previous_run,
            steadfast::protocol::snapshot::PreviousRun::CleanStop { .. }
        ),
        "{:?}",
        relaunched.previous_run
    );
    client
        .stop(Hold::None)
        .await
        .expect("a command on the new connection");
    exit(run, &handle, ExitIntent::Halt).await;
}

/// A stopped server answers nothing more, however close the next call
/// follows the stop: a call on a kept connection right after the
/// `ServerGuard` is dropped is a connect error (its redial finds no
/// socket), round after round. CI once saw the stop lose to a call that
/// arrived in the same wake (an unbiased select in the connection's task).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_stopped_server_answers_no_call_after_the_stop() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (run, handle) = supervise(tmp.path(), Switch::new(Some(good())).source(), None);
    until(&handle, "running", running).await;
    for round in 0..100 {
        let server = serve(tmp.path(), &handle);
        let client = connect(tmp.path()).await;
        client.snapshot().await.expect("answered");
        drop(server);
        let down = client.snapshot().await.expect_err("nothing serves");
        assert!(
            matches!(down, ClientError::Connect { .. }),
            "round {round}: {down:?}"
        );
    }
    exit(run, &handle, ExitIntent::Halt).await;
}

/// A stand-in server that reads one request frame per connection and then
/// closes it unanswered — a daemon dying mid-call. Counts connections and
/// frames.
async fn dies_mid_call(
    path: std::path::PathBuf,
) -> (Arc<AtomicUsize>, tokio::task::JoinHandle<()>) {
    use tokio::io::AsyncReadExt;
    let frames = Arc::new(AtomicUsize::new(0));
    let listener = tokio::net::UnixListener::bind(&path).expect("bind");
    let counted = Arc::clone(&frames);
    let task = tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            let counted = Arc::clone(&counted);
            tokio::spawn(async move {
                use tokio::io::AsyncWriteExt;
                // Served: the greeting every control connection starts with.
                if stream.write_all(&[0]).await.is_err() {
                    return;
                }
                let mut len = [0u8; 4];
                if stream.read_exact(&mut len).await.is_err() {
                    return;
                }
                let mut body = vec![0u8; u32::from_be_bytes(len) as usize];
                if stream.read_exact(&mut body).await.is_ok() {
                    counted.fetch_add(1, Ordering::SeqCst);
                }
                // Dropped here: closed without an answer.
            });
        }
    });
    (frames, task)
}

/// A read whose connection breaks in flight is sent once more on a new
/// connection; a command is sent once and its error returned, never
/// replayed (it may have been applied); the call after it dials again.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn reads_are_retried_once_and_commands_never() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let path = tmp.path().join("dying.sock");
    let (frames, server) = dies_mid_call(path.clone()).await;
    let client = ControlClient::connect_unix(&path).await.expect("connects");

    let read = client
        .snapshot()
        .await
        .expect_err("the stand-in never answers");
    assert!(matches!(read, ClientError::Rpc(_)), "{read:?}");
    assert_eq!(frames.load(Ordering::SeqCst), 2, "the read was sent twice");

    let command = client.stop(Hold::None).await.expect_err("never answered");
    assert!(matches!(command, ClientError::Rpc(_)), "{command:?}");
    assert_eq!(
        frames.load(Ordering::SeqCst),
        3,
        "the command was sent once"
    );

    let command = client.start().await.expect_err("never answered");
    assert!(matches!(command, ClientError::Rpc(_)), "{command:?}");
    assert_eq!(
        frames.load(Ordering::SeqCst),
        4,
        "the next call dialled again and sent once"
    );
    server.abort();
}

/// Calls from many tasks on one client share its one connection (the
/// client's calls drive the connection themselves, `control/conn.rs`): a
/// `watch` long-poll waits while 8 tasks make 200 snapshot calls each on
/// clones of the same client; a `watch` dropped mid-wait leaves the others
/// answered; a `stop` on the same client is answered, and the waiting
/// `watch` then with the newer snapshot. All of it on one connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_calls_share_one_connection() {
    const TASKS: usize = 8;
    const CALLS: usize = 200;
    let tmp = tempfile::tempdir().expect("tempdir");
    let (run, handle) = supervise(tmp.path(), Switch::new(Some(good())).source(), None);
    let server = serve(tmp.path(), &handle);
    until(&handle, "running", running).await;
    let client = connect(tmp.path()).await;
    let seen = client.snapshot().await.expect("answered");

    let watcher = tokio::spawn({
        let (client, seen) = (client.clone(), seen.clone());
        async move { client.watch(&seen, Duration::from_secs(50)).await }
    });
    let tasks: Vec<_> = (0..TASKS)
        .map(|_| {
            let client = client.clone();
            tokio::spawn(async move {
                let mut answered = 0;
                for _ in 0..CALLS {
                    let snapshot = client.snapshot().await.expect("answered");
                    assert!(running(&snapshot));
                    answered += 1;
                }
                answered
            })
        })
        .collect();
    let dropped = tokio::time::timeout(
        Duration::from_millis(100),
        client.watch(&seen, Duration::from_secs(50)),
    )
    .await;
    assert!(dropped.is_err(), "nothing changed: {dropped:?}");
    let mut total = 0;
    for task in tasks {
        total += task.await.expect("task");
    }
    assert_eq!(total, TASKS * CALLS);
    assert!(!watcher.is_finished(), "the watch still waits");
    client
        .snapshot()
        .await
        .expect("answered after the dropped watch");
    assert_eq!(server.open_connections(), 1, "one connection for all");

    let stopped = client.stop(Hold::None).await.expect("stopped");
    let watched = tokio::time::timeout(processes::PATIENCE, watcher)
        .await
        .expect("the watch is answered once something changed")
        .expect("task")
        .expect("a snapshot");
    assert!(watched.version > seen.version, "{watched:?}");
    assert!(stopped.version > seen.version);
    assert_eq!(server.open_connections(), 1, "still one connection");
    exit(run, &handle, ExitIntent::Halt).await;
}

/// A stand-in server that greets each connection, then reads its frames and
/// never answers, holding it open. Counts connections and frames.
async fn never_answers(
    path: std::path::PathBuf,
) -> (
    Arc<AtomicUsize>,
    Arc<AtomicUsize>,
    tokio::task::JoinHandle<()>,
) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let (connections, frames) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let listener = tokio::net::UnixListener::bind(&path).expect("bind");
    let (counted, framed) = (Arc::clone(&connections), Arc::clone(&frames));
    let task = tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            counted.fetch_add(1, Ordering::SeqCst);
            let framed = Arc::clone(&framed);
            tokio::spawn(async move {
                if stream.write_all(&[0]).await.is_err() {
                    return;
                }
                loop {
                    let mut len = [0u8; 4];
                    if stream.read_exact(&mut len).await.is_err() {
                        return;
                    }
                    let mut body = vec![0u8; u32::from_be_bytes(len) as usize];
                    if stream.read_exact(&mut body).await.is_err() {
                        return;
                    }
                    framed.fetch_add(1, Ordering::SeqCst);
                }
            });
        }
    });
    (connections, frames, task)
}

/// A call whose deadline passes ends with a deadline error on its own: the
/// connection is not broken by it, so the next call is sent on the same
/// one (and, a read, is not replayed), alone and beside another call.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_call_past_its_deadline_ends_alone() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let path = tmp.path().join("silent.sock");
    let (connections, frames, server) = never_answers(path.clone()).await;
    let client = ControlClient::connect_unix(&path)
        .await
        .expect("connects")
        .with_timeout(Duration::from_millis(200));
    let late = client.snapshot().await.expect_err("never answered");
    assert!(late.is_deadline(), "{late:?}");
    let (a, b) = tokio::join!(client.snapshot(), client.stop(Hold::None));
    for late in [
        a.expect_err("never answered"),
        b.expect_err("never answered"),
    ] {
        assert!(late.is_deadline(), "{late:?}");
    }
    let waited = std::time::Instant::now();
    while frames.load(Ordering::SeqCst) < 3 && waited.elapsed() < processes::PATIENCE {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(frames.load(Ordering::SeqCst), 3, "each call sent once");
    assert_eq!(connections.load(Ordering::SeqCst), 1, "one connection");
    server.abort();
}

/// `steadfastctl status` reads the status record, `probe live` connects:
/// once the server stops accepting, the record must vouch for it no more,
/// or the two disagree for as long as the shutdown waits for an answer in
/// flight (up to its grace). The README walkthrough saw it: `while probe
/// live` ended, then `status` still showed the daemon `exiting`. Here a
/// served client holds the shutdown in its grace while the record is read.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_server_that_stopped_accepting_is_not_vouched_for_by_the_record() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let switch = Switch::new(Some(good()));
    let (run, handle) = supervise(tmp.path(), switch.source(), None);
    let server = serve(tmp.path(), &handle);
    until(&handle, "running", running).await;
    let (ctl, dir) = (processes::steadfastctl(), tmp.path().to_owned());
    let status = move || {
        std::process::Command::new(&ctl)
            .arg("--data-dir")
            .arg(&dir)
            .args(["--json", "status"])
            .output()
            .expect("steadfastctl runs")
    };
    let out = status.clone()();
    assert_eq!(
        out.status.code(),
        Some(0),
        "running, from the record: {out:?}"
    );

    // A served connection, idle: the shutdown waits for it.
    let client = connect(tmp.path()).await;
    client.snapshot().await.expect("served");
    // (At least: had the status above asked the daemon, its connection may
    // not be released yet.)
    assert!(server.open_connections() >= 1);
    let shutdown = tokio::spawn(server.shutdown(Duration::from_secs(600)));
    let waited = std::time::Instant::now();
    while StdUnixStream::connect(socket(tmp.path())).is_ok() {
        assert!(waited.elapsed() < processes::PATIENCE, "still accepting");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let out = tokio::task::spawn_blocking(status).await.expect("joined");
    assert!(!shutdown.is_finished(), "still in its grace");
    assert_eq!(
        out.status.code(),
        Some(4),
        "no daemon answers, as for probe live: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );

    drop(client);
    tokio::time::timeout(processes::PATIENCE, shutdown)
        .await
        .expect("the shutdown ends once the client is gone")
        .expect("joined");
    exit(run, &handle, ExitIntent::Halt).await;
}
