//! The daemon's lifecycle, as a pure state machine.
//!
//! [`step`] maps a [`Lifecycle`] and a [`LifecycleEvent`] to the next
//! [`Lifecycle`] and one [`Effect`] for the actors to perform, or to a
//! [`Refused`] that names the reason with a stable spelling. It does no I/O and
//! reads no clock: every moment arrives on the event, so every transition is
//! testable by value and replayable from the journal. `spec/lifecycle.md` is
//! the table this module is held to, pair by pair (`tests/it/spec_table.rs`).
//!
//! The one invariant it exists to hold: **a boot starts only over a released
//! store.** The store may be open exactly in `booting`, `running`,
//! `draining`, `wedged` and `reinitializing`
//! ([`LifecycleState::may_hold_store`]). The machine enters a resting state
//! (`stopped`, `failed`) from those only on an outcome that says the store
//! was released, emits [`Effect::StartBoot`] only from a resting state or on
//! such an outcome, and sends an outcome that says the store is still held
//! to `wedged`, which only [`LifecycleEvent::Exit`] leaves.
//! `tests/it/lifecycle_props.rs` checks this over arbitrary event sequences,
//! together with: attempts grow by exactly one per boot, the epoch grows by
//! exactly one on every observed release and on nothing else
//! (`invariants_hold_after_every_step_of_arbitrary_sequences`), and
//! `exiting` is terminal.
//!
//! [`Lifecycle::ready`] is [`step`] plus everything the shell does for the
//! step (what to journal and how, when to answer, what to publish): a
//! transition is data the Lifecycle actor executes (`lifecycle/ready.rs`).
//!
//! Beyond the reference machine:
//! - [`LifecycleEvent::RuntimeEnded`]: a runtime that ends while running
//!   drains (then: fail) and lands in `failed` with backoff, or in `wedged`
//!   if the drain says the store is still held.
//! - [`LifecycleEvent::Stable`]: the failure streak resets only once the
//!   runtime has run for a stable period, so a crash loop that touches
//!   `running` still backs off.
//! - [`LifecycleEvent::ConfigChanged`] while running hands back
//!   [`Effect::ApplyConfig`], so applying a change in place is also a decision
//!   of this machine.
//! - A `retry_due` that arrives before the failure's `next_retry_at` is
//!   refused, so a stale timer can never start a boot early; a `stable`
//!   before the running attempt's `since` plus the policy's stable period is
//!   refused too.
//! - The machine owns its timers: [`step`] returns, beside the effect, the
//!   next [`Wake`] it wants ([`Lifecycle::wake`]: `retry_due` at
//!   `next_retry_at`, `stable` at the end of the stable period), and the
//!   actors arm only that.
//! - The step deadline is the machine's too ([`LifecyclePolicy`]'s
//!   `step_deadline_ms`): every phase of a boot must end, or its step report
//!   progress ([`LifecycleEvent::Progress`]), within it. While booting the
//!   wake is `step_deadline` at the current phase's deadline (the phase's
//!   start, or the latest progress, plus the policy's deadline); the
//!   [`LifecycleEvent::StepDeadlinePassed`] it asks for cancels the boot
//!   (`draining(fail)`) and the boot rests `failed` with class backoff and an
//!   error naming the step and the deadline. One for another attempt, or
//!   before the deadline (progress moved it), is refused. Checked by
//!   `lifecycle_props::no_step_deadline_fails_a_boot_that_reports_progress_in_time`,
//!   `spec_table` (the `step_deadline_passed` and `progress` rows, the
//!   "Timers" table) and end to end by `tests/it/timing.rs`.
//! - The restart budget ([`RestartBudget`], in the [`LifecyclePolicy`]): the
//!   N-th failed automatic boot within the window W is held
//!   (`retry: hold`, `budget_spent` set) instead of backed off, so no window
//!   W holds more than N failed automatic boots; an operator's `retry`
//!   (always accepted from `failed`) or a config change resumes, and a boot
//!   they start does not count. Checked by
//!   `lifecycle_props::no_window_holds_more_than_n_failed_automatic_boots`
//!   and the invariants run (wakes, early timers, an operator's retry),
//!   `spec_table` (the `failed(budget)` rows and the "Timers" table), and
//!   end to end by `tests/it/timing.rs` and `tests/it/budget.rs`.
//! - A change the watcher saw arrives as [`LifecycleEvent::ConfigTouched`]:
//!   where a failure is held on its config the machine asks whether what
//!   the boot read changed ([`Effect::CheckConfig`]) and retries only on a
//!   [`LifecycleEvent::ConfigChecked`] that says so; elsewhere it is a
//!   `config_changed`. Checked by `ready::tests` and `spec_table` (the
//!   `config_touched` and `config_checked` rows).
//! - Every event in `exiting` is refused as `exiting`.
//! - [`LifecycleEvent::Restart`] carries its [`Preflight`], and is stepped
//!   once: where a restart would drain, the machine says a preflight is
//!   needed ([`Lifecycle::restart_needs_preflight`]: exactly where an
//!   invalid one is refused), the actors resolve the new config first and
//!   step the restart with what they found. A restart whose new config does
//!   not resolve is refused as `config_invalid` (with the error) wherever
//!   it would drain, so the runtime keeps serving; a forced one (`skipped`)
//!   drains anyway.
//!   Checked by
//!   `tests::a_restart_whose_config_does_not_resolve_is_refused_and_keeps_running`
//!   and `tests/it/lifecycle_props.rs`
//!   (`a_restart_whose_preflight_is_invalid_never_leaves_running`).

use std::borrow::Cow;
use std::fmt;
use std::num::NonZeroU32;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::time::{Timestamp, duration_ms};

/// The name of one phase of a boot. Phases are named by the service; the
/// first phase of every boot is [`Phase::RESOLVE_CONFIG`].
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Phase(Cow<'static, str>);

impl Phase {
    /// The first phase of every boot: resolving the effective config.
    pub const RESOLVE_CONFIG: Phase = Phase(Cow::Borrowed("resolve_config"));
    /// Not a boot phase: the runtime itself, once it is serving. A runtime
    /// that ends while running fails "in" this phase.
    pub const RUN: Phase = Phase(Cow::Borrowed("run"));

    /// A phase named by the service.
    #[must_use]
    pub fn new(name: impl Into<Cow<'static, str>>) -> Self {
        Self(name.into())
    }

    /// The phase's name.
    #[must_use]
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Phase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Whether waiting can fix a failed boot.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FailureClass {
    /// Yes: retry on a timer (a port still taken, a peer not up yet).
    Backoff,
    /// No (a config that does not resolve): retry only when the config
    /// changes or an operator retries.
    Hold,
}

/// How the process ends: whether the service manager should start it again.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ExitIntent {
    /// Exit 80: stay down, as an operator asked (`steadfastctl exit`). The
    /// shipped service-manager snippets leave it down (`spec/exit-codes.md`);
    /// a daemon drained by its manager's SIGTERM exits 0 instead
    /// (`steadfast::daemon::ExitReason`).
    Halt,
    /// Exit 75 (`EX_TEMPFAIL`): a failure exit, so the service manager
    /// starts a fresh process.
    Relaunch,
}

impl ExitIntent {
    /// The process exit code.
    #[must_use]
    pub const fn code(self) -> i32 {
        match self {
            Self::Halt => 80,
            Self::Relaunch => 75,
        }
    }

    /// The wire name.
    #[must_use]
    pub const fn name(self) -> &'static str {
        match self {
            Self::Halt => "halt",
            Self::Relaunch => "relaunch",
        }
    }
}

