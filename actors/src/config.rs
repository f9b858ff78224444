//! The effective config of a steadfast daemon, and how it is resolved.
//!
//! This file owns the config *data*: the [`ConfigSource`] a boot resolves
//! through, the [`TomlFileSource`] that layers defaults < the declared file <
//! the override tier into one `toml::Table` (the service deserializes its own
//! typed struct from it), the [`Fingerprint`] of the declared file, the
//! data-dir guard and the leaf diff. Watching the file lives in
//! `actors/src/config_watcher.rs`; deciding what a change means lives in the lifecycle
//! machine.
//!
//! # Invariants
//! - **A change is never lost to timing.** [`Fingerprint::of_file`] differs
//!   whenever the file's bytes differ (or it appeared, vanished or became
//!   unreadable), so a supervisor that fingerprints the declared file just
//!   before a boot resolves, and again when a *hold* failure lands or the
//!   runtime comes up, retries a fix (or applies a change) written mid-boot
//!   even though the watcher's event was refused. A
//!   resolve that succeeds reports the fingerprint of the very bytes it parsed.
//!   Checked by `tests::fingerprint_follows_the_bytes`,
//!   `tests::a_missing_file_has_its_own_fingerprint`,
//!   `tests::the_resolved_fingerprint_is_of_the_bytes_parsed` and, over real
//!   files, `config::a_fix_written_during_a_failing_resolve_changes_the_fingerprint`,
//!   `config::a_boot_fingerprints_the_file_before_its_source_reads_it` and
//!   `supervisor::a_change_that_lands_during_a_successful_boot_is_applied`.
//! - **Tiers merge deeply, highest wins**: defaults < declared file < override
//!   tier; tables merge key by key, anything else (arrays included) replaces.
//!   Checked by `tests::tiers_merge_deeply_in_order`,
//!   `tests::overrides_set_unset_and_list`, `tests::an_override_replaces_a_leaf_with_a_table`.
//! - **The data dir is fixed for the daemon's life**: a config whose top-level
//!   `data_dir` names another directory is refused with an error that names
//!   `data_dir`. Checked by `tests::a_config_that_moves_the_data_dir_is_refused`
//!   and `tests::the_same_data_dir_spelled_differently_is_accepted`.
//! - **No path can make a read block or run without bound**: every read of
//!   the declared file (a resolve, [`Fingerprint::of_file`], kvd's launch
//!   read) is [`read_config_file`]: opened `O_NONBLOCK`, `fstat` of the
//!   opened fd, regular files only (a symlink to one is fine), at most
//!   [`MAX_CONFIG_BYTES`]; anything else is a typed error naming the path.
//!   Resolves and fingerprints taken by the tree run on a blocking thread
//!   under [`RESOLVE_DEADLINE`] ([`ConfigSource::resolve_within`],
//!   [`Fingerprint::of_file_within`]); only a source that reads nothing
//!   ([`ConfigSource::in_place`]: a fixed table, defaults without a
//!   declared file) resolves on the caller's task. Checked by
//!   `tests::a_config_path_that_is_not_a_regular_file_is_refused`,
//!   `tests::a_config_over_the_cap_is_refused_unread`,
//!   `config::a_source_that_blocks_is_given_up_at_the_deadline` and, over
//!   real kvd processes, `tests/config_files.rs`.
//! - **A parse error says where**: it names the file and toml's line and
//!   column. Checked by `tests::a_parse_error_names_the_file_and_the_line`.
//! - **The leaf diff is exact and sorted**: [`changed_leaves`] lists every leaf
//!   that changed, appeared or disappeared, arrays as leaves. Checked by
//!   `tests::changed_leaves_lists_every_changed_leaf_sorted`.
//!
//! # Leaf paths
//! A leaf is named by its dotted path (`server.listen`). A key that is not a
//! bare TOML key (`[A-Za-z0-9_-]+`) is written in double quotes
//! (`labels."app.kubernetes.io/name"`); a key containing `"` cannot be named.

use std::collections::BTreeMap;
use std::fmt;
use std::io;
use std::path::{Component, Path, PathBuf};
use std::sync::{Arc, PoisonError, RwLock};
use std::time::Duration;

use serde::de::DeserializeOwned;
use toml::{Table, Value};

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
    fn timed_out() -> Self {
        Self(Repr::Unreadable(Unreadable::TimedOut))
    }

    /// The fingerprint of a file that could not be read for `kind`.
    fn unreadable(kind: io::ErrorKind) -> Self {
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

/// Why a config did not resolve. Every variant is a *hold* failure for a
/// boot: retrying on a timer would read the same thing again.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// A tier is not valid TOML. `path` is `None` for the embedded defaults;
    /// `message` carries toml's line, column and message.
    #[error("cannot parse {}: {message}", origin(path.as_deref()))]
    Parse {
        /// The file that failed to parse, `None` for the embedded defaults.
        path: Option<PathBuf>,
        /// Where and why, from toml (`line 3, column 7: invalid key`).
        message: String,
    },
    /// The declared file exists (or is required) but could not be read.
    #[error("cannot read {}: {source}", path.display())]
    Read {
        /// The declared file.
        path: PathBuf,
        /// The operating system's reason.
        source: io::Error,
    },
    /// The declared file does not exist (and was not declared optional).
    #[error(
        "config file {} does not exist; create it, or point the daemon at the file it should read",
        path.display()
    )]
    Missing {
        /// The declared file.
        path: PathBuf,
    },
    /// The declared path is not a regular file (a FIFO, a device, a
    /// directory, a socket): reading it could block or never end.
    #[error(
        "config file {} is a {kind}, not a regular file; point the config at a regular file (a symlink to one is fine)",
        path.display()
    )]
    NotRegular {
        /// The declared file.
        path: PathBuf,
        /// What it is instead (`fifo`, `character device`, `directory`, ...).
        kind: &'static str,
    },
    /// The declared file is over the size cap; it was not read.
    #[error(
        "config file {} holds {len} bytes, over the {limit}-byte (1 MiB) limit for a config file; make it smaller",
        path.display()
    )]
    TooLarge {
        /// The declared file.
        path: PathBuf,
        /// Its length when it was looked at (at least this much).
        len: u64,
        /// The cap, [`MAX_CONFIG_BYTES`].
        limit: u64,
    },
    /// Resolving did not finish within its deadline (a read that blocks: a
    /// hung file system, a config source that waits); it was given up on.
    #[error(
        "resolving the config did not finish within {after:?}; check that the declared file (and whatever the config source reads) can be read without blocking"
    )]
    TimedOut {
        /// The deadline it ran past.
        after: Duration,
    },
    /// The config names a `data_dir` other than the one the daemon holds.
    /// The data dir is fixed for the life of the daemon.
    #[error(
        "config moves data_dir to {} but this daemon holds {}; the data dir is fixed for the life of the daemon",
        configured.display(),
        actual.display()
    )]
    MovesDataDir {
        /// The `data_dir` the config names.
        configured: PathBuf,
        /// The data dir the daemon holds.
        actual: PathBuf,
    },
    /// The config (or an override) is well-formed TOML but not acceptable.
    #[error("invalid config: {0}")]
    Invalid(String),
    /// The config does not deserialize into the service's config type.
    #[error("invalid config: {leaf}: {reason}")]
    Leaf {
        /// The dotted leaf that does not fit (`.` for the config as a whole).
        leaf: String,
        /// Why, from the config type's deserializer.
        reason: String,
    },
    /// The config holds leaves the service's config type does not know.
    #[error("invalid config: unknown leaf {}", .leaves.join(", "))]
    UnknownLeaves {
        /// The dotted leaves, in the order they were met.
        leaves: Vec<String>,
    },
}

