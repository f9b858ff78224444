//! The control plane's service (`spec/control.md` is the authority): one
//! type per method ([`Command`]: its wire name, the role it needs, its
//! arguments and its answer; each in its own file of this folder, all in
//! [`cmd`]), the registry that makes the tarpc wire enums of them
//! ([`ControlRequest`], [`ControlResponse`]) and the values that cross the
//! wire.
//!
//! This module owns the *shapes*, not the transport: no socket, no clock.
//! The facade (`steadfast::control`) carries each command out (an
//! [`Execute`] impl, run by [`dispatch`]) over a Unix socket, TCP or TLS,
//! and calls any of them from its client.
//!
//! Invariants:
//! - The wire is the one the tarpc service macro gave before the commands
//!   became types: a command's variant sits at the same position, with the
//!   same fields in the same order, so old and new peers understand each
//!   other. Checked by `control::tests::the_wire_keeps_its_tags_and_fields`.
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

use crate::command::{CommandError, Role};
use crate::replacement::Report;
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

/// One method of the control plane: its wire name, the role a peer needs
/// to call it, its arguments (the implementing type's fields) and its
/// answer. Each lives in its own file of this folder; the registry
/// (`commands!` below) gives it its place in [`ControlRequest`] and
/// [`ControlResponse`] (the tarpc service's wire enums), and
/// [`required_role`], [`forbidden`] and [`dispatch`] follow from it. The
/// half that runs it is the facade's (`steadfast::control`, an
/// [`Execute`] impl); the client calls any of them the same way.
pub trait Command: Serialize + for<'de> Deserialize<'de> + Clone + std::fmt::Debug + Send {
    /// The method's wire name (`spec/control.md`), e.g. `restart`.
    const NAME: &'static str;
    /// The role a peer needs to call it.
    const ROLE: Role;
    /// It changes nothing: a client sends it once more on a new connection
    /// when the connection broke under it (a command never is: it may have
    /// been applied).
    const REPLAYABLE: bool = false;
    /// It waits for a change (a long-poll): a full server may evict its
    /// connection to make room.
    const LONG_POLL: bool = false;
    /// What it answers when carried out.
    type Reply: Serialize + for<'de> Deserialize<'de> + std::fmt::Debug + Send;
}

/// What a [`Command`] answers: its reply, or why not.
pub type Answer<C> = Result<<C as Command>::Reply, CommandError>;

/// What every method answered by a snapshot answers.
pub type ControlAnswer = Result<WireSnapshot, CommandError>;

/// A [`Command`] as it travels: the [`ControlRequest`] it becomes, and
/// where its answer is in a [`ControlResponse`]. Implemented by the
/// registry for every registered command.
pub trait Registered: Command {
    /// The request that carries it.
    fn into_request(self) -> ControlRequest;
    /// Its answer, when `response` is its method's.
    ///
    /// # Errors
    /// The response back, when it is another method's (a peer that
    /// answered out of turn).
    fn answer(response: ControlResponse) -> Result<Answer<Self>, Box<ControlResponse>>;
}

/// Carries out command `C`: the facade's half of a command.
pub trait Execute<C: Command> {
    /// Run `command`; its answer.
    fn execute(self, command: C) -> impl Future<Output = Answer<C>> + Send;
}

/// A [`Command`] answered from the daemon's latest snapshot alone (the
/// registry's `reads` form): its answer is decided here, in its own file,
/// so the facade carries it out with no code of its own (every
/// [`Snapshots`] executes it), `SupervisorHandle::read` answers it in
/// process, and with the `cli` feature it is a `steadfastctl` subcommand
/// of its [`Command::NAME`] and its fields.
pub trait Reads: Command {
    /// What it answers, given the daemon's latest snapshot.
    fn read(&self, snapshot: &Snapshot) -> Self::Reply;
}

/// What a [`Reads`] command is answered from: the daemon's latest snapshot.
pub trait Snapshots {
    /// The latest snapshot.
    fn latest(&self) -> Snapshot;
}

/// How a registry line's command is carried out: by the executor's own
/// [`Execute`] impl (no marker), or, marked `reads`, by [`Reads::read`] on
/// any [`Snapshots`].
macro_rules! carried_out {
    (; $ty:ty) => {};
    (reads; $ty:ty) => {
        impl<E: Snapshots + Send> Execute<$ty> for E {
            async fn execute(self, command: $ty) -> Answer<$ty> {
                Ok(Reads::read(&command, &self.latest()))
            }
        }
    };
}

/// The [`ControlRequest`] pattern of one registered command: `{}` (no
/// arguments) or `(Type)`.
macro_rules! request_pattern {
    ($variant:ident {} $binding:ident) => {
        ControlRequest::$variant {}
    };
    ($variant:ident ($ty:ty) $binding:ident) => {
        ControlRequest::$variant($binding)
    };
}

