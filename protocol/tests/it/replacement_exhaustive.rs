//! Every adapter answer sequence, up to 17 answers, in both modes.
//!
//! The replacement seed proves its promises with a model checker over any 17
//! answers; here the same promises are checked by plain enumeration, as
//! ordinary tests. An answer is what a runner can hand the machine after
//! asking the adapter to perform the current step: `done`, `pending` or
//! `unchanged` (through [`Machine::advance`]), an adapter error (through
//! [`Machine::adapter_failed`]), or an expired budget (through
//! [`Machine::deadline_expired`]). A sequence stops growing when the machine
//! ends the transaction, with an outcome or a failure, or at 17 answers.
//!
//! After every answer, [`check_answer`] holds the machine to the promises in
//! `protocol/src/replacement.rs`'s module doc (and DESIGN.md, "Replacement"):
//! selection is never withdrawn; overlap never drains; exclusive drains before
//! it starts the candidate; commit only after verify and validate answered
//! done; retire only after commit; `unchanged` only as recheck's answer before
//! commit; success only once committed; a failure carries the true step and
//! committed flag.
//!
//! A stop (SIGTERM or SIGINT to the incumbent, or `exit`) may arrive at any
//! moment of any sequence: at every machine state reached, [`check_stop`]
//! hands one to a copy of the machine and holds the decision to the rule of
//! "A stop during a replace" — abort while uncommitted away from `commit`,
//! await commit's answer at `commit` (done forwards, any failure aborts),
//! forward once committed — and the promises above stay kept with a stop
//! recorded. The stops are tallied per decision.
//!
//! Run with `cargo test -p steadfast-protocol --test it -- replacement_exhaustive::
//! --nocapture` to see the tallies.

use std::collections::BTreeSet;

use steadfast_protocol::replacement::{
    Failure, Machine, Mode, Outcome, Progress, Reason, Step, StopDecision,
};

/// Long enough to reach `Complete` in either mode after a retry at every step
/// that retries (recheck, verify, and drain in exclusive), with room to spare.
const MAX_ANSWERS: usize = 17;

/// One thing a runner can hand the machine after performing a step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Answer {
    Done,
    Pending,
    Unchanged,
    AdapterError,
    DeadlineExpired,
}

const ANSWERS: [Answer; 5] = [
    Answer::Done,
    Answer::Pending,
    Answer::Unchanged,
    Answer::AdapterError,
    Answer::DeadlineExpired,
];

/// The adapter's error, tagged with the answer's position so a failure can be
/// checked to carry exactly the error it was given.
#[derive(Debug, Clone, PartialEq, Eq)]
struct AdapterError(usize);

/// What has happened so far on the current sequence, as a witness outside the
/// machine would record it.
#[derive(Debug, Clone, Default)]
struct Witness {
    drained: bool,
    verified: bool,
    validated: bool,
    /// Steps at which a `pending` was answered and the machine stayed.
    retried: BTreeSet<StepKey>,
}

/// `Step` has no `Ord`; its wire name does.
type StepKey = &'static str;

/// How the enumeration went, per mode.
#[derive(Debug, Default, PartialEq, Eq)]
struct Tally {
    /// Maximal sequences: each ended the transaction or reached 17 answers.
    sequences: u64,
    /// Answers handed to the machine, over all sequences (shared prefixes
    /// counted once).
    answers: u64,
    unchanged: u64,
    complete: u64,
    retirement_pending: u64,
    failed: u64,
    failed_after_commit: u64,
    /// Sequences still in progress at 17 answers.
    cut_at_limit: u64,
    /// Some sequence reached `Complete` after a retry at every retrying step.
    complete_after_every_retry: bool,
    /// Stops handed to the machine, one at every state reached, by decision.
    stops: StopTally,
}

/// Stops checked, by what the machine decided.
#[derive(Debug, Default, PartialEq, Eq)]
struct StopTally {
    abort: u64,
    await_commit: u64,
    forward: u64,
}

fn enumerate(mode: Mode) -> Tally {
    let mut tally = Tally::default();
    explore(&Machine::new(mode), &Witness::default(), 0, &mut tally);
    eprintln!("replacement {mode:?}: {tally:#?}");
    tally
}