/// Why the runtime is stopped while the daemon stays up.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StopReason {
    /// An operator stopped it.
    OperatorRequest,
    /// The hold marker was present when the daemon started.
    HeldAtStartup,
    /// A destructive re-initialization finished; the next start boots over
    /// what it left.
    ReinitComplete,
    /// A destructive re-initialization failed part way and released the
    /// store; what it left is unknown until the next boot observes it.
    ReinitFailed,
}

impl StopReason {
    /// The wire name.
    #[must_use]
    pub const fn name(self) -> &'static str {
        match self {
            Self::OperatorRequest => "operator_request",
            Self::HeldAtStartup => "held_at_startup",
            Self::ReinitComplete => "reinit_complete",
            Self::ReinitFailed => "reinit_failed",
        }
    }
}

/// What happened, where, and when: the report of a failed boot or of a
/// runtime that ended on its own.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct FailureReport {
    /// The phase it failed in ([`Phase::RUN`] for a runtime that ended).
    pub phase: Phase,
    /// The error, rendered.
    pub error: String,
    /// When.
    pub at: Timestamp,
}

/// What a draining runtime turns into once the drain has settled.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "then", rename_all = "snake_case")]
pub enum AfterDrain {
    /// Rest, stopped, with the process up.
    Stop,
    /// Boot again.
    Restart,
    /// End the process.
    Exit {
        /// Halt or relaunch.
        intent: ExitIntent,
    },
    /// The runtime ended on its own, or a step of the boot passed its
    /// deadline: rest as a failed boot (class backoff).
    Fail {
        /// What ended it (or the step and the deadline it passed).
        report: FailureReport,
    },
}

impl AfterDrain {
    /// The wire name.
    #[must_use]
    pub const fn name(&self) -> &'static str {
        match self {
            Self::Stop => "stop",
            Self::Restart => "restart",
            Self::Exit { .. } => "exit",
            Self::Fail { .. } => "fail",
        }
    }
}

/// Whether the running runtime reflects the effective configuration.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum PendingApply {
    /// It does.
    InSync,
    /// These leaves changed and take effect at the next boot.
    RestartNeeded {
        /// The changed leaves, dotted.
        leaves: Vec<String>,
    },
}

/// When a failed boot is tried again.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "class", rename_all = "snake_case")]
pub enum RetryClass {
    /// On a timer.
    Backoff {
        /// When.
        next_retry_at: Timestamp,
        /// The delay that was chosen.
        delay_ms: u64,
    },
    /// Not until something changes: the declared file, an override, or an
    /// operator's retry.
    Hold,
}

/// Where a boot or a drain came to rest ([`LifecycleState::settlement`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Settlement {
    /// `running`: the runtime serves.
    Running,
    /// `failed`, `wedged` or `stopped`: at rest, short of running (the
    /// state says why).
    Short,
    /// `exiting`: the daemon ends; nothing settles after it.
    Exiting,
}

/// The daemon's lifecycle. The control plane is served in every state.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum LifecycleState {
    /// The daemon is up; nothing has been booted yet.
    Resolving {
        /// Since when.
        since: Timestamp,
    },
    /// A boot is running.
    Booting {
        /// Which boot of this daemon.
        attempt: NonZeroU32,
        /// The phase it is in.
        phase: Phase,
        /// When it entered that phase.
        since: Timestamp,
    },
    /// The runtime is serving.
    Running {
        /// Which boot of this daemon produced it.
        attempt: NonZeroU32,
        /// Since when.
        since: Timestamp,
        /// Whether it reflects the effective configuration.
        pending: PendingApply,
    },
    /// The runtime (or the boot producing it) is being stopped.
    Draining {
        /// Which boot is being drained.
        attempt: NonZeroU32,
        /// What happens once the drain settles.
        #[serde(flatten)]
        then: AfterDrain,
    },
    /// The runtime is stopped, its store released; the daemon stays up.
    Stopped {
        /// Why.
        reason: StopReason,
        /// How many times this daemon has released the store.
        epoch: u64,
        /// Since when.
        since: Timestamp,
    },
    /// The last boot failed (or the runtime ended) and released what it
    /// opened.
    Failed {
        /// Which boot failed.
        attempt: NonZeroU32,
        /// Why.
        report: FailureReport,
        /// When it is tried again.
        retry: RetryClass,
        /// Set when this failure spent the restart budget: why the retry is
        /// `hold` although the failure was of class backoff.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        budget_spent: Option<BudgetSpent>,
    },
    /// Something still holds the store and it cannot be released in this
    /// process. Only ending the process gets out of here.
    Wedged {
        /// What held it.
        cause: String,
        /// Since when.
        since: Timestamp,
    },
    /// The process is ending.
    Exiting {
        /// Halt or relaunch.
        intent: ExitIntent,
    },
    /// The service's wipe step is destroying the stopped runtime's data
    /// (a confirmed re-initialization).
    Reinitializing {
        /// The epoch the confirmation was bound to.
        epoch: u64,
        /// Since when.
        since: Timestamp,
    },
}

impl LifecycleState {
    /// The state's wire name.
    #[must_use]
    pub const fn name(&self) -> &'static str {
        match self {
            Self::Resolving { .. } => "resolving",
            Self::Booting { .. } => "booting",
            Self::Running { .. } => "running",
            Self::Draining { .. } => "draining",
            Self::Stopped { .. } => "stopped",
            Self::Failed { .. } => "failed",
            Self::Wedged { .. } => "wedged",
            Self::Exiting { .. } => "exiting",
            Self::Reinitializing { .. } => "reinitializing",
        }
    }

    /// Whether the store may be open in this state.
    #[must_use]
    pub const fn may_hold_store(&self) -> bool {
        match self {
            Self::Booting { .. }
            | Self::Running { .. }
            | Self::Draining { .. }
            | Self::Wedged { .. }
            | Self::Reinitializing { .. } => true,
            Self::Resolving { .. }
            | Self::Stopped { .. }
            | Self::Failed { .. }
            | Self::Exiting { .. } => false,
        }
    }

    /// Where a boot or a drain has come to rest in this state, if it has:
    /// what `--wait` follows a `start`, `restart` or `retry` to (one daemon
    /// or many) and what `READY=1` follows at startup (`spec/control.md`,
    /// "Settled"). The one place "settled" is decided; `None` while a
    /// boot, a drain or a wipe is on its way.
    #[must_use]
    pub const fn settlement(&self) -> Option<Settlement> {
        match self {
            Self::Running { .. } => Some(Settlement::Running),
            Self::Failed { .. } | Self::Wedged { .. } | Self::Stopped { .. } => {
                Some(Settlement::Short)
            }
            Self::Exiting { .. } => Some(Settlement::Exiting),
            Self::Resolving { .. }
            | Self::Booting { .. }
            | Self::Draining { .. }
            | Self::Reinitializing { .. } => None,
        }
    }

    /// Whether a `stop` waiting for its drain is settled in this state
    /// (answered, or refused if what settled it is not durable): anywhere
    /// but draining.
    #[must_use]
    pub const fn settles_stops(&self) -> bool {
        !matches!(self, Self::Draining { .. })
    }

    /// The apply a snapshot shows: what is pending while running, in sync
    /// in every other state (nothing serves that a change could miss).
    #[must_use]
    pub fn pending(&self) -> PendingApply {
        match self {
            Self::Running { pending, .. } => pending.clone(),
            _ => PendingApply::InSync,
        }
    }
}

