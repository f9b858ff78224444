//! kvd: a small durable key-value daemon that embeds steadfast, written the
//! way a user would write one.
//!
//! `cargo run --release --example kvd -- [--data-dir DIR] [--config FILE]
//! [--metrics-addr 127.0.0.1:9464] [--log-format plain|json]
//! [--control-tcp ADDR --control-token-file FILE] [--control-tls ADDR …]
//! [--commit-window-ms MS]`: the flags of `steadfast::daemon::cli` (`--help`
//! lists them) and kvd's own. `--config` names a regular file that must
//! exist: a missing one, like a bad flag, exits 78; the data dir defaults to the file's
//! `data_dir`, else `./kvd-data`; `--metrics-addr` serves `GET /metrics` in
//! OpenMetrics text there.
//!
//! It speaks a TCP line protocol on `listen_addr` (default `127.0.0.1:7070`):
//! `SET key value` → `OK`, `GET key` → the value or `NOT_FOUND`, `DEL key` →
//! `OK` or `NOT_FOUND`, anything else → `ERR reason`. A write is answered only
//! once it is durable (appended to `store.log` under the data dir and
//! fsynced); a write that could not be made durable (a full disk) is
//! answered `ERR` and leaves no fragment behind, and writes succeed again
//! as soon as space returns, without a restart (see [`Store`]). Its runtime boots in steadfast phases — `resolve_config`,
//! `open_store` (takes the store lock), `replay_log`, `bind_listener`,
//! `serve` — and `log_level`, `max_connections`, `idle_timeout_secs` and
//! `compact_after_records` (see "Compaction" below) apply in place while
//! `listen_addr` needs a restart.
//!
//! Connections (`serve_connection`; `tests/it/kvd_limits.rs`,
//! `tests/it/drain_owns.rs`):
//! - Every connection is a task of the runtime's
//!   (`Runtime::accept_loop`), so a drain ends it: once the runtime's
//!   shutdown begins (a stop, a restart, any drain), a request being
//!   executed is finished and answered, then the connection is closed; a
//!   connection waiting for its next request is closed at once, and what
//!   its client sends after that is never executed. A connection accepted
//!   before the shutdown that has not sent its first request yet is owed
//!   one answer and waits at most 250 ms for it. The drain waits for all
//!   of it (within steadfast's drain grace), so **once the runtime is
//!   stopped no request is answered**, and every `OK` was written to the
//!   store the runtime had open
//!   (`drain_owns::a_connection_opened_before_stop_is_not_served_after_it`).
//! - A request line holds at most 1 MiB: a longer one is answered `ERR line
//!   too long` and the connection closed, and no more than that is ever
//!   buffered (a connection holds an 8 KiB read buffer, its line and one
//!   answer) (`kvd_limits::a_line_over_the_cap_is_refused_and_closes`).
//! - A connection that sends no complete request, or does not take its
//!   answer, for `idle_timeout_secs` (default 60) is closed
//!   (`kvd_limits::an_idle_connection_is_closed_after_the_idle_timeout`);
//!   at most `max_connections` (default 64) are served at once, the next
//!   is answered `ERR too many connections`.
//! - A `store.log` removed or replaced under the running daemon is noticed
//!   before a write is acknowledged (the open file's `fstat` and the
//!   name's `statat`, without following a link) and within a second by the
//!   `watch_log` task: the write is answered `ERR`, the loss logged, and
//!   the runtime fails (backoff); the next boot replays the log the data
//!   dir holds then, or creates it
//!   (`kvd_limits::a_removed_or_replaced_store_log_fails_the_runtime`).
//!
//! It logs through `steadfast::daemon`'s subscriber on stderr: `RUST_LOG`
//! (default `info`) until the config sets `log_level` (an `EnvFilter`
//! directive such as `debug`), which then applies in place, at boot and on
//! `steadfastctl config set log_level debug`; `config unset log_level`
//! goes back to `RUST_LOG`. Each request is a debug line. Under systemd
//! the lines carry syslog priorities (`tests/it/logs.rs`). The process exits with how it
//! ended (`steadfast::daemon::ExitReason::code`): 0 drained by SIGTERM, 80 halt,
//! 75 relaunch (`spec/exit-codes.md`).
//!
//! `store.log`, `store.snapshot`, `store.lock` and the compaction's temp
//! and lock files are private (0600) and opened without following a link,
//! in a data dir no other user can write, through `steadfast::fs` like
//! steadfast's own files (`files::kvd_files_are_private`,
//! `files::a_kvd_store_log_symlink_is_refused`).
//!
//! # Compaction
//!
//! Once `store.log` holds `compact_after_records` records (default 10000;
//! applied in place; 0 is refused as a config error, as a store that never
//! compacts replays every write it ever took), the `compactor` child
//! replaces it by `store.snapshot` (the map) and a fresh, short log, off
//! the request path: writes go on while the snapshot is written, and wait
//! only while the records written meanwhile are copied into the fresh log
//! and it is renamed into place (two fsyncs). A compaction that fails is
//! logged and tried again after a backoff (1 s doubling to 30 s); the
//! store serves on, correct.
//!
//! Every log has a *generation*: a log whose first line is the framed
//! header `log n` is generation `n`; a log without one (written before
//! compaction existed, or never compacted) is generation 0. The snapshot's
//! framed header `snapshot g x k` says it holds the map as of byte `x` of
//! the log of generation `g` (the end of a complete line), in `k` framed
//! `S key value` lines. A compaction of a log of generation `g`:
//!
//! 1. holds `store.compact.lock` (`flock`; an overlap replacement's other
//!    kvd skips its own compaction meanwhile);
//! 2. copies the map and notes `g` and `x`, the end of the log it applied;
//! 3. writes `store.snapshot.tmp`, fsyncs it, renames it to
//!    `store.snapshot`, fsyncs the dir;
//! 4. under the log's exclusive lock: writes `store.log.tmp` (header
//!    `log g+1`, then the records past `x`), fsyncs it, appends the seal
//!    `sealed g+1` to the old log, renames the temp file over `store.log`,
//!    fsyncs the dir, and goes on writing in the fresh log.
//!
//! What a crash leaves, and what the replay makes of it (`load`): a
//! snapshot of generation `g` is followed by a log of generation `g`,
//! applied from byte `x` on (the bytes before are in the snapshot), or of
//! generation `g+1`, applied whole (it starts at `x`); no snapshot, by a
//! log of generation 0, applied whole. Any other pair is refused (held,
//! naming both), as is a damaged snapshot.
//! - Before 3's rename: the old snapshot (generation `g-1`, or none) and
//!   the old log (`g`): applied whole. A temp file is ignored (the next
//!   compaction replaces it).
//! - After 3's rename, through 4's: the new snapshot (`g`, `x`) and the old
//!   log (`g`), maybe ending in a seal: applied from `x`. A seal in a file
//!   still named `store.log` means nothing.
//! - After 4's rename: the new snapshot and the fresh log (`g+1`): applied
//!   whole.
//! - A `store.log` removed (or holding no complete line) beside a snapshot
//!   starts over as the snapshot's next generation: the store is the
//!   snapshot.
//!
//! Neither rename can be undone by a power cut once its dir fsync
//! returned, and 4 starts only after 3's fsync: a log of generation `g+1`
//! is never named without its snapshot. Replaying a record the snapshot
//! already holds would even be harmless (each is a blind `SET`/`DEL`: any
//! suffix of the history applied to the state after it is that state
//! again), but the offset makes it exact.
//!
//! An overlap replacement's two kvds share the log: the one that did not
//! compact meets the seal when it next takes the log's lock, sees that
//! `store.log` is another file, and reads the snapshot and the fresh log
//! again before it writes; a replay that meets a seal with `store.log`
//! renamed under it reads again too. A log replaced without a seal is
//! still a lost log (above). Checked, with a real kvd killed with `SIGKILL`
//! at every step (failpoints, in a build with the cargo feature
//! `failpoints`), by `tests/it/kvd_compaction.rs`.

use std::collections::HashMap;
use std::fs::File;
use std::io::Write;
use std::num::NonZeroU64;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError, TryLockError};
use std::time::Duration;

use steadfast::children::{Child, Children, Restart};
use steadfast::fs::Dir;
use steadfast::handover::Handover;
use steadfast::service::{Connection, ResourceRecord, Shutdown, StoreLock};
use steadfast::{
    ConfigChange, Plan, Resource, Runtime, Service, Step, StepContext, StepError, Supervisor,
};
use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncWriteExt, BufReader as AsyncBufReader};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

