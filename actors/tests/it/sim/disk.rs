//! A simulated disk holding the control directory's journal: per file
//! (inode), what the page cache holds (what a read, an `fstat` and the next
//! `O_APPEND` write see) and what is durable (what a crash keeps); per
//! directory entry, the same; faults drawn from the run's seed.
//!
//! The model, as Linux behaves on ext4/xfs for the calls the writer makes:
//! - `write` lands in the page cache. A failed write (`ENOSPC`, `EIO`) may
//!   have landed a prefix first (a torn write); a write may also be short
//!   (`Ok(n < len)`) with no error.
//! - `fdatasync` makes the file's page cache durable. A failed one (`EIO`)
//!   leaves the durable bytes as they were and, as Linux does, marks the
//!   dirty pages clean: their bytes stay readable but no later fsync
//!   writes them (they are *lost*; a crash, or a later successful fsync,
//!   leaves zeros in their place).
//! - `ftruncate` + `fsync` (a cut back) may fail at either call; a
//!   truncation not yet synced may or may not survive a crash.
//! - A rename changes the directory's entries in the cache; only a
//!   directory fsync makes them durable. A crash keeps the durable entries,
//!   or, for entries changed since, either (the rename may have reached
//!   the disk on its own).
//! - A crash keeps each file's durable bytes, plus any prefix of the bytes
//!   written since (the kernel may have written some back), never a lost
//!   byte.
//!
//! A file's bytes are an [`Inode`] (`inode.rs`), shared with the general
//! simulated file system (`fs.rs`).

use std::collections::BTreeMap;
use std::io::{self, Write};
use std::sync::{Arc, Mutex, PoisonError};

use steadfast_actors::control_dir::{COMPACT_TMP_NAME, ControlDirError, JournalDir, JournalSink};

use super::inode::Inode;
use super::rng::Rng;

/// The journal's name in the simulated directory.
pub const JOURNAL: &str = "journal";

/// How often each fault is injected, per thousand calls of its kind.
#[derive(Debug, Clone, Copy)]
pub struct Faults {
    /// A write fails (`ENOSPC` or `EIO`), a random prefix landed first.
    pub write_error: u32,
    /// A write is short without an error.
    pub short_write: u32,
    /// An `fdatasync` fails (`EIO`), and the dirty pages are lost.
    pub fsync_error: u32,
    /// A cut back's `ftruncate` or its `fsync` fails.
    pub cut_error: u32,
    /// An `fstat` fails.
    pub stat_error: u32,
    /// A compaction's rename, or the directory's fsync, fails.
    pub dir_error: u32,
}

impl Faults {
    /// None: a disk that fails only where a test says
    /// ([`SimDisk::fail_next_fsyncs`], [`SimDisk::fail_next_write`]).
    pub const NONE: Self = Self {
        write_error: 0,
        short_write: 0,
        fsync_error: 0,
        cut_error: 0,
        stat_error: 0,
        dir_error: 0,
    };

    /// Faults far more often than a disk has them: every append meets one
    /// within a few tries.
    pub const HEAVY: Self = Self {
        write_error: 60,
        short_write: 80,
        fsync_error: 60,
        cut_error: 80,
        stat_error: 10,
        dir_error: 60,
    };
}

/// How many faults of each class a run injected.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct FaultCounts {
    pub write_error: u64,
    pub torn_write: u64,
    pub short_write: u64,
    pub fsync_error: u64,
    pub cut_error: u64,
    pub stat_error: u64,
    pub dir_error: u64,
    pub crash: u64,
    pub crash_kept_unsynced: u64,
    pub crash_kept_old_entry: u64,
    pub compactions: u64,
}

impl FaultCounts {
    pub fn add(&mut self, other: &Self) {
        self.write_error += other.write_error;
        self.torn_write += other.torn_write;
        self.short_write += other.short_write;
        self.fsync_error += other.fsync_error;
        self.cut_error += other.cut_error;
        self.stat_error += other.stat_error;
        self.dir_error += other.dir_error;
        self.crash += other.crash;
        self.crash_kept_unsynced += other.crash_kept_unsynced;
        self.crash_kept_old_entry += other.crash_kept_old_entry;
        self.compactions += other.compactions;
    }
}

