//! The command line's definition and its parse: the clap types ([`Cli`],
//! [`Cmd`], the value enums), the checks clap runs on a value
//! ([`host_port`]), the one parse of the command line ([`parse_from`]), and
//! the text generated from the definition (`completions`, `man`). Nothing
//! here dials a daemon.

use std::net::SocketAddr;
use std::num::NonZeroUsize;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};
use steadfast::protocol::control::ReadCmd;

use crate::EXIT_USAGE;
use crate::out;
use crate::out::say;

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
pub struct Cli {
    /// The daemon's data directory; its socket is
    /// `<DIR>/.steadfast/control.sock` (default: `$STEADFAST_DATA_DIR`, else
    /// the current directory).
    #[arg(long, value_name = "DIR", global = true, conflicts_with = "socket")]
    pub data_dir: Option<PathBuf>,
    /// The control socket's path (instead of --data-dir).
    #[arg(long, value_name = "PATH", global = true)]
    pub socket: Option<PathBuf>,
    /// The daemon's TCP control address, IP:PORT (e.g. 127.0.0.1:7433),
    /// instead of the socket; needs --token-file.
    #[arg(
        long,
        value_name = "ADDR",
        global = true,
        conflicts_with_all = ["data_dir", "socket"],
        requires = "token_file"
    )]
    pub tcp: Option<SocketAddr>,
    /// The token file for --tcp (or, optionally, --tls): the daemon's
    /// token (64 hex digits), in a file only its owner may read (mode 0600;
    /// a looser file is refused).
    #[arg(long, value_name = "PATH", global = true)]
    pub token_file: Option<PathBuf>,
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
    pub tls: Option<String>,
    /// --tls: the CA (PEM) the daemon's certificate must be signed by.
    #[arg(long, value_name = "FILE", global = true)]
    pub ca: Option<PathBuf>,
    /// --tls: this client's certificate (PEM), for mutual TLS.
    #[arg(long, value_name = "FILE", global = true)]
    pub cert: Option<PathBuf>,
    /// --tls: this client's private key (PEM; mode 0600, a looser file is
    /// refused).
    #[arg(long, value_name = "FILE", global = true)]
    pub key: Option<PathBuf>,
    /// --tls: the name the daemon's certificate must be for (default: the
    /// host of --tls, a name or an IP address).
    #[arg(long, value_name = "NAME", global = true)]
    pub server_name: Option<String>,
    /// A TOML file with any of `tls`, `ca`, `cert`, `key`, `token_file`,
    /// `server_name` (the flags of the same names win over it); its
    /// relative paths are the file's directory's.
    #[arg(
        long,
        value_name = "FILE",
        global = true,
        conflicts_with_all = ["data_dir", "socket", "tcp"]
    )]
    pub client_config: Option<PathBuf>,
    /// Print JSON for scripts: the snapshot (the shape of `spec/control.md`),
    /// or the value a command answers (journal, config show, reinit).
    #[arg(long, global = true)]
    pub json: bool,
    /// Print absolute times in UTC (`…Z`) instead of the local time zone.
    #[arg(long, global = true)]
    pub utc: bool,
    /// Say more (for `probe`: say why it failed).
    #[arg(long, short, global = true)]
    pub verbose: bool,
    /// Give up after this many seconds (connecting, waiting out a busy
    /// daemon, and the call; default 120); a command whose deadline passed
    /// before the daemon could run it is dropped there, never run later.
    /// `watch` waits without end unless it is given; `watch --until` and
    /// `stop` exit 5 when it passes. With --inventory: one deadline for
    /// all the daemons a query asks (default 10), and each command's call.
    #[arg(long, value_name = "SECS", global = true, value_parser = timeout_secs)]
    pub timeout: Option<f64>,
    /// Many daemons at once (`--inventory FILE`, `--only`, `--all`,
    /// `--parallel`): see `fleet.rs`.
    #[command(flatten)]
    pub fleet: FleetArgs,
    /// What to do.
    #[command(subcommand)]
    pub command: Cmd,
}

