//! Named unit tests, one per behaviour the reference machine documents and
//! one per extension (`spec/lifecycle.md`, "Behaviours").

use super::*;

use crate::nz;

fn t(ms: u64) -> Timestamp {
    Timestamp(ms)
}

/// Step, expecting acceptance.
fn ok(m: &Lifecycle, event: LifecycleEvent) -> (Lifecycle, Effect) {
    let (next, effect, wake) = m.step(&event).unwrap_or_else(|refusal| {
        panic!("{} refused in {}: {refusal}", event.name(), m.state.name())
    });
    assert_eq!(
        wake,
        next.wake(),
        "step hands back the next lifecycle's wake"
    );
    (next, effect)
}

/// Step, expecting a refusal; the state must not change.
fn no(m: &Lifecycle, event: LifecycleEvent) -> RefusedBecause {
    match m.step(&event) {
        Ok((next, effect, _)) => panic!(
            "{} accepted in {}: {} / {:?}",
            event.name(),
            m.state.name(),
            next.state.name(),
            effect
        ),
        Err(refusal) => {
            assert_eq!(refusal.state, m.state.name());
            assert_eq!(refusal.event, event.name());
            refusal.reason
        }
    }
}

fn report(phase: &'static str, at: u64) -> FailureReport {
    FailureReport {
        phase: Phase::new(phase),
        error: format!("{phase} failed"),
        at: t(at),
    }
}

fn failed(class: FailureClass, at: u64) -> LifecycleEvent {
    LifecycleEvent::BootFailed {
        report: report("bind_listener", at),
        class,
        store: StoreOutcome::Released,
    }
}

fn held(cause: &str) -> StoreOutcome {
    StoreOutcome::Held {
        cause: cause.into(),
    }
}

/// A daemon started at 1 ms and booting attempt 1: where most steps begin.
fn booting() -> Lifecycle {
    ok(&Lifecycle::at(t(0)), LifecycleEvent::Start { at: t(1) }).0
}

/// A daemon that has booted attempt 1 and is running.
fn running() -> Lifecycle {
    let (m, _) = ok(&booting(), LifecycleEvent::Booted { at: t(2) });
    m
}

/// The operator's restart at `at` ms, its config preflight passed.
fn restart(at: u64) -> LifecycleEvent {
    LifecycleEvent::Restart {
        at: t(at),
        preflight: Preflight::Ok,
    }
}

#[test]
fn the_hold_marker_at_startup_rests_stopped_without_booting() {
    let (m, effect) = ok(
        &Lifecycle::at(t(0)),
        LifecycleEvent::HeldAtStartup { at: t(5) },
    );
    assert_eq!(effect, Effect::None);
    assert_eq!(
        m.state,
        LifecycleState::Stopped {
            reason: StopReason::HeldAtStartup,
            epoch: 0,
            since: t(5)
        }
    );
    assert_eq!(m.attempts(), 0);
    // Start boots it as attempt 1.
    let (m, effect) = ok(&m, LifecycleEvent::Start { at: t(6) });
    assert_eq!(effect, Effect::StartBoot { attempt: nz(1) });
    assert!(
        matches!(m.state, LifecycleState::Booting { ref phase, .. } if *phase == Phase::RESOLVE_CONFIG)
    );
}

#[test]
fn a_boot_begins_in_resolve_config_and_follows_the_services_phases() {
    let m = booting();
    let (m, effect) = ok(
        &m,
        LifecycleEvent::Phase {
            phase: Phase::new("open_store"),
            at: t(3),
        },
    );
    assert_eq!(effect, Effect::None);
    assert_eq!(
        m.state,
        LifecycleState::Booting {
            attempt: nz(1),
            phase: Phase::new("open_store"),
            since: t(3)
        }
    );
}

#[test]
fn the_first_backoff_failure_waits_exactly_1000_ms() {
    let m = booting();
    let (m, _) = ok(&m, failed(FailureClass::Backoff, 10));
    assert_eq!(
        m.state,
        LifecycleState::Failed {
            attempt: nz(1),
            report: report("bind_listener", 10),
            retry: RetryClass::Backoff {
                next_retry_at: t(1_010),
                delay_ms: 1_000
            },
            budget_spent: None,
        }
    );
    assert_eq!(m.epoch(), 1, "a failed boot released the store");
    assert_eq!(m.streak(), 1);
}

#[test]
fn backoff_doubles_and_is_capped() {
    let policy = BackoffPolicy::default();
    let delays: Vec<u64> = (1..=9).map(|s| duration_ms(policy.delay(s))).collect();
    assert_eq!(
        delays,
        [
            1_000, 2_000, 4_000, 8_000, 16_000, 32_000, 60_000, 60_000, 60_000
        ]
    );
    assert_eq!(policy.delay(u32::MAX), Duration::from_secs(60));
    let tight = BackoffPolicy {
        base_ms: u64::MAX / 2,
        cap_ms: u64::MAX,
        jitter: None,
    };
    assert_eq!(duration_ms(tight.delay(40)), u64::MAX, "overflow saturates");
}

#[test]
fn seeded_jitter_is_deterministic_and_only_shortens() {
    let policy = BackoffPolicy {
        jitter: Some(Jitter {
            seed: 42,
            max_permille: 500,
        }),
        ..BackoffPolicy::default()
    };
    let plain = BackoffPolicy::default();
    let mut differs = false;
    for streak in 1..=20 {
        let d = policy.delay(streak);
        assert_eq!(d, policy.delay(streak), "same seed, same delay");
        assert!(d <= plain.delay(streak));
        assert!(d * 2 >= plain.delay(streak), "at most half is taken off");
        differs |= d != plain.delay(streak);
    }
    assert!(differs, "jitter changes something");
}

#[test]
fn retry_due_starts_the_next_attempt_only_for_a_backoff_failure() {
    let m = booting();
    let (backoff, _) = ok(&m, failed(FailureClass::Backoff, 10));
    let (next, effect) = ok(&backoff, LifecycleEvent::RetryDue { at: t(1_010) });
    assert_eq!(effect, Effect::StartBoot { attempt: nz(2) });
    assert_eq!(next.attempts(), 2);

    let (hold, _) = ok(&m, failed(FailureClass::Hold, 10));
    assert!(matches!(
        hold.state,
        LifecycleState::Failed {
            retry: RetryClass::Hold,
            ..
        }
    ));
    assert_eq!(
        no(&hold, LifecycleEvent::RetryDue { at: t(99_999) }),
        RefusedBecause::Unexpected
    );
}

