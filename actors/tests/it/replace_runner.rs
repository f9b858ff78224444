//! The replacement runners over scripted drivers: a failure at every step in
//! both modes (before and after commit), the budget rules of
//! `actors/src/replace_runner.rs`, pre-faulting. Each test runs the blocking
//! runner and the async one (tokio's paused clock) over the same script.

use std::collections::{HashMap, VecDeque};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use steadfast_actors::replace_runner::{
    AsyncDriver, Driver, NoObserver, Observer, StepFuture, StopInbox, run, run_async, run_stoppable,
};
use steadfast_protocol::replacement::{Budgets, Failure, Mode, Outcome, Progress, Reason, Step};

#[derive(Debug, Clone, PartialEq, Eq)]
struct Boom(Step);

/// One scripted answer: how long the step takes, then what it answers.
#[derive(Clone)]
struct Answer {
    takes: Duration,
    result: Result<Progress, Boom>,
}

/// A driver answering from a script (default: done at once), recording every
/// step it was asked and the deadline it was given.
#[derive(Default)]
struct Scripted {
    script: HashMap<Step, VecDeque<Answer>>,
    asked: Vec<(Step, Option<Duration>)>,
    started_at: Option<Instant>,
    warm: Vec<PathBuf>,
}

impl Scripted {
    fn answer(mut self, step: Step, takes: Duration, result: Result<Progress, Boom>) -> Self {
        self.script
            .entry(step)
            .or_default()
            .push_back(Answer { takes, result });
        self
    }

    fn next(&mut self, step: Step, deadline: Option<Instant>, now: Instant) -> Answer {
        let start = *self.started_at.get_or_insert(now);
        self.asked
            .push((step, deadline.map(|d| d.saturating_duration_since(start))));
        self.script
            .get_mut(&step)
            .and_then(VecDeque::pop_front)
            .unwrap_or(Answer {
                takes: Duration::ZERO,
                result: Ok(Progress::Done),
            })
    }

    fn steps(&self) -> Vec<Step> {
        self.asked.iter().map(|(step, _)| *step).collect()
    }
}

impl Driver for Scripted {
    type Error = Boom;
    fn perform(&mut self, step: Step, deadline: Option<Instant>) -> Result<Progress, Boom> {
        let answer = self.next(step, deadline, Instant::now());
        std::thread::sleep(answer.takes);
        answer.result
    }
    fn warmup_paths(&self) -> Vec<PathBuf> {
        self.warm.clone()
    }
}

/// The same script, on tokio's clock.
struct AsyncScripted(Scripted);

impl AsyncDriver for AsyncScripted {
    type Error = Boom;
    fn perform(&mut self, step: Step, deadline: Option<Instant>) -> StepFuture<'_, Boom> {
        let answer = self
            .0
            .next(step, deadline, tokio::time::Instant::now().into_std());
        Box::pin(async move {
            tokio::time::sleep(answer.takes).await;
            answer.result
        })
    }
    fn warmup_paths(&self) -> Vec<PathBuf> {
        self.0.warm.clone()
    }
}

const BUDGETS: Budgets = Budgets {
    setup: Duration::from_secs(5),
    drain: Some(Duration::from_secs(30)),
};

type Run = (Result<Outcome, Failure<Boom>>, Vec<Step>);

fn blocking(mode: Mode, budgets: Budgets, script: Scripted) -> Run {
    let mut driver = script;
    let result = run(mode, budgets, &mut driver, &mut NoObserver);
    (result, driver.steps())
}

fn paused(mode: Mode, budgets: Budgets, script: Scripted) -> (Run, Scripted) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("runtime");
    rt.block_on(async move {
        let mut driver = AsyncScripted(script);
        let result = run_async(mode, budgets, &mut driver, &mut NoObserver).await;
        let steps = driver.0.steps();
        ((result, steps), driver.0)
    })
}

fn both(mode: Mode, budgets: Budgets, script: impl Fn() -> Scripted) -> [Run; 2] {
    [
        blocking(mode, budgets, script()),
        paused(mode, budgets, script()).0,
    ]
}

#[test]
fn the_happy_path_visits_each_step_of_its_mode_once() {
    for mode in [Mode::Overlap, Mode::Exclusive] {
        for (result, steps) in both(mode, BUDGETS, Scripted::default) {
            assert_eq!(result, Ok(Outcome::Complete), "{mode:?}");
            assert_eq!(steps, mode.steps(), "{mode:?}");
        }
    }
}