fn explore(machine: &Machine, witness: &Witness, answered: usize, tally: &mut Tally) {
    check_stop(machine, witness, answered, &mut tally.stops);
    if answered == MAX_ANSWERS {
        tally.sequences += 1;
        tally.cut_at_limit += 1;
        return;
    }
    for answer in ANSWERS {
        let mut next = machine.clone();
        let mut seen = witness.clone();
        let result = hand(&mut next, answer, answered);
        tally.answers += 1;
        check_answer(machine, &next, &mut seen, answer, answered, &result);
        match result {
            Ok(None) => explore(&next, &seen, answered + 1, tally),
            Ok(Some(outcome)) => {
                tally.sequences += 1;
                match outcome {
                    Outcome::Unchanged => tally.unchanged += 1,
                    Outcome::Complete => {
                        tally.complete += 1;
                        let retrying: BTreeSet<StepKey> = next
                            .mode()
                            .steps()
                            .iter()
                            .filter(|s| matches!(s, Step::Recheck | Step::Drain | Step::Verify))
                            .map(|s| s.name())
                            .collect();
                        tally.complete_after_every_retry |= seen.retried == retrying;
                    }
                    Outcome::RetirementPending => tally.retirement_pending += 1,
                }
            }
            Err(failure) => {
                tally.sequences += 1;
                tally.failed += 1;
                if failure.committed {
                    tally.failed_after_commit += 1;
                }
            }
        }
    }
}

/// A stop arrives at `machine` (after `answered` answers): the decision is
/// the phase's, the machine does not move, an abort is the uncommitted
/// `stopped` failure at the step, and at `commit` every answer the commit can
/// get decides the stop at the end: forward only once committed.
fn check_stop(machine: &Machine, witness: &Witness, answered: usize, tally: &mut StopTally) {
    let step = machine.step();
    let context = format!(
        "{:?}: a stop after {answered} answers, at {step}",
        machine.mode()
    );
    let mut stopped = machine.clone();
    let decision = stopped.stop();
    assert!(stopped.stop_requested(), "{context}: the stop is recorded");
    assert_eq!(stopped.step(), step, "{context}: a stop moves the machine");
    assert_eq!(
        stopped.committed(),
        machine.committed(),
        "{context}: a stop changes the selection"
    );
    match decision {
        StopDecision::Abort => {
            tally.abort += 1;
            assert!(!machine.committed(), "{context}: aborted after commit");
            assert_ne!(step, Step::Commit, "{context}: aborted a commit");
            assert_eq!(
                stopped.stopped::<AdapterError>(),
                Failure {
                    step,
                    committed: false,
                    reason: Reason::Stopped
                },
                "{context}: the abort's failure"
            );
            assert_eq!(
                StopDecision::once_ended(false),
                StopDecision::Abort,
                "{context}: rolled back, the incumbent carries it out"
            );
        }
        StopDecision::AwaitCommit => {
            tally.await_commit += 1;
            assert!(
                step == Step::Commit && !machine.committed(),
                "{context}: awaited off commit"
            );
            assert!(
                witness.verified && witness.validated,
                "{context}: commit reached unproven"
            );
            // Commit's answer decides, whatever it is; the stop stays
            // recorded and the promises hold as without it.
            for answer in ANSWERS {
                let mut next = stopped.clone();
                let mut seen = witness.clone();
                let result = hand(&mut next, answer, answered);
                check_answer(&stopped, &next, &mut seen, answer, answered, &result);
                assert!(next.stop_requested(), "{context}: the stop was forgotten");
                let ended_committed = match &result {
                    Ok(None) => {
                        assert_eq!(
                            next.clone().stop(),
                            StopDecision::Forward,
                            "{context}: committed, not forwarded"
                        );
                        true
                    }
                    Ok(Some(outcome)) => *outcome != Outcome::Unchanged,
                    Err(failure) => failure.committed,
                };
                let expected = if answer == Answer::Done {
                    StopDecision::Forward
                } else {
                    StopDecision::Abort
                };
                assert_eq!(
                    StopDecision::once_ended(ended_committed),
                    expected,
                    "{context}: commit answered {answer:?}"
                );
            }
        }
        StopDecision::Forward => {
            tally.forward += 1;
            assert!(machine.committed(), "{context}: forwarded uncommitted");
            assert_eq!(StopDecision::once_ended(true), StopDecision::Forward);
        }
    }
}

