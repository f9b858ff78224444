//! The lifecycle's invariants (`spec/lifecycle.md`, "Invariants") over
//! arbitrary event sequences: at least 10,000 sequences of up to 64 events,
//! stale and misplaced events included, checked after every step
//! (`invariants_hold_after_every_step_of_arbitrary_sequences`: invariants
//! 1–13, among them that the epoch grows by exactly one on every observed
//! release, that a restart whose preflight is invalid is never accepted,
//! that every step hands back the wake of the state it enters and no timer's
//! event is accepted early, that a spent budget holds, and that an
//! operator's retry from `failed` always gets through, under arbitrary
//! policies); `a_restart_whose_preflight_is_invalid_never_leaves_running`:
//! from every `running` 2,000 sequences reach, `restart(invalid)` is refused
//! as `config_invalid` and `restart(force)` drains;
//! `no_window_holds_more_than_n_failed_automatic_boots`: the restart budget
//! over a crash loop of arbitrary pace in monotonic time;
//! `no_step_deadline_fails_a_boot_that_reports_progress_in_time`: the step
//! deadline over a boot's reports in monotonic time, with early and stale
//! deadline events; and
//! `a_crash_loop_without_stable_backs_off_geometrically`;
//! `ready_is_step_plus_data_over_arbitrary_sequences`: `Lifecycle::ready`
//! is `step` plus extras that keep their rules, from every origin.

use std::collections::BTreeSet;
use std::num::NonZeroU32;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use steadfast_protocol::Timestamp;
use steadfast_protocol::lifecycle::{
    AfterDrain, Applying, BackoffPolicy, Effect, ExitIntent, FailureClass, FailureReport,
    Lifecycle, LifecycleEvent, LifecyclePolicy, LifecycleState, PendingApply, Phase, Preflight,
    RefusedBecause, RestartBudget, RetryClass, StoreOutcome, Timer, Wake,
};

/// Sequences checked; `.ci/run` runs this count.
const SEQUENCES: u32 = 10_000;
const MAX_LEN: usize = 64;

fn store() -> impl Strategy<Value = StoreOutcome> {
    prop_oneof![
        3 => Just(StoreOutcome::Released),
        1 => Just(StoreOutcome::Held { cause: "still locked".into() }),
    ]
}

fn preflight() -> impl Strategy<Value = Preflight> {
    prop_oneof![
        Just(Preflight::Ok),
        Just(Preflight::Invalid {
            error: "kvd.toml: expected a value".into()
        }),
        Just(Preflight::Skipped),
    ]
}

fn event() -> impl Strategy<Value = LifecycleEvent> {
    use LifecycleEvent as E;
    let at = (0u64..200_000).prop_map(Timestamp);
    let attempt = (1u32..=6).prop_map(|n| NonZeroU32::new(n).expect("nonzero"));
    let class = prop_oneof![Just(FailureClass::Backoff), Just(FailureClass::Hold)];
    let intent = prop_oneof![Just(ExitIntent::Halt), Just(ExitIntent::Relaunch)];
    let phase = prop_oneof![
        Just(Phase::RESOLVE_CONFIG),
        Just(Phase::new("open_store")),
        Just(Phase::new("bind_listener")),
    ];
    prop_oneof![
        1 => at.clone().prop_map(|at| E::HeldAtStartup { at }),
        3 => at.clone().prop_map(|at| E::Start { at }),
        2 => at.clone().prop_map(|at| E::Retry { at }),
        2 => at.clone().prop_map(|at| E::RetryDue { at }),
        2 => at.clone().prop_map(|at| E::ConfigChanged { at }),
        1 => prop_oneof![
            Just(PendingApply::InSync),
            Just(PendingApply::RestartNeeded { leaves: vec!["listen_addr".into()] })
        ]
        .prop_map(|pending| E::ConfigApplied { pending }),
        2 => (phase.clone(), at.clone()).prop_map(|(phase, at)| E::Phase { phase, at }),
        3 => at.clone().prop_map(|at| E::Booted { at }),
        3 => (phase, at.clone(), class, store()).prop_map(|(phase, at, class, store)| E::BootFailed {
            report: FailureReport { phase, error: "boom".into(), at },
            class,
            store,
        }),
        2 => (attempt.clone(), at.clone()).prop_map(|(attempt, at)| E::RuntimeEnded {
            attempt,
            at,
            error: "serve task ended".into()
        }),
        2 => (attempt.clone(), at.clone()).prop_map(|(attempt, at)| E::Stable { attempt, at }),
        2 => (attempt.clone(), at.clone()).prop_map(|(attempt, at)| E::Progress { attempt, at }),
        2 => (attempt, at.clone()).prop_map(|(attempt, at)| E::StepDeadlinePassed { attempt, at }),
        2 => at.clone().prop_map(|at| E::Stop { at }),
        3 => (at.clone(), preflight()).prop_map(|(at, preflight)| E::Restart { at, preflight }),
        1 => intent.prop_map(|intent| E::Exit { intent }),
        3 => (at.clone(), store()).prop_map(|(at, store)| E::Drained { at, store }),
        1 => (prop::option::of(0u64..4), at.clone()).prop_map(|(epoch, at)| E::Reinit { epoch, at }),
        1 => (at, store(), prop::option::of(Just("wipe failed".to_owned())))
            .prop_map(|(at, store, error)| E::Wiped { at, store, error }),
    ]
}

