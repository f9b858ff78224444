//! What the fleet's answers read as: the table (or `--json` document),
//! the journals, each daemon's verdict, the exit code and the daemons
//! stderr names.

use std::process::ExitCode;
use std::time::Duration;

use steadfast::protocol::lifecycle::LifecycleState;
use steadfast::protocol::snapshot::{SCHEMA, Snapshot};

use crate::cli::{Cli, ProbeKind};
use crate::out::{self, errln, escape, out, outln};

use super::inventory::Entry;
use super::metrics::merge_metrics;
use super::{Answer, Ask, Failure, one_line};

/// How one daemon fared, for the exit code and the summary.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Verdict {
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

pub(super) fn verdict(ask: &Ask, reply: &Result<Answer, Failure>) -> Verdict {
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
pub(super) fn report(
    entries: &[Entry],
    replies: &[Result<Answer, Failure>],
    ask: &Ask,
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
            Ask::Read(_) => out!("{}", reads(entries, replies)),
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
pub(super) fn table(entries: &[Entry], replies: &[Result<Answer, Failure>], ask: &Ask) -> String {
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

/// A command answered from the snapshot: one line per daemon, its name
/// and its answer as the command prints it (or what went wrong).
pub(super) fn reads(entries: &[Entry], replies: &[Result<Answer, Failure>]) -> String {
    use std::fmt::Write as _;
    let width = crate::render::name_width(entries.iter().map(|e| e.name.as_str()));
    let mut out = String::new();
    for (entry, reply) in entries.iter().zip(replies) {
        let answer = match reply {
            Ok(Answer::Read { text, .. }) => escape(&one_line(text)).into_owned(),
            Ok(_) => "answered".to_owned(),
            Err(failure) => format!("{}: {}", failure.kind(), escape(&one_line(failure.text()))),
        };
        let _ = writeln!(out, "{:<width$}  {answer}", escape(&entry.name));
    }
    out
}

/// The attempt a snapshot is on, or its last one (a stopped runtime keeps
/// the number of the attempt it stopped).
pub(super) fn attempt_of(snapshot: &Snapshot) -> Option<u32> {
    crate::render::attempt_of(&snapshot.lifecycle)
        .or_else(|| snapshot.attempts.last().map(|a| a.attempt.get()))
}

/// `journal`: each daemon's attempts under its name.
pub(super) fn print_journals(entries: &[Entry], replies: &[Result<Answer, Failure>], utc: bool) {
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
pub(super) fn document(
    entries: &[Entry],
    replies: &[Result<Answer, Failure>],
    verdicts: &[Verdict],
    ask: &Ask,
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
                Ok(Answer::Read { json, .. }) => {
                    fields.insert("answer".into(), json.clone());
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
