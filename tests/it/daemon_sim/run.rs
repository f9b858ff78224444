//! One seed's run: lives of the daemon, each on a current-thread runtime of
//! its own with paused time, driven by the workload the seed draws, ended by
//! a crash at a point the seed draws (the runtime dropped mid-operation:
//! every task, actor and open file of the daemon gone at whatever await it
//! had reached; only the data dir survives) and relaunched on what
//! survived; the last life runs to its end, stops the faults and must
//! settle. Checked after every operation and at every relaunch.

use std::collections::BTreeSet;
use std::fmt;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use steadfast::children::ChildExit;
use steadfast::protocol::journal::{self, Record};
use steadfast::protocol::lifecycle::{LifecycleState, RetryClass};
use steadfast::protocol::snapshot::{PreviousRun, Snapshot};
use steadfast::supervisor::Timings;
use steadfast::{CommandError, ExitIntent, Hold, Supervisor, SupervisorHandle};
use steadfast_actors::fsx::sim::SimFs as _;
use steadfast_actors::planted::Defect;
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

use super::fs::{FaultCounts, Faults, SimFileSystem};
use super::rng::Rng;
use super::service::{
    CHILDREN, ChildEvent, ChildSeen, ChildrenPlan, Request, STORE_FILE, SimService, World, Write,
    stored_records,
};

/// How many attempts the journal's compaction keeps (it compacts past
/// twice as many): small, so that seeds reach compaction (a daemon's
/// default keeps 64).
const KEEP_ATTEMPTS: usize = 3;

/// How long any one operation may take, in virtual time, before the run
/// counts it as a hang (every timer of the daemon is far shorter).
const WATCHDOG: Duration = Duration::from_secs(3_600);

/// The wall clock at a run's start (2026-01-01T00:00:00Z, in ms since the
/// epoch): every run reads the same times, so none depends on the day it
/// runs.
const WALL_START_MS: u64 = 1_767_225_600_000;

/// How long the daemon has to settle once the faults stop.
const SETTLE: Duration = Duration::from_secs(3_600);

/// A count shared with a simulation's seams.
type Counter = std::rc::Rc<std::cell::Cell<u64>>;

/// What a run is asked to do.
#[derive(Debug, Clone)]
pub struct Options {
    /// Operations in all, across every life.
    pub ops: u32,
    /// Inject the disk's faults ([`Faults::DAEMON`]) until the faults stop.
    pub disk_faults: bool,
    /// A defect to plant, if any.
    pub plant: Option<Plant>,
    /// What a shrinker took out of the seed's run.
    pub reduction: Reduction,
}

/// What a shrinker takes out of a seed's run, every draw kept as it was:
/// operations drawn but not performed, disk faults drawn but not
/// injected, idle times cut short.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Reduction {
    /// Operations (numbered from 0, across lives, in the order drawn)
    /// not performed.
    pub skip_ops: BTreeSet<u32>,
    /// Disk faults (numbered from 0 in the order drawn) not injected.
    pub spare_faults: BTreeSet<u64>,
    /// The longest a `sleep` operation sleeps.
    pub max_idle: Option<Duration>,
}

impl Reduction {
    /// The environment that replays it (empty for none).
    pub fn env(&self) -> String {
        fn ranges<T: Copy + Into<u64>>(set: &BTreeSet<T>) -> String {
            let mut out: Vec<String> = Vec::new();
            let mut run: Option<(u64, u64)> = None;
            for n in set.iter().map(|n| (*n).into()) {
                run = match run {
                    Some((from, to)) if n == to + 1 => Some((from, n)),
                    Some((from, to)) => {
                        out.push(if from == to {
                            from.to_string()
                        } else {
                            format!("{from}-{to}")
                        });
                        Some((n, n))
                    }
                    None => Some((n, n)),
                };
            }
            if let Some((from, to)) = run {
                out.push(if from == to {
                    from.to_string()
                } else {
                    format!("{from}-{to}")
                });
            }
            out.join(",")
        }
        let mut env = String::new();
        if !self.skip_ops.is_empty() {
            env += &format!("STEADFAST_DAEMON_SIM_SKIP_OPS={} ", ranges(&self.skip_ops));
        }
        if !self.spare_faults.is_empty() {
            env += &format!(
                "STEADFAST_DAEMON_SIM_SPARE_FAULTS={} ",
                ranges(&self.spare_faults)
            );
        }
        if let Some(idle) = self.max_idle {
            env += &format!("STEADFAST_DAEMON_SIM_MAX_IDLE_MS={} ", idle.as_millis());
        }
        env
    }

    /// The set written as [`Self::env`] writes it (`1-3,7`).
    pub fn parse_set<T: TryFrom<u64> + Ord>(text: &str) -> BTreeSet<T> {
        let mut set = BTreeSet::new();
        for part in text.split(',').filter(|p| !p.is_empty()) {
            let (from, to) = part.split_once('-').unwrap_or((part, part));
            let (from, to): (u64, u64) = (
                from.trim().parse().expect("a number"),
                to.trim().parse().expect("a number"),
            );
            for n in from..=to {
                set.extend(T::try_from(n).ok());
            }
        }
        set
    }
}

/// A defect planted on purpose, to show the checks catch it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Plant {
    /// A drain that leaves a runtime's connections serving.
    DrainLeavesTasks,
    /// A journal that answers an append before its fsync.
    JournalAcksBeforeFsync,
    /// A disk whose directory fsync does nothing: a rename or a new name
    /// may be undone by a crash after it was relied on.
    RenameWithoutDirSync,
    /// A Lifecycle actor that decides on its own: it keeps the machine as
    /// it was for a step with no effect.
    ActorDecides,
    /// A journal repair that cuts the last whole record with a torn tail.
    RepairCutsARecord,
    /// A boot that forgets the outstanding checkpoints: every step runs
    /// again, whatever is still there.
    ReconcileForgets,
    /// A status record written one transition late.
    StatusRecordLags,
    /// A Children actor that restarts a temporary child the machine let
    /// end.
    ChildrenRestartTemporary,
    /// A meltdown the Children actor never reports to its runtime.
    MeltdownUnreported,
    /// A group shutdown that leaves its children running.
    ChildrenOutliveShutdown,
    /// An outliving step's intent staged, not made durable before the
    /// step runs.
    IntentNotAhead,
    /// A launch marker written in place after a clean stop and never
    /// fsynced.
    LaunchMarkerUnsynced,
}

impl Plant {
    const ALL: [(Self, &'static str); 12] = [
        (Self::DrainLeavesTasks, "drain_leaves_tasks"),
        (Self::JournalAcksBeforeFsync, "journal_acks_before_fsync"),
        (Self::RenameWithoutDirSync, "rename_without_dir_sync"),
        (Self::ActorDecides, "actor_decides"),
        (Self::RepairCutsARecord, "repair_cuts_a_record"),
        (Self::ReconcileForgets, "reconcile_forgets"),
        (Self::StatusRecordLags, "status_record_lags"),
        (Self::ChildrenRestartTemporary, "children_restart_temporary"),
        (Self::MeltdownUnreported, "meltdown_unreported"),
        (Self::ChildrenOutliveShutdown, "children_outlive_shutdown"),
        (Self::IntentNotAhead, "intent_not_ahead"),
        (Self::LaunchMarkerUnsynced, "launch_marker_unsynced"),
    ];

    /// The library's defect this plants (none for the disk's, which the
    /// simulated disk plants itself).
    fn defect(self) -> Option<Defect> {
        Some(match self {
            Self::DrainLeavesTasks => Defect::DrainLeavesTasks,
            Self::JournalAcksBeforeFsync => Defect::JournalAcksBeforeFsync,
            Self::RenameWithoutDirSync => return None,
            Self::ActorDecides => Defect::LifecycleDecidesQuietSteps,
            Self::RepairCutsARecord => Defect::JournalRepairCutsARecord,
            Self::ReconcileForgets => Defect::ReconcileForgetsCheckpoints,
            Self::StatusRecordLags => Defect::StatusRecordLags,
            Self::ChildrenRestartTemporary => Defect::ChildrenRestartTemporary,
            Self::MeltdownUnreported => Defect::ChildrenMeltdownUnreported,
            Self::ChildrenOutliveShutdown => Defect::ChildrenOutliveShutdown,
            Self::IntentNotAhead => Defect::IntentNotAhead,
            Self::LaunchMarkerUnsynced => Defect::LaunchMarkerUnsynced,
        })
    }

    /// The defect named `name` (none for an empty name).
    ///
    /// # Panics
    /// On a name no defect has.
    pub fn named(name: &str) -> Option<Self> {
        if name.is_empty() {
            return None;
        }
        let found = Self::ALL.iter().find(|(_, n)| *n == name);
        Some(
            found
                .unwrap_or_else(|| panic!("no planted defect is named {name:?}"))
                .0,
        )
    }

    /// Its name.
    pub fn name(self) -> &'static str {
        Self::ALL
            .iter()
            .find(|(p, _)| *p == self)
            .map_or("", |(_, n)| n)
    }
}

/// What a seed did, when every check held.
#[derive(Debug, Default, Clone)]
pub struct Outcome {
    pub trace_hash: u64,
    pub trace: Vec<String>,
    pub counts: Counts,
    /// The disk's faults, by class.
    pub faults: FaultCounts,
}

/// What a run did, by kind; summed over seeds for the summary.
#[derive(Debug, Default, Clone, Copy)]
pub struct Counts {
    pub ops: u64,
    pub crashes: u64,
    /// Crashes that were power cuts (the rest killed the process alone),
    /// and clean exits the power went out after.
    pub power_cuts: u64,
    /// Lives that exited when asked, each relaunched after a clean stop.
    pub clean_exits: u64,
    /// Launches the disk's faults failed (each tried again).
    pub failed_launches: u64,
    /// Relaunches after a crash that found a stop held across relaunch.
    pub held_relaunches: u64,
    pub runtime_crashes: u64,
    pub config_edits: u64,
    pub broken_configs: u64,
    pub commands: u64,
    pub refusals: u64,
    pub acked: u64,
    pub checks: u64,
    /// Adopted lifecycle steps held to the pure machine.
    pub steps_checked: u64,
    /// Device jobs (fsyncs, marker writes) that took 10 ms to 40 s.
    pub slow_jobs: u64,
    /// Relaunches after the wall clock jumped (forward or back).
    pub clock_jumps: u64,
    /// Files (the journal, the status record, the markers, the lock)
    /// removed or replaced underneath the daemon.
    pub intrusions: u64,
    /// Relaunches whose kept journal was held to what was durable before
    /// the crash, and how many of those journals were compacted.
    pub durable_prefix_checks: u64,
    pub compacted_at_relaunch: u64,
    /// Journals rewritten into a new file under the daemon (compacted,
    /// or repaired into a new file), counted by the file's inode changing.
    pub journal_rewrites: u64,
    /// Times the status record, `status --json` and `watch` were read back.
    pub reader_checks: u64,
    /// Resources that outlive the process (leases, spool files) made, and
    /// those an intrusion on the journal orphaned.
    pub outliving: u64,
    pub orphaned: u64,
    /// Children's starts (restarts included) held to the pure machine,
    /// restarts among them, meltdowns, and meltdowns the lifecycle was
    /// seen to fail its runtime for.
    pub child_starts: u64,
    pub child_restarts: u64,
    pub meltdowns: u64,
    pub meltdowns_reported: u64,
    pub virtual_ms: u64,
}

