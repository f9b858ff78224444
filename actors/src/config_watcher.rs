//! `ConfigWatcher`: notices that the declared config file changed and says so,
//! once per burst of changes.
//!
//! This file owns the actor triad [`ConfigWatcherActor`] /
//! [`ConfigWatcherState`] / [`ConfigWatcherMsg`]. It watches the declared
//! file's *parent* directory (non-recursively) with `notify`, because editors
//! and `std::fs::write` replace or truncate the file and a watch on the file's
//! inode would go stale; it keeps only the events that name the file or an
//! entry of that directory the declared path resolves through (a symbolic
//! link chain that stays in the directory, as a Kubernetes ConfigMap mount
//! makes: `kvd.toml -> ..data/kvd.toml`, `..data -> ..2026_…`, updated by
//! renaming a new `..data` link over the old one; [`entries_resolved_through`]
//! is recomputed at every event, so it follows each swap). It
//! decides nothing: it calls `on_change`, and the supervisor turns that into a
//! `ConfigChanged` event (which the lifecycle machine may refuse — that case is
//! covered by the fingerprint in `actors/src/config/fingerprint.rs`, not here). It never reads the
//! file: what it reports is read by a resolve, through `actors/src/config/file.rs`'s
//! bounded `read_config_file` under a deadline, off this actor (a FIFO or
//! a device renamed over the file is refused, never waited on).
//!
//! ```text
//! notify thread ──Notified──▶ ConfigWatcherActor ──(quiet for `debounce`)──▶ on_change()
//!        operator ──Poke─────▶          └──────────(at once)──────────────▶ on_change()
//! ```
//! The actor owns the notify watcher; when the actor stops, the watcher is
//! dropped and its thread ends. It has no children.
//!
//! # Invariants
//! - **A write to the declared file fires**, whether it truncates in place or
//!   replaces the file by rename. Checked by `config::a_write_to_the_declared_file_fires`
//!   and `config::a_rename_over_the_declared_file_fires`.
//! - **A swap of a link the path resolves through fires**, again and again:
//!   the kubelet's `..data` rename, with the file itself a link into it.
//!   Checked by `config::a_configmap_style_data_swap_fires` and, over a real
//!   kvd held on a bad config, `tests/it/kubernetes.rs`.
//! - **Nothing else fires**: events for sibling files, and the reads
//!   `on_change` itself makes (inotify reports opens), are ignored. Checked by
//!   `config::writes_to_a_sibling_file_do_not_fire` and
//!   `config::reading_the_file_in_on_change_does_not_fire_again`.
//! - **A burst fires once it is over**: `on_change` runs after `debounce` of
//!   quiet following the last relevant event, so the last firing of a burst
//!   sees the last write. Checked by `config::a_burst_of_writes_fires_after_the_last_write`.
//! - **A write in place fires once its writer closes the file**: after a
//!   truncate, a write or the creation of a regular file, quiet alone is not
//!   enough — the writer may be descheduled between `open(O_TRUNC)` and
//!   `write`, and a resolve then would read an empty file, which is valid
//!   TOML and boots on defaults. The firing waits for the close
//!   (`IN_CLOSE_WRITE`), or for [`WRITER_PATIENCE`] if the writer keeps the
//!   file open. A rename over the file brings a finished file and does not
//!   wait. Checked by `config::a_write_held_open_fires_once_the_writer_closes`
//!   and `config::a_writer_that_never_closes_fires_after_its_patience`. (A
//!   notify backend that reports no closes — kqueue, FSEvents — makes every
//!   write in place wait the full patience; inotify reports them.)
//! - **Poke fires at once** (SIGHUP-style), each time it is sent. Checked by
//!   `config::poke_fires_now`. (A debounce pending at the time is folded into
//!   that firing: its timer is cancelled and its generation made stale.)
//! - **The watch is put in place off the runtime's threads**: `pre_start`
//!   checks the path and returns; creating the notify watcher (it starts its
//!   thread) and adding the watch (a round trip to that thread) run on a
//!   blocking thread, so a launch does not wait for them. Once the watch is
//!   in place the actor calls `on_watching`: a change made before then was
//!   not seen, and whoever cares settles against the file as it is (the
//!   Lifecycle actor compares it with its boot's fingerprint). Checked by
//!   every `config` test (each writes once `on_watching` ran) and, over a
//!   running supervisor,
//!   `supervision::an_edit_made_while_nothing_watched_is_settled_once_watching`.
//! - **A parent directory that is not there fails `pre_start`** with an
//!   error that names the directory. Checked by
//!   `config::a_missing_parent_directory_fails_to_start`. A watcher that
//!   cannot be created or added later (no inotify instance left) stops the
//!   actor with that error, which its supervisor sees as a death.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use notify::event::{AccessKind, AccessMode, ModifyKind};
use notify::{Event, EventKind, RecommendedWatcher, RecursiveMode, Watcher};
use ractor::{Actor, ActorProcessingErr, ActorRef};
use tokio::task::JoinHandle;