/// Names where a parse error came from.
fn origin(path: Option<&Path>) -> String {
    match path {
        Some(path) => path.display().to_string(),
        None => "the defaults".to_owned(),
    }
}

/// One resolution of the effective config.
#[derive(Debug, Clone, PartialEq)]
pub struct ResolvedConfig {
    /// The merged table the service deserializes its typed config from.
    pub config: Table,
    /// The fingerprint of the declared file's bytes this resolution parsed;
    /// `None` when no file was declared (the supervisor then takes its own).
    pub fingerprint: Option<Fingerprint>,
}

impl ResolvedConfig {
    /// A resolution that does not track a file.
    pub fn untracked(config: Table) -> Self {
        Self {
            config,
            fingerprint: None,
        }
    }
}

/// Resolves the tiers below the override tier (defaults < declared file);
/// the supervisor puts its own override tier on top. A boot calls it once,
/// in its `resolve_config` phase. Cheap to clone: clones share the closure.
/// It knows the file it reads, if any, so the supervisor built over it
/// watches that file: a source and its watch cannot be configured apart.
#[derive(Clone)]
pub struct ConfigSource {
    resolve: Arc<dyn Fn() -> Result<ResolvedConfig, ConfigError> + Send + Sync>,
    declared: Option<PathBuf>,
    /// The closure reads nothing and cannot block ([`ConfigSource::in_place`]):
    /// [`ConfigSource::resolve_within`] calls it on the caller's task
    /// rather than handing it to a blocking thread.
    in_place: bool,
}

impl ConfigSource {
    /// A source that resolves by calling `resolve`. It runs on a boot's task
    /// (never on an actor's handler) and may block briefly on file I/O.
    pub fn new(
        resolve: impl Fn() -> Result<ResolvedConfig, ConfigError> + Send + Sync + 'static,
    ) -> Self {
        Self {
            resolve: Arc::new(resolve),
            declared: None,
            in_place: false,
        }
    }

    /// A source whose `resolve` does no I/O and cannot block (a config built
    /// in memory, TOML defaults embedded in the binary): a boot calls it in
    /// place instead of on a blocking thread, which saves a thread hop per
    /// boot and keeps the blocking pool from growing with many supervisors
    /// in one process. A panic is still [`ConfigError::Invalid`]. A source
    /// that reads a file or may block belongs in [`ConfigSource::new`]: in
    /// place, the deadline of [`ConfigSource::resolve_within`] cannot stop it.
    pub fn in_place(
        resolve: impl Fn() -> Result<ResolvedConfig, ConfigError> + Send + Sync + 'static,
    ) -> Self {
        Self {
            in_place: true,
            ..Self::new(resolve)
        }
    }

    /// A source that always resolves to `config` (untracked: no file), in
    /// place ([`ConfigSource::in_place`]).
    #[must_use]
    pub fn fixed(config: Table) -> Self {
        Self::in_place(move || Ok(ResolvedConfig::untracked(config.clone())))
    }

    /// The declared file this source reads: the supervisor watches it, and
    /// a change to it retries a held boot or is applied to a running one.
    #[must_use]
    pub fn watching(mut self, path: impl Into<PathBuf>) -> Self {
        self.declared = Some(path.into());
        self
    }

    /// The declared file, the one to watch.
    #[must_use]
    pub fn declared_path(&self) -> Option<&Path> {
        self.declared.as_deref()
    }

    /// Resolves the effective config now (blocking: off an actor's handler,
    /// use [`ConfigSource::resolve_within`]).
    pub fn resolve(&self) -> Result<ResolvedConfig, ConfigError> {
        (self.resolve)()
    }

    /// Resolves on a blocking thread, given up after `deadline`: the caller
    /// (a boot, a config change, a wipe, `config show`) goes on with
    /// [`ConfigError::TimedOut`] while a read that hangs stays on its
    /// thread. A panicking source is [`ConfigError::Invalid`]. A source made
    /// [`ConfigSource::in_place`] resolves on the caller's task instead.
    pub async fn resolve_within(&self, deadline: Duration) -> Result<ResolvedConfig, ConfigError> {
        if self.in_place {
            return std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.resolve()))
                .unwrap_or_else(|panic| Err(panicked(panic.as_ref())));
        }
        let source = self.clone();
        within(deadline, move || source.resolve()).await
    }

    /// What a boot's `resolve_config` takes: the declared file's fingerprint
    /// *before* the source reads it (`None` without a declared file), then
    /// the resolve, both on one blocking thread under one `deadline` — one
    /// thread hop per boot, not two. A fingerprint taken before a
    /// resolve that passed the deadline is kept; one that did not finish is
    /// [`Fingerprint`]'s timed-out one. Without a declared file a source made
    /// [`ConfigSource::in_place`] resolves on the caller's task.
    pub async fn resolve_fingerprinted_within(
        &self,
        deadline: Duration,
    ) -> (Option<Fingerprint>, Result<ResolvedConfig, ConfigError>) {
        let Some(path) = self.declared.clone() else {
            return (None, self.resolve_within(deadline).await);
        };
        let (taken, fingerprint) = std::sync::mpsc::sync_channel(1);
        let source = self.clone();
        let resolved = within(deadline, move || {
            let _ = taken.send(Fingerprint::of_file(&path));
            source.resolve()
        })
        .await;
        let fingerprint = fingerprint
            .try_recv()
            .unwrap_or_else(|_| Fingerprint::timed_out());
        (Some(fingerprint), resolved)
    }
}

