//! The control plane's methods beyond the lifecycle commands
//! (`spec/control.md`, "Methods"): `journal`, `config_set` / `config_unset`
//! / `config_show` over the durable override tier, and `reinit_prepare` /
//! `reinit`, each end to end over the real Unix socket against a real
//! in-process supervisor, and across a relaunch where the method promises
//! something survives it.

use crate::support::common;
use crate::support::common::nz;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use common::*;
use steadfast::control::{ClientError, ControlClient, ServerGuard, serve_unix};
use steadfast::protocol::lifecycle::{LifecycleState, PendingApply, RefusedBecause, StopReason};
use steadfast::protocol::snapshot::{AttemptResult, PhaseOutcome};
use steadfast::{CommandError, ExitIntent, Hold, SupervisorHandle};

fn serve(dir: &Path, handle: &SupervisorHandle) -> ServerGuard {
    serve_unix(
        handle.clone(),
        steadfast_actors::control_dir::ControlDir::under(dir).join("control.sock"),
    )
    .expect("the control socket binds")
}

async fn connect(dir: &Path) -> ControlClient {
    ControlClient::connect_unix(
        steadfast_actors::control_dir::ControlDir::under(dir).join("control.sock"),
    )
    .await
    .expect("connects")
}

/// A supervisor over `dir` with a good config, its socket served, running,
/// and a client connected to it.
async fn running_served(
    dir: &Path,
) -> (
    tokio::task::JoinHandle<ExitIntent>,
    SupervisorHandle,
    ServerGuard,
    ControlClient,
) {
    let (task, handle) = supervise(dir, Switch::new(Some(good())).source(), None);
    let server = serve(dir, &handle);
    until(&handle, "running", running).await;
    let client = connect(dir).await;
    (task, handle, server, client)
}

