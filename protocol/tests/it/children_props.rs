//! The children machine's invariants (`spec/children.md`, "Invariants")
//! over arbitrary groups (1 to 6 children of random restart types and
//! significance, random strategy, intensity and auto-shutdown, each valid
//! per `GroupSpec::check`) and arbitrary event sequences in non-decreasing
//! time: exits of current, stale and future incarnations and of undeclared
//! children, every exit kind, operator commands, the shutdown and repeated
//! starts (`invariants_hold_over_arbitrary_sequences`); and crash loops
//! timed against the group's period, so the intensity window's edge is met
//! (`the_intensity_holds_over_crash_loops_timed_against_the_period`). Every
//! step is checked against the group as it stood before it, and each
//! failure names the invariant by the spec's number. `CASES` each; CI fixes
//! `PROPTEST_RNG_SEED`, so a run checks the same cases.

use std::collections::{BTreeSet, VecDeque};
use std::sync::Mutex;

use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use steadfast_protocol::Timestamp;
use steadfast_protocol::children::{
    AutoShutdown, ChildExit, ChildKind, ChildOp, ChildSpec, ChildState, Decision, Event, Group,
    GroupSpec, Intensity, OpRefused, Phase, Plan, Restart, Strategy as Policy,
};

/// Sequences checked.
const CASES: u32 = 512;
const MAX_LEN: usize = 60;

fn restart_type() -> impl Strategy<Value = Restart> {
    prop_oneof![
        Just(Restart::Permanent),
        Just(Restart::Transient),
        Just(Restart::Temporary),
    ]
}

/// A group `check` accepts: significance only where the auto-shutdown
/// allows it and the child can end for good; a period of 0 only with 0
/// restarts.
fn group_spec() -> impl Strategy<Value = GroupSpec> {
    let strategy = prop_oneof![
        Just(Policy::OneForOne),
        Just(Policy::OneForAll),
        Just(Policy::RestForOne),
    ];
    let auto = prop_oneof![
        2 => Just(AutoShutdown::Never),
        1 => Just(AutoShutdown::AnySignificant),
        1 => Just(AutoShutdown::AllSignificant),
    ];
    // Round periods beside arbitrary ones, so that steps of round length
    // land exactly on a period's end (the half-open window's edge).
    let period = prop_oneof![Just(1u64), Just(500), Just(1_000), 1u64..=3_000];
    let intensity =
        (0u32..=4, period, any::<bool>()).prop_map(|(restarts, period, zero)| Intensity {
            restarts,
            period_ms: if restarts == 0 && zero { 0 } else { period },
        });
    let children = proptest::collection::vec((restart_type(), any::<bool>()), 1..=6);
    (strategy, intensity, auto, children).prop_map(|(strategy, intensity, auto_shutdown, kids)| {
        let children = kids
            .into_iter()
            .enumerate()
            .map(|(i, (restart, significant))| ChildSpec {
                name: format!("c{i}"),
                kind: ChildKind::Task,
                restart,
                significant: significant
                    && auto_shutdown != AutoShutdown::Never
                    && restart != Restart::Permanent,
                shutdown_ms: 1_000,
            })
            .collect();
        GroupSpec {
            strategy,
            intensity,
            auto_shutdown,
            children,
        }
    })
}

/// Which incarnation an exit names, resolved against the group when it
/// arrives.
#[derive(Debug, Clone, Copy)]
enum Which {
    Current,
    /// That many before the current one (saturating at 0).
    Stale(u32),
    /// The one after the current one.
    Next,
}

/// An event before it meets the group: child indices may be one past the
/// last (undeclared), incarnations are relative, time is a delta.
#[derive(Debug, Clone)]
enum Step {
    Exit {
        child: usize,
        which: Which,
        exit: ChildExit,
        after_ms: u64,
    },
    Operator {
        child: usize,
        op: ChildOp,
        after_ms: u64,
    },
    Shutdown,
    Start,
}

