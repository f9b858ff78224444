//! Work that waits on the device (fsyncs, renames, directory syncs), run
//! off the runtime's workers by at most [`DEVICE_JOBS`] threads at a time.
//!
//! Every journal actor of the process sends its device work here. On a
//! multi-thread runtime it goes to one small pool of the process's own
//! (`steadfast-device` threads): a job waits in its queue while all of
//! them are busy, and a thread that finishes a job takes the next one
//! before it ever goes idle. Thus 1,000 supervisors fsyncing at once use
//! at most [`DEVICE_JOBS`] threads, round after round.
//!
//! Before, each job was a `spawn_blocking` behind a semaphore of eight
//! turns. tokio's blocking pool starts a thread whenever no idle one is
//! free, and the thread that just finished a job is not yet idle when the
//! next turn holder spawns (the more so when the CPU is contended), so the
//! pool grew past the turns (20 to 57 threads in the 1,000-supervisor
//! benchmark) and the process kept each thread's stack and allocator
//! arena (memory that does not creep). [`DEVICE_JOBS`] bounds
//! the threads; it is not a measured optimum for throughput: ext4 folds
//! fsyncs that wait together into one journal commit, so more of them
//! waiting may finish sooner. With a cap of 64 the 1,000-supervisor launch
//! ran once in 0.78 s and once in 2.58 s, against 1.66–2.99 s at 8, on a
//! disk whose fsync latency drifted all along: undecided until an A/B on a
//! quiet disk.
//!
//! On a current-thread runtime a job is still a `spawn_blocking` (behind
//! the same number of turns): only that flavour can pause its clock, and a
//! paused clock must see the job as work in flight, or it would jump to
//! the next timer (a journal timeout) while an fsync runs. tokio counts a
//! blocking task of its own pool; it cannot see a thread of ours.
//!
//! The price: the threads are the process's, not a disk's. A device that
//! hangs (a dead network mount) holds the threads its jobs took until it
//! answers; each journal actor has at most three jobs out (its append, a
//! marker note, an identity write), so supervisors on other disks in the
//! same process stall only once three of them hang on one. A job whose
//! caller went away (its runtime shut down) still runs to its end: the
//! device work it started is finished, not abandoned halfway.

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::panic::AssertUnwindSafe;
use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::runtime::{Handle, RuntimeFlavor};
use tokio::sync::Semaphore;

/// How many device jobs of the process run at once.
pub const DEVICE_JOBS: usize = 8;

/// How long a device thread with nothing to do waits before it ends (as
/// long as tokio keeps an idle blocking thread).
pub const DEVICE_KEEP_ALIVE: Duration = Duration::from_secs(10);

/// Why a device job gave no result.
#[derive(Debug, thiserror::Error)]
pub enum DeviceError {
    /// The job panicked; the message, when it had one.
    #[error("the device job panicked: {0}")]
    Panicked(String),
    /// No thread could be started to run it.
    #[error("no device thread could be started: {0}")]
    NoThread(std::io::Error),
    /// The runtime shut down before the job ran (current-thread runtimes).
    #[error("the device job was cancelled: the runtime is shutting down")]
    Cancelled,
}

/// Run `work` off the runtime's workers once one of [`DEVICE_JOBS`]
/// threads is free, and wait for it.
///
/// # Errors
/// [`DeviceError`] if `work` panicked, no thread could be started for it,
/// or (on a current-thread runtime) the runtime shut down first.
pub async fn run<T, F>(work: F) -> Result<T, DeviceError>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    if runs_inline() {
        let latency = LATENCY.with(|latency| latency.borrow_mut().as_mut().map(|draw| draw()));
        if let Some(latency) = latency.filter(|latency| !latency.is_zero()) {
            // A slow device, in the runtime's (virtual) time: the job's
            // effects land, and its answer comes, once it has passed.
            tokio::time::sleep(latency).await;
        }
        return std::panic::catch_unwind(AssertUnwindSafe(work))
            .map_err(|panic| DeviceError::Panicked(crate::panics::panic_message(panic.as_ref())));
    }
    let pooled = Handle::try_current()
        .is_ok_and(|handle| matches!(handle.runtime_flavor(), RuntimeFlavor::MultiThread));
    if pooled {
        POOL.run(work).await
    } else {
        on_blocking_pool(work).await
    }
}

