//! A simulated disk holding one file (the journal): per byte, what the page
//! cache holds (what a read, an `fstat` and the next `O_APPEND` write see)
//! and what is durable (what a crash keeps), with faults drawn from the
//! run's seed.
//!
//! The model, as Linux behaves on ext4/xfs for the calls the writer makes:
//! - `write` lands in the page cache. A failed write (`ENOSPC`, `EIO`) may
//!   have landed a prefix first (a torn write); a write may also be short
//!   (`Ok(n < len)`) with no error.
//! - `fdatasync` makes the page cache durable. A failed one (`EIO`) leaves
//!   the durable bytes as they were and, as Linux does, marks the dirty
//!   pages clean: their bytes stay readable but no later fsync writes them
//!   (they are *lost*; a crash, or a later successful fsync, leaves zeros
//!   in their place).
//! - `ftruncate` + `fsync` (a cut back) may fail at either call; a
//!   truncation not yet synced may or may not survive a crash.
//! - A crash keeps the durable bytes, plus any prefix of the bytes written
//!   since (the kernel may have written some back), never a lost byte.

use std::io::{self, Write};
use std::sync::{Arc, Mutex, PoisonError};

use steadfast_actors::control_dir::JournalSink;

use super::rng::Rng;

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
}

impl Faults {
    /// Faults far more often than a disk has them: every append meets one
    /// within a few tries.
    /// None: a disk that fails only where a test says
    /// ([`SimDisk::fail_next_fsync`]).
    pub const NONE: Self = Self {
        write_error: 0,
        short_write: 0,
        fsync_error: 0,
        cut_error: 0,
        stat_error: 0,
    };

