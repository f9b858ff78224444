//! The control directory, `<data_dir>/.steadfast/`: its lock, its journal file
//! and its markers (`run`, `hold`, `identity`), with blocking std I/O.
//!
//! Callers run everything here on a blocking thread. What the journal's bytes
//! *mean* is `steadfast_protocol::journal`'s business; this module only reads,
//! repairs, appends and fsyncs them (ARCHITECTURE.md, "Invariants", and
//! its durability rules).
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
//! - **Child processes never inherit the lock.** Every file is opened
//!   `O_CLOEXEC`. Checked by `control_dir::the_lock_is_not_inherited_by_a_child`.
//!   Between its fork and its exec, though, a child of *any* thread of this
//!   process holds a copy of the lock's descriptor; [`ControlDir::open`]
//!   waits such a transient holder out (up to
//!   [`crate::fsx::TRANSIENT_HOLDER_PATIENCE`]) before it says `Locked`, so a reopen in
//!   a process that spawns helpers (a test binary running many tests) is not
//!   refused by its own child. Checked by
//!   `control_dir::a_transient_copy_of_the_lock_is_waited_out`.
//! - **Private files.** The control dir is 0700, markers and the journal 0600.
//!   Checked by `control_dir::control_dir_is_0700_and_files_are_0600`.
//! - **Nothing is opened through a link, nor in a directory another user
//!   controls.** The data dir and `.steadfast` are opened as descriptors and
//!   checked ([`crate::fsx::Dir`]); every file here is opened relative to
//!   the control dir's descriptor with `O_NOFOLLOW`, temp files `O_EXCL`,
//!   renames `renameat`, directory fsyncs through the descriptor. Refusals
//!   are [`ControlDirError::Unsafe`], naming the path and the fix. Checked by
//!   the attack tests listed in `crate::fsx`'s module doc.
//! - **A lost lock stops acknowledgements.** [`JournalFile::append`] first
//!   checks [`ControlDir::check_lock`] (the locked file still linked, `lock`
//!   still naming it, the control dir's path still naming the directory
//!   opened) and refuses with [`ControlDirError::LockLost`]. Checked by
//!   `control_dir::a_removed_data_dir_loses_the_lock`,
//!   `control_dir::a_moved_data_dir_loses_the_lock`.
//! - **A torn tail is repaired, corruption refused.** A torn tail keeps a
//!   `.broken` copy of the whole original file (fsynced, with its directory
//!   entry) *before* the journal is truncated to its last good record; a bad
//!   record followed by a good one refuses with
//!   [`ControlDirError::CorruptJournal`] and leaves every byte alone. Checked
//!   by `control_dir::torn_tail_is_repaired_with_a_broken_copy`,
//!   `control_dir::torn_header_is_repaired_to_a_fresh_journal`,
//!   `control_dir::a_flipped_byte_mid_journal_is_refused_and_left_untouched`,
//!   `control_dir::a_bad_header_is_refused_naming_the_file`.
//! - **Acknowledged only after fsync; a failed append is cut back, never
//!   retried.** [`JournalFile::append`] writes every frame with one
//!   `write_all`, then `sync_data`, and returns `Ok` only after the fsync
//!   returned. A failed write or fsync (ENOSPC, EIO, EFBIG, a short write)
//!   is answered with the error and poisons the writer; the next append
//!   first cuts the file back to the length it had when the failed append
//!   began (`ftruncate`, then `fsync`) and only then writes, so every
//!   append starts on a record boundary and the journal recovers as soon
//!   as the disk lets it, in the same process. If the cut fails, that
//!   append is refused ([`ControlDirError::JournalPoisoned`], naming the
//!   cause) and the next one tries again.
//!
//!   Why the cut is safe after a failed fsync: after a failed fsync the
//!   kernel may already have dropped the dirty pages (and cleared the
//!   error), so the page cache no longer tells what is on disk, and an
//!   fsync retried *over those bytes* could report success for data that
//!   is lost. The cut never does that. Every byte before the cut point was
//!   acknowledged, so it was durable before the failed append began (an
//!   earlier fsync returned, or it was read and repaired at open); every
//!   byte after it belongs to the failed append and was never
//!   acknowledged. Truncating removes only those bytes, and the records
//!   they held are written again, if at all, as new bytes with their own
//!   fsync: nothing written before a failure is ever acknowledged by a
//!   later fsync. What the cut's own fsync makes durable is the new,
//!   shorter length. The one case it cannot cover: if that fsync fails,
//!   it is tried again at the next append, and a kernel that dropped the
//!   size change may report success while the disk keeps the longer file;
//!   a crash then leaves the fragment before later records, which the next
//!   open refuses as corruption (never reads as records).
//!
//!   The cut point is the file's length measured (`fstat`) just before the
//!   failed write, not a count kept in memory, since during a replacement
//!   another process appends too; and while another process may append,
//!   nothing is cut (it could remove that writer's records): the writer
//!   stays poisoned until the journal is this process's alone. A
//!   compaction that failed after its rename poisons for good (this
//!   writer's file may no longer be the journal: a relaunch reopens it).
//!   Checked by the unit tests `appends_are_one_write_then_one_fsync`,
//!   `failed_fsync_is_not_acknowledged_and_the_next_append_cuts_it_back`,
//!   `a_short_write_is_cut_back_before_the_next_append`,
//!   `a_failed_cut_back_stays_poisoned_and_is_tried_again`,
//!   `a_shared_journal_is_cut_back_only_once_it_is_ours_alone` and
//!   `an_unencodable_record_writes_nothing_and_does_not_poison`, by
//!   `control_dir::journal_round_trips_across_reopen`, and through a real
//!   daemon on a full tmpfs by
//!   `enospc::a_real_journal_on_a_full_disk_keeps_exactly_its_acknowledged_records`
//!   and `enospc::a_journal_append_that_hit_enospc_recovers_without_a_relaunch`.
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

use std::fs::{self, File};
use std::io::{self, Read, Seek, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use bincode::Options;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use steadfast_protocol::journal::{self, JournalError, Record, Tail};

use crate::fsx::{self, Access, Dir, FsError, UnsafePath};

/// The control directory's name under the data dir.
pub const CONTROL_DIR_NAME: &str = ".steadfast";

/// The control plane's Unix socket's name in the control dir.
pub const SOCKET_NAME: &str = "control.sock";

/// The mode of the control directory.
pub const CONTROL_DIR_MODE: u32 = fsx::DIR_MODE;

/// The mode of every file steadfast creates in the control directory.
pub const FILE_MODE: u32 = fsx::FILE_MODE;

/// The lock file's name in the control directory.
const LOCK_NAME: &str = "lock";

/// The journal's name in the control directory.
const JOURNAL_NAME: &str = "journal";

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
    /// An earlier write or fsync of this journal failed and the journal
    /// could not be cut back to its last acknowledged length yet (see
    /// [`JournalFile::append`]); nothing is appended until it is.
    #[error(
        "journal {path} refuses appends after an earlier failed write or fsync ({cause}): {repair}"
    )]
    JournalPoisoned {
        /// The journal file.
        path: PathBuf,
        /// The failure that poisoned it, rendered.
        cause: String,
        /// Why it is not repaired yet, and what happens next.
        repair: String,
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
    /// A path in the data dir is not safe to use: a link, a directory
    /// another user owns or can write, a file that is not ours.
    #[error(transparent)]
    Unsafe(#[from] UnsafePath),
    /// The data-dir lock no longer guards the data dir: its file was
    /// removed or replaced, or the control directory moved away (`rm -rf`
    /// of a running daemon's data dir). Another daemon could start on the
    /// path; nothing more is acknowledged.
    #[error(
        "the data-dir lock {path} was lost ({reason}): another daemon could now start on this data dir; stop this daemon and relaunch it"
    )]
    LockLost {
        /// The lock file.
        path: PathBuf,
        /// What was found.
        reason: String,
    },
}

