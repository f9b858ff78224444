//! Opening files in a trusted directory without following links: the one
//! mechanism every file under the data dir and its control dir goes through
//! (the control dir's lock, journal, markers and temp files, the store lock,
//! the upgrade lock, the selection, kvd's `store.log`).
//!
//! A [`Dir`] is a directory opened once as a descriptor (`O_DIRECTORY`) and
//! checked with `fstat`; every file in it is opened relative to that
//! descriptor (`openat`), so a directory renamed or swapped for a link after
//! the check cannot redirect a later open.
//!
//! # Invariants
//! - **Trusted directories only.** A directory is used only when its owner is
//!   the process's effective uid or root, and neither group nor others can
//!   write it. The data dir is refused otherwise ([`UnsafePath::ForeignOwner`],
//!   [`UnsafePath::WritableByOthers`]), naming the path and the fix; a
//!   control dir this process owns with a loose mode is tightened to 0700
//!   with `fchmod` on its descriptor (one owned by another uid is refused).
//!   A sticky world-writable directory such as `/tmp` is refused too: it is
//!   safe against renames, not against a planted `.steadfast`. Checked by
//!   `control_dir::a_world_writable_data_dir_is_refused`,
//!   `control_dir::a_data_dir_owned_by_another_user_is_refused`,
//!   `control_dir::a_control_dir_owned_by_another_user_is_refused`,
//!   `control_dir::a_loose_control_dir_of_ours_is_tightened`.
//! - **A trusted path to it.** Before the data dir is created or opened,
//!   the path to it is walked from `/` ([`check_path`], as OpenSSH's
//!   `StrictModes` does): every directory above it is root's or this euid's
//!   and not writable by group or others unless sticky, and in a sticky
//!   directory others can write, the entry taken from it (a link, a
//!   directory) is root's or this euid's. A link on the way is followed
//!   only from such a place. Checked by
//!   `control_dir::a_link_another_user_planted_above_the_data_dir_is_refused`,
//!   `control_dir::a_data_dir_under_another_users_directory_is_refused`.
//! - **No link is followed.** Subdirectories are opened
//!   `O_DIRECTORY | O_NOFOLLOW` and files `O_NOFOLLOW | O_CLOEXEC`: a symlink
//!   where a file or the control dir should be is refused with
//!   [`UnsafePath::Symlink`] naming it, and its target is never opened,
//!   written or chmodded. A file that is not a regular file (a FIFO, a
//!   device) or that another uid owns or that has another hard link is
//!   refused before a byte is read or written. Checked by
//!   `control_dir::a_control_dir_symlink_is_refused_and_its_target_untouched`,
//!   `control_dir::a_planted_lock_symlink_is_refused`,
//!   `control_dir::a_planted_journal_symlink_is_refused`,
//!   `control_dir::a_planted_upgrade_lock_symlink_is_refused`,
//!   `replace::tests::a_planted_temp_file_symlink_is_not_written_through`,
//!   `control_dir::a_store_lock_symlink_is_refused`,
//!   `files::a_kvd_store_log_symlink_is_refused`,
//!   `control_dir::a_hard_linked_journal_is_refused`.
//! - **Private files, fresh temp files.** Files are created 0600, and an
//!   existing one others can access (an older version's 0644 `store.lock`)
//!   is made 0600 when opened; a temp file
//!   is created `O_EXCL` after a stale one is unlinked (`unlinkat` removes a
//!   planted link, never its target); renames are `renameat` within the
//!   directory and directories are fsynced through their descriptor.
//!   Checked by `control_dir::control_dir_is_0700_and_files_are_0600` and
//!   `files::kvd_files_are_private`.

use std::fs;
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rustix::fs::{AtFlags, FileType, Mode, OFlags, Stat};
use rustix::io::Errno;

mod ancestors;
pub mod sim;

pub use ancestors::{Walked, check_executable, check_path};

pub use sim::{Kind, Meta};
use sim::{SimFile, SimFs};

/// The mode of every directory steadfast creates.
pub const DIR_MODE: u32 = 0o700;

/// The mode of every file steadfast creates.
pub const FILE_MODE: u32 = 0o600;