/// A crash failpoint of kvd's (`steadfast_actors::failpoint`: `SIGKILL`
/// when `STEADFAST_CRASH_AT=<point>:<nth>` arms it). Only a build with the
/// cargo feature `failpoints` holds one; `tests/it/kvd_compaction.rs` names
/// every point.
macro_rules! failpoint {
    ($point:literal) => {
        #[cfg(feature = "failpoints")]
        steadfast_actors::failpoint::hit($point);
    };
}

const DEFAULTS: &str = r#"
listen_addr = "127.0.0.1:7070"
max_connections = 64
idle_timeout_secs = 60
compact_after_records = 10000
"#;

/// The store: the map, and the log that makes it durable.
///
/// `store.log` is one record a line: `crc32c(body)` as 8 lowercase hex
/// digits, a space, the body (`S key value` or `D key`), a newline
/// ([`frame_line`]).
///
/// The log may have two writers for a moment: during an overlap replacement
/// the incumbent and its candidate both serve (the candidate adopted the
/// store lock). So every append holds an exclusive `flock` on the log and
/// first applies what the other process appended (`catch_up`); a read
/// catches up too, under a shared `flock`. Only complete lines are ever
/// applied.
///
/// Invariants (`tests/it/enospc.rs`):
/// - **A write is answered `OK` only after its fsync returned**; any error
///   is answered `ERR`
///   (`enospc::an_acknowledged_set_survives_a_full_disk_and_a_relaunch`).
/// - **Every append starts on a record boundary.** Bytes past the last
///   complete line are a failed or killed write's fragment, never
///   acknowledged; they are cut (and the cut fsynced) before anything is
///   appended, and a failed write cuts its own at once. While a cut fails,
///   writes are refused `ERR` (`Store::append_locked`). Before this, the
///   `SET` after an ENOSPC was appended after the fragment and lost
///   (`enospc::an_acknowledged_set_survives_a_full_disk_and_a_relaunch`).
/// - **Nothing torn is read as a record.** At replay a torn last line is
///   cut; a line whose checksum fails is read only for a whole framed
///   record at its end (a fragment followed by a good line, as the kvd
///   before this fix could leave); a line with none refuses the replay
///   (held, naming the byte offset; the file is left alone). Lines of the
///   older unframed format still read, unchecked: a fragment merged into
///   one of *those* cannot be told from a value, which is why lines now
///   carry a checksum. A kvd built before the checksum does not read the
///   new lines (it skips them): do not roll a replacement back across this
///   change (`enospc::a_fragment_mid_log_is_never_read_as_a_record`).
struct Store {
    map: HashMap<String, String>,
    log: File,
    /// How many bytes of the log are applied to `map`.
    applied: u64,
    /// The log's generation: 0 for a log without a header, else the `n`
    /// of its first line `log n` (a compaction's fresh log).
    generation: u64,
    /// The `S`/`D` records the log file holds (what a replay reads): the
    /// compactor runs once there are `compact_after_records` of them.
    records: u64,
    /// A compaction renamed a fresh log into place but could not fsync the
    /// data dir: its name may not be durable yet, so every write fsyncs the
    /// dir first until one succeeds (an acknowledged write must not sit in
    /// a log a power cut could unname).
    dir_unsynced: bool,
    /// The data dir, open: where `store.log` is looked up (without
    /// following a link) to check it is still the file open as `log`.
    dir: Dir,
    /// Why `store.log` is no longer the log (removed or replaced while
    /// open): every write is refused from then on.
    lost: Option<String>,
    /// Wakes the `watch_log` task at once when a write finds the log lost.
    lost_signal: Arc<tokio::sync::Notify>,
    /// The compactor's threshold, and its wake-up.
    compaction: Arc<Compaction>,
}

type Shared = Arc<Mutex<Store>>;

/// When the compactor runs: the threshold (`compact_after_records`, which
/// applies in place), and the wake-up a write that reaches it sends.
struct Compaction {
    after_records: AtomicU64,
    wake: tokio::sync::Notify,
}

impl Compaction {
    fn new(after_records: NonZeroU64) -> Arc<Self> {
        Arc::new(Self {
            after_records: AtomicU64::new(after_records.get()),
            wake: tokio::sync::Notify::new(),
        })
    }

    fn due(&self, records: u64) -> bool {
        records >= self.after_records.load(Ordering::SeqCst)
    }
}

/// Apply one record's body (`S key value` or `D key`) to `map`.
fn apply_body(map: &mut HashMap<String, String>, body: &str) {
    match body.split_once(' ') {
        Some(("S", rest)) => {
            if let Some((key, value)) = rest.split_once(' ') {
                map.insert(key.to_owned(), value.to_owned());
            }
        }
        Some(("D", key)) => {
            map.remove(key);
        }
        _ => {}
    }
}

/// Whether `body` is a record of the map (`S …`, `D …`), not a log's header
/// or seal.
fn is_record(body: &str) -> bool {
    body.starts_with("S ") || body.starts_with("D ")
}

/// One record as `store.log` holds it: `crc32c(body)` as 8 lowercase hex
/// digits, a space, the body, a newline.
fn frame_line(body: &str) -> String {
    format!("{:08x} {body}\n", crc32c::crc32c(body.as_bytes()))
}

/// The body of `line` (without its newline) if it is a whole framed record
/// whose checksum matches.
fn framed(line: &[u8]) -> Option<&str> {
    let (crc, rest) = line.split_at_checked(8)?;
    let body = rest.strip_prefix(b" ")?;
    if !crc.iter().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
        return None;
    }
    let crc = u32::from_str_radix(std::str::from_utf8(crc).ok()?, 16).ok()?;
    (crc32c::crc32c(body) == crc)
        .then(|| std::str::from_utf8(body).ok())
        .flatten()
}

/// What one complete line of the log holds.
///
/// - A framed record whose checksum matches: its body.
/// - Else, a fragment followed by a whole framed record (a write that failed
///   part-way, then a good one appended after it by a kvd without the
///   cut-back): the record; the fragment is never read.
/// - Else a line of the older, unframed format (`S key value`, `D key`),
///   written before lines carried a checksum: read as it always was.
/// - Else `None`: the line is damaged.
fn line_body(line: &[u8]) -> Option<&str> {
    if let Some(body) = framed(line) {
        return Some(body);
    }
    let suffix = (1..line.len()).find_map(|start| framed(&line[start..]));
    if suffix.is_some() {
        return suffix;
    }
    std::str::from_utf8(line)
        .ok()
        .filter(|l| l.starts_with("S ") || l.starts_with("D "))
}

/// What [`apply_lines`] applied.
#[derive(Debug, Default)]
struct Applied {
    /// The bytes of the complete lines.
    len: u64,
    /// The `S`/`D` records among them.
    records: u64,
    /// A compaction's seal (`sealed n`) was among them: if `store.log` is
    /// now another file, the log went on there.
    sealed: bool,
}

/// Apply the complete lines of `bytes` (which start at byte `offset` of the
/// log); say how many bytes they span, or why a line is refused.
fn apply_lines(
    map: &mut HashMap<String, String>,
    bytes: &[u8],
    offset: u64,
) -> Result<Applied, String> {
    let complete = bytes.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
    let mut applied = Applied {
        len: complete as u64,
        ..Applied::default()
    };
    let mut at = offset;
    for line in bytes[..complete].split_inclusive(|&b| b == b'\n') {
        let body = line.strip_suffix(b"\n").unwrap_or(line);
        if !body.is_empty() {
            let Some(body) = line_body(body) else {
                return Err(format!(
                    "the line at byte {at} is damaged (its checksum does not match and \
                     it holds no whole record); nothing after it was read and the file was left \
                     as it is: restore the log from a copy, or cut it at byte {at} to keep what \
                     comes before"
                ));
            };
            applied.records += u64::from(is_record(body));
            applied.sealed |= body.starts_with("sealed ");
            apply_body(map, body);
        }
        at += line.len() as u64;
    }
    Ok(applied)
}

fn invalid(reason: String) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, reason)
}

/// Whether `store.log` in `dir` is still `file` (not following a link).
fn names_log(dir: &Dir, file: &File) -> std::io::Result<bool> {
    use std::os::unix::fs::MetadataExt;
    let open = file.metadata()?;
    let named = dir.stat(LOG_NAME).map_err(std::io::Error::other)?;
    Ok(open.nlink() > 0 && named.is_some_and(|named| named.id() == (open.dev(), open.ino())))
}

