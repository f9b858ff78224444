//! Reading the declared file ([`read_config_file`]) so that no path can
//! make the read block or run without bound: regular files only, opened
//! non-blocking, at most [`MAX_CONFIG_BYTES`].
use super::*;
use std::io::Read as _;

/// The bytes of the config file at `path`, read so that no path can make
/// the read block or run without bound: the one read both a resolve and
/// [`Fingerprint::of_file`] make.
///
/// - Opened `O_NONBLOCK` (a FIFO's open does not wait for a writer) and
///   `O_NOCTTY`; a symlink is followed (this is the operator's own file,
///   not the control directory).
/// - The *opened* file is checked with `fstat` (not the path, which could be
///   swapped in between): anything but a regular file is
///   [`ConfigError::NotRegular`].
/// - Over [`MAX_CONFIG_BYTES`] (by `fstat`, or by what a read finds if it
///   grew since) is [`ConfigError::TooLarge`]; at most one byte over the cap
///   is ever read.
/// - A missing file is [`ConfigError::Missing`]; any other failure is
///   [`ConfigError::Read`].
///
/// Checked by `tests::a_config_path_that_is_not_a_regular_file_is_refused`,
/// `tests::a_config_over_the_cap_is_refused_unread` and, over real
/// processes, `tests/it/config_files.rs`.
pub fn read_config_file(path: &Path) -> Result<Vec<u8>, ConfigError> {
    use rustix::fs::{Mode, OFlags};

    let read_error = |source: io::Error| ConfigError::Read {
        path: path.to_path_buf(),
        source,
    };
    // A simulation's thread reads its simulated disk, with the same checks.
    if let Some(opened) = crate::fsx::open_if_simulated(path, crate::fsx::Access::Read) {
        let file = match opened {
            Ok(file) => file,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return Err(ConfigError::Missing {
                    path: path.to_path_buf(),
                });
            }
            Err(e) => return Err(read_error(e)),
        };
        let meta = file.meta().map_err(read_error)?;
        let kind = match meta.kind {
            crate::fsx::Kind::File => return read_bounded(file, meta.len, path),
            crate::fsx::Kind::Dir => "directory",
            crate::fsx::Kind::Symlink => "symlink",
            crate::fsx::Kind::Other => "special file",
        };
        return Err(ConfigError::NotRegular {
            path: path.to_path_buf(),
            kind,
        });
    }
    let flags = OFlags::RDONLY | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC;
    let fd = match rustix::fs::open(path, flags, Mode::empty()) {
        Ok(fd) => fd,
        Err(rustix::io::Errno::NOENT) => {
            return Err(ConfigError::Missing {
                path: path.to_path_buf(),
            });
        }
        // A socket cannot be opened (ENXIO): name it for what it is.
        Err(errno @ rustix::io::Errno::NXIO) => {
            return Err(match std::fs::metadata(path) {
                Ok(meta) if !meta.is_file() => ConfigError::NotRegular {
                    path: path.to_path_buf(),
                    kind: kind_of(meta.file_type()),
                },
                _ => read_error(errno.into()),
            });
        }
        Err(errno) => return Err(read_error(errno.into())),
    };
    let file = std::fs::File::from(fd);
    let meta = file.metadata().map_err(read_error)?;
    if !meta.is_file() {
        return Err(ConfigError::NotRegular {
            path: path.to_path_buf(),
            kind: kind_of(meta.file_type()),
        });
    }
    read_bounded(file, meta.len(), path)
}

/// At most [`MAX_CONFIG_BYTES`] of the regular file `file` at `path`,
/// `len` long by its `fstat`: [`ConfigError::TooLarge`] past them (by
/// `len`, or by what the read finds if it grew since).
fn read_bounded(file: impl io::Read, len: u64, path: &Path) -> Result<Vec<u8>, ConfigError> {
    let too_large = |len: u64| ConfigError::TooLarge {
        path: path.to_path_buf(),
        len,
        limit: MAX_CONFIG_BYTES,
    };
    if len > MAX_CONFIG_BYTES {
        return Err(too_large(len));
    }
    let mut bytes = Vec::with_capacity(usize::try_from(len).unwrap_or(0));
    file.take(MAX_CONFIG_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|source| ConfigError::Read {
            path: path.to_path_buf(),
            source,
        })?;
    if bytes.len() as u64 > MAX_CONFIG_BYTES {
        return Err(too_large(bytes.len() as u64));
    }
    Ok(bytes)
}

/// What a file that is not a regular file is, for an error message.
fn kind_of(file_type: std::fs::FileType) -> &'static str {
    use std::os::unix::fs::FileTypeExt as _;
    if file_type.is_dir() {
        "directory"
    } else if file_type.is_fifo() {
        "fifo"
    } else if file_type.is_char_device() {
        "character device"
    } else if file_type.is_block_device() {
        "block device"
    } else if file_type.is_socket() {
        "socket"
    } else if file_type.is_symlink() {
        "symlink"
    } else {
        "special file"
    }
}

/// The declared file `path` made absolute, and its parent directory, which
/// the watch is made on: the one check both a supervisor's start (before
/// its data dir is opened, so a path that can never be watched never
/// touches it) and the watcher's `pre_start` make.
///
/// # Errors
/// Naming the file and why: not a file path (it ends in `..` or `/`), or
/// its parent is missing or not a directory (`--config FILE/x`, a path
/// under a regular file), or cannot be read.
pub fn watchable(path: &Path) -> Result<(PathBuf, PathBuf), String> {
    let file = std::path::absolute(path)
        .map_err(|e| format!("cannot watch config file {}: {e}", path.to_string_lossy()))?;
    let (Some(parent), Some(_)) = (file.parent(), file.file_name()) else {
        return Err(format!("cannot watch {}: not a file path", file.display()));
    };
    let parent = parent.to_path_buf();
    let is_dir = std::fs::metadata(&parent).and_then(|meta| {
        if meta.is_dir() {
            Ok(())
        } else {
            Err(std::io::Error::from(std::io::ErrorKind::NotADirectory))
        }
    });
    if let Err(e) = is_dir {
        return Err(format!(
            "cannot watch directory {} (for config file {}): {e}",
            parent.display(),
            file.display()
        ));
    }
    Ok((file, parent))
}