/// What a boot, or a drain, did about the store. Decided by observation (a
/// probe that tries the store's lock), never by the absence of errors.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum StoreOutcome {
    /// It is released (or was never opened).
    Released,
    /// Something still holds it.
    Held {
        /// What, as far as is known.
        cause: String,
    },
}

/// What resolving the new config found before a `restart` would drain the
/// runtime (`nginx -t` before a reload). The actors resolve; the machine
/// decides: an `invalid` preflight refuses a restart it would otherwise
/// accept (`config_invalid`, carrying the error), so a healthy runtime is
/// never torn down for a config that cannot boot.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum Preflight {
    /// The config resolves: the restart may drain.
    Ok,
    /// The config does not resolve.
    Invalid {
        /// Why, rendered (names the file and what is wrong).
        error: String,
    },
    /// Not checked: the operator forced the restart (`restart --force`),
    /// or it arrives where it would not drain
    /// ([`Lifecycle::restart_needs_preflight`] says no), so what the config
    /// is changes nothing.
    Skipped,
}

impl Preflight {
    /// The wire name.
    #[must_use]
    pub const fn name(&self) -> &'static str {
        match self {
            Self::Ok => "ok",
            Self::Invalid { .. } => "invalid",
            Self::Skipped => "skipped",
        }
    }
}

/// Everything that moves the lifecycle.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum LifecycleEvent {
    /// The daemon found the hold marker at startup.
    HeldAtStartup {
        /// When.
        at: Timestamp,
    },
    /// Start a boot: at startup, or an operator starting a stopped runtime.
    Start {
        /// When.
        at: Timestamp,
    },
    /// An operator asked to retry a failed boot now.
    Retry {
        /// When.
        at: Timestamp,
    },
    /// A failed boot's backoff elapsed.
    RetryDue {
        /// When.
        at: Timestamp,
    },
    /// The configuration a boot would read changed: the declared file, or
    /// the override tier.
    ConfigChanged {
        /// When.
        at: Timestamp,
    },
    /// The watcher saw the configuration written (the declared file, or the
    /// override tier) and does not know yet whether its bytes changed.
    /// Where a failure is held on its config, the machine asks whether what
    /// the failed boot read changed ([`Effect::CheckConfig`]); elsewhere it
    /// is a `config_changed`. The journal calls it `config_changed`.
    ConfigTouched {
        /// When.
        at: Timestamp,
    },
    /// What [`Effect::CheckConfig`] found: whether the configuration the
    /// last boot read changed since. Changed, it is a `config_changed`;
    /// unchanged, a failure held on its config stays held (a retry would
    /// read the same bytes and fail again). The journal calls it
    /// `config_changed`.
    ConfigChecked {
        /// When.
        at: Timestamp,
        /// Whether it changed (or cannot be told apart: no declared file).
        changed: bool,
    },
    /// A configuration change reached the running runtime: what it took in
    /// place it now reflects, and `pending` is what it reflects only after a
    /// restart.
    ConfigApplied {
        /// What the running runtime does not reflect yet.
        pending: PendingApply,
    },
    /// The boot entered a phase.
    Phase {
        /// Which.
        phase: Phase,
        /// When.
        at: Timestamp,
    },
    /// The running step of boot `attempt` reported progress: the phase's
    /// deadline moves to the policy's step deadline after `at`.
    Progress {
        /// Which boot (a report from another one is stale).
        attempt: NonZeroU32,
        /// When the step reported.
        at: Timestamp,
    },
    /// The step deadline of boot `attempt` passed (the timer the machine
    /// asked for): the boot is cancelled and fails with class backoff.
    StepDeadlinePassed {
        /// Which boot (a timer for another one is stale).
        attempt: NonZeroU32,
        /// When.
        at: Timestamp,
    },
    /// The boot finished and the runtime is serving.
    Booted {
        /// When.
        at: Timestamp,
    },
    /// The boot failed.
    BootFailed {
        /// What failed, where, when.
        report: FailureReport,
        /// Whether waiting can fix it.
        class: FailureClass,
        /// What the failed boot did about the store (probed).
        store: StoreOutcome,
    },
    /// The running runtime ended on its own: its serve task returned or
    /// panicked, or a liveness probe gave up.
    RuntimeEnded {
        /// Which boot's runtime ended (a report about another one is stale).
        attempt: NonZeroU32,
        /// When.
        at: Timestamp,
        /// Why, rendered.
        error: String,
    },
    /// The runtime has now run for the stable period: the failure streak
    /// resets.
    Stable {
        /// Which boot's runtime (a timer for another one is stale).
        attempt: NonZeroU32,
        /// When.
        at: Timestamp,
    },
    /// Stop the runtime; the process stays up.
    Stop {
        /// When.
        at: Timestamp,
    },
    /// Stop the runtime and boot it again. The actors resolve the new
    /// config first (in a task, bounded) and report what they found; the
    /// machine decides whether to drain.
    Restart {
        /// When.
        at: Timestamp,
        /// What resolving the new config before the drain found.
        preflight: Preflight,
    },
    /// End the process.
    Exit {
        /// Halt or relaunch.
        intent: ExitIntent,
    },
    /// The runtime's shutdown finished.
    Drained {
        /// When.
        at: Timestamp,
        /// What it did about the store (probed).
        store: StoreOutcome,
    },
    /// An operator confirmed a destructive re-initialization of a stopped
    /// runtime. `epoch` is the epoch the confirmation was prepared in
    /// (`None`: the confirmation is not one this daemon issued); it must be
    /// the current one, so a confirmation cannot outlive a boot.
    Reinit {
        /// The confirmation's epoch.
        epoch: Option<u64>,
        /// When.
        at: Timestamp,
    },
    /// The service's wipe step finished.
    Wiped {
        /// When.
        at: Timestamp,
        /// What it left of the store (probed).
        store: StoreOutcome,
        /// Why it failed, if it did.
        error: Option<String>,
    },
}