thread_local! {
    /// Whether this thread's device jobs run where they are called.
    static INLINE: Cell<bool> = const { Cell::new(false) };
    /// How long each of this thread's inline device jobs takes.
    static LATENCY: RefCell<Option<Box<dyn FnMut() -> Duration>>> = const { RefCell::new(None) };
}

/// How long each device job this thread runs inline takes, drawn by
/// `latency` per job (`None`: no time at all): a simulation's slow disk,
/// in the runtime's time, which paused time makes virtual.
pub fn inline_job_latency(latency: Option<Box<dyn FnMut() -> Duration>>) {
    LATENCY.with(|cell| *cell.borrow_mut() = latency);
}

/// Run the device jobs this thread starts inline, on this thread, or (with
/// `false`) off it again: for a deterministic simulation on a
/// current-thread runtime, where a job on another thread would finish at a
/// moment no seed decides. The runtime's thread waits out each job, so
/// nothing else of that runtime runs meanwhile. A daemon never calls it.
pub fn run_inline_on_this_thread(inline: bool) {
    INLINE.with(|cell| cell.set(inline));
}

/// Whether this thread's device jobs run inline
/// ([`run_inline_on_this_thread`]): other work that would leave the thread
/// (the launch's settling) stays on it too.
pub(crate) fn runs_inline() -> bool {
    INLINE.with(Cell::get)
}

/// Blocking work that is not a device job (a read of a few files, waiting
/// out a lock): on tokio's blocking pool, or, on a thread whose device
/// jobs run inline, here (a simulation: no other thread may decide when it
/// ends, so the order in which tasks resume stays the seed's).
///
/// # Errors
/// [`DeviceError::Panicked`] if `work` panicked; [`DeviceError::Cancelled`]
/// if the runtime shut down first.
pub async fn blocking<T, F>(work: F) -> Result<T, DeviceError>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    if runs_inline() {
        return std::panic::catch_unwind(AssertUnwindSafe(work))
            .map_err(|panic| DeviceError::Panicked(crate::panics::panic_message(panic.as_ref())));
    }
    tokio::task::spawn_blocking(work).await.map_err(|error| {
        if error.is_panic() {
            DeviceError::Panicked(crate::panics::panic_message(error.into_panic().as_ref()))
        } else {
            DeviceError::Cancelled
        }
    })
}

/// Start device threads now, until `threads` of them (at most
/// [`DEVICE_JOBS`]) are alive, so the first jobs find one waiting instead
/// of waiting for one to be created and scheduled (a daemon's
/// launch). They end after [`DEVICE_KEEP_ALIVE`] with nothing to do.
/// Best effort: a thread that cannot be started is left out.
pub fn warm(threads: usize) {
    let mut state = POOL.lock();
    while state.threads < threads.min(DEVICE_JOBS) {
        if state.start_thread().is_err() {
            return;
        }
    }
}

/// The turns of the current-thread path.
static TURNS: Semaphore = Semaphore::const_new(DEVICE_JOBS);

/// `work` as a `spawn_blocking`, behind one of [`DEVICE_JOBS`] turns.
async fn on_blocking_pool<T, F>(work: F) -> Result<T, DeviceError>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    // Never closed: `acquire` cannot fail. Were it to, the work runs
    // without a turn rather than not at all.
    let _turn = TURNS.acquire().await.ok();
    tokio::task::spawn_blocking(work).await.map_err(|error| {
        if error.is_panic() {
            DeviceError::Panicked(crate::panics::panic_message(error.into_panic().as_ref()))
        } else {
            DeviceError::Cancelled
        }
    })
}

