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
//! - `metrics` prints ONE OpenMetrics exposition ([`merge_metrics`]): each
//!   family once, each sample with `daemon="NAME"`, one `# EOF`.
//!   `tests/it/fleet.rs::fleet_metrics_are_one_exposition`.
//! - [`endpoint_of`] is the one place an inventory transport becomes a
//!   client [`Endpoint`]; a `tls` entry whose files cannot be read, or
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

use std::collections::BTreeMap;
use std::fmt;
use std::net::SocketAddr;
use std::num::NonZeroUsize;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use steadfast::Hold;
use steadfast::control::{ClientError, ControlClient, Endpoint, TlsClient, Token};
use steadfast::protocol::control::cmd;
use steadfast::protocol::history::JournalAttempt;
use steadfast::protocol::lifecycle::LifecycleState;
use steadfast::protocol::snapshot::{SCHEMA, Snapshot};
use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tokio::time::Instant;

use crate::cli::{Cli, Cmd, FleetArgs, ProbeKind};
use crate::out::{self, errln, escape, out, outln};

/// The deadline of a query to many daemons when `--timeout` is not given:
/// shorter than a single call's, since one silent daemon holds the whole
/// answer until then.
pub const QUERY_TIMEOUT: Duration = Duration::from_secs(10);

/// How many calls of a command are in flight at once by default.
pub const COMMAND_PARALLEL: usize = 8;

/// How many daemons a query asks at once by default (file descriptors stay
/// well under the usual limit of 1024).
pub const QUERY_PARALLEL: usize = 64;

/// The keys an inventory entry may hold.
const KEYS: [&str; 9] = [
    "name",
    "data_dir",
    "socket",
    "tcp",
    "token_file",
    "tls",
    "ca",
    "cert",
    "key",
];

/// Where one daemon of the inventory is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// Its data directory (the socket under it).
    DataDir(PathBuf),
    /// Its control socket.
    Socket(PathBuf),
    /// Its TCP control port and token file.
    Tcp {
        /// The address.
        addr: SocketAddr,
        /// The token file.
        token_file: PathBuf,
    },
    /// Its TLS control port, with the CA that signs the
    /// daemon's certificate and this client's certificate and key (or a
    /// token to present inside the session).
    Tls {
        /// `host:port` (the host is the name the certificate must carry).
        addr: String,
        /// The CA's certificate (PEM).
        ca: PathBuf,
        /// This client's certificate (PEM), with `key`.
        cert: Option<PathBuf>,
        /// This client's private key (PEM), with `cert`.
        key: Option<PathBuf>,
        /// A token to present inside the session instead of a certificate.
        token_file: Option<PathBuf>,
    },
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::DataDir(dir) => write!(f, "{}", dir.display()),
            Self::Socket(path) => write!(f, "{}", path.display()),
            Self::Tcp { addr, .. } => write!(f, "tcp:{addr}"),
            Self::Tls { addr, .. } => write!(f, "tls:{addr}"),
        }
    }
}

impl Target {
    const fn transport(&self) -> &'static str {
        match self {
            Self::DataDir(_) => "data_dir",
            Self::Socket(_) => "socket",
            Self::Tcp { .. } => "tcp",
            Self::Tls { .. } => "tls",
        }
    }
}

/// One daemon of the inventory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// Its name (unique in the inventory; no whitespace or comma).
    pub name: String,
    /// Where it is.
    pub target: Target,
}

/// Why an inventory cannot be used. Nothing is sent to any daemon then.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InventoryError {
    /// The file cannot be read.
    #[error("cannot read the inventory {path}: {error}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        error: String,
    },
    /// The file is not TOML.
    #[error("the inventory {path} is not TOML: {error}")]
    Syntax {
        /// The file.
        path: PathBuf,
        /// The parser's message (with the line).
        error: String,
    },
    /// The file's top level is not only `[[daemon]]` entries.
    #[error("the inventory {path}: {problem} (an inventory is `[[daemon]]` entries)")]
    Shape {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        problem: String,
    },
    /// One entry is wrong.
    #[error("the inventory {path}: daemon #{index} ({name}): {problem}")]
    Entry {
        /// The file.
        path: PathBuf,
        /// The entry's number, from 1.
        index: usize,
        /// Its name (quoted), or `no name`.
        name: String,
        /// What is wrong.
        problem: String,
    },
    /// Two entries share a name.
    #[error("the inventory {path}: daemons #{first} and #{index} are both named {name:?}")]
    Duplicate {
        /// The file.
        path: PathBuf,
        /// The first entry of that name.
        first: usize,
        /// The second.
        index: usize,
        /// The name.
        name: String,
    },
    /// `--only` names a daemon the inventory does not list.
    #[error("--only {name}: the inventory {path} lists no daemon of that name (it lists: {known})")]
    UnknownName {
        /// The file.
        path: PathBuf,
        /// The name given.
        name: String,
        /// The names it lists.
        known: String,
    },
}

/// Read and check the inventory at `path`.
///
/// # Errors
/// [`InventoryError`], naming the entry and the problem.
pub fn read_inventory(path: &Path) -> Result<Vec<Entry>, InventoryError> {
    let text = crate::connect::read_own_file(path).map_err(|error| InventoryError::Read {
        path: path.to_owned(),
        error,
    })?;
    let base = path.parent().unwrap_or_else(|| Path::new(""));
    parse_inventory(&text, path, base)
}

