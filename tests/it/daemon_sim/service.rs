//! The service the simulated daemon runs, and the world it shares with the
//! workload: a store (the data dir's lock and an append-only file of
//! acknowledged records, written through `steadfast::fs`) served by
//! connections the workload opens, and switches in its config that make a
//! step fail, panic, hang, report progress slowly or refuse.
//!
//! Config leaves it reads (a `toml::Table`):
//! - `fail_in` / `panic_in` / `hang_in` = a step name: that step fails with
//!   class backoff, panics, or waits until the boot is cancelled;
//! - `refuse` = true: `open_store` fails with class hold;
//! - `slow_ms` = N: `open_store` takes N virtual ms, reporting progress;
//! - `wipe_fails` = true: the wipe of a re-initialization fails;
//! - `tag` = N: nothing but a change (a config edit that changes nothing
//!   else).
//!
//! Between the store and serving, the plan takes a lease from an outside
//! service (the `lease` step, [`World`]'s leases) and writes a spool file:
//! resources that outlive the process (both steps say so), so a boot after
//! a crash must adopt the one its predecessor checkpointed (observation
//! finds it there) rather than make a second, a step whose intent a crash
//! left unfinished must take back what its interrupted run made, and a
//! drain must give it back. The world checks, from the outside service's
//! side: a resource is never made while one the journal holds
//! checkpointed is still there (made twice), never given back while the
//! runtime that serves uses it, and ([`World::leaked`],
//! [`World::unknown_after_crash`]) none is there that the journal names
//! neither by a checkpoint nor by an unfinished intent of its step (intent
//! ahead: a crash can no longer take a resource's only record).
//!
//! The serving step also starts a group of supervised children
//! ([`ChildrenPlan`]): a permanent, a transient and a temporary task, whose
//! strategy, intensity and failure rate the seed draws. Each incarnation
//! draws (from the seed, its group, its child and its incarnation, never
//! from the workload's draws) whether and when it ends on its own: an
//! error, a panic, a normal return, or a factory that panics. Every start
//! and end is noted in the world ([`ChildEvent`]), at the virtual instant
//! it happens and placed among the lifecycle's adopted steps, for the run
//! to replay through the pure machine. Children end on their own only
//! while their runtime runs and the faults last: once the runtime's drain
//! begins they wait to be stopped (noting a heartbeat at 1, 2, 4, … s, so
//! one left running past the drain shows), and once the faults stop they
//! no longer fail.

use std::io::Write as _;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use steadfast::children::{Child, ChildExit, Children, Restart, Strategy};
use steadfast::config::ConfigSource;
use steadfast::fs::{Access, Dir};
use steadfast::protocol::children::{AutoShutdown, ChildSpec, GroupSpec, Intensity};
use steadfast::service::{Lifetime, ResourceRecord, StoreLock};
use steadfast::{
    ConfigChange, Observation, Plan, Resource, Runtime, Service, Step, StepContext, StepError,
    TomlFileSource,
};
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// The store's file of acknowledged records, one [`record_line`] each.
pub const STORE_FILE: &str = "sim.store";

/// How many bytes a record takes before its newline.
const RECORD_LEN: usize = 32;

/// Record `seq` as the store holds it: its number and the number's
/// complement, 16 hex digits each, and a newline. Fixed width and
/// self-checking, so a reader finds every whole record in a file a failed
/// write tore or a failed fsync left zeros in (a record's last
/// [`RECORD_LEN`] bytes before its newline are always its own: a torn
/// write never lands its newline without the rest).
fn record_line(seq: u64) -> String {
    format!("{seq:016x}{:016x}\n", !seq)
}

/// Every whole record in `bytes` (see [`record_line`]).
pub fn stored_records(bytes: &[u8]) -> std::collections::BTreeSet<u64> {
    bytes
        .split(|b| *b == b'\n')
        .filter(|line| line.len() >= RECORD_LEN)
        .filter_map(|line| {
            let text = std::str::from_utf8(&line[line.len() - RECORD_LEN..]).ok()?;
            let seq = u64::from_str_radix(&text[..16], 16).ok()?;
            let check = u64::from_str_radix(&text[16..], 16).ok()?;
            (check == !seq).then_some(seq)
        })
        .collect()
}

/// One record for a connection to make durable, and where to say it is.
pub struct Write {
    pub seq: u64,
    pub ack: oneshot::Sender<()>,
}

/// What the workload asks of the running runtime's serving task.
pub enum Request {
    /// Serve a connection: its writes arrive on the receiver. A stubborn
    /// one does not close when the drain begins (a client mid-stream): the
    /// drain has to abort it.
    Connect {
        writes: mpsc::UnboundedReceiver<Write>,
        stubborn: bool,
    },
    /// The runtime crashes: the serving task ends with an error.
    Crash,
}