/// The quiet period [`ConfigWatcherArgs::debounce`] usually takes.
pub const DEFAULT_DEBOUNCE: Duration = Duration::from_millis(20);

/// How long a write in place may keep the file open before the change is
/// reported anyway (a writer that never closes must not hide its change).
pub const WRITER_PATIENCE: Duration = Duration::from_secs(2);

/// The config watcher actor (stateless; see `ConfigWatcherState`).
#[derive(Debug, Default, Clone, Copy)]
pub struct ConfigWatcherActor;

/// What the config watcher is spawned with.
#[derive(Clone)]
pub struct ConfigWatcherArgs {
    /// The declared file. Its parent directory must exist.
    pub path: PathBuf,
    /// How long the file must stay quiet after a change before `on_change`.
    pub debounce: Duration,
    /// Called once per quiet period after a change, and on every `Poke`. It
    /// runs on the actor's handler, so it must be quick (send a message).
    pub on_change: Arc<dyn Fn() + Send + Sync>,
    /// Called once, when the watch is in place: changes before it were not
    /// seen. Quick, like `on_change`.
    pub on_watching: Arc<dyn Fn() + Send + Sync>,
}

impl std::fmt::Debug for ConfigWatcherArgs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConfigWatcherArgs")
            .field("path", &self.path)
            .field("debounce", &self.debounce)
            .finish_non_exhaustive()
    }
}

/// The messages the config watcher takes.
#[derive(Debug)]
pub enum ConfigWatcherMsg {
    /// The notify watcher saw a relevant event (sent from notify's thread).
    Notified(Change),
    /// The debounce timer of generation `.0` ran out.
    Quiet(u64),
    /// Fire `on_change` now (an operator's SIGHUP or `reload`).
    Poke,
    /// The notify watcher made off the actor, with its watch in place, or
    /// why it could not be.
    Watching(Result<RecommendedWatcher, String>),
}

/// What a relevant event did to the declared file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    /// Written in place (truncated, written, or created as a regular file):
    /// the writer may not be done until it closes the file.
    Written,
    /// A writer closed the file: what it wrote is all there.
    Closed,
    /// Replaced whole (renamed over, removed, a link swapped) or unknown (a
    /// queue overflow, a watch error): nothing to wait for but quiet.
    Replaced,
}

/// The config watcher's state.
pub struct ConfigWatcherState {
    /// Held so the watch lives exactly as long as the actor; `None` until
    /// it is in place.
    watcher: Option<RecommendedWatcher>,
    /// Who to tell once it is.
    on_watching: Arc<dyn Fn() + Send + Sync>,
    /// How long to wait for quiet.
    debounce: Duration,
    /// Who to tell.
    on_change: Arc<dyn Fn() + Send + Sync>,
    /// Bumped by every event and every firing; a `Quiet` of an older
    /// generation is stale (a later event restarted the wait, or a poke fired).
    generation: u64,
    /// The pending debounce timer, aborted when a later event replaces it.
    timer: Option<JoinHandle<Result<(), ractor::MessagingErr<ConfigWatcherMsg>>>>,
    /// Since when a write in place has been seen without its close: the
    /// firing waits for the close, up to [`WRITER_PATIENCE`] from here.
    writing_since: Option<tokio::time::Instant>,
}