/// How long a resolve (and a fingerprint of the declared file) may take
/// before the daemon gives up on it: generous for a regular file, short
/// enough that a blocked read never holds up `restart`, `stop` or an exit.
pub const RESOLVE_DEADLINE: Duration = Duration::from_secs(10);

/// The most bytes a declared config file may hold (1 MiB). A bigger file is
/// refused with [`ConfigError::TooLarge`], never read whole, never cut.
pub const MAX_CONFIG_BYTES: u64 = 1 << 20;

/// Runs `work` on a blocking thread and waits at most `deadline` for it.
async fn within<T: Send + 'static>(
    deadline: Duration,
    work: impl FnOnce() -> Result<T, ConfigError> + Send + 'static,
) -> Result<T, ConfigError> {
    match tokio::time::timeout(deadline, tokio::task::spawn_blocking(work)).await {
        Ok(Ok(result)) => result,
        Ok(Err(join)) => Err(match join.try_into_panic() {
            Ok(panic) => panicked(panic.as_ref()),
            Err(_) => ConfigError::Invalid("the config source panicked: cancelled".to_owned()),
        }),
        Err(_) => Err(ConfigError::TimedOut { after: deadline }),
    }
}

/// A config source's panic, as the error a resolve gives.
fn panicked(panic: &(dyn std::any::Any + Send)) -> ConfigError {
    ConfigError::Invalid(format!(
        "the config source panicked: {}",
        crate::panics::panic_message(panic)
    ))
}

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
/// processes, `tests/config_files.rs`.
pub fn read_config_file(path: &Path) -> Result<Vec<u8>, ConfigError> {
    use rustix::fs::{Mode, OFlags};
    use std::io::Read as _;

    let read_error = |source: io::Error| ConfigError::Read {
        path: path.to_path_buf(),
        source,
    };
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
    let too_large = |len: u64| ConfigError::TooLarge {
        path: path.to_path_buf(),
        len,
        limit: MAX_CONFIG_BYTES,
    };
    if meta.len() > MAX_CONFIG_BYTES {
        return Err(too_large(meta.len()));
    }
    let mut bytes = Vec::with_capacity(usize::try_from(meta.len()).unwrap_or(0));
    file.take(MAX_CONFIG_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(read_error)?;
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

impl fmt::Debug for ConfigSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ConfigSource(..)")
    }
}

/// The override tier: leaves set at run time (by the control plane), keyed by
/// dotted path, that win over the defaults and the declared file. Clones
/// share the same tier.
#[derive(Clone, Default)]
pub struct Overrides(Arc<RwLock<BTreeMap<String, Value>>>);

impl Overrides {
    /// An empty override tier.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets `leaf` to `value`, returning the value it replaces. A table value
    /// merges into the tiers below like any other table.
    pub fn set(&self, leaf: &str, value: Value) -> Result<Option<Value>, ConfigError> {
        split_leaf(leaf)?;
        Ok(self
            .0
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(leaf.to_owned(), value))
    }

    /// Removes the override of `leaf`, returning the value it had.
    pub fn unset(&self, leaf: &str) -> Option<Value> {
        self.0
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(leaf)
    }

    /// The override of `leaf`, if one is set.
    pub fn get(&self, leaf: &str) -> Option<Value> {
        self.0
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(leaf)
            .cloned()
    }

    /// Every override, sorted by leaf.
    pub fn list(&self) -> Vec<(String, Value)> {
        self.0
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .map(|(leaf, value)| (leaf.clone(), value.clone()))
            .collect()
    }

    /// A tier of its own holding a copy of this one's leaves: changes to it
    /// are invisible here until [`Self::replace_with`].
    #[must_use]
    pub fn clone_detached(&self) -> Self {
        let leaves = self
            .0
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        Self(Arc::new(RwLock::new(leaves)))
    }

    /// Adopt `other`'s leaves (every clone of this tier sees them).
    pub fn replace_with(&self, other: &Self) {
        let leaves = other
            .0
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        *self.0.write().unwrap_or_else(PoisonError::into_inner) = leaves;
    }

    /// As [`Self::unset`], refusing a malformed leaf.
    ///
    /// # Errors
    /// [`ConfigError::Invalid`] when `leaf` is not a dotted path.
    pub fn unset_checked(&self, leaf: &str) -> Result<Option<Value>, ConfigError> {
        split_leaf(leaf)?;
        Ok(self.unset(leaf))
    }

    /// Every override with its value as TOML text (how the control
    /// directory keeps them), sorted by leaf.
    #[must_use]
    pub fn to_text(&self) -> Vec<(String, String)> {
        self.list()
            .into_iter()
            .map(|(leaf, value)| (leaf, value_text(&value)))
            .collect()
    }

    /// Set every `(leaf, TOML text)` (what [`Self::to_text`] gave).
    ///
    /// # Errors
    /// [`ConfigError::Invalid`] naming the first leaf or value that does not
    /// parse; nothing is set then.
    pub fn load_text(&self, leaves: &[(String, String)]) -> Result<(), ConfigError> {
        let staged = self.clone_detached();
        for (leaf, text) in leaves {
            let value = parse_value_strict(text).ok_or_else(|| {
                ConfigError::Invalid(format!("override {leaf}: {text:?} is not a TOML value"))
            })?;
            staged.set(leaf, value)?;
        }
        self.replace_with(&staged);
        Ok(())
    }

    /// Put this tier on top of `config` (the tiers below it), merged deeply.
    ///
    /// # Errors
    /// [`ConfigError::Invalid`] for a leaf that is not a dotted path.
    pub fn merge_over(&self, config: &mut Table) -> Result<(), ConfigError> {
        merge(config, self.as_table()?);
        Ok(())
    }

