//! The Lifecycle actor: the only place a transition is decided.
//!
//! Every event — an operator's command, a boot's progress, a drain's outcome,
//! a timer, a config change, a boot or drain task that panicked — arrives here
//! as a [`LifecycleMsg`], is stepped through the pure machine
//! ([`Lifecycle::ready`], with the event's [`Origin`]), journaled, adopted,
//! published as a new [`Snapshot`], and only then is its effect performed
//! (start a boot, cancel it, hand the runtime to the drain, apply a config,
//! preflight a restart, exit). A refused command is answered with the
//! machine's refusal, unchanged.
//!
//! This actor is an executor: what to journal and how (staged, written
//! ahead, awaited), whether a step stands only once durable, when a command
//! is answered, what to publish and what entering a state asks all come in
//! the step's [`Ready`]; `execute` performs it in order, and the handler
//! only turns messages into events.
//!
//! This module owns the actor, its messages and the path of an event
//! (`fire_with`: step, then `execute`: journal, adopt, publish, arm,
//! perform); its parts:
//! - `journaling`: a transition's records, appended or written ahead of
//!   their fsync (group commit), and the deferral that waits for it;
//! - `publish`: the snapshot's error slots and publishing it, answering
//!   the commands a settled fsync acknowledged;
//! - `apply`: a config change applied in place, in a task holding the
//!   runtime ([`LifecycleMsg::ApplyEnded`]);
//! - `overrides`: `config set` / `unset` (staged, checked in a task,
//!   persisted, then `config_changed`);
//! - `log`: one log line per adopted transition.
//!
//! Invariants:
//! - A transition is acknowledged (published, answered) only after its
//!   journal record's fsync returned; a journal that fails is reported in the
//!   snapshot's `error` rather than hidden, and that error clears at the
//!   next append that succeeds. A fact that changes nothing (machine,
//!   effect and wake unchanged: the runtime's task ending while it is
//!   shut down) is neither published nor awaited: its record is staged and
//!   rides the next append (group commit,
//!   `tests/it/group_commit.rs::fsyncs_per_stop_start_and_restart`).
//! - A transition into a boot or a drain is *written ahead*: its record is
//!   written (a full disk refuses it here, before anything is done) and its
//!   effect starts at once, but it is published, its command answered and
//!   its run marker written only once an fsync covers it: the one that
//!   makes the effect's outcome durable (`drained`, the boot's first
//!   checkpoint, `booted`), or the commit window's
//!   (`Timings::commit_window`), whichever comes first. Until then nothing
//!   is published at all, so a watcher never sees what a crash could take
//!   back; a stop+start of a one-step service costs two fsyncs, not four
//!   (`group_commit::a_stop_and_a_start_cost_one_fsync_each`).
//! - An operator's command whose record could not be made durable is not
//!   adopted: the machine stays where it was, no effect is performed, the
//!   command is answered `Durability`, and sending it again once the disk
//!   lets the journal repair itself does it (the journal cuts a failed
//!   append back before its next one). A hold-marker change is written after
//!   the record, before adoption; if it fails the command is not adopted
//!   either. `exit` is the exception: it is carried out even when its
//!   record fails (it is how SIGTERM stops a daemon on a full disk).
//! - A fact the world already made true (a boot or drain settled, a task
//!   ended, a timer fired) is adopted even when its record fails, since
//!   refusing it would leave the machine describing a runtime that no
//!   longer exists; its records are staged in the Journal actor, so they
//!   are written, in order, with the next append and the history catches
//!   up. A boot whose checkpoint could not be made durable fails with
//!   backoff, so the machine's own retry timer tries the journal again with
//!   no operator involved.
//! - A held failure is settled against the declared file as it is when the
//!   failure lands: if its fingerprint differs from the one taken before the
//!   boot read it, the change is not lost (`config_changed` is stepped at
//!   once). A watcher's change reaches the machine as `config_touched`;
//!   where a failure is held on its config the machine asks whether what
//!   the boot read changed ([`Effect::CheckConfig`]) and this actor answers
//!   `config_checked` from the fingerprint, so a write of the same bytes
//!   never retries it. A boot that reaches running is settled the same
//!   way, off the actor once running is published: a change that landed
//!   after the boot read the file (its event refused while booting) is
//!   applied
//!   (`supervisor::a_change_that_lands_during_a_successful_boot_is_applied`).
//! - The machine owns its timers: every step hands back the next wake it
//!   wants ([`steadfast_protocol::lifecycle::Wake`]: retry due, stable
//!   period, step deadline), and this actor arms exactly that, once, one
//!   millisecond past it, keeping one timer at a time (the one for a wake
//!   the machine no longer wants is aborted); it decides no period of its
//!   own. Timers are never trusted: a `retry_due`, `stable` or
//!   `step_deadline_passed` that is stale or early is refused by the
//!   machine and ignored here (an early one re-arms the wake). A step's
//!   progress, forwarded coalesced by the boot, is the machine's `progress`
//!   (moving the deadline it wants); a deadline that passes cancels the boot
//!   with the machine's reason. Checked by `tests/it/timing.rs`
//!   (`a_stalled_step_fails_at_its_deadline_and_a_reporting_one_boots_on_virtual_time`).
//! - Every attempt ends exactly once: the `AttemptEnded` record (and the
//!   snapshot's result) comes only from `end_attempt`, journaled with the
//!   transition that ends the attempt — booted, booted while draining
//!   (cancelled), failed or cancelled, or panicked. Checked by
//!   `tests/it/attempts.rs` (`a_boot_that_completes_as_a_stop_lands_still_ends`,
//!   `a_boot_that_panics_ends_in_the_journal`).
//! - A command whose caller gave up before it was stepped (its reply port
//!   is closed: a control request past its deadline, a closed connection,
//!   a dropped future) is dropped, never stepped.
//!   `tests/it/control_hostile.rs::a_command_whose_caller_gave_up_is_not_stepped`.
//!
//! - A `restart` (unless forced) never drains for a config that does not
//!   resolve, and is stepped once: where the machine says a preflight is
//!   needed ([`Lifecycle::restart_needs_preflight`]: where it would
//!   drain), the resolve runs in a spawned task (bounded by
//!   `RESOLVE_DEADLINE`), never in this actor's handler, and comes back as
//!   [`LifecycleMsg::Preflighted`]; the machine steps the restart with that
//!   outcome and refuses (`config_invalid`) or drains. Elsewhere it is
//!   stepped at once (`skipped`), and refused with that state's reason.
//!   `tests/it/preflight.rs::a_broken_config_refuses_the_restart_and_kvd_keeps_serving`,
//!   `tests/it/preflight.rs::the_preflight_runs_in_a_task_and_the_actor_keeps_answering`.
//!
//! - The snapshot's `error` is this actor's [`Errors`]: one slot per
//!   operation ([`ErrorSource`]: the journal, the markers, the override
//!   tier, a config change applied in place, a wipe, a reload's files),
//!   each set by that operation's failure and cleared by its next success
//!   (a boot that reaches running also clears a config change's error: its
//!   runtime runs the config the boot resolved), never by another's.
//!   `enospc::an_override_write_error_clears_at_the_next_write`,
//!   `enospc::a_config_error_clears_once_the_file_is_restored`,
//!   `control_tls::a_refused_reload_is_an_error_until_a_good_one`.
//!
//! Checked by `tests/it/supervisor.rs` end to end; the durability rules by
//! `enospc::a_journal_append_that_hit_enospc_recovers_without_a_relaunch`
//! (a real daemon on a full tmpfs) and
//! `crash::a_journal_write_that_fails_is_never_acknowledged`.

