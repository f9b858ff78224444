//! The control plane under a hostile or clumsy user: real sockets, real
//! `steadfastctl` and `kvd` processes, another uid through `setpriv` where
//! the attack needs one.
//!
//! - Item 3, no lockout: `idle_connections_do_not_lock_the_operator_out`,
//!   `watchers_do_not_make_probe_live_fail`,
//!   `a_killed_watcher_gives_its_slot_back_at_once`,
//!   `silent_tcp_connections_do_not_lock_the_operator_out`.
//! - Item 4, bursts: `a_burst_of_1000_calls_is_all_answered`,
//!   `a_burst_over_tcp_is_all_answered`.
//! - Item 6, the control plane is never lost silently:
//!   `a_daemon_refuses_to_run_without_its_control_socket`,
//!   `a_socket_path_over_108_bytes_is_served`.
//! - Item 7, abandoned commands are not run later:
//!   `an_abandoned_exit_of_a_connected_client_is_dropped`,
//!   `an_abandoned_pipelined_exit_is_never_read`,
//!   `a_command_whose_caller_gave_up_is_not_stepped`,
//!   `an_abandoned_exit_and_stop_from_steadfastctl_are_not_run`.
//! - Item 2 (client side): `a_socket_planted_by_another_user_gets_nothing`,
//!   `a_listener_of_another_user_gets_nothing`, and a root operator still
//!   reaches a service user's daemon:
//!   `a_root_operator_reaches_a_service_users_daemon`.
//! - Item 6, what may be replaced: `a_stale_socket_is_replaced`.
//! - Slots go to who needs them: connections that trickle a frame are
//!   evicted and closed by the frame deadline:
//!   `trickling_connections_do_not_lock_the_operator_out`,
//!   `trickling_tcp_connections_do_not_lock_the_operator_out`.
//! - Deadlines survive clock skew: `a_client_whose_clock_is_off_is_answered`.

use crate::support::common;
use crate::support::processes;
use crate::support::processes::{PYTHON, SETPRIV, as_nobody, root_with};

use std::io::{BufRead, BufReader, Read};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixStream as StdUnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use common::{PATIENCE, Switch, exit, good, running, supervise, until};
use steadfast::control::auth::Token;
use steadfast::control::{
    ControlClient, Endpoint, ServerGuard, ServerLimits, TcpServerGuard, serve_tcp_with, serve_unix,
    serve_unix_with,
};
use steadfast::protocol::lifecycle::RefusedBecause;
use steadfast::{ExitIntent, Hold, SupervisorHandle};

fn socket(dir: &Path) -> PathBuf {
    steadfast_actors::control_dir::ControlDir::under(dir).join("control.sock")
}

/// `handle` served over loopback TCP, on a free port, with `token` and `limits`.
fn serve_loopback(
    handle: &SupervisorHandle,
    token: &Token,
    limits: ServerLimits,
) -> TcpServerGuard {
    let addr = (std::net::Ipv4Addr::LOCALHOST, 0).into();
    serve_tcp_with(handle.clone(), addr, token.clone(), limits).expect("serves")
}

/// A running supervisor over `dir`, its control socket served with the
/// default limits.
async fn running_on_socket(
    dir: &Path,
) -> (
    tokio::task::JoinHandle<ExitIntent>,
    SupervisorHandle,
    ServerGuard,
) {
    let (run, handle) = supervise(dir, Switch::new(Some(good())).source(), None);
    let server = serve_unix(handle.clone(), socket(dir)).expect("serves");
    until(&handle, "running", running).await;
    (run, handle, server)
}

/// `steadfastctl --socket SOCKET`, for its arguments to be added.
fn ctl_command(socket: &Path) -> Command {
    let mut command = Command::new(processes::steadfastctl());
    command.arg("--socket").arg(socket);
    command
}

fn ctl_at(socket: &Path, args: &[&str]) -> std::process::Output {
    ctl_command(socket)
        .args(args)
        .output()
        .expect("steadfastctl runs")
}

/// `n` snapshot calls one after another, each on a new connection to
/// `endpoint`: how many were answered (a failure is printed).
async fn answered_in_turn(n: usize, endpoint: &Endpoint) -> usize {
    let mut answered = 0;
    for _ in 0..n {
        let called = async {
            ControlClient::connect(endpoint.clone())
                .await?
                .snapshot()
                .await
        };
        match called.await {
            Ok(_) => answered += 1,
            Err(error) => eprintln!("the operator's call failed: {error}"),
        }
    }
    answered
}

/// `n` snapshot calls, each on its own connection to `endpoint`, released
/// together by a barrier: how many were answered (a failure is printed).
async fn answered_together(n: usize, endpoint: &Endpoint) -> usize {
    let barrier = Arc::new(tokio::sync::Barrier::new(n));
    let answered = Arc::new(AtomicUsize::new(0));
    let calls: Vec<_> = (0..n)
        .map(|_| {
            let (barrier, answered, endpoint) = (
                Arc::clone(&barrier),
                Arc::clone(&answered),
                endpoint.clone(),
            );
            tokio::spawn(async move {
                barrier.wait().await;
                let called = async { ControlClient::connect(endpoint).await?.snapshot().await };
                match called.await {
                    Ok(_) => {
                        answered.fetch_add(1, Ordering::SeqCst);
                    }
                    Err(error) => eprintln!("a call failed: {error}"),
                }
            })
        })
        .collect();
    for call in calls {
        call.await.expect("task");
    }
    answered.load(Ordering::SeqCst)
}

