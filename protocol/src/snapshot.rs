//! What a supervisor publishes: the [`Snapshot`] that `watch`, `status --json`
//! and the embedding handle show.
//!
//! A snapshot is a value: the lifecycle state, the recent attempts with their
//! phases, what the previous run of this data directory left behind, the
//! identity, the counters and the hold marker. Each published snapshot has a
//! `version` one higher than the one before, so a long-poll can ask for "the
//! first snapshot newer than N"; the shape itself is versioned by `schema`
//! ([`SCHEMA`]). The shapes are snake_case and, where they are enums with
//! data, internally tagged, for JSON (`spec/control.md`). Checked by
//! `snapshot::tests::json_shape_is_snake_case_and_tagged`.
//!
//! Over the control plane a snapshot is [`Snapshot::lean`]: the current
//! attempt only (history is the `journal` method's), so its size does not
//! grow with the history. Checked by
//! `snapshot::tests::lean_keeps_only_the_current_attempt`.
//!
//! The snapshot's `error` is rendered from [`Errors`]: one slot per
//! operation that can fail outside a boot ([`ErrorSource`]), each cleared
//! by that operation's next success, so an error shows exactly as long as
//! its cause lasts (`spec/control.md`, "The snapshot's error"). Checked by
//! `snapshot::tests::an_error_clears_with_its_own_operation_only`.

use std::num::NonZeroU32;

use serde::{Deserialize, Serialize};

use crate::Timestamp;
use crate::lifecycle::{LifecycleState, PendingApply, Phase};

/// The version of the JSON shapes the control plane answers (the snapshot,
/// the journal, `steadfastctl`'s `--json`): raised when a field changes
/// meaning or goes away. 1 was the unversioned shape that carried every
/// recent attempt; 2 is the lean snapshot with `schema` and `now`.
pub const SCHEMA: u32 = 2;

const fn schema_before_it_was_versioned() -> u32 {
    1
}

/// What the previous run of this data directory left behind, read from the
/// run marker when the daemon opened it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum PreviousRun {
    /// No daemon ever ran over this data directory.
    FirstEver,
    /// The previous daemon exited cleanly and released the store.
    CleanStop {
        /// When it released it.
        at: Timestamp,
        /// Its epoch then.
        epoch: u64,
    },
    /// The previous daemon ended without releasing (killed, crashed, power
    /// lost), or its run marker could not be read.
    Crashed {
        /// Its pid, if the marker was readable.
        pid: Option<u32>,
        /// The attempt it was on, if the marker was readable.
        attempt: Option<u32>,
    },
    /// The previous daemon handed this data directory over to this one (a
    /// committed or in-flight `replace`): it gave its lock to this process
    /// on purpose, and did not crash.
    HandedOver {
        /// The incumbent's pid.
        pid: u32,
        /// The attempt it was on when it handed over, if its run marker
        /// was readable.
        attempt: Option<u32>,
    },
}

/// How one phase of an attempt went.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum PhaseOutcome {
    /// Still in progress.
    Running,
    /// Executed and checkpointed.
    Completed,
    /// Skipped: its checkpointed resource was observed still present.
    Skipped,
    /// Failed with this error.
    Failed {
        /// The error, rendered.
        error: String,
    },
}

/// One phase of an attempt.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct PhaseRecord {
    /// Which phase.
    pub phase: Phase,
    /// Its position in the plan, from 1 (`resolve_config` is 1).
    pub index: u32,
    /// How many phases the plan has (0 while the plan is not known yet).
    pub total: u32,
    /// When it started.
    pub started_at: Timestamp,
    /// How long it took, once it ended.
    pub duration_ms: Option<u64>,
    /// How it went.
    #[serde(flatten)]
    pub outcome: PhaseOutcome,
}

/// How an attempt ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AttemptResult {
    /// Still booting, or running.
    InProgress,
    /// It reached running.
    Succeeded,
    /// It failed.
    Failed,
    /// It was cancelled (a stop, restart or exit during the boot).
    Cancelled,
}