/// What the daemon's side and the workload's side share.
#[derive(Default)]
pub struct World {
    state: Mutex<WorldState>,
    children: Mutex<ChildrenWorld>,
}

/// The children's part of the world: how the seed declares them, and what
/// they did since the run last looked.
#[derive(Default)]
struct ChildrenWorld {
    plan: ChildrenPlan,
    /// Set once the faults stop: no incarnation ends on its own after.
    calm: bool,
    /// Groups started, for their numbers.
    groups: u64,
    /// The groups started and the events noted since the last look.
    new_groups: Vec<GroupStarted>,
    events: Vec<ChildEvent>,
}

/// The simulated children, in start order: name and restart type.
pub const CHILDREN: [(&str, Restart); 3] = [
    ("pump", Restart::Permanent),
    ("flusher", Restart::Transient),
    ("probe", Restart::Temporary),
];

/// How a seed declares its groups of children and how often their
/// incarnations end on their own.
#[derive(Debug, Clone, Copy)]
pub struct ChildrenPlan {
    seed: u64,
    strategy: Strategy,
    intensity: Intensity,
    /// Of 1000 incarnations, how many end on their own.
    ends_per_mille: u64,
}

impl Default for ChildrenPlan {
    fn default() -> Self {
        Self::draw(0)
    }
}

/// A 64-bit mix (splitmix64's finalizer).
const fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// A draw of `seed` at `parts`, independent of every other draw.
fn drawn(seed: u64, parts: &[u64]) -> u64 {
    parts
        .iter()
        .fold(mix(seed ^ 0xc41d_9e7f), |h, p| mix(h ^ *p))
}

impl ChildrenPlan {
    /// The plan `seed` draws.
    pub fn draw(seed: u64) -> Self {
        let strategy = [
            Strategy::OneForOne,
            Strategy::OneForAll,
            Strategy::RestForOne,
        ][usize::try_from(drawn(seed, &[1]) % 3).unwrap_or(0)];
        let restarts = 1 + u32::try_from(drawn(seed, &[2]) % 4).unwrap_or(0);
        let period_ms =
            [1_000, 5_000, 30_000, 120_000][usize::try_from(drawn(seed, &[3]) % 4).unwrap_or(0)];
        let ends_per_mille =
            [100, 250, 450, 650][usize::try_from(drawn(seed, &[4]) % 4).unwrap_or(0)];
        Self {
            seed,
            strategy,
            intensity: Intensity {
                restarts,
                period_ms,
            },
            ends_per_mille,
        }
    }

    /// The group as the pure machine declares it.
    pub fn spec(&self) -> GroupSpec {
        GroupSpec {
            strategy: self.strategy,
            intensity: self.intensity,
            auto_shutdown: AutoShutdown::Never,
            children: CHILDREN
                .iter()
                .map(|(name, restart)| ChildSpec {
                    name: (*name).to_owned(),
                    kind: steadfast::children::ChildKind::Task,
                    restart: *restart,
                    significant: false,
                    shutdown_ms: CHILD_SHUTDOWN_MS,
                })
                .collect(),
        }
    }

    /// How incarnation `incarnation` of child `child` of group `group`
    /// ends on its own, if it does: after how long, and how.
    fn fate(&self, group: u64, child: usize, incarnation: u32) -> Option<(Duration, Ending)> {
        let r = drawn(self.seed, &[5, group, child as u64, u64::from(incarnation)]);
        if r % 1000 >= self.ends_per_mille {
            return None;
        }
        let after = Duration::from_millis(10 + (r >> 10) % 20_000);
        let ending = match (r >> 40) % 20 {
            0 => Ending::FactoryPanics,
            1..=3 => Ending::Panics,
            4..=7 => Ending::Returns,
            _ => Ending::Fails,
        };
        Some((after, ending))
    }
}

/// How a child's incarnation ends on its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ending {
    Fails,
    Panics,
    Returns,
    /// Its factory panics: it never runs.
    FactoryPanics,
}

/// How long a simulated child is given to stop (it stops at once).
const CHILD_SHUTDOWN_MS: u64 = 1_000;

/// A group of children started by a boot's serving step.
#[derive(Debug, Clone)]
pub struct GroupStarted {
    /// Its number, from 1 across the run.
    pub group: u64,
    /// The boot's attempt.
    pub attempt: u32,
    /// The lifecycle steps adopted before it started.
    pub step: u64,
}

/// What a child did, as the world saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChildSeen {
    /// Its factory was called for this incarnation.
    Started,
    /// It ended on its own (its factory panicked: `StartFailed`).
    Ended(ChildExit),
    /// It was stopped (its shutdown token cancelled).
    Stopped,
    /// A heartbeat once its runtime's drain began.
    Alive,
}