#[test]
fn every_step_failure_reports_its_step_and_commit() {
    for mode in [Mode::Overlap, Mode::Exclusive] {
        for (index, &failing) in mode.steps().iter().enumerate() {
            let script = || Scripted::default().answer(failing, Duration::ZERO, Err(Boom(failing)));
            for (result, steps) in both(mode, BUDGETS, script) {
                let committed = mode.steps()[..index].contains(&Step::Commit);
                assert_eq!(
                    result,
                    Err(Failure {
                        step: failing,
                        committed,
                        reason: Reason::Adapter(Boom(failing)),
                    }),
                    "{mode:?} failing at {failing}"
                );
                // Nothing after the failing step was asked.
                assert_eq!(steps, &mode.steps()[..=index], "{mode:?} at {failing}");
            }
        }
    }
}

#[test]
fn an_invalid_answer_fails_its_step() {
    for (result, _) in both(Mode::Overlap, BUDGETS, || {
        Scripted::default().answer(Step::Start, Duration::ZERO, Ok(Progress::Unchanged))
    }) {
        assert_eq!(
            result,
            Err(Failure {
                step: Step::Start,
                committed: false,
                reason: Reason::InvalidProgress
            })
        );
    }
}

#[test]
fn pending_verify_is_asked_again_and_pending_retire_is_success() {
    let script = || {
        Scripted::default()
            .answer(Step::Verify, Duration::ZERO, Ok(Progress::Pending))
            .answer(Step::Verify, Duration::ZERO, Ok(Progress::Pending))
            .answer(Step::Retire, Duration::ZERO, Ok(Progress::Pending))
    };
    for (result, steps) in both(Mode::Overlap, BUDGETS, script) {
        assert_eq!(result, Ok(Outcome::RetirementPending));
        assert_eq!(steps.iter().filter(|&&s| s == Step::Verify).count(), 3);
    }
}

#[test]
fn unchanged_at_recheck_replaces_nothing() {
    for (result, steps) in both(Mode::Exclusive, BUDGETS, || {
        Scripted::default().answer(Step::Recheck, Duration::ZERO, Ok(Progress::Unchanged))
    }) {
        assert_eq!(result, Ok(Outcome::Unchanged));
        assert_eq!(steps, [Step::Recheck]);
    }
}

const SHORT: Budgets = Budgets {
    setup: Duration::from_millis(300),
    drain: Some(Duration::from_millis(300)),
};

#[test]
fn setup_budget_expiry_fails_uncommitted() {
    // prepare and start together outlast the one setup budget, though each
    // alone fits: the budget is shared.
    let script = || {
        Scripted::default()
            .answer(
                Step::Prepare,
                Duration::from_millis(200),
                Ok(Progress::Done),
            )
            .answer(Step::Start, Duration::from_millis(200), Ok(Progress::Done))
    };
    for (result, steps) in both(Mode::Overlap, SHORT, script) {
        assert_eq!(
            result,
            Err(Failure {
                step: Step::Start,
                committed: false,
                reason: Reason::Deadline
            })
        );
        assert_eq!(steps, [Step::Recheck, Step::Prepare, Step::Start]);
    }
}

#[test]
fn a_pending_verify_runs_out_the_setup_budget() {
    let mut script = Scripted::default();
    for _ in 0..100 {
        script = script.answer(Step::Verify, Duration::ZERO, Ok(Progress::Pending));
    }
    let ((result, _), _) = paused(Mode::Overlap, SHORT, script);
    assert_eq!(
        result,
        Err(Failure {
            step: Step::Verify,
            committed: false,
            reason: Reason::Deadline
        })
    );
}