/// The machine's policy: the default, the budget off, or a small budget and
/// stable period the sequences can reach.
fn policy() -> impl Strategy<Value = LifecyclePolicy> {
    let small = (1u32..=4, 0u64..300_000, 0u64..60_000, 0u64..100_000).prop_map(
        |(n, window_ms, stable, deadline)| LifecyclePolicy {
            backoff: BackoffPolicy::default(),
            stable_period_ms: stable,
            budget: Some(RestartBudget {
                max_failures: NonZeroU32::new(n).expect("nonzero"),
                window_ms,
            }),
            step_deadline_ms: deadline,
        },
    );
    prop_oneof![
        1 => Just(LifecyclePolicy::default()),
        1 => Just(LifecyclePolicy { budget: None, ..LifecyclePolicy::default() }),
        3 => small,
    ]
}

/// Everything the invariants say about one step from `m` on `event`.
fn check_step(m: &Lifecycle, event: &LifecycleEvent) -> Result<Option<Lifecycle>, TestCaseError> {
    let before = m.clone();
    let result = m.step(event);
    prop_assert_eq!(m, &before, "step never mutates its input");
    match result {
        Err(refused) => {
            // 12: an operator's retry of a failure always gets through,
            // budget spent or not.
            prop_assert!(
                !(matches!(m.state, LifecycleState::Failed { .. })
                    && matches!(event, LifecycleEvent::Retry { .. })),
                "retry refused in failed: {refused}"
            );
            prop_assert_eq!(refused.state.as_ref(), m.state.name());
            prop_assert_eq!(refused.event.as_ref(), event.name());
            if m.is_terminal() {
                prop_assert_eq!(refused.reason, RefusedBecause::Exiting);
            }
            if matches!(m.state, LifecycleState::Wedged { .. }) {
                prop_assert_eq!(refused.reason, RefusedBecause::Wedged);
            }
            // 9: an invalid preflight refuses a restart that would drain,
            // as config_invalid carrying the error.
            if let LifecycleEvent::Restart {
                preflight: Preflight::Invalid { error },
                ..
            } = event
                && matches!(
                    m.state,
                    LifecycleState::Running { .. } | LifecycleState::Booting { .. }
                )
            {
                prop_assert_eq!(refused.reason, RefusedBecause::ConfigInvalid);
                prop_assert_eq!(refused.detail.as_ref(), Some(error));
            }
            Ok(None)
        }
        Ok((next, effect, wake)) => {
            // 9: a restart whose preflight is invalid is never accepted.
            prop_assert!(
                !matches!(
                    event,
                    LifecycleEvent::Restart {
                        preflight: Preflight::Invalid { .. },
                        ..
                    }
                ),
                "an invalid preflight was accepted in {}",
                m.state.name()
            );
            // 10: the machine hands back the wake of the state it enters, and
            // a timer's event is accepted only once it is due.
            prop_assert_eq!(wake, next.wake());
            if let LifecycleEvent::RetryDue { at } = event {
                let due = m.wake();
                prop_assert!(
                    matches!(due, Some(Wake { at: due_at, timer: Timer::RetryDue }) if due_at <= *at),
                    "retry_due at {at:?} accepted with wake {due:?}"
                );
            }
            if let (LifecycleEvent::Stable { at, .. }, LifecycleState::Running { since, .. }) =
                (event, &m.state)
            {
                let period = Duration::from_millis(m.policy().stable_period_ms);
                prop_assert!(*at >= since.after(period), "early stable accepted");
            }
            // 13: the step deadline is the machine's. Booting, it wants to be
            // woken at the phase's deadline: a phase starts a full one,
            // progress only pushes it back; a `step_deadline_passed` is
            // accepted only for the booting attempt at or after it, and
            // cancels the boot into a failure naming the step and the
            // deadline.
            let deadline = Duration::from_millis(m.policy().step_deadline_ms);
            let step_wake = |l: &Lifecycle| match l.wake() {
                Some(Wake {
                    at,
                    timer: Timer::StepDeadline { attempt },
                }) => Some((attempt, at)),
                _ => None,
            };
            if let LifecycleState::Booting { attempt, phase, .. } = &m.state {
                let (of, due) = step_wake(m).expect("booting wants its step deadline");
                prop_assert_eq!(of, *attempt);
                match event {
                    LifecycleEvent::Phase { at, .. } => {
                        prop_assert_eq!(step_wake(&next), Some((of, at.after(deadline))));
                    }
                    LifecycleEvent::Progress { at, .. } => {
                        prop_assert_eq!(step_wake(&next), Some((of, due.max(at.after(deadline)))));
                    }
                    LifecycleEvent::StepDeadlinePassed { attempt: a, at } => {
                        prop_assert!(a == attempt && *at >= due, "an early or stale deadline");
                        prop_assert_eq!(effect, Effect::CancelBoot);
                        let LifecycleState::Draining {
                            then: AfterDrain::Fail { report },
                            ..
                        } = &next.state
                        else {
                            return Err(TestCaseError::fail("not draining(fail)"));
                        };
                        prop_assert_eq!(&report.phase, phase);
                        prop_assert!(
                            report.error.contains(&format!("`{phase}`"))
                                && report.error.contains(&format!("{deadline:?}")),
                            "{}",
                            report.error
                        );
                    }
                    _ => {}
                }
            } else {
                prop_assert!(
                    !matches!(event, LifecycleEvent::StepDeadlinePassed { .. }),
                    "step_deadline_passed accepted in {}",
                    m.state.name()
                );
            }
            if matches!(next.state, LifecycleState::Booting { .. }) {
                prop_assert!(step_wake(&next).is_some(), "booting without a deadline");
            }
            // 11: a spent budget holds, with N failures in its window.
            if let LifecycleState::Failed {
                retry,
                budget_spent: Some(spent),
                ..
            } = &next.state
            {
                let budget = next.policy().budget.expect("a budget");
                prop_assert_eq!(retry, &RetryClass::Hold);
                prop_assert_eq!(spent.failures, budget.max_failures.get());
                prop_assert_eq!(spent.window_ms, budget.window_ms);
            }
            // 5: exiting is terminal.
            prop_assert!(!m.is_terminal(), "{} accepted in exiting", event.name());
            // 6: wedged accepts only exit.
            if matches!(m.state, LifecycleState::Wedged { .. }) {
                prop_assert!(
                    matches!(event, LifecycleEvent::Exit { .. }),
                    "wedged accepted {}",
                    event.name()
                );
            }
            // 1: a boot starts only over a released store.
            if let Effect::StartBoot { attempt } = effect {
                prop_assert!(
                    !m.state.may_hold_store() || event.says_released(),
                    "start_boot from {} on {}",
                    m.state.name(),
                    event.name()
                );
                // 3: exactly one more attempt, and it is the one started.
                prop_assert_eq!(next.attempts(), m.attempts() + 1);
                prop_assert_eq!(attempt.get(), next.attempts());
                prop_assert!(
                    matches!(next.state, LifecycleState::Booting { .. }),
                    "start_boot into {}",
                    next.state.name()
                );
            } else {
                prop_assert_eq!(
                    next.attempts(),
                    m.attempts(),
                    "attempts move only with start_boot"
                );
            }
            // 2: rest means released.
            if matches!(
                next.state,
                LifecycleState::Stopped { .. } | LifecycleState::Failed { .. }
            ) && m.state.may_hold_store()
            {
                prop_assert!(
                    event.says_released(),
                    "{} entered from {} on {}",
                    next.state.name(),
                    m.state.name(),
                    event.name()
                );
            }
            // 4: the epoch counts observed releases: exactly one more on
            // an accepted outcome that says released from a state that may
            // hold the store, unchanged on everything else.
            let releases = u64::from(m.state.may_hold_store() && event.says_released());
            prop_assert_eq!(
                next.epoch(),
                m.epoch() + releases,
                "epoch after {} in {}",
                event.name(),
                m.state.name()
            );
            // 8: only `stable` resets the streak.
            if next.streak() < m.streak() {
                prop_assert!(
                    matches!(event, LifecycleEvent::Stable { .. }),
                    "streak reset by {}",
                    event.name()
                );
                prop_assert_eq!(next.streak(), 0);
            }
            if let Effect::Exit(intent) = effect {
                prop_assert_eq!(&next.state, &LifecycleState::Exiting { intent });
            }
            Ok(Some(next))
        }
    }
}

