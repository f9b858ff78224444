//! The whole daemon under simulation: the real supervisor (its actor tree,
//! journal, markers, status record, store lock and handle) and a service
//! that acknowledges records once they are fsynced, run on tokio's paused
//! clock over a simulated disk, by a workload one seed draws — records
//! written over connections old and new, every lifecycle command (`stop`
//! with and without a hold, `start`, `restart` and `--force`, `retry`,
//! `reload`, `reinit`, `config set` and `unset`), edits of the declared
//! config file on the simulated disk (renamed or in place, synced or not;
//! read through the file-system seam) good and broken, steps that fail,
//! panic, hang or report progress slowly, a store that refuses, a runtime
//! that crashes, days of idle time — and crashes part way through an
//! operation (or, one time in five, an `exit --relaunch` asked instead),
//! each followed by a relaunch on what survived, sometimes
//! after the wall clock jumped (up to 30 days either way); the journal,
//! the status record, the run and hold markers and the lock removed or
//! replaced by a copy underneath now and then. The service's plan holds
//! two resources that outlive its process: a lease of a simulated outside
//! service and a spool file on the simulated disk (`service.rs`).
//!
//! The disk (`actors/tests/it/sim/fs.rs`, installed through the
//! file-system seam `steadfast::fs` and the daemon's own files go
//! through) keeps per file what the page cache holds and what is durable,
//! and injects seeded faults: `EMFILE` on open, write errors after a torn
//! prefix, short writes, fsync errors that lose the dirty pages, directory
//! fsync and rename errors; one device job in fifty (an fsync, a rename)
//! takes from 10 ms to 40 s of virtual time. A crash kills the process (every task dropped
//! where it waits, its files closed and locks released; the page cache
//! survives), and half the time cuts the power too (the disk keeps only
//! what was synced, a rename only once its directory was). A launch the
//! disk fails is launched again, as a service manager would.
//!
//! Checked: every lifecycle step the Lifecycle actor adopted is the pure
//! machine's own step from the same state and event, and starts where the
//! step before it left the machine (`steadfast_actors::observed`); nothing
//! acknowledged is lost (every record a connection
//! acknowledged since the last wipe is in the store after every crash); no
//! connection serves after its runtime's drain closed the store; never two
//! owners of the store; a stop held across a relaunch comes back stopped,
//! and a relaunch comes back held only if it was (or a hold change was
//! answered `not durable` or cut short);
//! a crash reads as a crash, and a clean stop whose `released` marker is
//! durable as a clean stop, with every journal record it wrote durable
//! too (a power cut after it takes nothing); an acknowledged `config set` reads back after
//! a relaunch; after a crash the journal replays to at least the attempt
//! last published while the disk failed nothing; after a kill on a healthy disk no attempt
//! published before it starts again; at every relaunch, once its launch
//! repaired the journal, every record durable before the crash (as the
//! simulated disk kept it) is in the journal it keeps, in order, and it
//! keeps nothing the crash did not leave written (compaction allowed
//! for: the simulation compacts past 6 attempts, so seeds reach it);
//! each resource that outlives the process is adopted after a crash while
//! it is there, never made twice, never torn down while the serving
//! runtime uses it, named after every crash by the journal the relaunch
//! keeps (a checkpoint, or its step's intent, durable before the resource
//! was made, whose interrupted run the step's next run takes back), and
//! never leaked but where the journal was removed underneath; after every published step the status
//! record, `status --json` (answered in process by the control plane's
//! own code) and the snapshot `watch`'s changes build agree with what was
//! published, and none reads a version older than one it read; the
//! serving step's supervised children (`service.rs`: a permanent, a
//! transient and a temporary task whose strategy, intensity and failure
//! rate the seed draws, each incarnation ending on its own, by an error, a
//! panic, a return or a factory's panic, at a moment the seed draws) do
//! what a fresh pure machine (`steadfast_protocol::children::Group`) fed
//! their observed ends, in order and at their virtual instants, decides:
//! every start is the machine's next one, made once the child's incarnation
//! before it ended or was stopped, and none it ordered is missing
//! once the runtime ran and drained, and the group ends its runtime only
//! for a meltdown the machine decided; every meltdown it decides reaches
//! the lifecycle: the group reports it to its runtime before that
//! runtime's drain settles or the daemon exits (`observed` sees the
//! report), and once it is reported while the runtime boots or runs the
//! lifecycle hears of a runtime end before it leaves that runtime, the
//! first while running naming the child unless another end, or a drain
//! begun for something else, came first (a crash excuses what it cut
//! short), with its record in the journal
//! before the lifecycle's failure of that runtime; nothing of a group runs
//! after its runtime's drain settled; a daemon
//! whose lock is taken away exits for a relaunch; no operation hangs (a virtual-time
//! watchdog); the daemon never ends on its own; once the faults stop (a
//! good config, a disk without faults, one operator `retry`) it settles
//! (running, stopped, or a held failure) within an hour of virtual time;
//! and then it exits when asked.
//!
//! Each seed runs twice and its trace hashes must match (a mismatch prints
//! both traces from their first difference): nothing the simulation
//! reaches reads a real clock (`clippy.toml` disallows them outside the
//! clock seam). A failing seed is shrunk ([`shrink`]: operations and disk
//! faults left out, idle times cut, every draw kept) to the smallest run
//! found that breaks the same check, and prints the line that replays the
//! reduced run, the check and its trace.
//! `scripts/sim.sh --daemon N` runs N seeds with a progress line and a
//! summary (faults by class included). Knobs (environment):
//! `STEADFAST_DAEMON_SIM_SEED=S` runs seed S alone, with its trace;
//! `STEADFAST_DAEMON_SIM_SEEDS=N` runs N seeds from
//! `STEADFAST_DAEMON_SIM_FIRST` (default 0); `STEADFAST_DAEMON_SIM_OPS=K`
//! operations a seed (default [`OPS`]); a reduced run's
//! `STEADFAST_DAEMON_SIM_SKIP_OPS`, `STEADFAST_DAEMON_SIM_SPARE_FAULTS`
//! (numbers and ranges, `3,7-9`) and `STEADFAST_DAEMON_SIM_MAX_IDLE_MS`;
//! `STEADFAST_DAEMON_SIM_SHRINK=0` reports a failure unshrunk;
//! `STEADFAST_DAEMON_SIM_PLANT=NAME` plants a defect ([`run::Plant`]'s
//! names), to watch the checks catch it and the shrinker reduce it.
//!
//! Not simulated yet: the config watcher's `notify` thread (it watches
//! the real directory, where nothing changes; `reload` stands in for its
//! firing), the control server's sockets (its commands are answered in
//! process), the control socket's file, `replace`, and symbolic links (the
//! simulated disk has none: a file replaced underneath is a copy renamed
//! over it).
//! The defects the simulation found are scripted in [`defects`].

