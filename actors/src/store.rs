//! The store lock a service's open step takes, and the probe that observes
//! whether the store is released: `<data_dir>/store.lock`, blocking std I/O.
//!
//! The lifecycle machine starts a boot only over a released store, and the
//! store outcome it is told must be *observed*, never inferred from the
//! absence of errors (ARCHITECTURE.md, "Invariants"). [`StoreLock::probe`] is
//! that observation: it tries the lock itself.
//!
//! # Invariants
//! - **One holder.** [`StoreLock::acquire`] takes an exclusive `flock` on
//!   `store.lock`; a second acquire, from this process or another, gets
//!   [`StoreError::Held`]; dropping the [`StoreLock`] releases it. Checked by
//!   `control_dir::store_lock_is_exclusive_and_released_on_drop`.
//! - **The probe sees every holder, this process included.** `flock` locks
//!   belong to open file descriptions, so the probe's own open of the file
//!   conflicts with a [`StoreLock`] held by the same process. A probe that
//!   wins the lock releases it at once. Checked by
//!   `control_dir::probe_sees_a_holder_in_this_process` and
//!   `control_dir::probe_sees_a_holder_in_another_process`.
//! - **Doubt reads as held; an error waiting cures is waited out.** A
//!   probe that cannot open or try the lock because the process or the
//!   system is out of descriptors, buffers or lock records (`EMFILE`,
//!   `ENFILE`, `ENOBUFS`, `ENOMEM`, `ENOLCK`), or was interrupted
//!   (`EINTR`, `EAGAIN`), has learnt nothing about the store: it is never
//!   read as held (a flood of connections would wedge the daemon for
//!   good) nor as released. It tries again after a pause (10 ms doubling to
//!   1 s) until it gets a definite answer, and says why in the log, naming
//!   the file and the error (the first failure, then at most one line every
//!   10 s with the count of failures since). [`StoreLock::observe`] (what
//!   the supervisor's boots and drains use) tries without bound: its task
//!   can be cancelled, and no boot may start over a store nobody proved
//!   released. The blocking [`StoreLock::probe`] gives up after
//!   [`PROBE_EXHAUSTION_PATIENCE`] (10 s) and reports `Held` with the cause
//!   ("could not be probed …"): its caller is a thread that must get an
//!   answer. Any other failure (a link, an untrusted data dir, a
//!   permission, an I/O error waiting does not cure) reports `Held` with
//!   the reason, at once, so a boot never starts over a store nobody
//!   proved released. Checked by
//!   `store_exhaustion::a_probe_waits_out_a_full_descriptor_table`,
//!   `store_exhaustion::observe_waits_out_a_full_descriptor_table`,
//!   `store_exhaustion::a_blocking_probe_gives_up_after_its_patience`,
//!   `control_dir::a_store_lock_symlink_is_refused`,
//!   `store::tests::only_errors_waiting_cures_are_retried`,
//!   `control_dir::probe_of_a_missing_lock_file_is_released` (the one
//!   released-without-locking case) and, over a real kvd, by
//!   `fds::a_descriptor_flood_never_wedges_the_daemon`.
//! - **A transient holder is waited out, a real one is not.** A child
//!   process forked by any thread of the daemon holds a copy of every open
//!   descriptor, the store lock's included, until it execs (`O_CLOEXEC`
//!   closes it then) or exits; a probe in that window would read `Held` and
//!   wedge the daemon. So a probe that finds the lock taken tries again with
//!   a doubling pause (2 ms up to 100 ms) for at most [`PROBE_PATIENCE`]
//!   (1 s) before it reports `Held`: a fork-to-exec window is
//!   microseconds to milliseconds; a holder past a second is a real one.
//!   The probe is a blocking call and may take that long only when the
//!   store is held. Checked by
//!   `control_dir::probe_waits_out_a_child_holding_a_copy_of_the_lock` and
//!   `control_dir::probe_reads_held_for_a_holder_past_its_patience`.
//! - **No link is followed.** `store.lock` is opened relative to the data
//!   dir's descriptor, `O_NOFOLLOW`, created 0600, in a data dir that is
//!   trusted (`crate::fsx`): a link there is refused
//!   ([`StoreError::Unsafe`]), its target untouched. Checked by
//!   `control_dir::a_store_lock_symlink_is_refused`.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use rustix::io::Errno;
use steadfast_protocol::lifecycle::StoreOutcome;