impl Counts {
    pub fn add(&mut self, other: &Self) {
        self.clean_exits += other.clean_exits;
        self.ops += other.ops;
        self.crashes += other.crashes;
        self.power_cuts += other.power_cuts;
        self.failed_launches += other.failed_launches;
        self.held_relaunches += other.held_relaunches;
        self.runtime_crashes += other.runtime_crashes;
        self.config_edits += other.config_edits;
        self.broken_configs += other.broken_configs;
        self.commands += other.commands;
        self.refusals += other.refusals;
        self.acked += other.acked;
        self.checks += other.checks;
        self.steps_checked += other.steps_checked;
        self.slow_jobs += other.slow_jobs;
        self.clock_jumps += other.clock_jumps;
        self.intrusions += other.intrusions;
        self.durable_prefix_checks += other.durable_prefix_checks;
        self.compacted_at_relaunch += other.compacted_at_relaunch;
        self.journal_rewrites += other.journal_rewrites;
        self.reader_checks += other.reader_checks;
        self.outliving += other.outliving;
        self.orphaned += other.orphaned;
        self.child_starts += other.child_starts;
        self.child_restarts += other.child_restarts;
        self.meltdowns += other.meltdowns;
        self.meltdowns_reported += other.meltdowns_reported;
        self.virtual_ms += other.virtual_ms;
    }
}

/// A broken check: which, what was seen, and the trace up to it.
#[derive(Debug)]
pub struct Violation {
    pub check: &'static str,
    pub detail: String,
    pub trace: Vec<String>,
    /// How much of the run it took: what a shrinker takes out.
    pub reached: Box<Reached>,
}

/// How much of a run it took to break a check.
#[derive(Debug)]
pub struct Reached {
    /// The operations performed (their numbers, as drawn).
    pub performed: Vec<u32>,
    /// The disk faults injected (their numbers, as drawn).
    pub injected: Vec<u64>,
    /// The longest sleep performed.
    pub longest_idle: Duration,
}

/// An operation of the workload.
#[derive(Debug, Clone)]
enum Op {
    /// Records written over a connection (a new one, or the `reuse`-th
    /// open one), acknowledged once durable.
    Write {
        records: u32,
        reuse: Option<usize>,
        stubborn: bool,
    },
    Sleep(Duration),
    Stop(bool),
    Start,
    Restart(bool),
    Retry,
    Reload,
    Reinit,
    Config(Edit),
    /// `config set` of a leaf of the override tier (`tag` or `slow_ms`).
    ConfigSet(&'static str, i64),
    /// `config unset` of a leaf.
    ConfigUnset(&'static str),
    CrashRuntime,
    /// Something else removes a file of the control dir (`true`) or
    /// renames a copy of it over it (`false`) under the running daemon.
    Intrude(Intruded, bool),
}

/// A file of the control dir something else removes or replaces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Intruded {
    Journal,
    Status,
    RunMarker,
    HoldMarker,
    Lock,
}

impl Intruded {
    const ALL: [Self; 5] = [
        Self::Journal,
        Self::Status,
        Self::RunMarker,
        Self::HoldMarker,
        Self::Lock,
    ];

    const fn name(self) -> &'static str {
        match self {
            Self::Journal => "journal",
            Self::Status => "status",
            Self::RunMarker => "run",
            Self::HoldMarker => "hold",
            Self::Lock => "lock",
        }
    }
}

/// The leaves the workload sets in the override tier: harmless ones (a
/// change, a slow step), so that an override left set never keeps the
/// daemon from settling.
const OVERRIDE_LEAVES: [&str; 2] = ["tag", "slow_ms"];

/// A config edit.
#[derive(Debug, Clone)]
enum Edit {
    Good(i64),
    Broken,
    Switch(&'static str, &'static str),
    Refuse,
    Slow(i64),
    WipeFails,
}

const STEPS: [&str; 4] = ["open_store", "lease", "spool", "serve"];

impl Op {
    fn draw(rng: &mut Rng, open: usize) -> Self {
        let pick = rng.below(1000);
        match pick {
            0..300 => Self::Write {
                records: 1 + u32::try_from(rng.below(3)).unwrap_or(0),
                reuse: (open > 0 && rng.chance(600))
                    .then(|| usize::try_from(rng.below(open as u64)).unwrap_or(0)),
                stubborn: rng.chance(300),
            },
            300..430 => Self::Sleep(match rng.below(10) {
                0..6 => Duration::from_millis(rng.below(5_000)),
                6..9 => Duration::from_secs(rng.below(600)),
                _ => Duration::from_secs(rng.below(7 * 86_400)),
            }),
            430..500 => Self::Stop(rng.chance(500)),
            500..570 => Self::Start,
            570..630 => Self::Restart(rng.chance(200)),
            630..690 => Self::Retry,
            690..740 => Self::Reload,
            740..770 => Self::Reinit,
            770..800 => {
                let leaf = OVERRIDE_LEAVES[usize::try_from(rng.below(2)).unwrap_or(0)];
                if rng.chance(700) {
                    Self::ConfigSet(leaf, i64::try_from(rng.below(5_000)).unwrap_or(0))
                } else {
                    Self::ConfigUnset(leaf)
                }
            }
            800..950 => Self::Config(match rng.below(100) {
                0..45 => Edit::Good(i64::try_from(rng.below(1_000)).unwrap_or(0)),
                45..55 => Edit::Broken,
                55..80 => {
                    let how = ["fail_in", "panic_in", "hang_in"]
                        [usize::try_from(rng.below(3)).unwrap_or(0)];
                    let step = STEPS[usize::try_from(rng.below(4)).unwrap_or(0)];
                    Edit::Switch(how, step)
                }
                80..85 => Edit::Refuse,
                85..95 => Edit::Slow(i64::try_from(rng.below(20_000)).unwrap_or(0)),
                _ => Edit::WipeFails,
            }),
            950..953 => Self::Intrude(Intruded::Journal, rng.chance(500)),
            953..957 => Self::Intrude(
                Intruded::ALL[1 + usize::try_from(rng.below(4)).unwrap_or(0)],
                rng.chance(500),
            ),
            _ => Self::CrashRuntime,
        }
    }
}

impl Edit {
    fn config(&self) -> Option<toml::Table> {
        let mut table = toml::Table::new();
        match self {
            Self::Good(tag) => {
                table.insert("tag".into(), (*tag).into());
            }
            Self::Broken => return None,
            Self::Switch(how, step) => {
                table.insert((*how).into(), (*step).into());
            }
            Self::Refuse => {
                table.insert("refuse".into(), true.into());
            }
            Self::Slow(ms) => {
                table.insert("slow_ms".into(), (*ms).into());
            }
            Self::WipeFails => {
                table.insert("wipe_fails".into(), true.into());
            }
        }
        Some(table)
    }
}

/// What the workload knows, across lives: what was acknowledged.
#[derive(Default)]
struct Model {
    /// Records acknowledged since the store was last wiped.
    acked: BTreeSet<u64>,
    next_seq: u64,
    /// The highest attempt number a published snapshot of this life
    /// showed.
    last_attempt: u32,
    /// The epoch this life last published.
    epoch: u64,
    /// The highest attempt this life published with no journal failure
    /// in the snapshot's error: published only once its record was
    /// durable, so the journal holds it after any crash.
    durable_attempt: u32,
    /// Whether the last published snapshot held the runtime down across a
    /// relaunch.
    held: bool,
    /// The connections this life opened.
    connections: Vec<mpsc::UnboundedSender<Write>>,
    /// How the last life ended, if by a crash: a power cut (the disk keeps
    /// only what was synced) or the process killed (the page cache
    /// survives it).
    power_cut: bool,
    /// Whether the disk injected a fault during the last life.
    faulted: bool,
    /// Whether the journal was removed or replaced underneath during the
    /// last life: what it held of that life is not the journal's to keep.
    intruded: bool,
    /// Whether the last life acknowledged anything (a command answered
    /// `Ok`, a record).
    acknowledged: bool,
    /// The override tier as acknowledged: each leaf's value (`None`:
    /// unset). A leaf whose last `set` or `unset` was answered `not
    /// durable` is not known until it is set again.
    overrides: std::collections::BTreeMap<&'static str, Option<i64>>,
    /// Whether the last `stop --hold` or `start` was answered `not
    /// durable`: the hold marker's change may or may not have reached the
    /// disk (it is not adopted; the next daemon reads what is there).
    hold_uncertain: bool,
    /// The machine the last adopted step of this life left.
    machine: Option<steadfast::protocol::lifecycle::Lifecycle>,
    /// The journal's records as the crash found them: those durable (a
    /// crash keeps them whatever else it does) and those written (the
    /// page cache). `None`: no crash, or a life whose journal was removed
    /// or replaced underneath.
    journal_at_crash: Option<(Vec<Record>, Vec<u8>)>,
    /// The last life exited when asked: how far its `released` run marker
    /// got. `None`: it crashed.
    exited_released: Option<Released>,
    /// This life's launch failed on a disk fault at least once before it
    /// opened.
    launch_failed: bool,
    /// Whether the run or hold marker was removed or replaced underneath
    /// during the last life: what a relaunch reads of the crash and the
    /// hold is not the daemon's to keep.
    markers_intruded: bool,
    /// Whether the status record was removed or replaced underneath
    /// during this life (readers then find none, or a stale copy, until
    /// the next launch makes it afresh).
    status_intruded: bool,
    /// What an operator last read this life: the status record's version,
    /// `status --json`'s, and the snapshot `watch` built.
    read_versions: (u64, u64),
    watched: Option<Snapshot>,
    /// The published version the readers were last checked at.
    read_checked: Option<u64>,
}

/// How far an exited life's `released` run marker got.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Released {
    /// Durable: the relaunch reads a clean stop, a power cut or not.
    Durable,
    /// Renamed into place, its directory's fsync failed: a power cut may
    /// keep the rename or not.
    Written,
    /// Not written (the disk refused it, or the journal's fsync before
    /// it): `holding` stands, a crash.
    No,
}

struct Run {
    rng: Rng,
    /// Which lives cut short exit instead of crashing: a stream of its
    /// own, so every other draw of a seed is what it was without them.
    exits: Rng,
    world: Arc<World>,
    disk: SimFileSystem,
    /// The data dir's path as the disk's trace names it (each run has its
    /// own: the trace shows `<data>`).
    data_dir: String,
    /// The declared config file, on the simulated disk.
    config_file: std::path::PathBuf,
    model: Model,
    trace: Vec<String>,
    counts: Counts,
    /// Virtual time before this life began.
    elapsed_before: Duration,
    /// How far the wall clock has jumped from virtual time, in ms (a
    /// relaunch reads the wall clock at its start: 2026-01-01 plus the
    /// virtual time passed plus this).
    clock_skew_ms: i64,
    /// Device jobs that outlasted the journal's timeout (30 s): a disk
    /// that slow fails the daemon's durable answers as a faulty one does.
    jobs_past_timeout: std::rc::Rc<std::cell::Cell<u64>>,
    /// Journals removed or replaced underneath, of all intrusions.
    journal_intrusions: u64,
    /// The journal's inode when last looked at.
    journal_ino: Option<u64>,
    /// [`Self::disturbances`] when this life launched.
    faults_at_launch: u64,
    /// What a shrinker took out.
    reduction: Reduction,
    /// Operations drawn so far, and the numbers of those performed.
    drawn_ops: u32,
    performed: Vec<u32>,
    /// The longest sleep performed.
    longest_idle: Duration,
    life: u32,
    /// The children as this life saw them, held to the pure machine.
    children: ChildrenSeen,
}