use std::num::NonZeroU32;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};
use steadfast_protocol::Timestamp;
use steadfast_protocol::journal::{AttemptResult as JournalResult, Record};
use steadfast_protocol::lifecycle::{
    AttemptEnd, Effect, Entered, ExitIntent, FailureClass, FailureReport, Journaling, Lifecycle,
    LifecycleEvent, LifecycleState, Origin, PendingApply, Phase, Preflight, Ready, RecordKind,
    Refused, Reply, Settled, StoreOutcome, Timer, Wake, WipeEnd,
};
use steadfast_protocol::snapshot::{
    AttemptRecord, AttemptResult, BudgetStatus, ErrorSource, Errors, PhaseOutcome, PhaseRecord,
    Snapshot,
};
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;

pub use crate::boot::BootReport;
use crate::boot::{BootMsg, BootTask};
use crate::config::{Fingerprint, Overrides, RESOLVE_DEADLINE};
use crate::context::Shared;
use crate::control_dir::RunMarker;
use crate::drain::DrainReport;
use crate::journal::{self, JournalMsg};
use crate::service::{LiveConfig, LiveRuntime, TaskEnded};
use crate::store::StoreLock;

mod apply;
mod journaling;
mod log;
mod overrides;
mod publish;

pub use apply::ApplyEnded;
use journaling::Deferred;
use log::{label, log_transition};
pub use overrides::OverrideCheck;

/// How many attempts a snapshot keeps.
pub const ATTEMPTS_KEPT: usize = 32;

pub use steadfast_protocol::command::Hold;

/// An operator's command.
#[derive(Debug, Clone, PartialEq)]
pub enum Command {
    /// Boot a stopped runtime.
    Start,
    /// Stop the runtime; answered once the drain has settled.
    Stop(Hold),
    /// Stop the runtime and boot it again. Unless `force`, the new config
    /// is resolved first (in a task) and a config that does not resolve
    /// refuses the restart (`config_invalid`), so the runtime keeps serving.
    Restart {
        /// Drain without the preflight (`restart --force`).
        force: bool,
    },
    /// Retry a failed boot now.
    Retry,
    /// End the process (after a drain).
    Exit(ExitIntent),
    /// Re-read the config (SIGHUP, `reload`): a `config_changed`, after
    /// the handle re-read the control planes' files (TLS).
    Reload {
        /// What re-reading those files found: `Err` names each refused
        /// file and why (the old ones stay in use). The reload is then
        /// answered with that error and it stays in the snapshot's
        /// `error` until a reload whose files are all taken.
        files: Result<(), String>,
    },
    /// Set a leaf of the override tier (durably), then `config_changed`.
    ConfigSet {
        /// The dotted leaf.
        leaf: String,
        /// Its value.
        value: toml::Value,
    },
    /// Remove a leaf from the override tier (durably), then
    /// `config_changed`.
    ConfigUnset {
        /// The dotted leaf.
        leaf: String,
    },
    /// Check that a re-initialization would be accepted now; answered with
    /// the snapshot whose epoch the confirmation is bound to.
    ReinitPrepare,
    /// A confirmed re-initialization; answered once the wipe settled.
    Reinit {
        /// The confirmation `ReinitPrepare` led to.
        token: String,
    },
    /// Answered with the snapshot by this actor's handler and nothing else:
    /// the proof of a round trip through the Lifecycle actor that a
    /// daemon's watchdog ping waits for (`daemon::run_with`).
    Ping,
}

impl Command {
    /// The command's name, for logs and metric labels.
    #[must_use]
    pub const fn name(&self) -> &'static str {
        match self {
            Self::Start => "start",
            Self::Stop(_) => "stop",
            Self::Restart { .. } => "restart",
            Self::Retry => "retry",
            Self::Exit(_) => "exit",
            Self::Reload { .. } => "reload",
            Self::ConfigSet { .. } => "config_set",
            Self::ConfigUnset { .. } => "config_unset",
            Self::ReinitPrepare => "reinit_prepare",
            Self::Reinit { .. } => "reinit",
            Self::Ping => "ping",
        }
    }
}

pub use steadfast_protocol::command::CommandError;

/// A command and where its answer goes, boxed: an unbounded channel
/// allocates its first block of 32 slots when it is made, so a slot the
/// size of a pointer keeps an idle supervisor's command queue small (issue
/// 16: memory per supervisor).
pub type CommandRequest = Box<(Command, RpcReplyPort<Result<Snapshot, CommandError>>)>;

/// The children the Lifecycle actor hands work to (replaced when Root
/// restarts one). A boot and a drain are not among them: they run in tasks
/// of this actor's own (`boot::start`, `drain::start`).
#[derive(Clone)]
pub struct Children {
    /// Makes things durable.
    pub journal: ActorRef<JournalMsg>,
}

/// What the Lifecycle actor is told.
pub enum LifecycleMsg {
    /// Begin: rest held at startup, or boot.
    Begin,
    /// The running runtime's children changed (`Shared::children`):
    /// publish them.
    ChildrenChanged,
    /// An operator's command.
    Command(Command, RpcReplyPort<Result<Snapshot, CommandError>>),
    /// A boot's progress or outcome.
    Boot(BootReport),
    /// A boot's reports that came together (a phase's end and the next
    /// one's start; the last step's end and `booted`), in their order.
    BootReports(Vec<BootReport>),
    /// A drain settled.
    Drained {
        /// The probed store outcome.
        store: StoreOutcome,
        /// What could not be confirmed gone.
        survivors: Vec<String>,
    },
    /// A task of the running runtime ended.
    RuntimeEnded {
        /// Which boot's runtime.
        attempt: NonZeroU32,
        /// Which task, and why.
        ended: TaskEnded,
    },
    /// A backoff timer fired.
    RetryDue,
    /// The stable-period timer of `attempt` fired.
    Stable {
        /// Which boot's runtime.
        attempt: NonZeroU32,
    },
    /// The step-deadline timer of boot `attempt` fired.
    StepDeadline {
        /// Which boot.
        attempt: NonZeroU32,
    },
    /// The declared config file (or the override tier) changed.
    ConfigChanged,
    /// The config watcher's watch is now in place: a change to the declared
    /// file before it went unseen.
    Watching,
    /// The config apply's task ended (applied, not resolved, cancelled or
    /// panicked), handing the runtime back.
    ApplyEnded(Box<ApplyEnded>),
    /// The boot's task panicked: its own report (`boot::start`).
    BootCrashed {
        /// The panic, rendered.
        reason: String,
    },
    /// The drain's (or wipe's) task panicked: its own report
    /// (`drain::start`).
    DrainCrashed {
        /// The panic, rendered.
        reason: String,
    },
    /// The wipe of a re-initialization finished.
    Wiped {
        /// The probed store outcome.
        store: StoreOutcome,
        /// The wipe step's error, if it failed.
        error: Option<String>,
    },
    /// A restart's config preflight finished (it ran in a task): step the
    /// restart, once, with what it found.
    Preflighted {
        /// Whether the new config resolves (`ok`), or why not (`invalid`).
        preflight: Preflight,
        /// Where the restart's answer goes.
        reply: RpcReplyPort<Result<Snapshot, CommandError>>,
    },
    /// A staged override change was checked (in a task): persist it, or
    /// refuse it.
    OverrideChecked(OverrideCheck),
    /// Root restarted a child.
    SetChildren(Children),
    /// The commit window of a written, not yet durable transition passed:
    /// make it durable now ([`crate::context::Timings::commit_window`]).
    Flush,
}