/// Why a path under the data dir is not used: what it is, and the fix.
#[derive(Debug, thiserror::Error)]
pub enum UnsafePath {
    /// A symbolic link where a file or directory should be.
    #[error(
        "{path} is a symbolic link: steadfast never follows a link in its data dir (its target was not touched); remove the link"
    )]
    Symlink {
        /// The link.
        path: PathBuf,
    },
    /// A directory owned by a uid other than this process's or root.
    #[error(
        "{path} is owned by uid {owner}, not {expected} (or root): another user could change it, or what the daemon reaches through it; chown it to uid {expected} or pick another path"
    )]
    ForeignOwner {
        /// The directory or file.
        path: PathBuf,
        /// Its owner.
        owner: u32,
        /// This process's effective uid.
        expected: u32,
    },
    /// A directory group or others can write.
    #[error(
        "{path} has mode {mode:04o}: group or others can write it, so another user could change it, or plant links in it; run chmod go-w on it or pick another path"
    )]
    WritableByOthers {
        /// The directory.
        path: PathBuf,
        /// Its permission bits.
        mode: u32,
    },
    /// A directory on the way to the path owned by a uid other than this
    /// process's or root: its owner could rename what lies below it and put
    /// a link in its place.
    #[error(
        "{ancestor}, a directory on the way to {path}, is owned by uid {owner}, not {expected} (or root): its owner could swap what lies below it for a link; pick a path whose every directory is owned by root or uid {expected}"
    )]
    UntrustedAncestor {
        /// The path asked for.
        path: PathBuf,
        /// The directory at fault.
        ancestor: PathBuf,
        /// Its owner.
        owner: u32,
        /// This process's effective uid.
        expected: u32,
    },
    /// A directory on the way to the path that group or others can write
    /// and that is not sticky: anyone who can write it could swap what lies
    /// below it.
    #[error(
        "{ancestor}, a directory on the way to {path}, has mode {mode:04o}: group or others can write it and it is not sticky, so another user could swap what lies below it for a link; run chmod go-w on it or pick another path"
    )]
    WritableAncestor {
        /// The path asked for.
        path: PathBuf,
        /// The directory at fault.
        ancestor: PathBuf,
        /// Its permission bits.
        mode: u32,
    },
    /// A link or directory on the way to the path, in a sticky directory
    /// others can write (such as `/tmp`), made by another user: it could
    /// point anywhere.
    #[error(
        "{entry}, on the way to {path}, is owned by uid {owner}, not {expected} (or root), in a directory others can write: another user made it and chose where it leads; remove it or pick another path"
    )]
    ForeignEntry {
        /// The path asked for.
        path: PathBuf,
        /// The link or directory at fault.
        entry: PathBuf,
        /// Its owner.
        owner: u32,
        /// This process's effective uid.
        expected: u32,
    },
    /// Not a directory where one should be.
    #[error("{path} is not a directory: remove it or pick another data dir")]
    NotADirectory {
        /// The path.
        path: PathBuf,
    },
    /// Not a regular file where one should be (a FIFO, a socket, a device).
    #[error("{path} is not a regular file: remove it")]
    NotAFile {
        /// The path.
        path: PathBuf,
    },
    /// A file with more than one name: writing it would write another path too.
    #[error(
        "{path} has {links} hard links: remove it (another name may point at a file outside the data dir)"
    )]
    HardLinked {
        /// The file.
        path: PathBuf,
        /// Its link count.
        links: u64,
    },
}

/// A failure of an operation of this module: an unsafe path, or the OS.
#[derive(Debug, thiserror::Error)]
pub enum FsError {
    /// The path is not safe to use (see [`UnsafePath`]).
    #[error(transparent)]
    Unsafe(#[from] UnsafePath),
    /// An I/O operation on a path failed.
    #[error("i/o error on {path}: {source}")]
    Io {
        /// The file or directory operated on.
        path: PathBuf,
        /// The OS error.
        source: io::Error,
    },
}

impl FsError {
    /// The OS error's kind, if this is one.
    #[must_use]
    pub fn io_kind(&self) -> Option<io::ErrorKind> {
        match self {
            Self::Io { source, .. } => Some(source.kind()),
            Self::Unsafe(_) => None,
        }
    }
}

fn os(path: &Path) -> impl FnOnce(Errno) -> FsError + '_ {
    move |errno| FsError::Io {
        path: path.to_path_buf(),
        source: io::Error::from(errno),
    }
}

/// This process's effective uid.
#[must_use]
pub fn euid() -> u32 {
    rustix::process::geteuid().as_raw()
}

fn mode_bits(stat: &Stat) -> u32 {
    // `st_mode`'s width differs between targets.
    #[allow(clippy::unnecessary_cast)]
    let mode = stat.st_mode as u32;
    mode & 0o7777
}

/// How a file is opened by [`Dir::open`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Read only; the file must exist.
    Read,
    /// Read and write, created (0600) if missing, never truncated.
    ReadWriteCreate,
    /// Read and append, created (0600) if missing.
    AppendCreate,
    /// Read and append; the file must not exist (created 0600, `O_EXCL`).
    AppendCreateNew,
    /// Read and append; the file must exist.
    Append,
    /// Write only; the file must not exist (created 0600, `O_EXCL`).
    WriteCreateNew,
    /// Write only; the file must exist (never created or truncated).
    Write,
}

impl Access {
    fn flags(self) -> OFlags {
        match self {
            Self::Read => OFlags::RDONLY,
            Self::ReadWriteCreate => OFlags::RDWR | OFlags::CREATE,
            Self::AppendCreate => OFlags::RDWR | OFlags::APPEND | OFlags::CREATE,
            Self::AppendCreateNew => OFlags::RDWR | OFlags::APPEND | OFlags::CREATE | OFlags::EXCL,
            Self::Append => OFlags::RDWR | OFlags::APPEND,
            Self::WriteCreateNew => OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL,
            Self::Write => OFlags::WRONLY,
        }
    }
}

/// A trusted directory, open as a descriptor; every file in it is opened
/// relative to it, without following links. On a thread that simulates its
/// file system ([`sim::simulate_on_this_thread`]) it is a directory of the
/// simulation, and so is every file opened through it.
#[derive(Debug)]
pub struct Dir {
    on: DirOn,
    path: PathBuf,
}