// `defer`: a subcommand's own flags are built only when it is the one
// given (the command line's cost is mostly clap's).
#[derive(Debug, Subcommand)]
#[command(defer = true)]
pub enum Cmd {
    /// Show the daemon's state, its counters, its previous run and the
    /// current attempt (earlier attempts: `--history N`, or `journal`).
    Status {
        /// Also show the last N attempts the journal records.
        #[arg(long, value_name = "N")]
        history: Option<u32>,
    },
    /// Boot a stopped runtime (clears a hold) and wait until the boot
    /// settled, as `systemctl start`: 0 running; 3 failed, wedged or
    /// stopped (the state it settled in and its reason on stderr); 5 when
    /// `--timeout` (default 120 s) passes first. A runtime already running
    /// is no error: it says so and exits 0 (unless --strict).
    Start {
        /// Return once the daemon accepted the start (it is booting),
        /// without waiting for the boot to settle.
        #[arg(long)]
        no_block: bool,
        /// Wait until the boot settled: the default; accepted for scripts.
        #[arg(long, conflicts_with = "no_block")]
        wait: bool,
        /// Refuse (exit 3) when the runtime is already running.
        #[arg(long)]
        strict: bool,
    },
    /// Stop the runtime; returns once the drain has settled (5 when
    /// `--timeout`, default 120 s, passes first). A runtime already
    /// stopped is no error: it says so and exits 0 (unless --strict).
    Stop {
        /// Keep it stopped across a relaunch of the daemon.
        #[arg(long)]
        hold: bool,
        /// Return once the daemon took the stop (it is draining), without
        /// waiting for the drain to settle.
        #[arg(long)]
        no_block: bool,
        /// Refuse (exit 3) when the runtime is already stopped.
        #[arg(long)]
        strict: bool,
    },
    /// Stop the runtime and boot it again, and wait until the new boot
    /// settled, as `start` (and `systemctl restart`). The daemon resolves
    /// the new config first: one that does not resolve is refused (exit 3,
    /// `config_invalid` and the error) and the runtime keeps serving.
    Restart {
        /// Drain even when the new config does not resolve (the next boot
        /// then fails held in `resolve_config`).
        #[arg(long)]
        force: bool,
        /// Return once the daemon accepted the restart, without waiting
        /// for the new boot to settle.
        #[arg(long)]
        no_block: bool,
        /// Wait until the new boot settled: the default; accepted for
        /// scripts.
        #[arg(long, conflicts_with = "no_block")]
        wait: bool,
    },
    /// Retry a failed boot now.
    Retry {
        /// Return once the boot settled, as `start` does.
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
    /// List the running runtime's supervised children, or restart, stop or
    /// start one by name (that child alone; never counted against its
    /// group's intensity), as `supervisorctl` does for one program.
    #[command(subcommand)]
    Child(ChildCmd),
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
    // The commands answered from the daemon's snapshot alone (`ping`, …),
    // each a subcommand its own type defines: its name, its line of help,
    // its arguments (`steadfast_protocol::control::Reads`).
    #[command(flatten)]
    Read(ReadCmd),
}

#[derive(Debug, Subcommand)]
pub enum ConfigCmd {
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

#[derive(Debug, Subcommand)]
pub enum ChildCmd {
    /// List the children: name, kind, restart type, state, incarnation,
    /// restarts within the group's period (the read role may).
    List,
    /// Stop the child if it runs, then start it; returns once it runs again.
    Restart {
        /// The child's name.
        name: String,
        /// Accepted for scripts: the command always returns once the child
        /// runs again.
        #[arg(long)]
        wait: bool,
    },
    /// Stop the child (within its shutdown timeout); it stays stopped until
    /// `child start`, or the runtime's next boot.
    Stop {
        /// The child's name.
        name: String,
        /// Accepted for scripts: the command always returns once the child
        /// has stopped.
        #[arg(long)]
        wait: bool,
    },
    /// Start a child that is not running; returns once it runs.
    Start {
        /// The child's name.
        name: String,
        /// Accepted for scripts: the command always returns once the child
        /// runs.
        #[arg(long)]
        wait: bool,
    },
}

/// A replacement's mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ReplaceMode {
    Overlap,
    Exclusive,
}

/// A lifecycle state's name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
#[value(rename_all = "snake_case")]
pub enum StateName {
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
    pub fn name(self) -> &'static str {
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
pub enum ProbeKind {
    /// The runtime is running.
    Ready,
    /// The daemon answers.
    Live,
}

/// `completions SHELL` and `man`: text generated from the clap command
/// (`clap_complete`, `clap_mangen`), printed; no daemon is asked. `None`
/// for every other command, which never builds what these need.
pub fn generated(command: &Cmd) -> Option<ExitCode> {
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
pub fn host_port(text: &str) -> Result<String, String> {
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
pub fn host_of(addr: &str) -> &str {
    let host = addr.rsplit_once(':').map_or(addr, |(host, _)| host);
    host.strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host)
}

/// The least `--timeout`: 1 ms. Below it no call could be answered, and a
/// command's deadline could pass while it is on its way, leaving unclear
/// whether it ran.
const MIN_TIMEOUT_SECS: f64 = 0.001;
/// The most `--timeout`: 10^9 s, about 31 years; past it a deadline would
/// overflow the clock's arithmetic rather than mean "never".
const MAX_TIMEOUT_SECS: f64 = 1e9;

/// `--timeout`'s value: a finite number of seconds from
/// [`MIN_TIMEOUT_SECS`] to [`MAX_TIMEOUT_SECS`], for every command (a query
/// answered from the status record too, so a script's mistake shows at
/// once rather than on the first command that dials).
fn timeout_secs(text: &str) -> Result<f64, String> {
    let secs: f64 = text
        .parse()
        .map_err(|_| format!("{text:?} is not a number of seconds"))?;
    if !secs.is_finite() {
        return Err(format!("{text:?} is not a finite number of seconds"));
    }
    if secs <= 0.0 {
        return Err(format!("{text} is not positive: give the seconds to wait"));
    }
    if secs < MIN_TIMEOUT_SECS {
        return Err(format!(
            "{text} s is less than the least timeout, {MIN_TIMEOUT_SECS} s (1 ms)"
        ));
    }
    if secs > MAX_TIMEOUT_SECS {
        return Err(format!(
            "{text} s is more than the greatest timeout, {MAX_TIMEOUT_SECS:.0} s (about 31 years)"
        ));
    }
    Ok(secs)
}

/// The command line, parsed by clap from [`Cli`]'s one definition, in one
/// parse on every line it accepts. Before it parses, clap copies each
/// global flag (17, with their help text) into every subcommand (16): most
/// of a whole command's parse. So unless help or the version is asked for,
/// the command parsed is [`Cli`]'s without its flags' help text and with
/// only the subcommands a word of `args` names. A subcommand is chosen by
/// its exact name (none has an alias, none is inferred from a prefix), so
/// the one clap would pick is among them; the others cannot match and
/// would only cost their copies of the global flags. A line it refuses is
/// parsed again by the whole command, whose error (with its suggestions
/// and help text) is what the user sees: what is accepted, what it means
/// and every refusal are the whole command's
/// (`tests::the_parse_is_the_whole_command_s`).
///
/// # Errors
/// The whole command's refusal (a usage error, or `--help`/`--version`,
/// which clap reports as errors to print and exit with).
pub fn parse_from<I, T>(args: I) -> Result<Cli, clap::Error>
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    use clap::{CommandFactory, FromArgMatches};
    let args: Vec<std::ffi::OsString> = args.into_iter().map(Into::into).collect();
    if let Some(cli) = poll_line(&args) {
        return Ok(cli);
    }
    let whole = Cli::command();
    if let Some(mut lean) = lean_command(&whole, &args)
        && let Ok(mut matches) = lean.try_get_matches_from_mut(args.iter().cloned())
        && let Ok(cli) = Cli::from_arg_matches_mut(&mut matches)
    {
        return Ok(cli);
    }
    let mut matches = whole.try_get_matches_from(args)?;
    Cli::from_arg_matches_mut(&mut matches)
}

/// [`parse_from`]'s first try, for the line a poll runs again and again:
/// `status` or `probe ready|live`, with at most one each of
/// `--data-dir DIR` (or `--socket PATH`, not both), `--json`, `--utc` and
/// `-v`/`--verbose`, in any order, read straight into a [`Cli`] without
/// building clap's command, which is most of a poll's own work. `None`
/// for every other line, clap's to parse: another word or flag, one
/// given twice, a value that is empty or starts with `-` (clap reads
/// those its own way). What it reads is what the whole command reads
/// (`tests::the_common_lines_parse_once_as_the_whole_command_does`,
/// `tests::the_parse_is_the_whole_command_s`).
fn poll_line(args: &[std::ffi::OsString]) -> Option<Cli> {
    use std::os::unix::ffi::OsStrExt;
    let mut words = args.iter().skip(1);
    let (mut data_dir, mut socket) = (None, None);
    let (mut json, mut utc, mut verbose) = (false, false, false);
    let mut command = None;
    let mut probe = false;
    let once = |seen: &mut bool| (!std::mem::replace(seen, true)).then_some(());
    while let Some(word) = words.next() {
        let bytes = word.as_bytes();
        let (flag, inline) = match bytes.iter().position(|b| *b == b'=') {
            Some(at) if bytes.starts_with(b"--") => (&bytes[..at], Some(&bytes[at + 1..])),
            _ => (bytes, None),
        };
        let path = |inline: Option<&[u8]>, words: &mut dyn Iterator<Item = &std::ffi::OsString>| {
            let value = match inline {
                Some(value) => value,
                None => words.next()?.as_bytes(),
            };
            (!value.is_empty() && value[0] != b'-')
                .then(|| PathBuf::from(std::ffi::OsStr::from_bytes(value)))
        };
        match (flag, inline) {
            (b"--data-dir", _) if data_dir.is_none() => data_dir = Some(path(inline, &mut words)?),
            (b"--socket", _) if socket.is_none() => socket = Some(path(inline, &mut words)?),
            (b"--json", None) => once(&mut json)?,
            (b"--utc", None) => once(&mut utc)?,
            (b"-v" | b"--verbose", None) => once(&mut verbose)?,
            (b"status", None) if command.is_none() && !probe => {
                command = Some(Cmd::Status { history: None });
            }
            (b"probe", None) if command.is_none() && !probe => probe = true,
            (b"ready", None) if probe && command.is_none() => {
                command = Some(Cmd::Probe {
                    what: ProbeKind::Ready,
                });
            }
            (b"live", None) if probe && command.is_none() => {
                command = Some(Cmd::Probe {
                    what: ProbeKind::Live,
                });
            }
            _ => return None,
        }
    }
    if data_dir.is_some() && socket.is_some() {
        return None;
    }
    Some(Cli {
        data_dir,
        socket,
        tcp: None,
        token_file: None,
        tls: None,
        ca: None,
        cert: None,
        key: None,
        server_name: None,
        client_config: None,
        json,
        utc,
        verbose,
        timeout: None,
        fleet: FleetArgs {
            inventory: None,
            only: Vec::new(),
            all: false,
            parallel: None,
        },
        command: command?,
    })
}

/// [`parse_from`]'s lean command for `args`: `None` (parse with the whole)
/// when no word names a subcommand, or when a word may ask for help or the
/// version (`help`, `--help`, `--version`, a short-flag cluster with `h`
/// or `V`).
fn lean_command(whole: &clap::Command, args: &[std::ffi::OsString]) -> Option<clap::Command> {
    use std::os::unix::ffi::OsStrExt;
    let asks = args.iter().skip(1).any(|word| {
        let bytes = word.as_bytes();
        word == "help"
            || word == "--help"
            || word == "--version"
            || (bytes.len() > 1
                && bytes[0] == b'-'
                && bytes[1] != b'-'
                && bytes.iter().any(|b| *b == b'h' || *b == b'V'))
    });
    if asks {
        return None;
    }
    let named: Vec<&clap::Command> = whole
        .get_subcommands()
        .filter(|sub| args.iter().skip(1).any(|word| word == sub.get_name()))
        .collect();
    if named.is_empty() {
        return None;
    }
    let mut root = clap::Command::new("steadfastctl")
        .version(whole.get_version().unwrap_or_default().to_owned())
        .subcommand_required(whole.is_subcommand_required_set())
        .arg_required_else_help(whole.is_arg_required_else_help_set())
        .args(whole.get_arguments().cloned())
        .groups(whole.get_groups().cloned());
    for sub in named {
        root = root.subcommand(sub.clone());
    }
    Some(root.mut_args(|arg| arg.help(None).long_help(None)))
}

/// The flags of the fleet view (flattened into [`Cli`]).
#[derive(Debug, clap::Args)]
pub struct FleetArgs {
    /// A TOML file listing daemons (`[[daemon]]` entries: `name` and one of
    /// `data_dir`, `socket`, `tcp` + `token_file`, `tls` + `ca` + `cert` +
    /// `key`): `status`, `probe`, `metrics`, `journal`, `ping` ask them all
    /// at once under one `--timeout` (default 10 s); `start`, `stop`, `restart`,
    /// `retry`, `exit` need `--only` or `--all`.
    #[arg(
        long,
        value_name = "FILE",
        global = true,
        conflicts_with_all = ["data_dir", "socket", "tcp", "token_file", "tls", "client_config"]
    )]
    pub inventory: Option<PathBuf>,
    /// With --inventory: only these daemons (their names, comma-separated).
    #[arg(long, value_name = "NAMES", global = true, value_delimiter = ',')]
    pub only: Vec<String>,
    /// With --inventory: every daemon listed (a command needs this or
    /// --only).
    #[arg(long, global = true, conflicts_with = "only")]
    pub all: bool,
    /// With --inventory: how many daemons are called at once (default 8
    /// for a command, 64 for a query).
    #[arg(long, value_name = "N", global = true)]
    pub parallel: Option<NonZeroUsize>,
}

impl FleetArgs {
    /// Whether any of the fleet's flags is given (clap cannot check
    /// `requires` across a global flag given before the subcommand and one
    /// after it: `fleet::run` does).
    pub fn given(&self) -> bool {
        self.inventory.is_some() || !self.only.is_empty() || self.all || self.parallel.is_some()
    }
}

#[cfg(test)]
mod tests;