/// One boot of this daemon and its phases.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct AttemptRecord {
    /// Which boot (from 1).
    pub attempt: NonZeroU32,
    /// When it started.
    pub started_at: Timestamp,
    /// Its phases, in order.
    pub phases: Vec<PhaseRecord>,
    /// How it ended.
    pub result: AttemptResult,
}

impl AttemptRecord {
    /// Give the phases that started before the plan was known
    /// (`resolve_config`, whose `total` is 0 then) the plan's total, once
    /// a later phase knows it, so `resolve_config` reads `1/N` like the
    /// others. Checked by `snapshot::tests::resolve_config_counts_in_the_total`.
    pub fn count_totals(&mut self) {
        let total = self.phases.iter().map(|p| p.total).max().unwrap_or(0);
        if total > 0 {
            for phase in &mut self.phases {
                if phase.total == 0 {
                    phase.total = total;
                }
            }
        }
    }
}

impl AttemptRecord {
    /// A new attempt, with no phases yet.
    #[must_use]
    pub const fn new(attempt: NonZeroU32, started_at: Timestamp) -> Self {
        Self {
            attempt,
            started_at,
            phases: Vec::new(),
            result: AttemptResult::InProgress,
        }
    }

    /// The phase record for `phase`, if it has started.
    pub fn phase_mut(&mut self, phase: &Phase) -> Option<&mut PhaseRecord> {
        self.phases.iter_mut().rev().find(|p| p.phase == *phase)
    }
}

/// Everything a supervisor publishes about itself.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Snapshot {
    /// The version of this JSON shape ([`SCHEMA`]); 1 when absent (a daemon
    /// from before it was versioned).
    #[serde(default = "schema_before_it_was_versioned")]
    pub schema: u32,
    /// A counter, one higher for every published snapshot (what `watch`
    /// long-polls on); not a version of the shape (that is `schema`).
    pub version: u64,
    /// The daemon's clock when it answered: what the relative times ("3 s
    /// ago") are measured from, so they do not depend on the reader's
    /// clock. Every [`Timestamp`] here is wall-clock milliseconds since the
    /// Unix epoch as the daemon reads it (anchored once at its start,
    /// advanced by its monotonic clock). `None` in the handle's own
    /// snapshots: the control server stamps it.
    #[serde(default)]
    pub now: Option<Timestamp>,
    /// Where the lifecycle is.
    pub lifecycle: LifecycleState,
    /// The most recent attempts of this process, oldest first (bounded); over
    /// the control plane only the current one ([`Snapshot::lean`]).
    pub attempts: Vec<AttemptRecord>,
    /// What the previous run of this data directory left behind.
    pub previous_run: PreviousRun,
    /// The data directory's identity, once a boot has succeeded.
    pub identity: Option<String>,
    /// Times this process has released the store.
    pub epoch: u64,
    /// Consecutive failed boots since a runtime last ran stably.
    pub streak: u32,
    /// Whether a stop is held across relaunch.
    pub hold: bool,
    /// Whether the running runtime reflects the effective configuration.
    pub pending: PendingApply,
    /// The daemon's process id.
    pub pid: u32,
    /// The errors the supervisor has now, outside a boot (a failed journal
    /// or override write, a config change not applied, a reload whose files
    /// were refused), one a line, oldest first ([`Errors::render`]); each
    /// goes once its own operation next succeeds. `None`: none.
    pub error: Option<String>,
    /// The same errors, each with the operation it belongs to, oldest
    /// first: what a script (and `steadfastctl`) tells them apart by,
    /// never the text. Empty from a daemon that predates it.
    #[serde(default)]
    pub errors: Vec<ErrorSlot>,
    /// The restart budget as the machine counts it; `None` when it is off.
    #[serde(default)]
    pub budget: Option<BudgetStatus>,
    /// The running runtime's supervised children, groups in start order,
    /// each group's children in declaration order
    /// (`steadfast_protocol::children`). Empty when the runtime has none
    /// (or none runs); absent from a daemon that predates children.
    #[serde(default)]
    pub children: Vec<crate::children::ChildView>,
}