/// The command a [`request_pattern!`] matched.
macro_rules! command_of {
    ({} $ty:ty, $binding:ident) => {
        <$ty as Default>::default()
    };
    (($_ty:ty) $ty:ty, $binding:ident) => {
        $binding
    };
}

/// The [`ControlRequest`] of a command value.
macro_rules! request_of {
    ($variant:ident {} $value:ident) => {{
        let _ = $value;
        ControlRequest::$variant {}
    }};
    ($variant:ident ($_ty:ty) $value:ident) => {
        ControlRequest::$variant($value)
    };
}

/// The registry: one line a command, `file => Variant {}` (no arguments)
/// or `file => Variant(cmd::Variant)`: its file (`file.rs` in this folder,
/// which defines `Variant`), its variant in the wire enums. Its order is
/// the wire's (bincode tags a variant by its position): a new command goes
/// at the end.
macro_rules! commands {
    ($( $file:ident => $variant:ident $body:tt $($how:ident)?, )*) => {
        $( mod $file; )*

        /// The commands, one type each (each in its own file of this
        /// folder).
        pub mod cmd {
            $( pub use super::$file::$variant; )*
        }

        $( carried_out!($($how)?; cmd::$variant); )*

        commands!(@reads $( $variant $($how)?, )*);
        commands!(@wire $( $variant $body => cmd::$variant, )*);
    };
    // The `reads` commands' subcommands of `steadfastctl`.
    (@reads $( $variant:ident $($how:ident)?, )*) => {
        commands!(@reads_cli [] $( $variant $($how)?, )*);
    };
    (@reads_cli [$($done:ident)*] $variant:ident reads, $($rest:tt)*) => {
        commands!(@reads_cli [$($done)* $variant] $($rest)*);
    };
    (@reads_cli [$($done:ident)*] $variant:ident, $($rest:tt)*) => {
        commands!(@reads_cli [$($done)*] $($rest)*);
    };
    (@reads_cli [$($done:ident)*]) => {
        /// The commands answered from the snapshot ([`Reads`]), as
        /// `steadfastctl` subcommands: each named by its
        /// [`Command::NAME`], with its type's doc comment as its help and
        /// its fields as arguments.
        #[cfg(feature = "cli")]
        #[derive(Debug, Clone, clap::Subcommand)]
        // A variant's doc is its type's: one of its own would replace the
        // type's as the subcommand's help.
        #[allow(missing_docs)]
        pub enum ReadCmd {
            $(
                #[command(name = <cmd::$done as Command>::NAME)]
                $done(cmd::$done),
            )*
        }

        #[cfg(feature = "cli")]
        impl ReadCmd {
            /// Hand the command, typed, to `visit`.
            pub fn visit<V: ReadVisitor>(self, visit: V) -> V::Output {
                match self {
                    $( Self::$done(command) => visit.visit(command), )*
                }
            }

            /// Their wire names, in the registry's order.
            pub const NAMES: &'static [&'static str] = &[$( <cmd::$done as Command>::NAME, )*];

            /// Its wire name ([`Command::NAME`]), also its subcommand's.
            #[must_use]
            pub const fn name(&self) -> &'static str {
                match self {
                    $( Self::$done(_) => <cmd::$done as Command>::NAME, )*
                }
            }
        }
    };
    (@wire $( $variant:ident $body:tt => $ty:ty, )*) => {
        /// A request, as it crosses the wire: one variant per command, in
        /// the registry's order.
        #[derive(Debug, Clone, Serialize, Deserialize)]
        pub enum ControlRequest {
            $(
                #[doc = concat!("`", stringify!($ty), "`")]
                $variant $body,
            )*
        }

        /// An answer, as it crosses the wire: the variant of the request's
        /// command.
        #[derive(Debug, Serialize, Deserialize)]
        pub enum ControlResponse {
            $(
                #[doc = concat!("`", stringify!($ty), "`'s answer.")]
                $variant(Answer<$ty>),
            )*
        }

        impl ControlResponse {
            /// The method it answers ([`Command::NAME`]).
            #[must_use]
            pub const fn method(&self) -> &'static str {
                match self {
                    $( ControlResponse::$variant(_) => <$ty as Command>::NAME, )*
                }
            }
        }

        impl tarpc::RequestName for ControlRequest {
            fn name(&self) -> &'static str {
                self.method()
            }
        }

        impl ControlRequest {
            /// The method's wire name ([`Command::NAME`]).
            #[must_use]
            pub const fn method(&self) -> &'static str {
                required_role(self).1
            }

            /// Whether it is a long-poll ([`Command::LONG_POLL`]).
            #[must_use]
            pub const fn is_long_poll(&self) -> bool {
                match self {
                    $( request_pattern!($variant $body _c) => <$ty as Command>::LONG_POLL, )*
                }
            }
        }

        $(
            impl Registered for $ty {
                fn into_request(self) -> ControlRequest {
                    let value = self;
                    request_of!($variant $body value)
                }

                fn answer(response: ControlResponse) -> Result<Answer<Self>, Box<ControlResponse>> {
                    match response {
                        ControlResponse::$variant(answer) => Ok(answer),
                        other => Err(Box::new(other)),
                    }
                }
            }
        )*

        /// The role a request needs, and its method's wire name: its
        /// command's [`Command::ROLE`] and [`Command::NAME`]. Checked by
        /// `control::tests::reads_and_commands_are_classified`.
        #[must_use]
        pub const fn required_role(request: &ControlRequest) -> (Role, &'static str) {
            match request {
                $( request_pattern!($variant $body _c) => (<$ty as Command>::ROLE, <$ty as Command>::NAME), )*
            }
        }

        /// The answer to `request` when its peer's role does not permit it:
        /// the method's own response carrying [`CommandError::Forbidden`];
        /// `None` when `role` permits it.
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
                $( request_pattern!($variant $body _c) => ControlResponse::$variant(Err(error)), )*
            })
        }

        /// What carries out every registered command.
        pub trait Executor: Send + Snapshots $( + Execute<$ty> )* {}

        impl<E: Send + Snapshots $( + Execute<$ty> )*> Executor for E {}

        /// Run `request`'s command on `executor`, answered in its method's
        /// variant.
        pub async fn dispatch<E: Executor>(executor: E, request: ControlRequest) -> ControlResponse {
            match request {
                $(
                    request_pattern!($variant $body command) => ControlResponse::$variant(
                        Execute::<$ty>::execute(executor, command_of!($body $ty, command)).await,
                    ),
                )*
            }
        }
    };
}