/// 32 idle connections of the operator's own uid (the per-uid bound) do not
/// lock `ControlClient` out: an idle one is evicted to make room.
/// Before the fix: every call of the operator failed ("the channel was
/// disconnected") until the idle timeout (10 minutes).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn idle_connections_do_not_lock_the_operator_out() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (run, handle, _server) = running_on_socket(tmp.path()).await;
    let path = socket(tmp.path());
    let idle: Vec<StdUnixStream> = (0..32)
        .map(|_| StdUnixStream::connect(&path).expect("connect"))
        .collect();
    let answered = answered_in_turn(5, &Endpoint::Unix(path.clone())).await;
    eprintln!("answered {answered} of 5 calls with 32 idle connections open");
    assert_eq!(answered, 5);
    drop(idle);
    exit(run, &handle, ExitIntent::Halt).await;
}

/// 32 long-polling `watch` sessions (the per-uid bound) do not make
/// `steadfastctl probe live` fail: a long-poller is evicted (its client
/// retries the read). Before the fix: the probe exited 1.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn watchers_do_not_make_probe_live_fail() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (run, handle) = supervise(tmp.path(), Switch::new(Some(good())).source(), None);
    let _server = serve_unix(handle.clone(), socket(tmp.path())).expect("serves");
    let up = until(&handle, "running", running).await;
    let path = socket(tmp.path());
    let mut watchers = Vec::new();
    for _ in 0..32 {
        let client = ControlClient::connect_unix(&path).await.expect("connects");
        let up = up.clone();
        watchers.push(tokio::spawn(async move {
            loop {
                // Errors too: an evicted watcher comes back.
                let _ = client.watch(&up, Duration::from_secs(60)).await;
            }
        }));
    }
    // Let every long-poll reach the server.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let mut live = 0;
    for _ in 0..3 {
        let probe = tokio::task::spawn_blocking({
            let path = path.clone();
            move || ctl_at(&path, &["probe", "live", "--verbose"])
        })
        .await
        .expect("task");
        if probe.status.code() == Some(0) {
            live += 1;
        } else {
            eprintln!("probe: {}", String::from_utf8_lossy(&probe.stderr));
        }
    }
    eprintln!("probe live answered {live} of 3 times beside 32 watchers");
    assert_eq!(live, 3);
    for watcher in watchers {
        watcher.abort();
    }
    exit(run, &handle, ExitIntent::Halt).await;
}

/// More `steadfastctl watch --until stopped` sessions (40) than the
/// per-user bound (32): the server evicts long-polling ones to make room,
/// as documented, and an evicted client comes back and goes on watching.
/// None says the daemon exited while it runs; once the runtime stops, every
/// one of them sees it and exits 0. Before: an evicted watch whose one
/// retried read was evicted too said "the daemon exited before it was
/// stopped" and exited 3 (9 of 40 in the report).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn evicted_watchers_keep_watching_until_the_stop() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (run, handle, _server) = running_on_socket(tmp.path()).await;
    let path = socket(tmp.path());
    let mut watchers: Vec<Child> = (0..40)
        .map(|_| {
            ctl_command(&path)
                .args(["watch", "--until", "stopped"])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .expect("steadfastctl runs")
        })
        .collect();
    // Each newcomer past the bound evicts a long-poller (past its 500 ms
    // grace), which comes back and evicts another: they churn.
    tokio::time::sleep(Duration::from_secs(6)).await;
    let mut early = Vec::new();
    for watcher in &mut watchers {
        if let Some(status) = watcher.try_wait().expect("try_wait") {
            let mut stderr = String::new();
            if let Some(mut pipe) = watcher.stderr.take() {
                let _ = pipe.read_to_string(&mut stderr);
            }
            early.push(format!("{status}: {stderr}"));
        }
    }
    assert!(
        early.is_empty(),
        "watchers ended while the daemon ran: {early:#?}"
    );
    handle.stop(Hold::None).await.expect("stops");
    let ended = tokio::task::spawn_blocking(move || {
        watchers
            .into_iter()
            .map(|watcher| watcher.wait_with_output().expect("wait"))
            .collect::<Vec<_>>()
    })
    .await
    .expect("task");
    for out in &ended {
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{stderr}");
        assert!(!stderr.contains("exited"), "{stderr}");
    }
    exit(run, &handle, ExitIntent::Halt).await;
}

/// A `steadfastctl watch` killed in the middle of its long-poll (30 s) gives
/// its connection back at once: the server drops the calls of a peer that
/// closed. Before the fix: the slot stayed held until the long-poll ended
/// (about 28 s later). The poll below gives up well before the long-poll
/// could end on its own (20 s of its 30 s).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_killed_watcher_gives_its_slot_back_at_once() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (run, handle, server) = running_on_socket(tmp.path()).await;
    let mut watcher = ctl_command(&socket(tmp.path()))
        .arg("watch")
        .stdout(Stdio::piped())
        .spawn()
        .expect("steadfastctl watch");
    // Its first line is printed after its first snapshot: then it long-polls.
    // (The reader stays open: a closed pipe would end the watcher itself.)
    let mut out = BufReader::new(watcher.stdout.take().expect("stdout"));
    let mut first = String::new();
    out.read_line(&mut first).expect("a first line");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(server.open_connections(), 1);
    let killed = Instant::now();
    watcher.kill().expect("kill -9");
    watcher.wait().expect("reaped");
    drop(out);
    while server.open_connections() > 0 && killed.elapsed() < Duration::from_secs(20) {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    eprintln!(
        "the killed watcher's slot came back after {:?}",
        killed.elapsed()
    );
    assert_eq!(
        server.open_connections(),
        0,
        "the killed watcher's long-poll still holds its connection"
    );
    exit(run, &handle, ExitIntent::Halt).await;
}

