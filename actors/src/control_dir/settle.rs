//! What is not durable yet: the names created in the control directory that
//! no directory fsync has covered ([`UnsyncedNames`]), and a launch's
//! durability work left to run beside it ([`Settling`]) on the process's
//! one settling thread, which any waiter may run first.
use super::*;

/// Names created in the control directory (`lock`, `journal`) that no
/// fsync of the directory has made durable yet, and the directory to fsync.
/// The next fsync of the control directory covers them: at open that is the
/// `holding` run marker's; [`JournalFile::append`] fsyncs the directory
/// itself before it acknowledges anything if none has happened by then.
/// Names are only created at open, before anything runs concurrently, and
/// `pending` is cleared only once an fsync that began after them returned
/// (an fsync in flight elsewhere does not clear it early).
///
/// The control directory's own name, in the data dir, is pending the
/// same way at every launch (`parent`; the launch that created it may have
/// died before making it durable): made durable by the same fsyncs, after the control
/// directory's. And the launch's `holding` marker may still be settling on
/// the process's settling thread ([`ControlDir::write_run_settling`]): every fsync
/// here, every marker write and every journal acknowledgement waits for it
/// first ([`Settling`]).
#[derive(Debug, Clone)]
pub(super) struct UnsyncedNames {
    pub(super) dir: Arc<Dir>,
    pub(super) pending: Arc<AtomicBool>,
    /// The data dir, while the name `.steadfast` in it is not durable.
    pub(super) parent: Arc<std::sync::Mutex<Option<Dir>>>,
    /// The launch's durability work, queued or running beside it.
    pub(super) settling: Arc<Settling>,
    /// Every fsync the control directory makes outside journal appends.
    pub(super) fsyncs: Arc<AtomicU64>,
}

impl UnsyncedNames {
    /// Settle the launch's durability work first ([`Settling::wait`]).
    pub(super) fn settled(&self) -> Result<(), FsError> {
        self.settling.wait(&self.dir)
    }

    /// Whether a name waits for a directory fsync: one made in the
    /// control directory, or the control directory's own (and the data
    /// dir's) when no clean stop proved them durable.
    pub(super) fn dirs_pending(&self) -> bool {
        self.pending.load(Ordering::SeqCst) || self.parent_pending()
    }

    /// fsync the directory if a name is pending.
    pub(super) fn sync_if_pending(&self) -> Result<(), FsError> {
        self.settling.wait(&self.dir)?;
        if self.dirs_pending() {
            self.sync()?;
        }
        Ok(())
    }

    /// fsync the directory; once it returned, nothing is pending.
    pub(super) fn sync(&self) -> Result<(), FsError> {
        self.settling.wait(&self.dir)?;
        self.sync_settled()
    }

    /// [`Self::sync`], for the settling job itself (it must not wait
    /// for itself).
    pub(super) fn sync_settled(&self) -> Result<(), FsError> {
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
            // And the data dir's own name, which a launch that created it
            // and then failed (or was killed) before this fsync may have
            // left as it did `.steadfast`'s.
            self.fsyncs.fetch_add(1, Ordering::Relaxed);
            crate::fsx::sync_parent_of(data.path())?;
            *parent = None;
        }
        Ok(())
    }

    pub(super) fn parent_pending(&self) -> bool {
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
/// running. Its outcome is kept: after a failure, whether the names and
/// the marker are on disk is unknown, so nothing may be acknowledged over
/// this control directory until the next waiter has made them durable
/// anew ([`SettleRetry`]: the marker written again whole, then the
/// directories fsynced); while that fails, every waiter is told.
#[derive(Default)]
pub(super) struct Settling {
    pub(super) turn: std::sync::Mutex<Settle>,
    /// Signalled when a running job ends.
    pub(super) ended: std::sync::Condvar,
    /// What makes the launch's work durable anew after it failed.
    pub(super) retry: std::sync::OnceLock<SettleRetry>,
}

/// A settling job's state.
#[derive(Default)]
pub(super) enum Settle {
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

pub(super) type SettleJob = Box<dyn FnOnce() -> Result<(), String> + Send>;

/// A settling job done again from the start, after it failed: never an
/// fsync retried over pages a failed one may have dropped, always new
/// writes with their own fsyncs.
pub(super) type SettleRetry = Arc<dyn Fn() -> Result<(), String> + Send + Sync>;

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
    /// waiter takes it first; `retry` does it anew if it fails. The caller
    /// holds the turn: nothing else is out.
    pub(super) fn queue(self: &Arc<Self>, job: SettleJob, retry: SettleRetry) {
        let _ = self.retry.set(retry);
        *self.lock() = Settle::Queued(job);
        if crate::device::runs_inline() {
            // A simulation's thread: run now, where a seed decides when.
            self.run_queued();
            return;
        }
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
        let job: SettleJob = match std::mem::replace(&mut *turn, Settle::Running) {
            Settle::Queued(job) => job,
            Settle::Failed(cause) => match self.retry.get() {
                Some(retry) => {
                    let retry = Arc::clone(retry);
                    tracing::warn!(%cause, "making the launch's holding marker durable again");
                    Box::new(move || retry())
                }
                None => {
                    *turn = Settle::Failed(cause);
                    return;
                }
            },
            other => {
                *turn = other;
                return;
            }
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
    pub(super) fn unsettled(&self) -> bool {
        self.turn
            .try_lock()
            .map_or(true, |turn| !matches!(*turn, Settle::Settled))
    }

    /// Settle first: run the job if it is still queued, wait for it if it
    /// is running, do it anew if it failed before; a failure (of the job
    /// or of its retry now) is an error naming `dir`.
    pub(super) fn wait(&self, dir: &Dir) -> Result<(), FsError> {
        let mut turn = self.lock();
        let mut retried = false;
        loop {
            match &*turn {
                Settle::Settled => return Ok(()),
                Settle::Failed(_) if !retried && self.retry.get().is_some() => {
                    retried = true;
                    self.run(turn);
                    turn = self.lock();
                }
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
