//! The daemon's log output: one process-wide `tracing` subscriber, installed
//! by [`init_logging`] (and by `daemon::run_with` with
//! `DaemonOptions::logging`) unless the application installed its own.
//!
//! - The filter is `RUST_LOG` (default `info`) until the service sets its
//!   configured level with [`set_log_level`], which applies in place through
//!   a reload handle: the next event is filtered by the new level, nothing
//!   restarts. `set_log_level(None)` goes back to the environment's filter.
//!   `tests/it/logs.rs::the_configured_level_applies_in_place`.
//! - A level without a target (`debug`) is for steadfast's crates and the
//!   application: the libraries steadfast runs on ([`LIBRARY_TARGETS`]:
//!   tarpc, ractor, rustls, tokio, notify, …) stay at `warn` unless a
//!   directive names them (`debug,tarpc=debug`), so `debug` shows what the
//!   daemon does, not every frame tarpc reads.
//!   `tests/it/logs.rs::debug_is_ours_and_a_library_only_by_name`.
//! - Every line says which process wrote it: plain lines carry
//!   `name[pid]` after the timestamp (as `journalctl -o short` writes
//!   them), JSON lines a `pid` field; so during a `replace`, when the old
//!   and the new process write to the same stream, their lines can be told
//!   apart. Under journald the journal records `_PID` itself, except for a
//!   replacement's successor: it writes on the stream its predecessor
//!   opened, which the journal keeps attributing to the predecessor, so
//!   its lines carry `name[pid]` too.
//!   `tests/it/logs.rs::every_line_names_its_process`.
//! - Under systemd (`JOURNAL_STREAM` names the stream stderr is) every line
//!   starts with its syslog priority (`<3>` error, `<4>` warning, `<6>` info,
//!   `<7>` debug and trace, sd-daemon(3)) and carries no timestamp (the
//!   journal stamps it); elsewhere lines are plain text, or JSON objects one
//!   a line with [`LogFormat::Json`].
//!   `tests/it/logs.rs::under_journald_lines_carry_their_priority`.
//! - A level is checked as a level: a directive without a target must be
//!   one (`warning` is taken as `warn`), so a misspelt `--log-level`,
//!   `RUST_LOG` or `log_level` is refused with the reason rather than read
//!   as the name of a target, which would silence every line.
//! - A `RUST_LOG` that does not parse is not dropped silently: a daemon
//!   launched through `daemon::cli` refuses to start (exit 78); an
//!   embedding that installs the log itself falls back to `info` and the
//!   first line says why.
//! - One event is one line, whatever its text: in plain and journald lines
//!   every control character in a message or a field (a span's too) — a
//!   newline, a carriage return, ESC, any other C0 or C1 control, DEL — is
//!   written as an escape ([`escape_controls`]: `\n`, `\x1b`, `\u{9b}`), so
//!   text a user typed (a config value in an error, a client's request line)
//!   can neither forge a record (`<0>` emergency, a fake `ERROR`) nor reach
//!   a terminal as a control sequence. JSON lines escape by JSON's rules.
//!   `logging::tests::a_field_or_message_cannot_break_the_line`,
//!   `tests/it/logs.rs::a_config_value_cannot_forge_a_log_line`.
//!
//! The reload handle is process-wide state, on purpose: a process has one
//! global subscriber, however many supervisors it runs.

use std::borrow::Cow;
use std::fmt::{self, Write as _};
use std::sync::OnceLock;

use tracing::{Event, Level, Subscriber};
use tracing_subscriber::field::RecordFields;
use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::fmt::format::{DefaultFields, Writer};
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer, Registry, reload};

/// The targets (crates) of the libraries steadfast runs on. A directive
/// without a target does not reach them: they log at `warn` and above
/// unless a directive names them (`tarpc=debug`), or the level without a
/// target is `warn` or quieter already.
pub const LIBRARY_TARGETS: &[&str] = &[
    "tarpc",
    "ractor",
    "rustls",
    "tokio_rustls",
    "tokio",
    "tokio_util",
    "mio",
    "notify",
    "opentelemetry",
    "tracing_opentelemetry",
    "h2",
    "hyper",
];

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
        let directive = check_levels(&text)?;
        parse_filter(&directive)?;
        Ok(Self(directive))
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
        "invalid log level {text:?}: {reason} (use error, warn, info, debug, trace, off or target=level, comma-separated)"
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

