//! `status` and `probe ready` from the daemon's status record
//! (`.steadfast/status`, `spec/control-dir.md`, "The status record"),
//! without a runtime, without a round trip and without waking the daemon
//! (no connect: an accept is two context switches of the daemon's), as
//! runit's `sv status` reads `supervise/status`.
//!
//! The record is trusted only when all of these hold, else the command asks
//! the daemon as it always did (silently: that path is correct, only
//! slower, and says "not running" when nobody listens):
//! - the command is `status` (without `--history`) or `probe ready`, over
//!   the Unix socket (no `--tcp`/`--tls` flags), and
//!   `STEADFASTCTL_NO_RECORD` is not set;
//! - the control socket's file passes every check a dial makes before it
//!   connects (`steadfast::control::socket_file`: its directory's
//!   and its own owner and mode, no link followed, the trusted-uid rule);
//! - `status` in that directory, opened `O_NOFOLLOW` through the checked
//!   directory's descriptor, is a regular file with one link, owned by the
//!   socket file's owner (so by a trusted uid), writable by no one else (a
//!   client that may not read a 0600 file falls back);
//! - its header and checksums hold (a torn read is read again, twice);
//! - its writer block names that very socket file (`(st_dev, st_ino)`): a
//!   writer names the socket only while it serves it, so a replaced
//!   incumbent's record, a killed daemon's (whose socket a successor
//!   replaced) or one written before the socket was bound is not trusted;
//! - the writer's pid is alive *as the same process*: `/proc/<pid>/stat`
//!   gives the start time the writer recorded (a killed daemon's pid reused
//!   by another process has another start time), and not as a zombie;
//! - the snapshot names the writer's pid.
//!
//! When the socket file's own checks fail (no data dir or control dir yet,
//! no socket, not trusted), there is no daemon to ask: the command says
//! what a dial would say at that moment (the very error, which ends a
//! dial), without a runtime. A poll of a daemon that is still starting, or
//! of none, costs about what `sv status` of a service without `supervise/`
//! does.
//!
//! A daemon killed with its socket file left in place and its pid not
//! reused fails the start-time rule; one alive but no longer answering
//! (stopped, wedged) is shown as it last published, as `sv status` shows
//! what `runsv` last wrote.
//!
//! `now` is this machine's clock when the record is read (the RPC path
//! stamps the daemon's): the one field in which the two answers differ.
//! `probe live` keeps asking the daemon: it is meant to catch a daemon that
//! no longer answers, which a record cannot show.
//!
//! Checked by `tests/it/status_record.rs`.

use std::io::Read as _;
use std::os::fd::OwnedFd;
use std::path::Path;

use rustix::fs::{FileType, Mode, OFlags};
use steadfast::control::{ClientError, SocketFile};
use steadfast::protocol::snapshot::Snapshot;
use steadfast::protocol::status_record::{self, HEADER_LEN, MAX_BODY_LEN, RecordError, Writer};

/// Set (to anything) in a command's environment: never read the record.
pub(super) const NO_RECORD_ENV: &str = "STEADFASTCTL_NO_RECORD";

/// The record's name beside the control socket.
const NAME: &str = "status";

/// How many times a torn read is read again before giving up.
const RETRIES: usize = 2;

/// What the status record beside a control socket says.
pub(super) enum Read {
    /// The snapshot in it, trusted, with `now` stamped from this machine's
    /// clock.
    Trusted(Box<Snapshot>),
    /// No daemon to ask: the socket file's checks failed (no directory, no
    /// socket, not trusted) with an error that ends a dial, so a dial made
    /// now would answer this very error (`ClientError::ends_a_dial`). A
    /// poll of a daemon that is not up yet costs no runtime.
    NoDaemon(ClientError),
    /// Not to be trusted (see the module's rules), or not read
    /// ([`NO_RECORD_ENV`]): ask the daemon.
    Ask,
}

/// The status record beside the control socket `socket`.
pub(super) fn read(socket: &Path) -> Read {
    if std::env::var_os(NO_RECORD_ENV).is_some() {
        return Read::Ask;
    }
    match steadfast::control::socket_file(socket) {
        Ok(file) => trusted(&file).map_or(Read::Ask, |s| Read::Trusted(Box::new(s))),
        Err(error) if error.ends_a_dial() => Read::NoDaemon(error),
        Err(_) => Read::Ask,
    }
}

/// The snapshot in the record beside the checked socket `file`, when it is
/// to be trusted.
fn trusted(file: &SocketFile) -> Option<Snapshot> {
    for _ in 0..=RETRIES {
        let bytes = read_file(&file.dir, file.uid)?;
        match status_record::decode(&bytes) {
            Ok((writer, body)) => {
                if writer.socket != Some(file.id) || !alive(&writer) {
                    return None;
                }
                let mut snapshot: Snapshot = serde_json::from_slice(body).ok()?;
                if snapshot.pid != writer.pid {
                    return None;
                }
                snapshot.now = Some(steadfast::protocol::Timestamp::from_millis(
                    crate::render::now_ms(),
                ));
                return Some(snapshot);
            }
            // A write in progress: read again.
            Err(RecordError::Short | RecordError::Checksum) => {}
            Err(RecordError::BadMagic | RecordError::TooLong) => return None,
        }
    }
    None
}

/// Whether the writer's pid names the process that wrote the record, not
/// exited: it has the start time the writer recorded, and is no zombie.
fn alive(writer: &Writer) -> bool {
    if writer.pid == 0 {
        return false;
    }
    std::fs::read(format!("/proc/{}/stat", writer.pid)).is_ok_and(|stat| {
        !status_record::exited(&stat)
            && status_record::start_time_of(&stat) == Some(writer.start_time)
    })
}

/// The record's bytes, when it is a file the socket's owner (`uid`) owns
/// alone.
fn read_file(dir: &OwnedFd, uid: u32) -> Option<Vec<u8>> {
    let fd = rustix::fs::openat(
        dir,
        NAME,
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::NONBLOCK | OFlags::NOCTTY,
        Mode::empty(),
    )
    .ok()?;
    let stat = rustix::fs::fstat(&fd).ok()?;
    let trusted = FileType::from_raw_mode(stat.st_mode) == FileType::RegularFile
        && stat.st_uid == uid
        && stat.st_mode & 0o022 == 0
        && stat.st_nlink == 1;
    if !trusted {
        return None;
    }
    let cap = (HEADER_LEN + MAX_BODY_LEN) as u64;
    let size = usize::try_from(stat.st_size)
        .ok()?
        .min(HEADER_LEN + MAX_BODY_LEN);
    let mut bytes = Vec::with_capacity(size + 1);
    std::fs::File::from(fd)
        .take(cap)
        .read_to_end(&mut bytes)
        .ok()?;
    Some(bytes)
}
