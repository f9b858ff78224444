//! A simulated file system ([`SimFileSystem`], a [`SimFs`]) for runs of
//! the whole daemon: every directory and file the daemon opens is one of
//! its, and one seed decides what each call does — a fault, a torn write,
//! a crash that keeps only what was synced.
//!
//! The model, as Linux behaves on ext4/xfs for the calls steadfast makes:
//! - A namespace of absolute paths: directories, and files, each an
//!   [`Inode`] as the journal's disk has them (`inode.rs`). Every
//!   directory's entries have two views: as lookups see them now (the
//!   cache) and as a crash keeps them (durable). Creating a file, `unlink`,
//!   `rename` and `mkdir` change the cache and queue the change;
//!   `sync_dir` makes the directory's entries durable. A crash keeps the
//!   durable entries and a seeded prefix of the queue (for one change, a
//!   coin), each change whole: metadata reaches the disk in order and a
//!   rename is one transaction, so a renamed file never survives under
//!   both names. A new directory, and all in it, survives only once its
//!   parent's entry is durable.
//! - `create_dir_all` is `mkdir -p`: each new entry waits for its
//!   parent's fsync. `SimFileSystem::create_dir_all_durable` is the test's
//!   set-up: directories there before the daemon started.
//! - Files: `write` lands in the cache (at the end when appending); `sync`
//!   makes the cache durable; a failed one (`EIO`) loses the dirty pages
//!   for good. A crash keeps each surviving file's durable bytes and a
//!   prefix of what was written past them, never a lost byte.
//! - An open file description (its offset, access and `flock`) is shared
//!   by its clones. One description a file holds the lock; it is released
//!   when the description's last clone is dropped, and by a crash.
//! - A crash is the process's death and the machine's restart: the
//!   namespace becomes what the crash kept, every file durable, and every
//!   description opened before it fails with `EIO` from then on.
//! - Faults, per thousand calls of their kind ([`Faults`]), drawn from the
//!   run's one generator: `EMFILE` on open and dup; a write failing
//!   (`ENOSPC`, `EIO`) after a random prefix landed, or short; an fsync
//!   failing (`EIO`, its dirty pages lost); a directory fsync or a rename
//!   failing (`EIO`, nothing changed).
//!
//! Simplified: no links, owners or loose modes (files 0600, directories
//! 0700, all this process's); a rename across directories is refused
//! (`EXDEV`: steadfast renames within one), and one over a directory
//! (`EISDIR`); no `rmdir`; an overwrite of durable bytes is lost to a
//! crash whole and never to a failed fsync (see `inode.rs`); `stat`,
//! `fstat`, `read`, `lseek`, `ftruncate` and `unlink` never fail on their
//! own; an unlinked file's bytes are kept until the next crash.
#![allow(dead_code)] // The daemon's run and this crate's tests each use part.

use std::collections::BTreeMap;
use std::fmt;
use std::fs::TryLockError;
use std::io::{self, SeekFrom};
use std::path::{Component, Path};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use steadfast_actors::fsx::Access;
use steadfast_actors::fsx::sim::{Kind, Meta, SimFile, SimFs};

use super::inode::Inode;
use super::rng::Rng;

const ENOENT: i32 = 2;
const EIO: i32 = 5;
const EBADF: i32 = 9;
const EEXIST: i32 = 17;
const EXDEV: i32 = 18;
const ENOTDIR: i32 = 20;
const EISDIR: i32 = 21;
const EINVAL: i32 = 22;
const EMFILE: i32 = 24;
const EFBIG: i32 = 27;
const ENOSPC: i32 = 28;

/// The root directory's inode number.
const ROOT: u64 = 1;

/// The largest file (a write or `set_len` past it is `EFBIG`): a bound on
/// the memory a stray offset can take.
const MAX_LEN: usize = 1 << 30;

fn errno(code: i32) -> io::Error {
    io::Error::from_raw_os_error(code)
}

/// The offset `at` as an index with `more` bytes past it: `EFBIG` beyond
/// [`MAX_LEN`].
fn index(at: u64, more: usize) -> io::Result<usize> {
    usize::try_from(at)
        .ok()
        .filter(|at| at.saturating_add(more) <= MAX_LEN)
        .ok_or_else(|| errno(EFBIG))
}

/// How often each fault is injected, per thousand calls of its kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Faults {
    /// An `open` or a `dup` fails: `EMFILE`.
    pub open_error: u32,
    /// A write fails (`ENOSPC` or `EIO`), a random prefix landed first.
    pub write_error: u32,
    /// A write is short without an error.
    pub short_write: u32,
    /// A file's fsync fails (`EIO`), and its dirty pages are lost.
    pub fsync_error: u32,
    /// A directory's fsync or a rename fails (`EIO`).
    pub dir_error: u32,
}

impl Faults {
    /// None.
    pub const NONE: Self = Self {
        open_error: 0,
        write_error: 0,
        short_write: 0,
        fsync_error: 0,
        dir_error: 0,
    };

    /// Far more often than a disk has them, yet seldom enough that a
    /// daemon retrying gets its work done.
    pub const DAEMON: Self = Self {
        open_error: 5,
        write_error: 10,
        short_write: 20,
        fsync_error: 10,
        dir_error: 5,
    };
}

/// How many faults of each class a run injected, and what its crashes kept.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct FaultCounts {
    pub open_error: u64,
    pub write_error: u64,
    /// Failed writes that landed a prefix first.
    pub torn_write: u64,
    pub short_write: u64,
    pub fsync_error: u64,
    pub dir_error: u64,
    pub crash: u64,
    /// Files a crash left with bytes never synced.
    pub crash_kept_unsynced: u64,
    /// Directories a crash left without a change made since their sync.
    pub crash_kept_old_entry: u64,
}

impl FaultCounts {
    pub fn add(&mut self, other: &Self) {
        self.open_error += other.open_error;
        self.write_error += other.write_error;
        self.torn_write += other.torn_write;
        self.short_write += other.short_write;
        self.fsync_error += other.fsync_error;
        self.dir_error += other.dir_error;
        self.crash += other.crash;
        self.crash_kept_unsynced += other.crash_kept_unsynced;
        self.crash_kept_old_entry += other.crash_kept_old_entry;
    }
}

