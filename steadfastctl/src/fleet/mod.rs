//! `steadfastctl --inventory FILE …`: one view of many daemons.
//!
//! The inventory is a TOML file of `[[daemon]]` entries, each a `name` and
//! exactly one transport: `data_dir`, `socket`, `tcp` (with `token_file`)
//! or `tls` (with `ca`, and `cert` + `key` or `token_file`). Relative paths
//! are the inventory file's (resolved against its directory).
//!
//! Invariants:
//! - A bad inventory is refused whole before anything is sent (exit 2):
//!   an unknown key, a duplicate name, an entry with no transport or two,
//!   a key of another transport, a malformed address; the error names the
//!   entry (its number and name) and the problem.
//!   `tests/it/fleet.rs::a_bad_inventory_is_refused_naming_the_entry`.
//! - A query (`status`, `probe`, `metrics`, `journal`) asks every daemon
//!   at once under ONE deadline (`--timeout`, default
//!   [`QUERY_TIMEOUT`]): a daemon that has not answered by then is
//!   reported as such, and the others as they answered; the lines come in
//!   inventory order. `tests/it/fleet.rs::a_daemon_that_never_answers_is_reported_at_the_deadline`.
//! - A command (`start`, `stop`, `restart`, `retry`, `exit`) goes only to the
//!   daemons named (`--only a,b`) or, with `--all`, to every one; without
//!   either, nothing is sent (exit 2). At most `--parallel` (default
//!   [`COMMAND_PARALLEL`]) calls are in flight at once, each with its own
//!   `--timeout`, as that many single `steadfastctl` calls would (with
//!   `--wait`: the boot it started followed to its end, within it).
//!   `tests/it/fleet.rs::commands_go_only_to_the_daemons_named`. A `start`
//!   of a daemon already running, a `stop` of one already stopped, is
//!   accepted (`start: already running`) unless `--strict`, as the single
//!   command's.
//! - `metrics` prints ONE OpenMetrics exposition ([`merge_metrics`](metrics::merge_metrics)): each
//!   family once, each sample with `daemon="NAME"`, one `# EOF`.
//!   `tests/it/fleet.rs::fleet_metrics_are_one_exposition`.
//! - [`endpoint_of`](inventory::endpoint_of) is the one place an inventory transport becomes a
//!   client [`Endpoint`](steadfast::control::Endpoint); a `tls` entry whose files cannot be read, or
//!   whose host does not resolve, makes that daemon alone unreachable.
//!
//! Exit codes (`status` as the single-daemon `status`, LSB's): 0 every
//! daemon running; 3 some answered and are not running; 4 some did not
//! answer (unreachable, or not by the deadline) — 4 wins over 3. `probe`:
//! 0 or 1. `metrics`, `journal`: 0 all answered, 1 some did not. Commands:
//! 0 all accepted, 3 some refused or (`--wait`) did not reach running
//! (every daemon reached), 1 some not reached or the call failed on the
//! way. Whenever it is not 0, stderr
//! names the daemons.
//!
//! The parts, each private: `inventory` (the file read and checked, an
//! entry's endpoint), `call` (the calls, under one deadline or each its
//! own), `report` (the table, `--json`, journals, verdicts and the exit
//! code), `metrics` (one exposition of many). This file holds what a call
//! asks and answers ([`Ask`], [`Answer`], [`Failure`]) and the run that
//! ties them together.

mod call;
mod inventory;
mod metrics;
mod report;
#[cfg(test)]
mod tests;

use std::fmt;
use std::num::NonZeroUsize;
use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

use steadfast::control::ClientError;
use steadfast::protocol::control::ReadCmd;
use steadfast::protocol::history::JournalAttempt;
use steadfast::protocol::snapshot::Snapshot;

use crate::cli::{Cli, Cmd, FleetArgs, ProbeKind};

use call::call_all;
use inventory::{Entry, InventoryError, read_inventory};
use report::report;

/// The deadline of a query to many daemons when `--timeout` is not given:
/// shorter than a single call's, since one silent daemon holds the whole
/// answer until then.
pub const QUERY_TIMEOUT: Duration = Duration::from_secs(10);

/// How many calls of a command are in flight at once by default.
pub const COMMAND_PARALLEL: usize = 8;

