//! The TCP transport's credential: a 32-byte token kept in a 0600 file, and
//! the fixed-size handshake that presents it before tarpc sees a byte
//! (`spec/control.md`, "TCP handshake"). The TLS transport
//! ([`super::TlsServerConfig`]) sends the same hello inside its session (or the
//! [`certificate_hello`] when the client certificate alone authorizes).
//!
//! Why plain TCP carries only a token and no TLS: it is meant for the
//! machine it runs on (the Unix socket) or a loopback port (a container
//! host, a local agent). A shared secret in a private file proves the
//! caller may read that file, which is the same trust the Unix socket's
//! mode expresses. It does **not** encrypt or authenticate the traffic
//! that follows: on a non-loopback address anyone on the path can read the
//! token and the snapshots and replay the token. So TCP binds loopback
//! unless told otherwise, and [`super::serve_tcp`] logs a warning when
//! told otherwise; reach a remote daemon over TLS (`serve_tls`), or a
//! tunnel.
//!
//! Invariants, and the tests that check them:
//! - A token file readable or writable by group or others, or owned by
//!   another uid, is refused with [`TokenError::TooOpen`] /
//!   [`TokenError::NotOwner`] before its content is read.
//!   `tests/it/control_tcp.rs::a_token_file_with_a_loose_mode_is_refused`.
//! - A token file is opened `O_NONBLOCK` and must be a regular file of at
//!   most 256 bytes ([`TokenError::NotAFile`], [`TokenError::TooLarge`]):
//!   a FIFO or a device at the path neither hangs nor floods the reader.
//!   `tests/it/ctl_output.rs::the_ctl_refuses_files_it_cannot_read_safely`.
//! - A new token file is created with mode 0600 at creation (`O_EXCL`, no
//!   chmod afterwards), written, fsynced, and its directory fsynced.
//!   `auth::tests::a_created_token_file_is_private_and_reads_back`.
//! - The comparison takes the same time whatever bytes differ ([`Token`]'s
//!   `matches`: every byte is visited, no early exit). The length is fixed
//!   and public, so only the content is secret.
//! - The handshake is exactly [`HELLO_LEN`] bytes read into a stack array
//!   under a deadline: a silent or hostile peer can neither hold the
//!   connection past the deadline nor make the server allocate.
//!   `tests/it/control_tcp.rs::a_hostile_handshake_is_closed_and_the_server_still_answers`.

use std::fmt;
use std::fs;
use std::io::{self, Read, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// The token's length in bytes (64 hex digits in its file).
pub const TOKEN_LEN: usize = 32;

/// The handshake's magic: "steadfast control, token handshake".
pub const HELLO_MAGIC: [u8; 4] = *b"SFCT";

/// The handshake's version.
pub const HELLO_VERSION: u8 = 1;

/// The hello's version when the client presents no token, only its TLS
/// client certificate (the TLS transport only; the token bytes are zero).
pub const CERT_HELLO_VERSION: u8 = 2;

/// The client's hello: magic (4), version (1), three zero bytes, token (32).
pub const HELLO_LEN: usize = 8 + TOKEN_LEN;

/// The server's one-byte answer: accepted, frames may follow.
pub const ANSWER_ACCEPTED: u8 = 0;
/// The server's one-byte answer: wrong magic, version or token; it closes.
pub const ANSWER_REFUSED: u8 = 1;
/// The server's one-byte answer: too many connections (in all, or from this
/// address); it closes.
pub const ANSWER_BUSY: u8 = 2;

/// The longest a token file may be (64 hex digits and some whitespace).
const MAX_FILE_LEN: u64 = 256;

/// The hello of a TLS client that presents no token, only its certificate:
/// magic, [`CERT_HELLO_VERSION`], then 35 zero bytes.
#[must_use]
pub fn certificate_hello() -> [u8; HELLO_LEN] {
    let mut hello = [0u8; HELLO_LEN];
    hello[..4].copy_from_slice(&HELLO_MAGIC);
    hello[4] = CERT_HELLO_VERSION;
    hello
}

/// Whether `hello` is [`certificate_hello`] exactly.
#[must_use]
pub fn is_certificate_hello(hello: &[u8; HELLO_LEN]) -> bool {
    *hello == certificate_hello()
}

/// Why a token could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    /// The file could not be opened, read or written.
    #[error("the token file {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// What failed.
        #[source]
        source: io::Error,
    },
    /// The file can be read or written by group or others.
    #[error("the token file {path} has mode {mode:o}; it must be 0600 (chmod 600 it)")]
    TooOpen {
        /// The file.
        path: PathBuf,
        /// Its permission bits.
        mode: u32,
    },
    /// The file belongs to another user.
    #[error("the token file {path} is owned by uid {owner}, not by this user ({me})")]
    NotOwner {
        /// The file.
        path: PathBuf,
        /// Its owner.
        owner: u32,
        /// This process's effective uid.
        me: u32,
    },
    /// The file is not a regular file.
    #[error("the token file {0} is not a regular file")]
    NotAFile(PathBuf),
    /// The file is far longer than a token's 64 hex digits; it was not
    /// read.
    #[error(
        "the token file {path} holds {len} bytes, over the {limit}-byte limit for a token file (64 hex digits)"
    )]
    TooLarge {
        /// The file.
        path: PathBuf,
        /// Its length (at least this much).
        len: u64,
        /// The limit.
        limit: u64,
    },
    /// The content is not 64 hex digits.
    #[error("the token file {0} does not hold a token (64 hex digits)")]
    Malformed(PathBuf),
}

