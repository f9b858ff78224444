//! A transition as data: [`Lifecycle::ready`] hands back, beside the next
//! lifecycle, its effect and its wake, everything the shell does for one
//! step (raft-rs's `Ready`): the records to journal and how, whether the
//! step stands only once durable, the hold marker, when the command that
//! caused it is answered, whether a snapshot is published, which state was
//! entered and which waiting commands it settles. The Lifecycle actor
//! executes this value in order and decides none of it.
//!
//! The invariant it holds: **`ready` is `step` plus data.** Its `next`,
//! `effect` and `wake` are exactly [`step`](super::step)'s, and a refusal
//! is the same refusal (`ready::tests::ready_agrees_with_step_on_every_fixture`,
//! and over arbitrary sequences from every origin
//! `lifecycle_props::ready_is_step_plus_data_over_arbitrary_sequences`);
//! every extra is a function of the lifecycle, the event and the
//! [`Origin`], so the shell's choices (what is written ahead, what is
//! staged, what a reply waits for) are tested here by value
//! (`ready::tests`, one test per decision).

use super::{
    AfterDrain, Applying, Effect, Lifecycle, LifecycleEvent, LifecycleState, Phase, Refused,
    RetryClass, StopReason, StoreOutcome, Timestamp, Wake, transition,
};
use std::num::NonZeroU32;

/// Who sent an event, which decides what the shell owes for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Origin {
    /// A fact the world already made true (a report, a timer, a change on
    /// disk): it stands even when its records are not durable.
    Fact,
    /// A boot's end reported by its task (`boot_failed`): the attempt ends
    /// with the transition. `cancelled`: the boot ended on a cancel. With
    /// any other event, a fact.
    BootEnd {
        /// Whether the boot ended because it was cancelled.
        cancelled: bool,
    },
    /// An operator's command: it stands only once its records are durable
    /// (`exit` excepted), and its answer is part of the step.
    Command {
        /// The hold marker to write after the record and before the step
        /// stands (`stop --hold` sets it, `start` clears it).
        hold: Option<bool>,
    },
}

/// How an attempt ended, for its `AttemptEnded` record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AttemptEnd {
    /// It reached running.
    Succeeded,
    /// A stop, restart or exit cancelled it.
    Cancelled,
    /// It failed (a step passing its deadline included).
    Failed,
}

/// One record a step journals.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RecordKind {
    /// The transition itself (from, event, to), the event under this name.
    Transition {
        /// The event's name in the journal.
        event: &'static str,
    },
    /// A boot started.
    AttemptStarted {
        /// Which.
        attempt: NonZeroU32,
    },
    /// The open attempt ended.
    AttemptEnded {
        /// How.
        result: AttemptEnd,
        /// When: the boot's report's moment; `None`, the moment the shell
        /// journals the step.
        at: Option<Timestamp>,
    },
}

/// The records of one step, in journal order: at most three (a boot's end,
/// the transition, the next boot's start), so no allocation.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct Records {
    kinds: [Option<RecordKind>; 3],
}

impl Records {
    fn push(&mut self, kind: RecordKind) {
        if let Some(slot) = self.kinds.iter_mut().find(|k| k.is_none()) {
            *slot = Some(kind);
        }
    }

    /// The records, in order.
    pub fn iter(&self) -> impl Iterator<Item = RecordKind> + '_ {
        self.kinds.iter().map_while(|k| *k)
    }

    /// Whether there are none.
    #[must_use]
    pub const fn is_empty(&self) -> bool {
        self.kinds[0].is_none()
    }

    /// How many.
    #[must_use]
    pub fn len(&self) -> usize {
        self.iter().count()
    }
}

/// How a step's records are journaled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Journaling {
    /// There are none (a boot's phase or progress: the boot journals its
    /// own; a step waiting for the shell's answer, or whose answer changed
    /// nothing, moves nothing).
    Nothing,
    /// Staged: a fact that changes nothing (machine, effect and wake as
    /// they were) is written with the next acknowledged append and nothing
    /// is published for it (group commit).
    Staged,
    /// Written ahead of its fsync: a step into a boot or a drain; its
    /// effect starts at once, and it is published and answered once an
    /// fsync covers it. A shell that cannot write ahead (a journal error
    /// standing, no commit window) awaits instead.
    WrittenAhead,
    /// Appended and its fsync awaited before the step is published.
    Awaited,
}

/// When the command that caused a step is answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Reply {
    /// No command: a fact.
    None,
    /// Once the step is durable: at once when awaited, with the fsync
    /// when written ahead.
    OnDurable,
    /// Once the drain settles (a `stop`).
    OnDrained,
    /// Once the wipe settles (a `reinit`).
    OnWiped,
    /// Once no config apply is in flight, with its outcome (a `reload`
    /// the running runtime applies).
    OnApplied,
}