/// 1,000 `ControlClient` calls released together (a barrier), plus 200 real
/// `steadfastctl status` processes released together: every one answered
/// (the bound is 32 connections a uid; the others are answered busy and
/// dial again). Before the fix: most failed with "the channel was
/// disconnected due to a critical error".
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_burst_of_1000_calls_is_all_answered() {
    const CLIENTS: usize = 1_000;
    const PROCESSES: usize = 200;
    let tmp = tempfile::tempdir().expect("tempdir");
    let (run, handle, _server) = running_on_socket(tmp.path()).await;
    let path = socket(tmp.path());

    let clients_answered = answered_together(CLIENTS, &Endpoint::Unix(path.clone())).await;

    let processes_answered = tokio::task::spawn_blocking({
        let path = path.clone();
        move || {
            let barrier = Arc::new(std::sync::Barrier::new(PROCESSES));
            let threads: Vec<_> = (0..PROCESSES)
                .map(|_| {
                    let (barrier, path) = (Arc::clone(&barrier), path.clone());
                    std::thread::spawn(move || {
                        barrier.wait();
                        let out = ctl_at(&path, &["status", "--json"]);
                        if out.status.code() != Some(0) {
                            eprintln!(
                                "steadfastctl status failed: {}",
                                String::from_utf8_lossy(&out.stderr)
                            );
                        }
                        out.status.code() == Some(0)
                    })
                })
                .collect();
            threads
                .into_iter()
                .map(|t| t.join().expect("thread"))
                .filter(|ok| *ok)
                .count()
        }
    })
    .await
    .expect("task");
    eprintln!(
        "answered {clients_answered} of {CLIENTS} calls and {processes_answered} of \
         {PROCESSES} steadfastctl processes released together"
    );
    assert_eq!(clients_answered, CLIENTS);
    assert_eq!(processes_answered, PROCESSES);
    exit(run, &handle, ExitIntent::Halt).await;
}

/// 500 `ControlClient`s over TCP released together: more hellos at once than
/// the handshake pool holds from one address (128) and more than the
/// authenticated bound (32): every one is answered (a handshake closed to
/// make room, or a busy answer, is dialled again).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_burst_over_tcp_is_all_answered() {
    const CLIENTS: usize = 500;
    let tmp = tempfile::tempdir().expect("tempdir");
    let (run, handle) = supervise(tmp.path(), Switch::new(Some(good())).source(), None);
    let token = Token::generate().expect("a token");
    let server = serve_loopback(&handle, &token, ServerLimits::default());
    until(&handle, "running", running).await;
    let addr = server.local_addr();
    let answered = answered_together(CLIENTS, &Endpoint::Tcp { addr, token }).await;
    eprintln!("answered {answered} of {CLIENTS} tcp calls released together");
    assert_eq!(answered, CLIENTS);
    exit(run, &handle, ExitIntent::Halt).await;
}

