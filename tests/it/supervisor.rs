//! The supervisor end to end (seed 004's scenarios and steadfast's own):
//! each test runs a real [`Supervisor`] over a throwaway data directory with
//! real files, a real TCP bind and a real notify watcher, drives it the way an
//! operator or a service manager would, and reads the published snapshot —
//! never the actors — to see where it is.

use crate::support::common;

use std::sync::Arc;
use std::time::Duration;

use common::*;
use steadfast::config::{ConfigError, ConfigSource, ResolvedConfig};
use steadfast::protocol::journal::{Record, decode};
use steadfast::protocol::lifecycle::StoreOutcome;
use steadfast::protocol::lifecycle::{
    LifecycleState, PendingApply, RefusedBecause, RetryClass, StopReason,
};
use steadfast::protocol::snapshot::{AttemptResult, PreviousRun};
use steadfast::service::StoreLock;
use steadfast::{CommandError, ExitIntent, Hold, Supervisor, SupervisorError};

fn journal_records(data_dir: &std::path::Path) -> Vec<Record> {
    let bytes =
        std::fs::read(data_dir.join(".steadfast").join("journal")).expect("the journal exists");
    decode(&bytes).expect("the journal decodes").records
}

/// A port someone else holds is waited out: the boot fails at the bind, is
/// retried on backoff (first delay exactly 1000 ms), and comes up once the
/// port is free — no process exit involved.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_boot_that_cannot_bind_is_retried_until_the_port_frees() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let squatter = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = squatter.local_addr().expect("addr").to_string();
    let cfg = config(&format!("listen_addr = \"{addr}\""));
    let (run, handle) = supervise(tmp.path(), Switch::new(Some(cfg)).source(), None);

    let failed_boot = until(&handle, "a failed bind", failed).await;
    let LifecycleState::Failed { report, retry, .. } = failed_boot.lifecycle else {
        unreachable!()
    };
    assert_eq!(report.phase.as_str(), "bind_listener");
    assert!(
        matches!(retry, RetryClass::Backoff { delay_ms: 1000, .. }),
        "{retry:?}"
    );

    drop(squatter);
    let up = until(&handle, "running", running).await;
    assert!(up.attempts.len() >= 2);
    let first = &up.attempts[0];
    assert_eq!(first.result, AttemptResult::Failed);
    assert_eq!(
        first.phases.last().map(|p| p.phase.as_str()),
        Some("bind_listener")
    );
    let last = up.attempts.last().expect("an attempt");
    assert_eq!(last.result, AttemptResult::Succeeded);
    assert_eq!(
        last.phases
            .iter()
            .map(|p| p.phase.as_str())
            .collect::<Vec<_>>(),
        ["resolve_config", "open_store", "bind_listener", "serve"]
    );

    exit(run, &handle, ExitIntent::Halt).await;
    let records = journal_records(tmp.path());
    let started = records
        .iter()
        .filter(|r| matches!(r, Record::AttemptStarted { .. }))
        .count();
    assert_eq!(started, up.attempts.len(), "every attempt is journaled");
    assert!(StoreLock::probe(tmp.path()) == StoreOutcome::Released);
}

/// A config that does not resolve is held — no timer retries it — until an
/// operator retries after fixing it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_config_that_does_not_resolve_is_held_until_retried() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let switch = Switch::new(None);
    let (run, handle) = supervise(tmp.path(), switch.source(), None);

    let held = until(&handle, "a held failure", failed).await;
    assert!(matches!(
        &held.lifecycle,
        LifecycleState::Failed { report, retry: RetryClass::Hold, .. } if report.phase.as_str() == "resolve_config"
    ));
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(
        handle.snapshot().attempts.len(),
        1,
        "a held failure is not retried on a timer"
    );

    switch.set(Some(good()));
    handle.retry().await.expect("retry accepted");
    let up = until(&handle, "running", running).await;
    assert_eq!(up.attempts.len(), 2);
    exit(run, &handle, ExitIntent::Halt).await;
}