impl From<FsError> for ControlDirError {
    fn from(error: FsError) -> Self {
        match error {
            FsError::Unsafe(unsafe_path) => Self::Unsafe(unsafe_path),
            FsError::Io { path, source } => Self::Io { path, source },
        }
    }
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

impl RunMarker {
    /// What a failpoint says is being written: `run holding`, `run released`.
    fn label(&self) -> &'static str {
        match self {
            Self::Holding { .. } => "run holding",
            Self::Released { .. } => "run released",
        }
    }
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

/// The previous run of a data dir whose lock was handed over by
/// `incumbent`: [`PreviousRun::HandedOver`], with the attempt its run
/// marker recorded (the incumbent writes its current attempt before it
/// starts a candidate), never `Crashed`. The pid is the marker's, else the
/// handover's. Without a pid from either it stays what the marker said.
#[must_use]
pub fn handed_over_run(marker: &PreviousRun, incumbent: Option<u32>) -> PreviousRun {
    match (marker, incumbent) {
        (
            PreviousRun::Crashed {
                pid: Some(pid),
                attempt,
            },
            _,
        ) => PreviousRun::HandedOver {
            pid: *pid,
            attempt: *attempt,
        },
        (PreviousRun::Crashed { pid: None, .. } | PreviousRun::FirstEver, Some(pid)) => {
            PreviousRun::HandedOver { pid, attempt: None }
        }
        (other, _) => other.clone(),
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
/// A torn tail left by a crash is repaired in [`ControlDir::open_journal`]
/// before a writer exists; the fragment of a failed append is cut by the
/// writer itself ([`JournalSink::cut_back`]) before its next append.
pub trait JournalSink: Write + Send {
    /// Flush written data to stable storage (`fdatasync`).
    ///
    /// # Errors
    /// The OS error; the caller never retries it for the same bytes.
    fn sync_data(&mut self) -> io::Result<()>;

    /// The file's length now, in bytes (`fstat`): where the next
    /// (`O_APPEND`) write lands.
    ///
    /// # Errors
    /// The OS error.
    fn current_len(&mut self) -> io::Result<u64>;

    /// Cut the file back to `len` bytes and make the new length durable
    /// (`ftruncate`, then `fsync`). Refuses to *grow* a file that is
    /// shorter than `len`.
    ///
    /// # Errors
    /// The OS error, or [`io::ErrorKind::InvalidData`] if the file is
    /// shorter than `len`.
    fn cut_back(&mut self, len: u64) -> io::Result<()>;
}

impl JournalSink for File {
    fn sync_data(&mut self) -> io::Result<()> {
        File::sync_data(self)
    }

    fn current_len(&mut self) -> io::Result<u64> {
        self.metadata().map(|m| m.len())
    }

    fn cut_back(&mut self, len: u64) -> io::Result<()> {
        let now = self.current_len()?;
        if now < len {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("the file is {now} bytes, shorter than its last acknowledged length {len}"),
            ));
        }
        self.set_len(len)?;
        self.sync_all()
    }
}

/// Why a [`JournalFile`] refuses appends.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Poison {
    /// A write or fsync failed: the file is cut back to `cut_to` (where the
    /// failed append began) before the next append.
    FailedAppend {
        /// The failure, rendered.
        cause: String,
        /// The file's length when the failed append began: every byte
        /// before it was acknowledged (or was there at open), every byte
        /// after it belongs to the failed append.
        cut_to: u64,
    },
    /// A compaction failed after its rename: this writer's file may no
    /// longer be the journal, so it is never written again in this process.
    Compaction {
        /// The failure, rendered.
        cause: String,
    },
    /// The control directory's fsync that was to make the journal's own
    /// name durable (with its first append) failed: whether the name is
    /// on disk is unknown, and a later fsync that succeeds would not say,
    /// so this writer is never written again in this process.
    DirEntry {
        /// The failure, rendered.
        cause: String,
    },
}

/// Names created in the control directory (`lock`, `journal`) that no
/// fsync of the directory has made durable yet, and the directory to fsync.
/// The next fsync of the control directory covers them: at open that is the
/// `holding` run marker's; [`JournalFile::append`] fsyncs the directory
/// itself before it acknowledges anything if none has happened by then.
/// Names are only created at open, before anything runs concurrently, and
/// `pending` is cleared only once an fsync that began after them returned
/// (an fsync in flight elsewhere does not clear it early).
///
/// A created control directory's own name, in the data dir, is pending the
/// same way (`parent`): made durable by the same fsyncs, after the control
/// directory's. And the launch's `holding` marker may still be settling on
/// the process's settling thread ([`ControlDir::write_run_settling`]): every fsync
/// here, every marker write and every journal acknowledgement waits for it
/// first ([`Settling`]).
#[derive(Debug, Clone)]
struct UnsyncedNames {
    dir: Arc<Dir>,
    pending: Arc<AtomicBool>,
    /// The data dir, while the name `.steadfast` in it is not durable.
    parent: Arc<std::sync::Mutex<Option<Dir>>>,
    /// The launch's durability work, queued or running beside it.
    settling: Arc<Settling>,
    /// Every fsync the control directory makes outside journal appends.
    fsyncs: Arc<AtomicU64>,
}

impl UnsyncedNames {
    /// fsync the directory if a name is pending.
    fn sync_if_pending(&self) -> Result<(), FsError> {
        self.settling.wait(&self.dir)?;
        if self.pending.load(Ordering::SeqCst) || self.parent_pending() {
            self.sync()?;
        }
        Ok(())
    }

    /// fsync the directory; once it returned, nothing is pending.
    fn sync(&self) -> Result<(), FsError> {
        self.settling.wait(&self.dir)?;
        self.sync_settled()
    }

    /// [`Self::sync`], for the settling job itself (it must not wait
    /// for itself).
    fn sync_settled(&self) -> Result<(), FsError> {
        let was_pending = self.pending.load(Ordering::SeqCst);
        self.fsyncs.fetch_add(1, Ordering::Relaxed);
        self.dir.sync()?;
        if was_pending {
            self.pending.store(false, Ordering::SeqCst);
        }
        let mut parent = self
            .parent
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(data) = parent.as_ref() {
            self.fsyncs.fetch_add(1, Ordering::Relaxed);
            data.sync()?;
            *parent = None;
        }
        Ok(())
    }

    fn parent_pending(&self) -> bool {
        self.parent
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .is_some()
    }
}

/// The durability work a launch leaves to run beside it
/// ([`ControlDir::write_run_settling`]): queued for the process's one
/// settling thread (`SETTLER`), and run by whichever comes first, that
/// thread or the first waiter. A waiter never waits for a job still queued
/// behind other launches' jobs: it takes the job and runs it itself, so
/// 1,000 launches at once cost one thread, not one each (nor a blocking
/// pool grown by waiters), and a waiter only ever waits for a job already
/// running. Its outcome is kept:
/// a failure is returned to every later waiter (whether the names and the
/// marker are on disk is then unknown, so nothing may be acknowledged over
/// this control directory again).
#[derive(Default)]
struct Settling {
    turn: std::sync::Mutex<Settle>,
    /// Signalled when a running job ends.
    ended: std::sync::Condvar,
}

/// A settling job's state.
#[derive(Default)]
enum Settle {
    /// Nothing is out: none was queued, or it ended well.
    #[default]
    Settled,
    /// Queued, not started.
    Queued(SettleJob),
    /// Running on some thread.
    Running,
    /// Ended with this failure.
    Failed(String),
}

type SettleJob = Box<dyn FnOnce() -> Result<(), String> + Send>;

/// The process's settling thread: runs the launches' queued jobs in turn
/// (one thread, however many supervisors launch at once: the waiters run
/// the jobs it has not reached), started when a job is queued and none is
/// out, and gone once the queue is empty.
static SETTLER: Settler = Settler {
    queue: std::sync::Mutex::new(Queue {
        jobs: std::collections::VecDeque::new(),
        out: false,
    }),
};

struct Settler {
    queue: std::sync::Mutex<Queue>,
}

struct Queue {
    /// Launches whose job may still be queued (a waiter may have run it,
    /// or the control directory may be gone: then there is nothing to do).
    jobs: std::collections::VecDeque<std::sync::Weak<Settling>>,
    /// Whether the thread is out (it empties the queue before it leaves).
    out: bool,
}

impl Settler {
    fn lock(&self) -> std::sync::MutexGuard<'_, Queue> {
        self.queue
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn push(&'static self, settling: std::sync::Weak<Settling>) {
        let mut queue = self.lock();
        queue.jobs.push_back(settling);
        if queue.out {
            return;
        }
        let started = std::thread::Builder::new()
            .name("steadfast-settle".into())
            .spawn(|| self.work());
        // A thread that cannot be started leaves the jobs queued: their
        // first waiters run them (and the next push tries again).
        queue.out = started.is_ok();
    }

