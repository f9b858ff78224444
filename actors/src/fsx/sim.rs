//! The seam a simulated file system plugs into: when a thread has one
//! installed ([`simulate_on_this_thread`]), every [`Dir`](super::Dir) it
//! opens, and every file opened through one, is the simulation's — the
//! control dir's lock, journal, markers and overrides, the status record,
//! the store lock and its probe, the upgrade lock, what services open
//! through `steadfast::fs`, and the declared config file's reads
//! (`config::read_config_file`). Nothing else changes: the same checks, the same
//! calls in the same order, so a seed decides what each call does (a fault,
//! a torn write, a crash that keeps only what was synced).
//!
//! A thread without one (every thread of a daemon) pays a thread-local read
//! per directory opened, nothing per read, write or fsync: a file opened on
//! the OS stays an OS file.
//!
//! The simulation itself lives with the tests that drive it; this module
//! only says what it must answer. Paths are absolute, as the real calls
//! see them; a simulated file system has no links, no other owners and no
//! loose modes, so the trust checks have nothing to refuse there.

use std::cell::RefCell;
use std::fmt;
use std::fs::TryLockError;
use std::io::{self, SeekFrom};
use std::path::Path;
use std::sync::Arc;

use super::Access;

/// What a `stat` reports of an entry, real or simulated: what steadfast
/// checks (a file's kind, owner, mode and links) and compares (its device
/// and inode: still the file we opened?).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Meta {
    /// The device the entry is on.
    pub dev: u64,
    /// Its inode number.
    pub ino: u64,
    /// What it is.
    pub kind: Kind,
    /// Its owner.
    pub uid: u32,
    /// Its permission bits.
    pub mode: u32,
    /// How many names it has.
    pub nlink: u64,
    /// Its length in bytes.
    pub len: u64,
}

impl Meta {
    /// The device and inode: what names this entry while it is open.
    #[must_use]
    pub const fn id(&self) -> (u64, u64) {
        (self.dev, self.ino)
    }
}

/// What an entry is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A regular file.
    File,
    /// A directory.
    Dir,
    /// A symbolic link.
    Symlink,
    /// Anything else (a FIFO, a socket, a device).
    Other,
}

/// A simulated file system. Each method is one system call's worth, so a
/// fault or a crash can land between any two.
pub trait SimFs: Send + Sync + fmt::Debug {
    /// `mkdir -p`: `path` and its missing parents.
    ///
    /// # Errors
    /// The simulated OS error.
    fn create_dir_all(&self, path: &Path) -> io::Result<()>;

    /// `mkdir`: `Ok(true)` when created, `Ok(false)` when a directory was
    /// there already.
    ///
    /// # Errors
    /// `AlreadyExists` when something else is there (the caller looks at
    /// it); `NotFound` when the parent is missing; the simulated OS error.
    fn create_dir(&self, path: &Path) -> io::Result<bool>;

    /// `open` with `access`'s flags (`O_CREAT`, `O_EXCL`, `O_APPEND` as
    /// [`Access`] says), whatever is at `path` (the caller checks what it
    /// opened with [`SimFile::meta`]).
    ///
    /// # Errors
    /// `NotFound`, `AlreadyExists`, or a fault (a full descriptor table:
    /// `EMFILE`).
    fn open(&self, path: &Path, access: Access) -> io::Result<Box<dyn SimFile>>;

    /// `unlink`: `Ok(false)` when there was nothing.
    ///
    /// # Errors
    /// The simulated OS error.
    fn unlink(&self, path: &Path) -> io::Result<bool>;

    /// `rename`, within one directory.
    ///
    /// # Errors
    /// The simulated OS error (the old entries stay).
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()>;

    /// `fsync` on the directory `path`: its entries become durable.
    ///
    /// # Errors
    /// The simulated OS error.
    fn sync_dir(&self, path: &Path) -> io::Result<()>;

    /// `lstat`: `None` when nothing is there.
    ///
    /// # Errors
    /// The simulated OS error.
    fn stat(&self, path: &Path) -> io::Result<Option<Meta>>;
}

/// An open file of a [`SimFs`]: one open file description (its offset,
/// its `flock`), shared by its clones; the lock is released when the last
/// clone is dropped, as when a process's last descriptor for it closes.
pub trait SimFile: Send + Sync + fmt::Debug {
    /// `read` at the description's offset.
    ///
    /// # Errors
    /// The simulated OS error.
    fn read(&self, buf: &mut [u8]) -> io::Result<usize>;

    /// `write` at the offset (at the end when opened to append); may be
    /// short, may fail after a prefix landed.
    ///
    /// # Errors
    /// The simulated OS error (`ENOSPC`, `EIO`).
    fn write(&self, buf: &[u8]) -> io::Result<usize>;

    /// `pwrite` at `offset`, the description's offset untouched.
    ///
    /// # Errors
    /// The simulated OS error.
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<usize>;

    /// `lseek`.
    ///
    /// # Errors
    /// The simulated OS error.
    fn seek(&self, pos: SeekFrom) -> io::Result<u64>;

    /// `fdatasync` (`data_only`) or `fsync`: what was written becomes
    /// durable, unless it fails.
    ///
    /// # Errors
    /// The simulated OS error (`EIO`).
    fn sync(&self, data_only: bool) -> io::Result<()>;

    /// `ftruncate`.
    ///
    /// # Errors
    /// The simulated OS error.
    fn set_len(&self, len: u64) -> io::Result<()>;

    /// `fstat`.
    ///
    /// # Errors
    /// The simulated OS error.
    fn meta(&self) -> io::Result<Meta>;

    /// `flock(LOCK_EX | LOCK_NB)`.
    ///
    /// # Errors
    /// [`TryLockError::WouldBlock`] when another description holds it.
    fn try_lock(&self) -> Result<(), TryLockError>;

    /// `flock(LOCK_UN)`: release the lock this description holds (none
    /// held: nothing to do).
    ///
    /// # Errors
    /// The simulated OS error.
    fn unlock(&self) -> io::Result<()>;

    /// `dup`: the same description.
    ///
    /// # Errors
    /// The simulated OS error (`EMFILE`).
    fn try_clone(&self) -> io::Result<Box<dyn SimFile>>;
}

thread_local! {
    static SIMULATED: RefCell<Option<Arc<dyn SimFs>>> = const { RefCell::new(None) };
}

/// Open every directory this thread opens from now on in `fs` (`None`: on
/// the OS again). Files and directories already open keep what they were
/// opened on.
pub fn simulate_on_this_thread(fs: Option<Arc<dyn SimFs>>) {
    SIMULATED.with(|cell| *cell.borrow_mut() = fs);
}

/// The file system this thread simulates, if any.
pub(super) fn current() -> Option<Arc<dyn SimFs>> {
    SIMULATED.with(|cell| cell.borrow().clone())
}