    pub const HEAVY: Self = Self {
        write_error: 60,
        short_write: 80,
        fsync_error: 60,
        cut_error: 80,
        stat_error: 10,
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
    pub crash: u64,
    pub crash_kept_unsynced: u64,
}

impl FaultCounts {
    pub fn add(&mut self, other: &Self) {
        self.write_error += other.write_error;
        self.torn_write += other.torn_write;
        self.short_write += other.short_write;
        self.fsync_error += other.fsync_error;
        self.cut_error += other.cut_error;
        self.stat_error += other.stat_error;
        self.crash += other.crash;
        self.crash_kept_unsynced += other.crash_kept_unsynced;
    }
}

/// The disk's state: one file.
#[derive(Debug)]
struct State {
    /// What reads see.
    cache: Vec<u8>,
    /// What a crash keeps (before any unsynced prefix).
    durable: Vec<u8>,
    /// Bytes of `cache` a failed fsync marked clean: `[from, to)`, never
    /// made durable.
    lost: Option<(usize, usize)>,
    /// A truncation below `durable` not yet synced.
    truncated: bool,
    rng: Rng,
    faults: Faults,
    counts: FaultCounts,
    /// What happened, one line a call, for the run's trace.
    trace: Vec<String>,
    /// Fsyncs (a cut back's included) to fail next, whatever the seed says.
    failing_fsyncs: u32,
    /// Writes to fail next.
    failing_writes: u32,
}

/// The simulated disk; [`SimDisk::file`] is the writer's handle on its file.
#[derive(Debug, Clone)]
pub struct SimDisk(Arc<Mutex<State>>);

impl SimDisk {
    /// A disk whose file holds `bytes`, all durable.
    pub fn new(bytes: Vec<u8>, rng: Rng, faults: Faults) -> Self {
        Self(Arc::new(Mutex::new(State {
            cache: bytes.clone(),
            durable: bytes,
            lost: None,
            truncated: false,
            rng,
            faults,
            counts: FaultCounts::default(),
            trace: Vec::new(),
            failing_fsyncs: 0,
            failing_writes: 0,
        })))
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

    /// Whether this fsync fails: a scripted failure, else the seed's.
    fn fsync_fails(state: &mut State, per_mille: u32) -> bool {
        if state.failing_fsyncs > 0 {
            state.failing_fsyncs -= 1;
            return true;
        }
        state.rng.chance(per_mille)
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A handle on the file, for a `JournalFile`.
    pub fn file(&self) -> SimFile {
        SimFile(self.clone())
    }

    /// The process crashed: what the file holds when the machine comes back
    /// (see the module doc). The disk then holds exactly that, durable.
    pub fn crash(&self) -> Vec<u8> {
        let mut state = self.state();
        state.counts.crash += 1;
        let kept = if state.truncated && state.rng.chance(500) {
            // The truncation never reached the disk.
            state.durable.clone()
        } else {
            let base = if state.truncated {
                let len = state.cache.len();
                let mut base = state.durable.clone();
                base.truncate(len);
                base
            } else {
                state.durable.clone()
            };
            // A prefix of what was written since the last fsync, up to the
            // first lost byte.
            let durable_len = base.len();
            let written_up_to = state.lost.map_or(state.cache.len(), |(from, _)| from);
            let extra = written_up_to.saturating_sub(durable_len);
            let take = if extra == 0 {
                0
            } else {
                state.rng.below(extra as u64 + 1) as usize
            };
            if take > 0 {
                state.counts.crash_kept_unsynced += 1;
            }
            let mut kept = base;
            kept.extend_from_slice(&state.cache[durable_len..durable_len + take]);
            kept
        };
        let line = format!("crash: kept {} bytes", kept.len());
        state.trace.push(line);
        state.cache.clone_from(&kept);
        state.durable.clone_from(&kept);
        state.lost = None;
        state.truncated = false;
        kept
    }

    /// The file after a reopen repaired it (`open_journal`'s repair writes
    /// and fsyncs): `bytes`, durable.
    pub fn reset(&self, bytes: Vec<u8>) {
        let mut state = self.state();
        state.cache.clone_from(&bytes);
        state.durable = bytes;
        state.lost = None;
        state.truncated = false;
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

impl State {
    /// The page cache made durable, lost bytes as zeros.
    fn persist(&mut self) {
        let mut durable = self.cache.clone();
        if let Some((from, to)) = self.lost {
            let to = to.min(durable.len());
            if from < to {
                durable[from..to].fill(0);
            }
        }
        self.durable = durable;
        self.truncated = false;
    }
}

fn os_error(code: i32) -> io::Error {
    io::Error::from_raw_os_error(code)
}

/// The writer's handle on the simulated file.
#[derive(Debug)]
pub struct SimFile(SimDisk);

impl Write for SimFile {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let mut state = self.0.state();
        let faults = state.faults;
        let scripted = std::mem::take(&mut state.failing_writes) > 0;
        if !buf.is_empty() && (scripted || state.rng.chance(faults.write_error)) {
            state.counts.write_error += 1;
            let landed = state.rng.below(buf.len() as u64) as usize;
            if landed > 0 {
                state.counts.torn_write += 1;
            }
            state.cache.extend_from_slice(&buf[..landed]);
            let code = if state.rng.chance(500) {
                rustix::io::Errno::NOSPC.raw_os_error()
            } else {
                rustix::io::Errno::IO.raw_os_error()
            };
            let line = format!("write {}: error {code} after {landed}", buf.len());
            state.trace.push(line);
            return Err(os_error(code));
        }
        let n = if buf.len() > 1 && state.rng.chance(faults.short_write) {
            state.counts.short_write += 1;
            1 + state.rng.below(buf.len() as u64 - 1) as usize
        } else {
            buf.len()
        };
        state.cache.extend_from_slice(&buf[..n]);
        let line = format!("write {}: {n}", buf.len());
        state.trace.push(line);
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl JournalSink for SimFile {
    fn sync_data(&mut self) -> io::Result<()> {
        let mut state = self.0.state();
        let faults = state.faults;
        if SimDisk::fsync_fails(&mut state, faults.fsync_error) {
            state.counts.fsync_error += 1;
            // The dirty pages are marked clean: what was written since the
            // last fsync is lost.
            let (from, to) = (
                state.durable.len().min(state.cache.len()),
                state.cache.len(),
            );
            if from < to {
                state.lost = Some(match state.lost {
                    Some((f, t)) => (f.min(from), t.max(to)),
                    None => (from, to),
                });
            }
            state.trace.push(format!("fsync: EIO, lost [{from}, {to})"));
            return Err(os_error(rustix::io::Errno::IO.raw_os_error()));
        }
        state.persist();
        let line = format!("fsync: {} durable", state.durable.len());
        state.trace.push(line);
        Ok(())
    }

    fn current_len(&mut self) -> io::Result<u64> {
        let mut state = self.0.state();
        let faults = state.faults;
        if state.rng.chance(faults.stat_error) {
            state.counts.stat_error += 1;
            state.trace.push("fstat: EIO".to_owned());
            return Err(os_error(rustix::io::Errno::IO.raw_os_error()));
        }
        Ok(state.cache.len() as u64)
    }

    fn cut_back(&mut self, len: u64) -> io::Result<()> {
        let mut state = self.0.state();
        let faults = state.faults;
        let len = usize::try_from(len).map_err(io::Error::other)?;
        if state.cache.len() < len {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "the file is {} bytes, shorter than {len}",
                    state.cache.len()
                ),
            ));
        }
        if state.rng.chance(faults.cut_error) {
            state.counts.cut_error += 1;
            state.trace.push(format!("ftruncate {len}: EIO"));
            return Err(os_error(rustix::io::Errno::IO.raw_os_error()));
        }
        state.cache.truncate(len);
        if state.durable.len() > len {
            state.truncated = true;
        }
        state.lost = state
            .lost
            .and_then(|(from, to)| (from < len).then_some((from, to.min(len))));
        if SimDisk::fsync_fails(&mut state, faults.cut_error) {
            // The fsync after the truncation failed: as any failed fsync,
            // the dirty pages below `len` are marked clean and lost.
            state.counts.cut_error += 1;
            let from = state.durable.len().min(len);
            if from < len {
                state.lost = Some(match state.lost {
                    Some((f, t)) => (f.min(from), t.max(len)),
                    None => (from, len),
                });
            }
            state
                .trace
                .push(format!("ftruncate {len}, fsync: EIO, lost [{from}, {len})"));
            return Err(os_error(rustix::io::Errno::IO.raw_os_error()));
        }
        state.persist();
        state.trace.push(format!("cut back to {len}, fsynced"));
        Ok(())
    }
}