/// `text` as a filter whose every directive names a level where one is
/// expected, in the form `EnvFilter` is given: each directive trimmed, and
/// `warning` (syslog's word) spelled `warn`.
///
/// `EnvFilter` takes a bare word it does not know as a *target* at every
/// level, so `warning`, `inf` or `info ` (a trailing space) would silence
/// the whole log (every line of other targets dropped) without a word.
/// Here a directive without `=` must be a level (`error`, `warn`, `info`,
/// `debug`, `trace`, `off`, or `0`–`5`), and one with `=` must end in one;
/// a target is named as `target=level` (`kvd=trace` for every level of
/// `kvd`). A span filter (`target[span{field=value}]`) keeps `EnvFilter`'s
/// own meaning.
fn check_levels(text: &str) -> Result<String, LogLevelError> {
    let invalid = |reason: String| LogLevelError::Invalid {
        text: text.to_owned(),
        reason,
    };
    let mut directives = Vec::new();
    for directive in text.split(',').map(str::trim) {
        if directive.is_empty() {
            continue;
        }
        if directive.ends_with(']') {
            directives.push(directive.to_owned());
            continue;
        }
        let (target, level) = match directive.rsplit_once('=') {
            Some((target, level)) => (Some(target.trim()), level.trim()),
            None => (None, directive),
        };
        let level = if level.eq_ignore_ascii_case("warning") {
            "warn"
        } else {
            level
        };
        if level.is_empty()
            || level
                .parse::<tracing::level_filters::LevelFilter>()
                .is_err()
        {
            return Err(invalid(match target {
                Some(target) => format!("{level:?} is not a level (for target {target:?})"),
                None => format!(
                    "{level:?} is not a level (to log every level of a target, write {level}=trace)"
                ),
            }));
        }
        directives.push(match target {
            Some(target) => format!("{target}={level}"),
            None => level.to_owned(),
        });
    }
    if directives.is_empty() {
        return Err(invalid("no directive".to_owned()));
    }
    Ok(directives.join(","))
}

fn parse_filter(text: &str) -> Result<EnvFilter, LogLevelError> {
    EnvFilter::builder()
        .parse(text)
        .map_err(|error| LogLevelError::Invalid {
            text: text.to_owned(),
            reason: error.to_string(),
        })
}

/// The filter a directive installs: the directive, and each of
/// [`LIBRARY_TARGETS`] it does not name held at `warn` when its level
/// without a target is more verbose than that.
fn build_filter(text: &str) -> Result<EnvFilter, LogLevelError> {
    parse_filter(text)?;
    parse_filter(&with_libraries_quiet(text))
}

/// `text` with `,<library>=warn` added for each library target it does
/// not name, when its level without a target (`info`, `debug`, `trace`)
/// would let their debug lines through. A more specific directive the user
/// wrote (`tarpc::server=debug`) still wins over the added one, as
/// `EnvFilter` prefers the longer target.
fn with_libraries_quiet(text: &str) -> String {
    let directives: Vec<&str> = text
        .split(',')
        .map(str::trim)
        .filter(|d| !d.is_empty())
        .collect();
    let default = directives
        .iter()
        .filter_map(|d| d.parse::<tracing::level_filters::LevelFilter>().ok())
        .max();
    if default.is_none_or(|level| level <= tracing::level_filters::LevelFilter::WARN) {
        return text.to_owned();
    }
    let named = |library: &str| {
        directives.iter().any(|d| {
            let target = d.split(['=', '[']).next().unwrap_or("");
            target == library
        })
    };
    let mut out = text.to_owned();
    for library in LIBRARY_TARGETS.iter().filter(|l| !named(l)) {
        write!(out, ",{library}=warn").expect("a String takes a write");
    }
    out
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
        Ok(text) if !text.trim().is_empty() => match LogLevel::try_from(text) {
            Ok(level) => (level.0, None),
            Err(error) => ("info".to_owned(), Some(error)),
        },
        _ => ("info".to_owned(), None),
    }
}

/// Why `RUST_LOG` is not a filter, if it is set and is not one.
pub(crate) fn env_level_error() -> Option<LogLevelError> {
    env_directive().1
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

/// `text` with every control character (`char::is_control`: C0, DEL, C1)
/// written as an escape: `\n`, `\r`, `\t`, `\x1b` (C0 and DEL), `\u{9b}`
/// (C1); everything else as it is. What steadfast does to text that came
/// from outside before it goes into a log line, an sd_notify datagram or a
/// terminal: one line stays one line, and no control sequence gets through.
#[must_use]
pub fn escape_controls(text: &str) -> Cow<'_, str> {
    if !text.chars().any(char::is_control) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    let _ = Escaping(&mut out).write_str(text);
    Cow::Owned(out)
}

