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
//! Checked by `tests/ctl.rs`, which runs this binary against a real
//! in-process supervisor, and `tests/operator_view.rs` against real kvd.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use clap::{Parser, Subcommand, ValueEnum};
use steadfast::control::{ClientError, ControlClient, Endpoint, TlsClient, Token};
use steadfast::protocol::control::cmd;
use steadfast::protocol::history::JournalAttempt;
use steadfast::protocol::lifecycle::LifecycleState;
use steadfast::protocol::snapshot::{
    AttemptRecord, AttemptResult, PhaseOutcome, PhaseRecord, PreviousRun, SCHEMA, Snapshot,
};
use steadfast::{ExitIntent, Hold};

mod fleet;
mod out;
mod quick;
mod record;

use out::{errln, escape, out, outln};

/// Drive and watch a steadfast daemon over its control socket (or its TCP
/// control port).
///
/// Exit codes: 0 accepted (also `start` when already running, `stop` when
/// already stopped, unless --strict), 1 cannot connect (or the token was
/// refused), 2 usage, 3 refused, 4 a replacement failed, 5 `--timeout` passed (`watch
/// --until`, `stop`). `status`: 0 running, 3 not running (stopped, failed,
/// wedged, or on its way), 4 unknown (no daemon answered).
///
/// With `--inventory FILE` (many daemons): `status` 0 all running, 3 some
/// not running, 4 some unreachable; commands 0 all accepted, 3 some
/// refused, 1 some not reached; stderr names which.
#[derive(Debug, Parser)]
#[command(name = "steadfastctl", version)]
struct Cli {
    /// The daemon's data directory; its socket is
    /// `<DIR>/.steadfast/control.sock` (default: `$STEADFAST_DATA_DIR`, else
    /// the current directory).
    #[arg(long, value_name = "DIR", global = true, conflicts_with = "socket")]
    data_dir: Option<PathBuf>,
    /// The control socket's path (instead of --data-dir).
    #[arg(long, value_name = "PATH", global = true)]
    socket: Option<PathBuf>,
    /// The daemon's TCP control address, IP:PORT (e.g. 127.0.0.1:7433),
    /// instead of the socket; needs --token-file.
    #[arg(
        long,
        value_name = "ADDR",
        global = true,
        conflicts_with_all = ["data_dir", "socket"],
        requires = "token_file"
    )]
    tcp: Option<SocketAddr>,
    /// The token file for --tcp (or, optionally, --tls): the daemon's
    /// token (64 hex digits), in a file only its owner may read (mode 0600;
    /// a looser file is refused).
    #[arg(long, value_name = "PATH", global = true)]
    token_file: Option<PathBuf>,
    /// The daemon's TLS control address, HOST:PORT (a name, resolved here,
    /// or an IP; `[IPv6]:PORT`), instead of the socket; needs --ca, and
    /// --cert with --key (mutual TLS) or --token-file.
    #[arg(
        long,
        value_name = "HOST:PORT",
        global = true,
        value_parser = host_port,
        conflicts_with_all = ["data_dir", "socket", "tcp"]
    )]
    tls: Option<String>,
    /// --tls: the CA (PEM) the daemon's certificate must be signed by.
    #[arg(long, value_name = "FILE", global = true)]
    ca: Option<PathBuf>,
    /// --tls: this client's certificate (PEM), for mutual TLS.
    #[arg(long, value_name = "FILE", global = true)]
    cert: Option<PathBuf>,
    /// --tls: this client's private key (PEM; mode 0600, a looser file is
    /// refused).
    #[arg(long, value_name = "FILE", global = true)]
    key: Option<PathBuf>,
    /// --tls: the name the daemon's certificate must be for (default: the
    /// host of --tls, a name or an IP address).
    #[arg(long, value_name = "NAME", global = true)]
    server_name: Option<String>,
    /// A TOML file with any of `tls`, `ca`, `cert`, `key`, `token_file`,
    /// `server_name` (the flags of the same names win over it); its
    /// relative paths are the file's directory's.
    #[arg(
        long,
        value_name = "FILE",
        global = true,
        conflicts_with_all = ["data_dir", "socket", "tcp"]
    )]
    client_config: Option<PathBuf>,
    /// Print JSON for scripts: the snapshot (the shape of `spec/control.md`),
    /// or the value a command answers (journal, config show, reinit).
    #[arg(long, global = true)]
    json: bool,
    /// Print absolute times in UTC (`…Z`) instead of the local time zone.
    #[arg(long, global = true)]
    utc: bool,
    /// Say more (for `probe`: say why it failed).
    #[arg(long, short, global = true)]
    verbose: bool,
    /// Give up after this many seconds (connecting, waiting out a busy
    /// daemon, and the call; default 120); a command whose deadline passed
    /// before the daemon could run it is dropped there, never run later.
    /// `watch` waits without end unless it is given; `watch --until` and
    /// `stop` exit 5 when it passes. With --inventory: one deadline for
    /// all the daemons a query asks (default 10), and each command's call.
    #[arg(long, value_name = "SECS", global = true)]
    timeout: Option<f64>,
    /// Many daemons at once (`--inventory FILE`, `--only`, `--all`,
    /// `--parallel`): see `fleet.rs`.
    #[command(flatten)]
    fleet: fleet::FleetArgs,
    /// What to do.
    #[command(subcommand)]
    command: Cmd,
}

// `defer`: a subcommand's own flags are built only when it is the one
// given (the command line's cost is mostly clap's).
#[derive(Debug, Subcommand)]
#[command(defer = true)]
enum Cmd {
    /// Show the daemon's state, its counters, its previous run and the
    /// current attempt (earlier attempts: `--history N`, or `journal`).
    Status {
        /// Also show the last N attempts the journal records.
        #[arg(long, value_name = "N")]
        history: Option<u32>,
    },
    /// Boot a stopped runtime (clears a hold). A runtime already running
    /// is no error: it says so and exits 0 (unless --strict).
    Start {
        /// Return once the boot settled: 0 running, 3 failed, wedged or
        /// stopped (the reason on stderr), 5 at `--timeout`.
        #[arg(long)]
        wait: bool,
        /// Refuse (exit 3) when the runtime is already running.
        #[arg(long)]
        strict: bool,
    },
    /// Stop the runtime; returns once the drain has settled. A runtime
    /// already stopped is no error: it says so and exits 0 (unless
    /// --strict).
    Stop {
        /// Keep it stopped across a relaunch of the daemon.
        #[arg(long)]
        hold: bool,
        /// Refuse (exit 3) when the runtime is already stopped.
        #[arg(long)]
        strict: bool,
    },
    /// Stop the runtime and boot it again. The daemon resolves the new
    /// config first: one that does not resolve is refused (exit 3,
    /// `config_invalid` and the error) and the runtime keeps serving.
    Restart {
        /// Drain even when the new config does not resolve (the next boot
        /// then fails held in `resolve_config`).
        #[arg(long)]
        force: bool,
        /// Return once the new boot settled, as `start --wait` (one process
        /// for a restart, as `systemctl restart`).
        #[arg(long)]
        wait: bool,
    },
    /// Retry a failed boot now.
    Retry {
        /// Return once the boot settled, as `start --wait`.
        #[arg(long)]
        wait: bool,
    },
    /// End the daemon's process after a drain (exit 80: stays down). With
    /// --inventory, to the daemons --only names, or --all.
    Exit {
        /// Exit 75 instead, so the service manager starts it again.
        #[arg(long)]
        relaunch: bool,
    },
    /// Print each transition and each boot phase as they happen; return
    /// when the daemon exits.
    Watch {
        /// Return (exit 0) once the daemon reaches this state; exit 3 if the
        /// daemon exits first, 5 if `--timeout` passes first.
        #[arg(long, value_name = "STATE")]
        until: Option<StateName>,
    },
    /// Print a shell completion script for steadfastctl (e.g.
    /// `steadfastctl completions bash > /etc/bash_completion.d/steadfastctl`).
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
    },
    /// Print steadfastctl's manual page (roff; `steadfastctl man | man -l -`),
    /// or a subcommand's (`steadfastctl man start`: steadfastctl-start(1)).
    Man {
        /// The subcommand whose page to print.
        #[arg(value_name = "COMMAND")]
        command: Option<String>,
    },
    /// Re-read the config now, as SIGHUP does (a held failure is retried, a
    /// running runtime applies the change); under systemd with
    /// `Type=notify-reload`, the daemon says `RELOADING=1` then `READY=1`.
    Reload,
    /// Exit 0 when the daemon is ready (running) or live (answering), 1
    /// otherwise; silent unless --verbose.
    Probe {
        /// Which probe.
        what: ProbeKind,
    },
    /// Print the daemon's metrics in OpenMetrics text format (what a
    /// Prometheus scrape reads; `--json` does not apply).
    Metrics,
    /// Show the attempts the journal records (across relaunches), with each
    /// phase's outcome and duration. When no daemon answers, the journal
    /// file under --data-dir is read directly (read-only, no lock taken).
    Journal {
        /// How many of the most recent attempts.
        #[arg(long, short = 'n', default_value_t = 20, value_name = "N")]
        limit: u32,
    },
    /// Read or change the override tier (the highest config tier, kept in
    /// the control directory across relaunches).
    #[command(subcommand)]
    Config(ConfigCmd),
    /// Destroy the stopped runtime's data (the service's wipe step). Without
    /// --confirm, prints the confirmation token; it is valid until the
    /// runtime next boots.
    Reinit {
        /// The token a previous `steadfastctl reinit` printed.
        #[arg(long, value_name = "TOKEN")]
        confirm: Option<String>,
    },
    /// Replace the daemon's binary: print each step as it happens
    /// and end with the outcome. Exit 0 when it completed (or nothing needed
    /// replacing), 4 when it failed (the message says whether the candidate
    /// was committed anyway).
    Replace {
        /// The candidate binary (a path on the daemon's machine).
        #[arg(long, value_name = "PATH")]
        binary: PathBuf,
        /// Overlap: the candidate starts beside the incumbent; exclusive:
        /// the incumbent drains first.
        #[arg(long, value_enum)]
        mode: ReplaceMode,
        /// Seconds shared by the setup steps (restarted after a drain).
        #[arg(long, value_name = "SECS", default_value_t = 30.0)]
        setup_budget: f64,
        /// Seconds the drain (and retire) may take; unbounded when absent.
        #[arg(long, value_name = "SECS")]
        drain_budget: Option<f64>,
    },
}

