//! The control plane's service: the tarpc trait [`Control`] and the values
//! that cross the wire (`spec/control.md` is the authority on both).
//!
//! This module owns the *shapes*, not the transport: no socket, no clock.
//! The facade (`steadfast::control`) serves the trait over a Unix socket and
//! drives a client of it.
//!
//! Invariants:
//! - Every answer is bincode-safe. bincode 1.3 cannot decode internally
//!   tagged enums (`LifecycleState`, `PreviousRun`, … are
//!   `#[serde(tag = …)]`), so a snapshot travels as its JSON text inside
//!   the bincode frame ([`WireSnapshot`]), and a refusal travels as
//!   [`CommandError`], an externally tagged enum of plain fields. Checked
//!   by `control::tests::answers_round_trip_through_bincode`.
//! - A refusal keeps the lifecycle's typed reason unchanged: the
//!   [`RefusedBecause`](crate::lifecycle::RefusedBecause) and the state and event names. Checked by
//!   `control::tests::refusal_keeps_the_typed_reason`.
//! - Waiting is bounded by the server: [`clamp_watch_timeout`] caps a
//!   `watch` at [`MAX_WATCH_TIMEOUT_MS`]. Checked by
//!   `control::tests::watch_timeout_is_clamped`.

use serde::{Deserialize, Serialize};

pub use crate::command::{CommandError, Role};
use crate::lifecycle::ExitIntent;
use crate::replacement::{Mode, Report};
use crate::snapshot::Snapshot;

/// The longest a `watch` waits, in milliseconds, whatever the client asks.
pub const MAX_WATCH_TIMEOUT_MS: u64 = 60_000;

/// The largest frame either side sends or accepts, in bytes (1 MiB).
pub const MAX_FRAME_LEN: usize = 1 << 20;

/// The server's cap on a wait of `timeout_ms`.
#[must_use]
pub const fn clamp_watch_timeout(timeout_ms: u64) -> u64 {
    if timeout_ms > MAX_WATCH_TIMEOUT_MS {
        MAX_WATCH_TIMEOUT_MS
    } else {
        timeout_ms
    }
}

/// A [`Snapshot`] as it crosses the wire: its JSON text (the shape of
/// `spec/control.md`), because bincode cannot carry its tagged enums.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WireSnapshot {
    /// The snapshot as JSON.
    pub json: String,
}

impl WireSnapshot {
    /// Wrap a snapshot.
    ///
    /// # Panics
    /// Never in practice: a [`Snapshot`] has only string keys and
    /// serializable values, so serde_json cannot fail on it.
    #[must_use]
    pub fn from_snapshot(snapshot: &Snapshot) -> Self {
        #[allow(clippy::expect_used)]
        let json = serde_json::to_string(snapshot).expect("a snapshot always serializes to JSON");
        Self { json }
    }

    /// The snapshot back.
    ///
    /// # Errors
    /// When the text is not a snapshot (a peer of another version, a bug).
    pub fn into_snapshot(&self) -> Result<Snapshot, serde_json::Error> {
        serde_json::from_str(&self.json)
    }
}

/// What `watch` answers: the top-level fields of the snapshot that changed
/// since the one the client has (version `base`), not the whole snapshot.
///
/// The server diffs against the snapshot it last sent on that connection;
/// when that is not the version the client asks after (a new connection, a
/// concurrent call), `base` is `None` and `json` is the whole (lean)
/// snapshot. Checked by `control::tests::changes_carry_only_what_changed`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WireChanges {
    /// The version the changes apply to; `None`: `json` is a whole snapshot.
    pub base: Option<u64>,
    /// A JSON object: the snapshot's fields that differ from `base`'s
    /// (`version` and `now` among them), or the whole snapshot.
    pub json: String,
}

