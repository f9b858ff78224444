//! steadfast keeps a daemon up above its runtime.
//!
//! The daemon process stays alive while its runtime (an open store, bound
//! listeners, workers) is booted in phases, watched, drained, restarted with
//! backoff, held on bad config and retried when the declared config file
//! changes — every move decided by one pure state machine
//! ([`protocol::lifecycle`]) and journaled before it is acknowledged.
//!
//! A service is a typed config and a [`Plan`] of [`Step`]s, each one type
//! with `async fn`s; [`Supervisor::builder`] runs it over a data directory:
//!
//! ```no_run
//! use steadfast::{Plan, Resource, Service, Step, StepContext, StepError, Supervisor};
//!
//! #[derive(serde::Deserialize)]
//! struct Config {
//!     listen_addr: String,
//! }
//!
//! /// Binds the listener; the runtime keeps it under this step's type.
//! struct Bind;
//!
//! impl Step for Bind {
//!     const NAME: &'static str = "bind";
//!     type Config = Config;
//!     type Output = tokio::net::TcpListener;
//!
//!     async fn execute(&self, cx: StepContext<'_, Config>) -> Result<Resource<Self::Output>, StepError> {
//!         let addr = &cx.config.listen_addr;
//!         let listener = tokio::net::TcpListener::bind(addr).await.map_err(StepError::backoff)?;
//!         Ok(Resource::new("listener", addr.clone(), listener))
//!     }
//! }
//!
//! struct App;
//!
//! impl Service for App {
//!     type Config = Config;
//!
//!     fn plan(&self, _config: &Config) -> Plan<Config> {
//!         Plan::new().step(Bind)
//!     }
//! }
//!
//! fn main() {
//!     // The command line (--data-dir, --config, the control and log flags), then a runtime,
//!     // the signals, the supervisor: a refused flag starts no thread, a SIGTERM is a drained exit.
//!     steadfast::daemon::cli::launch("app", env!("CARGO_PKG_VERSION"))
//!         .defaults_toml("listen_addr = \"127.0.0.1:7071\"")
//!         .main(|data_dir, config| Supervisor::builder(data_dir, App).config(config))
//! }
//! ```
//!
//! # Layout
//! Every public name has one path: what an embedding names is at the
//! root, the rest of a topic in its module, the pure core whole under
//! [`protocol`] (some of its names re-exported by name where a user needs
//! them). `public-api.txt` in the repository lists every path.
//!
//! - At the root: what an embedding names — the [`Supervisor`] and its
//!   [`SupervisorHandle`], the [`Service`] and its [`Plan`] of [`Step`]s
//!   (their [`StepContext`], [`Resource`], [`StepError`]), the [`Runtime`]
//!   they build, the [`TomlFileSource`] of its config, the
//!   [`CommandError`] every command answers.
//! - [`service`]: the rest of what steps use (checkpoints, progress, the
//!   store lock, the connections a runtime owns: `Runtime::accept_loop`);
//!   [`config`]: other config sources and their errors; [`supervisor`]:
//!   the builder and its timings; [`children`]: supervised children.
//! - [`control`]: the control plane's server (Unix socket, TCP behind a
//!   token on loopback, or TLS 1.3 with client certificates or tokens and
//!   roles) and its reconnecting client; `steadfastctl` (its own package)
//!   is its command line.
//! - [`daemon`]: the process-wide helper (signals, systemd, exit code,
//!   optionally the control socket); [`daemon::cli`] (feature `cli`, on by
//!   default) the standard command line and a daemon's `main` in one call.
//! - `serve` (features `axum`, `tonic`, `hyper`): an axum `Router`, tonic's
//!   `Routes` or any tower service served through the runtime, so the drain
//!   owns its connections.
//! - [`replace`], [`handover`]: the built-in process driver that replaces
//!   the daemon's own binary (overlap or exclusive), and the passing of the
//!   data dir's lock and listeners to the candidate.
//! - [`fs`]: opening files under a data dir without following links.
//! - [`protocol`]: the pure core (crate `steadfast-protocol`): states,
//!   refusals, snapshots.