/// Parse inventory `text` (from `path`; relative paths are `base`'s).
///
/// # Errors
/// As [`read_inventory`].
pub fn parse_inventory(text: &str, path: &Path, base: &Path) -> Result<Vec<Entry>, InventoryError> {
    let shape = |problem: String| InventoryError::Shape {
        path: path.to_owned(),
        problem,
    };
    let table: toml::Table = text
        .parse()
        .map_err(|e: toml::de::Error| InventoryError::Syntax {
            path: path.to_owned(),
            error: e.to_string().trim_end().to_owned(),
        })?;
    if let Some(key) = table.keys().find(|k| *k != "daemon") {
        return Err(shape(format!("unknown top-level key `{key}`")));
    }
    let daemons = match table.get("daemon") {
        None => return Err(shape("it lists no daemon".to_owned())),
        Some(toml::Value::Array(daemons)) => daemons,
        Some(_) => return Err(shape("`daemon` is not an array of tables".to_owned())),
    };
    if daemons.is_empty() {
        return Err(shape("it lists no daemon".to_owned()));
    }
    let mut entries = Vec::with_capacity(daemons.len());
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    for (i, daemon) in daemons.iter().enumerate() {
        let index = i + 1;
        let entry = parse_entry(daemon, base).map_err(|(name, problem)| InventoryError::Entry {
            path: path.to_owned(),
            index,
            name: name.map_or_else(|| "no name".to_owned(), |n| format!("{n:?}")),
            problem,
        })?;
        if let Some(&first) = seen.get(&entry.name) {
            return Err(InventoryError::Duplicate {
                path: path.to_owned(),
                first,
                index,
                name: entry.name,
            });
        }
        seen.insert(entry.name.clone(), index);
        entries.push(entry);
    }
    Ok(entries)
}

/// One `[[daemon]]` entry, or its name (if it has a usable one) and what is
/// wrong with it.
fn parse_entry(value: &toml::Value, base: &Path) -> Result<Entry, (Option<String>, String)> {
    let Some(table) = value.as_table() else {
        return Err((None, "not a table (write it as `[[daemon]]`)".to_owned()));
    };
    let name = match table.get("name") {
        Some(toml::Value::String(name)) => Some(name.clone()),
        _ => None,
    };
    let fail = |problem: String| (name.clone(), problem);
    if let Some(key) = table.keys().find(|k| !KEYS.contains(&k.as_str())) {
        return Err(fail(format!(
            "unknown key `{key}` (an entry holds: {})",
            KEYS.join(", ")
        )));
    }
    let string = |key: &str| -> Result<Option<String>, (Option<String>, String)> {
        match table.get(key) {
            None => Ok(None),
            Some(toml::Value::String(s)) if s.is_empty() => Err(fail(format!("`{key}` is empty"))),
            Some(toml::Value::String(s)) => Ok(Some(s.clone())),
            Some(other) => Err(fail(format!(
                "`{key}` must be a string (found: {})",
                other.type_str()
            ))),
        }
    };
    let file = |key: &str| -> Result<Option<PathBuf>, (Option<String>, String)> {
        Ok(string(key)?.map(|s| base.join(s)))
    };
    let Some(name) = string("name")? else {
        return Err(fail("no `name`".to_owned()));
    };
    if name
        .chars()
        .any(|c| c.is_whitespace() || c.is_control() || c == ',')
    {
        return Err(fail(
            "`name` may not hold whitespace or a comma (`--only` takes names comma-separated)"
                .to_owned(),
        ));
    }
    let transports: Vec<&str> = ["data_dir", "socket", "tcp", "tls"]
        .into_iter()
        .filter(|k| table.contains_key(*k))
        .collect();
    let transport = match transports.as_slice() {
        [] => {
            return Err(fail(
                "no transport: give one of `data_dir`, `socket`, `tcp` (with `token_file`), `tls`"
                    .to_owned(),
            ));
        }
        [one] => *one,
        several => {
            return Err(fail(format!(
                "{} transports ({}): give exactly one",
                several.len(),
                several
                    .iter()
                    .map(|k| format!("`{k}`"))
                    .collect::<Vec<_>>()
                    .join(", ")
            )));
        }
    };
    let only_with = |keys: &[&str], with: &str| -> Result<(), (Option<String>, String)> {
        match keys.iter().find(|k| table.contains_key(**k)) {
            Some(key) => Err(fail(format!(
                "`{key}` goes only with `{with}`, and this entry is `{transport}`"
            ))),
            None => Ok(()),
        }
    };
    let target = match transport {
        "data_dir" | "socket" => {
            only_with(&["token_file"], "tcp` or `tls")?;
            only_with(&["ca", "cert", "key"], "tls")?;
            let path = file(transport)?.unwrap_or_default();
            if transport == "data_dir" {
                Target::DataDir(path)
            } else {
                Target::Socket(path)
            }
        }
        "tcp" => {
            only_with(&["ca", "cert", "key"], "tls")?;
            let text = string("tcp")?.unwrap_or_default();
            let addr = text
                .parse::<SocketAddr>()
                .map_err(|e| fail(format!("`tcp = {text:?}` is not an IP:PORT address: {e}")))?;
            let Some(token_file) = file("token_file")? else {
                return Err(fail(
                    "`tcp` needs `token_file` (the daemon's token)".to_owned(),
                ));
            };
            Target::Tcp { addr, token_file }
        }
        _ => {
            let addr = string("tls")?.unwrap_or_default();
            match addr.rsplit_once(':') {
                Some((host, port)) if !host.is_empty() && port.parse::<u16>().is_ok() => {}
                _ => {
                    return Err(fail(format!("`tls = {addr:?}` is not a HOST:PORT address")));
                }
            }
            let Some(ca) = file("ca")? else {
                return Err(fail(
                    "`tls` needs `ca` (the CA that signs the daemon's certificate)".to_owned(),
                ));
            };
            let (cert, key, token_file) = (file("cert")?, file("key")?, file("token_file")?);
            match (&cert, &key) {
                (Some(_), None) => return Err(fail("`cert` needs `key`".to_owned())),
                (None, Some(_)) => return Err(fail("`key` needs `cert`".to_owned())),
                (None, None) if token_file.is_none() => {
                    return Err(fail(
                        "`tls` needs `cert` and `key` (or a `token_file`) to authenticate"
                            .to_owned(),
                    ));
                }
                _ => {}
            }
            Target::Tls {
                addr,
                ca,
                cert,
                key,
                token_file,
            }
        }
    };
    Ok(Entry { name, target })
}