/// Why a [`WireChanges`] could not be applied.
#[derive(Debug, thiserror::Error)]
pub enum ChangesError {
    /// The changes apply to another version than the snapshot given.
    #[error("the changes apply to version {base}, not to version {have}")]
    OtherBase {
        /// The version the changes apply to.
        base: u64,
        /// The version of the snapshot given.
        have: u64,
    },
    /// The text is not a snapshot or a set of its fields.
    #[error("the changes do not decode: {0}")]
    Json(#[from] serde_json::Error),
}

impl WireChanges {
    /// What changed from `base` (the snapshot the peer has, if known) to
    /// `now`.
    ///
    /// # Panics
    /// Never in practice: see [`WireSnapshot::from_snapshot`].
    #[must_use]
    pub fn between(base: Option<&Snapshot>, now: &Snapshot) -> Self {
        let to_object = |s: &Snapshot| match serde_json::to_value(s) {
            Ok(serde_json::Value::Object(map)) => map,
            _ => serde_json::Map::new(),
        };
        let Some(base) = base else {
            return Self {
                base: None,
                json: WireSnapshot::from_snapshot(now).json,
            };
        };
        let old = to_object(base);
        let changed: serde_json::Map<String, serde_json::Value> = to_object(now)
            .into_iter()
            .filter(|(key, value)| old.get(key) != Some(value))
            .collect();
        Self {
            base: Some(base.version),
            json: serde_json::Value::Object(changed).to_string(),
        }
    }

    /// The snapshot these changes make of `have`.
    ///
    /// # Errors
    /// [`ChangesError::OtherBase`] when they apply to another version;
    /// [`ChangesError::Json`] when the text does not decode.
    pub fn apply(&self, have: &Snapshot) -> Result<Snapshot, ChangesError> {
        let Some(base) = self.base else {
            return Ok(serde_json::from_str(&self.json)?);
        };
        if base != have.version {
            return Err(ChangesError::OtherBase {
                base,
                have: have.version,
            });
        }
        let mut value = serde_json::to_value(have)?;
        let changes: serde_json::Map<String, serde_json::Value> = serde_json::from_str(&self.json)?;
        if let serde_json::Value::Object(fields) = &mut value {
            fields.extend(changes);
        }
        Ok(serde_json::from_value(value)?)
    }
}

/// What every control method answers: the snapshot after the call, or why
/// not.
pub type ControlAnswer = Result<WireSnapshot, CommandError>;

/// The journal's attempts as they cross the wire: a JSON array of
/// [`crate::history::JournalAttempt`] (their phases carry tagged enums).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WireJournal {
    /// The attempts as JSON.
    pub json: String,
}

impl WireJournal {
    /// Wrap attempts.
    ///
    /// # Panics
    /// Never in practice: attempts have only string keys and serializable
    /// values.
    #[must_use]
    pub fn from_attempts(attempts: &[crate::history::JournalAttempt]) -> Self {
        #[allow(clippy::expect_used)]
        let json = serde_json::to_string(attempts).expect("attempts always serialize to JSON");
        Self { json }
    }

    /// The attempts back.
    ///
    /// # Errors
    /// When the text is not a list of attempts.
    pub fn into_attempts(&self) -> Result<Vec<crate::history::JournalAttempt>, serde_json::Error> {
        serde_json::from_str(&self.json)
    }
}

/// What `reinit_prepare` answers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReinitPrepared {
    /// The confirmation to pass to `reinit`.
    pub token: String,
    /// The epoch it is bound to: any boot makes it stale.
    pub epoch: u64,
}

/// The most attempts `journal` answers, whatever the client asks.
pub const MAX_JOURNAL_ATTEMPTS: u32 = 1_000;