fn step() -> impl Strategy<Value = Step> {
    let child = 0usize..=6;
    let which = prop_oneof![
        8 => Just(Which::Current),
        2 => (1u32..=3).prop_map(Which::Stale),
        1 => Just(Which::Next),
    ];
    let exit = prop_oneof![
        Just(ChildExit::Normal),
        Just(ChildExit::Error("e".into())),
        Just(ChildExit::Panicked("p".into())),
        Just(ChildExit::StartFailed("s".into())),
    ];
    let op = prop_oneof![
        Just(ChildOp::Restart),
        Just(ChildOp::Stop),
        Just(ChildOp::Start)
    ];
    let after = prop_oneof![
        3 => 0u64..=1_500,
        1 => Just(0u64),
        1 => Just(1u64),
        1 => Just(250u64),
        1 => Just(500u64),
        1 => Just(1_000u64),
    ];
    prop_oneof![
        12 => (child.clone(), which, exit, after.clone())
            .prop_map(|(child, which, exit, after_ms)| Step::Exit { child, which, exit, after_ms }),
        4 => (child, op, after).prop_map(|(child, op, after_ms)| Step::Operator { child, op, after_ms }),
        1 => Just(Step::Shutdown),
        1 => Just(Step::Start),
    ]
}

fn running(g: &Group) -> BTreeSet<usize> {
    (0..g.len())
        .filter(|i| matches!(g.state(*i), Some((ChildState::Running, _))))
        .collect()
}

fn incarnation(g: &Group, i: usize) -> u32 {
    g.state(i).map_or(0, |(_, n)| n)
}

fn strictly_decreasing(v: &[usize]) -> bool {
    v.windows(2).all(|w| w[0] > w[1])
}

fn strictly_increasing(v: &[(usize, u32)]) -> bool {
    v.windows(2).all(|w| w[0].0 < w[1].0)
}

/// What a run has shown, to check the sequences are not vacuous.
#[derive(Default)]
struct Seen {
    decisions: BTreeSet<&'static str>,
    cases: u64,
}

fn kind(d: &Decision) -> &'static str {
    match d {
        Decision::Ignore => "ignore",
        Decision::Ended => "ended",
        Decision::Restart(_) => "restart",
        Decision::Meltdown { .. } => "meltdown",
        Decision::SignificantEnded { .. } => "significant_ended",
        Decision::Shutdown { .. } => "shutdown",
        Decision::Refused(_) => "refused",
    }
}

/// The checks every plan meets, automatic or not (invariants 3, 8, 9).
fn check_plan(before: &Group, after: &Group, plan: &Plan) -> Result<(), TestCaseError> {
    let was_running = running(before);
    prop_assert!(
        strictly_decreasing(&plan.stop),
        "3: stops last declared first: {:?}",
        plan.stop
    );
    prop_assert!(
        strictly_increasing(&plan.start),
        "3: starts first declared first: {:?}",
        plan.start
    );
    for j in &plan.stop {
        prop_assert!(
            was_running.contains(j),
            "8: stops {j}, which was not running"
        );
    }
    for (j, n) in &plan.start {
        prop_assert_eq!(
            *n,
            incarnation(before, *j) + 1,
            "9: {} starts at its incarnation + 1",
            j
        );
        prop_assert_eq!(
            after.state(*j),
            Some((&ChildState::Running, *n)),
            "9: a started child runs its new incarnation"
        );
        if plan.stop.contains(j) {
            prop_assert!(
                was_running.contains(j),
                "8: stop ∩ start holds {j}, not running"
            );
        }
    }
    for r in &plan.restarted {
        let j = after.index_of(&r.child).expect("a declared child");
        prop_assert!(
            plan.start.contains(&(j, r.incarnation)),
            "9: a restarted record names a start of the plan: {:?}",
            r
        );
        prop_assert!(
            r.incarnation >= 2,
            "9: a record is not a first start: {:?}",
            r
        );
    }
    let firsts = plan.start.iter().filter(|(_, n)| *n == 1).count();
    prop_assert_eq!(
        plan.restarted.len() + firsts,
        plan.start.len(),
        "9: one record per start that is not a child's first"
    );
    Ok(())
}