/// Silent TCP connections without the token, reopened as the server closes
/// them, do not make the operator's calls fail: they only ever hold the
/// handshake pool (the oldest is closed to make room), never an
/// authenticated slot. Before the fix: "too many control connections open".
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn silent_tcp_connections_do_not_lock_the_operator_out() {
    const SILENT: usize = 200;
    let tmp = tempfile::tempdir().expect("tempdir");
    let (run, handle) = supervise(tmp.path(), Switch::new(Some(good())).source(), None);
    let limits = ServerLimits {
        handshake_timeout: Duration::from_millis(500),
        ..ServerLimits::default()
    };
    let token = Token::generate().expect("a token");
    let server = serve_loopback(&handle, &token, limits);
    until(&handle, "running", running).await;
    let addr = server.local_addr();
    let open = Arc::new(AtomicUsize::new(0));
    let attackers: Vec<_> = (0..SILENT)
        .map(|_| {
            let open = Arc::clone(&open);
            tokio::spawn(async move {
                use tokio::io::AsyncReadExt;
                loop {
                    let Ok(mut stream) = tokio::net::TcpStream::connect(addr).await else {
                        tokio::time::sleep(Duration::from_millis(10)).await;
                        continue;
                    };
                    open.fetch_add(1, Ordering::SeqCst);
                    let mut buf = [0u8; 16];
                    // Silent until the server closes it; then again.
                    while matches!(stream.read(&mut buf).await, Ok(n) if n > 0) {}
                    open.fetch_sub(1, Ordering::SeqCst);
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
            })
        })
        .collect();
    while open.load(Ordering::SeqCst) < SILENT / 2 {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let answered = answered_in_turn(10, &Endpoint::Tcp { addr, token }).await;
    eprintln!("answered {answered} of 10 operator calls beside {SILENT} silent connections");
    for attacker in attackers {
        attacker.abort();
    }
    assert_eq!(answered, 10);
    exit(run, &handle, ExitIntent::Halt).await;
}

/// `n` peers that each, once admitted (`admitted` connects and reads the
/// server's answer), send one byte of a 1 MiB frame every 300 ms and
/// never finish it; reconnecting whenever the server closes them. Each
/// closure is counted in `closed`. They stop when `stop` is set.
fn tricklers<S: std::io::Write + Send + 'static>(
    n: usize,
    admitted: impl Fn() -> Option<S> + Send + Sync + 'static,
    closed: &Arc<AtomicUsize>,
    stop: &Arc<std::sync::atomic::AtomicBool>,
) -> Vec<std::thread::JoinHandle<()>> {
    let admitted = Arc::new(admitted);
    (0..n)
        .map(|_| {
            let (admitted, closed, stop) =
                (Arc::clone(&admitted), Arc::clone(closed), Arc::clone(stop));
            std::thread::spawn(move || {
                // A 1 MiB frame's length prefix, then its body, a byte at a time.
                let frame = (1u32 << 20).to_be_bytes();
                while !stop.load(Ordering::SeqCst) {
                    let Some(mut stream) = admitted() else {
                        std::thread::sleep(Duration::from_millis(50));
                        continue;
                    };
                    let mut sent = 0usize;
                    while !stop.load(Ordering::SeqCst) {
                        let byte = frame.get(sent).copied().unwrap_or(0);
                        if stream.write_all(&[byte]).is_err() {
                            closed.fetch_add(1, Ordering::SeqCst);
                            break;
                        }
                        sent += 1;
                        std::thread::sleep(Duration::from_millis(300));
                    }
                }
            })
        })
        .collect()
}

/// Wait (bounded) until `n` tricklers were admitted: only then do they
/// hold the slots the operator's call must win back.
async fn until_admitted(admitted: &AtomicUsize, n: usize) {
    tokio::time::timeout(PATIENCE, async {
        while admitted.load(Ordering::SeqCst) < n {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("every trickler admitted");
}

/// Tell the tricklers to stop and wait for their threads to end.
fn stop_tricklers(stop: &std::sync::atomic::AtomicBool, threads: Vec<std::thread::JoinHandle<()>>) {
    stop.store(true, Ordering::SeqCst);
    for thread in threads {
        thread.join().expect("trickler");
    }
}

/// Wait (bounded) until every trickler was closed by the server at least
/// once: the frame deadline (5 s from a frame's first byte) closes them.
async fn until_closed(closed: &AtomicUsize, n: usize) {
    let waited = tokio::time::timeout(PATIENCE, async {
        while closed.load(Ordering::SeqCst) < n {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    assert!(
        waited.is_ok(),
        "tricklers closed: {} of {n}",
        closed.load(Ordering::SeqCst)
    );
}

/// Connections of the operator's own uid that fill the per-uid bound and
/// each trickle one byte of a 1 MiB frame every 300 ms do not lock the
/// operator out: holding no request, they are evicted to make room, and
/// the frame deadline closes them. The operator's `steadfastctl --timeout
/// 20 stop` is answered. Before the fix: every byte counted as activity,
/// so they were never evicted; the stop exited 1 (busy).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn trickling_connections_do_not_lock_the_operator_out() {
    const TRICKLERS: usize = 4;
    let tmp = tempfile::tempdir().expect("tempdir");
    let (run, handle) = supervise(tmp.path(), Switch::new(Some(good())).source(), None);
    let limits = ServerLimits {
        max_connections_per_peer: TRICKLERS,
        ..ServerLimits::default()
    };
    let _server = serve_unix_with(handle.clone(), socket(tmp.path()), limits).expect("serves");
    until(&handle, "running", running).await;
    let path = socket(tmp.path());
    let closed = Arc::new(AtomicUsize::new(0));
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let admitted = Arc::new(AtomicUsize::new(0));
    let threads = tricklers(
        TRICKLERS,
        {
            let (path, admitted) = (path.clone(), Arc::clone(&admitted));
            move || {
                let mut stream = StdUnixStream::connect(&path).ok()?;
                let mut greeting = [0u8; 1];
                stream.read_exact(&mut greeting).ok()?;
                (greeting[0] == steadfast::control::auth::ANSWER_ACCEPTED).then(|| {
                    admitted.fetch_add(1, Ordering::SeqCst);
                    stream
                })
            }
        },
        &closed,
        &stop,
    );
    until_admitted(&admitted, TRICKLERS).await;
    // Past the eviction grace of the last one admitted.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let started = Instant::now();
    let stopped = tokio::task::spawn_blocking({
        let path = path.clone();
        move || ctl_at(&path, &["--timeout", "20", "stop"])
    })
    .await
    .expect("task");
    eprintln!(
        "steadfastctl --timeout 20 stop beside {TRICKLERS} tricklers: {:?} after {:?}: {}",
        stopped.status.code(),
        started.elapsed(),
        String::from_utf8_lossy(&stopped.stderr)
    );
    assert_eq!(stopped.status.code(), Some(0));
    until_closed(&closed, TRICKLERS).await;
    stop_tricklers(&stop, threads);
    exit(run, &handle, ExitIntent::Halt).await;
}

/// As above over TCP: token-holding connections from one address (the
/// per-source bound) that trickle a frame neither keep the operator's
/// call out nor stay open past the frame deadline. Before the fix: the
/// operator's call failed busy after its deadline.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn trickling_tcp_connections_do_not_lock_the_operator_out() {
    const TRICKLERS: usize = 4;
    let tmp = tempfile::tempdir().expect("tempdir");
    let (run, handle) = supervise(tmp.path(), Switch::new(Some(good())).source(), None);
    let limits = ServerLimits {
        max_connections_per_peer: TRICKLERS,
        ..ServerLimits::default()
    };
    let token = Token::generate().expect("a token");
    let server = serve_loopback(&handle, &token, limits);
    until(&handle, "running", running).await;
    let addr = server.local_addr();
    let closed = Arc::new(AtomicUsize::new(0));
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let admitted = Arc::new(AtomicUsize::new(0));
    let threads = tricklers(
        TRICKLERS,
        {
            let (token, admitted) = (token.clone(), Arc::clone(&admitted));
            move || {
                use std::io::Write;
                let mut stream = std::net::TcpStream::connect(addr).ok()?;
                stream.write_all(&token.hello()).ok()?;
                let mut answer = [0u8; 1];
                stream.read_exact(&mut answer).ok()?;
                (answer[0] == steadfast::control::auth::ANSWER_ACCEPTED).then(|| {
                    admitted.fetch_add(1, Ordering::SeqCst);
                    stream
                })
            }
        },
        &closed,
        &stop,
    );
    until_admitted(&admitted, TRICKLERS).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let called = async {
        ControlClient::connect_within(
            Endpoint::Tcp {
                addr,
                token: token.clone(),
            },
            Duration::from_secs(20),
        )
        .await?
        .stop(Hold::None)
        .await
    };
    let stopped = called.await;
    eprintln!("the operator's stop beside {TRICKLERS} tcp tricklers: {stopped:?}");
    assert_eq!(stopped.expect("answered").lifecycle.name(), "stopped");
    until_closed(&closed, TRICKLERS).await;
    stop_tricklers(&stop, threads);
    exit(run, &handle, ExitIntent::Halt).await;
}

/// A client whose clock is 3 s or 121 s behind the daemon's, or 121 s
/// ahead (a test knob shifts every clock reading of its codec), gets its
/// `--timeout 2` calls answered and its commands run, over the Unix socket
/// and TCP: a deadline travels as the time left, measured by the daemon
/// from the request's arrival. Before the fix: the deadline was the
/// client's wall-clock time, so a client 3 s behind had every call with a
/// 2 s timeout dropped unrun ("the request's deadline passed").
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_client_whose_clock_is_off_is_answered() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (run, handle) = supervise(tmp.path(), Switch::new(Some(good())).source(), None);
    let _unix = serve_unix(handle.clone(), socket(tmp.path())).expect("serves");
    let token = Token::generate().expect("a token");
    let tcp = serve_loopback(&handle, &token, ServerLimits::default());
    until(&handle, "running", running).await;
    let endpoints = [
        Endpoint::Unix(socket(tmp.path())),
        Endpoint::Tcp {
            addr: tcp.local_addr(),
            token,
        },
    ];
    for endpoint in endpoints {
        for offset_ms in [-3_000, -121_000, 121_000] {
            let client = ControlClient::connect_within(endpoint.clone(), PATIENCE)
                .await
                .expect("connects")
                .with_clock_offset_ms(offset_ms)
                .with_timeout(Duration::from_secs(2));
            let answered = client.snapshot().await;
            eprintln!("{endpoint}, clock {offset_ms} ms off: snapshot {answered:?}");
            assert!(running(&answered.expect("answered")));
            let stopped = client.stop(Hold::None).await;
            assert_eq!(
                stopped.expect("stop answered").lifecycle.name(),
                "stopped",
                "{endpoint}, clock {offset_ms} ms off"
            );
            client.start().await.expect("start answered");
            until(&handle, "running again", running).await;
        }
    }
    exit(run, &handle, ExitIntent::Halt).await;
}

/// A config for kvd on a free loopback port.
fn kvd_config(dir: &Path) -> PathBuf {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let config = dir.join("kvd.toml");
    std::fs::write(&config, format!("listen_addr = \"127.0.0.1:{port}\"\n")).expect("config");
    config
}

fn stderr_of(child: &mut Child) -> String {
    let mut text = String::new();
    if let Some(mut err) = child.stderr.take() {
        let _ = err.read_to_string(&mut text);
    }
    text
}

/// A regular file, a directory or a symbolic link where the control socket
/// goes: a real kvd refuses to run without its control plane, says so on
/// stderr (naming the path and the fix) and exits 78 (never works); what was there is left
/// alone. Before the fix: kvd served its runtime with no control socket and
/// said nothing.
#[test]
fn a_daemon_refuses_to_run_without_its_control_socket() {
    for (what, plant) in [
        (
            "a regular file",
            (|p: &Path| std::fs::write(p, b"not a socket")) as fn(&Path) -> std::io::Result<()>,
        ),
        ("a directory", |p: &Path| std::fs::create_dir(p)),
        ("a symbolic link", |p: &Path| {
            std::os::unix::fs::symlink("/nonexistent-target", p)
        }),
    ] {
        let tmp = tempfile::tempdir().expect("tempdir");
        let data = tmp.path().join("data");
        let path = private_control_dir(&data).join("control.sock");
        plant(&path).expect("plant");
        let mut child = processes::kvd(&data, &kvd_config(tmp.path()), Stdio::piped());
        let code = processes::wait_exit(&mut child);
        let stderr = stderr_of(&mut child);
        eprintln!("{what}: exit {code:?}; stderr: {stderr}");
        // Something else where the socket goes stays there until an
        // operator moves it: a restart would meet it again.
        assert_eq!(
            code,
            Some(steadfast::daemon::EXIT_NEVER_WORKS),
            "{what}: {stderr}"
        );
        assert!(
            stderr.contains(&path.display().to_string()) && stderr.contains(what),
            "{what}: the error names the path and what is there: {stderr}"
        );
        assert!(stderr.contains("move it away"), "the fix: {stderr}");
        let left = std::fs::symlink_metadata(&path).expect("still there");
        assert!(!left.file_type().is_socket_like(), "{what} left alone");
    }
}

trait SocketLike {
    fn is_socket_like(&self) -> bool;
}

impl SocketLike for std::fs::FileType {
    fn is_socket_like(&self) -> bool {
        std::os::unix::fs::FileTypeExt::is_socket(self)
    }
}

/// A data dir whose socket path is over `sun_path`'s 108 bytes: kvd binds it
/// through its opened directory and `steadfastctl` reaches it the same way.
/// Before the fix: no control socket, nothing said.
#[test]
fn a_socket_path_over_108_bytes_is_served() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let mut data = tmp.path().to_path_buf();
    while data.as_os_str().len() < 120 {
        data.push("a-rather-long-directory-name");
    }
    std::fs::create_dir_all(&data).expect("mkdir");
    let sock = socket(&data);
    assert!(sock.as_os_str().len() > 108, "{}", sock.display());
    let mut child = processes::kvd(&data, &kvd_config(tmp.path()), Stdio::piped());
    let deadline = Instant::now() + processes::PATIENCE;
    let mut answered = None;
    while Instant::now() < deadline && answered.is_none() {
        if child.try_wait().expect("wait").is_some() {
            break;
        }
        answered = processes::status(&data);
        std::thread::sleep(Duration::from_millis(50));
    }
    if answered.is_none() {
        let _ = child.kill();
        let _ = child.wait();
        panic!(
            "steadfastctl never reached {}: {}",
            sock.display(),
            stderr_of(&mut child)
        );
    }
    let out = processes::ctl(&data, &["exit"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(
        processes::wait_exit(&mut child),
        Some(steadfast::daemon::EXIT_HALT)
    );
}

/// `data` and its control dir, made (0700, as a daemon makes them) before
/// any daemon runs, so that a test can plant something in it: the control dir.
fn private_control_dir(data: &Path) -> PathBuf {
    let control = steadfast_actors::control_dir::ControlDir::under(data);
    std::fs::create_dir_all(&control).expect("mkdir");
    for dir in [data, &control] {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700)).expect("chmod");
    }
    control
}

/// A kvd running, reachable over its socket.
fn running_kvd(tmp: &Path) -> (Child, PathBuf) {
    let data = tmp.join("data");
    let child = processes::kvd(&data, &kvd_config(tmp), Stdio::piped());
    processes::until(&data, "running", |s| s["lifecycle"]["state"] == "running");
    (child, data)
}

/// [`running_kvd`] for an async test: its waiting runs off the runtime.
async fn running_kvd_off_runtime(tmp: &Path) -> (Child, PathBuf) {
    let tmp = tmp.to_owned();
    tokio::task::spawn_blocking(move || running_kvd(&tmp))
        .await
        .expect("task")
}

/// A client connected before the daemon is stopped (SIGSTOP) sends `exit`
/// and `stop` with a 1 s deadline and gives up; the daemon resumes (SIGCONT)
/// and decodes them late: both are dropped, never run. The same connection
/// then gets `retry` through to the lifecycle (after the abandoned ones):
/// refused as `runtime_not_failed` — still running. Before the fix: the
/// abandoned `exit` ended the daemon.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_abandoned_exit_of_a_connected_client_is_dropped() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (mut child, data) = running_kvd_off_runtime(tmp.path()).await;
    let client = ControlClient::connect_unix(socket(&data))
        .await
        .expect("connects")
        .with_timeout(Duration::from_secs(1));
    client.snapshot().await.expect("answered");
    processes::signal(&child, rustix::process::Signal::STOP);
    let gave_up = client.exit(ExitIntent::Halt).await;
    assert!(gave_up.is_err(), "{gave_up:?}");
    let gave_up = client.stop(Hold::None).await;
    assert!(gave_up.is_err(), "{gave_up:?}");
    processes::signal(&child, rustix::process::Signal::CONT);
    let patient = client.clone().with_timeout(processes::PATIENCE);
    let after = patient.retry().await;
    eprintln!("after SIGCONT, retry answered: {after:?}");
    let Err(steadfast::control::ClientError::Command(steadfast::CommandError::Refused(refused))) =
        after
    else {
        panic!("not a refusal: {after:?}");
    };
    assert_eq!(refused.reason, RefusedBecause::RuntimeNotFailed);
    assert_eq!(refused.state, "running");
    assert!(running(&patient.snapshot().await.expect("a snapshot")));
    assert!(child.try_wait().expect("wait").is_none(), "kvd still runs");
    let _ = patient.exit(ExitIntent::Halt).await;
    assert_eq!(
        processes::wait_exit(&mut child),
        Some(steadfast::daemon::EXIT_HALT)
    );
}

/// A pipelined `exit` (sent before the server's first byte) to a daemon
/// stopped with SIGSTOP, given up after 1 s by a client that lives on, is
/// never run once the daemon resumes: the client shut the connection down
/// when it gave up, so the server's greeting fails and the frame is never
/// read. (A request's time left is measured from its arrival, and the
/// first frame of a connection has no earlier one to be compared with.)
/// Before the fix: the daemon read the request on resuming and exited.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_abandoned_pipelined_exit_is_never_read() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (mut child, data) = running_kvd_off_runtime(tmp.path()).await;
    processes::signal(&child, rustix::process::Signal::STOP);
    let client =
        ControlClient::connect_pipelined(Endpoint::Unix(socket(&data)), Duration::from_secs(1))
            .await
            .expect("connects (the listener's queue takes it)");
    let gave_up = client.exit(ExitIntent::Halt).await;
    assert!(gave_up.is_err(), "{gave_up:?}");
    processes::signal(&child, rustix::process::Signal::CONT);
    let patient = client.clone().with_timeout(processes::PATIENCE);
    // Through the lifecycle, after whatever the daemon read first.
    let after = patient.retry().await;
    eprintln!("after SIGCONT, retry answered: {after:?}");
    let refused = after
        .as_ref()
        .err()
        .and_then(|e| e.refused())
        .unwrap_or_else(|| panic!("not a refusal: {after:?}"));
    assert_eq!(refused.reason, RefusedBecause::RuntimeNotFailed);
    assert_eq!(refused.state, "running", "the abandoned exit was run");
    assert!(running(&patient.snapshot().await.expect("a snapshot")));
    assert!(child.try_wait().expect("wait").is_none(), "kvd still runs");
    let _ = patient.exit(ExitIntent::Halt).await;
    assert_eq!(
        processes::wait_exit(&mut child),
        Some(steadfast::daemon::EXIT_HALT)
    );
}

/// `steadfastctl exit` abandoned (SIGINT, as Ctrl-C) and `steadfastctl
/// --timeout 1 stop` (it gives up) while kvd is stopped (SIGSTOP): once kvd
/// resumes it neither exits nor stops. Before the fix: the abandoned `exit`
/// ended it.
#[test]
fn an_abandoned_exit_and_stop_from_steadfastctl_are_not_run() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (mut child, data) = running_kvd(tmp.path());
    processes::signal(&child, rustix::process::Signal::STOP);
    let mut exit = Command::new(processes::steadfastctl())
        .arg("--data-dir")
        .arg(&data)
        .arg("exit")
        .stderr(Stdio::null())
        .spawn()
        .expect("steadfastctl exit");
    std::thread::sleep(Duration::from_secs(1));
    processes::signal(&exit, rustix::process::Signal::INT);
    let _ = exit.wait();
    let stop = Command::new(processes::steadfastctl())
        .arg("--data-dir")
        .arg(&data)
        .args(["--timeout", "1", "stop"])
        .output()
        .expect("steadfastctl stop");
    assert_eq!(
        stop.status.code(),
        Some(5),
        "it gave up: timed out: {stop:?}"
    );
    processes::signal(&child, rustix::process::Signal::CONT);
    // Through the lifecycle, after whatever the daemon read first.
    let retry = processes::ctl(&data, &["retry"]);
    let stderr = String::from_utf8_lossy(&retry.stderr);
    assert_eq!(retry.status.code(), Some(3), "{stderr}");
    assert!(stderr.contains("runtime_not_failed"), "{stderr}");
    let status = processes::status(&data).expect("answers");
    assert_eq!(status["lifecycle"]["state"], "running");
    assert!(child.try_wait().expect("wait").is_none(), "kvd still runs");
    assert_eq!(processes::ctl(&data, &["exit"]).status.code(), Some(0));
    assert_eq!(
        processes::wait_exit(&mut child),
        Some(steadfast::daemon::EXIT_HALT)
    );
}