/// One thing a child did.
#[derive(Debug, Clone)]
pub struct ChildEvent {
    pub group: u64,
    pub child: usize,
    pub incarnation: u32,
    pub seen: ChildSeen,
    /// Virtual milliseconds since its group started.
    pub at_ms: u64,
    /// The lifecycle steps adopted before it
    /// (`steadfast_actors::observed::adopted_so_far`).
    pub step: u64,
}

#[derive(Default)]
struct WorldState {
    /// The serving task of the runtime that last started serving.
    serving: Option<mpsc::UnboundedSender<Request>>,
    /// Stores opened, for their numbers.
    stores: u64,
    /// Stores open now (more than one: two owners).
    open: u32,
    /// Broken checks seen from the daemon's side.
    violations: Vec<String>,
    /// The resources that outlive a process (leases of the outside
    /// service, spool files on the simulated disk), by kind and number.
    resources: std::collections::BTreeMap<(Kind, u64), Outliving>,
    /// The resources the serving runtime took or adopted.
    in_use: Vec<(Kind, u64)>,
    /// The daemon's journal on the simulated disk, read (as an auditor
    /// would) to tell which resources the daemon tracks; and its data dir.
    journal: Option<(super::fs::SimFileSystem, std::path::PathBuf)>,
    data_dir: std::path::PathBuf,
}

/// A kind of resource that outlives the process: its step's name is its
/// checkpoints' step.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Kind {
    /// A lease of the outside service, held until given back.
    Lease,
    /// A spool file the service creates in the data dir on the simulated
    /// disk: there while its name is (a power cut may bring back a name
    /// whose unlink was not yet durable, or take one not yet durable).
    Spool,
}

impl Kind {
    const ALL: [Self; 2] = [Self::Lease, Self::Spool];

    /// Its step's name.
    pub const fn step(self) -> &'static str {
        match self {
            Self::Lease => "lease",
            Self::Spool => "spool",
        }
    }
}

/// One resource that outlives the process.
#[derive(Debug, Clone, Copy, Default)]
pub struct Outliving {
    /// A lease not given back (a spool file's presence is its name on the
    /// disk).
    pub held: bool,
    /// There when the daemon's journal was removed or replaced underneath,
    /// or removed without its removal made durable (a failed directory
    /// fsync): no later process can know it.
    pub orphaned: bool,
}

/// The spool file numbered `number`.
fn spool_name(number: u64) -> String {
    format!("sim.spool.{number}")
}

/// The resources of `kind` the journal `bytes` leaves checkpointed (none
/// if it does not decode).
pub fn outstanding_of(bytes: &[u8], kind: Kind) -> Vec<u64> {
    let Ok(decoded) = steadfast::protocol::journal::decode(bytes) else {
        return Vec::new();
    };
    steadfast::protocol::journal::outstanding(&decoded.records)
        .into_iter()
        .filter(|o| o.step == kind.step())
        .filter_map(|o| o.resource.id.parse().ok())
        .collect()
}

/// The resources of `kind` the journal `bytes` has checkpointed and not
/// cleared, whether or not a later intent of the step followed (none if it
/// does not decode): a run of the step made while one of them is still
/// there made it twice (the boot should have adopted it).
fn checkpointed_of(bytes: &[u8], kind: Kind) -> Vec<u64> {
    use steadfast::protocol::journal::Record;
    let Ok(decoded) = steadfast::protocol::journal::decode(bytes) else {
        return Vec::new();
    };
    let mut ids = Vec::new();
    for record in &decoded.records {
        match record {
            Record::Checkpoint { step, resource, .. } if step == kind.step() => {
                ids.extend(resource.id.parse::<u64>());
            }
            Record::CheckpointCleared { step } if step == kind.step() => ids.clear(),
            _ => {}
        }
    }
    ids
}

/// Whether the journal `bytes` leave an intent of `kind`'s step
/// unfinished: a run of it began and may have made one not yet
/// checkpointed, which the step's next run takes back.
pub fn unfinished_of(bytes: &[u8], kind: Kind) -> bool {
    let Ok(decoded) = steadfast::protocol::journal::decode(bytes) else {
        return false;
    };
    steadfast::protocol::journal::unfinished(&decoded.records)
        .iter()
        .any(|u| u.step == kind.step())
}

impl WorldState {
    /// The resources there now that the journal `bytes` names neither by
    /// a checkpoint nor by an unfinished intent of their step, and that no
    /// intrusion orphaned.
    fn unknown(&self, bytes: &[u8]) -> Vec<String> {
        let mut unknown = Vec::new();
        for kind in Kind::ALL {
            if unfinished_of(bytes, kind) {
                continue;
            }
            let tracked = outstanding_of(bytes, kind);
            for ((k, n), r) in &self.resources {
                if *k == kind && !r.orphaned && !tracked.contains(n) && self.present(kind, *n) {
                    unknown.push(format!("{} {n}", kind.step()));
                }
            }
        }
        unknown
    }