#[test]
fn setup_budget_restarts_after_an_exclusive_drain() {
    // prepare uses most of the setup budget; the drain is long but within
    // its own budget; start then has a fresh setup budget.
    let budgets = Budgets {
        setup: Duration::from_millis(300),
        drain: Some(Duration::from_secs(2)),
    };
    let script = || {
        Scripted::default()
            .answer(
                Step::Prepare,
                Duration::from_millis(200),
                Ok(Progress::Done),
            )
            .answer(Step::Drain, Duration::from_millis(500), Ok(Progress::Done))
            .answer(Step::Start, Duration::from_millis(200), Ok(Progress::Done))
    };
    for (result, steps) in both(Mode::Exclusive, budgets, script) {
        assert_eq!(result, Ok(Outcome::Complete));
        assert_eq!(steps, Mode::Exclusive.steps());
    }
    // The deadlines each step was handed, on the paused clock: setup from 0,
    // drain from the end of prepare, setup again from the end of the drain.
    let ((_, _), driver) = paused(Mode::Exclusive, budgets, script());
    let given: HashMap<Step, Option<Duration>> = driver.asked.iter().copied().collect();
    assert_eq!(given[&Step::Recheck], Some(Duration::from_millis(300)));
    assert_eq!(given[&Step::Drain], Some(Duration::from_millis(2200)));
    assert_eq!(given[&Step::Start], Some(Duration::from_millis(1000)));
    // No drain budget: the drain has no deadline.
    let unbounded = Budgets {
        drain: None,
        ..budgets
    };
    let ((result, _), driver) = paused(Mode::Exclusive, unbounded, script());
    assert_eq!(result, Ok(Outcome::Complete));
    let given: HashMap<Step, Option<Duration>> = driver.asked.iter().copied().collect();
    assert_eq!(given[&Step::Drain], None);
}

#[test]
fn drain_budget_expiry_fails_before_any_candidate_starts() {
    let script =
        || Scripted::default().answer(Step::Drain, Duration::from_secs(1), Ok(Progress::Done));
    for (result, steps) in both(Mode::Exclusive, SHORT, script) {
        assert_eq!(
            result,
            Err(Failure {
                step: Step::Drain,
                committed: false,
                reason: Reason::Deadline
            })
        );
        // The transaction stops there: no candidate is started.
        assert_eq!(steps, [Step::Recheck, Step::Prepare, Step::Drain]);
    }
    // Retire's budget is the drain budget too; its expiry is after commit.
    let script =
        || Scripted::default().answer(Step::Retire, Duration::from_secs(1), Ok(Progress::Done));
    for (result, _) in both(Mode::Overlap, SHORT, script) {
        assert_eq!(
            result,
            Err(Failure {
                step: Step::Retire,
                committed: true,
                reason: Reason::Deadline
            })
        );
    }
}

#[test]
fn a_late_commit_is_recorded() {
    let script =
        || Scripted::default().answer(Step::Commit, Duration::from_millis(500), Ok(Progress::Done));
    for mode in [Mode::Overlap, Mode::Exclusive] {
        for (result, steps) in both(mode, SHORT, script) {
            if mode == Mode::Exclusive {
                assert_eq!(result, Ok(Outcome::Complete));
            } else {
                // Retire has its own (drain) budget, so it still runs.
                assert_eq!(result, Ok(Outcome::Complete), "{mode:?}");
                assert_eq!(steps.last(), Some(&Step::Retire));
            }
        }
    }
    // A commit that fails late is still a commit failure, not a deadline.
    let script = || {
        Scripted::default().answer(
            Step::Commit,
            Duration::from_millis(500),
            Err(Boom(Step::Commit)),
        )
    };
    for (result, _) in both(Mode::Exclusive, SHORT, script) {
        assert_eq!(
            result,
            Err(Failure {
                step: Step::Commit,
                committed: false,
                reason: Reason::Adapter(Boom(Step::Commit))
            })
        );
    }
}

#[test]
fn a_deadline_past_before_commit_fails_uncommitted() {
    // validate answers done, but after the setup budget ran out: commit is
    // never asked.
    let script = || {
        Scripted::default().answer(
            Step::Validate,
            Duration::from_millis(500),
            Ok(Progress::Done),
        )
    };
    for (result, steps) in both(Mode::Overlap, SHORT, script) {
        assert_eq!(
            result,
            Err(Failure {
                step: Step::Validate,
                committed: false,
                reason: Reason::Deadline
            })
        );
        assert!(!steps.contains(&Step::Commit));
    }
}

#[test]
fn prefault_errors_are_ignored() {
    let dir = tempfile::tempdir().expect("tempdir");
    let present = dir.path().join("present");
    std::fs::write(&present, b"binary").expect("write");
    let script = || Scripted {
        warm: vec![
            dir.path().join("missing"),
            dir.path().to_path_buf(), // a directory: reading it fails
            present.clone(),
        ],
        ..Scripted::default()
    };
    for mode in [Mode::Overlap, Mode::Exclusive] {
        for (result, _) in both(mode, BUDGETS, script) {
            assert_eq!(result, Ok(Outcome::Complete));
        }
    }
}

#[derive(Default)]
struct Recorder(Vec<String>);