#[test]
fn a_retry_due_before_its_time_is_refused() {
    let m = booting();
    let (m, _) = ok(&m, failed(FailureClass::Backoff, 10));
    assert_eq!(
        no(&m, LifecycleEvent::RetryDue { at: t(1_009) }),
        RefusedBecause::Unexpected
    );
}

#[test]
fn an_operator_retry_boots_a_held_failure_and_only_a_failure() {
    let m = booting();
    let (hold, _) = ok(&m, failed(FailureClass::Hold, 10));
    let (_, effect) = ok(&hold, LifecycleEvent::Retry { at: t(20) });
    assert_eq!(effect, Effect::StartBoot { attempt: nz(2) });
    assert_eq!(
        no(&running(), LifecycleEvent::Retry { at: t(20) }),
        RefusedBecause::RuntimeNotFailed
    );
}

#[test]
fn a_config_change_retries_a_failed_boot() {
    let m = booting();
    for class in [FailureClass::Hold, FailureClass::Backoff] {
        let (failed_boot, _) = ok(&m, failed(class, 10));
        let (next, effect) = ok(&failed_boot, LifecycleEvent::ConfigChanged { at: t(11) });
        assert_eq!(effect, Effect::StartBoot { attempt: nz(2) });
        assert!(matches!(next.state, LifecycleState::Booting { .. }));
    }
}

#[test]
fn a_config_change_during_a_boot_is_refused_as_busy() {
    let m = booting();
    assert_eq!(
        no(&m, LifecycleEvent::ConfigChanged { at: t(2) }),
        RefusedBecause::LifecycleBusy
    );
}

#[test]
fn a_config_change_while_running_is_applied_in_place() {
    let m = running();
    let (m, effect) = ok(&m, LifecycleEvent::ConfigChanged { at: t(5) });
    assert_eq!(effect, Effect::ApplyConfig);
    let pending = PendingApply::RestartNeeded {
        leaves: vec!["listen_addr".into()],
    };
    let (m, effect) = ok(
        &m,
        LifecycleEvent::ConfigApplied {
            pending: pending.clone(),
        },
    );
    assert_eq!(effect, Effect::None);
    assert!(matches!(m.state, LifecycleState::Running { pending: ref p, .. } if *p == pending));
}

#[test]
fn a_change_that_arrives_while_an_apply_runs_is_applied_once_it_reports() {
    let (m, effect) = ok(&running(), LifecycleEvent::ConfigChanged { at: t(5) });
    assert_eq!(effect, Effect::ApplyConfig);
    assert_eq!(m.applying(), Applying::InFlight);
    // One apply at a time: the second change waits for the first.
    let (m, effect) = ok(&m, LifecycleEvent::ConfigChanged { at: t(6) });
    assert_eq!(effect, Effect::None);
    assert_eq!(m.applying(), Applying::Again);
    let in_sync = LifecycleEvent::ConfigApplied {
        pending: PendingApply::InSync,
    };
    let (m, effect) = ok(&m, in_sync.clone());
    assert_eq!(effect, Effect::ApplyConfig);
    let (m, effect) = ok(&m, in_sync);
    assert_eq!(effect, Effect::None);
    assert_eq!(m.applying(), Applying::Idle);
}

#[test]
fn a_drain_decided_while_an_apply_runs_cancels_it_and_starts_when_it_reports() {
    for command in [
        LifecycleEvent::Stop { at: t(6) },
        LifecycleEvent::Restart {
            at: t(6),
            preflight: Preflight::Skipped,
        },
        LifecycleEvent::Exit {
            intent: ExitIntent::Halt,
        },
    ] {
        let (m, _) = ok(&running(), LifecycleEvent::ConfigChanged { at: t(5) });
        let (m, effect) = ok(&m, command);
        assert_eq!(effect, Effect::CancelApply, "the apply holds the runtime");
        assert_eq!(m.state.name(), "draining");
        let (m, effect) = ok(
            &m,
            LifecycleEvent::ConfigApplied {
                pending: PendingApply::InSync,
            },
        );
        assert_eq!(effect, Effect::ShutdownRuntime, "the runtime is back");
        assert_eq!(m.applying(), Applying::Idle);
        // A second report has no runtime to hand back.
        assert_eq!(
            no(
                &m,
                LifecycleEvent::ConfigApplied {
                    pending: PendingApply::InSync
                }
            ),
            RefusedBecause::RuntimeNotRunning
        );
    }
}

#[test]
fn start_is_refused_while_running_and_from_a_failure() {
    assert_eq!(
        no(&running(), LifecycleEvent::Start { at: t(9) }),
        RefusedBecause::RuntimeRunning
    );
    let m = booting();
    assert_eq!(
        no(&m, LifecycleEvent::Start { at: t(2) }),
        RefusedBecause::LifecycleBusy
    );
    let (m, _) = ok(&m, failed(FailureClass::Hold, 3));
    assert_eq!(
        no(&m, LifecycleEvent::Start { at: t(4) }),
        RefusedBecause::RuntimeNotStopped
    );
}

#[test]
fn stop_during_a_boot_cancels_it_and_rests_once_released() {
    let m = booting();
    let (m, effect) = ok(&m, LifecycleEvent::Stop { at: t(2) });
    assert_eq!(effect, Effect::CancelBoot);
    assert_eq!(
        m.state,
        LifecycleState::Draining {
            attempt: nz(1),
            then: AfterDrain::Stop
        }
    );
    // Late progress is absorbed; a boot that finished anyway is shut down.
    let (m, effect) = ok(
        &m,
        LifecycleEvent::Phase {
            phase: Phase::new("open_store"),
            at: t(3),
        },
    );
    assert_eq!(effect, Effect::None);
    let (m, effect) = ok(&m, LifecycleEvent::Booted { at: t(4) });
    assert_eq!(effect, Effect::ShutdownRuntime);
    let (m, effect) = ok(
        &m,
        LifecycleEvent::Drained {
            at: t(5),
            store: StoreOutcome::Released,
        },
    );
    assert_eq!(effect, Effect::None);
    assert_eq!(
        m.state,
        LifecycleState::Stopped {
            reason: StopReason::OperatorRequest,
            epoch: 1,
            since: t(5)
        }
    );
}