/// Why a life ended.
enum Ended {
    Crashed,
    /// Asked to exit for a relaunch, and exited: the next launch follows
    /// a clean stop (unless the disk failed its `released` marker).
    Exited,
    Settled,
}

/// Run `seed`.
///
/// # Errors
/// The first broken check.
pub fn run(seed: u64, options: Options) -> Result<Outcome, Violation> {
    // The data dir's path names an empty directory on the OS, so a lookup
    // outside the file-system seam finds a directory and nothing in it;
    // everything the daemon keeps is on the simulated disk.
    let dir = tempfile::tempdir().expect("a temp dir");
    let world = Arc::new(World::default());
    let disk = SimFileSystem::new(
        Rng::new(seed ^ 0x5eed_d15c),
        if options.disk_faults {
            Faults::DAEMON
        } else {
            Faults::NONE
        },
    );
    disk.skip_dir_sync(options.plant == Some(Plant::RenameWithoutDirSync));
    disk.spare_faults(options.reduction.spare_faults.clone());
    let mut run = Run {
        rng: Rng::new(seed),
        exits: Rng::new(seed ^ 0x00e8_17ed),
        world,
        disk: disk.clone(),
        data_dir: dir.path().display().to_string(),
        config_file: dir.path().join("sim.toml"),
        model: Model::default(),
        trace: Vec::new(),
        counts: Counts::default(),
        elapsed_before: Duration::ZERO,
        clock_skew_ms: 0,
        jobs_past_timeout: std::rc::Rc::default(),
        journal_intrusions: 0,
        journal_ino: None,
        faults_at_launch: 0,
        reduction: options.reduction.clone(),
        drawn_ops: 0,
        performed: Vec::new(),
        longest_idle: Duration::ZERO,
        life: 0,
        children: ChildrenSeen::default(),
    };
    run.world.plan_children(ChildrenPlan::draw(seed));
    run.disk
        .create_dir_all_durable(dir.path())
        .expect("the data dir's directory");
    run.write_config(&Edit::Good(0), true, true);
    run.world
        .watch_journal(run.disk.clone(), dir.path(), run.journal_path());
    let slow_jobs = std::rc::Rc::new(std::cell::Cell::new(0));
    let _seams = Seams::new(
        options.plant,
        disk,
        options.disk_faults.then(|| {
            (
                seed,
                std::rc::Rc::clone(&slow_jobs),
                std::rc::Rc::clone(&run.jobs_past_timeout),
            )
        }),
    );
    let mut left = options.ops;
    loop {
        run.life += 1;
        // Most lives end in a crash part way; one in four runs to the end.
        let crash_after = (!run.rng.chance(250))
            .then(|| u32::try_from(run.rng.below(u64::from(left.max(1)))).unwrap_or(0) + 1);
        let ops = crash_after.map_or(left, |n| n.min(left));
        // One in five of the lives cut short is asked to exit instead, so
        // the next launch follows a clean stop (its marker written in
        // place, the journal's open fsync skipped) and is itself crashed
        // and power-cut as any launch is.
        let exits = crash_after.is_some() && run.exits.chance(200);
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .start_paused(true)
            .build()
            .expect("a runtime");
        let faults_before = run.disturbances();
        let intrusions_before = run.journal_intrusions;
        let ended = runtime.block_on(run.life(
            dir.path(),
            ops,
            crash_after.is_some() && ops < left,
            exits,
        ))?;
        run.model.faulted = run.disturbances() != faults_before;
        run.model.intruded = run.journal_intrusions != intrusions_before;
        // The crash: every task of the daemon is dropped where it waits
        // (its files closed, its locks released); half the time the
        // machine loses its power too, and the disk keeps only what was
        // synced.
        drop(runtime);
        run.check_steps()?;
        run.check_children()?;
        run.children_life_ended(matches!(ended, Ended::Crashed))?;
        run.model.machine = None;
        let cut_short = matches!(ended, Ended::Crashed | Ended::Exited);
        run.model.power_cut = cut_short && run.rng.chance(500);
        run.model.exited_released = None;
        if matches!(ended, Ended::Exited) {
            run.check_released_covers_the_journal()?;
        }
        // What was durable of the journal before the crash (what a power
        // cut keeps at the least, a kill too).
        let durable = (cut_short && !run.model.intruded).then(|| {
            let bytes = run
                .disk
                .read_durable(run.journal_path())
                .unwrap_or_default();
            journal::decode(&bytes)
                .map(|decoded| decoded.records)
                .unwrap_or_default()
        });
        if run.model.power_cut {
            run.disk.crash();
        }
        run.take_disk_trace();
        if cut_short {
            run.check_journal(dir.path())?;
        }
        run.model.journal_at_crash = durable.map(|durable| {
            let written = run.disk.read(run.journal_path()).unwrap_or_default();
            (durable, written)
        });
        run.world.crashed();
        run.model.connections.clear();
        left -= ops;
        match ended {
            Ended::Settled => break,
            Ended::Exited => {
                run.counts.clean_exits += 1;
                run.counts.power_cuts += u64::from(run.model.power_cut);
                let how = if run.model.power_cut {
                    "; the power cut"
                } else {
                    ""
                };
                run.note(format_args!("exited{how}; relaunch"));
            }
            Ended::Crashed => {
                run.counts.crashes += 1;
                run.counts.power_cuts += u64::from(run.model.power_cut);
                let how = if run.model.power_cut {
                    "power cut"
                } else {
                    "process killed"
                };
                run.note(format_args!("crash ({how}); relaunch"));
            }
        }
    }
    run.check_store(dir.path())?;
    run.check_outliving()?;
    run.counts.slow_jobs = slow_jobs.get();
    let mut hasher = DefaultHasher::new();
    run.trace.hash(&mut hasher);
    Ok(Outcome {
        trace_hash: hasher.finish(),
        trace: run.trace,
        counts: run.counts,
        faults: run.disk.counts(),
    })
}

/// How many faults the disk injected (its crashes aside).
const fn injected(counts: &FaultCounts) -> u64 {
    counts.open_error
        + counts.write_error
        + counts.short_write
        + counts.fsync_error
        + counts.dir_error
}

/// The run's thread as the simulation needs it (device jobs inline, files
/// on the simulated disk, the planted defect if asked), restored when the
/// run ends.
struct Seams;

impl Seams {
    /// With `slow` (a seed, and where to count), one device job in fifty (an fsync, a
    /// marker's write) takes from 10 ms to 40 s of virtual time.
    fn new(
        plant: Option<Plant>,
        disk: SimFileSystem,
        slow: Option<(u64, Counter, Counter)>,
    ) -> Self {
        use steadfast_actors::planted;
        steadfast_actors::device::inline_job_latency(slow.map(|(seed, count, past)| {
            let mut rng = Rng::new(seed ^ 0x0051_0de5);
            let draw: Box<dyn FnMut() -> Duration> = Box::new(move || {
                if rng.chance(20) {
                    count.set(count.get() + 1);
                    let took = Duration::from_millis(10 + rng.below(40_000));
                    if took >= timings().journal_timeout {
                        past.set(past.get() + 1);
                    }
                    took
                } else {
                    Duration::ZERO
                }
            });
            draw
        }));
        planted::plant(plant.and_then(Plant::defect));
        steadfast_actors::observed::record_adopted_steps(true);
        steadfast_actors::device::run_inline_on_this_thread(true);
        steadfast_actors::fsx::sim::simulate_on_this_thread(Some(Arc::new(disk)));
        Self
    }
}

impl Drop for Seams {
    fn drop(&mut self) {
        use steadfast_actors::planted;
        planted::plant(None);
        steadfast_actors::observed::record_adopted_steps(false);
        steadfast_actors::device::run_inline_on_this_thread(false);
        steadfast_actors::device::inline_job_latency(None);
        steadfast_actors::fsx::sim::simulate_on_this_thread(None);
        steadfast_actors::clock::anchor_wall_clock_on_this_thread(None);
    }
}

fn timings() -> Timings {
    Timings {
        drain_grace: Duration::from_secs(2),
        step_deadline: Duration::from_secs(30),
        ..Timings::default()
    }
}

/// The state's name and attempt: what the trace shows of a snapshot
/// (never a timestamp: the wall clock differs between runs).
fn label(state: &LifecycleState) -> String {
    match state {
        LifecycleState::Booting { attempt, phase, .. } => format!("booting#{attempt}:{phase}"),
        LifecycleState::Running { attempt, .. } => format!("running#{attempt}"),
        LifecycleState::Draining { attempt, then, .. } => {
            format!("draining#{attempt}->{}", then.name())
        }
        LifecycleState::Stopped { reason, .. } => format!("stopped:{}", reason.name()),
        LifecycleState::Failed {
            attempt,
            retry,
            budget_spent,
            ..
        } => format!(
            "failed#{attempt}:{}{}",
            match retry {
                RetryClass::Backoff { delay_ms, .. } => format!("backoff{delay_ms}"),
                RetryClass::Hold => "hold".to_owned(),
            },
            if budget_spent.is_some() { ":spent" } else { "" }
        ),
        other => other.name().to_owned(),
    }
}

fn attempt_of(state: &LifecycleState) -> Option<u32> {
    match state {
        LifecycleState::Booting { attempt, .. }
        | LifecycleState::Running { attempt, .. }
        | LifecycleState::Draining { attempt, .. }
        | LifecycleState::Failed { attempt, .. } => Some(attempt.get()),
        _ => None,
    }
}

/// Settled: nothing will happen until an operator or the config file
/// acts (a pending retry is not settled).
fn settled(snapshot: &Snapshot) -> bool {
    match &snapshot.lifecycle {
        LifecycleState::Running { .. } | LifecycleState::Stopped { .. } => true,
        LifecycleState::Failed {
            retry,
            budget_spent,
            ..
        } => matches!(retry, RetryClass::Hold) || budget_spent.is_some(),
        _ => false,
    }
}

fn answer(result: &Result<Snapshot, CommandError>) -> String {
    match result {
        Ok(_) => "ok".to_owned(),
        Err(CommandError::Refused(refused)) => format!("refused:{:?}", refused.reason),
        Err(CommandError::Durability(_)) => "not-durable".to_owned(),
        Err(CommandError::Failed(_)) => "failed".to_owned(),
        Err(other) => format!(
            "error:{}",
            other.to_string().split(':').next().unwrap_or("")
        ),
    }
}

impl Run {
    fn note(&mut self, what: fmt::Arguments<'_>) {
        self.trace.push(format!("life {} {what}", self.life));
    }

    fn violation(&self, check: &'static str, detail: String) -> Violation {
        Violation {
            check,
            detail,
            trace: self.trace.clone(),
            reached: Box::new(Reached {
                performed: self.performed.clone(),
                injected: (0..self.disk.drawn_faults())
                    .filter(|n| !self.reduction.spare_faults.contains(n))
                    .collect(),
                longest_idle: self.longest_idle,
            }),
        }
    }

