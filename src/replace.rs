//! The built-in process driver: replaces the daemon's own binary by a
//! candidate binary, in overlap or exclusive mode, over the Replacement
//! actor's runner.
//!
//! | step | exclusive | overlap |
//! |---|---|---|
//! | recheck | `unchanged` when the selection already names the binary and this process runs it | same |
//! | prepare | the binary is an executable file, trusted (owned by root or this euid, writable by neither group nor others, and so is every directory above it); its size and mtime are noted; this daemon's identity is read | same |
//! | drain | stop the runtime (the lifecycle's `stop`): admission closes, the store is released | — |
//! | start | bind the handover socket; spawn the binary with this process's arguments and [`HANDOVER_ENV`]; the candidate receives the data dir's lock (and in overlap the shared listeners) | same |
//! | verify | through the control socket: a daemon that answers with the candidate's pid, this daemon's identity and a version, and is running (`pending` until then) | same |
//! | validate | the binary is unchanged since prepare, the selection since recheck, the candidate alive | same |
//! | commit | write `<data_dir>/.steadfast/selection` (temp, fsync, rename, dir fsync); under systemd `MAINPID=` the candidate | same |
//! | retire | — | stop the runtime: admission closes, in-flight work finishes in the drain; `wedged` on the store the successor now holds counts as retired |
//!
//! After the transaction ([`ReplaceDriver::settle`]): a failure before commit
//! stops the candidate (SIGTERM, then SIGKILL after 5 s) and reaps it, marks
//! the run as this process's again and, if this daemon was drained and the
//! failure is not a stop's abort, starts its runtime again: the incumbent
//! keeps serving (after an abort it carries the stop out instead). Once
//! committed (even if a later step
//! failed) the daemon is handed over: nothing is rolled back; an overlap
//! retire that did not finish (its drain budget ran out) is let run to its
//! end first, since a budget never kills work; then
//! [`crate::daemon::run_with`] returns `halt` so the process exits without
//! touching the data directory again.
//!
//! A stop forwarded after commit ([`ReplaceDriver::forward`]) reaches the
//! successor as the stop it was: SIGTERM for a signal, `exit` with its
//! intent over the control socket the successor serves (SIGTERM if that
//! cannot be asked); the successor, still this process's child, is then
//! waited for, and `run_with` ends once it has exited, with the stop's
//! code.
//!
//! Checked end to end with kvd processes by `tests/it/replace.rs`.

use std::ffi::OsString;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

use serde::{Deserialize, Serialize};
use steadfast_actors::control_dir::{CONTROL_DIR_NAME, ControlDir, RunMarker};
use steadfast_actors::fsx;
use steadfast_actors::lifecycle::Hold;
use steadfast_actors::replace_runner::{AsyncDriver, StepFuture};
use steadfast_actors::replacement::{DriverError, ReplaceDriver, ReplaceJob, SettleFuture};
use steadfast_protocol::command::CommandError;
use steadfast_protocol::control::{Answer, Execute, cmd};
use steadfast_protocol::lifecycle::{ExitIntent, LifecycleState};
use steadfast_protocol::replacement::{
    Budgets, Failure, Mode, Outcome, Progress, ReasonKind, ReplaceRefusal, Report, Step, Stop,
};

use crate::control::{ControlClient, ControlService};
use crate::embedding::SupervisorHandle;
use crate::handover::{DirKey, HANDOVER_ENV, Offer};

/// The selection file's name in the control directory.
pub const SELECTION_FILE: &str = "selection";

/// What `<data_dir>/.steadfast/selection` records: the binary a committed
/// replacement selected. JSON.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Selection {
    /// The selected binary (absolute).
    pub binary: PathBuf,
    /// The version the candidate reported when it was verified.
    pub version: Option<String>,
    /// The candidate's pid.
    pub pid: u32,
    /// When it was committed, in milliseconds since the epoch.
    pub committed_at_ms: u64,
}

impl Selection {
    /// Read the selection of `data_dir`; `None` when there is none (or it
    /// does not parse: a selection is only ever written whole).
    #[must_use]
    pub fn read(data_dir: &Path) -> Option<Self> {
        // Through the trusted control dir, without following a link.
        let text = fsx::open_control_dir(data_dir, CONTROL_DIR_NAME)
            .ok()?
            .read(SELECTION_FILE, 1 << 20)
            .ok()??;
        serde_json::from_slice(&text).ok()
    }