/// How many daemons a query asks at once by default (file descriptors stay
/// well under the usual limit of 1024).
pub const QUERY_PARALLEL: usize = 64;

/// What is asked of many daemons.
#[derive(Debug, Clone)]
enum Ask {
    /// `status`.
    Status,
    /// `probe ready|live`.
    Probe(ProbeKind),
    /// `metrics`.
    Metrics,
    /// `journal -n N`.
    Journal(u32),
    /// `start [--wait] [--strict]`.
    Start(bool, bool),
    /// `stop [--hold] [--strict]`.
    Stop(bool, bool),
    /// `restart [--force] [--wait]`.
    Restart(bool, bool),
    /// `retry [--wait]`.
    Retry(bool),
    /// `exit [--relaunch]`.
    Exit(bool),
    /// A command answered from the snapshot (`ping`, …): each daemon's
    /// answer, as the command prints it.
    Read(ReadCmd),
}

impl Ask {
    const fn name(&self) -> &'static str {
        match self {
            Self::Read(read) => read.name(),
            Self::Status => "status",
            Self::Probe(_) => "probe",
            Self::Metrics => "metrics",
            Self::Journal(_) => "journal",
            Self::Start(..) => "start",
            Self::Stop(..) => "stop",
            Self::Restart(..) => "restart",
            Self::Retry(_) => "retry",
            Self::Exit(_) => "exit",
        }
    }

    const fn is_command(&self) -> bool {
        matches!(
            self,
            Self::Start(..) | Self::Stop(..) | Self::Restart(..) | Self::Retry(_) | Self::Exit(_)
        )
    }

    /// `--wait`: the boot the command started is followed to its end.
    const fn waits(&self) -> bool {
        matches!(
            self,
            Self::Start(true, _) | Self::Restart(_, true) | Self::Retry(true)
        )
    }
}

/// What one daemon answered.
#[derive(Debug)]
enum Answer {
    /// A snapshot (`status`, `probe`, and every command's answer).
    Snapshot(Box<Snapshot>),
    /// A `start` or `stop` found the runtime already in its target state
    /// (not `--strict`): accepted, with the snapshot asked for after.
    Already(Box<Snapshot>),
    /// OpenMetrics text.
    Metrics(String),
    /// A command's answer from the snapshot: as text, and as JSON.
    Read {
        text: String,
        json: serde_json::Value,
    },
    /// The journal's attempts; `offline` when read from the file because
    /// no daemon answered (why).
    Journal {
        attempts: Vec<JournalAttempt>,
        offline: Option<String>,
    },
}

/// Why one daemon gave no answer.
#[derive(Debug)]
enum Failure {
    /// It was not reached, or the call failed on the way.
    Unreachable(String),
    /// It did not answer by the deadline.
    Deadline(String),
    /// It was reached and refused (a command's typed refusal).
    Refused(String),
}

impl Failure {
    fn of(error: &ClientError) -> Self {
        let text = one_line(&error.to_string());
        if error.is_refusal() {
            Self::Refused(text)
        } else if error.is_deadline() {
            Self::Deadline(text)
        } else {
            Self::Unreachable(text)
        }
    }

    fn text(&self) -> &str {
        match self {
            Self::Unreachable(t) | Self::Deadline(t) | Self::Refused(t) => t,
        }
    }

    const fn kind(&self) -> &'static str {
        match self {
            Self::Unreachable(_) => "unreachable",
            Self::Deadline(_) => "no_answer",
            Self::Refused(_) => "refused",
        }
    }
}

/// A multi-line message on one line (one line per daemon).
fn one_line(text: &str) -> String {
    text.trim_end()
        .lines()
        .map(str::trim)
        .collect::<Vec<_>>()
        .join(" / ")
}

