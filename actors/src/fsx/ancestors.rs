//! The path to a trusted file or directory, checked as OpenSSH's
//! `StrictModes` and sudo check theirs: a directory is only as safe as every
//! directory above it, since whoever may change an ancestor may swap what
//! lies below it (rename the data dir away and put a link in its place).
//!
//! [`check_path`] walks the path from `/` one name at a time, with `lstat`,
//! resolving links itself:
//! - every directory on the way is owned by root or this process's euid and
//!   writable by neither group nor others, unless it is sticky (`/tmp`); a
//!   directory its group may write counts as closed when that group is this
//!   process's own effective gid (a Kubernetes volume under `fsGroup`,
//!   `2775` with the daemon's `runAsGroup`: only the daemon's own group may
//!   write it);
//! - in a sticky directory others may write, the entry taken from it (a
//!   directory, a link, the file itself) must be root's or this euid's: the
//!   sticky bit keeps others from renaming or removing it, not from having
//!   made it;
//! - a link is followed only where it stands in such a trusted place, so its
//!   target was chosen by root or this euid; the walk then goes on through
//!   the target, which is checked the same way.
//!
//! Once the walk has passed, nobody but root and this euid can change any
//! name on the path, so opening the path afterwards opens what was checked.
//! The walk stops at the first name that does not exist (what is missing is
//! created under a directory already checked). The last name's own owner
//! and mode are the caller's to judge ([`Walked::last`]): a data dir is
//! checked through its descriptor, a `replace` candidate by
//! [`check_executable`].

use std::collections::VecDeque;
use std::ffi::OsString;
use std::fs;
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::{Component, Path, PathBuf};

use super::{FsError, UnsafePath, euid};

/// Links followed on one walk before it is refused as a loop (Linux's
/// `MAXSYMLINKS`).
const MAX_LINKS: usize = 40;

/// The sticky bit (`S_ISVTX`).
const STICKY: u32 = 0o1000;

/// What a walk found at its end.
#[derive(Debug)]
pub struct Walked {
    /// The path with every link resolved (absolute).
    pub resolved: PathBuf,
    /// The last name's metadata (links resolved); `None` when it, or a
    /// directory above it, does not exist yet.
    pub last: Option<fs::Metadata>,
}

/// Check every directory and link on the way to `path` (relative paths from
/// the working directory, whose own path is checked too); see the module
/// doc for the rule. The last name's owner and mode are not judged here,
/// only how it was reached.
///
/// # Errors
/// [`UnsafePath::UntrustedAncestor`], [`UnsafePath::WritableAncestor`] or
/// [`UnsafePath::ForeignEntry`] naming `path` and the ancestor or entry at
/// fault; [`FsError::Io`] when a name on the way cannot be read, or links
/// loop.
pub fn check_path(path: &Path) -> Result<Walked, FsError> {
    let io_at = |at: &Path, source: io::Error| FsError::Io {
        path: at.to_path_buf(),
        source,
    };
    let absolute = if path.is_absolute() {
        path.to_path_buf()
    } else {
        std::env::current_dir()
            .map_err(|source| io_at(path, source))?
            .join(path)
    };
    let mut pending: VecDeque<OsString> = names(&absolute);
    let mut at = PathBuf::from("/");
    let root = fs::symlink_metadata(&at).map_err(|source| io_at(&at, source))?;
    let mut open_to_others = check_ancestor(path, &at, &root)?;
    let mut links = 0;
    while let Some(name) = pending.pop_front() {
        if name == ".." {
            at.pop();
            let meta = fs::symlink_metadata(&at).map_err(|source| io_at(&at, source))?;
            open_to_others = check_ancestor(path, &at, &meta)?;
            continue;
        }
        let next = at.join(&name);
        let meta = match fs::symlink_metadata(&next) {
            Ok(meta) => meta,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return Ok(Walked {
                    resolved: join_rest(next, pending),
                    last: None,
                });
            }
            Err(source) => return Err(io_at(&next, source)),
        };
        if open_to_others && !trusted_owner(meta.uid()) {
            return Err(UnsafePath::ForeignEntry {
                path: path.to_path_buf(),
                entry: next,
                owner: meta.uid(),
                expected: euid(),
            }
            .into());
        }
        let kind = meta.file_type();
        if kind.is_symlink() {
            links += 1;
            if links > MAX_LINKS {
                return Err(io_at(path, io::Error::from_raw_os_error(rustix_eloop())));
            }
            let target = fs::read_link(&next).map_err(|source| io_at(&next, source))?;
            if target.is_absolute() {
                at = PathBuf::from("/");
                // `/` was checked at the start: it is not open to others.
                open_to_others = false;
            }
            for (i, name) in names(&target).into_iter().enumerate() {
                pending.insert(i, name);
            }
            continue;
        }
        at = next;
        if !kind.is_dir() || pending.is_empty() {
            // The last name (or a file where a directory should be, which
            // the open that follows refuses): the caller's to judge.
            let last = if pending.is_empty() { Some(meta) } else { None };
            return Ok(Walked {
                resolved: join_rest(at, pending),
                last,
            });
        }
        open_to_others = check_ancestor(path, &at, &meta)?;
    }
    let last = fs::symlink_metadata(&at).ok();
    Ok(Walked { resolved: at, last })
}