/// A directory's entries: name to inode number.
type Names = BTreeMap<String, u64>;

/// One change to a directory's entries, which a crash keeps whole or not
/// at all: each name set to an inode, or removed.
type Change = Vec<(String, Option<u64>)>;

fn apply(names: &mut Names, change: &Change) {
    for (name, ino) in change {
        match ino {
            Some(ino) => names.insert(name.clone(), *ino),
            None => names.remove(name),
        };
    }
}

/// A directory: its entries as lookups see them, as a crash keeps them,
/// and the changes between, in order.
#[derive(Debug, Default)]
struct Entries {
    cache: Names,
    durable: Names,
    pending: Vec<Change>,
}

impl Entries {
    fn change(&mut self, change: Change) {
        apply(&mut self.cache, &change);
        self.pending.push(change);
    }

    fn sync(&mut self) {
        self.durable = self.cache.clone();
        self.pending.clear();
    }

    /// What a crash leaves: the durable entries and a prefix of the
    /// changes since; and whether it left out any.
    fn after_crash(&self, rng: &mut Rng) -> (Names, bool) {
        let queued = self.pending.len();
        let kept = if queued == 0 {
            0
        } else {
            rng.below(queued as u64 + 1) as usize
        };
        let mut names = self.durable.clone();
        self.pending[..kept]
            .iter()
            .for_each(|change| apply(&mut names, change));
        (names, kept < queued)
    }
}

#[derive(Debug)]
enum Node {
    File(Inode),
    Dir(Entries),
}

#[derive(Debug)]
struct State {
    /// Every inode, linked or not, by number.
    nodes: BTreeMap<u64, Node>,
    next_ino: u64,
    /// The last open file description's id.
    last_open: u64,
    /// The process's life: bumped by a crash, which invalidates every
    /// description opened before it.
    generation: u64,
    /// Per inode, the description holding its `flock`.
    locks: BTreeMap<u64, u64>,
    rng: Rng,
    faults: Faults,
    counts: FaultCounts,
    /// One line a fault or crash.
    trace: Vec<String>,
    /// A planted defect: a file's fsync does nothing (and says `Ok`).
    fsync_skipped: bool,
    /// A planted defect: a directory's fsync does nothing (and says `Ok`).
    dir_sync_skipped: bool,
    /// Faults drawn so far (injected or spared).
    drawn_faults: u64,
    /// The faults, by the order they are drawn in, not injected.
    spared: std::collections::BTreeSet<u64>,
    /// Scripted faults: per inode, how many of its next fsyncs fail.
    failing_fsyncs: BTreeMap<u64, u32>,
    /// Scripted faults: per inode, how many of its next writes succeed
    /// before one fails.
    failing_write: BTreeMap<u64, u32>,
    /// Scripted faults: how many of the next renames fail.
    failing_renames: u32,
}

/// The names of the absolute `path` (`.` skipped; `..` and relative paths
/// refused: the real calls see neither).
fn names(path: &Path) -> io::Result<Vec<&str>> {
    let mut parts = path.components();
    if parts.next() != Some(Component::RootDir) {
        return Err(errno(EINVAL));
    }
    parts
        .filter(|part| *part != Component::CurDir)
        .map(|part| match part {
            Component::Normal(name) => name.to_str().ok_or_else(|| errno(EINVAL)),
            _ => Err(errno(EINVAL)),
        })
        .collect()
}

impl State {
    fn dir(&self, ino: u64) -> Option<&Entries> {
        match self.nodes.get(&ino) {
            Some(Node::Dir(entries)) => Some(entries),
            _ => None,
        }
    }

    fn dir_mut(&mut self, ino: u64) -> &mut Entries {
        match self.nodes.get_mut(&ino) {
            Some(Node::Dir(entries)) => entries,
            _ => panic!("inode {ino} is a directory"),
        }
    }

    fn file_mut(&mut self, ino: u64) -> &mut Inode {
        match self.nodes.get_mut(&ino) {
            Some(Node::File(file)) => file,
            _ => panic!("inode {ino} is a file"),
        }
    }

    fn add(&mut self, node: Node) -> u64 {
        self.next_ino += 1;
        self.nodes.insert(self.next_ino, node);
        self.next_ino
    }

    /// What `name` in the directory `dir` names now.
    fn entry(&self, dir: u64, name: &str) -> Option<u64> {
        self.dir(dir)?.cache.get(name).copied()
    }

    /// `path`'s directory and name (`None`: the root), its directory as
    /// lookups find it.
    fn split(&self, path: &Path) -> io::Result<Option<(u64, String)>> {
        let names = names(path)?;
        let Some((last, parents)) = names.split_last() else {
            return Ok(None);
        };
        let mut dir = ROOT;
        for name in parents {
            dir = match self.entry(dir, name) {
                Some(ino) if self.dir(ino).is_some() => ino,
                Some(_) => return Err(errno(ENOTDIR)),
                None => return Err(errno(ENOENT)),
            };
        }
        Ok(Some((dir, (*last).to_owned())))
    }

    /// What `path` names now.
    fn lookup(&self, path: &Path) -> io::Result<Option<u64>> {
        Ok(match self.split(path)? {
            None => Some(ROOT),
            Some((dir, name)) => self.entry(dir, &name),
        })
    }

    fn meta(&self, ino: u64) -> Meta {
        let (kind, mode, len) = match self.nodes.get(&ino) {
            Some(Node::File(file)) => (Kind::File, 0o600, file.cache.len() as u64),
            _ => (Kind::Dir, 0o700, 0),
        };
        let names = self.nodes.values().map(|node| match node {
            Node::Dir(entries) => entries.cache.values().filter(|&&i| i == ino).count(),
            Node::File(_) => 0,
        });
        let nlink = if ino == ROOT { 1 } else { names.sum::<usize>() };
        Meta {
            dev: 1,
            ino,
            kind,
            uid: steadfast_actors::fsx::euid(),
            mode,
            nlink: nlink as u64,
            len,
        }
    }