#![warn(unreachable_pub)]

pub use steadfast_protocol as protocol;

pub mod control;
pub mod daemon;
mod embedding;
pub mod handover;
// Replacement drives real processes under real deadlines; the simulation runs no `replace`.
#[allow(clippy::disallowed_methods)]
pub mod replace;
#[cfg(feature = "hyper")]
pub mod serve;

pub use embedding::{Supervisor, SupervisorError, SupervisorHandle};
pub use steadfast_actors::config::TomlFileSource;
#[allow(deprecated)] // the old name of `Resource`, for one release
pub use steadfast_actors::service::Made;
pub use steadfast_actors::service::{
    ConfigChange, Observation, Plan, Resource, Runtime, Service, Step, StepContext, StepError,
};
pub use steadfast_protocol::command::{CommandError, Hold};
pub use steadfast_protocol::lifecycle::ExitIntent;

/// The builder of a [`Supervisor`] and what it is given beyond a service
/// and a config source: timings, how much journal to keep; and what
/// [`SupervisorHandle::reinit_prepare`] answers.
pub mod supervisor {
    pub use crate::embedding::{
        DEFAULT_JOURNAL_KEEP_ATTEMPTS, ReinitConfirmation, SupervisorBuilder,
    };
    pub use steadfast_actors::context::Timings;
}

/// Config sources beyond the root's [`TomlFileSource`], the effective
/// config's errors, and the bounded read a service uses for files of its
/// own.
pub mod config {
    pub use steadfast_actors::config::{
        ConfigError, ConfigSource, Fingerprint, MAX_CONFIG_BYTES, RESOLVE_DEADLINE, ResolvedConfig,
        changed_leaves, parse_value, read_config_file,
    };
}

/// What a [`Service`]'s steps use beyond the root's names.
pub mod service {
    pub use steadfast_actors::service::{
        CancellationToken, Checkpoint, Connection, Lifetime, Listener, Shutdown, ShuttingDown,
        StepProgress, TaskEnded, Tracker,
    };
    pub use steadfast_actors::store::StoreLock;
    pub use steadfast_protocol::journal::ResourceRecord;
}

/// Supervised children of a runtime: tasks and ractor actors a step
/// starts as a group ([`Runtime::supervise`]), restarted as OTP's
/// supervisors do (restart types, strategies, an intensity whose meltdown
/// ends the runtime); the decisions are
/// [`steadfast_protocol::children`]'s.
pub mod children {
    pub use steadfast_actors::children::{
        AutoShutdown, Child, ChildContext, ChildGone, ChildOpError, ChildState, Children,
        ChildrenError, DEFAULT_SHUTDOWN, Handle, Intensity, Restart, SpecError, Strategy,
    };
    pub use steadfast_protocol::children::{ChildExit, ChildKind, ChildOp, ChildView};
    #[allow(deprecated)]
    // the old names of `ChildExit`, `ChildKind`, `ChildOp`, for one release
    pub use steadfast_protocol::children::{Exit, Kind, Op};
}

/// Files under a data directory, opened without following a link and
/// created private (what steadfast's own control directory uses).
pub mod fs {
    pub use steadfast_actors::fsx::{
        Access, Dir, File, FsError, Kind, Meta, UnsafePath, open_in_data_dir, read_control_file,
        read_nofollow,
    };
}

/// The README's Rust blocks, compiled as they are written (`use` lines
/// included) by `cargo test --doc`: a snippet that stops compiling fails
/// the doc tests. Blocks fenced `rust ignore` are not compiled. The
/// README shows the TLS transport too: its blocks compile with the cargo
/// feature `tls` (as a workspace build has it).
#[cfg(all(doctest, feature = "tls"))]
#[doc = include_str!("../README.md")]
mod readme {}
