//! The data-dir locks of the process, checked by one thread.
//!
//! Each running supervisor must notice when its lock stops guarding its data
//! dir ([`ControlDir::check_lock`]). A check is a few `stat`s, which may wait
//! on the device (a network mount), so it cannot run on a runtime worker.
//! A blocking-pool thread per supervisor every [`LOCK_CHECK_PERIOD`] would
//! cost each supervisor a timer wake-up and a thread hand-off a second at
//! rest, and their bursts would grow the blocking pool. So one thread per
//! process sweeps every watched lock each period, and is gone once nothing
//! is watched. The registry is process-wide on purpose, and holds nothing
//! a supervisor could see of another: an entry is one supervisor's weak
//! reference to its own control directory and its own `lost` callback.
//!
//! The period is wall-clock time (`std::thread::sleep`), not the runtime's
//! clock: a paused test clock neither speeds the checks up nor holds them.
//!
//! The price of one thread: a check that hangs (a dead network mount under
//! one data dir) holds up the sweep, so the other supervisors of the process
//! notice a lost lock only once it returns. Nothing is acknowledged in the
//! meantime on a lost lock either way: the journal checks the lock itself
//! before every append.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::time::Duration;

use crate::control_dir::ControlDir;

/// How often every watched lock is checked.
pub const LOCK_CHECK_PERIOD: Duration = Duration::from_secs(1);

/// What a watcher is told when its lock is lost: why, in words.
type Lost = Box<dyn FnOnce(String) + Send>;

/// Watches one data-dir lock until dropped.
#[derive(Debug)]
#[must_use = "the lock is watched only while the LockWatch lives"]
pub(crate) struct LockWatch {
    id: u64,
}

/// Watch `control`'s lock: every [`LOCK_CHECK_PERIOD`], until the returned
/// guard is dropped, check it on the process's lock-watch thread; on the
/// first failed check, call `lost` with the reason (once) and stop watching.
///
/// A watch thread that cannot be started is a check that cannot run: `lost`
/// is called at once, saying so, as for a lock found lost.
pub(crate) fn watch(
    control: &Arc<ControlDir>,
    lost: impl FnOnce(String) + Send + 'static,
) -> LockWatch {
    let mut watched = lock();
    let id = watched.next_id;
    watched.next_id += 1;
    if !watched.out {
        let started = std::thread::Builder::new()
            .name("steadfast-lock-watch".into())
            .spawn(sweep);
        if let Err(error) = started {
            drop(watched);
            lost(format!(
                "the lock could not be watched: its thread did not start: {error}"
            ));
            return LockWatch { id };
        }
        watched.out = true;
    }
    watched.entries.push(Entry {
        id,
        control: Arc::downgrade(control),
        lost: Box::new(lost),
    });
    LockWatch { id }
}

impl Drop for LockWatch {
    fn drop(&mut self) {
        lock().entries.retain(|entry| entry.id != self.id);
    }
}

/// Every lock watched in the process.
static WATCHED: Mutex<Watched> = Mutex::new(Watched {
    entries: Vec::new(),
    next_id: 0,
    out: false,
});

struct Watched {
    entries: Vec<Entry>,
    next_id: u64,
    /// Whether the sweeping thread is out (it leaves once `entries` is
    /// empty, saying so here under the same lock a new watch takes).
    out: bool,
}

struct Entry {
    id: u64,
    /// Weak: a watch never keeps a control directory (and its lock) open.
    control: Weak<ControlDir>,
    lost: Lost,
}