    /// The selection of `data_dir` when it names a binary other than the
    /// one this process runs (or one that is gone), with what to say about
    /// it: steadfast does not start the selected binary itself, so a
    /// manager's later start of the old path runs the old binary. `None`
    /// when there is no selection, it names this binary, this process's
    /// binary cannot be read, or this process is a replacement's candidate
    /// (its selection is not written yet).
    #[must_use]
    pub fn elsewhere(data_dir: &Path) -> Option<(Self, String)> {
        if std::env::var_os(HANDOVER_ENV).is_some() {
            return None;
        }
        let selection = Self::read(data_dir)?;
        let running = std::env::current_exe().ok()?.canonicalize().ok()?;
        if selection.binary.canonicalize().ok().as_ref() == Some(&running) {
            return None;
        }
        let message = format!(
            "the last replace selected {} (version {}), but this process runs {}: the service \
             manager started the binary its own configuration names. To keep the selected \
             binary, install it at that path (README, \"Upgrading a running daemon\")",
            selection.binary.display(),
            selection.version.as_deref().unwrap_or("?"),
            running.display()
        );
        Some((selection, message))
    }

    /// temp file (`O_EXCL`, 0600, a stale one or a planted link unlinked
    /// first) → fsync → `renameat` → directory fsync, all relative to the
    /// control dir's descriptor.
    fn write(&self, data_dir: &Path) -> std::io::Result<()> {
        use std::io::Write;
        const TMP: &str = ".selection.tmp";
        let bytes = serde_json::to_vec(self).map_err(std::io::Error::other)?;
        let dir =
            fsx::open_control_dir(data_dir, CONTROL_DIR_NAME).map_err(std::io::Error::other)?;
        let mut file = dir.create_temp(TMP).map_err(std::io::Error::other)?;
        file.write_all(&bytes)?;
        file.sync_all()?;
        drop(file);
        dir.rename(TMP, SELECTION_FILE)
            .and_then(|()| dir.sync())
            .map_err(std::io::Error::other)
    }
}

/// The environment variable that tells the daemon which service manager
/// runs it: `systemd`, `runit`, `supervisord`, `container` or `none`. The
/// runit and supervisord snippets under `examples/` set it; without it the
/// daemon looks for itself (see [`ServiceManager::detect`]).
pub const SERVICE_MANAGER_ENV: &str = "STEADFAST_SERVICE_MANAGER";

/// The service manager a daemon runs under, as far as `replace` cares:
/// whether the manager tracks the pid it started, so that a successor
/// spawned beside the incumbent would run unmanaged (or, as PID 1 of a
/// container, the incumbent's exit would end the container).
///
/// | manager | `replace` |
/// |---|---|
/// | systemd, `Type=notify` | allowed: the commit sends `MAINPID=` the candidate |
/// | runit (`runsv`) | refused `manager_tracks_pid` |
/// | supervisord | refused `manager_tracks_pid` |
/// | PID 1 (a container) | refused `manager_tracks_pid` |
/// | none (a shell, a test) | allowed |
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServiceManager {
    /// systemd (`Type=notify`: it is told `MAINPID=`).
    Systemd,
    /// runit's `runsv`.
    Runit,
    /// supervisord.
    Supervisord,
    /// This process is PID 1 (a container's init).
    Container,
    /// No manager that tracks the pid.
    None,
}

