//! Defects planted on purpose, so the whole-daemon simulation
//! (`tests/it/daemon_sim`) can show that it catches them.
//!
//! With the cargo feature `planted-defects` (the facade's tests turn it on)
//! each defect is a switch of the calling thread, off until a test turns it
//! on: a simulation runs a daemon on a current-thread runtime of its own
//! thread, so a planted defect reaches only that daemon. Without the
//! feature every switch is a constant `false` and the code it guards is the
//! only code there is.

#[cfg(feature = "planted-defects")]
mod switches {
    use std::cell::Cell;

    thread_local! {
        static DRAIN_LEAVES_TASKS: Cell<bool> = const { Cell::new(false) };
        static JOURNAL_ACKS_BEFORE_FSYNC: Cell<bool> = const { Cell::new(false) };
        static LIFECYCLE_DECIDES_QUIET_STEPS: Cell<bool> = const { Cell::new(false) };
        static JOURNAL_REPAIR_CUTS_A_RECORD: Cell<bool> = const { Cell::new(false) };
        static RECONCILE_FORGETS_CHECKPOINTS: Cell<bool> = const { Cell::new(false) };
        static STATUS_RECORD_LAGS: Cell<bool> = const { Cell::new(false) };
        static CHILDREN_RESTART_TEMPORARY: Cell<bool> = const { Cell::new(false) };
        static CHILDREN_MELTDOWN_UNREPORTED: Cell<bool> = const { Cell::new(false) };
        static CHILDREN_OUTLIVE_SHUTDOWN: Cell<bool> = const { Cell::new(false) };
    }

    /// Plant (or remove) a drain that leaves a runtime's tracked tasks
    /// serving: their abort at the end of the grace, and a dropped
    /// runtime's, does nothing, and the drain does not wait for them.
    pub fn drain_leaves_tasks(on: bool) {
        DRAIN_LEAVES_TASKS.with(|cell| cell.set(on));
    }

    pub(crate) fn drain_leaves_tasks_planted() -> bool {
        DRAIN_LEAVES_TASKS.with(Cell::get)
    }

    /// Plant (or remove) a journal that acknowledges an append before its
    /// fsync: the records are written and answered `Ok`, and never synced
    /// for that answer.
    pub fn journal_acks_before_fsync(on: bool) {
        JOURNAL_ACKS_BEFORE_FSYNC.with(|cell| cell.set(on));
    }

    pub(crate) fn journal_acks_before_fsync_planted() -> bool {
        JOURNAL_ACKS_BEFORE_FSYNC.with(Cell::get)
    }

    /// Plant (or remove) a decision made in the Lifecycle actor instead of
    /// the machine: a step with no effect is not adopted (the actor keeps
    /// the machine as it was).
    pub fn lifecycle_decides_quiet_steps(on: bool) {
        LIFECYCLE_DECIDES_QUIET_STEPS.with(|cell| cell.set(on));
    }

    pub(crate) fn lifecycle_decides_quiet_steps_planted() -> bool {
        LIFECYCLE_DECIDES_QUIET_STEPS.with(Cell::get)
    }

    /// Plant (or remove) a journal repair that cuts one record too many:
    /// a launch that finds a torn tail truncates the journal to the start of
    /// its last whole record, not its end (and replays without it).
    pub fn journal_repair_cuts_a_record(on: bool) {
        JOURNAL_REPAIR_CUTS_A_RECORD.with(|cell| cell.set(on));
    }

    pub(crate) fn journal_repair_cuts_a_record_planted() -> bool {
        JOURNAL_REPAIR_CUTS_A_RECORD.with(Cell::get)
    }

    /// Plant (or remove) a boot whose reconcile forgets the checkpoints:
    /// every step runs again, whatever an earlier boot left checkpointed
    /// and observation finds present.
    pub fn reconcile_forgets_checkpoints(on: bool) {
        RECONCILE_FORGETS_CHECKPOINTS.with(|cell| cell.set(on));
    }

    pub(crate) fn reconcile_forgets_checkpoints_planted() -> bool {
        RECONCILE_FORGETS_CHECKPOINTS.with(Cell::get)
    }

    /// Plant (or remove) a status record written one transition late:
    /// each publish writes the snapshot published before it.
    pub fn status_record_lags(on: bool) {
        STATUS_RECORD_LAGS.with(|cell| cell.set(on));
    }

    pub(crate) fn status_record_lags_planted() -> bool {
        STATUS_RECORD_LAGS.with(Cell::get)
    }

    /// Plant (or remove) a Children actor that restarts a temporary child
    /// the machine let end: it starts the next incarnation on its own.
    pub fn children_restart_temporary(on: bool) {
        CHILDREN_RESTART_TEMPORARY.with(|cell| cell.set(on));
    }

    pub(crate) fn children_restart_temporary_planted() -> bool {
        CHILDREN_RESTART_TEMPORARY.with(Cell::get)
    }