/// `steadfastctl --inventory FILE COMMAND` (or one of the fleet's flags
/// without `--inventory`: a usage error).
pub async fn run(cli: &Cli) -> ExitCode {
    let usage = |error: &dyn fmt::Display| {
        crate::render::say(error);
        ExitCode::from(crate::EXIT_USAGE)
    };
    let Some(inventory) = &cli.fleet.inventory else {
        return usage(&"--only, --all and --parallel go with --inventory FILE");
    };
    if cli.data_dir.is_some()
        || cli.socket.is_some()
        || cli.tcp.is_some()
        || cli.tls.is_some()
        || cli.client_config.is_some()
    {
        return usage(
            &"--inventory names the daemons: it does not go with --data-dir, --socket, --tcp, --tls or --client-config",
        );
    }
    let ask = match &cli.command {
        Cmd::Status { history: None } => Ask::Status,
        Cmd::Status { history: Some(_) } => {
            return usage(&"--history does not go with --inventory (use `journal -n N`)");
        }
        Cmd::Probe { what } => Ask::Probe(*what),
        Cmd::Metrics => Ask::Metrics,
        Cmd::Journal { limit } => Ask::Journal(*limit),
        Cmd::Start {
            no_block, strict, ..
        } => Ask::Start(!*no_block, *strict),
        Cmd::Stop { hold, strict, .. } => Ask::Stop(*hold, *strict),
        Cmd::Restart {
            force, no_block, ..
        } => Ask::Restart(*force, !*no_block),
        Cmd::Retry { wait } => Ask::Retry(*wait),
        Cmd::Exit { relaunch } => Ask::Exit(*relaunch),
        Cmd::Read(read) => Ask::Read(read.clone()),
        other => {
            return usage(&format!(
                "{} does not go with --inventory (it does: status, probe, metrics, journal, \
                 start, stop, restart, retry, exit, {})",
                command_name(other),
                ReadCmd::NAMES.join(", ")
            ));
        }
    };
    let entries = match read_inventory(inventory) {
        Ok(entries) => entries,
        Err(error) => return usage(&error),
    };
    let chosen = match choose(&entries, &cli.fleet, inventory, &ask) {
        Ok(chosen) => chosen,
        Err(error) => return usage(&error),
    };
    let timeout = match cli.timeout {
        None if ask.is_command() => crate::DEFAULT_TIMEOUT,
        None => QUERY_TIMEOUT,
        Some(_) => match crate::connect::timeout_of(cli) {
            Ok(timeout) => timeout,
            Err(error) => return usage(&error),
        },
    };
    let parallel = cli.fleet.parallel.map_or(
        if ask.is_command() {
            COMMAND_PARALLEL
        } else {
            QUERY_PARALLEL
        },
        NonZeroUsize::get,
    );
    let replies = call_all(&chosen, &ask, timeout, parallel).await;
    report(&chosen, &replies, &ask, cli, timeout)
}

/// The subcommand's name, for a refusal.
fn command_name(cmd: &Cmd) -> &'static str {
    match cmd {
        Cmd::Status { .. } => "status",
        Cmd::Start { .. } => "start",
        Cmd::Stop { .. } => "stop",
        Cmd::Restart { .. } => "restart",
        Cmd::Retry { .. } => "retry",
        Cmd::Exit { .. } => "exit",
        Cmd::Watch { .. } => "watch",
        Cmd::Reload => "reload",
        Cmd::Probe { .. } => "probe",
        Cmd::Metrics => "metrics",
        Cmd::Journal { .. } => "journal",
        Cmd::Config(_) => "config",
        Cmd::Child(_) => "child",
        Cmd::Reinit { .. } => "reinit",
        Cmd::Replace { .. } => "replace",
        Cmd::Completions { .. } => "completions",
        Cmd::Man { .. } => "man",
        Cmd::Read(read) => read.name(),
    }
}

/// The daemons `--only` / `--all` choose, in inventory order. A command
/// with neither is refused; a query asks every daemon.
fn choose(
    entries: &[Entry],
    args: &FleetArgs,
    inventory: &Path,
    ask: &Ask,
) -> Result<Vec<Entry>, String> {
    if args.only.is_empty() {
        if ask.is_command() && !args.all {
            return Err(format!(
                "{} goes to many daemons only when they are named: give --only NAME[,NAME…] or \
                 --all; nothing was sent",
                ask.name()
            ));
        }
        return Ok(entries.to_vec());
    }
    for name in &args.only {
        if !entries.iter().any(|e| &e.name == name) {
            return Err(InventoryError::UnknownName {
                path: inventory.to_owned(),
                name: name.clone(),
                known: entries
                    .iter()
                    .map(|e| e.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
            }
            .to_string());
        }
    }
    Ok(entries
        .iter()
        .filter(|e| args.only.contains(&e.name))
        .cloned()
        .collect())
}