/// Stop and start without leaving the process: the store is released between
/// them, and the second boot is the next attempt.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_runtime_stops_and_starts_again_in_the_same_daemon() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (run, handle) = supervise(tmp.path(), Switch::new(Some(good())).source(), None);
    until(&handle, "running", running).await;

    let refused = handle.start().await.expect_err("already running");
    assert!(
        matches!(refused, CommandError::Refused(r) if r.reason == RefusedBecause::RuntimeRunning)
    );

    let stopped = handle.stop(Hold::None).await.expect("stop");
    assert_eq!(stopped.epoch, 1);
    assert!(matches!(
        stopped.lifecycle,
        LifecycleState::Stopped {
            reason: StopReason::OperatorRequest,
            epoch: 1,
            ..
        }
    ));
    assert_eq!(
        StoreLock::probe(tmp.path()),
        StoreOutcome::Released,
        "the stop released the store"
    );

    handle.start().await.expect("start");
    let up = until(&handle, "running again", running).await;
    assert!(matches!(up.lifecycle, LifecycleState::Running { attempt, .. } if attempt.get() == 2));
    exit(run, &handle, ExitIntent::Relaunch).await;
}

/// A stop held across relaunch survives the process: the next daemon comes up
/// stopped, knows the last one ended cleanly, and boots when started.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_hold_keeps_a_relaunched_daemon_stopped_until_started() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let source = Switch::new(Some(good())).source();
    let identity = {
        let (run, handle) = supervise(tmp.path(), source.clone(), None);
        let up = until(&handle, "running", running).await;
        assert_eq!(up.previous_run, PreviousRun::FirstEver);
        assert!(up.identity.is_some(), "the first boot records its identity");
        handle.stop(Hold::AcrossRelaunch).await.expect("stop");
        exit(run, &handle, ExitIntent::Relaunch).await;
        up.identity
    };
    assert!(tmp.path().join(".steadfast").join("hold").exists());

    let (run, handle) = supervise(tmp.path(), source, None);
    let held = until(&handle, "held at startup", |s| {
        matches!(
            s.lifecycle,
            LifecycleState::Stopped {
                reason: StopReason::HeldAtStartup,
                ..
            }
        )
    })
    .await;
    assert!(
        matches!(held.previous_run, PreviousRun::CleanStop { .. }),
        "{:?}",
        held.previous_run
    );
    assert_eq!(held.identity, identity, "the identity outlives the process");
    assert!(held.hold);

    let started = handle.start().await.expect("start");
    assert!(!started.hold);
    assert!(
        !tmp.path().join(".steadfast").join("hold").exists(),
        "starting clears the hold"
    );
    until(&handle, "running", running).await;
    exit(run, &handle, ExitIntent::Halt).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_daemon_per_data_directory() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let source = Switch::new(None).source();
    let service = Arc::new(TestService::default());
    let (_first, _handle) = Supervisor::builder(tmp.path(), Arc::clone(&service))
        .config(source.clone())
        .build()
        .expect("the first daemon");
    let second = Supervisor::builder(tmp.path(), service)
        .config(source)
        .build();
    assert!(
        matches!(second, Err(SupervisorError::Locked(_))),
        "{second:?}"
    );
}

/// The data directory is fixed for the life of the daemon: a config that
/// moves it is a held failure whose error names `data_dir`.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_config_that_moves_the_data_dir_is_refused() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let elsewhere = tempfile::tempdir().expect("tempdir");
    let cfg = config(&format!(
        "data_dir = {:?}\nlisten_addr = \"127.0.0.1:0\"",
        elsewhere.path().display().to_string()
    ));
    let (run, handle) = supervise(tmp.path(), Switch::new(Some(cfg)).source(), None);
    let failed_boot = until(&handle, "a held failure", failed).await;
    let LifecycleState::Failed { report, retry, .. } = failed_boot.lifecycle else {
        unreachable!()
    };
    assert_eq!(report.phase.as_str(), "resolve_config");
    assert!(report.error.contains("data_dir"), "{}", report.error);
    assert_eq!(retry, RetryClass::Hold);
    exit(run, &handle, ExitIntent::Halt).await;
}