impl Store {
    /// Apply whatever was appended to the log beyond `applied`. `true` when
    /// that ended in a compaction's seal and `store.log` is now another
    /// file (another process compacted): the caller reloads
    /// ([`Self::reload`]) before anything else, as what it applied is past
    /// the seal and would not be seen again.
    fn catch_up(&mut self) -> std::io::Result<bool> {
        use std::io::{Read, Seek, SeekFrom};
        let len = self.log.metadata()?.len();
        if len <= self.applied {
            return Ok(false);
        }
        let mut reader = &self.log;
        reader.seek(SeekFrom::Start(self.applied))?;
        let mut bytes = Vec::new();
        reader.take(len - self.applied).read_to_end(&mut bytes)?;
        let applied = apply_lines(&mut self.map, &bytes, self.applied)
            .map_err(|reason| invalid(format!("store.log: {reason}")))?;
        self.applied += applied.len;
        self.records += applied.records;
        Ok(applied.sealed && !names_log(&self.dir, &self.log)?)
    }

    /// Read the data dir again (snapshot and log, [`load`]): another
    /// process's compaction moved the log on.
    fn reload(&mut self) -> std::io::Result<()> {
        let loaded = load(&self.dir)?;
        tracing::info!(
            target: "kvd",
            generation = loaded.generation,
            "store.log was compacted by another kvd; following it"
        );
        self.map = loaded.map;
        self.log = loaded.log;
        self.applied = loaded.applied;
        self.generation = loaded.generation;
        self.records = loaded.records;
        Ok(())
    }

    /// [`Self::catch_up`] under a shared lock on the log, so a reader never
    /// applies a line a writer has written but not yet fsynced (and may
    /// still cut back). A log no longer than what was applied has nothing
    /// to apply, fsynced or not: then no lock is taken (two `flock`s less
    /// per `GET` while no other process writes, which is all but a
    /// replacement's handover).
    fn read_catch_up(&mut self) -> std::io::Result<()> {
        if self.log.metadata()?.len() <= self.applied {
            return Ok(());
        }
        self.log.lock_shared()?;
        let caught_up = self.catch_up();
        let unlocked = self.log.unlock();
        if caught_up? {
            self.reload()?;
        }
        unlocked
    }

    /// Under the log's lock: catch up, cut any fragment, append one line
    /// and fsync it; only then apply it to the map. An error is answered
    /// `ERR`, never `OK`. A log another process's compaction moved on is
    /// reloaded first, and the line appended to the log now in place.
    fn write(
        &mut self,
        line: &str,
        apply: impl FnOnce(&mut HashMap<String, String>),
    ) -> std::io::Result<()> {
        loop {
            if let Some(lost) = &self.lost {
                return Err(std::io::Error::other(lost.clone()));
            }
            self.log.lock()?;
            let written = self.append_locked(line);
            let unlocked = self.log.unlock();
            if !written? {
                self.reload()?;
                continue;
            }
            unlocked?;
            apply(&mut self.map);
            self.records += 1;
            if self.compaction.due(self.records) {
                self.compaction.wake.notify_one();
            }
            return Ok(());
        }
    }

    /// The body of [`Self::write`], with the log's exclusive lock held;
    /// `false` (nothing written) when the log was moved on by another
    /// process's compaction.
    ///
    /// The new line starts on a record boundary: whatever lies past the
    /// last complete line is the fragment of a write that failed (ENOSPC,
    /// EIO: a short write) or of a writer killed mid-append, never
    /// acknowledged (every writer holds this lock until its line is
    /// fsynced or cut), so it is cut before anything is appended. A failed
    /// write or fsync cuts its own fragment at once; if that cut fails too,
    /// every later write tries it again first and is refused (`ERR`) until
    /// it succeeds. Truncating after a failed fsync is safe: every byte up
    /// to `applied` was fsynced before (or replayed and fsynced at open),
    /// and the bytes cut were never acknowledged.
    fn append_locked(&mut self, line: &str) -> std::io::Result<bool> {
        if self.catch_up()? {
            return Ok(false);
        }
        self.cut_fragment()?;
        if self.dir_unsynced {
            self.dir.sync().map_err(std::io::Error::other)?;
            self.dir_unsynced = false;
        }
        let written = (&self.log)
            .write_all(line.as_bytes())
            .and_then(|()| self.log.sync_data());
        if let Err(error) = written {
            // Best effort: if this cut fails, the next write's does it.
            let _ = self.cut_fragment();
            return Err(error);
        }
        // Durable only if the file is still `store.log`: a line fsynced
        // into a removed or replaced file is gone at the next boot.
        if let Some(lost) = self.check_lost() {
            return Err(std::io::Error::other(lost));
        }
        self.applied += line.len() as u64;
        Ok(true)
    }

    /// Why `store.log` is no longer the file this store has open, if it is
    /// not: the open file has no name left (`fstat`: no links), or the
    /// name is now another file or none (`statat` in the data dir, not
    /// following a link). Found once, remembered, and the `watch_log`
    /// task woken, which fails the runtime.
    fn check_lost(&mut self) -> Option<String> {
        use std::os::unix::fs::MetadataExt;
        if self.lost.is_some() {
            return self.lost.clone();
        }
        let open = match self.log.metadata() {
            Ok(open) => open,
            Err(error) => return Some(format!("store.log cannot be examined: {error}")),
        };
        let how = match self.dir.stat(LOG_NAME) {
            Err(error) => format!("cannot be examined ({error})"),
            Ok(None) => "was removed".to_owned(),
            Ok(Some(named)) if named.id() != (open.dev(), open.ino()) => {
                "was replaced by another file".to_owned()
            }
            Ok(Some(_)) if open.nlink() == 0 => "was removed".to_owned(),
            Ok(Some(_)) => return None,
        };
        let lost = format!(
            "{} {how} while kvd had it open; writes are refused and the runtime restarts \
             over the log as it is now",
            self.dir.join(LOG_NAME).display()
        );
        self.lost = Some(lost.clone());
        self.lost_signal.notify_one();
        Some(lost)
    }

    /// Cut the log back to `applied` (the end of its last complete line)
    /// if it is longer, and make the new length durable. Called with the
    /// log's exclusive lock held, after [`Self::catch_up`].
    fn cut_fragment(&mut self) -> std::io::Result<()> {
        let len = self.log.metadata()?.len();
        if len <= self.applied {
            return Ok(());
        }
        self.log
            .set_len(self.applied)
            .and_then(|()| self.log.sync_all())
            .map_err(|error| {
                std::io::Error::new(
                    error.kind(),
                    format!(
                        "store.log ends in {} bytes of a failed write that could not be cut back \
                         to its last complete line at byte {} ({error}); writes are refused until \
                         the cut succeeds",
                        len - self.applied,
                        self.applied
                    ),
                )
            })
    }

    /// A compaction's last part, with the snapshot of `store.log`'s
    /// generation `generation` up to byte `offset` durable: write the fresh
    /// log (its header `log <generation + 1>`, then the records appended
    /// since `offset`) as a temp file and fsync it, seal this log, rename
    /// the fresh one over `store.log`, fsync the dir, and go on in it.
    /// Holds the old log's exclusive lock throughout, so no write of either
    /// process falls between the copy of the tail and the rename. `None`
    /// when the log moved on meanwhile (the snapshot is then of an older
    /// log; nothing is changed); else the fresh log's generation and how
    /// many records it took over.
    fn start_new_log(
        &mut self,
        generation: u64,
        offset: u64,
    ) -> std::io::Result<Option<(u64, u64)>> {
        let old = self.log.try_clone()?;
        old.lock()?;
        let started = self.start_new_log_locked(generation, offset);
        // The old log's open file, whichever file `self.log` is now.
        let unlocked = old.unlock();
        let started = started?;
        unlocked?;
        Ok(started)
    }