/// One case: the group, the steps; checked after every step.
#[allow(clippy::too_many_lines)]
fn check_sequence(spec: GroupSpec, start: bool, steps: &[Step]) -> Result<Seen, TestCaseError> {
    prop_assert_eq!(spec.check(), Ok(()), "the generator makes valid groups");
    let intensity = spec.intensity;
    let strategy = spec.strategy;
    let auto = spec.auto_shutdown;
    let mut g = Group::new(spec).expect("valid");
    let mut seen = Seen::default();
    // Moments of the automatic restarts so far.
    let mut restarts: VecDeque<u64> = VecDeque::new();
    // Children whose first start has happened.
    let mut started: BTreeSet<usize> = BTreeSet::new();
    let mut now = 0u64;
    let mut over = false;
    if start {
        let plan = g.start();
        prop_assert!(strictly_increasing(&plan.start));
        prop_assert!(plan.start.iter().all(|(_, n)| *n == 1));
        started.extend(plan.start.iter().map(|(j, _)| *j));
    }
    for step in steps {
        let before = g.clone();
        let was_running = running(&before);
        let event = match step {
            Step::Start => {
                let plan = g.start();
                check_plan(&before, &g, &plan)?;
                prop_assert!(plan.stop.is_empty() && plan.restarted.is_empty());
                prop_assert!(
                    plan.start
                        .iter()
                        .all(|(j, n)| *n == 1 && !started.contains(j)),
                    "start() starts only children never started: {:?}",
                    plan.start
                );
                if over {
                    prop_assert!(
                        plan.start.is_empty(),
                        "4: start() after the end starts nothing"
                    );
                }
                started.extend(plan.start.iter().map(|(j, _)| *j));
                continue;
            }
            Step::Shutdown => Event::Shutdown,
            Step::Operator {
                child,
                op,
                after_ms,
            } => {
                now += after_ms;
                Event::Operator {
                    child: *child,
                    op: *op,
                    at: Timestamp(now),
                }
            }
            Step::Exit {
                child,
                which,
                exit,
                after_ms,
            } => {
                now += after_ms;
                let current = incarnation(&g, *child);
                Event::Exited {
                    child: *child,
                    incarnation: match which {
                        Which::Current => current,
                        Which::Stale(k) => current.saturating_sub(*k),
                        Which::Next => current + 1,
                    },
                    exit: exit.clone(),
                    at: Timestamp(now),
                }
            }
        };
        let d = g.on(&event);
        seen.decisions.insert(kind(&d));

        // 12: the phase only moves forward, and as the decision says.
        match (&d, before.phase()) {
            (Decision::Shutdown { .. }, Phase::Running) => {
                prop_assert_eq!(g.phase(), Phase::ShuttingDown);
            }
            (Decision::Meltdown { .. } | Decision::SignificantEnded { .. }, Phase::Running) => {
                prop_assert_eq!(g.phase(), Phase::Ended);
            }
            (_, phase) => prop_assert_eq!(
                g.phase(),
                phase,
                "12: the phase moves only on its decisions"
            ),
        }
        // 11: ignore and refused change nothing.
        if matches!(d, Decision::Ignore | Decision::Refused(_)) {
            prop_assert_eq!(&g, &before, "11: {:?} changed the group", d);
        }
        // 4: nothing starts once the group shut down or ended.
        if over {
            prop_assert!(
                matches!(
                    d,
                    Decision::Ignore | Decision::Refused(OpRefused::ShuttingDown)
                ),
                "4: after the end, {:?}",
                d
            );
        }

        match &event {
            Event::Exited {
                child,
                incarnation: n,
                exit,
                at,
            } => {
                let current = *child < before.len()
                    && incarnation(&before, *child) == *n
                    && was_running.contains(child);
                // 5: an exit of an incarnation that is not the current one
                // (or of a child that does not run) changes nothing.
                if !current {
                    prop_assert_eq!(&d, &Decision::Ignore, "5: a stale exit is ignored");
                    prop_assert_eq!(&g, &before, "5: a stale exit changes nothing");
                }
                if current && !over {
                    let spec = before.spec(*child).expect("declared").clone();
                    let restarted_due = spec.restart.restarts_after(exit);
                    // 7: a transient child's normal end and a temporary
                    // child's any end are not restarted.
                    if spec.restart == Restart::Temporary
                        || (spec.restart == Restart::Transient && exit.is_normal())
                    {
                        prop_assert!(!restarted_due);
                        prop_assert!(
                            matches!(d, Decision::Ended | Decision::SignificantEnded { .. }),
                            "7: {:?} {:?} is an end, not {:?}",
                            spec.restart,
                            exit,
                            d
                        );
                        prop_assert_eq!(
                            g.state(*child),
                            Some((&ChildState::Ended(exit.clone()), *n))
                        );
                        // 13: a significant child's end for good ends the
                        // runtime under any_significant, and under
                        // all_significant when no other significant one runs.
                        let others_running = was_running
                            .iter()
                            .any(|j| j != child && before.spec(*j).is_some_and(|s| s.significant));
                        let ends = spec.significant
                            && match auto {
                                AutoShutdown::Never => false,
                                AutoShutdown::AnySignificant => true,
                                AutoShutdown::AllSignificant => !others_running,
                            };
                        prop_assert_eq!(
                            matches!(d, Decision::SignificantEnded { .. }),
                            ends,
                            "13: significant end of {} under {:?}",
                            child,
                            auto
                        );
                    } else {
                        prop_assert!(restarted_due);
                        // 1: the intensity, from the decisions alone.
                        while restarts
                            .front()
                            .is_some_and(|t| at.0.saturating_sub(*t) >= intensity.period_ms)
                        {
                            restarts.pop_front();
                        }
                        let full = restarts.len() >= intensity.restarts as usize;
                        prop_assert_eq!(
                            matches!(d, Decision::Meltdown { .. }),
                            full,
                            "1: a meltdown exactly when the period already holds {} restarts ({:?})",
                            intensity.restarts,
                            restarts
                        );
                    }
                }
                if let Decision::Restart(plan) = &d {
                    check_plan(&before, &g, plan)?;
                    let own: Vec<_> = plan
                        .restarted
                        .iter()
                        .filter(|r| !r.reason.starts_with("operator "))
                        .filter(|r| r.reason == exit.to_string())
                        .collect();
                    prop_assert_eq!(own.len(), 1, "one automatic restart per restarted end");
                    restarts.push_back(at.0);
                    prop_assert!(
                        restarts.len() <= intensity.restarts as usize,
                        "1: {} restarts within {} ms: {:?}",
                        restarts.len(),
                        intensity.period_ms,
                        restarts
                    );
                    // 6: a temporary child is never started again
                    // automatically.
                    for (j, _) in &plan.start {
                        prop_assert!(
                            before.spec(*j).expect("declared").restart != Restart::Temporary,
                            "6: temporary {} in an automatic start list",
                            j
                        );
                    }
                    // 8: the plan starts the failed child and the taken
                    // siblings that ran, and nothing else.
                    for (j, _) in &plan.start {
                        prop_assert!(
                            j == child || (plan.stop.contains(j) && was_running.contains(j)),
                            "8: {} started though it neither failed nor was stopped",
                            j
                        );
                    }
                    prop_assert!(
                        plan.start.iter().any(|(j, _)| j == child),
                        "the failed child is started"
                    );
                    prop_assert!(
                        !plan.stop.contains(child),
                        "the failed child is not stopped"
                    );
                    // 2: the siblings the strategy takes.
                    for j in &plan.stop {
                        match strategy {
                            Policy::OneForOne => prop_assert!(false, "2: one_for_one stops {}", j),
                            Policy::RestForOne => prop_assert!(
                                j > child,
                                "2: rest_for_one stops {}, declared before {}",
                                j,
                                child
                            ),
                            Policy::OneForAll => {}
                        }
                    }
                    let taken: BTreeSet<usize> = match strategy {
                        Policy::OneForOne => BTreeSet::new(),
                        Policy::OneForAll => (0..before.len()).filter(|j| j != child).collect(),
                        Policy::RestForOne => (child + 1..before.len()).collect(),
                    };
                    let expected: BTreeSet<usize> =
                        taken.intersection(&was_running).copied().collect();
                    let stopped: BTreeSet<usize> = plan.stop.iter().copied().collect();
                    prop_assert_eq!(
                        stopped,
                        expected,
                        "2: the strategy takes its running siblings"
                    );
                }
            }
            Event::Operator { child, op, .. } => {
                if let Decision::Restart(plan) = &d {
                    check_plan(&before, &g, plan)?;
                    // 10: an operator's command acts on its child alone.
                    prop_assert!(
                        plan.stop.iter().all(|j| j == child),
                        "10: an operator's stop list is its child: {:?}",
                        plan.stop
                    );
                    prop_assert!(
                        plan.start.iter().all(|(j, _)| j == child),
                        "10: an operator's start list is its child: {:?}",
                        plan.start
                    );
                    prop_assert!(
                        plan.restarted
                            .iter()
                            .all(|r| r.reason == format!("operator {}", op.as_str())),
                        "10: an operator's records say so"
                    );
                }
            }
            Event::Shutdown => {}
        }

        // 14: the end stops every running child, and only those.
        if let Decision::Shutdown { stop }
        | Decision::Meltdown { stop, .. }
        | Decision::SignificantEnded { stop, .. } = &d
        {
            prop_assert!(strictly_decreasing(stop), "3: {:?}", stop);
            let stopped: BTreeSet<usize> = stop.iter().copied().collect();
            let mut expected = was_running.clone();
            if let Event::Exited { child, .. } = &event {
                expected.remove(child);
            }
            prop_assert_eq!(stopped, expected, "14: the end stops every running child");
            prop_assert!(running(&g).is_empty(), "14: nothing runs after the end");
            over = true;
        }
        if let Decision::Restart(plan) = &d {
            started.extend(plan.start.iter().map(|(j, _)| *j));
        }
    }
    seen.cases = 1;
    Ok(seen)
}