/// The control plane. Every method answers the snapshot after it took
/// effect (commands are answered once durable), or a [`CommandError`].
#[tarpc::service]
pub trait Control {
    /// The latest snapshot.
    async fn snapshot() -> ControlAnswer;
    /// Long-poll: what changed up to the first snapshot whose version is
    /// greater than `after_version`, or up to the current one once
    /// `timeout_ms` (capped at [`MAX_WATCH_TIMEOUT_MS`]) has passed.
    async fn watch(after_version: u64, timeout_ms: u64) -> Result<WireChanges, CommandError>;
    /// Boot a stopped runtime (clears a hold).
    async fn start() -> ControlAnswer;
    /// Stop the runtime; `hold` keeps it stopped across a relaunch.
    /// Answered once the drain has settled.
    async fn stop(hold: crate::command::Hold) -> ControlAnswer;
    /// Stop the runtime and boot it again. The new config is resolved
    /// first; if it does not resolve the restart is refused
    /// (`config_invalid`, with the error) and the runtime keeps serving,
    /// unless `force`, which drains anyway.
    async fn restart(force: bool) -> ControlAnswer;
    /// Retry a failed boot now.
    async fn retry() -> ControlAnswer;
    /// End the process after a drain: `halt` (exit 80) or `relaunch` (75).
    async fn exit(intent: ExitIntent) -> ControlAnswer;
    /// The supervisor's metrics, as OpenMetrics text ending `# EOF`
    /// (`spec/control.md`, "Metrics").
    async fn metrics() -> Result<String, CommandError>;
    /// The last `limit` attempts the journal records (capped at
    /// [`MAX_JOURNAL_ATTEMPTS`]), with their phases, oldest first.
    async fn journal(limit: u32) -> Result<WireJournal, CommandError>;
    /// Set `leaf` of the override tier to `value` (TOML text; a bare word
    /// is a string), durably, then `config_changed`.
    async fn config_set(leaf: String, value: String) -> ControlAnswer;
    /// Remove `leaf` from the override tier, durably, then
    /// `config_changed`.
    async fn config_unset(leaf: String) -> ControlAnswer;
    /// The override tier (or one leaf of it) and the effective value.
    async fn config_show(leaf: Option<String>)
    -> Result<crate::snapshot::ConfigView, CommandError>;
    /// Prepare a re-initialization: a confirmation bound to the current
    /// epoch. Refused unless the runtime is stopped.
    async fn reinit_prepare() -> Result<ReinitPrepared, CommandError>;
    /// Re-initialize the stopped runtime (the service's wipe step) with a
    /// confirmation from `reinit_prepare`; answered once it settled.
    async fn reinit(token: String) -> ControlAnswer;

    // -- Replacement --
    /// Replace this daemon's binary by `request.binary`, in `request.mode`.
    /// Answered as soon as the transaction started (or was refused), with
    /// its report; follow it with `replace_status`.
    async fn replace(request: ReplaceRequest) -> ReplaceAnswer;
    /// Long-poll: the replacement status once the report's `seq` is greater
    /// than `after_seq`, or as it is after `timeout_ms` (capped at
    /// [`MAX_WATCH_TIMEOUT_MS`]). Also the live proof a replacement asks a
    /// candidate for: its pid, identity and version.
    async fn replace_status(after_seq: u64, timeout_ms: u64) -> ReplaceAnswer;

    // -- Reload --
    /// Re-read the config now, as SIGHUP does (a `config_changed`: a held
    /// failure is retried, a running runtime applies the change). Under
    /// systemd the daemon says `RELOADING=1` before and `READY=1` after.
    async fn reload() -> ControlAnswer;
}

