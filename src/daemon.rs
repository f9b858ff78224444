//! The process-wide part of a daemon: signals, systemd notification and the
//! exit code. Opt-in, for the daemon's `main` — a process may run many
//! supervisors, but only one of them answers signals and talks to systemd.
//!
//! - SIGTERM and SIGINT → `exit(halt)` (after a drain); SIGHUP → re-read the
//!   config (a `config_changed`). With [`DaemonOptions::signals`] off, no
//!   handler is installed and the process's dispositions are left alone
//!   (`daemon::run_with_signals_off_leaves_the_dispositions_alone`).
//! - [`catch_signals`], the first line of a daemon's `main`, catches them
//!   from then on: one that arrives while the supervisor is built (the
//!   lock taken, the run marker written) waits for [`run_with`], which
//!   answers it — a drained exit 0, and the next run reads `clean_stop`,
//!   never `crashed`. Without it, the handlers come with [`run_with`], and
//!   a SIGTERM in the milliseconds before killed the process by the
//!   default disposition after it had written its run marker. What is
//!   left before that first line (the dynamic loader, the tokio runtime's
//!   start) cannot be covered from inside the process; a signal there
//!   ends a process that has touched nothing, so the data dir reads as the
//!   previous run left it.
//!   `daemon::a_sigterm_from_the_first_moment_is_a_drained_exit_or_touches_nothing`.
//! - When `NOTIFY_SOCKET` is set, systemd hears that *the daemon is up above
//!   its runtime* (`tests/it/notify.rs`, one test per startup path):
//!   - `READY=1` once, at the first *settled* state — `running`, `stopped`
//!     (e.g. `held_at_startup` after `stop --hold`), `failed` (held on a bad
//!     config, or on backoff) or `wedged` — with a `STATUS=` that names it.
//!     The daemon answers from then on; whether its runtime serves is
//!     `STATUS=`, `steadfastctl status` (exit 0 / 3) and `probe ready`'s
//!     business. Before it, `READY=1` came only on `running`, so a
//!     `Type=notify` unit held on a bad config hit its start timeout and
//!     was killed and restarted in a loop.
//!   - Before that, `EXTEND_TIMEOUT_USEC=` the step's deadline
//!     (`Timings::step_deadline`) whenever a boot step starts or reports
//!     progress (`StepProgress::report`): systemd's start timeout never
//!     kills a boot steadfast itself still lets run.
//!   - `STATUS=<state>` on every transition, one line: what it quotes (an
//!     error, which may hold a config value) has its control characters
//!     escaped, so it cannot add a `KEY=` line to the datagram
//!     (`notify::a_status_cannot_add_a_line_to_the_datagram`).
//!   - SIGHUP and `steadfastctl reload` (once ready): `RELOADING=1` with
//!     `MONOTONIC_USEC=`, then, once the reload was answered, `READY=1` —
//!     what `Type=notify-reload` asks.
//!   - `STOPPING=1` once, when the daemon begins to end (a drain towards
//!     `exit`, or `exiting`).
//!   - `WATCHDOG=1` at half of `WATCHDOG_USEC`, each only after a round
//!     trip through the Lifecycle actor (`SupervisorHandle::ping`) answered
//!     within that half: a wedged or deadlocked actor is not pinged
//!     (`notify::a_wedged_lifecycle_actor_is_not_pinged`).
//!
//!   Datagrams are sent in order from a thread of their own: a blocking
//!   `send` to a full socket waits there, never on a runtime worker.
//! - [`run`] returns why the daemon ended, an [`ExitReason`];
//!   `std::process::exit(reason.code())` gives the code its service manager
//!   reads (`spec/exit-codes.md`): [`EXIT_DRAINED`] (0) when SIGTERM or
//!   SIGINT drained it (the manager stopped it) or a replacement took
//!   over, [`EXIT_HALT`] (80) for `steadfastctl exit` (stay down),
//!   [`EXIT_RELAUNCH`] (75) for `exit --relaunch` (start me again). A
//!   daemon that cannot start exits with its error's `exit_code()`:
//!   [`EXIT_NEVER_WORKS`] (78, `EX_CONFIG`) when a restart would only
//!   repeat it (a refused data dir, a bad command line), else
//!   [`EXIT_START_FAILED`] (1). The two halts are told apart so a manager
//!   can restart what it stopped (`sv restart`) and leave down what an
//!   operator halted.
//! - [`run_with`] first raises the process's soft `RLIMIT_NOFILE` to its
//!   hard limit, as systemd advises daemons to (its soft default, 1024, is
//!   for programs that use `select(2)`; tokio uses epoll), logged at debug.
//!   A full descriptor table is survived anyway (accept loops pause, the
//!   store probe waits: `spec/control.md`, "Accept loops"); the raise makes
//!   it harder to reach. `fds::the_daemon_raises_its_soft_descriptor_limit`.
//!
//! - With [`DaemonOptions::control_socket`] (see [`run_with`]), the control
//!   plane ([`crate::control`]) is served on
//!   `<data_dir>/.steadfast/control.sock` for the supervisor's life.
//!   A control socket removed or replaced while the daemon runs is bound
//!   again (`control::server`); one that cannot be is said (logged as an
//!   error) and the daemon exits with `relaunch` (75), so its service
//!   manager starts it again — a daemon nobody can reach is not left
//!   running.
//! - With [`DaemonOptions::control_tcp`], the control plane is also served
//!   on a TCP address behind the token handshake (`crate::control::auth`);
//!   with [`DaemonOptions::create_token`], a missing token file is created
//!   (0600) first.
//! - With `DaemonOptions::control_tls`, the control plane is also served
//!   over TLS 1.3 (`crate::control::TlsServerConfig`: mutual TLS or a token inside the
//!   session, roles); SIGHUP and `reload` re-read its certificate files.
//! - A control plane that was asked for and cannot be served is never
//!   dropped silently: [`run_with`] returns [`DaemonError`] (naming the path
//!   or address, what is wrong and the fix) before the supervisor runs, so
//!   the daemon's `main` says it on stderr and exits non-zero — a tracing
//!   event alone would be lost where no subscriber is installed, and a
//!   daemon nobody can stop or watch is worse than one that did not start.
//!   `tests/it/control_hostile.rs::a_daemon_refuses_to_run_without_its_control_socket`.
//!
//! - With [`DaemonOptions::logging`] (on by default), [`init_logging`]
//!   installs the process's subscriber unless there is one: `RUST_LOG`, a
//!   service's configured level through [`set_log_level`] (in place),
//!   journald priorities under `JOURNAL_STREAM` (`daemon/logging.rs`).
//! - With [`DaemonOptions::metrics_http`], `GET /metrics` answers the
//!   supervisor's metrics in OpenMetrics text (`daemon/metrics_http.rs`).
//!
//! - After a committed replacement (`crate::replace`) hands the daemon over,
//!   [`run_with`] returns `halt` at once (after [`HANDOVER_LINGER`], so the
//!   outcome can be read over the control socket): the successor owns the
//!   data directory, and this process must exit without writing to it.
//! - A signal or `exit` that arrives while a replacement runs is the
//!   replacement's to decide first (`spec/control.md`, "A stop during a
//!   replace"): before the commit it aborts the replacement and is then
//!   carried out here; after it, it is forwarded to the successor, and
//!   [`run_with`] returns the stop's end (drained, halt, relaunch) once the
//!   successor has exited (`replace_stop::*` in `tests/it/`).
//!
//! Checked by `tests/it/daemon.rs`, which runs a real child process under a
//! fake `NOTIFY_SOCKET` and sends it real signals.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use sd_notify::NotifyState;
use steadfast_protocol::lifecycle::{ExitIntent, LifecycleState, Settlement};
use steadfast_protocol::replacement::Stop;
use steadfast_protocol::snapshot::Snapshot;
use tokio::signal::unix::{SignalKind, signal};

