//! What the journal says happened: attempts and their phases folded from the
//! journal's records, across the runs (processes) that wrote them, and the
//! re-initialization confirmation token.
//!
//! Pure: the facade reads the records; this module only folds them.
//!
//! Invariants:
//! - Each run's attempts keep their own numbers (a process counts its boots
//!   from 1); an entry says which run it belongs to, counted from the oldest
//!   run still in the journal. A run begins at a transition out of
//!   `resolving`, or at an attempt number that does not grow. Checked by
//!   `history::tests::runs_are_told_apart`.
//! - A token names its epoch and carries a check bound to the daemon's
//!   salt, so a token is refused by another daemon, in another epoch, or
//!   when mistyped. Checked by `history::tests::tokens_bind_epoch_and_salt`.

use std::num::NonZeroU32;

use serde::{Deserialize, Serialize};

use crate::Timestamp;
use crate::journal::{AttemptResult as JournalResult, Record};
use crate::lifecycle::Phase;
use crate::snapshot::{AttemptRecord, AttemptResult, PhaseOutcome, PhaseRecord};

/// One attempt as the journal tells it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JournalAttempt {
    /// Which run (process) made it, from 1 = the oldest run in the journal.
    pub run: u32,
    /// The attempt and its phases.
    #[serde(flatten)]
    pub attempt: AttemptRecord,
    /// Its runtime's children's restarts and meltdown, oldest first (the
    /// last [`MAX_CHILD_EVENTS`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub children: Vec<ChildEvent>,
}

/// The most child events one attempt of the journal view keeps.
pub const MAX_CHILD_EVENTS: usize = 64;

/// A child restarted, or its group melted down, as the journal records it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChildEvent {
    /// When.
    pub at: Timestamp,
    /// The child.
    pub child: String,
    /// The incarnation started (0 for a meltdown: none was).
    pub incarnation: u32,
    /// Why (a meltdown: the child's end).
    pub reason: String,
    /// Whether this is the group's meltdown (which ended the runtime).
    pub meltdown: bool,
}

/// Keep `event`, and at most [`MAX_CHILD_EVENTS`] (the latest).
fn push_child(events: &mut Vec<ChildEvent>, event: ChildEvent) {
    if events.len() == MAX_CHILD_EVENTS {
        events.remove(0);
    }
    events.push(event);
}