/// The role a request needs, and its method's wire name: the reads
/// (`snapshot`, `watch`, `metrics`, `journal`, `config_show`,
/// `replace_status`) need [`Role::Read`], everything else (every command,
/// and `reinit_prepare`, the first half of one) [`Role::Operate`]. The
/// match is exhaustive, so a new method cannot be added without being
/// classified here. Checked by `control::tests::reads_and_commands_are_classified`.
#[must_use]
pub const fn required_role(request: &ControlRequest) -> (Role, &'static str) {
    match request {
        ControlRequest::Snapshot {} => (Role::Read, "snapshot"),
        ControlRequest::Watch { .. } => (Role::Read, "watch"),
        ControlRequest::Metrics {} => (Role::Read, "metrics"),
        ControlRequest::Journal { .. } => (Role::Read, "journal"),
        ControlRequest::ConfigShow { .. } => (Role::Read, "config_show"),
        ControlRequest::ReplaceStatus { .. } => (Role::Read, "replace_status"),
        ControlRequest::Start {} => (Role::Operate, "start"),
        ControlRequest::Stop { .. } => (Role::Operate, "stop"),
        ControlRequest::Restart { .. } => (Role::Operate, "restart"),
        ControlRequest::Retry {} => (Role::Operate, "retry"),
        ControlRequest::Exit { .. } => (Role::Operate, "exit"),
        ControlRequest::ConfigSet { .. } => (Role::Operate, "config_set"),
        ControlRequest::ConfigUnset { .. } => (Role::Operate, "config_unset"),
        ControlRequest::ReinitPrepare {} => (Role::Operate, "reinit_prepare"),
        ControlRequest::Reinit { .. } => (Role::Operate, "reinit"),
        ControlRequest::Replace { .. } => (Role::Operate, "replace"),
        ControlRequest::Reload {} => (Role::Operate, "reload"),
    }
}

/// The answer to `request` when its peer's role does not permit it: the
/// method's own response carrying [`CommandError::Forbidden`]; `None` when
/// `role` permits it.
#[must_use]
pub fn forbidden(request: &ControlRequest, role: Role) -> Option<ControlResponse> {
    let (needed, method) = required_role(request);
    if role.permits(needed) {
        return None;
    }
    let error = CommandError::Forbidden {
        method: method.to_owned(),
        role,
        needed,
    };
    Some(match request {
        ControlRequest::Snapshot {} => ControlResponse::Snapshot(Err(error)),
        ControlRequest::Watch { .. } => ControlResponse::Watch(Err(error)),
        ControlRequest::Metrics {} => ControlResponse::Metrics(Err(error)),
        ControlRequest::Journal { .. } => ControlResponse::Journal(Err(error)),
        ControlRequest::ConfigShow { .. } => ControlResponse::ConfigShow(Err(error)),
        ControlRequest::ReplaceStatus { .. } => ControlResponse::ReplaceStatus(Err(error)),
        ControlRequest::Start {} => ControlResponse::Start(Err(error)),
        ControlRequest::Stop { .. } => ControlResponse::Stop(Err(error)),
        ControlRequest::Restart { .. } => ControlResponse::Restart(Err(error)),
        ControlRequest::Retry {} => ControlResponse::Retry(Err(error)),
        ControlRequest::Exit { .. } => ControlResponse::Exit(Err(error)),
        ControlRequest::ConfigSet { .. } => ControlResponse::ConfigSet(Err(error)),
        ControlRequest::ConfigUnset { .. } => ControlResponse::ConfigUnset(Err(error)),
        ControlRequest::ReinitPrepare {} => ControlResponse::ReinitPrepare(Err(error)),
        ControlRequest::Reinit { .. } => ControlResponse::Reinit(Err(error)),
        ControlRequest::Replace { .. } => ControlResponse::Replace(Err(error)),
        ControlRequest::Reload {} => ControlResponse::Reload(Err(error)),
    })
}

/// A `replace` request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplaceRequest {
    /// The candidate binary, as a path on the daemon's machine.
    pub binary: String,
    /// Overlap or exclusive.
    pub mode: Mode,
    /// The setup budget in milliseconds (must not be 0).
    pub setup_budget_ms: u64,
    /// The drain budget in milliseconds; `None`: unbounded.
    pub drain_budget_ms: Option<u64>,
}

/// What `replace` and `replace_status` answer: who answered, and the latest
/// replacement report.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplaceStatus {
    /// The daemon's pid.
    pub pid: u32,
    /// The daemon's identity (from its control directory).
    pub identity: Option<String>,
    /// The application's version, when it reports one.
    pub version: Option<String>,
    /// The latest replacement's report; `None` before the first.
    pub report: Option<Report>,
}

/// The answer of the replacement methods.
pub type ReplaceAnswer = Result<ReplaceStatus, CommandError>;

#[cfg(test)]
mod tests {
    use std::borrow::Cow;