impl LifecycleEvent {
    /// The event's wire name.
    #[must_use]
    pub const fn name(&self) -> &'static str {
        match self {
            Self::HeldAtStartup { .. } => "held_at_startup",
            Self::Start { .. } => "start",
            Self::Retry { .. } => "retry",
            Self::RetryDue { .. } => "retry_due",
            Self::ConfigChanged { .. } => "config_changed",
            Self::ConfigTouched { .. } => "config_touched",
            Self::ConfigChecked { .. } => "config_checked",
            Self::ConfigApplied { .. } => "config_applied",
            Self::Phase { .. } => "phase",
            Self::Progress { .. } => "progress",
            Self::StepDeadlinePassed { .. } => "step_deadline_passed",
            Self::Booted { .. } => "booted",
            Self::BootFailed { .. } => "boot_failed",
            Self::RuntimeEnded { .. } => "runtime_ended",
            Self::Stable { .. } => "stable",
            Self::Stop { .. } => "stop",
            Self::Restart { .. } => "restart",
            Self::Exit { .. } => "exit",
            Self::Drained { .. } => "drained",
            Self::Reinit { .. } => "reinit",
            Self::Wiped { .. } => "wiped",
        }
    }

    /// The name the journal, the logs and a refusal give this event: the
    /// event it stands for (a touched or checked config is a
    /// `config_changed`), its own name otherwise.
    #[must_use]
    pub const fn recorded_as(&self) -> &'static str {
        match self {
            Self::ConfigTouched { .. } | Self::ConfigChecked { .. } => "config_changed",
            other => other.name(),
        }
    }

    /// Whether this event reports that the store was released (a boot's or a
    /// drain's probed outcome).
    #[must_use]
    pub const fn says_released(&self) -> bool {
        matches!(
            self,
            Self::BootFailed {
                store: StoreOutcome::Released,
                ..
            } | Self::Drained {
                store: StoreOutcome::Released,
                ..
            } | Self::Wiped {
                store: StoreOutcome::Released,
                ..
            }
        )
    }
}

/// What the actors do after a step.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Effect {
    /// Nothing.
    None,
    /// Start boot number `attempt` over the released store.
    StartBoot {
        /// Which boot of this daemon.
        attempt: NonZeroU32,
    },
    /// Ask the running boot to stop.
    CancelBoot,
    /// Shut the running runtime down (then report `drained`).
    ShutdownRuntime,
    /// Apply the changed config to the running runtime in place, off the
    /// actor's handler (then report `config_applied`, handing the runtime
    /// back).
    ApplyConfig,
    /// Stop the config apply in flight (a drain needs the runtime it holds);
    /// it reports `config_applied` as it ends, and the drain starts then.
    CancelApply,
    /// End the process.
    Exit(ExitIntent),
    /// Run the service's wipe step over the released store (then report
    /// `wiped`).
    Wipe,
    /// Tell whether the configuration the last boot read changed since
    /// (its declared file's fingerprint, the override tier's generation),
    /// then report `config_checked`.
    CheckConfig,
}

impl Effect {
    /// The effect's wire name.
    #[must_use]
    pub const fn name(&self) -> &'static str {
        match self {
            Self::None => "none",
            Self::StartBoot { .. } => "start_boot",
            Self::CancelBoot => "cancel_boot",
            Self::ShutdownRuntime => "shutdown_runtime",
            Self::ApplyConfig => "apply_config",
            Self::CancelApply => "cancel_apply",
            Self::Exit(_) => "exit",
            Self::Wipe => "wipe",
            Self::CheckConfig => "check_config",
        }
    }
}

/// Why an event was refused. The spellings are stable: they travel to
/// operators and scripts unchanged.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RefusedBecause {
    /// The runtime is already running.
    RuntimeRunning,
    /// The runtime is not running (nor booting).
    RuntimeNotRunning,
    /// Only a failed boot is retried.
    RuntimeNotFailed,
    /// Only a stopped runtime is started.
    RuntimeNotStopped,
    /// A boot or a drain is in progress.
    LifecycleBusy,
    /// The store is held and cannot be released; only exiting is possible.
    Wedged,
    /// The process is ending; nothing else is accepted.
    Exiting,
    /// An internal event arrived where it cannot happen (a stale timer, a
    /// report from a boot that already ended).
    Unexpected,
    /// A destructive command's confirmation is not for the current epoch
    /// (something booted since it was prepared) or was never issued.
    StaleConfirmation,
    /// A restart's preflight found that the new config does not resolve;
    /// the runtime keeps serving (the error is the refusal's `detail`).
    ConfigInvalid,
}

impl RefusedBecause {
    /// The wire spelling.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::RuntimeRunning => "runtime_running",
            Self::RuntimeNotRunning => "runtime_not_running",
            Self::RuntimeNotFailed => "runtime_not_failed",
            Self::RuntimeNotStopped => "runtime_not_stopped",
            Self::LifecycleBusy => "lifecycle_busy",
            Self::Wedged => "wedged",
            Self::Exiting => "exiting",
            Self::Unexpected => "unexpected",
            Self::StaleConfirmation => "stale_confirmation",
            Self::ConfigInvalid => "config_invalid",
        }
    }
}

impl fmt::Display for RefusedBecause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An event the lifecycle refused, and why.
#[derive(Debug, Clone, PartialEq, Eq, Hash, thiserror::Error, Serialize, Deserialize)]
#[error("{event} refused while {state}: {reason}{}", detail_suffix(.detail.as_deref()))]
pub struct Refused {
    /// The state it arrived in.
    pub state: Cow<'static, str>,
    /// The event.
    pub event: Cow<'static, str>,
    /// Why.
    pub reason: RefusedBecause,
    /// What the reason is about, when it carries more than its spelling
    /// (the config error of a `config_invalid`). Always serialized: the
    /// control plane's frames are bincode, which cannot skip a field.
    #[serde(default)]
    pub detail: Option<String>,
}

fn detail_suffix(detail: Option<&str>) -> String {
    detail.map_or_else(String::new, |d| format!(": {d}"))
}

/// Seeded jitter for the backoff: each delay is shortened by up to
/// `max_permille`/1000 of itself, by an amount derived from `seed` and the
/// streak, so the same seed always gives the same delays.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Jitter {
    /// The seed (a daemon might use its pid or its identity).
    pub seed: u64,
    /// The largest share of a delay that may be taken off, in thousandths
    /// (values above 1000 count as 1000).
    pub max_permille: u16,
}

/// How long a failed boot of class backoff waits: `base` for the first
/// failure of a streak, doubling with each further one, never above `cap`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct BackoffPolicy {
    /// The first delay, in milliseconds.
    pub base_ms: u64,
    /// The largest delay, in milliseconds.
    pub cap_ms: u64,
    /// Optional seeded jitter; `None` (the default) gives exact delays.
    pub jitter: Option<Jitter>,
}

impl Default for BackoffPolicy {
    /// 1 s, doubling, capped at 60 s, no jitter.
    fn default() -> Self {
        Self {
            base_ms: 1_000,
            cap_ms: 60_000,
            jitter: None,
        }
    }
}

impl BackoffPolicy {
    /// The delay after the `streak`-th consecutive failure (counting from 1).
    #[must_use]
    pub fn delay(&self, streak: u32) -> Duration {
        let doublings = streak.saturating_sub(1).min(63);
        let nominal = self
            .base_ms
            .saturating_mul(1u64 << doublings)
            .min(self.cap_ms);
        let ms = match self.jitter {
            None => nominal,
            Some(jitter) => {
                let permille = u128::from(jitter.max_permille.min(1000));
                let draw = u128::from(splitmix64(jitter.seed ^ u64::from(streak)) % 1001);
                let cut = u128::from(nominal) * permille * draw / 1_000_000;
                nominal - u64::try_from(cut).unwrap_or(nominal)
            }
        };
        Duration::from_millis(ms)
    }
}