use steadfast_protocol::control::{Answer, Execute, cmd};

use crate::control::ControlService;
use crate::embedding::{Supervisor, SupervisorHandle};
use steadfast_actors::lifecycle::CommandError;

#[cfg(feature = "cli")]
pub mod cli;
mod logging;
mod metrics_http;
pub use logging::{
    LIBRARY_TARGETS, LogFormat, LogLevel, LogLevelError, escape_controls, init_logging,
    set_log_level,
};
pub use metrics_http::CONTENT_TYPE as METRICS_CONTENT_TYPE;

/// One line for `STATUS=`: the state and what matters about it.
#[must_use]
pub fn status_line(snapshot: &Snapshot) -> String {
    match &snapshot.lifecycle {
        LifecycleState::Booting { attempt, phase, .. } => {
            format!("booting (attempt {attempt}, {phase})")
        }
        LifecycleState::Running { attempt, .. } => match snapshot.children_down().as_slice() {
            [] => format!("running (attempt {attempt})"),
            down => format!(
                "running (attempt {attempt}), not ready: child {} down",
                down.join(", ")
            ),
        },
        LifecycleState::Failed {
            report,
            budget_spent,
            retry,
            ..
        } => {
            let retry = match budget_spent {
                Some(spent) => format!("held: {}", spent.reason),
                None => retry_name(retry),
            };
            // A runtime that booted and then ended failed after its boot,
            // not in it: its error says so ("the runtime ended: …").
            if report.phase == steadfast_protocol::lifecycle::Phase::RUN {
                format!("failed: {} (retry: {retry})", report.error)
            } else {
                format!(
                    "failed in {}: {} (retry: {retry})",
                    report.phase, report.error
                )
            }
        }
        LifecycleState::Stopped { reason, .. } => format!("stopped ({})", reason.name()),
        LifecycleState::Wedged { cause, .. } => format!("wedged: {cause}"),
        LifecycleState::Draining { then, .. } => format!("draining (then {})", then.name()),
        other => other.name().to_owned(),
    }
}

fn retry_name(retry: &steadfast_protocol::lifecycle::RetryClass) -> String {
    match retry {
        steadfast_protocol::lifecycle::RetryClass::Backoff { delay_ms, .. } => {
            format!("in {delay_ms} ms")
        }
        steadfast_protocol::lifecycle::RetryClass::Hold => "when the config changes".to_owned(),
    }
}

/// What [`run_with`] does besides systemd.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct DaemonOptions {
    /// Answer SIGTERM / SIGINT (exit halt) and SIGHUP (reload) — on by
    /// default. Off, the process's signal dispositions are left alone: for
    /// an embedding that handles signals itself, or a test that runs a
    /// daemon inside a process shared with other tests (a handler, once
    /// installed, stays for the process's life).
    pub signals: bool,
    /// Serve the control plane on the data directory's control socket
    /// (off by default).
    pub control_socket: bool,
    /// Serve the control plane on this TCP address too, to clients that
    /// present the token in the file (off by default).
    pub control_tcp: Option<(SocketAddr, PathBuf)>,
    /// Create the token file (mode 0600, a fresh random token) when it
    /// does not exist.
    pub create_token: bool,
    /// Serve the control plane over TLS 1.3 on this address too (off by
    /// default; the cargo feature `tls`); its files are re-read at each
    /// reload.
    #[cfg(feature = "tls")]
    pub control_tls: Option<(SocketAddr, crate::control::TlsServerConfig)>,
    /// Log to stderr through a `tracing-subscriber` filtered by `RUST_LOG`
    /// (default `info`) — on by default, and only if the application has
    /// not installed a subscriber of its own; see [`init_logging`].
    pub logging: bool,
    /// How the log lines are written (plain by default).
    pub log_format: LogFormat,
    /// Serve `GET /metrics` (OpenMetrics text) on this address (off by
    /// default; use a loopback address).
    pub metrics_http: Option<SocketAddr>,
}

impl DaemonOptions {
    /// The defaults: signals answered, no control socket, no TCP.
    #[must_use]
    pub const fn new() -> Self {
        Self {
            signals: true,
            control_socket: false,
            control_tcp: None,
            create_token: false,
            #[cfg(feature = "tls")]
            control_tls: None,
            logging: true,
            log_format: LogFormat::Plain,
            metrics_http: None,
        }
    }