fn lock() -> MutexGuard<'static, Watched> {
    WATCHED.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The watch thread: every period, check each watched lock (outside the
/// registry's lock: a slow device holds up the sweep, never a new watch or
/// a drop); leave when nothing is watched.
fn sweep() {
    loop {
        std::thread::sleep(LOCK_CHECK_PERIOD);
        let due: Vec<(u64, Weak<ControlDir>)> = {
            let mut watched = lock();
            if watched.entries.is_empty() {
                // A burst of supervisors gone: their room goes too.
                watched.entries = Vec::new();
                watched.out = false;
                return;
            }
            watched
                .entries
                .iter()
                .map(|entry| (entry.id, Weak::clone(&entry.control)))
                .collect()
        };
        for (id, control) in due {
            let Some(control) = control.upgrade() else {
                continue;
            };
            let Err(error) = control.check_lock() else {
                continue;
            };
            drop(control);
            let lost = {
                let mut watched = lock();
                let at = watched.entries.iter().position(|entry| entry.id == id);
                at.map(|at| watched.entries.swap_remove(at).lost)
            };
            // Dropped meanwhile: nobody is left to tell. A teller that
            // panics must not take the sweep (and every other watch) down.
            if let Some(lost) = lost {
                let reason = error.to_string();
                let told = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| lost(reason)));
                if told.is_err() {
                    tracing::error!("telling a supervisor its data-dir lock was lost panicked");
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;

    fn opened(dir: &std::path::Path) -> Arc<ControlDir> {
        Arc::new(ControlDir::open(dir).expect("open control dir"))
    }

    /// A control dir opened on a fresh data dir (the temp dir holds it).
    fn fresh() -> (tempfile::TempDir, std::path::PathBuf, Arc<ControlDir>) {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = tmp.path().join("data");
        let control = opened(&dir);
        (tmp, dir, control)
    }

    /// Nothing more arrives on `rx` over three sweeps.
    fn quiet_for_sweeps<T: std::fmt::Debug>(rx: &mpsc::Receiver<T>, why: &str) {
        let more = rx.recv_timeout(LOCK_CHECK_PERIOD * 3);
        assert!(more.is_err(), "{why}: {more:?}");
    }

    /// A watch of `control` whose reports arrive on the receiver.
    fn watch_reported(control: &Arc<ControlDir>) -> (LockWatch, mpsc::Receiver<String>) {
        let (tx, rx) = mpsc::channel();
        let watch = watch(control, move |reason| {
            let _ = tx.send(reason);
        });
        (watch, rx)
    }

    #[test]
    fn only_the_lost_lock_is_reported_and_once() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let (kept_dir, lost_dir) = (tmp.path().join("kept"), tmp.path().join("lost"));
        let (kept, gone) = (opened(&kept_dir), opened(&lost_dir));
        let (tx, rx) = mpsc::channel();
        let tx2 = tx.clone();
        let _kept = watch(&kept, move |reason| {
            let _ = tx.send(("kept", reason));
        });
        let _gone = watch(&gone, move |reason| {
            let _ = tx2.send(("lost", reason));
        });
        std::fs::remove_dir_all(&lost_dir).expect("rm -rf the data dir");
        let (which, reason) = rx
            .recv_timeout(Duration::from_secs(30))
            .expect("the removed data dir's lock is reported lost");
        assert_eq!(which, "lost", "{reason}");
        assert!(
            reason.contains("lock"),
            "the reason names the lock: {reason}"
        );
        // Neither the kept lock nor the lost one again.
        quiet_for_sweeps(&rx, "only the lost lock, and only once");
    }

    #[test]
    fn a_dropped_watch_reports_nothing() {
        let (_tmp, dir, control) = fresh();
        let (watch, rx) = watch_reported(&control);
        drop(watch);
        std::fs::remove_dir_all(&dir).expect("rm -rf the data dir");
        quiet_for_sweeps(&rx, "a dropped watch reports nothing");
    }

    #[test]
    fn a_watch_does_not_hold_the_lock() {
        let (_tmp, dir, control) = fresh();
        let _watch = watch(&control, |_| {});
        drop(control);
        ControlDir::open(&dir).expect("the watched lock is freed with its control dir");
    }

    #[test]
    fn a_teller_that_panics_does_not_end_the_watch() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let (first, second) = (tmp.path().join("first"), tmp.path().join("second"));
        let panicking = opened(&first);
        let _panicking = watch(&panicking, |_| panic!("a teller that panics"));
        std::fs::remove_dir_all(&first).expect("rm -rf the first data dir");
        // Registered second, so swept after the panicking one, in this
        // sweep or a later one.
        let told = opened(&second);
        let (_told, rx) = watch_reported(&told);
        std::fs::remove_dir_all(&second).expect("rm -rf the second data dir");
        rx.recv_timeout(Duration::from_secs(30))
            .expect("the sweep goes on after a teller panicked");
    }
}
