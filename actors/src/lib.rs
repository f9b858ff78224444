//! steadfast's supervision tree: one ractor actor a file (or one task's
//! work), performing the effects the pure machines of `steadfast-protocol`
//! hand back.
//!
//! # Layout
//! - [`root`]: Root, which owns the data-dir lock and supervises the rest;
//!   its module doc draws the tree and says what each child's death brings
//!   down.
//! - [`lifecycle`]: the Lifecycle actor, the only place a transition is
//!   decided (through `steadfast_protocol::lifecycle::step`).
//! - `boot`, `drain`: run one attempt, or tear a runtime down, in a task
//!   of the Lifecycle actor's (not actors: the two files of work that is
//!   not an actor).
//! - `journal`: the sole writer of the control directory.
//! - [`launch`]: the launch timeline (`steadfast::launch` at debug).
//! - [`ledger`]: the checkpoints outstanding across processes, which a boot
//!   reconciles against observation.
//! - `config_watcher`: notify on the declared config file.
//! - [`control_dir`], [`store`], [`config`]: the file formats and helpers the
//!   actors share (blocking I/O, run on blocking threads).
//! - [`service`]: what an embedding application implements.
//! - [`replace_runner`]: the blocking and async runners of a replacement
//!   transaction over an application's driver, with its budgets.
//! - [`replacement`]: the Replacement actor (the upgrade lock, one
//!   transaction at a time, its report).
//! - [`clock`], [`context`]: the supervisor's clock and fixed context.
//! - [`status_record`]: the status record (`.steadfast/status`), rewritten
//!   before each snapshot is published.
//! - [`device`]: device work on the blocking pool, a bounded number at a
//!   time; `lock_watch`: the one thread that checks every data-dir lock
//!   of the process each second.
//! - [`accept`]: the pause an accept loop takes on a failed `accept` (a
//!   full descriptor table), so no accept loop ever ends on one.
//! - [`handover`]: one supervisor's files received from an incumbent and
//!   offered to a successor, and whether it handed its store over.
//! - [`fsx`]: opening files in a trusted directory without following links
//!   (the data dir, the control dir, every file in them).
//! - [`failpoint`]: `SIGKILL` at a named point, armed by an environment
//!   variable, for the crash harness.
//!
//! # Surface
//! Only what the facade (`steadfast`: its library, tests, benches and
//! examples) uses is public; the modules named without a link above are
//! the crate's own (`pub(crate)`), and `panics` renders a caught panic for
//! all of them. `testing` (hidden) re-exports the ConfigWatcher actor for
//! this crate's own integration tests.

#![warn(unreachable_pub)]

pub use steadfast_protocol as protocol;

pub mod accept;
pub(crate) mod boot;
pub mod children;
pub mod clock;
pub mod config;
pub(crate) mod config_watcher;
pub mod context;
pub mod control_dir;
pub mod device;
pub(crate) mod drain;
pub mod failpoint;
pub mod fsx;
pub mod handover;
pub(crate) mod journal;
// The launch timeline measures the process's real launch, for `--launch-timeline`;
// nothing the daemon decides, journals or publishes reads it.
#[allow(clippy::disallowed_methods)]
pub mod launch;
pub mod ledger;
pub mod lifecycle;
pub(crate) mod lock_watch;
pub mod metrics;
pub mod observed;
pub(crate) mod panics;
pub mod planted;
// Replacement drives real processes under real deadlines; the simulation runs no `replace`.
#[allow(clippy::disallowed_methods)]
pub mod replace_runner;
pub mod replacement;
pub mod root;
pub mod service;
pub mod status_record;
pub mod store;

/// What `actors/tests/` drive directly and the facade does not use: the
/// ConfigWatcher actor (the facade reaches it only through Root). Not part
/// of the crate's interface.
#[doc(hidden)]
pub mod testing {
    pub use crate::config_watcher::{
        ConfigWatcherActor, ConfigWatcherArgs, ConfigWatcherMsg, DEFAULT_DEBOUNCE, WRITER_PATIENCE,
        entries_resolved_through,
    };
}

/// Attempt `n` (from 1), for tests.
#[cfg(test)]
pub(crate) fn nz(n: u32) -> std::num::NonZeroU32 {
    std::num::NonZeroU32::new(n).expect("an attempt counts from 1")
}