#[test]
fn invariants_hold_after_every_step_of_arbitrary_sequences() {
    let mut runner = TestRunner::new(Config {
        cases: SEQUENCES,
        failure_persistence: None,
        ..Config::default()
    });
    let seen = Mutex::new((BTreeSet::new(), BTreeSet::new(), 0u64));
    runner
        .run(
            &(policy(), proptest::collection::vec(event(), 1..=MAX_LEN)),
            |(policy, events)| {
                let mut m = Lifecycle::new(Timestamp(0), policy);
                let mut states = BTreeSet::new();
                let mut effects = BTreeSet::new();
                for event in &events {
                    states.insert(m.state.name());
                    if matches!(
                        m.state,
                        LifecycleState::Failed {
                            budget_spent: Some(_),
                            ..
                        }
                    ) {
                        states.insert("failed(budget spent)");
                    }
                    if let Some(next) = check_step(&m, event)? {
                        let (_, effect, _) = m.step(event).expect("accepted above");
                        effects.insert(effect.name());
                        if matches!(event, LifecycleEvent::StepDeadlinePassed { .. }) {
                            states.insert("draining(a step past its deadline)");
                        }
                        m = next;
                    }
                }
                states.insert(m.state.name());
                let mut seen = seen.lock().expect("not poisoned");
                seen.0.extend(states);
                seen.1.extend(effects);
                seen.2 += 1;
                Ok(())
            },
        )
        .unwrap_or_else(|failure| panic!("{failure}"));
    let (states, effects, cases) = seen.into_inner().expect("not poisoned");
    eprintln!("checked {cases} sequences; states reached {states:?}; effects {effects:?}");
    assert!(cases >= u64::from(SEQUENCES), "ran {cases} sequences");
    // Not vacuous: the sequences reach every state and every effect.
    for name in [
        "resolving",
        "booting",
        "running",
        "draining",
        "stopped",
        "failed",
        "wedged",
        "exiting",
        "reinitializing",
        "failed(budget spent)",
        "draining(a step past its deadline)",
    ] {
        assert!(states.contains(name), "no sequence reached {name}");
    }
    for name in [
        "none",
        "start_boot",
        "cancel_boot",
        "shutdown_runtime",
        "apply_config",
        "exit",
        "wipe",
    ] {
        assert!(effects.contains(name), "no sequence produced {name}");
    }
}