/// A boot held on its config is retried when the declared file changes.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_change_to_the_declared_file_retries_a_held_boot() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (declared, run, handle) = held_on_declared_file(tmp.path()).await;

    std::fs::write(&declared, "fixed\n").expect("fix the file");
    until(&handle, "running", running).await;
    exit(run, &handle, ExitIntent::Halt).await;
}

/// A held boot is retried when the declared file changes, not for an
/// event about the bytes it already read: the same bytes written again, or
/// (as the README walkthrough showed) the event of a write the failed boot
/// saw, arriving after its quiet period once the boot has failed. Either
/// retry would read the same bytes and fail again, a failure streak of 2
/// for one bad file.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_held_boot_is_not_retried_for_the_bytes_it_read() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (declared, run, handle) = held_on_declared_file(tmp.path()).await;
    let failed_attempt = |s: &steadfast::protocol::snapshot::Snapshot| match &s.lifecycle {
        LifecycleState::Failed {
            attempt, report, ..
        } => Some((attempt.get(), report.error.clone())),
        _ => None,
    };
    assert_eq!(
        failed_attempt(&handle.snapshot()).map(|(attempt, _)| attempt),
        Some(1)
    );

    std::fs::write(&declared, "broken\n").expect("the same bytes again");
    // Past the watcher's quiet period, so its firing for these bytes is
    // not folded into the next write's.
    tokio::time::sleep(Duration::from_millis(300)).await;
    std::fs::write(&declared, "still broken\n").expect("other bytes");
    let held = until(&handle, "held on the new bytes", |s| {
        failed_attempt(s).is_some_and(|(_, error)| error.contains("still broken"))
    })
    .await;
    assert_eq!(
        failed_attempt(&held).map(|(attempt, _)| attempt),
        Some(2),
        "one retry, for the bytes that changed: {:?}",
        held.lifecycle
    );
    exit(run, &handle, ExitIntent::Halt).await;
}

/// A supervisor whose source reads `declared` and makes its config from the
/// text with `parse`; the first resolve stops after its read until
/// [`change_mid_boot`] has written `change` over the file and let the
/// watcher's event (refused: the lifecycle is booting) arrive. Every later
/// resolve runs straight through.
async fn boot_through_a_change(
    data_dir: &std::path::Path,
    declared: std::path::PathBuf,
    change: &str,
    parse: impl Fn(&str) -> Result<ResolvedConfig, ConfigError> + Send + Sync + 'static,
) -> (
    tokio::task::JoinHandle<ExitIntent>,
    steadfast::SupervisorHandle,
) {
    let file = declared.clone();
    let (reading_tx, reading_rx) = std::sync::mpsc::channel();
    let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
    // Taken by the first resolve only.
    let gate = std::sync::Mutex::new(Some((reading_tx, go_rx)));
    let source = ConfigSource::new(move || {
        let text =
            std::fs::read_to_string(&file).map_err(|e| ConfigError::Invalid(e.to_string()))?;
        if let Some((reading, go)) = gate
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take()
        {
            let _ = reading.send(());
            let _ = go.recv();
        }
        parse(&text)
    });
    let supervised = supervise(data_dir, source, Some(declared.clone()));

    tokio::task::spawn_blocking(move || reading_rx.recv())
        .await
        .expect("join")
        .expect("the first attempt read the declared file");
    std::fs::write(&declared, change).expect("the change lands mid-boot");
    // Let the watcher's (refused) event arrive while the boot is still held.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let _ = go_tx.send(());
    supervised
}

/// The same fix, landing while the boot that will fail is still reading: the
/// watcher's event reaches a lifecycle that is booting and is refused, so the
/// supervisor must settle against the file as it is when the failure lands.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_change_that_lands_during_a_failing_boot_is_not_lost() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let declared = tmp.path().join("daemon.toml");
    std::fs::write(&declared, "broken\n").expect("write");
    let (run, handle) = boot_through_a_change(tmp.path(), declared, "fixed\n", |text| {
        if text.trim() == "fixed" {
            Ok(ResolvedConfig::untracked(good()))
        } else {
            Err(ConfigError::Invalid(format!("not fixed: {text:?}")))
        }
    })
    .await;

    until(&handle, "running", running).await;
    exit(run, &handle, ExitIntent::Halt).await;
}

