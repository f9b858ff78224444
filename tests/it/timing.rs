//! Backoff, the stable period, the restart budget, the step deadline and the
//! restart preflight under tokio's paused time: the whole tree runs on a
//! virtual clock (`protocol/spec/lifecycle.md`, "Backoff", "Restart budget",
//! "Timers"; invariants 8, 10, 11, 13), so
//! seconds of backoff and a 30-second stable period pass without sleeping
//! real seconds, and every retry starts exactly when the machine said it
//! would. File I/O runs on blocking threads, which hold the virtual clock
//! still while they work.

use crate::support::common;

use std::time::Duration;

use common::*;
use steadfast::protocol::lifecycle::RestartBudget;
use steadfast::protocol::lifecycle::{LifecycleState, RetryClass};
use steadfast::protocol::snapshot::BudgetStatus;
use steadfast::protocol::snapshot::Snapshot;
use steadfast::supervisor::Timings;
use steadfast::{ExitIntent, Supervisor};

fn failed_attempt(s: &Snapshot, attempt: u32) -> bool {
    matches!(&s.lifecycle, LifecycleState::Failed { attempt: a, .. } if a.get() == attempt)
}

#[tokio::test(start_paused = true)]
async fn backoff_doubles_and_the_streak_resets_after_the_stable_period_on_virtual_time() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let squatter = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = squatter.local_addr().expect("addr").to_string();
    let (run, handle) = supervise(
        tmp.path(),
        Switch::new(Some(config(&format!("listen_addr = \"{addr}\"")))).source(),
        None,
    );

    let mut delays = Vec::new();
    for attempt in 1..=3 {
        let failure = until(&handle, "a failed bind", |s| failed_attempt(s, attempt)).await;
        let LifecycleState::Failed { report, retry, .. } = &failure.lifecycle else {
            unreachable!()
        };
        let RetryClass::Backoff {
            next_retry_at,
            delay_ms,
        } = retry
        else {
            panic!("{retry:?}")
        };
        assert_eq!(
            next_retry_at.since(report.at),
            Duration::from_millis(*delay_ms)
        );
        assert_eq!(failure.streak, attempt);
        delays.push(*delay_ms);
        if attempt == 3 {
            drop(squatter);
            break;
        }
        // The next attempt starts when the backoff says, to the millisecond
        // (the timer is set one millisecond past `next_retry_at`).
        let next = until(&handle, "the retry", |s| {
            s.attempts.len() > attempt as usize
        })
        .await;
        let started = next.attempts[attempt as usize].started_at;
        assert_eq!(
            started.since(*next_retry_at),
            Duration::from_millis(1),
            "retried on time"
        );
    }
    assert_eq!(delays, [1_000, 2_000, 4_000]);

    let up = until(&handle, "running once the port frees", running).await;
    assert_eq!(up.streak, 3, "reaching running does not reset the streak");
    tokio::time::sleep(Duration::from_secs(29)).await;
    assert_eq!(handle.snapshot().streak, 3, "not yet stable");
    tokio::time::sleep(Duration::from_secs(2)).await;
    let stable = until(&handle, "the stable period", |s| s.streak == 0).await;
    assert!(running(&stable));
    exit(run, &handle, ExitIntent::Halt).await;
}

fn held_by_budget(s: &Snapshot) -> bool {
    matches!(
        &s.lifecycle,
        LifecycleState::Failed {
            budget_spent: Some(_),
            ..
        }
    )
}

fn with_timings(
    data_dir: &std::path::Path,
    source: steadfast::config::ConfigSource,
    timings: Timings,
) -> (
    tokio::task::JoinHandle<ExitIntent>,
    steadfast::SupervisorHandle,
) {
    let (supervisor, handle) = Supervisor::builder(data_dir, TestService::default())
        .config(source)
        .timings(timings)
        .build()
        .expect("the supervisor starts");
    (tokio::spawn(supervisor.run()), handle)
}

