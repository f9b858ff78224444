//! The effective config of a steadfast daemon, and how it is resolved.
//!
//! This module owns the config *data*: the [`ConfigSource`] a boot resolves
//! through, the [`TomlFileSource`] that layers defaults < the declared file <
//! the override tier into one `toml::Table` (the service deserializes its own
//! typed struct from it), the [`Fingerprint`] of the declared file, the
//! data-dir guard and the leaf diff. Watching the file lives in
//! `actors/src/config_watcher.rs`; deciding what a change means lives in the lifecycle
//! machine.
//!
//! # Files
//! - this file: [`ConfigSource`] (what a boot resolves through, on a
//!   blocking thread under [`RESOLVE_DEADLINE`]), [`ResolvedConfig`] and
//!   [`ConfigError`];
//! - `fingerprint`: the declared file's [`Fingerprint`];
//! - `file`: the bounded read of the declared file;
//! - `toml_file`: the layered [`TomlFileSource`];
//! - `overrides`: the run-time override tier;
//! - `table`: merge, the data-dir guard, the typed view, leaf paths and the
//!   leaf diff;
//! - `tests`: the unit tests.
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
//!   real kvd processes, `tests/it/config_files.rs`.
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

mod file;
mod fingerprint;
mod overrides;
mod table;
mod toml_file;

pub use file::{read_config_file, watchable};
pub use fingerprint::Fingerprint;
pub use overrides::{Overrides, parse_value, value_text};
use table::split_leaf;
pub use table::{changed_leaves, check_data_dir, merge, typed};
pub use toml_file::TomlFileSource;

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

/// Runs `work` on a blocking thread ([`crate::device::blocking`]: here, on
/// a simulation's thread) and waits at most `deadline` for it.
async fn within<T: Send + 'static>(
    deadline: Duration,
    work: impl FnOnce() -> Result<T, ConfigError> + Send + 'static,
) -> Result<T, ConfigError> {
    match tokio::time::timeout(deadline, crate::device::blocking(work)).await {
        Ok(Ok(result)) => result,
        Ok(Err(crate::device::DeviceError::Panicked(message))) => Err(ConfigError::Invalid(
            format!("the config source panicked: {message}"),
        )),
        Ok(Err(_)) => Err(ConfigError::Invalid(
            "the config source panicked: cancelled".to_owned(),
        )),
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

impl fmt::Debug for ConfigSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ConfigSource(..)")
    }
}

#[cfg(test)]
mod tests;