    /// Whether the resource is there now.
    fn present(&self, kind: Kind, number: u64) -> bool {
        match kind {
            Kind::Lease => self.resources.get(&(kind, number)).is_some_and(|r| r.held),
            Kind::Spool => self
                .journal
                .as_ref()
                .is_some_and(|(disk, _)| disk.exists(self.data_dir.join(spool_name(number)))),
        }
    }

    /// The journal's bytes as a read sees them now.
    fn journal_bytes(&self) -> Vec<u8> {
        self.journal
            .as_ref()
            .and_then(|(disk, path)| disk.read(path))
            .unwrap_or_default()
    }

    /// A new resource of `kind`, checking that none of its kind the
    /// daemon tracks (checkpointed in its journal) is still there.
    fn make(&mut self, kind: Kind) -> u64 {
        let tracked = checkpointed_of(&self.journal_bytes(), kind);
        let number = self
            .resources
            .range((kind, 0)..=(kind, u64::MAX))
            .next_back()
            .map_or(1, |((_, n), _)| n + 1);
        if let Some(there) = tracked.into_iter().find(|n| self.present(kind, *n)) {
            self.violations.push(format!(
                "an outliving resource is made twice: {} {number} made while {} {there}, \
                 checkpointed in the journal and still there, was not adopted",
                kind.step(),
                kind.step()
            ));
        }
        self.resources.insert(
            (kind, number),
            Outliving {
                held: true,
                orphaned: false,
            },
        );
        number
    }

    /// The resource is about to be torn down: never while the runtime
    /// that serves uses it.
    fn tearing_down(&mut self, kind: Kind, number: u64) {
        let serving = self.serving.as_ref().is_some_and(|tx| !tx.is_closed());
        if serving && self.in_use.contains(&(kind, number)) {
            self.violations.push(format!(
                "an outliving resource is torn down while a runtime uses it: {} {number} torn \
                 down while the runtime that took it serves",
                kind.step()
            ));
        }
    }
}

impl World {
    fn lock(&self) -> MutexGuard<'_, WorldState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The config source: the declared TOML file at `path` (on the
    /// simulated disk, which the operator edits), read, fingerprinted and
    /// parsed as a daemon's `--config FILE` is.
    pub fn source(path: &Path) -> ConfigSource {
        TomlFileSource::new().declared_file(path).into_source()
    }

    /// The running runtime's serving task, if one is serving.
    pub fn serving(&self) -> Option<mpsc::UnboundedSender<Request>> {
        self.lock().serving.clone().filter(|tx| !tx.is_closed())
    }

    pub fn violation(&self, what: String) {
        self.lock().violations.push(what);
    }

    pub fn take_violations(&self) -> Vec<String> {
        std::mem::take(&mut self.lock().violations)
    }

    /// Where the daemon's journal is, for the checks of outliving
    /// resources, and the data dir its spool files are in.
    pub fn watch_journal(
        &self,
        disk: super::fs::SimFileSystem,
        data_dir: &Path,
        path: std::path::PathBuf,
    ) {
        let mut state = self.lock();
        state.journal = Some((disk, path));
        state.data_dir = data_dir.to_path_buf();
    }

    /// The data dir the spool files are in.
    fn data_dir(&self) -> std::path::PathBuf {
        self.lock().data_dir.clone()
    }

    /// A boot made or adopted the resource: the runtime it serves uses it.
    fn in_use(&self, kind: Kind, number: u64) {
        let mut state = self.lock();
        state.in_use.retain(|(k, _)| *k != kind);
        state.in_use.push((kind, number));
    }

    fn make(&self, kind: Kind) -> u64 {
        self.lock().make(kind)
    }

    fn present(&self, kind: Kind, number: u64) -> bool {
        self.lock().present(kind, number)
    }

    /// The resource is torn down (a lease given back; a spool file is
    /// gone once its name is).
    fn torn_down(&self, kind: Kind, number: u64) {
        let mut state = self.lock();
        state.tearing_down(kind, number);
        if let Some(r) = state.resources.get_mut(&(kind, number)) {
            r.held = false;
        }
    }

    /// After a crash, once the next launch repaired its journal (`kept`,
    /// the journal's bytes): the resources there that it names neither by a
    /// checkpoint nor by an unfinished intent (none, with intents written
    /// ahead of the resources they name).
    pub fn unknown_after_crash(&self, kept: &[u8]) -> Vec<String> {
        self.lock().unknown(kept)
    }

    /// A removal whose directory fsync failed: what every read sees is
    /// gone (observation says so, and the drain clears its checkpoint),
    /// but a power cut may bring the name back, which no journal names
    /// then (it keeps one resource a step): orphaned, and counted.
    fn removal_unsure(&self, kind: Kind, number: u64) {
        if let Some(r) = self.lock().resources.get_mut(&(kind, number)) {
            r.orphaned = true;
        }
    }