/// The restart budget: how many failed automatic restarts (a boot that
/// failed, or a runtime that ended) it allows within its window, and how
/// many the machine has counted (as of the latest failure, since an
/// operator or a config change last started a boot).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct BudgetStatus {
    /// N: failed automatic restarts allowed within the window.
    pub max_failures: u32,
    /// W, in milliseconds.
    pub window_ms: u64,
    /// Failed automatic restarts counted within it.
    pub failures: u32,
}

impl Snapshot {
    /// The children whose absence makes the runtime not ready: a permanent
    /// or significant child that is not running (between its end and its
    /// restart, or stopped by an operator). A transient or temporary one
    /// that ended is not missed.
    #[must_use]
    pub fn children_down(&self) -> Vec<&str> {
        use crate::children::{ChildState, Restart};
        self.children
            .iter()
            .filter(|c| {
                (c.restart == Restart::Permanent || c.significant) && c.state != ChildState::Running
            })
            .map(|c| c.name.as_str())
            .collect()
    }

    /// Whether the runtime is ready: running, with no child it needs down
    /// ([`Self::children_down`]).
    #[must_use]
    pub fn ready(&self) -> bool {
        matches!(self.lifecycle, LifecycleState::Running { .. }) && self.children_down().is_empty()
    }

    /// This snapshot as the control plane carries it: the current (latest)
    /// attempt only, with its phases; earlier attempts are the journal's.
    #[must_use]
    pub fn lean(&self) -> Self {
        // Field by field, so the attempts left out are never cloned (a
        // control call builds one of these per answer).
        Self {
            schema: self.schema,
            version: self.version,
            now: self.now,
            lifecycle: self.lifecycle.clone(),
            attempts: self.attempts.last().cloned().into_iter().collect(),
            previous_run: self.previous_run.clone(),
            identity: self.identity.clone(),
            epoch: self.epoch,
            streak: self.streak,
            hold: self.hold,
            pending: self.pending.clone(),
            pid: self.pid,
            error: self.error.clone(),
            errors: Vec::new(),
            budget: self.budget,
            children: self.children.clone(),
        }
    }

    /// The attempt record for `attempt`, if it is still kept.
    pub fn attempt_mut(&mut self, attempt: NonZeroU32) -> Option<&mut AttemptRecord> {
        self.attempts
            .iter_mut()
            .rev()
            .find(|a| a.attempt == attempt)
    }
}

/// The operation an error of the snapshot's belongs to: its next success
/// clears it, and nothing else does. On the wire, its snake_case name
/// (`config_apply`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorSource {
    /// A journal append or fsync; cleared by the next one that succeeds.
    Journal,
    /// The hold marker's write; cleared by the next one that succeeds.
    HoldMarker,
    /// The run marker's write at exit (the next daemon will read
    /// `crashed`).
    RunMarker,
    /// The identity's write at the first `running`; cleared once written.
    Identity,
    /// The override tier's write (`config set` / `unset`); cleared by the
    /// next write of it that succeeds.
    Overrides,
    /// A config change applied in place (the declared file or an override
    /// did not resolve); cleared by the next change applied, or by a boot
    /// that reaches `running` (its runtime runs the config it resolved).
    ConfigApply,
    /// A re-initialization's wipe; cleared by the next wipe that succeeds.
    Reinit,
    /// A reload's files (the TLS control port's certificate, key, CA or
    /// tokens) refused, the old ones kept; cleared by the next reload
    /// whose files are all taken.
    Reload,
}

/// One error a supervisor shows ([`Snapshot::errors`]): the operation it
/// belongs to, and what it said.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorSlot {
    /// The operation.
    pub source: ErrorSource,
    /// What failed, in words.
    pub error: String,
}