/// Commands answered by an outcome, not by their step: one job, holding
/// their reply ports until it comes.
#[derive(Default)]
struct Waiters {
    /// Stop commands waiting for the drain to settle.
    stop: Vec<RpcReplyPort<Result<Snapshot, CommandError>>>,
    /// A re-initialization waiting for its wipe to settle.
    reinit: Option<RpcReplyPort<Result<Snapshot, CommandError>>>,
    /// `config set`/`unset` and `reload` commands whose change the running
    /// runtime is applying: answered once no apply is in flight, so the
    /// answer carries its outcome (in place, or the leaves a restart needs).
    apply: Vec<RpcReplyPort<Result<Snapshot, CommandError>>>,
}

/// The Lifecycle actor.
#[derive(Debug, Default)]
pub struct LifecycleActor;

/// What the Lifecycle actor starts from.
pub struct LifecycleArgs {
    /// The fixed context.
    pub shared: Arc<Shared>,
    /// Its children.
    pub children: Children,
    /// Where snapshots are published; holds the initial snapshot.
    pub snapshots: watch::Sender<Snapshot>,
    /// Commands from handles (forwarded into this actor).
    pub commands: mpsc::UnboundedReceiver<CommandRequest>,
    /// Where the exit intent is left for `Supervisor::run`.
    pub exit: Arc<Mutex<Option<ExitIntent>>>,
}

/// The Lifecycle actor's state: the machine, and what the shell keeps to
/// execute its steps, grouped by what each part is about.
pub struct LifecycleActorState {
    shared: Arc<Shared>,
    machine: Lifecycle,
    children: Children,
    exit: Arc<Mutex<Option<ExitIntent>>>,
    /// What is published, and the errors it shows.
    view: View,
    /// The runtime that serves, the config it runs, and an apply in flight.
    serving: Serving,
    /// The current attempt: its boot task and what it was started from.
    attempt: Attempt,
    /// Transitions written ahead of their fsync, and those it settled.
    durability: Durability,
    /// The commands that wait for an outcome rather than a step.
    waiters: Waiters,
    /// The wake a timer is armed for (the last one the machine asked for),
    /// and that timer, aborted when the machine asks for another.
    armed: Option<(Wake, tokio::task::AbortHandle)>,
}

/// What is published ([`Snapshot`]) and the errors it shows.
struct View {
    snapshot: Snapshot,
    snapshots: watch::Sender<Snapshot>,
    /// The errors the snapshot shows, one slot per operation
    /// ([`LifecycleActorState::set_error`], [`LifecycleActorState::clear_error`]).
    errors: Errors,
    /// The journal error a failed append or fsync left, cleared by the
    /// next one that succeeds (its slot of `errors` with it).
    journal_error: Option<String>,
    /// The durability failure met while handling the current event, if any:
    /// a command whose transition was not made durable is not acknowledged.
    unacknowledged: Option<String>,
}

/// The runtime that serves and the config it runs.
#[derive(Default)]
struct Serving {
    /// The running (or just booted) runtime.
    runtime: Option<LiveRuntime>,
    /// The config the running runtime booted with (or took in place).
    config: Option<LiveConfig>,
    /// The config apply in flight (it holds the runtime): its cancel.
    apply: Option<CancellationToken>,
    /// Bumped by every change to the override tier.
    overrides_generation: u64,
    /// A write of the override tier failed and none succeeded since: the
    /// file may hold that write (its rename reached the disk, its
    /// directory's fsync did not say), so the next `config set` or `unset`
    /// writes the tier even if it changes nothing in the live one.
    overrides_uncertain: bool,
}

/// The current attempt, from its `AttemptStarted` to its end.
#[derive(Default)]
struct Attempt {
    /// The attempt whose `AttemptStarted` is journaled and whose
    /// `AttemptEnded` is not yet (see [`LifecycleActorState::end_attempt`]).
    open_attempt: Option<NonZeroU32>,
    /// The current attempt's boot task (ended once it reported): where a
    /// cancel goes.
    boot: Option<BootTask>,
    /// The declared file's fingerprint taken before the last boot read it.
    boot_fingerprint: Option<Fingerprint>,
    /// `overrides_generation` when the current boot started: a held
    /// failure settles against the tier as it is when the failure lands.
    boot_overrides_generation: u64,
    /// The identity asked for beside the `booted` append that reaches
    /// running (see [`LifecycleActorState::entering`]), not yet answered.
    identity: Option<ractor::concurrency::OneshotReceiver<journal::Durable<String>>>,
}

/// Transitions adopted and written but not yet durable.
#[derive(Default)]
struct Durability {
    /// Written, not yet durable: nothing is published while this is set.
    deferred: Option<Deferred>,
    /// Deferred transitions an fsync settled (or failed), answered by the
    /// next publish.
    settled: Option<Deferred>,
    /// A hold-marker change failed and none succeeded since: the marker
    /// may be on disk either way (a rename or unlink can land though its
    /// directory's fsync failed), so the next step that journals writes
    /// the marker as the adopted state has it, whether or not the machine
    /// asks for a change.
    hold_uncertain: bool,
    /// A fact's records a failed write left staged in the Journal actor:
    /// a sync does not write staged records, so only an append that
    /// succeeds (it writes them first) clears the journal error; until
    /// then the snapshot must not say the journal holds what it shows.
    facts_unwritten: bool,
}

impl Actor for LifecycleActor {
    type Msg = LifecycleMsg;
    type State = LifecycleActorState;
    type Arguments = LifecycleArgs;

    async fn pre_start(
        &self,
        myself: ActorRef<LifecycleMsg>,
        args: LifecycleArgs,
    ) -> Result<LifecycleActorState, ActorProcessingErr> {
        let LifecycleArgs {
            shared,
            children,
            snapshots,
            mut commands,
            exit,
        } = args;
        let snapshot = snapshots.borrow().clone();
        let since = match snapshot.lifecycle {
            LifecycleState::Resolving { since } => since,
            _ => shared.clock.now(),
        };
        let machine = Lifecycle::new(since, shared.timings.policy());
        // A child's restart or end is published as it happens (one nudge
        // per batch: the board coalesces).
        let nudge = myself.clone();
        shared.children.listen(move || {
            let _ = nudge.cast(LifecycleMsg::ChildrenChanged);
        });
        // Commands arrive on a channel the handles hold from before the tree
        // existed; forward them into the mailbox.
        let forward = myself.clone();
        tokio::spawn(async move {
            while let Some(request) = commands.recv().await {
                let (command, reply) = *request;
                if forward.cast(LifecycleMsg::Command(command, reply)).is_err() {
                    break;
                }
            }
        });
        Ok(LifecycleActorState {
            shared,
            machine,
            children,
            exit,
            view: View {
                snapshot,
                snapshots,
                errors: Errors::default(),
                journal_error: None,
                unacknowledged: None,
            },
            serving: Serving::default(),
            attempt: Attempt::default(),
            durability: Durability::default(),
            waiters: Waiters::default(),
            armed: None,
        })
    }