/// Python for a listener of another user: `count_received(s, wait, idle)`
/// accepts on `s` until no one dials for `wait` s, reads each connection
/// until it closes or is idle `idle` s, and gives the bytes received.
const COUNT_RECEIVED: &str = r#"
import socket
def count_received(s, wait, idle):
    s.settimeout(wait)
    got = 0
    try:
        while True:
            c, _ = s.accept()
            c.settimeout(idle)
            try:
                while True:
                    b = c.recv(65536)
                    if not b:
                        break
                    got += len(b)
            except socket.timeout:
                pass
            c.close()
    except socket.timeout:
        pass
    return got
"#;

/// Another user (uid 65534, through `setpriv`) who may write in the data
/// dir renames `.steadfast` away and plants a socket of its own there: the
/// operator's `steadfastctl stop` refuses to talk to it (exit 1, "not
/// trusted") and the planted listener receives nothing. Runs only as root
/// with `setpriv` and `/usr/bin/python3` (the listener); otherwise says why
/// it skips. Before the fix: the client connected and sent its command.
#[test]
fn a_socket_planted_by_another_user_gets_nothing() {
    if !root_with(&[SETPRIV, PYTHON]) {
        return;
    }
    let tmp = tempfile::tempdir().expect("tempdir");
    std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let data = tmp.path().join("data");
    std::fs::create_dir(&data).expect("mkdir");
    // The mistake the attack needs: a data dir others may write in.
    std::fs::set_permissions(&data, std::fs::Permissions::from_mode(0o777)).expect("chmod");
    let control = steadfast_actors::control_dir::ControlDir::under(&data);
    std::fs::create_dir(&control).expect("mkdir");
    std::fs::set_permissions(&control, std::fs::Permissions::from_mode(0o700)).expect("chmod");
    let script = r#"
import os, socket, sys
data = sys.argv[1]
os.rename(os.path.join(data, ".steadfast"), os.path.join(data, ".moved"))
os.mkdir(os.path.join(data, ".steadfast"), 0o755)
path = os.path.join(data, ".steadfast", "control.sock")
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.bind(path)
os.chmod(path, 0o777)
s.listen(16)
print("listening", flush=True)
print("received", count_received(s, 5.0, 2.0), flush=True)
"#;
    let mut planted = as_nobody(PYTHON)
        .arg("-c")
        .arg([COUNT_RECEIVED, script].concat())
        .arg(&data)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the planter runs");
    let mut lines = BufReader::new(planted.stdout.take().expect("stdout")).lines();
    let first = lines.next().and_then(Result::ok).unwrap_or_default();
    assert_eq!(first, "listening", "{}", stderr_of(&mut planted));

    let out = processes::ctl(&data, &["stop"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("not trusted"), "{stderr}");
    assert!(stderr.contains("65534"), "names the owner: {stderr}");
    let out = ctl_at(&socket(&data), &["status"]);
    assert_eq!(out.status.code(), Some(4), "status: unknown: {out:?}");

    let last = lines.next().and_then(Result::ok).unwrap_or_default();
    let _ = planted.wait();
    eprintln!("the planted socket: {last}");
    assert_eq!(last, "received 0", "the planted socket received bytes");
}

/// The last check, in the lifecycle actor: a command sent, then given up by
/// its caller (the future dropped) before the actor reached it, is never
/// stepped — the runtime keeps running, and the next command finds it so.
/// (A current-thread runtime: the command is queued and dropped before the
/// actor runs at all.) Before the fix: the abandoned `stop` stopped it.
#[tokio::test(flavor = "current_thread")]
async fn a_command_whose_caller_gave_up_is_not_stepped() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (run, handle) = supervise(tmp.path(), Switch::new(Some(good())).source(), None);
    until(&handle, "running", running).await;
    {
        let stop = handle.stop(Hold::None);
        futures::pin_mut!(stop);
        // One poll queues the command; then the caller gives up.
        assert!(futures::poll!(stop.as_mut()).is_pending());
    }
    let after = handle.retry().await;
    let Err(steadfast::CommandError::Refused(refused)) = after else {
        panic!("not a refusal: {after:?}");
    };
    assert_eq!(
        refused.reason,
        RefusedBecause::RuntimeNotFailed,
        "{refused:?}"
    );
    assert!(running(&handle.snapshot()));
    exit(run, &handle, ExitIntent::Halt).await;
}