    /// The body of [`Self::start_new_log`].
    fn start_new_log_locked(
        &mut self,
        generation: u64,
        offset: u64,
    ) -> std::io::Result<Option<(u64, u64)>> {
        use std::io::{Read, Seek, SeekFrom};
        if self.catch_up()? {
            self.reload()?;
            return Ok(None);
        }
        if self.generation != generation || self.applied < offset {
            return Ok(None);
        }
        if let Some(lost) = self.check_lost() {
            return Err(std::io::Error::other(lost));
        }
        self.cut_fragment()?;
        let mut tail = Vec::new();
        let mut reader = &self.log;
        reader.seek(SeekFrom::Start(offset))?;
        reader.take(self.applied - offset).read_to_end(&mut tail)?;
        let next = generation + 1;
        let mut fresh = frame_line(&format!("log {next}"));
        let mut records = 0;
        for line in tail.split(|&b| b == b'\n') {
            // Replayed before (up to `applied`), so every line reads.
            if let Some(body) = line_body(line).filter(|body| is_record(body)) {
                fresh.push_str(&frame_line(body));
                records += 1;
            }
        }
        self.dir.unlink(LOG_TMP).map_err(std::io::Error::other)?;
        let new = self
            .dir
            .open(LOG_TMP, steadfast::fs::Access::AppendCreateNew)
            .map_err(std::io::Error::other)?
            .into_os()?;
        (&new).write_all(fresh.as_bytes())?;
        failpoint!("kvd.compact.log_before_fsync");
        new.sync_all()?;
        failpoint!("kvd.compact.log_before_seal");
        // The seal tells a process sharing this log (an overlap
        // replacement's other kvd), when it next takes the lock, that
        // `store.log` went on in another file. Not fsynced: it matters only
        // to a live reader (a seal in a file still named `store.log`, as a
        // crash here leaves, means nothing), and a torn one is a fragment,
        // cut like any other.
        let seal = frame_line(&format!("sealed {next}"));
        if let Err(error) = (&self.log).write_all(seal.as_bytes()) {
            let _ = self.cut_fragment();
            return Err(error);
        }
        self.applied += seal.len() as u64;
        failpoint!("kvd.compact.log_before_rename");
        self.dir
            .rename(LOG_TMP, LOG_NAME)
            .map_err(std::io::Error::other)?;
        // From here `store.log` is the fresh log, whatever fails next.
        self.log = new;
        self.applied = fresh.len() as u64;
        self.generation = next;
        self.records = records;
        failpoint!("kvd.compact.log_before_dir_fsync");
        if let Err(error) = self.dir.sync() {
            self.dir_unsynced = true;
            return Err(std::io::Error::other(error));
        }
        Ok(Some((next, records)))
    }
}

/// The log's name in the data dir.
const LOG_NAME: &str = "store.log";
/// The snapshot's name in the data dir.
const SNAPSHOT_NAME: &str = "store.snapshot";
/// The temp files a compaction writes before renaming them into place.
const SNAPSHOT_TMP: &str = "store.snapshot.tmp";
const LOG_TMP: &str = "store.log.tmp";
/// Locked (`flock`) by the one compaction running: an overlap
/// replacement's two kvds never compact at once.
const COMPACT_LOCK: &str = "store.compact.lock";

/// Open the data dir without following a link: `steadfast::fs`, the
/// mechanism the control dir's files use. Every file kvd has there is
/// opened through it (0600, no link followed: a link planted there is
/// refused, naming it), and `store.log` is looked up in it later
/// ([`Store::check_lost`]).
fn open_data_dir(data_dir: &Path) -> std::io::Result<Dir> {
    Dir::open_data_dir(data_dir, true).map_err(std::io::Error::other)
}

/// Open `store.log` (0600, created if missing) in the trusted data dir.
fn open_store_log(dir: &Dir) -> std::io::Result<File> {
    use steadfast::fs::Access;
    // The OS file: the log takes shared locks too.
    dir.open(LOG_NAME, Access::AppendCreate)
        .map_err(std::io::Error::other)?
        .into_os()
}

/// What `store.snapshot` holds: the map as of byte `offset` of the log of
/// generation `generation`.
struct Snapshot {
    generation: u64,
    offset: u64,
    map: HashMap<String, String>,
}

/// `store.snapshot`'s bytes: the framed header `snapshot <generation>
/// <offset> <entries>`, then one framed `S key value` per entry.
fn encode_snapshot(generation: u64, offset: u64, map: &HashMap<String, String>) -> Vec<u8> {
    let mut out = frame_line(&format!("snapshot {generation} {offset} {}", map.len()));
    for (key, value) in map {
        out.push_str(&frame_line(&format!("S {key} {value}")));
    }
    out.into_bytes()
}

/// Read `store.snapshot`'s bytes: every line must be whole and framed, and
/// the entries as many as the header says (it is renamed into place only
/// once complete and fsynced: anything else is damage, never a torn
/// write).
fn decode_snapshot(bytes: &[u8]) -> Result<Snapshot, String> {
    let mut lines = bytes.split_inclusive(|&b| b == b'\n');
    let header = lines
        .next()
        .and_then(|line| line.strip_suffix(b"\n"))
        .and_then(framed)
        .ok_or("its first line is not a whole snapshot header")?;
    let fields: Vec<&str> = header.split(' ').collect();
    let number = |field: &str| field.parse::<u64>().ok();
    let (generation, offset, entries) = match fields[..] {
        ["snapshot", generation, offset, entries] => {
            match (number(generation), number(offset), number(entries)) {
                (Some(generation), Some(offset), Some(entries)) => (generation, offset, entries),
                _ => return Err(format!("its header {header:?} does not read")),
            }
        }
        _ => return Err(format!("its header {header:?} is not a snapshot header")),
    };
    let mut map = HashMap::new();
    for (n, line) in lines.enumerate() {
        let entry = line
            .strip_suffix(b"\n")
            .and_then(framed)
            .and_then(|body| body.strip_prefix("S "))
            .and_then(|rest| rest.split_once(' '))
            .ok_or_else(|| format!("entry {} is damaged", n + 1))?;
        map.insert(entry.0.to_owned(), entry.1.to_owned());
    }
    if map.len() as u64 != entries {
        return Err(format!(
            "it holds {} entries where its header says {entries}",
            map.len()
        ));
    }
    Ok(Snapshot {
        generation,
        offset,
        map,
    })
}

/// What [`load`] read: the map, and the log open at the end of what it
/// applied.
struct Loaded {
    map: HashMap<String, String>,
    log: File,
    applied: u64,
    generation: u64,
    records: u64,
}

/// How many times [`load`] reads the files again when another process's
/// compaction moved them on while it read them; a mismatch still there
/// after that is damage, and held.
const LOAD_TRIES: u32 = 10;

/// Replay the store: `store.snapshot` if there is one, then `store.log`
/// under its lock (module doc, "Compaction", says which of its lines
/// apply); a torn last line of the log (a crash or a failed write
/// mid-append, never acknowledged) is cut off; a damaged line, a damaged
/// snapshot or a log that does not continue the snapshot refuses the
/// replay ([`std::io::ErrorKind::InvalidData`]: a held failure).
fn load(dir: &Dir) -> std::io::Result<Loaded> {
    let mut moved = String::new();
    for _ in 0..LOAD_TRIES {
        match load_once(dir)? {
            Ok(loaded) => return Ok(loaded),
            Err(why) => moved = why,
        }
    }
    Err(invalid(moved))
}

/// One try of [`load`]: `Err` inside when the snapshot and the log do not
/// fit (a compaction between the two reads, or damage).
fn load_once(dir: &Dir) -> std::io::Result<Result<Loaded, String>> {
    let snapshot = match dir
        .read(SNAPSHOT_NAME, u64::MAX)
        .map_err(std::io::Error::other)?
    {
        Some(bytes) => Some(
            decode_snapshot(&bytes)
                .map_err(|reason| invalid(format!("{SNAPSHOT_NAME}: {reason}")))?,
        ),
        None => None,
    };
    let log = open_store_log(dir)?;
    log.lock()?;
    let loaded = replay_locked(dir, &log, snapshot);
    let unlocked = log.unlock();
    let loaded = loaded?;
    unlocked?;
    Ok(loaded.map(|(map, applied, generation, records)| Loaded {
        map,
        log,
        applied,
        generation,
        records,
    }))
}

/// The body of [`load_once`], `log`'s exclusive lock held: the map, the
/// bytes applied, the log's generation and its records.
type Replayed = (HashMap<String, String>, u64, u64, u64);