impl ServiceManager {
    /// [`SERVICE_MANAGER_ENV`] when set; else PID 1 is `container`,
    /// `SUPERVISOR_ENABLED` in the environment (supervisord sets it for its
    /// children) is `supervisord`, a parent process named `runsv` is
    /// `runit`, `NOTIFY_SOCKET` is `systemd`, and anything else `none`.
    ///
    /// # Errors
    /// [`ReplaceRefusal::Invalid`] when [`SERVICE_MANAGER_ENV`] holds
    /// anything but the five names.
    pub fn detect() -> Result<Self, ReplaceRefusal> {
        if let Some(value) = std::env::var_os(SERVICE_MANAGER_ENV) {
            return match value.to_str() {
                Some("systemd") => Ok(Self::Systemd),
                Some("runit") => Ok(Self::Runit),
                Some("supervisord") => Ok(Self::Supervisord),
                Some("container") => Ok(Self::Container),
                Some("none") => Ok(Self::None),
                _ => Err(ReplaceRefusal::Invalid(format!(
                    "{SERVICE_MANAGER_ENV}={} is not one of systemd, runit, supervisord, container, none",
                    value.to_string_lossy()
                ))),
            };
        }
        if std::process::id() == 1 {
            return Ok(Self::Container);
        }
        if std::env::var_os("SUPERVISOR_ENABLED").is_some() {
            return Ok(Self::Supervisord);
        }
        let parent = std::fs::read_to_string(format!(
            "/proc/{}/comm",
            rustix::process::getppid().map_or(0, |p| p.as_raw_nonzero().get())
        ))
        .unwrap_or_default();
        if parent.trim_end() == "runsv" {
            return Ok(Self::Runit);
        }
        if std::env::var_os("NOTIFY_SOCKET").is_some() {
            return Ok(Self::Systemd);
        }
        Ok(Self::None)
    }

    /// The manager's name when it tracks this process's pid (so `replace`
    /// is refused), with how it was found.
    #[must_use]
    pub fn tracks_pid(self) -> Option<String> {
        let told = if std::env::var_os(SERVICE_MANAGER_ENV).is_some() {
            format!("({SERVICE_MANAGER_ENV})")
        } else {
            "(detected)".to_owned()
        };
        match self {
            Self::Runit => Some(format!("runit {told}")),
            Self::Supervisord => Some(format!("supervisord {told}")),
            Self::Container => Some(format!("PID 1 of a container {told}")),
            Self::Systemd | Self::None => None,
        }
    }
}

/// A step of the process driver failed.
#[derive(Debug, thiserror::Error)]
pub enum ProcessError {
    /// The candidate binary is not usable.
    #[error("the binary {path}: {reason}")]
    Binary {
        /// The binary.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// The daemon's own runtime could not be drained.
    #[error("the incumbent could not be drained: {0}")]
    Drain(String),
    /// The candidate could not be started.
    #[error("the candidate could not be started: {0}")]
    Start(String),
    /// The candidate exited before it was selected.
    #[error("the candidate exited: {0}")]
    CandidateExited(String),
    /// The candidate's live proof does not match.
    #[error("the candidate's proof does not match: {0}")]
    Proof(String),
    /// Something changed between recheck/prepare and validate.
    #[error("changed since it was prepared: {0}")]
    Changed(String),
    /// The selection could not be written.
    #[error("the selection could not be committed: {0}")]
    Commit(String),
    /// The incumbent could not be retired.
    #[error("the incumbent could not be retired: {0}")]
    Retire(String),
}

/// The fingerprint of a binary: size and modification time, once it is
/// found trusted: a regular file owned by root or this process's euid that
/// neither group nor others can write, reached through directories and
/// links only root or this euid can change
/// ([`steadfast_actors::fsx::check_executable`]). Another user who could
/// write the binary, or swap it on the way, would choose what this daemon
/// (often root) runs next.
fn fingerprint(path: &Path) -> Result<(u64, Option<SystemTime>), ProcessError> {
    use steadfast_actors::fsx::{FsError, UnsafePath};
    let meta = steadfast_actors::fsx::check_executable(path).map_err(|e| ProcessError::Binary {
        path: path.to_owned(),
        reason: match e {
            FsError::Io { source, .. } => source.to_string(),
            FsError::Unsafe(UnsafePath::NotAFile { .. }) => "not a regular file".into(),
            FsError::Unsafe(unsafe_path) => {
                format!("not trusted, so it is not run: {unsafe_path}")
            }
        },
    })?;
    if meta.permissions().mode() & 0o111 == 0 {
        return Err(ProcessError::Binary {
            path: path.to_owned(),
            reason: "not executable".into(),
        });
    }
    Ok((meta.len(), meta.modified().ok()))
}

/// The process driver (see the module doc).
pub struct ProcessDriver {
    handle: SupervisorHandle,
    data_dir: PathBuf,
    binary: PathBuf,
    mode: Mode,
    args: Vec<OsString>,
    /// Noted at recheck; validate refuses a selection that moved.
    selection: Option<Selection>,
    /// Noted at prepare; validate refuses a binary that changed.
    prepared: Option<(u64, Option<SystemTime>)>,
    identity: Option<String>,
    /// Whether this daemon's runtime was stopped by this transaction.
    drained: bool,
    offer: Option<Offer>,
    child: Option<tokio::process::Child>,
    /// The candidate's pid, kept once it is the successor (a stop is
    /// forwarded to it).
    successor_pid: Option<u32>,
    candidate_version: Option<String>,
}

impl std::fmt::Debug for ProcessDriver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProcessDriver")
            .field("binary", &self.binary)
            .field("mode", &self.mode)
            .finish_non_exhaustive()
    }
}