/// The last line of the client's check: the socket file and its directory
/// look right (root's, not writable by others) but the process listening
/// on it runs as uid 65534: `steadfastctl` refuses (exit 1, names the uid)
/// and the listener receives nothing. Runs only as root with `setpriv` and
/// `/usr/bin/python3`; otherwise says why it skips.
#[test]
fn a_listener_of_another_user_gets_nothing() {
    if !root_with(&[SETPRIV, PYTHON]) {
        return;
    }
    let tmp = tempfile::tempdir().expect("tempdir");
    std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let dir = tmp.path().join("sock");
    std::fs::create_dir(&dir).expect("mkdir");
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).expect("chmod");
    let path = dir.join("control.sock");
    let script = r#"
import os, socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.bind(sys.argv[1])
s.listen(16)
print("listening", flush=True)
sys.stdin.readline()
print("received", count_received(s, 1.0, 1.0), flush=True)
"#;
    let mut listener = as_nobody(PYTHON)
        .arg("-c")
        .arg([COUNT_RECEIVED, script].concat())
        .arg(&path)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("the listener runs");
    let mut lines = BufReader::new(listener.stdout.take().expect("stdout")).lines();
    assert_eq!(
        lines.next().and_then(Result::ok).as_deref(),
        Some("listening")
    );
    // Make the file system look like root's own socket.
    rustix::fs::chown(
        &path,
        Some(rustix::fs::Uid::ROOT),
        Some(rustix::fs::Gid::ROOT),
    )
    .expect("chown the socket");
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).expect("chmod");

    let out = ctl_at(&path, &["stop"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("not trusted"), "{stderr}");
    assert!(stderr.contains("runs as uid 65534"), "{stderr}");

    use std::io::Write;
    let mut stdin = listener.stdin.take().expect("stdin");
    stdin.write_all(b"go\n").expect("go");
    drop(stdin);
    let last = lines.next().and_then(Result::ok).unwrap_or_default();
    let _ = listener.wait();
    assert_eq!(last, "received 0", "the listener received bytes");
}

