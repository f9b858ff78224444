//! One test per decision [`Lifecycle::ready`] takes for the shell
//! (`spec/lifecycle.md`, "Restart preflight" and "Reading the table").

use super::super::{
    ExitIntent, FailureClass, FailureReport, PendingApply, Preflight, RefusedBecause,
};
use super::*;
use crate::nz;

fn t(ms: u64) -> Timestamp {
    Timestamp(ms)
}

const FACT: Origin = Origin::Fact;
const COMMAND: Origin = Origin::Command { hold: None };

fn go(m: &Lifecycle, event: &LifecycleEvent, origin: Origin) -> Ready {
    m.ready(event, origin).unwrap_or_else(|refused| {
        panic!("{} refused in {}: {refused}", event.name(), m.state.name())
    })
}

fn drive(events: &[LifecycleEvent]) -> Lifecycle {
    let mut m = Lifecycle::at(t(0));
    for event in events {
        m = go(&m, event, FACT).next;
    }
    m
}

fn report(at: u64) -> FailureReport {
    FailureReport {
        phase: Phase::new("bind_listener"),
        error: "address in use".into(),
        at: t(at),
    }
}

fn boot_failed(at: u64) -> LifecycleEvent {
    LifecycleEvent::BootFailed {
        report: report(at),
        class: FailureClass::Backoff,
        store: StoreOutcome::Released,
    }
}

fn booting() -> Lifecycle {
    drive(&[LifecycleEvent::Start { at: t(10) }])
}

fn running() -> Lifecycle {
    drive(&[
        LifecycleEvent::Start { at: t(10) },
        LifecycleEvent::Booted { at: t(20) },
    ])
}

fn stop(at: u64) -> LifecycleEvent {
    LifecycleEvent::Stop { at: t(at) }
}

fn drained(at: u64) -> LifecycleEvent {
    LifecycleEvent::Drained {
        at: t(at),
        store: StoreOutcome::Released,
    }
}

fn records(ready: &Ready) -> Vec<RecordKind> {
    ready.records.iter().collect()
}

fn transition_record(event: &'static str) -> RecordKind {
    RecordKind::Transition { event }
}

/// Every pair of a walk through the lifecycle's states: `ready` hands back
/// exactly `step`'s next, effect and wake, or the same refusal.
#[test]
fn ready_agrees_with_step_on_every_fixture() {
    let states = [
        Lifecycle::at(t(0)),
        booting(),
        running(),
        drive(&[
            LifecycleEvent::Start { at: t(10) },
            LifecycleEvent::Booted { at: t(20) },
            stop(30),
        ]),
        drive(&[
            LifecycleEvent::Start { at: t(10) },
            LifecycleEvent::Booted { at: t(20) },
            stop(30),
            drained(40),
        ]),
        drive(&[LifecycleEvent::Start { at: t(10) }, boot_failed(20)]),
    ];
    let events = [
        LifecycleEvent::Start { at: t(5_000) },
        LifecycleEvent::Retry { at: t(5_000) },
        LifecycleEvent::RetryDue { at: t(5_000) },
        LifecycleEvent::ConfigChanged { at: t(5_000) },
        LifecycleEvent::Phase {
            phase: Phase::new("open_store"),
            at: t(5_000),
        },
        LifecycleEvent::Progress {
            attempt: nz(1),
            at: t(5_000),
        },
        LifecycleEvent::Booted { at: t(5_000) },
        boot_failed(5_000),
        stop(5_000),
        LifecycleEvent::Restart {
            at: t(5_000),
            preflight: Preflight::Ok,
        },
        LifecycleEvent::Restart {
            at: t(5_000),
            preflight: Preflight::Invalid {
                error: "kvd.toml: expected a value".into(),
            },
        },
        LifecycleEvent::Exit {
            intent: ExitIntent::Halt,
        },
        drained(5_000),
    ];
    let origins = [FACT, Origin::BootEnd { cancelled: true }, COMMAND];
    for m in &states {
        for event in &events {
            for origin in origins {
                match (m.step(event), m.ready(event, origin)) {
                    (Ok((next, effect, wake)), Ok(ready)) => {
                        assert_eq!(ready.next, next);
                        assert_eq!(ready.effect, effect);
                        assert_eq!(ready.wake, wake);
                    }
                    (Err(a), Err(b)) => assert_eq!(a, b),
                    (a, b) => panic!("step {a:?} but ready {b:?}"),
                }
            }
        }
    }
}

