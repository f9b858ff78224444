//! The loops that follow a daemon over time: `--wait` (until the answered
//! change settles), and `watch` (each change as a line, until `--until`'s
//! state or `--timeout`), with the exit codes of a daemon that exits or a
//! deadline that passes on the way.

use std::process::ExitCode;
use std::time::Duration;

use steadfast::control::ControlClient;
use steadfast::protocol::lifecycle::{LifecycleState, Settlement};
use steadfast::protocol::snapshot::{PhaseOutcome, Snapshot};

use crate::cli::{Cli, StateName};
use crate::connect::timeout_of;
use crate::fail;
use crate::out::{self, errln, escape, outln};
use crate::render::{
    absolute, clock, now_ms, outcome_text, position, print_answer, print_json_line, say, since,
    state_line,
};
use crate::{EXIT_NOT_RUNNING, EXIT_TIMED_OUT, EXIT_USAGE};

/// `start`, `restart` (unless `--no-block`) and `retry --wait`: follow the boot the command started (its answer is a booting
/// or draining snapshot, never a settled one) to the first settled state,
/// in this process. 0 running; 3 failed, wedged or stopped, or the daemon
/// exited, the reason on stderr; 5 when `--timeout` (default 120 s) passes first. Prints
/// the settled snapshot as the command would have printed its answer.
pub async fn wait_settled(client: &ControlClient, answered: Snapshot, cli: &Cli) -> ExitCode {
    // `--timeout`, else its default (120 s), as the call's own.
    let deadline = match timeout_of(cli) {
        Ok(timeout) => Some((tokio::time::Instant::now() + timeout, timeout)),
        Err(error) => {
            say(&error);
            return ExitCode::from(EXIT_USAGE);
        }
    };
    let mut have = answered;
    loop {
        match have.lifecycle.settlement() {
            Some(Settlement::Running) => {
                print_answer(&have, cli);
                return ExitCode::SUCCESS;
            }
            Some(Settlement::Short) => {
                out::exit_code_if_closed(EXIT_NOT_RUNNING);
                print_answer(&have, cli);
                errln!(
                    "steadfastctl: the boot did not reach running: {}",
                    state_line(&have)
                );
                return ExitCode::from(EXIT_NOT_RUNNING);
            }
            Some(Settlement::Exiting) => {
                return daemon_exited(
                    Some(StateName::Running),
                    Some(&have),
                    "it said it is exiting",
                );
            }
            None => {}
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
            Err(error) if error.is_gone() => match still_there(client, &have).await {
                Ok(Some(next)) => next,
                Ok(None) => {
                    return daemon_exited(
                        Some(StateName::Running),
                        Some(&have),
                        &error.to_string(),
                    );
                }
                Err(error) => return fail(&error),
            },
            Err(error) if error.is_deadline() && deadline.is_some() => {
                return timed_out(Some(StateName::Running), Some(&have), deadline);
            }
            Err(error) => return fail(&error),
        };
    }
}

/// Follow the daemon with the long-poll, printing what changed. Without
/// `until`, it returns 0 when the daemon exits. With it, 0 at that state, 3
/// (`the daemon exited`) when the daemon exits first, 5 when `deadline`
/// passes first.
pub async fn watch(
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
        let snapshot = match (next, &last) {
            (Ok(snapshot), _) => snapshot,
            // A connection lost while the daemon still answers (evicted to
            // make room for other clients, as the server does to long-polls
            // when its per-user bound is full): go on watching. A daemon
            // that answered once and then cannot be reached has exited (its
            // control socket goes with it); say so in those words.
            (Err(error), Some(have)) if error.is_gone() => match still_there(client, have).await {
                Ok(Some(snapshot)) => snapshot,
                Ok(None) => return daemon_exited(until, last.as_ref(), &error.to_string()),
                Err(error) => return fail(&error),
            },
            (Err(error), _) if error.is_deadline() && deadline.is_some() => {
                return timed_out(until, last.as_ref(), deadline);
            }
            (Err(error), _) => return fail(&error),
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

/// After a long-poll's connection was lost under it: the daemon's snapshot
/// when the same daemon (the same pid) still answers on a new connection
/// (the server closed the old one to make room, or it broke), `None` when
/// the daemon cannot be reached or another process answers in its place
/// (it exited).
///
/// # Errors
/// The new call's failure when it is neither of those (the daemon still
/// there but busy for the whole timeout, a refusal).
async fn still_there(
    client: &ControlClient,
    have: &Snapshot,
) -> Result<Option<Snapshot>, steadfast::control::ClientError> {
    match client.snapshot().await {
        Ok(snapshot) if snapshot.pid == have.pid => Ok(Some(snapshot)),
        Ok(_) => Ok(None),
        Err(error) if error.is_gone() => Ok(None),
        Err(error) => Err(error),
    }
}

/// The daemon `watch` followed exited (`how`): 0 for a plain watch, 3 when
/// it was waited on for another state.
pub fn daemon_exited(until: Option<StateName>, last: Option<&Snapshot>, how: &str) -> ExitCode {
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
pub fn timed_out(
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
pub const CLOCK_WIDTH: usize = "14:03:07.123 ".len();

/// The lines `watch` prints for the step from `before` to `now`: a
/// transition, and each phase that started or ended, each after the
/// wall-clock time it happened (local, or UTC with `--utc`, as
/// `journalctl -o short`: `14:03:07.123`): a phase's start or end, the
/// state's `since`, else when the daemon answered.
pub fn changes(before: Option<&Snapshot>, now: &Snapshot, utc: bool) -> Vec<String> {
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