#[test]
fn invariants_hold_over_arbitrary_sequences() {
    let mut runner = TestRunner::new(Config {
        cases: CASES,
        failure_persistence: None,
        ..Config::default()
    });
    let seen = Mutex::new(Seen::default());
    runner
        .run(
            &(
                group_spec(),
                prop_oneof![9 => Just(true), 1 => Just(false)],
                proptest::collection::vec(step(), 1..=MAX_LEN),
            ),
            |(spec, start, steps)| {
                let one = check_sequence(spec, start, &steps)?;
                let mut seen = seen.lock().expect("not poisoned");
                seen.decisions.extend(one.decisions);
                seen.cases += one.cases;
                Ok(())
            },
        )
        .unwrap_or_else(|failure| panic!("{failure}"));
    let seen = seen.into_inner().expect("not poisoned");
    eprintln!(
        "children: {} sequences; decisions {:?}",
        seen.cases, seen.decisions
    );
    assert!(
        seen.cases >= u64::from(CASES),
        "ran {} sequences",
        seen.cases
    );
    // Not vacuous: the sequences reach every decision.
    for kind in [
        "ignore",
        "ended",
        "restart",
        "meltdown",
        "significant_ended",
        "shutdown",
        "refused",
    ] {
        assert!(seen.decisions.contains(kind), "no sequence decided {kind}");
    }
}