#[derive(Debug, Subcommand)]
enum ConfigCmd {
    /// Set a leaf: a running runtime applies it in place or reports that a
    /// restart is needed (said in one line, naming the leaves a restart
    /// needs); a held failure is retried.
    Set {
        /// The dotted leaf, e.g. `log.level`.
        leaf: String,
        /// The value as TOML (`8080`, `-1`, `true`, `"text"`, `[1, 2]`); a
        /// bare word is a string.
        #[arg(allow_negative_numbers = true)]
        value: String,
    },
    /// Remove a leaf from the override tier (the lower tiers show again).
    Unset {
        /// The dotted leaf.
        leaf: String,
    },
    /// Show the override tier and the effective config (or one leaf).
    Show {
        /// Only this dotted leaf.
        leaf: Option<String>,
    },
}

/// A replacement's mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum ReplaceMode {
    Overlap,
    Exclusive,
}

/// Exit code of a replacement that failed.
const EXIT_REPLACE_FAILED: u8 = 4;

/// A lifecycle state's name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
#[value(rename_all = "snake_case")]
enum StateName {
    Resolving,
    Booting,
    Running,
    Draining,
    Stopped,
    Failed,
    Wedged,
    Exiting,
    Reinitializing,
}

impl StateName {
    fn name(self) -> &'static str {
        match self {
            Self::Resolving => "resolving",
            Self::Booting => "booting",
            Self::Running => "running",
            Self::Draining => "draining",
            Self::Stopped => "stopped",
            Self::Failed => "failed",
            Self::Wedged => "wedged",
            Self::Exiting => "exiting",
            Self::Reinitializing => "reinitializing",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum ProbeKind {
    /// The runtime is running.
    Ready,
    /// The daemon answers.
    Live,
}

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

/// `completions SHELL` and `man`: text generated from the clap command
/// (`clap_complete`, `clap_mangen`), printed; no daemon is asked. `None`
/// for every other command, which never builds what these need.
fn generated(command: &Cmd) -> Option<ExitCode> {
    use clap::CommandFactory;
    let mut text = Vec::new();
    match command {
        Cmd::Completions { shell } => {
            let mut command = Cli::command();
            clap_complete::generate(*shell, &mut command, "steadfastctl", &mut text);
        }
        Cmd::Man { command: sub } => {
            let mut command = Cli::command();
            // The subcommands' flags are built on demand (`defer`): build
            // them all (the global flags copied into each), so the pages
            // list them.
            command.build();
            let page = match sub {
                None => command,
                Some(name) => {
                    let Some(found) = command.find_subcommand(name) else {
                        let known: Vec<&str> = command
                            .get_subcommands()
                            .map(clap::Command::get_name)
                            .collect();
                        say(&format!(
                            "man {name}: no such command (it has a page: {})",
                            known.join(", ")
                        ));
                        return Some(ExitCode::from(EXIT_USAGE));
                    };
                    // Named as the main page's SUBCOMMANDS section names it
                    // (clap takes a `'static` name; the process ends after
                    // printing the page).
                    let page_name: &'static str =
                        Box::leak(format!("steadfastctl-{name}").into_boxed_str());
                    found.clone().name(page_name)
                }
            };
            if let Err(error) = clap_mangen::Man::new(page).render(&mut text) {
                say(&format!("cannot render the manual page: {error}"));
                return Some(ExitCode::FAILURE);
            }
        }
        _ => return None,
    }
    out::raw(&text);
    Some(ExitCode::SUCCESS)
}

/// `--tls`'s value: `HOST:PORT` (a name or an IP address; an IPv6
/// address in brackets), checked for its shape only (it is resolved when
/// it is dialed).
fn host_port(text: &str) -> Result<String, String> {
    match text.rsplit_once(':') {
        Some((host, port))
            if !host.is_empty()
                && port.parse::<u16>().is_ok()
                && (host.starts_with('[') == host.ends_with(']'))
                && (host.starts_with('[') || !host.contains(':')) =>
        {
            Ok(text.to_owned())
        }
        _ => Err(format!(
            "`{text}` is not HOST:PORT (e.g. daemon.example:7443, 192.0.2.7:7443, [2001:db8::7]:7443)"
        )),
    }
}

/// The host of a `HOST:PORT` checked by [`host_port`] (an IPv6 address
/// without its brackets): the name the daemon's certificate must carry
/// unless `--server-name` says otherwise.
fn host_of(addr: &str) -> &str {
    let host = addr.rsplit_once(':').map_or(addr, |(host, _)| host);
    host.strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host)
}

/// `status` and `probe ready` answered from the daemon's status record
/// ([`record`]), without a runtime or a round trip, and so is "no daemon"
/// when the socket file's checks find none to dial; `None` when the
/// command is another, or the record is not to be trusted: then it asks
/// the daemon.
fn from_record(cli: &Cli) -> Option<ExitCode> {
    let unix_only = cli.tcp.is_none()
        && cli.tls.is_none()
        && cli.client_config.is_none()
        && cli.token_file.is_none()
        && cli.ca.is_none()
        && cli.cert.is_none()
        && cli.key.is_none()
        && !cli.fleet.given();
    let wanted = matches!(
        cli.command,
        Cmd::Status { history: None }
            | Cmd::Probe {
                what: ProbeKind::Ready
            }
    );
    if !(unix_only && wanted) {
        return None;
    }
    let snapshot = match record::read(&socket_path(cli).ok()?) {
        record::Read::Trusted(snapshot) => snapshot,
        record::Read::NoDaemon(error) => return Some(unreached(cli, &error.to_string())),
        record::Read::Ask => return None,
    };
    Some(match cli.command {
        Cmd::Probe { what } => probe_answer(&snapshot, what, cli.verbose),
        _ => print_status(&snapshot, None, cli.json, cli.utc),
    })
}

/// No daemon was reached (`error`, said on stderr; a probe says it only
/// with `-v`): `status` exits 4 (LSB's unknown), any other command 1.
fn unreached(cli: &Cli, error: &str) -> ExitCode {
    if !matches!(cli.command, Cmd::Probe { .. }) || cli.verbose {
        say(&error);
    }
    ExitCode::from(if matches!(cli.command, Cmd::Status { .. }) {
        EXIT_UNKNOWN
    } else {
        EXIT_CANNOT_CONNECT
    })
}

/// The command line. The common forms (`status`, `probe`, `restart --wait`
/// …) are read by hand ([`quick::parse`]), giving the [`Cli`] clap would
/// give without building clap's command. Everything else is clap's. Before it parses, clap copies each
/// global flag (17, with their help text) into every subcommand (16): most
/// of a `status`'s time went there. So the first parse is with a
/// command whose flags carry no help text; when it does not give a [`Cli`]
/// (a usage error, `--help`, `--version`), the whole command parses again
/// and answers as clap always did. The two commands differ in help text
/// only, which no parse reads: what is accepted, and what it means, is the
/// same (`tests::the_lean_parse_is_clap_s`). The parsed command is not
/// dropped: the exit frees it.
fn parse() -> Cli {
    if let Some(cli) = quick::parse(std::env::args_os()) {
        return cli;
    }
    if let Ok(cli) = lean_parse(std::env::args_os()) {
        return cli;
    }
    Cli::parse()
}

/// [`parse`]'s first try: the command without its flags' help text.
fn lean_parse<I, T>(args: I) -> Result<Cli, clap::Error>
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    use clap::{CommandFactory, FromArgMatches};
    let mut lean = Cli::command().mut_args(|arg| arg.help(None).long_help(None));
    let mut matches = lean.try_get_matches_from_mut(args)?;
    let cli = Cli::from_arg_matches_mut(&mut matches)?;
    std::mem::forget((lean, matches));
    Ok(cli)
}

/// The control socket: `--socket`, else under `--data-dir`, else under
/// `$STEADFAST_DATA_DIR`, else under the current directory. A variable
/// that is set but empty (or not Unicode-safe to print) is a usage error,
/// not a silent fall back to the current directory.
fn socket_path(cli: &Cli) -> Result<PathBuf, String> {
    match &cli.socket {
        Some(socket) => Ok(socket.clone()),
        None => data_dir_of(cli).map(|dir| steadfast::control::socket_path(&dir)),
    }
}

/// The data dir: `--data-dir`, else `STEADFAST_DATA_DIR` (set but empty is
/// a usage error), else the working directory.
fn data_dir_of(cli: &Cli) -> Result<PathBuf, String> {
    match (&cli.data_dir, std::env::var_os(DATA_DIR_ENV)) {
        (Some(dir), _) => Ok(dir.clone()),
        (None, Some(dir)) if dir.is_empty() => Err(format!(
            "{DATA_DIR_ENV} is set but empty: unset it, or give it the daemon's data directory"
        )),
        (None, Some(dir)) => Ok(PathBuf::from(dir)),
        (None, None) => Ok(PathBuf::from(".")),
    }
}

/// `--timeout` as a duration (`DEFAULT_TIMEOUT` when not given), or why it
/// is not one.
fn timeout_of(cli: &Cli) -> Result<Duration, String> {
    let Some(secs) = cli.timeout else {
        return Ok(DEFAULT_TIMEOUT);
    };
    Duration::try_from_secs_f64(secs)
        .ok()
        .filter(|t| !t.is_zero())
        .ok_or_else(|| format!("--timeout {secs}: give a positive number of seconds"))
}

/// Why `steadfastctl` could not reach a daemon.
enum Unreached {
    /// The command line (or the environment) does not name one usably.
    Usage(String),
    /// None answered (`true`: within the deadline, so it may be there).
    Connect(String, bool),
}

/// The text of a file the command line names (`--client-config`,
/// `--inventory`), read as the daemon reads its config file
/// (`steadfast::config::read_config_file`): opened `O_NONBLOCK` (a FIFO
/// does not hold the open), a regular file only, at most 1 MiB, so no path
/// makes `steadfastctl` hang or grow without bound. The error says why
/// (the caller names the file).
fn read_own_file(path: &std::path::Path) -> Result<String, String> {
    use steadfast::config::ConfigError;
    let bytes = steadfast::config::read_config_file(path).map_err(|error| match error {
        ConfigError::NotRegular { kind, .. } => {
            format!("it is a {kind}, not a regular file; give a regular file")
        }
        ConfigError::TooLarge { len, limit, .. } => format!(
            "it holds {len} bytes, over the {limit}-byte (1 MiB) limit; give a smaller file"
        ),
        ConfigError::Missing { .. } => "no such file".to_owned(),
        ConfigError::Read { source, .. } => source.to_string(),
        other => other.to_string(),
    })?;
    String::from_utf8(bytes).map_err(|_| "it is not UTF-8 text".to_owned())
}