fn replay_locked(
    dir: &Dir,
    log: &File,
    snapshot: Option<Snapshot>,
) -> std::io::Result<Result<Replayed, String>> {
    use std::io::Read;
    let mut bytes = Vec::new();
    (&*log).read_to_end(&mut bytes)?;
    let complete = bytes.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1) as u64;
    let (generation, header_len) = log_header(&bytes);
    let (mut map, from) = match snapshot {
        // No complete line (removed, or a torn first line): the store is
        // the snapshot, and the log starts over as its next generation.
        Some(snapshot) if complete == 0 => {
            let header = frame_line(&format!("log {}", snapshot.generation + 1));
            log.set_len(0)?;
            (&*log).write_all(header.as_bytes())?;
            log.sync_all()?;
            return Ok(Ok((
                snapshot.map,
                header.len() as u64,
                snapshot.generation + 1,
                0,
            )));
        }
        None if generation == 0 => (HashMap::new(), 0),
        None => {
            return Ok(Err(format!(
                "{} continues generation {} of {SNAPSHOT_NAME}, which is missing: restore \
                 it from a copy",
                dir.join(LOG_NAME).display(),
                generation - 1
            )));
        }
        Some(snapshot) if generation == snapshot.generation + 1 => (snapshot.map, header_len),
        Some(snapshot) if generation == snapshot.generation => {
            let boundary = snapshot.offset == 0
                || usize::try_from(snapshot.offset - 1)
                    .ok()
                    .and_then(|at| bytes.get(at))
                    == Some(&b'\n');
            if snapshot.offset > complete || !boundary {
                return Ok(Err(format!(
                    "{SNAPSHOT_NAME} holds {} up to byte {}, which is not the end of a line \
                     there ({complete} bytes of complete lines): the log is not the one the \
                     snapshot was taken of",
                    dir.join(LOG_NAME).display(),
                    snapshot.offset
                )));
            }
            (snapshot.map, snapshot.offset)
        }
        Some(snapshot) => {
            return Ok(Err(format!(
                "{} is generation {generation}, but {SNAPSHOT_NAME} is of generation {}: \
                 a log continues its snapshot's generation or the next",
                dir.join(LOG_NAME).display(),
                snapshot.generation
            )));
        }
    };
    let start = usize::try_from(from).map_err(|_| invalid("the log is too long".into()))?;
    let applied = apply_lines(&mut map, &bytes[start..], from).map_err(invalid)?;
    if applied.sealed && !names_log(dir, log)? {
        return Ok(Err(format!(
            "{} was replaced by a compaction while it was read",
            dir.join(LOG_NAME).display()
        )));
    }
    let good_len = from + applied.len;
    if bytes.len() as u64 > good_len {
        log.set_len(good_len)?;
        log.sync_all()?;
    }
    // The lines before `from` are the snapshot's, but a replay reads them.
    let before = bytes[usize::try_from(header_len).unwrap_or(0)..start]
        .iter()
        .filter(|&&b| b == b'\n')
        .count() as u64;
    Ok(Ok((map, good_len, generation, before + applied.records)))
}

/// A log's generation, and the length of its header line: `(n, len)` when
/// its first line is `log n`, `(0, 0)` for a log without one (empty, or
/// written before compaction).
fn log_header(bytes: &[u8]) -> (u64, u64) {
    let Some(end) = bytes.iter().position(|&b| b == b'\n') else {
        return (0, 0);
    };
    framed(&bytes[..end])
        .and_then(|body| body.strip_prefix("log "))
        .and_then(|n| n.parse().ok())
        .map_or((0, 0), |generation| (generation, end as u64 + 1))
}

/// Open the store under `data_dir` ([`load`]) with the compaction
/// threshold `compact_after_records`.
fn replay(data_dir: &Path, compact_after_records: NonZeroU64) -> std::io::Result<Store> {
    let dir = open_data_dir(data_dir)?;
    let loaded = load(&dir)?;
    // `store.log` may have been created just now: its name made durable
    // before a write is acknowledged in it.
    dir.sync().map_err(std::io::Error::other)?;
    Ok(Store {
        map: loaded.map,
        log: loaded.log,
        applied: loaded.applied,
        generation: loaded.generation,
        records: loaded.records,
        dir_unsynced: false,
        dir,
        lost: None,
        lost_signal: Arc::new(tokio::sync::Notify::new()),
        compaction: Compaction::new(compact_after_records),
    })
}

/// Write `store.snapshot` (the map as of byte `offset` of the log of
/// generation `generation`): a temp file, fsynced, renamed into place, the
/// dir fsynced. An error leaves either the old snapshot or the new one in
/// place, each consistent with the log.
fn write_snapshot(
    dir: &Dir,
    generation: u64,
    offset: u64,
    map: &HashMap<String, String>,
) -> std::io::Result<()> {
    let bytes = encode_snapshot(generation, offset, map);
    let mut tmp = dir
        .create_temp(SNAPSHOT_TMP)
        .map_err(std::io::Error::other)?;
    #[cfg(feature = "failpoints")]
    if steadfast_actors::failpoint::reached("kvd.compact.snapshot_mid_write") {
        let _ = tmp.write_all(&bytes[..bytes.len() / 2]);
        steadfast_actors::failpoint::kill();
    }
    tmp.write_all(&bytes)?;
    failpoint!("kvd.compact.snapshot_before_fsync");
    tmp.sync_all()?;
    drop(tmp);
    failpoint!("kvd.compact.snapshot_before_rename");
    dir.rename(SNAPSHOT_TMP, SNAPSHOT_NAME)
        .map_err(std::io::Error::other)?;
    failpoint!("kvd.compact.snapshot_before_dir_fsync");
    dir.sync().map_err(std::io::Error::other)
}

/// What one compaction did.
#[derive(Debug)]
enum Compacted {
    /// The log is generation `generation` now, the snapshot holding
    /// `entries` keys, and the fresh log the `tail` records written while
    /// the snapshot was.
    Done {
        generation: u64,
        entries: usize,
        tail: u64,
    },
    /// Another process is compacting (an overlap replacement's other kvd).
    Busy,
    /// Nothing done: the log moved on meanwhile, or shutdown began between
    /// the snapshot and the fresh log (the snapshot is in place and
    /// consistent).
    Skipped,
}

/// One compaction of `store` (blocking: run it off the runtime's workers):
/// the map as of the log's current end, written as `store.snapshot`
/// without holding the store (writes go on meanwhile), then the fresh log
/// ([`Store::start_new_log`]), which holds it for a copy of the records
/// written meanwhile and two fsyncs.
fn compact_once(store: &Shared, stop: &CancellationToken) -> std::io::Result<Compacted> {
    let dir = {
        let store = store.lock().unwrap_or_else(PoisonError::into_inner);
        store.dir.try_clone()?
    };
    let lock = dir
        .open(COMPACT_LOCK, steadfast::fs::Access::ReadWriteCreate)
        .map_err(std::io::Error::other)?;
    match lock.try_lock() {
        Ok(()) => {}
        Err(std::fs::TryLockError::WouldBlock) => return Ok(Compacted::Busy),
        Err(std::fs::TryLockError::Error(error)) => return Err(error),
    }
    let (map, generation, offset) = {
        let mut store = store.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(lost) = &store.lost {
            return Err(std::io::Error::other(lost.clone()));
        }
        store.read_catch_up()?;
        (store.map.clone(), store.generation, store.applied)
    };
    write_snapshot(&dir, generation, offset, &map)?;
    if stop.is_cancelled() {
        return Ok(Compacted::Skipped);
    }
    failpoint!("kvd.compact.before_new_log");
    let started = store
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .start_new_log(generation, offset)?;
    failpoint!("kvd.compact.done");
    Ok(match started {
        Some((generation, tail)) => Compacted::Done {
            generation,
            entries: map.len(),
            tail,
        },
        None => Compacted::Skipped,
    })
}

/// How often the compactor looks at the log's length when no write woke
/// it (a log another process appended to grows without waking it).
const COMPACT_CHECK_EVERY: Duration = Duration::from_secs(5);
/// The wait after the first failed compaction, doubled after each further
/// one up to [`COMPACT_RETRY_MAX`].
const COMPACT_RETRY_MIN: Duration = Duration::from_secs(1);
const COMPACT_RETRY_MAX: Duration = Duration::from_secs(30);