mod defects;
#[path = "../../../actors/tests/it/sim/fs.rs"]
mod fs;
#[path = "../../../actors/tests/it/sim/inode.rs"]
mod inode;
#[path = "../../../actors/tests/it/sim/rng.rs"]
mod rng;
mod run;
mod service;

use std::time::{Duration, Instant};

use fs::FaultCounts;
use run::{Counts, Options, Plant, Reduction, Violation};

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
    let env = |name| std::env::var(name).unwrap_or_default();
    Options {
        ops: env_u64("STEADFAST_DAEMON_SIM_OPS")
            .map_or(OPS, |n| u32::try_from(n).unwrap_or(u32::MAX)),
        disk_faults: true,
        plant: Plant::named(&env("STEADFAST_DAEMON_SIM_PLANT")),
        reduction: Reduction {
            skip_ops: Reduction::parse_set(&env("STEADFAST_DAEMON_SIM_SKIP_OPS")),
            spare_faults: Reduction::parse_set(&env("STEADFAST_DAEMON_SIM_SPARE_FAULTS")),
            max_idle: env_u64("STEADFAST_DAEMON_SIM_MAX_IDLE_MS").map(Duration::from_millis),
        },
    }
}

/// The most runs a shrink makes.
const SHRINK_RUNS: u32 = 3_000;

