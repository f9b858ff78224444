//! One test per decision of the children machine; the table in
//! `protocol/spec/children.md` holds every row (`tests/it/children_table.rs`).

use super::*;

fn child(name: &str, restart: Restart) -> ChildSpec {
    ChildSpec {
        name: name.to_owned(),
        kind: ChildKind::Task,
        restart,
        significant: false,
        shutdown_ms: 1_000,
    }
}

/// Permanent children of these names, in order: most groups here need nothing else.
fn permanent(names: &[&str]) -> Vec<ChildSpec> {
    names
        .iter()
        .map(|name| child(name, Restart::Permanent))
        .collect()
}

fn group(strategy: Strategy, restarts: u32, children: Vec<ChildSpec>) -> Group {
    let mut g = Group::new(GroupSpec {
        strategy,
        intensity: Intensity {
            restarts,
            period_ms: 5_000,
        },
        auto_shutdown: AutoShutdown::Never,
        children,
    })
    .expect("a valid group");
    let plan = g.start();
    assert_eq!(plan.start.len(), g.len());
    g
}

fn panicked(child: usize, incarnation: u32, at: u64) -> Event {
    Event::Exited {
        child,
        incarnation,
        exit: ChildExit::Panicked("boom".into()),
        at: Timestamp(at),
    }
}

/// Incarnation `incarnation` of `child` returned on its own at `at` ms.
fn returned(child: usize, incarnation: u32, at: u64) -> Event {
    Event::Exited {
        child,
        incarnation,
        exit: ChildExit::Normal,
        at: Timestamp(at),
    }
}

/// The operator's `op` on `child` at `at` ms.
fn operator(child: usize, op: ChildOp, at: u64) -> Event {
    Event::Operator {
        child,
        op,
        at: Timestamp(at),
    }
}

#[test]
fn a_transient_child_that_returns_is_not_restarted() {
    let mut g = group(Strategy::OneForAll, 3, vec![child("a", Restart::Transient)]);
    let d = g.on(&returned(0, 1, 10));
    assert_eq!(d, Decision::Ended);
    assert_eq!(g.state(0), Some((&ChildState::Ended(ChildExit::Normal), 1)));
    assert_eq!(g.phase(), Phase::Running);
}

#[test]
fn one_for_one_restarts_the_child_alone() {
    let mut g = group(
        Strategy::OneForOne,
        3,
        vec![
            child("a", Restart::Permanent),
            child("b", Restart::Transient),
        ],
    );
    let Decision::Restart(plan) = g.on(&panicked(1, 1, 10)) else {
        panic!("a restart")
    };
    assert_eq!(plan.stop, Vec::<usize>::new());
    assert_eq!(plan.start, vec![(1, 2)]);
    assert_eq!(plan.restarted[0].reason, "panicked: boom");
    assert_eq!(g.view(Timestamp(10))[1].restarts_in_period, 1);
    assert_eq!(g.view(Timestamp(10))[0].incarnation, 1);
}

#[test]
fn a_temporary_child_is_never_restarted_even_under_one_for_all() {
    let mut g = group(
        Strategy::OneForAll,
        3,
        vec![
            child("a", Restart::Permanent),
            child("t", Restart::Temporary),
        ],
    );
    assert_eq!(g.on(&panicked(1, 1, 10)), Decision::Ended);
    assert_eq!(g.state(0), Some((&ChildState::Running, 1)));
}

#[test]
fn one_for_all_stops_in_reverse_and_starts_in_order() {
    let mut g = group(Strategy::OneForAll, 3, permanent(&["a", "b", "c"]));
    let Decision::Restart(plan) = g.on(&panicked(1, 1, 10)) else {
        panic!("a restart")
    };
    assert_eq!(plan.stop, vec![2, 0]);
    assert_eq!(plan.start, vec![(0, 2), (1, 2), (2, 2)]);
}