/// The same timing on a boot that succeeds: the file changes after the boot
/// read it and before it runs, the watcher's event reaches a booting
/// lifecycle and is refused, and the runtime comes up on the bytes read
/// before the change. The supervisor settles against the file as it is when
/// the runtime is running: the change is applied (the test service reports
/// every changed leaf as needing a restart), not lost until the next write.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_change_that_lands_during_a_successful_boot_is_applied() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let declared = tmp.path().join("daemon.toml");
    std::fs::write(&declared, "note = \"before\"\n").expect("write");
    let (run, handle) = boot_through_a_change(tmp.path(), declared, "note = \"after\"\n", |text| {
        let mut table = good();
        let note: toml::Table = text
            .parse()
            .map_err(|e| ConfigError::Invalid(format!("{e}")))?;
        table.extend(note);
        Ok(ResolvedConfig::untracked(table))
    })
    .await;

    let applied = until(&handle, "the mid-boot change applied", |s| {
        running(s)
            && matches!(&s.pending, PendingApply::RestartNeeded { leaves } if leaves == &["note".to_owned()])
    })
    .await;
    assert_eq!(applied.attempts.len(), 1, "applied in place, not rebooted");
    exit(run, &handle, ExitIntent::Halt).await;
}

/// A boot step that panics is a failed boot of class backoff, not a crashed
/// process; the store it had opened is probed released.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_panicking_boot_step_is_a_failed_boot_not_a_crashed_process() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let switch = Switch::new(Some(config("panic_in = \"bind_listener\"")));
    let (run, handle) = supervise(tmp.path(), switch.source(), None);
    let failed_boot = until(&handle, "a failed boot", failed).await;
    let LifecycleState::Failed { report, retry, .. } = &failed_boot.lifecycle else {
        unreachable!()
    };
    assert!(report.error.contains("panicked"), "{}", report.error);
    assert_eq!(report.phase.as_str(), "bind_listener");
    assert!(matches!(retry, RetryClass::Backoff { .. }));
    assert_eq!(StoreLock::probe(tmp.path()), StoreOutcome::Released);

    switch.set(Some(good()));
    let up = until(&handle, "running after the backoff", running).await;
    assert!(up.attempts.len() >= 2);
    exit(run, &handle, ExitIntent::Halt).await;
}

/// A drain that cannot release the store wedges; only exit is accepted.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_drain_that_cannot_release_wedges_and_only_exit_is_accepted() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let switch = Switch::new(Some(config("leak_store_on_drain = true")));
    let (run, handle) = supervise(tmp.path(), switch.source(), None);
    until(&handle, "running", running).await;
    let stopped = handle.stop(Hold::None).await.expect("stop answered");
    let LifecycleState::Wedged { cause, .. } = &stopped.lifecycle else {
        panic!("not wedged: {:?}", stopped.lifecycle)
    };
    assert!(
        cause.contains("open_store"),
        "the cause names the survivor: {cause}"
    );
    for refused in [
        handle.start().await,
        handle.retry().await,
        handle.restart().await,
        handle.stop(Hold::None).await,
    ] {
        assert!(
            matches!(refused, Err(CommandError::Refused(r)) if r.reason == RefusedBecause::Wedged)
        );
    }
    exit(run, &handle, ExitIntent::Relaunch).await;
}

