//! The crash harness's daemon (`tests/it/crash.rs`): a supervisor over a plan
//! whose first step leaves a durable resource, driven through a fixed script
//! (boot, restart, exit halt) and killable with `SIGKILL` at any failpoint of
//! `steadfast_actors::failpoint` (`STEADFAST_CRASH_AT=<point>:<nth>`).
//!
//! The plan: `prepare` creates `<data_dir>/prepared` (it outlives the
//! process: its intent is durable before it runs, and a resumed boot
//! observes the file and skips the step, or runs it again told it was
//! interrupted: `interrupted prepare`), `open_store`
//! takes the store lock, `serve` spawns a child process (`sleep 60`) and a
//! task that waits for the shutdown token.
//!
//! It prints one line per fact, flushed as it happens, for the test to read:
//! `waiting` (another process held the lock when it looked), `locked <ms>` (it holds the control directory's lock, ms since the
//! epoch), `journal ok <records>` or `journal refused <error>` (its own decode
//! of the journal before the supervisor opens it), `segment <state,…>` (the
//! `to` states of the previous process's transitions), `expect_skip
//! prepare <yes|no>` (an outstanding checkpoint of `prepare` and the file
//! present), `previous <kind>`, `ack <state>` (a published, hence durable,
//! transition), `phase <attempt> <step> <outcome>`, `child <pid>`, `done`.
//!
//! `cargo run --example crashd --features failpoints -- ./crash-data` (set `STEADFAST_CRASH_AT` to
//! kill it at a point; `CRASHD_KEEP` sets the attempts the journal keeps).
#![allow(clippy::disallowed_methods)] // a real daemon the crash harness kills; the simulation runs none of its code

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use steadfast::protocol::journal::{self, Record};
use steadfast::protocol::lifecycle::LifecycleState;
use steadfast::protocol::snapshot::PhaseOutcome;
use steadfast::service::{Lifetime, ResourceRecord, StoreLock};
use steadfast::supervisor::Timings;
use steadfast::{
    ExitIntent, Hold, Observation, Plan, Resource, Runtime, Service, Step, StepContext, StepError,
    Supervisor,
};
use steadfast_actors::control_dir::ControlDir;

fn say(line: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

fn now_ms() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis())
}

struct Crashd {
    data_dir: PathBuf,
}

/// Creates `<data_dir>/prepared`, a resource that survives a crash.
struct Prepare {
    path: PathBuf,
}

impl Step for Prepare {
    const NAME: &'static str = "prepare";
    type Config = toml::Table;
    type Output = ();
    const LIFETIME: Lifetime = Lifetime::Outlives;

    async fn execute(&self, cx: StepContext<'_, toml::Table>) -> Result<Resource<()>, StepError> {
        // A run interrupted after its intent (a crash before its checkpoint
        // was durable) may have left the file: creating it truncates it,
        // which adopts it whole.
        if cx.interrupted {
            say("interrupted prepare");
        }
        std::fs::File::create(&self.path)
            .and_then(|f| f.sync_all())
            .map_err(|e| StepError::backoff(format!("{}: {e}", self.path.display())))?;
        Ok(Resource::new("file", self.path.display().to_string(), ()))
    }

    /// On disk, not in the runtime: a resumed boot finds it.
    async fn observe(&self, _record: &ResourceRecord, _runtime: &Runtime) -> Observation {
        Observation::from(self.path.exists())
    }

    async fn destroy(
        &self,
        _record: &ResourceRecord,
        _runtime: &mut Runtime,
    ) -> Result<(), StepError> {
        // `CRASHD_KEEP_FILE=1`: a destroy that says it worked and did not
        // (the drain must notice by observing).
        if std::env::var_os("CRASHD_KEEP_FILE").is_some() {
            return Ok(());
        }
        match std::fs::remove_file(&self.path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(StepError::backoff(e)),
            _ => Ok(()),
        }
    }
}

/// Takes the store lock.
struct OpenStore;

impl Step for OpenStore {
    const NAME: &'static str = "open_store";
    type Config = toml::Table;
    type Output = StoreLock;

