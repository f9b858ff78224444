//! Defects planted on purpose, so the whole-daemon simulation
//! (`tests/it/daemon_sim`) can show that it catches them.
//!
//! With the cargo feature `planted-defects` (the facade's tests turn it on)
//! one defect at a time is planted in the calling thread, none until a test
//! plants one: a simulation runs a daemon on a current-thread runtime of its
//! own thread, so a planted defect reaches only that daemon. Without the
//! feature `planted` is a constant `false` and the code it guards is the
//! only code there is.

/// A defect the code can be told to have.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Defect {
    /// A drain that leaves a runtime's tracked tasks serving: their abort
    /// at the end of the grace, and a dropped runtime's, does nothing, and
    /// the drain does not wait for them.
    DrainLeavesTasks,
    /// A journal that acknowledges an append before its fsync: the records
    /// are written and answered `Ok`, and never synced for that answer.
    JournalAcksBeforeFsync,
    /// A decision made in the Lifecycle actor instead of the machine: a
    /// step with no effect is not adopted (the actor keeps the machine as
    /// it was).
    LifecycleDecidesQuietSteps,
    /// A journal repair that cuts one record too many: a launch that finds
    /// a torn tail truncates the journal to the start of its last whole
    /// record, not its end (and replays without it).
    JournalRepairCutsARecord,
    /// A boot whose reconcile forgets the checkpoints: every step runs
    /// again, whatever an earlier boot left checkpointed and observation
    /// finds present.
    ReconcileForgetsCheckpoints,
    /// A status record written one transition late: each publish writes
    /// the snapshot published before it.
    StatusRecordLags,
    /// A Children actor that restarts a temporary child the machine let
    /// end: it starts the next incarnation on its own.
    ChildrenRestartTemporary,
    /// A meltdown that is not reported: the Children actor stops the group
    /// and journals the meltdown, and never tells the runtime it ended.
    ChildrenMeltdownUnreported,
    /// A group whose shutdown leaves its children running: the runtime's
    /// shutdown answers at once, and the Children actor's stop neither
    /// cancels nor aborts them.
    ChildrenOutliveShutdown,
    /// An intent that is not written ahead: a step whose resource outlives
    /// the process runs with its intent only staged (durable with the
    /// boot's next append, after the resource was made).
    IntentNotAhead,
    /// A launch marker written in place over a clean stop's and never
    /// fsynced: a power cut after an acknowledgement can leave `released`
    /// (the run read as a clean stop).
    LaunchMarkerUnsynced,
}

#[cfg(feature = "planted-defects")]
mod switch {
    use std::cell::Cell;

    use super::Defect;

    thread_local! {
        static PLANTED: Cell<Option<Defect>> = const { Cell::new(None) };
    }

    /// Plant `defect` in this thread (replacing the one planted before), or
    /// none.
    pub fn plant(defect: Option<Defect>) {
        PLANTED.with(|cell| cell.set(defect));
    }

    /// Whether `defect` is planted in this thread.
    pub(crate) fn planted(defect: Defect) -> bool {
        PLANTED.with(Cell::get) == Some(defect)
    }
}

#[cfg(feature = "planted-defects")]
pub use switch::plant;
#[cfg(feature = "planted-defects")]
pub(crate) use switch::planted;

/// Whether `defect` is planted (never, in this build).
#[cfg(not(feature = "planted-defects"))]
pub(crate) const fn planted(_defect: Defect) -> bool {
    false
}