impl ProcessDriver {
    /// A driver replacing the daemon behind `handle` by `binary`, started
    /// with this process's own arguments.
    #[must_use]
    pub fn new(handle: SupervisorHandle, binary: PathBuf, mode: Mode) -> Self {
        let data_dir = handle.replace_side().data_dir.clone();
        Self {
            handle,
            data_dir,
            binary,
            mode,
            args: std::env::args_os().skip(1).collect(),
            selection: None,
            prepared: None,
            identity: None,
            drained: false,
            offer: None,
            child: None,
            successor_pid: None,
            candidate_version: None,
        }
    }

    /// Start the candidate with `args` instead of this process's arguments.
    #[must_use]
    pub fn args(mut self, args: Vec<OsString>) -> Self {
        self.args = args;
        self
    }

    /// The attempt this daemon is on (0 before its first boot).
    fn current_attempt(&self) -> u32 {
        self.handle
            .snapshot()
            .attempts
            .last()
            .map_or(0, |a| a.attempt.get())
    }

    fn recheck(&mut self) -> Progress {
        self.selection = Selection::read(&self.data_dir);
        let running = std::env::current_exe()
            .ok()
            .and_then(|p| p.canonicalize().ok());
        let wanted = self.binary.canonicalize().ok();
        let selected = self
            .selection
            .as_ref()
            .and_then(|s| s.binary.canonicalize().ok());
        if wanted.is_some() && wanted == running && wanted == selected {
            Progress::Unchanged
        } else {
            Progress::Done
        }
    }

    fn prepare(&mut self) -> Result<Progress, ProcessError> {
        self.binary = self
            .binary
            .canonicalize()
            .map_err(|e| ProcessError::Binary {
                path: self.binary.clone(),
                reason: e.to_string(),
            })?;
        self.prepared = Some(fingerprint(&self.binary)?);
        self.identity = self.handle.snapshot().identity;
        if self.identity.is_none() {
            return Err(ProcessError::Binary {
                path: self.binary.clone(),
                reason: "this daemon has no identity yet (it has never run): nothing to prove the candidate against".into(),
            });
        }
        Ok(Progress::Done)
    }

    async fn stop_runtime(&mut self) -> Result<(), String> {
        let snapshot = self.handle.snapshot();
        if matches!(snapshot.lifecycle, LifecycleState::Stopped { .. }) {
            return Ok(());
        }
        self.drained = true;
        let after = self
            .handle
            .stop(Hold::None)
            .await
            .map_err(|e| e.to_string())?;
        match after.lifecycle {
            LifecycleState::Stopped { .. } => Ok(()),
            other => Err(format!("the runtime is {} after the drain", other.name())),
        }
    }

    /// Overlap's retire: stop this daemon's runtime. In-flight work finishes
    /// within the drain (the application's own drain rules). The store the
    /// runtime held was handed over and is held by the successor now, so a
    /// drain that settles `wedged` on it is this retirement working.
    async fn retire(&mut self) -> Result<Progress, ProcessError> {
        let after = self
            .handle
            .stop(Hold::None)
            .await
            .map_err(|e| ProcessError::Retire(e.to_string()))?;
        match after.lifecycle {
            LifecycleState::Stopped { .. } | LifecycleState::Wedged { .. } => Ok(Progress::Done),
            other => Err(ProcessError::Retire(format!(
                "the runtime is {} after the drain",
                other.name()
            ))),
        }
    }