    /// Serve the supervisor's metrics over HTTP at `addr` (`GET /metrics`,
    /// OpenMetrics text): a loopback address such as `127.0.0.1:9464`, for
    /// a Prometheus on the same machine (the endpoint does not
    /// authenticate).
    #[must_use]
    pub const fn metrics_http(mut self, addr: SocketAddr) -> Self {
        self.metrics_http = Some(addr);
        self
    }

    /// Write the log as plain lines or JSON objects ([`LogFormat`]).
    #[must_use]
    pub const fn log_format(mut self, format: LogFormat) -> Self {
        self.log_format = format;
        self
    }

    /// Install (or not) the default log output.
    #[must_use]
    pub const fn logging(mut self, on: bool) -> Self {
        self.logging = on;
        self
    }

    /// Answer (or not) SIGTERM, SIGINT and SIGHUP.
    #[must_use]
    pub const fn signals(mut self, on: bool) -> Self {
        self.signals = on;
        self
    }

    /// Serve (or not) the control socket.
    #[must_use]
    pub const fn control_socket(mut self, on: bool) -> Self {
        self.control_socket = on;
        self
    }

    /// Serve the control plane on TCP at `addr` (use a loopback address
    /// such as `127.0.0.1:7433`: the token handshake does not encrypt, see
    /// [`crate::control::auth`]) to clients presenting the token held in
    /// `token_file` (mode 0600, owned by the daemon's user).
    #[must_use]
    pub fn control_tcp(mut self, addr: SocketAddr, token_file: impl Into<PathBuf>) -> Self {
        self.control_tcp = Some((addr, token_file.into()));
        self
    }

    /// Serve the control plane over TLS 1.3 at `addr` with `config`'s
    /// certificate, key and client authorization (mutual TLS, tokens;
    /// each with a role): see [`crate::control::TlsServerConfig`]. Any address may be
    /// used. SIGHUP and the `reload` method re-read its files. With the
    /// cargo feature `tls`.
    #[cfg(feature = "tls")]
    #[must_use]
    pub fn control_tls(
        mut self,
        addr: SocketAddr,
        config: crate::control::TlsServerConfig,
    ) -> Self {
        self.control_tls = Some((addr, config));
        self
    }

    /// Create the TCP token file if it does not exist yet.
    #[must_use]
    pub const fn create_token(mut self, on: bool) -> Self {
        self.create_token = on;
        self
    }
}

impl Default for DaemonOptions {
    fn default() -> Self {
        Self::new()
    }
}

/// The exit code of a daemon that SIGTERM or SIGINT drained (its service
/// manager stopped it), or that handed its data dir over to a replacement:
/// 0, clean to every manager. Under runit the service then does what `sv`
/// asked (`sv restart`: up again; `sv down`: down).
pub const EXIT_DRAINED: i32 = 0;

/// The exit code of `steadfastctl exit` (halt): an operator asked the
/// daemon to stay down. Not 0, so that a manager's own stop (SIGTERM,
/// [`EXIT_DRAINED`]) can be told from it: the shipped snippets leave 80
/// down (runit's `finish` runs `sv down`, supervisord's `exitcodes`,
/// systemd's `SuccessExitStatus=` and `RestartPreventExitStatus=`).
pub const EXIT_HALT: i32 = 80;

/// The exit code of `steadfastctl exit --relaunch`, and of a daemon whose
/// control socket cannot be served again: 75 (`EX_TEMPFAIL`), "start a
/// fresh process".
pub const EXIT_RELAUNCH: i32 = 75;

/// The exit code of a daemon that cannot start and never will as it is
/// configured: a refused data dir, a bad flag or command line, a corrupt
/// control file, a control plane that cannot be served as asked. 78
/// (`EX_CONFIG`): the shipped snippets do not restart it (runit: `sv
/// down`; systemd: `RestartPreventExitStatus=`; supervisord: failed
/// starts, then `FATAL`) until an operator fixes the cause and starts it.
pub const EXIT_NEVER_WORKS: i32 = 78;

/// The exit code of a daemon that could not start for a reason a later
/// start may not meet (another daemon holds the data dir, an I/O error
/// other than a refusal, a port in use): 1, which every manager treats as
/// a failure and restarts, like a crash.
pub const EXIT_START_FAILED: i32 = 1;

/// Why [`run_with`] ended, and so what the daemon's process should exit
/// with ([`ExitReason::code`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ExitReason {
    /// SIGTERM or SIGINT drained it: its service manager (or a terminal)
    /// stopped it. Exit [`EXIT_DRAINED`] (0).
    Drained,
    /// `exit` (halt), asked over the control plane or through the handle:
    /// stay down. Exit [`EXIT_HALT`] (80).
    Halt,
    /// `exit --relaunch`, or the control socket was lost: start a fresh
    /// process. Exit [`EXIT_RELAUNCH`] (75).
    Relaunch,
    /// A committed replacement took the data dir over; the successor
    /// runs. Exit [`EXIT_DRAINED`] (0).
    HandedOver,
}

impl ExitReason {
    /// The process exit code (`spec/exit-codes.md`).
    #[must_use]
    pub const fn code(self) -> i32 {
        match self {
            Self::Drained | Self::HandedOver => EXIT_DRAINED,
            Self::Halt => EXIT_HALT,
            Self::Relaunch => EXIT_RELAUNCH,
        }
    }

    /// The name it is logged by: `drained`, `halt`, `relaunch`,
    /// `handed_over`.
    #[must_use]
    pub const fn name(self) -> &'static str {
        match self {
            Self::Drained => "drained",
            Self::Halt => "halt",
            Self::Relaunch => "relaunch",
            Self::HandedOver => "handed_over",
        }
    }

    /// The exit intent the lifecycle ended on (a drain by a signal, and a
    /// handover, end as `halt`).
    #[must_use]
    pub const fn intent(self) -> ExitIntent {
        match self {
            Self::Relaunch => ExitIntent::Relaunch,
            Self::Drained | Self::Halt | Self::HandedOver => ExitIntent::Halt,
        }
    }
}