commands! {
    snapshot => Snapshot {},
    watch => Watch(cmd::Watch),
    start => Start {},
    stop => Stop(cmd::Stop),
    restart => Restart(cmd::Restart),
    retry => Retry {},
    exit => Exit(cmd::Exit),
    metrics => Metrics {},
    journal => Journal(cmd::Journal),
    config_set => ConfigSet(cmd::ConfigSet),
    config_unset => ConfigUnset(cmd::ConfigUnset),
    config_show => ConfigShow(cmd::ConfigShow),
    reinit_prepare => ReinitPrepare {},
    reinit => Reinit(cmd::Reinit),
    replace => Replace(cmd::Replace),
    replace_status => ReplaceStatus(cmd::ReplaceStatus),
    reload => Reload {},
    child => Child(cmd::Child),
    ping => Ping {} reads,
}

/// What is done with a [`ReadCmd`]'s command, whichever it is
/// ([`ReadCmd::visit`]): e.g. call it and print its answer.
#[cfg(feature = "cli")]
pub trait ReadVisitor {
    /// What the visit gives.
    type Output;
    /// Do it with `command`.
    fn visit<C>(self, command: C) -> Self::Output
    where
        C: Reads + Registered + Sync + 'static,
        C::Reply: std::fmt::Display;
}

pub use child::WireChild;

pub use ping::Pong;

