//! The control plane's client: [`ControlClient`] calls a daemon's
//! [`Control`](steadfast_protocol::control::Control) service over its Unix
//! socket and hands back typed [`Snapshot`]s.
//!
//! Invariant: a refusal comes back as [`ClientError::Refused`] carrying the
//! lifecycle's [`Refused`] unchanged, and *not reaching* a daemon is always
//! [`ClientError::Connect`] or [`ClientError::Rpc`] — never a refusal.
//! Checked by `tests/control.rs::a_refusal_arrives_typed` and
//! `tests/control.rs::no_daemon_is_a_connect_error`.

use std::io;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use steadfast_protocol::control::{
    ControlAnswer, ControlClient as RawClient, ControlRefusal, MAX_WATCH_TIMEOUT_MS, ReinitPrepared,
};
use steadfast_protocol::history::JournalAttempt;
use steadfast_protocol::lifecycle::{ExitIntent, Refused};
use steadfast_protocol::snapshot::{ConfigView, Snapshot};
use tarpc::client::{self, RpcError};
use tarpc::context;
use tokio::net::UnixStream;

use super::codec::{self, Bincode1};
use steadfast_actors::lifecycle::Hold;

/// How long a command may take by default (a stop waits for the drain).
pub const DEFAULT_CALL_TIMEOUT: Duration = Duration::from_secs(120);

/// Extra time a `watch` call is given beyond its own wait.
const WATCH_MARGIN: Duration = Duration::from_secs(10);