#[test]
fn a_cancelled_boot_reporting_failure_settles_the_drain() {
    let m = booting();
    let (m, _) = ok(&m, LifecycleEvent::Stop { at: t(2) });
    let (m, _) = ok(&m, failed(FailureClass::Backoff, 3));
    assert!(matches!(m.state, LifecycleState::Stopped { epoch: 1, .. }));
}

#[test]
fn stop_and_restart_are_busy_while_draining() {
    let (m, _) = ok(&running(), LifecycleEvent::Stop { at: t(3) });
    assert_eq!(
        no(&m, LifecycleEvent::Stop { at: t(4) }),
        RefusedBecause::LifecycleBusy
    );
    assert_eq!(no(&m, restart(4)), RefusedBecause::LifecycleBusy);
    assert_eq!(
        no(&m, LifecycleEvent::Start { at: t(4) }),
        RefusedBecause::LifecycleBusy
    );
}

#[test]
fn stop_from_a_failure_rests_at_once_with_the_failures_epoch() {
    let m = booting();
    let (m, _) = ok(&m, failed(FailureClass::Backoff, 2));
    let (m, effect) = ok(&m, LifecycleEvent::Stop { at: t(3) });
    assert_eq!(effect, Effect::None);
    assert_eq!(
        m.state,
        LifecycleState::Stopped {
            reason: StopReason::OperatorRequest,
            epoch: 1,
            since: t(3)
        }
    );
    assert_eq!(
        no(&m, LifecycleEvent::Stop { at: t(4) }),
        RefusedBecause::RuntimeNotRunning
    );
}

#[test]
fn a_restart_releases_the_store_then_boots_the_next_attempt() {
    let (m, effect) = ok(&running(), restart(3));
    assert_eq!(effect, Effect::ShutdownRuntime);
    let (m, effect) = ok(
        &m,
        LifecycleEvent::Drained {
            at: t(4),
            store: StoreOutcome::Released,
        },
    );
    assert_eq!(effect, Effect::StartBoot { attempt: nz(2) });
    assert_eq!(m.epoch(), 1);
}

#[test]
fn exit_overrides_a_drain() {
    let (m, _) = ok(&running(), LifecycleEvent::Stop { at: t(3) });
    let (m, effect) = ok(
        &m,
        LifecycleEvent::Exit {
            intent: ExitIntent::Relaunch,
        },
    );
    assert_eq!(effect, Effect::None);
    // Whatever the drain says about the store, the process ends.
    let (m, effect) = ok(
        &m,
        LifecycleEvent::Drained {
            at: t(4),
            store: held("a child process"),
        },
    );
    assert_eq!(effect, Effect::Exit(ExitIntent::Relaunch));
    assert!(m.is_terminal());
}

#[test]
fn exit_while_running_drains_first() {
    let (m, effect) = ok(
        &running(),
        LifecycleEvent::Exit {
            intent: ExitIntent::Halt,
        },
    );
    assert_eq!(effect, Effect::ShutdownRuntime);
    assert_eq!(
        m.state,
        LifecycleState::Draining {
            attempt: nz(1),
            then: AfterDrain::Exit {
                intent: ExitIntent::Halt
            }
        }
    );
}

#[test]
fn a_drain_that_leaves_the_store_held_wedges() {
    for event in [LifecycleEvent::Stop { at: t(3) }, restart(3)] {
        let (m, _) = ok(&running(), event);
        let (m, effect) = ok(
            &m,
            LifecycleEvent::Drained {
                at: t(4),
                store: held("store lock still taken"),
            },
        );
        assert_eq!(effect, Effect::None);
        assert_eq!(
            m.state,
            LifecycleState::Wedged {
                cause: "store lock still taken".into(),
                since: t(4)
            }
        );
    }
}

#[test]
fn a_failed_boot_that_still_holds_the_store_wedges() {
    let m = booting();
    let (m, _) = ok(
        &m,
        LifecycleEvent::BootFailed {
            report: report("open_store", 2),
            class: FailureClass::Backoff,
            store: held("a panicking step"),
        },
    );
    assert!(matches!(m.state, LifecycleState::Wedged { .. }));
    assert_eq!(m.epoch(), 0, "nothing was released");
}

#[test]
fn wedged_accepts_only_exit() {
    let (m, _) = ok(&running(), LifecycleEvent::Stop { at: t(3) });
    let (m, _) = ok(
        &m,
        LifecycleEvent::Drained {
            at: t(4),
            store: held("x"),
        },
    );
    for event in [
        LifecycleEvent::Start { at: t(5) },
        LifecycleEvent::Retry { at: t(5) },
        LifecycleEvent::Stop { at: t(5) },
        restart(5),
        LifecycleEvent::ConfigChanged { at: t(5) },
        LifecycleEvent::Drained {
            at: t(5),
            store: StoreOutcome::Released,
        },
    ] {
        assert_eq!(no(&m, event), RefusedBecause::Wedged);
    }
    let (m, effect) = ok(
        &m,
        LifecycleEvent::Exit {
            intent: ExitIntent::Relaunch,
        },
    );
    assert_eq!(effect, Effect::Exit(ExitIntent::Relaunch));
    assert!(m.is_terminal());
}

#[test]
fn exiting_is_terminal_and_refuses_everything_as_exiting() {
    let (m, _) = ok(
        &Lifecycle::at(t(0)),
        LifecycleEvent::Exit {
            intent: ExitIntent::Halt,
        },
    );
    assert!(m.is_terminal());
    assert_eq!(
        no(&m, LifecycleEvent::Start { at: t(1) }),
        RefusedBecause::Exiting
    );
    assert_eq!(
        no(
            &m,
            LifecycleEvent::Exit {
                intent: ExitIntent::Halt
            }
        ),
        RefusedBecause::Exiting
    );
}