/// The compactor: compacts `store` ([`compact_once`]) whenever its log
/// holds `compact_after_records` records or more, off the request path
/// (a blocking thread), until `shutdown` is cancelled.
///
/// A failed compaction (ENOSPC, a temp name taken by a directory, …) is
/// logged and tried again after a backoff (1 s, doubling to 30 s); the
/// store stays correct and serving throughout. Each call starts afresh
/// from `store` and the token: a supervisor may run it again after it
/// ended.
///
/// # Errors
/// The store is lost (its log removed or replaced under it: module doc):
/// nothing can be compacted until a new runtime opens the store again.
async fn compactor(store: Shared, shutdown: CancellationToken) -> Result<(), String> {
    let compaction = Arc::clone(
        &store
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .compaction,
    );
    let mut backoff: Option<Duration> = None;
    loop {
        let due = {
            let store = store.lock().unwrap_or_else(PoisonError::into_inner);
            if let Some(lost) = &store.lost {
                return Err(lost.clone());
            }
            compaction.due(store.records)
        };
        if due {
            let (store, stop) = (Arc::clone(&store), shutdown.clone());
            let compacted = tokio::task::spawn_blocking(move || compact_once(&store, &stop))
                .await
                .unwrap_or_else(|join| {
                    Err(std::io::Error::other(format!(
                        "the compaction panicked: {join}"
                    )))
                });
            match compacted {
                Ok(Compacted::Done {
                    generation,
                    entries,
                    tail,
                }) => {
                    backoff = None;
                    tracing::info!(target: "kvd", generation, entries, tail, "store.log compacted");
                }
                Ok(Compacted::Busy) => backoff = Some(COMPACT_RETRY_MIN),
                Ok(Compacted::Skipped) => backoff = None,
                Err(error) => {
                    let wait =
                        backoff.map_or(COMPACT_RETRY_MIN, |wait| (wait * 2).min(COMPACT_RETRY_MAX));
                    backoff = Some(wait);
                    tracing::warn!(
                        target: "kvd",
                        %error,
                        retry_in_secs = wait.as_secs(),
                        "store.log compaction failed; the store serves on"
                    );
                }
            }
        }
        // While backing off, a write past the threshold does not cut the
        // wait short.
        let wake = async {
            if backoff.is_none() {
                compaction.wake.notified().await;
            } else {
                std::future::pending::<()>().await;
            }
        };
        tokio::select! {
            biased;
            () = shutdown.cancelled() => return Ok(()),
            () = wake => {}
            () = tokio::time::sleep(backoff.unwrap_or(COMPACT_CHECK_EVERY)) => {}
        }
    }
}

/// The settings that apply in place.
struct Live {
    max_connections: AtomicUsize,
    /// `idle_timeout_secs`.
    idle_timeout_secs: AtomicU64,
}

impl Live {
    fn idle_timeout(&self) -> Duration {
        Duration::from_secs(self.idle_timeout_secs.load(Ordering::SeqCst))
    }
}

/// The names kvd's listener and store lock are handed over under, to the
/// candidate of an overlap replacement (`steadfast::handover`).
const LISTENER_HANDOVER: &str = "kvd:listener";
const STORE_LOCK_HANDOVER: &str = "kvd:store_lock";

/// A resource kvd offers to an overlap replacement's candidate, with the
/// supervisor's handover it is offered through, so `destroy` can withdraw
/// it.
struct Offered<T> {
    item: T,
    handover: Arc<Handover>,
}

impl<T> Offered<T> {
    /// Withdraw the offer of `name`.
    fn withdraw(&self, name: &str) {
        self.handover.withdraw(name);
    }
}

/// The longest request kvd reads, newline excluded: a longer line is
/// answered `ERR line too long` and its connection closed, and no more of
/// it than this is ever buffered.
const MAX_LINE: usize = 1 << 20;

/// A connection's read buffer, and what its line buffer is shrunk back to
/// after a long request: an idle connection holds about this much.
const READ_BUFFER: usize = 8 * 1024;

/// How long a connection accepted before the runtime's shutdown began, and
/// not yet asked anything, waits for its first request once it has: its
/// client connected to a runtime that was serving and is owed one answer.
const FIRST_REQUEST_WAIT: Duration = Duration::from_millis(250);

/// How long a connection refused for a too long line keeps reading (and
/// dropping) what its client still sends before it closes.
const REFUSAL_LINGER: Duration = Duration::from_secs(1);

/// How often `watch_log` checks that `store.log` is still the file open
/// (a write checks it too, before its `OK`).
const LOG_CHECK_EVERY: Duration = Duration::from_secs(1);

struct Kvd;

/// kvd's config: [`DEFAULTS`] < the `--config` file < the override tier.
/// A value of the wrong type (`max_connections = "many"`) or an unknown
/// leaf holds the boot, naming the leaf; `config set` refuses it.
#[derive(Debug, Clone, serde::Deserialize)]
struct Config {
    /// Where the store listens.
    listen_addr: String,
    /// kvd's log level (applied in place); unset: `RUST_LOG`, else `info`.
    log_level: Option<steadfast::daemon::LogLevel>,
    /// Connections served at once (applied in place).
    max_connections: usize,
    /// A connection that sends no complete request (or does not take its
    /// answer) for this long is closed (applied in place, from the next
    /// wait).
    idle_timeout_secs: NonZeroU64,
    /// Compact `store.log` into `store.snapshot` and a fresh log once it
    /// holds this many records (applied in place). 0 is refused: a store
    /// that never compacts replays every write it ever took at each boot.
    compact_after_records: NonZeroU64,
    /// The data dir, when the file names it (the supervisor's leaf).
    #[allow(dead_code)]
    data_dir: Option<PathBuf>,
}

/// Takes the store lock (or adopts the one an overlap incumbent handed over).
struct OpenStore;

impl Step for OpenStore {
    const NAME: &'static str = "open_store";
    type Config = Config;
    type Output = Offered<StoreLock>;

    async fn execute(
        &self,
        cx: StepContext<'_, Config>,
    ) -> Result<Resource<Self::Output>, StepError> {
        // An overlap replacement's candidate adopts the store lock its
        // incumbent handed over; anyone else takes it.
        let lock = match cx.handover.take(STORE_LOCK_HANDOVER) {
            Some(fd) => StoreLock::adopt(cx.data_dir, File::from(fd)),
            None => StoreLock::acquire(cx.data_dir),
        }
        .map_err(StepError::backoff)?;
        let lock_file = lock.file().as_os().ok_or_else(|| {
            StepError::backoff("the store lock has no OS descriptor to hand over")
        })?;
        cx.handover
            .share(STORE_LOCK_HANDOVER, lock_file)
            .map_err(StepError::backoff)?;
        let path = StoreLock::path_under(cx.data_dir).display().to_string();
        Ok(Resource::new(
            "store_lock",
            path,
            Offered {
                item: lock,
                handover: Arc::clone(cx.handover),
            },
        ))
    }

    async fn destroy(
        &self,
        _record: &ResourceRecord,
        runtime: &mut Runtime,
    ) -> Result<(), StepError> {
        if let Some(offered) = runtime.take::<Self>() {
            offered.withdraw(STORE_LOCK_HANDOVER);
        }
        Ok(())
    }
}

/// Replays `store.log` into the map.
struct ReplayLog;

impl Step for ReplayLog {
    const NAME: &'static str = "replay_log";
    type Config = Config;
    type Output = Shared;

    async fn execute(&self, cx: StepContext<'_, Config>) -> Result<Resource<Shared>, StepError> {
        let path = cx.data_dir.join(LOG_NAME);
        let replayed = tokio::task::spawn_blocking({
            let data_dir = cx.data_dir.to_path_buf();
            let compact_after_records = cx.config.compact_after_records;
            move || replay(&data_dir, compact_after_records)
        })
        .await
        .map_err(StepError::backoff)?
        .map_err(|e| {
            let error = format!("{}: {e}", path.display());
            // A damaged line does not heal by retrying: held until the
            // operator deals with the file.
            if e.kind() == std::io::ErrorKind::InvalidData {
                StepError::hold(error)
            } else {
                StepError::backoff(error)
            }
        })?;
        let id = format!("{} ({} keys)", path.display(), replayed.map.len());
        Ok(Resource::new("store", id, Arc::new(Mutex::new(replayed))))
    }
}

/// Binds `listen_addr` (or accepts on the socket an overlap incumbent
/// handed over).
struct BindListener;

impl Step for BindListener {
    const NAME: &'static str = "bind_listener";
    type Config = Config;
    /// The listener until `serve` takes it.
    type Output = Offered<Option<TcpListener>>;

    async fn execute(
        &self,
        cx: StepContext<'_, Config>,
    ) -> Result<Resource<Self::Output>, StepError> {
        let addr = cx.config.listen_addr.as_str();
        // An overlap candidate accepts on its incumbent's socket.
        let listener = match cx.handover.take_listener(LISTENER_HANDOVER) {
            Some(listener) => listener
                .set_nonblocking(true)
                .and_then(|()| TcpListener::from_std(listener)),
            None => TcpListener::bind(addr).await,
        }
        .map_err(|e| StepError::backoff(format!("cannot bind {addr}: {e}")))?;
        cx.handover
            .share(LISTENER_HANDOVER, &listener)
            .map_err(StepError::backoff)?;
        let bound = listener.local_addr().map_err(StepError::backoff)?;
        let offered = Offered {
            item: Some(listener),
            handover: Arc::clone(cx.handover),
        };
        Ok(Resource::new("listener", bound.to_string(), offered))
    }