    /// `exit` with `intent`, asked of the successor `pid` over the control
    /// socket it serves (checked to be its: the pid answers); whether it
    /// was accepted.
    async fn ask_successor_to_exit(&self, pid: u32, intent: ExitIntent) -> bool {
        let socket = ControlDir::under(&self.data_dir).join("control.sock");
        let asked = async {
            let client = ControlClient::connect_unix(&socket)
                .await
                .ok()?
                .with_timeout(Duration::from_secs(5));
            let status = client.replace_status(0, Duration::ZERO).await.ok()?;
            if status.pid != pid {
                return None;
            }
            client.exit(intent).await.ok()
        };
        let accepted = asked.await.is_some();
        if !accepted {
            tracing::warn!(
                pid,
                "the successor could not be asked to exit: sending it SIGTERM"
            );
        }
        accepted
    }

    /// Let the runtime's drain run to its end, with no deadline: stop it if
    /// it still runs, then wait until it rests.
    async fn finish_retirement(&mut self) {
        let busy = |state: &LifecycleState| {
            matches!(
                state,
                LifecycleState::Running { .. }
                    | LifecycleState::Booting { .. }
                    | LifecycleState::Draining { .. }
            )
        };
        if matches!(
            self.handle.snapshot().lifecycle,
            LifecycleState::Running { .. } | LifecycleState::Booting { .. }
        ) && let Err(error) = self.handle.stop(Hold::None).await
        {
            tracing::warn!(%error, "retiring after commit: the stop was not accepted");
        }
        let mut snapshots = self.handle.watch();
        let _ = snapshots.wait_for(|s| !busy(&s.lifecycle)).await;
    }

    async fn start(&mut self) -> Result<Progress, ProcessError> {
        let control = self
            .handle
            .replace_side()
            .control
            .upgrade()
            .ok_or_else(|| ProcessError::Start("the supervisor is gone".into()))?;
        let lock = control
            .lock_file()
            .try_clone()
            .map_err(|e| ProcessError::Start(format!("the lock: {e}")))?;
        let lock = lock
            .into_os()
            .map_err(|e| ProcessError::Start(format!("the lock: {e}")))?;
        // The handover names the data dir it is for (the control dir's
        // parent, from the open control dir): a candidate running several
        // supervisors gives it to this data dir's only.
        let key = control
            .dir()
            .stat("..")
            .map_err(|e| ProcessError::Start(e.to_string()))?
            .map(|meta| DirKey::from_meta(&meta))
            .ok_or_else(|| ProcessError::Start("the data dir is gone".into()))?;
        let listeners = if self.mode == Mode::Overlap {
            self.handle
                .replace_side()
                .handover
                .offered()
                .map_err(|e| ProcessError::Start(e.to_string()))?
        } else {
            Vec::new()
        };
        // A stop the candidate hands back is this daemon's to decide, as
        // if it had arrived here.
        let handle = self.handle.clone();
        let on_stop: crate::handover::OnStop = Box::new(move |stop| {
            let handle = handle.clone();
            tokio::spawn(async move {
                if let Err(error) = handle.exit_by(stop).await {
                    tracing::warn!(%error, "a stop handed back by the candidate was refused");
                }
            });
        });
        let offer = Offer::bind(control.path(), key, lock.into(), listeners, on_stop)
            .map_err(|e| ProcessError::Start(e.to_string()))?;
        // The run marker names the attempt this process hands over from, so
        // the candidate reports its previous run as handed over by this pid
        // on this attempt (not a crash on attempt 0).
        control
            .write_run(&RunMarker::Holding {
                pid: std::process::id(),
                attempt: self.current_attempt(),
            })
            .map_err(|e| ProcessError::Start(format!("the run marker: {e}")))?;
        // From here two processes may append to the journal: no compaction
        // (a rename would strand the other writer on the old file) until the
        // replacement settles.
        control.set_journal_shared(true);
        drop(control);
        let child = tokio::process::Command::new(&self.binary)
            .args(&self.args)
            .env(HANDOVER_ENV, offer.path())
            .stdin(std::process::Stdio::null())
            .kill_on_drop(false)
            .spawn()
            .map_err(|e| ProcessError::Start(format!("{}: {e}", self.binary.display())))?;
        let pid = child
            .id()
            .ok_or_else(|| ProcessError::Start("the candidate has no pid".into()))?;
        offer.expect_pid(pid);
        self.offer = Some(offer);
        self.child = Some(child);
        Ok(Progress::Done)
    }