impl ConfigWatcherState {
    /// Calls `on_change` and forgets any pending debounce.
    fn fire(&mut self) {
        self.generation += 1;
        self.writing_since = None;
        if let Some(timer) = self.timer.take() {
            timer.abort();
        }
        (self.on_change)();
    }

    /// (Re)arms the timer for generation `generation` to run out after
    /// `after`, replacing any pending one.
    fn arm(&mut self, myself: &ActorRef<ConfigWatcherMsg>, generation: u64, after: Duration) {
        if let Some(timer) = self.timer.take() {
            timer.abort();
        }
        self.timer = Some(myself.send_after(after, move || ConfigWatcherMsg::Quiet(generation)));
    }
}

/// How many symbolic links [`entries_resolved_through`] follows (the
/// kernel's own limit).
const MAX_LINKS: usize = 40;

/// The entries of `parent` (the watched directory) that resolving `file`
/// (an absolute path in it) passes through: `file` itself, then, while a
/// path on the way is a symbolic link whose target lies in `parent`, the
/// entry of `parent` that target starts with — followed in turn. For a
/// ConfigMap mount, `[kvd.toml, ..data, ..2026_…]`. A link whose target
/// leaves the directory ends the walk there (that directory is not
/// watched: SIGHUP or `steadfastctl reload` re-reads it). Reads link
/// targets only (`readlink`), never a file's contents.
#[must_use]
pub fn entries_resolved_through(file: &Path, parent: &Path) -> Vec<PathBuf> {
    use std::path::Component;
    let mut entries = vec![file.to_path_buf()];
    let mut pending = vec![file.to_path_buf()];
    let mut followed = 0;
    while let Some(path) = pending.pop() {
        let Ok(target) = std::fs::read_link(&path) else {
            continue;
        };
        followed += 1;
        if followed > MAX_LINKS {
            break;
        }
        let resolved = path.parent().unwrap_or(parent).join(target);
        let Ok(rest) = resolved.strip_prefix(parent) else {
            continue;
        };
        let Some(Component::Normal(first)) = rest.components().next() else {
            continue;
        };
        let entry = parent.join(first);
        if !entries.contains(&entry) {
            entries.push(entry.clone());
            pending.push(entry);
        }
        if resolved != parent.join(first) {
            // `..data/kvd.toml`: the file inside may be a link again.
            pending.push(resolved);
        }
    }
    entries
}

/// What `event` did to `file` (an absolute path in `parent`) or an entry it
/// resolves through, if it may have changed what a resolve reads; `None`
/// for everything else. Opens and reads are not changes; an overflow of the
/// kernel's queue (a rescan) might hide one, so it counts.
fn change_of(event: &Event, file: &Path, parent: &Path) -> Option<Change> {
    if event.need_rescan() {
        return Some(Change::Replaced);
    }
    let change = match event.kind {
        EventKind::Access(AccessKind::Close(AccessMode::Write)) => Change::Closed,
        EventKind::Access(_) | EventKind::Modify(ModifyKind::Metadata(_)) => return None,
        EventKind::Modify(ModifyKind::Data(_) | ModifyKind::Any) => Change::Written,
        // `open(O_CREAT)`: a writer is on its way. A link made in its
        // place (`ln -sf`) has no writer to wait for.
        EventKind::Create(_) if event.paths.iter().all(|p| is_regular_file(p)) => Change::Written,
        EventKind::Create(_)
        | EventKind::Modify(_)
        | EventKind::Remove(_)
        | EventKind::Any
        | EventKind::Other => Change::Replaced,
    };
    if event.paths.iter().any(|p| p == file) {
        return Some(change);
    }
    // Resolved now, after the event: a swapped link counts under the name
    // the path resolves through once the swap is done.
    let entries = entries_resolved_through(file, parent);
    event
        .paths
        .iter()
        .any(|p| entries.contains(p))
        .then_some(change)
}