    async fn execute(
        &self,
        cx: StepContext<'_, toml::Table>,
    ) -> Result<Resource<StoreLock>, StepError> {
        let lock = StoreLock::acquire(cx.data_dir).map_err(StepError::backoff)?;
        Ok(Resource::new("store", "store.lock", lock))
    }
}

/// Spawns the child process and a task that waits for the shutdown token.
/// The child would outlive a `kill -9` of the daemon; the harness kills it
/// itself, so the step stands for one whose resource dies with the process
/// (the default lifetime): a boot after a crash runs it again.
struct Serve;

impl Step for Serve {
    const NAME: &'static str = "serve";
    type Config = toml::Table;
    type Output = std::process::Child;

    async fn execute(
        &self,
        cx: StepContext<'_, toml::Table>,
    ) -> Result<Resource<Self::Output>, StepError> {
        let child = std::process::Command::new("sleep")
            .arg("60")
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .map_err(|e| StepError::backoff(format!("sleep: {e}")))?;
        let pid = child.id();
        say(&format!("child {pid}"));
        let stop = cx.runtime.shutdown_token();
        cx.runtime.spawn("serve", async move {
            stop.cancelled().await;
            Ok(())
        });
        Ok(Resource::new("process", pid.to_string(), child))
    }

    async fn destroy(
        &self,
        _record: &ResourceRecord,
        runtime: &mut Runtime,
    ) -> Result<(), StepError> {
        if let Some(mut child) = runtime.take::<Self>() {
            let _ = child.kill();
            let _ = child.wait();
        }
        Ok(())
    }
}

impl Service for Crashd {
    type Config = toml::Table;

    fn plan(&self, _config: &toml::Table) -> Plan<toml::Table> {
        Plan::new()
            .step(Prepare {
                path: self.data_dir.join("prepared"),
            })
            .step(OpenStore)
            .step(Serve)
    }
}

/// Wait for the previous daemon's lock (a blocking `flock`, woken by the
/// kernel the moment that process dies), then let it go for the supervisor
/// to take. Nobody else contends for it in the harness.
fn wait_for_the_lock(data_dir: &Path) {
    let lock = ControlDir::under(data_dir).join("lock");
    if let Ok(file) = std::fs::File::open(&lock)
        && matches!(file.try_lock(), Err(std::fs::TryLockError::WouldBlock))
    {
        say("waiting");
        let _ = file.lock();
    }
    say(&format!("locked {}", now_ms()));
}

/// Decode the journal as the previous daemon left it, and say what a resume
/// should find.
fn inspect(data_dir: &Path) {
    let path = ControlDir::under(data_dir).join("journal");
    let Ok(bytes) = std::fs::read(&path) else {
        say("journal ok 0");
        say("segment ");
        say("expect_skip prepare no");
        return;
    };
    match journal::decode(&bytes) {
        Ok(decoded) => {
            say(&format!("journal ok {}", decoded.records.len()));
            let mut segment: Vec<String> = Vec::new();
            for record in &decoded.records {
                if let Record::Transition { from, to, .. } = record {
                    if from == "resolving" {
                        segment.clear();
                    }
                    segment.push(to.split('(').next().unwrap_or(to).to_owned());
                }
            }
            say(&format!("segment {}", segment.join(",")));
            let outstanding = journal::outstanding(&decoded.records)
                .iter()
                .any(|o| o.step == Prepare::NAME);
            let present = data_dir.join("prepared").exists();
            say(&format!(
                "expect_skip prepare {}",
                if outstanding && present { "yes" } else { "no" }
            ));
        }
        Err(error) => say(&format!("journal refused {error}")),
    }
}

async fn wait_running(
    watch: &mut tokio::sync::watch::Receiver<steadfast::protocol::snapshot::Snapshot>,
) {
    let _ = watch
        .wait_for(|s| matches!(s.lifecycle, LifecycleState::Running { .. }))
        .await;
}