    /// `write` of `buf` at `at` into the file `ino`, faults and all.
    fn write(&mut self, ino: u64, at: u64, buf: &[u8]) -> io::Result<usize> {
        let at = index(at, buf.len())?;
        if !buf.is_empty()
            && let Some(before) = self.failing_write.get_mut(&ino)
        {
            if *before == 0 {
                self.failing_write.remove(&ino);
                self.counts.write_error += 1;
                self.trace.push(format!(
                    "write inode {ino} at {at}, {}: error {EIO} after 0 (scripted)",
                    buf.len()
                ));
                return Err(errno(EIO));
            }
            *before -= 1;
        }
        let faults = self.faults;
        if !buf.is_empty() && self.rng.chance(faults.write_error) {
            let landed = self.rng.below(buf.len() as u64) as usize;
            let code = if self.rng.chance(500) { ENOSPC } else { EIO };
            if self.spared() {
                self.file_mut(ino).write_at(at, buf);
                return Ok(buf.len());
            }
            self.counts.write_error += 1;
            self.counts.torn_write += u64::from(landed > 0);
            self.file_mut(ino).write_at(at, &buf[..landed]);
            self.trace.push(format!(
                "write inode {ino} at {at}, {}: error {code} after {landed}",
                buf.len()
            ));
            return Err(errno(code));
        }
        let n = if buf.len() > 1 && self.rng.chance(faults.short_write) {
            let n = 1 + self.rng.below(buf.len() as u64 - 1) as usize;
            if self.spared() {
                self.file_mut(ino).write_at(at, buf);
                return Ok(buf.len());
            }
            self.counts.short_write += 1;
            self.trace
                .push(format!("write inode {ino} at {at}, {}: {n}", buf.len()));
            n
        } else {
            buf.len()
        };
        self.file_mut(ino).write_at(at, &buf[..n]);
        Ok(n)
    }

    /// Whether a fault of `per_mille` strikes this call: counted in
    /// `count`, traced as `line`.
    fn fault(
        &mut self,
        per_mille: u32,
        count: fn(&mut FaultCounts) -> &mut u64,
        line: impl FnOnce() -> String,
    ) -> bool {
        let strikes = self.rng.chance(per_mille) && !self.spared();
        if strikes {
            *count(&mut self.counts) += 1;
            self.trace.push(line());
        }
        strikes
    }

    /// A fault was drawn: whether it is spared (a shrinker's
    /// [`SimFileSystem::spare_faults`]), numbered in the order drawn.
    fn spared(&mut self) -> bool {
        let ordinal = self.drawn_faults;
        self.drawn_faults += 1;
        self.spared.contains(&ordinal)
    }

    /// Whether a scripted failure ([`SimFileSystem::fail_next_fsyncs_of`])
    /// strikes this fsync of `ino`: counted with the fsync errors.
    fn scripted_fsync_failure(&mut self, ino: u64, line: impl FnOnce() -> String) -> bool {
        match self.failing_fsyncs.get_mut(&ino) {
            Some(left) if *left > 0 => {
                *left -= 1;
                self.counts.fsync_error += 1;
                self.trace.push(line());
                true
            }
            _ => false,
        }
    }

    /// `fsync` of the file `ino`.
    fn sync_file(&mut self, ino: u64) -> io::Result<()> {
        let file = self.file_mut(ino);
        let (from, to) = (file.durable.len().min(file.cache.len()), file.cache.len());
        let line = || format!("fsync inode {ino}: EIO, lost [{from}, {to})");
        let scripted = self.scripted_fsync_failure(ino, line);
        if scripted || self.fault(self.faults.fsync_error, |c| &mut c.fsync_error, line) {
            self.file_mut(ino).lose(to);
            return Err(errno(EIO));
        }
        if !self.fsync_skipped {
            self.file_mut(ino).persist();
        }
        Ok(())
    }

    /// `fsync` of the directory `ino`.
    fn sync_dir(&mut self, ino: u64) -> io::Result<()> {
        let line = || format!("fsync dir inode {ino}: EIO");
        let scripted = self.scripted_fsync_failure(ino, line);
        if scripted || self.fault(self.faults.dir_error, |c| &mut c.dir_error, line) {
            return Err(errno(EIO));
        }
        if !self.dir_sync_skipped {
            self.dir_mut(ino).sync();
        }
        Ok(())
    }

    /// `EMFILE` when this `open` or `dup` finds the descriptor table full.
    fn table_full(&mut self, what: impl fmt::Display) -> io::Result<()> {
        let line = || format!("{what}: EMFILE");
        if self.fault(self.faults.open_error, |c| &mut c.open_error, line) {
            return Err(errno(EMFILE));
        }
        Ok(())
    }

    /// The `flock` of `ino` released, if the description `id` holds it.
    fn release(&mut self, ino: u64, id: u64) {
        if self.locks.get(&ino) == Some(&id) {
            self.locks.remove(&ino);
        }
    }
}

/// The simulated file system; clones share it (the run keeps one while
/// the daemon holds another as an `Arc<dyn SimFs>`).
#[derive(Clone)]
pub struct SimFileSystem(Arc<Mutex<State>>);

impl fmt::Debug for SimFileSystem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SimFileSystem")
    }
}