/// A writer that escapes every control character written through it, as
/// [`escape_controls`] does.
struct Escaping<W>(W);

impl<W: fmt::Write> fmt::Write for Escaping<W> {
    fn write_str(&mut self, text: &str) -> fmt::Result {
        let mut rest = text;
        while let Some((at, c)) = rest.char_indices().find(|(_, c)| c.is_control()) {
            self.0.write_str(&rest[..at])?;
            match c {
                '\n' => self.0.write_str("\\n")?,
                '\r' => self.0.write_str("\\r")?,
                '\t' => self.0.write_str("\\t")?,
                c if u32::from(c) < 0x80 => write!(self.0, "\\x{:02x}", u32::from(c))?,
                c => write!(self.0, "\\u{{{:x}}}", u32::from(c))?,
            }
            rest = &rest[at + c.len_utf8()..];
        }
        self.0.write_str(rest)
    }
}

/// The fields of an event or a span as tracing-subscriber writes them
/// (`message` first, then `name=value`), with every control character
/// escaped: everything a line carries that did not come from steadfast's
/// own format goes through here, so a record is one line.
struct EscapedFields(DefaultFields);

impl<'writer> FormatFields<'writer> for EscapedFields {
    fn format_fields<R: RecordFields>(
        &self,
        mut writer: Writer<'writer>,
        fields: R,
    ) -> fmt::Result {
        let mut escaping = Escaping(&mut writer);
        self.0.format_fields(Writer::new(&mut escaping), fields)
    }
}

/// `name[pid]`, as `journalctl -o short` names a process: the file name
/// this process was started as (escaped), and its pid.
fn process_ident() -> String {
    let name = std::env::args_os()
        .next()
        .map(std::path::PathBuf::from)
        .and_then(|path| {
            path.file_name()
                .map(|name| escape_controls(&name.to_string_lossy()).into_owned())
        })
        .filter(|name| !name.is_empty())
        .unwrap_or_else(|| "steadfast".to_owned());
    format!("{name}[{}]", std::process::id())
}

/// The plain-text layer writing to `writer`: with a syslog priority and no
/// timestamp for the journal, else timestamped (`ansi`: colored levels).
/// `ident` (`name[pid]`) follows the timestamp, or the priority; under the
/// journal `None` leaves it to the journal's own `_PID`. Fields and
/// messages escaped ([`EscapedFields`]) either way.
fn plain_layer<S, W>(
    journal: bool,
    ansi: bool,
    ident: Option<String>,
    writer: W,
) -> Box<dyn Layer<S> + Send + Sync>
where
    S: Subscriber + for<'a> LookupSpan<'a> + Send + Sync,
    W: for<'a> MakeWriter<'a> + Send + Sync + 'static,
{
    let layer = tracing_subscriber::fmt::layer()
        .fmt_fields(EscapedFields(DefaultFields::new()))
        .with_writer(writer);
    if journal {
        Box::new(
            layer
                .with_ansi(false)
                .without_time()
                .event_format(Prioritized(
                    ident,
                    tracing_subscriber::fmt::format()
                        .without_time()
                        .with_ansi(false),
                )),
        )
    } else {
        Box::new(layer.with_ansi(ansi).with_timer(Stamped(
            tracing_subscriber::fmt::time::SystemTime,
            ident.unwrap_or_default(),
        )))
    }
}

/// The time, then the process's `name[pid]`: what starts a plain line.
struct Stamped<T>(T, String);

impl<T: tracing_subscriber::fmt::time::FormatTime> tracing_subscriber::fmt::time::FormatTime
    for Stamped<T>
{
    fn format_time(&self, writer: &mut Writer<'_>) -> fmt::Result {
        self.0.format_time(writer)?;
        if self.1.is_empty() {
            return Ok(());
        }
        write!(writer, " {}", self.1)
    }
}

/// Each JSON object with the process's `pid` as its first member.
struct WithPid<F>(F);