/// Create the data dir `path` and its missing parents (0700), each made
/// durable in its parent (an fsync of the parent after each `mkdir`), so
/// that a power cut after the first acknowledgement cannot take the whole
/// directory with it; `path`'s own name only when `sync_last` (a launch
/// leaves it to its settling, which fsyncs it off the launch's path before
/// anything is acknowledged: [`sync_parent_of`]). Nothing is done for a
/// directory already there.
fn create_data_dir(path: &Path, sync_last: bool) -> Result<(), FsError> {
    let sim = sim::current();
    let exists = |dir: &Path| {
        let found = match &sim {
            Some(fs) => fs.stat(dir).map(|meta| meta.is_some()),
            None => fs::symlink_metadata(dir).map(|_| true),
        };
        match found {
            Err(error) if error.kind() == io::ErrorKind::NotFound => Ok(false),
            found => found,
        }
    };
    let mut missing = Vec::new();
    for dir in path.ancestors().filter(|dir| !dir.as_os_str().is_empty()) {
        if exists(dir).map_err(io_at(dir))? {
            break;
        }
        missing.push(dir);
    }
    for dir in missing.into_iter().rev() {
        let made = match &sim {
            Some(fs) => fs.create_dir(dir).map(drop),
            None => {
                use std::os::unix::fs::DirBuilderExt;
                match fs::DirBuilder::new().mode(DIR_MODE).create(dir) {
                    // Another process made it meanwhile: its entry is as
                    // durable as that process made it; fsynced below anyway.
                    Err(error) if error.kind() == io::ErrorKind::AlreadyExists => Ok(()),
                    made => made,
                }
            }
        };
        made.map_err(io_at(dir))?;
        if sync_last || dir != path {
            sync_parent_of(dir)?;
        }
    }
    Ok(())
}

/// fsync the directory that holds `path`'s last name (`.` for a bare
/// name), so that name is durable. Opened only to be fsynced: nothing in
/// it is read or trusted. A directory this process may pass through but
/// not open (mode `0711`, another user's) cannot be fsynced by it: that is
/// said at debug and is not an error (its name is as durable as whoever
/// made it made it).
///
/// # Errors
/// [`FsError::Io`] naming the directory, when the fsync fails.
pub fn sync_parent_of(path: &Path) -> Result<(), FsError> {
    let parent = match path.parent() {
        None => return Ok(()),
        Some(parent) if parent.as_os_str().is_empty() => Path::new("."),
        Some(parent) => parent,
    };
    if let Some(fs) = sim::current() {
        return fs.sync_dir(parent).map_err(io_at(parent));
    }
    let fd = match rustix::fs::open(
        parent,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    ) {
        Ok(fd) => fd,
        Err(errno @ (Errno::ACCESS | Errno::PERM)) => {
            tracing::debug!(dir = %parent.display(), %errno, "cannot open the directory to fsync it");
            return Ok(());
        }
        Err(errno) => return Err(os(parent)(errno)),
    };
    rustix::fs::fsync(&fd).map_err(os(parent))
}

/// [`check_path`] on the OS; nothing on a simulated file system, which has
/// no other users.
fn check_path_of_os(path: &Path) -> Result<(), FsError> {
    if sim::current().is_none() {
        check_path(path)?;
    }
    Ok(())
}

/// What a [`Dir`] is open on.
#[derive(Debug)]
enum DirOn {
    Os(OwnedFd),
    Sim(Arc<dyn SimFs>),
}

impl Dir {
    /// Open the data dir `path` (creating it and its missing parents 0700),
    /// as a descriptor, and check it is trusted: owned by this process's
    /// euid or root, not writable by group or others. So is the path to
    /// it, before anything is created ([`check_path`]): every directory
    /// above it root's or this euid's and not writable by others unless
    /// sticky, and a link on the way followed only where root or this euid
    /// made it (in a sticky directory others write, only a link of ours).
    /// What the path resolves to is what is checked.
    ///
    /// # Errors
    /// [`UnsafePath::ForeignOwner`] / [`UnsafePath::WritableByOthers`] /
    /// [`UnsafePath::NotADirectory`] naming the path and the fix;
    /// [`UnsafePath::UntrustedAncestor`] / [`UnsafePath::WritableAncestor`]
    /// / [`UnsafePath::ForeignEntry`] naming the ancestor or entry at fault;
    /// [`FsError::Io`] if it cannot be created or opened.
    pub fn open_data_dir(path: &Path, create: bool) -> Result<Self, FsError> {
        check_path_of_os(path)?;
        if create {
            create_data_dir(path, true)?;
        }
        Self::open_data_dir_made(path)
    }

    /// [`Self::open_data_dir`] creating it, for a launch: the data dir's
    /// own name is left to the launch's settling, which fsyncs its parent
    /// off the launch's path before anything is acknowledged.
    pub(crate) fn open_data_dir_for_launch(path: &Path) -> Result<Self, FsError> {
        check_path_of_os(path)?;
        create_data_dir(path, false)?;
        Self::open_data_dir_made(path)
    }

    /// [`Self::open_data_dir`] once it exists and the path to it was
    /// walked. One walk, before anything is created, is enough: once it
    /// passed, nobody but root and this euid can change a name it checked,
    /// and what a create added below it is this process's own.
    fn open_data_dir_made(path: &Path) -> Result<Self, FsError> {
        if let Some(fs) = sim::current() {
            return Self::sim_dir(fs, path.to_path_buf());
        }
        let fd = rustix::fs::open(
            path,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|errno| {
            if errno == Errno::NOTDIR {
                UnsafePath::NotADirectory {
                    path: path.to_path_buf(),
                }
                .into()
            } else {
                os(path)(errno)
            }
        })?;
        let dir = Self {
            on: DirOn::Os(fd),
            path: path.to_path_buf(),
        };
        dir.check_trusted(false)?;
        Ok(dir)
    }