#[test]
fn rest_for_one_never_touches_earlier_siblings() {
    let mut g = group(Strategy::RestForOne, 3, permanent(&["a", "b", "c"]));
    let Decision::Restart(plan) = g.on(&panicked(1, 1, 10)) else {
        panic!("a restart")
    };
    assert_eq!(plan.stop, vec![2]);
    assert_eq!(plan.start, vec![(1, 2), (2, 2)]);
}

#[test]
fn the_restart_past_the_intensity_is_a_meltdown() {
    let mut g = group(Strategy::OneForOne, 2, vec![child("a", Restart::Permanent)]);
    assert!(matches!(g.on(&panicked(0, 1, 0)), Decision::Restart(_)));
    assert!(matches!(g.on(&panicked(0, 2, 1_000)), Decision::Restart(_)));
    let Decision::Meltdown { meltdown, stop } = g.on(&panicked(0, 3, 2_000)) else {
        panic!("a meltdown")
    };
    assert_eq!(meltdown.restarts, 3);
    assert_eq!(
        meltdown.to_string(),
        "3 restarts within 5 s, one more than the group allows: child a panicked: boom"
    );
    assert!(stop.is_empty());
    assert_eq!(g.phase(), Phase::Ended);
    assert_eq!(
        g.on(&operator(0, ChildOp::Start, 3_000)),
        Decision::Refused(OpRefused::ShuttingDown)
    );
}

#[test]
fn restarts_older_than_the_period_no_longer_count() {
    let mut g = group(Strategy::OneForOne, 1, vec![child("a", Restart::Permanent)]);
    assert!(matches!(g.on(&panicked(0, 1, 0)), Decision::Restart(_)));
    assert!(matches!(g.on(&panicked(0, 2, 5_000)), Decision::Restart(_)));
    assert!(matches!(
        g.on(&panicked(0, 3, 5_001)),
        Decision::Meltdown { .. }
    ));
}

#[test]
fn an_exit_of_an_old_incarnation_changes_nothing() {
    let mut g = group(Strategy::OneForOne, 3, vec![child("a", Restart::Permanent)]);
    assert!(matches!(g.on(&panicked(0, 1, 0)), Decision::Restart(_)));
    let before = g.clone();
    assert_eq!(g.on(&panicked(0, 1, 1)), Decision::Ignore);
    assert_eq!(g, before);
}

#[test]
fn nothing_starts_once_the_shutdown_began() {
    let mut g = group(Strategy::OneForAll, 3, permanent(&["a", "b"]));
    assert_eq!(
        g.on(&Event::Shutdown),
        Decision::Shutdown { stop: vec![1, 0] }
    );
    assert_eq!(g.on(&panicked(0, 1, 1)), Decision::Ignore);
    assert_eq!(g.state(0), Some((&ChildState::Stopped, 1)));
}

#[test]
fn intensity_zero_makes_any_failure_a_meltdown_whatever_the_period() {
    let mut g = Group::new(GroupSpec {
        strategy: Strategy::OneForAll,
        intensity: Intensity {
            restarts: 0,
            period_ms: 0,
        },
        auto_shutdown: AutoShutdown::Never,
        children: vec![child("serve", Restart::Permanent)],
    })
    .expect("intensity 0 within 0 is valid: no restarts");
    g.start();
    assert!(matches!(
        g.on(&returned(0, 1, 0)),
        Decision::Meltdown { .. }
    ));
}