    async fn handle(
        &self,
        myself: ActorRef<LifecycleMsg>,
        msg: LifecycleMsg,
        state: &mut LifecycleActorState,
    ) -> Result<(), ActorProcessingErr> {
        // Boxed: the handling of one message is a deep future (a
        // transition's journal write, publish and effect); inline, its
        // largest state would sit in this actor's task for its whole
        // life, idle or not (memory per supervisor).
        Box::pin(async move {
            let now = state.shared.clock.now();
            match msg {
                LifecycleMsg::Begin => {
                    let event = if state.view.snapshot.hold {
                        LifecycleEvent::HeldAtStartup { at: now }
                    } else {
                        LifecycleEvent::Start { at: now }
                    };
                    state.fire(&myself, event).await.ok();
                }
                LifecycleMsg::Command(command, reply) => {
                    state.command(&myself, command, reply).await
                }
                LifecycleMsg::Boot(report) => state.boot_report(&myself, report).await,
                LifecycleMsg::BootReports(reports) => {
                    for report in reports {
                        state.boot_report(&myself, report).await;
                    }
                }
                LifecycleMsg::Drained {
                    store, survivors, ..
                } => {
                    if !survivors.is_empty() {
                        tracing::warn!(
                            ?survivors,
                            "the drain could not confirm every resource gone"
                        );
                    }
                    state
                        .fire(&myself, LifecycleEvent::Drained { at: now, store })
                        .await
                        .ok();
                }
                LifecycleMsg::RuntimeEnded { attempt, ended } => {
                    let error = ended.to_string();
                    state
                        .fire(
                            &myself,
                            LifecycleEvent::RuntimeEnded {
                                attempt,
                                at: now,
                                error,
                            },
                        )
                        .await
                        .ok();
                }
                LifecycleMsg::ChildrenChanged => state.publish(),
                LifecycleMsg::RetryDue => {
                    if state
                        .fire(&myself, LifecycleEvent::RetryDue { at: now })
                        .await
                        .is_err()
                    {
                        state.rearm(&myself, now, Timer::RetryDue);
                    }
                }
                LifecycleMsg::Stable { attempt } => {
                    if state
                        .fire(&myself, LifecycleEvent::Stable { attempt, at: now })
                        .await
                        .is_err()
                    {
                        state.rearm(&myself, now, Timer::Stable { attempt });
                    }
                }
                LifecycleMsg::StepDeadline { attempt } => {
                    if state
                        .fire(
                            &myself,
                            LifecycleEvent::StepDeadlinePassed { attempt, at: now },
                        )
                        .await
                        .is_err()
                    {
                        state.rearm(&myself, now, Timer::StepDeadline { attempt });
                    }
                }
                LifecycleMsg::ConfigChanged => {
                    let touched = LifecycleEvent::ConfigTouched { at: now };
                    if let Ok(Effect::CheckConfig) = state.fire(&myself, touched).await {
                        let changed = state.changed_since_boot().await != Some(false);
                        if !changed {
                            tracing::debug!(
                                "the declared file holds the bytes the held boot read: not retried"
                            );
                        }
                        let checked = LifecycleEvent::ConfigChecked { at: now, changed };
                        state.fire(&myself, checked).await.ok();
                    }
                }
                // A change made before the watch was in place was missed:
                // settle against the file as it is now.
                LifecycleMsg::Watching => state.recheck_declared(&myself),
                LifecycleMsg::ApplyEnded(ended) => state.apply_ended(&myself, *ended).await?,
                LifecycleMsg::BootCrashed { reason } => {
                    let phase = match state.machine.boot_phase() {
                        Some(phase) => phase.clone(),
                        None => state
                            .current_attempt()
                            .and_then(|a| a.phases.last())
                            .map_or(Phase::RESOLVE_CONFIG, |p| p.phase.clone()),
                    };
                    let store = StoreLock::observe(&state.shared.data_dir).await;
                    let event = LifecycleEvent::BootFailed {
                        report: FailureReport {
                            phase,
                            error: format!("the boot panicked: {reason}"),
                            at: now,
                        },
                        class: FailureClass::Backoff,
                        store,
                    };
                    state
                        .fire_with(&myself, event, Origin::BootEnd { cancelled: false })
                        .await
                        .ok();
                }
                LifecycleMsg::DrainCrashed { reason } => {
                    tracing::error!(%reason, "the drain panicked; probing the store");
                    let store = StoreLock::observe(&state.shared.data_dir).await;
                    let event = state.machine.task_crashed(now, store, &reason);
                    state.fire(&myself, event).await.ok();
                }
                LifecycleMsg::Wiped { store, error } => {
                    match &error {
                        Some(error) => state.set_error(
                            ErrorSource::Reinit,
                            format!("the re-initialization failed: {error}"),
                        ),
                        None => {
                            state.clear_error(ErrorSource::Reinit);
                        }
                    }
                    state
                        .fire(
                            &myself,
                            LifecycleEvent::Wiped {
                                at: now,
                                store,
                                error,
                            },
                        )
                        .await
                        .ok();
                }
                LifecycleMsg::Preflighted { preflight, reply } => {
                    let event = LifecycleEvent::Restart { at: now, preflight };
                    state.run_command(&myself, event, None, reply).await;
                }
                LifecycleMsg::OverrideChecked(checked) => {
                    state.override_checked(&myself, checked).await;
                }
                LifecycleMsg::SetChildren(children) => state.children = children,
                LifecycleMsg::Flush => state.flush().await,
            }
            Ok::<(), ActorProcessingErr>(())
        })
        .await
    }
}

impl LifecycleActorState {
    /// Step a fact; journal, adopt, publish, then perform the effect.
    async fn fire(
        &mut self,
        myself: &ActorRef<LifecycleMsg>,
        event: LifecycleEvent,
    ) -> Result<Effect, Refused> {
        self.fire_with(myself, event, Origin::Fact).await
    }

    /// Step `event` sent by `origin` and execute what the step says.
    async fn fire_with(
        &mut self,
        myself: &ActorRef<LifecycleMsg>,
        event: LifecycleEvent,
        origin: Origin,
    ) -> Result<Effect, Refused> {
        let ready = self.step(&event, origin)?;
        Ok(self.execute(myself, &event, ready).await)
    }

    /// The machine's step for `event` sent by `origin`. A boot's end that
    /// is refused still ends its attempt in the snapshot (its record goes
    /// with no transition).
    fn step(&mut self, event: &LifecycleEvent, origin: Origin) -> Result<Ready, Refused> {
        self.machine.ready(event, origin).inspect_err(|refused| {
            // Internal events (a stale timer) are refused routinely; an
            // operator's refused command is logged by the handle.
            tracing::debug!(%refused, "event refused");
            if let Origin::BootEnd { cancelled } = origin {
                let _ = self.end_attempt(self.machine.boot_end(cancelled), self.shared.clock.now());
            }
        })
    }