/// A crash loop with arbitrary run lengths: the backoff delays double from
/// 1000 ms for as long as no `stable` arrives.
#[test]
fn a_crash_loop_without_stable_backs_off_geometrically() {
    proptest!(Config::with_cases(200), |(crashes in 1usize..12)| {
        let policy = LifecyclePolicy { budget: None, ..LifecyclePolicy::default() };
        let mut m = Lifecycle::new(Timestamp(0), policy);
        let mut now = 0u64;
        (m, _, _) = m.step(&LifecycleEvent::Start { at: Timestamp(now) }).expect("start");
        for n in 0..crashes {
            (m, _, _) = m.step(&LifecycleEvent::Booted { at: Timestamp(now) }).expect("booted");
            let attempt = NonZeroU32::new(m.attempts()).expect("nonzero");
            (m, _, _) = m.step(&LifecycleEvent::RuntimeEnded { attempt, at: Timestamp(now), error: "crash".into() }).expect("ended");
            (m, _, _) = m.step(&LifecycleEvent::Drained { at: Timestamp(now), store: StoreOutcome::Released }).expect("drained");
            let LifecycleState::Failed { retry: steadfast_protocol::lifecycle::RetryClass::Backoff { delay_ms, next_retry_at }, .. } = m.state else {
                return Err(TestCaseError::fail("not failed with backoff"));
            };
            let expected = (1_000u64 << n.min(6)).min(60_000);
            prop_assert_eq!(delay_ms, expected);
            now = next_retry_at.as_millis();
            (m, _, _) = m.step(&LifecycleEvent::RetryDue { at: Timestamp(now) }).expect("retry due");
        }
    });
}

/// One round of a crash loop: how the boot fails, and what comes after.
#[derive(Debug, Clone)]
enum Then {
    /// Wait for the machine's own retry (`extra` ms past its wake), or an
    /// operator's retry if the failure is held.
    Timer { extra: u64, ended: bool },
    /// An operator's retry, `after` ms later.
    Retry { after: u64, ended: bool },
    /// A config change, `after` ms later.
    ConfigChanged { after: u64, ended: bool },
}