impl SimFileSystem {
    /// An empty file system (the root directory alone), its faults and
    /// crashes drawn from `rng`.
    pub fn new(rng: Rng, faults: Faults) -> Self {
        Self(Arc::new(Mutex::new(State {
            nodes: BTreeMap::from([(ROOT, Node::Dir(Entries::default()))]),
            next_ino: ROOT,
            last_open: 0,
            generation: 0,
            locks: BTreeMap::new(),
            rng,
            faults,
            counts: FaultCounts::default(),
            trace: Vec::new(),
            fsync_skipped: false,
            dir_sync_skipped: false,
            drawn_faults: 0,
            spared: std::collections::BTreeSet::new(),
            failing_fsyncs: BTreeMap::new(),
            failing_write: BTreeMap::new(),
            failing_renames: 0,
        })))
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// `mkdir -p`, durable at once: a directory that was there before the
    /// daemon started (the data dir's parent, a test's set-up).
    ///
    /// # Errors
    /// The path's trouble (a file where a directory should be).
    pub fn create_dir_all_durable(&self, path: &Path) -> io::Result<()> {
        self.mkdir_p(path, true)
    }

    /// `mkdir -p`: each new entry durable at once (`durable`) or waiting
    /// for its parent's fsync.
    fn mkdir_p(&self, path: &Path, durable: bool) -> io::Result<()> {
        let mut state = self.state();
        let names = names(path)?;
        let mut dir = ROOT;
        for (i, name) in names.iter().enumerate() {
            dir = match state.entry(dir, name) {
                Some(ino) if state.dir(ino).is_some() => ino,
                Some(_) if i + 1 == names.len() => return Err(errno(EEXIST)),
                Some(_) => return Err(errno(ENOTDIR)),
                None => {
                    let ino = state.add(Node::Dir(Entries::default()));
                    let entries = state.dir_mut(dir);
                    if durable {
                        entries.cache.insert((*name).to_owned(), ino);
                        entries.durable.insert((*name).to_owned(), ino);
                    } else {
                        entries.change(vec![((*name).to_owned(), Some(ino))]);
                    }
                    ino
                }
            };
        }
        Ok(())
    }

    /// Inject `faults` from now on ([`Faults::NONE`]: a disk that settles).
    pub fn set_faults(&self, faults: Faults) {
        self.state().faults = faults;
    }

    /// Run `f` on a disk without faults (an operator's edit, which the
    /// daemon's checks should not count as the daemon's faults), then
    /// inject the faults as before.
    pub fn without_faults<T>(&self, f: impl FnOnce() -> T) -> T {
        let faults = std::mem::replace(&mut self.state().faults, Faults::NONE);
        let out = f();
        self.state().faults = faults;
        out
    }

    /// A scripted fault: the next `n` fsyncs of the file or directory
    /// `path` names now fail (`EIO`; a file's dirty pages lost, a
    /// directory's changes not made durable), whatever the faults drawn.
    ///
    /// # Panics
    /// If `path` names nothing.
    pub fn fail_next_fsyncs_of(&self, path: impl AsRef<Path>, n: u32) {
        let mut state = self.state();
        let ino = state
            .lookup(path.as_ref())
            .ok()
            .flatten()
            .expect("a file to fail the fsyncs of");
        state.failing_fsyncs.insert(ino, n);
    }

    /// A scripted fault: after `before` more writes into the file `path`
    /// names, the next one fails (`EIO`, nothing lands), whatever the
    /// faults drawn.
    ///
    /// # Panics
    /// If `path` names nothing.
    pub fn fail_a_write_of(&self, path: impl AsRef<Path>, before: u32) {
        let mut state = self.state();
        let ino = state
            .lookup(path.as_ref())
            .ok()
            .flatten()
            .expect("a file to fail a write of");
        state.failing_write.insert(ino, before);
    }

    /// A scripted fault: the next `n` renames fail (`EIO`, the old
    /// entries stay), whatever the faults drawn.
    pub fn fail_next_renames(&self, n: u32) {
        self.state().failing_renames = n;
    }

    /// Plant a defect (or remove it): a file's fsync does nothing and
    /// answers `Ok`, so what it answers for is acknowledged before it is
    /// durable.
    pub fn skip_fsync(&self, skip: bool) {
        self.state().fsync_skipped = skip;
    }

    /// Plant a defect (or remove it): a directory's fsync does nothing and
    /// answers `Ok`.
    pub fn skip_dir_sync(&self, skip: bool) {
        self.state().dir_sync_skipped = skip;
    }

    /// Draw every fault as before but inject none of `spared` (numbered
    /// from 0 in the order drawn): a shrinker's fewer faults, the rest of
    /// the seed's draws unchanged.
    pub fn spare_faults(&self, spared: std::collections::BTreeSet<u64>) {
        self.state().spared = spared;
    }

    /// How many faults were drawn so far (injected or spared).
    pub fn drawn_faults(&self) -> u64 {
        self.state().drawn_faults
    }

    /// The process died and the machine restarted (see the module doc).
    pub fn crash(&self) {
        let mut guard = self.state();
        let state = &mut *guard;
        state.generation += 1;
        state.locks.clear();
        state.counts.crash += 1;
        let mut before = std::mem::take(&mut state.nodes);
        let (mut files, mut unsynced, mut undone) = (0, 0, 0);
        let mut reached = vec![ROOT];
        while let Some(ino) = reached.pop() {
            let node = match before.remove(&ino) {
                Some(Node::Dir(entries)) => {
                    let (names, partial) = entries.after_crash(&mut state.rng);
                    undone += u64::from(partial);
                    reached.extend(names.values().rev());
                    Node::Dir(Entries {
                        cache: names.clone(),
                        durable: names,
                        pending: Vec::new(),
                    })
                }
                Some(Node::File(file)) => {
                    let (kept, partial) = file.after_crash(&mut state.rng);
                    files += 1;
                    unsynced += u64::from(partial);
                    Node::File(Inode::holding(kept))
                }
                None => continue,
            };
            state.nodes.insert(ino, node);
        }
        state.counts.crash_kept_unsynced += unsynced;
        state.counts.crash_kept_old_entry += undone;
        state.trace.push(format!(
            "crash {}: {files} files ({unsynced} with unsynced bytes), \
             {undone} directories lost a change",
            state.generation
        ));
    }

    /// The bytes of the file at `path` as a read sees them now (no fault):
    /// `None` when no file is there.
    pub fn read(&self, path: impl AsRef<Path>) -> Option<Vec<u8>> {
        let state = self.state();
        match state.nodes.get(&state.lookup(path.as_ref()).ok()??)? {
            Node::File(file) => Some(file.cache.clone()),
            Node::Dir(_) => None,
        }
    }

    /// The bytes of the file at `path` that any crash keeps: looked up
    /// through each directory's durable entries, the file's durable bytes
    /// (`None` when no file is there durably). What a crash now keeps of
    /// it starts with these.
    pub fn read_durable(&self, path: impl AsRef<Path>) -> Option<Vec<u8>> {
        let state = self.state();
        let mut ino = ROOT;
        for component in path.as_ref().components() {
            let Component::Normal(name) = component else {
                continue;
            };
            let Node::Dir(entries) = state.nodes.get(&ino)? else {
                return None;
            };
            ino = *entries.durable.get(name.to_str()?)?;
        }
        match state.nodes.get(&ino)? {
            Node::File(file) => Some(file.durable.clone()),
            Node::Dir(_) => None,
        }
    }

    /// Whether `path` names anything now.
    pub fn exists(&self, path: impl AsRef<Path>) -> bool {
        matches!(self.state().lookup(path.as_ref()), Ok(Some(_)))
    }

    /// Faults injected, and crashes, so far.
    pub fn counts(&self) -> FaultCounts {
        self.state().counts
    }

    /// Take the trace lines written so far.
    pub fn take_trace(&self) -> Vec<String> {
        std::mem::take(&mut self.state().trace)
    }

    /// The seeded generator (the workload draws from the same one, so one
    /// seed decides everything).
    pub fn with_rng<T>(&self, f: impl FnOnce(&mut Rng) -> T) -> T {
        f(&mut self.state().rng)
    }
}

impl SimFs for SimFileSystem {
    fn create_dir_all(&self, path: &Path) -> io::Result<()> {
        // Each new directory's entry waits for its parent's fsync, as
        // `create_dir`'s does.
        self.mkdir_p(path, false)
    }