/// The one place an inventory transport becomes a client's [`Endpoint`]
/// (reading a token file, a TLS entry's CA, certificate and key on the
/// way). A `tls` entry's host is the name the daemon's certificate must
/// carry (an IP address, or a DNS name looked up here).
///
/// # Errors
/// Why this daemon cannot be called (a token or key file that cannot be
/// read or is too open, a certificate that does not parse, a host that
/// does not resolve).
pub async fn endpoint_of(target: &Target) -> Result<Endpoint, String> {
    match target {
        Target::DataDir(dir) => Ok(Endpoint::Unix(steadfast::control::socket_path(dir))),
        Target::Socket(path) => Ok(Endpoint::Unix(path.clone())),
        Target::Tcp { addr, token_file } => Token::read_file(token_file)
            .map(|token| Endpoint::Tcp { addr: *addr, token })
            .map_err(|e| e.to_string()),
        Target::Tls {
            addr,
            ca,
            cert,
            key,
            token_file,
        } => {
            let token = token_file
                .as_ref()
                .map(Token::read_file)
                .transpose()
                .map_err(|e| e.to_string())?;
            let cert_and_key = cert.as_deref().zip(key.as_deref());
            let tls = TlsClient::from_files(ca, cert_and_key).map_err(|e| e.to_string())?;
            let host = tls_host(addr);
            let resolved = tokio::net::lookup_host(addr.as_str())
                .await
                .map_err(|e| format!("cannot resolve {addr}: {e}"))?
                .next()
                .ok_or_else(|| format!("{addr} resolves to no address"))?;
            Ok(Endpoint::Tls {
                addr: resolved,
                server_name: host.to_owned(),
                tls,
                token,
            })
        }
    }
}

/// The host of a `host:port` (an IPv6 address without its brackets): the
/// name a daemon's certificate must carry.
fn tls_host(addr: &str) -> &str {
    let host = addr.rsplit_once(':').map_or(addr, |(host, _)| host);
    host.strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host)
}

/// What is asked of many daemons.
#[derive(Debug, Clone, Copy)]
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
}

impl Ask {
    const fn name(self) -> &'static str {
        match self {
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

    const fn is_command(self) -> bool {
        matches!(
            self,
            Self::Start(..) | Self::Stop(..) | Self::Restart(..) | Self::Retry(_) | Self::Exit(_)
        )
    }

    /// `--wait`: the boot the command started is followed to its end.
    const fn waits(self) -> bool {
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
        Cmd::Start { wait, strict } => Ask::Start(*wait, *strict),
        Cmd::Stop { hold, strict } => Ask::Stop(*hold, *strict),
        Cmd::Restart { force, wait } => Ask::Restart(*force, *wait),
        Cmd::Retry { wait } => Ask::Retry(*wait),
        Cmd::Exit { relaunch } => Ask::Exit(*relaunch),
        other => {
            return usage(&format!(
                "{} does not go with --inventory (it does: status, probe, metrics, journal, \
                 start, stop, restart, retry, exit)",
                command_name(other)
            ));
        }
    };
    let entries = match read_inventory(inventory) {
        Ok(entries) => entries,
        Err(error) => return usage(&error),
    };
    let chosen = match choose(&entries, &cli.fleet, inventory, ask) {
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
    let replies = call_all(&chosen, ask, timeout, parallel).await;
    report(&chosen, &replies, ask, cli, timeout)
}

/// The subcommand's name, for a refusal.
const fn command_name(cmd: &Cmd) -> &'static str {
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
        Cmd::Reinit { .. } => "reinit",
        Cmd::Replace { .. } => "replace",
        Cmd::Completions { .. } => "completions",
        Cmd::Man { .. } => "man",
    }
}