/// A crash loop spends the restart budget (N = 3 within 60 s here) and is
/// held: no timer is armed, ten virtual minutes pass without another boot,
/// the snapshot and the status line say why; an operator's retry gets
/// through and empties the count.
#[tokio::test(start_paused = true)]
async fn a_spent_budget_holds_until_an_operator_retry_on_virtual_time() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let squatter = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = squatter.local_addr().expect("addr").to_string();
    let budget = RestartBudget {
        max_failures: std::num::NonZeroU32::new(3).expect("nonzero"),
        window_ms: 60_000,
    };
    let (run, handle) = with_timings(
        tmp.path(),
        Switch::new(Some(config(&format!("listen_addr = \"{addr}\"")))).source(),
        Timings {
            budget: Some(budget),
            ..test_timings()
        },
    );

    for attempt in 1..=2 {
        let failure = until(&handle, "a failed bind", |s| failed_attempt(s, attempt)).await;
        assert!(
            matches!(
                &failure.lifecycle,
                LifecycleState::Failed {
                    retry: RetryClass::Backoff { .. },
                    budget_spent: None,
                    ..
                }
            ),
            "{:?}",
            failure.lifecycle
        );
    }
    let held = until(&handle, "the budget spent", held_by_budget).await;
    let LifecycleState::Failed {
        attempt,
        retry,
        budget_spent: Some(spent),
        ..
    } = &held.lifecycle
    else {
        unreachable!()
    };
    assert_eq!(attempt.get(), 3);
    assert_eq!(retry, &RetryClass::Hold);
    assert_eq!((spent.failures, spent.window_ms), (3, 60_000));
    assert_eq!(
        held.budget,
        Some(BudgetStatus {
            max_failures: 3,
            window_ms: 60_000,
            failures: 3
        })
    );
    let line = steadfast::daemon::status_line(&held);
    assert!(
        line.contains("restart budget spent: 3 automatic restarts failed within 60000 ms"),
        "{line}"
    );
    let json = serde_json::to_value(&held).expect("json");
    assert_eq!(json["lifecycle"]["retry"]["class"], "hold");
    assert_eq!(json["lifecycle"]["budget_spent"]["failures"], 3);

    // Held: ten minutes go by without a boot.
    tokio::time::sleep(Duration::from_secs(600)).await;
    let still = handle.snapshot();
    assert!(held_by_budget(&still), "{:?}", still.lifecycle);
    assert_eq!(still.attempts.len(), 3, "no timer booted a spent budget");

    // The operator's retry gets through, and its boot does not count.
    drop(squatter);
    handle.retry().await.expect("an operator retry is accepted");
    let up = until(&handle, "running after the retry", running).await;
    assert_eq!(up.attempts.len(), 4);
    assert_eq!(up.budget.map(|b| b.failures), Some(0));
    exit(run, &handle, ExitIntent::Halt).await;
}

/// The Lifecycle actor arms only what the machine asks for, at the period
/// the machine was built with: a runtime with no failure streak gets no
/// stable timer (nothing is stepped or published for a minute), and after a
/// failure the streak resets exactly when the configured stable period (5 s
/// here) has passed since `booted`.
#[tokio::test(start_paused = true)]
async fn the_actor_arms_only_the_timers_the_machine_asks_for_on_virtual_time() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let squatter = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = squatter.local_addr().expect("addr").to_string();
    let (run, handle) = with_timings(
        tmp.path(),
        Switch::new(Some(config(&format!("listen_addr = \"{addr}\"")))).source(),
        Timings {
            stable_period: Duration::from_secs(5),
            ..test_timings()
        },
    );
    until(&handle, "a failed bind", |s| failed_attempt(s, 1)).await;
    drop(squatter);
    let up = until(&handle, "running once the port frees", running).await;
    assert_eq!(up.streak, 1);
    // The machine's wake is `booted` + 5 s (the timer one millisecond past):
    // 10 ms before it, the streak still stands.
    tokio::time::sleep(Duration::from_millis(4_990)).await;
    assert_eq!(handle.snapshot().streak, 1, "not yet stable");
    let stable = until(&handle, "the stable period", |s| s.streak == 0).await;
    assert!(running(&stable));

    // Streak 0: the machine wants no timer, so a minute passes with nothing
    // stepped (the actor used to arm a stable timer on every `running`).
    let version = handle.snapshot().version;
    tokio::time::sleep(Duration::from_secs(60)).await;
    assert_eq!(handle.snapshot().version, version, "nothing was stepped");
    exit(run, &handle, ExitIntent::Halt).await;
}