/// Why a control call did not give a snapshot.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The daemon's socket could not be reached (no daemon, wrong path, no
    /// permission).
    #[error("cannot connect to {path}: {source}")]
    Connect {
        /// The socket.
        path: PathBuf,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// The lifecycle refused the command; the reason is the machine's.
    #[error("{0}")]
    Refused(Refused),
    /// The command was accepted but not made durable.
    #[error("not durable: {0}")]
    Durability(String),
    /// The supervisor is not running.
    #[error("the supervisor is not running")]
    Unavailable,
    /// The arguments were not acceptable (a malformed leaf, no override
    /// tier); nothing changed.
    #[error("invalid: {0}")]
    Invalid(String),
    /// The command was carried out and failed (a wipe step's error).
    #[error("failed: {0}")]
    Failed(String),
    /// The call failed on the way (the connection closed, the deadline
    /// passed, the server shed it).
    #[error("the call failed: {0}")]
    Rpc(#[from] RpcError),
    /// The daemon answered something that is not a snapshot.
    #[error("the daemon's snapshot does not parse: {0}")]
    Malformed(#[from] serde_json::Error),
    /// A replacement was not started.
    #[error("replace refused: {0}")]
    ReplaceRefused(steadfast_protocol::replacement::ReplaceRefusal),
}

impl ClientError {
    /// Whether the daemon was reached and refused (as opposed to not
    /// reached at all).
    #[must_use]
    pub const fn is_refusal(&self) -> bool {
        matches!(
            self,
            Self::Refused(_)
                | Self::Durability(_)
                | Self::Unavailable
                | Self::Invalid(_)
                | Self::Failed(_)
                | Self::ReplaceRefused(_)
        )
    }
}

/// A connection to a daemon's control socket. Cheap to clone; calls on
/// clones share the connection.
#[derive(Clone, Debug)]
pub struct ControlClient {
    /// The generated tarpc client.
    inner: RawClient,
    /// The deadline given to each command.
    timeout: Duration,
}

impl ControlClient {
    /// Connect to the socket at `path`. Call inside a tokio runtime.
    ///
    /// # Errors
    /// [`ClientError::Connect`] when nothing answers at `path`.
    pub async fn connect_unix(path: impl AsRef<Path>) -> Result<Self, ClientError> {
        let path = path.as_ref();
        let stream = UnixStream::connect(path)
            .await
            .map_err(|source| ClientError::Connect {
                path: path.to_owned(),
                source,
            })?;
        let transport = tarpc::serde_transport::new(codec::framed(stream), Bincode1::client());
        let inner = RawClient::new(client::Config::default(), transport).spawn();
        Ok(Self {
            inner,
            timeout: DEFAULT_CALL_TIMEOUT,
        })
    }

    /// Give each command this long (default [`DEFAULT_CALL_TIMEOUT`]).
    #[must_use]
    pub const fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    fn context(timeout: Duration) -> context::Context {
        let mut cx = context::current();
        cx.deadline = Instant::now() + timeout;
        cx
    }

    fn unwrap(answer: Result<ControlAnswer, RpcError>) -> Result<Snapshot, ClientError> {
        Ok(answer?.map_err(refused)?.into_snapshot()?)
    }

    /// The latest snapshot.
    ///
    /// # Errors
    /// [`ClientError`]: the call failed on the way.
    pub async fn snapshot(&self) -> Result<Snapshot, ClientError> {
        Self::unwrap(self.inner.snapshot(Self::context(self.timeout)).await)
    }

    /// The first snapshot whose version is greater than `after_version`, or
    /// the current one after `timeout` (the server caps it at 60 s).
    ///
    /// # Errors
    /// As [`Self::snapshot`].
    pub async fn watch(
        &self,
        after_version: u64,
        timeout: Duration,
    ) -> Result<Snapshot, ClientError> {
        let ms = u64::try_from(timeout.as_millis())
            .unwrap_or(u64::MAX)
            .min(MAX_WATCH_TIMEOUT_MS);
        let cx = Self::context(Duration::from_millis(ms) + WATCH_MARGIN);
        Self::unwrap(self.inner.watch(cx, after_version, ms).await)
    }

    /// Boot a stopped runtime (clears a hold).
    ///
    /// # Errors
    /// [`ClientError::Refused`] with the lifecycle's reason, or as
    /// [`Self::snapshot`].
    pub async fn start(&self) -> Result<Snapshot, ClientError> {
        Self::unwrap(self.inner.start(Self::context(self.timeout)).await)
    }

    /// Stop the runtime; answered once the drain has settled.
    ///
    /// # Errors
    /// As [`Self::start`].
    pub async fn stop(&self, hold: Hold) -> Result<Snapshot, ClientError> {
        let hold = matches!(hold, Hold::AcrossRelaunch);
        Self::unwrap(self.inner.stop(Self::context(self.timeout), hold).await)
    }

    /// Stop the runtime and boot it again.
    ///
    /// # Errors
    /// As [`Self::start`].
    pub async fn restart(&self) -> Result<Snapshot, ClientError> {
        Self::unwrap(self.inner.restart(Self::context(self.timeout)).await)
    }

    /// Retry a failed boot now.
    ///
    /// # Errors
    /// As [`Self::start`].
    pub async fn retry(&self) -> Result<Snapshot, ClientError> {
        Self::unwrap(self.inner.retry(Self::context(self.timeout)).await)
    }

    /// End the daemon's process after a drain.
    ///
    /// # Errors
    /// As [`Self::start`].
    pub async fn exit(&self, intent: ExitIntent) -> Result<Snapshot, ClientError> {
        Self::unwrap(self.inner.exit(Self::context(self.timeout), intent).await)
    }

    /// The last `limit` attempts the journal records, with their phases,
    /// across the runs it still holds, oldest first.
    ///
    /// # Errors
    /// [`ClientError::Failed`] when the daemon cannot read its journal, or
    /// as [`Self::snapshot`].
    pub async fn journal(&self, limit: u32) -> Result<Vec<JournalAttempt>, ClientError> {
        let answer = self
            .inner
            .journal(Self::context(self.timeout), limit)
            .await?;
        Ok(answer.map_err(refused)?.into_attempts()?)
    }

    /// Set `leaf` of the daemon's override tier to `value` (TOML text; a
    /// bare word is a string).
    ///
    /// # Errors
    /// [`ClientError::Invalid`] for a malformed leaf or no override tier, or
    /// as [`Self::start`].
    pub async fn config_set(&self, leaf: &str, value: &str) -> Result<Snapshot, ClientError> {
        let cx = Self::context(self.timeout);
        Self::unwrap(
            self.inner
                .config_set(cx, leaf.to_owned(), value.to_owned())
                .await,
        )
    }

    /// Remove `leaf` from the daemon's override tier.
    ///
    /// # Errors
    /// As [`Self::config_set`].
    pub async fn config_unset(&self, leaf: &str) -> Result<Snapshot, ClientError> {
        let cx = Self::context(self.timeout);
        Self::unwrap(self.inner.config_unset(cx, leaf.to_owned()).await)
    }

    /// The override tier (or one `leaf` of it) and the effective value.
    ///
    /// # Errors
    /// As [`Self::config_set`].
    pub async fn config_show(&self, leaf: Option<&str>) -> Result<ConfigView, ClientError> {
        let cx = Self::context(self.timeout);
        let answer = self.inner.config_show(cx, leaf.map(str::to_owned)).await?;
        answer.map_err(refused)
    }

    /// Prepare a re-initialization: the confirmation for [`Self::reinit`].
    ///
    /// # Errors
    /// [`ClientError::Refused`] unless the runtime is stopped, or as
    /// [`Self::snapshot`].
    pub async fn reinit_prepare(&self) -> Result<ReinitPrepared, ClientError> {
        let answer = self
            .inner
            .reinit_prepare(Self::context(self.timeout))
            .await?;
        answer.map_err(refused)
    }

    /// Re-initialize the stopped runtime with a confirmation from
    /// [`Self::reinit_prepare`]; answered once the wipe settled.
    ///
    /// # Errors
    /// [`ClientError::Refused`] (`stale_confirmation` for a token of another
    /// epoch), [`ClientError::Failed`] when the wipe failed, or as
    /// [`Self::snapshot`].
    pub async fn reinit(&self, token: &str) -> Result<Snapshot, ClientError> {
        let cx = Self::context(self.timeout);
        Self::unwrap(self.inner.reinit(cx, token.to_owned()).await)
    }

    // -- Replacement (issue 7) --

    /// Start replacing the daemon's binary; answered once started, with the
    /// first report.
    ///
    /// # Errors
    /// [`ClientError::ReplaceRefused`] with the typed reason, or as
    /// [`Self::snapshot`].
    pub async fn replace(
        &self,
        request: steadfast_protocol::control::ReplaceRequest,
    ) -> Result<steadfast_protocol::control::ReplaceStatus, ClientError> {
        self.inner
            .replace(Self::context(self.timeout), request)
            .await?
            .map_err(refused)
    }

    /// The replacement status once its report's `seq` passes `after_seq`, or
    /// as it is after `timeout` (the server caps it at 60 s). With a zero
    /// timeout: who answers (pid, identity, version) and the latest report.
    ///
    /// # Errors
    /// As [`Self::snapshot`].
    pub async fn replace_status(
        &self,
        after_seq: u64,
        timeout: Duration,
    ) -> Result<steadfast_protocol::control::ReplaceStatus, ClientError> {
        let ms = u64::try_from(timeout.as_millis())
            .unwrap_or(u64::MAX)
            .min(MAX_WATCH_TIMEOUT_MS);
        let cx = Self::context(
            Duration::from_millis(ms).max(self.timeout.min(WATCH_MARGIN)) + WATCH_MARGIN,
        );
        self.inner
            .replace_status(cx, after_seq, ms)
            .await?
            .map_err(refused)
    }
}

/// A daemon's refusal as the client's error.
fn refused(refusal: ControlRefusal) -> ClientError {
    match refusal {
        ControlRefusal::Refused {
            state,
            event,
            reason,
        } => ClientError::Refused(Refused {
            state: state.into(),
            event: event.into(),
            reason,
        }),
        ControlRefusal::Durability(error) => ClientError::Durability(error),
        ControlRefusal::Unavailable => ClientError::Unavailable,
        ControlRefusal::Invalid(error) => ClientError::Invalid(error),
        ControlRefusal::Failed(error) => ClientError::Failed(error),
        ControlRefusal::Replace(refusal) => ClientError::ReplaceRefused(refusal),
    }
}