#[test]
fn a_command_stands_only_once_durable_except_exit() {
    let ready = go(
        &Lifecycle::at(t(0)),
        &LifecycleEvent::Start { at: t(1) },
        COMMAND,
    );
    assert!(ready.durable_or_nothing);
    let exit = LifecycleEvent::Exit {
        intent: ExitIntent::Relaunch,
    };
    assert!(!go(&running(), &exit, COMMAND).durable_or_nothing);
    assert!(!go(&running(), &stop(30), FACT).durable_or_nothing);
}

#[test]
fn a_fact_that_changes_nothing_is_staged_and_not_published() {
    let draining = go(&running(), &stop(30), COMMAND).next;
    let ended = LifecycleEvent::RuntimeEnded {
        attempt: nz(1),
        at: t(31),
        error: "serve task ended".into(),
    };
    let ready = go(&draining, &ended, FACT);
    assert_eq!(ready.next, draining);
    assert_eq!(ready.effect, Effect::None);
    assert_eq!(ready.journaling, Journaling::Staged);
    assert_eq!(records(&ready), [transition_record("runtime_ended")]);
    assert!(!ready.publish);
    assert_eq!(ready.entered, None);
    // The same event as a command is awaited: it is answered.
    assert_eq!(
        go(&draining, &ended, COMMAND).journaling,
        Journaling::Awaited
    );
}

#[test]
fn a_step_into_a_boot_or_a_drain_is_written_ahead_unless_a_hold_marker_follows() {
    let stopped = go(&go(&running(), &stop(30), COMMAND).next, &drained(40), FACT).next;
    let start = LifecycleEvent::Start { at: t(50) };
    let ready = go(&stopped, &start, COMMAND);
    assert_eq!(ready.effect, Effect::StartBoot { attempt: nz(2) });
    assert_eq!(ready.journaling, Journaling::WrittenAhead);
    assert_eq!(
        records(&ready),
        [
            transition_record("start"),
            RecordKind::AttemptStarted { attempt: nz(2) }
        ]
    );
    let held = go(&stopped, &start, Origin::Command { hold: Some(false) });
    assert_eq!(held.journaling, Journaling::Awaited);
    assert_eq!(held.hold, Some(false));
    assert_eq!(
        go(&running(), &stop(30), COMMAND).journaling,
        Journaling::WrittenAhead
    );
    // A cancel is awaited: the boot's outcome is not the drain's fsync.
    assert_eq!(
        go(&booting(), &stop(30), COMMAND).journaling,
        Journaling::Awaited
    );
}

#[test]
fn a_boots_phase_and_progress_journal_nothing_and_progress_publishes_nothing() {
    let phase = LifecycleEvent::Phase {
        phase: Phase::new("open_store"),
        at: t(11),
    };
    let ready = go(&booting(), &phase, FACT);
    assert_eq!(ready.journaling, Journaling::Nothing);
    assert!(ready.records.is_empty());
    assert!(ready.publish);
    let progress = LifecycleEvent::Progress {
        attempt: nz(1),
        at: t(12),
    };
    let ready = go(&booting(), &progress, FACT);
    assert_eq!(ready.journaling, Journaling::Nothing);
    assert!(!ready.publish);
}

#[test]
fn a_boots_end_ends_its_attempt_before_the_transition_and_a_restart_starts_the_next() {
    let ready = go(
        &booting(),
        &boot_failed(15),
        Origin::BootEnd { cancelled: false },
    );
    assert_eq!(
        records(&ready),
        [
            RecordKind::AttemptEnded {
                result: AttemptEnd::Failed,
                at: Some(t(15)),
            },
            transition_record("boot_failed"),
        ]
    );
    let restart = LifecycleEvent::Restart {
        at: t(12),
        preflight: Preflight::Ok,
    };
    let draining = go(&booting(), &restart, COMMAND).next;
    let ready = go(
        &draining,
        &boot_failed(15),
        Origin::BootEnd { cancelled: true },
    );
    assert_eq!(ready.effect, Effect::StartBoot { attempt: nz(2) });
    assert_eq!(
        records(&ready),
        [
            RecordKind::AttemptEnded {
                result: AttemptEnd::Cancelled,
                at: Some(t(15)),
            },
            transition_record("boot_failed"),
            RecordKind::AttemptStarted { attempt: nz(2) },
        ]
    );
    assert_eq!(ready.records.len(), 3);
}