use crate::fsx::{Access, Dir, File, FsError, UnsafePath, try_lock_patiently};

/// How long [`StoreLock::probe`] and [`StoreLock::acquire`] keep trying a
/// lock they find taken before they report it held: the one patience of
/// [`crate::fsx::try_lock_patiently`] (a forked child holds a copy of the
/// lock until it execs; see the module doc).
pub const PROBE_PATIENCE: Duration = crate::fsx::TRANSIENT_HOLDER_PATIENCE;

/// How long the blocking [`StoreLock::probe`] keeps trying when an error
/// waiting cures (a full descriptor table) stops it from trying the lock,
/// before it reports `Held` naming the error; [`StoreLock::observe`] tries
/// without bound (see the module doc).
pub const PROBE_EXHAUSTION_PATIENCE: Duration = Duration::from_secs(10);

/// The first pause after an error waiting cures; it doubles up to
/// [`MAX_RETRY_PAUSE`].
const FIRST_RETRY_PAUSE: Duration = Duration::from_millis(10);
/// The longest pause between two tries of a probe kept from trying.
const MAX_RETRY_PAUSE: Duration = Duration::from_secs(1);
/// At most one warning this often while a probe keeps failing.
const WARN_EVERY: Duration = Duration::from_secs(10);

/// The store lock's file name under the data dir.
pub const STORE_LOCK_NAME: &str = "store.lock";

/// Why the store lock could not be taken.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// Another holder (in this process or another) has the store lock.
    #[error("store lock {0} is held by another holder")]
    Held(PathBuf),
    /// The lock file could not be created, opened or locked.
    #[error("i/o error on {path}: {source}")]
    Io {
        /// The lock file.
        path: PathBuf,
        /// The OS error.
        source: io::Error,
    },
    /// The data dir or the lock file is not safe to use (a link, a
    /// directory others can write).
    #[error(transparent)]
    Unsafe(#[from] UnsafePath),
}

impl From<FsError> for StoreError {
    fn from(error: FsError) -> Self {
        match error {
            FsError::Unsafe(unsafe_path) => Self::Unsafe(unsafe_path),
            FsError::Io { path, source } => Self::Io { path, source },
        }
    }
}

/// An exclusive lock on `<data_dir>/store.lock`, released on drop.
#[derive(Debug)]
pub struct StoreLock {
    /// The locked file; closing it releases the lock.
    file: File,
    /// Where it is, for diagnostics.
    path: PathBuf,
}

impl StoreLock {
    /// The store lock file of `data_dir`.
    #[must_use]
    pub fn path_under(data_dir: &Path) -> PathBuf {
        data_dir.join(STORE_LOCK_NAME)
    }

    /// Take the store lock, creating the lock file (0600) if missing; the
    /// data dir must exist and be trusted, and the file is opened without
    /// following a link.
    ///
    /// # Errors
    /// [`StoreError::Held`] if anyone still holds it after [`PROBE_PATIENCE`]
    /// (a forked child's passing copy is waited out, as in [`Self::probe`]);
    /// [`StoreError::Unsafe`] for a
    /// link or an untrusted data dir; [`StoreError::Io`] if the file cannot
    /// be created, opened or locked.
    pub fn acquire(data_dir: &Path) -> Result<Self, StoreError> {
        let path = Self::path_under(data_dir);
        let io_err = |source| StoreError::Io {
            path: path.clone(),
            source,
        };
        let file =
            Dir::open_data_dir(data_dir, false)?.open(STORE_LOCK_NAME, Access::ReadWriteCreate)?;
        match try_lock_patiently(&file) {
            Ok(()) => Ok(Self { file, path }),
            Err(fs::TryLockError::WouldBlock) => Err(StoreError::Held(path)),
            Err(fs::TryLockError::Error(e)) => Err(io_err(e)),
        }
    }

