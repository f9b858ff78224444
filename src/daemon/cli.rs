//! The standard daemon command line (feature `cli`, on by default): the
//! flags every steadfast daemon takes, as a clap [`DaemonArgs`] a daemon
//! flattens into its own parser, and [`Launch`], which applies them —
//! everything a daemon's `main` otherwise writes by hand.
//!
//! ```no_run
//! # use steadfast::{Plan, Service, Supervisor};
//! # struct App;
//! # impl Service for App { type Config = toml::Table;
//! #   fn plan(&self, _: &toml::Table) -> Plan<toml::Table> { Plan::new() } }
//! use clap::Parser;
//! use steadfast::daemon::cli::{self, DaemonArgs};
//!
//! #[derive(Parser)]
//! #[command(name = "appd")]
//! struct Cli {
//!     #[command(flatten)]
//!     daemon: DaemonArgs,
//! }
//!
//! #[tokio::main]
//! async fn main() {
//!     steadfast::daemon::catch_signals();
//!     let cli: Cli = cli::parse(env!("CARGO_PKG_VERSION"));
//!     let launch = cli.daemon.launch("appd").defaults_toml("listen_addr = \"127.0.0.1:7070\"");
//!     let ran = launch.run(|data_dir, config| Supervisor::builder(data_dir, App).config(config));
//!     cli::exit("appd", ran.await)
//! }
//! ```
//!
//! The flags (`--help` lists them; a flag wins over its variable):
//!
//! | flag | variable | what |
//! |---|---|---|
//! | `--data-dir DIR` | `STEADFAST_DATA_DIR` | the data directory; else the config file's `data_dir`, else the daemon's default ([`Launch::default_data_dir`]), else an error |
//! | `--config FILE` | `STEADFAST_CONFIG` | the config file: it must exist (a missing one is an error, exit 78) and is watched |
//! | operand `DATA_DIR` | | the same as `--data-dir` (`app DIR`, as runsv takes its directory); one or the other |
//! | operand `FILE` (after `DATA_DIR`) | | a config file, declared and watched like `--config`'s; a missing one holds the boot until it appears; one or the other |
//! | `--log-format plain\|json` | `STEADFAST_LOG_FORMAT` | how log lines are written |
//! | `--log-level LEVEL` | (`RUST_LOG`) | the level until the config sets one ([`set_configured_log_level`]) |
//! | `--metrics-addr ADDR` | `STEADFAST_METRICS_ADDR` | serve `GET /metrics` there |
//! | `--control-tcp ADDR` | `STEADFAST_CONTROL_TCP` | the control plane on TCP (loopback), with… |
//! | `--control-token-file FILE` | `STEADFAST_CONTROL_TOKEN_FILE` | …the token clients present (0600); `--create-token` makes it if missing |
//! | `--control-tls ADDR` | `STEADFAST_CONTROL_TLS` | the control plane over TLS 1.3, with… |
//! | `--tls-cert FILE`, `--tls-key FILE` | `STEADFAST_TLS_CERT`, `STEADFAST_TLS_KEY` | …the daemon's certificate chain and key (0600), and one or more of: |
//! | `--tls-client-ca FILE` | `STEADFAST_TLS_CLIENT_CA` | client certificates from this CA operate (mutual TLS) |
//! | `--tls-read-only-cert FILE`, `--tls-read-only-fingerprint SHA256` | | these client certificates only read |
//! | `--tls-token-file FILE`, `--tls-read-only-token-file FILE` | | a token inside the session, operate / read |
//!
//! The variables are `STEADFAST_`'s, like `steadfastctl`'s
//! `STEADFAST_DATA_DIR`: a shell (or a container spec) that exports it
//! points both the daemon and `steadfastctl` at the same directory. The
//! repeatable flags have no variable.
//!
//! Applying them ([`Launch::prepare`]) checks every file a flag names
//! before the supervisor is built — the config file (missing, or a path
//! that can never be a file), the token file, each TLS file — and
//! `RUST_LOG`, so a flag or variable that can never work is a [`CliError`]
//! naming it, and the data directory is not touched; the path to the data
//! directory is checked before anything is created in it
//! (as `steadfast::fs::Dir::open_data_dir` does for every open). Values that
//! do not parse (an address, a fingerprint, a level) are refused by clap,
//! naming the flag. [`exit`] says an error on stderr and exits with
//! [`CliError::exit_code`], the one place a startup error is mapped to an
//! exit code. `tests/it/daemon_cli.rs`.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use clap::builder::{PossibleValuesParser, TypedValueParser as _};

use super::{
    DaemonError, DaemonOptions, EXIT_NEVER_WORKS, ExitReason, LogFormat, LogLevel, LogLevelError,
};
use crate::TomlFileSource;
use crate::config::ConfigError;
use crate::control::auth::{Token, TokenError};
use crate::control::{CertFingerprint, TlsError};
#[cfg(feature = "tls")]
use crate::control::{Role, TlsServerConfig};
use crate::embedding::{Supervisor, SupervisorBuilder, SupervisorError, SupervisorHandle};