    /// The journal was removed or replaced underneath: the checkpoints of
    /// every resource there now are no longer the daemon's to keep.
    pub fn orphan_present(&self) {
        let mut state = self.lock();
        let there: Vec<(Kind, u64)> = state
            .resources
            .keys()
            .filter(|(k, n)| state.present(*k, *n))
            .copied()
            .collect();
        for key in there {
            if let Some(r) = state.resources.get_mut(&key) {
                r.orphaned = true;
            }
        }
    }

    /// The resources there now that are neither orphaned nor named by the
    /// journal `bytes` (a checkpoint, or an unfinished intent of their
    /// step, which the step's next run reconciles): leaked.
    pub fn leaked(&self, bytes: &[u8]) -> Vec<String> {
        self.lock().unknown(bytes)
    }

    /// The resources of `kind` there now: what a run of its step that an
    /// earlier one's crash interrupted takes back before making anew (the
    /// outside service lists what is held in the daemon's name; a spool
    /// file is one of the service's own names).
    fn leftovers(&self, kind: Kind) -> Vec<u64> {
        let state = self.lock();
        state
            .resources
            .keys()
            .filter(|(k, n)| *k == kind && state.present(kind, *n))
            .map(|(_, n)| *n)
            .collect()
    }

    /// Resources made, and those an intrusion orphaned.
    pub fn resource_counts(&self) -> (u64, u64) {
        let state = self.lock();
        let orphaned = state.resources.values().filter(|r| r.orphaned).count() as u64;
        (state.resources.len() as u64, orphaned)
    }

    fn children(&self) -> MutexGuard<'_, ChildrenWorld> {
        self.children.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Declare the seed's children.
    pub fn plan_children(&self, plan: ChildrenPlan) {
        self.children().plan = plan;
    }

    /// The seed's children.
    pub fn children_plan(&self) -> ChildrenPlan {
        self.children().plan
    }

    /// The faults stopped: from now on no child ends on its own.
    pub fn calm_children(&self) {
        self.children().calm = true;
    }

    /// The groups started and the children's events since the last call.
    pub fn take_children(&self) -> (Vec<GroupStarted>, Vec<ChildEvent>) {
        let mut children = self.children();
        (
            std::mem::take(&mut children.new_groups),
            std::mem::take(&mut children.events),
        )
    }

    fn group_started(&self, attempt: u32) -> u64 {
        let mut children = self.children();
        children.groups += 1;
        let group = children.groups;
        children.new_groups.push(GroupStarted {
            group,
            attempt,
            step: steadfast_actors::observed::adopted_so_far(),
        });
        group
    }

    fn child_seen(
        &self,
        group: u64,
        began: Instant,
        child: usize,
        incarnation: u32,
        seen: ChildSeen,
    ) {
        let at_ms = u64::try_from(began.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.children().events.push(ChildEvent {
            group,
            child,
            incarnation,
            seen,
            at_ms,
            step: steadfast_actors::observed::adopted_so_far(),
        });
    }

    /// Forget what the daemon's side held: the process crashed.
    pub fn crashed(&self) {
        let mut state = self.lock();
        state.serving = None;
        state.in_use.clear();
        state.open = 0;
    }
}

/// The service, over its world.
pub struct SimService {
    pub world: Arc<World>,
}

fn leaf<'a>(config: &'a toml::Table, key: &str) -> Option<&'a toml::Value> {
    config.get(key)
}

/// What every step does first, as its config's switches say.
async fn switches(config: &toml::Table, step: &str) -> Result<(), StepError> {
    let named = |key| leaf(config, key).and_then(toml::Value::as_str) == Some(step);
    if named("panic_in") {
        panic!("the simulation asked {step} to panic");
    }
    if named("fail_in") {
        return Err(StepError::backoff(format!("the simulation failed {step}")));
    }
    if named("hang_in") {
        std::future::pending::<()>().await;
    }
    Ok(())
}

/// The open store: it counts as open until dropped (its destroy, or the
/// runtime dropped).
pub struct Store {
    _lock: StoreLock,
    file: steadfast::fs::File,
    number: u64,
    alive: Arc<AtomicBool>,
    world: Arc<World>,
}

impl Drop for Store {
    fn drop(&mut self) {
        self.alive.store(false, Ordering::SeqCst);
        let mut state = self.world.lock();
        state.open = state.open.saturating_sub(1);
    }
}

struct OpenStore {
    world: Arc<World>,
}

impl Step for OpenStore {
    const NAME: &'static str = "open_store";
    type Config = toml::Table;
    type Output = Store;