    /// Adopt `file`, the store lock file of `data_dir` opened by another
    /// process that holds its lock and handed the open file over (an overlap
    /// replacement): the lock is that open file's, so it is held throughout.
    ///
    /// # Errors
    /// [`StoreError::Held`] when `file` is not `data_dir`'s lock file or its
    /// lock is held by another open file; [`StoreError::Io`] when it cannot
    /// be inspected.
    pub fn adopt(data_dir: &Path, file: impl Into<File>) -> Result<Self, StoreError> {
        let file = file.into();
        let path = Self::path_under(data_dir);
        let io_err = |source| StoreError::Io {
            path: path.clone(),
            source,
        };
        let ours = Dir::open_data_dir(data_dir, false)?.stat(STORE_LOCK_NAME)?;
        let theirs = file.meta().map_err(io_err)?;
        if ours.is_none_or(|ours| ours.id() != theirs.id()) {
            return Err(StoreError::Held(path));
        }
        match file.try_lock() {
            Ok(()) => Ok(Self { file, path }),
            Err(fs::TryLockError::WouldBlock) => Err(StoreError::Held(path)),
            Err(fs::TryLockError::Error(e)) => Err(io_err(e)),
        }
    }

    /// The open, locked file (to hand over with the store).
    #[must_use]
    pub const fn file(&self) -> &File {
        &self.file
    }

    /// The lock file.
    #[must_use]
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Observe whether the store under `data_dir` is released by trying its
    /// lock: won → unlocked at once, `Released`; no lock file (or no data
    /// dir) → `Released`; would block → tried again with a doubling pause
    /// until [`PROBE_PATIENCE`] has passed, then `Held` (a forked child's
    /// copy of the descriptor is waited out; see the module doc); an error
    /// waiting cures (out of descriptors: `EMFILE`) → tried again after a
    /// pause, for up to [`PROBE_EXHAUSTION_PATIENCE`], then `Held` naming
    /// it; any other failure (a link, an untrusted data dir) → `Held`
    /// naming it.
    #[must_use]
    pub fn probe(data_dir: &Path) -> StoreOutcome {
        let mut retry = Retry::new(data_dir, system_now);
        loop {
            let tried = match Self::probe_once(data_dir) {
                Probed::Settled(outcome) => Ok(outcome),
                Probed::Kept(cause) => Err(cause),
                Probed::Taken(file, path) => Self::wait_out(&file, &path),
            };
            match tried {
                Ok(outcome) => return retry.settled(outcome),
                Err(cause) if retry.elapsed() >= PROBE_EXHAUSTION_PATIENCE => {
                    return retry.settled(StoreOutcome::Held {
                        cause: format!(
                            "{cause} (the store could not be probed for {} s)",
                            PROBE_EXHAUSTION_PATIENCE.as_secs()
                        ),
                    });
                }
                Err(cause) => std::thread::sleep(retry.failed(&cause)),
            }
        }
    }

    /// One try, which never waits: settled, kept from trying by an error
    /// waiting cures, or the lock taken by someone (its file kept open for
    /// the patient tries).
    fn probe_once(data_dir: &Path) -> Probed {
        let path = Self::path_under(data_dir);
        let opened = Dir::open_data_dir(data_dir, false)
            .and_then(|dir| dir.open(STORE_LOCK_NAME, Access::Read));
        let file = match opened {
            Ok(file) => file,
            Err(e) if e.io_kind() == Some(io::ErrorKind::NotFound) => {
                return Probed::Settled(StoreOutcome::Released);
            }
            Err(FsError::Io { source, .. }) if waiting_cures(&source) => {
                return Probed::Kept(format!(
                    "{} could not be opened to probe it: {source}",
                    path.display()
                ));
            }
            Err(e) => {
                return Probed::Settled(StoreOutcome::Held {
                    cause: format!("{} could not be opened to probe it: {e}", path.display()),
                });
            }
        };
        match file.try_lock() {
            Err(fs::TryLockError::WouldBlock) => Probed::Taken(file, path),
            other => match Self::probed(&file, &path, other) {
                Ok(outcome) => Probed::Settled(outcome),
                Err(cause) => Probed::Kept(cause),
            },
        }
    }