/// The variable that names the data directory when `--data-dir` does not
/// (`steadfastctl`'s too).
pub const DATA_DIR_ENV: &str = "STEADFAST_DATA_DIR";

/// The standard daemon flags: `#[command(flatten)]` them into the
/// daemon's own `clap::Parser`. See the module doc for each.
#[derive(Debug, Clone, Default, clap::Args)]
#[command(group(
    clap::ArgGroup::new("tls_client_auth")
        .multiple(true)
        .args(["tls_client_ca", "tls_token_file", "tls_read_only_token_file"]),
))]
#[non_exhaustive]
pub struct DaemonArgs {
    /// The data directory (default: $STEADFAST_DATA_DIR, else the config
    /// file's `data_dir`, else the daemon's own default).
    #[arg(long, value_name = "DIR")]
    pub data_dir: Option<PathBuf>,
    /// The data directory as an operand (`app DIR`, as runsv takes its
    /// directory): the same as --data-dir; one or the other.
    #[arg(value_name = "DATA_DIR", conflicts_with = "data_dir")]
    pub data_dir_operand: Option<PathBuf>,
    /// A config file as an operand (`app DIR FILE`): declared and watched
    /// like --config's, except that a missing one is not refused at start:
    /// the boot holds on it, naming it, and boots once it appears. One or
    /// the other.
    #[arg(value_name = "FILE", conflicts_with = "config")]
    pub config_operand: Option<PathBuf>,
    /// The config file (TOML). It must exist; it is watched, and a change
    /// applies without a restart where the daemon allows it.
    #[arg(long, value_name = "FILE", env = "STEADFAST_CONFIG")]
    pub config: Option<PathBuf>,
    /// How log lines are written on stderr.
    #[arg(
        long,
        value_name = "FORMAT",
        env = "STEADFAST_LOG_FORMAT",
        default_value = "plain",
        value_parser = PossibleValuesParser::new(["plain", "json"]).map(|f| log_format(&f)),
    )]
    pub log_format: LogFormat,
    /// The log level until the config sets one; instead of `RUST_LOG`:
    /// error, warn (or warning), info, debug, trace or off, and
    /// target=level for one target (`info,steadfast=debug`). A word that is
    /// not a level is refused.
    #[arg(long, value_name = "LEVEL")]
    pub log_level: Option<LogLevel>,
    /// Serve `GET /metrics` (OpenMetrics text) on this address; use a
    /// loopback one (it does not authenticate).
    #[arg(long, value_name = "ADDR", env = "STEADFAST_METRICS_ADDR")]
    pub metrics_addr: Option<SocketAddr>,
    /// Serve the control plane on TCP at this address (IP:PORT, loopback:
    /// the token handshake does not encrypt); needs --control-token-file.
    #[arg(
        long,
        value_name = "ADDR",
        env = "STEADFAST_CONTROL_TCP",
        requires = "control_token_file"
    )]
    pub control_tcp: Option<SocketAddr>,
    /// The token --control-tcp clients present (64 hex digits; mode 0600,
    /// owned by the daemon's user).
    #[arg(
        long,
        value_name = "FILE",
        env = "STEADFAST_CONTROL_TOKEN_FILE",
        requires = "control_tcp"
    )]
    pub control_token_file: Option<PathBuf>,
    /// Create --control-token-file (0600, a fresh random token) if it does
    /// not exist.
    #[arg(long, requires = "control_token_file")]
    pub create_token: bool,
    /// Serve the control plane over TLS 1.3 at this address (IP:PORT);
    /// needs --tls-cert, --tls-key and a way to authorize clients
    /// (--tls-client-ca, --tls-token-file or --tls-read-only-token-file).
    #[arg(
        long,
        value_name = "ADDR",
        env = "STEADFAST_CONTROL_TLS",
        requires_all = ["tls_cert", "tls_key", "tls_client_auth"]
    )]
    pub control_tls: Option<SocketAddr>,
    /// --control-tls: the daemon's certificate chain (PEM, leaf first).
    #[arg(
        long,
        value_name = "FILE",
        env = "STEADFAST_TLS_CERT",
        requires = "control_tls"
    )]
    pub tls_cert: Option<PathBuf>,
    /// --control-tls: its private key (PEM; mode 0600, owned by the
    /// daemon's user).
    #[arg(
        long,
        value_name = "FILE",
        env = "STEADFAST_TLS_KEY",
        requires = "control_tls"
    )]
    pub tls_key: Option<PathBuf>,
    /// --control-tls: client certificates from this CA (PEM) may operate
    /// (mutual TLS), unless named read-only below.
    #[arg(
        long,
        value_name = "FILE",
        env = "STEADFAST_TLS_CLIENT_CA",
        requires = "control_tls"
    )]
    pub tls_client_ca: Option<PathBuf>,
    /// --tls-client-ca: this client certificate (PEM) may only read
    /// (repeatable).
    #[arg(long, value_name = "FILE", requires = "tls_client_ca")]
    pub tls_read_only_cert: Vec<PathBuf>,
    /// --tls-client-ca: the client certificate with this SHA-256
    /// fingerprint (64 hex digits, colons allowed: `openssl x509
    /// -fingerprint -sha256`) may only read (repeatable).
    #[arg(
        long,
        value_name = "SHA256",
        requires = "tls_client_ca",
        value_parser = parse_fingerprint
    )]
    pub tls_read_only_fingerprint: Vec<CertFingerprint>,
    /// --control-tls: a client presenting the token in this file (0600)
    /// inside the session may operate (repeatable).
    #[arg(long, value_name = "FILE", requires = "control_tls")]
    pub tls_token_file: Vec<PathBuf>,
    /// --control-tls: a client presenting the token in this file (0600)
    /// inside the session may only read (repeatable).
    #[arg(long, value_name = "FILE", requires = "control_tls")]
    pub tls_read_only_token_file: Vec<PathBuf>,
}