/// A small, well-known mixing function: deterministic jitter without a
/// random source.
const fn splitmix64(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

/// The restart budget: at most `max_failures` automatic boots may fail
/// within any `window_ms`; the failure that spends it is held instead of
/// backed off. Automatic boots are the first boot of the daemon and every
/// boot a `retry_due` starts; a boot an operator or a config change starts
/// does not count, and clears the count (it resumes a spent budget).
///
/// The default, 5 within 10 minutes, takes OTP's and systemd's burst
/// (`StartLimitBurst=5`; OTP's intensity counts restarts the same way) and
/// scales the window to this machine's backoff: systemd's 10 s is 100 times
/// its 100 ms `RestartSec`, OTP restarts at once, while here five failures
/// in a row already wait 1 + 2 + 4 + 8 s, so a 10 s window could never
/// fill. Ten minutes holds a crash loop after its fifth failure (about 15 s
/// in), and a runtime that survives the stable period and then crashes again
/// and again (a cycle of 31 s or more) after five crashes, instead of
/// looping on backoff forever.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct RestartBudget {
    /// How many failed automatic boots the window allows (N).
    pub max_failures: NonZeroU32,
    /// The window (W), in milliseconds.
    pub window_ms: u64,
}

impl Default for RestartBudget {
    /// 5 failures within 600 s.
    fn default() -> Self {
        Self {
            max_failures: NonZeroU32::new(5).unwrap_or(NonZeroU32::MIN),
            window_ms: 600_000,
        }
    }
}

/// Why a failure of class backoff is held: the restart budget ran out.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct BudgetSpent {
    /// Failed automatic boots within the window, this one included.
    pub failures: u32,
    /// The window, in milliseconds.
    pub window_ms: u64,
    /// The same, rendered for an operator.
    pub reason: String,
}

impl BudgetSpent {
    fn new(failures: u32, window_ms: u64) -> Self {
        Self {
            failures,
            window_ms,
            reason: format!(
                "restart budget spent: {failures} automatic restarts failed within {window_ms} ms; \
                 held until the config changes or an operator retries"
            ),
        }
    }
}

/// What the machine is built with: how it backs off, how long a runtime
/// must run to count as stable, and the restart budget.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct LifecyclePolicy {
    /// The backoff after failures of class backoff.
    pub backoff: BackoffPolicy,
    /// How long a runtime must run before the failure streak resets, in
    /// milliseconds; a `stable` earlier than that is refused.
    pub stable_period_ms: u64,
    /// The restart budget; `None` turns it off (retry on backoff forever).
    pub budget: Option<RestartBudget>,
    /// How long a phase of a boot may run without ending or its step
    /// reporting progress, in milliseconds; past it the boot is cancelled
    /// and fails with class backoff. A `step_deadline_passed` earlier than
    /// that is refused.
    #[serde(default = "default_step_deadline_ms")]
    pub step_deadline_ms: u64,
}

const fn default_step_deadline_ms() -> u64 {
    300_000
}

impl Default for LifecyclePolicy {
    /// The default backoff, a 30 s stable period, the default budget, a
    /// 5 min step deadline.
    fn default() -> Self {
        Self {
            backoff: BackoffPolicy::default(),
            stable_period_ms: 30_000,
            budget: Some(RestartBudget::default()),
            step_deadline_ms: default_step_deadline_ms(),
        }
    }
}

/// Which timer the machine wants.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "timer", rename_all = "snake_case")]
pub enum Timer {
    /// Send [`LifecycleEvent::RetryDue`].
    RetryDue,
    /// Send [`LifecycleEvent::Stable`] for `attempt`.
    Stable {
        /// The running attempt.
        attempt: NonZeroU32,
    },
    /// Send [`LifecycleEvent::StepDeadlinePassed`] for `attempt`.
    StepDeadline {
        /// The booting attempt.
        attempt: NonZeroU32,
    },
}

/// The next moment the machine wants to be woken, and for what: the actors
/// arm exactly this (like quinn's `poll_timeout`). The event it asks for is
/// accepted from `at` on, and refused before.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Wake {
    /// From when.
    pub at: Timestamp,
    /// For what.
    pub timer: Timer,
}

/// The machine's state: the lifecycle the control plane shows, and the
/// counters the transitions are computed from.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Lifecycle {
    /// Where the daemon is.
    pub state: LifecycleState,
    attempts: u32,
    epoch: u64,
    streak: u32,
    policy: LifecyclePolicy,
    /// Whether the current (or last) boot counts against the budget.
    automatic: bool,
    /// When the automatic boots counted against the budget failed (those
    /// within the window of the latest failure; at most N).
    budget_failures: Vec<Timestamp>,
    /// While booting: when the current phase passes its step deadline (its
    /// start, or its step's latest progress, plus the policy's deadline).
    #[serde(default)]
    step_deadline_at: Option<Timestamp>,
    /// Whether a config apply holds the runtime (and whether another
    /// change arrived meanwhile).
    #[serde(default)]
    applying: Applying,
}

/// Whether a config apply is in flight. The apply holds the running
/// runtime until it reports `config_applied`: a drain decided meanwhile
/// cancels it and starts when it reports; a change that arrives meanwhile
/// is applied once it reports.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Applying {
    /// None.
    #[default]
    Idle,
    /// One is.
    InFlight,
    /// One is, and a change arrived since it resolved: apply again.
    Again,
}

impl Lifecycle {
    /// A lifecycle that began at `since`, with the default policy.
    #[must_use]
    pub fn at(since: Timestamp) -> Self {
        Self::new(since, LifecyclePolicy::default())
    }

    /// A lifecycle that began at `since`, backing off by `backoff`, with
    /// the default stable period and budget.
    #[must_use]
    pub fn with_policy(since: Timestamp, backoff: BackoffPolicy) -> Self {
        Self::new(
            since,
            LifecyclePolicy {
                backoff,
                ..LifecyclePolicy::default()
            },
        )
    }

    /// A lifecycle that began at `since`, built with `policy`.
    #[must_use]
    pub const fn new(since: Timestamp, policy: LifecyclePolicy) -> Self {
        Self {
            state: LifecycleState::Resolving { since },
            attempts: 0,
            epoch: 0,
            streak: 0,
            policy,
            automatic: false,
            budget_failures: Vec::new(),
            step_deadline_at: None,
            applying: Applying::Idle,
        }
    }

    /// Whether a config apply holds the runtime.
    #[must_use]
    pub const fn applying(&self) -> Applying {
        self.applying
    }

    /// Boots started by this daemon.
    #[must_use]
    pub const fn attempts(&self) -> u32 {
        self.attempts
    }

    /// Times this daemon has released the store. A confirmation for a
    /// destructive operation is bound to one epoch: any boot in between
    /// makes it stale.
    #[must_use]
    pub const fn epoch(&self) -> u64 {
        self.epoch
    }