/// Hand `answer` to the machine the way a runner would.
fn hand(
    machine: &mut Machine,
    answer: Answer,
    answered: usize,
) -> Result<Option<Outcome>, Failure<AdapterError>> {
    match answer {
        Answer::Done => machine.advance(Progress::Done),
        Answer::Pending => machine.advance(Progress::Pending),
        Answer::Unchanged => machine.advance(Progress::Unchanged),
        Answer::AdapterError => Err(machine.adapter_failed(AdapterError(answered))),
        Answer::DeadlineExpired => Err(machine.deadline_expired()),
    }
}

/// The promises, checked after one answer: `before` is the machine the answer
/// was for, `after` the machine once it took the answer.
fn check_answer(
    before: &Machine,
    after: &Machine,
    seen: &mut Witness,
    answer: Answer,
    answered: usize,
    result: &Result<Option<Outcome>, Failure<AdapterError>>,
) {
    let step = before.step();
    let mode = before.mode();
    let context = format!("{mode:?}: answer {answered} ({answer:?}) at {step}");
    assert_eq!(after.mode(), mode, "{context}: mode never changes");

    if answer == Answer::Done {
        seen.drained |= step == Step::Drain;
        seen.verified |= step == Step::Verify;
        seen.validated |= step == Step::Validate;
    }
    if answer == Answer::Pending && result == &Ok(None) {
        assert_eq!(after, before, "{context}: a retry stays on the step");
        seen.retried.insert(step.name());
    }

    // Selection is never withdrawn once made.
    assert!(
        !before.committed() || after.committed(),
        "{context}: selection withdrawn"
    );
    // Only commit's done makes the selection.
    if after.committed() && !before.committed() {
        assert!(
            step == Step::Commit && answer == Answer::Done,
            "{context}: committed off commit"
        );
    }
    // A step change goes to the next step of the mode's order, and only on done.
    if after.step() != step {
        assert_eq!(answer, Answer::Done, "{context}: moved without done");
        let order = mode.steps();
        let at = order
            .iter()
            .position(|&s| s == step)
            .expect("step belongs to its mode");
        assert_eq!(
            order.get(at + 1),
            Some(&after.step()),
            "{context}: skipped a step"
        );
    }
    // Overlap keeps the incumbent serving: it never drains it.
    if mode == Mode::Overlap {
        assert_ne!(after.step(), Step::Drain, "{context}: overlap drained");
    }
    // Exclusive drains the incumbent before it starts the candidate.
    if mode == Mode::Exclusive && after.step() == Step::Start {
        assert!(seen.drained, "{context}: started before draining");
    }
    // Commit comes only after a live proof and a revalidation.
    if after.step() == Step::Commit || after.committed() {
        assert!(
            seen.verified && seen.validated,
            "{context}: commit before verify+validate"
        );
    }
    // The incumbent is retired only after the new selection is committed.
    if after.step() == Step::Retire {
        assert!(after.committed(), "{context}: retire before commit");
    }
    // `unchanged` anywhere but recheck is refused.
    if answer == Answer::Unchanged && step != Step::Recheck {
        assert!(
            matches!(
                result,
                Err(Failure {
                    reason: Reason::InvalidProgress,
                    ..
                })
            ),
            "{context}: unchanged accepted off recheck"
        );
    }

    match result {
        Ok(None) => {}
        Ok(Some(Outcome::Unchanged)) => {
            assert!(
                step == Step::Recheck && answer == Answer::Unchanged && !after.committed(),
                "{context}: unchanged outcome off recheck or after commit"
            );
        }
        Ok(Some(Outcome::Complete | Outcome::RetirementPending)) => {
            assert!(after.committed(), "{context}: success without selection");
        }
        Err(failure) => {
            assert_eq!(failure.step, step, "{context}: failure names another step");
            assert_eq!(
                failure.committed,
                before.committed(),
                "{context}: failure's committed"
            );
            assert_eq!(after, before, "{context}: a failure moves nothing");
            let expected = match answer {
                Answer::AdapterError => Reason::Adapter(AdapterError(answered)),
                Answer::DeadlineExpired => Reason::Deadline,
                Answer::Done | Answer::Pending | Answer::Unchanged => Reason::InvalidProgress,
            };
            assert_eq!(failure.reason, expected, "{context}: failure's reason");
        }
    }
}