type Job = Box<dyn FnOnce() + Send>;

/// The process's device threads.
static POOL: Pool = Pool::new();

struct Pool {
    state: Mutex<PoolState>,
    /// Signalled for each job queued while a thread is idle.
    queued: Condvar,
}

struct PoolState {
    jobs: VecDeque<Job>,
    /// Threads alive.
    threads: usize,
    /// Threads waiting for a job.
    idle: usize,
}

impl Pool {
    const fn new() -> Self {
        Self {
            state: Mutex::new(PoolState {
                jobs: VecDeque::new(),
                threads: 0,
                idle: 0,
            }),
            queued: Condvar::new(),
        }
    }

    /// Jobs only run outside the lock, and a job's panic is caught inside
    /// it: the queue and counters are consistent whoever held the lock.
    fn lock(&'static self) -> MutexGuard<'static, PoolState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    async fn run<T, F>(&'static self, work: F) -> Result<T, DeviceError>
    where
        F: FnOnce() -> T + Send + 'static,
        T: Send + 'static,
    {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let job: Job = Box::new(move || {
            let outcome = std::panic::catch_unwind(AssertUnwindSafe(work)).map_err(|panic| {
                DeviceError::Panicked(crate::panics::panic_message(panic.as_ref()))
            });
            // The caller may have gone (its runtime shut down): the work
            // is done all the same.
            let _ = tx.send(outcome);
        });
        self.submit(job)?;
        // The job owns the sender until it ran: dropped unsent only if the
        // job itself was dropped, which the pool never does.
        rx.await.unwrap_or(Err(DeviceError::Cancelled))
    }

    /// Queue `job`, then wake an idle thread for it, or start one if every
    /// thread is busy and fewer than [`DEVICE_JOBS`] run; otherwise it
    /// waits for the first thread that finishes.
    fn submit(&'static self, job: Job) -> Result<(), DeviceError> {
        let mut state = self.lock();
        state.jobs.push_back(job);
        if state.idle >= state.jobs.len() {
            drop(state);
            self.queued.notify_one();
            return Ok(());
        }
        if state.threads >= DEVICE_JOBS {
            return Ok(());
        }
        match state.start_thread() {
            Ok(()) => {}
            Err(error) if state.threads == 0 => {
                // Nobody would ever run it: give it back with the reason.
                drop(state.jobs.pop_back());
                return Err(DeviceError::NoThread(error));
            }
            // A busy thread takes it once it finishes.
            Err(_) => {}
        }
        Ok(())
    }

    /// A device thread: run queued jobs until none has come for
    /// [`DEVICE_KEEP_ALIVE`].
    fn work(&'static self) {
        let mut state = self.lock();
        loop {
            if let Some(job) = state.jobs.pop_front() {
                drop(state);
                job();
                state = self.lock();
                continue;
            }
            state.idle += 1;
            let (guard, waited) = self
                .queued
                .wait_timeout(state, DEVICE_KEEP_ALIVE)
                .unwrap_or_else(PoisonError::into_inner);
            state = guard;
            state.idle -= 1;
            if waited.timed_out() && state.jobs.is_empty() {
                state.threads -= 1;
                return;
            }
        }
    }
}

impl PoolState {
    /// Start one device thread and count it (under the pool's lock).
    fn start_thread(&mut self) -> std::io::Result<()> {
        std::thread::Builder::new()
            .name("steadfast-device".into())
            .spawn(|| POOL.work())?;
        self.threads += 1;
        Ok(())
    }
}

/// Device threads alive now (for tests and benchmarks).
#[must_use]
pub fn threads() -> usize {
    POOL.lock().threads
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    fn multi_thread() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("runtime")
    }

    /// A thread that runs its device jobs inline runs them on itself (a
    /// panic still answers `Panicked`); switched off, they leave it again.
    #[test]
    fn inline_jobs_run_on_the_calling_thread_until_switched_off() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        let here = std::thread::current().id();
        run_inline_on_this_thread(true);
        let inline = rt.block_on(run(|| std::thread::current().id()));
        let panicked = rt.block_on(run(|| -> () { panic!("boom") }));
        run_inline_on_this_thread(false);
        let away = rt.block_on(run(|| std::thread::current().id()));
        assert_eq!(inline.expect("ran"), here);
        assert!(matches!(panicked, Err(DeviceError::Panicked(m)) if m == "boom"));
        assert_ne!(away.expect("ran"), here);
    }

