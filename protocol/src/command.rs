//! Why an operator's command was not carried out: the one refusal type that
//! travels unchanged from the lifecycle through the supervisor's handle, the
//! control server, the client and `steadfastctl`. The client adds only the
//! transport's own failures beside it (`ClientError::Command` wraps it).

use serde::{Deserialize, Serialize};

use crate::lifecycle::Refused;
use crate::replacement::ReplaceRefusal;

/// Whether a stop survives a relaunch of the process.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Hold {
    /// An ordinary stop: the next process boots.
    None,
    /// The next process starts `stopped{held_at_startup}` until started.
    AcrossRelaunch,
}

impl From<bool> for Hold {
    /// `true` (a `--hold` flag) is [`Hold::AcrossRelaunch`].
    fn from(across_relaunch: bool) -> Self {
        if across_relaunch {
            Self::AcrossRelaunch
        } else {
            Self::None
        }
    }
}

/// What a control-plane peer may do (`spec/control.md`, "Roles"). The Unix
/// socket and the plain TCP token are [`Role::Operate`]; over TLS each
/// client certificate or token is given one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// The reads only: `snapshot`, `watch`, `metrics`, `journal`,
    /// `config_show`, `replace_status` (so `status`, `probe`, `watch`,
    /// `metrics`, `journal`, `config show`).
    Read,
    /// Every method.
    Operate,
}

impl Role {
    /// The role's wire spelling: `read`, `operate`.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Read => "read",
            Self::Operate => "operate",
        }
    }

    /// Whether a peer of this role may call a method that needs `needed`.
    #[must_use]
    pub fn permits(self, needed: Self) -> bool {
        self >= needed
    }

    /// Parse a wire spelling (`read`, `operate`).
    #[must_use]
    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "read" => Some(Self::Read),
            "operate" => Some(Self::Operate),
            _ => None,
        }
    }
}

impl std::fmt::Display for Role {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why a command was not carried out (or not acknowledged).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize, thiserror::Error)]
pub enum CommandError {
    /// The lifecycle refused it; the reason is the machine's, unchanged.
    #[error("{0}")]
    Refused(Refused),
    /// It was accepted but could not be made durable (a journal or marker
    /// write failed); it was not acknowledged.
    #[error("not durable: {0}")]
    Durability(String),
    /// The supervisor is not running (it has exited, or is exiting).
    #[error("the supervisor is not running")]
    Unavailable,
    /// The command's arguments are not acceptable (a malformed leaf, a
    /// config change the service's config type refuses); nothing changed.
    #[error("{}", said_invalid(.0))]
    Invalid(String),
    /// The command was carried out and failed (a wipe step's error, a
    /// journal that cannot be read).
    #[error("failed: {0}")]
    Failed(String),
    /// A replacement was not started.
    #[error("replace refused: {0}")]
    Replace(ReplaceRefusal),
    /// The peer's role does not allow the method: a `read` peer asked for
    /// a command. Nothing was run. (Added at the end: older variants keep
    /// their bincode tags.)
    #[error("forbidden: `{method}` needs the {needed} role; this peer's role is {role}")]
    Forbidden {
        /// The method asked for (its wire name, e.g. `stop`).
        method: String,
        /// The peer's role.
        role: Role,
        /// The role the method needs.
        needed: Role,
    },
    /// An operator's command about a supervised child was refused: no
    /// child of that name runs, or it is in the wrong state for it
    /// (`start` of a running child); nothing changed.
    #[error("{0}")]
    Child(String),
}

impl CommandError {
    /// The lifecycle's refusal, when this is one.
    #[must_use]
    pub const fn refused(&self) -> Option<&Refused> {
        match self {
            Self::Refused(refused) => Some(refused),
            _ => None,
        }
    }
}

impl CommandError {
    /// A stable one-word reason, for logs and metric labels: the
    /// lifecycle's `RefusedBecause` spelling (`runtime_not_stopped`), the
    /// replacement refusal's name (`in_progress`), else the variant
    /// (`durability`, `unavailable`, `invalid`, `failed`, `forbidden`).
    #[must_use]
    pub const fn reason(&self) -> &'static str {
        match self {
            Self::Refused(refused) => refused.reason.as_str(),
            Self::Durability(_) => "durability",
            Self::Unavailable => "unavailable",
            Self::Invalid(_) => "invalid",
            Self::Failed(_) => "failed",
            Self::Child(_) => "child_refused",
            Self::Replace(refusal) => refusal.name(),
            Self::Forbidden { .. } => "forbidden",
        }
    }
}

impl From<Refused> for CommandError {
    fn from(refused: Refused) -> Self {
        Self::Refused(refused)
    }
}

impl From<ReplaceRefusal> for CommandError {
    fn from(refusal: ReplaceRefusal) -> Self {
        Self::Replace(refusal)
    }
}

/// An [`CommandError::Invalid`]'s reason, said as invalid once: a reason
/// that already says so (`invalid config: …`) as it is, any other after
/// `invalid: `.
fn said_invalid(reason: &str) -> std::borrow::Cow<'_, str> {
    if reason.starts_with("invalid") {
        reason.into()
    } else {
        format!("invalid: {reason}").into()
    }
}

#[cfg(test)]
mod said_tests {
    use super::CommandError;

    #[test]
    fn an_invalid_reason_is_said_invalid_once() {
        let config = CommandError::Invalid("invalid config: port: invalid type".into());
        assert_eq!(config.to_string(), "invalid config: port: invalid type");
        let leaf = CommandError::Invalid("the leaf is empty".into());
        assert_eq!(leaf.to_string(), "invalid: the leaf is empty");
    }
}
