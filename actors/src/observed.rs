//! What a simulation observes of the actors: every lifecycle step the
//! Lifecycle actor adopts, with the machine before it and the event, so
//! that the whole-daemon simulation (`tests/it/daemon_sim`) can hold each
//! one to the pure machine's own step from the same state and event, and
//! each step's starting state to the one the step before it left; and
//! every end a group of children reports to its runtime, placed among
//! those steps, so that it can hold a meltdown to its report.
//!
//! With the cargo feature `simulation` (the facade's tests turn it on) the
//! recording is a switch of the calling thread, off until a simulation
//! turns it on. Without the feature `adopted` is empty and nothing is
//! kept.

use steadfast_protocol::lifecycle::{Effect, Lifecycle, LifecycleEvent};

/// One step the Lifecycle actor adopted.
#[derive(Debug, Clone)]
pub struct AdoptedStep {
    /// The machine before the step.
    pub before: Lifecycle,
    /// The event stepped.
    pub event: LifecycleEvent,
    /// The machine the actor adopted.
    pub after: Lifecycle,
    /// The effect the actor performs for it.
    pub effect: Effect,
}

/// An end a group of children reported to its runtime (a meltdown, or a
/// significant child's end).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupEndReported {
    /// The runtime's attempt.
    pub attempt: u32,
    /// The child the end names.
    pub child: String,
    /// Why the runtime ends.
    pub reason: String,
    /// The lifecycle steps recorded before it (what `adopted_so_far`
    /// counts).
    pub step: u64,
}

#[cfg(feature = "simulation")]
mod recorder {
    use std::cell::RefCell;

    use super::{AdoptedStep, GroupEndReported};

    /// What was recorded and not yet taken, and how many steps were
    /// recorded in all.
    #[derive(Default)]
    struct Recorded {
        steps: Vec<AdoptedStep>,
        count: u64,
        group_ends: Vec<GroupEndReported>,
    }

    thread_local! {
        static ADOPTED: RefCell<Option<Recorded>> = const { RefCell::new(None) };
    }

    /// Record the steps this thread's Lifecycle actors adopt, and the ends
    /// its groups of children report, from now on (`false`: stop, and drop
    /// what was recorded).
    pub fn record_adopted_steps(on: bool) {
        ADOPTED.with(|cell| *cell.borrow_mut() = on.then(Recorded::default));
    }

    /// The steps recorded since the last call.
    #[must_use]
    pub fn take_adopted_steps() -> Vec<AdoptedStep> {
        ADOPTED.with(|cell| {
            cell.borrow_mut()
                .as_mut()
                .map(|recorded| std::mem::take(&mut recorded.steps))
                .unwrap_or_default()
        })
    }

    /// The ends groups of children reported since the last call.
    #[must_use]
    pub fn take_group_ends() -> Vec<GroupEndReported> {
        ADOPTED.with(|cell| {
            cell.borrow_mut()
                .as_mut()
                .map(|recorded| std::mem::take(&mut recorded.group_ends))
                .unwrap_or_default()
        })
    }

    /// How many steps were recorded since recording began: what a
    /// simulation stamps its own observations with, to place them among
    /// the lifecycle's steps (an observation stamped `n` came after the
    /// `n`th step and before the next).
    #[must_use]
    pub fn adopted_so_far() -> u64 {
        ADOPTED.with(|cell| cell.borrow().as_ref().map_or(0, |r| r.count))
    }

    pub(crate) fn push(step: impl FnOnce() -> AdoptedStep) {
        ADOPTED.with(|cell| {
            if let Some(recorded) = cell.borrow_mut().as_mut() {
                recorded.steps.push(step());
                recorded.count += 1;
            }
        });
    }

    pub(crate) fn push_group_end(attempt: u32, child: &str, reason: &str) {
        ADOPTED.with(|cell| {
            if let Some(recorded) = cell.borrow_mut().as_mut() {
                let step = recorded.count;
                recorded.group_ends.push(GroupEndReported {
                    attempt,
                    child: child.to_owned(),
                    reason: reason.to_owned(),
                    step,
                });
            }
        });
    }
}

#[cfg(feature = "simulation")]
pub use recorder::{adopted_so_far, record_adopted_steps, take_adopted_steps, take_group_ends};

/// The Lifecycle actor adopts `after` for `event` from `before`.
#[cfg(feature = "simulation")]
pub(crate) fn adopted(
    before: &Lifecycle,
    event: &LifecycleEvent,
    after: &Lifecycle,
    effect: Effect,
) {
    recorder::push(|| AdoptedStep {
        before: before.clone(),
        event: event.clone(),
        after: after.clone(),
        effect,
    });
}

/// The Lifecycle actor adopts a step (nothing is kept in this build).
#[cfg(not(feature = "simulation"))]
#[inline]
pub(crate) const fn adopted(
    _before: &Lifecycle,
    _event: &LifecycleEvent,
    _after: &Lifecycle,
    _effect: Effect,
) {
}

/// A group of children of attempt `attempt`'s runtime reports that the
/// runtime ends, naming `child`, for `reason`.
#[cfg(feature = "simulation")]
pub(crate) fn group_end_reported(attempt: u32, child: &str, reason: &str) {
    recorder::push_group_end(attempt, child, reason);
}

/// A group of children reports its runtime's end (nothing is kept in this
/// build).
#[cfg(not(feature = "simulation"))]
#[inline]
pub(crate) const fn group_end_reported(_attempt: u32, _child: &str, _reason: &str) {}