    /// 200 jobs at once, each holding its thread a moment: never more than
    /// [`DEVICE_JOBS`] run together, every one runs, and the pool never
    /// grows past [`DEVICE_JOBS`] threads.
    #[test]
    fn a_burst_of_jobs_runs_on_at_most_device_jobs_threads() {
        let rt = multi_thread();
        let running = Arc::new(AtomicUsize::new(0));
        let most = Arc::new(AtomicUsize::new(0));
        let names = Arc::new(Mutex::new(std::collections::HashSet::new()));
        let done = rt.block_on(async {
            let mut all = tokio::task::JoinSet::new();
            for i in 0..200_usize {
                let (running, most, names) =
                    (Arc::clone(&running), Arc::clone(&most), Arc::clone(&names));
                all.spawn(run(move || {
                    let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                    most.fetch_max(now, Ordering::SeqCst);
                    names
                        .lock()
                        .expect("names")
                        .insert(std::thread::current().id());
                    std::thread::sleep(Duration::from_micros(200));
                    running.fetch_sub(1, Ordering::SeqCst);
                    i
                }));
            }
            let mut sum = 0;
            while let Some(joined) = all.join_next().await {
                sum += joined.expect("task").expect("job");
            }
            sum
        });
        assert_eq!(done, (0..200).sum::<usize>(), "every job ran once");
        assert!(most.load(Ordering::SeqCst) <= DEVICE_JOBS);
        let used = names.lock().expect("names").len();
        assert!(
            used <= DEVICE_JOBS,
            "{used} threads ran jobs; at most {DEVICE_JOBS} may"
        );
        assert!(threads() <= DEVICE_JOBS);
    }

    /// Warming starts threads, never more than [`DEVICE_JOBS`], and a job
    /// runs on them.
    #[test]
    fn warming_starts_at_most_device_jobs_threads() {
        warm(DEVICE_JOBS + 5);
        let started = threads();
        assert!(
            (1..=DEVICE_JOBS).contains(&started),
            "{started} device threads"
        );
        let rt = multi_thread();
        assert_eq!(rt.block_on(run(|| 42)).expect("job"), 42);
    }

    /// A job that panics is an error for its caller, and the thread that
    /// ran it goes on with the next job.
    #[test]
    fn a_panicking_job_is_an_error_and_the_pool_goes_on() {
        let rt = multi_thread();
        rt.block_on(async {
            let error = run(|| -> usize { panic!("the disk said no") })
                .await
                .expect_err("a panic is an error");
            assert!(
                matches!(&error, DeviceError::Panicked(m) if m == "the disk said no"),
                "{error}"
            );
            for i in 0..(2 * DEVICE_JOBS) {
                assert_eq!(run(move || i + 1).await.expect("job"), i + 1);
            }
        });
    }

    /// On a current-thread runtime a job is tokio's own blocking task: a
    /// paused clock waits for it instead of jumping to the next timer.
    #[test]
    fn a_paused_clock_waits_for_a_job_on_a_current_thread_runtime() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .start_paused(true)
            .build()
            .expect("runtime");
        rt.block_on(async {
            let job = run(|| std::thread::sleep(Duration::from_millis(50)));
            let timed = tokio::time::timeout(Duration::from_secs(5), job).await;
            assert!(
                timed.is_ok(),
                "the paused clock jumped past a 5 s timeout while the job ran"
            );
        });
    }
}