/// A runtime that dies while running goes to failed with backoff, then boots
/// again on its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_runtime_dying_while_running_fails_with_backoff() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let switch = Switch::new(Some(config("serve_ends_after_ms = 100")));
    let (run, handle) = supervise(tmp.path(), switch.source(), None);
    until(&handle, "running", running).await;
    let failed_run = until(&handle, "failed after the runtime ended", failed).await;
    let LifecycleState::Failed { report, retry, .. } = &failed_run.lifecycle else {
        unreachable!()
    };
    assert_eq!(report.phase.as_str(), "run");
    assert!(report.error.contains("gave up"), "{}", report.error);
    assert!(matches!(retry, RetryClass::Backoff { delay_ms: 1000, .. }));
    assert_eq!(StoreLock::probe(tmp.path()), StoreOutcome::Released);
    switch.set(Some(good()));
    until(&handle, "running again", |s| {
        running(s) && s.attempts.len() >= 2
    })
    .await;
    exit(run, &handle, ExitIntent::Halt).await;
}

/// A torn journal tail (a crash mid-append) is repaired at open with a
/// `.broken` copy kept, and the daemon starts.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_torn_journal_tail_is_recovered() {
    let tmp = tempfile::tempdir().expect("tempdir");
    run_once(tmp.path()).await;
    let path = tmp.path().join(".steadfast").join("journal");
    let mut bytes = std::fs::read(&path).expect("read");
    let before = decode(&bytes).expect("decodes").records.len();
    bytes.extend_from_slice(&[40, 0, 0, 0, 1, 2, 3]); // half a frame
    std::fs::write(&path, &bytes).expect("tear");

    let (run, handle) = supervise(tmp.path(), Switch::new(Some(good())).source(), None);
    until(&handle, "running", running).await;
    exit(run, &handle, ExitIntent::Halt).await;
    assert_eq!(
        std::fs::read(tmp.path().join(".steadfast").join("journal.broken")).expect("broken copy"),
        bytes
    );
    assert!(
        journal_records(tmp.path()).len() > before,
        "appends continue after the repair"
    );
}

/// A bad record followed by good ones is corruption: the supervisor refuses to
/// start, names the file and the offset, and leaves the file as it was.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_corrupt_journal_is_refused() {
    let tmp = tempfile::tempdir().expect("tempdir");
    run_once(tmp.path()).await;
    let path = tmp.path().join(".steadfast").join("journal");
    let mut bytes = std::fs::read(&path).expect("read");
    let first_payload = steadfast::protocol::journal::HEADER_LEN + 8;
    bytes[first_payload] ^= 0x40;
    std::fs::write(&path, &bytes).expect("corrupt");

    let result = Supervisor::builder(tmp.path(), TestService::default())
        .config(Switch::new(Some(good())).source())
        .build();
    let error = result
        .expect_err("a corrupt journal refuses to start")
        .to_string();
    assert!(error.contains("journal"), "{error}");
    assert!(
        error.contains(&steadfast::protocol::journal::HEADER_LEN.to_string()),
        "names the offset: {error}"
    );
    assert_eq!(
        std::fs::read(&path).expect("read"),
        bytes,
        "nothing was truncated"
    );
}

/// 1,000 commands from 8 tasks at once are all answered — accepted or
/// refused with a reason — and the lifecycle's invariants still hold.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_thousand_concurrent_commands_are_all_answered() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (run, handle) = supervise(tmp.path(), Switch::new(Some(good())).source(), None);
    until(&handle, "running", running).await;
    let mut tasks = Vec::new();
    for worker in 0..8u32 {
        let handle = handle.clone();
        tasks.push(tokio::spawn(async move {
            let mut answered = 0u32;
            for i in 0..125u32 {
                let result = match (worker + i) % 4 {
                    0 => handle.stop(Hold::None).await,
                    1 => handle.start().await,
                    2 => handle.restart().await,
                    _ => handle.retry().await,
                };
                match result {
                    Ok(_) | Err(CommandError::Refused(_)) => answered += 1,
                    Err(other) => panic!("a command was not answered: {other}"),
                }
            }
            answered
        }));
    }
    let mut answered = 0;
    for task in tasks {
        answered += task.await.expect("worker");
    }
    assert_eq!(answered, 1000);
    let last = handle.snapshot();
    assert!(last.error.is_none(), "{:?}", last.error);
    // Whatever state it ended in, it can still be driven to running.
    if !running(&last) {
        let _ = handle.start().await;
        let _ = handle.retry().await;
        until(&handle, "running", running).await;
    }
    exit(run, &handle, ExitIntent::Halt).await;
    assert_eq!(StoreLock::probe(tmp.path()), StoreOutcome::Released);
}

