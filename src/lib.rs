//! steadfast keeps a daemon up above its runtime.
//!
//! The daemon process stays alive while its runtime (an open store, bound
//! listeners, workers) is booted in phases, watched, drained, restarted with
//! backoff, held on bad config and retried when the declared config file
//! changes — every move decided by one pure state machine
//! ([`protocol::lifecycle`]) and journaled before it is acknowledged.
//!
//! # Layout
//! - [`Supervisor`], [`SupervisorHandle`], [`SupervisorConfig`]: the
//!   embedding API ([`supervisor`]).
//! - [`Service`], its [`Plan`] of [`Step`]s and the [`Runtime`] they build:
//!   what an application implements.
//! - [`control`]: the control plane's server (Unix socket, or TCP behind a
//!   token) and its reconnecting client;
//!   `steadfastctl` (the `steadfastctl` package) is its command line.
//! - [`daemon`]: the process-wide helper (signals, systemd, exit code,
//!   optionally the control socket).
//! - [`replace`], [`handover`]: the built-in process driver that replaces
//!   the daemon's own binary (overlap or exclusive), and the passing of the
//!   data dir's lock and listeners to the candidate.
//! - [`protocol`]: the pure core (crate `steadfast-protocol`).
//! - [`actors`]: the supervision tree (crate `steadfast-actors`).

pub use steadfast_actors as actors;
pub use steadfast_protocol as protocol;

pub mod control;
pub mod daemon;
pub mod handover;
pub mod replace;
pub mod supervisor;

pub use steadfast_actors::config::{
    ConfigError, ConfigSource, Fingerprint, Overrides, ResolvedConfig, TomlFileSource, parse_value,
};
pub use steadfast_actors::context::Timings;
pub use steadfast_actors::control_dir::{ControlDir, RunMarker};
pub use steadfast_actors::lifecycle::{Command, CommandError, Hold};
pub use steadfast_actors::service::{
    CancellationToken, Checkpoint, Made, Observation, Plan, Runtime, Service, Step, StepContext,
    StepError, StepProgress,
};
pub use steadfast_actors::store::StoreLock;
pub use steadfast_protocol::history::JournalAttempt;
pub use steadfast_protocol::journal::ResourceRecord;
pub use steadfast_protocol::lifecycle::{
    ExitIntent, FailureClass, LifecycleState, PendingApply, Phase, Refused, RefusedBecause,
    RetryClass, StopReason,
};
pub use steadfast_protocol::snapshot::{
    AttemptRecord, AttemptResult, ConfigView, PhaseOutcome, PreviousRun, Snapshot,
};
pub use supervisor::{
    DEFAULT_JOURNAL_KEEP_ATTEMPTS, ReinitConfirmation, Supervisor, SupervisorConfig,
    SupervisorError, SupervisorHandle,
};