    use super::*;
    use crate::Timestamp;
    use crate::lifecycle::{LifecycleState, PendingApply};
    use crate::lifecycle::{Refused, RefusedBecause};
    use crate::replacement::ReplaceRefusal;
    use crate::snapshot::PreviousRun;
    use bincode::Options;

    fn snapshot() -> Snapshot {
        Snapshot {
            schema: crate::snapshot::SCHEMA,
            version: 3,
            now: None,
            lifecycle: LifecycleState::Resolving {
                since: Timestamp(9),
            },
            attempts: Vec::new(),
            previous_run: PreviousRun::Crashed {
                pid: Some(7),
                attempt: None,
            },
            identity: Some("id".into()),
            epoch: 1,
            streak: 2,
            hold: true,
            pending: PendingApply::InSync,
            pid: 42,
            error: None,
            budget: None,
        }
    }

    fn round_trip<T: Serialize + for<'de> Deserialize<'de>>(value: &T) -> T {
        let options = bincode::DefaultOptions::new().with_limit(MAX_FRAME_LEN as u64);
        let bytes = options.serialize(value).expect("encodes");
        options.deserialize(&bytes).expect("decodes")
    }

    #[test]
    fn changes_carry_only_what_changed() {
        let before = snapshot();
        let mut after = before.clone();
        after.version = 4;
        after.streak = 3;
        let changes = WireChanges::between(Some(&before), &after);
        assert_eq!(changes.base, Some(3));
        let fields: serde_json::Map<String, serde_json::Value> =
            serde_json::from_str(&changes.json).expect("object");
        assert_eq!(
            fields.keys().map(String::as_str).collect::<Vec<_>>(),
            ["streak", "version"]
        );
        assert_eq!(round_trip(&changes).apply(&before).expect("applies"), after);
        assert!(matches!(
            changes.apply(&after),
            Err(ChangesError::OtherBase { base: 3, have: 4 })
        ));
        let whole = WireChanges::between(None, &after);
        assert_eq!(whole.base, None);
        assert_eq!(whole.apply(&before).expect("whole"), after);
    }

    #[test]
    fn answers_round_trip_through_bincode() {
        let ok: ControlAnswer = Ok(WireSnapshot::from_snapshot(&snapshot()));
        let back = round_trip(&ok);
        assert_eq!(back, ok);
        assert_eq!(back.expect("ok").into_snapshot().expect("json"), snapshot());
        for refusal in [
            CommandError::Refused(Refused {
                state: "running".into(),
                event: "start".into(),
                reason: RefusedBecause::RuntimeNotStopped,
                detail: None,
            }),
            CommandError::Refused(Refused {
                state: "running".into(),
                event: "restart".into(),
                reason: RefusedBecause::ConfigInvalid,
                detail: Some("/etc/kvd.toml: expected a value".into()),
            }),
            CommandError::Durability("fsync failed".into()),
            CommandError::Unavailable,
        ] {
            let answer: ControlAnswer = Err(refusal);
            assert_eq!(round_trip(&answer), answer);
        }
        let request = ControlRequest::Exit {
            intent: ExitIntent::Relaunch,
        };
        let back = round_trip(&request);
        assert!(matches!(
            back,
            ControlRequest::Exit {
                intent: ExitIntent::Relaunch
            }
        ));
    }

    #[test]
    fn refusal_keeps_the_typed_reason() {
        let refused = Refused {
            state: Cow::Borrowed("running"),
            event: Cow::Borrowed("start"),
            reason: RefusedBecause::RuntimeNotStopped,
            detail: None,
        };
        let wire = CommandError::from(refused.clone());
        assert_eq!(wire.refused(), Some(&refused));
        assert_eq!(wire.to_string(), refused.to_string());
        // A config_invalid keeps its error, on the wire and in the text.
        let invalid = Refused {
            state: Cow::Borrowed("running"),
            event: Cow::Borrowed("restart"),
            reason: RefusedBecause::ConfigInvalid,
            detail: Some("/etc/kvd.toml: expected a value".into()),
        };
        let wire = round_trip(&CommandError::from(invalid.clone()));
        assert_eq!(wire.refused(), Some(&invalid));
        assert_eq!(
            wire.to_string(),
            "restart refused while running: config_invalid: /etc/kvd.toml: expected a value"
        );
        assert_eq!(CommandError::Unavailable.refused(), None);
    }