    async fn execute(
        &self,
        cx: StepContext<'_, toml::Table>,
    ) -> Result<Resource<Store>, StepError> {
        switches(cx.config, Self::NAME).await?;
        if leaf(cx.config, "refuse").and_then(toml::Value::as_bool) == Some(true) {
            return Err(StepError::hold("the simulation refused the store"));
        }
        if let Some(ms) = leaf(cx.config, "slow_ms").and_then(toml::Value::as_integer) {
            let quarter = Duration::from_millis(ms.unsigned_abs() / 4);
            for _ in 0..4 {
                tokio::time::sleep(quarter).await;
                cx.progress.report();
            }
        }
        let lock = StoreLock::acquire(cx.data_dir).map_err(StepError::backoff)?;
        // The file's name is made durable before a record in it is
        // acknowledged: a crash must not take the whole file.
        let dir = Dir::open_data_dir(cx.data_dir, false).map_err(StepError::backoff)?;
        let file = dir
            .open(STORE_FILE, Access::AppendCreate)
            .map_err(StepError::backoff)?;
        dir.sync().map_err(StepError::backoff)?;
        let number = {
            let mut state = self.world.lock();
            state.stores += 1;
            state.open += 1;
            if state.open > 1 {
                let what = format!(
                    "two owners of the store: store {} opened while another was open",
                    state.stores
                );
                state.violations.push(what);
            }
            state.stores
        };
        let store = Store {
            _lock: lock,
            file,
            number,
            alive: Arc::new(AtomicBool::new(true)),
            world: Arc::clone(&self.world),
        };
        Ok(Resource::new(
            "store",
            cx.data_dir.display().to_string(),
            store,
        ))
    }

    async fn observe(&self, record: &ResourceRecord, _runtime: &Runtime) -> Observation {
        crate::support::common::store_lock_held(record)
    }

    async fn destroy(
        &self,
        _record: &ResourceRecord,
        runtime: &mut Runtime,
    ) -> Result<(), StepError> {
        drop(runtime.take::<Self>());
        Ok(())
    }
}

/// Takes a lease from the outside service ([`World`]): it outlives the
/// process, so a boot after a crash adopts the one its predecessor
/// checkpointed while observation finds it held, and a run its
/// predecessor's crash interrupted gives back what that run took.
struct TakeLease {
    world: Arc<World>,
}

impl Step for TakeLease {
    const NAME: &'static str = Kind::Lease.step();
    type Config = toml::Table;
    type Output = ();
    const LIFETIME: Lifetime = Lifetime::Outlives;

    async fn execute(&self, cx: StepContext<'_, toml::Table>) -> Result<Resource<()>, StepError> {
        if cx.interrupted {
            for number in self.world.leftovers(Kind::Lease) {
                self.world.torn_down(Kind::Lease, number);
            }
        }
        switches(cx.config, Self::NAME).await?;
        let number = self.world.make(Kind::Lease);
        self.world.in_use(Kind::Lease, number);
        Ok(Resource::new("lease", number.to_string(), ()))
    }

    async fn observe(&self, record: &ResourceRecord, _runtime: &Runtime) -> Observation {
        observe(&self.world, Kind::Lease, record)
    }

    async fn destroy(
        &self,
        record: &ResourceRecord,
        _runtime: &mut Runtime,
    ) -> Result<(), StepError> {
        if let Ok(number) = record.id.parse() {
            self.world.torn_down(Kind::Lease, number);
        }
        Ok(())
    }
}

/// Whether the resource `record` names is there; a boot that finds it
/// there adopts it (the runtime it serves uses it).
fn observe(world: &World, kind: Kind, record: &ResourceRecord) -> Observation {
    let Ok(number) = record.id.parse() else {
        return Observation::Gone;
    };
    let there = world.present(kind, number);
    if there {
        world.in_use(kind, number);
    }
    Observation::from(there)
}

/// Writes a spool file into the data dir (through `steadfast::fs`, so on
/// the simulated disk): made durable, name and bytes, before it is
/// checkpointed; removed, and the removal made durable, when the runtime
/// is drained, or by the next run of the step when a crash interrupted
/// this one. It outlives the process.
struct Spool {
    world: Arc<World>,
}

impl Step for Spool {
    const NAME: &'static str = Kind::Spool.step();
    type Config = toml::Table;
    type Output = ();
    const LIFETIME: Lifetime = Lifetime::Outlives;