/// A control-plane token: 32 secret bytes. Its `Debug` does not print them.
#[derive(Clone, PartialEq, Eq)]
pub struct Token([u8; TOKEN_LEN]);

impl fmt::Debug for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Token(…)")
    }
}

fn io_at(path: &Path) -> impl FnOnce(io::Error) -> TokenError + '_ {
    move |source| TokenError::Io {
        path: path.to_owned(),
        source,
    }
}

impl Token {
    /// A token from its bytes.
    #[must_use]
    pub const fn from_bytes(bytes: [u8; TOKEN_LEN]) -> Self {
        Self(bytes)
    }

    /// A fresh random token (from the operating system's generator).
    ///
    /// # Errors
    /// When the system has no randomness to give.
    pub fn generate() -> io::Result<Self> {
        let mut bytes = [0u8; TOKEN_LEN];
        getrandom::fill(&mut bytes).map_err(io::Error::other)?;
        Ok(Self(bytes))
    }

    /// The token as 64 lowercase hex digits (its file's content).
    #[must_use]
    pub fn to_hex(&self) -> String {
        use fmt::Write as _;
        let mut out = String::with_capacity(TOKEN_LEN * 2);
        for byte in self.0 {
            let _ = write!(out, "{byte:02x}");
        }
        out
    }

    /// Parse 64 hex digits (surrounding whitespace ignored).
    #[must_use]
    pub fn from_hex(text: &str) -> Option<Self> {
        let text = text.trim().as_bytes();
        if text.len() != TOKEN_LEN * 2 {
            return None;
        }
        let digit = |c: u8| {
            char::from(c)
                .to_digit(16)
                .and_then(|d| u8::try_from(d).ok())
        };
        let mut bytes = [0u8; TOKEN_LEN];
        for (byte, pair) in bytes.iter_mut().zip(text.chunks_exact(2)) {
            *byte = (digit(pair[0])? << 4) | digit(pair[1])?;
        }
        Some(Self(bytes))
    }