    fn candidate_alive(&mut self) -> Result<u32, ProcessError> {
        let child = self
            .child
            .as_mut()
            .ok_or_else(|| ProcessError::CandidateExited("no candidate".into()))?;
        match child.try_wait() {
            Ok(Some(status)) => Err(ProcessError::CandidateExited(status.to_string())),
            Ok(None) => child
                .id()
                .ok_or_else(|| ProcessError::CandidateExited("reaped".into())),
            Err(e) => Err(ProcessError::CandidateExited(e.to_string())),
        }
    }

    async fn verify(&mut self, deadline: Option<Instant>) -> Result<Progress, ProcessError> {
        let pid = self.candidate_alive()?;
        let socket = ControlDir::under(&self.data_dir).join("control.sock");
        let budget = deadline
            .map(|d| d.saturating_duration_since(Instant::now()))
            .unwrap_or(Duration::from_secs(5))
            .clamp(Duration::from_millis(100), Duration::from_secs(5));
        // Until the candidate has bound the socket, this daemon answers:
        // not the candidate's pid, so pending.
        let Ok(client) = ControlClient::connect_unix(&socket).await else {
            return Ok(Progress::Pending);
        };
        let client = client.with_timeout(budget);
        let Ok(status) = client.replace_status(0, Duration::ZERO).await else {
            return Ok(Progress::Pending);
        };
        if status.pid != pid {
            return Ok(Progress::Pending);
        }
        // The candidate cannot run without the handed-over lock; the offer
        // marks itself served a moment after the candidate received it.
        if !self.offer.as_ref().is_some_and(Offer::served) {
            return Ok(Progress::Pending);
        }
        if status.identity != self.identity {
            return Err(ProcessError::Proof(format!(
                "identity {:?}, expected {:?}",
                status.identity, self.identity
            )));
        }
        let Some(version) = status.version else {
            return Err(ProcessError::Proof(
                "the candidate reports no version".into(),
            ));
        };
        let snapshot = match client.snapshot().await {
            Ok(snapshot) => snapshot,
            Err(_) => return Ok(Progress::Pending),
        };
        match snapshot.lifecycle {
            LifecycleState::Running { .. } => {
                self.candidate_version = Some(version);
                Ok(Progress::Done)
            }
            LifecycleState::Failed { report, .. } => Err(ProcessError::Proof(format!(
                "the candidate's runtime failed in {}: {}",
                report.phase, report.error
            ))),
            LifecycleState::Wedged { cause, .. } => Err(ProcessError::Proof(format!(
                "the candidate is wedged: {cause}"
            ))),
            _ => Ok(Progress::Pending),
        }
    }

    fn validate(&mut self) -> Result<Progress, ProcessError> {
        if Some(fingerprint(&self.binary)?) != self.prepared {
            return Err(ProcessError::Changed(format!(
                "the binary {}",
                self.binary.display()
            )));
        }
        if Selection::read(&self.data_dir) != self.selection {
            return Err(ProcessError::Changed("the selection".into()));
        }
        self.candidate_alive()?;
        Ok(Progress::Done)
    }

    fn commit(&mut self) -> Result<Progress, ProcessError> {
        let pid = self.candidate_alive()?;
        let committed_at_ms = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
            .unwrap_or(0);
        let selection = Selection {
            binary: self.binary.clone(),
            version: self.candidate_version.clone(),
            pid,
            committed_at_ms,
        };
        selection
            .write(&self.data_dir)
            .map_err(|e| ProcessError::Commit(e.to_string()))?;
        self.successor_pid = Some(pid);
        // The store is the candidate's from here: the retiring runtime's
        // drain must not read the successor's lock as a wedge.
        self.handle.replace_side().handover.mark_store_handed_over();
        if std::env::var_os("NOTIFY_SOCKET").is_some()
            && let Err(error) = sd_notify::notify(&[sd_notify::NotifyState::MainPid(pid)])
        {
            tracing::warn!(%error, "sd_notify MAINPID failed");
        }
        Ok(Progress::Done)
    }