    /// The tier as one table, each leaf nested at its path. Overrides are
    /// applied in leaf order, so `a = {..}` is applied before `a.b`.
    fn as_table(&self) -> Result<Table, ConfigError> {
        let overrides = self.0.read().unwrap_or_else(PoisonError::into_inner);
        let mut table = Table::new();
        for (leaf, value) in overrides.iter() {
            let segments = split_leaf(leaf)?;
            let mut nested = value.clone();
            for key in segments.into_iter().rev() {
                let mut wrapper = Table::new();
                wrapper.insert(key, nested);
                nested = Value::Table(wrapper);
            }
            if let Value::Table(nested) = nested {
                merge(&mut table, nested);
            }
        }
        Ok(table)
    }
}

impl fmt::Debug for Overrides {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(self.list()).finish()
    }
}

/// A value as an operator types it: TOML (`8080`, `true`, `"text"`,
/// `[1, 2]`, `{ a = 1 }`), or else the text itself as a string (`debug`).
#[must_use]
pub fn parse_value(text: &str) -> Value {
    parse_value_strict(text).unwrap_or_else(|| Value::String(text.to_owned()))
}

/// `text` as one TOML value, if it is one.
fn parse_value_strict(text: &str) -> Option<Value> {
    let mut table: Table = toml::from_str(&format!("value = {text}")).ok()?;
    let value = table.remove("value")?;
    table.is_empty().then_some(value)
}

/// A value as TOML text (inline form), the inverse of [`parse_value`].
#[must_use]
pub fn value_text(value: &Value) -> String {
    let mut table = Table::new();
    table.insert("value".into(), value.clone());
    let text = toml::to_string(&table).unwrap_or_default();
    match text.trim().strip_prefix("value = ") {
        Some(inline) => inline.to_owned(),
        None => value.to_string(),
    }
}

/// Where the lowest tier comes from.
#[derive(Debug, Clone)]
enum Defaults {
    /// Embedded TOML text, parsed at each resolve.
    Text(String),
    /// An already-built table.
    Table(Table),
}

/// The declared file, and whether its absence is an error.
#[derive(Debug, Clone)]
struct Declared {
    /// The file's path, as the operator declared it.
    path: PathBuf,
    /// Whether a missing file fails the resolve (otherwise it is an empty tier).
    required: bool,
}

/// A [`ConfigSource`] over TOML: defaults < the declared file, merged
/// deeply (the supervisor's override tier goes on top). Hand it to the
/// supervisor's builder; its declared file is watched.
#[derive(Debug, Clone)]
pub struct TomlFileSource {
    /// The lowest tier.
    defaults: Defaults,
    /// The middle tier, if a file was declared.
    declared: Option<Declared>,
}

impl Default for TomlFileSource {
    fn default() -> Self {
        Self::new()
    }
}

impl TomlFileSource {
    /// A source with empty defaults and no declared file.
    pub fn new() -> Self {
        Self {
            defaults: Defaults::Table(Table::new()),
            declared: None,
        }
    }

    /// Uses `text` (typically `include_str!`) as the defaults tier. It is
    /// parsed at each resolve; a parse error names "the defaults".
    pub fn defaults_toml(mut self, text: impl Into<String>) -> Self {
        self.defaults = Defaults::Text(text.into());
        self
    }

    /// Uses `table` as the defaults tier.
    pub fn defaults(mut self, table: Table) -> Self {
        self.defaults = Defaults::Table(table);
        self
    }

    /// Declares the file at `path`, the middle tier, watched: a change to
    /// it is applied (or boots a held daemon) without a restart. While it
    /// is missing, resolving fails with [`ConfigError::Missing`], naming
    /// the path: the boot is held in `resolve_config` with that reason
    /// until the file appears (or an operator retries), never run on the
    /// defaults as if nothing had been declared. A file that may be absent
    /// is declared with [`Self::optional_file`].
    ///
    /// It is read through [`read_config_file`]: anything but a regular file
    /// of at most [`MAX_CONFIG_BYTES`] fails the resolve (a FIFO, a device,
    /// a directory, a socket, a bigger file), as any other unreadable file.
    ///
    /// ```
    /// # use steadfast_actors as steadfast; // the facade's paths, as users write them
    /// use steadfast::config::TomlFileSource;
    ///
    /// let dir = tempfile::tempdir()?;
    /// let path = dir.path().join("app.toml");
    /// let source = TomlFileSource::new()
    ///     .defaults_toml("port = 7071")
    ///     .declared_file(&path);
    /// // Missing: an error naming the file, not the defaults.
    /// let error = source.resolve().unwrap_err();
    /// assert!(error.to_string().contains("app.toml"));
    /// std::fs::write(&path, "port = 8080")?;
    /// let resolved = source.resolve()?;
    /// assert_eq!(resolved.config["port"].as_integer(), Some(8080));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn declared_file(mut self, path: impl Into<PathBuf>) -> Self {
        self.declared = Some(Declared {
            path: path.into(),
            required: true,
        });
        self
    }

    /// The same as [`Self::declared_file`]: a missing file fails the
    /// resolve with [`ConfigError::Missing`]. The name says it where a
    /// daemon's `--config FILE` flag builds the source.
    pub fn required_file(self, path: impl Into<PathBuf>) -> Self {
        self.declared_file(path)
    }

    /// Declares the file at `path` as optional: while it is missing it is
    /// an empty tier (the defaults and overrides apply), and once it
    /// appears it is read and watched like [`Self::declared_file`]'s. For a
    /// file the operator may or may not provide, such as a system-wide
    /// `/etc/app.toml`; anything else wrong with it (not a regular file,
    /// too big, not TOML) still fails the resolve.
    ///
    /// ```
    /// # use steadfast_actors as steadfast; // the facade's paths, as users write them
    /// use steadfast::config::TomlFileSource;
    ///
    /// let dir = tempfile::tempdir()?;
    /// let source = TomlFileSource::new()
    ///     .defaults_toml("port = 7071")
    ///     .optional_file(dir.path().join("absent.toml"));
    /// assert_eq!(source.resolve()?.config["port"].as_integer(), Some(7071));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn optional_file(mut self, path: impl Into<PathBuf>) -> Self {
        self.declared = Some(Declared {
            path: path.into(),
            required: false,
        });
        self
    }

    /// The declared file, the one to watch.
    pub fn declared_path(&self) -> Option<&Path> {
        self.declared.as_ref().map(|d| d.path.as_path())
    }

    /// Resolves the effective config now: reads the declared file once,
    /// fingerprints the bytes it read, parses them, and merges the tiers.
    pub fn resolve(&self) -> Result<ResolvedConfig, ConfigError> {
        let mut config = match &self.defaults {
            Defaults::Text(text) => parse(text, None)?,
            Defaults::Table(table) => table.clone(),
        };
        let fingerprint = match &self.declared {
            None => None,
            Some(declared) => {
                let (file, fingerprint) = read_declared(declared)?;
                merge(&mut config, file);
                Some(fingerprint)
            }
        };
        Ok(ResolvedConfig {
            config,
            fingerprint,
        })
    }

    /// This source as the closure a supervisor resolves through (watching
    /// its declared file).
    pub fn into_source(self) -> ConfigSource {
        match self.declared_path().map(Path::to_path_buf) {
            Some(path) => ConfigSource::new(move || self.resolve()).watching(path),
            // Defaults only: parsed from memory, nothing to block on.
            None => ConfigSource::in_place(move || self.resolve()),
        }
    }
}