#[test]
fn a_runtime_that_ends_while_running_drains_then_fails_with_backoff() {
    let (m, effect) = ok(
        &running(),
        LifecycleEvent::RuntimeEnded {
            attempt: nz(1),
            at: t(50),
            error: "serve task panicked".into(),
        },
    );
    assert_eq!(effect, Effect::ShutdownRuntime);
    assert!(matches!(
        m.state,
        LifecycleState::Draining {
            then: AfterDrain::Fail { .. },
            ..
        }
    ));
    let (m, effect) = ok(
        &m,
        LifecycleEvent::Drained {
            at: t(60),
            store: StoreOutcome::Released,
        },
    );
    assert_eq!(effect, Effect::None);
    assert_eq!(
        m.state,
        LifecycleState::Failed {
            attempt: nz(1),
            report: FailureReport {
                phase: Phase::RUN,
                error: "serve task panicked".into(),
                at: t(50)
            },
            retry: RetryClass::Backoff {
                next_retry_at: t(1_060),
                delay_ms: 1_000
            },
            budget_spent: None
        }
    );
    assert_eq!(m.epoch(), 1);
}

/// `next_retry_at` counts from the moment the drain
/// settled, not from the crash, so a slow drain does not eat the backoff
/// (the spec was corrected to say so).
#[test]
fn a_runtime_that_ends_backs_off_from_when_its_drain_settled() {
    let (m, _) = ok(
        &running(),
        LifecycleEvent::RuntimeEnded {
            attempt: nz(1),
            at: t(50),
            error: "serve task panicked".into(),
        },
    );
    // A drain that takes 5 s, far longer than the first delay.
    let (m, _) = ok(
        &m,
        LifecycleEvent::Drained {
            at: t(5_050),
            store: StoreOutcome::Released,
        },
    );
    let LifecycleState::Failed {
        retry: RetryClass::Backoff { next_retry_at, .. },
        ref report,
        ..
    } = m.state
    else {
        panic!("not failed with backoff: {:?}", m.state);
    };
    assert_eq!(report.at, t(50), "the report keeps when it ended");
    assert_eq!(next_retry_at, t(6_050), "counted from the drain");
    assert_eq!(
        no(&m, LifecycleEvent::RetryDue { at: t(1_050) }),
        RefusedBecause::Unexpected
    );
}

/// A drain whose `then` is `exit` and that reports the
/// store released counts the release (invariant 4); before the fix the
/// epoch stayed where it was.
#[test]
fn a_drain_into_exit_that_releases_the_store_counts_the_release() {
    let (m, _) = ok(
        &running(),
        LifecycleEvent::Exit {
            intent: ExitIntent::Halt,
        },
    );
    let before = m.epoch();
    let (released, effect) = ok(
        &m,
        LifecycleEvent::Drained {
            at: t(60),
            store: StoreOutcome::Released,
        },
    );
    assert_eq!(effect, Effect::Exit(ExitIntent::Halt));
    assert_eq!(released.epoch(), before + 1);
    // Held: ending the process releases it, but nothing observed that.
    let (kept, _) = ok(
        &m,
        LifecycleEvent::Drained {
            at: t(60),
            store: held("worker thread"),
        },
    );
    assert_eq!(kept.epoch(), before);
}

#[test]
fn a_runtime_that_ends_and_keeps_the_store_wedges() {
    let (m, _) = ok(
        &running(),
        LifecycleEvent::RuntimeEnded {
            attempt: nz(1),
            at: t(50),
            error: "probe gave up".into(),
        },
    );
    let (m, _) = ok(
        &m,
        LifecycleEvent::Drained {
            at: t(60),
            store: held("worker thread"),
        },
    );
    assert!(matches!(m.state, LifecycleState::Wedged { .. }));
}

#[test]
fn reports_about_another_attempt_are_stale() {
    let m = running();
    assert_eq!(
        no(
            &m,
            LifecycleEvent::RuntimeEnded {
                attempt: nz(7),
                at: t(5),
                error: "old".into()
            }
        ),
        RefusedBecause::Unexpected
    );
    assert_eq!(
        no(
            &m,
            LifecycleEvent::Stable {
                attempt: nz(7),
                at: t(5)
            }
        ),
        RefusedBecause::Unexpected
    );
}

/// A crash loop that reaches running for a moment still backs off: the
/// streak resets only on `stable`.
#[test]
fn the_streak_resets_only_after_a_stable_period() {
    // The budget off: five crashes of automatic boots within ten minutes
    // would spend the default one (see the budget's own tests).
    let policy = LifecyclePolicy {
        budget: None,
        ..LifecyclePolicy::default()
    };
    let (m, _) = ok(
        &Lifecycle::new(t(0), policy),
        LifecycleEvent::Start { at: t(1) },
    );
    let (mut m, _) = ok(&m, LifecycleEvent::Booted { at: t(2) });
    let mut delays = Vec::new();
    let mut now = 10;
    for _ in 0..4 {
        let attempt = nz(m.attempts());
        (m, _) = ok(
            &m,
            LifecycleEvent::RuntimeEnded {
                attempt,
                at: t(now),
                error: "crash".into(),
            },
        );
        (m, _) = ok(
            &m,
            LifecycleEvent::Drained {
                at: t(now),
                store: StoreOutcome::Released,
            },
        );
        let LifecycleState::Failed {
            retry:
                RetryClass::Backoff {
                    delay_ms,
                    next_retry_at,
                },
            ..
        } = m.state
        else {
            panic!("not failed: {:?}", m.state)
        };
        delays.push(delay_ms);
        now = next_retry_at.as_millis();
        (m, _) = ok(&m, LifecycleEvent::RetryDue { at: t(now) });
        (m, _) = ok(&m, LifecycleEvent::Booted { at: t(now + 1) });
    }
    assert_eq!(delays, [1_000, 2_000, 4_000, 8_000]);
    assert_eq!(m.streak(), 4);
    let attempt = nz(m.attempts());
    // The stable period counts from `booted` (now + 1).
    let stable_at = now + 1 + 30_000;
    assert_eq!(
        m.wake(),
        Some(Wake {
            at: t(stable_at),
            timer: Timer::Stable { attempt }
        })
    );
    let (m, effect) = ok(
        &m,
        LifecycleEvent::Stable {
            attempt,
            at: t(stable_at),
        },
    );
    assert_eq!(effect, Effect::None);
    assert_eq!(m.streak(), 0);
    assert_eq!(m.wake(), None, "nothing left to reset");
    let (m, _) = ok(
        &m,
        LifecycleEvent::RuntimeEnded {
            attempt,
            at: t(stable_at + 1),
            error: "crash".into(),
        },
    );
    let (m, _) = ok(
        &m,
        LifecycleEvent::Drained {
            at: t(stable_at + 1),
            store: StoreOutcome::Released,
        },
    );
    assert!(matches!(
        m.state,
        LifecycleState::Failed {
            retry: RetryClass::Backoff {
                delay_ms: 1_000,
                ..
            },
            ..
        }
    ));
}