/// The daemons `--only` / `--all` choose, in inventory order. A command
/// with neither is refused; a query asks every daemon.
fn choose(
    entries: &[Entry],
    args: &FleetArgs,
    inventory: &Path,
    ask: Ask,
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

/// Call every chosen daemon, at most `parallel` at once: a query under one
/// deadline `timeout` from now, a command with `timeout` for each call.
/// The replies in the entries' order.
async fn call_all(
    entries: &[Entry],
    ask: Ask,
    timeout: Duration,
    parallel: usize,
) -> Vec<Result<Answer, Failure>> {
    let deadline = Instant::now() + timeout;
    let permits = Arc::new(Semaphore::new(parallel));
    let mut calls = JoinSet::new();
    for (i, entry) in entries.iter().enumerate() {
        let target = entry.target.clone();
        let permits = Arc::clone(&permits);
        calls.spawn(async move {
            let reply = if ask.is_command() {
                // A command waits its turn, then has its own `timeout`.
                match permits.acquire_owned().await {
                    Ok(_permit) => {
                        match tokio::time::timeout(timeout, call(&target, ask, timeout)).await {
                            Ok(reply) => reply,
                            Err(_) => Err(Failure::Deadline(format!(
                                "no answer within {} s{} (a command the daemon took goes on; \
                                 `status` says where it is)",
                                timeout.as_secs_f64(),
                                if ask.waits() {
                                    ", or its boot did not settle"
                                } else {
                                    ""
                                }
                            ))),
                        }
                    }
                    Err(_) => Err(Failure::Unreachable("not sent".to_owned())),
                }
            } else {
                let within = async {
                    let _permit = permits.acquire_owned().await.ok();
                    let left = deadline.saturating_duration_since(Instant::now());
                    call(&target, ask, left).await
                };
                match tokio::time::timeout_at(deadline, within).await {
                    Ok(reply) => reply,
                    Err(_) => Err(Failure::Deadline(format!(
                        "no answer within the deadline ({} s)",
                        timeout.as_secs_f64()
                    ))),
                }
            };
            (i, reply)
        });
    }
    let mut replies: Vec<Option<Result<Answer, Failure>>> = std::iter::repeat_with(|| None)
        .take(entries.len())
        .collect();
    while let Some(joined) = calls.join_next().await {
        match joined {
            Ok((i, reply)) => replies[i] = Some(reply),
            Err(error) => errln!("steadfastctl: a call's task ended: {error}"),
        }
    }
    replies
        .into_iter()
        .map(|reply| reply.unwrap_or_else(|| Err(Failure::Unreachable("no reply".to_owned()))))
        .collect()
}

/// Call one daemon.
async fn call(target: &Target, ask: Ask, timeout: Duration) -> Result<Answer, Failure> {
    let endpoint = endpoint_of(target).await.map_err(Failure::Unreachable)?;
    let client = match ControlClient::connect_within(endpoint, timeout).await {
        Ok(client) => client,
        Err(error) => {
            // As the single `journal`: no daemon answers, read the file.
            if let (Ask::Journal(limit), Target::DataDir(dir)) = (ask, target) {
                let limit = limit.min(steadfast::protocol::control::MAX_JOURNAL_ATTEMPTS) as usize;
                return match steadfast::control::read_journal(dir, limit) {
                    Ok(attempts) => Ok(Answer::Journal {
                        attempts,
                        offline: Some(one_line(&error.to_string())),
                    }),
                    Err(read) => Err(Failure::Unreachable(format!(
                        "{}; and the journal cannot be read: {}",
                        one_line(&error.to_string()),
                        one_line(&read.to_string())
                    ))),
                };
            }
            return Err(Failure::of(&error));
        }
    };
    let snapshot = |answer: Result<Snapshot, ClientError>| {
        answer
            .map(|s| Answer::Snapshot(Box::new(s)))
            .map_err(|e| Failure::of(&e))
    };
    match ask {
        Ask::Status | Ask::Probe(_) => snapshot(client.snapshot().await),
        Ask::Metrics => client
            .metrics()
            .await
            .map(Answer::Metrics)
            .map_err(|e| Failure::of(&e)),
        Ask::Journal(limit) => client
            .journal(limit)
            .await
            .map(|attempts| Answer::Journal {
                attempts,
                offline: None,
            })
            .map_err(|e| Failure::of(&e)),
        Ask::Exit(relaunch) => snapshot(
            client
                .exit(if relaunch {
                    steadfast::ExitIntent::Relaunch
                } else {
                    steadfast::ExitIntent::Halt
                })
                .await,
        ),
        Ask::Stop(hold, strict) => match client.stop(Hold::from(hold)).await {
            Err(error) if !strict && crate::already(&error, crate::Already::Stopped) => {
                let now = client.snapshot().await.map_err(|e| Failure::of(&e))?;
                if hold && !now.hold {
                    return Err(Failure::Refused(format!(
                        "{} (already stopped but not held: `stop --hold` holds a runtime it \
                         stops)",
                        one_line(&error.to_string())
                    )));
                }
                Ok(Answer::Already(Box::new(now)))
            }
            answer => snapshot(answer),
        },
        Ask::Start(..) | Ask::Restart(..) | Ask::Retry(_) => {
            let answer = match ask {
                Ask::Restart(force, _) => client.command(cmd::Restart { force }).await,
                Ask::Retry(_) => client.retry().await,
                _ => client.start().await,
            };
            match answer {
                Err(error)
                    if matches!(ask, Ask::Start(_, false))
                        && crate::already(&error, crate::Already::Running) =>
                {
                    client
                        .snapshot()
                        .await
                        .map(|s| Answer::Already(Box::new(s)))
                        .map_err(|e| Failure::of(&e))
                }
                Ok(answered) if ask.waits() => snapshot(settled(&client, answered).await),
                answer => snapshot(answer),
            }
        }
    }
}

/// `--wait`: follow the boot a command started (its answer is a booting or
/// draining snapshot) to the first settled state — running, failed,
/// wedged, stopped, or exiting — as the single `--wait` does; the call's
/// timeout bounds it.
async fn settled(client: &ControlClient, answered: Snapshot) -> Result<Snapshot, ClientError> {
    let mut have = answered;
    loop {
        if matches!(
            have.lifecycle,
            LifecycleState::Running { .. }
                | LifecycleState::Failed { .. }
                | LifecycleState::Wedged { .. }
                | LifecycleState::Stopped { .. }
                | LifecycleState::Exiting { .. }
        ) {
            return Ok(have);
        }
        have = client.watch(&have, Duration::from_secs(30)).await?;
    }
}

/// How one daemon fared, for the exit code and the summary.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Verdict {
    /// Running (`status`), ready or live (`probe`), answered, accepted.
    Ok,
    /// Answered and not running (`status`), not ready (`probe ready`),
    /// its boot did not reach running (a command's `--wait`).
    NotRunning,
    /// Reached and refused (a command).
    Refused,
    /// Not reached, no answer by the deadline, or the call failed.
    Unreachable,
}