    /// Execute a step, in the order [`Ready`] gives: journal its records as
    /// it says (staged, written ahead or awaited), write the hold marker,
    /// adopt, publish, arm the wake, perform the effect, then what entering
    /// a state and settling waiters asks. A step that must stand only once
    /// durable and did not become durable is not adopted: the effect is
    /// then [`Effect::None`].
    async fn execute(
        &mut self,
        myself: &ActorRef<LifecycleMsg>,
        event: &LifecycleEvent,
        ready: Ready,
    ) -> Effect {
        let Ready {
            next,
            effect,
            wake,
            records: kinds,
            journaling,
            durable_or_nothing,
            hold,
            reply: _,
            publish,
            entered,
            settled,
        } = ready;
        let at = self.shared.clock.now();
        let mut records = Vec::with_capacity(kinds.len());
        for kind in kinds.iter() {
            match kind {
                RecordKind::Transition { event } => records.push(Record::Transition {
                    at_ms: at.as_millis(),
                    from: label(&self.machine.state),
                    event: event.to_owned(),
                    to: label(&next.state),
                }),
                RecordKind::AttemptEnded { result, at: ended } => {
                    records.extend(self.end_attempt(result, ended.unwrap_or(at)));
                }
                RecordKind::AttemptStarted { attempt } => {
                    records.push(Record::AttemptStarted {
                        attempt,
                        at_ms: at.as_millis(),
                    });
                    self.attempt.open_attempt = Some(attempt);
                }
            }
        }
        if journaling == Journaling::Staged {
            // Nothing a snapshot or an answer shows moved: written in order
            // with the next acknowledged append (group commit).
            let _ = self.children.journal.cast(JournalMsg::Stage(records));
            log_transition(&self.machine.state, event, &next.state);
            // Adopted all the same (the machine is unchanged): a
            // simulation sees that the fact arrived.
            crate::observed::adopted(&self.machine, event, &next, effect);
            return effect;
        }
        // The first boot that reaches running creates the identity: asked
        // for before its `booted` append (another file, which no record
        // refers to), so the two writes and their fsyncs overlap; `entering`
        // waits for it before `running` is published.
        if let Some(Entered::Running { .. }) = entered
            && self.view.snapshot.identity.is_none()
            && self.attempt.identity.is_none()
        {
            self.attempt.identity = Some(self.ask_identity(at.as_millis()));
        }
        // Written ahead: the effect starts at once; its fsync comes with
        // the effect's outcome or when the commit window passes, and
        // nothing is published or answered before it. A full disk still
        // refuses it here, before the effect: the write fails.
        let journals = !records.is_empty();
        let durable = match journaling {
            Journaling::WrittenAhead if self.can_write_ahead() => {
                self.write_ahead(myself, records, durable_or_nothing).await
            }
            _ => self.record(records, durable_or_nothing).await,
        };
        if !durable && durable_or_nothing {
            // An operator's command whose record is not on disk is not
            // adopted: nothing changes, the command is answered with the
            // durability error, and sending it again (once the disk lets
            // the journal repair itself) does it.
            self.publish();
            return Effect::None;
        }
        // A hold-marker change is made durable after the transition's record
        // (a record is durable before any marker that refers to it) and
        // before the transition is adopted. After a failed change the
        // marker is made to match the adopted state again.
        let hold = hold.or_else(|| {
            (self.durability.hold_uncertain && journals).then_some(self.view.snapshot.hold)
        });
        if let Some(hold) = hold {
            let timeout = self.shared.timings.journal_timeout;
            match journal::ask(&self.children.journal, timeout, |reply| {
                JournalMsg::SetHold(hold, reply)
            })
            .await
            {
                Ok(()) => {
                    self.view.snapshot.hold = hold;
                    self.durability.hold_uncertain = false;
                    self.clear_error(ErrorSource::HoldMarker);
                }
                Err(error) => {
                    self.durability.hold_uncertain = true;
                    self.fail_durability(
                        ErrorSource::HoldMarker,
                        format!("the hold marker could not be written: {error}"),
                    );
                    if durable_or_nothing {
                        self.publish();
                        return Effect::None;
                    }
                }
            }
        }

        log_transition(&self.machine.state, event, &next.state);
        self.shared
            .metrics
            .transition(&self.machine.state, &next.state, at);
        let next = if crate::planted::planted(crate::planted::Defect::LifecycleDecidesQuietSteps)
            && effect == Effect::None
        {
            self.machine.clone()
        } else {
            next
        };
        crate::observed::adopted(&self.machine, event, &next, effect);
        self.machine = next;
        if let Effect::StartBoot { attempt } = effect {
            // The run marker names the attempt this process is on, so a
            // crash reads `crashed (pid, attempt N)` at the next start. Only
            // that report depends on it: a failed write is logged (by the
            // Journal actor), not a durability failure, and nothing
            // published or answered waits for it. Sent after the
            // transition's append (a record before any marker that refers to
            // it), and in the Journal actor's order, before the boot's first
            // checkpoint.
            let marker = RunMarker::Holding {
                pid: self.shared.pid,
                attempt: attempt.get(),
            };
            match self.durability.deferred.as_mut() {
                Some(deferred) => deferred.note = Some(marker),
                None => {
                    let _ = self.children.journal.cast(JournalMsg::NoteRun(marker));
                }
            }
            self.view
                .snapshot
                .attempts
                .push(AttemptRecord::new(attempt, at));
            if self.view.snapshot.attempts.len() > ATTEMPTS_KEPT {
                let excess = self.view.snapshot.attempts.len() - ATTEMPTS_KEPT;
                self.view.snapshot.attempts.drain(..excess);
            }
        }
        if let Some(Entered::Running { .. }) = entered {
            self.entering_running().await;
        }
        if publish {
            self.publish();
        }
        self.arm(myself, wake);
        self.perform(myself, effect).await;
        self.after(myself, entered, settled).await;
        effect
    }

    /// Perform what the machine handed back.
    async fn perform(&mut self, myself: &ActorRef<LifecycleMsg>, effect: Effect) {
        let timeout = self.shared.timings.journal_timeout;
        match effect {
            Effect::None => {}
            Effect::StartBoot { attempt } => {
                self.attempt.boot_overrides_generation = self.serving.overrides_generation;
                // A task for this attempt alone; it ends when the boot does
                // (a panic in it is reported as `BootCrashed`).
                self.attempt.boot = Some(crate::boot::start(
                    Arc::clone(&self.shared),
                    attempt,
                    myself.get_derived(),
                    self.children.journal.clone(),
                ));
            }
            Effect::CancelBoot => {
                // The step the boot is in fails with the machine's reason: a
                // step past its deadline says so in its phase record too.
                let reason = self.machine.cancel_reason().to_owned();
                if let Some(boot) = &self.attempt.boot {
                    // A boot that already ended has its report in this
                    // actor's mailbox: nothing to cancel.
                    boot.cancel(reason);
                }
            }
            Effect::ShutdownRuntime => match self.serving.runtime.take() {
                // A task for this drain alone (a panic in it is reported as
                // `DrainCrashed`).
                Some(live) => crate::drain::start(
                    Arc::clone(&self.shared),
                    live,
                    myself.get_derived(),
                    self.children.journal.clone(),
                ),
                None => {
                    // No runtime to hand over: the probe alone settles the
                    // drain.
                    let store = StoreLock::observe(&self.shared.data_dir).await;
                    let _ = myself.cast(LifecycleMsg::Drained {
                        store,
                        survivors: Vec::new(),
                    });
                }
            },
            Effect::ApplyConfig => self.start_apply(myself),
            Effect::CancelApply => {
                if let Some(apply) = &self.serving.apply {
                    apply.cancel();
                }
            }
            Effect::Wipe => {
                crate::drain::start_wipe(Arc::clone(&self.shared), myself.get_derived())
            }
            // Answered by the handler that stepped the change, at once
            // (`LifecycleMsg::ConfigChanged`).
            Effect::CheckConfig => {}
            Effect::Exit(intent) => {
                let marker = RunMarker::Released {
                    at_ms: self.shared.clock.now().as_millis(),
                    epoch: self.machine.epoch(),
                };
                if let Err(error) = journal::ask(&self.children.journal, timeout, |r| {
                    JournalMsg::WriteRun(marker, r)
                })
                .await
                {
                    // The next daemon will read "crashed": say so now.
                    self.fail_durability(
                        ErrorSource::RunMarker,
                        format!("the run marker could not be written: {error}"),
                    );
                }
                if let Ok(mut exit) = self.exit.lock() {
                    *exit = Some(intent);
                }
                self.answer_stop_waiters();
                myself.stop(Some(format!("exit({})", intent.name())));
            }
        }
    }

