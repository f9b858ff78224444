//! The status record, `.steadfast/status` (`spec/control-dir.md`, "The
//! status record"): the latest published snapshot, lean, as the snapshot
//! RPC answers it (without `now`), framed by
//! [`steadfast_protocol::status_record`]. `steadfastctl status` reads it
//! instead of asking the daemon, as runit's `sv status` reads its
//! `supervise/status`.
//!
//! Invariants:
//! - Written before a snapshot version is published: the Lifecycle actor's
//!   `publish` writes it, then sends the snapshot to watchers and handles,
//!   so a reader that saw a version through the control plane never reads
//!   an older one here. The first record (version 0) is written when the
//!   supervisor is made, before any control socket is bound.
//! - Its writer block ([`status_record::Writer`]) names this process (its
//!   pid and start time, read once from `/proc/self/stat`) and the control
//!   socket file it serves: set by [`StatusRecord::set_socket`] once the
//!   socket is bound under its name beside the record (only that file: a
//!   socket bound elsewhere is not claimed), and cleared by
//!   [`StatusRecord::clear_socket`] when the server lets it go (closed,
//!   dropped at a handover), each a rewrite. A reader trusts the record
//!   only while that socket file is the one it names, so a successor's
//!   socket never vouches for it; a process whose start time cannot be read
//!   keeps no record. `the_writer_names_the_socket_beside_the_record_only`
//!   (below), `tests/it/status_record.rs`.
//! - Each daemon writes a file of its own: [`StatusRecord::create`] unlinks
//!   whatever had the name (a killed daemon's record, a planted link) and
//!   creates it afresh (0600, `O_EXCL`, through the control dir's
//!   descriptor, [`crate::fsx`]). A replacement's candidate so leaves its
//!   incumbent writing to a file no name reaches.
//! - One `pwrite` at offset 0 and nothing else: a shorter record leaves the
//!   tail of a longer one after it, which its length tells readers to
//!   ignore (a truncation per shrink cost an `ftruncate` in ~6 of a
//!   restart's ~14 publishes); no fsync (a cache of in-memory state: a
//!   crash leaves a record whose writer is not alive, which readers do
//!   not trust).
//! - A failed write (a full disk) fails nothing: it is logged once, the file
//!   is truncated to nothing (unlinked if even that fails) so readers fall
//!   back to the control plane, and the next publish tries again.
//!   `tests/it/enospc.rs::a_full_disk_leaves_the_status_record_unusable_not_the_daemon`.

use std::path::PathBuf;
use std::sync::Mutex;

use steadfast_protocol::snapshot::Snapshot;
use steadfast_protocol::status_record::{self, Writer};

use crate::fsx::{Dir, File};

/// The record's name in the control dir.
pub const NAME: &str = "status";

/// The writer of one daemon's status record.
#[derive(Debug)]
pub struct StatusRecord {
    inner: Mutex<Inner>,
}

#[derive(Debug)]
struct Inner {
    /// The record, while this daemon keeps one.
    file: Option<File>,
    /// The control dir, to unlink the record through.
    dir: Option<Dir>,
    path: PathBuf,
    /// The last write failed (logged once until one succeeds).
    failed: bool,
    /// The writer block: this process, and the socket it serves.
    writer: Writer,
    /// The last snapshot's JSON body (empty before the first), which a
    /// change of the writer block frames again; and the framed record (a
    /// reused buffer).
    body: Vec<u8>,
    /// With the planted defect `planted::Defect::StatusRecordLags` only: the
    /// body of the latest snapshot, held back until the next publish.
    held_back: Vec<u8>,
    framed: Vec<u8>,
}

/// This process's start time (`/proc/self/stat`'s field 22), read once.
fn own_start_time() -> Option<u64> {
    static START: std::sync::OnceLock<Option<u64>> = std::sync::OnceLock::new();
    *START.get_or_init(|| {
        std::fs::read("/proc/self/stat")
            .ok()
            .and_then(|stat| status_record::start_time_of(&stat))
    })
}