/// 200 rapid writes to the declared file cause a bounded number of boots, and
/// the daemon ends on the last content.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn rapid_writes_to_the_declared_file_end_on_the_last_content() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let declared = tmp.path().join("daemon.toml");
    std::fs::write(&declared, "version = 0\n").expect("write");
    let file = declared.clone();
    let source = ConfigSource::new(move || {
        let text =
            std::fs::read_to_string(&file).map_err(|e| ConfigError::Invalid(e.to_string()))?;
        let table: toml::Table = text
            .parse()
            .map_err(|e: toml::de::Error| ConfigError::Invalid(e.to_string()))?;
        // Only the last version is good: every other one is held.
        if table.get("version").and_then(toml::Value::as_integer) == Some(200) {
            Ok(ResolvedConfig::untracked(good()))
        } else {
            Err(ConfigError::Invalid(format!(
                "version {:?} is not the last",
                table.get("version")
            )))
        }
    });
    let (run, handle) = supervise(tmp.path(), source, Some(declared.clone()));
    until(&handle, "a held failure", failed).await;
    for version in 1..=200 {
        std::fs::write(&declared, format!("version = {version}\n")).expect("write");
    }
    let up = until(&handle, "running on the last content", running).await;
    let LifecycleState::Running { attempt, .. } = up.lifecycle else {
        unreachable!()
    };
    let boots = attempt.get();
    // The watcher debounces: far fewer boots than writes.
    assert!(boots <= 100, "bounded: {boots} boots for 200 writes");
    eprintln!("200 writes caused {boots} boots");
    exit(run, &handle, ExitIntent::Halt).await;
}

/// A drain that panics is not a crash: its task reports the panic to the
/// Lifecycle actor, which settles the drain on a probed store
/// (the runtime was dropped while the drain unwound, which released the
/// store); the next drain gets a task of its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_panicking_drain_settles_on_a_probed_store() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (run, handle) = supervise(
        tmp.path(),
        Switch::new(Some(config("panic_on_destroy = true"))).source(),
        None,
    );
    until(&handle, "running", running).await;
    let stopped = handle.stop(Hold::None).await.expect("stop answered");
    assert!(
        matches!(
            stopped.lifecycle,
            LifecycleState::Stopped {
                reason: StopReason::OperatorRequest,
                ..
            }
        ),
        "{:?}",
        stopped.lifecycle
    );
    assert_eq!(StoreLock::probe(tmp.path()), StoreOutcome::Released);
    // The next drain works: another round trip.
    handle.start().await.expect("start");
    until(&handle, "running again", running).await;
    exit(run, &handle, ExitIntent::Halt).await;
}

/// The Lifecycle actor holds the machine: if it dies (here, the service's
/// in-place config apply panics inside it), Root ends the process with intent
/// relaunch, and the runtime it held is dropped, releasing the store.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_dead_lifecycle_ends_the_process_for_a_relaunch() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let switch = Switch::new(Some(good()));
    let (run, handle) = supervise(tmp.path(), switch.source(), None);
    until(&handle, "running", running).await;
    switch.set(Some(config("panic_on_apply = true")));
    let answer = handle.reload().await;
    assert!(
        matches!(answer, Err(CommandError::Unavailable)),
        "{answer:?}"
    );
    let intent = tokio::time::timeout(PATIENCE, run)
        .await
        .expect("ends")
        .expect("task");
    assert_eq!(intent, ExitIntent::Relaunch);
    assert_eq!(StoreLock::probe(tmp.path()), StoreOutcome::Released);
}