    /// Whether what the last boot read changed since: an override, or the
    /// declared file's bytes; `None` when no override changed and there is
    /// no declared file or fingerprint to tell.
    async fn changed_since_boot(&self) -> Option<bool> {
        if self.overrides_changed_since_boot() {
            return Some(true);
        }
        match self.declared_changed_since_boot() {
            Some(check) => Some(check.await),
            None => None,
        }
    }

    /// Whether the declared file differs now from the fingerprint the last
    /// boot took before it read the file (read on a blocking thread under
    /// [`RESOLVE_DEADLINE`]); `None` without a declared file or a
    /// fingerprint. The one check a held failure and a runtime that came up
    /// are settled with.
    fn declared_changed_since_boot(&self) -> Option<impl Future<Output = bool> + Send + 'static> {
        let path = self.shared.declared.clone()?;
        let before = self.attempt.boot_fingerprint?;
        Some(async move { Fingerprint::of_file_within(&path, RESOLVE_DEADLINE).await != before })
    }

    /// Compare the declared file with the last boot's fingerprint off this
    /// actor, and step a `ConfigChanged` if they differ: what a change the
    /// watcher saw would have done. Nothing without a declared file or a
    /// fingerprint (no boot read the file yet: it will read what is there).
    fn recheck_declared(&self, myself: &ActorRef<LifecycleMsg>) {
        if let Some(check) = self.declared_changed_since_boot() {
            let lifecycle = myself.clone();
            tokio::spawn(async move {
                if check.await {
                    let _ = lifecycle.cast(LifecycleMsg::ConfigChanged);
                }
            });
        }
    }

    /// What follows entering a state (the fingerprint check, the runtime's
    /// end watched) and settling what commands waited for (stop, reinit),
    /// as the step said.
    async fn after(
        &mut self,
        myself: &ActorRef<LifecycleMsg>,
        entered: Option<Entered>,
        settled: Settled,
    ) {
        match entered {
            Some(Entered::HeldFailure) => {
                // Settle against the file as it is now, not against the
                // events that happened to arrive.
                if self.changed_since_boot().await == Some(true) {
                    let _ = myself.cast(LifecycleMsg::ConfigChanged);
                }
            }
            Some(Entered::Running { attempt }) => {
                if self.overrides_changed_since_boot() {
                    // An override set while this boot ran: apply it now.
                    self.attempt.boot_overrides_generation = self.serving.overrides_generation;
                    let _ = myself.cast(LifecycleMsg::ConfigChanged);
                } else {
                    // A change to the declared file that landed after the
                    // boot read it reached a booting lifecycle and was
                    // refused: settle against the file as it is now (running
                    // is already published).
                    self.recheck_declared(myself);
                }
                if let Some(live) = self.serving.runtime.as_mut()
                    && let Some(mut ended) = live.runtime.take_ended()
                {
                    let watcher = myself.clone();
                    tokio::spawn(async move {
                        if let Some(ended) = ended.recv().await {
                            let _ = watcher.cast(LifecycleMsg::RuntimeEnded { attempt, ended });
                        }
                    });
                }
            }
            Some(Entered::Other) | None => {}
        }
        if settled.drain {
            self.answer_stop_waiters();
        }
        if let Some(end) = settled.wipe
            && let Some(waiter) = self.waiters.reinit.take()
        {
            let answer = match end {
                WipeEnd::Complete => Ok(self.view.snapshot.clone()),
                WipeEnd::Failed => Err(CommandError::Failed(
                    self.view
                        .snapshot
                        .error
                        .clone()
                        .unwrap_or_else(|| format!("ended {}", self.machine.state.name())),
                )),
            };
            let _ = waiter.send(answer);
        }
    }

    /// Arm a timer for the wake the machine asked for, unless one is armed
    /// for it already. Only the machine decides when (and whether) a timer
    /// is wanted; one left over from a wake that changed is refused by the
    /// machine when it fires.
    fn arm(&mut self, myself: &ActorRef<LifecycleMsg>, wake: Option<Wake>) {
        if wake == self.armed.as_ref().map(|(armed, _)| *armed) {
            return;
        }
        // One timer at a time: the one for a wake the machine no longer
        // wants goes (had it fired already, the machine refuses its event).
        if let Some((_, timer)) = self.armed.take() {
            timer.abort();
        }
        let Some(wake) = wake else { return };
        // One millisecond past it: the event is never early on a clock that
        // rounds.
        let wait = self.shared.clock.until(wake.at) + Duration::from_millis(1);
        let message = move || match wake.timer {
            Timer::RetryDue => LifecycleMsg::RetryDue,
            Timer::Stable { attempt } => LifecycleMsg::Stable { attempt },
            Timer::StepDeadline { attempt } => LifecycleMsg::StepDeadline { attempt },
        };
        let timer = myself.send_after(wait, message).abort_handle();
        self.armed = Some((wake, timer));
    }

    /// `timer`'s event was refused: if the machine still wants that very
    /// timer at a moment that lies ahead (it fired early), arm it again. A
    /// stale timer (for a wake that changed) arms nothing.
    fn rearm(&mut self, myself: &ActorRef<LifecycleMsg>, now: Timestamp, timer: Timer) {
        let wake = self.machine.wake();
        if wake.is_some_and(|w| w.timer == timer && w.at > now) {
            self.armed = None;
            self.arm(myself, wake);
        }
    }

    fn overrides_changed_since_boot(&self) -> bool {
        self.serving.overrides_generation != self.attempt.boot_overrides_generation
    }

    /// Ask the Journal actor for the identity, created at `now_ms` if there
    /// is none; the answer comes on the receiver.
    fn ask_identity(
        &self,
        now_ms: u64,
    ) -> ractor::concurrency::OneshotReceiver<journal::Durable<String>> {
        let (reply, answer) = ractor::concurrency::oneshot();
        let _ = self
            .children
            .journal
            .cast(JournalMsg::EnsureIdentity(now_ms, reply.into()));
        answer
    }

    /// What entering running records before it is published.
    async fn entering_running(&mut self) {
        // The runtime runs the config its boot resolved: an earlier change
        // that could not be applied in place is moot.
        self.clear_error(ErrorSource::ConfigApply);
        let now = self.shared.clock.now().as_millis();
        if self.view.snapshot.identity.is_none() {
            let timeout = self.shared.timings.journal_timeout;
            let asked = match self.attempt.identity.take() {
                Some(asked) => asked,
                None => self.ask_identity(now),
            };
            let answer = match tokio::time::timeout(timeout, asked).await {
                Ok(Ok(answer)) => answer,
                Ok(Err(_)) => Err("the journal is not running".to_owned()),
                Err(_) => Err(format!("the journal did not answer within {timeout:?}")),
            };
            match answer {
                Ok(identity) => {
                    self.view.snapshot.identity = Some(identity);
                    self.clear_error(ErrorSource::Identity);
                }
                Err(error) => self.fail_durability(
                    ErrorSource::Identity,
                    format!("the identity could not be written: {error}"),
                ),
            }
        }
    }

    async fn command(
        &mut self,
        myself: &ActorRef<LifecycleMsg>,
        command: Command,
        reply: RpcReplyPort<Result<Snapshot, CommandError>>,
    ) {
        // A caller that gave up (its deadline passed, its connection
        // closed, its future was dropped) while this waited in the mailbox
        // abandoned it: never step an abandoned command.
        if reply.is_closed() {
            tracing::info!(
                ?command,
                "a command whose caller gave up was dropped unstepped"
            );
            return;
        }
        let at = self.shared.clock.now();
        let (event, hold) = match command {
            Command::ConfigSet { leaf, value } => {
                return self.set_override(myself, leaf, Some(value), reply);
            }
            Command::ConfigUnset { leaf } => {
                return self.set_override(myself, leaf, None, reply);
            }
            Command::Ping => {
                crate::failpoint::stall("lifecycle.ping").await;
                let _ = reply.send(Ok(self.view.snapshot.clone()));
                return;
            }
            Command::ReinitPrepare => {
                let answer = self
                    .machine
                    .reinit_epoch(at)
                    .map(|_| self.view.snapshot.clone())
                    .map_err(CommandError::Refused);
                let _ = reply.send(answer);
                return;
            }
            Command::Reinit { token } => {
                let salt = self.shared.reinit_salt();
                let epoch = steadfast_protocol::history::reinit_token_epoch(&token, &salt);
                (LifecycleEvent::Reinit { epoch, at }, None)
            }
            Command::Start => (
                LifecycleEvent::Start { at },
                self.view.snapshot.hold.then_some(false),
            ),
            Command::Stop(Hold::None) => (LifecycleEvent::Stop { at }, None),
            Command::Stop(Hold::AcrossRelaunch) => (LifecycleEvent::Stop { at }, Some(true)),
            Command::Restart { force: true } => (
                LifecycleEvent::Restart {
                    at,
                    preflight: Preflight::Skipped,
                },
                None,
            ),
            // Where a restart would drain, the machine wants the new config
            // resolved first; the restart is stepped once that is known.
            Command::Restart { force: false } if self.machine.restart_needs_preflight() => {
                return self.preflight(myself, reply);
            }
            // Elsewhere it is refused whatever the config: stepped at once.
            Command::Restart { force: false } => (
                LifecycleEvent::Restart {
                    at,
                    preflight: Preflight::Skipped,
                },
                None,
            ),
            Command::Retry => (LifecycleEvent::Retry { at }, None),
            Command::Exit(intent) => (LifecycleEvent::Exit { intent }, None),
            Command::Reload { files: Ok(()) } => {
                if self.clear_error(ErrorSource::Reload) {
                    tracing::info!("the reload's files were all taken; clearing its error");
                    self.publish();
                }
                (LifecycleEvent::ConfigChanged { at }, None)
            }
            Command::Reload { files: Err(error) } => {
                return self.reload_refused(myself, error, reply).await;
            }
        };
        self.run_command(myself, event, hold, reply).await;
    }

    /// Resolve the config a restart would boot with, in a task (a slow or
    /// hanging source never blocks this actor: `resolve_within` bounds it),
    /// then step the restart with what it found
    /// ([`LifecycleMsg::Preflighted`]), answering it with that one step.
    fn preflight(
        &self,
        myself: &ActorRef<LifecycleMsg>,
        reply: RpcReplyPort<Result<Snapshot, CommandError>>,
    ) {
        let shared = Arc::clone(&self.shared);
        let lifecycle = myself.clone();
        tokio::spawn(async move {
            let preflight = match resolve_checked(&shared).await {
                Ok(_) => Preflight::Ok,
                Err(error) => Preflight::Invalid {
                    error: error.to_string(),
                },
            };
            // The actor is gone: the reply port drops, and the caller
            // reads that as an unavailable supervisor.
            let _ = lifecycle.cast(LifecycleMsg::Preflighted { preflight, reply });
        });
    }

    /// Step an operator's command's `event` and answer it when the step
    /// says.
    async fn run_command(
        &mut self,
        myself: &ActorRef<LifecycleMsg>,
        event: LifecycleEvent,
        hold: Option<bool>,
        reply: RpcReplyPort<Result<Snapshot, CommandError>>,
    ) {
        // Checked again here: a caller may give up while a preflight ran.
        if reply.is_closed() {
            tracing::info!(
                event = event.name(),
                "a command whose caller gave up was dropped unstepped"
            );
            return;
        }
        self.view.unacknowledged = None;
        let ready = match self.step(&event, Origin::Command { hold }) {
            Ok(ready) => ready,
            Err(refused) => {
                let _ = reply.send(Err(CommandError::Refused(refused)));
                return;
            }
        };
        let when = ready.reply;
        self.execute(myself, &event, ready).await;
        match when {
            _ if self.view.unacknowledged.is_some() => {
                let error = self.view.unacknowledged.take().unwrap_or_default();
                let _ = reply.send(Err(CommandError::Durability(error)));
            }
            Reply::OnDrained => self.waiters.stop.push(reply),
            _ if self.durability.deferred.is_some() => {
                if let Some(deferred) = self.durability.deferred.as_mut() {
                    deferred.replies.push(reply);
                }
            }
            Reply::OnWiped => self.waiters.reinit = Some(reply),
            Reply::OnApplied => self.waiters.apply.push(reply),
            Reply::OnDurable | Reply::None => {
                let _ = reply.send(Ok(self.view.snapshot.clone()));
            }
        }
    }

    async fn boot_report(&mut self, myself: &ActorRef<LifecycleMsg>, report: BootReport) {
        match report {
            BootReport::PhaseStarted {
                attempt,
                phase,
                index,
                total,
                at,
            } => {
                // The boot task staged its progress records in the journal
                // itself, in its own order; they become durable with the
                // next acknowledged write.
                if let Some(record) = self.view.snapshot.attempt_mut(attempt) {
                    record.phases.push(PhaseRecord {
                        phase: phase.clone(),
                        index,
                        total,
                        started_at: at,
                        duration_ms: None,
                        outcome: PhaseOutcome::Running,
                    });
                    record.count_totals();
                }
                if self
                    .fire(myself, LifecycleEvent::Phase { phase, at })
                    .await
                    .is_err()
                {
                    self.publish();
                }
            }
            BootReport::Progress { attempt, at } => {
                // Refused when stale (another attempt, a boot that already
                // ended): nothing to do.
                self.fire(myself, LifecycleEvent::Progress { attempt, at })
                    .await
                    .ok();
            }
            BootReport::PhaseEnded {
                attempt,
                phase,
                at: _,
                duration_ms,
                outcome,
                total,
            } => {
                if let Some(record) = self.view.snapshot.attempt_mut(attempt) {
                    if let Some(p) = record.phase_mut(&phase) {
                        p.duration_ms = Some(duration_ms);
                        p.outcome = outcome;
                        if p.total == 0 {
                            p.total = total;
                        }
                    }
                    record.count_totals();
                }
                self.publish();
            }
            BootReport::Booted {
                live,
                config,
                fingerprint,
                at,
            } => {
                self.serving.runtime = Some(live);
                self.serving.config = Some(config);
                self.attempt.boot_fingerprint = fingerprint;
                if self
                    .fire(myself, LifecycleEvent::Booted { at })
                    .await
                    .is_err()
                {
                    // Refused (the process is ending): drop the runtime.
                    self.serving.runtime = None;
                }
            }
            BootReport::Failed {
                attempt: _,
                report,
                class,
                store,
                fingerprint,
                cancelled,
            } => {
                self.attempt.boot_fingerprint = fingerprint;
                let event = LifecycleEvent::BootFailed {
                    report,
                    class,
                    store,
                };
                self.fire_with(myself, event, Origin::BootEnd { cancelled })
                    .await
                    .ok();
            }
        }
    }

    /// A reload whose control-plane files were refused (the old ones stay
    /// in use): counted, kept in the snapshot's `error`, and answered
    /// with it, after the config part of the reload (`config_changed`) was
    /// stepped as a fact, as the watcher steps it.
    async fn reload_refused(
        &mut self,
        myself: &ActorRef<LifecycleMsg>,
        error: String,
        reply: RpcReplyPort<Result<Snapshot, CommandError>>,
    ) {
        self.shared.metrics.reload_failed();
        self.set_error(ErrorSource::Reload, error.clone());
        let at = self.shared.clock.now();
        // Refused (not running): nothing to apply; the error is published
        // all the same.
        let _ = self
            .fire(myself, LifecycleEvent::ConfigChanged { at })
            .await;
        self.publish();
        let _ = reply.send(Err(CommandError::Failed(error)));
    }

    fn current_attempt(&self) -> Option<&AttemptRecord> {
        self.view.snapshot.attempts.last()
    }

    /// The one way an attempt ends: marks it `result` in the snapshot and
    /// hands back its `AttemptEnded` record, to be journaled with the
    /// transition that ends it. `None` once the open attempt has ended, so
    /// every attempt the journal started ends exactly once, whichever way
    /// its boot finished (booted, booted during a drain, failed, cancelled,
    /// panicked).
    fn end_attempt(&mut self, end: AttemptEnd, at: Timestamp) -> Option<Record> {
        let (shown, result) = match end {
            AttemptEnd::Succeeded => (AttemptResult::Succeeded, JournalResult::Succeeded),
            AttemptEnd::Cancelled => (AttemptResult::Cancelled, JournalResult::Cancelled),
            AttemptEnd::Failed => (AttemptResult::Failed, JournalResult::Failed),
        };
        self.mark_attempt(shown);
        let attempt = self.attempt.open_attempt.take()?;
        Some(Record::AttemptEnded {
            attempt,
            at_ms: at.as_millis(),
            result,
        })
    }

    fn mark_attempt(&mut self, result: AttemptResult) {
        if let Some(last) = self.view.snapshot.attempts.last_mut()
            && last.result == AttemptResult::InProgress
        {
            last.result = result;
        }
    }
}

