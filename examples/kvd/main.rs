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
//! `serve` — and `log_level`, `max_connections` and `idle_timeout_secs`
//! apply in place while `listen_addr` needs a restart.
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
//! ended (`steadfast::daemon::Ended::code`): 0 drained by SIGTERM, 80 halt,
//! 75 relaunch (`spec/exit-codes.md`).
//!
//! `store.log` and `store.lock` are private (0600) and opened without
//! following a link, in a data dir no other user can write, through
//! `steadfast::fs` like steadfast's own files
//! (`files::kvd_files_are_private`, `files::a_kvd_store_log_symlink_is_refused`).

use std::collections::HashMap;
use std::fs::File;
use std::io::Write;
use std::num::NonZeroU64;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError, TryLockError};
use std::time::Duration;

use steadfast::fs::Dir;
use steadfast::handover::Handover;
use steadfast::service::{Connection, ResourceRecord, Shutdown, StoreLock};
use steadfast::{
    ConfigChange, Made, Plan, Runtime, Service, Step, StepContext, StepError, Supervisor,
};
use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncWriteExt, BufReader as AsyncBufReader};
use tokio::net::TcpListener;

const DEFAULTS: &str = r#"
listen_addr = "127.0.0.1:7070"
max_connections = 64
idle_timeout_secs = 60
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
    /// The data dir, open: where `store.log` is looked up (without
    /// following a link) to check it is still the file open as `log`.
    dir: Dir,
    /// Why `store.log` is no longer the log (removed or replaced while
    /// open): every write is refused from then on.
    lost: Option<String>,
    /// Wakes the `watch_log` task at once when a write finds the log lost.
    lost_signal: Arc<tokio::sync::Notify>,
}

type Shared = Arc<Mutex<Store>>;

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

/// Apply the complete lines of `bytes` (which start at byte `offset` of the
/// log); return how many bytes they span, or why a line is refused.
fn apply_lines(
    map: &mut HashMap<String, String>,
    bytes: &[u8],
    offset: u64,
) -> Result<u64, String> {
    let complete = bytes.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
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
            apply_body(map, body);
        }
        at += line.len() as u64;
    }
    Ok(complete as u64)
}

fn invalid(reason: String) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, reason)
}

impl Store {
    /// Apply whatever was appended to the log beyond `applied`.
    fn catch_up(&mut self) -> std::io::Result<()> {
        use std::io::{Read, Seek, SeekFrom};
        let len = self.log.metadata()?.len();
        if len <= self.applied {
            return Ok(());
        }
        let mut reader = &self.log;
        reader.seek(SeekFrom::Start(self.applied))?;
        let mut bytes = Vec::new();
        reader.take(len - self.applied).read_to_end(&mut bytes)?;
        self.applied += apply_lines(&mut self.map, &bytes, self.applied)
            .map_err(|reason| invalid(format!("store.log: {reason}")))?;
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
        caught_up?;
        unlocked
    }

    /// Under the log's lock: catch up, cut any fragment, append one line
    /// and fsync it; only then apply it to the map. An error is answered
    /// `ERR`, never `OK`.
    fn write(
        &mut self,
        line: &str,
        apply: impl FnOnce(&mut HashMap<String, String>),
    ) -> std::io::Result<()> {
        if let Some(lost) = &self.lost {
            return Err(std::io::Error::other(lost.clone()));
        }
        self.log.lock()?;
        let written = self.append_locked(line);
        let unlocked = self.log.unlock();
        written?;
        unlocked?;
        apply(&mut self.map);
        Ok(())
    }

    /// The body of [`Self::write`], with the log's exclusive lock held.
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
    fn append_locked(&mut self, line: &str) -> std::io::Result<()> {
        self.catch_up()?;
        self.cut_fragment()?;
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
        Ok(())
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
}

/// The log's name in the data dir.
const LOG_NAME: &str = "store.log";

/// Open `store.log` (0600, created if missing) in the trusted data dir
/// without following a link: `steadfast::fs`, the mechanism the
/// control dir's files use. A link planted there is refused, naming it.
/// Returns the data dir too, open, where the name is checked later
/// ([`Store::check_lost`]).
fn open_store_log(data_dir: &Path) -> std::io::Result<(Dir, File)> {
    use steadfast::fs::Access;
    let dir = Dir::open_data_dir(data_dir, true).map_err(std::io::Error::other)?;
    // The OS file: the log takes shared locks too.
    let log = dir
        .open(LOG_NAME, Access::AppendCreate)
        .map_err(std::io::Error::other)?
        .into_os()?;
    Ok((dir, log))
}

/// Replay `store.log` under its lock: every complete line ([`line_body`]);
/// a torn last line (a crash or a failed write mid-append, never
/// acknowledged) is cut off; a damaged line refuses the replay
/// ([`std::io::ErrorKind::InvalidData`]: a held failure).
fn replay(data_dir: &Path) -> std::io::Result<Store> {
    use std::io::Read;
    let (dir, log) = open_store_log(data_dir)?;
    log.lock()?;
    let mut bytes = Vec::new();
    (&log).read_to_end(&mut bytes)?;
    let mut map = HashMap::new();
    let good_len = match apply_lines(&mut map, &bytes, 0) {
        Ok(len) => len,
        Err(reason) => {
            log.unlock()?;
            return Err(invalid(reason));
        }
    };
    if bytes.len() as u64 > good_len {
        log.set_len(good_len)?;
        log.sync_all()?;
    }
    log.unlock()?;
    Ok(Store {
        map,
        log,
        applied: good_len,
        dir,
        lost: None,
        lost_signal: Arc::new(tokio::sync::Notify::new()),
    })
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

    async fn execute(&self, cx: StepContext<'_, Config>) -> Result<Made<Self::Output>, StepError> {
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
        Ok(Made::new(
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

    async fn execute(&self, cx: StepContext<'_, Config>) -> Result<Made<Shared>, StepError> {
        let path = cx.data_dir.join(LOG_NAME);
        let replayed = tokio::task::spawn_blocking({
            let data_dir = cx.data_dir.to_path_buf();
            move || replay(&data_dir)
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
        Ok(Made::new("store", id, Arc::new(Mutex::new(replayed))))
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

    async fn execute(&self, cx: StepContext<'_, Config>) -> Result<Made<Self::Output>, StepError> {
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
        Ok(Made::new("listener", bound.to_string(), offered))
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

    async fn execute(&self, cx: StepContext<'_, Config>) -> Result<Made<Arc<Live>>, StepError> {
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
        Ok(Made::new("serve", "accept", live))
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
                _ => restart.push(leaf.clone()),
            }
        }
        restart
    }

    /// `steadfastctl reinit`: remove the log, under the store lock (which
    /// also proves nothing else has the store open).
    async fn wipe(&self, data_dir: &Path, _config: Option<&Config>) -> Result<(), StepError> {
        let _lock = StoreLock::acquire(data_dir).map_err(StepError::backoff)?;
        match std::fs::remove_file(data_dir.join(LOG_NAME)) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(StepError::backoff(format!("store.log: {e}"))),
        }
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
        stream, shutdown, ..
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
            // Idle too long, the client gone, or its side broken.
            Err(_) | Ok(Err(_) | Ok(Read::Closed)) => return,
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
