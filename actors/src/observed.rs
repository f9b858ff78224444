//! What a simulation observes of the actors: every lifecycle step the
//! Lifecycle actor adopts, with the machine before it and the event, so
//! that the whole-daemon simulation (`tests/it/daemon_sim`) can hold each
//! one to the pure machine's own step from the same state and event, and
//! each step's starting state to the one the step before it left.
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

#[cfg(feature = "simulation")]
mod recorder {
    use std::cell::RefCell;

    use super::AdoptedStep;

    /// The steps not yet taken, and how many were recorded in all.
    type Recorded = (Vec<AdoptedStep>, u64);

    thread_local! {
        static ADOPTED: RefCell<Option<Recorded>> = const { RefCell::new(None) };
    }

    /// Record the steps this thread's Lifecycle actors adopt from now on
    /// (`false`: stop, and drop what was recorded).
    pub fn record_adopted_steps(on: bool) {
        ADOPTED.with(|cell| *cell.borrow_mut() = on.then(|| (Vec::new(), 0)));
    }

    /// The steps recorded since the last call.
    #[must_use]
    pub fn take_adopted_steps() -> Vec<AdoptedStep> {
        ADOPTED.with(|cell| {
            cell.borrow_mut()
                .as_mut()
                .map(|(steps, _)| std::mem::take(steps))
                .unwrap_or_default()
        })
    }

    /// How many steps were recorded since recording began: what a
    /// simulation stamps its own observations with, to place them among
    /// the lifecycle's steps (an observation stamped `n` came after the
    /// `n`th step and before the next).
    #[must_use]
    pub fn adopted_so_far() -> u64 {
        ADOPTED.with(|cell| cell.borrow().as_ref().map_or(0, |(_, count)| *count))
    }

    pub(crate) fn push(step: impl FnOnce() -> AdoptedStep) {
        ADOPTED.with(|cell| {
            if let Some((steps, count)) = cell.borrow_mut().as_mut() {
                steps.push(step());
                *count += 1;
            }
        });
    }
}

#[cfg(feature = "simulation")]
pub use recorder::{adopted_so_far, record_adopted_steps, take_adopted_steps};

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