/// The restart preflight in the real tree on virtual time
/// (`protocol/spec/lifecycle.md`, "Config preflight"): a `restart` over a
/// config that no longer resolves is refused `config_invalid` with the
/// error, and the runtime keeps running on the same attempt; a forced
/// restart drains anyway and the next boot fails held in `resolve_config`;
/// a good config and an operator's `retry` bring it back.
#[tokio::test(start_paused = true)]
async fn a_restart_over_a_broken_config_is_refused_and_force_drains_on_virtual_time() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let switch = Switch::new(Some(good()));
    let (run, handle) = supervise(tmp.path(), switch.source(), None);
    let before = until(&handle, "running", running).await;
    let attempt_of = |s: &Snapshot| match &s.lifecycle {
        LifecycleState::Running { attempt, .. } => Some(attempt.get()),
        _ => None,
    };

    switch.set(None);
    let refused = handle.restart().await;
    let Err(steadfast::CommandError::Refused(refused)) = refused else {
        panic!("the restart was not refused: {refused:?}");
    };
    assert_eq!(
        refused.reason,
        steadfast::protocol::lifecycle::RefusedBecause::ConfigInvalid,
        "{refused:?}"
    );
    assert!(
        refused
            .detail
            .as_deref()
            .is_some_and(|d| d.contains("does not resolve")),
        "the refusal carries the config error: {refused:?}"
    );
    let after = handle.snapshot();
    assert_eq!(
        attempt_of(&after),
        attempt_of(&before),
        "still running on the same attempt"
    );

    handle
        .restart_forced()
        .await
        .expect("a forced restart drains");
    let held = until(&handle, "held in resolve_config", |s| {
        matches!(&s.lifecycle, LifecycleState::Failed { report, retry: RetryClass::Hold, .. }
            if report.phase == steadfast::protocol::lifecycle::Phase::RESOLVE_CONFIG)
    })
    .await;
    assert!(matches!(held.lifecycle, LifecycleState::Failed { .. }));

    switch.set(Some(good()));
    handle.retry().await.expect("an operator's retry");
    until(&handle, "running again", running).await;
    exit(run, &handle, ExitIntent::Halt).await;
}

/// One step, `work`, that reports progress `reports` times, a second apart
/// (virtual time), then finishes; with `stall = true` it never reports again
/// and never finishes, with `fail = true` it fails (class backoff).
struct Work;

/// A step before [`Work`] that, with `stubborn = true`, spawns a task that
/// ignores the shutdown token, so tearing it down waits out the whole drain
/// grace.
struct Stubborn;

/// The service of [`Stubborn`], then [`Work`].
struct WorkService;

impl steadfast::Step for Stubborn {
    const NAME: &'static str = "stubborn";
    type Config = toml::Table;
    type Output = ();

    async fn execute(
        &self,
        cx: steadfast::StepContext<'_, toml::Table>,
    ) -> Result<steadfast::Resource<()>, steadfast::StepError> {
        if cx.config.get("stubborn").and_then(toml::Value::as_bool) == Some(true) {
            cx.runtime.spawn("stubborn", async {
                std::future::pending::<()>().await;
                Ok(())
            });
        }
        Ok(steadfast::Resource::new("task", "stubborn", ()))
    }
}

impl steadfast::Step for Work {
    const NAME: &'static str = "work";
    type Config = toml::Table;
    type Output = ();

    async fn execute(
        &self,
        cx: steadfast::StepContext<'_, toml::Table>,
    ) -> Result<steadfast::Resource<()>, steadfast::StepError> {
        let leaf = |name: &str| cx.config.get(name).cloned();
        let reports = leaf("reports")
            .and_then(|v| v.as_integer())
            .unwrap_or_default();
        for _ in 0..reports {
            tokio::time::sleep(Duration::from_secs(1)).await;
            cx.progress.report();
        }
        if leaf("stall").and_then(|v| v.as_bool()) == Some(true) {
            std::future::pending::<()>().await;
        }
        if leaf("fail").and_then(|v| v.as_bool()) == Some(true) {
            return Err(steadfast::StepError::backoff("work failed on its own"));
        }
        Ok(steadfast::Resource::new("work", "done", ()))
    }
}

impl steadfast::Service for WorkService {
    type Config = toml::Table;

    fn plan(&self, _config: &toml::Table) -> steadfast::Plan<toml::Table> {
        steadfast::Plan::new().step(Stubborn).step(Work)
    }
}

fn work(
    data_dir: &std::path::Path,
    leaves: &str,
) -> (
    tokio::task::JoinHandle<ExitIntent>,
    steadfast::SupervisorHandle,
) {
    let source = Switch::new(Some(config(leaves))).source();
    let (supervisor, handle) = Supervisor::builder(data_dir, WorkService)
        .config(source)
        .timings(Timings {
            step_deadline: Duration::from_secs(4),
            // A stubborn task is aborted only after 10 s, past the deadline.
            drain_grace: Duration::from_secs(10),
            ..test_timings()
        })
        .build()
        .expect("the supervisor starts");
    (tokio::spawn(supervisor.run()), handle)
}