fn refusal(error: &ClientError) -> RefusedBecause {
    match error {
        ClientError::Command(CommandError::Refused(refused)) => refused.reason,
        other => panic!("expected a refusal, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_journal_tells_attempts_and_phases_across_a_relaunch() {
    let tmp = tempfile::tempdir().expect("tempdir");
    for run in 1..=2u32 {
        let (task, handle, _server, client) = running_served(tmp.path()).await;
        let attempts = client.journal(10).await.expect("journal");
        assert_eq!(
            attempts.iter().map(|a| a.run).collect::<Vec<_>>(),
            (1..=run).collect::<Vec<_>>(),
            "one attempt per run so far: {attempts:#?}"
        );
        let last = attempts.last().expect("an attempt");
        assert_eq!(
            last.attempt.attempt,
            nz(1),
            "each run counts its boots from 1"
        );
        assert_eq!(last.attempt.result, AttemptResult::Succeeded);
        let phases: Vec<_> = last
            .attempt
            .phases
            .iter()
            .map(|p| p.phase.to_string())
            .collect();
        assert_eq!(
            phases,
            ["resolve_config", "open_store", "bind_listener", "serve"]
        );
        for phase in &last.attempt.phases {
            assert_eq!(phase.outcome, PhaseOutcome::Completed, "{phase:?}");
            assert!(phase.duration_ms.is_some(), "{phase:?} has a duration");
        }
        // The limit keeps the most recent.
        let newest = client.journal(1).await.expect("journal");
        assert_eq!(newest.len(), 1);
        assert_eq!(newest[0].run, run);
        exit(task, &handle, ExitIntent::Halt).await;
    }
}

/// `ping`, a command answered from the snapshot alone, answers the
/// daemon's pid and state the same three ways: over the socket, in process
/// (`SupervisorHandle::read`) and from `steadfastctl ping` (text, and
/// `--json`); after a stop it says `stopped`.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn ping_answers_the_pid_and_state_every_way_it_is_asked() {
    use steadfast::protocol::control::cmd;
    let tmp = tempfile::tempdir().expect("tempdir");
    let (task, handle, _server, client) = running_served(tmp.path()).await;
    let pong = client.call(cmd::Ping).await.expect("ping");
    assert_eq!(
        (pong.pid, pong.state.as_str()),
        (std::process::id(), "running")
    );
    assert_eq!(handle.read(&cmd::Ping), pong, "in process, the same answer");
    let socket = steadfast_actors::control_dir::ControlDir::under(tmp.path()).join("control.sock");
    let text = crate::support::processes::ctl_async_at("--socket", &socket, &["ping"]).await;
    assert!(text.status.success(), "{text:?}");
    assert_eq!(
        String::from_utf8_lossy(&text.stdout),
        format!("pid {}: running\n", std::process::id())
    );
    let json =
        crate::support::processes::ctl_async_at("--socket", &socket, &["--json", "ping"]).await;
    assert!(json.status.success(), "{json:?}");
    let value: serde_json::Value = serde_json::from_slice(&json.stdout).expect("JSON");
    assert_eq!(value["pid"], std::process::id());
    assert_eq!(value["state"], "running");
    client.stop(Hold::None).await.expect("stops");
    assert_eq!(client.call(cmd::Ping).await.expect("ping").state, "stopped");
    exit(task, &handle, ExitIntent::Halt).await;
}

/// `SupervisorHandle::call` carries out any command, in process, from
/// its type alone, with the answer a peer gets: a read, a query, a
/// refusal with its typed reason, and commands that change the state.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_command_is_carried_out_in_process_by_its_type() {
    use steadfast::protocol::control::cmd;
    let tmp = tempfile::tempdir().expect("tempdir");
    let (task, handle) = supervise(tmp.path(), Switch::new(Some(good())).source(), None);
    until(&handle, "running", running).await;
    let pong = handle.call(cmd::Ping).await.expect("ping");
    assert_eq!(pong, handle.read(&cmd::Ping));
    let metrics = handle.call(cmd::Metrics).await.expect("metrics");
    assert!(metrics.ends_with("# EOF\n"), "{metrics}");
    let journal = handle
        .call(cmd::Journal { limit: 5 })
        .await
        .expect("journal");
    assert_eq!(journal.into_attempts().expect("attempts").len(), 1);
    let refused = handle.call(cmd::Retry).await.expect_err("nothing failed");
    assert_eq!(
        refused.refused().map(|r| r.reason),
        Some(RefusedBecause::RuntimeNotFailed)
    );
    let stopped = handle
        .call(cmd::Stop { hold: Hold::None })
        .await
        .expect("stops")
        .into_snapshot()
        .expect("a snapshot");
    assert!(
        matches!(stopped.lifecycle, LifecycleState::Stopped { .. }),
        "{:?}",
        stopped.lifecycle
    );
    assert_eq!(handle.call(cmd::Ping).await.expect("ping").state, "stopped");
    handle.call(cmd::Start).await.expect("starts");
    until(&handle, "running again", running).await;
    exit(task, &handle, ExitIntent::Halt).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn overrides_are_set_shown_unset_and_survive_a_relaunch() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let defaults = "listen_addr = \"127.0.0.1:0\"\nlog_level = \"info\"";
    let (task, handle) = supervise_toml(tmp.path(), defaults);
    let _server = serve(tmp.path(), &handle);
    until(&handle, "running", running).await;
    let client = connect(tmp.path()).await;

    // A bare word is a string; the change reaches the running runtime as a
    // config_changed (the test service takes nothing in place).
    client.config_set("log_level", "debug").await.expect("set");
    until(&handle, "the change reported", |s| {
        s.pending
            == PendingApply::RestartNeeded {
                leaves: vec!["log_level".into()],
            }
    })
    .await;
    let view = client.config_show(Some("log_level")).await.expect("show");
    assert_eq!(view.overrides, [("log_level".into(), "\"debug\"".into())]);
    assert_eq!(view.effective.as_deref(), Some("\"debug\""));
    let whole = client.config_show(None).await.expect("show");
    assert!(
        whole
            .effective
            .as_deref()
            .is_some_and(|t| t.contains("log_level = \"debug\"")),
        "{whole:?}"
    );
    // TOML values keep their type.
    client.config_set("limits.max", "8").await.expect("set");
    let view = client.config_show(Some("limits.max")).await.expect("show");
    assert_eq!(view.effective.as_deref(), Some("8"));

    // A malformed leaf is refused as invalid, and changes nothing.
    let bad = client.config_set("a..b", "1").await.expect_err("refused");
    assert!(
        matches!(bad, ClientError::Command(CommandError::Invalid(_))),
        "{bad:?}"
    );
    assert_eq!(
        client
            .config_show(None)
            .await
            .expect("show")
            .overrides
            .len(),
        2
    );

    // The tier is bounded: a set that would not fit is refused, and
    // changes nothing (no durability error either).
    let huge = "x".repeat(5_000);
    let too_big = client.config_set("huge", &huge).await.expect_err("refused");
    assert!(
        matches!(&too_big, ClientError::Command(CommandError::Invalid(m)) if m.contains("bytes")),
        "{too_big:?}"
    );
    assert_eq!(client.snapshot().await.expect("snapshot").error, None);

    // Durable in the control directory, owner-only.
    let file = steadfast_actors::control_dir::ControlDir::under(tmp.path()).join("overrides");
    let mode = std::fs::metadata(&file)
        .expect("the overrides file")
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);
    exit(task, &handle, ExitIntent::Halt).await;

    // A relaunched daemon boots with them.
    let (task, handle) = supervise_toml(tmp.path(), defaults);
    let _server = serve(tmp.path(), &handle);
    until(&handle, "running", running).await;
    let client = connect(tmp.path()).await;
    let view = client.config_show(Some("log_level")).await.expect("show");
    assert_eq!(view.effective.as_deref(), Some("\"debug\""));

    client.config_unset("log_level").await.expect("unset");
    client.config_unset("limits.max").await.expect("unset");
    let view = client.config_show(Some("log_level")).await.expect("show");
    assert!(view.overrides.is_empty());
    assert_eq!(view.effective.as_deref(), Some("\"info\""));
    assert!(!file.exists(), "an empty tier leaves no file");
    exit(task, &handle, ExitIntent::Halt).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_override_retries_a_boot_held_on_the_config() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (task, handle) = supervise_toml(
        tmp.path(),
        "listen_addr = \"127.0.0.1:0\"\nrefuse = \"not approved\"",
    );
    let _server = serve(tmp.path(), &handle);
    until(&handle, "a held failure", failed).await;
    let client = connect(tmp.path()).await;
    client.config_set("refuse", "false").await.expect("set");
    let up = until(&handle, "running", running).await;
    assert!(matches!(up.lifecycle, LifecycleState::Running { attempt, .. } if attempt.get() == 2));
    exit(task, &handle, ExitIntent::Halt).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn reinit_wipes_a_stopped_runtime_with_a_fresh_token_only() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let service = Arc::new(TestService::default());
    let (task, handle) = supervise_with(
        tmp.path(),
        Switch::new(Some(good())).source(),
        None,
        service.clone(),
    );
    let _server = serve(tmp.path(), &handle);
    until(&handle, "running", running).await;
    let client = connect(tmp.path()).await;
    let data = tmp.path().join("store.data");
    assert!(data.exists());

    // Only from stopped.
    let early = client.reinit_prepare().await.expect_err("refused");
    assert_eq!(refusal(&early), RefusedBecause::RuntimeNotStopped);
    client.stop(Hold::None).await.expect("stop");

    let prepared = client.reinit_prepare().await.expect("prepare");
    assert_eq!(prepared.epoch, handle.snapshot().epoch);
    // A token this daemon did not issue, or a mistyped one.
    for wrong in [
        "reinit-0-deadbeef",
        "yes",
        &prepared.token.replace("reinit-", "reinit-9"),
    ] {
        let refused = client.reinit(wrong).await.expect_err("refused");
        assert_eq!(
            refusal(&refused),
            RefusedBecause::StaleConfirmation,
            "{wrong}"
        );
    }
    assert_eq!(service.wipes.load(Ordering::SeqCst), 0, "nothing wiped yet");

    let done = client.reinit(&prepared.token).await.expect("reinit");
    assert!(
        matches!(
            done.lifecycle,
            LifecycleState::Stopped {
                reason: StopReason::ReinitComplete,
                ..
            }
        ),
        "{:?}",
        done.lifecycle
    );
    assert_eq!(service.wipes.load(Ordering::SeqCst), 1);
    assert!(!data.exists(), "the wipe step removed the store's data");
    assert_eq!(done.epoch, prepared.epoch + 1);

    // The token is spent.
    let again = client.reinit(&prepared.token).await.expect_err("refused");
    assert_eq!(refusal(&again), RefusedBecause::StaleConfirmation);

    // A token goes stale across a boot.
    let before_boot = client.reinit_prepare().await.expect("prepare");
    client.start().await.expect("start");
    until(&handle, "running", running).await;
    assert!(data.exists(), "the next boot rebuilt the store");
    client.stop(Hold::None).await.expect("stop");
    let stale = client
        .reinit(&before_boot.token)
        .await
        .expect_err("refused");
    assert_eq!(refusal(&stale), RefusedBecause::StaleConfirmation);
    assert_eq!(service.wipes.load(Ordering::SeqCst), 1);
    exit(task, &handle, ExitIntent::Halt).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_failing_wipe_is_reported_and_rests_reinit_failed() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let mut failing = good();
    failing.insert("wipe_fails".into(), toml::Value::Boolean(true));
    let (task, handle) = supervise(tmp.path(), Switch::new(Some(failing)).source(), None);
    let _server = serve(tmp.path(), &handle);
    until(&handle, "running", running).await;
    let client = connect(tmp.path()).await;
    client.stop(Hold::None).await.expect("stop");
    let prepared = client.reinit_prepare().await.expect("prepare");
    let error = client.reinit(&prepared.token).await.expect_err("fails");
    match &error {
        ClientError::Command(CommandError::Failed(message)) => {
            assert!(message.contains("asked the wipe to fail"), "{message}");
        }
        other => panic!("expected a failure, got {other:?}"),
    }
    let now = client.snapshot().await.expect("snapshot");
    assert!(matches!(
        now.lifecycle,
        LifecycleState::Stopped {
            reason: StopReason::ReinitFailed,
            ..
        }
    ));
    assert!(
        now.error
            .as_deref()
            .is_some_and(|e| e.contains("asked the wipe to fail")),
        "{:?}",
        now.error
    );
    // It can be confirmed again, in the new epoch.
    let retry = client.reinit_prepare().await.expect("prepare");
    assert_eq!(retry.epoch, prepared.epoch + 1);
    exit(task, &handle, ExitIntent::Halt).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_custom_config_source_still_gets_the_override_tier() {
    // Before the builder, a supervisor over a `ConfigSource` of one's own
    // had no override tier: `config set` and `config show` were refused
    // ("no override tier"). The tier is the supervisor's now, on top of any
    // source.
    let tmp = tempfile::tempdir().expect("tempdir");
    let (task, handle, _server, client) = running_served(tmp.path()).await;
    client
        .config_set("a", "1")
        .await
        .expect("set on a custom source");
    let view = client.config_show(Some("a")).await.expect("show");
    assert_eq!(view.overrides, [("a".to_owned(), "1".to_owned())]);
    assert_eq!(view.effective.as_deref(), Some("1"), "{view:?}");
    exit(task, &handle, ExitIntent::Halt).await;
}