impl StatusRecord {
    /// A fresh record in `dir` (the control dir), holding `snapshot`. Never
    /// fails: a record that cannot be made is logged and left out (readers
    /// then ask the daemon).
    #[must_use]
    pub fn create(dir: &Dir, snapshot: &Snapshot) -> Self {
        let path = dir.join(NAME);
        let start_time = own_start_time();
        let created = start_time
            .ok_or_else(|| {
                std::io::Error::other("this process's start time is not in /proc/self/stat")
            })
            .and_then(|_| dir.create_temp(NAME).map_err(std::io::Error::other));
        let file = match created {
            Ok(file) => Some(file),
            Err(error) => {
                tracing::warn!(%error, "no status record: `steadfastctl status` asks the daemon");
                // A stale record must not outlive its daemon's successor.
                let _ = dir.unlink(NAME);
                None
            }
        };
        let record = Self {
            inner: Mutex::new(Inner {
                file,
                dir: dir.try_clone().ok(),
                path,
                failed: false,
                writer: Writer {
                    pid: snapshot.pid,
                    start_time: start_time.unwrap_or(0),
                    socket: None,
                },
                body: Vec::new(),
                held_back: Vec::new(),
                framed: Vec::new(),
            }),
        };
        record.write(snapshot);
        record
    }

    /// Rewrite the record to hold `snapshot` (lean, without `now`).
    pub fn write(&self, snapshot: &Snapshot) {
        let Ok(mut inner) = self.inner.lock() else {
            return;
        };
        let inner = &mut *inner;
        if inner.file.is_none() {
            return;
        }
        let mut lean = snapshot.lean();
        lean.now = None;
        inner.body.clear();
        if let Err(error) = serde_json::to_writer(&mut inner.body, &lean) {
            inner.body.clear();
            inner.fail(&std::io::Error::other(error));
            return;
        }
        if crate::planted::planted(crate::planted::Defect::StatusRecordLags) {
            // The snapshot published before this one is written; this one
            // waits for the next publish.
            std::mem::swap(&mut inner.body, &mut inner.held_back);
        }
        inner.put();
    }

    /// The control socket `(st_dev, st_ino)` (of its path, not of its
    /// descriptor) is served now: name it in the writer block and rewrite
    /// the record, if it is the file named [`SOCKET_NAME`] beside the
    /// record (checked here, `AT_SYMLINK_NOFOLLOW`); a socket served
    /// anywhere else leaves the record as it is.
    ///
    /// [`SOCKET_NAME`]: crate::control_dir::SOCKET_NAME
    pub fn set_socket(&self, socket: (u64, u64)) {
        let Ok(mut inner) = self.inner.lock() else {
            return;
        };
        let beside = inner
            .dir
            .as_ref()
            .and_then(|dir| dir.stat(crate::control_dir::SOCKET_NAME).ok().flatten());
        if beside.is_some_and(|meta| meta.id() == socket) {
            inner.writer.socket = Some(socket);
            inner.put();
        }
    }

    /// The control socket `socket` is no longer served (closed, or let go
    /// at a handover): if the writer block names it, name none and rewrite
    /// the record, so readers ask the daemon (or find none).
    pub fn clear_socket(&self, socket: (u64, u64)) {
        let Ok(mut inner) = self.inner.lock() else {
            return;
        };
        if inner.writer.socket == Some(socket) {
            inner.writer.socket = None;
            inner.put();
        }
    }