/// The budget over monotonic time: a crash loop of arbitrary pace, with
/// operator retries and config changes mixed in. In every window W there
/// are at most N failures of automatic boots since the last boot an
/// operator or a config change started; the failure that makes N is held
/// with the budget's reason and the one before it is not; a held failure
/// takes no `retry_due` and always takes an operator's `retry`.
#[test]
fn no_window_holds_more_than_n_failed_automatic_boots() {
    let round = prop_oneof![
        6 => (0u64..3_000, any::<bool>()).prop_map(|(extra, ended)| Then::Timer { extra, ended }),
        1 => (0u64..3_000, any::<bool>()).prop_map(|(after, ended)| Then::Retry { after, ended }),
        1 => (0u64..3_000, any::<bool>()).prop_map(|(after, ended)| Then::ConfigChanged { after, ended }),
    ];
    let budget = (1u32..=6, 1u64..60_000, 1u64..2_000, 1u64..8_000);
    proptest!(Config::with_cases(2_000), |((n, window_ms, base_ms, cap_ms) in budget, rounds in proptest::collection::vec(round, 1..40))| {
        let policy = LifecyclePolicy {
            backoff: BackoffPolicy { base_ms, cap_ms, jitter: None },
            stable_period_ms: 30_000,
            budget: Some(RestartBudget { max_failures: NonZeroU32::new(n).expect("nonzero"), window_ms }),
            ..LifecyclePolicy::default()
        };
        let mut m = Lifecycle::new(Timestamp(0), policy);
        let mut now = 0u64;
        (m, _, _) = m.step(&LifecycleEvent::Start { at: Timestamp(now) }).expect("start");
        // The failures of automatic boots since the last resume.
        let mut automatic = true;
        let mut counted: Vec<u64> = Vec::new();
        let mut ended = false;
        for then in rounds {
            // The boot fails: in a phase, or as a runtime that ends.
            now += 5;
            if ended {
                (m, _, _) = m.step(&LifecycleEvent::Booted { at: Timestamp(now) }).expect("booted");
                let attempt = NonZeroU32::new(m.attempts()).expect("nonzero");
                (m, _, _) = m.step(&LifecycleEvent::RuntimeEnded { attempt, at: Timestamp(now), error: "crash".into() }).expect("ended");
                (m, _, _) = m.step(&LifecycleEvent::Drained { at: Timestamp(now), store: StoreOutcome::Released }).expect("drained");
            } else {
                (m, _, _) = m.step(&LifecycleEvent::BootFailed {
                    report: FailureReport { phase: Phase::new("bind_listener"), error: "taken".into(), at: Timestamp(now) },
                    class: FailureClass::Backoff,
                    store: StoreOutcome::Released,
                }).expect("failed");
            }
            if automatic {
                counted.push(now);
            }
            let in_window = counted.iter().filter(|t| **t + window_ms > now).count();
            prop_assert!(in_window <= n as usize, "{in_window} failed automatic boots within {window_ms} ms");
            let LifecycleState::Failed { retry, budget_spent, .. } = &m.state else {
                return Err(TestCaseError::fail(format!("not failed: {:?}", m.state)));
            };
            if in_window == n as usize && automatic {
                let spent = budget_spent.as_ref().expect("the budget is spent");
                prop_assert_eq!(retry, &RetryClass::Hold);
                prop_assert_eq!(spent.failures, n);
                prop_assert!(spent.reason.contains("budget") && spent.reason.contains(&format!("{n} automatic restarts failed")) && spent.reason.contains(&format!("{window_ms} ms")), "{}", spent.reason);
                prop_assert_eq!(m.wake(), None, "a held failure wants no timer");
                let refused = m.step(&LifecycleEvent::RetryDue { at: Timestamp(now + 1_000_000) });
                prop_assert!(refused.is_err(), "retry_due boots a spent budget");
            } else {
                prop_assert!(budget_spent.is_none());
                prop_assert!(matches!(retry, RetryClass::Backoff { .. }), "{retry:?}");
            }
            let spent = budget_spent.is_some();
            match then {
                Then::Timer { extra, ended: e } if !spent => {
                    let wake = m.wake().expect("a backoff failure wants its retry");
                    prop_assert_eq!(wake.timer, Timer::RetryDue);
                    let early = m.step(&LifecycleEvent::RetryDue { at: Timestamp(wake.at.as_millis() - 1) });
                    prop_assert!(early.is_err(), "an early retry_due boots");
                    now = wake.at.as_millis() + extra;
                    (m, _, _) = m.step(&LifecycleEvent::RetryDue { at: Timestamp(now) }).expect("retry due");
                    automatic = true;
                    ended = e;
                }
                Then::Timer { extra: after, ended: e } | Then::Retry { after, ended: e } => {
                    now += after;
                    (m, _, _) = m.step(&LifecycleEvent::Retry { at: Timestamp(now) }).expect("an operator retry always gets through");
                    prop_assert_eq!(m.budget_used(), 0, "an operator's retry resumes the budget");
                    automatic = false;
                    counted.clear();
                    ended = e;
                }
                Then::ConfigChanged { after, ended: e } => {
                    now += after;
                    (m, _, _) = m.step(&LifecycleEvent::ConfigChanged { at: Timestamp(now) }).expect("a config change retries");
                    automatic = false;
                    counted.clear();
                    ended = e;
                }
            }
        }
    });
}