    /// Plant (or remove) a meltdown that is not reported: the Children
    /// actor stops the group and journals the meltdown, and never tells
    /// the runtime it ended.
    pub fn children_meltdown_unreported(on: bool) {
        CHILDREN_MELTDOWN_UNREPORTED.with(|cell| cell.set(on));
    }

    pub(crate) fn children_meltdown_unreported_planted() -> bool {
        CHILDREN_MELTDOWN_UNREPORTED.with(Cell::get)
    }

    /// Plant (or remove) a group whose shutdown leaves its children
    /// running: the runtime's shutdown answers at once, and the Children
    /// actor's stop neither cancels nor aborts them.
    pub fn children_outlive_shutdown(on: bool) {
        CHILDREN_OUTLIVE_SHUTDOWN.with(|cell| cell.set(on));
    }

    pub(crate) fn children_outlive_shutdown_planted() -> bool {
        CHILDREN_OUTLIVE_SHUTDOWN.with(Cell::get)
    }
}

#[cfg(feature = "planted-defects")]
pub use switches::children_meltdown_unreported;
#[cfg(feature = "planted-defects")]
pub(crate) use switches::children_meltdown_unreported_planted;
#[cfg(feature = "planted-defects")]
pub use switches::children_outlive_shutdown;
#[cfg(feature = "planted-defects")]
pub(crate) use switches::children_outlive_shutdown_planted;
#[cfg(feature = "planted-defects")]
pub use switches::children_restart_temporary;
#[cfg(feature = "planted-defects")]
pub(crate) use switches::children_restart_temporary_planted;
#[cfg(feature = "planted-defects")]
pub use switches::drain_leaves_tasks;
#[cfg(feature = "planted-defects")]
pub(crate) use switches::drain_leaves_tasks_planted;
#[cfg(feature = "planted-defects")]
pub use switches::journal_acks_before_fsync;
#[cfg(feature = "planted-defects")]
pub(crate) use switches::journal_acks_before_fsync_planted;
#[cfg(feature = "planted-defects")]
pub use switches::journal_repair_cuts_a_record;
#[cfg(feature = "planted-defects")]
pub(crate) use switches::journal_repair_cuts_a_record_planted;
#[cfg(feature = "planted-defects")]
pub use switches::lifecycle_decides_quiet_steps;
#[cfg(feature = "planted-defects")]
pub(crate) use switches::lifecycle_decides_quiet_steps_planted;
#[cfg(feature = "planted-defects")]
pub use switches::reconcile_forgets_checkpoints;
#[cfg(feature = "planted-defects")]
pub(crate) use switches::reconcile_forgets_checkpoints_planted;
#[cfg(feature = "planted-defects")]
pub use switches::status_record_lags;
#[cfg(feature = "planted-defects")]
pub(crate) use switches::status_record_lags_planted;

/// Whether a drain leaves tracked tasks serving (never, in this build).
#[cfg(not(feature = "planted-defects"))]
pub(crate) const fn drain_leaves_tasks_planted() -> bool {
    false
}

/// Whether the journal acknowledges before its fsync (never, in this
/// build).
#[cfg(not(feature = "planted-defects"))]
pub(crate) const fn journal_acks_before_fsync_planted() -> bool {
    false
}

/// Whether the Lifecycle actor keeps the machine for a step with no effect
/// (never, in this build).
#[cfg(not(feature = "planted-defects"))]
pub(crate) const fn lifecycle_decides_quiet_steps_planted() -> bool {
    false
}

/// Whether a torn tail's repair cuts the last whole record too (never,
/// in this build).
#[cfg(not(feature = "planted-defects"))]
pub(crate) const fn journal_repair_cuts_a_record_planted() -> bool {
    false
}

/// Whether a boot forgets the outstanding checkpoints (never, in this
/// build).
#[cfg(not(feature = "planted-defects"))]
pub(crate) const fn reconcile_forgets_checkpoints_planted() -> bool {
    false
}

/// Whether the status record is written one transition late (never, in
/// this build).
#[cfg(not(feature = "planted-defects"))]
pub(crate) const fn status_record_lags_planted() -> bool {
    false
}

/// Whether the Children actor restarts a temporary child on its own
/// (never, in this build).
#[cfg(not(feature = "planted-defects"))]
pub(crate) const fn children_restart_temporary_planted() -> bool {
    false
}

/// Whether a meltdown goes unreported to the runtime (never, in this
/// build).
#[cfg(not(feature = "planted-defects"))]
pub(crate) const fn children_meltdown_unreported_planted() -> bool {
    false
}

/// Whether a group's shutdown leaves its children running (never, in
/// this build).
#[cfg(not(feature = "planted-defects"))]
pub(crate) const fn children_outlive_shutdown_planted() -> bool {
    false
}