/// Check a candidate executable at `path` (a `replace`'s new binary): the
/// path to it as [`check_path`] checks it, and the file itself a regular
/// file owned by root or this euid that neither group nor others can write.
///
/// # Errors
/// As [`check_path`]; [`UnsafePath::ForeignOwner`] or
/// [`UnsafePath::WritableByOthers`] for the file; [`UnsafePath::NotAFile`]
/// when it is not a regular file; `NotFound` (as [`FsError::Io`]) when it
/// does not exist. Its metadata (links resolved) when it passes.
pub fn check_executable(path: &Path) -> Result<fs::Metadata, FsError> {
    let walked = check_path(path)?;
    let Some(meta) = walked.last else {
        return Err(FsError::Io {
            path: path.to_path_buf(),
            source: io::ErrorKind::NotFound.into(),
        });
    };
    if !meta.file_type().is_file() {
        return Err(UnsafePath::NotAFile {
            path: path.to_path_buf(),
        }
        .into());
    }
    if !trusted_owner(meta.uid()) {
        return Err(UnsafePath::ForeignOwner {
            path: walked.resolved,
            owner: meta.uid(),
            expected: euid(),
        }
        .into());
    }
    let mode = meta.mode() & 0o7777;
    if mode & 0o022 != 0 {
        return Err(UnsafePath::WritableByOthers {
            path: walked.resolved,
            mode,
        }
        .into());
    }
    Ok(meta)
}

/// This process's effective gid.
fn egid() -> u32 {
    rustix::process::getegid().as_raw()
}

/// Root or this process's euid.
fn trusted_owner(uid: u32) -> bool {
    uid == 0 || uid == euid()
}

/// Check a directory on the way to `path`; whether others may add entries
/// to it (sticky and writable by group or others), so an entry taken from
/// it must be trusted by its owner.
fn check_ancestor(path: &Path, dir: &Path, meta: &fs::Metadata) -> Result<bool, FsError> {
    if !trusted_owner(meta.uid()) {
        return Err(UnsafePath::UntrustedAncestor {
            path: path.to_path_buf(),
            ancestor: dir.to_path_buf(),
            owner: meta.uid(),
            expected: euid(),
        }
        .into());
    }
    let mode = meta.mode() & 0o7777;
    let writable = mode & 0o002 != 0 || (mode & 0o020 != 0 && meta.gid() != egid());
    if writable && mode & STICKY == 0 {
        return Err(UnsafePath::WritableAncestor {
            path: path.to_path_buf(),
            ancestor: dir.to_path_buf(),
            mode,
        }
        .into());
    }
    Ok(writable)
}

/// `path`'s names in order, `.` dropped and `..` kept (resolved by the walk
/// against what it has resolved so far, which holds no link).
fn names(path: &Path) -> VecDeque<OsString> {
    path.components()
        .filter_map(|component| match component {
            Component::Normal(name) => Some(name.to_os_string()),
            Component::ParentDir => Some(OsString::from("..")),
            Component::RootDir | Component::CurDir | Component::Prefix(_) => None,
        })
        .collect()
}

/// `at` with the names not walked yet.
fn join_rest(at: PathBuf, rest: VecDeque<OsString>) -> PathBuf {
    rest.into_iter().fold(at, |path, name| path.join(name))
}

/// `ELOOP`, the OS's word for too many links.
fn rustix_eloop() -> i32 {
    rustix::io::Errno::LOOP.raw_os_error()
}