/// A notify watcher on `parent` that tells `actor` of each change to
/// `file`, with its watch in place. Blocking: it starts notify's thread
/// and waits for it to add the watch.
fn make_watcher(
    file: &Path,
    parent: &Path,
    actor: &ActorRef<ConfigWatcherMsg>,
) -> Result<RecommendedWatcher, String> {
    let target = file.to_path_buf();
    let watched = parent.to_path_buf();
    let actor = actor.clone();
    let mut watcher = notify::recommended_watcher(move |event: notify::Result<Event>| {
        let change = match event {
            Ok(event) => change_of(&event, &target, &watched),
            Err(error) => {
                // An error may hide a change; a spurious resolve is cheap.
                tracing::warn!(%error, file = %target.display(), "config watch error");
                Some(Change::Replaced)
            }
        };
        if let Some(change) = change {
            // Err only once the actor has stopped: nobody to tell.
            let _ = actor.cast(ConfigWatcherMsg::Notified(change));
        }
    })
    .map_err(|e| format!("cannot create a watcher for {}: {e}", file.display()))?;
    watcher
        .watch(parent, RecursiveMode::NonRecursive)
        .map_err(|e| {
            format!(
                "cannot watch directory {} (for config file {}): {e}",
                parent.display(),
                file.display()
            )
        })?;
    Ok(watcher)
}

/// Whether `path` is a regular file itself (not through a link).
fn is_regular_file(path: &Path) -> bool {
    std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_file())
}

impl Actor for ConfigWatcherActor {
    type Msg = ConfigWatcherMsg;
    type State = ConfigWatcherState;
    type Arguments = ConfigWatcherArgs;

    async fn pre_start(
        &self,
        myself: ActorRef<Self::Msg>,
        args: Self::Arguments,
    ) -> Result<Self::State, ActorProcessingErr> {
        let (file, parent) = crate::config::watchable(&args.path)?;
        let watcher = if crate::device::runs_inline() {
            // A simulation's thread: no other thread may decide when the
            // watch is in place, so it is before the actor starts (nothing
            // was missed: `on_watching` is not called).
            Some(make_watcher(&file, &parent, &myself)?)
        } else {
            let actor = myself.clone();
            tokio::task::spawn_blocking(move || {
                let made = make_watcher(&file, &parent, &actor);
                // Err only once the actor has stopped: the watcher is dropped.
                let _ = actor.cast(ConfigWatcherMsg::Watching(made));
            });
            None
        };
        Ok(ConfigWatcherState {
            watcher,
            on_watching: args.on_watching,
            debounce: args.debounce,
            on_change: args.on_change,
            generation: 0,
            timer: None,
            writing_since: None,
        })
    }

    async fn handle(
        &self,
        myself: ActorRef<Self::Msg>,
        message: Self::Msg,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        match message {
            ConfigWatcherMsg::Notified(change) => {
                match change {
                    Change::Written => {
                        state
                            .writing_since
                            .get_or_insert_with(tokio::time::Instant::now);
                    }
                    Change::Closed | Change::Replaced => state.writing_since = None,
                }
                state.generation += 1;
                let generation = state.generation;
                let debounce = state.debounce;
                state.arm(&myself, generation, debounce);
            }
            ConfigWatcherMsg::Quiet(generation) => {
                if generation != state.generation {
                    return Ok(());
                }
                // Quiet, but a writer has not closed the file: wait for its
                // close (a new event) or for the rest of its patience.
                let waited = state.writing_since.map(|since| since.elapsed());
                match waited {
                    Some(waited) if waited < WRITER_PATIENCE => {
                        state.arm(&myself, generation, WRITER_PATIENCE - waited);
                    }
                    _ => state.fire(),
                }
            }
            ConfigWatcherMsg::Poke => state.fire(),
            ConfigWatcherMsg::Watching(made) => {
                state.watcher = Some(made?);
                (state.on_watching)();
            }
        }
        Ok(())
    }

    async fn post_stop(
        &self,
        _myself: ActorRef<Self::Msg>,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        if let Some(timer) = state.timer.take() {
            timer.abort();
        }
        Ok(())
    }
}