/// Which kind of state a step entered, for what the shell does on entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Entered {
    /// Running: the identity, the change that landed during the boot, the
    /// runtime's end watched.
    Running {
        /// The attempt that reached it.
        attempt: NonZeroU32,
    },
    /// A failure held until the config changes: settled against the
    /// config as it is now.
    HeldFailure,
    /// Any other state.
    Other,
}

/// How a wipe ended, for the `reinit` waiting on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WipeEnd {
    /// It finished: stopped, `reinit_complete`.
    Complete,
    /// Anything else.
    Failed,
}

/// Which commands waiting for an outcome a step answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Settled {
    /// The `stop`s waiting for a drain: the lifecycle is not draining.
    pub drain: bool,
    /// The `reinit` waiting for its wipe: the lifecycle is not
    /// re-initializing, and how the wipe ended.
    pub wipe: Option<WipeEnd>,
}

/// Everything one accepted step asks of the shell, in the order it does it:
/// journal `records` as `journaling` says (then the `hold` marker), adopt
/// `next`, publish, arm `wake`, perform `effect`, then what entering a
/// state and settling waiters asks, and answer as `reply` says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ready {
    /// The next lifecycle.
    pub next: Lifecycle,
    /// What to perform.
    pub effect: Effect,
    /// The timer to keep armed.
    pub wake: Option<Wake>,
    /// What to journal, in order.
    pub records: Records,
    /// How.
    pub journaling: Journaling,
    /// The step stands only once its records (and its hold marker) are
    /// durable: an operator's command, `exit` excepted (it is how SIGTERM
    /// stops a daemon on a full disk).
    pub durable_or_nothing: bool,
    /// The hold marker to write after the records, before adopting.
    pub hold: Option<bool>,
    /// When the command is answered.
    pub reply: Reply,
    /// Whether a snapshot is published for it (a boot's progress moves
    /// only the machine's deadline, which no snapshot shows).
    pub publish: bool,
    /// The kind of state entered, if the step changed the state's kind.
    pub entered: Option<Entered>,
    /// The waiting commands it answers.
    pub settled: Settled,
}

impl Lifecycle {
    /// Take one step and say everything the shell does for it: see
    /// [`Ready`]. `next`, `effect` and `wake` are [`step`](super::step)'s.
    ///
    /// # Errors
    /// [`Refused`], exactly as [`step`](super::step).
    pub fn ready(&self, event: &LifecycleEvent, origin: Origin) -> Result<Ready, Refused> {
        let (next, effect) = transition(self, event)?;
        let wake = next.wake();
        let (durable_or_nothing, hold) = match origin {
            Origin::Command { hold } => (!matches!(event, LifecycleEvent::Exit { .. }), hold),
            Origin::Fact | Origin::BootEnd { .. } => (false, None),
        };

        let mut records = Records::default();
        if let (Origin::BootEnd { cancelled }, LifecycleEvent::BootFailed { report, .. }) =
            (origin, event)
        {
            records.push(RecordKind::AttemptEnded {
                result: self.boot_end(cancelled),
                at: Some(report.at),
            });
        }
        // A step that asks the shell a question first (whether a held
        // failure's config changed), or whose answer leaves all as it was,
        // moves nothing: nothing to journal or publish.
        let quiet = matches!(effect, Effect::CheckConfig)
            || (matches!(event, LifecycleEvent::ConfigChecked { changed: false, .. })
                && effect == Effect::None
                && self.unchanged(&next));
        // A boot's phases and progress are journaled by the boot itself.
        let journaled = !quiet
            && !matches!(
                event,
                LifecycleEvent::Phase { .. } | LifecycleEvent::Progress { .. }
            );
        if journaled {
            records.push(RecordKind::Transition {
                event: event.recorded_as(),
            });
        }
        if let LifecycleEvent::Booted { .. } = event {
            // Booted while booting: it succeeded. Booted while draining (a
            // stop, restart or exit landed just before the boot finished):
            // cancelled, as it would have been had the cancel won the race.
            let result = match next.state {
                LifecycleState::Running { .. } => AttemptEnd::Succeeded,
                _ => cancelled_end(&next.state),
            };
            records.push(RecordKind::AttemptEnded { result, at: None });
        }
        if let Effect::StartBoot { attempt } = effect {
            records.push(RecordKind::AttemptStarted { attempt });
        }

        let journaling = if records.is_empty() {
            Journaling::Nothing
        } else if !durable_or_nothing
            && hold.is_none()
            && effect == Effect::None
            && self.unchanged(&next)
        {
            Journaling::Staged
        } else if hold.is_none()
            && matches!(effect, Effect::StartBoot { .. } | Effect::ShutdownRuntime)
        {
            Journaling::WrittenAhead
        } else {
            Journaling::Awaited
        };

        let reply = match origin {
            Origin::Fact | Origin::BootEnd { .. } => Reply::None,
            Origin::Command { .. } => match (event, &next.state) {
                (LifecycleEvent::Stop { .. }, LifecycleState::Draining { .. }) => Reply::OnDrained,
                (LifecycleEvent::Reinit { .. }, LifecycleState::Reinitializing { .. }) => {
                    Reply::OnWiped
                }
                (LifecycleEvent::ConfigChanged { .. }, _) if next.applying != Applying::Idle => {
                    Reply::OnApplied
                }
                _ => Reply::OnDurable,
            },
        };

        let publish = journaling != Journaling::Staged
            && !quiet
            && !matches!(event, LifecycleEvent::Progress { .. });
        let entered = if std::mem::discriminant(&self.state) == std::mem::discriminant(&next.state)
        {
            None
        } else {
            Some(match &next.state {
                LifecycleState::Running { attempt, .. } => Entered::Running { attempt: *attempt },
                LifecycleState::Failed {
                    retry: RetryClass::Hold,
                    ..
                } => Entered::HeldFailure,
                _ => Entered::Other,
            })
        };
        let settled = Settled {
            drain: next.state.settles_stops(),
            wipe: match next.state {
                LifecycleState::Reinitializing { .. } => None,
                LifecycleState::Stopped {
                    reason: StopReason::ReinitComplete,
                    ..
                } => Some(WipeEnd::Complete),
                _ => Some(WipeEnd::Failed),
            },
        };

        Ok(Ready {
            next,
            effect,
            wake,
            records,
            journaling,
            durable_or_nothing,
            hold,
            reply,
            publish,
            entered,
            settled,
        })
    }

