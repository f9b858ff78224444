//! The status record, `.steadfast/status` (`spec/control-dir.md`, "The
//! status record"): the latest published snapshot, lean, as the snapshot
//! RPC answers it (without `now`), framed by
//! [`steadfast_protocol::status_record`]. `steadfastctl status` reads it
//! instead of asking the daemon, as runit's `sv status` reads its
//! `supervise/status` (issue 16).
//!
//! Invariants:
//! - Written before a snapshot version is published: the Lifecycle actor's
//!   `publish` writes it, then sends the snapshot to watchers and handles,
//!   so a reader that saw a version through the control plane never reads
//!   an older one here. The first record (version 0) is written when the
//!   supervisor is made, before any control socket is bound.
//! - Each daemon writes a file of its own: [`StatusRecord::create`] unlinks
//!   whatever had the name (a killed daemon's record, a planted link) and
//!   creates it afresh (0600, `O_EXCL`, through the control dir's
//!   descriptor, [`crate::fsx`]). A replacement's candidate so leaves its
//!   incumbent writing to a file no name reaches.
//! - One `pwrite` at offset 0 and nothing else: a shorter record leaves the
//!   tail of a longer one after it, which its length tells readers to
//!   ignore (a truncation per shrink cost an `ftruncate` in ~6 of a
//!   restart's ~14 publishes); no fsync (a cache of in-memory state: a
//!   crash leaves a record no live socket vouches for, which readers do
//!   not trust).
//! - A failed write (a full disk) fails nothing: it is logged once, the file
//!   is truncated to nothing (unlinked if even that fails) so readers fall
//!   back to the control plane, and the next publish tries again.
//!   `tests/enospc.rs::a_full_disk_leaves_the_status_record_unusable_not_the_daemon`.

use std::fs::File;
use std::os::fd::OwnedFd;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::Mutex;

use steadfast_protocol::snapshot::Snapshot;
use steadfast_protocol::status_record;

use crate::fsx::Dir;

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
    dir: Option<OwnedFd>,
    path: PathBuf,
    /// The last write failed (logged once until one succeeds).
    failed: bool,
    /// Reused buffers: the JSON body, and the framed record.
    body: Vec<u8>,
    framed: Vec<u8>,
}

impl StatusRecord {
    /// A fresh record in `dir` (the control dir), holding `snapshot`. Never
    /// fails: a record that cannot be made is logged and left out (readers
    /// then ask the daemon).
    #[must_use]
    pub fn create(dir: &Dir, snapshot: &Snapshot) -> Self {
        let path = dir.join(NAME);
        let file = match dir.create_temp(NAME) {
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
                dir: dir.fd().try_clone_to_owned().ok(),
                path,
                failed: false,
                body: Vec::new(),
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
        let Some(file) = &inner.file else {
            return;
        };
        let mut lean = snapshot.lean();
        lean.now = None;
        inner.body.clear();
        let written = serde_json::to_writer(&mut inner.body, &lean)
            .map_err(std::io::Error::other)
            .and_then(|()| {
                status_record::encode_into(&inner.body, &mut inner.framed);
                file.write_all_at(&inner.framed, 0)
            });
        match written {
            Ok(()) => {
                if std::mem::take(&mut inner.failed) {
                    tracing::info!(path = %inner.path.display(), "the status record is written again");
                }
            }
            Err(error) => inner.fail(&error),
        }
    }

    /// Remove the record at a clean exit, if the name still names this
    /// daemon's file.
    pub fn remove(&self) {
        let Ok(mut inner) = self.inner.lock() else {
            return;
        };
        if let (Some(file), Some(dir)) = (inner.file.take(), &inner.dir)
            && let (Ok(ours), Ok(named)) = (
                rustix::fs::fstat(&file),
                rustix::fs::statat(dir, NAME, rustix::fs::AtFlags::SYMLINK_NOFOLLOW),
            )
            && (ours.st_dev, ours.st_ino) == (named.st_dev, named.st_ino)
        {
            let _ = rustix::fs::unlinkat(dir, NAME, rustix::fs::AtFlags::empty());
        }
    }
}

impl Inner {
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
                let _ = rustix::fs::unlinkat(dir, NAME, rustix::fs::AtFlags::empty());
            }
        }
    }
}
