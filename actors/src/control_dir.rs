//! The control directory, `<data_dir>/.steadfast/`: its lock, its journal file
//! and its markers (`run`, `hold`, `identity`), with blocking std I/O.
//!
//! Callers run everything here on a blocking thread. What the journal's bytes
//! *mean* is `steadfast_protocol::journal`'s business; this module only reads,
//! repairs, appends and fsyncs them (DESIGN.md, "Control directory" and
//! "Durability rules").
//!
//! # Layout
//! ```text
//! <data_dir>/.steadfast/        mode 0700
//!     lock                      exclusive OS lock (flock), held for the ControlDir's life
//!     journal                   header + len | crc32c | payload records
//!     journal.broken[.N]        the whole file as it was before a torn tail was cut
//!     run | hold | identity     markers: magic | len: u32 LE | crc32c: u32 LE | bincode payload
//!     control.sock              the control plane's socket (bound elsewhere)
//! ```
//!
//! # Invariants
//! - **One daemon per data dir.** [`ControlDir::open`] takes an exclusive lock
//!   on `lock` before it reads, repairs, truncates or unlinks anything; a
//!   second holder gets [`ControlDirError::Locked`]. The lock lives as long as
//!   the [`ControlDir`] and every [`JournalFile`] it handed out, so no writer
//!   outlives it. Checked by `control_dir::second_open_is_locked_until_the_first_is_dropped`,
//!   `control_dir::a_journal_file_keeps_the_lock`,
//!   `control_dir::another_process_holding_the_control_dir_locks_it_out`.
//! - **Child processes never inherit the lock.** std opens every file with
//!   `O_CLOEXEC`. Checked by `control_dir::the_lock_is_not_inherited_by_a_child`.
//!   Between its fork and its exec, though, a child of *any* thread of this
//!   process holds a copy of the lock's descriptor; [`ControlDir::open`]
//!   waits such a transient holder out (up to
//!   [`TRANSIENT_HOLDER_PATIENCE`]) before it says `Locked`, so a reopen in
//!   a process that spawns helpers (a test binary running many tests) is not
//!   refused by its own child. Checked by
//!   `control_dir::a_transient_copy_of_the_lock_is_waited_out`.
//! - **Private files.** The control dir is 0700, markers and the journal 0600.
//!   Checked by `control_dir::control_dir_is_0700_and_files_are_0600`.
//! - **A torn tail is repaired, corruption refused.** A torn tail keeps a
//!   `.broken` copy of the whole original file (fsynced, with its directory
//!   entry) *before* the journal is truncated to its last good record; a bad
//!   record followed by a good one refuses with
//!   [`ControlDirError::CorruptJournal`] and leaves every byte alone. Checked
//!   by `control_dir::torn_tail_is_repaired_with_a_broken_copy`,
//!   `control_dir::torn_header_is_repaired_to_a_fresh_journal`,
//!   `control_dir::a_flipped_byte_mid_journal_is_refused_and_left_untouched`,
//!   `control_dir::a_bad_header_is_refused_naming_the_file`.
//! - **Acknowledged only after fsync; never retried.** [`JournalFile::append`]
//!   writes every frame with one `write_all`, then `sync_data`, and returns
//!   `Ok` only after the fsync returned. A failed write or fsync poisons the
//!   file: after a failed fsync the kernel may already have dropped the dirty
//!   pages (and cleared the error), so the page cache no longer tells what is
//!   on disk and a retried fsync can report success for data that is lost.
//!   The only safe course is to stop without acknowledging and let the next
//!   open decide from the disk. Checked by the unit tests
//!   `appends_are_one_write_then_one_fsync`,
//!   `failed_fsync_is_not_acknowledged_and_poisons`,
//!   `failed_write_poisons_without_fsync` and
//!   `an_unencodable_record_writes_nothing_and_does_not_poison`, and by
//!   `control_dir::journal_round_trips_across_reopen`.
//! - **Markers are atomic and checked.** Each marker is written to a 0600
//!   temp file in the same directory, fsynced, renamed over the target, and
//!   the directory fsynced. Its bytes carry a per-kind magic and a CRC32C; a
//!   marker that fails either (or whose payload does not decode exactly) reads
//!   as [`MarkerRead::Unreadable`], and an unreadable run marker means the
//!   previous run [`PreviousRun::Crashed`]. Checked by
//!   `control_dir::markers_round_trip`, `control_dir::hold_set_and_clear`,
//!   `control_dir::a_flipped_byte_in_the_run_marker_reads_as_crashed`,
//!   `control_dir::previous_run_follows_the_run_marker` and the unit tests
//!   `marker_decoding_refuses_damage` and `previous_run_from_each_marker`.
//! - **Compaction is crash-safe and loses nothing a resume needs.**
//!   [`JournalFile::compact`] writes [`COMPACT_TMP_NAME`], fsyncs it, renames
//!   it over the journal and fsyncs the directory; the kept records are
//!   `steadfast_protocol::journal::compact`'s. A leftover temp file is
//!   removed at open. Checked by
//!   `durability::the_journal_stays_bounded_and_keeps_what_a_resume_needs`
//!   and by the `compact.*` points of `crash::kill_points_in_a_chain_of_relaunches`.
//! - **Identity is written once.** [`ControlDir::ensure_identity`] never
//!   replaces an identity, readable or not. Checked by
//!   `control_dir::identity_is_written_once_and_stable_across_reopen`.

