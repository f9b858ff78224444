//! Fixtures shared by the lifecycle's integration tests: every state of
//! `spec/lifecycle.md` reached by real events from a fresh lifecycle, and
//! every event of the table, by the labels the spec uses.

#![allow(dead_code, missing_docs)]

use std::num::NonZeroU32;

use steadfast_protocol::Timestamp;
use steadfast_protocol::lifecycle::{
    Effect, ExitIntent, FailureClass, FailureReport, Lifecycle, LifecycleEvent, LifecycleState,
    PendingApply, Phase, Preflight, RetryClass, StoreOutcome, Timer, Wake,
};

/// The state labels of the spec's table, in its order.
pub const STATES: [&str; 20] = [
    "resolving",
    "booting",
    "booting(last_of_budget)",
    "running",
    "running(applying)",
    "draining(stop)",
    "draining(stop,applying)",
    "draining(restart)",
    "draining(exit)",
    "draining(fail)",
    "stopped(operator_request)",
    "stopped(held_at_startup)",
    "stopped(reinit_complete)",
    "stopped(reinit_failed)",
    "failed(backoff)",
    "failed(hold)",
    "failed(budget)",
    "wedged",
    "exiting",
    "reinitializing",
];

/// The event labels of the spec's table, in its order.
pub const EVENTS: [&str; 37] = [
    "held_at_startup",
    "start",
    "retry",
    "retry_due",
    "retry_due(early)",
    "config_changed",
    "config_applied",
    "config_touched",
    "config_checked",
    "config_checked(same)",
    "phase",
    "progress",
    "progress(stale)",
    "step_deadline_passed",
    "step_deadline_passed(stale)",
    "step_deadline_passed(early)",
    "booted",
    "boot_failed(backoff)",
    "boot_failed(hold)",
    "boot_failed(held)",
    "runtime_ended",
    "runtime_ended(stale)",
    "stable",
    "stable(stale)",
    "stable(early)",
    "stop",
    "restart",
    "restart(invalid)",
    "restart(force)",
    "exit",
    "drained(released)",
    "drained(held)",
    "reinit",
    "reinit(stale)",
    "wiped(released)",
    "wiped(failed)",
    "wiped(held)",
];

/// When the table's events arrive: after every representative state's
/// backoff has elapsed.
pub const LATER: Timestamp = Timestamp(10_000);

pub fn nz(n: u32) -> NonZeroU32 {
    NonZeroU32::new(n).expect("nonzero")
}

fn drive(events: &[LifecycleEvent]) -> Lifecycle {
    let mut m = Lifecycle::at(Timestamp(0));
    for event in events {
        m = m.step(event).expect("the fixture's path is accepted").0;
    }
    m
}