/// The errors a supervisor shows now: at most one per [`ErrorSource`],
/// in the order they were set. Internal state of the Lifecycle actor;
/// the snapshot carries [`Errors::render`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Errors(Vec<(ErrorSource, String)>);

impl Errors {
    /// `source` failed with `error` (replacing what it said before, and
    /// counted as the latest). Whether anything changed.
    pub fn set(&mut self, source: ErrorSource, error: String) -> bool {
        if self
            .0
            .last()
            .is_some_and(|(s, e)| *s == source && *e == error)
        {
            return false;
        }
        self.0.retain(|(s, _)| *s != source);
        self.0.push((source, error));
        true
    }

    /// `source` succeeded: its error, if any, goes. Whether one went.
    pub fn clear(&mut self, source: ErrorSource) -> bool {
        let before = self.0.len();
        self.0.retain(|(s, _)| *s != source);
        self.0.len() != before
    }

    /// The error `source` left, if it is still there.
    #[must_use]
    pub fn get(&self, source: ErrorSource) -> Option<&str> {
        self.0
            .iter()
            .find(|(s, _)| *s == source)
            .map(|(_, e)| e.as_str())
    }

    /// What the snapshot's `errors` hold: every current error with its
    /// operation, oldest first.
    #[must_use]
    pub fn slots(&self) -> Vec<ErrorSlot> {
        self.0
            .iter()
            .map(|(source, error)| ErrorSlot {
                source: *source,
                error: error.clone(),
            })
            .collect()
    }