/// The last `limit` attempts the records describe, oldest first.
#[must_use]
pub fn attempts(records: &[Record], limit: usize) -> Vec<JournalAttempt> {
    let mut out: Vec<JournalAttempt> = Vec::new();
    let mut run = 0u32;
    let mut last_attempt = 0u32;
    let mut run_open = false;
    let find = |out: &mut Vec<JournalAttempt>, run: u32, attempt: NonZeroU32| -> Option<usize> {
        out.iter()
            .rposition(|a| a.run == run && a.attempt.attempt == attempt)
    };
    for record in records {
        match record {
            Record::Transition { from, .. } if from == "resolving" => {
                run += 1;
                run_open = true;
                last_attempt = 0;
            }
            Record::AttemptStarted { attempt, at_ms } => {
                if !run_open || attempt.get() <= last_attempt {
                    run += 1;
                    run_open = true;
                }
                last_attempt = attempt.get();
                out.push(JournalAttempt {
                    run,
                    attempt: AttemptRecord::new(*attempt, Timestamp(*at_ms)),
                    children: Vec::new(),
                });
            }
            Record::PhaseStarted {
                attempt,
                phase,
                index,
                total,
                at_ms,
            } => {
                if let Some(i) = find(&mut out, run, *attempt) {
                    out[i].attempt.phases.push(PhaseRecord {
                        phase: Phase::new(phase.clone()),
                        index: *index,
                        total: *total,
                        started_at: Timestamp(*at_ms),
                        duration_ms: None,
                        outcome: PhaseOutcome::Running,
                    });
                }
            }
            Record::PhaseCompleted {
                attempt,
                phase,
                duration_ms,
                ..
            } => end_phase(
                &mut out,
                run,
                *attempt,
                phase,
                Some(*duration_ms),
                PhaseOutcome::Completed,
            ),
            Record::PhaseSkipped { attempt, phase, .. } => {
                end_phase(&mut out, run, *attempt, phase, None, PhaseOutcome::Skipped);
            }
            Record::PhaseFailed {
                attempt,
                phase,
                duration_ms,
                error,
                ..
            } => end_phase(
                &mut out,
                run,
                *attempt,
                phase,
                Some(*duration_ms),
                PhaseOutcome::Failed {
                    error: error.clone(),
                },
            ),
            Record::AttemptEnded {
                attempt, result, ..
            } => {
                if let Some(i) = find(&mut out, run, *attempt) {
                    out[i].attempt.result = match result {
                        JournalResult::Succeeded => AttemptResult::Succeeded,
                        JournalResult::Failed => AttemptResult::Failed,
                        JournalResult::Cancelled => AttemptResult::Cancelled,
                    };
                }
            }
            Record::ChildRestarted {
                attempt,
                child,
                incarnation,
                reason,
                at_ms,
            } => {
                if let Some(i) = find(&mut out, run, *attempt) {
                    push_child(
                        &mut out[i].children,
                        ChildEvent {
                            at: Timestamp(*at_ms),
                            child: child.clone(),
                            incarnation: *incarnation,
                            reason: reason.clone(),
                            meltdown: false,
                        },
                    );
                }
            }
            Record::ChildrenMeltdown {
                attempt,
                child,
                restarts,
                period_ms,
                reason,
                at_ms,
            } => {
                if let Some(i) = find(&mut out, run, *attempt) {
                    push_child(
                        &mut out[i].children,
                        ChildEvent {
                            at: Timestamp(*at_ms),
                            child: child.clone(),
                            incarnation: 0,
                            reason: format!("{restarts} restarts within {period_ms} ms: {reason}"),
                            meltdown: true,
                        },
                    );
                }
            }
            _ => {}
        }
    }
    let excess = out.len().saturating_sub(limit);
    out.drain(..excess);
    for entry in &mut out {
        entry.attempt.count_totals();
    }
    out
}

fn end_phase(
    out: &mut [JournalAttempt],
    run: u32,
    attempt: NonZeroU32,
    phase: &str,
    duration_ms: Option<u64>,
    outcome: PhaseOutcome,
) {
    let Some(entry) = out
        .iter_mut()
        .rev()
        .find(|a| a.run == run && a.attempt.attempt == attempt)
    else {
        return;
    };
    match entry.attempt.phase_mut(&Phase::new(phase.to_owned())) {
        // A skipped phase may be recorded without having started.
        Some(p) if p.outcome == PhaseOutcome::Running => {
            p.duration_ms = duration_ms;
            p.outcome = outcome;
        }
        _ => {
            let index = u32::try_from(entry.attempt.phases.len() + 1).unwrap_or(u32::MAX);
            entry.attempt.phases.push(PhaseRecord {
                phase: Phase::new(phase.to_owned()),
                index,
                total: 0,
                started_at: entry.attempt.started_at,
                duration_ms,
                outcome,
            });
        }
    }
}

/// The confirmation token for a re-initialization in `epoch`, bound to the
/// daemon by `salt` (the facade derives it from the data directory and the
/// identity): `reinit-<epoch>-<check>`.
#[must_use]
pub fn reinit_token(epoch: u64, salt: &[u8]) -> String {
    format!("reinit-{epoch}-{:08x}", token_check(epoch, salt))
}

