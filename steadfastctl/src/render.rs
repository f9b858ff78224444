//! How an answer reads: a snapshot, the journal, a config change or a probe
//! as text for a human (like `systemctl status`, times absolute and
//! relative, local or `--utc`) or as `--json` carrying `schema`, and the
//! exit code a status implies. Pure formatting over what was answered; it
//! calls no daemon.

use std::process::ExitCode;
use std::time::{SystemTime, UNIX_EPOCH};

use steadfast::protocol::history::JournalAttempt;
use steadfast::protocol::lifecycle::LifecycleState;
use steadfast::protocol::snapshot::{
    AttemptRecord, AttemptResult, PhaseOutcome, PhaseRecord, PreviousRun, SCHEMA, Snapshot,
};

use crate::EXIT_NOT_RUNNING;
use crate::cli::{Cli, ProbeKind};
pub use crate::out::say;
use crate::out::{self, errln, escape, out, outln};

/// `config set`/`unset --json`: `snapshot` with `change: {leaf, applied,
/// restart_needed}` added (`restart_needed`: its `pending` leaves).
pub fn print_change(snapshot: &Snapshot, leaf: &str, applied: &str) -> ExitCode {
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
pub fn print_answer(snapshot: &Snapshot, cli: &Cli) {
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
pub const fn status_code(lifecycle: &LifecycleState) -> u8 {
    if matches!(lifecycle, LifecycleState::Running { .. }) {
        0
    } else {
        EXIT_NOT_RUNNING
    }
}

/// `value` as the JSON steadfastctl prints: an object carries `schema`
/// ([`SCHEMA`]), whatever it answers.
pub fn with_schema(value: &impl serde::Serialize) -> Result<serde_json::Value, serde_json::Error> {
    let mut value = serde_json::to_value(value)?;
    if let serde_json::Value::Object(fields) = &mut value {
        fields
            .entry("schema")
            .or_insert_with(|| serde_json::Value::from(SCHEMA));
    }
    Ok(value)
}

pub fn print_json(value: &impl serde::Serialize) {
    match with_schema(value).and_then(|v| serde_json::to_string_pretty(&v)) {
        Ok(json) => outln!("{}", out::json(&json)),
        Err(error) => say(&error),
    }
}

/// One JSON value on one line (`watch --json`, `replace --json`).
pub fn print_json_line(value: &impl serde::Serialize) {
    match with_schema(value).and_then(|v| serde_json::to_string(&v)) {
        Ok(line) => outln!("{}", out::json(&line)),
        Err(error) => say(&error),
    }
}

/// `status`'s answer for `snapshot` (and the journal's `attempts` for
/// `--history`), from the control plane or the status record alike.
pub fn print_status(
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

/// `probe`'s answer for `snapshot`, from the control plane or the status
/// record alike.
pub fn probe_answer(snapshot: &Snapshot, what: ProbeKind, verbose: bool) -> ExitCode {
    let ok = match what {
        ProbeKind::Live => true,
        ProbeKind::Ready => snapshot.ready(),
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

pub fn print_journal(attempts: &[JournalAttempt], json: bool, offline: bool, utc: bool) {
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
pub fn render_journal(attempts: &[JournalAttempt], times: Times) -> String {
    let mut out = String::new();
    let mut run = None;
    for entry in attempts {
        if run != Some(entry.run) {
            run = Some(entry.run);
            out.push_str(&format!("Run {}:\n", entry.run));
        }
        out.push_str(&render_attempt(&entry.attempt, times));
        for event in &entry.children {
            let what = if event.meltdown {
                format!(
                    "child {} melted its group down: {}",
                    escape(&event.child),
                    escape(&event.reason)
                )
            } else {
                format!(
                    "child {} restarted (incarnation {}): {}",
                    escape(&event.child),
                    event.incarnation,
                    escape(&event.reason)
                )
            };
            out.push_str(&format!("    {}  {what}\n", times.at(event.at.as_millis())));
        }
    }
    out
}

/// `ms` since the epoch as a wall-clock time of day with milliseconds
/// (`14:03:07.123`), in the local time zone or in UTC.
pub fn clock(ms: u64, utc: bool) -> String {
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
pub fn position(phase: &PhaseRecord) -> String {
    if phase.total > 0 {
        format!("{}/{}", phase.index, phase.total)
    } else {
        format!("{}/?", phase.index)
    }
}

pub fn outcome_text(outcome: &PhaseOutcome) -> String {
    match outcome {
        PhaseOutcome::Running => "running".into(),
        PhaseOutcome::Completed => "completed".into(),
        PhaseOutcome::Skipped => "skipped (still present)".into(),
        PhaseOutcome::Failed { error } => format!("failed: {error}"),
    }
}

pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// How times are shown: relative to `now` (the daemon's clock when it
/// answered, else this machine's), and absolute in UTC or local time.
#[derive(Debug, Clone, Copy)]
pub struct Times {
    pub now: u64,
    pub utc: bool,
}

impl Times {
    pub fn of(snapshot: &Snapshot, utc: bool) -> Self {
        Self {
            now: snapshot.now.map_or_else(now_ms, |t| t.as_millis()),
            utc,
        }
    }

    /// `at` as RFC 3339 and relative: `2026-12-01T11:28:56.123+01:00 (15.2 s ago)`.
    pub fn at(self, at: u64) -> String {
        format!("{} ({})", absolute(at, self.utc), ago(self.now, at))
    }
}

/// `ms` since the epoch as RFC 3339 with milliseconds, in UTC (`Z`) or in
/// the local time zone (`TZ`, else `/etc/localtime`; UTC if neither is
/// known).
pub fn absolute(ms: u64, utc: bool) -> String {
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
pub fn local_zone() -> &'static jiff::tz::TimeZone {
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

pub fn ago(now: u64, at: u64) -> String {
    format!("{} ago", seconds(now.saturating_sub(at)))
}

/// A duration of `ms` in the one unit `status` says times in, seconds:
/// `0.042 s`, `15.2 s`, `300 s` (three significant digits at most,
/// never below a millisecond).
pub fn seconds(ms: u64) -> String {
    let secs = ms as f64 / 1000.0;
    if ms < 10_000 {
        format!("{secs:.3} s")
    } else if ms < 100_000 {
        format!("{secs:.1} s")
    } else {
        format!("{} s", ms / 1000)
    }
}

/// The daemon's state in one line (`STATUS=`'s words), what it quotes
/// escaped ([`out::escape`]).
pub fn state_line(snapshot: &Snapshot) -> String {
    escape(&steadfast::daemon::status_line(snapshot)).into_owned()
}

pub fn since(lifecycle: &LifecycleState) -> Option<u64> {
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

pub fn attempt_of(lifecycle: &LifecycleState) -> Option<u32> {
    match lifecycle {
        LifecycleState::Booting { attempt, .. }
        | LifecycleState::Running { attempt, .. }
        | LifecycleState::Draining { attempt, .. }
        | LifecycleState::Failed { attempt, .. } => Some(attempt.get()),
        _ => None,
    }
}

/// The restart budget: how much of it the machine has counted, or off.
pub fn budget_line(snapshot: &Snapshot) -> String {
    let spent = matches!(
        snapshot.lifecycle,
        LifecycleState::Failed {
            budget_spent: Some(_),
            ..
        }
    );
    match snapshot.budget {
        None => "off (failures retry on backoff forever)".to_owned(),
        Some(b) => format!(
            "{} of {} failed automatic restarts within {} s{}",
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
pub fn render_status(snapshot: &Snapshot, times: Times) -> String {
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
    if !snapshot.children.is_empty() {
        let _ = writeln!(out, "\nChildren:");
        out.push_str(&render_children(&snapshot.children));
    }
    // The current attempt; earlier ones are the journal's (`--history N`).
    if let Some(attempt) = snapshot.attempts.last() {
        let _ = writeln!(out, "\nCurrent attempt:");
        out.push_str(&render_attempt(attempt, times));
    }
    out
}

/// The width of the widest of `names` as printed (escaped): the column a
/// list of names is padded to.
pub fn name_width<'a>(names: impl IntoIterator<Item = &'a str>) -> usize {
    names
        .into_iter()
        .map(|name| escape(name).chars().count())
        .max()
        .unwrap_or(0)
}

/// The supervised children, one a line: name, kind, restart type, state
/// (with a failed child's end), incarnation and restarts within the
/// group's period.
pub fn render_children(children: &[steadfast::protocol::children::ChildView]) -> String {
    use std::fmt::Write as _;
    use steadfast::protocol::children::ChildState;
    let width = name_width(children.iter().map(|c| c.name.as_str()));
    let mut out = String::new();
    for child in children {
        let state = match &child.state {
            ChildState::Ended(exit) if !exit.is_normal() => {
                format!("failed ({})", escape(&exit.to_string()))
            }
            other => other.as_str().to_owned(),
        };
        let _ = writeln!(
            out,
            "  {:width$}  {:5}  {:9}  {}, incarnation {}, {} restart{} in period{}",
            escape(&child.name),
            child.kind.as_str(),
            child.restart.as_str(),
            state,
            child.incarnation,
            child.restarts_in_period,
            if child.restarts_in_period == 1 {
                ""
            } else {
                "s"
            },
            if child.significant {
                ", significant"
            } else {
                ""
            },
        );
    }
    out
}

/// One attempt and its phases, as `status` and `journal` print it.
pub fn render_attempt(attempt: &AttemptRecord, times: Times) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let result = match attempt.result {
        AttemptResult::InProgress => "in progress",
        AttemptResult::Succeeded => "booted",
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
        let duration = phase.duration_ms.map_or_else(|| "…".to_owned(), seconds);
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

pub const fn mode_name(mode: steadfast::protocol::replacement::Mode) -> &'static str {
    match mode {
        steadfast::protocol::replacement::Mode::Overlap => "overlap",
        steadfast::protocol::replacement::Mode::Exclusive => "exclusive",
    }
}