/// From any `running` an arbitrary sequence reaches, a
/// `restart` whose preflight is invalid is refused as `config_invalid` and
/// leaves the lifecycle exactly as it was, while a forced one drains.
#[test]
fn a_restart_whose_preflight_is_invalid_never_leaves_running() {
    let mut runner = TestRunner::new(Config {
        cases: 2_000,
        failure_persistence: None,
        ..Config::default()
    });
    let reached = Mutex::new(0u64);
    runner
        .run(&proptest::collection::vec(event(), 1..=MAX_LEN), |events| {
            let mut m = Lifecycle::at(Timestamp(0));
            for event in &events {
                if matches!(m.state, LifecycleState::Running { .. }) {
                    *reached.lock().expect("not poisoned") += 1;
                    let at = Timestamp(300_000);
                    let invalid = LifecycleEvent::Restart {
                        at,
                        preflight: Preflight::Invalid {
                            error: "kvd.toml: expected a value".into(),
                        },
                    };
                    let refused = m
                        .step(&invalid)
                        .expect_err("an invalid preflight is refused");
                    prop_assert_eq!(refused.reason, RefusedBecause::ConfigInvalid);
                    let (forced, effect, _) = m
                        .step(&LifecycleEvent::Restart {
                            at,
                            preflight: Preflight::Skipped,
                        })
                        .expect("a forced restart is accepted");
                    // The runtime is shut down, or, while an apply holds
                    // it, the apply is cancelled first (the drain starts
                    // when it hands the runtime back).
                    let drains = if m.applying() == Applying::Idle {
                        Effect::ShutdownRuntime
                    } else {
                        Effect::CancelApply
                    };
                    prop_assert_eq!(effect, drains);
                    prop_assert_eq!(forced.state.name(), "draining");
                }
                if let Ok((next, _, _)) = m.step(event) {
                    m = next;
                }
            }
            Ok(())
        })
        .unwrap_or_else(|failure| panic!("{failure}"));
    let reached = reached.into_inner().expect("not poisoned");
    eprintln!("checked an invalid restart in {reached} running states");
    assert!(
        reached > 100,
        "sequences reached running only {reached} times"
    );
}

/// One report of a running boot, `after` thousandths of the step deadline
/// after the previous one: its step's progress, or the next phase starting.
#[derive(Debug, Clone)]
enum Report {
    Progress { after: u64 },
    Phase { after: u64 },
}