#[tokio::main]
async fn main() {
    let data_dir = PathBuf::from(
        std::env::args()
            .nth(1)
            .unwrap_or_else(|| "crash-data".into()),
    );
    let keep = std::env::var("CRASHD_KEEP")
        .ok()
        .and_then(|k| k.parse().ok())
        .unwrap_or(4);
    wait_for_the_lock(&data_dir);
    inspect(&data_dir);
    let service = Crashd {
        data_dir: data_dir.clone(),
    };
    let built = Supervisor::builder(&data_dir, service)
        .timings(Timings {
            drain_grace: Duration::from_secs(2),
            ..Timings::default()
        })
        .journal_keep_attempts(keep)
        .build();
    let (supervisor, handle) = match built {
        Ok(opened) => opened,
        Err(error) => {
            say(&format!("refused {error}"));
            std::process::exit(1);
        }
    };
    let previous = serde_json::to_value(handle.snapshot().previous_run)
        .ok()
        .and_then(|v| v.get("kind").and_then(|k| k.as_str()).map(str::to_owned))
        .unwrap_or_default();
    say(&format!("previous {previous}"));

    // `CRASHD_FSIZE=<bytes>`: from here on, no file of this process may grow
    // past that size, so a journal append fails for real (EFBIG, and a
    // short write before it). SIGXFSZ is caught so the write fails instead
    // of the process dying.
    let fsize = std::env::var("CRASHD_FSIZE")
        .ok()
        .and_then(|n| n.parse::<u64>().ok());
    let _xfsz = match fsize {
        Some(limit) => {
            let caught = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::from_raw(
                rustix::process::Signal::XFSZ.as_raw(),
            ));
            let limited = rustix::process::setrlimit(
                rustix::process::Resource::Fsize,
                rustix::process::Rlimit {
                    current: Some(limit),
                    maximum: None,
                },
            );
            say(&format!(
                "fsize {limit} {}",
                limited.is_ok() && caught.is_ok()
            ));
            caught.ok()
        }
        None => None,
    };

    // Every published state, and every phase as it ends.
    let mut published = handle.watch();
    tokio::spawn(async move {
        // The first snapshot (resolving) is where every process starts, not a
        // transition: nothing journals it.
        let mut last = "resolving".to_owned();
        let mut error_said = false;
        let mut phases_seen = std::collections::HashSet::new();
        loop {
            let snapshot = published.borrow_and_update().clone();
            if let (Some(error), false) = (&snapshot.error, error_said) {
                say(&format!("error {error}"));
                error_said = true;
            }
            let state = snapshot.lifecycle.name().to_owned();
            if state != last {
                say(&format!("ack {state}"));
                last = state;
            }
            for attempt in &snapshot.attempts {
                for phase in &attempt.phases {
                    let outcome = match phase.outcome {
                        PhaseOutcome::Running => continue,
                        PhaseOutcome::Completed => "completed",
                        PhaseOutcome::Skipped => "skipped",
                        PhaseOutcome::Failed { .. } => "failed",
                    };
                    if phases_seen.insert((attempt.attempt, phase.phase.to_string())) {
                        say(&format!(
                            "phase {} {} {outcome}",
                            attempt.attempt, phase.phase
                        ));
                    }
                }
            }
            if published.changed().await.is_err() {
                return;
            }
        }
    });

    let script = {
        let handle = handle.clone();
        async move {
            if fsize.is_some() {
                // Once the journal has failed: a command is not acknowledged.
                let mut watch = handle.watch();
                let _ = watch.wait_for(|s| s.error.is_some()).await;
                match handle.stop(Hold::None).await {
                    Ok(_) => say("stop ok"),
                    Err(error) => say(&format!("stop err {error}")),
                }
                return;
            }
            let mut watch = handle.watch();
            wait_running(&mut watch).await;
            // `CRASHD_PAUSE_MS`: stay running that long first (so a test can
            // look at the serve step's child process).
            if let Some(ms) = std::env::var("CRASHD_PAUSE_MS")
                .ok()
                .and_then(|ms| ms.parse().ok())
            {
                tokio::time::sleep(Duration::from_millis(ms)).await;
            }
            let _ = handle.restart().await;
            wait_running(&mut watch).await;
            let _ = handle.stop(Hold::None).await;
            let _ = handle.start().await;
            wait_running(&mut watch).await;
            let _ = handle.exit(ExitIntent::Halt).await;
        }
    };
    tokio::spawn(script);
    let intent = supervisor.run().await;
    say("done");
    std::process::exit(intent.code());
}
