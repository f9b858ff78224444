//! The [`Fingerprint`] of the declared file: equal exactly when the file
//! held the same bytes (or was unreadable for the same reason), taken before
//! a boot resolves and again when its outcome lands.
use super::*;

/// The fingerprint of a file's bytes as they were when it was taken.
///
/// Two fingerprints of the same path are equal exactly when the file held
/// the same bytes (up to a crc32c collision among same-length contents) or
/// was unreadable for the same reason both times. It is a comparison token
/// for one process, not a wire type.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Fingerprint(Repr);

#[derive(Clone, Copy, PartialEq, Eq, Hash)]
enum Repr {
    /// The file was read: its length and the crc32c of its bytes.
    Bytes { len: u64, crc: u32 },
    /// The file could not be read.
    Unreadable(Unreadable),
}

/// Why a fingerprinted file could not be read.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
enum Unreadable {
    /// The operating system's reason (`NotFound` for a missing file).
    Io(io::ErrorKind),
    /// Not a regular file: what it is instead.
    NotRegular(&'static str),
    /// Over [`MAX_CONFIG_BYTES`]: the length `fstat` gave.
    TooLarge(u64),
    /// The read did not finish within its deadline.
    TimedOut,
}

impl Unreadable {
    /// How a failed [`read_config_file`] shows in a fingerprint.
    fn of(error: &ConfigError) -> Self {
        match error {
            ConfigError::Missing { .. } => Self::Io(io::ErrorKind::NotFound),
            ConfigError::Read { source, .. } => Self::Io(source.kind()),
            ConfigError::NotRegular { kind, .. } => Self::NotRegular(kind),
            ConfigError::TooLarge { len, .. } => Self::TooLarge(*len),
            ConfigError::TimedOut { .. } => Self::TimedOut,
            ConfigError::Parse { .. }
            | ConfigError::MovesDataDir { .. }
            | ConfigError::Invalid(_)
            | ConfigError::Leaf { .. }
            | ConfigError::UnknownLeaves { .. } => Self::Io(io::ErrorKind::Other),
        }
    }
}

impl Fingerprint {
    /// The fingerprint of `bytes`, as [`Fingerprint::of_file`] would take it of
    /// a file holding them.
    pub fn of_bytes(bytes: &[u8]) -> Self {
        Self(Repr::Bytes {
            len: bytes.len() as u64,
            crc: crc32c::crc32c(bytes),
        })
    }

    /// The fingerprint of the file at `path` as it is now, read through
    /// [`read_config_file`] (the same bounded read a resolve makes). A
    /// missing or unreadable file — not a regular file, over the size cap —
    /// has a fingerprint of its own, distinct from that of any contents (an
    /// empty file included). Blocking: off an actor's handler, use
    /// [`Fingerprint::of_file_within`].
    pub fn of_file(path: &Path) -> Self {
        match read_config_file(path) {
            Ok(bytes) => Self::of_bytes(&bytes),
            Err(error) => Self(Repr::Unreadable(Unreadable::of(&error))),
        }
    }

    /// [`Fingerprint::of_file`] on a blocking thread, given up after
    /// `deadline` (a read that did not finish has a fingerprint of its own).
    pub async fn of_file_within(path: &Path, deadline: Duration) -> Self {
        let owned = path.to_path_buf();
        match within(deadline, move || Ok(Self::of_file(&owned))).await {
            Ok(fingerprint) => fingerprint,
            Err(_) => Self::timed_out(),
        }
    }

    /// The fingerprint of a read that did not finish within its deadline.
    pub(super) fn timed_out() -> Self {
        Self(Repr::Unreadable(Unreadable::TimedOut))
    }

    /// The fingerprint of a file that could not be read for `kind`.
    pub(super) fn unreadable(kind: io::ErrorKind) -> Self {
        Self(Repr::Unreadable(Unreadable::Io(kind)))
    }

    /// Whether the file could be read when this fingerprint was taken.
    pub fn is_readable(&self) -> bool {
        matches!(self.0, Repr::Bytes { .. })
    }
}

impl fmt::Debug for Fingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Repr::Bytes { len, crc } => write!(f, "Fingerprint({len} bytes, crc32c {crc:08x})"),
            Repr::Unreadable(why) => write!(f, "Fingerprint(unreadable: {why:?})"),
        }
    }
}