/// Resolve the effective config as a boot's `resolve_config` does: bounded
/// by [`RESOLVE_DEADLINE`], then checked against the daemon's data
/// directory. Used by the restart preflight and by a change applied in
/// place.
async fn resolve_checked(shared: &Shared) -> Result<LiveConfig, crate::config::ConfigError> {
    shared.resolve_config(&shared.overrides).await
}

/// A boot's messages are the Lifecycle actor's (the boot holds a
/// [`ractor::DerivedActorRef`] of it, not the actor's whole reference).
impl From<BootMsg> for LifecycleMsg {
    fn from(message: BootMsg) -> Self {
        match message {
            BootMsg::Report(report) => Self::Boot(report),
            BootMsg::Reports(reports) => Self::BootReports(reports),
            BootMsg::Crashed { reason } => Self::BootCrashed { reason },
        }
    }
}

/// The inverse of `From<BootMsg>`: what a send to a stopped actor hands back.
impl TryFrom<LifecycleMsg> for BootMsg {
    type Error = LifecycleMsg;

    fn try_from(message: LifecycleMsg) -> Result<Self, LifecycleMsg> {
        match message {
            LifecycleMsg::Boot(report) => Ok(Self::Report(report)),
            LifecycleMsg::BootReports(reports) => Ok(Self::Reports(reports)),
            LifecycleMsg::BootCrashed { reason } => Ok(Self::Crashed { reason }),
            other => Err(other),
        }
    }
}