use std::fs::{self, DirBuilder, File, OpenOptions};
use std::io::{self, Read, Seek, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use bincode::Options;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use steadfast_protocol::journal::{self, JournalError, Record, Tail};

/// The control directory's name under the data dir.
pub const CONTROL_DIR_NAME: &str = ".steadfast";

/// The mode of the control directory.
pub const CONTROL_DIR_MODE: u32 = 0o700;

/// The mode of every file steadfast creates in the control directory.
pub const FILE_MODE: u32 = 0o600;

/// The largest marker payload read or written, in bytes.
pub const MAX_MARKER_PAYLOAD: u32 = 4096;

/// Length of a marker's header: magic (8) | len: u32 LE | crc32c: u32 LE.
const MARKER_HEADER_LEN: usize = 16;

const RUN_MAGIC: [u8; 8] = *b"STFDRUN1";
const HOLD_MAGIC: [u8; 8] = *b"STFDHLD1";
const IDENTITY_MAGIC: [u8; 8] = *b"STFDIDN1";
const OVERRIDES_MAGIC: [u8; 8] = *b"STFDOVR1";

/// Why a control directory operation failed.
#[derive(Debug, thiserror::Error)]
pub enum ControlDirError {
    /// Another holder (another daemon) has the control directory's lock.
    #[error("control directory lock {0} is held by another daemon")]
    Locked(PathBuf),
    /// An I/O operation on a path failed.
    #[error("i/o error on {path}: {source}")]
    Io {
        /// The file or directory operated on.
        path: PathBuf,
        /// The OS error.
        source: io::Error,
    },
    /// A bad record is followed by good ones: mid-file corruption. The file
    /// is left untouched; the daemon must not start.
    #[error(
        "journal {path} is corrupt at byte offset {offset}: a bad record is followed by valid records; refusing to start (the file was left untouched)"
    )]
    CorruptJournal {
        /// The journal file.
        path: PathBuf,
        /// Byte offset of the first bad record.
        offset: usize,
    },
    /// The journal's header is not a steadfast journal header this build reads
    /// (bad magic or unsupported format version).
    #[error("journal {path} has a bad header: {source}")]
    BadJournalHeader {
        /// The journal file.
        path: PathBuf,
        /// What the framing said.
        source: JournalError,
    },
    /// A record could not be framed (too large, or bincode refused); nothing
    /// was written and the journal is not poisoned.
    #[error("journal {path}: record not appended: {source}")]
    RecordNotEncoded {
        /// The journal file.
        path: PathBuf,
        /// What the framing said.
        source: JournalError,
    },
    /// An earlier write or fsync of this journal failed; nothing more is
    /// appended (a failed fsync is never retried).
    #[error(
        "journal {path} is poisoned by an earlier failed write or fsync ({cause}); nothing more is appended"
    )]
    JournalPoisoned {
        /// The journal file.
        path: PathBuf,
        /// The failure that poisoned it, rendered.
        cause: String,
    },
    /// [`ControlDir::open_journal`] was already called on this value: there
    /// is one writer per journal.
    #[error("journal {path} is already open for this control directory")]
    JournalAlreadyOpen {
        /// The journal file.
        path: PathBuf,
    },
    /// A marker exists but is not readable as what it should be (bad magic,
    /// CRC, length or payload), or a value could not be encoded as one.
    #[error("marker {path} is unreadable: {reason}")]
    BadMarker {
        /// The marker file.
        path: PathBuf,
        /// What was wrong with it.
        reason: String,
    },
}

fn io_err(path: &Path) -> impl FnOnce(io::Error) -> ControlDirError + '_ {
    move |source| ControlDirError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// The run marker: whether a daemon holds the data dir, or released it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum RunMarker {
    /// A daemon is running (or crashed while running).
    Holding {
        /// Its process id.
        pid: u32,
        /// The boot attempt it was on.
        attempt: u32,
    },
    /// The last daemon stopped cleanly.
    Released {
        /// When, in milliseconds since the Unix epoch.
        at_ms: u64,
        /// The epoch it released.
        epoch: u64,
    },
}

/// How the previous daemon on this data dir ended (the snapshot's type; see
/// [`previous_run_from`]).
pub use steadfast_protocol::snapshot::PreviousRun;

/// What a run marker read at open says about the previous run.
#[must_use]
pub fn previous_run_from(marker: &MarkerRead<RunMarker>) -> PreviousRun {
    match marker {
        MarkerRead::Missing => PreviousRun::FirstEver,
        MarkerRead::Valid(RunMarker::Released { at_ms, epoch }) => PreviousRun::CleanStop {
            at: steadfast_protocol::Timestamp(*at_ms),
            epoch: *epoch,
        },
        MarkerRead::Valid(RunMarker::Holding { pid, attempt }) => PreviousRun::Crashed {
            pid: Some(*pid),
            attempt: Some(*attempt),
        },
        MarkerRead::Unreadable(_) => PreviousRun::Crashed {
            pid: None,
            attempt: None,
        },
    }
}

/// The data dir's identity, created by the first successful boot; it outlives
/// the process and proves liveness in replacement.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Identity {
    /// 32 lowercase hex characters from `/dev/urandom`.
    pub id: String,
    /// When it was created, in milliseconds since the Unix epoch.
    pub created_at_ms: u64,
}

/// What reading a marker found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MarkerRead<T> {
    /// No such file.
    Missing,
    /// The marker, intact.
    Valid(T),
    /// The file exists but is not an intact marker; the reason says why.
    Unreadable(String),
}

/// How [`ControlDir::open_journal`] found the journal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Recovery {
    /// There was no journal (or an empty file): a header was written.
    Fresh,
    /// The journal ended cleanly after its last record.
    Clean,
    /// The journal ended in a torn record (or header); the original file was
    /// copied to `broken_copy` and the journal truncated at `offset`.
    RepairedTornTail {
        /// Byte offset of the torn record: the journal's new length (0 for a
        /// torn header, after which a fresh header was written).
        offset: usize,
        /// Where the whole original file was copied.
        broken_copy: PathBuf,
    },
}

/// Where a [`JournalFile`] writes: the journal file itself, or a stand-in in
/// tests that fails on purpose.
///
/// Truncation is not part of it: repair happens in
/// [`ControlDir::open_journal`] before a writer exists.
pub trait JournalSink: Write + Send {
    /// Flush written data to stable storage (`fdatasync`).
    ///
    /// # Errors
    /// The OS error; the caller never retries it.
    fn sync_data(&mut self) -> io::Result<()>;
}

impl JournalSink for File {
    fn sync_data(&mut self) -> io::Result<()> {
        File::sync_data(self)
    }
}

/// The journal's one writer: appends records and acknowledges them only
/// after they are fsynced.
pub struct JournalFile<S: JournalSink = File> {
    /// Where the frames go.
    sink: S,
    /// The journal's path, for errors.
    path: PathBuf,
    /// Bytes known durable: the length at open plus every acknowledged append.
    len: u64,
    /// Set by a failed write or fsync; every later append refuses.
    poisoned: bool,
    /// The failure that poisoned it, for every later refusal.
    poison_cause: String,
    /// The control directory's lock, kept alive so no writer outlives it
    /// (`None` for a sink built in tests).
    _lock: Option<Arc<File>>,
    /// The control directory's "a writer is out" flag, cleared when this
    /// writer is dropped so the journal can be reopened (a restarted Journal
    /// actor) — never while this writer lives.
    _slot: Option<WriterSlot>,
    /// How many attempts compaction keeps (`None`: never compact).
    keep_attempts: Option<usize>,
    /// How many `AttemptStarted` records the file holds: decides when to
    /// compact.
    attempts: usize,
    /// Set while another process may append to the same journal (a
    /// replacement in progress): compaction waits, since a rename would
    /// leave the other writer appending to the old file.
    shared: Option<Arc<AtomicBool>>,
    /// The incumbent this process took the data dir over from; while it
    /// lives it may still append, so compaction waits for it to be gone.
    shared_with: Option<u32>,
}

/// Clears the control directory's one-writer flag on drop.
#[derive(Debug)]
struct WriterSlot(Arc<AtomicBool>);

impl Drop for WriterSlot {
    fn drop(&mut self) {
        self.0.store(false, Ordering::SeqCst);
    }
}