#[test]
fn booted_ends_the_attempt_succeeded_or_cancelled_and_a_deadline_fails_it() {
    let booted = LifecycleEvent::Booted { at: t(20) };
    let ready = go(&booting(), &booted, FACT);
    assert_eq!(
        records(&ready),
        [
            transition_record("booted"),
            RecordKind::AttemptEnded {
                result: AttemptEnd::Succeeded,
                at: None,
            },
        ]
    );
    assert_eq!(ready.entered, Some(Entered::Running { attempt: nz(1) }));
    let draining = go(&booting(), &stop(15), COMMAND).next;
    let ready = go(&draining, &booted, FACT);
    assert_eq!(ready.effect, Effect::ShutdownRuntime);
    assert!(ready.records.iter().any(|r| r
        == RecordKind::AttemptEnded {
            result: AttemptEnd::Cancelled,
            at: None,
        }));
    let deadline = LifecycleEvent::StepDeadlinePassed {
        attempt: nz(1),
        at: t(10 + 300_000),
    };
    let failing = go(&booting(), &deadline, FACT).next;
    assert_eq!(failing.boot_end(true), AttemptEnd::Failed);
    assert_eq!(draining.boot_end(true), AttemptEnd::Cancelled);
    assert_eq!(draining.boot_end(false), AttemptEnd::Failed);
    assert!(failing.cancel_reason().contains("passed its deadline"));
    assert_eq!(draining.cancel_reason(), "cancelled");
}

#[test]
fn a_command_is_answered_when_its_outcome_is_known() {
    assert_eq!(go(&running(), &stop(30), COMMAND).reply, Reply::OnDrained);
    assert_eq!(go(&running(), &stop(30), FACT).reply, Reply::None);
    let change = LifecycleEvent::ConfigChanged { at: t(30) };
    assert_eq!(go(&running(), &change, COMMAND).reply, Reply::OnApplied);
    let failed = drive(&[LifecycleEvent::Start { at: t(10) }, boot_failed(20)]);
    assert_eq!(go(&failed, &change, COMMAND).reply, Reply::OnDurable);
    let stopped = go(&go(&running(), &stop(30), COMMAND).next, &drained(40), FACT).next;
    let reinit = LifecycleEvent::Reinit {
        epoch: Some(stopped.epoch()),
        at: t(50),
    };
    let ready = go(&stopped, &reinit, COMMAND);
    assert_eq!((ready.reply, ready.effect), (Reply::OnWiped, Effect::Wipe));
    assert_eq!(ready.settled.wipe, None);
    let wiped = LifecycleEvent::Wiped {
        at: t(60),
        store: StoreOutcome::Released,
        error: None,
    };
    assert_eq!(
        go(&ready.next, &wiped, FACT).settled.wipe,
        Some(WipeEnd::Complete)
    );
}

#[test]
fn a_restart_needs_its_preflight_exactly_where_it_would_drain() {
    let invalid = LifecycleEvent::Restart {
        at: t(30),
        preflight: Preflight::Invalid {
            error: "kvd.toml: expected a value".into(),
        },
    };
    for m in [running(), booting()] {
        assert!(m.restart_needs_preflight(), "{}", m.state.name());
    }
    // Where a restart is refused anyway, that reason comes first, and no
    // preflight is asked for.
    let at_rest = Lifecycle::at(t(0));
    assert!(!at_rest.restart_needs_preflight());
    let refused = at_rest
        .ready(&invalid, COMMAND)
        .expect_err("refused at rest");
    assert_eq!(refused.reason, RefusedBecause::RuntimeNotRunning);
    assert_eq!(refused.event, "restart");
    let draining = go(&running(), &stop(30), COMMAND).next;
    assert!(!draining.restart_needs_preflight());
}