fn log_format(name: &str) -> LogFormat {
    if name == "json" {
        LogFormat::Json
    } else {
        LogFormat::Plain
    }
}

fn parse_fingerprint(text: &str) -> Result<CertFingerprint, String> {
    CertFingerprint::from_hex(text).ok_or_else(|| {
        format!("{text:?} is not a SHA-256 fingerprint (64 hex digits, colons allowed)")
    })
}

/// Parse the process's command line into `P` (a parser that flattens
/// [`DaemonArgs`]), with `version` as what `--version` prints. A refused
/// flag is said on stderr with the usage and exits [`EXIT_NEVER_WORKS`]
/// (a command line a restart would only repeat: `spec/exit-codes.md`);
/// `--help` and `--version` print and exit 0.
#[must_use]
pub fn parse<P: clap::Parser>(version: impl Into<String>) -> P {
    parse_command(P::command(), version)
}

/// The standard flags and nothing else: [`launch`]'s command line.
#[derive(clap::Parser)]
struct Standard {
    #[command(flatten)]
    daemon: DaemonArgs,
}

/// Parse the standard daemon command line of the daemon `name` (the flags
/// above and no others of its own) as [`parse`] does, and start applying
/// it: `cli::launch("appd", env!("CARGO_PKG_VERSION"))`, then the
/// daemon's defaults, then [`Launch::main`]. A daemon with flags of its
/// own flattens [`DaemonArgs`] into its parser and calls
/// [`DaemonArgs::launch`] instead.
pub fn launch(name: &str, version: impl Into<String>) -> Launch {
    let command = <Standard as clap::CommandFactory>::command()
        .name(name.to_owned())
        .bin_name(name.to_owned());
    let standard: Standard = parse_command(command, version);
    standard.daemon.launch(name)
}

fn parse_command<P: clap::FromArgMatches>(command: clap::Command, version: impl Into<String>) -> P {
    let mut command = command.version(version.into());
    if command.get_after_help().is_none() {
        command = command.after_help(EXIT_CODES_HELP);
    }
    let parsed = command
        .try_get_matches_from_mut(std::env::args_os())
        .and_then(|matches| P::from_arg_matches(&matches))
        .map_err(|error| error.format(&mut command));
    let parsed = parsed.unwrap_or_else(|error| refused(&error));
    steadfast_actors::launch::mark("command line parsed");
    parsed
}

/// What `--help` says after the flags (unless the daemon says its own):
/// the exit codes, and what is checked before the data dir is touched
/// (`spec/exit-codes.md`).
const EXIT_CODES_HELP: &str = "\
Exit codes: 0 stopped by SIGTERM or SIGINT; 80 halted (steadfastctl exit); \
75 relaunch me; 1 not started, a later start may work (the data dir held \
by another daemon, a port in use); 78 never works as configured.
Checked before the data dir is touched (78): the command line; RUST_LOG and \
--log-level (a word that is not a level is refused; warning means warn); \
--config (missing, or a path that can never be a file); the token and TLS \
files; the path to the data dir (every directory above it owned by root or \
this user, writable by no other user or group unless sticky; a link \
followed only where root or this user made it). Then the data dir and its control dir \
(owned by root or this user, not writable by others, no link).";

/// Say `error` (clap's words, with the usage) and exit: 0 after `--help`
/// or `--version`, [`EXIT_NEVER_WORKS`] for a refused command line.
fn refused(error: &clap::Error) -> ! {
    use clap::error::ErrorKind;
    match error.kind() {
        ErrorKind::DisplayHelp
        | ErrorKind::DisplayVersion
        | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => error.exit(),
        _ => {
            let _ = error.print();
            std::process::exit(EXIT_NEVER_WORKS)
        }
    }
}

