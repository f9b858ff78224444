//! Crash failpoints: named places where a test process kills itself with
//! `SIGKILL`, so the crash harness (`tests/it/crash.rs`) can stop a real daemon
//! between a write and its fsync, between an fsync and a rename, mid-step or
//! mid-drain, and check what the next daemon makes of it.
//!
//! The points exist only in a build with the cargo feature `failpoints`
//! (the crash harness's `crashd` example turns it on); without it, [`hit`]
//! and [`reached`] are empty and a build holds neither the points' names
//! nor [`ENV`]'s. With it, a point is armed only by the environment
//! variable [`ENV`], read once:
//! `STEADFAST_CRASH_AT=<point>:<nth>` kills the process the `nth` time
//! (counting from 1) `<point>` is reached. Unset, [`hit`] is one atomic load and a branch.
//! The points ([`POINTS`]) are named where they sit; nothing else in the
//! library knows about them.
//!
//! Invariant: an armed point kills with `SIGKILL` (no destructor, no flush,
//! no unwinding: what a power cut or `kill -9` leaves), and an unarmed or
//! unknown point does nothing. Checked by `tests/it/crash.rs`.

#[cfg(feature = "failpoints")]
use std::sync::OnceLock;
#[cfg(feature = "failpoints")]
use std::sync::atomic::{AtomicU32, Ordering};

/// The environment variable that arms a failpoint: `<point>:<nth>`.
pub const ENV: &str = "STEADFAST_CRASH_AT";

/// Stall points: armed like a failpoint (`<point>:<nth>`), they park the
/// code that reaches them forever instead of killing the process — a wedge
/// a test can place where no user code runs (see [`stall`]).
pub const STALLS: &[&str] = &[
    // The Lifecycle actor's handler, answering a `ping` (the systemd
    // watchdog's round trip): the actor is wedged from there on.
    "lifecycle.ping",
];

/// Every failpoint, in the order a boot, a drain and a compaction reach them.
pub const POINTS: &[&str] = &[
    // `JournalFile::append`: half of the frames written, the process dies.
    "journal.mid_write",
    // Every frame written, not yet fsynced.
    "journal.before_fsync",
    // Fsynced, not yet acknowledged.
    "journal.after_fsync",
    // A marker's temp file written and fsynced, not yet renamed.
    "marker.before_rename",
    // Renamed, the directory not yet fsynced.
    "marker.before_dir_fsync",
    // The intent of a step whose resource outlives the process is
    // durable; the step has not started.
    "boot.after_intent",
    // A step created its resource; its checkpoint is not yet staged.
    "boot.before_checkpoint",
    // A step's checkpoint is staged (durable with the boot's next append);
    // the next step has not started.
    "boot.after_checkpoint",
    // A drain destroyed a resource and has not yet observed it gone.
    "drain.mid_destroy",
    // Compaction: the new journal written, not yet fsynced.
    "compact.before_fsync",
    // The new journal fsynced, not yet renamed over the old one.
    "compact.before_rename",
    // Renamed, the directory not yet fsynced.
    "compact.before_dir_fsync",
];

#[cfg(feature = "failpoints")]
struct Armed {
    point: String,
    nth: u32,
    seen: AtomicU32,
}

#[cfg(feature = "failpoints")]
fn armed() -> Option<&'static Armed> {
    static ARMED: OnceLock<Option<Armed>> = OnceLock::new();
    ARMED
        .get_or_init(|| {
            let value = std::env::var(ENV).ok()?;
            let (point, nth) = value.rsplit_once(':')?;
            Some(Armed {
                point: point.to_owned(),
                nth: nth.parse().ok()?,
                seen: AtomicU32::new(0),
            })
        })
        .as_ref()
}

/// Reached `point`: if it is the armed one and this is its `nth` time, the
/// process dies of `SIGKILL` here.
#[inline]
pub fn hit(point: &'static str) {
    if reached(point) {
        kill();
    }
}

/// [`hit`], saying first on standard error what the process was doing
/// there: `failpoint <point>: <what>` (one unbuffered write, out before the
/// kill). The crash harness reads it where the point alone is ambiguous —
/// which marker a `marker.before_dir_fsync` left renamed into place —
/// instead of inferring it from output the process may not have flushed.
#[inline]
pub fn hit_doing(point: &'static str, what: impl FnOnce() -> String) {
    if reached(point) {
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr().lock(), "failpoint {point}: {}", what());
        kill();
    }
}

/// Count a pass through `point`; `true` if it is the armed one and this is
/// its `nth` time (the caller then does its part of the damage, say a torn
/// write, and calls [`kill`]).
/// Always `false` without the `failpoints` feature.
#[must_use]
#[inline]
pub fn reached(point: &'static str) -> bool {
    #[cfg(feature = "failpoints")]
    {
        armed().is_some_and(|armed| {
            armed.point == point && armed.seen.fetch_add(1, Ordering::SeqCst) + 1 == armed.nth
        })
    }
    #[cfg(not(feature = "failpoints"))]
    {
        let _ = point;
        false
    }
}

/// Reached stall point `point` (one of [`STALLS`]): if it is the armed one
/// and this is its `nth` time, say `failpoint <point>: stalling` on
/// standard error and never complete. Ready at once otherwise, and always
/// without the `failpoints` feature.
pub async fn stall(point: &'static str) {
    if reached(point) {
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr().lock(), "failpoint {point}: stalling");
        std::future::pending::<()>().await;
    }
}

/// Die of `SIGKILL` now.
pub fn kill() -> ! {
    let _ = rustix::process::kill_process(rustix::process::getpid(), rustix::process::Signal::KILL);
    // SIGKILL cannot be caught; if the call itself failed, abort is the
    // closest thing (no destructors, no unwinding).
    std::process::abort()
}