/// The step deadline is the machine's (`protocol/spec/lifecycle.md`,
/// "Timers"), in the real tree on virtual time: a step
/// that reports progress five times, a second apart, then stalls fails at
/// exactly its deadline (4 s) after its last report (the timer one
/// millisecond past), with class backoff, an error naming the step and the
/// deadline in the lifecycle and in the phase, and the attempt `failed`
/// (not `cancelled`); a step that reports every second for 12 s, three
/// times its deadline, boots.
#[tokio::test(start_paused = true)]
async fn a_stalled_step_fails_at_its_deadline_and_a_reporting_one_boots_on_virtual_time() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (run, handle) = work(tmp.path(), "reports = 5\nstall = true");
    let failure = until(&handle, "the stalled step failed", |s| failed_attempt(s, 1)).await;
    let LifecycleState::Failed { report, retry, .. } = &failure.lifecycle else {
        unreachable!()
    };
    assert!(matches!(retry, RetryClass::Backoff { .. }), "{retry:?}");
    assert_eq!(report.phase.as_str(), "work");
    assert_eq!(
        report.error,
        "step `work` passed its deadline of 4s without reporting progress"
    );
    let attempt = &failure.attempts[0];
    let phase = attempt
        .phases
        .iter()
        .find(|p| p.phase.as_str() == "work")
        .expect("the work phase");
    // Its last report came 5 s into the phase: the deadline is 4 s after.
    assert_eq!(
        report.at.since(phase.started_at),
        Duration::from_millis(9_001),
        "failed exactly at the deadline after the last report"
    );
    assert_eq!(
        phase.outcome,
        steadfast::protocol::snapshot::PhaseOutcome::Failed {
            error: report.error.clone()
        },
        "the phase fails with the machine's reason"
    );
    assert_eq!(
        attempt.result,
        steadfast::protocol::snapshot::AttemptResult::Failed
    );
    exit(run, &handle, ExitIntent::Halt).await;

    let tmp = tempfile::tempdir().expect("tempdir");
    let (run, handle) = work(tmp.path(), "reports = 12");
    let up = until(&handle, "the reporting step booted", running).await;
    assert_eq!(up.attempts.len(), 1, "the first boot booted");
    let phase = up.attempts[0]
        .phases
        .iter()
        .find(|p| p.phase.as_str() == "work")
        .expect("the work phase");
    assert_eq!(
        phase.outcome,
        steadfast::protocol::snapshot::PhaseOutcome::Completed
    );
    // (A phase's `duration_ms` is measured on the real clock; the virtual
    // one says how long the step ran.)
    let LifecycleState::Running { since, .. } = up.lifecycle else {
        unreachable!()
    };
    assert!(
        since.since(phase.started_at) >= Duration::from_secs(12),
        "the step ran three deadlines long: {phase:?}, running since {since:?}"
    );
    exit(run, &handle, ExitIntent::Halt).await;
}

/// A failed boot's teardown is the supervisor's work, not the step's
/// (`protocol/spec/lifecycle.md`, "Step deadline"): a step that fails on its
/// own rests with its own error although tearing down the boot (a task that
/// ignores the shutdown token, aborted after the 10 s drain grace) takes
/// more than twice the 4 s deadline.
#[tokio::test(start_paused = true)]
async fn a_failed_boots_teardown_is_not_cut_short_by_the_deadline_on_virtual_time() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (run, handle) = work(tmp.path(), "stubborn = true\nreports = 1\nfail = true");
    let failure = until(&handle, "the step failed", |s| failed_attempt(s, 1)).await;
    let LifecycleState::Failed { report, .. } = &failure.lifecycle else {
        unreachable!()
    };
    assert_eq!(report.phase.as_str(), "work");
    assert_eq!(report.error, "work failed on its own");
    let phase = failure.attempts[0]
        .phases
        .iter()
        .find(|p| p.phase.as_str() == "work")
        .expect("the work phase");
    assert!(
        report.at.since(phase.started_at) >= Duration::from_secs(11),
        "the teardown waited out the drain grace: {:?} after the phase began",
        report.at.since(phase.started_at)
    );
    exit(run, &handle, ExitIntent::Halt).await;
}