impl<S, N, F> FormatEvent<S, N> for WithPid<F>
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
        let mut line = String::new();
        self.0.format_event(ctx, Writer::new(&mut line), event)?;
        match line.strip_prefix('{') {
            Some(rest) => write!(writer, "{{\"pid\":{},{rest}", std::process::id()),
            None => writer.write_str(&line),
        }
    }
}

/// The JSON layer writing to `writer`: one object a line, with `pid`.
fn json_layer<S, W>(writer: W) -> Box<dyn Layer<S> + Send + Sync>
where
    S: Subscriber + for<'a> LookupSpan<'a> + Send + Sync,
    W: for<'a> MakeWriter<'a> + Send + Sync + 'static,
{
    Box::new(
        tracing_subscriber::fmt::layer()
            .json()
            .event_format(WithPid(tracing_subscriber::fmt::format().json()))
            .with_writer(writer),
    )
}

/// Each line prefixed with its syslog priority (and, when given, the
/// process's `name[pid]`), for the journal.
struct Prioritized<F>(Option<String>, F);

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
        if let Some(ident) = &self.0 {
            write!(writer, "{ident} ")?;
        }
        self.1.format_event(ctx, writer, event)
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
    let Ok(filter) = build_filter(&directive) else {
        return false;
    };
    let (filter, handle) = reload::Layer::new(filter);
    let journal = stderr_is_journal();
    // The journal knows the pid of the process that opened the stream; a
    // replacement's successor writes on its predecessor's.
    let successor = std::env::var_os(crate::handover::HANDOVER_ENV).is_some();
    let ident = (!journal || successor).then(process_ident);
    let output: Box<dyn Layer<Filtered> + Send + Sync> = match (format, journal) {
        (LogFormat::Json, _) => json_layer(std::io::stderr),
        (LogFormat::Plain, journal) => plain_layer(
            journal,
            std::io::IsTerminal::is_terminal(&std::io::stderr()),
            ident,
            std::io::stderr,
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
    let filter = build_filter(directive)?;
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

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use tracing_subscriber::layer::SubscriberExt as _;

    use super::{Registry, escape_controls, json_layer, plain_layer, with_libraries_quiet};

    /// What a layer under test wrote.
    #[derive(Clone, Default)]
    struct Buffer(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Buffer {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .extend_from_slice(bytes);
            Ok(bytes.len())
        }

        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for Buffer {
        type Writer = Self;

        fn make_writer(&'a self) -> Self {
            self.clone()
        }
    }

    /// Every control character, and nothing else, is escaped.
    #[test]
    fn escaping_writes_every_control_character_as_an_escape() {
        assert_eq!(escape_controls("plain text: é ✓"), "plain text: é ✓");
        assert!(matches!(
            escape_controls("plain"),
            std::borrow::Cow::Borrowed(_)
        ));
        assert_eq!(
            escape_controls("a\nb\r\tc\u{1b}[2J\u{0}\u{7f}\u{9b}31m\u{85}"),
            "a\\nb\\r\\tc\\x1b[2J\\x00\\x7f\\u{9b}31m\\u{85}"
        );
        for c in (0..=0x10_FFFF).filter_map(char::from_u32) {
            let escaped = escape_controls(c.encode_utf8(&mut [0; 4])).into_owned();
            assert!(
                !escaped.chars().any(char::is_control),
                "{c:?} -> {escaped:?}"
            );
        }
    }

    /// A message, a field and a span's field holding newlines, carriage
    /// returns and ESC: the event is one line, in the journal's format and
    /// the plain one, and each starts as a record does.
    #[test]
    fn a_field_or_message_cannot_break_the_line() {
        for journal in [true, false] {
            let buffer = Buffer::default();
            let subscriber = Registry::default().with(plain_layer(
                journal,
                false,
                Some("kvd[7]".to_owned()),
                buffer.clone(),
            ));
            tracing::subscriber::with_default(subscriber, || {
                let forged = "x\n<0>ERROR forged\r\u{1b}[2K\u{9b}2K";
                let span = tracing::info_span!("conn", peer = %forged);
                let _entered = span.enter();
                tracing::error!(value = %forged, text = forged, "bad {forged}");
                tracing::info!("after");
            });
            let text = String::from_utf8(buffer.0.lock().expect("lock").clone()).expect("utf-8");
            let lines: Vec<&str> = text.lines().collect();
            assert_eq!(lines.len(), 2, "one line an event: {text:?}");
            assert!(text.ends_with('\n'), "{text:?}");
            for line in &lines {
                assert!(!line.chars().any(char::is_control), "{line:?}");
                if journal {
                    assert!(
                        line.starts_with("<3>kvd[7] ") || line.starts_with("<6>kvd[7] "),
                        "{line:?}"
                    );
                } else {
                    assert!(line.starts_with("20"), "a timestamp first: {line:?}");
                    assert!(line.contains("Z kvd[7] "), "then the process: {line:?}");
                }
            }
            assert!(
                lines[0].contains("bad x\\n<0>ERROR forged\\r\\x1b[2K\\u{9b}2K"),
                "{text}"
            );
            assert!(lines[0].contains("value=x\\n<0>ERROR forged"), "{text}");
            assert!(lines[0].contains("peer=x\\n<0>ERROR forged"), "{text}");
        }
    }

    /// A level without a target more verbose than `warn` holds every
    /// library target it does not name at `warn`; one that names a library
    /// keeps its own level for it; `warn` and quieter add nothing.
    /// A directive that names no level where one is expected is refused
    /// with the reason: `EnvFilter` took `warning`, `inf` and `info ` as
    /// targets and the daemon logged nothing at all. Syslog's `warning` is
    /// `warn`; spaces around a directive are dropped; a target is named
    /// with its level.
    #[test]
    fn a_word_that_is_not_a_level_is_refused() {
        use super::LogLevel;
        let level = |text: &str| LogLevel::try_from(text.to_owned()).map(|l| l.as_str().to_owned());
        assert_eq!(level("warning").as_deref(), Ok("warn"));
        assert_eq!(level("WARNING").as_deref(), Ok("warn"));
        assert_eq!(level("info ").as_deref(), Ok("info"));
        assert_eq!(
            level(" debug , kvd = warning").as_deref(),
            Ok("debug,kvd=warn")
        );
        assert_eq!(
            level("debug,tarpc=debug").as_deref(),
            Ok("debug,tarpc=debug")
        );
        assert_eq!(level("kvd=trace").as_deref(), Ok("kvd=trace"));
        assert_eq!(level("3").as_deref(), Ok("3"));
        assert_eq!(level("kvd[boot]").as_deref(), Ok("kvd[boot]"));
        for (text, why) in [
            (
                "inf",
                "\"inf\" is not a level (to log every level of a target, write inf=trace)",
            ),
            ("warnings", "\"warnings\" is not a level"),
            ("kvd", "write kvd=trace"),
            (
                "info,kvd=loudest",
                "\"loudest\" is not a level (for target \"kvd\")",
            ),
            ("kvd=", "\"\" is not a level"),
            ("", "no directive"),
            (" , ", "no directive"),
        ] {
            let error = level(text).expect_err(text).to_string();
            assert!(error.contains(why), "{text:?}: {error}");
            assert!(error.contains("invalid log level"), "{text:?}: {error}");
        }
    }

    #[test]
    fn a_bare_level_leaves_the_libraries_at_warn() {
        let debug = with_libraries_quiet("debug");
        assert!(debug.starts_with("debug,"), "{debug}");
        assert!(debug.contains(",tarpc=warn"), "{debug}");
        assert!(debug.contains(",rustls=warn"), "{debug}");
        let named = with_libraries_quiet("debug,tarpc=debug");
        assert!(!named.contains("tarpc=warn"), "{named}");
        assert!(named.contains(",ractor=warn"), "{named}");
        assert_eq!(with_libraries_quiet("warn"), "warn");
        assert_eq!(with_libraries_quiet("kvd=debug"), "kvd=debug");
        assert_eq!(with_libraries_quiet("error,kvd=trace"), "error,kvd=trace");
        assert!(with_libraries_quiet("kvd=trace, info").contains(",tokio=warn"));
    }

    /// A JSON line starts with the process's pid and is still one object.
    #[test]
    fn a_json_line_carries_the_pid() {
        let buffer = Buffer::default();
        let subscriber = Registry::default().with(json_layer(buffer.clone()));
        tracing::subscriber::with_default(subscriber, || {
            tracing::info!(state = "running", "transition");
        });
        let text = String::from_utf8(buffer.0.lock().expect("lock").clone()).expect("utf-8");
        let value: serde_json::Value = serde_json::from_str(text.trim_end()).expect("one object");
        assert_eq!(value["pid"], std::process::id(), "{text}");
        assert_eq!(value["fields"]["state"], "running", "{text}");
        assert!(text.starts_with("{\"pid\":"), "{text}");
    }
}