/// Why the flags could not be applied, or the daemon not started. Each
/// names the flag (and the file) at fault.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CliError {
    /// No data directory: no flag, no variable, no `data_dir` in the config
    /// file, and the daemon has no default.
    #[error(
        "no data directory: give --data-dir DIR (or STEADFAST_DATA_DIR, or data_dir in the config file)"
    )]
    NoDataDir,
    /// `STEADFAST_DATA_DIR` is set but empty.
    #[error("STEADFAST_DATA_DIR is set but empty: unset it, or give it the data directory")]
    EmptyDataDirEnv,
    /// The `--config` file does not exist (or cannot be opened).
    #[error("--config: {0}")]
    Config(#[source] ConfigError),
    /// A token file a flag names cannot be used.
    #[error("{flag}: {source}")]
    Token {
        /// The flag.
        flag: &'static str,
        /// Why (naming the file).
        #[source]
        source: TokenError,
    },
    /// A TLS file (or the TLS configuration) a flag names cannot be used.
    #[error("{flag}: {source}")]
    Tls {
        /// The flag.
        flag: &'static str,
        /// Why (naming the file).
        #[source]
        source: TlsError,
    },
    /// `--control-tls` asked of a daemon built without the cargo feature
    /// `tls`.
    #[error(
        "--control-tls: this daemon was built without TLS (build it with steadfast's cargo feature `tls`)"
    )]
    TlsNotBuilt,
    /// `--log-level` could not be applied.
    #[error("--log-level: {0}")]
    LogLevel(#[source] LogLevelError),
    /// `RUST_LOG` is set and is not a filter.
    #[error("RUST_LOG: {0}")]
    LogEnv(#[source] LogLevelError),
    /// The supervisor could not be built (the data directory).
    #[error("not started: {0}")]
    Supervisor(#[source] SupervisorError),
    /// A listener a flag asks for could not be served (an address in use).
    #[error("{flag}: {source}")]
    Daemon {
        /// The flag whose listener failed.
        flag: &'static str,
        /// Why.
        #[source]
        source: DaemonError,
    },
}

impl CliError {
    /// The process's exit code for this error — the one place a startup
    /// error is mapped to one (`spec/exit-codes.md`): [`EXIT_NEVER_WORKS`]
    /// for a command line that can never work as given; the supervisor's
    /// and the listeners' own codes otherwise (never works, or
    /// [`super::EXIT_START_FAILED`] for what may pass: a data directory
    /// held by another process, a port in use).
    #[must_use]
    pub fn exit_code(&self) -> i32 {
        match self {
            Self::NoDataDir
            | Self::EmptyDataDirEnv
            | Self::Config(_)
            | Self::Token { .. }
            | Self::Tls { .. }
            | Self::TlsNotBuilt
            | Self::LogLevel(_)
            | Self::LogEnv(_) => EXIT_NEVER_WORKS,
            Self::Supervisor(error) => error.exit_code(),
            Self::Daemon { source, .. } => source.exit_code(),
        }
    }
}

/// Exit the process: with how the daemon ended ([`ExitReason::code`]: 0
/// drained by a signal, 80 halt, 75 relaunch), or, for an error, after
/// saying it on stderr as `NAME: error` (a [`CliError::Daemon`] is logged
/// already: only its flag is said), with [`CliError::exit_code`].
pub fn exit(name: &str, outcome: Result<ExitReason, CliError>) -> ! {
    let code = match outcome {
        Ok(ended) => {
            tracing::info!(
                daemon = name,
                "exiting ({}, code {})",
                ended.name(),
                ended.code()
            );
            ended.code()
        }
        // A listener that could not be served was logged by `run_with`
        // already (as an error, naming the path or address and the fix):
        // only the flag is added.
        Err(error @ CliError::Daemon { flag, .. }) => {
            eprintln!("{name}: not started: {flag} cannot be served (the error is logged above)");
            error.exit_code()
        }
        // The rest on stderr as it is, not as a log line: it must be read
        // whatever the log's format, and whether or not a subscriber is
        // installed.
        Err(error) => {
            eprintln!("{name}: {error}");
            error.exit_code()
        }
    };
    std::process::exit(code)
}

/// What [`DaemonArgs::launch`] makes: the flags, and the daemon's own
/// defaults. [`Self::prepare`] applies them.
#[derive(Debug, Clone)]
#[must_use]
pub struct Launch {
    args: DaemonArgs,
    name: String,
    defaults: Option<String>,
    default_data_dir: Option<PathBuf>,
    positional_config: Option<PathBuf>,
    current_thread: bool,
}

impl DaemonArgs {
    /// Start applying these flags for the daemon `name` (used in messages).
    pub fn launch(&self, name: impl Into<String>) -> Launch {
        Launch {
            args: self.clone(),
            name: name.into(),
            defaults: None,
            default_data_dir: None,
            // The operand is a positional config file: the same rule.
            positional_config: self.config_operand.clone(),
            current_thread: false,
        }
    }
}

impl Launch {
    /// Run [`Self::main`]'s daemon on a current-thread tokio runtime: no
    /// worker thread is started, and the launch waits on none being
    /// scheduled (README "Performance"). For a daemon whose work is small;
    /// a step that calls `block_in_place` needs the multi-thread runtime
    /// (the default).
    pub const fn current_thread(mut self) -> Self {
        self.current_thread = true;
        self
    }

    /// The whole of a daemon's `main`: apply the flags ([`Self::prepare`],
    /// before any thread is started, so a refused one exits having started
    /// none), build the tokio runtime, catch the signals (a SIGTERM from
    /// then on is answered by a drained exit 0, never a death after the run
    /// marker was written), build the supervisor with `build` (handed the
    /// data directory and the config source), run it, and [`exit`] with
    /// how it ended.
    ///
    /// ```no_run
    /// # use steadfast::{Plan, Service, Supervisor};
    /// # struct App;
    /// # impl Service for App { type Config = toml::Table;
    /// #   fn plan(&self, _: &toml::Table) -> Plan<toml::Table> { Plan::new() } }
    /// fn main() {
    ///     steadfast::daemon::cli::launch("appd", env!("CARGO_PKG_VERSION"))
    ///         .defaults_toml("listen_addr = \"127.0.0.1:7070\"")
    ///         .main(|data_dir, config| Supervisor::builder(data_dir, App).config(config))
    /// }
    /// ```
    pub fn main(self, build: impl FnOnce(&Path, TomlFileSource) -> SupervisorBuilder) -> ! {
        let name = self.name.clone();
        let mut runtime = if self.current_thread {
            tokio::runtime::Builder::new_current_thread()
        } else {
            tokio::runtime::Builder::new_multi_thread()
        };
        let prepared = self
            .prepare()
            .unwrap_or_else(|error| exit(&name, Err(error)));
        let runtime = runtime.enable_all().build().unwrap_or_else(|error| {
            eprintln!("{name}: not started: no tokio runtime: {error}");
            std::process::exit(super::EXIT_START_FAILED)
        });
        let ended = runtime.block_on(async {
            super::catch_signals();
            prepared.build(build)?.run().await
        });
        exit(&name, ended)
    }

    /// The config's defaults tier (TOML), under the file.
    pub fn defaults_toml(mut self, text: impl Into<String>) -> Self {
        self.defaults = Some(text.into());
        self
    }

    /// The data directory when neither the flag, its variable nor the
    /// config file names one (without it, that is [`CliError::NoDataDir`]).
    pub fn default_data_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.default_data_dir = Some(dir.into());
        self
    }

    /// A config file the daemon names another way (a positional argument):
    /// declared and watched like `--config`'s, except that a missing one is
    /// not refused at start: the boot holds on it, naming it, and boots
    /// once it appears. `--config` wins over it.
    pub fn positional_config(mut self, file: Option<PathBuf>) -> Self {
        self.positional_config = file;
        self
    }

    /// Apply the flags that need no supervisor: the log on (format, level),
    /// the data directory and config source settled, and every file a flag
    /// names checked — the config file exists; the token file is read (or
    /// created, with `--create-token`); each TLS file is read and the TLS
    /// configuration built. Nothing under the data directory is touched.
    ///
    /// # Errors
    /// [`CliError`] naming the flag and the file.
    pub fn prepare(self) -> Result<Prepared, CliError> {
        let args = &self.args;
        // Before the log is installed, which would say it and fall back.
        if let Some(error) = super::logging::env_level_error() {
            return Err(CliError::LogEnv(error));
        }
        super::init_logging(args.log_format);
        if let Some(level) = &args.log_level {
            set_flag_level(level).map_err(CliError::LogLevel)?;
        }
        // The config file's `data_dir` (the supervisor's leaf): read the
        // way every resolve reads it. A file that exists but cannot be used
        // (a FIFO, too big, bad TOML) is left to the boot, which holds on
        // it with the reason `steadfastctl status` shows.
        let from_file = match &args.config {
            None => None,
            Some(path) => match crate::config::read_config_file(path) {
                Ok(bytes) => data_dir_in(&bytes),
                // Missing, or a path that can never name a file (under a
                // regular file, a name too long, a loop of links): a
                // restart would meet it again.
                Err(error) if never_a_file(&error) => return Err(CliError::Config(error)),
                Err(_) => None,
            },
        };
        // The variable is read here rather than by clap, so a daemon's own
        // positional DATA_DIR can conflict with the flag alone.
        let from_env = match std::env::var_os(DATA_DIR_ENV) {
            Some(dir) if dir.is_empty() => return Err(CliError::EmptyDataDirEnv),
            dir => dir.map(PathBuf::from),
        };
        let data_dir = args
            .data_dir
            .clone()
            .or_else(|| args.data_dir_operand.clone())
            .or(from_env)
            .or(from_file)
            .or_else(|| self.default_data_dir.clone())
            .ok_or(CliError::NoDataDir)?;
        let mut source = TomlFileSource::new();
        if let Some(defaults) = &self.defaults {
            source = source.defaults_toml(defaults.clone());
        }
        // A declared file is required: if it disappears later, the next
        // resolve holds on it instead of quietly falling back to the
        // defaults.
        if let Some(path) = args.config.as_ref().or(self.positional_config.as_ref()) {
            source = source.declared_file(path);
        }
        let mut options = DaemonOptions::new()
            .control_socket(true)
            .log_format(args.log_format);
        if let Some(addr) = args.metrics_addr {
            options = options.metrics_http(addr);
        }
        if let (Some(addr), Some(file)) = (args.control_tcp, &args.control_token_file) {
            check_token(file, args.create_token, "--control-token-file")?;
            // Created above when asked for: `run_with` reads it.
            options = options.control_tcp(addr, file);
        }
        #[cfg(feature = "tls")]
        if let Some(addr) = args.control_tls {
            let config = tls_config(args)?;
            crate::control::tls::check(&config).map_err(|source| CliError::Tls {
                flag: tls_flag(args, &source),
                source,
            })?;
            options = options.control_tls(addr, config);
        }
        #[cfg(not(feature = "tls"))]
        if args.control_tls.is_some() {
            return Err(CliError::TlsNotBuilt);
        }
        Ok(Prepared {
            name: self.name,
            data_dir,
            source,
            options,
            tcp: args.control_tcp,
            tls: args.control_tls,
        })
    }

    /// [`Self::prepare`], build the supervisor with `build` (handed the
    /// data directory and the config source), and run it.
    ///
    /// # Errors
    /// As [`Self::prepare`], [`Prepared::build`] and [`Built::run`].
    pub async fn run(
        self,
        build: impl FnOnce(&Path, TomlFileSource) -> SupervisorBuilder,
    ) -> Result<ExitReason, CliError> {
        self.prepare()?.build(build)?.run().await
    }
}

/// Whether reading the `--config` file failed in a way no boot could get
/// past: the file is missing, or the path cannot name a file at all
/// (`ENOTDIR`: a name under a regular file; `ENAMETOOLONG`; `ELOOP`).
fn never_a_file(error: &ConfigError) -> bool {
    match error {
        ConfigError::Missing { .. } => true,
        ConfigError::Read { source, .. } => {
            matches!(
                source.kind(),
                std::io::ErrorKind::NotADirectory | std::io::ErrorKind::InvalidFilename
            ) || source.raw_os_error() == Some(rustix::io::Errno::LOOP.raw_os_error())
        }
        _ => false,
    }
}

/// The flags applied: the data directory, the config source and the
/// [`DaemonOptions`] (control socket, TCP, TLS, metrics, log format).
#[derive(Debug, Clone)]
pub struct Prepared {
    name: String,
    data_dir: PathBuf,
    source: TomlFileSource,
    options: DaemonOptions,
    tcp: Option<SocketAddr>,
    tls: Option<SocketAddr>,
}

impl Prepared {
    /// The data directory.
    #[must_use]
    pub fn data_dir(&self) -> &Path {
        &self.data_dir
    }

    /// The config source: the defaults, under the `--config` file.
    #[must_use]
    pub const fn config_source(&self) -> &TomlFileSource {
        &self.source
    }

    /// What [`super::run_with`] is given.
    #[must_use]
    pub const fn options(&self) -> &DaemonOptions {
        &self.options
    }

    /// Build the supervisor: `build` is handed the data directory and the
    /// config source (for `Supervisor::builder(dir, service).config(source)`
    /// and whatever else the daemon sets).
    ///
    /// # Errors
    /// [`CliError::Supervisor`] when the data directory cannot be opened
    /// (held by another daemon, a corrupt journal).
    pub fn build(
        self,
        build: impl FnOnce(&Path, TomlFileSource) -> SupervisorBuilder,
    ) -> Result<Built, CliError> {
        let (supervisor, handle) = build(&self.data_dir, self.source.clone())
            .build()
            .map_err(CliError::Supervisor)?;
        // A later start does not run the binary a `replace` selected: say so.
        if let Some((_, message)) = crate::replace::Selection::elsewhere(&self.data_dir) {
            tracing::warn!(daemon = %self.name, "{message}");
        }
        Ok(Built {
            prepared: self,
            supervisor,
            handle,
        })
    }

    /// The old name of [`Self::build`] (it builds the supervisor; nothing
    /// starts until [`Built::run`]).
    ///
    /// # Errors
    /// As [`Self::build`].
    #[deprecated(since = "0.1.0", note = "renamed to `build`")]
    pub fn start(
        self,
        build: impl FnOnce(&Path, TomlFileSource) -> SupervisorBuilder,
    ) -> Result<Built, CliError> {
        self.build(build)
    }
}

/// The supervisor built, not yet running: [`Built::run`] runs it.
#[derive(Debug)]
pub struct Built {
    prepared: Prepared,
    supervisor: Supervisor,
    handle: SupervisorHandle,
}

impl Built {
    /// The supervisor's handle (to watch it, or serve more).
    #[must_use]
    pub const fn handle(&self) -> &SupervisorHandle {
        &self.handle
    }

    /// Run the daemon ([`super::run_with`] with the options the flags
    /// made) until it exits.
    ///
    /// # Errors
    /// [`CliError::Daemon`] when a listener a flag asks for cannot be served.
    pub async fn run(self) -> Result<ExitReason, CliError> {
        let Prepared {
            options, tcp, tls, ..
        } = self.prepared;
        super::run_with(self.supervisor, self.handle, options)
            .await
            .map_err(|source| CliError::Daemon {
                flag: daemon_flag(&source, tcp, tls),
                source,
            })
    }
}

/// The old name of [`Built`].
#[deprecated(since = "0.1.0", note = "renamed to `Built`")]
pub type Started = Built;

/// The flag whose listener `error` is about.
fn daemon_flag(
    error: &DaemonError,
    tcp: Option<SocketAddr>,
    tls: Option<SocketAddr>,
) -> &'static str {
    use crate::control::ControlError;
    match error {
        DaemonError::ControlSocket(_) => "--data-dir (its control socket)",
        DaemonError::MetricsHttp { .. } => "--metrics-addr",
        DaemonError::ControlPort(ControlError::Tls(_)) => "--control-tls",
        DaemonError::ControlPort(ControlError::Token(_)) => "--control-token-file",
        DaemonError::ControlPort(ControlError::Bind { addr, .. })
            if Some(*addr) == tcp && tcp != tls =>
        {
            "--control-tcp"
        }
        DaemonError::ControlPort(ControlError::Bind { addr, .. }) if Some(*addr) == tls => {
            "--control-tls"
        }
        DaemonError::ControlPort(_) => "--control-tcp/--control-tls",
    }
}