/// `--client-config FILE`: the TLS flags, from a file; its relative paths
/// are the file's directory's ([`ClientConfig::read`]).
#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct ClientConfig {
    tls: Option<String>,
    ca: Option<PathBuf>,
    cert: Option<PathBuf>,
    key: Option<PathBuf>,
    token_file: Option<PathBuf>,
    server_name: Option<String>,
}

impl ClientConfig {
    /// Read `path`: TOML of the keys above, `tls` a `HOST:PORT`, and every
    /// relative path in it (`ca`, `cert`, `key`, `token_file`) taken from
    /// the file's directory, as `--inventory`'s are, so the file means the
    /// same from any working directory.
    fn read(path: &std::path::Path) -> Result<Self, String> {
        let text = read_own_file(path)?;
        let mut config: Self = toml::from_str(&text).map_err(|e| e.to_string())?;
        if let Some(tls) = &config.tls {
            host_port(tls).map_err(|e| format!("`tls`: {e}"))?;
        }
        let base = path.parent().unwrap_or_else(|| std::path::Path::new(""));
        for file in [
            &mut config.ca,
            &mut config.cert,
            &mut config.key,
            &mut config.token_file,
        ]
        .into_iter()
        .flatten()
        {
            if file.is_relative() {
                *file = base.join(&*file);
            }
        }
        Ok(config)
    }
}

/// The TLS endpoint `--tls` (or `--client-config`) names, flags winning
/// over the file, its host resolved within `timeout`; `None` when neither
/// asks for TLS.
async fn tls_endpoint(cli: &Cli, timeout: Duration) -> Result<Option<Vec<Endpoint>>, Unreached> {
    let file = match &cli.client_config {
        None => ClientConfig::default(),
        Some(path) => ClientConfig::read(path)
            .map_err(|e| Unreached::Usage(format!("--client-config {}: {e}", path.display())))?,
    };
    let Some(addr) = cli.tls.clone().or(file.tls) else {
        if cli.client_config.is_some() {
            return Err(Unreached::Usage(
                "--client-config names no `tls` address".to_owned(),
            ));
        }
        return Ok(None);
    };
    let pick = |flag: &Option<PathBuf>, from_file: Option<PathBuf>| flag.clone().or(from_file);
    let Some(ca) = pick(&cli.ca, file.ca) else {
        return Err(Unreached::Usage(
            "--tls needs --ca (the CA the daemon's certificate is signed by)".to_owned(),
        ));
    };
    let cert_and_key = match (pick(&cli.cert, file.cert), pick(&cli.key, file.key)) {
        (Some(cert), Some(key)) => Some((cert, key)),
        (None, None) => None,
        _ => {
            return Err(Unreached::Usage("--cert and --key go together".to_owned()));
        }
    };
    let token_file = pick(&cli.token_file, file.token_file);
    if cert_and_key.is_none() && token_file.is_none() {
        return Err(Unreached::Usage(
            "--tls needs --cert and --key (mutual TLS) or --token-file".to_owned(),
        ));
    }
    let token = token_file
        .map(Token::read_file)
        .transpose()
        .map_err(|e| Unreached::Connect(e.to_string(), false))?;
    let tls = TlsClient::from_files(
        &ca,
        cert_and_key
            .as_ref()
            .map(|(cert, key)| (cert.as_path(), key.as_path())),
    )
    .map_err(|e| Unreached::Connect(e.to_string(), false))?;
    let server_name = cli
        .server_name
        .clone()
        .or(file.server_name)
        .unwrap_or_else(|| host_of(&addr).to_owned());
    let resolved = match tokio::time::timeout(timeout, tokio::net::lookup_host(addr.as_str())).await
    {
        Ok(Ok(addrs)) => {
            let mut unique: Vec<SocketAddr> = Vec::new();
            for addr in addrs {
                if !unique.contains(&addr) {
                    unique.push(addr);
                }
            }
            unique
        }
        Ok(Err(error)) => {
            return Err(Unreached::Connect(
                format!("--tls {addr}: cannot resolve {}: {error}", host_of(&addr)),
                false,
            ));
        }
        Err(_) => {
            return Err(Unreached::Connect(
                format!(
                    "--tls {addr}: {} did not resolve within {} s",
                    host_of(&addr),
                    timeout.as_secs_f64()
                ),
                true,
            ));
        }
    };
    if resolved.is_empty() {
        return Err(Unreached::Connect(
            format!("--tls {addr}: {} resolves to no address", host_of(&addr)),
            false,
        ));
    }
    Ok(Some(
        resolved
            .into_iter()
            .map(|resolved| Endpoint::Tls {
                addr: resolved,
                server_name: server_name.clone(),
                tls: tls.clone(),
                token: token.clone(),
            })
            .collect(),
    ))
}

/// Connect over TLS (`--tls` …), TCP (`--tcp`, `--token-file`) or the Unix
/// socket.
async fn connect(cli: &Cli) -> Result<ControlClient, Unreached> {
    let timeout = timeout_of(cli).map_err(Unreached::Usage)?;
    let tls = tls_endpoint(cli, timeout).await?;
    if tls.is_none()
        && cli.tcp.is_none()
        && (cli.token_file.is_some() || cli.ca.is_some() || cli.cert.is_some() || cli.key.is_some())
    {
        return Err(Unreached::Usage(
            "--token-file goes with --tcp or --tls; --ca, --cert and --key with --tls".to_owned(),
        ));
    }
    let endpoints = match (tls, cli.tcp, &cli.token_file) {
        (Some(tls), _, _) => tls,
        (None, Some(addr), Some(token_file)) => {
            let token = Token::read_file(token_file)
                .map_err(|e| Unreached::Connect(e.to_string(), false))?;
            vec![Endpoint::Tcp { addr, token }]
        }
        // clap requires both together; this is only a guard.
        (None, Some(_), None) => {
            return Err(Unreached::Usage("--tcp needs --token-file".to_owned()));
        }
        _ => vec![Endpoint::Unix(socket_path(cli).map_err(Unreached::Usage)?)],
    };
    // One call, one round trip: the request goes without waiting for the
    // Unix server's first byte (`ControlClient::connect_pipelined`; every
    // check of the socket and its listener is made before it). `journal`
    // dials as before: when no daemon serves it, it reads the file itself.
    // A TLS host name may resolve to several addresses (`localhost`: ::1
    // and 127.0.0.1): each is dialed in turn while the one before could not
    // be connected to at all (nothing was sent to it), as `ssh` does.
    let started = tokio::time::Instant::now();
    let mut first_error = None;
    for endpoint in endpoints {
        let left = timeout.saturating_sub(started.elapsed());
        let connected = if matches!(cli.command, Cmd::Journal { .. }) {
            ControlClient::connect_within(endpoint, left).await
        } else {
            ControlClient::connect_pipelined(endpoint, left).await
        };
        match connected {
            Ok(client) => return Ok(client),
            Err(error @ ClientError::Connect { .. }) if !error.is_deadline() => {
                first_error.get_or_insert(error);
            }
            Err(error) => {
                return Err(Unreached::Connect(error.to_string(), error.is_deadline()));
            }
        }
    }
    let error = first_error.map_or_else(|| "no address to dial".to_owned(), |e| e.to_string());
    Err(Unreached::Connect(error, false))
}

async fn run(cli: Cli) -> ExitCode {
    if cli.fleet.given() {
        return fleet::run(&cli).await;
    }
    let client = match connect(&cli).await {
        Ok(client) => client,
        Err(Unreached::Usage(error)) => {
            say(&error);
            return ExitCode::from(EXIT_USAGE);
        }
        Err(Unreached::Connect(error, true))
            if matches!(cli.command, Cmd::Stop { .. })
                || matches!(cli.command, Cmd::Watch { .. }) && cli.timeout.is_some() =>
        {
            let secs = cli.timeout.unwrap_or(DEFAULT_TIMEOUT.as_secs_f64());
            errln!(
                "steadfastctl: timed out after {secs} s: nothing was sent ({})",
                escape(&error)
            );
            return ExitCode::from(EXIT_TIMED_OUT);
        }
        Err(Unreached::Connect(error, _)) => {
            if let Cmd::Journal { limit } = cli.command
                && cli.socket.is_none()
                && cli.tcp.is_none()
                && cli.tls.is_none()
                && cli.client_config.is_none()
            {
                let dir = data_dir_of(&cli).unwrap_or_else(|_| PathBuf::from("."));
                return journal_offline(&dir, limit, &error, cli.json, cli.utc);
            }
            return unreached(&cli, &error);
        }
    };
    let answer = match &cli.command {
        Cmd::Status { history } => {
            return status(&client, *history, cli.json, cli.utc).await;
        }
        Cmd::Start { strict, .. } => match client.start().await {
            Err(error) if !strict && already(&error, Already::Running) => {
                return already_there(&client, &cli, Already::Running).await;
            }
            answer => answer,
        },
        Cmd::Stop { hold, strict } => return stop(&client, *hold, *strict, &cli).await,
        Cmd::Reload => client.reload().await,
        Cmd::Restart { force, .. } => client.command(cmd::Restart { force: *force }).await,
        Cmd::Retry { .. } => client.retry().await,
        Cmd::Exit { relaunch } => {
            let intent = if *relaunch {
                ExitIntent::Relaunch
            } else {
                ExitIntent::Halt
            };
            client.exit(intent).await
        }
        Cmd::Watch { until } => {
            // Only a `--timeout` given bounds a watch; without one it
            // follows the daemon until it exits.
            let deadline = match cli.timeout.map(|_| timeout_of(&cli)) {
                None => None,
                Some(Ok(timeout)) => Some((tokio::time::Instant::now() + timeout, timeout)),
                Some(Err(error)) => {
                    say(&error);
                    return ExitCode::from(EXIT_USAGE);
                }
            };
            return watch(&client, *until, cli.json, cli.utc, deadline).await;
        }
        Cmd::Probe { what } => return probe(&client, *what, cli.verbose).await,
        Cmd::Journal { limit } => return journal(&client, *limit, cli.json, cli.utc).await,
        Cmd::Metrics => return metrics(&client).await,
        Cmd::Config(ConfigCmd::Show { leaf }) => {
            return config_show(&client, leaf.as_deref(), cli.json).await;
        }
        Cmd::Config(ConfigCmd::Set { leaf, value }) => {
            let answer = client.config_set(leaf, value).await;
            return config_changed(leaf, true, answer, &cli);
        }
        Cmd::Config(ConfigCmd::Unset { leaf }) => {
            // Whether the override tier sets it: an unset of a leaf it does
            // not set changes nothing (and publishes nothing).
            let was_set = client
                .config_show(Some(leaf))
                .await
                .map_or(true, |view| view.overrides.iter().any(|(l, _)| l == leaf));
            let answer = client.config_unset(leaf).await;
            if !was_set && answer.is_ok() {
                return config_unchanged(leaf, answer.ok(), &cli);
            }
            return config_changed(leaf, false, answer, &cli);
        }
        Cmd::Completions { .. } | Cmd::Man { .. } => {
            // Answered in `main` before anything is dialed.
            return generated(&cli.command).unwrap_or(ExitCode::SUCCESS);
        }
        Cmd::Reinit { confirm: None } => {
            return reinit_prepare(&client, &connection_flags(&cli), cli.json).await;
        }
        Cmd::Reinit {
            confirm: Some(token),
        } => client.reinit(token).await,
        Cmd::Replace {
            binary,
            mode,
            setup_budget,
            drain_budget,
        } => {
            return replace(
                &client,
                binary,
                *mode,
                *setup_budget,
                *drain_budget,
                cli.json,
            )
            .await;
        }
    };
    let wait = matches!(
        cli.command,
        Cmd::Start { wait: true, .. } | Cmd::Restart { wait: true, .. } | Cmd::Retry { wait: true }
    );
    match answer {
        Ok(snapshot) if wait => wait_settled(&client, snapshot, &cli).await,
        Ok(snapshot) => {
            print_answer(&snapshot, &cli);
            ExitCode::SUCCESS
        }
        Err(error) => fail(&error),
    }
}