    /// The simulated directory at `path`, which must be one.
    fn sim_dir(fs: Arc<dyn SimFs>, path: PathBuf) -> Result<Self, FsError> {
        match fs.stat(&path).map_err(io_at(&path))? {
            Some(meta) if meta.kind == Kind::Dir => Ok(Self {
                on: DirOn::Sim(fs),
                path,
            }),
            Some(meta) if meta.kind == Kind::Symlink => Err(UnsafePath::Symlink { path }.into()),
            Some(_) => Err(UnsafePath::NotADirectory { path }.into()),
            None => Err(FsError::Io {
                path,
                source: io::ErrorKind::NotFound.into(),
            }),
        }
    }

    /// The control dir `name` under this directory: created 0700 if missing
    /// (when `create`), opened `O_DIRECTORY | O_NOFOLLOW`, and checked like
    /// the data dir, except that one this process owns with a loose mode is
    /// tightened to 0700 through its descriptor.
    ///
    /// # Errors
    /// [`UnsafePath::Symlink`] when `name` is a link; as
    /// [`Self::open_data_dir`] otherwise. `NotFound` (as [`FsError::Io`])
    /// when it is missing and `create` is false.
    pub fn open_subdir(&self, name: &str, create: bool) -> Result<(Self, bool), FsError> {
        let path = self.join(name);
        let fd = match &self.on {
            DirOn::Sim(fs) => {
                let created = create
                    && match fs.create_dir(&path) {
                        Ok(created) => created,
                        // Whatever is there is looked at next.
                        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => false,
                        Err(e) => return Err(io_at(&path)(e)),
                    };
                return Ok((Self::sim_dir(Arc::clone(fs), path)?, created));
            }
            DirOn::Os(fd) => fd,
        };
        let created = if create {
            match rustix::fs::mkdirat(fd, name, Mode::from_raw_mode(DIR_MODE as _)) {
                Ok(()) => true,
                Err(Errno::EXIST) => false,
                Err(errno) => return Err(os(&path)(errno)),
            }
        } else {
            false
        };
        let fd = rustix::fs::openat(
            fd,
            name,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|errno| self.refusal(name, errno, true))?;
        let dir = Self {
            on: DirOn::Os(fd),
            path,
        };
        dir.check_trusted(true)?;
        Ok((dir, created))
    }

    /// Why opening `name` failed with `errno`: a link or a non-directory is
    /// an [`UnsafePath`], anything else the OS error.
    fn refusal(&self, name: &str, errno: Errno, want_dir: bool) -> FsError {
        let path = self.join(name);
        if matches!(errno, Errno::LOOP | Errno::NOTDIR | Errno::MLINK)
            && let Ok(Some(meta)) = self.stat(name)
        {
            if meta.kind == Kind::Symlink {
                return UnsafePath::Symlink { path }.into();
            }
            if want_dir && meta.kind != Kind::Dir {
                return UnsafePath::NotADirectory { path }.into();
            }
        }
        os(&path)(errno)
    }

    /// Check this directory's owner and mode through its descriptor; with
    /// `fix`, a loose mode on a directory this process owns is set to 0700.
    /// A simulated directory has no other owner and no loose mode.
    fn check_trusted(&self, fix: bool) -> Result<(), FsError> {
        let DirOn::Os(fd) = &self.on else {
            return Ok(());
        };
        let stat = rustix::fs::fstat(fd).map_err(os(&self.path))?;
        let owner = stat.st_uid;
        let me = euid();
        if owner != me && owner != 0 {
            return Err(UnsafePath::ForeignOwner {
                path: self.path.clone(),
                owner,
                expected: me,
            }
            .into());
        }
        let mode = mode_bits(&stat);
        if fix && owner == me {
            if mode != DIR_MODE {
                rustix::fs::fchmod(fd, Mode::from_raw_mode(DIR_MODE as _))
                    .map_err(os(&self.path))?;
            }
            return Ok(());
        }
        if mode & 0o022 != 0 {
            return Err(UnsafePath::WritableByOthers {
                path: self.path.clone(),
                mode,
            }
            .into());
        }
        Ok(())
    }

    /// The directory's path (for errors and for readers by path).
    #[must_use]
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The path of `name` in this directory (for errors).
    #[must_use]
    pub fn join(&self, name: &str) -> PathBuf {
        self.path.join(name)
    }

    /// The same directory on a descriptor of its own (`F_DUPFD_CLOEXEC`).
    ///
    /// # Errors
    /// The `dup`'s, when out of descriptors.
    pub fn try_clone(&self) -> std::io::Result<Self> {
        Ok(Self {
            on: match &self.on {
                DirOn::Os(fd) => DirOn::Os(fd.try_clone()?),
                DirOn::Sim(fs) => DirOn::Sim(Arc::clone(fs)),
            },
            path: self.path.clone(),
        })
    }