    /// Every step the Lifecycle actor adopted since the last look is the
    /// pure machine's own step from the same state and event, and starts
    /// where the step before it left the machine.
    fn check_steps(&mut self) -> Result<(), Violation> {
        for step in steadfast_actors::observed::take_adopted_steps() {
            self.counts.steps_checked += 1;
            if let Some(left) = &self.model.machine
                && *left != step.before
            {
                return Err(self.violation(
                    "each step starts where the one before it left the machine",
                    format!(
                        "{:?} was stepped from {:?}, the machine was left at {:?}",
                        step.event, step.before.state, left.state
                    ),
                ));
            }
            match step.before.step(&step.event) {
                Ok((next, effect, _)) if next == step.after && effect == step.effect => {}
                decided => {
                    return Err(self.violation(
                        "every transition the actors performed is the machine's",
                        format!(
                            "{:?} from {:?}: the actor adopted {:?} ({:?}), the machine decides {:?}",
                            step.event,
                            step.before.state,
                            step.after.state,
                            step.effect,
                            decided.map(|(next, effect, _)| (next.state, effect))
                        ),
                    ));
                }
            }
            self.children.steps.push(StepSeen::of(&step));
            self.model.machine = Some(step.after);
        }
        Ok(())
    }

    /// After a crash, before the relaunch: the journal holds the crashed
    /// run's attempts up to the last one it published with no journal
    /// error (records written ahead of an fsync that failed included: they
    /// are written again once the disk lets the journal).
    fn check_journal(&mut self, data_dir: &Path) -> Result<(), Violation> {
        if self.model.durable_attempt == 0 || self.model.intruded {
            return Ok(());
        }
        self.counts.checks += 1;
        // Read as the next daemon will, without the disk's faults.
        let path = data_dir.join(".steadfast").join("journal");
        let bytes = self.disk.read(&path).unwrap_or_default();
        let records = steadfast::protocol::journal::decode(&bytes)
            .map_err(|e| self.violation("the journal reads after a crash", e.to_string()))?
            .records;
        let attempts = steadfast::protocol::history::attempts(&records, usize::MAX);
        let last_run = attempts.iter().map(|a| a.run).max();
        let recorded = attempts
            .iter()
            .filter(|a| Some(a.run) == last_run)
            .map(|a| a.attempt.attempt.get())
            .max()
            .unwrap_or(0);
        if recorded < self.model.durable_attempt {
            return Err(self.violation(
                "the journal replays to the state last reported",
                format!(
                    "attempt {} was published with the journal healthy; after the crash the \
                     journal's last run reaches attempt {recorded}",
                    self.model.durable_attempt
                ),
            ));
        }
        Ok(())
    }

    /// How many faults the disk injected (its crashes aside) and device
    /// jobs outlasted the journal's timeout so far: what may make a durable
    /// answer fail.
    fn disturbances(&self) -> u64 {
        injected(&self.disk.counts()) + self.jobs_past_timeout.get() + self.counts.intrusions
    }

    /// The disk's lines (its faults, its crashes) into the trace.
    fn take_disk_trace(&mut self) {
        for line in self.disk.take_trace() {
            let line = line.replace(&self.data_dir, "<data>");
            self.note(format_args!("disk: {line}"));
        }
    }

    /// Every record acknowledged since the last wipe is in the store.
    fn check_store(&mut self, data_dir: &Path) -> Result<(), Violation> {
        self.counts.checks += 1;
        let bytes = self
            .disk
            .read(data_dir.join(STORE_FILE))
            .unwrap_or_default();
        let stored: BTreeSet<u64> = stored_records(&bytes);
        if let Some(lost) = self.model.acked.iter().find(|seq| !stored.contains(seq)) {
            return Err(self.violation(
                "nothing acknowledged is lost",
                format!(
                    "record {lost} was acknowledged and is not in the store ({} acknowledged, {} stored)",
                    self.model.acked.len(),
                    stored.len()
                ),
            ));
        }
        Ok(())
    }

    /// What every observed snapshot must keep, and what it tells the
    /// model.
    fn observe(&mut self, snapshot: &Snapshot) -> Result<(), Violation> {
        self.counts.checks += 1;
        if snapshot.epoch < self.model.epoch {
            return Err(self.violation(
                "a process's epoch never goes back",
                format!(
                    "epoch {} published after epoch {}",
                    snapshot.epoch, self.model.epoch
                ),
            ));
        }
        self.model.epoch = snapshot.epoch;
        let max = snapshot
            .attempts
            .iter()
            .map(|a| a.attempt.get())
            .chain(attempt_of(&snapshot.lifecycle))
            .max()
            .unwrap_or(0);
        self.model.last_attempt = self.model.last_attempt.max(max);
        let journal_failed = snapshot
            .error
            .as_deref()
            .is_some_and(|error| error.contains("journal"));
        if let Some(current) = attempt_of(&snapshot.lifecycle)
            && !journal_failed
        {
            // Lower: the attempts count again (a re-initialization).
            self.model.durable_attempt = if current < self.model.durable_attempt {
                current
            } else {
                current.max(self.model.durable_attempt)
            };
        }
        self.model.held = snapshot.hold;
        let violations = self.world.take_violations();
        if let Some(first) = violations.into_iter().next() {
            return Err(self.violation("the daemon's side", first));
        }
        Ok(())
    }

    /// Ask the daemon to exit with `intent` and wait, up to `within` of
    /// virtual time, for the answer and for its run to end with that
    /// intent: carried out and answered `Ok` — or `not durable` when the
    /// disk failed this life a marker or journal write that only a
    /// relaunch repairs (the next daemon reads the disk). Anything else
    /// breaks "the daemon exits when asked", the violation's detail
    /// starting with `asked`.
    async fn ask_to_exit(
        &mut self,
        handle: &SupervisorHandle,
        daemon: &mut tokio::task::JoinHandle<ExitIntent>,
        intent: ExitIntent,
        within: Duration,
        asked: &str,
    ) -> Result<(), Violation> {
        self.counts.checks += 1;
        let exited = tokio::time::timeout(within, async {
            let answer = handle.exit(intent).await;
            (
                answer.map(drop).map_err(|e| e.to_string()),
                daemon.await.ok(),
            )
        })
        .await;
        let faulted = self.disturbances() != self.faults_at_launch;
        let answered = match &exited {
            Ok((Ok(()), Some(ended))) => *ended == intent,
            Ok((Err(e), Some(ended))) => {
                *ended == intent && faulted && e.starts_with("not durable")
            }
            _ => false,
        };
        if !answered {
            return Err(self.violation(
                "the daemon exits when asked",
                format!("{asked}: {exited:?}"),
            ));
        }
        Ok(())
    }

    /// Ask the daemon to exit for a relaunch, as `steadfastctl exit
    /// --relaunch` does, with the disk's faults still on
    /// ([`Self::ask_to_exit`]).
    async fn exit_when_asked(
        &mut self,
        handle: &SupervisorHandle,
        daemon: &mut tokio::task::JoinHandle<ExitIntent>,
        life_started: Instant,
    ) -> Result<Ended, Violation> {
        self.ask_to_exit(
            handle,
            daemon,
            ExitIntent::Relaunch,
            Duration::from_secs(3_700),
            "exit --relaunch",
        )
        .await?;
        self.take_disk_trace();
        self.note(format_args!("asked to exit for a relaunch; exited"));
        self.elapsed_before += life_started.elapsed();
        self.counts.virtual_ms = u64::try_from(self.elapsed_before.as_millis()).unwrap_or(0);
        Ok(Ended::Exited)
    }

    /// A life that exited: when its `released` run marker was written
    /// (durable, or renamed into place with its directory's fsync
    /// failed), every journal record it wrote is durable (the next launch
    /// may read it and trusts the journal without an fsync at open), so a
    /// power cut now takes nothing from it.
    fn check_released_covers_the_journal(&mut self) -> Result<(), Violation> {
        let run = Path::new(&self.data_dir).join(".steadfast").join("run");
        // The payload's first byte is the variant's varint tag: `Holding`
        // 0, `Released` 1 (`control_dir::markers`).
        let is_released = |bytes: Option<Vec<u8>>| {
            bytes.is_some_and(|b| b.starts_with(b"STFDRUN1") && b.get(16) == Some(&1))
        };
        let released = if is_released(self.disk.read_durable(&run)) {
            Released::Durable
        } else if is_released(self.disk.read(&run)) {
            Released::Written
        } else {
            Released::No
        };
        self.model.exited_released = Some(released);
        // Written at all, `released` was written after the journal's
        // fsync: the next launch may read it, and trusts the journal.
        if released == Released::No || self.model.intruded {
            return Ok(());
        }
        self.counts.checks += 1;
        let records = |bytes: Option<Vec<u8>>| {
            journal::decode(&bytes.unwrap_or_default()).map(|decoded| decoded.records)
        };
        let durable = records(self.disk.read_durable(self.journal_path()));
        let written = records(self.disk.read(self.journal_path()));
        if durable.is_err() || durable != written {
            return Err(self.violation(
                "a released run's journal is durable",
                format!(
                    "released is {released:?}; the journal's durable records {:?} differ from those written {:?}",
                    durable.map(|r| r.len()),
                    written.map(|r| r.len())
                ),
            ));
        }
        Ok(())
    }

    /// A relaunch's first snapshot: what the journal and the markers
    /// replayed of the life that crashed.
    fn relaunched(&mut self, first: &Snapshot) -> Result<(), Violation> {
        self.counts.checks += 1;
        self.counts.held_relaunches += u64::from(self.model.held);
        // A run or hold marker removed or replaced underneath: what the
        // relaunch reads of the crash and of the hold is not the daemon's.
        let markers_intruded = std::mem::take(&mut self.model.markers_intruded);
        let exited_released = self.model.exited_released.take();
        let hold_uncertain = std::mem::take(&mut self.model.hold_uncertain) || markers_intruded;
        if self.model.held
            && !hold_uncertain
            && !(first.hold && matches!(first.lifecycle, LifecycleState::Stopped { .. }))
        {
            return Err(self.violation(
                "a stop held across relaunch stays stopped",
                format!(
                    "held before the crash; relaunched as {} (hold={})",
                    label(&first.lifecycle),
                    first.hold
                ),
            ));
        }
        if !self.model.held && !hold_uncertain && first.hold {
            return Err(self.violation(
                "a runtime not held comes back not held",
                format!(
                    "not held before the crash; relaunched held as {}",
                    label(&first.lifecycle)
                ),
            ));
        }
        if markers_intruded {
            self.model.last_attempt = 0;
            self.model.durable_attempt = 0;
            self.model.epoch = 0;
            return self.observe(first);
        }
        match (exited_released, &first.previous_run) {
            // Released, durably: read as a clean stop, a power cut or not.
            (Some(Released::Durable | Released::Written), PreviousRun::CleanStop { .. }) => {
                self.model.last_attempt = 0;
                self.model.durable_attempt = 0;
                self.model.epoch = 0;
                return self.observe(first);
            }
            // A launch the disk failed while it wrote its marker over
            // `released` in place, and failed again as it put `released`
            // back: the marker it left is torn, so unreadable.
            (
                Some(Released::Durable),
                PreviousRun::Crashed {
                    pid: None,
                    attempt: None,
                },
            ) if self.model.launch_failed => {
                self.model.last_attempt = 0;
                self.model.durable_attempt = 0;
                self.model.epoch = 0;
                return self.observe(first);
            }
            (Some(Released::Durable), other) => {
                return Err(self.violation(
                    "a clean stop reads as a clean stop",
                    format!("its released marker was durable; the previous run reads {other:?}"),
                ));
            }
            // The disk failed its release: `holding` stands, a crash (its
            // attempt note aside, which an exit's drain moved on).
            (Some(Released::Written | Released::No), PreviousRun::Crashed { .. }) => {
                self.model.last_attempt = 0;
                self.model.durable_attempt = 0;
                self.model.epoch = 0;
                return self.observe(first);
            }
            (Some(Released::Written | Released::No), _) | (None, _) => {}
        }
        let crashed_on = match &first.previous_run {
            PreviousRun::Crashed { attempt, .. } => *attempt,
            // A power cut before the launch's run marker was durable (the
            // disk failed its fsyncs) leaves no trace of the run: the
            // marker before it reads (none, or a clean stop's `released`
            // its write in place was to replace), honest only if the run
            // acknowledged nothing (every acknowledgement waits for that
            // marker).
            PreviousRun::FirstEver | PreviousRun::CleanStop { .. }
                if self.model.power_cut && !self.model.acknowledged && self.model.faulted =>
            {
                self.model.last_attempt = 0;
                self.model.durable_attempt = 0;
                self.model.epoch = 0;
                return self.observe(first);
            }
            other => {
                return Err(self.violation(
                    "a crash is seen as a crash",
                    format!("relaunched after a crash, the previous run reads {other:?}"),
                ));
            }
        };
        // The attempt is noted in the run marker by a write without an
        // fsync, best effort (a failed note is logged, nothing waits on
        // it), once its record is durable: what a process crash keeps,
        // when the disk failed nothing, of an attempt published with no
        // journal error (one whose fsync outlasted the journal's timeout
        // is answered `not durable` and never noted).
        let noted = !self.model.power_cut && !self.model.faulted;
        if noted
            && self.model.durable_attempt > 0
            && crashed_on.unwrap_or(0) < self.model.durable_attempt
        {
            return Err(self.violation(
                "the journal replays to the state last reported",
                format!(
                    "attempt {} was published before the crash; the previous run reads attempt {crashed_on:?}",
                    self.model.durable_attempt
                ),
            ));
        }
        // Attempts and epochs count from the start of each process.
        self.model.last_attempt = 0;
        self.model.durable_attempt = 0;
        self.model.epoch = 0;
        self.observe(first)
    }