/// `--wait`: follow the boot the command started (its answer is a booting
/// or draining snapshot, never a settled one) to the first settled state,
/// in this process. 0 running; 3 failed, wedged or stopped, or the daemon
/// exited, the reason on stderr; 5 when `--timeout` passes first. Prints
/// the settled snapshot as the command would have printed its answer.
async fn wait_settled(client: &ControlClient, answered: Snapshot, cli: &Cli) -> ExitCode {
    let deadline = match cli.timeout.map(|_| timeout_of(cli)) {
        None => None,
        Some(Ok(timeout)) => Some((tokio::time::Instant::now() + timeout, timeout)),
        Some(Err(error)) => {
            say(&error);
            return ExitCode::from(EXIT_USAGE);
        }
    };
    let mut have = answered;
    loop {
        match &have.lifecycle {
            LifecycleState::Running { .. } => {
                print_answer(&have, cli);
                return ExitCode::SUCCESS;
            }
            LifecycleState::Failed { .. }
            | LifecycleState::Wedged { .. }
            | LifecycleState::Stopped { .. } => {
                out::exit_code_if_closed(EXIT_NOT_RUNNING);
                print_answer(&have, cli);
                errln!(
                    "steadfastctl: the boot did not reach running: {}",
                    state_line(&have)
                );
                return ExitCode::from(EXIT_NOT_RUNNING);
            }
            LifecycleState::Exiting { .. } => {
                return daemon_exited(
                    Some(StateName::Running),
                    Some(&have),
                    "it said it is exiting",
                );
            }
            _ => {}
        }
        if deadline.is_some_and(|(at, _)| tokio::time::Instant::now() >= at) {
            return timed_out(Some(StateName::Running), Some(&have), deadline);
        }
        let wait = deadline.map_or(Duration::from_secs(30), |(at, _)| {
            at.saturating_duration_since(tokio::time::Instant::now())
                .min(Duration::from_secs(30))
        });
        have = match client.watch(&have, wait).await {
            Ok(next) => next,
            Err(error) if error.is_gone() => {
                return daemon_exited(Some(StateName::Running), Some(&have), &error.to_string());
            }
            Err(error) if error.is_deadline() && deadline.is_some() => {
                return timed_out(Some(StateName::Running), Some(&have), deadline);
            }
            Err(error) => return fail(&error),
        };
    }
}

/// How the daemon's snapshot error of a change a running runtime could not
/// apply begins.
const NOT_APPLIED: &str = "a config change was not applied";

/// What became of a `config set` / `config unset`.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Applied {
    /// The running runtime took it in place.
    InPlace,
    /// The running runtime needs a restart for these leaves (the change's
    /// among them).
    AtRestart(Vec<String>),
    /// The runtime is not running (the state): its next boot reads it.
    AtNextBoot(&'static str),
    /// The runtime could not take it: the daemon's error.
    Refused(String),
}

impl Applied {
    const fn kind(&self) -> &'static str {
        match self {
            Self::InPlace => "in_place",
            Self::AtRestart(_) => "at_restart",
            Self::AtNextBoot(_) => "at_next_boot",
            Self::Refused(_) => "not_applied",
        }
    }
}

/// `config set` / `config unset` (`set`: which) says in one line what
/// became of the change: applied in place, at the next restart (naming
/// the leaves a restart needs: the snapshot's `pending`), at the next boot
/// (not running), or not taken (the daemon's error). `--json`: the
/// snapshot, with `change: {leaf, applied, restart_needed}` added.
///
/// The daemon answers a change to a running runtime once the runtime has
/// applied it and the outcome is stepped, so the answer's `pending` is
/// the outcome; an apply that failed answers with its error in the
/// snapshot (`a config change was not applied: …`).
fn config_changed(
    leaf: &str,
    set: bool,
    answer: Result<Snapshot, ClientError>,
    cli: &Cli,
) -> ExitCode {
    let settled = match answer {
        Ok(snapshot) => snapshot,
        Err(error) => return fail(&error),
    };
    let applied = match (&settled.lifecycle, &settled.pending, &settled.error) {
        (LifecycleState::Running { .. }, _, Some(error)) if error.starts_with(NOT_APPLIED) => {
            Applied::Refused(error.clone())
        }
        (
            LifecycleState::Running { .. },
            steadfast::protocol::lifecycle::PendingApply::RestartNeeded { leaves },
            _,
        ) if leaves.iter().any(|l| l == leaf) => Applied::AtRestart(leaves.clone()),
        (LifecycleState::Running { .. }, _, _) => Applied::InPlace,
        (other, _, _) => Applied::AtNextBoot(other.name()),
    };
    if cli.json {
        return print_change(&settled, leaf, applied.kind());
    }
    let done = if set { "set" } else { "unset" };
    let leaf = escape(leaf);
    match applied {
        Applied::InPlace => outln!("{leaf}: {done}; applied in place"),
        Applied::AtRestart(leaves) => outln!(
            "{leaf}: {done}; takes effect at the next restart (restart needed: {})",
            escape(&leaves.join(", "))
        ),
        Applied::AtNextBoot(state) => {
            outln!("{leaf}: {done}; the runtime is {state}: takes effect when it next boots");
        }
        Applied::Refused(error) => outln!(
            "{leaf}: {done}; the running runtime did not take it: {}",
            out::block(&error, 4)
        ),
    }
    ExitCode::SUCCESS
}

/// `config unset` of a leaf the override tier does not set: nothing
/// changed, said so (`--json`: the answer, `applied: unchanged`).
fn config_unchanged(leaf: &str, answered: Option<Snapshot>, cli: &Cli) -> ExitCode {
    match answered {
        Some(snapshot) if cli.json => print_change(&snapshot, leaf, "unchanged"),
        _ => {
            outln!(
                "{}: unchanged (the override tier does not set it)",
                escape(leaf)
            );
            ExitCode::SUCCESS
        }
    }
}

/// `config set`/`unset --json`: `snapshot` with `change: {leaf, applied,
/// restart_needed}` added (`restart_needed`: its `pending` leaves).
fn print_change(snapshot: &Snapshot, leaf: &str, applied: &str) -> ExitCode {
    let mut value = match serde_json::to_value(snapshot) {
        Ok(value) => value,
        Err(error) => {
            say(&error);
            return ExitCode::FAILURE;
        }
    };
    if let serde_json::Value::Object(fields) = &mut value {
        let restart_needed = match &snapshot.pending {
            steadfast::protocol::lifecycle::PendingApply::RestartNeeded { leaves } => {
                leaves.clone()
            }
            steadfast::protocol::lifecycle::PendingApply::InSync => Vec::new(),
        };
        fields.insert(
            "change".to_owned(),
            serde_json::json!({
                "leaf": leaf,
                "applied": applied,
                "restart_needed": restart_needed,
            }),
        );
    }
    print_json(&value);
    ExitCode::SUCCESS
}

/// The snapshot a command answered, as `--json` or as `status` prints it.
fn print_answer(snapshot: &Snapshot, cli: &Cli) {
    if cli.json {
        print_json(snapshot);
    } else {
        out!("{}", render_status(snapshot, Times::of(snapshot, cli.utc)));
    }
}

/// `status`: print the snapshot, and exit as `systemctl status` and LSB
/// init scripts do: 0 running, 3 not running, 4 unknown.
/// `status`'s exit code for a daemon that answered: 0 only while the
/// runtime runs (as `systemctl is-active` says `active` only once started);
/// every other state, including one on its way to running, is 3.
const fn status_code(lifecycle: &LifecycleState) -> u8 {
    if matches!(lifecycle, LifecycleState::Running { .. }) {
        0
    } else {
        EXIT_NOT_RUNNING
    }
}

/// The state a `start` or `stop` asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Already {
    /// `start`: the runtime running.
    Running,
    /// `stop`: the runtime stopped.
    Stopped,
}

