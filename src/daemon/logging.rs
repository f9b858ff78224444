//! The daemon's log output: one process-wide `tracing` subscriber, installed
//! by [`init_logging`] (and by `daemon::run_with` with
//! `DaemonOptions::logging`) unless the application installed its own.
//!
//! - The filter is `RUST_LOG` (default `info`) until the service sets its
//!   configured level with [`set_log_level`], which applies in place through
//!   a reload handle: the next event is filtered by the new level, nothing
//!   restarts. `set_log_level(None)` goes back to the environment's filter.
//!   `tests/logs.rs::the_configured_level_applies_in_place`.
//! - Under systemd (`JOURNAL_STREAM` names the stream stderr is) every line
//!   starts with its syslog priority (`<3>` error, `<4>` warning, `<6>` info,
//!   `<7>` debug and trace, sd-daemon(3)) and carries no timestamp (the
//!   journal stamps it); elsewhere lines are plain text, or JSON objects one
//!   a line with [`LogFormat::Json`].
//!   `tests/logs.rs::under_journald_lines_carry_their_priority`.
//! - A `RUST_LOG` that does not parse is not dropped silently: the filter
//!   falls back to `info` and the first line says why.
//!
//! The reload handle is process-wide state, on purpose: a process has one
//! global subscriber, however many supervisors it runs.

use std::fmt;
use std::sync::OnceLock;

use tracing::{Event, Level, Subscriber};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer, Registry, reload};

/// How [`init_logging`] writes lines on stderr.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum LogFormat {
    /// Human-readable text (with syslog priority prefixes under journald).
    #[default]
    Plain,
    /// One JSON object a line (`timestamp`, `level`, `target`, `fields`).
    Json,
}

/// A log level as a service's config names it: an `EnvFilter` directive
/// (`debug`, `warn`, `kvd=debug,steadfast=info`), checked when it is read,
/// so a config naming a level that does not parse is refused with the
/// reason rather than ignored.
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize)]
#[serde(try_from = "String")]
pub struct LogLevel(String);

impl LogLevel {
    /// The directive as written.
    #[must_use]
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl TryFrom<String> for LogLevel {
    type Error = LogLevelError;

    fn try_from(text: String) -> Result<Self, LogLevelError> {
        parse_filter(&text)?;
        Ok(Self(text))
    }
}

impl std::str::FromStr for LogLevel {
    type Err = LogLevelError;

    fn from_str(text: &str) -> Result<Self, LogLevelError> {
        Self::try_from(text.to_owned())
    }
}

impl fmt::Display for LogLevel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Why a level was not applied.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum LogLevelError {
    /// The text is not a filter directive.
    #[error(
        "invalid log level {text:?}: {reason} (use error, warn, info, debug, trace or target=level,…)"
    )]
    Invalid {
        /// What was given.
        text: String,
        /// What the parser said.
        reason: String,
    },
    /// The process's subscriber is not the daemon helper's (logging off, or
    /// the application installed its own), so there is no level to change.
    #[error(
        "the log level is not steadfast's to change: the application installed its own subscriber, or logging is off"
    )]
    NotInstalled,
}

fn parse_filter(text: &str) -> Result<EnvFilter, LogLevelError> {
    EnvFilter::builder()
        .parse(text)
        .map_err(|error| LogLevelError::Invalid {
            text: text.to_owned(),
            reason: error.to_string(),
        })
}

/// What [`init_logging`] installed: the reload handle, and the filter the
/// environment asked for (what `set_log_level(None)` goes back to).
struct Installed {
    handle: reload::Handle<EnvFilter, Registry>,
    from_env: String,
    /// The directive in force, so a level set again is not said again.
    current: std::sync::Mutex<String>,
}

static INSTALLED: OnceLock<Installed> = OnceLock::new();

/// The filter the environment asks for: `RUST_LOG`, else `info`; with the
/// reason when `RUST_LOG` was set but does not parse.
fn env_directive() -> (String, Option<LogLevelError>) {
    match std::env::var("RUST_LOG") {
        Ok(text) if !text.trim().is_empty() => match parse_filter(&text) {
            Ok(_) => (text, None),
            Err(error) => ("info".to_owned(), Some(error)),
        },
        _ => ("info".to_owned(), None),
    }
}