    /// Count a journal the daemon rewrote into a new file since the last
    /// look (a compaction, a repair into a new file), unless `op` put it
    /// there.
    fn look_at_journal(&mut self, op: &Op) {
        let ino = self
            .disk
            .stat(&self.journal_path())
            .ok()
            .flatten()
            .map(|meta| meta.ino);
        if ino.is_some()
            && self.journal_ino.is_some()
            && ino != self.journal_ino
            && !matches!(op, Op::Intrude(Intruded::Journal, _))
        {
            self.counts.journal_rewrites += 1;
        }
        self.journal_ino = ino;
    }

    /// The journal's path on the simulated disk.
    fn journal_path(&self) -> std::path::PathBuf {
        Path::new(&self.data_dir).join(".steadfast").join("journal")
    }

    /// A relaunch, once its launch opened (and repaired) the journal:
    /// every record durable before the crash is in the journal it keeps,
    /// in order, and it keeps nothing the crash did not leave written.
    /// The kept journal is the records the crash left (`written`) up to
    /// some point at or past the durable ones, compacted or not (a launch
    /// compacts a journal past twice [`KEEP_ATTEMPTS`] attempts); the
    /// durable ones are the crashed life's durable records, compacted if
    /// that life compacted the journal and a crash kept the rename.
    fn check_kept_journal(&mut self) -> Result<(), Violation> {
        let kept_bytes = self.disk.read(self.journal_path()).unwrap_or_default();
        // Intent ahead: whatever a crash cut short, every resource that
        // outlives the process is named by the journal the launch keeps.
        self.counts.checks += 1;
        let unknown = self.world.unknown_after_crash(&kept_bytes);
        if !unknown.is_empty() {
            return Err(self.violation(
                "an outliving resource is known to the journal after a crash",
                format!(
                    "{unknown:?} are there, and the journal the relaunch keeps names them \
                     neither by a checkpoint nor by an unfinished intent of their step"
                ),
            ));
        }
        let Some((durable, written)) = self.model.journal_at_crash.take() else {
            return Ok(());
        };
        // A journal the crash left corrupt is refused by the launch (and
        // held to "the daemon relaunches").
        let Ok(written) = journal::decode(&written).map(|decoded| decoded.records) else {
            return Ok(());
        };
        self.counts.checks += 1;
        self.counts.durable_prefix_checks += 1;
        let kept = match journal::decode(&kept_bytes) {
            Ok(decoded) => decoded,
            Err(e) => {
                return Err(self.violation(
                    "the journal a relaunch keeps holds what was durable",
                    format!("the repaired journal does not decode: {e}"),
                ));
            }
        };
        if let journal::Tail::Torn { offset } = kept.tail {
            return Err(self.violation(
                "the journal a relaunch keeps holds what was durable",
                format!("the repaired journal still has a torn tail at byte {offset}"),
            ));
        }
        let kept = kept.records;
        let durable = if written.starts_with(&durable) {
            durable
        } else {
            match journal::compact(&durable, KEEP_ATTEMPTS) {
                Some(compacted) if written.starts_with(&compacted) => compacted,
                _ => {
                    let at = durable
                        .iter()
                        .zip(&written)
                        .position(|(a, b)| a != b)
                        .unwrap_or(durable.len().min(written.len()));
                    return Err(self.violation(
                        "the journal a relaunch keeps holds what was durable",
                        format!(
                            "the crash left {} records, {} were durable; they differ from \
                             record {at}: durable {:?}, left {:?}",
                            written.len(),
                            durable.len(),
                            durable.get(at),
                            written.get(at)
                        ),
                    ));
                }
            }
        };
        if kept.len() >= durable.len() && written.starts_with(&kept) {
            return Ok(());
        }
        let compacted = (durable.len()..=written.len())
            .any(|m| journal::compact(&written[..m], KEEP_ATTEMPTS).as_ref() == Some(&kept));
        if compacted {
            self.counts.compacted_at_relaunch += 1;
            return Ok(());
        }
        let at = durable
            .iter()
            .position(|record| !kept.contains(record))
            .or_else(|| kept.iter().zip(&written).position(|(a, b)| a != b));
        Err(self.violation(
            "the journal a relaunch keeps holds what was durable",
            format!(
                "{} records were durable before the crash and {} left written; the launch keeps \
                 {} (first difference at record {at:?}: durable {:?}, kept {:?})",
                durable.len(),
                written.len(),
                kept.len(),
                at.and_then(|at| durable.get(at)),
                at.and_then(|at| kept.get(at)),
            ),
        ))
    }

    /// What operators read agrees with what the daemon published: the
    /// status record (unless the disk failed its write this life, or it
    /// was removed or replaced underneath), `status --json` on one
    /// connection and the snapshot `watch` builds on another all hold the
    /// latest published snapshot; and none reads a version older than one
    /// it read before.
    async fn check_readers(
        &mut self,
        handle: &SupervisorHandle,
        status: &steadfast::control::InProcess,
        watch: &steadfast::control::InProcess,
    ) -> Result<(), Violation> {
        use steadfast::protocol::control::cmd::{self, Watch};
        let published = handle.snapshot();
        // Each version is read once: what a reader finds is decided when
        // the version is published.
        if self.model.read_checked == Some(published.version) {
            return Ok(());
        }
        self.model.read_checked = Some(published.version);
        self.counts.checks += 1;
        self.counts.reader_checks += 1;
        let comparable = |snapshot: &Snapshot| {
            let mut lean = snapshot.lean();
            lean.now = None;
            serde_json::to_value(&lean).expect("a snapshot renders")
        };
        let expected = comparable(&published);
        let shown = |value: &serde_json::Value| {
            format!(
                "version {} {}",
                value["version"], value["lifecycle"]["state"]
            )
        };
        // The status record, as `steadfastctl status` reads it.
        let path = Path::new(&self.data_dir).join(".steadfast").join("status");
        let bytes = self.disk.read(&path).unwrap_or_default();
        let record = steadfast::protocol::status_record::decode(&bytes)
            .ok()
            .and_then(|(_, body)| serde_json::from_slice::<Snapshot>(body).ok());
        let excused = self.model.status_intruded || self.disturbances() != self.faults_at_launch;
        match record {
            Some(record) if !self.model.status_intruded => {
                let read = comparable(&record);
                if read != expected || record.version < self.model.read_versions.0 {
                    return Err(self.violation(
                        "what operators read is true",
                        format!(
                            "the status record holds {}, the daemon published {} (read before: \
                             version {})",
                            shown(&read),
                            shown(&expected),
                            self.model.read_versions.0
                        ),
                    ));
                }
                self.model.read_versions.0 = record.version;
            }
            Some(_) => {}
            None if excused => {}
            None => {
                return Err(self.violation(
                    "what operators read is true",
                    format!(
                        "no status record readable ({} bytes) on a disk that failed nothing, \
                         published {}",
                        bytes.len(),
                        shown(&expected)
                    ),
                ));
            }
        }
        // `status --json`, as the control plane answers it.
        let answered = status
            .call(cmd::Snapshot)
            .await
            .map_err(|e| self.violation("what operators read is true", e.to_string()))?;
        let answered: Snapshot = serde_json::from_str(&answered.json)
            .map_err(|e| self.violation("what operators read is true", e.to_string()))?;
        let read = comparable(&answered);
        if read != expected || answered.version < self.model.read_versions.1 {
            return Err(self.violation(
                "what operators read is true",
                format!(
                    "status --json answers {}, the daemon published {} (read before: version {})",
                    shown(&read),
                    shown(&expected),
                    self.model.read_versions.1
                ),
            ));
        }
        self.model.read_versions.1 = answered.version;
        // `watch`: the changes since the version it has, applied to it.
        let after_version = self.model.watched.as_ref().map_or(0, |s| s.version);
        let changes = watch
            .call(Watch {
                after_version,
                timeout_ms: 0,
            })
            .await
            .map_err(|e| self.violation("what operators read is true", e.to_string()))?;
        let built = match &self.model.watched {
            Some(have) => changes.apply(have),
            None => changes.apply(&published),
        }
        .map_err(|e| {
            self.violation(
                "what operators read is true",
                format!("watch's changes do not apply: {e}"),
            )
        })?;
        let read = comparable(&built);
        if read != expected || built.version < after_version {
            return Err(self.violation(
                "what operators read is true",
                format!(
                    "watch's last event builds {}, the daemon published {} (watched before: \
                     version {after_version})",
                    shown(&read),
                    shown(&expected)
                ),
            ));
        }
        self.model.watched = Some(built);
        Ok(())
    }

    /// At the run's end (the daemon exited, its drain done): no resource
    /// that outlives the process (a lease, a spool file) is left there that
    /// the journal names neither by a checkpoint nor by an unfinished
    /// intent of its step, but those an intrusion orphaned.
    fn check_outliving(&mut self) -> Result<(), Violation> {
        self.counts.checks += 1;
        let bytes = self.disk.read(self.journal_path()).unwrap_or_default();
        let leaked = self.world.leaked(&bytes);
        let (made, orphaned) = self.world.resource_counts();
        self.counts.outliving = made;
        self.counts.orphaned = orphaned;
        if !leaked.is_empty() {
            return Err(self.violation(
                "an outliving resource is never leaked",
                format!(
                    "{leaked:?} are there, named by no checkpoint or unfinished intent of the \
                     journal, and no intrusion orphaned them"
                ),
            ));
        }
        Ok(())
    }