    /// Read the token from `path`, refusing a file that group or others
    /// may read or write, or that another user owns, or that is not a
    /// regular file of at most 256 bytes. Opened `O_NONBLOCK`, so a FIFO
    /// at the path is refused, not waited on.
    ///
    /// # Errors
    /// [`TokenError`]: cannot read it, not a file, too large, too open, not
    /// ours, not a token.
    pub fn read_file(path: impl AsRef<Path>) -> Result<Self, TokenError> {
        use rustix::fs::{Mode, OFlags};
        let path = path.as_ref();
        let flags = OFlags::RDONLY | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC;
        let file = fs::File::from(
            rustix::fs::open(path, flags, Mode::empty()).map_err(|e| io_at(path)(e.into()))?,
        );
        // The checks are on the opened file, so they hold for what is read.
        let meta = file.metadata().map_err(io_at(path))?;
        if !meta.is_file() {
            return Err(TokenError::NotAFile(path.to_owned()));
        }
        let too_large = |len: u64| TokenError::TooLarge {
            path: path.to_owned(),
            len,
            limit: MAX_FILE_LEN,
        };
        if meta.len() > MAX_FILE_LEN {
            return Err(too_large(meta.len()));
        }
        let mode = meta.mode() & 0o7777;
        if mode & 0o077 != 0 {
            return Err(TokenError::TooOpen {
                path: path.to_owned(),
                mode,
            });
        }
        let me = rustix::process::geteuid().as_raw();
        if meta.uid() != me {
            return Err(TokenError::NotOwner {
                path: path.to_owned(),
                owner: meta.uid(),
                me,
            });
        }
        let mut text = String::new();
        // One byte more than allowed, so a longer file is seen as such
        // rather than cut to a prefix that might parse.
        file.take(MAX_FILE_LEN + 1)
            .read_to_string(&mut text)
            .map_err(|error| match error.kind() {
                io::ErrorKind::InvalidData => TokenError::Malformed(path.to_owned()),
                _ => io_at(path)(error),
            })?;
        if text.len() as u64 > MAX_FILE_LEN {
            return Err(too_large(text.len() as u64));
        }
        Self::from_hex(&text).ok_or_else(|| TokenError::Malformed(path.to_owned()))
    }

    /// Create a new token file at `path` holding a fresh token: mode 0600
    /// from creation, never over an existing file (`O_EXCL`), fsynced with
    /// its directory.
    ///
    /// # Errors
    /// [`TokenError::Io`]: the file exists, or cannot be written.
    pub fn create_file(path: impl AsRef<Path>) -> Result<Self, TokenError> {
        let path = path.as_ref();
        let token = Self::generate().map_err(io_at(path))?;
        let mut file = fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(path)
            .map_err(io_at(path))?;
        let written = file
            .write_all(format!("{}\n", token.to_hex()).as_bytes())
            .and_then(|()| file.sync_all());
        if let Err(error) = written {
            let _ = fs::remove_file(path);
            return Err(io_at(path)(error));
        }
        let dir = match path.parent() {
            Some(dir) if !dir.as_os_str().is_empty() => dir,
            _ => Path::new("."),
        };
        fs::File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(io_at(dir))?;
        Ok(token)
    }

    /// Whether `other` is this token, in time that does not depend on where
    /// they differ: every byte is compared and the differences OR-ed
    /// together, with no early exit; `black_box` keeps the optimiser from
    /// adding one. A hand loop rather than a crate: the length is fixed,
    /// so the whole of constant-time comparison is these four lines.
    #[must_use]
    pub fn matches(&self, other: &[u8; TOKEN_LEN]) -> bool {
        let mut diff = 0u8;
        for (a, b) in self.0.iter().zip(other) {
            diff |= std::hint::black_box(a ^ b);
        }
        std::hint::black_box(diff) == 0
    }

    /// The client's hello carrying this token ([`HELLO_LEN`] bytes).
    #[must_use]
    pub fn hello(&self) -> [u8; HELLO_LEN] {
        let mut hello = [0u8; HELLO_LEN];
        hello[..4].copy_from_slice(&HELLO_MAGIC);
        hello[4] = HELLO_VERSION;
        hello[8..].copy_from_slice(&self.0);
        hello
    }

