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
//! # Files
//! - this file: [`ControlDir`] (opening, locking, repairing, the markers'
//!   atomic writes), its error, the names and modes;
//! - `lock`: the held data-dir lock and its checks;
//! - `journal_file`: the journal's one writer ([`JournalFile`]) and its
//!   compaction;
//! - `markers`: what each marker holds and its checked encoding;
//! - `settle`: names not yet durable, and a launch's settling work on the
//!   process's one settling thread;
//! - `tests`: the unit tests.
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
//!   `failed_fsync_is_not_acknowledged_and_is_cut_back_at_once`,
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

use std::fs;
use std::io::{self, Read, Seek, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use bincode::Options;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use steadfast_protocol::journal::{self, JournalError, Record, Tail};

use crate::fsx::{self, Access, Dir, File, FsError, UnsafePath};

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

/// Present while the journal's pages may hold bytes a failed fsync lost
/// (still readable, never to be written): a launch whose fsync at open
/// failed, and which could not write the journal into a new file, leaves
/// it for the next one, whose own fsync would succeed and prove nothing.
/// That one writes the journal into a new file before trusting it.
const JOURNAL_UNSURE_NAME: &str = "journal.unsure";

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
    /// The journal's name no longer names the file this daemon writes: it
    /// was removed or replaced underneath (by hand, by another program).
    /// What is appended to the old file would be lost at the next launch,
    /// so nothing more is.
    #[error(
        "the journal {path} {reason}, not by this daemon: nothing more is appended to it; relaunch the daemon to reopen the data dir's journal"
    )]
    JournalReplaced {
        /// The journal's path.
        path: PathBuf,
        /// What was found.
        reason: &'static str,
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

mod journal_file;
mod lock;
mod markers;
mod settle;

use journal_file::WriterSlot;
pub use journal_file::{
    COMPACT_TMP_NAME, Compacted, JournalDir, JournalFile, JournalSink, Recovery,
};
use lock::HeldLock;
pub use markers::{
    Identity, MarkerRead, PreviousRun, RunMarker, handed_over_run, previous_run_from,
};
use markers::{ReleasedRun, encode_marker, read_marker, read_run_at_open};
use settle::{Settling, UnsyncedNames};

/// How many times a handed-over open re-reads a journal whose tail looks
/// torn, and how long it pauses between reads (an in-flight append lands in
/// microseconds; a second is generous on a loaded machine).
const HANDOVER_TAIL_WAITS: u32 = 20;
const HANDOVER_TAIL_PAUSE: std::time::Duration = std::time::Duration::from_millis(50);

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
    /// The `released` run marker read at open, until the launch's marker
    /// is written over it in place ([`Self::write_run_settling`]).
    released: std::sync::Mutex<Option<ReleasedRun>>,
    /// Whether [`Self::open_journal`] has handed out the one writer.
    journal_opened: Arc<AtomicBool>,
    /// How many attempts the journal keeps when compacted (`None`: never).
    journal_keep: Option<usize>,
    /// Set while another process may append to the journal (see
    /// [`Self::set_journal_shared`]).
    journal_shared: Arc<AtomicBool>,
    /// The incumbent this directory was handed over from, if any.
    handed_over_from: Option<u32>,
    /// A hold-marker change failed and none succeeded since: whether the
    /// marker is on disk is unknown ([`Self::clear_hold`] fsyncs the
    /// directory even if there is nothing left to unlink).
    hold_unsure: AtomicBool,
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
    /// [`crate::root::LOCK_CHECK_PERIOD`] (`lock_watch`).
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
        // The data dir's own name is made durable by the settling
        // (`UnsyncedNames`), off the launch's path.
        let data = Dir::open_data_dir_for_launch(data_dir)?;
        let (dir, created) = data.open_subdir(CONTROL_DIR_NAME, true)?;
        let path = dir.path().to_path_buf();
        let lock_path = dir.join(LOCK_NAME);
        let lock = match inherited {
            Some(file) => {
                let ours = dir.stat(LOCK_NAME)?;
                let theirs = file.meta().map_err(io_err(&lock_path))?;
                if ours.is_none_or(|ours| ours.id() != theirs.id()) {
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
        // The names made in a created control dir (`lock`, then `journal`)
        // are made durable by its next fsync, the `holding` marker's at
        // open, which a daemon writes before its first journal append (else
        // that append makes them: `UnsyncedNames`), and the control dir's
        // own name (in the data dir) by an fsync of the data dir with it.
        // That one is made at every launch, not only when this one created
        // the directory: a launch that created it and then failed or was
        // killed before that fsync left a name no one made durable, which
        // this one cannot tell apart (an fsync of a directory with nothing
        // to write is cheap). Nothing in it is acknowledged before then.
        let dir = Arc::new(dir);
        let names = UnsyncedNames {
            dir: Arc::clone(&dir),
            pending: Arc::new(AtomicBool::new(created)),
            parent: Arc::new(std::sync::Mutex::new(Some(data))),
            settling: Arc::new(Settling::default()),
            fsyncs: Arc::new(AtomicU64::new(0)),
        };
        let mut dir = Self {
            path,
            lock: Arc::new(HeldLock::new(lock, Arc::clone(&dir))?),
            dir,
            previous_run: PreviousRun::FirstEver,
            released: std::sync::Mutex::new(None),
            journal_opened: Arc::new(AtomicBool::new(false)),
            journal_keep: None,
            journal_shared: Arc::new(AtomicBool::new(false)),
            handed_over_from: None,
            markers: std::sync::Mutex::new(()),
            names,
            hold_unsure: AtomicBool::new(false),
        };
        // A compaction that died before its rename left its temp file.
        dir.dir.unlink(COMPACT_TMP_NAME)?;
        let (run, released) = read_run_at_open(&dir.dir)?;
        dir.previous_run = previous_run_from(&run);
        dir.released = std::sync::Mutex::new(released);
        // A readable `released` marker proves the data dir's names durable:
        // the process that wrote it settled its launch's job (the data
        // dir's and its parent's fsyncs) before any marker write, that one
        // included, and every launch writes `holding` over it first. Only
        // this launch's new names (none: the control dir exists) are left.
        if matches!(dir.previous_run, PreviousRun::CleanStop { .. }) && !created {
            *dir.names
                .parent
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner) = None;
        }
        Ok(dir)
    }

    /// Whether the process before this one stopped cleanly, as the run
    /// marker read at open says (`released`), and nobody handed this
    /// directory over: it then made its journal and the data dir's names
    /// durable before it wrote that marker, and nothing ran since.
    fn predecessor_synced(&self) -> bool {
        matches!(self.previous_run, PreviousRun::CleanStop { .. })
            && self.handed_over_from.is_none()
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
        let mut decoded = journal::decode(&bytes).map_err(|e| match e {
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
            Tail::Clean => {
                // A killed predecessor's last records may be in the page
                // cache only. Made durable now, before this writer takes
                // them for durable and appends after them: a failed fsync
                // of its own would otherwise mark them clean too (Linux
                // does), and a power cut then leaves a hole before its
                // records. An fsync of a file with nothing dirty costs no
                // I/O.
                //
                // Not after a clean stop: its writer made every record
                // durable before it wrote `released` (the Journal actor's
                // `WriteRun`), so nothing is dirty but what a power cut
                // would have to take with the marker.
                let synced = if self.dir.stat(JOURNAL_UNSURE_NAME)?.is_some() {
                    self.count_fsync();
                    Err(io::Error::other(format!(
                        "{JOURNAL_UNSURE_NAME}: an earlier launch's fsync of the journal failed"
                    )))
                } else if self.predecessor_synced() {
                    Ok(())
                } else {
                    self.count_fsync();
                    file.sync_data()
                };
                if let Err(error) = synced {
                    file = self.rewrite_journal(&bytes, path, &error)?;
                }
                Recovery::Clean
            }
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
                if crate::planted::planted(crate::planted::Defect::JournalRepairCutsARecord)
                    && let Some(last) = decoded.records.pop()
                {
                    let len = journal::encode_record(&last).map_or(0, |bytes| bytes.len());
                    decoded.valid_len = decoded.valid_len.saturating_sub(len);
                }
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
                if let Err(error) = file.sync_all() {
                    if decoded.valid_len == 0 {
                        // The fresh header the failed fsync may have lost
                        // stays readable: cut, so that the next open (a
                        // launch is tried again) starts from an empty file
                        // rather than append after a header no fsync wrote.
                        let _ = file.set_len(0);
                        return Err(io_err(path)(error));
                    }
                    file = self.rewrite_journal(&bytes[..decoded.valid_len], path, &error)?;
                }
                Recovery::RepairedTornTail {
                    offset,
                    broken_copy,
                }
            }
        };
        let meta = file.meta().map_err(io_err(path))?;
        let mut writer = JournalFile::with_sink(file, path.to_path_buf(), meta.len);
        writer.file_id = Some(meta.id());
        writer.lock = Some(Arc::clone(&self.lock));
        writer._slot = Some(WriterSlot(Arc::clone(&self.journal_opened)));
        writer.keep_attempts = self.journal_keep;
        writer.shared = Some(Arc::clone(&self.journal_shared));
        writer.shared_with = self.handed_over_from;
        writer.names = Some(self.names.clone());
        writer.attempts = journal::attempts_in(&decoded.records);
        writer.child_restarts = journal::child_restarts_in(&decoded.records);
        writer.header_unsynced = recovery == Recovery::Fresh;
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

    /// The journal's fsync at open failed: its dirty pages (what a killed
    /// predecessor wrote last) may be lost, though still readable. What was
    /// read, `bytes`, is written whole into a new file, fsynced and renamed
    /// over the journal, and the directory fsynced: nothing of it is
    /// trusted to the pages the failed fsync marked clean. Not while an
    /// incumbent may still append (a handover): then the launch fails.
    fn rewrite_journal(
        &self,
        bytes: &[u8],
        path: &Path,
        failed: &io::Error,
    ) -> Result<File, ControlDirError> {
        if self.handed_over_from.is_some() {
            return Err(io_err(path)(io::Error::new(
                failed.kind(),
                failed.to_string(),
            )));
        }
        tracing::warn!(path = %path.display(), error = %failed,
            "the journal's fsync at open failed; writing what it holds into a new file");
        // Until the new file is the journal, the next launch must not
        // trust this one's pages either (`JOURNAL_UNSURE_NAME`); a kill
        // keeps the marker in the page cache, which is all it needs: a
        // power cut takes the lost bytes' stand-ins with it.
        if let Err(error) = self.dir.open(JOURNAL_UNSURE_NAME, Access::WriteCreateNew)
            && error.io_kind() != Some(io::ErrorKind::AlreadyExists)
        {
            tracing::warn!(%error, "could not mark the journal as unsure");
        }
        let tmp = self.dir.join(COMPACT_TMP_NAME);
        let mut file = self.dir.create_temp(COMPACT_TMP_NAME)?;
        self.count_fsync();
        if let Err(error) = file.write_all(bytes).and_then(|()| file.sync_all()) {
            let _ = self.dir.unlink(COMPACT_TMP_NAME);
            return Err(io_err(&tmp)(error));
        }
        drop(file);
        if let Err(error) = self.dir.rename(COMPACT_TMP_NAME, JOURNAL_NAME) {
            let _ = self.dir.unlink(COMPACT_TMP_NAME);
            return Err(error.into());
        }
        self.sync_dir()?;
        // The journal is the new file: nothing of it is unsure. A removal
        // a power cut undoes costs the next launch one rewrite.
        let _ = self.dir.unlink(JOURNAL_UNSURE_NAME);
        Ok(self.dir.open(JOURNAL_NAME, Access::Append)?)
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
        let (file, in_place) = match self.overwrite_after_clean_stop(&bytes) {
            Some(file) => (file, true),
            None => (self.write_run_renamed(tmp_name, marker, &bytes)?, false),
        };
        let names = self.names.clone();
        let unsynced =
            in_place && crate::planted::planted(crate::planted::Defect::LaunchMarkerUnsynced);
        // Kept until the job is done: no other daemon takes the data dir
        // while this one's marker is still on its way.
        let lock = Arc::clone(&self.lock);
        let path = self.run_path();
        let label = marker.label();
        let settle = {
            let names = names.clone();
            move || -> Result<(), String> {
                let _lock = lock;
                names.fsyncs.fetch_add(1, Ordering::Relaxed);
                if unsynced {
                    Ok(())
                } else if in_place {
                    // The name `run` is durable (the clean stop's marker
                    // was renamed and its directory fsynced); only the
                    // bytes, and the length with them, are new.
                    file.sync_data()
                } else {
                    file.sync_all()
                }
                .map_err(|e| format!("{}: {e}", path.display()))?;
                drop(file);
                if in_place && !names.dirs_pending() {
                    return Ok(());
                }
                crate::failpoint::hit_doing("marker.before_dir_fsync", || label.to_owned());
                names.sync_settled().map_err(|e| e.to_string())
            }
        };
        // After a failure, the marker is written again whole (a failed
        // fsync may have dropped its pages: they are never fsynced again)
        // and renamed over itself, then the directories fsynced: the
        // names pending since the launch are covered by that fsync.
        let retry = move || -> Result<(), String> {
            let dir = &names.dir;
            let failed = |e: &dyn std::fmt::Display| format!("{}: {e}", dir.path().display());
            let mut file = dir.create_temp(tmp_name).map_err(|e| failed(&e))?;
            let written = file.write_all(&bytes).and_then(|()| {
                names.fsyncs.fetch_add(1, Ordering::Relaxed);
                file.sync_all()
            });
            drop(file);
            if let Err(e) = written
                .map_err(|e| failed(&e))
                .and_then(|()| dir.rename(tmp_name, "run").map_err(|e| failed(&e)))
            {
                let _ = dir.unlink(tmp_name);
                return Err(e);
            }
            names.sync_settled().map_err(|e| e.to_string())
        };
        self.names.settling.queue(Box::new(settle), Arc::new(retry));
        Ok(())
    }

    /// The launch's run marker written as [`Self::write_run_settling`]
    /// does outside a relaunch after a clean stop: a temp file, renamed
    /// over `run` at once (before its fsync).
    fn write_run_renamed(
        &self,
        tmp_name: &str,
        marker: &RunMarker,
        bytes: &[u8],
    ) -> Result<File, ControlDirError> {
        let tmp = self.dir.join(tmp_name);
        let mut file = self.dir.create_temp(tmp_name)?;
        if let Err(source) = file.write_all(bytes) {
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
        Ok(file)
    }

    /// At a relaunch after a clean stop, the launch's run marker written
    /// over the `released` one in place (`pwrite` at 0, then the length
    /// set), so that one `fdatasync` makes it durable and no directory
    /// needs one: that marker's name is durable (its writer renamed it and
    /// fsynced the directory) and no other name is new. What a power loss
    /// can leave instead is what a rename before its fsync may: the
    /// `released` marker (the write lost whole) or a torn one, unreadable,
    /// so `crashed`; either before anything of this launch was
    /// acknowledged. A write the disk refuses is undone (the `released`
    /// bytes written back as they were, so a launch the disk fails leaves
    /// a clean stop a clean stop) and the caller renames a new marker over
    /// it. `None`, writing nothing, at any other launch or when `run`
    /// cannot be opened as a file of ours or is no longer the file read
    /// at open.
    ///
    /// `run` is not read again: the `released` bytes and the file they
    /// came from were kept at open (`read_run_at_open`). The file written
    /// is opened as every file here is (`O_NOFOLLOW`, a regular file of
    /// this euid with one link) and must be the one read then, as long:
    /// anything else at `run` gets a new marker renamed over it. Used
    /// once: after it, `run` no longer holds the bytes kept.
    fn overwrite_after_clean_stop(&self, bytes: &[u8]) -> Option<File> {
        let released = self
            .released
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take()?;
        if !self.predecessor_synced() || self.names.dirs_pending() {
            return None;
        }
        let before = released.bytes;
        let file = self.dir.open("run", Access::Write).ok()?;
        let meta = file.meta().ok()?;
        if meta.id() != released.id || meta.len != before.len() as u64 {
            return None;
        }
        let written = file
            .write_all_at(bytes, 0)
            .and_then(|()| file.set_len(bytes.len() as u64));
        if let Err(error) = written {
            let undone = file
                .write_all_at(&before, 0)
                .and_then(|()| file.set_len(before.len() as u64));
            tracing::warn!(%error, undone = undone.is_ok(),
                "the run marker could not be written in place; writing a new one");
            return None;
        }
        Some(file)
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
        let len = file.meta().map_err(io_err(&target))?.len;
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
        self.hold_settled(self.write_marker("hold", HOLD_MAGIC, &()))
    }

    /// Remove the hold marker (if present) and fsync the directory; also
    /// when it is gone already but a change of it failed since the last
    /// that succeeded (its unlink may not be durable yet).
    ///
    /// # Errors
    /// [`ControlDirError::Io`] if it cannot be removed or the directory
    /// cannot be fsynced.
    pub fn clear_hold(&self) -> Result<(), ControlDirError> {
        let cleared = self
            .dir
            .unlink("hold")
            .map_err(ControlDirError::from)
            .and_then(|unlinked| {
                if unlinked || self.hold_unsure.load(Ordering::SeqCst) {
                    self.sync_dir()?;
                }
                Ok(())
            });
        self.hold_settled(cleared)
    }

    /// A hold-marker change ended so: after a failure, whether the marker
    /// is on disk is unknown until a change succeeds.
    fn hold_settled(&self, result: Result<(), ControlDirError>) -> Result<(), ControlDirError> {
        self.hold_unsure.store(result.is_err(), Ordering::SeqCst);
        result
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
        fs::File::open(urandom)
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
    /// its markers, the journal's at open, a journal repair's or
    /// compaction's. A fresh launch costs four before the first append is
    /// acknowledged (the `holding` marker, the control dir, the data dir
    /// and its parent, in the job [`Self::write_run_settling`] queues),
    /// and two when the identity is created; a relaunch after a clean stop
    /// one (the marker, written in place).
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

#[cfg(test)]
mod tests;