    fn create_dir(&self, path: &Path) -> io::Result<bool> {
        let mut state = self.state();
        let Some((dir, name)) = state.split(path)? else {
            return Ok(false);
        };
        match state.entry(dir, &name) {
            Some(ino) if state.dir(ino).is_some() => Ok(false),
            Some(_) => Err(errno(EEXIST)),
            None => {
                let ino = state.add(Node::Dir(Entries::default()));
                state.dir_mut(dir).change(vec![(name, Some(ino))]);
                Ok(true)
            }
        }
    }

    fn open(&self, path: &Path, access: Access) -> io::Result<Box<dyn SimFile>> {
        // (read, write, append, create, exclusive)
        let (read, write, append, create, new) = match access {
            Access::Read => (true, false, false, false, false),
            Access::ReadWriteCreate => (true, true, false, true, false),
            Access::AppendCreate => (true, true, true, true, false),
            Access::AppendCreateNew => (true, true, true, true, true),
            Access::Append => (true, true, true, false, false),
            Access::WriteCreateNew => (false, true, false, true, true),
            Access::Write => (false, true, false, false, false),
        };
        let mut state = self.state();
        state.table_full(format_args!("open {}", path.display()))?;
        let split = state.split(path)?;
        let found = match &split {
            None => Some(ROOT),
            Some((dir, name)) => state.entry(*dir, name),
        };
        let ino = match (found, split) {
            (Some(_), _) if new => return Err(errno(EEXIST)),
            (Some(ino), _) if write && state.dir(ino).is_some() => return Err(errno(EISDIR)),
            (Some(ino), _) => ino,
            (None, Some((dir, name))) if create => {
                let ino = state.add(Node::File(Inode::default()));
                state.dir_mut(dir).change(vec![(name, Some(ino))]);
                ino
            }
            (None, _) => return Err(errno(ENOENT)),
        };
        state.last_open += 1;
        Ok(Box::new(Handle(Arc::new(Description {
            fs: self.clone(),
            id: state.last_open,
            generation: state.generation,
            ino,
            read,
            write,
            append,
            offset: Mutex::new(0),
        }))))
    }

    fn unlink(&self, path: &Path) -> io::Result<bool> {
        let mut state = self.state();
        let Some((dir, name)) = state.split(path)? else {
            return Err(errno(EISDIR));
        };
        match state.entry(dir, &name) {
            None => Ok(false),
            Some(ino) if state.dir(ino).is_some() => Err(errno(EISDIR)),
            Some(_) => {
                state.dir_mut(dir).change(vec![(name, None)]);
                Ok(true)
            }
        }
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        let mut state = self.state();
        let (Some((dir, from)), Some((to_dir, to))) = (state.split(from)?, state.split(to)?) else {
            return Err(errno(EINVAL));
        };
        if dir != to_dir {
            return Err(errno(EXDEV));
        }
        let ino = state.entry(dir, &from).ok_or_else(|| errno(ENOENT))?;
        let over = state.entry(dir, &to).filter(|old| *old != ino);
        if over.is_some_and(|old| state.dir(old).is_some()) {
            return Err(errno(EISDIR));
        }
        if over.is_some() && state.dir(ino).is_some() {
            return Err(errno(ENOTDIR));
        }
        let (per_mille, line) = (state.faults.dir_error, || {
            format!("rename {from} -> {to}: EIO")
        });
        let scripted = state.failing_renames > 0;
        if scripted {
            state.failing_renames -= 1;
            state.counts.dir_error += 1;
            state.trace.push(line());
        }
        if scripted || state.fault(per_mille, |c| &mut c.dir_error, line) {
            return Err(errno(EIO));
        }
        if from != to {
            state
                .dir_mut(dir)
                .change(vec![(from, None), (to, Some(ino))]);
        }
        Ok(())
    }

    fn sync_dir(&self, path: &Path) -> io::Result<()> {
        let mut state = self.state();
        let ino = state.lookup(path)?.ok_or_else(|| errno(ENOENT))?;
        if state.dir(ino).is_none() {
            return Err(errno(ENOTDIR));
        }
        state.sync_dir(ino)
    }

    fn stat(&self, path: &Path) -> io::Result<Option<Meta>> {
        let state = self.state();
        Ok(state.lookup(path)?.map(|ino| state.meta(ino)))
    }
}

/// An open file description, shared by its clones ([`Handle`]s).
struct Description {
    fs: SimFileSystem,
    id: u64,
    /// The process's life it was opened in.
    generation: u64,
    ino: u64,
    read: bool,
    write: bool,
    append: bool,
    offset: Mutex<u64>,
}

impl Drop for Description {
    /// The last clone is gone: its `flock`, if it holds one, is released
    /// (a crash released it already, and ids are never reused).
    fn drop(&mut self) {
        self.fs.state().release(self.ino, self.id);
    }
}

/// One descriptor: a [`SimFile`] on a shared [`Description`].
struct Handle(Arc<Description>);

impl fmt::Debug for Handle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SimFile(inode {}, open {})", self.0.ino, self.0.id)
    }
}