    /// Open the file `name` in this directory: `O_NOFOLLOW | O_CLOEXEC`,
    /// created 0600 when `access` creates. The file must be a regular file
    /// owned by this process's euid with one link; anything else is refused
    /// before a byte is read or written. An existing file group or others
    /// can access is made 0600 (`fchmod` on the descriptor).
    ///
    /// # Errors
    /// [`UnsafePath::Symlink`], [`UnsafePath::NotAFile`],
    /// [`UnsafePath::ForeignOwner`], [`UnsafePath::HardLinked`];
    /// [`FsError::Io`] for the OS's refusals (`NotFound`, `AlreadyExists`).
    pub fn open(&self, name: &str, access: Access) -> Result<File, FsError> {
        let path = self.join(name);
        let dir = match &self.on {
            DirOn::Sim(fs) => {
                let file = File(FileOn::Sim(fs.open(&path, access).map_err(io_at(&path))?));
                check_file(&path, &file.meta().map_err(io_at(&path))?)?;
                return Ok(file);
            }
            DirOn::Os(fd) => fd,
        };
        // Non-blocking, so a FIFO planted here cannot hang the open; cleared
        // once the file is known to be regular.
        let flags = access.flags() | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::NONBLOCK;
        let fd = rustix::fs::openat(dir, name, flags, Mode::from_raw_mode(FILE_MODE as _))
            .map_err(|errno| self.refusal(name, errno, false))?;
        let stat = rustix::fs::fstat(&fd).map_err(os(&path))?;
        check_file(&path, &meta_of(&stat))?;
        if mode_bits(&stat) & 0o077 != 0 {
            // Ours (checked above), but readable by others: a file an older
            // version created 0644 is made private.
            rustix::fs::fchmod(&fd, Mode::from_raw_mode(FILE_MODE as _)).map_err(os(&path))?;
        }
        let status = rustix::fs::fcntl_getfl(&fd).map_err(os(&path))?;
        rustix::fs::fcntl_setfl(&fd, status.difference(OFlags::NONBLOCK)).map_err(os(&path))?;
        Ok(File::from(fs::File::from(fd)))
    }

    /// A fresh temp file `name`, 0600, `O_EXCL`: whatever was at `name` (a
    /// stale temp file, or a link someone planted) is unlinked first — the
    /// entry, never what a link points at.
    ///
    /// # Errors
    /// As [`Self::open`] and [`Self::unlink`].
    pub fn create_temp(&self, name: &str) -> Result<File, FsError> {
        self.unlink(name)?;
        self.open(name, Access::WriteCreateNew)
    }

    /// Remove the entry `name` (a link is removed, not followed); `false`
    /// when there was none.
    ///
    /// # Errors
    /// [`FsError::Io`] if it cannot be removed.
    pub fn unlink(&self, name: &str) -> Result<bool, FsError> {
        let path = self.join(name);
        match &self.on {
            DirOn::Sim(fs) => fs.unlink(&path).map_err(io_at(&path)),
            DirOn::Os(fd) => match rustix::fs::unlinkat(fd, name, AtFlags::empty()) {
                Ok(()) => Ok(true),
                Err(Errno::NOENT) => Ok(false),
                Err(errno) => Err(os(&path)(errno)),
            },
        }
    }

    /// Rename `from` over `to`, both in this directory.
    ///
    /// # Errors
    /// [`FsError::Io`] naming `to`.
    pub fn rename(&self, from: &str, to: &str) -> Result<(), FsError> {
        let path = self.join(to);
        match &self.on {
            DirOn::Sim(fs) => fs.rename(&self.join(from), &path).map_err(io_at(&path)),
            DirOn::Os(fd) => rustix::fs::renameat(fd, from, fd, to).map_err(os(&path)),
        }
    }

    /// fsync the directory through its descriptor, so entries created,
    /// renamed or removed in it are durable.
    ///
    /// # Errors
    /// [`FsError::Io`] naming the directory.
    pub fn sync(&self) -> Result<(), FsError> {
        match &self.on {
            DirOn::Sim(fs) => fs.sync_dir(&self.path).map_err(io_at(&self.path)),
            DirOn::Os(fd) => rustix::fs::fsync(fd).map_err(os(&self.path)),
        }
    }

    /// What `name` is, without following a link; `None` when missing.
    ///
    /// # Errors
    /// [`FsError::Io`] if it cannot be examined.
    pub fn stat(&self, name: &str) -> Result<Option<Meta>, FsError> {
        let path = self.join(name);
        match &self.on {
            DirOn::Sim(fs) => fs.stat(&path).map_err(io_at(&path)),
            DirOn::Os(fd) => match rustix::fs::statat(fd, name, AtFlags::SYMLINK_NOFOLLOW) {
                Ok(stat) => Ok(Some(meta_of(&stat))),
                Err(Errno::NOENT) => Ok(None),
                Err(errno) => Err(os(&path)(errno)),
            },
        }
    }

    /// The directory itself, as `fstat` sees it.
    ///
    /// # Errors
    /// [`FsError::Io`] naming it.
    pub fn fstat(&self) -> Result<Meta, FsError> {
        match &self.on {
            DirOn::Sim(fs) => fs
                .stat(&self.path)
                .and_then(|meta| meta.ok_or_else(|| io::ErrorKind::NotFound.into()))
                .map_err(io_at(&self.path)),
            DirOn::Os(fd) => rustix::fs::fstat(fd)
                .map(|stat| meta_of(&stat))
                .map_err(os(&self.path)),
        }
    }