impl<S: JournalSink> std::fmt::Debug for JournalFile<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JournalFile")
            .field("path", &self.path)
            .field("len", &self.len)
            .field("poisoned", &self.poisoned)
            .finish_non_exhaustive()
    }
}

impl<S: JournalSink> JournalFile<S> {
    /// A writer over any sink, already holding `len` durable bytes (at least
    /// the header). For tests of I/O failure; daemons use
    /// [`ControlDir::open_journal`].
    pub fn with_sink(sink: S, path: PathBuf, len: u64) -> Self {
        Self {
            sink,
            path,
            len,
            poisoned: false,
            poison_cause: String::new(),
            _lock: None,
            _slot: None,
            keep_attempts: None,
            attempts: 0,
            shared: None,
            shared_with: None,
        }
    }

    /// Append `records` durably: every frame is encoded into one buffer,
    /// written with one `write_all`, then `sync_data`. `Ok` means the fsync
    /// returned; only then may the records be acknowledged.
    ///
    /// # Errors
    /// [`ControlDirError::RecordNotEncoded`] if a record cannot be framed
    /// (nothing written); [`ControlDirError::Io`] if the write or fsync failed,
    /// which poisons the writer; [`ControlDirError::JournalPoisoned`] on every
    /// append after that, without touching the sink (a failed fsync is never
    /// retried).
    pub fn append(&mut self, records: &[Record]) -> Result<(), ControlDirError> {
        if self.poisoned {
            return Err(ControlDirError::JournalPoisoned {
                path: self.path.clone(),
                cause: self.poison_cause.clone(),
            });
        }
        let mut buf = Vec::new();
        for record in records {
            let frame = journal::encode_record(record).map_err(|source| {
                ControlDirError::RecordNotEncoded {
                    path: self.path.clone(),
                    source,
                }
            })?;
            buf.extend_from_slice(&frame);
        }
        if buf.is_empty() {
            return Ok(());
        }
        let written = self.write_then_sync(&buf);
        if let Err(source) = written {
            self.poisoned = true;
            self.poison_cause = source.to_string();
            tracing::error!(path = %self.path.display(), error = %source,
                "journal write or fsync failed; the journal is poisoned");
            return Err(ControlDirError::Io {
                path: self.path.clone(),
                source,
            });
        }
        self.len += buf.len() as u64;
        self.attempts += journal::attempts_in(records);
        Ok(())
    }

    /// One `write_all` of `buf`, then `sync_data`, with the crash harness's
    /// failpoints between them (`crate::failpoint`; nothing when unarmed).
    fn write_then_sync(&mut self, buf: &[u8]) -> io::Result<()> {
        if crate::failpoint::reached("journal.mid_write") {
            let half = buf.len() / 2;
            self.sink.write_all(buf.get(..half).unwrap_or(buf))?;
            crate::failpoint::kill();
        }
        self.sink.write_all(buf)?;
        crate::failpoint::hit("journal.before_fsync");
        self.sink.sync_data()?;
        crate::failpoint::hit("journal.after_fsync");
        Ok(())
    }

    /// The journal's durable length in bytes: the length at open plus every
    /// acknowledged append.
    #[must_use]
    pub const fn len(&self) -> u64 {
        self.len
    }

    /// Whether the journal holds no bytes (never true once opened: it has a
    /// header).
    #[must_use]
    pub const fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Whether a failed write or fsync poisoned this writer.
    #[must_use]
    pub const fn is_poisoned(&self) -> bool {
        self.poisoned
    }

    /// The journal's path.
    #[must_use]
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// How many times a handed-over open re-reads a journal whose tail looks
/// torn, and how long it pauses between reads (an in-flight append lands in
/// microseconds; a second is generous on a loaded machine).
const HANDOVER_TAIL_WAITS: u32 = 20;
const HANDOVER_TAIL_PAUSE: std::time::Duration = std::time::Duration::from_millis(50);

/// The temp file a compaction writes before renaming it over the journal.
pub const COMPACT_TMP_NAME: &str = "journal.compact";

/// What a compaction did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Compacted {
    /// Records before.
    pub records_before: usize,
    /// Records after (the kept attempts and the outstanding checkpoints).
    pub records_after: usize,
    /// The journal's length after, in bytes.
    pub len: u64,
}

impl JournalFile<File> {
    /// Whether the journal holds more than twice the attempts compaction
    /// keeps (the slack keeps compaction rare: once per `keep` attempts).
    #[must_use]
    pub fn wants_compaction(&self) -> bool {
        self.keep_attempts
            .is_some_and(|keep| self.attempts > keep.max(1).saturating_mul(2))
            && !self.is_shared()
    }

    /// Whether another process may be appending to this journal now: a
    /// replacement in progress in this daemon, or the incumbent this
    /// candidate took over from still alive.
    fn is_shared(&self) -> bool {
        self.shared
            .as_ref()
            .is_some_and(|shared| shared.load(Ordering::SeqCst))
            || self
                .shared_with
                .is_some_and(|pid| Path::new(&format!("/proc/{pid}")).exists())
    }

    /// Rewrite the journal to its last `keep_attempts` attempts and the
    /// checkpoints still outstanding before them
    /// ([`journal::compact`]), crash-safely: the new journal is written to
    /// [`COMPACT_TMP_NAME`] (0600), fsynced, renamed over the journal, and
    /// the directory fsynced; then this writer appends to the new file. A
    /// crash at any point leaves either the old journal or the new one, each
    /// whole, and both leave a resume the same outstanding checkpoints.
    /// Returns `None` when there was nothing to drop.
    ///
    /// # Errors
    /// [`ControlDirError::JournalPoisoned`] on a poisoned writer;
    /// [`ControlDirError::CorruptJournal`] / [`ControlDirError::BadJournalHeader`]
    /// if the file no longer decodes cleanly (nothing is changed);
    /// [`ControlDirError::Io`] if a step fails. A failure before the rename
    /// leaves the old journal in use, untouched; a failure after it poisons
    /// this writer (which file survives a crash is then unknown).
    pub fn compact(&mut self) -> Result<Option<Compacted>, ControlDirError> {
        let Some(keep) = self.keep_attempts else {
            return Ok(None);
        };
        if self.poisoned {
            return Err(ControlDirError::JournalPoisoned {
                path: self.path.clone(),
                cause: self.poison_cause.clone(),
            });
        }
        let path = self.path.clone();
        let bytes = fs::read(&path).map_err(io_err(&path))?;
        let decoded = journal::decode(&bytes).map_err(|e| match e {
            JournalError::Corrupt { offset } => ControlDirError::CorruptJournal {
                path: path.clone(),
                offset,
            },
            source => ControlDirError::BadJournalHeader {
                path: path.clone(),
                source,
            },
        })?;
        let records_before = decoded.records.len();
        let Some(kept) = journal::compact(&decoded.records, keep) else {
            self.attempts = journal::attempts_in(&decoded.records);
            return Ok(None);
        };
        let mut out = journal::encode_header().to_vec();
        for record in &kept {
            let frame = journal::encode_record(record).map_err(|source| {
                ControlDirError::RecordNotEncoded {
                    path: path.clone(),
                    source,
                }
            })?;
            out.extend_from_slice(&frame);
        }
        let dir = path
            .parent()
            .map_or_else(|| PathBuf::from("."), Path::to_path_buf);
        let tmp = dir.join(COMPACT_TMP_NAME);
        let written = remove_if_present(&tmp).and_then(|()| {
            let mut file = OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(FILE_MODE)
                .open(&tmp)?;
            file.write_all(&out)?;
            crate::failpoint::hit("compact.before_fsync");
            file.sync_all()?;
            crate::failpoint::hit("compact.before_rename");
            fs::rename(&tmp, &path)
        });
        if let Err(e) = written {
            let _ = fs::remove_file(&tmp);
            return Err(io_err(&tmp)(e));
        }
        // The old file is unlinked: from here on, a failure poisons.
        crate::failpoint::hit("compact.before_dir_fsync");
        let reopened =
            sync_dir(&dir).and_then(|()| open_journal_file(&path, false).map_err(io_err(&path)));
        match reopened {
            Ok(file) => {
                self.sink = file;
                self.len = out.len() as u64;
                self.attempts = journal::attempts_in(&kept);
                Ok(Some(Compacted {
                    records_before,
                    records_after: kept.len(),
                    len: self.len,
                }))
            }
            Err(error) => {
                self.poisoned = true;
                self.poison_cause = error.to_string();
                Err(error)
            }
        }
    }
}