/// A stopped lifecycle (one run, one stop): epoch 1.
fn stopped() -> Lifecycle {
    let m = running();
    let (m, _) = ok(&m, LifecycleEvent::Stop { at: t(50) });
    ok(
        &m,
        LifecycleEvent::Drained {
            at: t(60),
            store: StoreOutcome::Released,
        },
    )
    .0
}

#[test]
fn reinit_runs_only_from_stopped_with_the_current_epoch_and_spends_it() {
    use LifecycleEvent as E;
    let m = stopped();
    let epoch = m.reinit_epoch(t(70)).expect("stopped accepts a reinit");
    assert_eq!(epoch, m.epoch());
    // A confirmation from another epoch, or none this daemon issued.
    let stale = E::Reinit {
        epoch: Some(epoch + 1),
        at: t(70),
    };
    assert_eq!(no(&m, stale), RefusedBecause::StaleConfirmation);
    assert_eq!(
        no(
            &m,
            E::Reinit {
                epoch: None,
                at: t(70)
            }
        ),
        RefusedBecause::StaleConfirmation
    );
    let (wiping, effect) = ok(
        &m,
        E::Reinit {
            epoch: Some(epoch),
            at: t(70),
        },
    );
    assert_eq!(effect, Effect::Wipe);
    assert!(wiping.state.may_hold_store());
    assert_eq!(
        no(&wiping, E::Start { at: t(71) }),
        RefusedBecause::LifecycleBusy
    );
    assert_eq!(
        no(
            &wiping,
            E::Exit {
                intent: ExitIntent::Halt
            }
        ),
        RefusedBecause::LifecycleBusy
    );
    let (done, effect) = ok(
        &wiping,
        E::Wiped {
            at: t(80),
            store: StoreOutcome::Released,
            error: None,
        },
    );
    assert_eq!(effect, Effect::None);
    assert!(matches!(
        done.state,
        LifecycleState::Stopped {
            reason: StopReason::ReinitComplete,
            ..
        }
    ));
    // The confirmation is spent: the same token cannot wipe twice.
    assert_eq!(done.epoch(), epoch + 1);
    assert_eq!(
        no(
            &done,
            E::Reinit {
                epoch: Some(epoch),
                at: t(90)
            }
        ),
        RefusedBecause::StaleConfirmation
    );
    // Only from stopped.
    let running = running();
    assert_eq!(
        running.reinit_epoch(t(1)).map_err(|r| r.reason),
        Err(RefusedBecause::RuntimeNotStopped)
    );
    let (booting, _) = ok(&Lifecycle::at(t(0)), E::Start { at: t(1) });
    assert_eq!(
        booting.reinit_epoch(t(2)).map_err(|r| r.reason),
        Err(RefusedBecause::LifecycleBusy)
    );
}

#[test]
fn a_wipe_that_keeps_the_store_wedges_and_a_failed_one_rests() {
    use LifecycleEvent as E;
    let m = stopped();
    let (wiping, _) = ok(
        &m,
        E::Reinit {
            epoch: Some(m.epoch()),
            at: t(70),
        },
    );
    let (wedged, _) = ok(
        &wiping,
        E::Wiped {
            at: t(80),
            store: held("wipe left the lock"),
            error: None,
        },
    );
    assert_eq!(wedged.state.name(), "wedged");
    let (failed, _) = ok(
        &wiping,
        E::Wiped {
            at: t(80),
            store: StoreOutcome::Released,
            error: Some("permission denied".into()),
        },
    );
    assert!(matches!(
        failed.state,
        LifecycleState::Stopped {
            reason: StopReason::ReinitFailed,
            ..
        }
    ));
    // A failed wipe can be confirmed again, in the new epoch.
    assert!(failed.reinit_epoch(t(90)).is_ok());
}

#[test]
fn serde_shapes_are_internally_tagged_and_snake_case() {
    let m = running();
    let json = serde_json::to_value(&m.state).expect("json");
    assert_eq!(json["state"], "running");
    assert_eq!(json["pending"]["kind"], "in_sync");
    assert_eq!(json["attempt"], 1);

    let draining = LifecycleState::Draining {
        attempt: nz(2),
        then: AfterDrain::Exit {
            intent: ExitIntent::Relaunch,
        },
    };
    let json = serde_json::to_value(&draining).expect("json");
    assert_eq!(
        json,
        serde_json::json!({"state": "draining", "attempt": 2, "then": "exit", "intent": "relaunch"})
    );
    let back: LifecycleState = serde_json::from_value(json).expect("round trip");
    assert_eq!(back, draining);

    let failed = LifecycleState::Failed {
        attempt: nz(1),
        report: report("resolve_config", 5),
        retry: RetryClass::Hold,
        budget_spent: None,
    };
    let json = serde_json::to_value(&failed).expect("json");
    assert_eq!(json["retry"]["class"], "hold");
    assert!(
        json.get("budget_spent").is_none(),
        "no budget field unless spent"
    );
    assert_eq!(json["report"]["phase"], "resolve_config");

    let event = LifecycleEvent::BootFailed {
        report: report("bind_listener", 5),
        class: FailureClass::Backoff,
        store: StoreOutcome::Released,
    };
    let json = serde_json::to_value(&event).expect("json");
    assert_eq!(json["event"], "boot_failed");
    assert_eq!(json["class"], "backoff");
    assert_eq!(json["store"]["outcome"], "released");
    assert_eq!(
        serde_json::to_value(RefusedBecause::LifecycleBusy).expect("json"),
        "lifecycle_busy"
    );
}

#[test]
fn wire_names_match_serde_names() {
    for reason in [
        RefusedBecause::RuntimeRunning,
        RefusedBecause::RuntimeNotRunning,
        RefusedBecause::RuntimeNotFailed,
        RefusedBecause::RuntimeNotStopped,
        RefusedBecause::LifecycleBusy,
        RefusedBecause::Wedged,
        RefusedBecause::Exiting,
        RefusedBecause::Unexpected,
    ] {
        assert_eq!(serde_json::to_value(reason).expect("json"), reason.as_str());
    }
    for intent in [ExitIntent::Halt, ExitIntent::Relaunch] {
        assert_eq!(serde_json::to_value(intent).expect("json"), intent.name());
    }
    assert_eq!(ExitIntent::Halt.code(), 80);
    assert_eq!(ExitIntent::Relaunch.code(), 75);
}

