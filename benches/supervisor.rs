//! Round trips through the supervision tree, beside the cost of one journal
//! fsync on the same disk, and many supervisors in one process.
//!
//! Group `round_trip`, measured in one run:
//! - `journal_fsync`: append one record (a `stop` transition's size) to a
//!   file in the same temp dir and `sync_data` it (what every acknowledged
//!   transition costs at least once): the baseline.
//! - `stop_then_start_to_running`: `stop`, then `start`, until the snapshot
//!   says running again. Target: ≤ 4× `journal_fsync`.
//! - Then 200 alternated rounds (one fsync; one stop+start timed in a task
//!   on the runtime, as the control server and an embedding call the
//!   handle; the same driven from outside the runtime through `block_on`;
//!   one stop+start of a second supervisor whose config source resolves on
//!   a blocking thread, as one that may read a file does) and their
//!   medians and ratios, printed: the ratio on a disk whose fsync latency
//!   drifts during the run, what a caller outside the runtime pays in
//!   wake-ups, and what the in-place resolve of [`support::empty_source`]
//!   saves.
//! - `stop_to_stopped` / `start_to_running`: a command through the handle, the
//!   Lifecycle actor, the journal and the boot or drain task, for a no-op
//!   service, until the snapshot says it arrived.
//! - `thousand_supervisors`: 1,000 supervisors on fresh data dirs in one
//!   process, all reaching running, then exiting; prints, each round, the
//!   RSS added per supervisor while they run and what is left after they
//!   exited (goal ≤ 64 KiB each, flat across rounds).
//!
//! Run: `cargo bench --bench supervisor`.
//!
//! Where a running supervisor's bytes go, by allocation site (results:
//! `benches/README.md`): `heaptrack target/release/deps/supervisor-<hash>
//! --bench thousand`, then `heaptrack_print -f heaptrack.*.zst
//! --print-peaks 1` (the peak is the 1,000 running), or
//! `--print-flamegraph FILE --flamegraph-cost-type peak` to sum by frame.
#![allow(clippy::disallowed_methods)] // a benchmark times real work

use std::io::Write;
use std::time::{Duration, Instant};

mod support;

use support::{Noop, blocking_empty_source, empty_source, median};

use criterion::{Criterion, criterion_group, criterion_main};
use steadfast::config::ConfigSource;
use steadfast::protocol::journal::{Record, encode_header, encode_record};
use steadfast::protocol::lifecycle::LifecycleState;
use steadfast::protocol::snapshot::Snapshot;
use steadfast::{ExitIntent, Hold, Supervisor, SupervisorHandle};

async fn until(handle: &SupervisorHandle, pred: impl Fn(&Snapshot) -> bool) {
    let mut rx = handle.watch();
    loop {
        if pred(&rx.borrow_and_update()) {
            return;
        }
        rx.changed().await.expect("alive");
    }
}

/// One stop, then start, until the snapshot says running again: its time.
async fn stop_then_start(handle: &SupervisorHandle) -> Duration {
    let start = Instant::now();
    handle.stop(Hold::None).await.expect("stop");
    handle.start().await.expect("start");
    until(handle, running).await;
    start.elapsed()
}

fn running(s: &Snapshot) -> bool {
    matches!(s.lifecycle, LifecycleState::Running { .. })
}

#[path = "support/counting.rs"]
mod counting;

/// Live heap bytes, in KiB.
fn heap_kib() -> u64 {
    (counting::live() / 1024) as u64
}

/// The process's threads.
fn threads() -> u64 {
    status_field("Threads:")
}

fn rss_kib() -> u64 {
    status_field("VmRSS:")
}

fn status_field(name: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with(name))
                .and_then(|l| l.split_whitespace().nth(1).and_then(|v| v.parse().ok()))
        })
        .unwrap_or(0)
}

/// How many fsync / stop+start pairs the paired ratio alternates.
const PAIRS: usize = 200;