/// The old name of [`ExitReason`].
#[deprecated(since = "0.1.0", note = "renamed to `ExitReason`")]
pub type Ended = ExitReason;

/// The exit code for an I/O error that kept the daemon from starting:
/// [`EXIT_NEVER_WORKS`] for a refusal a restart would meet again (no
/// permission, no such file or directory, a read-only file system, an
/// address this host does not have), else [`EXIT_START_FAILED`].
fn io_exit_code(error: &std::io::Error) -> i32 {
    use std::io::ErrorKind as K;
    match error.kind() {
        K::PermissionDenied
        | K::NotFound
        | K::NotADirectory
        | K::IsADirectory
        | K::ReadOnlyFilesystem
        | K::InvalidInput
        | K::InvalidFilename
        | K::AddrNotAvailable => EXIT_NEVER_WORKS,
        _ => EXIT_START_FAILED,
    }
}

fn control_exit_code(error: &crate::control::ControlError) -> i32 {
    use crate::control::ControlError as E;
    match error {
        E::Io { source, .. } | E::Bind { source, .. } => io_exit_code(source),
        _ => EXIT_NEVER_WORKS,
    }
}

impl crate::embedding::SupervisorError {
    /// The exit code for a daemon whose supervisor could not be built
    /// (`spec/exit-codes.md`): [`EXIT_NEVER_WORKS`] for a data dir or
    /// control file steadfast refuses (a link, another user's or a
    /// world-writable directory, a corrupt journal or marker, no
    /// permission), [`EXIT_START_FAILED`] when a later start may succeed
    /// (another daemon holds the data dir, another I/O error, a failed
    /// handover).
    #[must_use]
    pub fn exit_code(&self) -> i32 {
        use steadfast_actors::control_dir::ControlDirError as C;
        match self {
            Self::ControlDir(
                C::Unsafe(_)
                | C::CorruptJournal { .. }
                | C::BadJournalHeader { .. }
                | C::BadMarker { .. },
            )
            | Self::DeclaredFile(_) => EXIT_NEVER_WORKS,
            Self::ControlDir(C::Io { source, .. }) => io_exit_code(source),
            _ => EXIT_START_FAILED,
        }
    }
}