/// The step deadline over a boot's reports in monotonic
/// time, driven the way the Lifecycle actor drives it (the timer the machine
/// asks for fires at its wake, before a report that comes later; an early
/// or stale one is tried too). No boot fails while every report comes within
/// the deadline of the one before; the first gap longer than the deadline
/// fails it at exactly the deadline, naming the step and the deadline, and
/// the failure rests `failed` with class backoff once the cancelled boot
/// settles released.
#[test]
fn no_step_deadline_fails_a_boot_that_reports_progress_in_time() {
    // How long after the previous report, in thousandths of the deadline:
    // mostly within it, sometimes exactly at it, now and then past it.
    let gap = prop_oneof![
        30 => 0u64..1_000,
        3 => Just(1_000u64),
        1 => 1_001u64..3_000,
    ];
    let report = prop_oneof![
        4 => gap.clone().prop_map(|after| Report::Progress { after }),
        1 => gap.prop_map(|after| Report::Phase { after }),
    ];
    let (deadlines, booted) = (AtomicU64::new(0), AtomicU64::new(0));
    proptest!(Config::with_cases(2_000), |(deadline_ms in 1u64..2_000, reports in proptest::collection::vec(report, 1..60))| {
        let policy = LifecyclePolicy { step_deadline_ms: deadline_ms, ..LifecyclePolicy::default() };
        let deadline = Duration::from_millis(deadline_ms);
        let mut m = Lifecycle::new(Timestamp(0), policy);
        (m, _, _) = m.step(&LifecycleEvent::Start { at: Timestamp(0) }).expect("start");
        let attempt = NonZeroU32::new(1).expect("nonzero");
        let (mut last, mut phase) = (0u64, Phase::RESOLVE_CONFIG);
        let mut now = 0u64;
        let mut phases = 0u32;
        for report in reports {
            let (after, event_phase) = match report {
                Report::Progress { after } => (after, None),
                Report::Phase { after } => {
                    phases += 1;
                    (after, Some(Phase::new(format!("step_{phases}"))))
                }
            };
            now += deadline_ms * after / 1_000;
            let Some(Wake { at: due, timer: Timer::StepDeadline { attempt: of } }) = m.wake() else {
                return Err(TestCaseError::fail(format!("booting without a deadline: {:?}", m.wake())));
            };
            prop_assert_eq!(of, attempt);
            prop_assert_eq!(due, Timestamp(last).after(deadline), "the deadline is the last report's");
            // A timer for another attempt, and one before the deadline, are
            // refused and change nothing.
            let stale = m.step(&LifecycleEvent::StepDeadlinePassed { attempt: NonZeroU32::new(9).expect("nonzero"), at: due });
            prop_assert!(stale.is_err(), "a stale deadline was accepted");
            if due.as_millis() > 0 {
                let early = m.step(&LifecycleEvent::StepDeadlinePassed { attempt, at: Timestamp(due.as_millis() - 1) });
                prop_assert!(early.is_err(), "an early deadline was accepted");
            }
            if due < Timestamp(now) {
                // The report comes too late: the timer fires first, at the
                // deadline, and fails the boot.
                prop_assert!(now - last > deadline_ms);
                let (next, effect, wake) = m.step(&LifecycleEvent::StepDeadlinePassed { attempt, at: due }).expect("the deadline passed");
                prop_assert_eq!(effect, Effect::CancelBoot);
                prop_assert_eq!(wake, None, "draining wants no timer");
                let LifecycleState::Draining { then: AfterDrain::Fail { report }, .. } = &next.state else {
                    return Err(TestCaseError::fail(format!("not draining(fail): {:?}", next.state)));
                };
                prop_assert_eq!(&report.phase, &phase);
                prop_assert_eq!(report.at, due);
                prop_assert!(report.error.contains(&format!("`{phase}`")) && report.error.contains(&format!("{deadline:?}")), "{}", report.error);
                // The cancelled boot settles released: failed, with backoff.
                let (rest, _, _) = next.step(&LifecycleEvent::BootFailed {
                    report: FailureReport { phase: phase.clone(), error: "cancelled".into(), at: Timestamp(now) },
                    class: FailureClass::Backoff,
                    store: StoreOutcome::Released,
                }).expect("the cancelled boot settles");
                let LifecycleState::Failed { report: failed, retry, .. } = &rest.state else {
                    return Err(TestCaseError::fail(format!("not failed: {:?}", rest.state)));
                };
                prop_assert_eq!(failed, report, "the failure is the deadline's");
                prop_assert!(matches!(retry, RetryClass::Backoff { .. }), "{retry:?}");
                prop_assert_eq!(rest.streak(), 1);
                deadlines.fetch_add(1, Ordering::Relaxed);
                return Ok(());
            }
            let event = match event_phase {
                None => LifecycleEvent::Progress { attempt, at: Timestamp(now) },
                Some(p) => {
                    phase = p.clone();
                    LifecycleEvent::Phase { phase: p, at: Timestamp(now) }
                }
            };
            (m, _, _) = m.step(&event).expect("a report in time is accepted");
            prop_assert!(matches!(m.state, LifecycleState::Booting { .. }), "{:?}", m.state);
            last = now;
        }
        // Every report came in time: the boot is still booting, and it boots.
        (m, _, _) = m.step(&LifecycleEvent::Booted { at: Timestamp(now) }).expect("booted");
        prop_assert!(matches!(m.state, LifecycleState::Running { .. }), "{:?}", m.state);
        booted.fetch_add(1, Ordering::Relaxed);
    });
    // Not vacuous: both ends are reached often.
    let (failed, booted) = (deadlines.into_inner(), booted.into_inner());
    eprintln!("{failed} boots failed at their deadline, {booted} booted");
    assert!(
        failed > 200 && booted > 200,
        "{failed} failed, {booted} booted"
    );
}