fn remove_if_present(path: &Path) -> io::Result<()> {
    match fs::remove_file(path) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

/// An open, locked control directory.
#[derive(Debug)]
pub struct ControlDir {
    /// `<data_dir>/.steadfast`.
    path: PathBuf,
    /// The open `lock` file holding the exclusive lock; shared with the
    /// journal writer so the lock lasts as long as either.
    lock: Arc<File>,
    /// What the run marker said at open, before this daemon wrote its own.
    previous_run: PreviousRun,
    /// Whether [`Self::open_journal`] has handed out the one writer.
    journal_opened: Arc<AtomicBool>,
    /// How many attempts the journal keeps when compacted (`None`: never).
    journal_keep: Option<usize>,
    /// Set while another process may append to the journal (see
    /// [`Self::set_journal_shared`]).
    journal_shared: Arc<AtomicBool>,
    /// The incumbent this directory was handed over from, if any.
    handed_over_from: Option<u32>,
}

impl ControlDir {
    /// The control directory of `data_dir`: `<data_dir>/.steadfast`.
    #[must_use]
    pub fn under(data_dir: &Path) -> PathBuf {
        data_dir.join(CONTROL_DIR_NAME)
    }

    /// Create (if missing) and lock the control directory of `data_dir`, then
    /// read the run marker to learn how the previous run ended.
    ///
    /// The lock is taken before anything in the directory is read, repaired
    /// or removed, and is held until this value and every [`JournalFile`]
    /// from it are dropped.
    ///
    /// # Errors
    /// [`ControlDirError::Locked`] if another holder has the lock;
    /// [`ControlDirError::Io`] if a directory or file cannot be created,
    /// opened or read.
    pub fn open(data_dir: &Path) -> Result<Self, ControlDirError> {
        Self::open_inner(data_dir, None)
    }

    /// [`Self::open`] over a lock handed over by the incumbent of a
    /// replacement: `lock` is the incumbent's own open `lock` file (received
    /// over the handover socket), so its lock is already held — by the same
    /// open file, which now both processes share and which outlives the
    /// incumbent. Refused unless `lock` is the data dir's `lock` file.
    ///
    /// # Errors
    /// As [`Self::open`]; [`ControlDirError::Locked`] also when `lock` is
    /// not this data dir's lock file.
    ///
    /// `incumbent` is the process that handed it over: while it lives it
    /// may still append to the journal (its in-flight work, its retirement),
    /// so this directory's journal waits out a torn-looking tail at open
    /// instead of truncating it, and does not compact until the incumbent is
    /// gone.
    pub fn open_handed_over(
        data_dir: &Path,
        lock: File,
        incumbent: Option<u32>,
    ) -> Result<Self, ControlDirError> {
        let mut dir = Self::open_inner(data_dir, Some(lock))?;
        dir.handed_over_from = incumbent;
        Ok(dir)
    }

    /// Say whether another process may append to the journal now (an
    /// incumbent sets this while a replacement's candidate runs beside it):
    /// while set, the journal is not compacted.
    pub fn set_journal_shared(&self, shared: bool) {
        self.journal_shared.store(shared, Ordering::SeqCst);
    }

    /// The open `lock` file, whose lock a replacement hands to its candidate.
    #[must_use]
    pub fn lock_file(&self) -> &File {
        &self.lock
    }

    fn open_inner(data_dir: &Path, inherited: Option<File>) -> Result<Self, ControlDirError> {
        fs::create_dir_all(data_dir).map_err(io_err(data_dir))?;
        let path = Self::under(data_dir);
        let created = match DirBuilder::new().mode(CONTROL_DIR_MODE).create(&path) {
            Ok(()) => true,
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => false,
            Err(e) => return Err(io_err(&path)(e)),
        };
        let lock_path = path.join("lock");
        let lock = match inherited {
            Some(file) => {
                use std::os::unix::fs::MetadataExt;
                let ours = fs::metadata(&lock_path).map_err(io_err(&lock_path))?;
                let theirs = file.metadata().map_err(io_err(&lock_path))?;
                if (ours.dev(), ours.ino()) != (theirs.dev(), theirs.ino()) {
                    return Err(ControlDirError::Locked(lock_path));
                }
                file
            }
            None => OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false)
                .mode(FILE_MODE)
                .open(&lock_path)
                .map_err(io_err(&lock_path))?,
        };
        match try_lock_past_transient_holders(&lock) {
            Ok(()) => {}
            Err(fs::TryLockError::WouldBlock) => return Err(ControlDirError::Locked(lock_path)),
            Err(fs::TryLockError::Error(e)) => return Err(io_err(&lock_path)(e)),
        }
        // Locked: now the directory is ours to fix up.
        fs::set_permissions(&path, fs::Permissions::from_mode(CONTROL_DIR_MODE))
            .map_err(io_err(&path))?;
        if created {
            sync_dir(&path)?;
            sync_dir(data_dir)?;
        }
        let mut dir = Self {
            path,
            lock: Arc::new(lock),
            previous_run: PreviousRun::FirstEver,
            journal_opened: Arc::new(AtomicBool::new(false)),
            journal_keep: None,
            journal_shared: Arc::new(AtomicBool::new(false)),
            handed_over_from: None,
        };
        // A compaction that died before its rename left its temp file.
        let stale = dir.path.join(COMPACT_TMP_NAME);
        remove_if_present(&stale).map_err(io_err(&stale))?;
        dir.previous_run = previous_run_from(&dir.read_run()?);
        Ok(dir)
    }

    /// Keep the journal bounded: writers from [`Self::open_journal`] compact
    /// it to the last `keep` attempts (and the checkpoints still
    /// outstanding) once it holds more than twice that many.
    #[must_use]
    pub const fn with_journal_keep(mut self, keep: usize) -> Self {
        self.journal_keep = Some(keep);
        self
    }

    /// The control directory, `<data_dir>/.steadfast`.
    #[must_use]
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The lock file.
    #[must_use]
    pub fn lock_path(&self) -> PathBuf {
        self.path.join("lock")
    }

    /// The journal file.
    #[must_use]
    pub fn journal_path(&self) -> PathBuf {
        self.path.join("journal")
    }

    /// The run marker.
    #[must_use]
    pub fn run_path(&self) -> PathBuf {
        self.path.join("run")
    }

    /// The hold marker.
    #[must_use]
    pub fn hold_path(&self) -> PathBuf {
        self.path.join("hold")
    }

    /// The identity marker.
    #[must_use]
    pub fn identity_path(&self) -> PathBuf {
        self.path.join("identity")
    }

    /// The override tier an operator set (`steadfastctl config set`).
    #[must_use]
    pub fn overrides_path(&self) -> PathBuf {
        self.path.join("overrides")
    }

    /// The control plane's Unix socket.
    #[must_use]
    pub fn socket_path(&self) -> PathBuf {
        self.path.join("control.sock")
    }

    /// How the previous daemon ended, from the run marker found at open.
    #[must_use]
    pub const fn previous_run(&self) -> &PreviousRun {
        &self.previous_run
    }

    /// Open the journal: read and decode it, write a header if it is fresh,
    /// repair a torn tail, refuse corruption. Returns the one writer, the
    /// records of the valid prefix, and what was done.
    ///
    /// A torn tail is repaired in this order: the whole original file is
    /// copied to `journal.broken` (or `journal.broken.N`, the first free
    /// name, so an earlier copy is never overwritten) and fsynced with its
    /// directory entry; then the journal is truncated to its last good record
    /// and fsynced.
    ///
    /// # Errors
    /// [`ControlDirError::CorruptJournal`] for mid-file corruption (nothing is
    /// changed); [`ControlDirError::BadJournalHeader`] for a bad magic or
    /// version; [`ControlDirError::JournalAlreadyOpen`] while a writer from
    /// an earlier call is alive;
    /// [`ControlDirError::Io`] for I/O failures.
    pub fn open_journal(&self) -> Result<(JournalFile, Vec<Record>, Recovery), ControlDirError> {
        let path = self.journal_path();
        if self.journal_opened.swap(true, Ordering::SeqCst) {
            return Err(ControlDirError::JournalAlreadyOpen { path });
        }
        let result = self.open_journal_inner(&path);
        if result.is_err() {
            self.journal_opened.store(false, Ordering::SeqCst);
        }
        result
    }

    fn open_journal_inner(
        &self,
        path: &Path,
    ) -> Result<(JournalFile, Vec<Record>, Recovery), ControlDirError> {
        let (mut file, created) = match open_journal_file(path, true) {
            Ok(file) => (file, true),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                (open_journal_file(path, false).map_err(io_err(path))?, false)
            }
            Err(e) => return Err(io_err(path)(e)),
        };
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes).map_err(io_err(path))?;
        if self.handed_over_from.is_some() {
            // The incumbent may be mid-append: a tail that looks torn is
            // probably a frame still being written. Give it time to land
            // before calling it torn (its writer repaired any crash tail
            // at its own open, and appends whole frames only).
            for _ in 0..HANDOVER_TAIL_WAITS {
                if !matches!(journal::decode(&bytes), Ok(d) if matches!(d.tail, Tail::Torn { .. }))
                {
                    break;
                }
                std::thread::sleep(HANDOVER_TAIL_PAUSE);
                bytes.clear();
                file.seek(io::SeekFrom::Start(0)).map_err(io_err(path))?;
                file.read_to_end(&mut bytes).map_err(io_err(path))?;
            }
        }
        let decoded = journal::decode(&bytes).map_err(|e| match e {
            JournalError::Corrupt { offset } => ControlDirError::CorruptJournal {
                path: path.to_path_buf(),
                offset,
            },
            source => ControlDirError::BadJournalHeader {
                path: path.to_path_buf(),
                source,
            },
        })?;
        let recovery = match decoded.tail {
            Tail::Clean => Recovery::Clean,
            Tail::Empty => {
                file.write_all(&journal::encode_header())
                    .and_then(|()| file.sync_all())
                    .map_err(io_err(path))?;
                if created {
                    sync_dir(&self.path)?;
                }
                Recovery::Fresh
            }
            Tail::Torn { offset } => {
                let broken_copy = self.write_broken_copy(&bytes)?;
                tracing::warn!(path = %path.display(), offset, broken_copy = %broken_copy.display(),
                    "journal had a torn tail; truncated to the last good record");
                file.set_len(decoded.valid_len as u64)
                    .map_err(io_err(path))?;
                if decoded.valid_len == 0 {
                    // A torn header: start over with a fresh one.
                    file.write_all(&journal::encode_header())
                        .map_err(io_err(path))?;
                }
                file.sync_all().map_err(io_err(path))?;
                Recovery::RepairedTornTail {
                    offset,
                    broken_copy,
                }
            }
        };
        let len = file.metadata().map_err(io_err(path))?.len();
        let mut writer = JournalFile::with_sink(file, path.to_path_buf(), len);
        writer._lock = Some(Arc::clone(&self.lock));
        writer._slot = Some(WriterSlot(Arc::clone(&self.journal_opened)));
        writer.keep_attempts = self.journal_keep;
        writer.shared = Some(Arc::clone(&self.journal_shared));
        writer.shared_with = self.handed_over_from;
        writer.attempts = journal::attempts_in(&decoded.records);
        let mut records = decoded.records;
        if writer.wants_compaction()
            && let Some(compacted) = writer.compact()?
        {
            tracing::info!(?compacted, "compacted the journal at open");
            if let Some(kept) = journal::compact(&records, self.journal_keep.unwrap_or(0)) {
                records = kept;
            }
        }
        Ok((writer, records, recovery))
    }

    /// Copy `bytes` to the first free `journal.broken[.N]`, durably.
    fn write_broken_copy(&self, bytes: &[u8]) -> Result<PathBuf, ControlDirError> {
        let mut n = 0u32;
        loop {
            let name = if n == 0 {
                "journal.broken".to_owned()
            } else {
                format!("journal.broken.{n}")
            };
            let target = self.path.join(name);
            match OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(FILE_MODE)
                .open(&target)
            {
                Ok(mut file) => {
                    file.write_all(bytes)
                        .and_then(|()| file.sync_all())
                        .map_err(io_err(&target))?;
                    sync_dir(&self.path)?;
                    return Ok(target);
                }
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => n += 1,
                Err(e) => return Err(io_err(&target)(e)),
            }
        }
    }

    /// Write the run marker atomically.
    ///
    /// # Errors
    /// [`ControlDirError::Io`] if any step of the atomic write fails.
    pub fn write_run(&self, marker: &RunMarker) -> Result<(), ControlDirError> {
        self.write_marker("run", RUN_MAGIC, marker)
    }

    /// Read the run marker as it is now.
    ///
    /// # Errors
    /// [`ControlDirError::Io`] if it exists but cannot be read.
    pub fn read_run(&self) -> Result<MarkerRead<RunMarker>, ControlDirError> {
        read_marker(&self.run_path(), RUN_MAGIC)
    }

    /// Write the hold marker atomically: the next daemon starts stopped.
    ///
    /// # Errors
    /// [`ControlDirError::Io`] if any step of the atomic write fails.
    pub fn set_hold(&self) -> Result<(), ControlDirError> {
        self.write_marker("hold", HOLD_MAGIC, &())
    }

    /// Remove the hold marker (if present) and fsync the directory.
    ///
    /// # Errors
    /// [`ControlDirError::Io`] if it cannot be removed or the directory
    /// cannot be fsynced.
    pub fn clear_hold(&self) -> Result<(), ControlDirError> {
        let path = self.hold_path();
        match fs::remove_file(&path) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(io_err(&path)(e)),
        }
        sync_dir(&self.path)
    }

    /// Whether a stop is held. The marker's presence is what counts: a hold
    /// marker that is present but damaged still holds (the safe side).
    ///
    /// # Errors
    /// [`ControlDirError::Io`] if its presence cannot be determined.
    pub fn is_held(&self) -> Result<bool, ControlDirError> {
        let path = self.hold_path();
        match fs::symlink_metadata(&path) {
            Ok(_) => Ok(true),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(io_err(&path)(e)),
        }
    }

    /// The data dir's identity, if one was created.
    ///
    /// # Errors
    /// [`ControlDirError::BadMarker`] if the identity marker is unreadable or
    /// its id is not 32 lowercase hex characters; [`ControlDirError::Io`] if
    /// it cannot be read.
    pub fn identity(&self) -> Result<Option<Identity>, ControlDirError> {
        let path = self.identity_path();
        match read_marker::<Identity>(&path, IDENTITY_MAGIC)? {
            MarkerRead::Missing => Ok(None),
            MarkerRead::Valid(identity) if is_identity_id(&identity.id) => Ok(Some(identity)),
            MarkerRead::Valid(identity) => Err(ControlDirError::BadMarker {
                path,
                reason: format!(
                    "identity id {:?} is not 32 lowercase hex characters",
                    identity.id
                ),
            }),
            MarkerRead::Unreadable(reason) => Err(ControlDirError::BadMarker { path, reason }),
        }
    }

    /// The data dir's identity, creating it (32 hex characters from
    /// `/dev/urandom`, created at `now_ms`) if there is none. An existing
    /// identity, even an unreadable one, is never replaced.
    ///
    /// # Errors
    /// As [`Self::identity`], and [`ControlDirError::Io`] if `/dev/urandom`
    /// cannot be read or the marker cannot be written.
    pub fn ensure_identity(&self, now_ms: u64) -> Result<Identity, ControlDirError> {
        if let Some(identity) = self.identity()? {
            return Ok(identity);
        }
        let urandom = Path::new("/dev/urandom");
        let mut raw = [0u8; 16];
        File::open(urandom)
            .and_then(|mut f| f.read_exact(&mut raw))
            .map_err(io_err(urandom))?;
        let id = raw.iter().map(|b| format!("{b:02x}")).collect::<String>();
        let identity = Identity {
            id,
            created_at_ms: now_ms,
        };
        self.write_marker("identity", IDENTITY_MAGIC, &identity)?;
        Ok(identity)
    }

    /// The journal's records as they are on disk now, for reading (the
    /// `journal` control method): the longest valid prefix. A torn tail is
    /// not an error here (an append may be in flight); mid-file corruption
    /// is.
    ///
    /// # Errors
    /// [`ControlDirError::CorruptJournal`] or
    /// [`ControlDirError::BadJournalHeader`] as at open;
    /// [`ControlDirError::Io`] if it cannot be read.
    pub fn read_journal(&self) -> Result<Vec<Record>, ControlDirError> {
        read_journal(&self.journal_path())
    }

    /// The override tier as it was last made durable: `(leaf, value as TOML
    /// text)`, sorted by leaf. None set: empty.
    ///
    /// # Errors
    /// [`ControlDirError::BadMarker`] if the marker is damaged: an operator's
    /// overrides are never silently dropped, so the daemon refuses to start
    /// and names the file. [`ControlDirError::Io`] if it cannot be read.
    pub fn read_overrides(&self) -> Result<Vec<(String, String)>, ControlDirError> {
        let path = self.overrides_path();
        match read_marker::<Vec<(String, String)>>(&path, OVERRIDES_MAGIC)? {
            MarkerRead::Missing => Ok(Vec::new()),
            MarkerRead::Valid(leaves) => Ok(leaves),
            MarkerRead::Unreadable(reason) => Err(ControlDirError::BadMarker { path, reason }),
        }
    }

    /// Make the override tier durable (atomically, like every marker); an
    /// empty tier removes the file.
    ///
    /// # Errors
    /// [`ControlDirError::BadMarker`] if the tier does not fit a marker
    /// ([`MAX_MARKER_PAYLOAD`] bytes); [`ControlDirError::Io`] if a step of
    /// the atomic write fails.
    pub fn write_overrides(&self, leaves: &[(String, String)]) -> Result<(), ControlDirError> {
        if leaves.is_empty() {
            let path = self.overrides_path();
            match fs::remove_file(&path) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
                Err(e) => return Err(io_err(&path)(e)),
            }
            return sync_dir(&self.path);
        }
        overrides_fit(leaves).map_err(|reason| ControlDirError::BadMarker {
            path: self.overrides_path(),
            reason,
        })?;
        self.write_marker("overrides", OVERRIDES_MAGIC, &leaves)
    }

    /// Encode `value` as a marker, then: temp file (0600) in the control dir
    /// → write → fsync → rename over `name` → fsync the directory.
    fn write_marker<T: Serialize>(
        &self,
        name: &str,
        magic: [u8; 8],
        value: &T,
    ) -> Result<(), ControlDirError> {
        let target = self.path.join(name);
        let bytes = encode_marker(magic, value).map_err(|reason| ControlDirError::BadMarker {
            path: target.clone(),
            reason,
        })?;
        let tmp = self.path.join(format!(".{name}.tmp"));
        match fs::remove_file(&tmp) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(io_err(&tmp)(e)),
        }
        let written = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(FILE_MODE)
            .open(&tmp)
            .and_then(|mut file| {
                file.write_all(&bytes)?;
                file.sync_all()
            });
        if let Err(e) = written {
            let _ = fs::remove_file(&tmp);
            return Err(io_err(&tmp)(e));
        }
        crate::failpoint::hit("marker.before_rename");
        if let Err(e) = fs::rename(&tmp, &target) {
            let _ = fs::remove_file(&tmp);
            return Err(io_err(&target)(e));
        }
        crate::failpoint::hit("marker.before_dir_fsync");
        sync_dir(&self.path)
    }
}