/// The representative state for `label`, reached from a fresh lifecycle by
/// accepted events only. The states a boot leads to are reached after one
/// failed boot, so they are attempt 2 with a streak of 1 and an epoch of 1
/// (which makes a reset or a growth of each counter visible in the table);
/// the failures are attempt 1, failing at t = 100.
pub fn state(label: &str) -> Lifecycle {
    use LifecycleEvent as E;
    let at = Timestamp;
    let failed = |class, when| E::BootFailed {
        report: report("bind_listener", when),
        class,
        store: StoreOutcome::Released,
    };
    let start = E::Start { at: at(10) };
    // A first attempt that fails on a timer and is retried: attempt 2 boots.
    let second = [
        start.clone(),
        failed(FailureClass::Backoff, 20),
        E::RetryDue { at: at(1_020) },
    ];
    let with = |tail: &[LifecycleEvent]| -> Lifecycle {
        let mut path = second.to_vec();
        path.extend_from_slice(tail);
        drive(&path)
    };
    let booted = E::Booted { at: at(1_030) };
    let stop = E::Stop { at: at(1_040) };
    match label {
        "resolving" => drive(&[]),
        "booting" => with(&[]),
        "running" => with(&[booted]),
        // A config change is being applied in place: the apply holds the
        // runtime until it reports `config_applied`.
        "running(applying)" => with(&[booted, E::ConfigChanged { at: at(1_035) }]),
        // A stop while the apply runs: the apply is cancelled, and the
        // drain starts once it reports.
        "draining(stop,applying)" => with(&[booted, E::ConfigChanged { at: at(1_035) }, stop]),
        "draining(stop)" => with(&[booted, stop]),
        "draining(restart)" => with(&[
            booted,
            E::Restart {
                at: at(1_040),
                preflight: Preflight::Ok,
            },
        ]),
        "draining(exit)" => with(&[
            booted,
            E::Exit {
                intent: ExitIntent::Halt,
            },
        ]),
        "draining(fail)" => with(&[
            booted,
            E::RuntimeEnded {
                attempt: nz(ATTEMPT),
                at: at(1_040),
                error: "serve task ended".into(),
            },
        ]),
        "stopped(operator_request)" => with(&[
            booted,
            stop,
            E::Drained {
                at: at(1_050),
                store: StoreOutcome::Released,
            },
        ]),
        "stopped(held_at_startup)" => drive(&[E::HeldAtStartup { at: at(10) }]),
        "stopped(reinit_complete)" | "stopped(reinit_failed)" => with(&[
            booted,
            stop,
            E::Drained {
                at: at(1_050),
                store: StoreOutcome::Released,
            },
            E::Reinit {
                epoch: Some(STOPPED_EPOCH),
                at: at(1_060),
            },
            E::Wiped {
                at: at(1_070),
                store: StoreOutcome::Released,
                error: (label == "stopped(reinit_failed)").then(|| "permission denied".into()),
            },
        ]),
        "failed(backoff)" => drive(&[start, failed(FailureClass::Backoff, 100)]),
        // The first boot and three retries on the timer fail (t = 20, 1 030,
        // 3 040, 7 050): the fifth automatic boot, started at t = 15 050, is
        // the last the default budget (5 within 600 s) allows.
        "booting(last_of_budget)" => drive(&last_of_budget()),
        "failed(budget)" => {
            let mut path = last_of_budget();
            path.push(failed(FailureClass::Backoff, 15_060));
            drive(&path)
        }
        "failed(hold)" => drive(&[start, failed(FailureClass::Hold, 100)]),
        "wedged" => with(&[
            booted,
            stop,
            E::Drained {
                at: at(1_050),
                store: StoreOutcome::Held {
                    cause: "store lock".into(),
                },
            },
        ]),
        "exiting" => drive(&[E::Exit {
            intent: ExitIntent::Halt,
        }]),
        "reinitializing" => with(&[
            booted,
            stop,
            E::Drained {
                at: at(1_050),
                store: StoreOutcome::Released,
            },
            E::Reinit {
                epoch: Some(STOPPED_EPOCH),
                at: at(1_060),
            },
        ]),
        other => panic!("no state labelled {other:?}"),
    }
}

/// Four failed automatic boots, each retried on its timer: booting the fifth.
fn last_of_budget() -> Vec<LifecycleEvent> {
    use LifecycleEvent as E;
    let mut path = vec![E::Start { at: Timestamp(10) }];
    let mut at = 20;
    for delay in [1_000, 2_000, 4_000, 8_000] {
        path.push(E::BootFailed {
            report: report("bind_listener", at),
            class: FailureClass::Backoff,
            store: StoreOutcome::Released,
        });
        at += delay;
        path.push(E::RetryDue { at: Timestamp(at) });
        at += 10;
    }
    path
}

/// The machine's label of a fixture's state (a fixture label may name a
/// variant the machine does not tell apart, such as the last boot of a
/// budget).
pub fn reached(label: &str) -> &str {
    match label {
        "booting(last_of_budget)" => "booting",
        "running(applying)" => "running",
        "draining(stop,applying)" => "draining(stop)",
        other => other,
    }
}

/// The attempt of the representative states a boot leads to.
pub const ATTEMPT: u32 = 2;

/// The epoch of `stopped(operator_request)`: one failed boot and one drain.
pub const STOPPED_EPOCH: u64 = 2;