    /// Consecutive failed boots since a runtime last ran for the stable
    /// period.
    #[must_use]
    pub const fn streak(&self) -> u32 {
        self.streak
    }

    /// The policy the machine was built with.
    #[must_use]
    pub const fn policy(&self) -> LifecyclePolicy {
        self.policy
    }

    /// Failed automatic boots counted against the restart budget: those
    /// within the window of the latest one, since an operator or a config
    /// change last started a boot.
    #[must_use]
    pub fn budget_used(&self) -> u32 {
        u32::try_from(self.budget_failures.len()).unwrap_or(u32::MAX)
    }

    /// The next moment the machine wants to be woken, and for what: the
    /// current phase's step deadline while booting, the backoff's
    /// `next_retry_at` in `failed(backoff)`, and the end of the stable
    /// period while running with a streak to reset. `None`: no timer (a
    /// held failure, a runtime with nothing to reset, every other state).
    #[must_use]
    pub fn wake(&self) -> Option<Wake> {
        match &self.state {
            LifecycleState::Booting { attempt, .. } => self.step_deadline_at.map(|at| Wake {
                at,
                timer: Timer::StepDeadline { attempt: *attempt },
            }),
            LifecycleState::Failed {
                retry: RetryClass::Backoff { next_retry_at, .. },
                ..
            } => Some(Wake {
                at: *next_retry_at,
                timer: Timer::RetryDue,
            }),
            LifecycleState::Running { attempt, since, .. } if self.streak > 0 => Some(Wake {
                at: self.stable_at(*since),
                timer: Timer::Stable { attempt: *attempt },
            }),
            _ => None,
        }
    }

    fn stable_at(&self, since: Timestamp) -> Timestamp {
        since.after(Duration::from_millis(self.policy.stable_period_ms))
    }

    /// The policy's step deadline.
    const fn step_deadline(&self) -> Duration {
        Duration::from_millis(self.policy.step_deadline_ms)
    }

    /// The step deadline of a phase that starts, or whose step reports
    /// progress, at `at`.
    fn deadline_after(&self, at: Timestamp) -> Timestamp {
        at.after(self.step_deadline())
    }

    /// Whether nothing more can happen.
    #[must_use]
    pub const fn is_terminal(&self) -> bool {
        matches!(self.state, LifecycleState::Exiting { .. })
    }

    /// The epoch a re-initialization confirmation is prepared in: the
    /// current one, when a `reinit` would be accepted now.
    ///
    /// # Errors
    /// The refusal a `reinit` would get in this state (only a stopped
    /// runtime is re-initialized).
    pub fn reinit_epoch(&self, at: Timestamp) -> Result<u64, Refused> {
        self.step(&LifecycleEvent::Reinit {
            epoch: Some(self.epoch),
            at,
        })
        .map(|_| self.epoch)
    }

    /// Whether an operator's `restart` here must first resolve the new
    /// config (`spec/lifecycle.md`, "Restart preflight"): exactly where a
    /// restart would drain, which is where a preflight that found the
    /// config invalid is refused as `config_invalid`. Asked, not stepped:
    /// the actors resolve, then step the restart once with what they found
    /// (or, where this says no, as `skipped`).
    #[must_use]
    pub fn restart_needs_preflight(&self) -> bool {
        // The moment decides nothing here: an invalid preflight is never
        // accepted, only refused for one reason or another.
        let invalid = LifecycleEvent::Restart {
            at: Timestamp(0),
            preflight: Preflight::Invalid {
                error: String::new(),
            },
        };
        matches!(
            transition(self, &invalid),
            Err(Refused {
                reason: RefusedBecause::ConfigInvalid,
                ..
            })
        )
    }

    /// Take one step: see [`step`].
    ///
    /// # Errors
    /// [`Refused`] when the event is not accepted in the current state.
    pub fn step(&self, event: &LifecycleEvent) -> Result<(Self, Effect, Option<Wake>), Refused> {
        step(self, event)
    }

    /// Start the next boot. `automatic`: the machine's own decision (the
    /// daemon's first boot, a `retry_due`), counted against the budget;
    /// otherwise an operator or a config change asked, which resumes the
    /// budget.
    fn begin_boot(&mut self, at: Timestamp, automatic: bool) -> Effect {
        self.automatic = automatic;
        if !automatic {
            self.budget_failures.clear();
        }
        self.attempts = self.attempts.saturating_add(1);
        let attempt = NonZeroU32::new(self.attempts).unwrap_or(NonZeroU32::MAX);
        self.state = LifecycleState::Booting {
            attempt,
            phase: Phase::RESOLVE_CONFIG,
            since: at,
        };
        self.step_deadline_at = Some(self.deadline_after(at));
        Effect::StartBoot { attempt }
    }

    /// A boot (or a runtime) ended and released the store.
    fn fail(
        &mut self,
        attempt: NonZeroU32,
        report: FailureReport,
        class: FailureClass,
        at: Timestamp,
    ) {
        self.epoch = self.epoch.saturating_add(1);
        self.streak = self.streak.saturating_add(1);
        let budget_spent = match class {
            FailureClass::Backoff => self.count_against_budget(at),
            FailureClass::Hold => None,
        };
        let retry = match class {
            FailureClass::Backoff if budget_spent.is_none() => {
                let delay = self.policy.backoff.delay(self.streak);
                RetryClass::Backoff {
                    next_retry_at: at.after(delay),
                    delay_ms: duration_ms(delay),
                }
            }
            FailureClass::Backoff | FailureClass::Hold => RetryClass::Hold,
        };
        self.state = LifecycleState::Failed {
            attempt,
            report,
            retry,
            budget_spent,
        };
    }

    /// Count a failure of class backoff at `at` against the budget, if the
    /// boot was automatic; `Some` when that spends it.
    fn count_against_budget(&mut self, at: Timestamp) -> Option<BudgetSpent> {
        let budget = self.policy.budget?;
        if !self.automatic {
            return None;
        }
        // Within the window: less than W before `at`. Measured as a
        // distance, so the window does not lose its start when `at < W`
        // (`at − W` would saturate at 0 and drop a failure at 0).
        let now = at.as_millis();
        self.budget_failures
            .retain(|t| now.saturating_sub(t.as_millis()) < budget.window_ms);
        self.budget_failures.push(at);
        let used = self.budget_used();
        (used >= budget.max_failures.get()).then(|| BudgetSpent::new(used, budget.window_ms))
    }

    fn rest(&mut self, reason: StopReason, since: Timestamp) -> Effect {
        self.state = LifecycleState::Stopped {
            reason,
            epoch: self.epoch,
            since,
        };
        Effect::None
    }

    fn wedge(&mut self, cause: &str, since: Timestamp) -> Effect {
        self.state = LifecycleState::Wedged {
            cause: cause.to_owned(),
            since,
        };
        Effect::None
    }

    fn drain(&mut self, attempt: NonZeroU32, then: AfterDrain, effect: Effect) -> Effect {
        self.state = LifecycleState::Draining { attempt, then };
        match (effect, self.applying) {
            // The apply holds the runtime: it is cancelled, and the drain
            // starts when it hands the runtime back (`config_applied`).
            (Effect::ShutdownRuntime, Applying::InFlight | Applying::Again) => {
                self.applying = Applying::InFlight;
                Effect::CancelApply
            }
            _ => effect,
        }
    }