/// Crash loops whose steps are timed against the group's period: a child's
/// failure at 0, 1, period − 1, period or period + 1 ms after the last
/// event, so the half-open window's edge is hit often. Every invariant of
/// `check_sequence` is checked; the intensity's (1) is the one this aims at.
#[test]
fn the_intensity_holds_over_crash_loops_timed_against_the_period() {
    let mut runner = TestRunner::new(Config {
        cases: CASES,
        failure_persistence: None,
        ..Config::default()
    });
    let loops = group_spec().prop_flat_map(|spec| {
        let p = spec.intensity.period_ms;
        let n = spec.children.len();
        let delta = prop_oneof![
            Just(0),
            Just(1),
            Just(p.saturating_sub(1)),
            Just(p),
            Just(p + 1),
            0..=2 * p + 1,
        ];
        let exit = prop_oneof![
            Just(ChildExit::Error("e".into())),
            Just(ChildExit::Panicked("p".into())),
            Just(ChildExit::Normal),
        ];
        let steps = proptest::collection::vec((0..n, exit, delta), 1..=MAX_LEN).prop_map(|v| {
            v.into_iter()
                .map(|(child, exit, after_ms)| Step::Exit {
                    child,
                    which: Which::Current,
                    exit,
                    after_ms,
                })
                .collect::<Vec<_>>()
        });
        (Just(spec), steps)
    });
    let meltdowns = Mutex::new(0u64);
    runner
        .run(&loops, |(spec, steps)| {
            let seen = check_sequence(spec, true, &steps)?;
            if seen.decisions.contains("meltdown") {
                *meltdowns.lock().expect("not poisoned") += 1;
            }
            Ok(())
        })
        .unwrap_or_else(|failure| panic!("{failure}"));
    let meltdowns = meltdowns.into_inner().expect("not poisoned");
    eprintln!("children crash loops: {CASES} loops, {meltdowns} melted down");
    assert!(meltdowns > 0, "not vacuous: some loops melt down");
}