    async fn destroy(
        &self,
        _record: &ResourceRecord,
        runtime: &mut Runtime,
    ) -> Result<(), StepError> {
        if let Some(offered) = runtime.take::<Self>() {
            offered.withdraw(LISTENER_HANDOVER);
        }
        Ok(())
    }
}

/// Accepts connections on the bound listener and serves them from the
/// replayed store.
struct Serve;

impl Step for Serve {
    const NAME: &'static str = "serve";
    type Config = Config;
    /// The settings that apply in place.
    type Output = Arc<Live>;

    async fn execute(&self, cx: StepContext<'_, Config>) -> Result<Resource<Arc<Live>>, StepError> {
        let listener = cx
            .runtime
            .get_mut::<BindListener>()
            .and_then(|offered| offered.item.take())
            .ok_or_else(|| StepError::backoff("no listener"))?;
        let store = cx
            .runtime
            .get::<ReplayLog>()
            .cloned()
            .ok_or_else(|| StepError::backoff("no store"))?;
        apply_log_level(cx.config.log_level.as_ref());
        let live = Arc::new(Live {
            max_connections: AtomicUsize::new(cx.config.max_connections),
            idle_timeout_secs: AtomicU64::new(cx.config.idle_timeout_secs.get()),
        });
        let open = Arc::new(AtomicUsize::new(0));
        let limits = Arc::clone(&live);
        let served = Arc::clone(&store);
        // Every connection is a task of the runtime's: a drain ends it.
        cx.runtime
            .accept_loop("accept", listener, move |conn: Connection<TcpListener>| {
                let (store, limits, open) =
                    (Arc::clone(&served), Arc::clone(&limits), Arc::clone(&open));
                async move {
                    if open.load(Ordering::SeqCst) >= limits.max_connections.load(Ordering::SeqCst)
                    {
                        let mut stream = conn.stream;
                        let refusal = stream.write_all(b"ERR too many connections\n");
                        let _ = tokio::time::timeout(limits.idle_timeout(), refusal).await;
                        return;
                    }
                    let _counted = Counted::new(&open);
                    serve_connection(conn, &store, &limits).await;
                }
            });
        // A removed or replaced `store.log` fails the runtime: the next
        // boot replays (or creates) the log the data dir holds now.
        let lost_signal = Arc::clone(
            &store
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .lost_signal,
        );
        // Compaction, off the request path: a supervised child of the
        // runtime's, restarted alone if it fails (a compaction's failure
        // never drops a connection), stopped between two compactions by a
        // drain. Three failures within a minute end the runtime: the store
        // is then lost, which the next boot repairs.
        let compacted = Arc::clone(&store);
        cx.runtime
            .supervise(
                Children::one_for_one()
                    .intensity(3, Duration::from_secs(60))
                    .child(
                        Child::task("compactor", move |cx| {
                            compactor(Arc::clone(&compacted), cx.shutdown().clone())
                        })
                        .restart(Restart::Transient)
                        .shutdown(Duration::from_secs(10)),
                    ),
            )
            .await
            .map_err(StepError::backoff)?;
        let stop = cx.runtime.shutdown_token();
        cx.runtime.spawn("watch_log", async move {
            let mut every = LOG_CHECK_EVERY;
            loop {
                tokio::select! {
                    biased;
                    () = stop.cancelled() => return Ok(()),
                    () = lost_signal.notified() => {}
                    () = tokio::time::sleep(every) => {}
                }
                // Never wait on the lock here: a write holding it checks
                // the log itself; look again soon.
                let lost = match store.try_lock() {
                    Ok(mut store) => store.check_lost(),
                    Err(TryLockError::Poisoned(store)) => store.into_inner().check_lost(),
                    Err(TryLockError::WouldBlock) => {
                        every = Duration::from_millis(10);
                        continue;
                    }
                };
                every = LOG_CHECK_EVERY;
                if let Some(lost) = lost {
                    tracing::error!(target: "kvd", reason = %lost, "store.log lost");
                    return Err(lost);
                }
            }
        });
        Ok(Resource::new("serve", "accept", live))
    }
}

impl Service for Kvd {
    type Config = Config;

    fn plan(&self, _config: &Config) -> Plan<Config> {
        Plan::new()
            .step(OpenStore)
            .step(ReplayLog)
            .step(BindListener)
            .step(Serve)
    }

    async fn apply_config(
        &self,
        change: ConfigChange<'_, Config>,
        runtime: &mut Runtime,
    ) -> Vec<String> {
        let live = runtime.get::<Serve>();
        let mut restart = Vec::new();
        for leaf in change.changed {
            match (leaf.as_str(), live) {
                ("max_connections", Some(live)) => live
                    .max_connections
                    .store(change.new.max_connections, Ordering::SeqCst),
                ("idle_timeout_secs", Some(live)) => live
                    .idle_timeout_secs
                    .store(change.new.idle_timeout_secs.get(), Ordering::SeqCst),
                ("log_level", Some(_)) => apply_log_level(change.new.log_level.as_ref()),
                ("compact_after_records", Some(_)) => {
                    if let Some(store) = runtime.get::<ReplayLog>() {
                        let store = store.lock().unwrap_or_else(PoisonError::into_inner);
                        store
                            .compaction
                            .after_records
                            .store(change.new.compact_after_records.get(), Ordering::SeqCst);
                        store.compaction.wake.notify_one();
                    }
                }
                _ => restart.push(leaf.clone()),
            }
        }
        restart
    }

    /// `steadfastctl reinit`: remove the snapshot and the log (and a
    /// compaction's leftovers), under the store lock (which also proves
    /// nothing else has the store open). The snapshot goes first: a wipe
    /// cut short leaves a log without its snapshot, which the next boot
    /// refuses (held) rather than reading the snapshot's keys back.
    async fn wipe(&self, data_dir: &Path, _config: Option<&Config>) -> Result<(), StepError> {
        let _lock = StoreLock::acquire(data_dir).map_err(StepError::backoff)?;
        for name in [SNAPSHOT_NAME, LOG_NAME, SNAPSHOT_TMP, LOG_TMP, COMPACT_LOCK] {
            match std::fs::remove_file(data_dir.join(name)) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(StepError::backoff(format!("{name}: {e}"))),
            }
        }
        Ok(())
    }
}

/// Filter kvd's log by the configured level (unset: `RUST_LOG`), in place.
/// The config type checked the level; the only failure is a subscriber
/// that is not steadfast's, and then there is nothing to change.
fn apply_log_level(level: Option<&steadfast::daemon::LogLevel>) {
    // Unset, the level goes back to `--log-level`, else `RUST_LOG`.
    if let Err(error) = steadfast::daemon::cli::set_configured_log_level(level) {
        tracing::warn!(target: "kvd", %error, "log_level not applied");
    }
}

/// Counts a connection among the open ones while it lives.
struct Counted(Arc<AtomicUsize>);

impl Counted {
    fn new(open: &Arc<AtomicUsize>) -> Self {
        open.fetch_add(1, Ordering::SeqCst);
        Self(Arc::clone(open))
    }
}