    fn exit(&mut self, intent: ExitIntent) -> Effect {
        self.state = LifecycleState::Exiting { intent };
        Effect::Exit(intent)
    }

    /// A drain (or the boot it cancelled) finished: the store is released or
    /// it is not.
    fn settle(
        &mut self,
        attempt: NonZeroU32,
        then: AfterDrain,
        store: &StoreOutcome,
        at: Timestamp,
    ) -> Effect {
        self.applying = Applying::Idle;
        match (then, store) {
            // A drain that settles released counts as a release even when
            // the process ends next (invariant 4: the epoch counts every
            // observed release, and the run marker records it).
            (AfterDrain::Exit { intent }, StoreOutcome::Released) => {
                self.epoch = self.epoch.saturating_add(1);
                self.exit(intent)
            }
            // Ending the process releases whatever it still holds.
            (AfterDrain::Exit { intent }, StoreOutcome::Held { .. }) => self.exit(intent),
            (_, StoreOutcome::Held { cause }) => self.wedge(cause, at),
            (AfterDrain::Stop, StoreOutcome::Released) => {
                self.epoch = self.epoch.saturating_add(1);
                self.rest(StopReason::OperatorRequest, at)
            }
            (AfterDrain::Restart, StoreOutcome::Released) => {
                self.epoch = self.epoch.saturating_add(1);
                self.begin_boot(at, false)
            }
            (AfterDrain::Fail { report }, StoreOutcome::Released) => {
                self.fail(attempt, report, FailureClass::Backoff, at);
                Effect::None
            }
        }
    }
}

/// The lifecycle machine: the next lifecycle, the effect to perform and the
/// next moment it wants to be woken ([`Lifecycle::wake`] of the next
/// lifecycle), or the reason `event` is refused in `m`'s state. Pure: the
/// same inputs always give the same answer, and a refusal leaves nothing
/// changed.
///
/// # Errors
/// [`Refused`] with a stable reason for every pair `spec/lifecycle.md` lists
/// as refused.
pub fn step(
    m: &Lifecycle,
    event: &LifecycleEvent,
) -> Result<(Lifecycle, Effect, Option<Wake>), Refused> {
    let (next, effect) = transition(m, event)?;
    let wake = next.wake();
    Ok((next, effect, wake))
}