#[test]
fn bad_declarations_are_refused_with_their_reason() {
    let spec = |children, restarts, period_ms, auto_shutdown| GroupSpec {
        strategy: Strategy::OneForOne,
        intensity: Intensity {
            restarts,
            period_ms,
        },
        auto_shutdown,
        children,
    };
    let a = child("a", Restart::Permanent);
    assert_eq!(
        Group::new(spec(vec![a.clone(), a.clone()], 1, 1, AutoShutdown::Never)),
        Err(SpecError::DuplicateName("a".into()))
    );
    assert_eq!(
        Group::new(spec(vec![a], 3, 0, AutoShutdown::Never)),
        Err(SpecError::ZeroPeriod(3))
    );
    assert_eq!(
        Group::new(spec(
            vec![child("a\u{1b}[2J", Restart::Permanent)],
            1,
            1,
            AutoShutdown::Never
        )),
        Err(SpecError::NameNotPrintable("a\u{1b}[2J".into()))
    );
    assert!(
        SpecError::NameNotPrintable("a\u{1b}[2J".into())
            .to_string()
            .contains("\\u{1b}")
    );
    let mut sig = child("s", Restart::Transient);
    sig.significant = true;
    assert_eq!(
        Group::new(spec(vec![sig.clone()], 1, 1, AutoShutdown::Never)),
        Err(SpecError::SignificantWithoutAutoShutdown("s".into()))
    );
    sig.restart = Restart::Permanent;
    assert_eq!(
        Group::new(spec(vec![sig], 1, 1, AutoShutdown::AnySignificant)),
        Err(SpecError::SignificantPermanent("s".into()))
    );
}

#[test]
fn a_significant_childs_end_ends_the_runtime() {
    let mut s = child("s", Restart::Transient);
    s.significant = true;
    let mut g = Group::new(GroupSpec {
        strategy: Strategy::OneForOne,
        intensity: Intensity::default(),
        auto_shutdown: AutoShutdown::AnySignificant,
        children: vec![child("a", Restart::Permanent), s],
    })
    .expect("valid");
    g.start();
    let d = g.on(&returned(1, 1, 1));
    assert_eq!(
        d,
        Decision::SignificantEnded {
            child: "s".into(),
            exit: ChildExit::Normal,
            stop: vec![0]
        }
    );
}

#[test]
fn an_operator_restart_touches_one_child_and_never_counts() {
    let mut g = group(Strategy::OneForAll, 0, permanent(&["a", "b"]));
    let d = g.on(&operator(1, ChildOp::Restart, 1));
    let Decision::Restart(plan) = d else {
        panic!("a restart")
    };
    assert_eq!(plan.stop, vec![1]);
    assert_eq!(plan.start, vec![(1, 2)]);
    assert_eq!(plan.restarted[0].reason, "operator restart");
    assert_eq!(g.view(Timestamp(1))[1].restarts_in_period, 0);
    assert_eq!(g.view(Timestamp(1))[1].restarts_total, 1);
    assert_eq!(
        g.on(&operator(0, ChildOp::Start, 2)),
        Decision::Refused(OpRefused::Running)
    );
}

#[test]
fn the_shutdown_after_a_meltdown_changes_nothing() {
    let mut g = group(Strategy::OneForOne, 0, vec![child("a", Restart::Permanent)]);
    assert!(matches!(
        g.on(&panicked(0, 1, 0)),
        Decision::Meltdown { .. }
    ));
    let before = g.clone();
    assert_eq!(g.on(&Event::Shutdown), Decision::Ignore);
    assert_eq!(g.phase(), Phase::Ended, "the group stays melted down");
    assert_eq!(g, before);
}

#[test]
fn a_meltdown_counts_the_groups_restarts_and_says_so() {
    let mut g = group(Strategy::OneForOne, 1, permanent(&["a", "b"]));
    assert!(matches!(g.on(&panicked(0, 1, 0)), Decision::Restart(_)));
    let Decision::Meltdown { meltdown, .. } = g.on(&panicked(1, 1, 10)) else {
        panic!("a meltdown")
    };
    assert_eq!(meltdown.restarts, 2);
    // b ended once: the count is the group's, and the message must not
    // pin it on b.
    assert_eq!(
        meltdown.to_string(),
        "2 restarts within 5 s, one more than the group allows: child b panicked: boom"
    );
}

#[test]
fn a_meltdown_of_a_group_that_allows_no_restart_says_so() {
    let mut g = group(Strategy::OneForOne, 0, vec![child("a", Restart::Permanent)]);
    let Decision::Meltdown { meltdown, .. } = g.on(&returned(0, 1, 0)) else {
        panic!("a meltdown")
    };
    assert_eq!(
        meltdown.to_string(),
        "the group allows no restarts: child a returned"
    );
}
