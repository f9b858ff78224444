//! Work that waits on the device (fsyncs, renames, directory syncs, the
//! lock check), run on the process's device threads: at most
//! [`DEVICE_JOBS`], started as jobs need them, each ended after ten idle
//! seconds.
//!
//! Every journal actor of the process sends its device work here, and every
//! Root its lock check. Tokio's blocking pool starts a thread whenever no
//! idle one is free at the moment a job is spawned and keeps it ten seconds
//! after; a bound on the jobs in flight (a semaphore of 8 turns, before
//! these threads) did not bound the threads: a turn is handed on when the
//! job's task has its result, before the thread that ran it is idle again,
//! so 1,000 supervisors' fsyncs and lock checks grew the pool to 80–106
//! threads, each with its stack and allocator arena, a high-water mark the
//! process then kept, round after round (issue 16). A disk does not go
//! faster with more fsyncs waiting on it than it can batch into one commit,
//! so [`DEVICE_JOBS`] threads are enough; the other jobs wait in a queue,
//! holding no thread, and the caller waits asynchronously for its answer.
//!
//! The price: the threads are the process's, not a disk's. A device that
//! hangs (a dead network mount) holds the threads its jobs took until it
//! answers; each supervisor has at most four jobs out (its journal
//! actor's append, marker note and identity write, and Root's lock check,
//! once a second), so supervisors on other disks in the same process stall
//! only once two of them hang on one.

use std::collections::VecDeque;
use std::panic::AssertUnwindSafe;
use std::sync::{Condvar, Mutex, PoisonError};

/// How many device jobs of the process run at once: the most threads the
/// device pool starts.
pub const DEVICE_JOBS: usize = 8;

/// A device job whose work panicked: it did not finish, and what it was
/// to return is lost.
#[derive(Debug, thiserror::Error)]
#[error("a device job panicked: {0}")]
pub struct Panicked(String);

type Job = Box<dyn FnOnce() + Send + 'static>;

/// The process's device threads and the jobs waiting for one.
struct Pool {
    state: Mutex<PoolState>,
    /// Signalled when a job is queued and a thread is idle.
    queued: Condvar,
}

struct PoolState {
    jobs: VecDeque<Job>,
    /// Threads running (never more than [`DEVICE_JOBS`]).
    threads: usize,
    /// Threads waiting for a job.
    idle: usize,
}

static POOL: Pool = Pool {
    state: Mutex::new(PoolState {
        jobs: VecDeque::new(),
        threads: 0,
        idle: 0,
    }),
    queued: Condvar::new(),
};

impl Pool {
    fn lock(&self) -> std::sync::MutexGuard<'_, PoolState> {
        // A job runs outside the lock (and its panic is caught): nothing
        // can poison it halfway through a change.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Queue `job`: an idle thread takes it, else a new thread while
    /// fewer than [`DEVICE_JOBS`] run, else the first thread to finish.
    fn submit(&'static self, job: Job) {
        let mut state = self.lock();
        state.jobs.push_back(job);
        if state.idle > 0 {
            self.queued.notify_one();
        }
        // Idle threads already woken but not yet running count as idle
        // until they take a job: a burst of jobs gets a thread each while
        // fewer than the jobs queued are idle.
        if state.idle >= state.jobs.len() {
            return;
        }
        // No thread to be had (a process at its thread limit): the job
        // waits for one of the threads that run, and with none it is run
        // here, on the caller's thread, rather than lost.
        if state.threads < DEVICE_JOBS && !self.start(&mut state) && state.threads == 0 {
            let job = state.jobs.pop_back();
            drop(state);
            if let Some(job) = job {
                job();
            }
        }
    }

    /// Start a thread, counted in `state`; `false` when none could be.
    fn start(&'static self, state: &mut PoolState) -> bool {
        let spawned = std::thread::Builder::new()
            .name("steadfast-device".into())
            .spawn(move || self.serve());
        match spawned {
            Ok(_) => {
                state.threads += 1;
                true
            }
            Err(error) => {
                tracing::warn!(%error, "a device thread could not be started");
                false
            }
        }
    }

