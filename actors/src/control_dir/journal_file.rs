//! The journal's one writer ([`JournalFile`]): appends acknowledged only
//! after their fsync, a failed append cut back before the next one, and
//! the crash-safe compaction; what it writes through ([`JournalSink`]) and
//! how an open found the file ([`Recovery`]). Opening and repairing the
//! file is [`ControlDir::open_journal`]'s.
use super::*;

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

    /// The file's device and inode (`fstat`), where it has them: what the
    /// journal's name must still name before each append. `None` (the
    /// default): a sink that is no file of a directory.
    ///
    /// # Errors
    /// The OS error.
    fn identity(&mut self) -> io::Result<Option<(u64, u64)>> {
        Ok(None)
    }
}

impl JournalSink for File {
    fn sync_data(&mut self) -> io::Result<()> {
        File::sync_data(self)
    }

    fn identity(&mut self) -> io::Result<Option<(u64, u64)>> {
        self.meta().map(|m| Some(m.id()))
    }

    fn current_len(&mut self) -> io::Result<u64> {
        self.meta().map(|m| m.len)
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
pub(super) enum Poison {
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

/// The journal's one writer: appends records and acknowledges them only
/// after they are fsynced.
pub struct JournalFile<S: JournalSink = File> {
    /// Where the frames go.
    pub(super) sink: S,
    /// The journal's path, for errors.
    pub(super) path: PathBuf,
    /// Bytes known durable: the length at open, then the file's length
    /// after each acknowledged append (which includes another writer's
    /// records during a replacement).
    pub(super) len: u64,
    /// The file's length after the last write ([`Self::write`]): past
    /// [`Self::len`] while written records wait for their fsync.
    pub(super) end: u64,
    /// Where the first write not yet fsynced began ([`Self::write`] without
    /// [`Self::sync`]): every byte from here is in the page cache only, so
    /// a failed fsync cuts the file back to here. `None` when every written
    /// byte is durable.
    pub(super) unsynced: Option<u64>,
    /// Set by a failed write or fsync (or a compaction that failed after its
    /// rename); cleared once the failed append's bytes are cut back.
    pub(super) poison: Option<Poison>,
    /// The control directory's lock, kept alive so no writer outlives it,
    /// and checked before every append (`None` for a sink built in tests).
    pub(super) lock: Option<Arc<HeldLock>>,
    /// The control directory's "a writer is out" flag, cleared when this
    /// writer is dropped so the journal can be reopened (a restarted Journal
    /// actor) — never while this writer lives.
    pub(super) _slot: Option<WriterSlot>,
    /// How many attempts compaction keeps (`None`: never compact).
    pub(super) keep_attempts: Option<usize>,
    /// How many `AttemptStarted` records the file holds: decides when to
    /// compact.
    pub(super) attempts: usize,
    /// The child restarts it holds (compaction keeps the latest).
    pub(super) child_restarts: usize,
    /// Set while another process may append to the same journal (a
    /// replacement in progress): compaction waits, since a rename would
    /// leave the other writer appending to the old file.
    pub(super) shared: Option<Arc<AtomicBool>>,
    /// The incumbent this process took the data dir over from; while it
    /// lives it may still append, so compaction waits for it to be gone.
    pub(super) shared_with: Option<u32>,
    /// A journal created at open has its name made durable by the control
    /// directory's next fsync; if none came before the first append, the
    /// append makes it (`None` for a sink built in tests).
    pub(super) names: Option<UnsyncedNames>,
    /// Records written ahead ([`Self::write`]) that a failure outside a
    /// [`Self::sync`] cut back (an append's failed fsync, a failed cut
    /// back): nothing may acknowledge them, so the next `sync` or append
    /// answers this error instead of `Ok`, once (an append is refused with
    /// it; the Journal actor's sync is an empty append).
    pub(super) cut_written: Option<String>,
    /// A fresh journal's header, written at open and not fsynced until the
    /// first append: a failed fsync may have lost it with that append's
    /// records, so a cut back to the header's end cuts to nothing and
    /// writes the header again, to ride the next fsync.
    pub(super) header_unsynced: bool,
    /// The lowest offset a failure has doomed since the caller last asked
    /// ([`Self::take_cut_from`]): every byte from here that no fsync made
    /// durable is, or will be, cut back before the next write.
    pub(super) cut_from: Option<u64>,
    /// The device and inode of the file this writer appends to, which the
    /// journal's name must still name before each append (`None` for a
    /// sink built in tests).
    pub(super) file_id: Option<(u64, u64)>,
}

/// Clears the control directory's one-writer flag on drop.
#[derive(Debug)]
pub(super) struct WriterSlot(pub(super) Arc<AtomicBool>);

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
            child_restarts: 0,
            shared: None,
            shared_with: None,
            names: None,
            cut_written: None,
            header_unsynced: false,
            cut_from: None,
            file_id: None,
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
        if let Some(cause) = self.cut_written.take() {
            // Its `Ok` would acknowledge them with its own records. This
            // refusal is the answer for them, once: the append after it
            // goes on.
            return Err(ControlDirError::JournalPoisoned {
                path: self.path.clone(),
                cause,
                repair: "records written ahead of their fsync were cut back, not made \
                         durable; this append was refused with them, and appends go on"
                    .to_owned(),
            });
        }
        // `write_at` checked the lock and repaired a poisoned writer. This
        // append's own first byte (none for an empty append, which answers
        // for everything before it), and the first unsynced byte.
        let own = self.write_at(records)?;
        let from = self.unsynced;
        let result = self.sync_written();
        if let (Err(error), Some(from), Some(own)) = (&result, from, own)
            && from < own
        {
            // The failed fsync's cut takes records written ahead before
            // this append too, which its error does not answer for.
            self.cut_written = Some(error.to_string());
        }
        result
    }

    /// Write `records` (one buffer, one `write_all`) without an fsync: they
    /// are in the file (a `kill -9` keeps them) but not yet durable, and
    /// may not be acknowledged until a [`Self::sync`] (or an
    /// [`Self::append`]) returns. A failed write poisons as an append does
    /// (its own bytes are cut back before the next write; earlier written
    /// records stay, to be made durable by the cut's fsync, unless that
    /// cut fails: then they are not known to be on disk, and the next cut
    /// takes them too).
    ///
    /// Answers where its bytes begin (`None`: there were none to write),
    /// so that a caller can tell, by [`Self::take_cut_from`], whether a
    /// later failure cut them back.
    ///
    /// # Errors
    /// As [`Self::append`].
    pub fn write(&mut self, records: &[Record]) -> Result<Option<u64>, ControlDirError> {
        self.write_at(records)
    }

    /// [`Self::write`].
    fn write_at(&mut self, records: &[Record]) -> Result<Option<u64>, ControlDirError> {
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
            return Ok(None);
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
        self.child_restarts += journal::child_restarts_in(records);
        Ok(Some(start))
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
        let result = self.repair().and_then(|()| self.sync_written());
        // This answer is for every record written before it: whatever a
        // failure since the last one cut back is answered here, once.
        match (result, self.cut_written.take()) {
            (Err(error), _) => Err(error),
            (Ok(()), Some(cause)) => Err(ControlDirError::JournalPoisoned {
                path: self.path.clone(),
                cause,
                repair: "the records written ahead of their fsync were cut back, not made \
                         durable; appends go on"
                    .to_owned(),
            }),
            (Ok(()), None) => Ok(()),
        }
    }

    /// [`Self::sync`] once the lock is checked and the writer repaired.
    fn sync_written(&mut self) -> Result<(), ControlDirError> {
        let Some(from) = self.unsynced else {
            return Ok(());
        };
        if let Err(source) = self.sync_frames() {
            self.unsynced = None;
            let error = self.failed("fsync", source, from);
            // Cut back now, not at the next append: the failed fsync left
            // its pages clean yet readable, so until they are cut a killed
            // daemon's successor would read records no fsync wrote (and a
            // power cut later would turn them into a hole before its own).
            // A cut that fails is tried again at the next append.
            let _ = self.repair();
            return Err(error);
        }
        // Nothing is acknowledged before the launch's `holding` marker is
        // durable. If making it so failed (and failed again now: a waiter
        // does it anew), these records go as a failed fsync's do: cut back
        // at once, never acknowledged; the next append tries again.
        if let Some(names) = &self.names
            && let Err(error) = names.settled()
        {
            self.unsynced = None;
            let cause = io::Error::other(error.to_string());
            let error = self.failed("append (the launch's marker is not durable)", cause, from);
            let _ = self.repair();
            return Err(error);
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
        self.header_unsynced = false;
        Ok(())
    }

    /// A `what` (write or fsync) failed: poison this writer so that the
    /// next append first cuts the file back to `cut_to`, and say so.
    fn failed(&mut self, what: &str, source: io::Error, cut_to: u64) -> ControlDirError {
        self.doom_from(cut_to);
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

    /// Every byte from `at` not yet durable is to be cut back.
    fn doom_from(&mut self, at: u64) {
        self.cut_from = Some(self.cut_from.map_or(at, |from| from.min(at)));
    }

    /// The lowest offset from which a failure since the last call cut back
    /// (or will cut back, before the next write) bytes no fsync made
    /// durable; `None` if none did. A record [`Self::write`] wrote at or
    /// after it is not in the journal and will not be unless written
    /// again; one before it is durable once [`Self::all_durable`].
    pub fn take_cut_from(&mut self) -> Option<u64> {
        self.cut_from.take()
    }

    /// Whether every byte written is durable: nothing awaits an fsync and
    /// no failure awaits its cut back.
    #[must_use]
    pub const fn all_durable(&self) -> bool {
        self.unsynced.is_none() && self.poison.is_none()
    }

    /// Whether records were written that no fsync has made durable yet, or
    /// were cut back and no [`Self::sync`] has answered for them yet.
    #[must_use]
    pub const fn has_unsynced(&self) -> bool {
        self.unsynced.is_some() || self.cut_written.is_some()
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
        let rewrite_header = self.header_unsynced && cut_to <= journal::HEADER_LEN as u64;
        let cut = if rewrite_header {
            self.sink.cut_back(0).and_then(|()| {
                self.sink.write_all(&journal::encode_header())?;
                Ok(())
            })
        } else {
            self.sink.cut_back(cut_to)
        };
        match cut {
            Ok(()) if rewrite_header => {
                tracing::warn!(path = %self.path.display(), %cause,
                    "journal cut back to a fresh header after a failed first append; appending again");
                self.poison = None;
                // The header is in the file again, to be made durable by
                // the next fsync (a failed one cuts back here again).
                self.len = journal::HEADER_LEN as u64;
                self.end = self.len;
                self.unsynced = Some(0);
                Ok(())
            }
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
                // The cut may have failed at its fsync, after which the
                // records written before the failed append (below
                // `cut_to`, never acknowledged) are not known to be on
                // disk: a later cut that succeeds must not take them for
                // durable. The next one cuts back to what was.
                if let Some(Poison::FailedAppend { cut_to, .. }) = &mut self.poison
                    && self.len < *cut_to
                {
                    *cut_to = self.len;
                    self.unsynced = None;
                    self.cut_written = Some(format!("{cause}; then {error}"));
                    // (`doom_from`, by field: `refused` borrows the path.)
                    let len = self.len;
                    self.cut_from = Some(self.cut_from.map_or(len, |from| from.min(len)));
                    // Those records' pages stay readable though no fsync
                    // wrote them: cut them now (the next append cuts again
                    // and answers for it), so that a successor after a kill
                    // does not build on them and a power cut leave a hole
                    // before its records. A fresh header no fsync made
                    // durable was lost with them: cut it too (an empty
                    // journal opens as fresh; the next append writes the
                    // header again).
                    let keep = if self.header_unsynced { 0 } else { len };
                    let _ = self.sink.cut_back(keep);
                }
                Err(refused(&cause, repair))
            }
        }
    }

    /// Whether the data-dir lock still guards the data dir
    /// ([`ControlDir::check_lock`]), and the journal's name still names
    /// this writer's file (a journal removed or replaced underneath would
    /// take what is appended to it with it); a writer built over a test
    /// sink has neither to check.
    fn check_lock(&self) -> Result<(), ControlDirError> {
        let Some(lock) = &self.lock else {
            return Ok(());
        };
        lock.check()?;
        match self.file_id {
            Some(id) => lock.check_name(JOURNAL_NAME, id),
            None => Ok(()),
        }
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

/// The directory a compaction rewrites the journal in: the control
/// directory ([`Dir`]), or a simulated one in tests. Each call is one
/// system call's worth (or one named sequence), so a crash or a fault can
/// land between any two.
pub trait JournalDir {
    /// What an opened journal writes through.
    type Sink: JournalSink;

    /// The journal's bytes as a read sees them now (`None`: no journal).
    ///
    /// # Errors
    /// The read failed.
    fn read_journal(&self) -> Result<Option<Vec<u8>>, ControlDirError>;

    /// Create [`COMPACT_TMP_NAME`] afresh (0600, exclusive, nothing
    /// followed), write `bytes` to it and `fsync` it.
    ///
    /// # Errors
    /// Any step failed (the caller unlinks the temp file).
    fn write_temp(&self, bytes: &[u8]) -> Result<(), ControlDirError>;

    /// Rename [`COMPACT_TMP_NAME`] over the journal.
    ///
    /// # Errors
    /// The rename failed (the old journal is in place).
    fn rename_temp(&self) -> Result<(), ControlDirError>;

    /// Remove [`COMPACT_TMP_NAME`], if there is one (best effort).
    fn unlink_temp(&self);

    /// `fsync` the directory: its entries (the rename) are durable.
    ///
    /// # Errors
    /// The fsync failed.
    fn sync(&self) -> Result<(), ControlDirError>;

    /// Open the journal for appending.
    ///
    /// # Errors
    /// The open failed.
    fn open_journal(&self) -> Result<Self::Sink, ControlDirError>;
}

impl JournalDir for Dir {
    type Sink = File;

    fn read_journal(&self) -> Result<Option<Vec<u8>>, ControlDirError> {
        Ok(self.read(JOURNAL_NAME, u64::MAX)?)
    }

    fn write_temp(&self, bytes: &[u8]) -> Result<(), ControlDirError> {
        let tmp = self.join(COMPACT_TMP_NAME);
        let mut file = self.create_temp(COMPACT_TMP_NAME)?;
        file.write_all(bytes).map_err(io_err(&tmp))?;
        crate::failpoint::hit("compact.before_fsync");
        file.sync_all().map_err(io_err(&tmp))
    }

    fn rename_temp(&self) -> Result<(), ControlDirError> {
        crate::failpoint::hit("compact.before_rename");
        Ok(self.rename(COMPACT_TMP_NAME, JOURNAL_NAME)?)
    }

    fn unlink_temp(&self) {
        let _ = self.unlink(COMPACT_TMP_NAME);
    }

    fn sync(&self) -> Result<(), ControlDirError> {
        Ok(Dir::sync(self)?)
    }

    fn open_journal(&self) -> Result<File, ControlDirError> {
        Ok(self.open(JOURNAL_NAME, Access::Append)?)
    }
}

impl<S: JournalSink> JournalFile<S> {
    /// Compact when the journal holds more than twice `keep` attempts
    /// (`None`: never, the default of [`Self::with_sink`]; daemons set it
    /// through [`ControlDir::with_journal_keep`]).
    #[must_use]
    pub const fn with_keep_attempts(mut self, keep: Option<usize>) -> Self {
        self.keep_attempts = keep;
        self
    }

    /// The bytes known durable (the file's length after the last
    /// acknowledged append).
    #[must_use]
    pub const fn durable_len(&self) -> u64 {
        self.len
    }

    /// Whether the journal holds more than twice the attempts, or the child
    /// restarts, compaction keeps (the slack keeps compaction rare: once
    /// per `keep` attempts, or per 256 restarts of a flapping child).
    #[must_use]
    pub fn wants_compaction(&self) -> bool {
        self.keep_attempts.is_some_and(|keep| {
            self.attempts > keep.max(1).saturating_mul(2)
                || self.child_restarts > journal::KEEP_CHILD_RESTARTS.saturating_mul(2)
        }) && self.unsynced.is_none()
            && !self.is_shared()
    }

    /// [`JournalFile::compact`] in `dir`, whatever it is.
    ///
    /// # Errors
    /// As [`JournalFile::compact`].
    pub fn compact_in<D: JournalDir<Sink = S>>(
        &mut self,
        dir: &D,
    ) -> Result<Option<Compacted>, ControlDirError> {
        let Some(keep) = self.keep_attempts else {
            return Ok(None);
        };
        self.repair()?;
        let path = self.path.clone();
        let bytes = dir
            .read_journal()?
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
            self.child_restarts = journal::child_restarts_in(&decoded.records);
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
        if let Some(names) = &self.names {
            // The new file's fsync and the directory's.
            names.fsyncs.fetch_add(2, Ordering::Relaxed);
        }
        if let Err(e) = dir.write_temp(&out).and_then(|()| dir.rename_temp()) {
            dir.unlink_temp();
            return Err(e);
        }
        // The old file is unlinked: from here on, a failure poisons.
        crate::failpoint::hit("compact.before_dir_fsync");
        match dir.sync().and_then(|()| dir.open_journal()) {
            Ok(mut sink) => {
                if self.file_id.is_some() {
                    self.file_id = sink.identity().ok().flatten();
                }
                self.sink = sink;
                self.len = out.len() as u64;
                self.end = self.len;
                self.attempts = journal::attempts_in(&kept);
                self.child_restarts = journal::child_restarts_in(&kept);
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

impl JournalFile<File> {
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
        let Some(lock) = self.lock.clone() else {
            return Ok(None);
        };
        self.compact_in(&*lock.dir)
    }
}