fn bench(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let tmp = tempfile::tempdir().expect("tempdir");

    // One fsync of one record, on the same disk as the data dirs.
    let mut file = std::fs::File::create(tmp.path().join("fsync-probe")).expect("create");
    file.write_all(&encode_header()).expect("header");
    let frame = encode_record(&Record::Transition {
        at_ms: 1,
        from: "running".into(),
        event: "stop".into(),
        to: "draining(stop)".into(),
    })
    .expect("encode");
    let (handle, run) = launched(&rt, &tmp.path().join("one"), empty_source());
    // The same service resolving its config on a blocking thread, as any
    // source that may read a file does: what the in-place resolve saves.
    let (blocking, blocking_run) =
        launched(&rt, &tmp.path().join("blocking"), blocking_empty_source());
    // The raw baseline first, in the same group and the same run as the
    // round trips it is the yardstick of (stop+start ≤ 4× it).
    let mut group = c.benchmark_group("round_trip");
    group.bench_function("journal_fsync", |b| {
        b.iter(|| {
            file.write_all(&frame).expect("write");
            file.sync_data().expect("fsync");
        });
    });
    group.bench_function("stop_then_start_to_running", |b| {
        b.iter_custom(|iters| {
            rt.block_on(async {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    total += stop_then_start(&handle).await;
                }
                total
            })
        });
    });
    group.bench_function("stop_to_stopped", |b| {
        b.iter_custom(|iters| {
            rt.block_on(async {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    let start = Instant::now();
                    handle.stop(Hold::None).await.expect("stop");
                    total += start.elapsed();
                    handle.start().await.expect("start");
                    until(&handle, running).await;
                }
                total
            })
        });
    });
    group.bench_function("start_to_running", |b| {
        b.iter_custom(|iters| {
            rt.block_on(async {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    handle.stop(Hold::None).await.expect("stop");
                    let start = Instant::now();
                    handle.start().await.expect("start");
                    until(&handle, running).await;
                    total += start.elapsed();
                }
                total
            })
        });
    });
    group.finish();

    // The ratio on a shared disk whose fsync latency drifts during a run:
    // one fsync, then stop+start round trips, alternated, 200 times,
    // medians printed (criterion's groups above measure each in its own
    // stretch). A trip is timed inside a task on the runtime, as the
    // control server and an embedding application call the handle; the
    // same trip driven from outside the runtime (`block_on` on this
    // thread, as the groups above do) pays a cross-thread wake-up at each
    // of its awaits, and is printed beside it. The second supervisor's
    // source resolves on a blocking thread, as one that may read a file
    // does: what the in-place resolve saves.
    let trip = |handle: &SupervisorHandle| {
        let handle = handle.clone();
        rt.block_on(rt.spawn(async move { stop_then_start(&handle).await }))
            .expect("the trip's task")
    };
    let outside_trip = |handle: &SupervisorHandle| rt.block_on(stop_then_start(handle));
    let mut fsyncs = Vec::with_capacity(PAIRS);
    let mut trips = Vec::with_capacity(PAIRS);
    let mut outside_trips = Vec::with_capacity(PAIRS);
    let mut blocking_trips = Vec::with_capacity(PAIRS);
    for _ in 0..PAIRS {
        let start = Instant::now();
        file.write_all(&frame).expect("write");
        file.sync_data().expect("fsync");
        fsyncs.push(start.elapsed());
        trips.push(trip(&handle));
        outside_trips.push(outside_trip(&handle));
        blocking_trips.push(trip(&blocking));
    }
    let fsync = median(&mut fsyncs);
    let ratio = |trips: &mut Vec<Duration>| {
        let trip = median(trips);
        (trip, trip.as_secs_f64() / fsync.as_secs_f64())
    };
    let (trip, trip_ratio) = ratio(&mut trips);
    let (outside, outside_ratio) = ratio(&mut outside_trips);
    let (blocking_trip, blocking_ratio) = ratio(&mut blocking_trips);
    eprintln!(
        "round_trip paired ({PAIRS} alternated rounds, medians): journal_fsync {fsync:?}, \
         stop_then_start_to_running {trip:?} from a task, ratio {trip_ratio:.1}x; \
         from outside the runtime {outside:?}, ratio {outside_ratio:.1}x; \
         with a blocking config source {blocking_trip:?}, ratio {blocking_ratio:.1}x",
    );
    rt.block_on(async {
        for (handle, run) in [(handle, run), (blocking, blocking_run)] {
            handle.exit(ExitIntent::Halt).await.expect("exit");
            run.await.expect("run");
        }
    });

    // RSS is compared with the process before any of the 1,000 existed, so
    // every round reports what 1,000 live supervisors cost, and what a
    // round left behind once they all exited. Criterion runs the routine
    // at least 11 times (a warm-up, then 10 samples), one round each, every
    // round on fresh data dirs (`round` counts across its calls). Goal: ≤ 64
    // KiB per supervisor, flat across rounds.
    let baseline = (rss_kib(), heap_kib());
    let mut round = 0_usize;
    let mut group = c.benchmark_group("many");
    group.sample_size(10);
    group.bench_function("thousand_supervisors", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                total += thousand_supervisors(&rt, tmp.path(), round, baseline);
                round += 1;
            }
            total
        });
    });
    group.finish();
}