    /// A device thread: take jobs; end after [`KEEP_ALIVE`] without one.
    /// The queue is checked under the lock before it ends, so a job queued
    /// meanwhile is taken, never stranded: its `submit` saw this thread
    /// idle and woke it, or (once it is gone) starts another.
    fn serve(&self) {
        let mut state = self.lock();
        loop {
            if let Some(job) = state.jobs.pop_front() {
                drop(state);
                job();
                state = self.lock();
                continue;
            }
            state.idle += 1;
            let (next, waited) = self
                .queued
                .wait_timeout(state, KEEP_ALIVE)
                .unwrap_or_else(PoisonError::into_inner);
            state = next;
            state.idle -= 1;
            if waited.timed_out() && state.jobs.is_empty() {
                state.threads -= 1;
                return;
            }
        }
    }
}

/// How long an idle device thread is kept (as tokio keeps a blocking-pool
/// thread): a daemon at rest holds none.
const KEEP_ALIVE: std::time::Duration = std::time::Duration::from_secs(10);

/// Start device threads until `threads` run (at most [`DEVICE_JOBS`]), so
/// a launch's first fsync finds one running instead of waiting for one to
/// be created (`steadfast::daemon` warms one); each ends after
/// ten seconds unused.
///
/// Returns how many device threads run as it returns.
pub fn warm(threads: usize) -> usize {
    let mut state = POOL.lock();
    while state.threads < threads.min(DEVICE_JOBS) {
        if !POOL.start(&mut state) {
            break;
        }
    }
    state.threads
}

/// Run `work` on one of the process's device threads (at most
/// [`DEVICE_JOBS`], started as needed), and wait for it without holding a
/// runtime thread.
///
/// # Errors
/// [`Panicked`] if `work` panicked (the thread survives it).
pub async fn run<T, F>(work: F) -> Result<T, Panicked>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    let (tx, rx) = tokio::sync::oneshot::channel();
    POOL.submit(Box::new(move || {
        let result = std::panic::catch_unwind(AssertUnwindSafe(work)).map_err(|panic| {
            Panicked(
                panic
                    .downcast_ref::<&str>()
                    .map(|s| (*s).to_owned())
                    .or_else(|| panic.downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "(no message)".to_owned()),
            )
        });
        let _ = tx.send(result);
    }));
    rx.await
        .unwrap_or_else(|_| Err(Panicked("the device job was dropped".to_owned())))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Many jobs at once, from many tasks, each on a device thread: never
    /// more distinct threads than [`DEVICE_JOBS`] (the pool is the
    /// process's, so jobs of other tests in this process count too, and
    /// the bound still holds), and every job answered.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_burst_of_jobs_runs_on_at_most_device_jobs_threads() {
        let mut tasks = tokio::task::JoinSet::new();
        for round in 0..20 {
            for job in 0..50 {
                tasks.spawn(run(move || {
                    std::thread::sleep(std::time::Duration::from_micros(200));
                    (std::thread::current().id(), round * 50 + job)
                }));
            }
        }
        let mut threads = std::collections::HashSet::new();
        let mut answered = 0;
        while let Some(joined) = tasks.join_next().await {
            let (thread, _) = joined.expect("task").expect("job");
            threads.insert(thread);
            answered += 1;
        }
        assert_eq!(answered, 1000);
        assert!(
            (1..=DEVICE_JOBS).contains(&threads.len()),
            "{} device threads",
            threads.len()
        );
        assert!(POOL.lock().threads <= DEVICE_JOBS);
    }

    /// Warming starts threads up to the number asked (never past
    /// [`DEVICE_JOBS`]), and they take jobs.
    #[tokio::test]
    async fn warming_starts_threads_that_take_jobs() {
        assert!((2..=DEVICE_JOBS).contains(&warm(2)));
        assert_eq!(warm(DEVICE_JOBS * 4), DEVICE_JOBS);
        assert_eq!(run(|| 7).await.expect("a job"), 7);
    }

    /// A job that panics is answered with the panic's message, and the
    /// thread that ran it serves the next job.
    #[tokio::test]
    async fn a_panicking_job_is_an_error_and_the_pool_goes_on() {
        let error = run(|| -> u32 { panic!("the disk said no") })
            .await
            .expect_err("a panic");
        assert!(error.to_string().contains("the disk said no"), "{error}");
        assert_eq!(run(|| 7).await.expect("the next job"), 7);
    }
}