#[test]
fn a_restart_is_stepped_once_with_its_preflight() {
    let ok = LifecycleEvent::Restart {
        at: t(31),
        preflight: Preflight::Ok,
    };
    let ready = go(&running(), &ok, COMMAND);
    assert_eq!(ready.effect, Effect::ShutdownRuntime);
    assert_eq!(records(&ready), [transition_record("restart")]);
    assert_eq!(ready.reply, Reply::OnDurable);
    let invalid = LifecycleEvent::Restart {
        at: t(31),
        preflight: Preflight::Invalid {
            error: "kvd.toml: expected a value".into(),
        },
    };
    let refused = running()
        .ready(&invalid, COMMAND)
        .expect_err("an invalid config never drains");
    assert_eq!(refused.reason, RefusedBecause::ConfigInvalid);
    assert_eq!(refused.event, "restart");
    assert_eq!(
        refused.detail.as_deref(),
        Some("kvd.toml: expected a value")
    );
    // The lifecycle moved on while the preflight ran: decided where it lands.
    let draining = go(&running(), &stop(30), COMMAND).next;
    let refused = draining.ready(&ok, COMMAND).expect_err("busy");
    assert_eq!(refused.reason, RefusedBecause::LifecycleBusy);
}

#[test]
fn entering_a_held_failure_or_leaving_a_drain_is_said() {
    let hold = LifecycleEvent::BootFailed {
        report: report(20),
        class: FailureClass::Hold,
        store: StoreOutcome::Released,
    };
    let ready = go(&booting(), &hold, Origin::BootEnd { cancelled: false });
    assert_eq!(ready.entered, Some(Entered::HeldFailure));
    let ready = go(&running(), &stop(30), COMMAND);
    assert_eq!(ready.entered, Some(Entered::Other));
    assert!(!ready.settled.drain);
    assert!(go(&ready.next, &drained(40), FACT).settled.drain);
    let applied = LifecycleEvent::ConfigApplied {
        pending: PendingApply::InSync,
    };
    let applying = go(
        &running(),
        &LifecycleEvent::ConfigChanged { at: t(30) },
        FACT,
    )
    .next;
    assert_eq!(go(&applying, &applied, FACT).entered, None);
}

#[test]
fn a_crashed_drain_or_wipe_and_a_boots_phase_are_read_off_the_machine() {
    assert_eq!(booting().boot_phase(), Some(&Phase::RESOLVE_CONFIG));
    assert_eq!(running().boot_phase(), None);
    let draining = go(&running(), &stop(30), COMMAND).next;
    assert_eq!(
        draining.task_crashed(t(40), StoreOutcome::Released, "boom"),
        drained(40)
    );
    let stopped = go(&draining, &drained(40), FACT).next;
    let reinit = LifecycleEvent::Reinit {
        epoch: Some(stopped.epoch()),
        at: t(50),
    };
    let wiping = go(&stopped, &reinit, COMMAND).next;
    assert_eq!(
        wiping.task_crashed(t(60), StoreOutcome::Released, "boom"),
        LifecycleEvent::Wiped {
            at: t(60),
            store: StoreOutcome::Released,
            error: Some("the wipe panicked: boom".into()),
        }
    );
}

#[test]
fn a_touched_config_is_checked_only_where_a_failure_is_held_on_it() {
    let hold = LifecycleEvent::BootFailed {
        report: report(20),
        class: FailureClass::Hold,
        store: StoreOutcome::Released,
    };
    let held = go(&booting(), &hold, Origin::BootEnd { cancelled: false }).next;
    let touched = LifecycleEvent::ConfigTouched { at: t(30) };
    let ready = go(&held, &touched, FACT);
    assert_eq!(ready.next, held);
    assert_eq!(ready.effect, Effect::CheckConfig);
    assert_eq!(ready.journaling, Journaling::Nothing);
    assert!(!ready.publish);
    let same = LifecycleEvent::ConfigChecked {
        at: t(31),
        changed: false,
    };
    let ready = go(&held, &same, FACT);
    assert_eq!(
        (ready.effect, ready.journaling),
        (Effect::None, Journaling::Nothing)
    );
    assert_eq!(ready.next, held);
    assert!(!ready.publish);
    let changed = LifecycleEvent::ConfigChecked {
        at: t(31),
        changed: true,
    };
    let ready = go(&held, &changed, FACT);
    assert_eq!(ready.effect, Effect::StartBoot { attempt: nz(2) });
    assert_eq!(
        records(&ready),
        [
            transition_record("config_changed"),
            RecordKind::AttemptStarted { attempt: nz(2) }
        ]
    );
    // Elsewhere a touch is a change: applied in place while running,
    // refused (as `config_changed`) while booting.
    assert_eq!(go(&running(), &touched, FACT).effect, Effect::ApplyConfig);
    let refused = booting().ready(&touched, FACT).expect_err("busy");
    assert_eq!(refused.reason, RefusedBecause::LifecycleBusy);
    assert_eq!(refused.event, "config_changed");
}