    /// What the snapshot's `error` says: every current error, one a line,
    /// oldest first; `None` when there is none.
    #[must_use]
    pub fn render(&self) -> Option<String> {
        if self.0.is_empty() {
            return None;
        }
        Some(
            self.0
                .iter()
                .map(|(_, e)| e.as_str())
                .collect::<Vec<_>>()
                .join("\n"),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nz;

    /// `spec/control.md`, "The snapshot's error": a success clears its own
    /// operation's error and no other; an error set again moves to the end.
    #[test]
    fn an_error_clears_with_its_own_operation_only() {
        let mut errors = Errors::default();
        assert_eq!(errors.render(), None);
        assert!(errors.set(ErrorSource::Overrides, "no space".into()));
        assert!(errors.set(ErrorSource::Reload, "bad key".into()));
        assert_eq!(errors.render().as_deref(), Some("no space\nbad key"));
        assert!(
            !errors.clear(ErrorSource::Journal),
            "nothing of the journal's"
        );
        assert!(errors.set(ErrorSource::Overrides, "still no space".into()));
        assert_eq!(errors.render().as_deref(), Some("bad key\nstill no space"));
        assert!(!errors.set(ErrorSource::Overrides, "still no space".into()));
        assert!(errors.clear(ErrorSource::Overrides));
        assert_eq!(errors.get(ErrorSource::Overrides), None);
        assert_eq!(errors.render().as_deref(), Some("bad key"));
        assert!(errors.clear(ErrorSource::Reload));
        assert_eq!(errors.render(), None);
    }

    #[test]
    fn json_shape_is_snake_case_and_tagged() {
        let mut attempt = AttemptRecord::new(nz(1), Timestamp(5));
        attempt.phases.push(PhaseRecord {
            phase: Phase::RESOLVE_CONFIG,
            index: 1,
            total: 3,
            started_at: Timestamp(5),
            duration_ms: Some(2),
            outcome: PhaseOutcome::Failed {
                error: "bad".into(),
            },
        });
        let snapshot = Snapshot {
            schema: SCHEMA,
            version: 7,
            now: Some(Timestamp(9)),
            lifecycle: LifecycleState::Resolving {
                since: Timestamp(1),
            },
            attempts: vec![attempt],
            previous_run: PreviousRun::CleanStop {
                at: Timestamp(0),
                epoch: 2,
            },
            identity: None,
            epoch: 0,
            streak: 0,
            hold: false,
            pending: PendingApply::InSync,
            pid: 42,
            error: None,
            errors: Vec::new(),
            budget: Some(BudgetStatus {
                max_failures: 5,
                window_ms: 600_000,
                failures: 2,
            }),
            children: Vec::new(),
        };
        let json = serde_json::to_value(&snapshot).expect("json");
        assert_eq!(json["lifecycle"]["state"], "resolving");
        assert_eq!(json["previous_run"]["kind"], "clean_stop");
        assert_eq!(
            json["budget"],
            serde_json::json!({"max_failures": 5, "window_ms": 600_000, "failures": 2})
        );
        assert_eq!(json["attempts"][0]["result"], "in_progress");
        assert_eq!(json["attempts"][0]["phases"][0]["outcome"], "failed");
        assert_eq!(json["attempts"][0]["phases"][0]["error"], "bad");
        assert_eq!(json["pending"]["kind"], "in_sync");
        assert_eq!(json["schema"], SCHEMA);
        assert_eq!(json["now"], 9);
        let back: Snapshot = serde_json::from_value(json.clone()).expect("round trip");
        assert_eq!(back, snapshot);
        // A daemon from before the shape was versioned: schema 1, no `now`.
        let mut old = json;
        let object = old.as_object_mut().expect("object");
        object.remove("schema");
        object.remove("now");
        let back: Snapshot = serde_json::from_value(old).expect("old shape");
        assert_eq!((back.schema, back.now), (1, None));
    }

    fn phase(name: &str, index: u32, total: u32) -> PhaseRecord {
        PhaseRecord {
            phase: Phase::new(name.to_owned()),
            index,
            total,
            started_at: Timestamp(5),
            duration_ms: Some(1),
            outcome: PhaseOutcome::Completed,
        }
    }

    #[test]
    fn resolve_config_counts_in_the_total() {
        let mut attempt = AttemptRecord::new(nz(1), Timestamp(5));
        attempt.phases.push(phase("resolve_config", 1, 0));
        attempt.count_totals();
        assert_eq!(attempt.phases[0].total, 0, "unknown until a step knows it");
        attempt.phases.push(phase("open_store", 2, 5));
        attempt.count_totals();
        assert_eq!(
            attempt.phases.iter().map(|p| p.total).collect::<Vec<_>>(),
            [5, 5]
        );
    }

    #[test]
    fn lean_keeps_only_the_current_attempt() {
        let mut snapshot = Snapshot {
            schema: SCHEMA,
            version: 1,
            now: None,
            lifecycle: LifecycleState::Resolving {
                since: Timestamp(1),
            },
            attempts: (1..=32)
                .map(|n| AttemptRecord::new(nz(n), Timestamp(5)))
                .collect(),
            previous_run: PreviousRun::FirstEver,
            identity: None,
            epoch: 0,
            streak: 0,
            hold: false,
            pending: PendingApply::InSync,
            pid: 42,
            error: None,
            errors: Vec::new(),
            budget: None,
            children: Vec::new(),
        };
        let lean = snapshot.lean();
        assert_eq!(lean.attempts.len(), 1);
        assert_eq!(lean.attempts[0].attempt, nz(32));
        snapshot.attempts.clear();
        assert!(snapshot.lean().attempts.is_empty());
    }
}

/// What `config show` answers: the override tier and the effective value.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct ConfigView {
    /// Every leaf of the override tier with its value as TOML text, sorted
    /// by leaf (only the asked leaf, when one was asked).
    pub overrides: Vec<(String, String)>,
    /// The effective value (the asked leaf's, or the whole config) as TOML
    /// text; `None` when the leaf is not set in any tier or the config does
    /// not resolve.
    pub effective: Option<String>,
    /// Why the config does not resolve, if it does not.
    pub error: Option<String>,
}