/// A failing run of `seed` reduced to the smallest one found that still
/// breaks the same check: fewer operations (the run's length cut, then
/// operations left out, halves to single ones), fewer disk faults (left
/// out likewise), shorter idle times. Every draw of the seed is kept
/// (an operation left out is drawn and not performed; a fault, drawn and
/// not injected), so what is left plays as it did. Ends with the reduced
/// options and their violation.
fn shrink(seed: u64, options: &Options, failed: Violation) -> (Options, Violation) {
    let check = failed.check;
    let mut runs = 0;
    let mut best = (options.clone(), failed);
    let mut fails = |trial: &Options| {
        runs += 1;
        (runs <= SHRINK_RUNS)
            .then(|| run::run(seed, trial.clone()).err())
            .flatten()
            .filter(|v| v.check == check)
    };
    // The run's length: the operations drawn up to the failure, then less.
    let drawn = best.1.reached.performed.last().map_or(0, |n| n + 1);
    let mut ops = drawn.min(best.0.ops);
    while ops > 0 {
        let trial = Options {
            ops,
            ..best.0.clone()
        };
        match fails(&trial) {
            Some(v) => {
                best = (trial, v);
                ops /= 2;
            }
            None => break,
        }
    }
    // Operations, then faults, left out: chunks of halving size.
    for faults in [false, true] {
        let mut chunk = if faults {
            best.1.reached.injected.len()
        } else {
            best.1.reached.performed.len()
        }
        .div_ceil(2)
        .max(1);
        loop {
            let mut at = 0;
            loop {
                let mut trial = best.0.clone();
                if faults {
                    let Some(part) = best
                        .1
                        .reached
                        .injected
                        .get(at..(at + chunk).min(best.1.reached.injected.len()))
                    else {
                        break;
                    };
                    if part.is_empty() {
                        break;
                    }
                    trial.reduction.spare_faults.extend(part);
                } else {
                    let Some(part) = best
                        .1
                        .reached
                        .performed
                        .get(at..(at + chunk).min(best.1.reached.performed.len()))
                    else {
                        break;
                    };
                    if part.is_empty() {
                        break;
                    }
                    trial.reduction.skip_ops.extend(part);
                }
                match fails(&trial) {
                    Some(v) => best = (trial, v),
                    None => at += chunk,
                }
            }
            if chunk == 1 {
                break;
            }
            chunk = chunk.div_ceil(2);
        }
    }
    // Idle times: the shortest cap that still fails.
    for cap in [0, 1_000, 60_000, 3_600_000] {
        let cap = Duration::from_millis(cap);
        if best.1.reached.longest_idle <= cap {
            break;
        }
        let mut trial = best.0.clone();
        trial.reduction.max_idle = Some(cap);
        if let Some(v) = fails(&trial) {
            best = (trial, v);
            break;
        }
    }
    best
}

/// The line that replays `seed` with `options`.
fn replay_line(seed: u64, options: &Options) -> String {
    let plant = options
        .plant
        .map(|p| format!("STEADFAST_DAEMON_SIM_PLANT={} ", p.name()))
        .unwrap_or_default();
    format!(
        "STEADFAST_DAEMON_SIM_SEED={seed} STEADFAST_DAEMON_SIM_OPS={} {plant}{}cargo test -p \
         steadfast --test it -- daemon_sim::the_daemon --nocapture",
        options.ops,
        options.reduction.env()
    )
}

/// What a violation's run did, in a line: operations performed, faults
/// injected, the longest idle.
fn size(violation: &Violation) -> String {
    format!(
        "{} operations, {} disk faults, longest idle {:?}",
        violation.reached.performed.len(),
        violation.reached.injected.len(),
        violation.reached.longest_idle
    )
}