    async fn life(
        &mut self,
        data_dir: &Path,
        ops: u32,
        crash: bool,
        exits: bool,
    ) -> Result<Ended, Violation> {
        let life_started = Instant::now();
        let faults_at_launch = self.disturbances();
        self.faults_at_launch = faults_at_launch;
        self.children.journal_intrusions_at_launch = self.journal_intrusions;
        let relaunch = self.life > 1;
        if relaunch {
            self.check_store(data_dir)?;
        }
        // A launch the disk failed (its journal's repair hit `ENOSPC`, the
        // descriptor table was full) exits; the service manager launches
        // it again a second later. A launch that fails on a healthy disk is
        // a broken check.
        if relaunch && self.rng.chance(300) {
            // The machine's clock jumped while the daemon was down, up to
            // 30 days either way (an NTP step, a dead RTC battery).
            let by = i64::try_from(60_000 + self.rng.below(30 * 86_400_000)).unwrap_or(0);
            let by = if self.rng.chance(500) { by } else { -by };
            self.clock_skew_ms = self.clock_skew_ms.saturating_add(by);
            self.counts.clock_jumps += 1;
            self.note(format_args!("the wall clock jumped {by} ms"));
        }
        self.model.launch_failed = false;
        let (supervisor, handle) = loop {
            let faults_before = injected(&self.disk.counts());
            let wall =
                Duration::from_millis(WALL_START_MS) + self.elapsed_before + life_started.elapsed();
            let wall = u64::try_from(wall.as_millis())
                .unwrap_or(u64::MAX)
                .saturating_add_signed(self.clock_skew_ms);
            steadfast_actors::clock::anchor_wall_clock_on_this_thread(Some(wall));
            let built = Supervisor::builder(
                data_dir,
                SimService {
                    world: Arc::clone(&self.world),
                },
            )
            .config(World::source(&self.config_file))
            .timings(timings())
            .journal_keep_attempts(KEEP_ATTEMPTS)
            .build();
            self.take_disk_trace();
            match built {
                Ok(built) => break built,
                Err(e) if injected(&self.disk.counts()) != faults_before => {
                    self.counts.failed_launches += 1;
                    self.model.launch_failed = true;
                    let e = e.to_string().replace(&self.data_dir, "<data>");
                    self.note(format_args!("launch failed on a disk fault ({e}); again"));
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
                Err(e) => return Err(self.violation("the daemon relaunches", e.to_string())),
            }
        };
        if relaunch {
            self.check_kept_journal()?;
        }
        let mut daemon = tokio::spawn(supervisor.run());
        // An operator's connections: one asks `status --json`, one
        // watches (as `steadfastctl watch` does, on its own).
        let status = steadfast::control::InProcess::new(handle.clone());
        let watch = steadfast::control::InProcess::new(handle.clone());
        self.model.status_intruded = false;
        self.model.read_versions = (0, 0);
        self.model.watched = None;
        self.model.read_checked = None;
        // Relaunched: the first snapshot is what the journal and the
        // markers replayed, once the lifecycle has begun (a slow device
        // job may hold its first step: until then it shows `resolving`).
        tokio::time::sleep(Duration::from_millis(1)).await;
        let mut rx = handle.watch();
        let _ = tokio::time::timeout(Duration::from_secs(60), async {
            while matches!(
                rx.borrow_and_update().lifecycle,
                LifecycleState::Resolving { .. }
            ) {
                if rx.changed().await.is_err() {
                    return;
                }
            }
        })
        .await;
        let first = handle.snapshot();
        self.note(format_args!(
            "launched [{}] hold={}",
            label(&first.lifecycle),
            first.hold
        ));
        if relaunch {
            self.relaunched(&first)?;
            self.check_overrides(&handle).await?;
        } else {
            self.observe(&first)?;
        }
        self.check_readers(&handle, &status, &watch).await?;
        self.model.acknowledged = false;
        for index in 0..ops {
            if exits && crash && index + 1 == ops {
                return self
                    .exit_when_asked(&handle, &mut daemon, life_started)
                    .await;
            }
            let op = Op::draw(&mut self.rng, self.model.connections.len());
            let last = crash && index + 1 == ops;
            let number = self.drawn_ops;
            self.drawn_ops += 1;
            if self.reduction.skip_ops.contains(&number) {
                if last {
                    self.elapsed_before += life_started.elapsed();
                    return Ok(Ended::Crashed);
                }
                continue;
            }
            let op = match (op, self.reduction.max_idle) {
                (Op::Sleep(d), Some(max)) => Op::Sleep(d.min(max)),
                (op, _) => op,
            };
            if let Op::Sleep(d) = op {
                self.longest_idle = self.longest_idle.max(d);
            }
            self.performed.push(number);
            self.counts.ops += 1;
            let at = self.elapsed_before + life_started.elapsed();
            let outcome = if last {
                // The crash lands part way through this operation: at the
                // first await, or up to three virtual seconds in.
                let within = Duration::from_millis(self.rng.below(3_000));
                match tokio::time::timeout(within, self.perform(&handle, op.clone())).await {
                    Ok(outcome) => outcome,
                    Err(_) => "(crashed part way)".to_owned(),
                }
            } else {
                let limit = WATCHDOG
                    + if let Op::Sleep(d) = op {
                        d
                    } else {
                        Duration::ZERO
                    };
                match tokio::time::timeout(limit, self.perform(&handle, op.clone())).await {
                    Ok(outcome) => outcome,
                    Err(_) => {
                        return Err(self.violation(
                            "no operation hangs",
                            format!("{op:?} did not end within {limit:?} of virtual time"),
                        ));
                    }
                }
            };
            let snapshot = handle.snapshot();
            self.take_disk_trace();
            self.check_steps()?;
            self.check_children()?;
            self.look_at_journal(&op);
            self.trace.push(format!(
                "life {} {:>12}ms #{number} {op:?} -> {outcome} [{}]",
                self.life,
                at.as_millis(),
                label(&snapshot.lifecycle)
            ));
            if matches!(op, Op::Intrude(Intruded::Lock, _)) && !outcome.starts_with("no ") {
                // Its lock removed or replaced, the daemon no longer
                // guards its data dir: it must notice (at its next check,
                // within the simulation's hour) and exit for a relaunch.
                self.counts.checks += 1;
                let ended = tokio::time::timeout(Duration::from_secs(3_700), &mut daemon).await;
                if !matches!(ended, Ok(Ok(ExitIntent::Relaunch))) {
                    return Err(self.violation(
                        "a daemon whose lock was taken away exits for a relaunch",
                        format!("{ended:?}"),
                    ));
                }
                self.note(format_args!(
                    "exited for a relaunch (its lock was taken away)"
                ));
                // The relaunch reads a run that ended, not one that crashed.
                self.model.markers_intruded = true;
                self.elapsed_before += life_started.elapsed();
                self.counts.virtual_ms =
                    u64::try_from(self.elapsed_before.as_millis()).unwrap_or(0);
                return Ok(Ended::Crashed);
            }
            if daemon.is_finished() {
                return Err(self.violation(
                    "the daemon does not end on its own",
                    format!("its run ended after {op:?}"),
                ));
            }
            self.observe(&snapshot)?;
            self.check_readers(&handle, &status, &watch).await?;
            if last {
                self.elapsed_before += life_started.elapsed();
                self.counts.virtual_ms =
                    u64::try_from(self.elapsed_before.as_millis()).unwrap_or(0);
                return Ok(Ended::Crashed);
            }
        }
        // The faults stop: a good config, a disk without faults, and an
        // operator who asks once.
        self.disk.set_faults(Faults::NONE);
        self.world.calm_children();
        self.write_config(&Edit::Good(-1), true, true);
        for leaf in OVERRIDE_LEAVES {
            let result = handle.config_unset(leaf).await;
            let before = self.model.overrides.get(leaf).copied();
            self.config_answered(leaf, None, before, &result);
        }
        let _ = handle.retry().await;
        let settled_within = tokio::time::timeout(SETTLE, async {
            let mut rx = handle.watch();
            loop {
                if settled(&rx.borrow_and_update()) {
                    return;
                }
                if rx.changed().await.is_err() {
                    return;
                }
            }
        })
        .await;
        let snapshot = handle.snapshot();
        self.note(format_args!(
            "faults stopped [{}]",
            label(&snapshot.lifecycle)
        ));
        self.counts.checks += 1;
        if settled_within.is_err() {
            return Err(self.violation(
                "the daemon settles once the faults stop",
                format!(
                    "still {} after {SETTLE:?} of virtual time",
                    label(&snapshot.lifecycle)
                ),
            ));
        }
        self.observe(&snapshot)?;
        self.check_readers(&handle, &status, &watch).await?;
        // And it exits when asked, its drain included.
        let asked = format!("exit from {}", label(&snapshot.lifecycle));
        self.ask_to_exit(&handle, &mut daemon, ExitIntent::Halt, WATCHDOG, &asked)
            .await?;
        self.note(format_args!("exited"));
        self.elapsed_before += life_started.elapsed();
        self.counts.virtual_ms = u64::try_from(self.elapsed_before.as_millis()).unwrap_or(0);
        Ok(Ended::Settled)
    }

    async fn perform(&mut self, handle: &SupervisorHandle, op: Op) -> String {
        match op {
            Op::Write {
                records,
                reuse,
                stubborn,
            } => self.write(records, reuse, stubborn).await,
            Op::Sleep(d) => {
                tokio::time::sleep(d).await;
                "slept".to_owned()
            }
            Op::Stop(hold) => {
                // In flight (a crash may cut it short), a hold change may
                // or may not reach the disk.
                self.model.hold_uncertain |= hold;
                let result = handle
                    .stop(if hold {
                        Hold::AcrossRelaunch
                    } else {
                        Hold::None
                    })
                    .await;
                self.hold_answered(&result);
                self.command(result)
            }
            Op::Start => {
                self.model.hold_uncertain = true;
                let result = handle.start().await;
                self.hold_answered(&result);
                self.command(result)
            }
            Op::Restart(force) => {
                let result = if force {
                    handle.restart_forced().await
                } else {
                    handle.restart().await
                };
                self.command(result)
            }
            Op::Retry => self.command(handle.retry().await),
            Op::Reload => self.command(handle.reload().await),
            Op::Reinit => {
                let token = match handle.reinit_prepare().await {
                    Ok(confirmation) => confirmation.token,
                    Err(e) => return self.command(Err(e)),
                };
                // From here the store may be wiped, whatever the answer.
                self.model.acked.clear();
                self.command(handle.reinit(&token).await)
            }
            Op::Config(edit) => {
                self.counts.config_edits += 1;
                if matches!(edit, Edit::Broken) {
                    self.counts.broken_configs += 1;
                }
                let (renamed, synced) = (self.rng.chance(700), self.rng.chance(500));
                self.write_config(&edit, renamed, synced);
                let how = if renamed { "renamed" } else { "in place" };
                let synced = if synced { ", synced" } else { "" };
                format!("edited ({how}{synced})")
            }
            Op::ConfigSet(leaf, value) => {
                // In flight (a crash may cut it short), the leaf is not known.
                let before = self.model.overrides.remove(leaf);
                let result = handle.config_set(leaf, value.into()).await;
                self.config_answered(leaf, Some(value), before, &result);
                self.command(result)
            }
            Op::ConfigUnset(leaf) => {
                let before = self.model.overrides.remove(leaf);
                let result = handle.config_unset(leaf).await;
                self.config_answered(leaf, None, before, &result);
                self.command(result)
            }
            Op::Intrude(target, remove) => {
                use steadfast::fs::Access;
                use steadfast_actors::fsx::sim::SimFs as _;
                self.counts.intrusions += 1;
                match target {
                    Intruded::Journal => {
                        self.journal_intrusions += 1;
                        self.world.orphan_present();
                    }
                    Intruded::Status => self.model.status_intruded = true,
                    Intruded::RunMarker | Intruded::HoldMarker => {
                        self.model.markers_intruded = true;
                    }
                    Intruded::Lock => {}
                }
                let name = target.name();
                let control = Path::new(&self.data_dir).join(".steadfast");
                let file = control.join(name);
                self.disk.without_faults(|| {
                    if remove {
                        return match self.disk.unlink(&file) {
                            Ok(true) => format!("removed the {name} file"),
                            _ => format!("no {name} file to remove"),
                        };
                    }
                    let Some(bytes) = self.disk.read(&file) else {
                        return format!("no {name} file to replace");
                    };
                    // (A power cut may have undone an earlier copy's rename.)
                    let copy = control.join(format!("{name}.copy"));
                    let _ = self.disk.unlink(&copy);
                    let opened = self
                        .disk
                        .open(&copy, Access::WriteCreateNew)
                        .expect("the copy");
                    let mut rest = &bytes[..];
                    while !rest.is_empty() {
                        let n = opened.write(rest).expect("the copy's write");
                        rest = &rest[n..];
                    }
                    opened.sync(false).expect("the copy's fsync");
                    drop(opened);
                    self.disk.rename(&copy, &file).expect("renamed over");
                    format!("replaced the {name} file with a copy")
                })
            }
            Op::CrashRuntime => match self.world.serving() {
                Some(serving) if serving.send(Request::Crash).is_ok() => {
                    self.counts.runtime_crashes += 1;
                    // Let the runtime's end be noticed.
                    tokio::time::sleep(Duration::from_millis(1)).await;
                    "crashed the runtime".to_owned()
                }
                _ => "nothing serving".to_owned(),
            },
        }
    }

    /// What an answer to `stop` or `start` tells the model of the hold
    /// marker: acknowledged, the marker is as the snapshot says (after a
    /// failed change, the daemon writes it again with the next step);
    /// `not durable`, it may be either way.
    fn hold_answered(&mut self, result: &Result<Snapshot, CommandError>) {
        match result {
            Ok(snapshot) => {
                self.model.hold_uncertain = false;
                self.model.held = snapshot.hold;
            }
            Err(CommandError::Durability(_)) => self.model.hold_uncertain = true,
            Err(_) => {}
        }
    }

    /// The operator edits the declared config file, as an editor does:
    /// a temp file renamed over it (`renamed`), or rewritten in place, and
    /// fsynced (`synced`) or left to the page cache, where a power cut may
    /// tear it (the daemon then reads what survived). The edit itself
    /// meets no disk fault: the daemon's faults are what the checks count.
    fn write_config(&self, edit: &Edit, renamed: bool, synced: bool) {
        use std::io::SeekFrom;
        use steadfast::fs::Access;
        use steadfast_actors::fsx::sim::SimFile;
        fn write_all(file: &dyn SimFile, mut buf: &[u8]) {
            while !buf.is_empty() {
                let n = file.write(buf).expect("the operator's write");
                buf = &buf[n..];
            }
        }
        let text = match edit.config() {
            Some(table) => toml::to_string(&table).expect("a table renders"),
            None => "tag = [ \"an unclosed array\"\n".to_owned(),
        };
        let path = &self.config_file;
        self.disk.without_faults(|| {
            if renamed {
                let tmp = path.with_extension("toml.tmp");
                self.disk.unlink(&tmp).expect("no temp file");
                let file = self
                    .disk
                    .open(&tmp, Access::WriteCreateNew)
                    .expect("the temp file");
                write_all(file.as_ref(), text.as_bytes());
                if synced {
                    file.sync(false).expect("fsync");
                }
                drop(file);
                self.disk.rename(&tmp, path).expect("renamed over");
                if synced {
                    let parent = path.parent().expect("a parent");
                    self.disk.sync_dir(parent).expect("the directory's fsync");
                }
            } else {
                let file = self
                    .disk
                    .open(path, Access::ReadWriteCreate)
                    .expect("the config file");
                file.set_len(0).expect("truncated");
                file.seek(SeekFrom::Start(0)).expect("rewound");
                write_all(file.as_ref(), text.as_bytes());
                if synced {
                    file.sync(false).expect("fsync");
                }
            }
        });
    }

    /// What an answer to `config set` / `unset` of `leaf` tells the model.
    /// `before`: what the model knew of the leaf before the command (a
    /// refusal leaves it so).
    fn config_answered(
        &mut self,
        leaf: &'static str,
        value: Option<i64>,
        before: Option<Option<i64>>,
        result: &Result<Snapshot, CommandError>,
    ) {
        match result {
            Ok(_) => {
                self.model.overrides.insert(leaf, value);
            }
            // Not adopted, but the tier's file may or may not hold it.
            Err(CommandError::Durability(_)) => {
                self.model.overrides.remove(leaf);
            }
            Err(_) => {
                if let Some(before) = before {
                    self.model.overrides.insert(leaf, before);
                }
            }
        }
    }

    /// Every override leaf whose last change was acknowledged reads back
    /// as it was set (after a relaunch: from the control dir).
    async fn check_overrides(&mut self, handle: &SupervisorHandle) -> Result<(), Violation> {
        let known: Vec<_> = self
            .model
            .overrides
            .iter()
            .map(|(leaf, value)| (*leaf, *value))
            .collect();
        for (leaf, value) in known {
            self.counts.checks += 1;
            let view = handle
                .config_show(Some(leaf))
                .await
                .map_err(|e| self.violation("config show answers", e.to_string()))?;
            let read = view
                .overrides
                .iter()
                .find(|(l, _)| l == leaf)
                .map(|(_, text)| text.clone());
            if read != value.map(|v| v.to_string()) {
                return Err(self.violation(
                    "an acknowledged config set survives",
                    format!(
                        "{leaf} was acknowledged as {value:?}; the override tier reads {read:?}"
                    ),
                ));
            }
        }
        Ok(())
    }

    fn command(&mut self, result: Result<Snapshot, CommandError>) -> String {
        self.counts.commands += 1;
        self.model.acknowledged |= result.is_ok();
        if matches!(result, Err(CommandError::Refused(_))) {
            self.counts.refusals += 1;
        }
        answer(&result)
    }

    async fn write(&mut self, records: u32, reuse: Option<usize>, stubborn: bool) -> String {
        let connection = match reuse.and_then(|i| self.model.connections.get(i).cloned()) {
            Some(open) => open,
            None => {
                let Some(serving) = self.world.serving() else {
                    return "nothing serving".to_owned();
                };
                let (tx, writes) = mpsc::unbounded_channel();
                if serving.send(Request::Connect { writes, stubborn }).is_err() {
                    return "nothing serving".to_owned();
                }
                self.model.connections.push(tx.clone());
                tx
            }
        };
        let mut acked = 0;
        for _ in 0..records {
            self.model.next_seq += 1;
            let seq = self.model.next_seq;
            let (ack, acknowledged) = oneshot::channel();
            if connection.send(Write { seq, ack }).is_err() {
                break;
            }
            if acknowledged.await.is_err() {
                break;
            }
            self.model.acked.insert(seq);
            self.model.acknowledged = true;
            self.counts.acked += 1;
            acked += 1;
        }
        format!("{acked}/{records} acknowledged")
    }
}

/// Where a lifecycle state stands with a runtime: booting, running or
/// draining it, and which attempt's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    Booting,
    Running,
    Draining,
}