/// The epoch `token` was prepared in, if it is a token this daemon (`salt`)
/// issued; `None` otherwise.
#[must_use]
pub fn reinit_token_epoch(token: &str, salt: &[u8]) -> Option<u64> {
    let rest = token.trim().strip_prefix("reinit-")?;
    let (epoch, check) = rest.split_once('-')?;
    let epoch: u64 = epoch.parse().ok()?;
    let check = u32::from_str_radix(check, 16).ok()?;
    (check == token_check(epoch, salt)).then_some(epoch)
}

fn token_check(epoch: u64, salt: &[u8]) -> u32 {
    let seed = crc32c::crc32c(salt);
    crc32c::crc32c_append(seed, &epoch.to_le_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nz;

    fn started(attempt: u32, at_ms: u64) -> Record {
        Record::AttemptStarted {
            attempt: nz(attempt),
            at_ms,
        }
    }

    fn phase(attempt: u32, name: &str, index: u32) -> Record {
        Record::PhaseStarted {
            attempt: nz(attempt),
            phase: name.into(),
            index,
            total: 2,
            at_ms: 5,
        }
    }

    fn transition(from: &str, to: &str) -> Record {
        Record::Transition {
            at_ms: 1,
            from: from.into(),
            event: "start".into(),
            to: to.into(),
        }
    }

    #[test]
    fn runs_are_told_apart() {
        let records = vec![
            transition("resolving", "booting"),
            started(1, 10),
            phase(1, "resolve_config", 1),
            Record::PhaseCompleted {
                attempt: nz(1),
                phase: "resolve_config".into(),
                at_ms: 11,
                duration_ms: 1,
            },
            phase(1, "open_store", 2),
            // The process was killed here; the next one starts over.
            transition("resolving", "booting"),
            started(1, 100),
            phase(1, "resolve_config", 1),
            Record::PhaseFailed {
                attempt: nz(1),
                phase: "resolve_config".into(),
                at_ms: 101,
                duration_ms: 1,
                error: "bad toml".into(),
            },
            Record::AttemptEnded {
                attempt: nz(1),
                at_ms: 101,
                result: JournalResult::Failed,
            },
            // No transition record (an older journal): a non-growing number.
            started(1, 200),
            Record::AttemptEnded {
                attempt: nz(1),
                at_ms: 201,
                result: JournalResult::Succeeded,
            },
        ];
        let all = attempts(&records, 10);
        assert_eq!(all.iter().map(|a| a.run).collect::<Vec<_>>(), [1, 2, 3]);
        assert_eq!(all[0].attempt.result, AttemptResult::InProgress);
        assert_eq!(all[0].attempt.phases.len(), 2);
        assert_eq!(all[0].attempt.phases[0].outcome, PhaseOutcome::Completed);
        assert_eq!(all[0].attempt.phases[1].outcome, PhaseOutcome::Running);
        assert_eq!(all[1].attempt.result, AttemptResult::Failed);
        assert_eq!(
            all[1].attempt.phases[0].outcome,
            PhaseOutcome::Failed {
                error: "bad toml".into()
            }
        );
        assert_eq!(all[2].attempt.result, AttemptResult::Succeeded);
        let last = attempts(&records, 1);
        assert_eq!(last.len(), 1);
        assert_eq!(last[0].run, 3);
    }

    #[test]
    fn tokens_bind_epoch_and_salt() {
        let token = reinit_token(4, b"/data/a");
        assert!(token.starts_with("reinit-4-"));
        assert_eq!(reinit_token_epoch(&token, b"/data/a"), Some(4));
        assert_eq!(reinit_token_epoch(&token, b"/data/b"), None);
        let forged = token.replace("reinit-4-", "reinit-5-");
        assert_eq!(reinit_token_epoch(&forged, b"/data/a"), None);
        for junk in [
            "",
            "reinit-",
            "reinit-x-1",
            "reinit-4",
            "4-abc",
            "reinit-4-zz",
        ] {
            assert_eq!(reinit_token_epoch(junk, b"/data/a"), None, "{junk}");
        }
    }
}