    /// Whether `hello` is a well-formed hello carrying this token.
    #[must_use]
    pub fn accepts(&self, hello: &[u8; HELLO_LEN]) -> bool {
        let mut presented = [0u8; TOKEN_LEN];
        presented.copy_from_slice(&hello[8..]);
        // The token is compared even when the header is wrong, so the
        // answer's timing says nothing about which part was wrong.
        let token_ok = self.matches(&presented);
        let header_ok =
            hello[..4] == HELLO_MAGIC && hello[4] == HELLO_VERSION && hello[5..8] == [0; 3];
        token_ok & header_ok
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn hex_round_trips_and_rejects_garbage() {
        let token = Token::from_bytes([0xAB; TOKEN_LEN]);
        let hex = token.to_hex();
        assert_eq!(hex.len(), 64);
        assert_eq!(Token::from_hex(&format!("  {hex}\n")), Some(token));
        assert_eq!(Token::from_hex(&hex[..62]), None);
        assert_eq!(Token::from_hex(&format!("{}zz", &hex[..62])), None);
        assert_eq!(Token::from_hex(""), None);
        assert_eq!(Token::from_hex(&"é".repeat(32)), None);
    }

    #[test]
    fn matches_only_the_same_bytes() {
        let token = Token::from_bytes([7; TOKEN_LEN]);
        assert!(token.matches(&[7; TOKEN_LEN]));
        for i in 0..TOKEN_LEN {
            let mut other = [7; TOKEN_LEN];
            other[i] ^= 1;
            assert!(!token.matches(&other), "differs at {i}");
        }
    }

    #[test]
    fn a_hello_is_accepted_only_whole() {
        let token = Token::from_bytes([9; TOKEN_LEN]);
        let hello = token.hello();
        assert!(token.accepts(&hello));
        for i in 0..HELLO_LEN {
            let mut bad = hello;
            bad[i] ^= 0x40;
            assert!(!token.accepts(&bad), "byte {i} flipped");
        }
        assert!(!Token::from_bytes([8; TOKEN_LEN]).accepts(&hello));
        assert_eq!(format!("{token:?}"), "Token(…)");
    }

    #[test]
    fn a_created_token_file_is_private_and_reads_back() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let path = tmp.path().join("token");
        let token = Token::create_file(&path).expect("created");
        let mode = fs::metadata(&path).expect("stat").permissions().mode() & 0o7777;
        assert_eq!(mode, 0o600);
        assert_eq!(Token::read_file(&path).expect("reads"), token);
        let again = Token::create_file(&path).expect_err("never over an existing file");
        assert!(matches!(again, TokenError::Io { .. }), "{again:?}");
        assert_ne!(Token::generate().expect("random"), token);
    }

    #[test]
    fn a_loose_or_malformed_file_is_refused() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let path = tmp.path().join("token");
        fs::write(&path, format!("{}\n", Token::from_bytes([1; 32]).to_hex())).expect("write");
        fs::set_permissions(&path, fs::Permissions::from_mode(0o640)).expect("chmod");
        let loose = Token::read_file(&path).expect_err("group-readable");
        assert!(
            matches!(loose, TokenError::TooOpen { mode: 0o640, .. }),
            "{loose:?}"
        );
        assert!(loose.to_string().contains("chmod 600"), "{loose}");
        fs::set_permissions(&path, fs::Permissions::from_mode(0o600)).expect("chmod");
        Token::read_file(&path).expect("private now");
        let padded = format!("{}{}", Token::from_bytes([1; 32]).to_hex(), " ".repeat(300));
        fs::write(&path, padded).expect("write");
        let long = Token::read_file(&path).expect_err("longer than a token file may be");
        assert!(
            matches!(long, TokenError::TooLarge { limit: 256, .. }),
            "{long:?}"
        );
        fs::write(&path, "not a token").expect("write");
        let bad = Token::read_file(&path).expect_err("malformed");
        assert!(matches!(bad, TokenError::Malformed(_)), "{bad:?}");
        let missing = Token::read_file(tmp.path().join("nothing")).expect_err("missing");
        assert!(matches!(missing, TokenError::Io { .. }), "{missing:?}");
        let dir = Token::read_file(tmp.path()).expect_err("a directory");
        assert!(
            matches!(dir, TokenError::NotAFile(_) | TokenError::TooOpen { .. }),
            "{dir:?}"
        );
    }
}