impl Already {
    const fn name(self) -> &'static str {
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
fn already(error: &ClientError, target: Already) -> bool {
    use steadfast::protocol::lifecycle::RefusedBecause;
    error.refused().is_some_and(|refused| match target {
        Already::Running => refused.reason == RefusedBecause::RuntimeRunning,
        Already::Stopped => {
            refused.reason == RefusedBecause::RuntimeNotRunning && refused.state == "stopped"
        }
    })
}

/// What the daemon this invocation reached is called in a one-line answer:
/// as the command line named it (its data directory, socket, address, or
/// client config file).
fn daemon_name(cli: &Cli) -> String {
    let named = if let Some(socket) = &cli.socket {
        socket.display().to_string()
    } else if let Some(addr) = &cli.tcp {
        addr.to_string()
    } else if let Some(addr) = &cli.tls {
        addr.clone()
    } else if let Some(file) = &cli.client_config {
        file.display().to_string()
    } else {
        data_dir_of(cli).map_or_else(|_| ".".to_owned(), |d| d.display().to_string())
    };
    escape(&named).into_owned()
}

/// A `start` or `stop` found the runtime already `target`: exit 0 as
/// `systemctl start` of a started unit does, saying so in one line
/// (`NAME: already running`), or with `--json` printing the snapshot as
/// an accepted command does (and `start --wait` its settled one).
async fn already_there(client: &ControlClient, cli: &Cli, target: Already) -> ExitCode {
    let snapshot = match client.snapshot().await {
        Ok(snapshot) => snapshot,
        Err(error) => return fail(&error),
    };
    if cli.json {
        print_json(&snapshot);
    } else {
        outln!(
            "{}: already {}{}",
            daemon_name(cli),
            target.name(),
            if target == Already::Stopped && snapshot.hold {
                " (held across relaunch)"
            } else {
                ""
            }
        );
    }
    ExitCode::SUCCESS
}

/// `stop [--hold] [--strict]`: answered once the drain settled; with
/// `--timeout`, exit 5 when it has not settled by then. A runtime already
/// stopped is exit 0 (`--strict`: 3) — but not for `--hold` when it is not
/// held: the hold asked for was not taken, and that is a refusal.
async fn stop(client: &ControlClient, hold: bool, strict: bool, cli: &Cli) -> ExitCode {
    match client.stop(Hold::from(hold)).await {
        Ok(snapshot) => {
            print_answer(&snapshot, cli);
            ExitCode::SUCCESS
        }
        Err(error) if !strict && already(&error, Already::Stopped) => {
            if hold {
                match client.snapshot().await {
                    Ok(snapshot) if snapshot.hold => {}
                    Ok(_) => {
                        say(&format!(
                            "{error} (already stopped but not held: `stop --hold` holds a \
                             runtime it stops; `start`, then `stop --hold`, to hold this one)"
                        ));
                        return ExitCode::from(EXIT_REFUSED);
                    }
                    Err(error) => return fail(&error),
                }
            }
            already_there(client, cli, Already::Stopped).await
        }
        Err(error) if error.is_deadline() => {
            let secs = cli.timeout.unwrap_or(DEFAULT_TIMEOUT.as_secs_f64());
            errln!(
                "steadfastctl: timed out after {secs} s: the stop was not answered in time \
                 (a stop the daemon took goes on draining; one it could not take in time was \
                 dropped unrun): `steadfastctl status` says which"
            );
            ExitCode::from(EXIT_TIMED_OUT)
        }
        Err(error) => fail(&error),
    }
}

fn fail(error: &ClientError) -> ExitCode {
    say(error);
    if error.is_refusal() {
        ExitCode::from(EXIT_REFUSED)
    } else {
        ExitCode::from(EXIT_CANNOT_CONNECT)
    }
}

/// `value` as the JSON steadfastctl prints: an object carries `schema`
/// ([`SCHEMA`]), whatever it answers.
fn with_schema(value: &impl serde::Serialize) -> Result<serde_json::Value, serde_json::Error> {
    let mut value = serde_json::to_value(value)?;
    if let serde_json::Value::Object(fields) = &mut value {
        fields
            .entry("schema")
            .or_insert_with(|| serde_json::Value::from(SCHEMA));
    }
    Ok(value)
}

fn print_json(value: &impl serde::Serialize) {
    match with_schema(value).and_then(|v| serde_json::to_string_pretty(&v)) {
        Ok(json) => outln!("{}", out::json(&json)),
        Err(error) => say(&error),
    }
}

/// One JSON value on one line (`watch --json`, `replace --json`).
fn print_json_line(value: &impl serde::Serialize) {
    match with_schema(value).and_then(|v| serde_json::to_string(&v)) {
        Ok(line) => outln!("{}", out::json(&line)),
        Err(error) => say(&error),
    }
}

/// `status`: the lean snapshot, and with `--history N` the journal's last
/// N attempts.
async fn status(client: &ControlClient, history: Option<u32>, json: bool, utc: bool) -> ExitCode {
    let snapshot = match client.snapshot().await {
        Ok(snapshot) => snapshot,
        Err(error) => {
            say(&error);
            return ExitCode::from(EXIT_UNKNOWN);
        }
    };
    let attempts = match history {
        None => None,
        Some(limit) => match client.journal(limit).await {
            Ok(attempts) => Some(attempts),
            Err(error) => return fail(&error),
        },
    };
    print_status(&snapshot, attempts, json, utc)
}

/// `status`'s answer for `snapshot` (and the journal's `attempts` for
/// `--history`), from the control plane or the status record alike.
fn print_status(
    snapshot: &Snapshot,
    attempts: Option<Vec<JournalAttempt>>,
    json: bool,
    utc: bool,
) -> ExitCode {
    let times = Times::of(snapshot, utc);
    let code = status_code(&snapshot.lifecycle);
    out::exit_code_if_closed(code);
    if json {
        match (serde_json::to_value(snapshot), &attempts) {
            (Ok(mut value), Some(attempts)) => {
                if let serde_json::Value::Object(fields) = &mut value {
                    fields.insert(
                        "history".to_owned(),
                        serde_json::to_value(attempts).unwrap_or_default(),
                    );
                }
                print_json(&value);
            }
            _ => print_json(snapshot),
        }
    } else {
        out!("{}", render_status(snapshot, times));
        if let Some(attempts) = attempts {
            outln!("\nHistory (the journal's last {}):", attempts.len());
            out!("{}", render_journal(&attempts, times));
        }
    }
    ExitCode::from(code)
}

async fn probe(client: &ControlClient, what: ProbeKind, verbose: bool) -> ExitCode {
    match client.snapshot().await {
        Ok(snapshot) => probe_answer(&snapshot, what, verbose),
        Err(error) => {
            if verbose {
                say(&error);
            }
            ExitCode::FAILURE
        }
    }
}

/// `probe`'s answer for `snapshot`, from the control plane or the status
/// record alike.
fn probe_answer(snapshot: &Snapshot, what: ProbeKind, verbose: bool) -> ExitCode {
    let ok = match what {
        ProbeKind::Live => true,
        ProbeKind::Ready => matches!(snapshot.lifecycle, LifecycleState::Running { .. }),
    };
    if verbose {
        errln!(
            "steadfastctl: {} ({})",
            if ok { "ok" } else { "not ready" },
            snapshot.lifecycle.name()
        );
    }
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

async fn metrics(client: &ControlClient) -> ExitCode {
    match client.metrics().await {
        Ok(text) => {
            out!("{text}");
            ExitCode::SUCCESS
        }
        Err(error) => fail(&error),
    }
}

async fn journal(client: &ControlClient, limit: u32, json: bool, utc: bool) -> ExitCode {
    match client.journal(limit).await {
        Ok(attempts) => {
            print_journal(&attempts, json, false, utc);
            ExitCode::SUCCESS
        }
        Err(error) => fail(&error),
    }
}

/// `journal` when no daemon answers: the file under `data_dir`, read-only.
fn journal_offline(
    data_dir: &std::path::Path,
    limit: u32,
    why: &str,
    json: bool,
    utc: bool,
) -> ExitCode {
    let limit = limit.min(steadfast::protocol::control::MAX_JOURNAL_ATTEMPTS) as usize;
    match steadfast::control::read_journal(data_dir, limit) {
        Ok(attempts) => {
            errln!(
                "steadfastctl: no daemon answers ({}); reading {} directly",
                escape(why),
                data_dir.join(".steadfast/journal").display()
            );
            print_journal(&attempts, json, true, utc);
            ExitCode::SUCCESS
        }
        Err(error) => {
            errln!(
                "steadfastctl: no daemon answers ({}), and the journal cannot be read: {}",
                escape(why),
                escape(&error.to_string())
            );
            ExitCode::from(EXIT_CANNOT_CONNECT)
        }
    }
}

fn print_journal(attempts: &[JournalAttempt], json: bool, offline: bool, utc: bool) {
    if json {
        print_json(&serde_json::json!({
            "schema": SCHEMA,
            "offline": offline,
            "attempts": attempts,
        }));
        return;
    }
    if attempts.is_empty() {
        outln!("The journal records no attempt.");
    }
    out!("{}", render_journal(attempts, Times { now: now_ms(), utc }));
}

/// The journal's attempts grouped by run.
fn render_journal(attempts: &[JournalAttempt], times: Times) -> String {
    let mut out = String::new();
    let mut run = None;
    for entry in attempts {
        if run != Some(entry.run) {
            run = Some(entry.run);
            out.push_str(&format!("Run {}:\n", entry.run));
        }
        out.push_str(&render_attempt(&entry.attempt, times));
    }
    out
}

async fn config_show(client: &ControlClient, leaf: Option<&str>, json: bool) -> ExitCode {
    match client.config_show(leaf).await {
        Ok(view) if json => {
            print_json(&view);
            ExitCode::SUCCESS
        }
        Ok(view) => {
            if view.overrides.is_empty() {
                outln!("# override tier: empty");
            } else {
                outln!("# override tier");
                for (leaf, value) in &view.overrides {
                    outln!("{} = {}", escape(leaf), escape(&value.to_string()));
                }
            }
            match (&view.effective, &view.error, leaf) {
                (_, Some(error), _) => {
                    outln!("\n# effective: does not resolve: {}", escape(error));
                }
                (Some(value), None, Some(leaf)) => {
                    outln!("\n# effective\n{} = {}", escape(leaf), escape(value));
                }
                (Some(config), None, None) => outln!("\n# effective\n{}", config.trim_end()),
                (None, None, Some(leaf)) => outln!("\n# effective: {leaf} is not set"),
                (None, None, None) => {}
            }
            ExitCode::SUCCESS
        }
        Err(error) => fail(&error),
    }
}

/// The flags that reach the daemon this invocation reached, as a shell
/// would take them back (`--data-dir DIR`, `--socket PATH`, or `--tcp ADDR
/// --token-file PATH`), so a printed command runs as written.
fn connection_flags(cli: &Cli) -> String {
    let mut flags = Vec::new();
    if let Some(dir) = &cli.data_dir {
        flags.extend(["--data-dir".to_owned(), shell_word(&dir.to_string_lossy())]);
    }
    if let Some(socket) = &cli.socket {
        flags.extend(["--socket".to_owned(), shell_word(&socket.to_string_lossy())]);
    }
    if let Some(tcp) = &cli.tcp {
        flags.extend(["--tcp".to_owned(), tcp.to_string()]);
    }
    if let Some(token) = &cli.token_file {
        flags.extend([
            "--token-file".to_owned(),
            shell_word(&token.to_string_lossy()),
        ]);
    }
    if let Some(tls) = &cli.tls {
        flags.extend(["--tls".to_owned(), shell_word(tls)]);
    }
    for (flag, path) in [
        ("--client-config", &cli.client_config),
        ("--ca", &cli.ca),
        ("--cert", &cli.cert),
        ("--key", &cli.key),
    ] {
        if let Some(path) = path {
            flags.extend([flag.to_owned(), shell_word(&path.to_string_lossy())]);
        }
    }
    if let Some(name) = &cli.server_name {
        flags.extend(["--server-name".to_owned(), shell_word(name)]);
    }
    flags.join(" ")
}

/// `word` as one shell word: as it is when it holds only characters no
/// shell treats specially, else in single quotes.
fn shell_word(word: &str) -> String {
    if !word.is_empty()
        && word
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "/._-+:=@%,".contains(c))
    {
        word.to_owned()
    } else {
        format!("'{}'", word.replace('\'', "'\\''"))
    }
}

async fn reinit_prepare(client: &ControlClient, flags: &str, json: bool) -> ExitCode {
    match client.reinit_prepare().await {
        Ok(prepared) if json => {
            print_json(&serde_json::json!({
                "schema": SCHEMA,
                "token": prepared.token,
                "epoch": prepared.epoch,
            }));
            ExitCode::SUCCESS
        }
        Ok(prepared) => {
            outln!(
                "This destroys the stopped runtime's data (the service's wipe step).\n\
                 To confirm, run within this epoch ({}; any boot makes the token stale):\n\n  \
                 steadfastctl {flags}{}reinit --confirm {}",
                prepared.epoch,
                if flags.is_empty() { "" } else { " " },
                escape(&prepared.token)
            );
            ExitCode::SUCCESS
        }
        Err(error) => fail(&error),
    }
}

/// Follow the daemon with the long-poll, printing what changed. Without
/// `until`, it returns 0 when the daemon exits. With it, 0 at that state, 3
/// (`the daemon exited`) when the daemon exits first, 5 when `deadline`
/// passes first.
async fn watch(
    client: &ControlClient,
    until: Option<StateName>,
    json: bool,
    utc: bool,
    deadline: Option<(tokio::time::Instant, Duration)>,
) -> ExitCode {
    let mut last: Option<Snapshot> = None;
    loop {
        let wait = deadline.map_or(Duration::from_secs(30), |(at, _)| {
            at.saturating_duration_since(tokio::time::Instant::now())
                .min(Duration::from_secs(30))
        });
        let next = match &last {
            None => client.snapshot().await,
            Some(have) => client.watch(have, wait).await,
        };
        let snapshot = match next {
            Ok(snapshot) => snapshot,
            // A daemon that answered once and then cannot be reached has
            // exited (its control socket goes with it); say so in those words.
            Err(error) if last.is_some() && error.is_gone() => {
                return daemon_exited(until, last.as_ref(), &error.to_string());
            }
            Err(error) if error.is_deadline() && deadline.is_some() => {
                return timed_out(until, last.as_ref(), deadline);
            }
            Err(error) => return fail(&error),
        };
        if last.as_ref().map(|s| s.version) != Some(snapshot.version) {
            if json {
                print_json_line(&snapshot);
            } else {
                for line in changes(last.as_ref(), &snapshot, utc) {
                    outln!("{line}");
                }
            }
        }
        if until.is_some_and(|state| snapshot.lifecycle.name() == state.name()) {
            return ExitCode::SUCCESS;
        }
        if matches!(snapshot.lifecycle, LifecycleState::Exiting { .. }) {
            return daemon_exited(until, Some(&snapshot), "it said it is exiting");
        }
        if deadline.is_some_and(|(at, _)| tokio::time::Instant::now() >= at) {
            return timed_out(until, Some(&snapshot), deadline);
        }
        last = Some(snapshot);
    }
}

/// The daemon `watch` followed exited (`how`): 0 for a plain watch, 3 when
/// it was waited on for another state.
fn daemon_exited(until: Option<StateName>, last: Option<&Snapshot>, how: &str) -> ExitCode {
    let seen_exiting = last.is_some_and(|s| matches!(s.lifecycle, LifecycleState::Exiting { .. }));
    let Some(state) = until else {
        if !seen_exiting {
            errln!("steadfastctl: the daemon exited ({})", escape(how));
        }
        return ExitCode::SUCCESS;
    };
    let last = last.map_or_else(|| "nothing".to_owned(), state_line);
    errln!(
        "steadfastctl: the daemon exited before it was {} ({}; last seen: {last})",
        state.name(),
        escape(how)
    );
    ExitCode::from(EXIT_NOT_RUNNING)
}

/// `--timeout` passed while `watch` waited: 5, naming what it waited for
/// and what it saw last.
fn timed_out(
    until: Option<StateName>,
    last: Option<&Snapshot>,
    deadline: Option<(tokio::time::Instant, Duration)>,
) -> ExitCode {
    let secs = deadline.map_or(0.0, |(_, timeout)| timeout.as_secs_f64());
    let last = last.map_or_else(|| "nothing".to_owned(), state_line);
    match until {
        Some(state) => errln!(
            "steadfastctl: timed out after {secs} s waiting for {} (last seen: {last})",
            state.name()
        ),
        None => errln!("steadfastctl: timed out after {secs} s (last seen: {last})"),
    }
    ExitCode::from(EXIT_TIMED_OUT)
}

/// The width of [`clock`]'s text and the space after it: where a `watch`
/// line's continuation lines start.
const CLOCK_WIDTH: usize = "14:03:07.123 ".len();

/// The lines `watch` prints for the step from `before` to `now`: a
/// transition, and each phase that started or ended, each after the
/// wall-clock time it happened (local, or UTC with `--utc`, as
/// `journalctl -o short`: `14:03:07.123`): a phase's start or end, the
/// state's `since`, else when the daemon answered.
fn changes(before: Option<&Snapshot>, now: &Snapshot, utc: bool) -> Vec<String> {
    let answered = now.now.map_or_else(now_ms, |t| t.as_millis());
    let stamped =
        |at: u64, line: &str| format!("{} {}", clock(at, utc), out::block(line, 4 + CLOCK_WIDTH));
    let mut lines = Vec::new();
    let state_changed = before.is_none_or(|b| b.lifecycle != now.lifecycle);
    for attempt in &now.attempts {
        let old = before.and_then(|b| b.attempts.iter().find(|a| a.attempt == attempt.attempt));
        for (i, phase) in attempt.phases.iter().enumerate() {
            // A phase whose total became known later (resolve_config) is
            // not a change to print again.
            let old_phase = old.and_then(|a| a.phases.get(i));
            if old_phase.is_some_and(|old| {
                old.phase == phase.phase
                    && old.outcome == phase.outcome
                    && old.duration_ms == phase.duration_ms
            }) {
                continue;
            }
            let position = position(phase);
            let at = phase.started_at.as_millis() + phase.duration_ms.unwrap_or(0);
            let line = match (&phase.outcome, phase.duration_ms) {
                (PhaseOutcome::Running, _) => {
                    format!(
                        "attempt {} phase {position} {}: started {}",
                        attempt.attempt,
                        escape(&phase.phase.to_string()),
                        absolute(phase.started_at.as_millis(), utc)
                    )
                }
                (outcome, duration) => format!(
                    "attempt {} phase {position} {}: {}{}",
                    attempt.attempt,
                    escape(&phase.phase.to_string()),
                    outcome_text(outcome),
                    duration
                        .map(|ms| format!(" in {ms} ms"))
                        .unwrap_or_default()
                ),
            };
            lines.push(stamped(at, &line));
        }
    }
    if state_changed {
        let at = since(&now.lifecycle).unwrap_or(answered);
        lines.push(stamped(at, &format!("→ {}", state_line(now))));
    }
    lines
}

/// `ms` since the epoch as a wall-clock time of day with milliseconds
/// (`14:03:07.123`), in the local time zone or in UTC.
fn clock(ms: u64, utc: bool) -> String {
    let Some(at) = i64::try_from(ms)
        .ok()
        .and_then(|ms| jiff::Timestamp::from_millisecond(ms).ok())
    else {
        return format!("{:>12}", "?");
    };
    let zone = if utc {
        jiff::tz::TimeZone::UTC
    } else {
        local_zone().clone()
    };
    at.to_zoned(zone).strftime("%H:%M:%S%.3f").to_string()
}

/// A phase's place in the plan: `2/5`, or `1/?` while the plan is not
/// known (`resolve_config` before the config resolved).
fn position(phase: &PhaseRecord) -> String {
    if phase.total > 0 {
        format!("{}/{}", phase.index, phase.total)
    } else {
        format!("{}/?", phase.index)
    }
}

fn outcome_text(outcome: &PhaseOutcome) -> String {
    match outcome {
        PhaseOutcome::Running => "running".into(),
        PhaseOutcome::Completed => "completed".into(),
        PhaseOutcome::Skipped => "skipped (still present)".into(),
        PhaseOutcome::Failed { error } => format!("failed: {error}"),
    }
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// How times are shown: relative to `now` (the daemon's clock when it
/// answered, else this machine's), and absolute in UTC or local time.
#[derive(Debug, Clone, Copy)]
struct Times {
    now: u64,
    utc: bool,
}

impl Times {
    fn of(snapshot: &Snapshot, utc: bool) -> Self {
        Self {
            now: snapshot.now.map_or_else(now_ms, |t| t.as_millis()),
            utc,
        }
    }

    /// `at` as RFC 3339 and relative: `2026-12-01T11:28:56.123+01:00 (15.2 s ago)`.
    fn at(self, at: u64) -> String {
        format!("{} ({})", absolute(at, self.utc), ago(self.now, at))
    }
}

/// `ms` since the epoch as RFC 3339 with milliseconds, in UTC (`Z`) or in
/// the local time zone (`TZ`, else `/etc/localtime`; UTC if neither is
/// known).
fn absolute(ms: u64, utc: bool) -> String {
    let Ok(at) = i64::try_from(ms)
        .map_err(|_| ())
        .and_then(|ms| jiff::Timestamp::from_millisecond(ms).map_err(|_| ()))
    else {
        return format!("{ms} ms after the epoch");
    };
    if utc {
        return format!("{at:.3}");
    }
    at.to_zoned(local_zone().clone())
        .strftime("%Y-%m-%dT%H:%M:%S%.3f%:z")
        .to_string()
}

/// The local time zone, looked up once: `TZ` when set (through jiff),
/// else `/etc/localtime` parsed directly. (`TimeZone::try_system` without
/// `TZ` walks all of `/usr/share/zoneinfo` to name the zone: ~25 directory
/// opens and several milliseconds per `status`, for a name we do not
/// print.) UTC when neither can be read — the printed `+00:00` says so.
fn local_zone() -> &'static jiff::tz::TimeZone {
    static ZONE: std::sync::OnceLock<jiff::tz::TimeZone> = std::sync::OnceLock::new();
    ZONE.get_or_init(|| {
        let zone = if std::env::var_os("TZ").is_some() {
            jiff::tz::TimeZone::try_system().ok()
        } else {
            std::fs::read("/etc/localtime")
                .ok()
                .and_then(|tzif| jiff::tz::TimeZone::tzif("localtime", &tzif).ok())
        };
        zone.unwrap_or(jiff::tz::TimeZone::UTC)
    })
}

fn ago(now: u64, at: u64) -> String {
    let ms = now.saturating_sub(at);
    if ms < 1_000 {
        format!("{ms} ms ago")
    } else if ms < 120_000 {
        format!("{:.1} s ago", ms as f64 / 1000.0)
    } else {
        format!("{} min ago", ms / 60_000)
    }
}

/// The daemon's state in one line (`STATUS=`'s words), what it quotes
/// escaped ([`out::escape`]).
fn state_line(snapshot: &Snapshot) -> String {
    escape(&steadfast::daemon::status_line(snapshot)).into_owned()
}

/// An error on stderr after `steadfastctl: `, its continuation lines (a
/// daemon's refusal may quote a parse error of several) under its column.
fn say(error: &dyn std::fmt::Display) {
    errln!("steadfastctl: {}", out::block(&error.to_string(), 14));
}

fn since(lifecycle: &LifecycleState) -> Option<u64> {
    match lifecycle {
        LifecycleState::Resolving { since }
        | LifecycleState::Booting { since, .. }
        | LifecycleState::Running { since, .. }
        | LifecycleState::Stopped { since, .. }
        | LifecycleState::Wedged { since, .. }
        | LifecycleState::Reinitializing { since, .. } => Some(since.as_millis()),
        LifecycleState::Failed { report, .. } => Some(report.at.as_millis()),
        _ => None,
    }
}

fn attempt_of(lifecycle: &LifecycleState) -> Option<u32> {
    match lifecycle {
        LifecycleState::Booting { attempt, .. }
        | LifecycleState::Running { attempt, .. }
        | LifecycleState::Draining { attempt, .. }
        | LifecycleState::Failed { attempt, .. } => Some(attempt.get()),
        _ => None,
    }
}

/// The restart budget: how much of it the machine has counted, or off.
fn budget_line(snapshot: &Snapshot) -> String {
    let spent = matches!(
        snapshot.lifecycle,
        LifecycleState::Failed {
            budget_spent: Some(_),
            ..
        }
    );
    match snapshot.budget {
        None => "off (failed boots retry on backoff forever)".to_owned(),
        Some(b) => format!(
            "{} of {} failed automatic boots within {} s{}",
            b.failures,
            b.max_failures,
            b.window_ms / 1000,
            if spent {
                " — spent: `steadfastctl retry` or a config change resumes"
            } else {
                ""
            }
        ),
    }
}

/// The human status, like `systemctl status`.
fn render_status(snapshot: &Snapshot, times: Times) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "● steadfast daemon (pid {}) — {}",
        snapshot.pid,
        snapshot.lifecycle.name()
    );
    let _ = writeln!(out, "      State: {}", state_line(snapshot));
    if let Some(at) = since(&snapshot.lifecycle) {
        let _ = writeln!(out, "      Since: {}", times.at(at));
    }
    if let Some(attempt) = attempt_of(&snapshot.lifecycle) {
        let _ = writeln!(
            out,
            "    Attempt: {attempt} (failure streak {})",
            snapshot.streak
        );
    }
    let _ = writeln!(out, "     Budget: {}", budget_line(snapshot));
    let previous = match &snapshot.previous_run {
        PreviousRun::FirstEver => "first ever".to_owned(),
        PreviousRun::CleanStop { at, epoch } => {
            format!("clean stop {} (epoch {epoch})", times.at(at.as_millis()))
        }
        PreviousRun::Crashed { pid, attempt } => format!(
            "crashed (pid {}, attempt {})",
            pid.map_or("?".into(), |p| p.to_string()),
            attempt.map_or("?".into(), |a| a.to_string())
        ),
        PreviousRun::HandedOver { pid, attempt } => format!(
            "handed over (by pid {pid}, on attempt {})",
            attempt.map_or("?".into(), |a| a.to_string())
        ),
    };
    let _ = writeln!(out, "   Previous: {previous}");
    let pending = match &snapshot.pending {
        steadfast::protocol::lifecycle::PendingApply::InSync => "in sync".to_owned(),
        steadfast::protocol::lifecycle::PendingApply::RestartNeeded { leaves } => {
            format!("restart needed for {}", escape(&leaves.join(", ")))
        }
    };
    let _ = writeln!(out, "    Pending: {pending}");
    if snapshot.hold {
        let _ = writeln!(out, "       Hold: held across relaunch");
    }
    if let Some(identity) = &snapshot.identity {
        let _ = writeln!(out, "   Identity: {}", escape(identity));
    }
    let _ = writeln!(out, "      Epoch: {}", snapshot.epoch);
    let last_error = match &snapshot.lifecycle {
        LifecycleState::Failed { report, .. } => {
            Some(format!("{}: {}", report.phase, report.error))
        }
        _ => None,
    }
    .or_else(|| snapshot.error.clone());
    if let Some(error) = last_error {
        let _ = writeln!(out, " Last error: {}", out::block(&error, 13));
    }
    // The current attempt; earlier ones are the journal's (`--history N`).
    if let Some(attempt) = snapshot.attempts.last() {
        let _ = writeln!(out, "\nCurrent attempt:");
        out.push_str(&render_attempt(attempt, times));
    }
    out
}