/// A socket left at `control.sock` by a daemon that died (nothing listens
/// on it): kvd replaces it (it holds the data dir's lock) and serves.
#[test]
fn a_stale_socket_is_replaced() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let control = private_control_dir(&tmp.path().join("data"));
    drop(std::os::unix::net::UnixListener::bind(control.join("control.sock")).expect("bind"));
    let (mut child, data) = running_kvd(tmp.path());
    assert_eq!(processes::ctl(&data, &["exit"]).status.code(), Some(0));
    assert_eq!(
        processes::wait_exit(&mut child),
        Some(steadfast::daemon::EXIT_HALT)
    );
}

/// A daemon that runs as a service user (uid 65534, through `setpriv`) over
/// a data dir that user owns and no one else can write, and the operator as
/// root (`sudo steadfastctl`): the root client trusts the data dir's owner,
/// so `status` and `stop` reach the daemon. The check still refuses that
/// uid where the data dir is not its own (`a_listener_of_another_user_gets_nothing`)
/// or others can write it (`a_socket_planted_by_another_user_gets_nothing`).
/// Runs only as root with `setpriv`; otherwise says why it skips.
#[test]
fn a_root_operator_reaches_a_service_users_daemon() {
    if !root_with(&[SETPRIV]) {
        return;
    }
    let tmp = tempfile::tempdir().expect("tempdir");
    std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o755)).expect("chmod");
    // The service user must reach the binary and the config: copies in the
    // 0755 temp dir (the build tree may not be open to it).
    let bin = tmp.path().join("kvd");
    processes::copy_executable(&processes::example("kvd"), &bin);
    let config = kvd_config(tmp.path());
    std::fs::set_permissions(&config, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    let data = tmp.path().join("data");
    std::fs::create_dir(&data).expect("mkdir");
    std::fs::set_permissions(&data, std::fs::Permissions::from_mode(0o700)).expect("chmod");
    let nobody = rustix::fs::Uid::from_raw(65534);
    rustix::fs::chown(&data, Some(nobody), Some(rustix::fs::Gid::from_raw(65534)))
        .expect("chown the data dir");
    let mut child = as_nobody(&bin)
        .arg("--data-dir")
        .arg(&data)
        .arg("--config")
        .arg(&config)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("kvd starts as uid 65534");
    let snapshot = processes::until(&data, "running", |s| s["lifecycle"]["state"] == "running");
    assert_eq!(snapshot["lifecycle"]["state"], "running");
    let control = std::fs::metadata(steadfast_actors::control_dir::ControlDir::under(&data))
        .expect("control dir");
    assert_eq!(
        std::os::unix::fs::MetadataExt::uid(&control),
        65534,
        "the daemon really runs as the service user"
    );
    let out = processes::ctl(&data, &["stop"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let out = processes::ctl(&data, &["exit"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(
        processes::wait_exit(&mut child),
        Some(steadfast::daemon::EXIT_HALT),
        "{}",
        stderr_of(&mut child)
    );
}