/// Why [`run_with`] did not run the daemon: a control plane it was asked to
/// serve cannot be served. The supervisor was not started.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DaemonError {
    /// The control socket cannot be served.
    #[error("the control socket is not served, so the daemon does not start: {0}")]
    ControlSocket(#[source] crate::control::ControlError),
    /// The TCP control port cannot be served.
    #[error("the control port is not served, so the daemon does not start: {0}")]
    ControlPort(#[source] crate::control::ControlError),
    /// The metrics endpoint cannot be bound.
    #[error("the metrics endpoint {addr} is not served, so the daemon does not start: {source}")]
    MetricsHttp {
        /// The address asked for.
        addr: SocketAddr,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

impl DaemonError {
    /// The exit code for a daemon whose control plane could not be served
    /// (`spec/exit-codes.md`): [`EXIT_NEVER_WORKS`] unless a later start
    /// may succeed (a port in use, an I/O error other than a refusal:
    /// [`EXIT_START_FAILED`]).
    #[must_use]
    pub fn exit_code(&self) -> i32 {
        match self {
            Self::ControlSocket(error) | Self::ControlPort(error) => control_exit_code(error),
            Self::MetricsHttp { source, .. } => io_exit_code(source),
        }
    }
}

/// Serve the TCP control port `options` ask for, if any.
fn serve_tcp(
    options: &DaemonOptions,
    handle: &SupervisorHandle,
) -> Result<Option<crate::control::TcpServerGuard>, DaemonError> {
    let Some((addr, token_file)) = options.control_tcp.as_ref() else {
        return Ok(None);
    };
    let token = match crate::control::auth::Token::read_file(token_file) {
        Err(crate::control::auth::TokenError::Io { source, .. })
            if options.create_token && source.kind() == std::io::ErrorKind::NotFound =>
        {
            tracing::info!(path = %token_file.display(), "creating the control token file");
            crate::control::auth::Token::create_file(token_file)
        }
        read => read,
    };
    let served = token
        .map_err(crate::control::ControlError::from)
        .and_then(|token| {
            crate::control::serve_tcp_with(
                handle.clone(),
                *addr,
                token,
                crate::control::ServerLimits::default(),
            )
        });
    served.map(Some).map_err(DaemonError::ControlPort)
}

/// Run `supervisor` as the process's daemon, as most embeddings want it:
/// signals answered, systemd notified when `NOTIFY_SOCKET` is set, logging
/// on, and the control socket served (`steadfastctl --data-dir DIR`) —
/// [`run_with`] with `DaemonOptions::new().control_socket(true)`.
///
/// # Errors
/// As [`run_with`].
pub async fn run(
    supervisor: Supervisor,
    handle: SupervisorHandle,
) -> Result<ExitReason, DaemonError> {
    run_with(
        supervisor,
        handle,
        DaemonOptions::new().control_socket(true),
    )
    .await
}

/// [`run`], with options: `DaemonOptions::new().control_socket(true)` also
/// serves the control plane for `steadfastctl`.
///
/// # Errors
/// [`DaemonError`] when a control plane asked for cannot be served (say it
/// on stderr and exit with [`DaemonError::exit_code`]); the supervisor was
/// not run.
pub async fn run_with(
    supervisor: Supervisor,
    handle: SupervisorHandle,
    options: DaemonOptions,
) -> Result<ExitReason, DaemonError> {
    warm_blocking_pool();
    if options.logging {
        init_logging(options.log_format);
    }
    raise_descriptor_limit();
    let control = if options.control_socket {
        let path = supervisor.control_socket_path();
        let guard = crate::control::serve_unix(handle.clone(), &path).map_err(|error| {
            tracing::error!(path = %path.display(), %error, "the control socket is not served");
            DaemonError::ControlSocket(error)
        })?;
        steadfast_actors::launch::mark("control socket bound");
        Some(guard)
    } else {
        None
    };
    let control_tcp = serve_tcp(&options, &handle).inspect_err(|error| {
        let addr = options.control_tcp.as_ref().map(|(addr, _)| *addr);
        tracing::error!(?addr, %error, "the control port is not served");
    })?;
    #[cfg(feature = "tls")]
    let control_tls = match options.control_tls.clone() {
        None => None,
        Some((addr, config)) => Some(
            crate::control::serve_tls(handle.clone(), addr, config).map_err(|error| {
                tracing::error!(%addr, %error, "the TLS control port is not served");
                DaemonError::ControlPort(error)
            })?,
        ),
    };
    let metrics =
        match options.metrics_http {
            None => None,
            Some(addr) => Some(metrics_http::serve(addr, handle.clone()).await.map_err(
                |source| {
                    tracing::error!(%addr, error = %source, "the metrics endpoint is not served");
                    DaemonError::MetricsHttp { addr, source }
                },
            )?),
        };
    let ended = run_serving(supervisor, handle, control, control_tcp, options.signals).await;
    #[cfg(feature = "tls")]
    if let Some(tls) = control_tls {
        tls.shutdown(ANSWER_GRACE).await;
    }
    drop(metrics);
    Ok(ended)
}

/// How many blocking-pool threads a launch starts before it needs them.
const WARM_BLOCKING_THREADS: usize = 1;

/// Start the threads a launch's first blocking work runs on now, each
/// idle until its work comes, so that work (the first checkpoint's
/// `fdatasync` on a device thread, the config file's read beside it on
/// the runtime's blocking pool, then the identity) finds a thread already
/// running instead of waiting for one to be created and scheduled: a
/// thread's start-up, a few hundred microseconds to milliseconds on a
/// loaded 2-core machine, moves off the path from exec to `running` and
/// overlaps the control socket's bind and the supervision tree's start.
/// Each pool ends an idle thread after its keep-alive (10 s);
/// nothing waits for them. One device thread
/// (`steadfast_actors::device::warm`) and [`WARM_BLOCKING_THREADS`] of
/// tokio's, by a task that does nothing (best effort: a runtime whose pool
/// is capped runs it on the thread it has). On a current-thread runtime the
/// device work goes to tokio's pool (`steadfast_actors::device`), so no
/// device thread is started there.
fn warm_blocking_pool() {
    let multi_thread = tokio::runtime::Handle::try_current().is_ok_and(|handle| {
        matches!(
            handle.runtime_flavor(),
            tokio::runtime::RuntimeFlavor::MultiThread
        )
    });
    if multi_thread {
        steadfast_actors::device::warm(1);
    }
    for _ in 0..WARM_BLOCKING_THREADS {
        drop(tokio::task::spawn_blocking(|| ()));
    }
}

/// Raise the soft `RLIMIT_NOFILE` to the hard limit (see the module doc).
/// Best effort: a limit that cannot be raised is left as it is, and said
/// at debug.
fn raise_descriptor_limit() {
    use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};
    let limit = getrlimit(Resource::Nofile);
    // No hard limit (`RLIM_INFINITY`): Linux refuses it as a soft limit.
    let Some(hard) = limit.maximum else {
        return;
    };
    if limit.current.is_none_or(|soft| soft >= hard) {
        return;
    }
    let raised = Rlimit {
        current: Some(hard),
        maximum: Some(hard),
    };
    match setrlimit(Resource::Nofile, raised) {
        Ok(()) => tracing::debug!(
            from = limit.current,
            to = hard,
            "raised the soft descriptor limit to the hard limit"
        ),
        Err(error) => tracing::debug!(
            soft = limit.current,
            hard,
            %error,
            "the soft descriptor limit could not be raised"
        ),
    }
}

/// Run the daemon with the control planes already served (dropped when it
/// ends); with `signals`, TERM/INT/HUP are answered.
async fn run_serving(
    supervisor: Supervisor,
    handle: SupervisorHandle,
    control: Option<crate::control::ServerGuard>,
    control_tcp: Option<crate::control::TcpServerGuard>,
    signals: bool,
) -> ExitReason {
    // Whether the exit the daemon ends on was a signal's (SIGTERM,
    // SIGINT): held while a signal's `exit` is asked, so the end waits
    // for its answer before it reads it.
    let by_signal = std::sync::Arc::new(tokio::sync::Mutex::new(false));
    let signals = tokio::spawn({
        let handle = handle.clone();
        let by_signal = by_signal.clone();
        async move {
            if signals {
                answer_signals(handle, &by_signal).await;
            }
        }
    });
    let lost = tokio::spawn({
        let handle = handle.clone();
        let lost = control.as_ref().map(crate::control::ServerGuard::lost);
        async move {
            if let Some(lost) = lost {
                relaunch_when_lost(handle, lost).await;
            }
        }
    });
    let under_systemd = std::env::var_os("NOTIFY_SOCKET").is_some();
    SYSTEMD.on.store(under_systemd, Ordering::SeqCst);
    let notifier = tokio::spawn({
        let handle = handle.clone();
        async move {
            if !under_systemd {
                return;
            }
            let watchdog = sd_notify::watchdog_enabled()
                .map(|usec| tokio::spawn(watchdog(handle.clone(), usec / 2)));
            // Aborting this task aborts the watchdog with it.
            let _watchdog = AbortOnDrop(watchdog);
            notify_systemd(handle).await;
            std::future::pending::<()>().await;
        }
    });
    let _timeline = AbortOnDrop(
        steadfast_actors::launch::open().then(|| tokio::spawn(launch_timeline(handle.clone()))),
    );
    steadfast_actors::launch::mark("supervision tree starting");
    let mut handed_over = handle.handed_over();
    let intent = tokio::select! {
        intent = supervisor.run() => intent,
        ended = handed_over_then_reported(&handle, &mut handed_over) => {
            // A committed replacement: the successor owns the data dir. The
            // tree is left as it is (its runtime is already drained or
            // retired); the process must exit now, writing nothing more.
            tracing::info!(ended = ended.name(), "handed over to the replacement; exiting");
            signals.abort();
            lost.abort();
            notifier.abort();
            drop(control);
            tell_stopping("handed over");
            flush(FLUSH_PATIENCE).await;
            return ended;
        }
    };
    // A halt a signal asked for is a drain the service manager (or a
    // terminal) wanted; one an operator asked for says "stay down". An
    // exit asked during the drain replaces the intent (the lifecycle's
    // last word); a signal's exit that was accepted marks the halt as
    // drained.
    let drained = tokio::time::timeout(ANSWER_GRACE, by_signal.lock())
        .await
        .is_ok_and(|asked| *asked);
    let ended = match intent {
        ExitIntent::Relaunch => ExitReason::Relaunch,
        ExitIntent::Halt if drained => ExitReason::Drained,
        ExitIntent::Halt => ExitReason::Halt,
    };
    signals.abort();
    lost.abort();
    notifier.abort();
    // An answer in flight (the `exit` that ended the daemon) is written
    // before the socket goes.
    if let Some(control) = control {
        control.shutdown(ANSWER_GRACE).await;
    }
    // The port is closed by the time `run_with` returns.
    if let Some(tcp) = control_tcp {
        tcp.shutdown(ANSWER_GRACE).await;
    }
    // The socket is gone: so is the record it vouched for.
    handle.remove_status_record();
    // Once: the notifier sent it already when the daemon began to end,
    // unless the tree ended another way (the lifecycle died).
    tell_stopping("exiting");
    if SYSTEMD.on.load(Ordering::SeqCst) {
        flush(FLUSH_PATIENCE).await;
    }
    ended
}

/// How long a stopping daemon lets its control connections finish the
/// calls already in flight before it closes them.
const ANSWER_GRACE: Duration = Duration::from_millis(500);

/// Resolves once a committed replacement handed the daemon over and the
/// final report had a moment to be read by whoever follows it (at most
/// [`HANDOVER_LINGER`]), with how the process ends: handed over, or, when
/// a stop arrived and was forwarded to the successor, as that stop implies
/// (0 for a signal, 80 halt, 75 relaunch), once the successor has exited
/// and so released the data dir: a manager that stopped this pid and
/// starts the daemon again finds the data dir free
/// (`protocol/src/replacement.rs`, "A stop during a replace").
async fn handed_over_then_reported(
    handle: &SupervisorHandle,
    handed_over: &mut tokio::sync::watch::Receiver<bool>,
) -> ExitReason {
    if handed_over.wait_for(|over| *over).await.is_err() {
        std::future::pending::<()>().await;
    }
    let mut reports = handle.replace_reports();
    let ended = reports.wait_for(|r| r.as_ref().is_some_and(|r| r.ended.is_some()));
    let _ = tokio::time::timeout(HANDOVER_LINGER, ended).await;
    tokio::time::sleep(HANDOVER_LINGER).await;
    let side = handle.replace_side();
    let mut stops = side.stops.subscribe();
    let forwarded = match stops.wait_for(|s| s.in_flight == 0).await {
        Ok(seen) => seen.forwarded,
        Err(_) => None,
    };
    let Some(stop) = forwarded else {
        return ExitReason::HandedOver;
    };
    tracing::info!(
        ?stop,
        "a stop was forwarded to the successor; exiting once it has"
    );
    let mut gone = side.successor_gone.subscribe();
    let _ = gone.wait_for(|gone| *gone).await;
    match stop {
        Stop::Signal => ExitReason::Drained,
        Stop::Exit(ExitIntent::Halt) => ExitReason::Halt,
        Stop::Exit(ExitIntent::Relaunch) => ExitReason::Relaunch,
    }
}

/// How long [`run_with`] waits, at the end, for its last notifications to
/// be sent.
const FLUSH_PATIENCE: Duration = Duration::from_secs(1);

/// Aborts its task when dropped.
struct AbortOnDrop(Option<tokio::task::JoinHandle<()>>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        if let Some(task) = &self.0 {
            task.abort();
        }
    }
}

/// How long a handed-over daemon lingers so a `steadfastctl replace`
/// following it reads the outcome.
pub const HANDOVER_LINGER: Duration = Duration::from_millis(500);

/// SIGTERM, SIGINT and SIGHUP as caught: each stream holds a signal
/// that arrived since it was made until it is read.
struct Caught {
    term: tokio::signal::unix::Signal,
    int: tokio::signal::unix::Signal,
    hup: tokio::signal::unix::Signal,
}

impl Caught {
    fn install() -> std::io::Result<Self> {
        Ok(Self {
            term: signal(SignalKind::terminate())?,
            int: signal(SignalKind::interrupt())?,
            hup: signal(SignalKind::hangup())?,
        })
    }
}

/// The signals [`catch_signals`] caught before [`run_with`] answers them.
/// Process-wide, as signals are.
static CAUGHT: std::sync::Mutex<Option<Caught>> = std::sync::Mutex::new(None);

/// Catch SIGTERM, SIGINT and SIGHUP from now on, for [`run`] /
/// [`run_with`] to answer once the supervisor runs: call it first thing
/// in the daemon's `main`, inside the tokio runtime that will run
/// [`run_with`] (the first line of a `#[tokio::main]` body, or of the
/// `block_on` of a runtime built after the command line was parsed, as
/// the examples do), before the supervisor is built. A SIGTERM that arrives in between is then a
/// drained exit 0, never a death by the default disposition after the
/// run marker was written (which the next run would read as `crashed`).
/// A SIGHUP in between is answered as a reload once the daemon runs.
///
/// Changes the process's dispositions for its life (as [`run_with`]
/// does): not for a process shared with other work that answers signals
/// itself, nor with [`DaemonOptions::signals`] off. Outside a tokio
/// runtime, or when a handler cannot be installed, it catches nothing
/// and [`run_with`] installs the handlers itself (logging a failure).
pub fn catch_signals() {
    if tokio::runtime::Handle::try_current().is_err() {
        return;
    }
    steadfast_actors::launch::mark("runtime built, signals caught");
    let mut caught = CAUGHT
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if caught.is_none() {
        *caught = Caught::install().ok();
    }
}

async fn answer_signals(handle: SupervisorHandle, by_signal: &tokio::sync::Mutex<bool>) {
    let early = CAUGHT
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .take();
    let Some(Caught {
        mut term,
        mut int,
        mut hup,
    }) = early.map_or_else(Caught::install, Ok).ok()
    else {
        tracing::error!("signal handlers could not be installed");
        return;
    };
    loop {
        tokio::select! {
            _ = term.recv() => exit_on_signal(&handle, "SIGTERM", by_signal).await,
            _ = int.recv() => exit_on_signal(&handle, "SIGINT", by_signal).await,
            _ = hup.recv() => {
                tracing::info!("SIGHUP: re-reading the config");
                if let Err(error) = reload(&handle).await {
                    tracing::warn!(%error, "SIGHUP: the config was not re-read");
                }
            }
        }
    }
}

/// The control socket, removed or replaced, could not be bound again
/// (`ServerGuard::lost`): exit with `relaunch`, as a daemon that could not
/// bind it would not have started.
async fn relaunch_when_lost(
    handle: SupervisorHandle,
    mut lost: tokio::sync::watch::Receiver<Option<String>>,
) {
    let why = match lost.wait_for(Option::is_some).await {
        Ok(why) => why.clone().unwrap_or_default(),
        Err(_) => return,
    };
    tracing::error!(
        error = %why,
        "the control socket cannot be served again; exiting for a relaunch"
    );
    if let Err(error) = handle.exit(ExitIntent::Relaunch).await {
        tracing::warn!(%error, "exit for a relaunch refused");
    }
}

/// Exit (halt) after a drain, marking the end as drained by a signal
/// once the lifecycle accepted it.
async fn exit_on_signal(
    handle: &SupervisorHandle,
    name: &str,
    by_signal: &tokio::sync::Mutex<bool>,
) {
    tracing::info!("{name}: exiting after a drain");
    let mut asked = by_signal.lock().await;
    match handle.exit_by(Stop::Signal).await {
        Ok(_) => *asked = true,
        // `exit` is carried out even when its journal record is not
        // durable: the drain is still this signal's.
        Err(error @ CommandError::Durability(_)) => {
            *asked = true;
            tracing::warn!(%error, "{name}: exiting, but the exit was not journaled");
        }
        Err(error) => tracing::warn!(%error, "{name}: exit refused"),
    }
}

/// Whether this process's daemon talks to systemd (`NOTIFY_SOCKET` was set
/// when [`run_with`] began), and what it has told it so far. One a process:
/// `NOTIFY_SOCKET` is the process's, as are the signals.
struct Systemd {
    /// A daemon of this process is running under `NOTIFY_SOCKET`.
    on: AtomicBool,
    /// `READY=1` was sent (the first settled state was reached).
    ready: AtomicBool,
    /// `STOPPING=1` was sent.
    stopping: AtomicBool,
}

static SYSTEMD: Systemd = Systemd {
    on: AtomicBool::new(false),
    ready: AtomicBool::new(false),
    stopping: AtomicBool::new(false),
};

/// What the notification thread is handed.
enum Note {
    /// One datagram: the states, one a line.
    Send(String),
    /// Answer once everything handed over before is sent.
    Flush(tokio::sync::oneshot::Sender<()>),
}

/// The notification thread's queue. A datagram to `NOTIFY_SOCKET` is sent
/// with a blocking `send`, which waits while the receiver's queue is full
/// (a busy service manager): that wait happens on this thread of its own,
/// in order, never on a runtime worker.
fn notes() -> Option<&'static std::sync::mpsc::Sender<Note>> {
    static NOTES: std::sync::OnceLock<Option<std::sync::mpsc::Sender<Note>>> =
        std::sync::OnceLock::new();
    NOTES
        .get_or_init(|| {
            let (tx, rx) = std::sync::mpsc::channel::<Note>();
            let spawned = std::thread::Builder::new()
                .name("steadfast-sd-notify".into())
                .spawn(move || {
                    for note in rx {
                        match note {
                            Note::Send(message) => {
                                let states = [NotifyState::Custom(&message)];
                                if let Err(error) = sd_notify::notify(&states) {
                                    tracing::warn!(%error, "sd_notify failed");
                                }
                            }
                            Note::Flush(done) => {
                                let _ = done.send(());
                            }
                        }
                    }
                });
            match spawned {
                Ok(_) => Some(tx),
                Err(error) => {
                    tracing::warn!(%error, "no notification thread: systemd is not told");
                    None
                }
            }
        })
        .as_ref()
}