impl From<TomlFileSource> for ConfigSource {
    fn from(source: TomlFileSource) -> Self {
        source.into_source()
    }
}

/// Reads (through [`read_config_file`]), fingerprints and parses the
/// declared file.
fn read_declared(declared: &Declared) -> Result<(Table, Fingerprint), ConfigError> {
    let path = &declared.path;
    match read_config_file(path) {
        Ok(bytes) => {
            let fingerprint = Fingerprint::of_bytes(&bytes);
            let text = std::str::from_utf8(&bytes).map_err(|e| ConfigError::Parse {
                path: Some(path.clone()),
                message: format!("not utf-8: {e}"),
            })?;
            Ok((parse(text, Some(path))?, fingerprint))
        }
        Err(ConfigError::Missing { .. }) if !declared.required => Ok((
            Table::new(),
            Fingerprint::unreadable(io::ErrorKind::NotFound),
        )),
        Err(error) => Err(error),
    }
}

/// Parses `text` as a table; the error carries toml's line and column.
fn parse(text: &str, path: Option<&Path>) -> Result<Table, ConfigError> {
    toml::from_str::<Table>(text).map_err(|e| {
        let message = match e.span() {
            Some(span) => {
                let (line, column) = line_column(text, span.start);
                format!("line {line}, column {column}: {}", e.message().trim())
            }
            None => e.message().trim().to_owned(),
        };
        ConfigError::Parse {
            path: path.map(Path::to_path_buf),
            message,
        }
    })
}

/// The one-based line and column (in characters) of byte `offset` in `text`.
fn line_column(text: &str, offset: usize) -> (usize, usize) {
    let mut end = offset.min(text.len());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    let before = &text[..end];
    let line = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    (line, before[line_start..].chars().count() + 1)
}

/// Merges `upper` into `lower`: tables merge key by key, anything else in
/// `upper` replaces what `lower` had.
pub fn merge(lower: &mut Table, upper: Table) {
    for (key, value) in upper {
        match (lower.get_mut(&key), value) {
            (Some(Value::Table(below)), Value::Table(above)) => merge(below, above),
            (_, value) => {
                lower.insert(key, value);
            }
        }
    }
}

/// Refuses a config whose top-level `data_dir` names a directory other than
/// `actual`, the one the daemon holds. Both are compared canonicalized when
/// both exist, else lexically after making them absolute. A config without
/// `data_dir` is accepted.
pub fn check_data_dir(config: &Table, actual: &Path) -> Result<(), ConfigError> {
    let configured = match config.get("data_dir") {
        None => return Ok(()),
        Some(Value::String(configured)) => PathBuf::from(configured),
        Some(other) => {
            return Err(ConfigError::Invalid(format!(
                "data_dir must be a string path, not a {}",
                other.type_str()
            )));
        }
    };
    let same = match (configured.canonicalize(), actual.canonicalize()) {
        (Ok(configured), Ok(actual)) => configured == actual,
        _ => lexical(&configured) == lexical(actual),
    };
    if same {
        Ok(())
    } else {
        Err(ConfigError::MovesDataDir {
            configured,
            actual: actual.to_path_buf(),
        })
    }
}

/// `path` made absolute against the working directory, with `.` and `..`
/// removed lexically (without touching the file system).
fn lexical(path: &Path) -> PathBuf {
    let absolute = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
    let mut out = PathBuf::new();
    for component in absolute.components() {
        match component {
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            other => out.push(other),
        }
    }
    out
}

/// `config` as the service's config type `C`. A value that does not fit
/// names its dotted leaf and the deserializer's reason; unless
/// `allow_unknown`, a leaf `C` does not know is refused, naming it (the
/// supervisor's own `data_dir` leaf is always accepted).
///
/// # Errors
/// [`ConfigError::Leaf`], [`ConfigError::UnknownLeaves`].
pub fn typed<C: DeserializeOwned>(config: &Table, allow_unknown: bool) -> Result<C, ConfigError> {
    let mut unknown = Vec::new();
    let mut note = |path: serde_ignored::Path<'_>| {
        let leaf = path.to_string();
        if leaf != "data_dir" {
            unknown.push(leaf);
        }
    };
    let ignoring = serde_ignored::Deserializer::new(Value::Table(config.clone()), &mut note);
    let typed = serde_path_to_error::deserialize(ignoring).map_err(|error| ConfigError::Leaf {
        leaf: error.path().to_string(),
        reason: error.into_inner().message().trim_end().to_owned(),
    })?;
    if !allow_unknown && !unknown.is_empty() {
        return Err(ConfigError::UnknownLeaves { leaves: unknown });
    }
    Ok(typed)
}

/// The dotted paths of the leaves that differ between `old` and `new`, that
/// `new` added or that it removed, sorted. Arrays are leaves; an empty table
/// is a leaf of its own.
pub fn changed_leaves(old: &Table, new: &Table) -> Vec<String> {
    let mut out = Vec::new();
    diff_tables(old, new, &mut Vec::new(), &mut out);
    out.sort();
    out.dedup();
    out
}

/// Collects into `out` the changed leaves under the table at `path`.
fn diff_tables(old: &Table, new: &Table, path: &mut Vec<String>, out: &mut Vec<String>) {
    let keys: std::collections::BTreeSet<&String> = old.keys().chain(new.keys()).collect();
    for key in keys {
        path.push(key.clone());
        match (old.get(key), new.get(key)) {
            (Some(Value::Table(a)), Some(Value::Table(b))) => diff_tables(a, b, path, out),
            (Some(a), Some(b)) if a == b => {}
            (a, b) => {
                for value in [a, b].into_iter().flatten() {
                    leaves_of(value, path, out);
                }
            }
        }
        path.pop();
    }
}