impl Drop for Counted {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// What reading one request found.
enum Read {
    /// A complete line, in the line buffer (newline and a `\r` before it
    /// cut).
    Line,
    /// More than [`MAX_LINE`] bytes before a newline.
    TooLong,
    /// The client closed its side (a partial last line is dropped).
    Closed,
}

/// Read one line into `line` (cleared first), never holding more than
/// [`MAX_LINE`] bytes of it (the buffer grows to at most that).
///
/// Not cancel-safe across calls (a dropped read loses what it took): the
/// caller keeps one read pinned until it completes, or closes.
async fn read_line<R>(reader: &mut R, line: &mut Vec<u8>) -> std::io::Result<Read>
where
    R: AsyncBufRead + Unpin,
{
    line.clear();
    loop {
        let available = reader.fill_buf().await?;
        if available.is_empty() {
            return Ok(Read::Closed);
        }
        let newline = available.iter().position(|&b| b == b'\n');
        let chunk = &available[..newline.unwrap_or(available.len())];
        let needed = line.len() + chunk.len();
        if needed > MAX_LINE {
            return Ok(Read::TooLong);
        }
        if needed > line.capacity() {
            let target = (line.capacity() * 2).clamp(needed, MAX_LINE);
            line.reserve_exact(target - line.len());
        }
        line.extend_from_slice(chunk);
        let taken = chunk.len() + usize::from(newline.is_some());
        reader.consume(taken);
        if newline.is_some() {
            if line.last() == Some(&b'\r') {
                line.pop();
            }
            return Ok(Read::Line);
        }
    }
}

/// One client: a line in, a line out.
///
/// - A request is a line of at most [`MAX_LINE`] bytes; a longer one is
///   answered `ERR line too long` and the connection closed.
/// - A connection that sends no complete request, or does not take its
///   answer, for `idle_timeout_secs` is closed.
/// - Once the runtime's shutdown begins (a stop, a restart, a drain of any
///   kind), a request being executed is finished and answered, and the
///   connection is then closed; a connection waiting for its next request
///   is closed at once, and a request it sends after that is never
///   executed. A connection that has not sent its first request yet is
///   owed one answer: it waits up to [`FIRST_REQUEST_WAIT`] for it. The
///   drain waits for all of this (the connection is a task of the
///   runtime's), so no request is answered once the runtime is stopped.
async fn serve_connection(conn: Connection<TcpListener>, store: &Shared, live: &Live) {
    let Connection {
        stream,
        shutdown,
        peer,
    } = conn;
    // An answer is one small write the client waits for: send it now.
    let _ = stream.set_nodelay(true);
    let (read, mut write) = stream.into_split();
    let mut reader = AsyncBufReader::with_capacity(READ_BUFFER, read);
    let mut line = Vec::new();
    let mut answered = false;
    loop {
        let idle = live.idle_timeout();
        let deadline = tokio::time::Instant::now() + idle;
        let read = {
            let next = read_line(&mut reader, &mut line);
            tokio::pin!(next);
            match shutdown
                .unless_begun(tokio::time::timeout_at(deadline, &mut next))
                .await
            {
                Some(read) => read,
                None if !answered => {
                    let owed = tokio::time::Instant::now() + FIRST_REQUEST_WAIT;
                    tokio::time::timeout_at(deadline.min(owed), &mut next).await
                }
                None => return,
            }
        };
        let mut answer = match read {
            // Idle too long: said at debug, so a log shows when it closed.
            Err(_) => {
                tracing::debug!(target: "kvd", %peer, ?idle, "an idle connection closed");
                return;
            }
            // The client gone, or its side broken.
            Ok(Err(_) | Ok(Read::Closed)) => return,
            Ok(Ok(Read::TooLong)) => {
                let refusal = format!("ERR line too long (at most {MAX_LINE} bytes)\n");
                let refused = async {
                    write.write_all(refusal.as_bytes()).await?;
                    write.shutdown().await
                };
                if let Ok(Ok(())) = tokio::time::timeout(idle, refused).await {
                    discard_until_closed(&mut reader, &shutdown).await;
                }
                return;
            }
            Ok(Ok(Read::Line)) => match std::str::from_utf8(&line) {
                Ok(request) => {
                    let answer = answer(request, store);
                    tracing::debug!(target: "kvd", request = %request, %answer, "request");
                    answer
                }
                Err(_) => "ERR the request is not UTF-8".to_owned(),
            },
        };
        // One write an answer, line end included: written as two, the
        // newline waited behind Nagle for the client's delayed ACK (a 45 ms
        // round trip; `benches/kvd.rs`).
        answer.push('\n');
        match tokio::time::timeout(idle, write.write_all(answer.as_bytes())).await {
            Ok(Ok(())) => answered = true,
            _ => return,
        }
        if line.capacity() > READ_BUFFER {
            line = Vec::new();
        }
    }
}

/// After a refusal (its answer sent and the write side shut): read and drop
/// what the client still sends, for at most [`REFUSAL_LINGER`], so the
/// close does not reset the connection before the client has read the
/// refusal (closing a socket with unread input sends a reset, and the
/// client's kernel may discard the answer with it). Holds one small buffer;
/// ends at shutdown too.
async fn discard_until_closed<R>(reader: &mut R, shutdown: &Shutdown)
where
    R: AsyncBufRead + Unpin,
{
    let drained = async {
        loop {
            match reader.fill_buf().await {
                Ok([]) | Err(_) => return,
                Ok(bytes) => {
                    let taken = bytes.len();
                    reader.consume(taken);
                }
            }
        }
    };
    let _ = shutdown
        .unless_begun(tokio::time::timeout(REFUSAL_LINGER, drained))
        .await;
}

fn answer(line: &str, store: &Shared) -> String {
    let mut words = line.splitn(3, ' ');
    let (verb, key, value) = (words.next().unwrap_or(""), words.next(), words.next());
    let valid_key = |k: &str| !k.is_empty() && !k.contains(char::is_whitespace);
    match (verb.to_ascii_uppercase().as_str(), key, value) {
        ("GET", Some(key), None) if valid_key(key) => {
            let mut store = store.lock().unwrap_or_else(PoisonError::into_inner);
            if let Err(error) = store.read_catch_up() {
                return format!("ERR the log cannot be read: {error}");
            }
            store
                .map
                .get(key)
                .cloned()
                .unwrap_or_else(|| "NOT_FOUND".into())
        }
        ("SET", Some(key), Some(value)) if valid_key(key) && !value.contains('\n') => {
            durable(|| {
                let mut store = store.lock().unwrap_or_else(PoisonError::into_inner);
                let line = frame_line(&format!("S {key} {value}"));
                store.write(&line, |map| {
                    map.insert(key.to_owned(), value.to_owned());
                })?;
                Ok("OK".into())
            })
        }
        ("DEL", Some(key), None) if valid_key(key) => durable(|| {
            let mut store = store.lock().unwrap_or_else(PoisonError::into_inner);
            store.read_catch_up()?;
            if !store.map.contains_key(key) {
                return Ok("NOT_FOUND".into());
            }
            let line = frame_line(&format!("D {key}"));
            store.write(&line, |map| {
                map.remove(key);
            })?;
            Ok("OK".into())
        }),
        ("GET" | "SET" | "DEL", _, _) => {
            format!("ERR usage: SET key value | GET key | DEL key (got {line:?})")
        }
        _ => format!("ERR unknown command {verb:?}"),
    }
}

/// Run a write (its append and fsync) on this thread, once tokio has moved
/// the worker's other tasks to another thread (`block_in_place`: kvd runs
/// on the multi-thread runtime `main` builds; on a current-thread
/// runtime it would panic). The answer goes out from the thread the fsync
/// returned on: no wake-up of a blocking-pool thread before the fsync, nor
/// of a worker after it, sits between the request and its `OK`, as with
/// `spawn_blocking` (a `SET` within 1.5× its fsync). An I/O
/// error is answered `ERR`, never `OK`; so is a panic in the write.
fn durable(write: impl FnOnce() -> std::io::Result<String>) -> String {
    let written = tokio::task::block_in_place(|| {
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(write))
    });
    match written {
        Ok(Ok(answer)) => answer,
        Ok(Err(error)) => format!("ERR not durable: {error}"),
        Err(_) => "ERR the write did not complete".into(),
    }
}

/// The version a replacement's live proof reports: the first line of a
/// `<binary>.version` file beside the executable when there is one (how a
/// packaging step stamps a build; the tests stamp a copy of kvd this way),
/// else the crate's version.
fn version() -> String {
    std::env::current_exe()
        .ok()
        .and_then(|exe| std::fs::read_to_string(exe.with_extension("version")).ok())
        .and_then(|text| text.lines().next().map(str::trim).map(str::to_owned))
        .filter(|line| !line.is_empty())
        .unwrap_or_else(|| env!("CARGO_PKG_VERSION").to_owned())
}

/// kvd's command line: steadfast's daemon flags, and kvd's own.
#[derive(clap::Parser)]
#[command(
    name = "kvd",
    about = "A small durable key-value daemon, kept up by steadfast"
)]
struct Cli {
    #[command(flatten)]
    daemon: steadfast::daemon::cli::DaemonArgs,
    /// Group commit: how long a transition into a boot or a drain waits
    /// for its outcome to share its fsync.
    #[arg(long, value_name = "MS")]
    commit_window_ms: Option<u64>,
}

fn main() {
    // The command line (--data-dir, --config, the control and log flags), then a runtime,
    // the signals, the supervisor: a refused flag starts no thread, a SIGTERM is a drained exit.
    let cli: Cli = steadfast::daemon::cli::parse(version());
    let mut timings = steadfast::supervisor::Timings::default();
    if let Some(ms) = cli.commit_window_ms {
        timings.commit_window = Duration::from_millis(ms);
    }
    // The multi-thread runtime (the default): a write's fsync holds its
    // worker (`durable`), the other connections go on on the others.
    cli.daemon
        .launch("kvd")
        .defaults_toml(DEFAULTS)
        .default_data_dir("kvd-data")
        .main(|dir, config| {
            Supervisor::builder(dir, Kvd)
                .config(config)
                .version(version())
                .timings(timings)
        })
}