    /// Make the record ours again under its name, after a replacement's
    /// candidate that did not take over made its own there (and removed or
    /// left it when it stopped): if the name no longer reaches this
    /// daemon's file, whatever has the name is unlinked and the record
    /// created afresh (0600, `O_EXCL`, through the control dir's
    /// descriptor) with the last body and no socket (the server names its
    /// socket again once it is bound). A record that cannot be made is
    /// logged and left out, as at [`StatusRecord::create`].
    pub fn reclaim(&self) {
        let Ok(mut inner) = self.inner.lock() else {
            return;
        };
        let inner = &mut *inner;
        let (Some(dir), Some(_)) = (&inner.dir, own_start_time()) else {
            return;
        };
        let named = dir.stat(NAME).ok().flatten();
        let ours = inner.file.as_ref().and_then(|f| f.meta().ok());
        if let (Some(named), Some(ours)) = (named, ours)
            && named.id() == ours.id()
        {
            return;
        }
        inner.writer.socket = None;
        match dir.create_temp(NAME) {
            Ok(file) => {
                inner.file = Some(file);
                inner.put();
            }
            Err(error) => {
                inner.file = None;
                tracing::warn!(%error, "the status record could not be made again: `steadfastctl status` asks the daemon");
            }
        }
    }

    /// The writer block as it stands (for tests and logs).
    #[must_use]
    pub fn writer(&self) -> Option<Writer> {
        self.inner.lock().ok().map(|inner| inner.writer)
    }

    /// Remove the record at a clean exit, if the name still names this
    /// daemon's file.
    pub fn remove(&self) {
        let Ok(mut inner) = self.inner.lock() else {
            return;
        };
        if let (Some(file), Some(dir)) = (inner.file.take(), &inner.dir)
            && let (Ok(ours), Ok(Some(named))) = (file.meta(), dir.stat(NAME))
            && ours.id() == named.id()
        {
            let _ = dir.unlink(NAME);
        }
    }
}

impl Inner {
    /// Frame the last body with the writer block and write it at offset 0
    /// (nothing before the first body).
    fn put(&mut self) {
        let Self {
            file,
            writer,
            body,
            framed,
            ..
        } = self;
        let Some(file) = file else {
            return;
        };
        if body.is_empty() {
            return;
        }
        status_record::encode_into(writer, body, framed);
        match file.write_all_at(framed, 0) {
            Ok(()) => {
                if std::mem::take(&mut self.failed) {
                    tracing::info!(path = %self.path.display(), "the status record is written again");
                }
            }
            Err(error) => self.fail(&error),
        }
    }