// The expected counts, derived by hand. Name the mode's steps s0..s6 (see
// `Mode::steps`); `done` at s6 ends `Complete`. A live prefix has answered
// `done` k times (0..=6, now at s_k) and `pending` p times, spread over the r
// retrying steps among s0..=s_k: C(p + r - 1, r - 1) ways. Each live prefix
// shorter than 17 has 5 answers, of which t(s_k) end the sequence:
//   recheck 3 (unchanged, error, deadline), retrying steps 3 (unchanged, error,
//   deadline), other steps 4 (pending, unchanged, error, deadline), the last
//   step 5 (done too; retire's pending is `RetirementPending`).
// Sequences = sum of live prefixes * t(s_k) over lengths < 17, plus the live
// prefixes of length 17. Overlap retries at s0 and s3 only; exclusive at s0,
// s2 and s4, hence its many more sequences. For instance `unchanged` is 17 in
// both modes (0..=16 retries of recheck, then unchanged), and overlap's
// `complete` is 66 = sum over n in 6..=16 of (n - 5) ways to place n - 6
// retries at recheck and verify. No commit is ever followed by a failure in
// exclusive, where commit is the last step.
//
// A stop is checked at every state reached: the live prefixes, answers / 5
// below the limit plus those cut at it (overlap 388 + 57 = 445, exclusive
// 1363 + 307 = 1670). It is forwarded at the live prefixes that committed,
// overlap's at retire: 6 done and p <= 11 retries over recheck and verify,
// sum of (p + 1) = 78 (exclusive ends at commit: none). It awaits commit at
// those at commit: overlap 5 done and p <= 12 retries over 2 steps, sum of
// (p + 1) = 91; exclusive 6 done and p <= 11 over 3 steps, sum of
// C(p + 2, 2) = C(14, 3) = 364. Every other one aborts.

/// One stop was checked at every state reached (the live prefixes).
fn assert_stops_at_every_state(tally: &Tally) {
    let stops = tally.stops.abort + tally.stops.await_commit + tally.stops.forward;
    assert_eq!(stops, tally.answers / 5 + tally.cut_at_limit);
}

/// [`enumerate`] `mode`, with the checks that hold for every mode: a stop
/// at every state, and a sequence that completes after every retry.
fn enumerated(mode: Mode) -> Tally {
    let tally = enumerate(mode);
    assert_stops_at_every_state(&tally);
    assert!(
        tally.complete_after_every_retry,
        "no sequence completed after every retry"
    );
    tally
}

#[test]
fn every_overlap_answer_sequence_keeps_the_promises() {
    let tally = enumerated(Mode::Overlap);
    assert_eq!(
        tally,
        Tally {
            sequences: 1553,
            answers: 1940,
            unchanged: 17,
            complete: 66,
            retirement_pending: 66,
            failed: 1347,
            failed_after_commit: 198,
            cut_at_limit: 57,
            complete_after_every_retry: true,
            stops: StopTally {
                abort: 276,
                await_commit: 91,
                forward: 78,
            },
        }
    );
}

#[test]
fn every_exclusive_answer_sequence_keeps_the_promises() {
    let tally = enumerated(Mode::Exclusive);
    assert_eq!(
        tally,
        Tally {
            sequences: 5453,
            answers: 6815,
            unchanged: 17,
            complete: 286,
            retirement_pending: 0,
            failed: 4843,
            failed_after_commit: 0,
            cut_at_limit: 307,
            complete_after_every_retry: true,
            stops: StopTally {
                abort: 1306,
                await_commit: 364,
                forward: 0,
            },
        }
    );
}

#[test]
fn happy_path_visits_each_step_of_its_mode_once() {
    use Step::{Commit, Drain, Prepare, Recheck, Retire, Start, Validate, Verify};
    let cases = [
        (
            Mode::Overlap,
            vec![Recheck, Prepare, Start, Verify, Validate, Commit, Retire],
        ),
        (
            Mode::Exclusive,
            vec![Recheck, Prepare, Drain, Start, Verify, Validate, Commit],
        ),
    ];
    for (mode, expected) in cases {
        let mut machine = Machine::new(mode);
        let mut visited = Vec::new();
        let outcome = loop {
            visited.push(machine.step());
            let was = machine.step();
            match machine.advance::<AdapterError>(Progress::Done) {
                Ok(None) => assert_ne!(machine.step(), was, "{mode:?}: done must move on"),
                Ok(Some(outcome)) => break outcome,
                Err(failure) => panic!("{mode:?}: happy path failed: {failure:?}"),
            }
        };
        assert_eq!(visited, expected, "{mode:?}");
        assert_eq!(visited, mode.steps(), "{mode:?}: Mode::steps agrees");
        assert_eq!(outcome, Outcome::Complete, "{mode:?}");
        assert!(machine.committed(), "{mode:?}");
    }
}