    /// The patient tries of a lock someone held at the first try: the
    /// outcome, or why an error waiting cures kept it from one.
    fn wait_out(file: &File, path: &Path) -> Result<StoreOutcome, String> {
        Self::probed(file, path, try_lock_patiently(file))
    }

    /// What trying the lock found: the outcome, or why an error waiting
    /// cures kept it from one.
    fn probed(
        file: &File,
        path: &Path,
        tried: Result<(), fs::TryLockError>,
    ) -> Result<StoreOutcome, String> {
        match tried {
            Ok(()) => match file.unlock() {
                Ok(()) => Ok(StoreOutcome::Released),
                // Closing the file below releases it regardless.
                Err(e) => {
                    tracing::warn!(path = %path.display(), error = %e, "store probe unlock failed");
                    Ok(StoreOutcome::Released)
                }
            },
            Err(fs::TryLockError::WouldBlock) => Ok(StoreOutcome::Held {
                cause: format!(
                    "{} is locked by another holder (still after {} ms)",
                    path.display(),
                    PROBE_PATIENCE.as_millis()
                ),
            }),
            Err(fs::TryLockError::Error(e)) if waiting_cures(&e) => Err(format!(
                "{} could not be locked to probe it: {e}",
                path.display()
            )),
            Err(fs::TryLockError::Error(e)) => Ok(StoreOutcome::Held {
                cause: format!("{} could not be probed: {e}", path.display()),
            }),
        }
    }

    /// [`Self::probe`] for async callers (an actor's handler, a boot or
    /// drain task): a held store keeps the probe trying for up to
    /// [`PROBE_PATIENCE`] on a blocking thread, which must not stall a
    /// runtime worker. A probe that could not run (the blocking pool is
    /// shut down, or it panicked) reads as `Held`: doubt never reads as
    /// released.
    ///
    /// An error waiting cures (out of descriptors: `EMFILE`) is tried
    /// again after a pause, without bound, until the probe gets an
    /// answer: it never reads as held (see the module doc). Dropping the
    /// future (its task cancelled) ends the tries.
    ///
    /// Each try is made in place (an open and a `flock` with `LOCK_NB`: no
    /// thread hop for the usual outcome, a released store); only a lock
    /// someone holds goes to a blocking thread to be waited out.
    pub async fn observe(data_dir: &Path) -> StoreOutcome {
        let mut retry = Retry::new(data_dir, || tokio::time::Instant::now().into_std());
        loop {
            let tried = match Self::probe_once(data_dir) {
                Probed::Settled(outcome) => Ok(outcome),
                Probed::Kept(cause) => Err(cause),
                Probed::Taken(file, path) => {
                    crate::device::blocking(move || Self::wait_out(&file, &path))
                        .await
                        .unwrap_or_else(|e| {
                            Ok(StoreOutcome::Held {
                                cause: format!("the store probe did not run: {e}"),
                            })
                        })
                }
            };
            match tried {
                Ok(outcome) => return retry.settled(outcome),
                Err(cause) => tokio::time::sleep(retry.failed(&cause)).await,
            }
        }
    }
}

/// Whether `error`, met opening or trying the store lock, says nothing
/// about the store and may pass by itself: the process or the system is out
/// of descriptors, buffers or lock records, or the call was interrupted.
fn waiting_cures(error: &io::Error) -> bool {
    crate::accept::is_exhaustion(error)
        || matches!(
            error.kind(),
            io::ErrorKind::Interrupted | io::ErrorKind::WouldBlock
        )
        || error
            .raw_os_error()
            .is_some_and(|code| code == Errno::NOLCK.raw_os_error())
}

/// [`StoreLock::probe_once`]'s answer.
enum Probed {
    /// Released, or held for a reason waiting cannot change.
    Settled(StoreOutcome),
    /// An error waiting cures kept the probe from trying the lock: why,
    /// naming the file and the error.
    Kept(String),
    /// Someone holds the lock now: the open lock file, and its path.
    Taken(File, PathBuf),
}