pub fn report(phase: &'static str, at: u64) -> FailureReport {
    FailureReport {
        phase: Phase::new(phase),
        error: format!("{phase} failed"),
        at: Timestamp(at),
    }
}

/// The event for `label`, arriving in `m`. Attempt-bound events name
/// [`ATTEMPT`], or attempt 9 when `(stale)`; `reinit` carries `m`'s epoch
/// (a confirmation prepared in the state it arrives in), `reinit(stale)`
/// the epoch before it (none at epoch 0: a confirmation never issued).
pub fn event(label: &str, m: &Lifecycle) -> LifecycleEvent {
    use LifecycleEvent as E;
    let at = LATER;
    let boot_failed = |class, store| E::BootFailed {
        report: report("open_store", LATER.0),
        class,
        store,
    };
    match label {
        "held_at_startup" => E::HeldAtStartup { at },
        "start" => E::Start { at },
        "retry" => E::Retry { at },
        "retry_due" => E::RetryDue { at },
        // One millisecond before failed(backoff)'s next_retry_at (100 + 1000).
        "retry_due(early)" => E::RetryDue {
            at: Timestamp(1_099),
        },
        "config_changed" => E::ConfigChanged { at },
        "config_applied" => E::ConfigApplied {
            pending: PendingApply::RestartNeeded {
                leaves: vec!["listen_addr".into()],
            },
        },
        "config_touched" => E::ConfigTouched { at },
        "config_checked" => E::ConfigChecked { at, changed: true },
        "config_checked(same)" => E::ConfigChecked { at, changed: false },
        "phase" => E::Phase {
            phase: Phase::new("open_store"),
            at,
        },
        "progress" => E::Progress {
            attempt: step_deadline(m).0,
            at,
        },
        "progress(stale)" => E::Progress { attempt: nz(9), at },
        // `progress` names the booting attempt it arrives in (attempt 2
        // elsewhere); `step_deadline_passed` also arrives at that attempt's
        // deadline (its wake), elsewhere at `booting`'s.
        "step_deadline_passed" => {
            let (attempt, at) = step_deadline(m);
            E::StepDeadlinePassed { attempt, at }
        }
        "step_deadline_passed(stale)" => E::StepDeadlinePassed {
            attempt: nz(9),
            at: step_deadline(m).1,
        },
        "step_deadline_passed(early)" => {
            let (attempt, at) = step_deadline(m);
            E::StepDeadlinePassed {
                attempt,
                at: Timestamp(at.0 - 1),
            }
        }
        "booted" => E::Booted { at },
        "boot_failed(backoff)" => boot_failed(FailureClass::Backoff, StoreOutcome::Released),
        "boot_failed(hold)" => boot_failed(FailureClass::Hold, StoreOutcome::Released),
        "boot_failed(held)" => boot_failed(
            FailureClass::Backoff,
            StoreOutcome::Held {
                cause: "store lock".into(),
            },
        ),
        "runtime_ended" => E::RuntimeEnded {
            attempt: nz(ATTEMPT),
            at,
            error: "serve task ended".into(),
        },
        "runtime_ended(stale)" => E::RuntimeEnded {
            attempt: nz(9),
            at,
            error: "serve task ended".into(),
        },
        // The stable period (30 s) after `running` booted at t = 1 030.
        "stable" => E::Stable {
            attempt: nz(ATTEMPT),
            at: Timestamp(31_030),
        },
        "stable(early)" => E::Stable {
            attempt: nz(ATTEMPT),
            at: Timestamp(31_029),
        },
        "stable(stale)" => E::Stable { attempt: nz(9), at },
        "stop" => E::Stop { at },
        "restart" => E::Restart {
            at,
            preflight: Preflight::Ok,
        },
        "restart(invalid)" => E::Restart {
            at,
            preflight: Preflight::Invalid {
                error: "kvd.toml: expected a value".into(),
            },
        },
        "restart(force)" => E::Restart {
            at,
            preflight: Preflight::Skipped,
        },
        "exit" => E::Exit {
            intent: ExitIntent::Halt,
        },
        "drained(released)" => E::Drained {
            at,
            store: StoreOutcome::Released,
        },
        "drained(held)" => E::Drained {
            at,
            store: StoreOutcome::Held {
                cause: "store lock".into(),
            },
        },
        "reinit" => E::Reinit {
            epoch: Some(m.epoch()),
            at,
        },
        "reinit(stale)" => E::Reinit {
            epoch: m.epoch().checked_sub(1),
            at,
        },
        "wiped(released)" => E::Wiped {
            at,
            store: StoreOutcome::Released,
            error: None,
        },
        "wiped(failed)" => E::Wiped {
            at,
            store: StoreOutcome::Released,
            error: Some("permission denied".into()),
        },
        "wiped(held)" => E::Wiped {
            at,
            store: StoreOutcome::Held {
                cause: "store lock".into(),
            },
            error: None,
        },
        other => panic!("no event labelled {other:?}"),
    }
}