/// A supervisor of [`Noop`] over `dir` resolving through `source`, run on
/// `rt` until it is running.
fn launched(
    rt: &tokio::runtime::Runtime,
    dir: &std::path::Path,
    source: ConfigSource,
) -> (SupervisorHandle, tokio::task::JoinHandle<ExitIntent>) {
    rt.block_on(async {
        let (supervisor, handle) = Supervisor::builder(dir, Noop)
            .config(source)
            .build()
            .expect("new");
        let run = tokio::spawn(supervisor.run());
        until(&handle, running).await;
        (handle, run)
    })
}

/// Print the CPU the process spends while its supervisors sit running
/// (their lock checks, timers, the runtime's own wake-ups), over three
/// seconds of wall time: what 1,000 supervisors cost at rest.
fn idle_cpu(rt: &tokio::runtime::Runtime) {
    const IDLE: Duration = Duration::from_secs(3);
    let before = cpu_ticks();
    rt.block_on(async { tokio::time::sleep(IDLE).await });
    let spent = cpu_ticks().saturating_sub(before);
    // `/proc` counts in clock ticks (`USER_HZ`, 100 on Linux).
    #[allow(clippy::cast_precision_loss)]
    let share = spent as f64 / 100.0 / IDLE.as_secs_f64() * 100.0;
    eprintln!(
        "thousand_supervisors at rest: {} ms of CPU over {IDLE:?} ({share:.1}% of one core)",
        spent * 10
    );
}

/// The process's user and system CPU so far, in clock ticks.
fn cpu_ticks() -> u64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // Fields after the command name (which may hold spaces) in parentheses:
    // utime and stime are the 12th and 13th of them.
    stat.rsplit_once(')')
        .map(|(_, rest)| {
            rest.split_whitespace()
                .skip(11)
                .take(2)
                .filter_map(|v| v.parse::<u64>().ok())
                .sum()
        })
        .unwrap_or(0)
}

/// One round: 1,000 supervisors on fresh data dirs reach running (timed),
/// then all exit. Prints the RSS added per supervisor while they run and
/// after they have exited, against `baseline`.
fn thousand_supervisors(
    rt: &tokio::runtime::Runtime,
    tmp: &std::path::Path,
    round: usize,
    baseline: (u64, u64),
) -> Duration {
    let start = Instant::now();
    let handles = rt.block_on(async {
        let mut all = Vec::with_capacity(1000);
        for i in 0..1000 {
            let dir = tmp.join(format!("many-{round}-{i}"));
            let (supervisor, handle) = Supervisor::builder(dir, Noop)
                .config(empty_source())
                .build()
                .expect("new");
            all.push((tokio::spawn(supervisor.run()), handle));
        }
        for (_, handle) in &all {
            until(handle, running).await;
        }
        all
    });
    let took = start.elapsed();
    let added = rss_kib().saturating_sub(baseline.0);
    let heap = heap_kib().saturating_sub(baseline.1);
    let running_threads = threads();
    if round == 0 {
        idle_cpu(rt);
    }
    rt.block_on(async {
        for (run, handle) in handles {
            handle.exit(ExitIntent::Halt).await.expect("exit");
            run.await.expect("run");
        }
    });
    let left = rss_kib().saturating_sub(baseline.0);
    let heap_left = heap_kib().saturating_sub(baseline.1);
    #[allow(clippy::cast_precision_loss)]
    let per = |kib: u64| kib as f64 / 1000.0;
    eprintln!(
        "thousand_supervisors round {round}: running after {took:?}; RSS {:.1} KiB per \
         supervisor while running ({:.1} KiB heap, {running_threads} threads), {:.1} KiB left \
         after exit ({:.1} KiB heap)",
        per(added),
        per(heap),
        per(left),
        per(heap_left),
    );
    took
}

criterion_group!(benches, bench);
criterion_main!(benches);