    fn work(&self) {
        loop {
            let next = {
                let mut queue = self.lock();
                let Some(next) = queue.jobs.pop_front() else {
                    queue.out = false;
                    return;
                };
                next
            };
            if let Some(settling) = next.upgrade() {
                settling.run_queued();
            }
        }
    }
}

impl std::fmt::Debug for Settling {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = match self.turn.try_lock().as_deref() {
            Ok(Settle::Settled) => "settled",
            Ok(Settle::Queued(_)) => "queued",
            Ok(Settle::Running) => "running",
            Ok(Settle::Failed(_)) => "failed",
            Err(_) => "busy",
        };
        f.debug_struct("Settling").field("state", &state).finish()
    }
}

impl Settling {
    fn lock(&self) -> std::sync::MutexGuard<'_, Settle> {
        self.turn
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Queue `job`, to run on the process's one settling thread unless a
    /// waiter takes it first. The caller holds the turn: nothing else is
    /// out.
    fn queue(self: &Arc<Self>, job: SettleJob) {
        *self.lock() = Settle::Queued(job);
        SETTLER.push(Arc::downgrade(self));
    }

    /// Run the job if it is still queued (the settling thread's turn).
    fn run_queued(&self) {
        let turn = self.lock();
        if matches!(*turn, Settle::Queued(_)) {
            self.run(turn);
        }
    }

    /// Take the queued job in `turn`, run it without the lock, record its
    /// outcome and wake the waiters.
    fn run(&self, mut turn: std::sync::MutexGuard<'_, Settle>) {
        let Settle::Queued(job) = std::mem::replace(&mut *turn, Settle::Running) else {
            return;
        };
        drop(turn);
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(job))
            .unwrap_or_else(|_| Err("the launch's settling panicked".to_owned()));
        *self.lock() = match outcome {
            Ok(()) => Settle::Settled,
            Err(cause) => Settle::Failed(cause),
        };
        self.ended.notify_all();
    }

    /// Whether a waiter would have to wait or run the job, or would be
    /// told of a failure.
    fn unsettled(&self) -> bool {
        self.turn
            .try_lock()
            .map_or(true, |turn| !matches!(*turn, Settle::Settled))
    }

    /// Settle first: run the job if it is still queued, wait for it if it
    /// is running; its failure (now or earlier) is an error naming `dir`.
    fn wait(&self, dir: &Dir) -> Result<(), FsError> {
        let mut turn = self.lock();
        loop {
            match &*turn {
                Settle::Settled => return Ok(()),
                Settle::Failed(cause) => {
                    return Err(FsError::Io {
                        path: dir.path().to_path_buf(),
                        source: io::Error::other(format!(
                            "the launch's holding marker or directory fsyncs failed: {cause}"
                        )),
                    });
                }
                Settle::Queued(_) => {
                    self.run(turn);
                    turn = self.lock();
                }
                Settle::Running => {
                    turn = self
                        .ended
                        .wait(turn)
                        .unwrap_or_else(std::sync::PoisonError::into_inner);
                }
            }
        }
    }
}