/// Send `states` (in order with every earlier one, never blocking the
/// caller); a failure is logged, never fatal. The one place a datagram is
/// built: each state is one line, its text's control characters escaped
/// ([`escape_controls`]), so a `STATUS=` carrying an error (which may hold
/// a config value) cannot add a `KEY=` line of its own (`MAINPID=`,
/// `WATCHDOG=trigger`). `notify::a_status_cannot_add_a_line_to_the_datagram`.
fn tell(states: &[NotifyState<'_>]) {
    let mut message = String::new();
    for (i, state) in states.iter().enumerate() {
        if i > 0 {
            message.push('\n');
        }
        message.push_str(&escape_controls(&state.to_string()));
    }
    if let Some(notes) = notes() {
        let _ = notes.send(Note::Send(message));
    }
}

/// Wait (at most `patience`) until every notification handed over so far
/// is sent: the process is about to exit.
async fn flush(patience: Duration) {
    let (done, sent) = tokio::sync::oneshot::channel();
    if let Some(notes) = notes()
        && notes.send(Note::Flush(done)).is_ok()
    {
        let _ = tokio::time::timeout(patience, sent).await;
    }
}

/// A state the daemon settles in at startup: `READY=1` follows the first
/// one. The daemon is up above its runtime once its runtime has come to
/// rest ([`LifecycleState::settlement`]: running, stopped, failed — held or
/// on backoff — or wedged); `STATUS=` says which. `exiting` is not one:
/// [`stopping`] says that instead.
const fn settled(lifecycle: &LifecycleState) -> bool {
    matches!(
        lifecycle.settlement(),
        Some(Settlement::Running | Settlement::Short)
    )
}

/// The daemon begins to end: a drain towards `exit`, or `exiting`.
const fn stopping(lifecycle: &LifecycleState) -> bool {
    match lifecycle {
        LifecycleState::Exiting { .. } => true,
        LifecycleState::Draining { then, .. } => {
            matches!(then, steadfast_protocol::lifecycle::AfterDrain::Exit { .. })
        }
        _ => false,
    }
}

/// Close the launch timeline at the first settled state (`running`, or
/// stopped, failed, wedged) the supervisor publishes, and say it at debug
/// on `steadfast::launch` (`steadfast_actors::launch`).
async fn launch_timeline(handle: SupervisorHandle) {
    let mut snapshots = handle.watch();
    loop {
        let settled_as = {
            let snapshot = snapshots.borrow_and_update();
            settled(&snapshot.lifecycle).then(|| status_line(&snapshot))
        };
        if let Some(state) = settled_as {
            steadfast_actors::launch::publish(format!("published: {state}"));
            return;
        }
        if snapshots.changed().await.is_err() {
            return;
        }
    }
}

/// Send `STOPPING=1` unless it was sent already.
fn tell_stopping(status: &str) {
    if SYSTEMD.on.load(Ordering::SeqCst) && !SYSTEMD.stopping.swap(true, Ordering::SeqCst) {
        tell(&[NotifyState::Stopping, NotifyState::Status(status)]);
    }
}

/// Re-read the config (SIGHUP, `steadfastctl reload`). Under systemd, once
/// `READY=1` was sent, it is framed for `Type=notify-reload`: `RELOADING=1`
/// with `MONOTONIC_USEC=` before, `READY=1` (and the `STATUS=`) once the
/// reload was answered.
async fn reload(handle: &SupervisorHandle) -> Result<Snapshot, CommandError> {
    let framed = SYSTEMD.on.load(Ordering::SeqCst) && SYSTEMD.ready.load(Ordering::SeqCst);
    if framed {
        match NotifyState::monotonic_usec_now() {
            Ok(now) => tell(&[NotifyState::Reloading, now]),
            Err(error) => tracing::warn!(%error, "no monotonic clock: RELOADING=1 not sent"),
        }
    }
    // The TLS transport's files are read again first (an error names
    // them: the reload is answered with it).
    let answer = handle.reload().await;
    if framed {
        let status = status_line(&handle.snapshot());
        tell(&[NotifyState::Ready, NotifyState::Status(&status)]);
    }
    answer
}

/// Carrying out `reload` ([`steadfast_protocol::control::cmd::Reload`]):
/// through [`reload`], so `steadfastctl reload` and SIGHUP say the same
/// `RELOADING=1` … `READY=1`. Here, not among `crate::control`'s command
/// files, since the control plane sits below the daemon.
impl Execute<cmd::Reload> for ControlService {
    async fn execute(self, _: cmd::Reload) -> Answer<cmd::Reload> {
        self.answer(reload(&self.handle).await)
    }
}

/// Tell systemd the daemon's state: `STATUS=` on every change, `READY=1`
/// at the first settled state, `EXTEND_TIMEOUT_USEC=` (the step's
/// deadline) each time a boot step starts or reports progress before
/// that (once for the latest, when several start before this task runs:
/// each extension counts from when it is sent), `STOPPING=1` (once) when
/// it begins to end.
async fn notify_systemd(handle: SupervisorHandle) {
    let mut snapshots = handle.watch();
    let mut deadlines = handle.step_deadlines();
    deadlines.mark_unchanged();
    let mut last_status = String::new();
    loop {
        {
            let snapshot = snapshots.borrow_and_update().clone();
            let status = status_line(&snapshot);
            let mut states = Vec::new();
            if status != last_status {
                states.push(NotifyState::Status(&status));
            }
            if settled(&snapshot.lifecycle) && !SYSTEMD.ready.swap(true, Ordering::SeqCst) {
                states.push(NotifyState::Ready);
            }
            if stopping(&snapshot.lifecycle) && !SYSTEMD.stopping.swap(true, Ordering::SeqCst) {
                states.push(NotifyState::Stopping);
            }
            if !states.is_empty() {
                tell(&states);
            }
            last_status = status;
        }
        // A step's deadline is announced before the snapshot that ends the
        // boot is published: when both are waiting, the extension goes
        // first, so it is never dropped for a `READY=1` that came later.
        tokio::select! {
            biased;
            changed = deadlines.changed() => {
                if changed.is_err() { return }
                let extend = *deadlines.borrow_and_update();
                if !SYSTEMD.ready.load(Ordering::SeqCst) {
                    let usec = u32::try_from(extend.as_micros()).unwrap_or(u32::MAX);
                    tell(&[NotifyState::ExtendTimeoutUsec(usec)]);
                }
            }
            changed = snapshots.changed() => if changed.is_err() { return },
        }
    }
}

/// `WATCHDOG=1` at half of `WATCHDOG_USEC`, each only after a round trip
/// through the Lifecycle actor ([`SupervisorHandle::ping`]) answered
/// within that half: a wedged or deadlocked tree is not pinged, so systemd
/// kills and restarts the process.
async fn watchdog(handle: SupervisorHandle, period: Duration) {
    let mut tick = tokio::time::interval(period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        match tokio::time::timeout(period, handle.ping()).await {
            Ok(Ok(_)) => tell(&[NotifyState::Watchdog]),
            Ok(Err(error)) => {
                tracing::warn!(%error, "watchdog: the lifecycle did not answer; not pinging");
            }
            Err(_) => tracing::warn!(
                ?period,
                "watchdog: the lifecycle did not answer in time; not pinging"
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    /// Warming is best effort: on a runtime whose blocking pool is capped at
    /// one thread, the warm-up tasks do not hold that thread, and blocking
    /// work spawned right after them still runs.
    #[test]
    fn warming_a_capped_blocking_pool_leaves_it_usable() {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .max_blocking_threads(1)
            .enable_time()
            .build()
            .expect("a runtime");
        let answer = runtime.block_on(async {
            super::warm_blocking_pool();
            let work = tokio::task::spawn_blocking(|| 7);
            tokio::time::timeout(Duration::from_secs(60), work).await
        });
        assert_eq!(answer.expect("blocking work ran").expect("no panic"), 7);
    }
}
