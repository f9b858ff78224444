//! One seeded run: the journal's writer ([`JournalFile`], the real one)
//! over the simulated disk, driven the way the Lifecycle and Journal
//! actors drive it, crashed and reopened along the way, and checked after
//! every reopen and at the end.
//!
//! The caller, as the actors are (`lifecycle/journaling.rs`,
//! `journal.rs`):
//! - *write ahead* (group commit): `write`; then, once the commit window
//!   passes, `sync`. A `sync` that returns `Ok` acknowledges every record
//!   written ahead since the last acknowledgement; an error answers them
//!   with it (never acknowledged).
//! - *append* (awaited): `append`; `Ok` acknowledges its records and every
//!   record written ahead before it; then, when the journal holds more
//!   than twice [`KEEP`] attempts, a compaction (as the Journal actor
//!   does), after which only the records it keeps are expected.
//! - after any failed `write` or `append`, a `sync` at once (what
//!   `sync_deferred` does), which acknowledges the records written ahead
//!   before the failure if it returns `Ok`.
//!
//! The checks (after each crash, when the file is reopened, and at the
//! end):
//! - the file decodes: a clean end or a torn tail, never a bad record with
//!   valid ones after it (a daemon refuses to start on that);
//! - nothing acknowledged is lost: every acknowledged record is in it;
//! - nothing is invented or doubled: its records are records the caller
//!   wrote, each once, in the order written.

use std::collections::BTreeSet;
use std::num::NonZeroU32;

use steadfast_actors::control_dir::{JournalDir, JournalFile};
use steadfast_protocol::journal::{self, Record, Tail};

use super::disk::{FaultCounts, Faults, SimDisk, SimFile};
use super::rng::Rng;

/// What a run that held every check did.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// A hash of everything that happened (FNV-1a over the trace): the same
    /// seed on the same commit gives the same hash.
    pub trace_hash: u64,
    pub faults: FaultCounts,
    pub checks: u64,
    pub acknowledged: u64,
}

/// The first check a run broke.
#[derive(Debug, Clone)]
pub struct Violation {
    pub check: &'static str,
    pub detail: String,
    /// The trace up to it.
    pub trace: Vec<String>,
}

struct Sim {
    disk: SimDisk,
    writer: JournalFile<SimFile>,
    /// The next record's id (its `at_ms`).
    next_id: u64,
    /// Ids written ahead and not yet answered.
    pending: Vec<u64>,
    /// Ids acknowledged durable, in order.
    acked: BTreeSet<u64>,
    trace: Vec<String>,
    hash: u64,
    checks: u64,
    /// Records acknowledged in all.
    acknowledged: u64,
}

/// The attempts a compaction keeps.
pub const KEEP: usize = 2;

/// Record `id`: an attempt's start (which compaction counts) or a
/// transition.
fn record(id: u64, starts_attempt: bool) -> Record {
    if starts_attempt {
        Record::AttemptStarted {
            attempt: NonZeroU32::MIN,
            at_ms: id,
        }
    } else {
        Record::Transition {
            at_ms: id,
            from: "running".to_owned(),
            event: "sim".to_owned(),
            to: "running".to_owned(),
        }
    }
}

fn id_of(record: &Record) -> Option<u64> {
    match record {
        Record::Transition { at_ms, event, .. } if event == "sim" => Some(*at_ms),
        Record::AttemptStarted { at_ms, .. } => Some(*at_ms),
        _ => None,
    }
}

/// A fresh journal: its header, durable.
fn fresh() -> Vec<u8> {
    journal::encode_header().to_vec()
}

fn writer_over(disk: &SimDisk, len: usize) -> JournalFile<SimFile> {
    JournalFile::with_sink(disk.file(), "sim/journal".into(), len as u64)
        .with_keep_attempts(Some(KEEP))
}

impl Sim {
    fn note(&mut self, line: String) {
        for byte in line.bytes().chain(std::iter::once(b'\n')) {
            self.hash ^= u64::from(byte);
            self.hash = self.hash.wrapping_mul(0x0100_0000_01b3);
        }
        self.trace.push(line);
    }

    fn absorb_disk_trace(&mut self) {
        for line in self.disk.take_trace() {
            self.note(format!("  disk: {line}"));
        }
    }

    fn violation(&self, check: &'static str, detail: String) -> Violation {
        Violation {
            check,
            detail,
            trace: self.trace.clone(),
        }
    }

    fn batch(&mut self) -> (Vec<Record>, Vec<u64>) {
        let (n, starts) = self
            .disk
            .with_rng(|rng| (1 + rng.below(3), rng.chance(200)));
        let ids: Vec<u64> = (0..n).map(|i| self.next_id + i).collect();
        self.next_id += n;
        let records = ids
            .iter()
            .map(|&id| record(id, starts && id == ids[0]))
            .collect();
        (records, ids)
    }

    fn acknowledge(&mut self, ids: &[u64]) {
        self.acked.extend(ids.iter().copied());
        self.acknowledged += ids.len() as u64;
    }

    /// The `sync` that follows a failure or a commit window.
    fn sync(&mut self, why: &str) {
        let result = self.writer.sync();
        self.absorb_disk_trace();
        let pending = std::mem::take(&mut self.pending);
        match result {
            Ok(()) => {
                self.note(format!("sync ({why}): ok, acknowledges {pending:?}"));
                self.acknowledge(&pending);
            }
            Err(error) => self.note(format!(
                "sync ({why}): {error}; {pending:?} not acknowledged"
            )),
        }
    }