    #[test]
    fn reads_and_commands_are_classified() {
        let read = ControlRequest::Journal { limit: 3 };
        assert_eq!(required_role(&read), (Role::Read, "journal"));
        assert!(forbidden(&read, Role::Read).is_none());
        let stop = ControlRequest::Stop {
            hold: crate::command::Hold::None,
        };
        assert!(forbidden(&stop, Role::Operate).is_none());
        let Some(ControlResponse::Stop(Err(error))) = forbidden(&stop, Role::Read) else {
            panic!("a read peer's stop is forbidden, in stop's own response");
        };
        assert_eq!(error.reason(), "forbidden");
        assert_eq!(
            error.to_string(),
            "forbidden: `stop` needs the operate role; this peer's role is read"
        );
        assert_eq!(round_trip(&error), error);
        assert!(Role::Operate.permits(Role::Read) && !Role::Read.permits(Role::Operate));
        assert_eq!(Role::parse("read"), Some(Role::Read));
        assert_eq!(Role::parse("admin"), None);
    }

    #[test]
    fn watch_timeout_is_clamped() {
        assert_eq!(clamp_watch_timeout(0), 0);
        assert_eq!(clamp_watch_timeout(1_500), 1_500);
        assert_eq!(clamp_watch_timeout(u64::MAX), MAX_WATCH_TIMEOUT_MS);
    }

    #[test]
    fn replace_answers_round_trip_through_bincode() {
        use crate::replacement::{Ended, Outcome, Progress, ReasonKind, Step, StepEvent};
        let report = Report {
            seq: 4,
            serial: 1,
            mode: Mode::Overlap,
            target: "/opt/kvd-2".into(),
            setup_ms: 30_000,
            drain_ms: None,
            events: vec![
                StepEvent {
                    step: Step::Recheck,
                    answer: None,
                    at: Timestamp(1),
                },
                StepEvent {
                    step: Step::Recheck,
                    answer: Some(Progress::Done),
                    at: Timestamp(2),
                },
            ],
            ended: Some(Ended::Failed {
                step: Step::Verify,
                committed: false,
                reason: ReasonKind::Deadline,
                message: "deadline expired".into(),
            }),
        };
        let ok: ReplaceAnswer = Ok(ReplaceStatus {
            pid: 7,
            identity: Some("id".into()),
            version: Some("2.0.0".into()),
            report: Some(report.clone()),
        });
        assert_eq!(round_trip(&ok), ok);
        let done = Report {
            ended: Some(Ended::Outcome(Outcome::RetirementPending)),
            ..report
        };
        assert_eq!(round_trip(&done), done);
        for refusal in [
            ReplaceRefusal::InProgress,
            ReplaceRefusal::Locked("/d/.steadfast/upgrade.lock".into()),
            ReplaceRefusal::Invalid("no binary given".into()),
            ReplaceRefusal::Io("eio".into()),
            ReplaceRefusal::Unavailable,
        ] {
            let answer: ReplaceAnswer = Err(CommandError::Replace(refusal.clone()));
            assert_eq!(round_trip(&answer), answer);
            // The wire name is serde's tag: the string, or the object's key.
            let json = serde_json::to_value(&refusal).unwrap();
            let tag = json
                .as_str()
                .map(str::to_owned)
                .or_else(|| json.as_object().and_then(|o| o.keys().next().cloned()));
            assert_eq!(tag.as_deref(), Some(refusal.name()));
        }
        let request = ReplaceRequest {
            binary: "/opt/kvd-2".into(),
            mode: Mode::Exclusive,
            setup_budget_ms: 5_000,
            drain_budget_ms: Some(60_000),
        };
        assert_eq!(round_trip(&request), request);
    }
}