/// The journal's one writer: appends records and acknowledges them only
/// after they are fsynced.
pub struct JournalFile<S: JournalSink = File> {
    /// Where the frames go.
    sink: S,
    /// The journal's path, for errors.
    path: PathBuf,
    /// Bytes known durable: the length at open, then the file's length
    /// after each acknowledged append (which includes another writer's
    /// records during a replacement).
    len: u64,
    /// The file's length after the last write ([`Self::write`]): past
    /// [`Self::len`] while written records wait for their fsync.
    end: u64,
    /// Where the first write not yet fsynced began ([`Self::write`] without
    /// [`Self::sync`]): every byte from here is in the page cache only, so
    /// a failed fsync cuts the file back to here. `None` when every written
    /// byte is durable.
    unsynced: Option<u64>,
    /// Set by a failed write or fsync (or a compaction that failed after its
    /// rename); cleared once the failed append's bytes are cut back.
    poison: Option<Poison>,
    /// The control directory's lock, kept alive so no writer outlives it,
    /// and checked before every append (`None` for a sink built in tests).
    lock: Option<Arc<HeldLock>>,
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
    /// A journal created at open has its name made durable by the control
    /// directory's next fsync; if none came before the first append, the
    /// append makes it (`None` for a sink built in tests).
    names: Option<UnsyncedNames>,
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
            .field("poison", &self.poison)
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
            end: len,
            unsynced: None,
            poison: None,
            lock: None,
            _slot: None,
            keep_attempts: None,
            attempts: 0,
            shared: None,
            shared_with: None,
            names: None,
        }
    }

    /// Append `records` durably: every frame is encoded into one buffer,
    /// written with one `write_all`, then `sync_data`. `Ok` means the fsync
    /// returned; only then may the records be acknowledged. The fsync also
    /// makes durable every record [`Self::write`] wrote before.
    ///
    /// After a failed write or fsync, the next append first cuts the file
    /// back to where the failed append began ([`JournalSink::cut_back`]:
    /// `ftruncate` + `fsync`), so that every append starts on a record
    /// boundary; if the cut fails, this append is refused and the next one
    /// tries again. An empty append is a repair attempt and an fsync of
    /// what was written before it, and nothing else.
    ///
    /// # Errors
    /// [`ControlDirError::RecordNotEncoded`] if a record cannot be framed
    /// (nothing written); [`ControlDirError::Io`] if the write or fsync failed,
    /// which poisons the writer; [`ControlDirError::JournalPoisoned`] while
    /// the failed append's bytes cannot be cut back (the cut failed, another
    /// process may be appending, or a compaction failed after its rename).
    pub fn append(&mut self, records: &[Record]) -> Result<(), ControlDirError> {
        // `write` checked the lock and repaired a poisoned writer.
        self.write(records)?;
        self.sync_written()
    }

    /// Write `records` (one buffer, one `write_all`) without an fsync: they
    /// are in the file (a `kill -9` keeps them) but not yet durable, and
    /// may not be acknowledged until a [`Self::sync`] (or an
    /// [`Self::append`]) returns. A failed write poisons as an append does
    /// (its own bytes are cut back before the next write; earlier written
    /// records stay, to be made durable by the next fsync).
    ///
    /// # Errors
    /// As [`Self::append`].
    pub fn write(&mut self, records: &[Record]) -> Result<(), ControlDirError> {
        self.check_lock()?;
        self.repair()?;
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
        // Where this write lands (`O_APPEND`): the cut-back point if it
        // fails. Nothing is written yet, so a failed fstat poisons nothing.
        let start = self.sink.current_len().map_err(io_err(&self.path))?;
        if let Err(source) = self.write_frames(&buf) {
            return Err(self.failed("write", source, start));
        }
        self.unsynced.get_or_insert(start);
        self.end = start + buf.len() as u64;
        self.attempts += journal::attempts_in(records);
        Ok(())
    }

    /// Make every record written so far durable (`sync_data`); nothing to do
    /// (no fsync) when every written record is durable already.
    ///
    /// # Errors
    /// As [`Self::append`]. A failed fsync is never retried: the unsynced
    /// records are cut back before the next write (after a failed fsync
    /// the kernel may have dropped their pages: they are not known to be
    /// on disk), and the caller must not acknowledge them.
    pub fn sync(&mut self) -> Result<(), ControlDirError> {
        self.check_lock()?;
        self.repair()?;
        self.sync_written()
    }

    /// [`Self::sync`] once the lock is checked and the writer repaired.
    fn sync_written(&mut self) -> Result<(), ControlDirError> {
        let Some(from) = self.unsynced else {
            return Ok(());
        };
        if let Err(source) = self.sync_frames() {
            self.unsynced = None;
            return Err(self.failed("fsync", source, from));
        }
        // A journal created at open whose name no fsync of the control
        // directory has made durable yet (none has run since): made durable
        // now, before anything is acknowledged. A failure poisons for good.
        if let Some(names) = &self.names
            && let Err(error) = names.sync_if_pending()
        {
            let cause = error.to_string();
            tracing::error!(path = %self.path.display(), %cause,
                "the control directory could not be fsynced after the journal's first append; nothing acknowledged");
            self.poison = Some(Poison::DirEntry { cause });
            return Err(error.into());
        }
        self.unsynced = None;
        self.len = self.end;
        Ok(())
    }

    /// A `what` (write or fsync) failed: poison this writer so that the
    /// next append first cuts the file back to `cut_to`, and say so.
    fn failed(&mut self, what: &str, source: io::Error, cut_to: u64) -> ControlDirError {
        self.poison = Some(Poison::FailedAppend {
            cause: source.to_string(),
            cut_to,
        });
        tracing::error!(path = %self.path.display(), error = %source,
            "journal {what} failed; nothing acknowledged, cut back before the next append");
        ControlDirError::Io {
            path: self.path.clone(),
            source,
        }
    }

    /// Whether records were written that no fsync has made durable yet.
    #[must_use]
    pub const fn has_unsynced(&self) -> bool {
        self.unsynced.is_some()
    }

    /// If a failed append poisoned this writer, cut its bytes off and clear
    /// the poison; else say why not.
    fn repair(&mut self) -> Result<(), ControlDirError> {
        let refused = |cause: &str, repair: String| ControlDirError::JournalPoisoned {
            path: self.path.clone(),
            cause: cause.to_owned(),
            repair,
        };
        let (cause, cut_to) = match &self.poison {
            None => return Ok(()),
            Some(Poison::Compaction { cause }) => {
                return Err(refused(
                    cause,
                    "a compaction failed after renaming the new journal into place, so this \
                     writer may hold the old file; relaunch the daemon to reopen the journal"
                        .to_owned(),
                ));
            }
            Some(Poison::DirEntry { cause }) => {
                return Err(refused(
                    cause,
                    "the control directory could not be fsynced to make the journal's name \
                     durable; relaunch the daemon to reopen the journal"
                        .to_owned(),
                ));
            }
            Some(Poison::FailedAppend { cause, cut_to, .. }) => (cause.clone(), *cut_to),
        };
        if self.is_shared() {
            // Another process may have appended after the fragment: cutting
            // would remove its records.
            return Err(refused(
                &cause,
                format!(
                    "another process may be appending to it (a replacement in progress), so it \
                     is not cut back to {cut_to} bytes until it is this process's alone; \
                     tried again at the next append"
                ),
            ));
        }
        match self.sink.cut_back(cut_to) {
            Ok(()) => {
                tracing::warn!(path = %self.path.display(), len = cut_to, %cause,
                    "journal cut back to its last acknowledged length after a failed append; appending again");
                self.poison = None;
                // The cut's own fsync (`sync_all`) made every byte before
                // `cut_to` durable, a write waiting for its fsync included.
                self.len = cut_to;
                self.end = cut_to;
                self.unsynced = None;
                Ok(())
            }
            Err(error) => {
                let repair = format!(
                    "cutting it back to its last acknowledged length of {cut_to} bytes failed \
                     ({error}); tried again at the next append"
                );
                Err(refused(&cause, repair))
            }
        }
    }

    /// Whether the data-dir lock still guards the data dir
    /// ([`ControlDir::check_lock`]); a writer built over a test sink has
    /// no lock to check.
    fn check_lock(&self) -> Result<(), ControlDirError> {
        self.lock.as_ref().map_or(Ok(()), |lock| lock.check())
    }

    /// One `write_all` of `buf`, with the crash harness's failpoint in it
    /// (`crate::failpoint`; nothing when unarmed).
    fn write_frames(&mut self, buf: &[u8]) -> io::Result<()> {
        if crate::failpoint::reached("journal.mid_write") {
            let half = buf.len() / 2;
            self.sink.write_all(buf.get(..half).unwrap_or(buf))?;
            crate::failpoint::kill();
        }
        self.sink.write_all(buf)
    }

    /// `sync_data`, with the crash harness's failpoints around it.
    fn sync_frames(&mut self) -> io::Result<()> {
        crate::failpoint::hit("journal.before_fsync");
        self.sink.sync_data()?;
        crate::failpoint::hit("journal.after_fsync");
        Ok(())
    }

    /// The journal's durable length in bytes: its length at open, then after
    /// each acknowledged append (measured, so it counts another writer's
    /// records during a replacement), or where a failed append was cut back.
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

    /// Whether a failed write or fsync poisoned this writer (and its bytes
    /// are not cut back yet).
    #[must_use]
    pub const fn is_poisoned(&self) -> bool {
        self.poison.is_some()
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
    /// The bytes known durable (the file's length after the last
    /// acknowledged append).
    #[must_use]
    pub const fn durable_len(&self) -> u64 {
        self.len
    }

    /// Whether the journal holds more than twice the attempts compaction
    /// keeps (the slack keeps compaction rare: once per `keep` attempts).
    #[must_use]
    pub fn wants_compaction(&self) -> bool {
        self.keep_attempts
            .is_some_and(|keep| self.attempts > keep.max(1).saturating_mul(2))
            && self.unsynced.is_none()
            && !self.is_shared()
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
        self.repair()?;
        let Some(lock) = self.lock.clone() else {
            return Ok(None);
        };
        let dir = &lock.dir;
        let path = self.path.clone();
        let bytes = dir
            .read(JOURNAL_NAME, u64::MAX)?
            .ok_or_else(|| io_err(&path)(io::ErrorKind::NotFound.into()))?;
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
        let tmp = dir.join(COMPACT_TMP_NAME);
        if let Some(names) = &self.names {
            // The new file's fsync and the directory's.
            names.fsyncs.fetch_add(2, Ordering::Relaxed);
        }
        let written = dir
            .create_temp(COMPACT_TMP_NAME)
            .map_err(ControlDirError::from)
            .and_then(|mut file| {
                file.write_all(&out).map_err(io_err(&tmp))?;
                crate::failpoint::hit("compact.before_fsync");
                file.sync_all().map_err(io_err(&tmp))?;
                crate::failpoint::hit("compact.before_rename");
                Ok(dir.rename(COMPACT_TMP_NAME, JOURNAL_NAME)?)
            });
        if let Err(e) = written {
            let _ = dir.unlink(COMPACT_TMP_NAME);
            return Err(e);
        }
        // The old file is unlinked: from here on, a failure poisons.
        crate::failpoint::hit("compact.before_dir_fsync");
        let reopened = dir
            .sync()
            .and_then(|()| dir.open(JOURNAL_NAME, Access::Append))
            .map_err(ControlDirError::from);
        match reopened {
            Ok(file) => {
                self.sink = file;
                self.len = out.len() as u64;
                self.end = self.len;
                self.attempts = journal::attempts_in(&kept);
                Ok(Some(Compacted {
                    records_before,
                    records_after: kept.len(),
                    len: self.len,
                }))
            }
            Err(error) => {
                self.poison = Some(Poison::Compaction {
                    cause: error.to_string(),
                });
                Err(error)
            }
        }
    }
}

/// The data-dir lock as held: the open `lock` file, and the control
/// directory it must still be the `lock` of.
#[derive(Debug)]
struct HeldLock {
    /// The open, locked file (held open: its inode cannot be reused while
    /// it is, so its device and inode name it for as long as we hold it).
    file: File,
    /// The control directory, open.
    dir: Arc<Dir>,
    /// The locked file's device and inode.
    file_id: (u64, u64),
    /// The control directory's device and inode.
    dir_id: (u64, u64),
}

impl HeldLock {
    /// The lock held on `file`, the `lock` of `dir`: their identities taken
    /// once, so that a check is two `stat`s.
    fn new(file: File, dir: Arc<Dir>) -> Result<Self, ControlDirError> {
        let held = rustix::fs::fstat(&file).map_err(|e| io_err(&dir.join(LOCK_NAME))(e.into()))?;
        let opened = dir.fstat()?;
        Ok(Self {
            file,
            dir,
            file_id: (held.st_dev, held.st_ino),
            dir_id: (opened.st_dev, opened.st_ino),
        })
    }