/// A drain's messages are the Lifecycle actor's: its destructions are
/// phases of the attempt that built the runtime.
impl From<DrainReport> for LifecycleMsg {
    fn from(report: DrainReport) -> Self {
        match report {
            DrainReport::PhaseStarted {
                attempt,
                phase,
                index,
                total,
                at,
            } => Self::Boot(BootReport::PhaseStarted {
                attempt,
                phase,
                index,
                total,
                at,
            }),
            DrainReport::PhaseEnded {
                attempt,
                phase,
                at,
                duration_ms,
                outcome,
            } => Self::Boot(BootReport::PhaseEnded {
                attempt,
                phase,
                at,
                duration_ms,
                outcome,
                total: 0,
            }),
            DrainReport::Drained { store, survivors } => Self::Drained { store, survivors },
            DrainReport::Wiped { store, error } => Self::Wiped { store, error },
            DrainReport::Crashed { reason } => Self::DrainCrashed { reason },
        }
    }
}

/// The inverse of `From<DrainReport>`: what a send to a stopped actor hands
/// back.
impl TryFrom<LifecycleMsg> for DrainReport {
    type Error = LifecycleMsg;

    fn try_from(message: LifecycleMsg) -> Result<Self, LifecycleMsg> {
        match message {
            LifecycleMsg::Boot(BootReport::PhaseStarted {
                attempt,
                phase,
                index,
                total,
                at,
            }) => Ok(Self::PhaseStarted {
                attempt,
                phase,
                index,
                total,
                at,
            }),
            LifecycleMsg::Boot(BootReport::PhaseEnded {
                attempt,
                phase,
                at,
                duration_ms,
                outcome,
                total: 0,
            }) => Ok(Self::PhaseEnded {
                attempt,
                phase,
                at,
                duration_ms,
                outcome,
            }),
            LifecycleMsg::Drained { store, survivors } => Ok(Self::Drained { store, survivors }),
            LifecycleMsg::Wiped { store, error } => Ok(Self::Wiped { store, error }),
            LifecycleMsg::DrainCrashed { reason } => Ok(Self::Crashed { reason }),
            other => Err(other),
        }
    }
}