fn stage(state: &LifecycleState) -> Option<(Stage, u32)> {
    match state {
        LifecycleState::Booting { attempt, .. } => Some((Stage::Booting, attempt.get())),
        LifecycleState::Running { attempt, .. } => Some((Stage::Running, attempt.get())),
        LifecycleState::Draining { attempt, .. } => Some((Stage::Draining, attempt.get())),
        _ => None,
    }
}

/// Whether `reason` is a meltdown's (as `children::Meltdown` words it).
fn is_meltdown(reason: &str) -> bool {
    reason.contains("than the group allows") || reason.contains("allows no restarts")
}

/// What the children's checks need of one adopted lifecycle step.
struct StepSeen {
    before: Option<(Stage, u32)>,
    after: Option<(Stage, u32)>,
    after_label: String,
    /// A runtime's end: its attempt and why.
    ended: Option<(u32, String)>,
    /// A drain of this attempt settled.
    drained: Option<u32>,
}

impl StepSeen {
    fn of(step: &steadfast_actors::observed::AdoptedStep) -> Self {
        use steadfast::protocol::lifecycle::LifecycleEvent;
        let before = stage(&step.before.state);
        Self {
            before,
            after: stage(&step.after.state),
            after_label: label(&step.after.state),
            ended: match &step.event {
                LifecycleEvent::RuntimeEnded { attempt, error, .. } => {
                    Some((attempt.get(), error.clone()))
                }
                _ => None,
            },
            drained: match (&step.event, before) {
                (LifecycleEvent::Drained { .. }, Some((Stage::Draining, attempt))) => Some(attempt),
                _ => None,
            },
        }
    }
}

/// One group of children replayed through a fresh pure machine.
struct Replay {
    attempt: u32,
    /// The lifecycle steps adopted before the group started.
    step: u64,
    machine: steadfast::protocol::children::Group,
    /// The starts the machine ordered that were not yet seen, in order.
    expected: std::collections::VecDeque<(usize, u32)>,
    /// Each child's incarnation that started and has not yet ended or
    /// been stopped.
    live: [Option<u32>; CHILDREN.len()],
}

/// A meltdown the machine decided, not yet seen reach the lifecycle.
struct PendingMeltdown {
    attempt: u32,
    child: String,
    /// The lifecycle steps adopted before the end that melted it down.
    step: u64,
    /// The lifecycle steps adopted before the group reported it to its
    /// runtime, once it did.
    reported: Option<u64>,
}

/// The children as one life saw them.
#[derive(Default)]
struct ChildrenSeen {
    /// This life's adopted steps; the first's number among the run's.
    steps: Vec<StepSeen>,
    first: u64,
    groups: std::collections::BTreeMap<u64, Replay>,
    meltdowns: Vec<PendingMeltdown>,
    /// The ends the groups reported to their runtimes, not yet matched to
    /// a meltdown.
    reports: Vec<steadfast_actors::observed::GroupEndReported>,
    /// Journal intrusions when this life launched.
    journal_intrusions_at_launch: u64,
}

impl ChildrenSeen {
    /// The steps from number `from` on.
    fn steps_from(&self, from: u64) -> &[StepSeen] {
        let at = usize::try_from(from.saturating_sub(self.first)).unwrap_or(usize::MAX);
        self.steps.get(at..).unwrap_or_default()
    }

    /// The state the step before number `step` left.
    fn stage_at(&self, step: u64) -> Option<(Stage, u32)> {
        let at = step.checked_sub(self.first)?.checked_sub(1)?;
        self.steps
            .get(usize::try_from(at).ok()?)
            .and_then(|s| s.after)
    }
}