/// While running, a config change is handed to the service in place; the
/// leaves it cannot take are reported as `pending: restart_needed`, and a
/// restart boots with them.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_change_while_running_reports_the_leaves_that_need_a_restart() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let switch = Switch::new(Some(good()));
    let (run, handle) = supervise(tmp.path(), switch.source(), None);
    until(&handle, "running", running).await;
    switch.set(Some(config("listen_addr = \"127.0.0.1:0\"\nworkers = 4")));
    handle.reload().await.expect("reload accepted");
    let pending = until(&handle, "pending leaves", |s| {
        s.pending != steadfast::protocol::lifecycle::PendingApply::InSync
    })
    .await;
    assert_eq!(
        pending.pending,
        steadfast::protocol::lifecycle::PendingApply::RestartNeeded {
            leaves: vec!["workers".into()]
        }
    );
    assert!(running(&pending), "still running on the old config");
    handle.restart().await.expect("restart");
    let again = until(&handle, "running after the restart", |s| {
        running(s)
            && s.attempts.len() == 2
            && s.pending == steadfast::protocol::lifecycle::PendingApply::InSync
    })
    .await;
    assert_eq!(again.epoch, 1);
    exit(run, &handle, ExitIntent::Halt).await;
}

/// A change that does not resolve while running is not applied: the
/// snapshot's `errors` hold it typed (`config_apply`, the text the
/// rendered `error` shows), the runtime keeps running, and the next change
/// that applies clears it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_change_not_applied_is_a_typed_error_slot_until_one_applies() {
    use steadfast::protocol::snapshot::ErrorSource;
    let tmp = tempfile::tempdir().expect("tempdir");
    let switch = Switch::new(Some(good()));
    let (run, handle) = supervise(tmp.path(), switch.source(), None);
    until(&handle, "running", running).await;
    switch.set(None);
    let _ = handle.reload().await;
    let failed = until(&handle, "the apply's error", |s| !s.errors.is_empty()).await;
    assert_eq!(failed.errors.len(), 1, "{:?}", failed.errors);
    assert_eq!(failed.errors[0].source, ErrorSource::ConfigApply);
    assert_eq!(
        failed.error.as_deref(),
        Some(failed.errors[0].error.as_str())
    );
    assert!(
        failed.errors[0].error.contains("does not resolve"),
        "{:?}",
        failed.errors
    );
    assert!(running(&failed), "still running on the old config");
    let json = serde_json::to_value(&failed).expect("json");
    assert_eq!(json["errors"][0]["source"], "config_apply", "{json}");

    switch.set(Some(good()));
    handle.reload().await.expect("reload accepted");
    until(&handle, "the error cleared", |s| {
        s.errors.is_empty() && s.error.is_none()
    })
    .await;
    exit(run, &handle, ExitIntent::Halt).await;
}

/// A plan that names one step twice (its checkpoints and outputs would be
/// one) is a held failure of `resolve_config` naming the step, not a boot
/// that runs it twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_plan_that_names_a_step_twice_is_held_naming_it() {
    struct Once;
    impl steadfast::Step for Once {
        const NAME: &'static str = "once";
        type Config = toml::Table;
        type Output = ();
        async fn execute(
            &self,
            _cx: steadfast::StepContext<'_, toml::Table>,
        ) -> Result<steadfast::Resource<()>, steadfast::StepError> {
            Ok(steadfast::Resource::new("nothing", "", ()))
        }
    }
    struct Twice;
    impl steadfast::Service for Twice {
        type Config = toml::Table;

        fn plan(&self, _config: &toml::Table) -> steadfast::Plan<toml::Table> {
            steadfast::Plan::new().step(Once).step(Once)
        }
    }
    let tmp = tempfile::tempdir().expect("tempdir");
    let (run, handle) = supervise_with(
        tmp.path(),
        Switch::new(Some(good())).source(),
        None,
        Arc::new(Twice),
    );
    let held = until(&handle, "a held failure", failed).await;
    let LifecycleState::Failed { report, retry, .. } = &held.lifecycle else {
        panic!("{:?}", held.lifecycle);
    };
    assert_eq!(*retry, RetryClass::Hold);
    assert_eq!(report.phase.as_str(), "resolve_config");
    assert!(report.error.contains("`once` twice"), "{}", report.error);
    exit(run, &handle, ExitIntent::Halt).await;
}
