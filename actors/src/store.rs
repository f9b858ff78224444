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

use std::fs::{self, File, OpenOptions};
use std::io;
use std::path::{Path, PathBuf};

use steadfast_protocol::lifecycle::StoreOutcome;

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

    /// Take the store lock, creating the lock file if missing.
    ///
    /// # Errors
    /// [`StoreError::Held`] if anyone holds it; [`StoreError::Io`] if the file
    /// cannot be created, opened or locked.
    pub fn acquire(data_dir: &Path) -> Result<Self, StoreError> {
        let path = Self::path_under(data_dir);
        let io_err = |source| StoreError::Io {
            path: path.clone(),
            source,
        };
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(io_err)?;
        match file.try_lock() {
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
        let ours = fs::metadata(&path).map_err(io_err)?;
        let theirs = file.metadata().map_err(io_err)?;
        if (ours.dev(), ours.ino()) != (theirs.dev(), theirs.ino()) {
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
    /// lock: won → unlocked at once, `Released`; would block → `Held`; no
    /// lock file → `Released`; any other failure → `Held` naming it.
    #[must_use]
    pub fn probe(data_dir: &Path) -> StoreOutcome {
        let path = Self::path_under(data_dir);
        let file = match File::open(&path) {
            Ok(file) => file,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return StoreOutcome::Released,
            Err(e) => {
                return StoreOutcome::Held {
                    cause: format!("{} could not be opened to probe it: {e}", path.display()),
                };
            }
        };
        match file.try_lock() {
            Ok(()) => match file.unlock() {
                Ok(()) => StoreOutcome::Released,
                // Closing the file below releases it regardless.
                Err(e) => {
                    tracing::warn!(path = %path.display(), error = %e, "store probe unlock failed");
                    StoreOutcome::Released
                }
            },
            Err(fs::TryLockError::WouldBlock) => StoreOutcome::Held {
                cause: format!("{} is locked by another holder", path.display()),
            },
            Err(fs::TryLockError::Error(e)) => StoreOutcome::Held {
                cause: format!("{} could not be probed: {e}", path.display()),
            },
        }
    }
}