pub use replace::ReplaceRequest;

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
    use crate::lifecycle::{ExitIntent, LifecycleState, PendingApply};
    use crate::lifecycle::{Refused, RefusedBecause};
    use crate::replacement::Mode;
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
            errors: Vec::new(),
            budget: None,
            children: Vec::new(),
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
        let request = ControlRequest::Exit(cmd::Exit {
            intent: ExitIntent::Relaunch,
        });
        let back = round_trip(&request);
        assert!(matches!(
            back,
            ControlRequest::Exit(cmd::Exit {
                intent: ExitIntent::Relaunch
            })
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
        let read = ControlRequest::Journal(cmd::Journal { limit: 3 });
        assert_eq!(required_role(&read), (Role::Read, "journal"));
        assert!(forbidden(&read, Role::Read).is_none());
        let stop = ControlRequest::Stop(cmd::Stop {
            hold: crate::command::Hold::None,
        });
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
        // One child's restart is a command: the read role may only list.
        let child = ControlRequest::Child(cmd::Child {
            name: "ticker".into(),
            op: crate::children::ChildOp::Restart,
        });
        assert_eq!(required_role(&child), (Role::Operate, "child"));
        let Some(ControlResponse::Child(Err(error))) = forbidden(&child, Role::Read) else {
            panic!("a read peer's child restart is forbidden");
        };
        assert_eq!(
            error.to_string(),
            "forbidden: `child` needs the operate role; this peer's role is read"
        );
        // A command answered from the snapshot is a read.
        assert_eq!(
            required_role(&cmd::Ping.into_request()),
            (Role::Read, "ping")
        );
        assert!(forbidden(&cmd::Ping.into_request(), Role::Read).is_none());
        assert!(Role::Operate.permits(Role::Read) && !Role::Read.permits(Role::Operate));
        assert_eq!(Role::parse("read"), Some(Role::Read));
        assert_eq!(Role::parse("admin"), None);
    }

    /// Each request encodes as the service macro encoded it: the method's
    /// position as its tag (a varint), then its arguments in order.
    #[test]
    fn the_wire_keeps_its_tags_and_fields() {
        let options = bincode::DefaultOptions::new().with_limit(MAX_FRAME_LEN as u64);
        let bytes = |request: ControlRequest| options.serialize(&request).expect("encodes");
        let cases: [(ControlRequest, &[u8]); 10] = [
            (ControlRequest::Snapshot {}, &[0]),
            (
                cmd::Watch {
                    after_version: 5,
                    timeout_ms: 300,
                }
                .into_request(),
                &[1, 5, 251, 0x2c, 0x01],
            ),
            (cmd::Start.into_request(), &[2]),
            (cmd::Restart { force: true }.into_request(), &[4, 1]),
            (
                cmd::ConfigSet {
                    leaf: "a".into(),
                    value: "1".into(),
                }
                .into_request(),
                &[9, 1, b'a', 1, b'1'],
            ),
            (cmd::ConfigShow { leaf: None }.into_request(), &[11, 0]),
            (
                cmd::Replace {
                    binary: "b".into(),
                    mode: Mode::Exclusive,
                    setup_budget_ms: 7,
                    drain_budget_ms: None,
                }
                .into_request(),
                &[14, 1, b'b', 1, 7, 0],
            ),
            (cmd::Reload.into_request(), &[16]),
            (
                cmd::Child {
                    name: "w".into(),
                    op: crate::children::ChildOp::Stop,
                }
                .into_request(),
                &[17, 1, b'w', 1],
            ),
            (cmd::Ping.into_request(), &[18]),
        ];
        for (request, wire) in cases {
            let name = request.method();
            assert_eq!(bytes(request), wire, "{name}");
        }
        // Each command's answer is found in its own variant only.
        let answer = ControlResponse::Restart(Err(CommandError::Unavailable));
        assert!(cmd::Start::answer(answer).is_err());
        let answer = ControlResponse::Restart(Err(CommandError::Unavailable));
        assert_eq!(
            cmd::Restart::answer(answer).expect("its own"),
            Err(CommandError::Unavailable)
        );
        assert_eq!(ControlRequest::Snapshot {}.method(), "snapshot");
        assert_eq!(
            ControlResponse::Restart(Err(CommandError::Unavailable)).method(),
            "restart"
        );
        assert!(
            cmd::Watch {
                after_version: 0,
                timeout_ms: 0
            }
            .into_request()
            .is_long_poll()
        );
        assert!(!ControlRequest::Snapshot {}.is_long_poll());
    }

    /// `ping` is answered from the snapshot, and `dispatch` carries it out
    /// on anything that has one, with no code of the executor's own.
    #[test]
    fn ping_reads_the_pid_and_state_from_the_snapshot() {
        struct Latest(Snapshot);
        impl Snapshots for Latest {
            fn latest(&self) -> Snapshot {
                self.0.clone()
            }
        }
        let pong = cmd::Ping.read(&snapshot());
        assert_eq!(
            pong,
            Pong {
                pid: 42,
                state: "resolving".into()
            }
        );
        assert_eq!(pong.to_string(), "pid 42: resolving");
        let answered = now_or_never(Execute::<cmd::Ping>::execute(Latest(snapshot()), cmd::Ping));
        assert_eq!(answered, Ok(pong));
    }

    /// Drive a future that never waits (an `execute` of a `reads` command).
    fn now_or_never<F: Future>(future: F) -> F::Output {
        let mut future = std::pin::pin!(future);
        let mut context = std::task::Context::from_waker(std::task::Waker::noop());
        match future.as_mut().poll(&mut context) {
            std::task::Poll::Ready(output) => output,
            std::task::Poll::Pending => panic!("a read never waits"),
        }
    }

    #[test]
    fn watch_timeout_is_clamped() {
        assert_eq!(clamp_watch_timeout(0), 0);
        assert_eq!(clamp_watch_timeout(1_500), 1_500);
        assert_eq!(clamp_watch_timeout(u64::MAX), MAX_WATCH_TIMEOUT_MS);
    }

    #[test]
    fn replace_answers_round_trip_through_bincode() {
        use crate::replacement::{Outcome, Progress, ReasonKind, Step, StepEvent, TransactionEnd};
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
            ended: Some(TransactionEnd::Failed {
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
            ended: Some(TransactionEnd::Outcome(Outcome::RetirementPending)),
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