/// `booting` boots attempt 2 at t = 1 020 (its `retry_due`), so its step
/// deadline, 300 s by default, is at t = 301 020.
pub const BOOTING_DEADLINE: Timestamp = Timestamp(301_020);

/// The attempt and the step deadline `m` wants to be woken for, if it is
/// booting; otherwise attempt 2 at [`BOOTING_DEADLINE`].
fn step_deadline(m: &Lifecycle) -> (NonZeroU32, Timestamp) {
    match m.wake() {
        Some(Wake {
            at,
            timer: Timer::StepDeadline { attempt },
        }) => (attempt, at),
        _ => (nz(ATTEMPT), BOOTING_DEADLINE),
    }
}

/// The spec's label for a state.
pub fn label(state: &LifecycleState) -> String {
    match state {
        LifecycleState::Draining { then, .. } => format!("draining({})", then.name()),
        LifecycleState::Stopped { reason, .. } => format!("stopped({})", reason.name()),
        LifecycleState::Failed {
            budget_spent: Some(_),
            ..
        } => "failed(budget)".into(),
        LifecycleState::Failed { retry, .. } => match retry {
            RetryClass::Backoff { .. } => "failed(backoff)".into(),
            RetryClass::Hold => "failed(hold)".into(),
        },
        other => other.name().into(),
    }
}

/// The spec's label for the wake a lifecycle wants.
pub fn wake_label(m: &Lifecycle) -> String {
    match m.wake() {
        None => "none".into(),
        Some(Wake {
            at,
            timer: Timer::RetryDue,
        }) => format!("retry_due at {}", at.as_millis()),
        Some(Wake {
            at,
            timer: Timer::Stable { attempt },
        }) => format!("stable({attempt}) at {}", at.as_millis()),
        Some(Wake {
            at,
            timer: Timer::StepDeadline { attempt },
        }) => format!("step_deadline({attempt}) at {}", at.as_millis()),
    }
}

/// The spec's label for an effect.
pub fn effect_label(effect: &Effect) -> String {
    match effect {
        Effect::StartBoot { attempt } => format!("start_boot({attempt})"),
        Effect::Exit(intent) => format!("exit({})", intent.name()),
        other => other.name().into(),
    }
}

/// The spec's label for how the counters moved.
pub fn counters(before: &Lifecycle, after: &Lifecycle) -> String {
    let mut moved = Vec::new();
    if after.attempts() != before.attempts() {
        moved.push(format!("attempts+{}", after.attempts() - before.attempts()));
    }
    if after.epoch() != before.epoch() {
        moved.push(format!("epoch+{}", after.epoch() - before.epoch()));
    }
    if after.streak() != before.streak() {
        if after.streak() == 0 {
            moved.push("streak=0".into());
        } else {
            moved.push(format!("streak+{}", after.streak() - before.streak()));
        }
    }
    let (was, is) = (before.budget_used(), after.budget_used());
    if is == 0 && was > 0 {
        moved.push("budget=0".into());
    } else if is != was {
        moved.push(format!("budget{:+}", i64::from(is) - i64::from(was)));
    }
    if moved.is_empty() {
        "—".into()
    } else {
        moved.join(" ")
    }
}