impl Run {
    /// The children's events since the last look, each held to a fresh
    /// pure machine per group: every start is the next one the machine
    /// ordered; every end is stepped through it (a meltdown then must
    /// reach the lifecycle); nothing of a group happens after its
    /// runtime's drain settled.
    fn check_children(&mut self) -> Result<(), Violation> {
        let (groups, events) = self.world.take_children();
        let spec = self.world.children_plan().spec();
        for started in groups {
            let mut machine =
                steadfast::protocol::children::Group::new(spec.clone()).expect("a valid group");
            let plan = machine.start();
            self.children.groups.insert(
                started.group,
                Replay {
                    attempt: started.attempt,
                    step: started.step,
                    machine,
                    expected: plan.start.into(),
                    live: [None; CHILDREN.len()],
                },
            );
        }
        for event in events {
            self.child_event(event)?;
        }
        self.children
            .reports
            .extend(steadfast_actors::observed::take_group_ends());
        self.check_meltdowns(None)?;
        // A child's end is noted before its group hears of it: a report
        // left unmatched is an end the machine never decided.
        if let Some(report) = self.children.reports.first() {
            return Err(self.violation(
                "the restarts match the machine",
                format!(
                    "attempt {}'s group ended its runtime ({}); the machine decided no \
                     meltdown of child {}",
                    report.attempt, report.reason, report.child
                ),
            ));
        }
        Ok(())
    }

    fn child_event(&mut self, event: ChildEvent) -> Result<(), Violation> {
        use steadfast::protocol::children::{Decision, Event};
        let name = CHILDREN[event.child].0;
        let Some(replay) = self.children.groups.get(&event.group) else {
            return Err(self.violation(
                "the restarts match the machine",
                format!("child {name} of an unknown group {}", event.group),
            ));
        };
        let (attempt, started_at) = (replay.attempt, replay.step);
        let drained = self
            .children
            .steps_from(started_at)
            .iter()
            .zip(started_at.max(self.children.first)..)
            .find(|(s, n)| s.drained == Some(attempt) && *n < event.step)
            .map(|(_, n)| n);
        if let Some(drained) = drained {
            return Err(self.violation(
                "nothing of a child runs after its runtime's drain",
                format!(
                    "child {name} #{} of attempt {attempt} was seen {:?} after step {} \
                     (lifecycle step {drained} settled that attempt's drain)",
                    event.incarnation, event.seen, event.step
                ),
            ));
        }
        let replay = self.children.groups.get_mut(&event.group).expect("found");
        match event.seen {
            ChildSeen::Started => {
                let next = replay.expected.pop_front();
                if next != Some((event.child, event.incarnation)) {
                    return Err(self.violation(
                        "the restarts match the machine",
                        format!(
                            "child {name} #{} of attempt {attempt} started at +{} ms; the \
                             machine's next start is {:?}",
                            event.incarnation,
                            event.at_ms,
                            next.map(|(c, n)| format!("{} #{n}", CHILDREN[c].0))
                        ),
                    ));
                }
                if let Some(running) = replay.live[event.child].replace(event.incarnation) {
                    return Err(self.violation(
                        "the restarts match the machine",
                        format!(
                            "child {name} #{} of attempt {attempt} started at +{} ms while \
                             #{running} still ran",
                            event.incarnation, event.at_ms
                        ),
                    ));
                }
                self.counts.child_starts += 1;
                self.counts.child_restarts += u64::from(event.incarnation > 1);
            }
            ChildSeen::Ended(exit) => {
                replay.live[event.child] = None;
                let decision = replay.machine.on(&Event::Exited {
                    child: event.child,
                    incarnation: event.incarnation,
                    exit: exit.clone(),
                    at: steadfast::protocol::Timestamp(event.at_ms),
                });
                let shown = match decision {
                    Decision::Restart(plan) => {
                        let shown = format!("restart {:?}", plan.start);
                        replay.expected.extend(plan.start);
                        shown
                    }
                    Decision::Meltdown { meltdown, .. } => {
                        self.counts.meltdowns += 1;
                        self.children.meltdowns.push(PendingMeltdown {
                            attempt,
                            child: meltdown.child,
                            step: event.step,
                            reported: None,
                        });
                        "meltdown".to_owned()
                    }
                    other => format!("{other:?}"),
                };
                let how = match exit {
                    ChildExit::Normal => "returned",
                    ChildExit::Error(_) => "failed",
                    ChildExit::Panicked(_) => "panicked",
                    ChildExit::StartFailed(_) => "could not start",
                };
                self.note(format_args!(
                    "child {name}#{} of attempt {attempt} {how} at +{} ms: {shown}",
                    event.incarnation, event.at_ms
                ));
            }
            ChildSeen::Stopped => replay.live[event.child] = None,
            ChildSeen::Alive => {}
        }
        Ok(())
    }

    /// Every meltdown the machine decided reaches the lifecycle. The group
    /// reports it to its runtime before that runtime's drain settles (the
    /// drain waits for the group) and before the daemon exits. Once
    /// reported while the lifecycle runs (or boots) that runtime, the
    /// lifecycle hears of a runtime end before it leaves the runtime: the
    /// first it hears of while running names the child, unless another
    /// end came first. A report made once a drain begun for something else
    /// was under way is owed nothing more (a runtime reports its first end
    /// only, and a drain ignores it). `life_ended`: the life is over
    /// (`true`: by a crash, which excuses what it cut short); what is
    /// still pending is decided now.
    fn check_meltdowns(&mut self, life_ended: Option<bool>) -> Result<(), Violation> {
        let pending = std::mem::take(&mut self.children.meltdowns);
        let mut left = Vec::new();
        for mut meltdown in pending {
            let a = meltdown.attempt;
            if meltdown.reported.is_none()
                && let Some(at) = self.children.reports.iter().position(|r| {
                    r.attempt == a && r.child == meltdown.child && is_meltdown(&r.reason)
                })
            {
                meltdown.reported = Some(self.children.reports.remove(at).step);
            }
            let settled = self
                .children
                .steps_from(meltdown.step)
                .iter()
                .zip(meltdown.step.max(self.children.first)..)
                .find(|(s, _)| s.drained == Some(a))
                .map(|(_, n)| n);
            let unreported = match (meltdown.reported, settled) {
                (Some(reported), Some(settled)) => reported > settled,
                (None, Some(_)) => true,
                (None, None) => life_ended == Some(false),
                (Some(_), None) => false,
            };
            if unreported && life_ended != Some(true) {
                return Err(self.violation(
                    "a meltdown always reaches the lifecycle",
                    format!(
                        "the machine melted attempt {a}'s group down (child {}); {} before the \
                         group reported it to its runtime",
                        meltdown.child,
                        settled.map_or_else(
                            || "the daemon exited".to_owned(),
                            |n| format!("lifecycle step {n} settled that runtime's drain")
                        )
                    ),
                ));
            }
            let Some(reported) = meltdown.reported else {
                if life_ended.is_none() {
                    left.push(meltdown);
                }
                continue;
            };
            let mut running = matches!(
                self.children.stage_at(reported),
                Some((Stage::Running | Stage::Booting, of)) if of == a
            );
            let mut outcome = None;
            for step in self.children.steps_from(reported) {
                if let Some((of, error)) = &step.ended
                    && *of == a
                {
                    let named =
                        error.contains(&format!("child {} ", meltdown.child)) && is_meltdown(error);
                    outcome = Some(Ok(
                        (named && step.before == Some((Stage::Running, a))).then_some(())
                    ));
                    break;
                }
                if step.after == Some((Stage::Running, a)) {
                    running = true;
                } else if running
                    && !matches!(
                        step.after,
                        Some((Stage::Booting | Stage::Running | Stage::Draining, of)) if of == a
                    )
                {
                    outcome = Some(Err(step.after_label.clone()));
                    break;
                }
            }
            match outcome {
                Some(Ok(Some(()))) => {
                    self.counts.meltdowns_reported += 1;
                    self.check_meltdown_journal(a, &meltdown.child)?;
                }
                Some(Ok(None)) => {}
                Some(Err(left_to)) => {
                    return Err(self.violation(
                        "a meltdown always reaches the lifecycle",
                        format!(
                            "attempt {a}'s group reported its meltdown (child {}) to its \
                             runtime; the lifecycle left attempt {a} for {left_to} without \
                             hearing of it",
                            meltdown.child
                        ),
                    ));
                }
                None if life_ended == Some(false) && running => {
                    return Err(self.violation(
                        "a meltdown always reaches the lifecycle",
                        format!(
                            "attempt {a}'s group reported its meltdown (child {}) to its \
                             runtime; the daemon exited without the lifecycle hearing of it",
                            meltdown.child
                        ),
                    ));
                }
                None if life_ended.is_some() => {}
                None => left.push(meltdown),
            }
        }
        self.children.meltdowns = left;
        Ok(())
    }

    /// A meltdown the lifecycle failed its runtime for: its record is in
    /// the journal before the lifecycle's record of that failure (once
    /// that is written), unless the journal was removed or replaced
    /// underneath this life, or the disk failed a write of it.
    fn check_meltdown_journal(&mut self, attempt: u32, child: &str) -> Result<(), Violation> {
        if self.journal_intrusions != self.children.journal_intrusions_at_launch {
            return Ok(());
        }
        let bytes = self.disk.read(self.journal_path()).unwrap_or_default();
        let Ok(decoded) = journal::decode(&bytes) else {
            return Ok(());
        };
        let records = decoded.records;
        let Some(began) = records.iter().rposition(
            |r| matches!(r, Record::AttemptStarted { attempt: a, .. } if a.get() == attempt),
        ) else {
            return Ok(());
        };
        let Some(failed) = records[began..].iter().position(|r| {
            matches!(r, Record::Transition { from, event, .. }
                if from == "running" && event == "runtime_ended")
        }) else {
            return Ok(());
        };
        self.counts.checks += 1;
        let journaled = records[began..began + failed].iter().any(|r| {
            matches!(r, Record::ChildrenMeltdown { attempt: a, child: c, .. }
                if a.get() == attempt && c == child)
        });
        if !journaled && self.disturbances() == self.faults_at_launch {
            return Err(self.violation(
                "a meltdown is journaled before the lifecycle fails its runtime",
                format!(
                    "attempt {attempt}'s runtime failed for child {child}'s meltdown; the \
                     journal holds no meltdown record of it before the failure"
                ),
            ));
        }
        Ok(())
    }

    /// The life is over (`crashed`, or it exited): what the machine
    /// still ordered is owed only by a group whose runtime ran and was
    /// drained in this life (a crash, or a boot that never reached
    /// running, drops a group where it stands).
    fn children_life_ended(&mut self, crashed: bool) -> Result<(), Violation> {
        self.check_meltdowns(Some(crashed))?;
        let groups = std::mem::take(&mut self.children.groups);
        if !crashed {
            for replay in groups.values() {
                let ran = self
                    .children
                    .steps_from(replay.step)
                    .iter()
                    .any(|s| s.after == Some((Stage::Running, replay.attempt)));
                if ran && let Some((child, incarnation)) = replay.expected.front() {
                    return Err(self.violation(
                        "the restarts match the machine",
                        format!(
                            "the machine started child {} #{incarnation} of attempt {}; the \
                             executor never did",
                            CHILDREN[*child].0, replay.attempt
                        ),
                    ));
                }
            }
        }
        self.children.first += self.children.steps.len() as u64;
        self.children.steps.clear();
        // A report of a group the life cut short stays unmatched (its end
        // was noted, and its meltdown excused, in that life).
        self.children.reports.clear();
        Ok(())
    }
}