fn transition(m: &Lifecycle, event: &LifecycleEvent) -> Result<(Lifecycle, Effect), Refused> {
    use LifecycleEvent as E;
    use LifecycleState as S;

    // A failure held on its config is retried only if what its boot read
    // changed: asked where it matters, a `config_changed` everywhere else.
    let held = matches!(
        m.state,
        S::Failed {
            retry: RetryClass::Hold,
            ..
        }
    );
    match event {
        E::ConfigTouched { .. } if held => return Ok((m.clone(), Effect::CheckConfig)),
        E::ConfigChecked { changed: false, .. } if held => return Ok((m.clone(), Effect::None)),
        E::ConfigTouched { at } | E::ConfigChecked { at, .. } => {
            return transition(m, &E::ConfigChanged { at: *at });
        }
        _ => {}
    }
    let mut next = m.clone();
    let effect = match (&m.state, event) {
        (S::Exiting { .. }, _) => return Err(refused(m, event, RefusedBecause::Exiting)),
        // Ending the process: from rest, or out of a wedge. A boot or a
        // runtime is drained first.
        (
            S::Resolving { .. } | S::Stopped { .. } | S::Failed { .. } | S::Wedged { .. },
            E::Exit { intent },
        ) => next.exit(*intent),
        (S::Wedged { .. }, _) => return Err(refused(m, event, RefusedBecause::Wedged)),

        // ── starting: a boot starts only from a resting state ──────────
        (S::Resolving { .. }, E::HeldAtStartup { at }) => next.rest(StopReason::HeldAtStartup, *at),
        // The daemon's first boot is its own decision: it counts against
        // the budget. An operator's start, retry or a config change resume.
        (S::Resolving { .. }, E::Start { at }) => next.begin_boot(*at, true),
        (S::Stopped { .. }, E::Start { at })
        | (S::Failed { .. }, E::Retry { at } | E::ConfigChanged { at }) => {
            next.begin_boot(*at, false)
        }
        (
            S::Failed {
                retry: RetryClass::Backoff { next_retry_at, .. },
                ..
            },
            E::RetryDue { at },
        ) if at >= next_retry_at => next.begin_boot(*at, true),
        (S::Failed { .. }, E::Stop { at }) => {
            // The failed boot already released the store: resting is
            // immediate, and the epoch is the failure's.
            next.rest(StopReason::OperatorRequest, *at)
        }

        // ── booting ─────────────────────────────────────────────────────
        (S::Booting { attempt, .. }, E::Phase { phase, at }) => {
            next.state = S::Booting {
                attempt: *attempt,
                phase: phase.clone(),
                since: *at,
            };
            // A phase starts with a full deadline of its own.
            next.step_deadline_at = Some(m.deadline_after(*at));
            Effect::None
        }
        // Progress only ever pushes the deadline back: a report that arrives
        // late (older than the phase's start) moves nothing.
        (S::Booting { attempt, .. }, E::Progress { attempt: of, at }) if of == attempt => {
            let moved = m.deadline_after(*at);
            next.step_deadline_at = Some(m.step_deadline_at.map_or(moved, |d| d.max(moved)));
            Effect::None
        }
        // Only once the deadline has passed: an early or stale timer (the
        // step reported progress since it was armed) is refused.
        (S::Booting { attempt, phase, .. }, E::StepDeadlinePassed { attempt: of, at })
            if of == attempt && m.step_deadline_at.is_some_and(|d| *at >= d) =>
        {
            let report = FailureReport {
                phase: phase.clone(),
                error: format!(
                    "step `{phase}` passed its deadline of {:?} without reporting progress",
                    m.step_deadline()
                ),
                at: *at,
            };
            next.drain(*attempt, AfterDrain::Fail { report }, Effect::CancelBoot)
        }
        (S::Booting { attempt, .. }, E::Booted { at }) => {
            // The streak is not reset here: only `stable` does that.
            next.state = S::Running {
                attempt: *attempt,
                since: *at,
                pending: PendingApply::InSync,
            };
            Effect::None
        }
        (
            S::Booting { attempt, .. },
            E::BootFailed {
                report,
                class,
                store,
            },
        ) => match store {
            StoreOutcome::Released => {
                next.fail(*attempt, report.clone(), *class, report.at);
                Effect::None
            }
            StoreOutcome::Held { cause } => next.wedge(cause, report.at),
        },
        (S::Booting { attempt, .. }, E::Stop { .. }) => {
            next.drain(*attempt, AfterDrain::Stop, Effect::CancelBoot)
        }
        // ── restart: never drain for a config that does not resolve ─────
        (
            S::Booting { .. } | S::Running { .. },
            E::Restart {
                preflight: Preflight::Invalid { error },
                ..
            },
        ) => {
            return Err(Refused {
                detail: Some(error.clone()),
                ..refused(m, event, RefusedBecause::ConfigInvalid)
            });
        }
        (S::Booting { attempt, .. }, E::Restart { .. }) => {
            next.drain(*attempt, AfterDrain::Restart, Effect::CancelBoot)
        }
        (S::Booting { attempt, .. }, E::Exit { intent }) => next.drain(
            *attempt,
            AfterDrain::Exit { intent: *intent },
            Effect::CancelBoot,
        ),

        // ── running ─────────────────────────────────────────────────────
        // One apply at a time: a change that arrives while one runs is
        // applied once it reports.
        (S::Running { .. }, E::ConfigChanged { .. }) => match m.applying {
            Applying::Idle => {
                next.applying = Applying::InFlight;
                Effect::ApplyConfig
            }
            Applying::InFlight | Applying::Again => {
                next.applying = Applying::Again;
                Effect::None
            }
        },
        (S::Running { attempt, since, .. }, E::ConfigApplied { pending }) => {
            next.state = S::Running {
                attempt: *attempt,
                since: *since,
                pending: pending.clone(),
            };
            if m.applying == Applying::Again {
                next.applying = Applying::InFlight;
                Effect::ApplyConfig
            } else {
                next.applying = Applying::Idle;
                Effect::None
            }
        }
        // Only once the stable period has passed: an early timer is refused.
        (S::Running { attempt, since, .. }, E::Stable { attempt: of, at })
            if of == attempt && *at >= m.stable_at(*since) =>
        {
            next.streak = 0;
            Effect::None
        }
        (
            S::Running { attempt, .. },
            E::RuntimeEnded {
                attempt: of,
                at,
                error,
            },
        ) if of == attempt => {
            let report = FailureReport {
                phase: Phase::RUN,
                error: error.clone(),
                at: *at,
            };
            next.drain(
                *attempt,
                AfterDrain::Fail { report },
                Effect::ShutdownRuntime,
            )
        }
        (S::Running { attempt, .. }, E::Stop { .. }) => {
            next.drain(*attempt, AfterDrain::Stop, Effect::ShutdownRuntime)
        }
        (S::Running { attempt, .. }, E::Restart { .. }) => {
            next.drain(*attempt, AfterDrain::Restart, Effect::ShutdownRuntime)
        }
        (S::Running { attempt, .. }, E::Exit { intent }) => next.drain(
            *attempt,
            AfterDrain::Exit { intent: *intent },
            Effect::ShutdownRuntime,
        ),

        // ── draining ────────────────────────────────────────────────────
        // The boot finished before it saw the cancel: shut it down.
        (S::Draining { .. }, E::Booted { .. }) => Effect::ShutdownRuntime,
        // Late progress from the boot being cancelled, or the runtime
        // ending while it is shut down: the drain's report settles it.
        (S::Draining { .. }, E::Phase { .. }) => Effect::None,
        (S::Draining { attempt, .. }, E::Progress { attempt: of, .. }) if of == attempt => {
            Effect::None
        }
        (S::Draining { attempt, .. }, E::RuntimeEnded { attempt: of, .. }) if of == attempt => {
            Effect::None
        }
        // The cancelled apply handed the runtime back: drain it now.
        (S::Draining { .. }, E::ConfigApplied { .. }) if m.applying != Applying::Idle => {
            next.applying = Applying::Idle;
            Effect::ShutdownRuntime
        }
        (S::Draining { attempt, then }, E::BootFailed { report, store, .. }) => {
            next.settle(*attempt, then.clone(), store, report.at)
        }
        (S::Draining { attempt, then }, E::Drained { at, store }) => {
            next.settle(*attempt, then.clone(), store, *at)
        }
        // ── re-initializing: only a stopped runtime, only with a fresh
        // confirmation; the wipe's probed outcome settles it ─────────────
        (S::Stopped { .. }, E::Reinit { epoch, at }) => {
            if *epoch != Some(m.epoch) {
                return Err(refused(m, event, RefusedBecause::StaleConfirmation));
            }
            next.state = S::Reinitializing {
                epoch: m.epoch,
                since: *at,
            };
            Effect::Wipe
        }
        (S::Reinitializing { .. }, E::Wiped { at, store, error }) => match store {
            StoreOutcome::Held { cause } => next.wedge(cause, *at),
            StoreOutcome::Released => {
                // The wipe touched the store: a confirmation for the epoch
                // before it is spent, whatever the outcome.
                next.epoch = next.epoch.saturating_add(1);
                let reason = if error.is_some() {
                    StopReason::ReinitFailed
                } else {
                    StopReason::ReinitComplete
                };
                next.rest(reason, *at)
            }
        },

        // Exiting overrides whatever the drain was for.
        (S::Draining { attempt, .. }, E::Exit { intent }) => {
            next.state = S::Draining {
                attempt: *attempt,
                then: AfterDrain::Exit { intent: *intent },
            };
            Effect::None
        }

        _ => return Err(refused(m, event, refusal(&m.state, event))),
    };
    Ok((next, effect))
}

fn refused(m: &Lifecycle, event: &LifecycleEvent, reason: RefusedBecause) -> Refused {
    Refused {
        state: Cow::Borrowed(m.state.name()),
        event: Cow::Borrowed(event.name()),
        reason,
        detail: None,
    }
}

/// Why `event` is refused in `state`, for every pair [`step`] does not
/// accept (`exiting` and `wedged` are answered before this).
fn refusal(state: &LifecycleState, event: &LifecycleEvent) -> RefusedBecause {
    use LifecycleEvent as E;
    use LifecycleState as S;
    match (state, event) {
        (S::Running { .. }, E::Start { .. }) => RefusedBecause::RuntimeRunning,
        (
            S::Booting { .. } | S::Draining { .. },
            E::Start { .. } | E::ConfigChanged { .. } | E::Reinit { .. },
        )
        | (S::Draining { .. }, E::Stop { .. } | E::Restart { .. })
        | (
            S::Reinitializing { .. },
            E::Start { .. }
            | E::Stop { .. }
            | E::Restart { .. }
            | E::ConfigChanged { .. }
            | E::Reinit { .. }
            | E::Exit { .. },
        ) => RefusedBecause::LifecycleBusy,
        (_, E::Reinit { .. }) => RefusedBecause::RuntimeNotStopped,
        (S::Failed { .. }, E::Start { .. }) => RefusedBecause::RuntimeNotStopped,
        (_, E::Retry { .. }) => RefusedBecause::RuntimeNotFailed,
        (
            S::Resolving { .. } | S::Stopped { .. },
            E::Stop { .. } | E::Restart { .. } | E::ConfigChanged { .. },
        )
        | (S::Failed { .. }, E::Restart { .. })
        | (_, E::ConfigApplied { .. }) => RefusedBecause::RuntimeNotRunning,
        // An internal event where it cannot happen: a stale timer, a report
        // from a boot that already ended, a runtime report for another
        // attempt.
        _ => RefusedBecause::Unexpected,
    }
}

mod ready;

pub use ready::{
    AttemptEnd, Entered, Journaling, Origin, Ready, RecordKind, Records, Reply, Settled, WipeEnd,
};

#[cfg(test)]
mod tests;
