//! The journal's writer under simulation: the real [`JournalFile`] over a
//! simulated disk that fails far more often than a disk does (write and
//! fsync errors, torn and short writes, failed cut backs, fsyncs that lose
//! the dirty pages) and a process that crashes between any two calls, all
//! decided by one seed; checked after every crash that the file reopens,
//! that nothing acknowledged is lost and that nothing is invented.
//!
//! `cargo test` runs [`SEEDS`] seeds, each twice (the trace hashes must
//! match: a seed replays byte for byte). A failing seed prints the one
//! line that replays it, the check it broke and the trace before it.
//! `scripts/sim.sh N` runs N seeds with a progress line and a summary.
//!
//! Knobs (environment): `STEADFAST_SIM_SEED=S` runs seed S alone, with its
//! trace; `STEADFAST_SIM_SEEDS=N` runs N seeds from `STEADFAST_SIM_FIRST`
//! (default 0); `STEADFAST_SIM_OPS=K` operations a seed (default
//! [`OPS`]).
//!
//! [`JournalFile`]: steadfast_actors::control_dir::JournalFile

mod defects;
mod disk;
mod fs;
mod inode;
mod rng;
mod run;

use std::time::Instant;

use disk::FaultCounts;

/// Seeds a `cargo test` runs.
const SEEDS: u64 = 300;

/// Operations a seed runs.
const OPS: u32 = 400;

fn env_u64(name: &str) -> Option<u64> {
    let value = std::env::var(name).ok()?;
    Some(
        value
            .parse()
            .unwrap_or_else(|_| panic!("{name}={value:?} is not a number")),
    )
}

fn ops() -> u32 {
    env_u64("STEADFAST_SIM_OPS").map_or(OPS, |n| u32::try_from(n).unwrap_or(u32::MAX))
}

/// Run `seed`; on a broken check, panic with the line that replays it.
fn run_checked(seed: u64, ops: u32) -> run::Outcome {
    match run::run(seed, ops) {
        Ok(outcome) => outcome,
        Err(violation) => {
            // The whole trace when one seed is replayed, its end otherwise.
            let shown = if std::env::var_os("STEADFAST_SIM_SEED").is_some() {
                0
            } else {
                violation.trace.len().saturating_sub(40)
            };
            panic!(
                "seed {seed} broke \"{}\": {}\n  replay: STEADFAST_SIM_SEED={seed} \
                 STEADFAST_SIM_OPS={ops} cargo test -p steadfast-actors --test it -- sim:: \
                 --nocapture\n  trace before it:\n    {}",
                violation.check,
                violation.detail,
                violation.trace[shown..].join("\n    ")
            )
        }
    }
}

/// Every seed keeps every acknowledged record across its crashes, reopens
/// cleanly and invents nothing; and each replays to the same trace.
#[test]
fn the_journal_keeps_what_it_acknowledged_under_faults_and_crashes() {
    let ops = ops();
    if let Some(seed) = env_u64("STEADFAST_SIM_SEED") {
        let outcome = run_checked(seed, ops);
        eprintln!("seed {seed}: {outcome:?}");
        return;
    }
    let first = env_u64("STEADFAST_SIM_FIRST").unwrap_or(0);
    let count = env_u64("STEADFAST_SIM_SEEDS").unwrap_or(SEEDS);
    let loud = std::env::var_os("STEADFAST_SIM_SEEDS").is_some();
    let started = Instant::now();
    let mut faults = FaultCounts::default();
    let (mut checks, mut acknowledged) = (0_u64, 0_u64);
    for (done, seed) in (first..first + count).enumerate() {
        let outcome = run_checked(seed, ops);
        let again = run_checked(seed, ops);
        assert_eq!(
            outcome.trace_hash, again.trace_hash,
            "seed {seed} did not replay to the same trace"
        );
        faults.add(&outcome.faults);
        checks += outcome.checks;
        acknowledged += outcome.acknowledged;
        if loud && (done + 1) % 1000 == 0 {
            let rate = (done + 1) as f64 / started.elapsed().as_secs_f64();
            eprintln!("sim: {}/{count} seeds, {rate:.0} seeds/s", done + 1);
        }
    }
    let secs = started.elapsed().as_secs_f64();
    eprintln!(
        "sim: {count} seeds x {ops} ops (each run twice) in {secs:.1} s, {:.0} seeds/s; \
         {checks} checks, {acknowledged} records acknowledged; faults: {faults:?}",
        count as f64 / secs
    );
    assert!(faults.crash >= count, "every seed crashes at least once");
    assert!(
        faults.fsync_error > 0
            && faults.torn_write > 0
            && faults.cut_error > 0
            && faults.dir_error > 0
            && faults.compactions > 0,
        "every fault class was injected, and compactions ran: {faults:?}"
    );
}

/// The first seed from 0 at which a run on a disk with `plant` applied
/// breaks a check, within `seeds`; with the check it broke.
fn first_failing_seed(seeds: u64, plant: impl Fn(&disk::SimDisk)) -> Option<(u64, &'static str)> {
    (0..seeds).find_map(|seed| {
        let disk = disk::SimDisk::new(
            steadfast_protocol::journal::encode_header().to_vec(),
            rng::Rng::new(seed),
            disk::Faults::HEAVY,
        );
        plant(&disk);
        run::run_on(disk, seed, OPS)
            .err()
            .map(|violation| (seed, violation.check))
    })
}

/// The checks catch a planted acknowledgement before durability: a disk
/// whose fsync does nothing (so the writer acknowledges what a crash then
/// loses).
#[test]
fn a_planted_acknowledgement_before_fsync_is_caught() {
    let found = first_failing_seed(50, disk::SimDisk::skip_fsync);
    eprintln!("acknowledgement before fsync: first failing seed {found:?}");
    assert!(found.is_some(), "caught within 50 seeds");
}

/// The checks catch a planted compaction whose rename is never made
/// durable: a directory fsync that does nothing (a crash then brings the
/// old journal back, without what was acknowledged into the new one).
#[test]
fn a_planted_rename_without_its_directory_fsync_is_caught() {
    let found = first_failing_seed(200, disk::SimDisk::skip_dir_sync);
    eprintln!("rename without its directory fsync: first failing seed {found:?}");
    assert_eq!(
        found.map(|(_, check)| check),
        Some("nothing acknowledged is lost"),
        "caught within 200 seeds"
    );
}