#[test]
fn a_restart_whose_config_does_not_resolve_is_refused_and_keeps_running() {
    let m = running();
    let invalid = LifecycleEvent::Restart {
        at: t(3),
        preflight: Preflight::Invalid {
            error: "/etc/kvd.toml: expected a value".into(),
        },
    };
    let refusal = m.step(&invalid).expect_err("refused");
    assert_eq!(refusal.reason, RefusedBecause::ConfigInvalid);
    assert_eq!(
        refusal.detail.as_deref(),
        Some("/etc/kvd.toml: expected a value")
    );
    assert_eq!(
        refusal.to_string(),
        "restart refused while running: config_invalid: /etc/kvd.toml: expected a value"
    );
    // Forced: drains anyway, as an ordinary restart does.
    for preflight in [Preflight::Skipped, Preflight::Ok] {
        let (next, effect) = ok(
            &m,
            LifecycleEvent::Restart {
                at: t(3),
                preflight,
            },
        );
        assert_eq!(effect, Effect::ShutdownRuntime);
        assert!(matches!(
            next.state,
            LifecycleState::Draining {
                then: AfterDrain::Restart,
                ..
            }
        ));
    }
    // Where a restart is refused anyway, its own reason comes first.
    let (stopped, _) = ok(&m, LifecycleEvent::Stop { at: t(4) });
    assert_eq!(no(&stopped, invalid), RefusedBecause::LifecycleBusy);
}

/// Fail the current boot with class backoff at `at`, then (unless held)
/// take the machine's own retry at its wake.
fn crash_and_retry(m: &Lifecycle, at: u64) -> Lifecycle {
    let (m, _) = ok(m, failed(FailureClass::Backoff, at));
    match m.wake() {
        Some(Wake {
            at: due,
            timer: Timer::RetryDue,
        }) => ok(&m, LifecycleEvent::RetryDue { at: due }).0,
        _ => m,
    }
}

fn budget_spent(m: &Lifecycle) -> Option<&BudgetSpent> {
    match &m.state {
        LifecycleState::Failed { budget_spent, .. } => budget_spent.as_ref(),
        _ => None,
    }
}

#[test]
fn the_budget_holds_the_nth_failed_automatic_boot_within_its_window() {
    let policy = LifecyclePolicy::default();
    assert_eq!(
        policy.budget,
        Some(RestartBudget {
            max_failures: nz(5),
            window_ms: 600_000
        })
    );
    let mut m = booting();
    // The first boot and four retries on the timer: five automatic boots.
    for n in 1..=4 {
        let at = m.attempts() as u64 * 10_000;
        m = crash_and_retry(&m, at);
        assert_eq!(m.budget_used(), n);
        assert!(matches!(m.state, LifecycleState::Booting { .. }), "{n}");
    }
    let (held, effect) = ok(&m, failed(FailureClass::Backoff, 50_000));
    assert_eq!(effect, Effect::None);
    let LifecycleState::Failed {
        attempt,
        retry,
        budget_spent: Some(spent),
        ..
    } = &held.state
    else {
        panic!("not held by the budget: {:?}", held.state)
    };
    assert_eq!(attempt.get(), 5);
    assert_eq!(retry, &RetryClass::Hold);
    assert_eq!((spent.failures, spent.window_ms), (5, 600_000));
    assert_eq!(
        spent.reason,
        "restart budget spent: 5 automatic restarts failed within 600000 ms; \
         held until the config changes or an operator retries"
    );
    assert_eq!(held.wake(), None, "a held failure wants no timer");
    assert_eq!(
        no(&held, LifecycleEvent::RetryDue { at: t(10_000_000) }),
        RefusedBecause::Unexpected
    );
    // The streak and epoch move as for any failure.
    assert_eq!((held.streak(), held.epoch()), (5, 5));
}

#[test]
fn failures_older_than_the_window_do_not_count() {
    let policy = LifecyclePolicy {
        budget: Some(RestartBudget {
            max_failures: nz(2),
            window_ms: 10_000,
        }),
        ..LifecyclePolicy::default()
    };
    let (m, _) = ok(
        &Lifecycle::new(t(0), policy),
        LifecycleEvent::Start { at: t(1) },
    );
    let m = crash_and_retry(&m, 100);
    // 10 s after the first failure it has left the window: this is the only
    // one in it.
    let m = crash_and_retry(&m, 10_100);
    assert_eq!(budget_spent(&m), None);
    assert_eq!(m.budget_used(), 1);
    // One more inside the window of the last: spent.
    let (m, _) = ok(&m, failed(FailureClass::Backoff, 20_099));
    assert_eq!(budget_spent(&m).map(|s| s.failures), Some(2));
}

#[test]
fn an_operator_retry_resumes_a_spent_budget_and_its_boot_does_not_count() {
    let one = LifecyclePolicy {
        budget: Some(RestartBudget {
            max_failures: nz(1),
            window_ms: 600_000,
        }),
        ..LifecyclePolicy::default()
    };
    let (m, _) = ok(
        &Lifecycle::new(t(0), one),
        LifecycleEvent::Start { at: t(1) },
    );
    let (held, _) = ok(&m, failed(FailureClass::Backoff, 10));
    assert!(
        budget_spent(&held).is_some(),
        "N = 1: the first failure spends it"
    );
    // The operator's retry always gets through; its boot's failure is not
    // counted, so it backs off.
    let (m, effect) = ok(&held, LifecycleEvent::Retry { at: t(20) });
    assert_eq!(effect, Effect::StartBoot { attempt: nz(2) });
    assert_eq!(m.budget_used(), 0);
    let (m, _) = ok(&m, failed(FailureClass::Backoff, 30));
    assert_eq!(budget_spent(&m), None);
    assert!(matches!(
        m.state,
        LifecycleState::Failed {
            retry: RetryClass::Backoff { .. },
            ..
        }
    ));
    // The machine's own retry counts again.
    let (m, _) = ok(&m, LifecycleEvent::RetryDue { at: t(100_000) });
    let (m, _) = ok(&m, failed(FailureClass::Backoff, 100_010));
    assert!(budget_spent(&m).is_some());
    // A config change resumes too.
    let (m, effect) = ok(&m, LifecycleEvent::ConfigChanged { at: t(100_020) });
    assert_eq!(effect, Effect::StartBoot { attempt: nz(4) });
    assert_eq!(m.budget_used(), 0);
}