/// The top-level `data_dir` of a config file's bytes, if it names one.
fn data_dir_in(bytes: &[u8]) -> Option<PathBuf> {
    let table = std::str::from_utf8(bytes)
        .ok()?
        .parse::<toml::Table>()
        .ok()?;
    table
        .get("data_dir")
        .and_then(toml::Value::as_str)
        .map(PathBuf::from)
}

/// Read the token in `file` (creating it when `create` and it is missing).
fn check_token(file: &Path, create: bool, flag: &'static str) -> Result<(), CliError> {
    let token = match Token::read_file(file) {
        Err(TokenError::Io { source, .. })
            if create && source.kind() == std::io::ErrorKind::NotFound =>
        {
            tracing::info!(path = %file.display(), "creating the control token file");
            Token::create_file(file)
        }
        read => read,
    };
    token
        .map(drop)
        .map_err(|source| CliError::Token { flag, source })
}

/// The TLS configuration the flags name; the read-only certificate files
/// are read here (for their fingerprints).
#[cfg(feature = "tls")]
fn tls_config(args: &DaemonArgs) -> Result<TlsServerConfig, CliError> {
    let (Some(cert), Some(key)) = (&args.tls_cert, &args.tls_key) else {
        // clap requires both with --control-tls.
        return Err(CliError::Tls {
            flag: "--control-tls",
            source: TlsError::Config("--control-tls needs --tls-cert and --tls-key".to_owned()),
        });
    };
    let mut config = TlsServerConfig::new(cert, key);
    if let Some(ca) = &args.tls_client_ca {
        config = config.client_ca(ca, Role::Operate);
    }
    for file in &args.tls_read_only_cert {
        let fingerprint = CertFingerprint::of_pem_file(file).map_err(|source| CliError::Tls {
            flag: "--tls-read-only-cert",
            source,
        })?;
        config = config.cert_role(fingerprint, Role::Read);
    }
    for fingerprint in &args.tls_read_only_fingerprint {
        config = config.cert_role(*fingerprint, Role::Read);
    }
    for file in &args.tls_token_file {
        config = config.token_file(file, Role::Operate);
    }
    for file in &args.tls_read_only_token_file {
        config = config.token_file(file, Role::Read);
    }
    Ok(config)
}