    async fn execute(&self, cx: StepContext<'_, toml::Table>) -> Result<Resource<()>, StepError> {
        let dir = Dir::open_data_dir(cx.data_dir, false).map_err(StepError::backoff)?;
        if cx.interrupted {
            // What the interrupted run wrote goes, durably, before a new
            // file is made.
            for number in self.world.leftovers(Kind::Spool) {
                dir.unlink(&spool_name(number))
                    .map_err(StepError::backoff)?;
                dir.sync().map_err(StepError::backoff)?;
                self.world.torn_down(Kind::Spool, number);
            }
        }
        switches(cx.config, Self::NAME).await?;
        let number = self.world.make(Kind::Spool);
        let name = spool_name(number);
        let written = dir
            .open(&name, Access::WriteCreateNew)
            .map_err(|e| e.to_string())
            .and_then(|mut file| {
                file.write_all(format!("spool {number}\n").as_bytes())
                    .and_then(|()| file.sync_all())
                    .map_err(|e| e.to_string())
            })
            .and_then(|()| dir.sync().map_err(|e| e.to_string()));
        if let Err(error) = written {
            // Not made: nothing of it is left behind (a crash may still
            // bring back a name not yet removed durably; its intent is
            // durable, so the step's next run takes it back).
            let _ = dir.unlink(&name);
            let _ = dir.sync();
            self.world.torn_down(Kind::Spool, number);
            return Err(StepError::backoff(error));
        }
        self.world.in_use(Kind::Spool, number);
        Ok(Resource::new("spool", number.to_string(), ()))
    }

    async fn observe(&self, record: &ResourceRecord, _runtime: &Runtime) -> Observation {
        observe(&self.world, Kind::Spool, record)
    }

    async fn destroy(
        &self,
        record: &ResourceRecord,
        _runtime: &mut Runtime,
    ) -> Result<(), StepError> {
        let Ok(number) = record.id.parse() else {
            return Ok(());
        };
        self.world.torn_down(Kind::Spool, number);
        let dir = Dir::open_data_dir(&self.world.data_dir(), false).map_err(StepError::backoff)?;
        dir.unlink(&spool_name(number))
            .map_err(StepError::backoff)?;
        dir.sync().map_err(|error| {
            // The name is gone from what every read sees, so the drain's
            // observation clears the checkpoint; a power cut may bring it
            // back, and the journal keeps one resource a step.
            self.world.removal_unsure(Kind::Spool, number);
            StepError::backoff(error)
        })
    }
}

/// Serves the workload's requests: connections in tasks of the runtime's
/// tracker, each writing its records to the store and acknowledging them
/// once fsynced.
struct Serve {
    world: Arc<World>,
}

impl Step for Serve {
    const NAME: &'static str = "serve";
    type Config = toml::Table;
    type Output = ();

    async fn execute(&self, cx: StepContext<'_, toml::Table>) -> Result<Resource<()>, StepError> {
        switches(cx.config, Self::NAME).await?;
        let store = cx
            .runtime
            .get::<OpenStore>()
            .ok_or_else(|| StepError::backoff("no store"))?;
        let (file, number, alive) = (
            store.file.try_clone().map_err(StepError::backoff)?,
            store.number,
            Arc::clone(&store.alive),
        );
        let (tx, mut requests) = mpsc::unbounded_channel();
        let tracker = cx.runtime.tracker();
        let world = Arc::clone(&self.world);
        cx.runtime.serve("serve", async move {
            while let Some(request) = requests.recv().await {
                let (writes, stubborn) = match request {
                    Request::Crash => return Err("the simulation crashed the runtime".to_owned()),
                    Request::Connect { writes, stubborn } => (writes, stubborn),
                };
                let connection = Connection {
                    file: file.try_clone().map_err(|e| e.to_string())?,
                    number,
                    alive: Arc::clone(&alive),
                    world: Arc::clone(&world),
                };
                let shutdown = tracker.shutdown();
                // Refused once the shutdown began: the connection's
                // receiver is dropped, and its writes fail.
                let _ = tracker.spawn("connection", async move {
                    connection.serve(writes, stubborn, shutdown).await;
                });
            }
            Ok(())
        });
        let group = self.world.group_started(cx.attempt.get());
        let children = children(&self.world, group, cx.runtime.shutdown_token());
        cx.runtime
            .supervise(children)
            .await
            .map_err(StepError::backoff)?;
        self.world.lock().serving = Some(tx);
        Ok(Resource::new("serve", "requests", ()))
    }
}

struct Connection {
    file: steadfast::fs::File,
    number: u64,
    alive: Arc<AtomicBool>,
    world: Arc<World>,
}

impl Connection {
    async fn serve(
        mut self,
        mut writes: mpsc::UnboundedReceiver<Write>,
        stubborn: bool,
        shutdown: steadfast::service::Shutdown,
    ) {
        loop {
            let next = if stubborn {
                writes.recv().await
            } else {
                shutdown.unless_begun(writes.recv()).await.flatten()
            };
            let Some(write) = next else { return };
            if !self.alive.load(Ordering::SeqCst) {
                self.world.violation(format!(
                    "a connection served write {} after its runtime's drain closed store {}",
                    write.seq, self.number
                ));
            }
            let line = record_line(write.seq);
            if self.file.write_all(line.as_bytes()).is_err() || self.file.sync_data().is_err() {
                return;
            }
            let _ = write.ack.send(());
        }
    }
}

impl Service for SimService {
    type Config = toml::Table;

