//! Work that waits on the device (fsyncs, renames, directory syncs), run on
//! tokio's blocking pool a bounded number at a time.
//!
//! Every journal actor of the process sends its device work here. The pool
//! starts a thread whenever no idle one is free and keeps it ten seconds
//! after, so 1,000 supervisors fsyncing at once would otherwise grow it to
//! as many threads as fsyncs were in flight — a high-water mark the
//! process then keeps (each thread's stack and allocator arena), round
//! after round. A disk does not go faster with more fsyncs waiting on it
//! than it can batch into one commit, so [`DEVICE_JOBS`] at a time is
//! enough; the others wait asynchronously for a turn, holding no thread.
//!
//! The price: the turns are the process's, not a disk's. A device that
//! hangs (a dead network mount) holds the turns its jobs took until it
//! answers; each journal actor has at most three jobs out (its append, a
//! marker note, an identity write), so supervisors on other disks in the
//! same process stall only once three of them hang on one.

use tokio::sync::Semaphore;
use tokio::task::JoinError;

/// How many device jobs of the process run at once.
pub const DEVICE_JOBS: usize = 8;

static TURNS: Semaphore = Semaphore::const_new(DEVICE_JOBS);

/// Run `work` on the blocking pool once one of [`DEVICE_JOBS`] turns is
/// free, and wait for it.
///
/// # Errors
/// The pool's [`JoinError`] if `work` panicked (or the runtime is shutting
/// down).
pub async fn run<T, F>(work: F) -> Result<T, JoinError>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    // Never closed: `acquire` cannot fail. Were it to, the work runs
    // without a turn rather than not at all.
    let _turn = TURNS.acquire().await.ok();
    tokio::task::spawn_blocking(work).await
}