/// The pauses and the bounded warnings of one probe kept from trying the
/// lock (see the module doc).
struct Retry<'a> {
    /// The data dir probed, named in the warnings.
    data_dir: &'a Path,
    /// When the first try was made.
    started: Instant,
    /// The pause before the next try.
    pause: Duration,
    /// Failed tries so far.
    failures: u64,
    /// When the last warning was logged.
    warned_at: Option<Instant>,
    /// Failures not logged since then.
    unsaid: u64,
    /// The clock the pauses are timed on: the system's for the blocking
    /// probe (it sleeps its thread), tokio's for the async one (which a
    /// simulation pauses).
    now: fn() -> Instant,
}

/// The system's monotonic clock, for the blocking probe, which sleeps its
/// thread between tries in real time (a simulation never calls it: its
/// daemon observes the store with the async [`StoreLock::observe`]).
#[allow(clippy::disallowed_methods)] // the blocking probe's pauses are real time
fn system_now() -> Instant {
    Instant::now()
}

impl<'a> Retry<'a> {
    fn new(data_dir: &'a Path, now: fn() -> Instant) -> Self {
        Self {
            data_dir,
            now,
            started: now(),
            pause: FIRST_RETRY_PAUSE,
            failures: 0,
            warned_at: None,
            unsaid: 0,
        }
    }

    fn elapsed(&self) -> Duration {
        (self.now)().saturating_duration_since(self.started)
    }

    /// A try failed for `cause`: log it (bounded) and return the pause
    /// before the next.
    fn failed(&mut self, cause: &str) -> Duration {
        self.failures += 1;
        let now = (self.now)();
        if self
            .warned_at
            .is_some_and(|at| now.duration_since(at) < WARN_EVERY)
        {
            self.unsaid += 1;
        } else {
            tracing::warn!(
                data_dir = %self.data_dir.display(),
                cause,
                failures = self.failures,
                "the store could not be probed; trying again after a pause"
            );
            self.warned_at = Some(now);
            self.unsaid = 0;
        }
        let pause = self.pause;
        self.pause = (self.pause * 2).min(MAX_RETRY_PAUSE);
        pause
    }

    /// The probe got `outcome`: say so if it had to wait for it.
    fn settled(self, outcome: StoreOutcome) -> StoreOutcome {
        if self.failures > 0 {
            tracing::info!(
                data_dir = %self.data_dir.display(),
                failures = self.failures,
                waited_ms = u64::try_from(self.elapsed().as_millis()).unwrap_or(u64::MAX),
                ?outcome,
                "the store was probed after failed tries"
            );
        }
        outcome
    }

    /// The pause the next failure would wait.
    #[cfg(test)]
    const fn next_pause(&self) -> Duration {
        self.pause
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn errno(errno: Errno) -> io::Error {
        io::Error::from_raw_os_error(errno.raw_os_error())
    }

    #[test]
    fn only_errors_waiting_cures_are_retried() {
        for e in [
            Errno::MFILE,
            Errno::NFILE,
            Errno::NOBUFS,
            Errno::NOMEM,
            Errno::NOLCK,
            Errno::INTR,
            Errno::AGAIN,
        ] {
            assert!(waiting_cures(&errno(e)), "{e:?}");
        }
        for e in [
            Errno::ACCESS,
            Errno::PERM,
            Errno::IO,
            Errno::LOOP,
            Errno::ROFS,
            Errno::NOTDIR,
        ] {
            assert!(!waiting_cures(&errno(e)), "{e:?}");
        }
    }

    #[test]
    fn retries_pause_10_ms_doubling_to_1_s() {
        let dir = Path::new("/nonexistent");
        let mut retry = Retry::new(dir, system_now);
        let pauses: Vec<u128> = (0..10).map(|_| retry.failed("test").as_millis()).collect();
        assert_eq!(pauses, [10, 20, 40, 80, 160, 320, 640, 1000, 1000, 1000]);
        assert_eq!(retry.next_pause(), MAX_RETRY_PAUSE);
        assert_eq!(retry.failures, 10);
        assert_eq!(retry.unsaid, 9, "one warning, the rest counted");
        assert_eq!(
            retry.settled(StoreOutcome::Released),
            StoreOutcome::Released
        );
    }
}