/// Whether stderr is the stream `JOURNAL_STREAM` (`<dev>:<ino>`) names:
/// systemd sets it for a service whose output goes to the journal.
fn stderr_is_journal() -> bool {
    let Some(value) = std::env::var_os("JOURNAL_STREAM") else {
        return false;
    };
    let Some((dev, ino)) = value.to_str().and_then(|v| v.split_once(':')) else {
        return false;
    };
    let (Ok(dev), Ok(ino)) = (dev.parse::<u64>(), ino.parse::<u64>()) else {
        return false;
    };
    // `st_ino` and `st_dev` are u64 on Linux, narrower or signed elsewhere.
    #[allow(clippy::useless_conversion)]
    rustix::fs::fstat(std::io::stderr()).is_ok_and(|stat| {
        u64::try_from(stat.st_ino).is_ok_and(|i| i == ino)
            && u64::try_from(stat.st_dev).is_ok_and(|d| d == dev)
    })
}

/// The syslog priority of a level (sd-daemon(3)'s `<N>` prefix).
const fn priority(level: Level) -> u8 {
    match level {
        Level::ERROR => 3,
        Level::WARN => 4,
        Level::INFO => 6,
        _ => 7,
    }
}

/// Each line prefixed with its syslog priority, for the journal.
struct Prioritized<F>(F);

impl<S, N, F> FormatEvent<S, N> for Prioritized<F>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
    F: FormatEvent<S, N>,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        write!(writer, "<{}>", priority(*event.metadata().level()))?;
        self.0.format_event(ctx, writer, event)
    }
}

type Filtered = tracing_subscriber::layer::Layered<reload::Layer<EnvFilter, Registry>, Registry>;

/// Install the daemon's subscriber on stderr (see the module doc), unless
/// the process has one already. Returns whether this call installed it;
/// idempotent, and safe to call before `daemon::run_with` (which calls it
/// again, to no effect), so lines logged while the daemon is set up are
/// not lost.
pub fn init_logging(format: LogFormat) -> bool {
    if tracing::dispatcher::has_been_set() || INSTALLED.get().is_some() {
        return false;
    }
    let (directive, invalid) = env_directive();
    let Ok(filter) = parse_filter(&directive) else {
        return false;
    };
    let (filter, handle) = reload::Layer::new(filter);
    let journal = stderr_is_journal();
    let output: Box<dyn Layer<Filtered> + Send + Sync> = match (format, journal) {
        (LogFormat::Json, _) => Box::new(
            tracing_subscriber::fmt::layer()
                .json()
                .with_writer(std::io::stderr),
        ),
        (LogFormat::Plain, true) => Box::new(
            tracing_subscriber::fmt::layer()
                .with_ansi(false)
                .without_time()
                .event_format(Prioritized(
                    tracing_subscriber::fmt::format()
                        .without_time()
                        .with_ansi(false),
                ))
                .with_writer(std::io::stderr),
        ),
        (LogFormat::Plain, false) => Box::new(
            tracing_subscriber::fmt::layer()
                .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
                .with_writer(std::io::stderr),
        ),
    };
    // Another thread may install one first: then that one stays.
    if Registry::default()
        .with(filter)
        .with(output)
        .try_init()
        .is_err()
    {
        return false;
    }
    let _ = INSTALLED.set(Installed {
        handle,
        current: std::sync::Mutex::new(directive.clone()),
        from_env: directive,
    });
    if let Some(error) = invalid {
        tracing::warn!(%error, "RUST_LOG is not used; logging at info");
    }
    true
}

/// Filter the daemon's log by `level` from now on, in place (`None`: back to
/// `RUST_LOG`, or `info`): what a service does with its configured level,
/// at boot and in `apply_config`.
///
/// # Errors
/// [`LogLevelError::NotInstalled`] when [`init_logging`] did not install the
/// process's subscriber.
pub fn set_log_level(level: Option<&LogLevel>) -> Result<(), LogLevelError> {
    let installed = INSTALLED.get().ok_or(LogLevelError::NotInstalled)?;
    let directive = level.map_or(installed.from_env.as_str(), LogLevel::as_str);
    let filter = parse_filter(directive)?;
    let mut current = installed
        .current
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if *current == directive {
        return Ok(());
    }
    installed
        .handle
        .reload(filter)
        .map_err(|_| LogLevelError::NotInstalled)?;
    directive.clone_into(&mut current);
    drop(current);
    tracing::info!(level = %directive, "log level set");
    Ok(())
}