/// What `ready` adds to `step`, from every origin, over arbitrary
/// sequences that include restarts with every preflight outcome and
/// touched or checked configs: the
/// same next, effect and wake (or the same refusal), and extras that keep
/// their rules (`spec/lifecycle.md`, "Vocabulary", Ready).
#[test]
fn ready_is_step_plus_data_over_arbitrary_sequences() {
    use steadfast_protocol::lifecycle::{Journaling, Origin, RecordKind, Reply};
    let with_preflights = prop_oneof![
        6 => event(),
        1 => (0u64..200_000, prop::option::of(Just("kvd.toml: bad".to_owned())))
            .prop_map(|(at, error)| LifecycleEvent::Restart {
                at: Timestamp(at),
                preflight: error.map_or(Preflight::Ok, |error| Preflight::Invalid { error }),
            }),
        1 => (0u64..200_000).prop_map(|at| LifecycleEvent::ConfigTouched { at: Timestamp(at) }),
        1 => (0u64..200_000, any::<bool>())
            .prop_map(|(at, changed)| LifecycleEvent::ConfigChecked { at: Timestamp(at), changed }),
    ];
    let origin = prop_oneof![
        2 => Just(Origin::Fact),
        1 => any::<bool>().prop_map(|cancelled| Origin::BootEnd { cancelled }),
        2 => prop::option::of(any::<bool>()).prop_map(|hold| Origin::Command { hold }),
    ];
    let mut runner = TestRunner::new(Config {
        cases: 2_000,
        failure_persistence: None,
        ..Config::default()
    });
    runner
        .run(
            &proptest::collection::vec((with_preflights, origin), 1..=MAX_LEN),
            |steps| {
                let mut m = Lifecycle::at(Timestamp(0));
                for (event, origin) in &steps {
                    if let LifecycleEvent::Restart { at, .. } = event
                        && !m.restart_needs_preflight()
                    {
                        // Where no preflight is asked for, what the config
                        // is changes nothing: a restart is stepped as
                        // skipped, and any preflight would do the same.
                        let skipped = LifecycleEvent::Restart {
                            at: *at,
                            preflight: Preflight::Skipped,
                        };
                        let outcome =
                            |e: &LifecycleEvent| m.step(e).map(|(n, effect, _)| (n, effect));
                        prop_assert_eq!(outcome(event), outcome(&skipped));
                    }
                    let ready = match (m.step(event), m.ready(event, *origin)) {
                        (Err(a), Err(b)) => {
                            prop_assert_eq!(a, b);
                            continue;
                        }
                        (Ok((next, effect, wake)), Ok(ready)) => {
                            prop_assert_eq!(&ready.next, &next);
                            prop_assert_eq!(ready.effect, effect);
                            prop_assert_eq!(ready.wake, wake);
                            ready
                        }
                        (a, b) => {
                            return Err(TestCaseError::fail(format!("step {a:?}, ready {b:?}")));
                        }
                    };
                    let command = matches!(origin, Origin::Command { .. });
                    prop_assert_eq!(
                        ready.records.is_empty(),
                        ready.journaling == Journaling::Nothing
                    );
                    prop_assert_eq!(
                        ready.durable_or_nothing,
                        command && !matches!(event, LifecycleEvent::Exit { .. })
                    );
                    prop_assert_eq!(ready.reply == Reply::None, !command);
                    if ready.journaling == Journaling::Staged {
                        prop_assert_eq!(&ready.next, &m);
                        prop_assert_eq!(ready.effect, Effect::None);
                        prop_assert!(!ready.durable_or_nothing && !ready.publish);
                    }
                    if ready.journaling == Journaling::WrittenAhead {
                        let into_boot_or_drain = matches!(
                            ready.effect,
                            Effect::StartBoot { .. } | Effect::ShutdownRuntime
                        );
                        prop_assert!(into_boot_or_drain, "written ahead: {:?}", ready.effect);
                        prop_assert_eq!(ready.hold, None);
                    }
                    prop_assert_eq!(
                        ready.entered.is_some(),
                        std::mem::discriminant(&m.state)
                            != std::mem::discriminant(&ready.next.state)
                    );
                    prop_assert_eq!(
                        ready
                            .records
                            .iter()
                            .any(|r| matches!(r, RecordKind::AttemptStarted { .. })),
                        matches!(ready.effect, Effect::StartBoot { .. })
                    );
                    // A touched or checked config is a change, except in a
                    // failure held on its config.
                    if let LifecycleEvent::ConfigTouched { at }
                    | LifecycleEvent::ConfigChecked { at, .. } = event
                        && !matches!(
                            m.state,
                            LifecycleState::Failed {
                                retry: RetryClass::Hold,
                                ..
                            }
                        )
                    {
                        let change = LifecycleEvent::ConfigChanged { at: *at };
                        let (next, effect, _) = m.step(&change).expect("accepted as the change");
                        prop_assert_eq!(&ready.next, &next);
                        prop_assert_eq!(ready.effect, effect);
                    }
                    if ready.effect == Effect::CheckConfig {
                        prop_assert_eq!(&ready.next, &m);
                        prop_assert!(ready.records.is_empty() && !ready.publish);
                    }
                    m = ready.next;
                }
                Ok(())
            },
        )
        .unwrap_or_else(|failure| panic!("{failure}"));
}