fn verdict(ask: Ask, reply: &Result<Answer, Failure>) -> Verdict {
    match reply {
        Ok(Answer::Snapshot(snapshot)) => match ask {
            Ask::Status
            | Ask::Probe(ProbeKind::Ready)
            | Ask::Start(true, _)
            | Ask::Restart(_, true)
            | Ask::Retry(true)
                if !matches!(snapshot.lifecycle, LifecycleState::Running { .. }) =>
            {
                Verdict::NotRunning
            }
            _ => Verdict::Ok,
        },
        Ok(_) => Verdict::Ok,
        Err(Failure::Refused(_)) if ask.is_command() => Verdict::Refused,
        Err(_) => Verdict::Unreachable,
    }
}

/// Print the replies (lines, or one JSON document) and exit as the module
/// says.
fn report(
    entries: &[Entry],
    replies: &[Result<Answer, Failure>],
    ask: Ask,
    cli: &Cli,
    timeout: Duration,
) -> ExitCode {
    let mut verdicts: Vec<Verdict> = replies.iter().map(|r| verdict(ask, r)).collect();
    // `metrics` (text): one exposition of them all; a daemon whose text
    // cannot join it did not answer usably.
    let merged = match ask {
        Ask::Metrics if !cli.json => {
            let merged = merge_metrics(entries, replies);
            // The exposition says only 0 for a daemon that did not answer:
            // why is said here.
            for (entry, reply) in entries.iter().zip(replies) {
                if let Err(failure) = reply {
                    errln!(
                        "steadfastctl: {}: {}: {}",
                        escape(&entry.name),
                        failure.kind(),
                        escape(failure.text())
                    );
                }
            }
            for (i, why) in &merged.left_out {
                verdicts[*i] = Verdict::Unreachable;
                errln!(
                    "steadfastctl: {}: its metrics are left out: {}",
                    escape(&entries[*i].name),
                    escape(why)
                );
            }
            Some(merged.text)
        }
        _ => None,
    };
    let worst = verdicts.iter().copied().max().unwrap_or(Verdict::Ok);
    let code = match (ask, worst) {
        (_, Verdict::Ok) => 0,
        (Ask::Probe(_), _) => 1,
        (Ask::Status, Verdict::NotRunning) => crate::EXIT_NOT_RUNNING,
        (Ask::Status, _) => crate::EXIT_UNKNOWN,
        (_, Verdict::Refused | Verdict::NotRunning) => crate::EXIT_REFUSED,
        (_, Verdict::Unreachable) => crate::EXIT_CANNOT_CONNECT,
    };
    out::exit_code_if_closed(code);
    if cli.json {
        crate::render::print_json(&document(entries, replies, &verdicts, ask, timeout));
    } else {
        match ask {
            Ask::Probe(_) if !cli.verbose => {}
            Ask::Metrics => out!("{}", merged.unwrap_or_default()),
            Ask::Journal(_) => print_journals(entries, replies, cli.utc),
            _ => out!("{}", table(entries, replies, ask)),
        }
    }
    let named = |which: Verdict| -> Vec<&str> {
        entries
            .iter()
            .zip(&verdicts)
            .filter(|(_, v)| **v == which)
            .map(|(e, _)| e.name.as_str())
            .collect()
    };
    let mut said = Vec::new();
    for (which, words) in [
        (Verdict::NotRunning, "not running"),
        (Verdict::Refused, "refused"),
        (Verdict::Unreachable, "unreachable"),
    ] {
        let names = named(which);
        if !names.is_empty() {
            let words = match (which, ask) {
                (Verdict::NotRunning, Ask::Probe(_)) => "not ready",
                (Verdict::NotRunning, _) if ask.is_command() => "did not reach running",
                (Verdict::Unreachable, a) if a.is_command() => "not reached or not answered",
                (Verdict::Unreachable, _) => "unreachable or silent",
                _ => words,
            };
            said.push(format!(
                "{} {words}: {}",
                names.len(),
                escape(&names.join(", "))
            ));
        }
    }
    if !said.is_empty() {
        errln!(
            "steadfastctl: {} of {}: {}",
            ask.name(),
            entries.len(),
            said.join("; ")
        );
    }
    ExitCode::from(code)
}