/// One attempt and its phases, as `status` and `journal` print it.
fn render_attempt(attempt: &AttemptRecord, times: Times) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let result = match attempt.result {
        AttemptResult::InProgress => "in progress",
        AttemptResult::Succeeded => "succeeded",
        AttemptResult::Failed => "failed",
        AttemptResult::Cancelled => "cancelled",
    };
    let _ = writeln!(
        out,
        "  #{} {} (started {})",
        attempt.attempt,
        result,
        times.at(attempt.started_at.as_millis())
    );
    for phase in &attempt.phases {
        let duration = phase
            .duration_ms
            .map_or_else(|| "…".to_owned(), |ms| format!("{ms} ms"));
        let _ = writeln!(
            out,
            "     {:>5} {:<20} {:>10}  {}",
            position(phase),
            escape(&phase.phase.to_string()),
            duration,
            // Under the outcome column: 5 + 6 + 21 + 10 + 2.
            out::block(&outcome_text(&phase.outcome), 44)
        );
    }
    out
}

/// Seconds (from the command line) as milliseconds; `None` when negative or
/// not a number.
fn secs_to_ms(secs: f64) -> Option<u64> {
    Duration::try_from_secs_f64(secs)
        .ok()
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// Start a replacement and follow it to its end.
async fn replace(
    client: &ControlClient,
    binary: &std::path::Path,
    mode: ReplaceMode,
    setup_budget: f64,
    drain_budget: Option<f64>,
    json: bool,
) -> ExitCode {
    use steadfast::protocol::control::ReplaceRequest;
    use steadfast::protocol::replacement::{Ended, Mode, Step};
    let Some(setup_budget_ms) = secs_to_ms(setup_budget).filter(|&ms| ms > 0) else {
        errln!("steadfastctl: --setup-budget must be a positive number of seconds");
        return ExitCode::from(2);
    };
    let drain_budget_ms = match drain_budget.map(secs_to_ms) {
        None => None,
        Some(Some(ms)) => Some(ms),
        Some(None) => {
            errln!("steadfastctl: --drain-budget must be a number of seconds");
            return ExitCode::from(2);
        }
    };
    // Relative paths are the operator's: resolve them here.
    let binary = std::path::absolute(binary).unwrap_or_else(|_| binary.to_path_buf());
    let request = ReplaceRequest {
        binary: binary.display().to_string(),
        mode: match mode {
            ReplaceMode::Overlap => Mode::Overlap,
            ReplaceMode::Exclusive => Mode::Exclusive,
        },
        setup_budget_ms,
        drain_budget_ms,
    };
    let started = match client.replace(request).await {
        Ok(status) => status,
        Err(error) => return fail(&error),
    };
    let Some(mut report) = started.report else {
        errln!("steadfastctl: the daemon started no replacement");
        return ExitCode::from(EXIT_CANNOT_CONNECT);
    };
    let serial = report.serial;
    if !json {
        outln!(
            "replacing pid {} by {} ({} mode)",
            started.pid,
            escape(&report.target),
            mode_name(report.mode)
        );
    }
    let mut printed = 0;
    loop {
        for event in report.events.iter().skip(printed) {
            if json {
                print_json_line(event);
            } else {
                match event.answer {
                    None => outln!("  {} ...", event.step),
                    Some(answer) => outln!("  {} {answer:?}", event.step),
                }
            }
        }
        printed = report.events.len();
        if let Some(ended) = &report.ended {
            if json {
                print_json_line(ended);
            }
            return match ended {
                Ended::Outcome(outcome) => {
                    if !json {
                        outln!("outcome: {outcome:?}");
                    }
                    ExitCode::SUCCESS
                }
                Ended::Failed {
                    step,
                    committed,
                    message,
                    ..
                } => {
                    errln!(
                        "steadfastctl: the replacement failed at {step} (committed: {committed}): {}",
                        escape(message)
                    );
                    ExitCode::from(EXIT_REPLACE_FAILED)
                }
            };
        }
        let committed = report
            .events
            .iter()
            .any(|e| e.step == Step::Commit && e.answer.is_some());
        match client
            .replace_status(report.seq, Duration::from_secs(30))
            .await
        {
            Ok(status) => match status.report {
                Some(next) if next.serial == serial => report = next,
                _ => {
                    errln!("steadfastctl: the daemon lost track of the replacement");
                    return ExitCode::from(EXIT_CANNOT_CONNECT);
                }
            },
            Err(error) if committed => {
                // The incumbent handed over and exited before the last word.
                outln!(
                    "committed; the incumbent has exited ({})",
                    escape(&error.to_string())
                );
                return ExitCode::SUCCESS;
            }
            Err(error) => return fail(&error),
        }
    }
}

const fn mode_name(mode: steadfast::protocol::replacement::Mode) -> &'static str {
    match mode {
        steadfast::protocol::replacement::Mode::Overlap => "overlap",
        steadfast::protocol::replacement::Mode::Exclusive => "exclusive",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// [`quick::parse`] gives what clap gives on every form it reads:
    /// each subcommand it knows, each of its global flags in each spelling
    /// before the subcommand, between it and its own flags, and last, and
    /// all of them at once in several orders; and it leaves every other
    /// line to clap.
    #[test]
    fn the_quick_parse_is_clap_s() {
        let commands: &[&[&str]] = &[
            &["status"],
            &["probe", "ready"],
            &["probe", "live"],
            &["start"],
            &["start", "--wait"],
            &["restart"],
            &["restart", "--wait"],
            &["restart", "--force"],
            &["restart", "--force", "--wait"],
            &["restart", "--wait", "--force"],
            &["retry"],
            &["retry", "--wait"],
            &["stop"],
            &["stop", "--hold"],
            &["start", "--strict"],
            &["start", "--wait", "--strict"],
            &["start", "--strict", "--wait"],
            &["stop", "--strict"],
            &["stop", "--hold", "--strict"],
            &["stop", "--strict", "--hold"],
        ];
        let globals: &[&[&str]] = &[
            &["--data-dir", "/d"],
            &["--data-dir=/d =d"],
            &["--data-dir", "status"],
            &["--socket", "/s"],
            &["--socket=s"],
            &["--json"],
            &["--utc"],
            &["-v"],
            &["--verbose"],
            &["--timeout", "2.5"],
            &["--timeout=7"],
            &["--timeout", "1e3"],
            &["--timeout", "+3"],
            &["--timeout=inf"],
            &["--timeout", "NaN"],
        ];
        // One of each kind, in each order of the four kinds.
        let sets: &[&[usize]] = &[
            &[0, 5, 6, 7, 9],
            &[3, 6, 8, 10, 5],
            &[11, 8, 1, 5, 6],
            &[6, 4, 5, 7, 11],
            &[2, 9, 7, 5],
        ];
        // A global flag goes before the subcommand (0), between its name
        // and its own flags or argument (1), or last (2).
        fn place<'a>(command: &[&'a str], at: usize, flags: &[&[&'a str]]) -> Vec<&'a str> {
            let flags = flags.iter().flat_map(|f| f.iter().copied());
            let (name, own) = command.split_at(1);
            match at {
                0 => flags.chain(command.iter().copied()).collect(),
                1 => name
                    .iter()
                    .copied()
                    .chain(flags)
                    .chain(own.iter().copied())
                    .collect(),
                _ => command.iter().copied().chain(flags).collect(),
            }
        }
        let mut accepted = Vec::<Vec<&str>>::new();
        for command in commands {
            accepted.push(command.to_vec());
            for flag in globals {
                for at in 0..3 {
                    accepted.push(place(command, at, &[flag]));
                }
            }
            for set in sets {
                let flags: Vec<&[&str]> = set.iter().map(|&i| globals[i]).collect();
                for at in 0..3 {
                    accepted.push(place(command, at, &flags));
                }
                // Split: half before the name, half last.
                let (first, last) = flags.split_at(flags.len() / 2);
                let mut line: Vec<&str> = first.iter().flat_map(|f| f.iter().copied()).collect();
                line.extend_from_slice(command);
                line.extend(last.iter().flat_map(|f| f.iter().copied()));
                accepted.push(line);
            }
        }
        for form in &accepted {
            let argv: Vec<std::ffi::OsString> = std::iter::once("steadfastctl")
                .chain(form.iter().copied())
                .map(Into::into)
                .collect();
            let quick = quick::parse(argv.clone());
            let whole = Cli::try_parse_from(argv);
            match (&quick, &whole) {
                (Some(quick), Ok(whole)) => {
                    assert_eq!(format!("{quick:?}"), format!("{whole:?}"), "{form:?}");
                }
                _ => panic!("{form:?}: quick {quick:?}, clap {whole:?}"),
            }
        }
        // A path that is not UTF-8 is a path all the same.
        let odd =
            <std::ffi::OsString as std::os::unix::ffi::OsStringExt>::from_vec(b"/d\xff".to_vec());
        let argv: Vec<std::ffi::OsString> = vec![
            "steadfastctl".into(),
            "--data-dir".into(),
            odd,
            "status".into(),
        ];
        let quick = quick::parse(argv.clone()).expect("a non-UTF-8 path");
        let whole = Cli::try_parse_from(argv).expect("a non-UTF-8 path");
        assert_eq!(format!("{quick:?}"), format!("{whole:?}"));

        // Everything else is clap's: its errors, its help, the other
        // commands and flags, and anything read two ways.
        let declined: &[&[&str]] = &[
            &[],
            &["--help"],
            &["-h"],
            &["--version"],
            &["-V"],
            &["help"],
            &["help", "status"],
            &["status", "--help"],
            &["probe"],
            &["probe", "sleepy"],
            &["probe", "ready", "live"],
            &["probe", "Ready"],
            &["status", "extra"],
            &["Status"],
            &["stat"],
            &["status", "--history", "3"],
            &["--json", "--json", "status"],
            &["--json", "status", "--json"],
            &["-v", "--verbose", "status"],
            &["-vv", "status"],
            &["-vj", "status"],
            &["--json=true", "status"],
            &["--data-dir", "/d", "--socket", "/s", "status"],
            &["--data-dir", "/d", "status", "--socket", "/s"],
            &["--data-dir", "/d", "--data-dir", "/e", "status"],
            &["--data-dir=", "status"],
            &["--data-dir", "", "status"],
            &["--data-dir", "-d", "status"],
            &["--data-dir=-d", "status"],
            &["status", "--data-dir"],
            &["--timeout", "soon", "status"],
            &["--timeout=-1", "status"],
            &["--timeout", "-1", "status"],
            &["--timeout", "", "status"],
            &["--wait", "restart"],
            &["restart", "--wait", "--wait"],
            &["restart", "--wait=true"],
            &["status", "--wait"],
            &["start", "--force"],
            &["stop", "--wait"],
            &["start", "--strict", "--strict"],
            &["stop", "--strict=true"],
            &["--strict", "stop"],
            &["restart", "--strict"],
            &["completions", "bash"],
            &["man"],
            &["man", "start"],
            &["--", "status"],
            &["status", "--"],
            &["-", "status"],
            &["--data", "/d", "status"],
            &["--tcp", "127.0.0.1:7433", "--token-file", "/t", "status"],
            &["--tls", "127.0.0.1:7433", "--ca", "/ca", "status"],
            &["--client-config", "/c", "status"],
            &["--inventory", "/i", "status"],
            &["--only", "a", "status"],
            &["watch"],
            &["journal"],
            &["reload"],
            &["metrics"],
            &["config", "show"],
            &["exit"],
            &["reinit"],
        ];
        for form in declined {
            let argv = std::iter::once("steadfastctl")
                .chain(form.iter().copied())
                .map(std::ffi::OsString::from);
            assert!(quick::parse(argv).is_none(), "{form:?} is clap's");
        }
    }

    /// [`lean_parse`] accepts exactly what clap's whole command accepts,
    /// and means the same by it: the common forms, flags before and after
    /// the subcommand, and the malformed ones (which both refuse, with the
    /// same kind of error, so the whole command's message is what prints).
    #[test]
    fn the_lean_parse_is_clap_s() {
        let forms: &[&[&str]] = &[
            &["status"],
            &["--data-dir", "/d", "status"],
            &["status", "--data-dir", "/d", "--json"],
            &["--json", "--utc", "status", "--history", "3"],
            &["--socket", "/s", "restart", "--wait"],
            &[
                "--data-dir",
                "/d",
                "restart",
                "--force",
                "--wait",
                "--timeout",
                "2.5",
            ],
            &["restart", "--wait", "--json", "--data-dir", "/d"],
            &["--tcp", "127.0.0.1:7433", "--token-file", "/t", "status"],
            &[
                "--tls",
                "127.0.0.1:7433",
                "--ca",
                "/ca",
                "--token-file",
                "/t",
                "probe",
                "ready",
            ],
            &["-v", "probe", "live"],
            &["start", "--wait"],
            &["stop", "--hold"],
            &["stop", "--hold", "--strict"],
            &["start", "--strict", "--wait"],
            &["completions", "zsh"],
            &["man"],
            &["man", "stop"],
            &[
                "--tls",
                "daemon.example:7443",
                "--ca",
                "/ca",
                "--token-file",
                "/t",
                "status",
            ],
            &[
                "--tls",
                "[::1]:7443",
                "--ca",
                "/ca",
                "--token-file",
                "/t",
                "status",
            ],
            &["watch", "--until", "running", "--timeout", "3"],
            &["journal", "-n", "5"],
            &["config", "set", "log.level", "-1"],
            &["config", "show"],
            &["--inventory", "/i", "status", "--only", "a,b"],
            &["--inventory", "/i", "restart", "--all", "--parallel", "2"],
            &["replace", "--binary", "/b", "--mode", "overlap"],
            // Refused by both.
            &[],
            &["--help"],
            &["status", "--help"],
            &["--version"],
            &["status", "--nosuch"],
            &["nosuch"],
            &["--data-dir", "/d", "--socket", "/s", "status"],
            &["--tcp", "127.0.0.1:7433", "status"],
            &["--tcp", "not-an-address", "--token-file", "/t", "status"],
            &[
                "--tls",
                "no-port",
                "--ca",
                "/ca",
                "--token-file",
                "/t",
                "status",
            ],
            &[
                "--tls",
                "::1:7443",
                "--ca",
                "/ca",
                "--token-file",
                "/t",
                "status",
            ],
            &["completions", "nosuchshell"],
            &["stop", "--strict", "--strict"],
            &["--timeout", "soon", "status"],
            &["watch", "--until", "sleeping"],
            &["--only", "a", "--all", "status"],
            &["status", "--data-dir"],
        ];
        for form in forms {
            let argv = std::iter::once("steadfastctl").chain(form.iter().copied());
            let lean = lean_parse(argv.clone());
            let whole = Cli::try_parse_from(argv);
            match (&lean, &whole) {
                (Ok(lean), Ok(whole)) => {
                    assert_eq!(format!("{lean:?}"), format!("{whole:?}"), "{form:?}");
                }
                (Err(lean), Err(whole)) => assert_eq!(lean.kind(), whole.kind(), "{form:?}"),
                _ => panic!("{form:?}: lean {lean:?}, whole {whole:?}"),
            }
        }
    }
}