    fn plan(&self, _config: &toml::Table) -> Plan<toml::Table> {
        Plan::new()
            .step(OpenStore {
                world: Arc::clone(&self.world),
            })
            .step(TakeLease {
                world: Arc::clone(&self.world),
            })
            .step(Spool {
                world: Arc::clone(&self.world),
            })
            .step(Serve {
                world: Arc::clone(&self.world),
            })
    }

    async fn apply_config(
        &self,
        change: ConfigChange<'_, toml::Table>,
        _runtime: &mut Runtime,
    ) -> Vec<String> {
        change.changed.to_vec()
    }

    async fn wipe(&self, data_dir: &Path, config: Option<&toml::Table>) -> Result<(), StepError> {
        if config
            .and_then(|c| leaf(c, "wipe_fails"))
            .and_then(toml::Value::as_bool)
            == Some(true)
        {
            return Err(StepError::hold("the simulation failed the wipe"));
        }
        let _lock = StoreLock::acquire(data_dir).map_err(StepError::backoff)?;
        let dir = Dir::open_data_dir(data_dir, false).map_err(StepError::backoff)?;
        dir.unlink(STORE_FILE).map_err(StepError::backoff)?;
        dir.sync().map_err(StepError::backoff)
    }
}

/// Group `group`'s children as the seed declares them; `drain` is their
/// runtime's shutdown token.
fn children(world: &Arc<World>, group: u64, drain: CancellationToken) -> Children {
    let plan = world.children_plan();
    let began = Instant::now();
    let mut declared = match plan.strategy {
        Strategy::OneForOne => Children::one_for_one(),
        Strategy::OneForAll => Children::one_for_all(),
        Strategy::RestForOne => Children::rest_for_one(),
    }
    .intensity(
        plan.intensity.restarts,
        Duration::from_millis(plan.intensity.period_ms),
    );
    for (child, (name, restart)) in CHILDREN.iter().enumerate() {
        let world = Arc::clone(world);
        let drain = drain.clone();
        declared = declared.child(
            Child::task(name, move |cx| {
                let incarnation = cx.incarnation();
                world.child_seen(group, began, child, incarnation, ChildSeen::Started);
                let fate = plan.fate(group, child, incarnation);
                if let Some((_, Ending::FactoryPanics)) = fate {
                    let why = format!("the simulation's factory of {} panicked", cx.name());
                    world.child_seen(
                        group,
                        began,
                        child,
                        incarnation,
                        ChildSeen::Ended(ChildExit::StartFailed(why.clone())),
                    );
                    panic!("{why}");
                }
                let (world, drain) = (Arc::clone(&world), drain.clone());
                async move {
                    live_child(
                        &world,
                        (group, began, child, incarnation),
                        &cx,
                        &drain,
                        fate,
                    )
                    .await
                }
            })
            .restart(*restart)
            .shutdown(Duration::from_millis(CHILD_SHUTDOWN_MS)),
        );
    }
    declared
}

/// One incarnation of a simulated child: it ends as `fate` says while its
/// runtime runs and the faults last, stops when told, and once its
/// runtime's drain began only waits to be stopped, noting heartbeats.
async fn live_child(
    world: &World,
    (group, began, child, incarnation): (u64, Instant, usize, u32),
    cx: &steadfast::children::ChildContext,
    drain: &CancellationToken,
    fate: Option<(Duration, Ending)>,
) -> Result<(), String> {
    let seen = |what| world.child_seen(group, began, child, incarnation, what);
    let mut ends_at = fate.map(|(after, ending)| (Instant::now() + after, ending));
    loop {
        let due_at = ends_at.map(|(at, _)| at);
        let due = async move {
            match due_at {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            biased;
            () = cx.shutdown().cancelled() => {
                seen(ChildSeen::Stopped);
                return Ok(());
            }
            () = drain.cancelled() => break,
            () = due => {
                let ending = ends_at.take().map(|(_, ending)| ending);
                if world.children().calm {
                    continue;
                }
                let why = format!("the simulation ended {} #{incarnation}", cx.name());
                match ending {
                    Some(Ending::Panics) => {
                        seen(ChildSeen::Ended(ChildExit::Panicked(why.clone())));
                        panic!("{why}");
                    }
                    Some(Ending::Returns) => {
                        seen(ChildSeen::Ended(ChildExit::Normal));
                        return Ok(());
                    }
                    _ => {
                        seen(ChildSeen::Ended(ChildExit::Error(why.clone())));
                        return Err(why);
                    }
                }
            }
        }
    }
    let mut every = Duration::from_secs(1);
    loop {
        tokio::select! {
            biased;
            () = cx.shutdown().cancelled() => {
                seen(ChildSeen::Stopped);
                return Ok(());
            }
            () = tokio::time::sleep(every) => {
                seen(ChildSeen::Alive);
                every *= 2;
            }
        }
    }
}