/// Collects into `out` every leaf of `value`, which sits at `path`.
fn leaves_of(value: &Value, path: &mut Vec<String>, out: &mut Vec<String>) {
    match value {
        Value::Table(table) if !table.is_empty() => {
            for (key, value) in table {
                path.push(key.clone());
                leaves_of(value, path, out);
                path.pop();
            }
        }
        _ => out.push(join_leaf(path)),
    }
}

/// Whether `key` can be written bare in a leaf path.
fn is_bare(key: &str) -> bool {
    !key.is_empty()
        && key
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// Writes the keys of a path as a dotted leaf, quoting keys that are not bare.
fn join_leaf(keys: &[String]) -> String {
    keys.iter()
        .map(|key| {
            if is_bare(key) {
                key.clone()
            } else {
                format!("\"{key}\"")
            }
        })
        .collect::<Vec<_>>()
        .join(".")
}

/// Splits a dotted leaf into its keys; the inverse of [`join_leaf`].
fn split_leaf(leaf: &str) -> Result<Vec<String>, ConfigError> {
    let invalid = || ConfigError::Invalid(format!("{leaf:?} is not a dotted leaf path"));
    let mut keys = Vec::new();
    let mut rest = leaf;
    loop {
        let (key, after) = if let Some(quoted) = rest.strip_prefix('"') {
            let end = quoted.find('"').ok_or_else(invalid)?;
            (quoted[..end].to_owned(), &quoted[end + 1..])
        } else {
            let end = rest.find('.').unwrap_or(rest.len());
            let key = &rest[..end];
            if !is_bare(key) {
                return Err(invalid());
            }
            (key.to_owned(), &rest[end..])
        };
        keys.push(key);
        if after.is_empty() {
            return Ok(keys);
        }
        rest = after.strip_prefix('.').ok_or_else(invalid)?;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `source` resolved with `overrides` on top, as the supervisor does.
    fn with_tier(source: &TomlFileSource, overrides: &Overrides) -> ResolvedConfig {
        let mut resolved = source.resolve().expect("resolve");
        overrides.merge_over(&mut resolved.config).expect("merge");
        resolved
    }

    fn table(text: &str) -> Table {
        toml::from_str(text).expect("test toml")
    }

    /// Defaults < declared file < override tier, merged deeply.
    #[test]
    fn tiers_merge_deeply_in_order() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("service.toml");
        std::fs::write(
            &file,
            "[server]\nlisten = \"0.0.0.0:80\"\n[store]\npaths = [\"/b\"]\n",
        )
        .expect("write");
        let source = TomlFileSource::new()
            .defaults_toml(
                "name = \"svc\"\n[server]\nlisten = \"127.0.0.1:1\"\nworkers = 4\n\
                 [store]\npaths = [\"/a\", \"/c\"]\n",
            )
            .declared_file(&file);
        let overrides = Overrides::new();
        overrides
            .set("server.workers", Value::Integer(8))
            .expect("set");
        let resolved = with_tier(&source, &overrides);
        assert_eq!(
            resolved.config,
            table(
                "name = \"svc\"\n[server]\nlisten = \"0.0.0.0:80\"\nworkers = 8\n\
                 [store]\npaths = [\"/b\"]\n"
            )
        );
        assert_eq!(
            resolved.fingerprint,
            Some(Fingerprint::of_file(&file)),
            "the fingerprint is of the declared file"
        );
    }

    /// The override tier: set, get, list and unset, seen by the next resolve.
    #[test]
    fn overrides_set_unset_and_list() {
        let source = TomlFileSource::new().defaults(table("[a]\nb = 1\nc = 2\n"));
        let overrides = Overrides::new();
        assert_eq!(overrides.set("a.b", Value::Integer(10)).expect("set"), None);
        assert_eq!(
            overrides
                .set("a.\"x.y\"", Value::Boolean(true))
                .expect("set"),
            None
        );
        assert_eq!(
            overrides.set("a.b", Value::Integer(11)).expect("set"),
            Some(Value::Integer(10))
        );
        assert_eq!(overrides.get("a.b"), Some(Value::Integer(11)));
        assert_eq!(
            overrides.list(),
            vec![
                ("a.\"x.y\"".to_owned(), Value::Boolean(true)),
                ("a.b".to_owned(), Value::Integer(11)),
            ]
        );
        let resolved = with_tier(&source, &overrides);
        assert_eq!(
            resolved.config,
            table("[a]\nb = 11\nc = 2\n\"x.y\" = true\n")
        );
        assert_eq!(resolved.fingerprint, None, "no file declared");

        assert_eq!(overrides.unset("a.b"), Some(Value::Integer(11)));
        assert_eq!(overrides.unset("a.b"), None);
        assert_eq!(
            with_tier(&source, &overrides).config,
            table("[a]\nb = 1\nc = 2\n\"x.y\" = true\n")
        );
        for bad in ["", ".a", "a.", "a..b", "a b", "\"unterminated", "\"q\"x"] {
            assert!(
                matches!(
                    overrides.set(bad, Value::Integer(1)),
                    Err(ConfigError::Invalid(_))
                ),
                "{bad:?} is not a leaf"
            );
        }
    }

    /// A leaf replaced by a table and a table by a leaf: the higher tier wins.
    #[test]
    fn an_override_replaces_a_leaf_with_a_table() {
        let source = TomlFileSource::new().defaults(table("a = 1\n[t]\nx = 1\n"));
        let overrides = Overrides::new();
        overrides.set("a.b", Value::Integer(2)).expect("set");
        overrides.set("t", Value::Integer(3)).expect("set");
        assert_eq!(
            with_tier(&source, &overrides).config,
            table("t = 3\n[a]\nb = 2\n")
        );
    }

    /// A missing declared file fails the resolve (`declared_file` and
    /// `required_file` alike), naming the path; only an optional one is an
    /// empty tier.
    #[test]
    fn a_missing_declared_file_is_an_error_unless_optional() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("absent.toml");
        let optional = TomlFileSource::new()
            .defaults(table("a = 1\n"))
            .optional_file(&file)
            .resolve()
            .expect("optional");
        assert_eq!(optional.config, table("a = 1\n"));
        assert_eq!(optional.fingerprint, Some(Fingerprint::of_file(&file)));
        for declared in [
            TomlFileSource::new()
                .defaults(table("a = 1\n"))
                .declared_file(&file),
            TomlFileSource::new().required_file(&file),
        ] {
            match declared.resolve() {
                Err(error @ ConfigError::Missing { .. }) => {
                    let message = error.to_string();
                    assert!(message.contains(&file.display().to_string()), "{message}");
                    assert!(message.contains("create it"), "{message}");
                }
                other => panic!("expected a missing-file error, got {other:?}"),
            }
        }
    }

    /// A declared path that is a directory, a FIFO, a
    /// device or a socket is a typed error naming the path and what it is,
    /// and opening a FIFO does not wait for a writer. The fingerprint takes
    /// the same read, so it says "unreadable" too.
    #[test]
    fn a_config_path_that_is_not_a_regular_file_is_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let fifo = dir.path().join("fifo.toml");
        rustix::fs::mkfifoat(
            rustix::fs::CWD,
            &fifo,
            rustix::fs::Mode::RUSR | rustix::fs::Mode::WUSR,
        )
        .expect("mkfifo");
        let socket = dir.path().join("socket.toml");
        let _listener = std::os::unix::net::UnixListener::bind(&socket).expect("bind");
        let subdir = dir.path().join("dir.toml");
        std::fs::create_dir(&subdir).expect("mkdir");
        let link_to_zero = dir.path().join("zero.toml");
        std::os::unix::fs::symlink("/dev/zero", &link_to_zero).expect("symlink");
        for (path, kind) in [
            (&fifo, "fifo"),
            (&socket, "socket"),
            (&subdir, "directory"),
            (&PathBuf::from("/dev/zero"), "character device"),
            (&link_to_zero, "character device"),
        ] {
            match read_config_file(path) {
                Err(error @ ConfigError::NotRegular { .. }) => {
                    let message = error.to_string();
                    assert!(message.contains(&path.display().to_string()), "{message}");
                    assert!(message.contains(kind), "{message}");
                    assert!(message.contains("regular file"), "{message}");
                }
                other => panic!("{}: expected not-regular, got {other:?}", path.display()),
            }
            let fingerprint = Fingerprint::of_file(path);
            assert!(!fingerprint.is_readable(), "{}", path.display());
            let resolved = TomlFileSource::new().declared_file(path).resolve();
            assert!(
                matches!(resolved, Err(ConfigError::NotRegular { .. })),
                "an optional declared file that is a {kind} is an error too: {resolved:?}"
            );
        }
        // A symlink to a regular file is the operator's own business.
        let real = dir.path().join("real.toml");
        std::fs::write(&real, "a = 1\n").expect("write");
        let link = dir.path().join("link.toml");
        std::os::unix::fs::symlink(&real, &link).expect("symlink");
        assert_eq!(
            read_config_file(&link).expect("through the link"),
            b"a = 1\n"
        );
    }

    /// A file over the cap is refused by its `fstat`
    /// length (never read whole, never cut); a file at the cap is read.
    #[test]
    fn a_config_over_the_cap_is_refused_unread() {
        let dir = tempfile::tempdir().expect("tempdir");
        let big = dir.path().join("big.toml");
        let file = std::fs::File::create(&big).expect("create");
        file.set_len(50 * 1024 * 1024).expect("a sparse 50 MB file");
        match read_config_file(&big) {
            Err(error @ ConfigError::TooLarge { .. }) => {
                let message = error.to_string();
                assert!(message.contains(&big.display().to_string()), "{message}");
                assert!(message.contains("1048576-byte"), "{message}");
                assert!(message.contains("52428800 bytes"), "{message}");
            }
            other => panic!("expected too large, got {other:?}"),
        }
        file.set_len(MAX_CONFIG_BYTES).expect("at the cap");
        assert_eq!(
            read_config_file(&big).expect("at the cap is read").len() as u64,
            MAX_CONFIG_BYTES
        );
    }

    /// The fingerprint changes exactly when the bytes do.
    #[test]
    fn fingerprint_follows_the_bytes() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("f.toml");
        std::fs::write(&file, "a = 1\n").expect("write");
        let first = Fingerprint::of_file(&file);
        assert!(first.is_readable());
        std::fs::write(&file, "a = 1\n").expect("rewrite");
        assert_eq!(Fingerprint::of_file(&file), first, "same bytes");
        std::fs::write(&file, "a = 2\n").expect("change");
        assert_ne!(Fingerprint::of_file(&file), first, "same length, new bytes");
        std::fs::write(&file, "a = 1\n\n").expect("grow");
        assert_ne!(Fingerprint::of_file(&file), first, "new length");
        assert_eq!(Fingerprint::of_bytes(b"a = 1\n"), first);
    }

    /// A missing or unreadable file is distinct from every content.
    #[test]
    fn a_missing_file_has_its_own_fingerprint() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("f.toml");
        let missing = Fingerprint::of_file(&file);
        assert!(!missing.is_readable());
        assert_eq!(Fingerprint::of_file(&file), missing);
        std::fs::write(&file, "").expect("write");
        assert_ne!(Fingerprint::of_file(&file), missing, "empty is not missing");
        assert_ne!(
            Fingerprint::of_file(dir.path()),
            missing,
            "a directory is unreadable, not missing"
        );
    }

    /// The resolved fingerprint is of the bytes that resolve parsed, so a
    /// later write is seen as a change by the supervisor.
    #[test]
    fn the_resolved_fingerprint_is_of_the_bytes_parsed() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("f.toml");
        std::fs::write(&file, "a = 1\n").expect("write");
        let source = TomlFileSource::new().declared_file(&file).into_source();
        let resolved = source.resolve().expect("resolve");
        assert_eq!(
            resolved.fingerprint,
            Some(Fingerprint::of_bytes(b"a = 1\n"))
        );
        std::fs::write(&file, "a = 2\n").expect("write");
        assert_ne!(resolved.fingerprint, Some(Fingerprint::of_file(&file)));
    }

    /// A parse error names the file and toml's line and column.
    #[test]
    fn a_parse_error_names_the_file_and_the_line() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("broken.toml");
        std::fs::write(&file, "a = 1\nb = = 2\n").expect("write");
        let err = TomlFileSource::new()
            .declared_file(&file)
            .resolve()
            .expect_err("broken");
        let text = err.to_string();
        assert!(
            matches!(&err, ConfigError::Parse { path: Some(p), .. } if *p == file),
            "{err:?}"
        );
        assert!(text.contains("broken.toml"), "{text}");
        assert!(text.contains("line 2, column"), "{text}");

        let defaults = TomlFileSource::new()
            .defaults_toml("[x\n")
            .resolve()
            .expect_err("broken defaults");
        assert!(
            defaults
                .to_string()
                .starts_with("cannot parse the defaults: line 1"),
            "{defaults}"
        );
    }

    /// seed 004 `a_config_that_moves_the_data_dir_is_refused`: the error
    /// names `data_dir`.
    #[test]
    fn a_config_that_moves_the_data_dir_is_refused() {
        let held = tempfile::tempdir().expect("tempdir");
        let elsewhere = tempfile::tempdir().expect("tempdir");
        let config = table(&format!("data_dir = {:?}\n", elsewhere.path()));
        let err = check_data_dir(&config, held.path()).expect_err("moves");
        assert!(matches!(err, ConfigError::MovesDataDir { .. }), "{err:?}");
        assert!(err.to_string().contains("data_dir"), "{err}");

        let missing = table("data_dir = \"/nonexistent/steadfast/elsewhere\"\n");
        assert!(matches!(
            check_data_dir(&missing, held.path()),
            Err(ConfigError::MovesDataDir { .. })
        ));
        let err = check_data_dir(&table("data_dir = 7\n"), held.path()).expect_err("not a path");
        assert!(matches!(err, ConfigError::Invalid(_)), "{err:?}");
        assert!(err.to_string().contains("data_dir"), "{err}");
    }

    /// The same directory, spelled with `.`/`..`, a symlink, or not at all.
    #[test]
    fn the_same_data_dir_spelled_differently_is_accepted() {
        let held = tempfile::tempdir().expect("tempdir");
        let dir = held.path().join("data");
        std::fs::create_dir(&dir).expect("mkdir");
        let spelled = dir.join("..").join(".").join("data");
        let config = table(&format!("data_dir = {:?}\n", spelled));
        check_data_dir(&config, &dir).expect("same dir");
        check_data_dir(&Table::new(), &dir).expect("no data_dir");

        let link = held.path().join("link");
        std::os::unix::fs::symlink(&dir, &link).expect("symlink");
        check_data_dir(&table(&format!("data_dir = {:?}\n", link)), &dir).expect("symlink");

        let absent = held.path().join("not-yet");
        let config = table(&format!("data_dir = {:?}\n", absent.join("x").join("..")));
        check_data_dir(&config, &absent).expect("lexically the same");
    }

    /// The leaf diff: changed, added, removed, arrays as leaves, sorted.
    /// A config type with a nested table, as a service declares one.
    #[derive(Debug, serde::Deserialize, PartialEq)]
    struct Typed {
        port: u16,
        #[serde(default)]
        server: Server,
    }

    #[derive(Debug, Default, serde::Deserialize, PartialEq)]
    struct Server {
        #[serde(default)]
        workers: u8,
    }

    /// A value that does not fit names its dotted leaf and the reason.
    #[test]
    fn a_value_that_does_not_fit_names_its_leaf() {
        let ok = typed::<Typed>(&table("port = 80\n[server]\nworkers = 4\n"), false);
        assert_eq!(
            ok.expect("fits"),
            Typed {
                port: 80,
                server: Server { workers: 4 }
            }
        );
        let error = typed::<Typed>(&table("port = 80\n[server]\nworkers = 300\n"), false)
            .expect_err("300 is no u8");
        let ConfigError::Leaf { leaf, reason } = &error else {
            panic!("{error:?}");
        };
        assert_eq!(leaf, "server.workers");
        assert!(reason.contains("300"), "{reason}");
        let error = typed::<Typed>(&table("port = \"many\"\n"), false).expect_err("a string");
        assert!(
            error
                .to_string()
                .starts_with("invalid config: port: invalid type"),
            "{error}"
        );
        let error = typed::<Typed>(&table(""), false).expect_err("port is required");
        assert!(
            error.to_string().contains("missing field `port`"),
            "{error}"
        );
    }

    /// Unknown leaves are refused (named, nested ones dotted) unless
    /// allowed; `data_dir` is the supervisor's and always accepted.
    #[test]
    fn unknown_leaves_are_refused_unless_allowed() {
        let config = table("port = 80\nprot = 81\ndata_dir = \"/d\"\n[server]\nworkerz = 1\n");
        let error = typed::<Typed>(&config, false).expect_err("unknown leaves");
        let ConfigError::UnknownLeaves { leaves } = &error else {
            panic!("{error:?}");
        };
        assert_eq!(leaves, &["prot", "server.workerz"]);
        assert_eq!(
            error.to_string(),
            "invalid config: unknown leaf prot, server.workerz"
        );
        assert_eq!(typed::<Typed>(&config, true).expect("allowed").port, 80);
        let with_data_dir = table("port = 80\ndata_dir = \"/d\"\n");
        assert!(typed::<Typed>(&with_data_dir, false).is_ok());
        // A table type takes everything.
        assert_eq!(typed::<Table>(&config, false).expect("any table"), config);
    }

    #[test]
    fn changed_leaves_lists_every_changed_leaf_sorted() {
        let old = table(
            "z = 1\nsame = \"s\"\narr = [1, 2]\nscalar = 1\n\
             [server]\nlisten = \"a\"\nworkers = 4\n[gone]\nx = 1\ny = [1]\n",
        );
        let new = table(
            "z = 2\nsame = \"s\"\narr = [1, 3]\nscalar = { now = \"table\" }\nadded = true\n\
             \"odd.key\" = 1\n[server]\nlisten = \"a\"\nworkers = 5\n[empty]\n",
        );
        assert_eq!(
            changed_leaves(&old, &new),
            vec![
                "\"odd.key\"",
                "added",
                "arr",
                "empty",
                "gone.x",
                "gone.y",
                "scalar",
                "scalar.now",
                "server.workers",
                "z",
            ]
        );
        assert!(changed_leaves(&old, &old).is_empty());
        for leaf in changed_leaves(&old, &new) {
            split_leaf(&leaf).expect("every reported leaf parses back");
        }
    }
}