impl Handle {
    /// The file system's state, once the description is known to be of
    /// this life of the process (`EIO` after a crash).
    fn state(&self) -> io::Result<MutexGuard<'_, State>> {
        let state = self.0.fs.state();
        if state.generation == self.0.generation {
            Ok(state)
        } else {
            Err(errno(EIO))
        }
    }

    /// The description's offset (taken after the state).
    fn offset(&self) -> MutexGuard<'_, u64> {
        self.0.offset.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Where a write meant for `at` lands: at the end when appending (for
    /// `pwrite` too, as Linux does).
    fn landing(&self, state: &State, at: u64) -> io::Result<u64> {
        match state.nodes.get(&self.0.ino) {
            _ if !self.0.write => Err(errno(EBADF)),
            Some(Node::File(file)) if self.0.append => Ok(file.cache.len() as u64),
            Some(Node::File(_)) => Ok(at),
            _ => Err(errno(EISDIR)),
        }
    }
}

impl SimFile for Handle {
    fn read(&self, buf: &mut [u8]) -> io::Result<usize> {
        let state = self.state()?;
        if !self.0.read {
            return Err(errno(EBADF));
        }
        let Some(Node::File(file)) = state.nodes.get(&self.0.ino) else {
            return Err(errno(EISDIR));
        };
        let mut offset = self.offset();
        let from = usize::try_from(*offset).map_or(file.cache.len(), |o| o.min(file.cache.len()));
        let n = buf.len().min(file.cache.len() - from);
        buf[..n].copy_from_slice(&file.cache[from..from + n]);
        *offset += n as u64;
        Ok(n)
    }

    fn write(&self, buf: &[u8]) -> io::Result<usize> {
        let mut state = self.state()?;
        let mut offset = self.offset();
        let at = self.landing(&state, *offset)?;
        let n = state.write(self.0.ino, at, buf)?;
        *offset = at + n as u64;
        Ok(n)
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<usize> {
        let mut state = self.state()?;
        let at = self.landing(&state, offset)?;
        state.write(self.0.ino, at, buf)
    }

    fn seek(&self, pos: SeekFrom) -> io::Result<u64> {
        let state = self.state()?;
        let len = state.meta(self.0.ino).len;
        let mut offset = self.offset();
        *offset = match pos {
            SeekFrom::Start(to) => Some(to),
            SeekFrom::Current(by) => offset.checked_add_signed(by),
            SeekFrom::End(by) => len.checked_add_signed(by),
        }
        .ok_or_else(|| errno(EINVAL))?;
        Ok(*offset)
    }

    fn sync(&self, _data_only: bool) -> io::Result<()> {
        let mut state = self.state()?;
        if state.dir(self.0.ino).is_some() {
            state.sync_dir(self.0.ino)
        } else {
            state.sync_file(self.0.ino)
        }
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        let mut state = self.state()?;
        if !self.0.write || state.dir(self.0.ino).is_some() {
            return Err(errno(EINVAL));
        }
        state.file_mut(self.0.ino).set_len(index(len, 0)?);
        Ok(())
    }

    fn meta(&self) -> io::Result<Meta> {
        Ok(self.state()?.meta(self.0.ino))
    }

    fn try_lock(&self) -> Result<(), TryLockError> {
        let mut state = self.state().map_err(TryLockError::Error)?;
        match state.locks.get(&self.0.ino) {
            Some(holder) if *holder != self.0.id => Err(TryLockError::WouldBlock),
            _ => {
                state.locks.insert(self.0.ino, self.0.id);
                Ok(())
            }
        }
    }

    fn unlock(&self) -> io::Result<()> {
        self.state()?.release(self.0.ino, self.0.id);
        Ok(())
    }

    fn try_clone(&self) -> io::Result<Box<dyn SimFile>> {
        let mut state = self.state()?;
        state.table_full(format_args!("dup inode {}", self.0.ino))?;
        Ok(Box::new(Self(Arc::clone(&self.0))))
    }
}

mod tests {
    use std::fs::TryLockError;
    use std::io;
    use std::path::Path;

    use steadfast_actors::fsx::sim::{Kind, SimFile, SimFs};
    use steadfast_actors::fsx::{Access, euid};

    use super::{
        EBADF, EEXIST, EIO, EISDIR, ENOENT, ENOTDIR, FaultCounts, Faults, Rng, SimFileSystem,
    };

    /// A file system of `seed` with `/data` and no faults.
    fn fresh(seed: u64) -> SimFileSystem {
        let fs = SimFileSystem::new(Rng::new(seed), Faults::NONE);
        fs.create_dir_all_durable(Path::new("/data"))
            .expect("the data dir");
        fs
    }

    fn open(fs: &SimFileSystem, path: &str, access: Access) -> Box<dyn SimFile> {
        fs.open(Path::new(path), access).expect("opened")
    }

    fn sync_data_dir(fs: &SimFileSystem) {
        fs.sync_dir(Path::new("/data"))
            .expect("the data dir synced");
    }

    fn errno<T>(result: io::Result<T>) -> Option<i32> {
        result.err().and_then(|error| error.raw_os_error())
    }

    /// Over 32 seeds, what a crash leaves of `synced` + `unsynced` appended
    /// to a file (with fsyncs that do nothing when `skip`).
    fn appended_then_crashed(skip: bool) -> Vec<Vec<u8>> {
        (0..32)
            .map(|seed| {
                let fs = fresh(seed);
                fs.skip_fsync(skip);
                let file = open(&fs, "/data/log", Access::AppendCreate);
                sync_data_dir(&fs);
                assert_eq!(file.write(b"synced").ok(), Some(6));
                file.sync(true).expect("synced");
                assert_eq!(file.write(b"+unsynced").ok(), Some(9));
                fs.crash();
                fs.read("/data/log").expect("its entry was synced")
            })
            .collect()
    }