    /// How the open attempt ends when its boot reports its end here:
    /// `cancelled` says whether the boot saw a cancel. A cancel the
    /// machine sent because a step passed its deadline (a drain into
    /// `fail`) fails the attempt; any other cancel cancels it.
    #[must_use]
    pub fn boot_end(&self, cancelled: bool) -> AttemptEnd {
        if cancelled {
            cancelled_end(&self.state)
        } else {
            AttemptEnd::Failed
        }
    }

    /// Why a boot is cancelled ([`Effect::CancelBoot`]): the failure of a
    /// drain into `fail` (a step past its deadline says so in its phase
    /// record too), `cancelled` otherwise.
    #[must_use]
    pub fn cancel_reason(&self) -> &str {
        match &self.state {
            LifecycleState::Draining {
                then: AfterDrain::Fail { report },
                ..
            } => &report.error,
            _ => "cancelled",
        }
    }

    /// The phase the current boot is in, while booting.
    #[must_use]
    pub const fn boot_phase(&self) -> Option<&Phase> {
        match &self.state {
            LifecycleState::Booting { phase, .. } => Some(phase),
            _ => None,
        }
    }

    /// What a drain's (or a wipe's) task that panicked reports, with the
    /// probed `store`: `wiped` with the panic as its error while
    /// re-initializing, `drained` otherwise.
    #[must_use]
    pub fn task_crashed(&self, at: Timestamp, store: StoreOutcome, reason: &str) -> LifecycleEvent {
        match self.state {
            LifecycleState::Reinitializing { .. } => LifecycleEvent::Wiped {
                at,
                store,
                error: Some(format!("the wipe panicked: {reason}")),
            },
            _ => LifecycleEvent::Drained { at, store },
        }
    }

    /// Whether `next` is this lifecycle unchanged (so its wake is too).
    /// The failure times of the budget change only with the state (a boot
    /// begins, a boot fails), so they are not compared.
    fn unchanged(&self, next: &Self) -> bool {
        self.attempts == next.attempts
            && self.epoch == next.epoch
            && self.streak == next.streak
            && self.automatic == next.automatic
            && self.applying == next.applying
            && self.step_deadline_at == next.step_deadline_at
            && self.state == next.state
    }
}

/// How an attempt whose boot was cancelled (or finished while draining)
/// ends: failed when the machine cancelled it because a step passed its
/// deadline (a drain into `fail`), cancelled otherwise.
const fn cancelled_end(state: &LifecycleState) -> AttemptEnd {
    match state {
        LifecycleState::Draining {
            then: AfterDrain::Fail { .. },
            ..
        } => AttemptEnd::Failed,
        _ => AttemptEnd::Cancelled,
    }
}

#[cfg(test)]
mod tests;
