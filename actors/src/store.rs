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
//! - **Doubt reads as held.** A probe that cannot open or try the lock for a
//!   reason other than a missing file reports `Held` with the reason, so a
//!   boot never starts over a store nobody proved released. Checked by
//!   `control_dir::probe_of_a_missing_lock_file_is_released` (the one
//!   released-without-locking case).
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

use std::fs::{self, File};
use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;

use steadfast_protocol::lifecycle::StoreOutcome;

use crate::fsx::{Access, Dir, FsError, UnsafePath, try_lock_patiently};

/// How long [`StoreLock::probe`] and [`StoreLock::acquire`] keep trying a
/// lock they find taken before they report it held: the one patience of
/// [`crate::fsx::try_lock_patiently`] (a forked child holds a copy of the
/// lock until it execs; see the module doc).
pub const PROBE_PATIENCE: Duration = crate::fsx::TRANSIENT_HOLDER_PATIENCE;

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
    pub fn adopt(data_dir: &Path, file: File) -> Result<Self, StoreError> {
        use std::os::unix::fs::MetadataExt;
        let path = Self::path_under(data_dir);
        let io_err = |source| StoreError::Io {
            path: path.clone(),
            source,
        };
        let ours = Dir::open_data_dir(data_dir, false)?.stat(STORE_LOCK_NAME)?;
        let theirs = file.metadata().map_err(io_err)?;
        if ours.is_none_or(|ours| (ours.st_dev, ours.st_ino) != (theirs.dev(), theirs.ino())) {
            return Err(StoreError::Held(path));
        }
        match file.try_lock() {
            Ok(()) => Ok(Self { file, path }),
            Err(fs::TryLockError::WouldBlock) => Err(StoreError::Held(path)),
            Err(fs::TryLockError::Error(e)) => Err(io_err(e)),
        }
    }

    /// Note that this process handed the store under `data_dir` over to a
    /// successor (a replacement committed): from now on this process's
    /// probes of it read `Released` (see [`Self::probe`]). Kept for the
    /// life of the process: a retired incumbent never boots again.
    pub fn mark_handed_over(data_dir: &Path) {
        handed_over()
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(data_dir.to_path_buf());
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
    /// copy of the descriptor is waited out; see the module doc); any other
    /// failure (a link, an untrusted data dir) → `Held` naming it.
    ///
    /// A store this process handed over ([`Self::mark_handed_over`]) is
    /// `Released` without a probe: its lock is the successor's now (the
    /// same open file, shared), so a probe would read `Held` and wedge a
    /// retiring incumbent over a store it gave away on purpose.
    #[must_use]
    pub fn probe(data_dir: &Path) -> StoreOutcome {
        match Self::probe_once(data_dir) {
            Probed::Settled(outcome) => outcome,
            Probed::Taken(file, path) => Self::wait_out(&file, &path),
        }
    }

    /// [`Self::probe`]'s first try, which never waits: settled, or the lock
    /// taken by someone (its file kept open for the patient tries).
    fn probe_once(data_dir: &Path) -> Probed {
        let path = Self::path_under(data_dir);
        if handed_over()
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .contains(data_dir)
        {
            tracing::info!(path = %path.display(), "the store was handed over to the successor: released by this process");
            return Probed::Settled(StoreOutcome::Released);
        }
        let opened = Dir::open_data_dir(data_dir, false)
            .and_then(|dir| dir.open(STORE_LOCK_NAME, Access::Read));
        let file = match opened {
            Ok(file) => file,
            Err(e) if e.io_kind() == Some(io::ErrorKind::NotFound) => {
                return Probed::Settled(StoreOutcome::Released);
            }
            Err(e) => {
                return Probed::Settled(StoreOutcome::Held {
                    cause: format!("{} could not be opened to probe it: {e}", path.display()),
                });
            }
        };
        match file.try_lock() {
            Err(fs::TryLockError::WouldBlock) => Probed::Taken(file, path),
            other => Probed::Settled(Self::probed(&file, &path, other)),
        }
    }

    /// The patient tries of a lock someone held at the first try.
    fn wait_out(file: &File, path: &Path) -> StoreOutcome {
        Self::probed(file, path, try_lock_patiently(file))
    }

    /// What trying the lock found.
    fn probed(file: &File, path: &Path, tried: Result<(), fs::TryLockError>) -> StoreOutcome {
        match tried {
            Ok(()) => match file.unlock() {
                Ok(()) => StoreOutcome::Released,
                // Closing the file below releases it regardless.
                Err(e) => {
                    tracing::warn!(path = %path.display(), error = %e, "store probe unlock failed");
                    StoreOutcome::Released
                }
            },
            Err(fs::TryLockError::WouldBlock) => StoreOutcome::Held {
                cause: format!(
                    "{} is locked by another holder (still after {} ms)",
                    path.display(),
                    PROBE_PATIENCE.as_millis()
                ),
            },
            Err(fs::TryLockError::Error(e)) => StoreOutcome::Held {
                cause: format!("{} could not be probed: {e}", path.display()),
            },
        }
    }

    /// [`Self::probe`] on a blocking thread, for async callers (an actor's
    /// handler, a boot or drain task): a held store keeps the probe trying
    /// for up to [`PROBE_PATIENCE`], which must not stall a runtime worker.
    /// A probe that could not run (the blocking pool is shut down, or it
    /// panicked) reads as `Held`: doubt never reads as released.
    ///
    /// The first try never waits and is made in place (an open and a
    /// `flock` with `LOCK_NB`: no thread hop for the usual outcome, a
    /// released store); only a lock someone holds goes to a blocking thread
    /// to be waited out.
    pub async fn observe(data_dir: &Path) -> StoreOutcome {
        let (file, path) = match Self::probe_once(data_dir) {
            Probed::Settled(outcome) => return outcome,
            Probed::Taken(file, path) => (file, path),
        };
        tokio::task::spawn_blocking(move || Self::wait_out(&file, &path))
            .await
            .unwrap_or_else(|e| StoreOutcome::Held {
                cause: format!("the store probe did not run: {e}"),
            })
    }
}

/// [`StoreLock::probe_once`]'s answer.
enum Probed {
    /// Released, or held for a reason waiting cannot change.
    Settled(StoreOutcome),
    /// Someone holds the lock now: the open lock file, and its path.
    Taken(File, PathBuf),
}

/// The data dirs whose store this process handed over
/// ([`StoreLock::mark_handed_over`]).
fn handed_over() -> &'static std::sync::Mutex<std::collections::BTreeSet<std::path::PathBuf>> {
    static HANDED_OVER: std::sync::Mutex<std::collections::BTreeSet<std::path::PathBuf>> =
        std::sync::Mutex::new(std::collections::BTreeSet::new());
    &HANDED_OVER
}