/// The flag naming the file a TLS error is about.
#[cfg(feature = "tls")]
fn tls_flag(args: &DaemonArgs, error: &TlsError) -> &'static str {
    let path = match error {
        TlsError::Io { path, .. }
        | TlsError::KeyTooOpen { path, .. }
        | TlsError::KeyNotOwner { path, .. }
        | TlsError::NotAFile(path)
        | TlsError::TooLarge { path, .. }
        | TlsError::Pem { path, .. } => Some(path.as_path()),
        TlsError::Token(
            TokenError::Io { path, .. }
            | TokenError::TooOpen { path, .. }
            | TokenError::NotOwner { path, .. }
            | TokenError::NotAFile(path)
            | TokenError::TooLarge { path, .. }
            | TokenError::Malformed(path),
        ) => Some(path.as_path()),
        _ => None,
    };
    let Some(path) = path else {
        return "--control-tls";
    };
    let is = |p: &Option<PathBuf>| p.as_deref() == Some(path);
    if is(&args.tls_cert) {
        "--tls-cert"
    } else if is(&args.tls_key) {
        "--tls-key"
    } else if is(&args.tls_client_ca) {
        "--tls-client-ca"
    } else if args.tls_token_file.iter().any(|p| p == path) {
        "--tls-token-file"
    } else if args.tls_read_only_token_file.iter().any(|p| p == path) {
        "--tls-read-only-token-file"
    } else {
        "--control-tls"
    }
}