impl Observer for Recorder {
    fn step_started(&mut self, step: Step) {
        self.0.push(format!("{step}"));
    }
    fn step_answered(&mut self, step: Step, progress: Progress) {
        self.0.push(format!("{step}={progress:?}"));
    }
}

#[test]
fn the_observer_sees_every_step_and_answer() {
    let mut driver =
        Scripted::default().answer(Step::Verify, Duration::ZERO, Ok(Progress::Pending));
    let mut seen = Recorder::default();
    let result = run(Mode::Exclusive, BUDGETS, &mut driver, &mut seen);
    assert_eq!(result, Ok(Outcome::Complete));
    assert_eq!(
        seen.0,
        [
            "recheck",
            "recheck=Done",
            "prepare",
            "prepare=Done",
            "drain",
            "drain=Done",
            "start",
            "start=Done",
            "verify",
            "verify=Pending",
            "verify",
            "verify=Done",
            "validate",
            "validate=Done",
            "commit",
            "commit=Done"
        ]
    );
}

/// `protocol/src/replacement.rs`, "A stop during a replace", as the async
/// runner carries it out: a stop that arrives while a step of either mode is
/// in flight (each step takes 10 s here, on tokio's paused clock; the stop
/// comes 1 s in) aborts every step before commit at once — the step's
/// future dropped, `stopped`, uncommitted, nothing asked after it —, lets a
/// commit in flight finish (the transaction then ends as without the stop),
/// and leaves retire, after commit, to run on: the caller forwards the
/// stop. Every stop is kept for the caller.
#[test]
fn a_stop_aborts_every_step_before_commit_and_never_interrupts_commit() {
    let budgets = Budgets {
        setup: Duration::from_secs(60),
        drain: None,
    };
    for mode in [Mode::Overlap, Mode::Exclusive] {
        for (index, &slow) in mode.steps().iter().enumerate() {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_time()
                .start_paused(true)
                .build()
                .expect("runtime");
            let (result, steps, received) = rt.block_on(async move {
                let mut driver = AsyncScripted(Scripted::default().answer(
                    slow,
                    Duration::from_secs(10),
                    Ok(Progress::Done),
                ));
                let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
                let mut inbox = StopInbox::new(rx);
                let stopper = tokio::spawn(async move {
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    let _ = tx.send("first");
                    let _ = tx.send("second");
                    tx
                });
                let result =
                    run_stoppable(mode, budgets, &mut driver, &mut NoObserver, &mut inbox).await;
                drop(stopper.await);
                let (received, _) = inbox.into_parts();
                (result, driver.0.steps(), received)
            });
            let committed_before = mode.steps()[..index].contains(&Step::Commit);
            let context = format!("{mode:?}, a stop while {slow} is in flight");
            if committed_before || slow == Step::Commit {
                assert_eq!(result, Ok(Outcome::Complete), "{context}");
                assert_eq!(steps, mode.steps(), "{context}");
                assert_eq!(
                    received,
                    ["first"],
                    "{context}: the runner hears the first only"
                );
            } else {
                assert_eq!(
                    result,
                    Err(Failure {
                        step: slow,
                        committed: false,
                        reason: Reason::Stopped,
                    }),
                    "{context}"
                );
                assert_eq!(steps, &mode.steps()[..=index], "{context}");
                assert_eq!(received, ["first"], "{context}");
            }
        }
    }
}

/// A stop that arrives while a `pending` step waits to be asked again
/// aborts the wait: verify is not asked again.
#[test]
fn a_stop_between_two_asks_of_a_pending_step_aborts() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("runtime");
    let (result, steps) = rt.block_on(async {
        let mut script = Scripted::default();
        for _ in 0..1000 {
            script = script.answer(Step::Verify, Duration::ZERO, Ok(Progress::Pending));
        }
        let mut driver = AsyncScripted(script);
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let mut inbox = StopInbox::new(rx);
        let stopper = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(1025)).await;
            let _ = tx.send(());
            tx
        });
        let result = run_stoppable(
            Mode::Overlap,
            BUDGETS,
            &mut driver,
            &mut NoObserver,
            &mut inbox,
        )
        .await;
        drop(stopper.await);
        (result, driver.0.steps())
    });
    let failure = result.expect_err("aborted");
    assert_eq!((failure.step, failure.committed), (Step::Verify, false));
    assert_eq!(failure.reason, Reason::Stopped);
    let asked = steps.iter().filter(|&&s| s == Step::Verify).count();
    assert!((2..1000).contains(&asked), "verify asked {asked} times");
}
