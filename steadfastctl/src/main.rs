//! `steadfastctl`: the control plane's command line (`spec/control.md`).
//!
//! It owns the operator's view: which daemon to call (`--socket`, or the
//! socket under `--data-dir`, a TCP port with `--tcp` and its
//! `--token-file`, or a TLS port with `--tls`, `--ca` and `--cert`/`--key`
//! or `--token-file`, also from `--client-config FILE`), how a snapshot reads to a human (like
//! `systemctl status`) or a script (`--json`), and the exit codes:
//! 0 accepted (and a `start` or `stop` that finds the runtime already
//! there, unless `--strict`), 1 cannot connect (or the call failed on the
//! way), 2 usage (clap's), 3 refused (the reason on stderr), 4 a
//! replacement failed, 5 `--timeout` passed while `watch --until` or `stop`
//! waited. `status`
//! answers like `systemctl status` and LSB: 0 running, 3 not running, 4
//! unknown (no daemon answered). `probe` is silent unless `--verbose` and
//! exits 0 or 1 only. `--inventory FILE` asks many daemons at once
//! (`fleet.rs`, which states its own exit codes).
//!
//! Times are shown absolute (RFC 3339, local or `--utc`) beside relative
//! ones; every `--json` answer carries `schema`; `journal` reads the journal
//! file itself (read-only) when no daemon answers.
//!
//! The parts, each private: `cli.rs` (the clap definition and the one
//! parse), `connect.rs` (which daemon, and
//! the dial), `run.rs` (each command's execution and exit code), `wait.rs`
//! (waiting for a boot to settle, and `watch`), `render.rs` (text and `--json` output),
//! `record.rs` (the status record read without a round trip), `fleet.rs`
//! (`--inventory`), `out.rs` (writing to stdout/stderr). This file holds
//! the exit codes, what a failed call ends as (`fail`, `already`), the
//! parse (`parse`), and `main`: the parts use it, and none of
//! them uses a part that uses it back (`scripts/import_cycles.py`).
//!
//! Checked by `tests/it/ctl.rs`, which runs this binary against a real
//! in-process supervisor, and `tests/it/operator_view.rs` against real kvd.

use std::process::ExitCode;

use steadfast::control::ClientError;

use std::time::Duration;

mod cli;
mod connect;
// A client in its own process, under real deadlines: the simulation runs none of it.
#[allow(clippy::disallowed_methods)]
mod fleet;
mod out;
mod record;
// Renders ages against the real wall clock: the simulation runs none of it.
#[allow(clippy::disallowed_methods)]
mod render;
mod run;
mod wait;

use cli::{Cli, generated};
use out::{errln, say};
use run::{from_record, run};

/// Exit code of a replacement that failed.
const EXIT_REPLACE_FAILED: u8 = 4;

const EXIT_CANNOT_CONNECT: u8 = 1;
const EXIT_USAGE: u8 = 2;
const EXIT_REFUSED: u8 = 3;
/// `status`: the daemon answered and its runtime is not running (LSB's
/// and `systemctl status`'s "not running").
const EXIT_NOT_RUNNING: u8 = 3;
/// `status`: no daemon answered (LSB's "unknown").
const EXIT_UNKNOWN: u8 = 4;
/// `watch --until`, `stop`: `--timeout` passed first.
const EXIT_TIMED_OUT: u8 = 5;
/// What `--timeout` is when not given.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(120);
/// The environment variable that names the data directory when neither
/// `--data-dir` nor `--socket` (nor `--tcp`) is given.
const DATA_DIR_ENV: &str = "STEADFAST_DATA_DIR";

fn main() -> ExitCode {
    let cli = parse();
    if let Some(code) = generated(&cli.command) {
        return code;
    }
    if let Some(code) = from_record(&cli) {
        return code;
    }
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            errln!("steadfastctl: cannot start a runtime: {error}");
            return ExitCode::from(EXIT_CANNOT_CONNECT);
        }
    };
    let code = runtime.block_on(run(cli));
    // The process ends here, and its exit closes the connection and frees
    // everything: shutting the runtime down first (its drivers and the
    // connection) is work the exit does anyway, ~40–80 µs
    // of a ~2 ms command.
    std::mem::forget(runtime);
    code
}

/// The state a `start` or `stop` asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Already {
    /// `start`: the runtime running.
    Running,
    /// `stop`: the runtime stopped.
    Stopped,
}

impl Already {
    /// The state's word, as a status line says it.
    pub const fn name(self) -> &'static str {
        match self {
            Self::Running => "running",
            Self::Stopped => "stopped",
        }
    }
}

/// Whether `error` is the lifecycle's refusal of a command whose target
/// state the runtime is already in: a `start` while running
/// (`runtime_running`), a `stop` while stopped (`runtime_not_running` in
/// `stopped`). Every other refusal (a `stop` while resolving, a `start`
/// while booting, draining or failed) is not.
pub fn already(error: &ClientError, target: Already) -> bool {
    use steadfast::protocol::lifecycle::RefusedBecause;
    error.refused().is_some_and(|refused| match target {
        Already::Running => refused.reason == RefusedBecause::RuntimeRunning,
        Already::Stopped => {
            refused.reason == RefusedBecause::RuntimeNotRunning && refused.state == "stopped"
        }
    })
}

/// A call that failed: said on stderr; exit 3 for a refusal, 4 for no
/// answer.
pub fn fail(error: &ClientError) -> ExitCode {
    say(error);
    if error.is_refusal() {
        ExitCode::from(EXIT_REFUSED)
    } else {
        ExitCode::from(EXIT_CANNOT_CONNECT)
    }
}

/// The command line ([`cli::parse_from`]); a refusal, `--help` and
/// `--version` print as clap prints them and exit (2 for a usage error).
fn parse() -> Cli {
    cli::parse_from(std::env::args_os()).unwrap_or_else(|error| error.exit())
}