    #[test]
    fn a_synced_write_survives_a_crash_and_an_unsynced_one_may_not() {
        let kept = appended_then_crashed(false);
        assert!(
            kept.iter()
                .all(|bytes| bytes.starts_with(b"synced") && b"synced+unsynced".starts_with(bytes))
        );
        assert!(
            kept.iter().any(|bytes| bytes == b"synced"),
            "some seed drops it"
        );
        assert!(
            kept.iter().any(|bytes| bytes.len() > 6),
            "some seed keeps some"
        );
        let planted = appended_then_crashed(true);
        assert!(planted.iter().any(|bytes| !bytes.starts_with(b"synced")));
    }

    /// What `j` and `t` hold.
    type Both = (Option<Vec<u8>>, Option<Vec<u8>>);

    /// Over 32 seeds, the journal `j` and the temp file `t` after `t` is
    /// renamed over `j` and a crash (the rename's directory synced when
    /// `sync`, by an fsync that does nothing when `skip`).
    fn renamed_then_crashed(sync: bool, skip: bool) -> Vec<Both> {
        (0..32)
            .map(|seed| {
                let fs = fresh(seed);
                for (name, bytes) in [("/data/j", b"old"), ("/data/t", b"new")] {
                    let file = open(&fs, name, Access::WriteCreateNew);
                    assert_eq!(file.write(bytes).ok(), Some(3));
                    file.sync(false).expect("synced");
                }
                sync_data_dir(&fs);
                fs.skip_dir_sync(skip);
                fs.rename(Path::new("/data/t"), Path::new("/data/j"))
                    .expect("renamed");
                if sync {
                    sync_data_dir(&fs);
                }
                fs.crash();
                (fs.read("/data/j"), fs.read("/data/t"))
            })
            .collect()
    }

    #[test]
    fn a_rename_is_undone_by_a_crash_until_its_directory_is_synced() {
        let moved = (Some(b"new".to_vec()), None);
        let undone = (Some(b"old".to_vec()), Some(b"new".to_vec()));
        let unsynced = renamed_then_crashed(false, false);
        assert!(
            unsynced
                .iter()
                .all(|after| *after == moved || *after == undone)
        );
        assert!(unsynced.contains(&undone) && unsynced.contains(&moved));
        assert!(
            renamed_then_crashed(true, false)
                .iter()
                .all(|after| *after == moved)
        );
        assert!(renamed_then_crashed(true, true).contains(&undone));
    }

    #[test]
    fn a_failed_fsyncs_bytes_never_become_durable() {
        for (seed, retried) in (0..16).flat_map(|seed| [(seed, false), (seed, true)]) {
            let fs = fresh(seed);
            let file = open(&fs, "/data/f", Access::AppendCreate);
            sync_data_dir(&fs);
            assert_eq!(file.write(b"abc").ok(), Some(3));
            file.sync(true).expect("synced");
            assert_eq!(file.write(b"def").ok(), Some(3));
            fs.set_faults(Faults {
                fsync_error: 1000,
                ..Faults::NONE
            });
            assert_eq!(errno(file.sync(true)), Some(EIO));
            fs.set_faults(Faults::NONE);
            assert_eq!(fs.read("/data/f").as_deref(), Some(&b"abcdef"[..]));
            if retried {
                file.sync(true).expect("the retry succeeds");
            }
            fs.crash();
            let left: &[u8] = if retried { b"abc\0\0\0" } else { b"abc" };
            assert_eq!(fs.read("/data/f").as_deref(), Some(left), "seed {seed}");
        }
    }

    /// Two failed fsyncs with a synced write between them: what was synced
    /// between them stays durable (the model once kept one lost range,
    /// which swallowed it).
    #[test]
    fn a_synced_write_between_two_failed_fsyncs_stays_durable() {
        let fs = fresh(3);
        let file = open(&fs, "/data/f", Access::AppendCreate);
        sync_data_dir(&fs);
        let failing = Faults {
            fsync_error: 1000,
            ..Faults::NONE
        };
        for (bytes, fails) in [(b"aa", true), (b"bb", false), (b"cc", true), (b"dd", false)] {
            assert_eq!(file.write(bytes).ok(), Some(2));
            fs.set_faults(if fails { failing } else { Faults::NONE });
            assert_eq!(file.sync(true).is_err(), fails);
        }
        fs.set_faults(Faults::NONE);
        fs.crash();
        assert_eq!(fs.read("/data/f").as_deref(), Some(&b"\0\0bb\0\0dd"[..]));
    }

    #[test]
    fn a_lock_is_held_until_the_last_clone_drops_or_a_crash() {
        let fs = fresh(1);
        let blocked = |file: &dyn SimFile| matches!(file.try_lock(), Err(TryLockError::WouldBlock));
        let a = open(&fs, "/data/lock", Access::ReadWriteCreate);
        let b = open(&fs, "/data/lock", Access::ReadWriteCreate);
        a.try_lock().expect("free");
        a.try_lock().expect("the holder locks again");
        assert!(blocked(&*b));
        let a_clone = a.try_clone().expect("dup");
        drop(a);
        assert!(blocked(&*b), "a clone still holds it");
        drop(a_clone);
        b.try_lock().expect("released with the last clone");
        let c = open(&fs, "/data/lock", Access::Read);
        c.unlock().expect("none held: nothing to do");
        assert!(blocked(&*c), "b holds it still");
        b.unlock().expect("unlocked");
        c.try_lock().expect("released by unlock");
        drop(c);
        b.try_lock().expect("released with c");
        sync_data_dir(&fs);
        fs.crash();
        let c = open(&fs, "/data/lock", Access::ReadWriteCreate);
        c.try_lock().expect("released by the crash");
        assert!(matches!(b.try_lock(), Err(TryLockError::Error(_))));
        drop(b);
        assert!(
            blocked(&*open(&fs, "/data/lock", Access::Read)),
            "c holds it"
        );
    }