/// One line per daemon: name, endpoint, state, attempt, pid, and since
/// when (or what went wrong).
fn table(entries: &[Entry], replies: &[Result<Answer, Failure>], ask: Ask) -> String {
    use std::fmt::Write as _;
    let rows: Vec<[String; 6]> = entries
        .iter()
        .zip(replies)
        .map(|(entry, reply)| {
            let (state, attempt, pid, detail) = match reply {
                Ok(Answer::Snapshot(snapshot) | Answer::Already(snapshot)) => {
                    let now = snapshot
                        .now
                        .map_or_else(crate::render::now_ms, |t| t.as_millis());
                    let since = crate::render::since(&snapshot.lifecycle)
                        .map(|at| format!("since {}", crate::render::ago(now, at)))
                        .unwrap_or_default();
                    let line = crate::render::state_line(snapshot);
                    let detail = if matches!(snapshot.lifecycle, LifecycleState::Running { .. }) {
                        since
                    } else {
                        format!("{since}: {}", one_line(&line))
                    };
                    (
                        snapshot.lifecycle.name().to_owned(),
                        attempt_of(snapshot).map_or_else(|| "-".to_owned(), |a| a.to_string()),
                        snapshot.pid.to_string(),
                        detail,
                    )
                }
                Ok(_) => (
                    "answered".to_owned(),
                    "-".to_owned(),
                    "-".to_owned(),
                    String::new(),
                ),
                Err(failure) => (
                    failure.kind().to_owned(),
                    "-".to_owned(),
                    "-".to_owned(),
                    escape(&one_line(failure.text())).into_owned(),
                ),
            };
            let state = match reply {
                Ok(Answer::Already(_)) => format!("{}: already {state}", ask.name()),
                Ok(_) if ask.is_command() => format!("{}: {state}", ask.name()),
                _ => state,
            };
            [
                escape(&entry.name).into_owned(),
                escape(&entry.target.to_string()).into_owned(),
                state,
                attempt,
                pid,
                detail,
            ]
        })
        .collect();
    let header = [
        "NAME",
        "ENDPOINT",
        if ask.is_command() { "ANSWER" } else { "STATE" },
        "ATTEMPT",
        "PID",
        if ask.is_command() {
            "DETAIL"
        } else {
            "SINCE / ERROR"
        },
    ]
    .map(str::to_owned);
    let mut widths = [0usize; 5];
    for row in std::iter::once(&header).chain(&rows) {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    for row in std::iter::once(&header).chain(&rows) {
        let mut line = String::new();
        for (w, cell) in widths.iter().zip(row) {
            let _ = write!(line, "{cell:<w$}  ");
        }
        line.push_str(&row[5]);
        let _ = writeln!(out, "{}", line.trim_end());
    }
    out
}

/// The attempt a snapshot is on, or its last one (a stopped runtime keeps
/// the number of the attempt it stopped).
fn attempt_of(snapshot: &Snapshot) -> Option<u32> {
    crate::render::attempt_of(&snapshot.lifecycle)
        .or_else(|| snapshot.attempts.last().map(|a| a.attempt))
}

/// The fleet's `metrics`: one OpenMetrics exposition, and the daemons
/// whose text could not join it (their index and why).
struct Merged {
    text: String,
    left_out: Vec<(usize, String)>,
}

/// One metric family of an exposition: its name, its `# HELP`/`# TYPE`/
/// `# UNIT` lines, its type, and its sample lines.
#[derive(Debug, Default)]
struct Family {
    name: String,
    meta: Vec<String>,
    kind: Option<String>,
    samples: Vec<String>,
}

/// The family the fleet's `metrics` adds: whether each daemon answered
/// (with text that could be merged).
const UP_FAMILY: &str = "steadfastctl_fleet_up";

/// Every daemon's OpenMetrics text merged into ONE exposition, as a
/// scraper of the whole fleet reads it: each family once (its metadata as
/// the first daemon that has it gives it), the samples of every daemon
/// under it in inventory order, each with `daemon="NAME"` added (NAME: the
/// inventory entry's), then [`UP_FAMILY`] (1 answered, 0 not, for every
/// daemon asked) and one `# EOF`. A daemon whose text does not fit (not
/// OpenMetrics, a family another daemon gives another type, a sample that
/// already has a `daemon` label) is left out whole and named.
fn merge_metrics(entries: &[Entry], replies: &[Result<Answer, Failure>]) -> Merged {
    let mut families: Vec<Family> = Vec::new();
    let mut index: BTreeMap<String, usize> = BTreeMap::new();
    let mut left_out = Vec::new();
    let mut up = Vec::new();
    for (i, (entry, reply)) in entries.iter().zip(replies).enumerate() {
        let Ok(Answer::Metrics(text)) = reply else {
            up.push((entry, false));
            continue;
        };
        let parsed = parse_exposition(text, &entry.name).and_then(|parsed| {
            for family in &parsed {
                if family.name == UP_FAMILY {
                    return Err(format!(
                        "it has a family named {UP_FAMILY}, the fleet's own"
                    ));
                }
                if let Some(&at) = index.get(&family.name)
                    && families[at].kind != family.kind
                {
                    return Err(format!(
                        "its family {} is a {}, another daemon's a {}",
                        family.name,
                        family.kind.as_deref().unwrap_or("(untyped)"),
                        families[at].kind.as_deref().unwrap_or("(untyped)")
                    ));
                }
            }
            Ok(parsed)
        });
        match parsed {
            Ok(parsed) => {
                up.push((entry, true));
                for family in parsed {
                    match index.get(&family.name) {
                        Some(&at) => families[at].samples.extend(family.samples),
                        None => {
                            index.insert(family.name.clone(), families.len());
                            families.push(family);
                        }
                    }
                }
            }
            Err(why) => {
                up.push((entry, false));
                left_out.push((i, why));
            }
        }
    }
    let mut text = String::new();
    for family in &families {
        for line in family.meta.iter().chain(&family.samples) {
            text.push_str(line);
            text.push('\n');
        }
    }
    text.push_str(&format!(
        "# HELP {UP_FAMILY} Whether the daemon answered steadfastctl's metrics call with text that \
         is merged here (1) or not (0).\n# TYPE {UP_FAMILY} gauge\n"
    ));
    for (entry, answered) in up {
        text.push_str(&format!(
            "{UP_FAMILY}{{daemon=\"{}\"}} {}\n",
            label_value(&entry.name),
            u8::from(answered)
        ));
    }
    text.push_str("# EOF\n");
    Merged { text, left_out }
}

/// A label value as OpenMetrics writes it between its quotes.
fn label_value(text: &str) -> String {
    text.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// One daemon's exposition as families, each sample with
/// `daemon="DAEMON"` added; or why it is not one this can merge.
fn parse_exposition(text: &str, daemon: &str) -> Result<Vec<Family>, String> {
    let mut families: Vec<Family> = Vec::new();
    let mut ended = false;
    for line in text.lines() {
        if ended {
            return Err("it has lines after `# EOF`".to_owned());
        }
        if line.is_empty() {
            continue;
        }
        if line == "# EOF" {
            ended = true;
            continue;
        }
        if let Some(comment) = line.strip_prefix("# ") {
            let mut words = comment.splitn(3, ' ');
            let (Some(what @ ("HELP" | "TYPE" | "UNIT")), Some(name)) =
                (words.next(), words.next())
            else {
                return Err(format!("the line `{line}` is not OpenMetrics"));
            };
            if families.last().is_none_or(|f| f.name != name) {
                if families.iter().any(|f| f.name == name) {
                    return Err(format!("its family {name} is given twice"));
                }
                families.push(Family {
                    name: name.to_owned(),
                    ..Family::default()
                });
            }
            let family = families.last_mut().expect("a family");
            if what == "TYPE" {
                family.kind = words.next().map(str::to_owned);
            }
            family.meta.push(line.to_owned());
            continue;
        }
        if line.starts_with('#') {
            return Err(format!("the line `{line}` is not OpenMetrics"));
        }
        let sample = with_daemon(line, daemon)?;
        match families.last_mut() {
            Some(family) => family.samples.push(sample),
            None => {
                // A sample before any metadata: a family of its own, untyped.
                let name = line.split(['{', ' ']).next().unwrap_or(line);
                families.push(Family {
                    name: name.to_owned(),
                    samples: vec![sample],
                    ..Family::default()
                });
            }
        }
    }
    Ok(families)
}

/// Sample `line` (`name{labels} value …` or `name value …`) with
/// `daemon="DAEMON"` first among its labels; refused when it has a
/// `daemon` label already or its labels do not parse.
fn with_daemon(line: &str, daemon: &str) -> Result<String, String> {
    let label = format!("daemon=\"{}\"", label_value(daemon));
    let Some(cut) = line.find(['{', ' ']) else {
        return Err(format!("the sample `{line}` has no value"));
    };
    let (name, rest) = line.split_at(cut);
    let Some(labels) = rest.strip_prefix('{') else {
        return Ok(format!("{name}{{{label}}}{rest}"));
    };
    // The label names, to refuse a `daemon` of the daemon's own; quoted
    // values may hold any of `,}="` escaped.
    let mut chars = labels.char_indices().peekable();
    let mut names = Vec::new();
    let end = loop {
        match chars.peek() {
            Some(&(at, '}')) => break at,
            None => return Err(format!("the sample `{line}` has unclosed labels")),
            _ => {}
        }
        let mut label_name = String::new();
        for (_, c) in chars.by_ref() {
            if c == '=' {
                break;
            }
            label_name.push(c);
        }
        if chars.next().map(|(_, c)| c) != Some('"') {
            return Err(format!(
                "the sample `{line}` has a label without a quoted value"
            ));
        }
        let mut escaped = false;
        let mut closed = false;
        for (_, c) in chars.by_ref() {
            match (escaped, c) {
                (false, '\\') => escaped = true,
                (false, '"') => {
                    closed = true;
                    break;
                }
                _ => escaped = false,
            }
        }
        if !closed {
            return Err(format!("the sample `{line}` has an unclosed label value"));
        }
        names.push(label_name.trim().to_owned());
        if chars.peek().map(|&(_, c)| c) == Some(',') {
            chars.next();
        }
    };
    if names.iter().any(|n| n == "daemon") {
        return Err(format!(
            "the sample `{line}` has a `daemon` label already (the fleet adds its own)"
        ));
    }
    let separator = if end == 0 { "" } else { "," };
    Ok(format!("{name}{{{label}{separator}{labels}"))
}

/// `journal`: each daemon's attempts under its name.
fn print_journals(entries: &[Entry], replies: &[Result<Answer, Failure>], utc: bool) {
    for (i, (entry, reply)) in entries.iter().zip(replies).enumerate() {
        if i > 0 {
            outln!();
        }
        outln!(
            "== {} ({})",
            escape(&entry.name),
            escape(&entry.target.to_string())
        );
        match reply {
            Ok(Answer::Journal { attempts, offline }) => {
                if let Some(why) = offline {
                    outln!(
                        "(no daemon answers ({}); read from the journal file)",
                        escape(why)
                    );
                }
                if attempts.is_empty() {
                    outln!("The journal records no attempt.");
                }
                out!(
                    "{}",
                    crate::render::render_journal(
                        attempts,
                        crate::render::Times {
                            now: crate::render::now_ms(),
                            utc
                        }
                    )
                );
            }
            Ok(_) => {}
            Err(failure) => outln!("{}: {}", failure.kind(), escape(failure.text())),
        }
    }
}

/// The `--json` document: `schema`, what was asked, the deadline, one
/// object per daemon in inventory order (`name`, `endpoint`, `transport`,
/// `ok`, and the answer or `error` + `failure`), and the names of those
/// that were not ok.
fn document(
    entries: &[Entry],
    replies: &[Result<Answer, Failure>],
    verdicts: &[Verdict],
    ask: Ask,
    timeout: Duration,
) -> serde_json::Value {
    use serde_json::{Value, json};
    let daemons: Vec<Value> = entries
        .iter()
        .zip(replies)
        .zip(verdicts)
        .map(|((entry, reply), verdict)| {
            let mut object = json!({
                "name": entry.name,
                "endpoint": entry.target.to_string(),
                "transport": entry.target.transport(),
                "ok": *verdict == Verdict::Ok,
            });
            let fields = object.as_object_mut().expect("an object");
            match reply {
                Ok(Answer::Snapshot(snapshot) | Answer::Already(snapshot)) => {
                    if matches!(reply, Ok(Answer::Already(_))) {
                        fields.insert("already".into(), json!(true));
                    }
                    fields.insert("state".into(), json!(snapshot.lifecycle.name()));
                    fields.insert("attempt".into(), json!(attempt_of(snapshot)));
                    fields.insert("pid".into(), json!(snapshot.pid));
                    fields.insert(
                        "since_ms".into(),
                        json!(crate::render::since(&snapshot.lifecycle)),
                    );
                    fields.insert(
                        "snapshot".into(),
                        serde_json::to_value(snapshot).unwrap_or(Value::Null),
                    );
                }
                Ok(Answer::Metrics(text)) => {
                    fields.insert("metrics".into(), json!(text));
                }
                Ok(Answer::Journal { attempts, offline }) => {
                    fields.insert("offline".into(), json!(offline.is_some()));
                    fields.insert(
                        "attempts".into(),
                        serde_json::to_value(attempts).unwrap_or(Value::Null),
                    );
                }
                Err(failure) => {
                    fields.insert("failure".into(), json!(failure.kind()));
                    fields.insert("error".into(), json!(failure.text()));
                }
            }
            object
        })
        .collect();
    let names = |which: Verdict| -> Vec<&str> {
        entries
            .iter()
            .zip(verdicts)
            .filter(|(_, v)| **v == which)
            .map(|(e, _)| e.name.as_str())
            .collect()
    };
    let mut document = json!({
        "schema": SCHEMA,
        "command": ask.name(),
        "timeout_ms": u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX),
        "daemons": daemons,
        "not_running": names(Verdict::NotRunning),
        "refused": names(Verdict::Refused),
        "unreachable": names(Verdict::Unreachable),
    });
    if let (Ask::Probe(what), Some(fields)) = (ask, document.as_object_mut()) {
        let what = match what {
            ProbeKind::Ready => "ready",
            ProbeKind::Live => "live",
        };
        fields.insert("probe".into(), json!(what));
    }
    document
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Vec<Entry>, InventoryError> {
        parse_inventory(text, Path::new("inv.toml"), Path::new("/base"))
    }

    fn problem(text: &str) -> String {
        parse(text).expect_err("refused").to_string()
    }

    #[test]
    fn every_transport_parses_and_relative_paths_are_the_files() {
        let entries = parse(
            r#"
            [[daemon]]
            name = "a"
            data_dir = "a-data"
            [[daemon]]
            name = "b"
            socket = "/run/b.sock"
            [[daemon]]
            name = "c"
            tcp = "127.0.0.1:7000"
            token_file = "c.token"
            [[daemon]]
            name = "d"
            tls = "d.example:7443"
            ca = "ca.pem"
            cert = "me.pem"
            key = "me.key"
            "#,
        )
        .expect("parses");
        assert_eq!(entries.len(), 4);
        assert_eq!(entries[0].target, Target::DataDir("/base/a-data".into()));
        assert_eq!(entries[1].target, Target::Socket("/run/b.sock".into()));
        assert_eq!(
            entries[2].target,
            Target::Tcp {
                addr: "127.0.0.1:7000".parse().expect("addr"),
                token_file: "/base/c.token".into()
            }
        );
        assert!(matches!(&entries[3].target, Target::Tls { addr, .. } if addr == "d.example:7443"));
        assert_eq!(tls_host("d.example:7443"), "d.example");
        assert_eq!(tls_host("[::1]:7443"), "::1");
        assert_eq!(tls_host("127.0.0.1:7443"), "127.0.0.1");
    }

    #[test]
    fn a_bad_entry_is_named_with_its_problem() {
        for (text, needles) in [
            (
                "[[daemon]]\nname = \"a\"\ndata_dir = \"/a\"\nsockt = \"/x\"\n",
                &["daemon #1 (\"a\")", "unknown key `sockt`"][..],
            ),
            (
                "[[daemon]]\nname = \"a\"\n",
                &["daemon #1 (\"a\")", "no transport"][..],
            ),
            (
                "[[daemon]]\nname = \"a\"\ndata_dir = \"/a\"\ntcp = \"127.0.0.1:1\"\n",
                &["2 transports", "`data_dir`, `tcp`"][..],
            ),
            (
                "[[daemon]]\nname = \"a\"\ndata_dir = \"/a\"\n[[daemon]]\nname = \"a\"\nsocket = \"/s\"\n",
                &["daemons #1 and #2 are both named \"a\""][..],
            ),
            (
                "[[daemon]]\nname = \"x\"\ntcp = \"localhost:1\"\ntoken_file = \"t\"\n",
                &["daemon #1 (\"x\")", "not an IP:PORT"][..],
            ),
            (
                "[[daemon]]\nname = \"x\"\ntcp = \"127.0.0.1:1\"\n",
                &["needs `token_file`"][..],
            ),
            (
                "[[daemon]]\nname = \"x\"\ndata_dir = \"/a\"\nca = \"ca.pem\"\n",
                &["`ca` goes only with `tls`"][..],
            ),
            (
                "[[daemon]]\nname = \"x\"\ntls = \"h:1\"\ncert = \"c\"\nkey = \"k\"\n",
                &["needs `ca`"][..],
            ),
            (
                "[[daemon]]\nname = \"x\"\ntls = \"h:1\"\nca = \"c\"\ncert = \"c\"\n",
                &["`cert` needs `key`"][..],
            ),
            (
                "[[daemon]]\nname = \"x\"\ntls = \"h\"\nca = \"c\"\ncert = \"c\"\nkey = \"k\"\n",
                &["not a HOST:PORT"][..],
            ),
            (
                "[[daemon]]\ndata_dir = \"/a\"\n",
                &["daemon #1 (no name)", "no `name`"][..],
            ),
            (
                "[[daemon]]\nname = \"a b\"\ndata_dir = \"/a\"\n",
                &["whitespace or a comma"][..],
            ),
            (
                "[[daemon]]\nname = \"a\"\ndata_dir = 3\n",
                &["`data_dir` must be a string (found: integer)"][..],
            ),
            ("", &["lists no daemon"][..]),
            ("daemons = []\n", &["unknown top-level key `daemons`"][..]),
            ("[[daemon]\n", &["is not TOML"][..]),
        ] {
            let problem = problem(text);
            for needle in needles {
                assert!(
                    problem.contains(needle),
                    "{needle:?} not in {problem:?} for {text:?}"
                );
            }
        }
    }
}