    /// What the directory's path names now (`stat`, following links as a
    /// path lookup does): compared with [`Self::fstat`], whether the path
    /// still names the directory opened.
    ///
    /// # Errors
    /// The lookup's, when the path names nothing.
    pub fn stat_path(&self) -> io::Result<Meta> {
        match &self.on {
            DirOn::Sim(fs) => fs
                .stat(&self.path)?
                .ok_or_else(|| io::ErrorKind::NotFound.into()),
            DirOn::Os(_) => Ok(meta_of(&rustix::fs::stat(&self.path)?)),
        }
    }

    /// Read at most `cap` bytes of `name` (opened as by [`Self::open`]);
    /// `None` when it is missing.
    ///
    /// # Errors
    /// As [`Self::open`], and [`FsError::Io`] if it cannot be read.
    pub fn read(&self, name: &str, cap: u64) -> Result<Option<Vec<u8>>, FsError> {
        let file = match self.open(name, Access::Read) {
            Ok(file) => file,
            Err(e) if e.io_kind() == Some(io::ErrorKind::NotFound) => return Ok(None),
            Err(e) => return Err(e),
        };
        let mut bytes = Vec::new();
        file.take(cap)
            .read_to_end(&mut bytes)
            .map_err(|source| FsError::Io {
                path: self.join(name),
                source,
            })?;
        Ok(Some(bytes))
    }
}

/// A file opened through a [`Dir`]: an OS file, or one of a simulated file
/// system. It reads, writes, seeks, syncs and locks as [`std::fs::File`]
/// does; [`File::as_os`] reaches the OS file where only one will do.
#[derive(Debug)]
pub struct File(FileOn);

#[derive(Debug)]
enum FileOn {
    Os(fs::File),
    Sim(Box<dyn SimFile>),
}

impl From<fs::File> for File {
    fn from(file: fs::File) -> Self {
        Self(FileOn::Os(file))
    }
}

impl File {
    /// `fdatasync`: the file's data is durable.
    ///
    /// # Errors
    /// The OS error.
    pub fn sync_data(&self) -> io::Result<()> {
        match &self.0 {
            FileOn::Os(file) => file.sync_data(),
            FileOn::Sim(file) => file.sync(true),
        }
    }

    /// `fsync`: the file's data and metadata are durable.
    ///
    /// # Errors
    /// The OS error.
    pub fn sync_all(&self) -> io::Result<()> {
        match &self.0 {
            FileOn::Os(file) => file.sync_all(),
            FileOn::Sim(file) => file.sync(false),
        }
    }

    /// `ftruncate` to `len` bytes.
    ///
    /// # Errors
    /// The OS error.
    pub fn set_len(&self, len: u64) -> io::Result<()> {
        match &self.0 {
            FileOn::Os(file) => file.set_len(len),
            FileOn::Sim(file) => file.set_len(len),
        }
    }

    /// `fstat`.
    ///
    /// # Errors
    /// The OS error.
    pub fn meta(&self) -> io::Result<Meta> {
        match &self.0 {
            FileOn::Os(file) => Ok(meta_of(&rustix::fs::fstat(file)?)),
            FileOn::Sim(file) => file.meta(),
        }
    }

    /// `pwrite` all of `buf` at `offset`; the file's offset is untouched.
    ///
    /// # Errors
    /// The OS error (part of `buf` may have been written).
    pub fn write_all_at(&self, mut buf: &[u8], mut offset: u64) -> io::Result<()> {
        match &self.0 {
            FileOn::Os(file) => std::os::unix::fs::FileExt::write_all_at(file, buf, offset),
            FileOn::Sim(file) => {
                while !buf.is_empty() {
                    match file.write_at(buf, offset)? {
                        0 => return Err(io::ErrorKind::WriteZero.into()),
                        n => {
                            buf = &buf[n..];
                            offset += n as u64;
                        }
                    }
                }
                Ok(())
            }
        }
    }

    /// `flock(LOCK_EX | LOCK_NB)`, once (see [`try_lock_patiently`]).
    ///
    /// # Errors
    /// [`fs::TryLockError::WouldBlock`] when another holds it.
    pub fn try_lock(&self) -> Result<(), fs::TryLockError> {
        match &self.0 {
            FileOn::Os(file) => file.try_lock(),
            FileOn::Sim(file) => file.try_lock(),
        }
    }

    /// `flock(LOCK_EX)`, waiting while another holds it. A simulated file
    /// has no one to wait for: a lock held elsewhere is `WouldBlock`.
    ///
    /// # Errors
    /// The OS error.
    pub fn lock(&self) -> io::Result<()> {
        match &self.0 {
            FileOn::Os(file) => file.lock(),
            FileOn::Sim(file) => file.try_lock().map_err(|e| match e {
                fs::TryLockError::WouldBlock => io::ErrorKind::WouldBlock.into(),
                fs::TryLockError::Error(e) => e,
            }),
        }
    }

    /// `flock(LOCK_UN)`.
    ///
    /// # Errors
    /// The OS error.
    pub fn unlock(&self) -> io::Result<()> {
        match &self.0 {
            FileOn::Os(file) => file.unlock(),
            FileOn::Sim(file) => file.unlock(),
        }
    }

    /// The same open file on a descriptor of its own (`dup`).
    ///
    /// # Errors
    /// The OS error, when out of descriptors.
    pub fn try_clone(&self) -> io::Result<Self> {
        Ok(Self(match &self.0 {
            FileOn::Os(file) => FileOn::Os(file.try_clone()?),
            FileOn::Sim(file) => FileOn::Sim(file.try_clone()?),
        }))
    }