    fn write_ahead(&mut self) {
        let (records, ids) = self.batch();
        let result = self.writer.write(&records).map(drop);
        self.absorb_disk_trace();
        match result {
            Ok(()) => {
                self.note(format!("write ahead {ids:?}: ok"));
                self.pending.extend(ids);
            }
            Err(error) => {
                self.note(format!("write ahead {ids:?}: {error}"));
                self.sync("after a failed write");
            }
        }
    }

    fn append(&mut self) {
        let (records, ids) = self.batch();
        let result = self.writer.append(&records);
        self.absorb_disk_trace();
        match result {
            Ok(()) => {
                let pending = std::mem::take(&mut self.pending);
                self.note(format!("append {ids:?}: ok, acknowledges {pending:?} too"));
                self.acknowledge(&pending);
                self.acknowledge(&ids);
                if self.writer.wants_compaction() {
                    self.compact();
                }
            }
            Err(error) => {
                self.note(format!("append {ids:?}: {error}"));
                self.sync("after a failed append");
            }
        }
    }

    /// Compact, as the Journal actor does after an append. Once its new
    /// journal is renamed into place (it answered `Ok`, or failed after the
    /// rename, when either file may survive a crash), what it dropped is no
    /// longer expected.
    fn compact(&mut self) {
        let result = self.writer.compact_in(&self.disk);
        self.absorb_disk_trace();
        let first = self
            .disk
            .read_journal()
            .ok()
            .flatten()
            .and_then(|bytes| journal::decode(&bytes).ok())
            .map(|decoded| decoded.records.first().and_then(id_of));
        let floor = match first {
            Some(Some(id)) => id,
            // An empty journal under the name: everything was dropped.
            Some(None) => self.next_id,
            None => 0,
        };
        self.acked.retain(|id| *id >= floor);
        match result {
            Ok(Some(compacted)) => self.note(format!("compact: {compacted:?}, keeps from {floor}")),
            Ok(None) => self.note("compact: nothing to drop".to_owned()),
            Err(error) => self.note(format!("compact: {error}; the name holds from {floor}")),
        }
    }

    /// Check what the file holds now (after a crash, as a reopen reads it);
    /// the records it keeps once a reopen repaired it.
    fn check(&mut self, bytes: &[u8]) -> Result<Vec<u64>, Violation> {
        self.checks += 1;
        let decoded = journal::decode(bytes).map_err(|error| {
            self.violation(
                "the file decodes (a clean end or a torn tail)",
                format!("{error} ({} bytes)", bytes.len()),
            )
        })?;
        if let Tail::Torn { offset } = decoded.tail {
            self.note(format!("reopen: torn tail at {offset}, cut"));
        }
        let mut ids = Vec::with_capacity(decoded.records.len());
        for record in &decoded.records {
            let id = id_of(record).ok_or_else(|| {
                self.violation(
                    "nothing invented",
                    format!("a record never written: {record:?}"),
                )
            })?;
            ids.push(id);
        }
        self.checks += 1;
        if ids.windows(2).any(|w| w[0] >= w[1]) || ids.iter().any(|id| *id >= self.next_id) {
            return Err(self.violation(
                "nothing invented or doubled, in the order written",
                format!("the file holds {ids:?}"),
            ));
        }
        self.checks += 1;
        let kept: BTreeSet<u64> = ids.iter().copied().collect();
        if let Some(lost) = self.acked.iter().find(|id| !kept.contains(id)) {
            return Err(self.violation(
                "nothing acknowledged is lost",
                format!("record {lost} was acknowledged; the file holds {ids:?}"),
            ));
        }
        Ok(ids)
    }

    /// The process crashes; the journal is reopened on what the disk kept
    /// (torn tail cut, as `open_journal` repairs it) and checked.
    fn crash(&mut self) -> Result<(), Violation> {
        let kept = self.disk.crash();
        self.absorb_disk_trace();
        self.note(format!("crash with {:?} unanswered", self.pending));
        // What was written ahead and unanswered died with the process.
        self.pending.clear();
        self.check(&kept)?;
        let valid = journal::decode(&kept).map_or(0, |d| d.valid_len);
        let repaired = if valid == 0 {
            fresh()
        } else {
            kept[..valid].to_vec()
        };
        let len = repaired.len();
        self.disk.reset(repaired);
        self.writer = writer_over(&self.disk, len);
        Ok(())
    }
}

/// Run `seed` for `ops` operations.
///
/// # Errors
/// The first check the run broke.
pub fn run(seed: u64, ops: u32) -> Result<Outcome, Violation> {
    run_on(
        SimDisk::new(fresh(), Rng::new(seed), Faults::HEAVY),
        seed,
        ops,
    )
}

/// [`run`] on `disk` (one a test planted a defect in).
///
/// # Errors
/// As [`run`].
pub fn run_on(disk: SimDisk, seed: u64, ops: u32) -> Result<Outcome, Violation> {
    let writer = writer_over(&disk, journal::HEADER_LEN);
    let mut sim = Sim {
        disk,
        writer,
        next_id: 1,
        pending: Vec::new(),
        acked: BTreeSet::new(),
        trace: Vec::new(),
        hash: 0xcbf2_9ce4_8422_2325,
        checks: 0,
        acknowledged: 0,
    };
    sim.note(format!("seed {seed}"));
    for _ in 0..ops {
        let roll = sim.disk.with_rng(|rng| rng.below(100));
        match roll {
            0..=39 => sim.write_ahead(),
            40..=69 => sim.append(),
            70..=94 => {
                if !sim.pending.is_empty() {
                    sim.sync("commit window");
                }
            }
            _ => sim.crash()?,
        }
    }
    sim.crash()?;
    Ok(Outcome {
        trace_hash: sim.hash,
        faults: sim.disk.counts(),
        checks: sim.checks,
        acknowledged: sim.acknowledged,
    })
}