    async fn perform_step(
        &mut self,
        step: Step,
        deadline: Option<Instant>,
    ) -> Result<Progress, ProcessError> {
        match step {
            Step::Recheck => Ok(self.recheck()),
            Step::Prepare => self.prepare(),
            Step::Drain => {
                self.stop_runtime().await.map_err(ProcessError::Drain)?;
                Ok(Progress::Done)
            }
            Step::Start => self.start().await,
            Step::Verify => self.verify(deadline).await,
            Step::Validate => self.validate(),
            Step::Commit => self.commit(),
            Step::Retire => self.retire().await,
        }
    }

    /// A failure before commit: stop the candidate and serve again — unless
    /// the failure is a stop's abort (`stopped`), after which this daemon
    /// carries the stop out, so a drained runtime stays drained.
    async fn roll_back(&mut self, stopped: bool) {
        self.offer = None;
        if let Some(mut child) = self.child.take() {
            if let Some(pid) = child.id() {
                signal_term(pid);
            }
            if tokio::time::timeout(Duration::from_secs(5), child.wait())
                .await
                .is_err()
            {
                let _ = child.kill().await;
            }
        }
        // The candidate may have marked the run as its own: it is ours.
        if let Some(control) = self.handle.replace_side().control.upgrade() {
            control.set_journal_shared(false);
            if let Err(error) = control.write_run(&RunMarker::Holding {
                pid: std::process::id(),
                attempt: self.current_attempt(),
            }) {
                tracing::error!(%error, "the run marker could not be restored after a failed replacement");
            }
        }
        // The candidate may have served its own control socket and made its
        // own status record under our names, and removed them as it stopped:
        // take the names back, so `steadfastctl` reaches this daemon again.
        self.handle.reclaim_status_record();
        self.handle
            .replace_side()
            .reclaim
            .send_modify(|generation| *generation += 1);
        if self.drained && !stopped {
            if let Err(error) = self.handle.start().await {
                tracing::error!(%error, "the runtime could not be started again after a failed replacement");
            }
            self.drained = false;
        }
    }
}

impl AsyncDriver for ProcessDriver {
    type Error = DriverError;

    fn perform(&mut self, step: Step, deadline: Option<Instant>) -> StepFuture<'_, DriverError> {
        Box::pin(async move {
            self.perform_step(step, deadline)
                .await
                .map_err(|e| Box::new(e) as DriverError)
        })
    }

    fn warmup_paths(&self) -> Vec<PathBuf> {
        vec![self.binary.clone()]
    }
}

impl ReplaceDriver for ProcessDriver {
    fn settle<'a>(
        &'a mut self,
        result: &'a Result<Outcome, Failure<DriverError>>,
    ) -> SettleFuture<'a> {
        Box::pin(async move {
            let committed = match result {
                Ok(outcome) => !matches!(outcome, Outcome::Unchanged),
                Err(failure) => failure.committed,
            };
            if committed {
                // Overlap's retire did not finish (its drain budget ran out,
                // or it failed): the budget only stops the waiting, never the
                // work, so the incumbent still retires before it goes.
                if self.mode == Mode::Overlap && !matches!(result, Ok(Outcome::Complete)) {
                    self.finish_retirement().await;
                }
                // The candidate now owns the data dir: this process must end
                // without writing to it. The successor goes on when we exit;
                // it stays our child until then, so a stop forwarded to it
                // can wait for its end.
                self.offer = None;
                let _ = self.handle.replace_side().handed_over.send(true);
            } else if self.child.is_some() || self.drained {
                let stopped =
                    matches!(result, Err(failure) if failure.reason.kind() == ReasonKind::Stopped);
                self.roll_back(stopped).await;
            }
        })
    }

    fn forward(&mut self, stop: Stop) -> SettleFuture<'_> {
        Box::pin(async move {
            let side = self.handle.replace_side();
            let gone = std::sync::Arc::clone(&side.successor_gone);
            let Some(pid) = self.successor_pid else {
                gone.send_replace(true);
                return;
            };
            tracing::info!(?stop, pid, "forwarding a stop to the successor");
            let delivered = match stop {
                Stop::Signal => false,
                Stop::Exit(intent) => self.ask_successor_to_exit(pid, intent).await,
            };
            if !delivered {
                signal_term(pid);
            }
            // Wait for its end (it is our child), then say so: the daemon
            // ends once the data dir is free. A later forward finds the
            // child already taken: the first one's wait says it.
            if let Some(mut child) = self.child.take() {
                tokio::spawn(async move {
                    let code = child.wait().await.ok().and_then(|status| status.code());
                    tracing::info!(?code, "the successor a stop was forwarded to exited");
                    gone.send_replace(true);
                });
            }
        })
    }
}