#[test]
fn the_budget_off_retries_on_backoff_forever() {
    let off = LifecyclePolicy {
        budget: None,
        ..LifecyclePolicy::default()
    };
    let (mut m, _) = ok(
        &Lifecycle::new(t(0), off),
        LifecycleEvent::Start { at: t(1) },
    );
    for n in 0..50u64 {
        m = crash_and_retry(&m, 1_000_000 * (n + 1));
        assert!(matches!(m.state, LifecycleState::Booting { .. }));
    }
    assert_eq!(m.budget_used(), 0);
}

#[test]
fn step_hands_back_the_wake_and_refuses_an_early_stable() {
    let m = booting();
    assert_eq!(
        m.wake(),
        Some(Wake {
            at: t(300_001),
            timer: Timer::StepDeadline { attempt: nz(1) }
        }),
        "a boot wants its step deadline"
    );
    let (failed_m, _, wake) = m
        .step(&failed(FailureClass::Backoff, 10))
        .expect("accepted");
    assert_eq!(
        wake,
        Some(Wake {
            at: t(1_010),
            timer: Timer::RetryDue
        })
    );
    let (m, _) = ok(&failed_m, LifecycleEvent::RetryDue { at: t(1_010) });
    let (m, _, wake) = m
        .step(&LifecycleEvent::Booted { at: t(2_000) })
        .expect("accepted");
    let stable = Wake {
        at: t(32_000),
        timer: Timer::Stable { attempt: nz(2) },
    };
    assert_eq!(wake, Some(stable));
    assert_eq!(
        no(
            &m,
            LifecycleEvent::Stable {
                attempt: nz(2),
                at: t(31_999)
            }
        ),
        RefusedBecause::Unexpected,
        "a stable one millisecond early is refused"
    );
    let (m, _, wake) = m
        .step(&LifecycleEvent::Stable {
            attempt: nz(2),
            at: t(32_000),
        })
        .expect("due");
    assert_eq!((m.streak(), wake), (0, None));
    // The stable period is the policy's.
    let short = LifecyclePolicy {
        stable_period_ms: 5,
        ..LifecyclePolicy::default()
    };
    let (m, _) = ok(
        &Lifecycle::new(t(0), short),
        LifecycleEvent::Start { at: t(1) },
    );
    let (m, _) = ok(&m, failed(FailureClass::Backoff, 2));
    let (m, _) = ok(&m, LifecycleEvent::Retry { at: t(3) });
    let (m, _) = ok(&m, LifecycleEvent::Booted { at: t(4) });
    assert_eq!(m.wake().map(|w| w.at), Some(t(9)));
}

#[test]
fn a_spent_budget_serializes_snake_case_beside_retry_hold() {
    let failed = LifecycleState::Failed {
        attempt: nz(5),
        report: report("bind_listener", 5),
        retry: RetryClass::Hold,
        budget_spent: Some(BudgetSpent::new(5, 600_000)),
    };
    let json = serde_json::to_value(&failed).expect("json");
    assert_eq!(json["retry"], serde_json::json!({"class": "hold"}));
    assert_eq!(json["budget_spent"]["failures"], 5);
    assert_eq!(json["budget_spent"]["window_ms"], 600_000);
    assert!(
        json["budget_spent"]["reason"]
            .as_str()
            .is_some_and(|r| r.starts_with("restart budget spent"))
    );
    let back: LifecycleState = serde_json::from_value(json).expect("round trip");
    assert_eq!(back, failed);
    let wake = Wake {
        at: t(7),
        timer: Timer::Stable { attempt: nz(2) },
    };
    assert_eq!(
        serde_json::to_value(wake).expect("json"),
        serde_json::json!({"at": 7, "timer": {"timer": "stable", "attempt": 2}})
    );
}

#[test]
fn a_step_past_its_deadline_cancels_the_boot_and_fails_with_backoff() {
    let policy = LifecyclePolicy {
        step_deadline_ms: 400,
        ..LifecyclePolicy::default()
    };
    let (m, _) = ok(
        &Lifecycle::new(t(0), policy),
        LifecycleEvent::Start { at: t(1) },
    );
    let (m, _) = ok(
        &m,
        LifecycleEvent::Phase {
            phase: Phase::new("work"),
            at: t(10),
        },
    );
    let deadline = Wake {
        at: t(410),
        timer: Timer::StepDeadline { attempt: nz(1) },
    };
    assert_eq!(m.wake(), Some(deadline), "a phase starts a full deadline");
    assert_eq!(
        no(
            &m,
            LifecycleEvent::StepDeadlinePassed {
                attempt: nz(1),
                at: t(409)
            }
        ),
        RefusedBecause::Unexpected,
        "a deadline one millisecond early is refused"
    );
    assert_eq!(
        no(
            &m,
            LifecycleEvent::StepDeadlinePassed {
                attempt: nz(2),
                at: t(410)
            }
        ),
        RefusedBecause::Unexpected,
        "a deadline for another attempt is stale"
    );
    let (drain, effect) = ok(
        &m,
        LifecycleEvent::StepDeadlinePassed {
            attempt: nz(1),
            at: t(410),
        },
    );
    assert_eq!(effect, Effect::CancelBoot);
    assert_eq!(drain.wake(), None);
    let LifecycleState::Draining {
        then: AfterDrain::Fail { report },
        ..
    } = &drain.state
    else {
        panic!("{:?}", drain.state)
    };
    assert_eq!(report.phase, Phase::new("work"));
    assert_eq!(
        report.error,
        "step `work` passed its deadline of 400ms without reporting progress"
    );
    // The cancelled boot settles released: failed with backoff, the
    // deadline's report, counted like any failed automatic boot.
    let (failed, _) = ok(
        &drain,
        LifecycleEvent::BootFailed {
            report: FailureReport {
                phase: Phase::new("work"),
                error: "cancelled".into(),
                at: t(420),
            },
            class: FailureClass::Backoff,
            store: StoreOutcome::Released,
        },
    );
    let LifecycleState::Failed {
        report: failure,
        retry: RetryClass::Backoff { next_retry_at, .. },
        ..
    } = &failed.state
    else {
        panic!("{:?}", failed.state)
    };
    assert_eq!(failure, report);
    assert_eq!(
        *next_retry_at,
        t(1_420),
        "backoff from when the boot settled"
    );
    assert_eq!(
        (failed.streak(), failed.epoch(), failed.budget_used()),
        (1, 1, 1)
    );
}

