//! The whole daemon under simulation: the real supervisor (its actor tree,
//! journal, markers, store lock and handle) and a service that acknowledges
//! records once they are fsynced, run on tokio's paused clock by a workload
//! one seed draws — records written over connections old and new, every
//! lifecycle command (`stop` with and without a hold, `start`, `restart`
//! and `--force`, `retry`, `reload`, `reinit`), config edits good and
//! broken, steps that fail, panic, hang or report progress slowly, a store
//! that refuses, a runtime that crashes, days of idle time — and process
//! crashes part way through an operation, each followed by a relaunch on
//! the data dir as it was left.
//!
//! Checked: nothing acknowledged is lost (every record a connection
//! acknowledged since the last wipe is in the store after every crash); no
//! connection serves after its runtime's drain closed the store; never two
//! owners of the store; a stop held across a relaunch comes back stopped;
//! no attempt published before a crash starts again after it; no
//! operation hangs (a virtual-time watchdog); the daemon never ends on its
//! own; once the faults stop it settles (running, stopped, or a held
//! failure) within an hour of virtual time; and then it exits when asked.
//!
//! Each seed runs twice and its trace hashes must match. A failing seed
//! prints the line that replays it, the check it broke and its trace.
//! `scripts/sim.sh --daemon N` runs N seeds with a progress line and a
//! summary. Knobs (environment): `STEADFAST_DAEMON_SIM_SEED=S` runs seed S
//! alone, with its trace; `STEADFAST_DAEMON_SIM_SEEDS=N` runs N seeds from
//! `STEADFAST_DAEMON_SIM_FIRST` (default 0); `STEADFAST_DAEMON_SIM_OPS=K`
//! operations a seed (default [`OPS`]).
//!
//! The file system is the real one (a temp dir): a crash here keeps every
//! byte written, not only the synced ones. The journal's writer is held
//! to a disk that loses unsynced bytes by its own simulation
//! (`actors/tests/it/sim`).

#[path = "../../../actors/tests/it/sim/rng.rs"]
mod rng;
mod run;
mod service;

use std::time::Instant;

use run::{Counts, Options};

/// Seeds a `cargo test` runs.
const SEEDS: u64 = 300;

/// Operations a seed runs, across its lives.
const OPS: u32 = 120;

fn env_u64(name: &str) -> Option<u64> {
    let value = std::env::var(name).ok()?;
    Some(
        value
            .parse()
            .unwrap_or_else(|_| panic!("{name}={value:?} is not a number")),
    )
}

fn options() -> Options {
    Options {
        ops: env_u64("STEADFAST_DAEMON_SIM_OPS")
            .map_or(OPS, |n| u32::try_from(n).unwrap_or(u32::MAX)),
        drain_leaves_tasks: false,
    }
}

/// Run `seed`; on a broken check, panic with the line that replays it.
fn run_checked(seed: u64, options: Options) -> run::Outcome {
    match run::run(seed, options) {
        Ok(outcome) => outcome,
        Err(violation) => {
            let shown = if std::env::var_os("STEADFAST_DAEMON_SIM_SEED").is_some() {
                0
            } else {
                violation.trace.len().saturating_sub(40)
            };
            panic!(
                "seed {seed} broke \"{}\": {}\n  replay: STEADFAST_DAEMON_SIM_SEED={seed} \
                 STEADFAST_DAEMON_SIM_OPS={} cargo test -p steadfast --test it -- daemon_sim:: \
                 --nocapture\n  trace before it:\n    {}",
                violation.check,
                violation.detail,
                options.ops,
                violation.trace[shown..].join("\n    ")
            )
        }
    }
}

/// Every seed keeps what it acknowledged across its crashes, serves
/// nothing after a drain, keeps a held stop, never hangs and settles; and
/// each replays to the same trace.
#[test]
fn the_daemon_keeps_what_it_acknowledged_across_crashes_and_settles() {
    let options = options();
    if let Some(seed) = env_u64("STEADFAST_DAEMON_SIM_SEED") {
        let outcome = run_checked(seed, options);
        eprintln!("seed {seed}: {outcome:?}");
        return;
    }
    let first = env_u64("STEADFAST_DAEMON_SIM_FIRST").unwrap_or(0);
    let count = env_u64("STEADFAST_DAEMON_SIM_SEEDS").unwrap_or(SEEDS);
    let loud = std::env::var_os("STEADFAST_DAEMON_SIM_SEEDS").is_some();
    let started = Instant::now();
    let mut counts = Counts::default();
    for (done, seed) in (first..first + count).enumerate() {
        let outcome = run_checked(seed, options);
        let again = run_checked(seed, options);
        if outcome.trace_hash != again.trace_hash {
            let at = outcome
                .trace
                .iter()
                .zip(&again.trace)
                .position(|(a, b)| a != b)
                .unwrap_or(outcome.trace.len().min(again.trace.len()));
            panic!(
                "seed {seed} did not replay to the same trace; from line {at}:\n  first: {:?}\n  again: {:?}",
                &outcome.trace[at.saturating_sub(3)..(at + 3).min(outcome.trace.len())],
                &again.trace[at.saturating_sub(3)..(at + 3).min(again.trace.len())],
            );
        }
        counts.add(&outcome.counts);
        if loud && (done + 1) % 100 == 0 {
            let rate = (done + 1) as f64 / started.elapsed().as_secs_f64();
            eprintln!("daemon sim: {}/{count} seeds, {rate:.1} seeds/s", done + 1);
        }
    }
    let secs = started.elapsed().as_secs_f64();
    let years = counts.virtual_ms as f64 / (365.25 * 86_400_000.0);
    eprintln!(
        "daemon sim: {count} seeds x {} ops (each run twice) in {secs:.1} s, {:.1} seeds/s, \
         {years:.2} virtual years; {counts:?}",
        options.ops,
        count as f64 / secs
    );
    assert!(counts.crashes > 0 && counts.runtime_crashes > 0 && counts.acked > 0);
}

/// The first seed from 0 at which a run with a drain that leaves a
/// runtime's connections serving breaks a check, within `seeds`.
fn first_failing_seed(seeds: u64) -> Option<(u64, &'static str, String)> {
    let options = Options {
        drain_leaves_tasks: true,
        ..options()
    };
    (0..seeds).find_map(|seed| {
        run::run(seed, options)
            .err()
            .map(|violation| (seed, violation.check, violation.detail))
    })
}

/// The checks catch a planted drain that leaves a task serving: a
/// connection that does not close at the drain's start, which the drain
/// should abort at the end of its grace, is left serving and acknowledges
/// writes into a store its runtime no longer owns.
#[test]
fn a_planted_drain_that_leaves_a_task_serving_is_caught() {
    let found = first_failing_seed(40);
    eprintln!("drain that leaves a task serving: first failing seed {found:?}");
    let (_, check, detail) = found.expect("caught within 40 seeds");
    assert_eq!(check, "the daemon's side");
    assert!(detail.contains("after its runtime's drain"), "{detail}");
}