    /// See [`ControlDir::check_lock`]. The locked file is held open, so its
    /// inode is not reused while this runs: `lock` still naming that inode
    /// (through the directory's descriptor) means the file was neither
    /// removed nor replaced, and a removed control directory names nothing.
    fn check(&self) -> Result<(), ControlDirError> {
        let lost = |reason: String| ControlDirError::LockLost {
            path: self.dir.join(LOCK_NAME),
            reason,
        };
        match self.dir.stat(LOCK_NAME)? {
            None => {
                return Err(lost(format!(
                    "{} no longer exists",
                    self.dir.join(LOCK_NAME).display()
                )));
            }
            Some(now) if (now.st_dev, now.st_ino) != self.file_id => {
                return Err(lost(format!(
                    "{} now names another file",
                    self.dir.join(LOCK_NAME).display()
                )));
            }
            Some(_) => {}
        }
        match rustix::fs::stat(self.dir.path()) {
            Ok(now) if (now.st_dev, now.st_ino) == self.dir_id => Ok(()),
            Ok(_) => Err(lost(format!(
                "{} now names another directory",
                self.dir.path().display()
            ))),
            Err(e) => Err(lost(format!(
                "{} was moved or removed: {e}",
                self.dir.path().display()
            ))),
        }
    }
}