#[test]
fn progress_pushes_the_step_deadline_back_and_only_back() {
    let policy = LifecyclePolicy {
        step_deadline_ms: 400,
        ..LifecyclePolicy::default()
    };
    let (m, _) = ok(
        &Lifecycle::new(t(0), policy),
        LifecycleEvent::Start { at: t(1) },
    );
    let due = |m: &Lifecycle| m.wake().map(|w| w.at);
    assert_eq!(due(&m), Some(t(401)), "resolve_config has the deadline too");
    let (m, effect) = ok(
        &m,
        LifecycleEvent::Progress {
            attempt: nz(1),
            at: t(300),
        },
    );
    assert_eq!((effect, due(&m)), (Effect::None, Some(t(700))));
    // A report that arrives late (older than the last) moves nothing.
    let (m, _) = ok(
        &m,
        LifecycleEvent::Progress {
            attempt: nz(1),
            at: t(200),
        },
    );
    assert_eq!(due(&m), Some(t(700)));
    assert_eq!(
        no(
            &m,
            LifecycleEvent::Progress {
                attempt: nz(7),
                at: t(600)
            }
        ),
        RefusedBecause::Unexpected,
        "progress of another attempt is stale"
    );
    // The timer armed for the old deadline fires: refused, the step is
    // alive.
    assert_eq!(
        no(
            &m,
            LifecycleEvent::StepDeadlinePassed {
                attempt: nz(1),
                at: t(401)
            }
        ),
        RefusedBecause::Unexpected
    );
    // Late progress of a boot being cancelled is taken and changes nothing;
    // elsewhere it is refused.
    let (draining, _) = ok(&m, LifecycleEvent::Stop { at: t(500) });
    let (still, effect) = ok(
        &draining,
        LifecycleEvent::Progress {
            attempt: nz(1),
            at: t(510),
        },
    );
    assert_eq!((effect, still), (Effect::None, draining));
    let wake = Wake {
        at: t(7),
        timer: Timer::StepDeadline { attempt: nz(2) },
    };
    assert_eq!(
        serde_json::to_value(wake).expect("json"),
        serde_json::json!({"at": 7, "timer": {"timer": "step_deadline", "attempt": 2}})
    );
    let event = LifecycleEvent::StepDeadlinePassed {
        attempt: nz(2),
        at: t(7),
    };
    assert_eq!(
        serde_json::to_value(&event).expect("json"),
        serde_json::json!({"event": "step_deadline_passed", "attempt": 2, "at": 7})
    );
}

/// The window is measured as a distance from the latest failure: a
/// failure at t = 0 stays in the window of one at t < W (`at − W` does not
/// saturate it out), and with W = 0 the latest failure counts itself.
#[test]
fn the_budget_window_keeps_its_start_when_the_failure_is_earlier_than_w() {
    let policy = LifecyclePolicy {
        budget: Some(RestartBudget {
            max_failures: nz(2),
            window_ms: 10_000,
        }),
        ..LifecyclePolicy::default()
    };
    let m = Lifecycle::new(t(0), policy);
    let (m, _) = ok(&m, LifecycleEvent::Start { at: t(0) });
    let (m, _) = ok(&m, failed(FailureClass::Backoff, 0));
    assert_eq!(m.budget_used(), 1);
    let (m, _) = ok(&m, LifecycleEvent::RetryDue { at: t(1_000) });
    let (m, _) = ok(&m, failed(FailureClass::Backoff, 1_500));
    assert_eq!(
        m.budget_used(),
        2,
        "the failure at 0 is 1.5 s old: inside W"
    );
    assert!(matches!(
        m.state,
        LifecycleState::Failed {
            budget_spent: Some(_),
            ..
        }
    ));

    let zero = LifecyclePolicy {
        budget: Some(RestartBudget {
            max_failures: nz(1),
            window_ms: 0,
        }),
        ..LifecyclePolicy::default()
    };
    let m = Lifecycle::new(t(0), zero);
    let (m, _) = ok(&m, LifecycleEvent::Start { at: t(1) });
    let (m, _) = ok(&m, failed(FailureClass::Backoff, 5));
    assert_eq!(
        m.budget_used(),
        1,
        "with W = 0 the latest failure counts itself"
    );
    assert!(matches!(
        m.state,
        LifecycleState::Failed {
            budget_spent: Some(_),
            ..
        }
    ));
}

/// "Settled" is decided here alone (`spec/control.md`, "Settled"):
/// running is reached; failed, wedged and stopped are at rest short of it;
/// exiting ends; a boot, a drain or a wipe on its way is not settled.
#[test]
fn each_state_settles_as_the_spec_says_or_is_on_its_way() {
    let failed = ok(&booting(), failed(FailureClass::Hold, 3)).0.state;
    let cases = [
        (Lifecycle::at(t(0)).state, None),
        (booting().state, None),
        (running().state, Some(Settlement::Running)),
        (
            LifecycleState::Draining {
                attempt: nz(1),
                then: AfterDrain::Stop,
            },
            None,
        ),
        (
            LifecycleState::Reinitializing {
                epoch: 1,
                since: t(4),
            },
            None,
        ),
        (failed, Some(Settlement::Short)),
        (
            LifecycleState::Stopped {
                reason: StopReason::OperatorRequest,
                epoch: 1,
                since: t(4),
            },
            Some(Settlement::Short),
        ),
        (
            LifecycleState::Wedged {
                cause: "the store stayed held".into(),
                since: t(4),
            },
            Some(Settlement::Short),
        ),
        (
            LifecycleState::Exiting {
                intent: ExitIntent::Halt,
            },
            Some(Settlement::Exiting),
        ),
    ];
    for (state, settles) in cases {
        assert_eq!(state.settlement(), settles, "{}", state.name());
    }
}