/// The level `--log-level` gave, for [`set_configured_log_level`].
static FLAG_LEVEL: OnceLock<LogLevel> = OnceLock::new();

fn set_flag_level(level: &LogLevel) -> Result<(), LogLevelError> {
    let _ = FLAG_LEVEL.set(level.clone());
    super::set_log_level(Some(level))
}

/// Set the level the service's config names (as [`super::set_log_level`]);
/// `None` (the config names none) goes back to `--log-level` when it was
/// given, else to `RUST_LOG` (or `info`). A daemon launched through
/// [`Launch`] calls this rather than [`super::set_log_level`], so the flag
/// is not dropped when its config has no level.
///
/// # Errors
/// As [`super::set_log_level`].
pub fn set_configured_log_level(level: Option<&LogLevel>) -> Result<(), LogLevelError> {
    super::set_log_level(level.or_else(|| FLAG_LEVEL.get()))
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::DaemonArgs;

    #[derive(Debug, Parser)]
    struct Cli {
        #[command(flatten)]
        daemon: DaemonArgs,
    }

    fn parse(args: &[&str]) -> Result<DaemonArgs, clap::Error> {
        Cli::try_parse_from(std::iter::once("d").chain(args.iter().copied())).map(|c| c.daemon)
    }

    /// Each listener's companions are required, and a value that does not
    /// parse is refused naming the flag.
    #[test]
    fn companions_are_required_and_bad_values_refused() {
        for (args, names) in [
            (
                &["--control-tcp", "127.0.0.1:1"][..],
                "--control-token-file",
            ),
            (&["--control-token-file", "t"][..], "--control-tcp"),
            (&["--control-tls", "127.0.0.1:1"][..], "--tls-cert"),
            (
                &[
                    "--control-tls",
                    "127.0.0.1:1",
                    "--tls-cert",
                    "c",
                    "--tls-key",
                    "k",
                ][..],
                "--tls-client-ca",
            ),
            (&["--tls-cert", "c"][..], "--control-tls"),
            (&["--metrics-addr", "localhost"][..], "--metrics-addr"),
            (&["--log-format", "xml"][..], "--log-format"),
            (&["--log-level", "kvd=loud"][..], "--log-level"),
            (
                &["--tls-read-only-fingerprint", "abc", "--tls-client-ca", "x"][..],
                "--tls-read-only-fingerprint",
            ),
        ] {
            let error = parse(args).expect_err("refused");
            let text = error.to_string();
            assert!(text.contains(names), "{args:?}: {text}");
            assert!(
                !matches!(
                    error.kind(),
                    clap::error::ErrorKind::DisplayHelp | clap::error::ErrorKind::DisplayVersion
                ),
                "{args:?}: a refusal, not help"
            );
        }
    }

    /// A complete set parses into the fields.
    #[test]
    fn a_complete_set_parses() {
        let args = parse(&[
            "--data-dir",
            "/d",
            "--control-tcp",
            "127.0.0.1:7433",
            "--control-token-file",
            "/t",
            "--control-tls",
            "0.0.0.0:7443",
            "--tls-cert",
            "/c",
            "--tls-key",
            "/k",
            "--tls-client-ca",
            "/ca",
            "--tls-read-only-fingerprint",
            &"ab:"
                .repeat(31)
                .chars()
                .chain("ab".chars())
                .collect::<String>(),
            "--log-format",
            "json",
        ])
        .expect("parses");
        assert_eq!(args.data_dir.as_deref(), Some(std::path::Path::new("/d")));
        assert_eq!(
            args.control_tcp,
            Some("127.0.0.1:7433".parse().expect("addr"))
        );
        assert_eq!(args.tls_read_only_fingerprint.len(), 1);
        assert_eq!(args.log_format, super::LogFormat::Json);
    }
}