/// SIGTERM to `pid` (a candidate or successor of ours).
fn signal_term(pid: u32) {
    if let Some(pid) = i32::try_from(pid)
        .ok()
        .and_then(rustix::process::Pid::from_raw)
    {
        let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
    }
}

/// Replace the daemon behind `handle` by `binary` (started with this
/// process's arguments): the request the control plane's `replace` makes.
///
/// # Errors
/// The Replacement actor's refusal.
pub async fn replace_binary(
    handle: &SupervisorHandle,
    binary: PathBuf,
    mode: Mode,
    budgets: Budgets,
) -> Result<Report, ReplaceRefusal> {
    if binary.as_os_str().is_empty() {
        return Err(ReplaceRefusal::Invalid("no binary given".into()));
    }
    if let Some(manager) = ServiceManager::detect()?.tracks_pid() {
        return Err(ReplaceRefusal::ManagerTracksPid(manager));
    }
    let target = binary.display().to_string();
    let driver = ProcessDriver::new(handle.clone(), binary, mode);
    handle
        .replace(ReplaceJob {
            mode,
            budgets,
            target,
            driver: Box::new(driver),
        })
        .await
}

/// Carrying out `replace` ([`steadfast_protocol::control::cmd::Replace`]):
/// [`replace_binary`], answered with its report. Here, not among
/// `crate::control`'s command files, since the driver uses the control
/// plane (its client asks the candidate), not the other way round.
impl Execute<cmd::Replace> for ControlService {
    async fn execute(self, command: cmd::Replace) -> Answer<cmd::Replace> {
        let budgets = Budgets {
            setup: Duration::from_millis(command.setup_budget_ms),
            drain: command.drain_budget_ms.map(Duration::from_millis),
        };
        let report = replace_binary(&self.handle, command.binary.into(), command.mode, budgets)
            .await
            .map_err(CommandError::Replace)?;
        Ok(self.replace_status(Some(report)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    /// `.selection.tmp` planted as a link to a file outside the data dir: the
    /// commit opened it create + truncate through
    /// the link and overwrote the target with a root-owned write. The temp
    /// file is now unlinked and created `O_EXCL | O_NOFOLLOW`: the target
    /// keeps its bytes and mode, and the selection is written.
    #[test]
    fn a_planted_temp_file_symlink_is_not_written_through() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let data = tmp.path().join("data");
        drop(ControlDir::open(&data).expect("control dir"));
        let victim = tmp.path().join("victim");
        std::fs::write(&victim, b"precious").expect("victim");
        std::fs::set_permissions(&victim, std::fs::Permissions::from_mode(0o644)).expect("chmod");
        std::os::unix::fs::symlink(&victim, ControlDir::under(&data).join(".selection.tmp"))
            .expect("plant the link");
        let selection = Selection {
            binary: PathBuf::from("/usr/bin/true"),
            version: None,
            pid: 1,
            committed_at_ms: 2,
        };
        let written = selection.write(&data);
        assert_eq!(
            std::fs::read(&victim).expect("victim"),
            b"precious",
            "written through"
        );
        let mode = std::fs::metadata(&victim)
            .expect("victim")
            .permissions()
            .mode()
            & 0o7777;
        assert_eq!(mode, 0o644);
        written.expect("the selection is written");
        assert_eq!(Selection::read(&data), Some(selection));
    }
}