/// The disk's state: files, and the one directory's entries.
#[derive(Debug)]
struct State {
    inodes: Vec<Inode>,
    /// Names as lookups see them.
    names: BTreeMap<String, usize>,
    /// Names as a crash keeps them.
    durable_names: BTreeMap<String, usize>,
    rng: Rng,
    faults: Faults,
    counts: FaultCounts,
    /// What happened, one line a call, for the run's trace.
    trace: Vec<String>,
    /// Fsyncs (a cut back's included) to fail next, whatever the seed says.
    failing_fsyncs: u32,
    /// Writes to fail next.
    failing_writes: u32,
    /// A planted defect: the directory fsync does nothing (and says `Ok`).
    dir_sync_skipped: bool,
    /// A planted defect: a file's fsync does nothing (and says `Ok`): what
    /// it answers for is acknowledged before it is durable.
    fsync_skipped: bool,
}

impl State {
    /// Whether this fsync fails: a scripted failure, else the seed's.
    fn fsync_fails(&mut self, per_mille: u32) -> bool {
        if self.failing_fsyncs > 0 {
            self.failing_fsyncs -= 1;
            return true;
        }
        self.rng.chance(per_mille)
    }

    fn new_inode(&mut self, inode: Inode) -> usize {
        self.inodes.push(inode);
        self.inodes.len() - 1
    }
}

/// The simulated disk: its directory ([`JournalDir`]) and, through
/// [`SimDisk::file`], the writer's handle on the journal.
#[derive(Debug, Clone)]
pub struct SimDisk(Arc<Mutex<State>>);