    /// A write failed: readers must not find a record (truncated to
    /// nothing, else unlinked and given up), logged once per run of failures.
    fn fail(&mut self, error: &std::io::Error) {
        if !std::mem::replace(&mut self.failed, true) {
            tracing::warn!(
                path = %self.path.display(),
                %error,
                "the status record could not be written: `steadfastctl status` asks the daemon \
                 until it can"
            );
        }
        let emptied = self
            .file
            .as_ref()
            .is_some_and(|file| file.set_len(0).is_ok());
        if !emptied {
            self.file = None;
            if let Some(dir) = &self.dir {
                let _ = dir.unlink(NAME);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use steadfast_protocol::Timestamp;
    use steadfast_protocol::lifecycle::{LifecycleState, PendingApply};
    use steadfast_protocol::snapshot::PreviousRun;

    fn snapshot() -> Snapshot {
        Snapshot {
            schema: steadfast_protocol::snapshot::SCHEMA,
            version: 0,
            now: None,
            lifecycle: LifecycleState::Resolving {
                since: Timestamp(9),
            },
            attempts: Vec::new(),
            previous_run: PreviousRun::Crashed {
                pid: None,
                attempt: None,
            },
            identity: None,
            epoch: 0,
            streak: 0,
            hold: false,
            pending: PendingApply::InSync,
            pid: std::process::id(),
            error: None,
            errors: Vec::new(),
            budget: None,
            children: Vec::new(),
        }
    }

    fn on_disk(dir: &std::path::Path) -> Writer {
        let bytes = std::fs::read(dir.join(NAME)).expect("the record");
        status_record::decode(&bytes).expect("a whole record").0
    }

    /// The writer block names this process, and a socket only while it is
    /// the file `control.sock` beside the record; clearing names none.
    #[test]
    fn the_writer_names_the_socket_beside_the_record_only() {
        use std::os::unix::fs::MetadataExt;
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = Dir::open_data_dir(tmp.path(), false).expect("dir");
        let record = StatusRecord::create(&dir, &snapshot());
        let writer = on_disk(tmp.path());
        let stat = std::fs::read("/proc/self/stat").expect("own stat");
        assert_eq!(writer.pid, std::process::id());
        assert_eq!(Some(writer.start_time), status_record::start_time_of(&stat));
        assert_eq!(writer.socket, None, "no socket before the bind");

        let socket = tmp.path().join(crate::control_dir::SOCKET_NAME);
        let elsewhere = tmp.path().join("other.sock");
        let _listener = std::os::unix::net::UnixListener::bind(&socket).expect("bind");
        let _other = std::os::unix::net::UnixListener::bind(&elsewhere).expect("bind");
        let id = |path: &std::path::Path| {
            let meta = std::fs::symlink_metadata(path).expect("stat");
            (meta.dev(), meta.ino())
        };
        record.set_socket(id(&elsewhere));
        assert_eq!(on_disk(tmp.path()).socket, None, "not beside the record");
        record.set_socket(id(&socket));
        assert_eq!(on_disk(tmp.path()).socket, Some(id(&socket)));
        assert_eq!(record.writer().and_then(|w| w.socket), Some(id(&socket)));
        // A publish keeps the socket.
        record.write(&Snapshot {
            version: 1,
            ..snapshot()
        });
        assert_eq!(on_disk(tmp.path()).socket, Some(id(&socket)));
        // Another socket's end leaves it named; its own end does not.
        record.clear_socket(id(&elsewhere));
        assert_eq!(on_disk(tmp.path()).socket, Some(id(&socket)));
        record.clear_socket(id(&socket));
        assert_eq!(on_disk(tmp.path()).socket, None);
        let bytes = std::fs::read(tmp.path().join(NAME)).expect("the record");
        let body = status_record::decode(&bytes).expect("whole").1;
        let read: Snapshot = serde_json::from_slice(body).expect("a snapshot");
        assert_eq!(read.version, 1, "rewritten with the last body");
    }

    /// A record whose name another daemon took (a replacement's candidate
    /// made its own there, or removed it) is made again under the name,
    /// with the last body, 0600 and no socket; one still under its name is
    /// left as it is.
    #[test]
    fn a_taken_name_is_reclaimed_with_the_last_body() {
        use std::os::unix::fs::{MetadataExt, PermissionsExt};
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = Dir::open_data_dir(tmp.path(), false).expect("dir");
        let record = StatusRecord::create(&dir, &snapshot());
        record.write(&Snapshot {
            version: 7,
            ..snapshot()
        });
        let path = tmp.path().join(NAME);
        let ino = |path: &std::path::Path| std::fs::symlink_metadata(path).expect("stat").ino();
        let ours = ino(&path);
        record.reclaim();
        assert_eq!(ino(&path), ours, "still ours: not made again");

        for taken in [true, false] {
            std::fs::remove_file(&path).expect("unlink");
            if taken {
                std::fs::write(&path, b"another daemon's record").expect("plant");
            }
            record.reclaim();
            let meta = std::fs::symlink_metadata(&path).expect("made again");
            assert_eq!(meta.permissions().mode() & 0o777, 0o600);
            let bytes = std::fs::read(&path).expect("the record");
            let (writer, body) = status_record::decode(&bytes).expect("whole");
            assert_eq!(writer.pid, std::process::id());
            assert_eq!(writer.socket, None);
            let read: Snapshot = serde_json::from_slice(body).expect("a snapshot");
            assert_eq!(read.version, 7, "taken = {taken}");
            // Publishes go to the new file.
            record.write(&Snapshot {
                version: 8,
                ..snapshot()
            });
            let bytes = std::fs::read(&path).expect("the record");
            let read: Snapshot =
                serde_json::from_slice(status_record::decode(&bytes).expect("whole").1)
                    .expect("a snapshot");
            assert_eq!(read.version, 8);
            record.write(&Snapshot {
                version: 7,
                ..snapshot()
            });
        }
    }
}