/// An open, locked control directory.
#[derive(Debug)]
pub struct ControlDir {
    /// `<data_dir>/.steadfast`.
    path: PathBuf,
    /// `<data_dir>/.steadfast`, open: every file in it is opened relative
    /// to this descriptor, without following links.
    dir: Arc<Dir>,
    /// The open `lock` file holding the exclusive lock; shared with the
    /// journal writer so the lock lasts as long as either.
    lock: Arc<HeldLock>,
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
    /// Held while a marker is written: every marker of a name goes through
    /// one temp file (`.<name>.tmp`, unlinked if found), so two writers in
    /// this process (the Journal actor's run-marker task and a
    /// replacement's) must not interleave.
    markers: std::sync::Mutex<()>,
    /// Names created here that the next fsync of this directory makes
    /// durable, and the count of this directory's fsyncs.
    names: UnsyncedNames,
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
        dir.previous_run = handed_over_run(&dir.previous_run, incumbent);
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
        &self.lock.file
    }

    /// The control directory, open (for files another module keeps in it).
    #[must_use]
    pub fn dir(&self) -> &Dir {
        &self.dir
    }

    /// Whether the data-dir lock still guards the data dir: `lock` in the
    /// control directory still names the locked file (which is held open,
    /// so its inode cannot be reused: a removed or replaced file, or a
    /// removed directory, names nothing or another inode), and the control
    /// directory's path still names the directory opened. Two `stat`s.
    /// [`JournalFile::append`] checks this before it writes, and the
    /// process's lock-watch thread every
    /// [`crate::root::LOCK_CHECK_PERIOD`] ([`crate::lock_watch`]).
    ///
    /// # Errors
    /// [`ControlDirError::LockLost`] saying what was found;
    /// [`ControlDirError::Io`] if the lock cannot be examined.
    pub fn check_lock(&self) -> Result<(), ControlDirError> {
        self.lock.check()
    }

    fn open_inner(data_dir: &Path, inherited: Option<File>) -> Result<Self, ControlDirError> {
        // The data dir must be trusted, and `.steadfast` is reached through
        // its descriptor without following a link; a loose mode on a
        // control dir of ours is tightened (fchmod) before anything in it
        // is opened.
        let data = Dir::open_data_dir(data_dir, true)?;
        let (dir, created) = data.open_subdir(CONTROL_DIR_NAME, true)?;
        let path = dir.path().to_path_buf();
        let lock_path = dir.join(LOCK_NAME);
        let lock = match inherited {
            Some(file) => {
                let ours = dir.stat(LOCK_NAME)?;
                let theirs = rustix::fs::fstat(&file).map_err(|e| io_err(&lock_path)(e.into()))?;
                if ours
                    .is_none_or(|ours| (ours.st_dev, ours.st_ino) != (theirs.st_dev, theirs.st_ino))
                {
                    return Err(ControlDirError::Locked(lock_path));
                }
                file
            }
            None => dir.open(LOCK_NAME, Access::ReadWriteCreate)?,
        };
        match crate::fsx::try_lock_patiently(&lock) {
            Ok(()) => {}
            Err(fs::TryLockError::WouldBlock) => return Err(ControlDirError::Locked(lock_path)),
            Err(fs::TryLockError::Error(e)) => return Err(io_err(&lock_path)(e)),
        }
        // A created control dir: its own name (in the data dir) and the
        // names made in it (`lock`, then `journal`) are made durable by its
        // next fsync, the `holding` marker's at open, which a daemon writes
        // before its first journal append (else that append makes them:
        // `UnsyncedNames`). Nothing in it is acknowledged before then.
        let dir = Arc::new(dir);
        let names = UnsyncedNames {
            dir: Arc::clone(&dir),
            pending: Arc::new(AtomicBool::new(created)),
            parent: Arc::new(std::sync::Mutex::new(created.then_some(data))),
            settling: Arc::new(Settling::default()),
            fsyncs: Arc::new(AtomicU64::new(0)),
        };
        let mut dir = Self {
            path,
            lock: Arc::new(HeldLock::new(lock, Arc::clone(&dir))?),
            dir,
            previous_run: PreviousRun::FirstEver,
            journal_opened: Arc::new(AtomicBool::new(false)),
            journal_keep: None,
            journal_shared: Arc::new(AtomicBool::new(false)),
            handed_over_from: None,
            markers: std::sync::Mutex::new(()),
            names,
        };
        // A compaction that died before its rename left its temp file.
        dir.dir.unlink(COMPACT_TMP_NAME)?;
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
        self.path.join(SOCKET_NAME)
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
        let (mut file, created) = match self.dir.open(JOURNAL_NAME, Access::AppendCreateNew) {
            Ok(file) => (file, true),
            Err(e) if e.io_kind() == Some(io::ErrorKind::AlreadyExists) => {
                (self.dir.open(JOURNAL_NAME, Access::Append)?, false)
            }
            Err(e) => return Err(e.into()),
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
                // Not fsynced here: the first append's `sync_data` makes the
                // header durable with the first records (no record exists
                // before it), and the journal's name is made durable by the
                // control dir's next fsync (`UnsyncedNames`). A crash before
                // then leaves no journal, an empty one or a torn header,
                // each opened as fresh.
                file.write_all(&journal::encode_header())
                    .map_err(io_err(path))?;
                if created {
                    self.names.pending.store(true, Ordering::SeqCst);
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
                self.count_fsync();
                file.sync_all().map_err(io_err(path))?;
                Recovery::RepairedTornTail {
                    offset,
                    broken_copy,
                }
            }
        };
        let len = file.metadata().map_err(io_err(path))?.len();
        let mut writer = JournalFile::with_sink(file, path.to_path_buf(), len);
        writer.lock = Some(Arc::clone(&self.lock));
        writer._slot = Some(WriterSlot(Arc::clone(&self.journal_opened)));
        writer.keep_attempts = self.journal_keep;
        writer.shared = Some(Arc::clone(&self.journal_shared));
        writer.shared_with = self.handed_over_from;
        writer.names = Some(self.names.clone());
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
            let target = self.dir.join(&name);
            // `O_EXCL`: a name already taken (even by a link) is skipped.
            match self.dir.open(&name, Access::WriteCreateNew) {
                Ok(mut file) => {
                    self.count_fsync();
                    file.write_all(bytes)
                        .and_then(|()| file.sync_all())
                        .map_err(io_err(&target))?;
                    self.sync_dir()?;
                    return Ok(target);
                }
                Err(e) if e.io_kind() == Some(io::ErrorKind::AlreadyExists) => n += 1,
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// Write the run marker atomically.
    ///
    /// # Errors
    /// [`ControlDirError::Io`] if any step of the atomic write fails.
    pub fn write_run(&self, marker: &RunMarker) -> Result<(), ControlDirError> {
        self.write_marker_as("run", marker.label(), RUN_MAGIC, marker, true)
    }

    /// Write the launch's run marker (`holding {pid, 0}`) as
    /// [`Self::write_run`] does, but leave its fsyncs to a job queued for
    /// the process's settling thread (`Settling`): the temp file is created, written
    /// and renamed over `run` here (so a full disk refuses the launch at
    /// once, and the marker names this process before anything is written
    /// to the journal), then that job fsyncs it and the control directory, and the data dir when
    /// `.steadfast` was created (`UnsyncedNames`). A launch's first fsyncs
    /// (on ext4, the commit of every name and file it made) thus overlap
    /// the rest of its start: the control socket, the actors, the first
    /// boot's resolve.
    ///
    /// Nothing waits for less: every later fsync of this directory, marker
    /// write and journal acknowledgement ([`JournalFile::sync`]) first
    /// settles it (runs it if that thread has not yet, else waits for it),
    /// and its failure fails each of them (the journal
    /// writer is poisoned for good, as for a failed directory fsync). So
    /// nothing is acknowledged or published before the marker and the
    /// names are durable (`spec/control-dir.md`, "The fsyncs of a launch").
    /// Meant for a launch, before anything else of this process writes a
    /// marker (the supervisor calls it while it is built).
    ///
    /// # Errors
    /// [`ControlDirError::Io`] if the temp file cannot be made or written.
    pub fn write_run_settling(&self, marker: &RunMarker) -> Result<(), ControlDirError> {
        self.names.settling.wait(&self.dir)?;
        let bytes =
            encode_marker(RUN_MAGIC, marker).map_err(|reason| ControlDirError::BadMarker {
                path: self.run_path(),
                reason,
            })?;
        let tmp_name = ".run.tmp";
        let tmp = self.dir.join(tmp_name);
        let mut file = self.dir.create_temp(tmp_name)?;
        if let Err(source) = file.write_all(&bytes) {
            let _ = self.dir.unlink(tmp_name);
            return Err(io_err(&tmp)(source));
        }
        // Renamed into place now, before its fsync: the marker must name
        // this process before the journal's first write (a process killed
        // with that write in the page cache is `crashed`, never
        // `first_ever`, at the next open). What a power loss can leave
        // instead — the marker this one replaced, or this one torn — reads
        // as a run that did not end cleanly or as `crashed`, as the
        // per-attempt note's rewrite may (`note_run`).
        crate::failpoint::hit_doing("marker.before_rename", || marker.label().to_owned());
        if let Err(e) = self.dir.rename(tmp_name, "run") {
            let _ = self.dir.unlink(tmp_name);
            return Err(e.into());
        }
        let names = self.names.clone();
        // Kept until the job is done: no other daemon takes the data dir
        // while this one's marker is still on its way.
        let lock = Arc::clone(&self.lock);
        let path = self.run_path();
        let label = marker.label();
        let settle = move || -> Result<(), String> {
            let _lock = lock;
            names.fsyncs.fetch_add(1, Ordering::Relaxed);
            file.sync_all()
                .map_err(|e| format!("{}: {e}", path.display()))?;
            drop(file);
            crate::failpoint::hit_doing("marker.before_dir_fsync", || label.to_owned());
            names.sync_settled().map_err(|e| e.to_string())
        };
        self.names.settling.queue(Box::new(settle));
        Ok(())
    }

    /// Replace a durable `holding` run marker with `marker` (the attempt a
    /// boot is on), without fsyncs: in place when it is as long as the
    /// marker there (`rewrite_in_place`), else temp file → write →
    /// rename. A killed process leaves it in the page cache, so the next
    /// daemon reads it; only a power loss can undo it, leaving the durable
    /// `holding` it replaced (or an unreadable marker): the previous run
    /// still reads `crashed`, with an earlier attempt (or none). So the
    /// classification a run marker decides never depends on this write,
    /// only the attempt a crash report names (`spec/control-dir.md`,
    /// "The run marker and the previous run").
    ///
    /// # Errors
    /// [`ControlDirError::Io`] if any step of the atomic write fails.
    pub fn note_run(&self, marker: &RunMarker) -> Result<(), ControlDirError> {
        self.names.settling.wait(&self.dir)?;
        {
            let _one_at_a_time = self
                .markers
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            if self.rewrite_in_place("run", RUN_MAGIC, marker)? {
                return Ok(());
            }
        }
        self.write_marker_as("run", marker.label(), RUN_MAGIC, marker, false)
    }

    /// Overwrite marker `name` in place with `value` when its encoding is
    /// as long as the marker there now (a `holding` run marker over
    /// another: the same pid, an attempt of the same width): one `pwrite`
    /// into the file's one page, no temp file, no rename (a rename frees
    /// the old file's blocks, which on this kind of disk costs a discard
    /// per boot). A tear (only a power loss can make one) reads as an
    /// unreadable marker: `crashed`, as the marker it replaced did.
    /// `false`, writing nothing, when the lengths differ or there is no
    /// marker: the caller writes a new one.
    /// [`Self::note_run`] when it is one `pwrite` and no other marker write
    /// is under way: `Some` with what the write did, `None` (nothing done)
    /// when the marker must be written anew, another marker write holds
    /// the turn or the launch's marker is still settling. For a caller
    /// that must not block (an actor's handler): the `None` case goes to
    /// [`Self::note_run`] on a blocking thread.
    pub fn note_run_in_place(&self, marker: &RunMarker) -> Option<Result<(), ControlDirError>> {
        // The launch's marker still settling (or failed to): `note_run`
        // waits for it (and reports its failure) first.
        if self.names.settling.unsettled() {
            return None;
        }
        let _one_at_a_time = match self.markers.try_lock() {
            Ok(turn) => turn,
            Err(std::sync::TryLockError::Poisoned(turn)) => turn.into_inner(),
            Err(std::sync::TryLockError::WouldBlock) => return None,
        };
        match self.rewrite_in_place("run", RUN_MAGIC, marker) {
            Ok(true) => Some(Ok(())),
            Ok(false) => None,
            Err(error) => Some(Err(error)),
        }
    }

    fn rewrite_in_place<T: Serialize>(
        &self,
        name: &str,
        magic: [u8; 8],
        value: &T,
    ) -> Result<bool, ControlDirError> {
        use std::os::unix::fs::FileExt;
        let target = self.dir.join(name);
        let bytes = encode_marker(magic, value).map_err(|reason| ControlDirError::BadMarker {
            path: target.clone(),
            reason,
        })?;
        let file = match self.dir.open(name, Access::Write) {
            Ok(file) => file,
            Err(e) if e.io_kind() == Some(io::ErrorKind::NotFound) => return Ok(false),
            Err(e) => return Err(e.into()),
        };
        let len = file.metadata().map_err(io_err(&target))?.len();
        if len != bytes.len() as u64 {
            return Ok(false);
        }
        file.write_all_at(&bytes, 0).map_err(io_err(&target))?;
        Ok(true)
    }

    /// Read the run marker as it is now.
    ///
    /// # Errors
    /// [`ControlDirError::Io`] if it exists but cannot be read.
    pub fn read_run(&self) -> Result<MarkerRead<RunMarker>, ControlDirError> {
        read_marker(&self.dir, "run", RUN_MAGIC)
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
        if self.dir.unlink("hold")? {
            self.sync_dir()?;
        }
        Ok(())
    }

    /// Whether a stop is held. The marker's presence is what counts: a hold
    /// marker that is present but damaged still holds (the safe side).
    ///
    /// # Errors
    /// [`ControlDirError::Io`] if its presence cannot be determined.
    pub fn is_held(&self) -> Result<bool, ControlDirError> {
        Ok(self.dir.stat("hold")?.is_some())
    }

    /// The data dir's identity, if one was created.
    ///
    /// # Errors
    /// [`ControlDirError::BadMarker`] if the identity marker is unreadable or
    /// its id is not 32 lowercase hex characters; [`ControlDirError::Io`] if
    /// it cannot be read.
    pub fn identity(&self) -> Result<Option<Identity>, ControlDirError> {
        let path = self.identity_path();
        match read_marker::<Identity>(&self.dir, "identity", IDENTITY_MAGIC)? {
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
        match read_marker::<Vec<(String, String)>>(&self.dir, "overrides", OVERRIDES_MAGIC)? {
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
            if self.dir.unlink("overrides")? {
                self.sync_dir()?;
            }
            return Ok(());
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
        self.write_marker_as(name, name, magic, value, true)
    }

    /// [`Self::write_marker`], with the two fsyncs only if `durable`;
    /// `label` is what a failpoint on the way says was being written.
    fn write_marker_as<T: Serialize>(
        &self,
        name: &str,
        label: &str,
        magic: [u8; 8],
        value: &T,
        durable: bool,
    ) -> Result<(), ControlDirError> {
        // The launch's `holding` marker may still be on its way through the
        // same temp file (`write_run_settling`).
        self.names.settling.wait(&self.dir)?;
        // A writer that panicked mid-write left nothing this one relies on:
        // the temp file is unlinked and made again below.
        let _one_at_a_time = self
            .markers
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let target = self.dir.join(name);
        let bytes = encode_marker(magic, value).map_err(|reason| ControlDirError::BadMarker {
            path: target.clone(),
            reason,
        })?;
        let tmp_name = format!(".{name}.tmp");
        let tmp = self.dir.join(&tmp_name);
        // A stale temp file (or a link planted in its place) is unlinked,
        // then the temp file is created `O_EXCL | O_NOFOLLOW`.
        let written = self
            .dir
            .create_temp(&tmp_name)
            .map_err(ControlDirError::from)
            .and_then(|mut file| {
                if durable {
                    self.count_fsync();
                }
                file.write_all(&bytes)
                    .and_then(|()| if durable { file.sync_all() } else { Ok(()) })
                    .map_err(io_err(&tmp))
            });
        if let Err(e) = written {
            let _ = self.dir.unlink(&tmp_name);
            return Err(e);
        }
        crate::failpoint::hit_doing("marker.before_rename", || label.to_owned());
        if let Err(e) = self.dir.rename(&tmp_name, name) {
            let _ = self.dir.unlink(&tmp_name);
            return Err(e.into());
        }
        if !durable {
            return Ok(());
        }
        crate::failpoint::hit_doing("marker.before_dir_fsync", || label.to_owned());
        self.sync_dir()
    }

    /// fsync the control directory: also makes durable the names
    /// [`UnsyncedNames`] holds (a created `lock` and `journal`).
    fn sync_dir(&self) -> Result<(), ControlDirError> {
        Ok(self.names.sync()?)
    }

    fn count_fsync(&self) {
        self.names.fsyncs.fetch_add(1, Ordering::Relaxed);
    }

    /// How many fsyncs this control directory made outside journal appends
    /// (the `steadfast_control_dir_fsyncs_total` metric): its directories,
    /// its markers, a journal repair's or compaction's. A fresh launch costs three before
    /// the first append is acknowledged (the `holding` marker, the control
    /// dir and the data dir, in the job [`Self::write_run_settling`]
    /// queues), and two when the identity is created.
    #[must_use]
    pub fn fsyncs(&self) -> Arc<AtomicU64> {
        Arc::clone(&self.names.fsyncs)
    }
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
    let Some(bytes) = fsx::read_nofollow(&path, u64::MAX)? else {
        return Ok(Vec::new());
    };
    match journal::decode(&bytes) {
        Ok(decoded) => Ok(decoded.records),
        Err(JournalError::Corrupt { offset }) => {
            Err(ControlDirError::CorruptJournal { path, offset })
        }
        Err(source) => Err(ControlDirError::BadJournalHeader { path, source }),
    }
}

/// The journal of the data dir `data_dir`, read by a process that is not
/// its daemon (none may be running): read-only through
/// [`fsx::read_control_file`] (no link followed, nothing created or
/// written, no lock taken). A torn tail (an append in flight, or a crash's)
/// is ignored: the records before it are answered. A missing journal is
/// empty.
///
/// # Errors
/// [`ControlDirError::CorruptJournal`] for mid-file corruption,
/// [`ControlDirError::BadJournalHeader`] for a bad header, naming the file;
/// the file system's refusals.
pub fn read_journal_of(data_dir: &Path) -> Result<Vec<Record>, ControlDirError> {
    let path = data_dir.join(CONTROL_DIR_NAME).join("journal");
    let Some(bytes) = fsx::read_control_file(data_dir, CONTROL_DIR_NAME, "journal", u64::MAX)?
    else {
        return Ok(Vec::new());
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
    dir: &Dir,
    name: &str,
    magic: [u8; 8],
) -> Result<MarkerRead<T>, ControlDirError> {
    let cap = MARKER_HEADER_LEN as u64 + u64::from(MAX_MARKER_PAYLOAD) + 1;
    let Some(bytes) = dir.read(name, cap)? else {
        return Ok(MarkerRead::Missing);
    };
    Ok(match decode_marker(magic, &bytes) {
        Ok(value) => MarkerRead::Valid(value),
        Err(reason) => MarkerRead::Unreadable(reason),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;
    use std::sync::atomic::AtomicUsize;

    /// The header length the sinks below pretend to start with.
    const HEADER: u64 = 12;

    /// A sink that records what was written (after a pretend header of
    /// [`HEADER`] bytes) and can fail writes, fsyncs or cut-backs. A failing
    /// write is a short write of half the buffer, then ENOSPC, as a full
    /// disk gives.
    #[derive(Clone, Default)]
    struct FailingSink {
        written: Arc<Mutex<Vec<u8>>>,
        writes: Arc<AtomicUsize>,
        syncs: Arc<AtomicUsize>,
        cuts: Arc<Mutex<Vec<u64>>>,
        fail_write: Arc<AtomicBool>,
        fail_sync: Arc<AtomicBool>,
        fail_cut: Arc<AtomicBool>,
        /// Set once the failing write's first half went in.
        short_written: Arc<AtomicBool>,
    }

    impl FailingSink {
        fn failing(flag: impl Fn(&Self) -> &Arc<AtomicBool>) -> Self {
            let sink = Self::default();
            flag(&sink).store(true, Ordering::SeqCst);
            sink
        }

        fn written(&self) -> Vec<u8> {
            self.written.lock().unwrap().clone()
        }
    }

    impl Write for FailingSink {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            self.writes.fetch_add(1, Ordering::SeqCst);
            if self.fail_write.load(Ordering::SeqCst) {
                let half = buf.len() / 2;
                if half > 0 && !self.short_written.swap(true, Ordering::SeqCst) {
                    self.written.lock().unwrap().extend_from_slice(&buf[..half]);
                    return Ok(half);
                }
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
            if self.fail_sync.load(Ordering::SeqCst) {
                Err(io::Error::from_raw_os_error(5)) // EIO
            } else {
                Ok(())
            }
        }

        fn current_len(&mut self) -> io::Result<u64> {
            Ok(HEADER + self.written.lock().unwrap().len() as u64)
        }

        fn cut_back(&mut self, len: u64) -> io::Result<()> {
            self.cuts.lock().unwrap().push(len);
            if self.fail_cut.load(Ordering::SeqCst) {
                return Err(io::Error::from_raw_os_error(5)); // EIO
            }
            let keep = usize::try_from(len - HEADER).unwrap();
            self.written.lock().unwrap().truncate(keep);
            Ok(())
        }
    }

    fn record(n: u32) -> Record {
        Record::AttemptStarted {
            attempt: n,
            at_ms: u64::from(n) * 1000,
        }
    }

    fn frames(records: &[Record]) -> Vec<u8> {
        records
            .iter()
            .flat_map(|r| journal::encode_record(r).unwrap())
            .collect()
    }

    #[test]
    fn appends_are_one_write_then_one_fsync() {
        let sink = FailingSink::default();
        let mut j = JournalFile::with_sink(sink.clone(), "j".into(), HEADER);
        j.append(&[record(1), record(2), record(3)]).unwrap();
        assert_eq!(sink.writes.load(Ordering::SeqCst), 1);
        assert_eq!(sink.syncs.load(Ordering::SeqCst), 1);
        let expected = frames(&[record(1), record(2), record(3)]);
        assert_eq!(sink.written(), expected);
        assert_eq!(j.len(), HEADER + expected.len() as u64);
        assert!(sink.cuts.lock().unwrap().is_empty(), "nothing to cut");
    }

    /// `spec/control-dir.md` "Writing": a failed fsync is not acknowledged;
    /// the next append cuts the failed append's bytes off (so none of them
    /// is ever covered by a later fsync) and starts on a record boundary.
    #[test]
    fn failed_fsync_is_not_acknowledged_and_the_next_append_cuts_it_back() {
        let sink = FailingSink::default();
        let mut j = JournalFile::with_sink(sink.clone(), "/cd/journal".into(), HEADER);
        j.append(&[record(1)]).unwrap();
        let acknowledged = j.len();
        sink.fail_sync.store(true, Ordering::SeqCst);
        let err = j.append(&[record(2)]).unwrap_err();
        match &err {
            ControlDirError::Io { path, source } => {
                assert_eq!(path, Path::new("/cd/journal"));
                assert_eq!(source.raw_os_error(), Some(5));
            }
            other => panic!("expected an i/o error, got {other:?}"),
        }
        assert!(j.is_poisoned());
        assert_eq!(j.len(), acknowledged, "the failed append is not counted");
        sink.fail_sync.store(false, Ordering::SeqCst);
        j.append(&[record(3)]).unwrap();
        assert!(!j.is_poisoned());
        assert_eq!(*sink.cuts.lock().unwrap(), vec![acknowledged]);
        assert_eq!(
            sink.written(),
            frames(&[record(1), record(3)]),
            "record 2's bytes are gone, record 3 starts on a boundary"
        );
        assert_eq!(
            j.len(),
            HEADER + frames(&[record(1), record(3)]).len() as u64
        );
    }

    /// A short write then ENOSPC (a full disk): no fsync, not acknowledged,
    /// and the fragment is cut before the next append.
    #[test]
    fn a_short_write_is_cut_back_before_the_next_append() {
        let sink = FailingSink::failing(|s| &s.fail_write);
        let mut j = JournalFile::with_sink(sink.clone(), "j".into(), HEADER);
        let err = j.append(&[record(1), record(2)]).unwrap_err();
        assert!(
            matches!(&err, ControlDirError::Io { source, .. } if source.raw_os_error() == Some(28)),
            "{err:?}"
        );
        assert_eq!(
            sink.syncs.load(Ordering::SeqCst),
            0,
            "no fsync after a failed write"
        );
        assert!(
            !sink.written().is_empty(),
            "the short write left a fragment"
        );
        sink.fail_write.store(false, Ordering::SeqCst);
        j.append(&[record(3)]).unwrap();
        assert_eq!(sink.written(), frames(&[record(3)]));
        assert_eq!(sink.syncs.load(Ordering::SeqCst), 1);
    }

    /// A cut-back that fails keeps the writer refusing (nothing written,
    /// the refusal says why and that it is tried again) until one succeeds.
    #[test]
    fn a_failed_cut_back_stays_poisoned_and_is_tried_again() {
        let sink = FailingSink::failing(|s| &s.fail_write);
        sink.fail_cut.store(true, Ordering::SeqCst);
        let mut j = JournalFile::with_sink(sink.clone(), "/cd/journal".into(), HEADER);
        assert!(j.append(&[record(1)]).is_err());
        sink.fail_write.store(false, Ordering::SeqCst);
        let writes = sink.writes.load(Ordering::SeqCst);
        for _ in 0..2 {
            let err = j.append(&[record(2)]).unwrap_err();
            assert!(
                matches!(err, ControlDirError::JournalPoisoned { .. }),
                "{err:?}"
            );
            let message = err.to_string();
            assert!(message.contains("/cd/journal"), "{message}");
            assert!(
                message.contains("os error 28"),
                "names the cause: {message}"
            );
            assert!(message.contains("tried again"), "says what next: {message}");
            assert!(j.is_poisoned());
        }
        assert_eq!(
            sink.writes.load(Ordering::SeqCst),
            writes,
            "nothing written"
        );
        assert_eq!(*sink.cuts.lock().unwrap(), vec![HEADER, HEADER]);
        sink.fail_cut.store(false, Ordering::SeqCst);
        j.append(&[record(2)]).unwrap();
        assert_eq!(sink.written(), frames(&[record(2)]));
    }

    /// While another process may append (a replacement), a failed append's
    /// bytes are not cut (the cut could remove the other writer's records);
    /// once the journal is this process's alone, they are.
    #[test]
    fn a_shared_journal_is_cut_back_only_once_it_is_ours_alone() {
        let sink = FailingSink::failing(|s| &s.fail_write);
        let mut j = JournalFile::with_sink(sink.clone(), "j".into(), HEADER);
        let shared = Arc::new(AtomicBool::new(true));
        j.shared = Some(Arc::clone(&shared));
        assert!(j.append(&[record(1)]).is_err());
        sink.fail_write.store(false, Ordering::SeqCst);
        let err = j.append(&[record(2)]).unwrap_err();
        assert!(err.to_string().contains("another process"), "{err}");
        assert!(sink.cuts.lock().unwrap().is_empty());
        shared.store(false, Ordering::SeqCst);
        j.append(&[record(2)]).unwrap();
        assert_eq!(sink.written(), frames(&[record(2)]));
    }

    #[test]
    fn an_unencodable_record_writes_nothing_and_does_not_poison() {
        let sink = FailingSink::default();
        let mut j = JournalFile::with_sink(sink.clone(), "j".into(), HEADER);
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

    /// A data dir handed over by a replacement's incumbent reads as
    /// `handed_over` with the incumbent's pid and attempt, never `crashed`; a
    /// clean stop stays a clean stop.
    #[test]
    fn a_handed_over_run_is_not_a_crash() {
        let holding = previous_run_from(&MarkerRead::Valid(RunMarker::Holding {
            pid: 41,
            attempt: 3,
        }));
        assert_eq!(
            handed_over_run(&holding, Some(41)),
            PreviousRun::HandedOver {
                pid: 41,
                attempt: Some(3)
            }
        );
        let unreadable = previous_run_from(&MarkerRead::Unreadable("x".into()));
        assert_eq!(
            handed_over_run(&unreadable, Some(41)),
            PreviousRun::HandedOver {
                pid: 41,
                attempt: None
            }
        );
        let clean = PreviousRun::CleanStop {
            at: steadfast_protocol::Timestamp(5),
            epoch: 1,
        };
        assert_eq!(handed_over_run(&clean, Some(41)), clean);
    }

    /// Who ran a settling job: its thread's id, once it ran.
    fn settle_recorder() -> (SettleJob, Arc<Mutex<Option<std::thread::ThreadId>>>) {
        let ran = Arc::new(Mutex::new(None));
        let into = Arc::clone(&ran);
        let job: SettleJob = Box::new(move || {
            *into.lock().unwrap() = Some(std::thread::current().id());
            Ok(())
        });
        (job, ran)
    }

    fn some_dir() -> (tempfile::TempDir, Dir) {
        let tmp = tempfile::tempdir().unwrap();
        let dir = Dir::open_data_dir(tmp.path(), false).unwrap();
        (tmp, dir)
    }

    /// A launch's settling job queued behind another launch's, still
    /// running on the settling thread, is run by its first waiter on the
    /// waiter's own thread: one settling thread serves every launch of the
    /// process, and no waiter waits behind another launch's fsyncs (1,000
    /// launches at once would otherwise queue up one after another, or
    /// cost a thread each).
    #[test]
    fn a_waiter_runs_a_settling_job_the_settling_thread_has_not_reached() {
        let (_tmp, dir) = some_dir();
        let (release, blocked) = std::sync::mpsc::channel::<()>();
        let (started, is_started) = std::sync::mpsc::channel::<()>();
        let ahead = Arc::new(Settling::default());
        ahead.queue(Box::new(move || {
            started.send(()).unwrap();
            blocked.recv().unwrap();
            Ok(())
        }));
        is_started.recv().unwrap();
        let settling = Arc::new(Settling::default());
        let (job, ran) = settle_recorder();
        settling.queue(job);
        assert!(settling.unsettled());
        settling.wait(&dir).unwrap();
        assert_eq!(*ran.lock().unwrap(), Some(std::thread::current().id()));
        assert!(!settling.unsettled());
        assert!(ahead.unsettled(), "still running on the settling thread");
        release.send(()).unwrap();
        ahead.wait(&dir).unwrap();
        // The settling thread's turn came after: nothing ran twice.
        assert_eq!(*ran.lock().unwrap(), Some(std::thread::current().id()));
    }

    /// Queued with nobody waiting, the job runs on the settling thread;
    /// a failure is kept and told to every later waiter.
    #[test]
    fn a_settling_job_runs_beside_the_launch_and_keeps_its_failure() {
        let (_tmp, dir) = some_dir();
        let settling = Arc::new(Settling::default());
        let (job, ran) = settle_recorder();
        settling.queue(job);
        // Polled, not waited for: a wait would run it here.
        while settling.unsettled() {
            std::thread::yield_now();
        }
        let by = ran.lock().unwrap().expect("it ran");
        assert_ne!(by, std::thread::current().id());
        settling.wait(&dir).unwrap();

        let settling = Arc::new(Settling::default());
        settling.queue(Box::new(|| Err("EIO on the marker".to_owned())));
        for _ in 0..2 {
            let error = settling.wait(&dir).unwrap_err().to_string();
            assert!(error.contains("EIO on the marker"), "{error}");
        }
        assert!(settling.unsettled());
    }
}