impl SimDisk {
    /// A disk whose journal holds `bytes`, all durable.
    pub fn new(bytes: Vec<u8>, rng: Rng, faults: Faults) -> Self {
        let names = BTreeMap::from([(JOURNAL.to_owned(), 0)]);
        Self(Arc::new(Mutex::new(State {
            inodes: vec![Inode::holding(bytes)],
            durable_names: names.clone(),
            names,
            rng,
            faults,
            counts: FaultCounts::default(),
            trace: Vec::new(),
            failing_fsyncs: 0,
            failing_writes: 0,
            dir_sync_skipped: false,
            fsync_skipped: false,
        })))
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Fail the next write (`EIO`, a random prefix landed).
    pub fn fail_next_write(&self) {
        self.state().failing_writes = 1;
    }

    /// Fail the next `n` fsyncs (`EIO`, their dirty pages lost), a cut
    /// back's included.
    pub fn fail_next_fsyncs(&self, n: u32) {
        self.state().failing_fsyncs = n;
    }

    /// Plant a defect: the directory's fsync does nothing.
    pub fn skip_dir_sync(&self) {
        self.state().dir_sync_skipped = true;
    }

    /// Plant a defect: a file's `fdatasync` does nothing.
    pub fn skip_fsync(&self) {
        self.state().fsync_skipped = true;
    }

    /// A handle on the journal as its name finds it now.
    pub fn file(&self) -> SimFile {
        let inode = self.state().names[JOURNAL];
        SimFile {
            disk: self.clone(),
            inode,
        }
    }

    /// The process crashed: what the journal holds when the machine comes
    /// back (see the module doc). The disk then holds exactly that,
    /// durable, under the journal's name alone.
    pub fn crash(&self) -> Vec<u8> {
        let mut guard = self.state();
        let state = &mut *guard;
        state.counts.crash += 1;
        let cached = state.names.get(JOURNAL).copied();
        let durable = state.durable_names.get(JOURNAL).copied();
        let inode = match (cached, durable) {
            (Some(cached), Some(durable)) if cached != durable => {
                if state.rng.chance(500) {
                    cached
                } else {
                    state.counts.crash_kept_old_entry += 1;
                    durable
                }
            }
            (Some(inode), _) | (None, Some(inode)) => inode,
            (None, None) => unreachable!("the journal always has a name"),
        };
        let (kept, unsynced) = state.inodes[inode].after_crash(&mut state.rng);
        if unsynced {
            state.counts.crash_kept_unsynced += 1;
        }
        state.trace.push(format!(
            "crash: the journal is inode {inode}, {} bytes kept",
            kept.len()
        ));
        drop(guard);
        self.reset(kept.clone());
        kept
    }

    /// The journal after a reopen repaired it (`open_journal`'s repair
    /// writes and fsyncs): `bytes`, durable, alone on the disk.
    pub fn reset(&self, bytes: Vec<u8>) {
        let mut state = self.state();
        state.inodes = vec![Inode::holding(bytes)];
        state.names = BTreeMap::from([(JOURNAL.to_owned(), 0)]);
        state.durable_names = state.names.clone();
    }

    /// Faults injected so far.
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

fn os_error(code: i32) -> io::Error {
    io::Error::from_raw_os_error(code)
}

fn eio() -> io::Error {
    os_error(rustix::io::Errno::IO.raw_os_error())
}

fn dir_error(name: &str) -> ControlDirError {
    ControlDirError::Io {
        path: format!("sim/{name}").into(),
        source: eio(),
    }
}

impl JournalDir for SimDisk {
    type Sink = SimFile;

    fn read_journal(&self) -> Result<Option<Vec<u8>>, ControlDirError> {
        let state = self.state();
        Ok(state
            .names
            .get(JOURNAL)
            .map(|inode| state.inodes[*inode].cache.clone()))
    }

    fn write_temp(&self, bytes: &[u8]) -> Result<(), ControlDirError> {
        let mut state = self.state();
        let faults = state.faults;
        state.counts.compactions += 1;
        let inode = state.new_inode(Inode::default());
        state.names.insert(COMPACT_TMP_NAME.to_owned(), inode);
        if state.rng.chance(faults.write_error) {
            state.counts.write_error += 1;
            state.trace.push("compact: temp write EIO".to_owned());
            return Err(dir_error(COMPACT_TMP_NAME));
        }
        state.inodes[inode].cache = bytes.to_vec();
        if state.fsync_fails(faults.fsync_error) {
            state.counts.fsync_error += 1;
            state.inodes[inode].lose(bytes.len());
            state.trace.push("compact: temp fsync EIO".to_owned());
            return Err(dir_error(COMPACT_TMP_NAME));
        }
        state.inodes[inode].persist();
        state.trace.push(format!(
            "compact: temp inode {inode}, {} bytes durable",
            bytes.len()
        ));
        Ok(())
    }

    fn rename_temp(&self) -> Result<(), ControlDirError> {
        let mut state = self.state();
        let faults = state.faults;
        if state.rng.chance(faults.dir_error) {
            state.counts.dir_error += 1;
            state.trace.push("compact: rename EIO".to_owned());
            return Err(dir_error(JOURNAL));
        }
        let inode = state
            .names
            .remove(COMPACT_TMP_NAME)
            .ok_or_else(|| dir_error(COMPACT_TMP_NAME))?;
        state.names.insert(JOURNAL.to_owned(), inode);
        state
            .trace
            .push(format!("compact: renamed inode {inode} over the journal"));
        Ok(())
    }

    fn unlink_temp(&self) {
        self.state().names.remove(COMPACT_TMP_NAME);
    }

    fn sync(&self) -> Result<(), ControlDirError> {
        let mut state = self.state();
        let faults = state.faults;
        if state.rng.chance(faults.dir_error) {
            state.counts.dir_error += 1;
            state.trace.push("dir fsync: EIO".to_owned());
            return Err(dir_error("."));
        }
        if state.dir_sync_skipped {
            state.trace.push("dir fsync: skipped (planted)".to_owned());
            return Ok(());
        }
        state.durable_names = state.names.clone();
        state.trace.push("dir fsync: entries durable".to_owned());
        Ok(())
    }

    fn open_journal(&self) -> Result<SimFile, ControlDirError> {
        Ok(self.file())
    }
}

/// The writer's handle on one simulated file.
#[derive(Debug)]
pub struct SimFile {
    disk: SimDisk,
    inode: usize,
}

impl SimFile {
    fn with<T>(&self, f: impl FnOnce(&mut State, usize) -> T) -> T {
        f(&mut self.disk.state(), self.inode)
    }
}

impl Write for SimFile {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.with(|state, inode| {
            let faults = state.faults;
            let scripted = std::mem::take(&mut state.failing_writes) > 0;
            if !buf.is_empty() && (scripted || state.rng.chance(faults.write_error)) {
                state.counts.write_error += 1;
                let landed = state.rng.below(buf.len() as u64) as usize;
                if landed > 0 {
                    state.counts.torn_write += 1;
                }
                state.inodes[inode].cache.extend_from_slice(&buf[..landed]);
                let code = if state.rng.chance(500) {
                    rustix::io::Errno::NOSPC.raw_os_error()
                } else {
                    rustix::io::Errno::IO.raw_os_error()
                };
                state
                    .trace
                    .push(format!("write {}: error {code} after {landed}", buf.len()));
                return Err(os_error(code));
            }
            let n = if buf.len() > 1 && state.rng.chance(faults.short_write) {
                state.counts.short_write += 1;
                1 + state.rng.below(buf.len() as u64 - 1) as usize
            } else {
                buf.len()
            };
            state.inodes[inode].cache.extend_from_slice(&buf[..n]);
            state.trace.push(format!("write {}: {n}", buf.len()));
            Ok(n)
        })
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl JournalSink for SimFile {
    fn sync_data(&mut self) -> io::Result<()> {
        self.with(|state, inode| {
            let faults = state.faults;
            if state.fsync_fails(faults.fsync_error) {
                state.counts.fsync_error += 1;
                // The dirty pages are marked clean: what was written since
                // the last fsync is lost.
                let file = &mut state.inodes[inode];
                let (from, to) = (file.durable.len().min(file.cache.len()), file.cache.len());
                file.lose(to);
                state.trace.push(format!("fsync: EIO, lost [{from}, {to})"));
                return Err(eio());
            }
            if state.fsync_skipped {
                state.trace.push("fsync: skipped (planted)".to_owned());
                return Ok(());
            }
            state.inodes[inode].persist();
            let line = format!("fsync: {} durable", state.inodes[inode].durable.len());
            state.trace.push(line);
            Ok(())
        })
    }

    fn current_len(&mut self) -> io::Result<u64> {
        self.with(|state, inode| {
            let faults = state.faults;
            if state.rng.chance(faults.stat_error) {
                state.counts.stat_error += 1;
                state.trace.push("fstat: EIO".to_owned());
                return Err(eio());
            }
            Ok(state.inodes[inode].cache.len() as u64)
        })
    }

    fn cut_back(&mut self, len: u64) -> io::Result<()> {
        self.with(|state, inode| {
            let faults = state.faults;
            let len = usize::try_from(len).map_err(io::Error::other)?;
            let now = state.inodes[inode].cache.len();
            if now < len {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("the file is {now} bytes, shorter than {len}"),
                ));
            }
            if state.rng.chance(faults.cut_error) {
                state.counts.cut_error += 1;
                state.trace.push(format!("ftruncate {len}: EIO"));
                return Err(eio());
            }
            state.inodes[inode].set_len(len);
            if state.fsync_fails(faults.cut_error) {
                // The fsync after the truncation failed: as any failed
                // fsync, the dirty pages below `len` are marked clean and
                // lost.
                state.counts.cut_error += 1;
                state.inodes[inode].lose(len);
                state.trace.push(format!("ftruncate {len}, fsync: EIO"));
                return Err(eio());
            }
            state.inodes[inode].persist();
            state.trace.push(format!("cut back to {len}, fsynced"));
            Ok(())
        })
    }
}