    /// The OS file, when this is one (a simulated file is not): for what
    /// needs a descriptor (handing it to another process) or a call this
    /// type does not make (a shared lock).
    ///
    /// # Errors
    /// [`io::ErrorKind::Unsupported`] for a simulated file.
    pub fn into_os(self) -> io::Result<fs::File> {
        match self.0 {
            FileOn::Os(file) => Ok(file),
            FileOn::Sim(_) => Err(io::Error::new(
                io::ErrorKind::Unsupported,
                "a simulated file has no OS descriptor",
            )),
        }
    }

    /// The OS file, when this is one (a simulated file is not): for what
    /// needs a descriptor (handing it to another process).
    #[must_use]
    pub const fn as_os(&self) -> Option<&fs::File> {
        match &self.0 {
            FileOn::Os(file) => Some(file),
            FileOn::Sim(_) => None,
        }
    }
}

impl Read for &File {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match &self.0 {
            FileOn::Os(file) => (&*file).read(buf),
            FileOn::Sim(file) => file.read(buf),
        }
    }
}

impl Read for File {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        (&*self).read(buf)
    }
}

impl Write for &File {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match &self.0 {
            FileOn::Os(file) => (&*file).write(buf),
            FileOn::Sim(file) => file.write(buf),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Write for File {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        (&*self).write(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Seek for &File {
    fn seek(&mut self, pos: SeekFrom) -> io::Result<u64> {
        match &self.0 {
            FileOn::Os(file) => (&*file).seek(pos),
            FileOn::Sim(file) => file.seek(pos),
        }
    }
}

impl Seek for File {
    fn seek(&mut self, pos: SeekFrom) -> io::Result<u64> {
        (&*self).seek(pos)
    }
}

/// What rustix's `stat` says, as [`Meta`].
fn meta_of(stat: &Stat) -> Meta {
    let kind = match FileType::from_raw_mode(stat.st_mode) {
        FileType::RegularFile => Kind::File,
        FileType::Directory => Kind::Dir,
        FileType::Symlink => Kind::Symlink,
        _ => Kind::Other,
    };
    // The fields' widths differ between targets.
    #[allow(clippy::useless_conversion, clippy::unnecessary_cast)]
    Meta {
        dev: stat.st_dev as u64,
        ino: stat.st_ino as u64,
        kind,
        uid: stat.st_uid,
        mode: mode_bits(stat),
        nlink: stat.st_nlink as u64,
        len: stat.st_size as u64,
    }
}

fn io_at(path: &Path) -> impl FnOnce(io::Error) -> FsError + '_ {
    move |source| FsError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// A file opened here must be a regular file, this process's, with one name.
fn check_file(path: &Path, meta: &Meta) -> Result<(), FsError> {
    if meta.kind != Kind::File {
        return Err(UnsafePath::NotAFile {
            path: path.to_path_buf(),
        }
        .into());
    }
    let me = euid();
    if meta.uid != me {
        return Err(UnsafePath::ForeignOwner {
            path: path.to_path_buf(),
            owner: meta.uid,
            expected: me,
        }
        .into());
    }
    if meta.nlink > 1 {
        return Err(UnsafePath::HardLinked {
            path: path.to_path_buf(),
            links: meta.nlink,
        }
        .into());
    }
    Ok(())
}

/// Open the file `name` in the data dir `data_dir` (which must be trusted,
/// and is created 0700 if missing) as by [`Dir::open`]: for files an
/// application keeps beside its store (kvd's `store.log`).
///
/// # Errors
/// As [`Dir::open_data_dir`] and [`Dir::open`].
pub fn open_in_data_dir(data_dir: &Path, name: &str, access: Access) -> Result<File, FsError> {
    Dir::open_data_dir(data_dir, true)?.open(name, access)
}

/// The control dir `<data_dir>/<name>` as a trusted [`Dir`], reached through
/// a trusted data dir without following a link; not created.
///
/// # Errors
/// As [`Dir::open_data_dir`] and [`Dir::open_subdir`].
pub fn open_control_dir(data_dir: &Path, name: &str) -> Result<Dir, FsError> {
    Ok(Dir::open_data_dir(data_dir, false)?
        .open_subdir(name, false)?
        .0)
}

/// Read at most `cap` bytes of `<data_dir>/<control>/<name>` without
/// changing anything: for a reader that is not the daemon (`steadfastctl
/// journal --data-dir` with no daemon answering). The data dir and the
/// control dir are checked as [`open_control_dir`] checks them, except that
/// nothing is created and a loose mode is refused rather than tightened;
/// the file is opened `O_NOFOLLOW | O_NONBLOCK` and must be a regular file
/// of this euid with one link; it is never written, and no lock is taken.
/// `None` when the file is missing.
///
/// # Errors
/// As [`open_control_dir`] and [`Dir::open`]; `NotFound` (as
/// [`FsError::Io`]) when the data dir or the control dir is missing.
pub fn read_control_file(
    data_dir: &Path,
    control: &str,
    name: &str,
    cap: u64,
) -> Result<Option<Vec<u8>>, FsError> {
    let data = Dir::open_data_dir(data_dir, false)?;
    let data_fd = match &data.on {
        DirOn::Sim(_) => return data.open_subdir(control, false)?.0.read(name, cap),
        DirOn::Os(fd) => fd,
    };
    let path = data.join(control);
    let fd = rustix::fs::openat(
        data_fd,
        control,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|errno| data.refusal(control, errno, true))?;
    let dir = Dir {
        on: DirOn::Os(fd),
        path,
    };
    dir.check_trusted(false)?;
    let DirOn::Os(dir_fd) = &dir.on else {
        unreachable!("opened on the OS just above")
    };
    let path = dir.join(name);
    let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::NONBLOCK;
    let fd = match rustix::fs::openat(dir_fd, name, flags, Mode::empty()) {
        Ok(fd) => fd,
        Err(Errno::NOENT) => return Ok(None),
        Err(errno) => return Err(dir.refusal(name, errno, false)),
    };
    let stat = rustix::fs::fstat(&fd).map_err(os(&path))?;
    check_file(&path, &meta_of(&stat))?;
    let mut bytes = Vec::new();
    fs::File::from(fd)
        .take(cap)
        .read_to_end(&mut bytes)
        .map_err(|source| FsError::Io { path, source })?;
    Ok(Some(bytes))
}

/// On a thread with a simulated file system installed, `path` opened in
/// it with `access` (its errors as the OS's); `None` on any other thread,
/// where the caller opens the OS file its own way.
pub(crate) fn open_if_simulated(path: &Path, access: Access) -> Option<io::Result<File>> {
    sim::current().map(|fs| fs.open(path, access).map(|file| File(FileOn::Sim(file))))
}

/// Read at most `cap` bytes of the regular file at `path`, opened
/// `O_NOFOLLOW` (a link there is refused, not followed); `None` when
/// missing. For readers that have a path and no [`Dir`] (the `journal`
/// control method).
///
/// # Errors
/// [`UnsafePath::Symlink`] / [`UnsafePath::NotAFile`]; [`FsError::Io`].
pub fn read_nofollow(path: &Path, cap: u64) -> Result<Option<Vec<u8>>, FsError> {
    if let Some(fs) = sim::current() {
        let file = match fs.open(path, Access::Read) {
            Ok(file) => File(FileOn::Sim(file)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(io_at(path)(e)),
        };
        if file.meta().map_err(io_at(path))?.kind != Kind::File {
            return Err(UnsafePath::NotAFile {
                path: path.to_path_buf(),
            }
            .into());
        }
        let mut bytes = Vec::new();
        file.take(cap)
            .read_to_end(&mut bytes)
            .map_err(io_at(path))?;
        return Ok(Some(bytes));
    }
    let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::NONBLOCK;
    let fd = match rustix::fs::open(path, flags, Mode::empty()) {
        Ok(fd) => fd,
        Err(Errno::NOENT) => return Ok(None),
        Err(Errno::LOOP) => {
            return Err(UnsafePath::Symlink {
                path: path.to_path_buf(),
            }
            .into());
        }
        Err(errno) => return Err(os(path)(errno)),
    };
    let stat = rustix::fs::fstat(&fd).map_err(os(path))?;
    if FileType::from_raw_mode(stat.st_mode) != FileType::RegularFile {
        return Err(UnsafePath::NotAFile {
            path: path.to_path_buf(),
        }
        .into());
    }
    let mut bytes = Vec::new();
    fs::File::from(fd)
        .take(cap)
        .read_to_end(&mut bytes)
        .map_err(io_at(path))?;
    Ok(Some(bytes))
}

/// How long [`try_lock_patiently`] keeps trying a lock it finds taken.
///
/// A child forked by any thread of this process holds a copy of every
/// descriptor until its `exec` closes the `O_CLOEXEC` ones: for that window
/// (microseconds, milliseconds on a loaded machine) it holds the locks of
/// this process's open files. That is a transient holder, not a second
/// daemon; a real holder is still reported, this much later.
pub const TRANSIENT_HOLDER_PATIENCE: Duration = Duration::from_secs(1);

/// The first pause between tries; it doubles up to [`MAX_LOCK_PAUSE`].
const FIRST_LOCK_PAUSE: Duration = Duration::from_millis(2);
const MAX_LOCK_PAUSE: Duration = Duration::from_millis(100);

/// `try_lock` on `file`, tried again with a doubling pause while it would
/// block, for at most [`TRANSIENT_HOLDER_PATIENCE`]: the one way steadfast
/// takes or probes a lock (the data-dir lock, the store lock and its probe),
/// so a forked child's copy of a descriptor never reads as another holder.
/// Blocking: call it on a blocking thread.
///
/// # Errors
/// [`fs::TryLockError::WouldBlock`] if the lock is still taken after the
/// patience; [`fs::TryLockError::Error`] at once for any other failure.
#[allow(clippy::disallowed_methods)] // OS files only (a simulated one returns above): a forked child's copy is waited out in real time
pub fn try_lock_patiently(file: &File) -> Result<(), fs::TryLockError> {
    if file.as_os().is_none() {
        // A simulated file: no forked child holds a copy of it.
        return file.try_lock();
    }
    let started = Instant::now();
    let mut pause = FIRST_LOCK_PAUSE;
    loop {
        match file.try_lock() {
            Err(fs::TryLockError::WouldBlock) => {
                let waited = started.elapsed();
                if waited >= TRANSIENT_HOLDER_PATIENCE {
                    return Err(fs::TryLockError::WouldBlock);
                }
                std::thread::sleep(pause.min(TRANSIENT_HOLDER_PATIENCE.saturating_sub(waited)));
                pause = (pause * 2).min(MAX_LOCK_PAUSE);
            }
            other => return other,
        }
    }
}