    #[test]
    fn open_answers_per_access() {
        let fs = fresh(2);
        open(&fs, "/data/here", Access::WriteCreateNew);
        let cases = [
            (Access::Read, None, Some(ENOENT)),
            (Access::ReadWriteCreate, None, None),
            (Access::AppendCreate, None, None),
            (Access::AppendCreateNew, Some(EEXIST), None),
            (Access::Append, None, Some(ENOENT)),
            (Access::WriteCreateNew, Some(EEXIST), None),
            (Access::Write, None, Some(ENOENT)),
        ];
        for (i, (access, present, absent)) in cases.into_iter().enumerate() {
            let here = fs.open(Path::new("/data/here"), access);
            assert_eq!(errno(here), present, "{access:?} on a file");
            let path = format!("/data/new{i}");
            assert_eq!(
                errno(fs.open(Path::new(&path), access)),
                absent,
                "{access:?}"
            );
            assert_eq!(fs.exists(&path), absent.is_none(), "{access:?} creates");
        }
        let dir = open(&fs, "/data", Access::Read);
        assert_eq!(dir.meta().map(|meta| meta.kind).ok(), Some(Kind::Dir));
        assert_eq!(
            errno(fs.open(Path::new("/data"), Access::Write)),
            Some(EISDIR)
        );
        let nowhere = fs.open(Path::new("/nowhere/f"), Access::AppendCreate);
        assert_eq!(errno(nowhere), Some(ENOENT));
        let under_a_file = fs.open(Path::new("/data/here/f"), Access::AppendCreate);
        assert_eq!(errno(under_a_file), Some(ENOTDIR));
        let reader = open(&fs, "/data/here", Access::Read);
        assert_eq!(errno(reader.write(b"x")), Some(EBADF));
        let writer = open(&fs, "/data/here", Access::Write);
        assert_eq!(errno(writer.read(&mut [0; 4])), Some(EBADF));
        let meta = writer.meta().expect("fstat");
        assert_eq!(
            (meta.kind, meta.mode, meta.uid),
            (Kind::File, 0o600, euid())
        );
        assert_eq!(meta.nlink, 1);
        assert_eq!(fs.unlink(Path::new("/data/here")).ok(), Some(true));
        assert_eq!(writer.meta().map(|meta| meta.nlink).ok(), Some(0));
        assert_eq!(fs.unlink(Path::new("/data/here")).ok(), Some(false));
    }

    #[test]
    fn a_handle_from_before_a_crash_fails_after_it() {
        let fs = fresh(3);
        let file = open(&fs, "/data/f", Access::AppendCreate);
        fs.crash();
        assert_eq!(errno(file.write(b"x")), Some(EIO));
        assert_eq!(errno(file.write_at(b"x", 0)), Some(EIO));
        assert_eq!(errno(file.read(&mut [0; 1])), Some(EIO));
        assert_eq!(errno(file.seek(io::SeekFrom::End(0))), Some(EIO));
        assert_eq!(errno(file.sync(true)), Some(EIO));
        assert_eq!(errno(file.set_len(0)), Some(EIO));
        assert_eq!(errno(file.meta()), Some(EIO));
        assert_eq!(errno(file.try_clone()), Some(EIO));
        assert_eq!(errno(file.unlock()), Some(EIO));
        assert!(
            matches!(file.try_lock(), Err(TryLockError::Error(e)) if e.raw_os_error() == Some(EIO))
        );
    }

    #[test]
    fn faults_none_injects_nothing() {
        let fs = fresh(4);
        for i in 0..2000 {
            let path = format!("/data/f{}", i % 7);
            let file = open(&fs, &path, Access::AppendCreate);
            assert_eq!(file.write(b"0123456789").ok(), Some(10));
            file.sync(true).expect("no fsync error");
            drop(file.try_clone().expect("no EMFILE"));
            fs.rename(Path::new(&path), Path::new("/data/g"))
                .expect("no rename error");
            sync_data_dir(&fs);
        }
        assert_eq!(fs.counts(), FaultCounts::default());
        assert!(fs.take_trace().is_empty());
    }

    /// A random workload of `seed` under frequent faults: its trace and
    /// counts.
    fn workload(seed: u64) -> (Vec<String>, FaultCounts) {
        let fs = SimFileSystem::new(Rng::new(seed), Faults::NONE);
        fs.create_dir_all_durable(Path::new("/data/ctl"))
            .expect("made");
        fs.set_faults(Faults {
            open_error: 100,
            write_error: 100,
            short_write: 100,
            fsync_error: 100,
            dir_error: 100,
        });
        let mut files = Vec::new();
        for _ in 0..400 {
            let (op, name) = fs.with_rng(|rng| (rng.below(7), format!("f{}", rng.below(4))));
            let path = Path::new("/data/ctl").join(name);
            // Errors are the point: the trace records them.
            let _ = match op {
                0 => fs.open(&path, Access::AppendCreate).map(|f| files.push(f)),
                1 => files
                    .last()
                    .map_or(Ok(()), |f| f.write(b"record").map(drop)),
                2 => files.last().map_or(Ok(()), |f| f.sync(true)),
                3 => fs.rename(&path, Path::new("/data/ctl/f0")),
                4 => fs.sync_dir(Path::new("/data/ctl")),
                5 => fs.unlink(&path).map(drop),
                _ => {
                    fs.crash();
                    files.clear();
                    Ok(())
                }
            };
        }
        (fs.take_trace(), fs.counts())
    }

    #[test]
    fn a_seed_replays_to_the_same_trace() {
        let mut total = FaultCounts::default();
        for seed in 0..8 {
            let (trace, counts) = workload(seed);
            assert_eq!(workload(seed), (trace, counts), "seed {seed}");
            total.add(&counts);
        }
        assert_ne!(workload(0).0, workload(1).0);
        assert!(total.open_error > 0 && total.torn_write > 0 && total.short_write > 0);
        assert!(total.fsync_error > 0 && total.dir_error > 0 && total.crash > 0);
        assert!(total.crash_kept_unsynced > 0 && total.crash_kept_old_entry > 0);
    }
}