fn open_journal_file(path: &Path, create_new: bool) -> io::Result<File> {
    let mut options = OpenOptions::new();
    options.read(true).append(true).mode(FILE_MODE);
    if create_new {
        options.create_new(true);
    }
    options.open(path)
}

/// fsync a directory, so the entries created, renamed or removed in it are
/// durable.
fn sync_dir(dir: &Path) -> Result<(), ControlDirError> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io_err(dir))
}

fn is_identity_id(id: &str) -> bool {
    id.len() == 32 && id.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// The journal at `path` as it is on disk now, for readers outside the
/// daemon's writer (the `journal` control method): see
/// [`ControlDir::read_journal`]. Reading needs no lock: the writer only
/// appends whole frames, so a reader sees a valid prefix and at worst a torn
/// tail, which is not returned.
///
/// # Errors
/// As [`ControlDir::read_journal`].
pub fn read_journal(path: &Path) -> Result<Vec<Record>, ControlDirError> {
    let path = path.to_path_buf();
    let bytes = match fs::read(&path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(io_err(&path)(e)),
    };
    match journal::decode(&bytes) {
        Ok(decoded) => Ok(decoded.records),
        Err(JournalError::Corrupt { offset }) => {
            Err(ControlDirError::CorruptJournal { path, offset })
        }
        Err(source) => Err(ControlDirError::BadJournalHeader { path, source }),
    }
}

/// Whether an override tier fits its marker ([`MAX_MARKER_PAYLOAD`]
/// bytes encoded); if not, why.
///
/// # Errors
/// The reason, naming the size.
pub fn overrides_fit(leaves: &[(String, String)]) -> Result<(), String> {
    let size = bincode::DefaultOptions::new()
        .serialized_size(&leaves)
        .map_err(|e| e.to_string())?;
    if size <= u64::from(MAX_MARKER_PAYLOAD) {
        Ok(())
    } else {
        Err(format!(
            "the override tier would take {size} bytes, more than {MAX_MARKER_PAYLOAD}"
        ))
    }
}

fn marker_options() -> impl Options {
    bincode::DefaultOptions::new().with_limit(u64::from(MAX_MARKER_PAYLOAD))
}

/// `magic | len: u32 LE | crc32c(payload): u32 LE | payload`.
/// Refuses (with the reason) a payload bincode cannot encode within
/// [`MAX_MARKER_PAYLOAD`].
fn encode_marker<T: Serialize>(magic: [u8; 8], value: &T) -> Result<Vec<u8>, String> {
    let payload = marker_options()
        .serialize(value)
        .map_err(|e| format!("payload does not encode: {e}"))?;
    let len = u32::try_from(payload.len()).map_err(|e| e.to_string())?;
    let mut out = Vec::with_capacity(MARKER_HEADER_LEN + payload.len());
    out.extend_from_slice(&magic);
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(&crc32c::crc32c(&payload).to_le_bytes());
    out.extend_from_slice(&payload);
    Ok(out)
}

/// The marker in `bytes`, or why it is not one.
fn decode_marker<T: DeserializeOwned>(magic: [u8; 8], bytes: &[u8]) -> Result<T, String> {
    let Some((head, payload)) = bytes.split_first_chunk::<MARKER_HEADER_LEN>() else {
        return Err(format!(
            "{} bytes is shorter than a marker header",
            bytes.len()
        ));
    };
    let [
        m0,
        m1,
        m2,
        m3,
        m4,
        m5,
        m6,
        m7,
        l0,
        l1,
        l2,
        l3,
        c0,
        c1,
        c2,
        c3,
    ] = *head;
    if [m0, m1, m2, m3, m4, m5, m6, m7] != magic {
        return Err("bad magic".to_owned());
    }
    let len = u32::from_le_bytes([l0, l1, l2, l3]);
    if len > MAX_MARKER_PAYLOAD || usize::try_from(len).ok() != Some(payload.len()) {
        return Err(format!(
            "payload length {len} does not match the {} bytes present",
            payload.len()
        ));
    }
    if crc32c::crc32c(payload) != u32::from_le_bytes([c0, c1, c2, c3]) {
        return Err("crc mismatch".to_owned());
    }
    marker_options()
        .deserialize(payload)
        .map_err(|e| format!("payload does not decode: {e}"))
}

/// Read a marker file: missing, valid, or unreadable (and why). Reads at
/// most one byte past the largest possible marker.
fn read_marker<T: DeserializeOwned>(
    path: &Path,
    magic: [u8; 8],
) -> Result<MarkerRead<T>, ControlDirError> {
    let file = match File::open(path) {
        Ok(file) => file,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(MarkerRead::Missing),
        Err(e) => return Err(io_err(path)(e)),
    };
    let cap = MARKER_HEADER_LEN as u64 + u64::from(MAX_MARKER_PAYLOAD) + 1;
    let mut bytes = Vec::new();
    file.take(cap)
        .read_to_end(&mut bytes)
        .map_err(io_err(path))?;
    Ok(match decode_marker(magic, &bytes) {
        Ok(value) => MarkerRead::Valid(value),
        Err(reason) => MarkerRead::Unreadable(reason),
    })
}

/// How long [`ControlDir::open`] waits for the `lock` before it says
/// [`ControlDirError::Locked`]. A child forked by any thread of this
/// process holds a copy of the lock's descriptor until its exec closes it
/// (`O_CLOEXEC`): milliseconds, not a second daemon. A real holder is still
/// refused, this much later.
pub const TRANSIENT_HOLDER_PATIENCE: Duration = Duration::from_secs(1);

/// `try_lock`, retried while it would block, for up to
/// [`TRANSIENT_HOLDER_PATIENCE`].
fn try_lock_past_transient_holders(lock: &File) -> Result<(), fs::TryLockError> {
    let deadline = Instant::now() + TRANSIENT_HOLDER_PATIENCE;
    loop {
        match lock.try_lock() {
            Err(fs::TryLockError::WouldBlock) if Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(5));
            }
            other => return other,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;
    use std::sync::atomic::AtomicUsize;

    /// A sink that records what was written and can fail writes or fsyncs.
    #[derive(Clone, Default)]
    struct FailingSink {
        written: Arc<Mutex<Vec<u8>>>,
        writes: Arc<AtomicUsize>,
        syncs: Arc<AtomicUsize>,
        fail_write: bool,
        fail_sync: bool,
    }

    impl Write for FailingSink {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            self.writes.fetch_add(1, Ordering::SeqCst);
            if self.fail_write {
                return Err(io::Error::from_raw_os_error(28)); // ENOSPC
            }
            self.written.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }

        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    impl JournalSink for FailingSink {
        fn sync_data(&mut self) -> io::Result<()> {
            self.syncs.fetch_add(1, Ordering::SeqCst);
            if self.fail_sync {
                Err(io::Error::from_raw_os_error(5)) // EIO
            } else {
                Ok(())
            }
        }
    }

    fn record(n: u32) -> Record {
        Record::AttemptStarted {
            attempt: n,
            at_ms: u64::from(n) * 1000,
        }
    }

    #[test]
    fn appends_are_one_write_then_one_fsync() {
        let sink = FailingSink::default();
        let mut j = JournalFile::with_sink(sink.clone(), "j".into(), 12);
        j.append(&[record(1), record(2), record(3)]).unwrap();
        assert_eq!(sink.writes.load(Ordering::SeqCst), 1);
        assert_eq!(sink.syncs.load(Ordering::SeqCst), 1);
        let expected: Vec<u8> = (1..=3)
            .flat_map(|n| journal::encode_record(&record(n)).unwrap())
            .collect();
        assert_eq!(*sink.written.lock().unwrap(), expected);
        assert_eq!(j.len(), 12 + expected.len() as u64);
    }

    #[test]
    fn failed_fsync_is_not_acknowledged_and_poisons() {
        let sink = FailingSink {
            fail_sync: true,
            ..FailingSink::default()
        };
        let mut j = JournalFile::with_sink(sink.clone(), "/cd/journal".into(), 12);
        let err = j.append(&[record(1)]).unwrap_err();
        match &err {
            ControlDirError::Io { path, source } => {
                assert_eq!(path, Path::new("/cd/journal"));
                assert_eq!(source.raw_os_error(), Some(5));
            }
            other => panic!("expected an i/o error, got {other:?}"),
        }
        assert!(j.is_poisoned());
        assert_eq!(j.len(), 12, "the failed append is not counted as durable");
        assert_eq!(sink.syncs.load(Ordering::SeqCst), 1);
        let writes = sink.writes.load(Ordering::SeqCst);

        let err = j.append(&[record(2)]).unwrap_err();
        assert!(
            matches!(err, ControlDirError::JournalPoisoned { .. }),
            "{err:?}"
        );
        assert!(err.to_string().contains("/cd/journal"), "{err}");
        assert!(
            err.to_string().contains("os error 5"),
            "the refusal names what poisoned it: {err}"
        );
        assert_eq!(
            sink.syncs.load(Ordering::SeqCst),
            1,
            "fsync is never retried"
        );
        assert_eq!(
            sink.writes.load(Ordering::SeqCst),
            writes,
            "nothing more written"
        );
        // Even an empty append refuses once poisoned.
        assert!(matches!(
            j.append(&[]),
            Err(ControlDirError::JournalPoisoned { .. })
        ));
    }

    #[test]
    fn failed_write_poisons_without_fsync() {
        let sink = FailingSink {
            fail_write: true,
            ..FailingSink::default()
        };
        let mut j = JournalFile::with_sink(sink.clone(), "j".into(), 12);
        assert!(matches!(
            j.append(&[record(1)]),
            Err(ControlDirError::Io { .. })
        ));
        assert_eq!(sink.syncs.load(Ordering::SeqCst), 0);
        assert!(matches!(
            j.append(&[record(2)]),
            Err(ControlDirError::JournalPoisoned { .. })
        ));
        assert_eq!(sink.syncs.load(Ordering::SeqCst), 0);
    }

    #[test]
    fn an_unencodable_record_writes_nothing_and_does_not_poison() {
        let sink = FailingSink::default();
        let mut j = JournalFile::with_sink(sink.clone(), "j".into(), 12);
        let huge = Record::CheckpointCleared {
            step: "x".repeat(journal::MAX_RECORD_LEN as usize + 1),
        };
        let err = j.append(&[record(1), huge]).unwrap_err();
        assert!(
            matches!(err, ControlDirError::RecordNotEncoded { .. }),
            "{err:?}"
        );
        assert_eq!(sink.writes.load(Ordering::SeqCst), 0);
        assert!(!j.is_poisoned());
        j.append(&[record(1)]).unwrap();
    }

    #[test]
    fn marker_decoding_refuses_damage() {
        let marker = RunMarker::Holding {
            pid: 42,
            attempt: 3,
        };
        let bytes = encode_marker(RUN_MAGIC, &marker).unwrap();
        assert_eq!(decode_marker::<RunMarker>(RUN_MAGIC, &bytes), Ok(marker));
        // Every single-bit flip anywhere is refused.
        for i in 0..bytes.len() {
            for bit in 0..8 {
                let mut bad = bytes.clone();
                bad[i] ^= 1 << bit;
                assert!(
                    decode_marker::<RunMarker>(RUN_MAGIC, &bad).is_err(),
                    "flip of bit {bit} at {i} accepted"
                );
            }
        }
        // Every truncation and an extra byte are refused.
        for cut in 0..bytes.len() {
            assert!(decode_marker::<RunMarker>(RUN_MAGIC, &bytes[..cut]).is_err());
        }
        let mut longer = bytes.clone();
        longer.push(0);
        assert!(decode_marker::<RunMarker>(RUN_MAGIC, &longer).is_err());
        // Another marker kind's magic is refused.
        assert!(decode_marker::<RunMarker>(IDENTITY_MAGIC, &bytes).is_err());
        // A claimed huge length is refused before anything else.
        let mut huge = bytes;
        huge[8..12].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(decode_marker::<RunMarker>(RUN_MAGIC, &huge).is_err());
    }

    #[test]
    fn previous_run_from_each_marker() {
        assert_eq!(
            previous_run_from(&MarkerRead::Missing),
            PreviousRun::FirstEver
        );
        assert_eq!(
            previous_run_from(&MarkerRead::Valid(RunMarker::Released {
                at_ms: 5,
                epoch: 2
            })),
            PreviousRun::CleanStop {
                at: steadfast_protocol::Timestamp(5),
                epoch: 2
            }
        );
        assert_eq!(
            previous_run_from(&MarkerRead::Valid(RunMarker::Holding {
                pid: 9,
                attempt: 1
            })),
            PreviousRun::Crashed {
                pid: Some(9),
                attempt: Some(1)
            }
        );
        assert_eq!(
            previous_run_from(&MarkerRead::Unreadable("x".into())),
            PreviousRun::Crashed {
                pid: None,
                attempt: None
            }
        );
    }
}