/// Run `seed`; on a broken check, shrink the run (unless
/// `STEADFAST_DAEMON_SIM_SHRINK=0`) and panic with the line that replays
/// the reduced run.
fn run_checked(seed: u64, options: &Options) -> run::Outcome {
    match run::run(seed, options.clone()) {
        Ok(outcome) => outcome,
        Err(violation) => {
            let before = size(&violation);
            let shrinking = std::env::var("STEADFAST_DAEMON_SIM_SHRINK").as_deref() != Ok("0");
            let (options, violation) = if shrinking {
                shrink(seed, options, violation)
            } else {
                (options.clone(), violation)
            };
            let shown = if std::env::var_os("STEADFAST_DAEMON_SIM_SEED").is_some() {
                0
            } else {
                violation.trace.len().saturating_sub(40)
            };
            panic!(
                "seed {seed} broke \"{}\": {}\n  replay: {}\n  ({}; before shrinking: {before})\n  \
                 trace before it:\n    {}",
                violation.check,
                violation.detail,
                replay_line(seed, &options),
                size(&violation),
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
        let outcome = run_checked(seed, &options);
        eprintln!("seed {seed}: {outcome:?}");
        return;
    }
    let first = env_u64("STEADFAST_DAEMON_SIM_FIRST").unwrap_or(0);
    let count = env_u64("STEADFAST_DAEMON_SIM_SEEDS").unwrap_or(SEEDS);
    let loud = std::env::var_os("STEADFAST_DAEMON_SIM_SEEDS").is_some();
    let started = Instant::now();
    let mut counts = Counts::default();
    let mut faults = FaultCounts::default();
    for (done, seed) in (first..first + count).enumerate() {
        let outcome = run_checked(seed, &options);
        let again = run_checked(seed, &options);
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
        faults.add(&outcome.faults);
        if loud && (done + 1) % 100 == 0 {
            let rate = (done + 1) as f64 / started.elapsed().as_secs_f64();
            eprintln!("daemon sim: {}/{count} seeds, {rate:.1} seeds/s", done + 1);
        }
    }
    let secs = started.elapsed().as_secs_f64();
    let years = counts.virtual_ms as f64 / (365.25 * 86_400_000.0);
    eprintln!(
        "daemon sim: {count} seeds x {} ops (each run twice) in {secs:.1} s, {:.1} seeds/s, \
         {years:.2} virtual years; {counts:?}; disk {faults:?}",
        options.ops,
        count as f64 / secs
    );
    assert!(counts.crashes > 0 && counts.runtime_crashes > 0 && counts.acked > 0);
    assert!(counts.child_restarts > 0 && counts.meltdowns_reported > 0);
}

/// The first seed from 0 at which a run with `plant` breaks a check,
/// within `seeds`.
fn first_failing_seed(plant: Plant, seeds: u64) -> Option<(u64, &'static str, String)> {
    let options = Options {
        plant: Some(plant),
        ..options()
    };
    (0..seeds).find_map(|seed| {
        run::run(seed, options.clone())
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
    let found = first_failing_seed(Plant::DrainLeavesTasks, 40);
    eprintln!("drain that leaves a task serving: first failing seed {found:?}");
    let (_, check, detail) = found.expect("caught within 40 seeds");
    assert_eq!(check, "the daemon's side");
    // The connection left serving writes on, or the lease its runtime
    // uses is given back while it serves.
    assert!(
        detail.contains("after its runtime's drain") || detail.contains("while a runtime uses it"),
        "{detail}"
    );
}

/// The checks catch a journal that answers an append before its fsync:
/// a power cut then takes a transition the daemon had published (the
/// journal left behind stops short of the attempt last reported), or the
/// intent an outliving step ran on (the journal left behind does not name
/// the resource it made).
#[test]
fn a_planted_journal_that_acknowledges_before_its_fsync_is_caught() {
    let found = first_failing_seed(Plant::JournalAcksBeforeFsync, 100);
    eprintln!("journal that acknowledges before its fsync: first failing seed {found:?}");
    let (_, check, detail) = found.expect("caught within 100 seeds");
    assert!(
        [
            "the journal replays to the state last reported",
            "an outliving resource is known to the journal after a crash",
            "a released run's journal is durable",
        ]
        .contains(&check),
        "{check}: {detail}"
    );
}

/// The checks catch a disk whose directory fsync does nothing: a name
/// the daemon or its service relied on (the store's file, a marker
/// renamed into place) is undone by a crash.
#[test]
fn a_planted_rename_without_its_directory_fsync_is_caught() {
    let found = first_failing_seed(Plant::RenameWithoutDirSync, 60);
    eprintln!("rename without its directory fsync: first failing seed {found:?}");
    found.expect("caught within 60 seeds");
}

/// The checks catch a Lifecycle actor that decides on its own (it keeps
/// the machine as it was for a step with no effect): the step it adopted
/// is not the machine's.
#[test]
fn a_planted_decision_in_the_lifecycle_actor_is_caught() {
    let found = first_failing_seed(Plant::ActorDecides, 20);
    eprintln!("a decision in the lifecycle actor: first failing seed {found:?}");
    let (_, check, detail) = found.expect("caught within 20 seeds");
    assert_eq!(
        check, "every transition the actors performed is the machine's",
        "{detail}"
    );
}

/// The checks catch a journal repair that cuts a record too many: a
/// launch that finds a torn tail truncates to the start of the last whole
/// record. That record may have been durable before the crash (a power
/// cut kept part of what was written after it), and the journal the
/// launch keeps no longer holds it.
#[test]
fn a_planted_repair_that_cuts_a_durable_record_is_caught() {
    let found = first_failing_seed(Plant::RepairCutsARecord, SEEDS);
    eprintln!("a repair that cuts a durable record: first failing seed {found:?}");
    let (_, check, detail) = found.expect("caught within 300 seeds");
    assert_eq!(
        check, "the journal a relaunch keeps holds what was durable",
        "{detail}"
    );
}

/// The checks catch a boot that forgets the outstanding checkpoints: after
/// a crash, the lease its predecessor checkpointed is still held at the
/// outside service, and the boot takes a second one instead of adopting
/// it (the first is leaked).
#[test]
fn a_planted_reconcile_that_forgets_a_checkpoint_is_caught() {
    let found = first_failing_seed(Plant::ReconcileForgets, SEEDS);
    eprintln!("a reconcile that forgets a checkpoint: first failing seed {found:?}");
    let (_, check, detail) = found.expect("caught within 300 seeds");
    assert_eq!(check, "the daemon's side", "{detail}");
    assert!(detail.contains("made twice"), "{detail}");
}

/// The checks catch a status record written one transition late: what
/// `steadfastctl status` reads is the snapshot before the one published.
#[test]
fn a_planted_status_record_one_transition_late_is_caught() {
    let found = first_failing_seed(Plant::StatusRecordLags, SEEDS);
    eprintln!("a status record one transition late: first failing seed {found:?}");
    let (_, check, detail) = found.expect("caught within 300 seeds");
    assert_eq!(check, "what operators read is true", "{detail}");
    assert!(detail.contains("status record"), "{detail}");
}

/// The checks catch a Children actor that restarts a temporary child the
/// machine let end: a start the machine never ordered.
#[test]
fn a_planted_restart_of_a_temporary_child_is_caught() {
    let found = first_failing_seed(Plant::ChildrenRestartTemporary, 40);
    eprintln!("a restart of a temporary child: first failing seed {found:?}");
    let (_, check, detail) = found.expect("caught within 40 seeds");
    assert_eq!(check, "the restarts match the machine", "{detail}");
    assert!(detail.contains("child probe"), "{detail}");
}

/// The checks catch a meltdown the Children actor never reports: the
/// group is stopped and its record journaled, and the lifecycle keeps the
/// runtime running until something else drains it, a drain that settles
/// (or an exit) with the meltdown never reported to the runtime.
#[test]
fn a_planted_meltdown_that_is_not_reported_is_caught() {
    let found = first_failing_seed(Plant::MeltdownUnreported, 60);
    eprintln!("a meltdown not reported: first failing seed {found:?}");
    let (_, check, detail) = found.expect("caught within 60 seeds");
    assert_eq!(check, "a meltdown always reaches the lifecycle", "{detail}");
    assert!(
        detail.contains("before the group reported it to its runtime"),
        "{detail}"
    );
}

/// The checks catch a group shutdown that leaves its children running: a
/// child of a drained runtime is still seen afterwards.
#[test]
fn a_planted_shutdown_that_leaves_children_running_is_caught() {
    let found = first_failing_seed(Plant::ChildrenOutliveShutdown, 40);
    eprintln!("a shutdown that leaves children running: first failing seed {found:?}");
    let (_, check, detail) = found.expect("caught within 40 seeds");
    assert_eq!(
        check, "nothing of a child runs after its runtime's drain",
        "{detail}"
    );
}

/// The checks catch an intent that is not written ahead: a crash (with
/// a power cut) after an outliving step made its resource and before the
/// boot's next append leaves a lease or a spool file the journal does not
/// name.
#[test]
fn a_planted_intent_not_written_ahead_is_caught() {
    let found = first_failing_seed(Plant::IntentNotAhead, SEEDS);
    eprintln!("an intent not written ahead: first failing seed {found:?}");
    let (_, check, detail) = found.expect("caught within 300 seeds");
    assert_eq!(
        check, "an outliving resource is known to the journal after a crash",
        "{detail}"
    );
}

/// A launch marker written in place over a clean stop's and never
/// fsynced: a power cut after the relaunch acknowledged something leaves
/// `released`, and the next launch reads a clean stop where there was a
/// crash.
#[test]
fn a_planted_launch_marker_left_unsynced_is_caught() {
    let found = first_failing_seed(Plant::LaunchMarkerUnsynced, SEEDS);
    eprintln!("a launch marker left unsynced: first failing seed {found:?}");
    let (_, check, detail) = found.expect("caught within 300 seeds");
    assert_eq!(check, "a crash is seen as a crash", "{detail}");
}

/// The shrinker reduces a failing run to a smaller one that breaks the
/// same check, and the reduced run replays to that failure.
#[test]
fn a_failing_seed_shrinks_to_a_smaller_run_that_breaks_the_same_check() {
    let plant = Plant::ReconcileForgets;
    let (seed, _, _) = first_failing_seed(plant, SEEDS).expect("a failing seed");
    let options = Options {
        plant: Some(plant),
        ..options()
    };
    let failed = run::run(seed, options.clone()).expect_err("fails");
    let (check, before) = (failed.check, size(&failed));
    let (performed, injected) = (
        failed.reached.performed.len(),
        failed.reached.injected.len(),
    );
    let (reduced, violation) = shrink(seed, &options, failed);
    eprintln!(
        "seed {seed} ({check}): before {before}; after {}\n  replay: {}\n  ops after: {:#?}",
        size(&violation),
        replay_line(seed, &reduced),
        violation
            .trace
            .iter()
            .filter(|line| line.contains(" #"))
            .collect::<Vec<_>>()
    );
    assert_eq!(violation.check, check);
    assert!(
        violation.reached.performed.len() <= performed
            && violation.reached.injected.len() <= injected
    );
    assert!(
        violation.reached.performed.len() + violation.reached.injected.len() < performed + injected,
        "something was taken out"
    );
    let again = run::run(seed, reduced).expect_err("the reduced run fails");
    assert_eq!(again.check, check);
    assert_eq!(again.trace, violation.trace, "and replays");
}

/// Seeds a long run broke, replayed on every `cargo test` (each broke a
/// check before its fix; a change to the workload's draws turns them into
/// other scenarios, so `defects` scripts each one): 7456, a boot whose
/// write failed was reported with the journal healthy while its records
/// were only staged; 3542, a record a failed cut back's fsync lost was
/// left readable to a successor (killed before its next append), which
/// built on it; 17948, a control dir a failed launch created was never
/// made durable in the data dir (the next launch took it for durable);
/// 1609, a fresh header whose fsync failed at open was left for the next
/// launch to trust; 2689, a journal whose fsync at open failed, and whose
/// rewrite then failed, was trusted by the next launch; 14907, the run
/// marker's note of a published attempt waited behind a boot's slow
/// checkpoint fsync, and a kill then reported the attempt before; 2748,
/// a fresh header lost with a failed cut back's fsync was left readable.
#[test]
fn seeds_a_long_run_broke_keep_every_check() {
    const BROKEN: &[u64] = &[7456, 3542, 17948, 1609, 2689, 14907, 2748];
    for &seed in BROKEN {
        let first = run_checked(seed, &options());
        let again = run_checked(seed, &options());
        assert_eq!(first.trace_hash, again.trace_hash, "seed {seed} replays");
    }
}
