//! A service's typed config, through the real binaries: the counter example
//! (`examples/counter.rs`: typed `port`, `path`, `step`) and kvd, driven by
//! the real `steadfastctl`.
//!
//! - `config set` of a value the config type refuses, or of a leaf it does
//!   not know, exits 3 naming the leaf and the reason, and leaves the
//!   override tier as it was (nothing persisted, nothing applied).
//! - A valid change applies in place where the service takes it (`step`),
//!   and is reported `restart_needed` where it does not (`port`).
//! - A declared file that does not fit the type holds the boot in
//!   `resolve_config`, the error naming the leaf.
//! - The typed config is kept live: a boot deserializes it once, and a
//!   change applied in place once (the new config; the old one is the
//!   live value), counted in-process on a config type that counts.

use crate::support::common;
use crate::support::processes;

use std::io::Read;
use std::path::Path;
use std::process::{Child, Command, Stdio};

use processes::{ctl, free_port, until};

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

/// How many times [`Counted`] was deserialized (only the test below uses
/// the type, so no other test moves it).
static DESERIALIZED: AtomicUsize = AtomicUsize::new(0);

/// A config that counts its deserializations.
#[derive(Debug)]
struct Counted {
    step: i64,
}

impl<'de> serde::Deserialize<'de> for Counted {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        #[derive(serde::Deserialize)]
        struct Raw {
            step: i64,
        }
        let raw = Raw::deserialize(deserializer)?;
        DESERIALIZED.fetch_add(1, Ordering::SeqCst);
        Ok(Self { step: raw.step })
    }
}

struct Idle;

impl steadfast::Step for Idle {
    const NAME: &'static str = "idle";
    type Config = Counted;
    type Output = ();

    async fn execute(
        &self,
        _cx: steadfast::StepContext<'_, Counted>,
    ) -> Result<steadfast::Resource<()>, steadfast::StepError> {
        Ok(steadfast::Resource::new("idle", "", ()))
    }
}

/// Takes `step` in place, remembering the old and new values it was
/// offered.
#[derive(Default)]
struct TakesStep {
    offered: std::sync::Mutex<Vec<(i64, i64)>>,
}

impl steadfast::Service for TakesStep {
    type Config = Counted;

    fn plan(&self, _config: &Counted) -> steadfast::Plan<Counted> {
        steadfast::Plan::new().step(Idle)
    }

    async fn apply_config(
        &self,
        change: steadfast::ConfigChange<'_, Counted>,
        _runtime: &mut steadfast::Runtime,
    ) -> Vec<String> {
        self.offered
            .lock()
            .expect("offered")
            .push((change.old.step, change.new.step));
        Vec::new()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_typed_config_is_deserialized_once_per_resolve() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let data = tmp.path().join("data");
    // An in-memory source no watcher sees: only the reload applies.
    let step = Arc::new(std::sync::atomic::AtomicI64::new(1));
    let source = {
        let step = Arc::clone(&step);
        steadfast::config::ConfigSource::in_place(move || {
            let mut config = toml::Table::new();
            config.insert("step".into(), step.load(Ordering::SeqCst).into());
            Ok(steadfast::config::ResolvedConfig::untracked(config))
        })
    };
    let service = Arc::new(TakesStep::default());
    let (run, handle) = common::supervise_with(&data, source, None, Arc::clone(&service));
    common::until(&handle, "running", common::running).await;
    assert_eq!(
        DESERIALIZED.load(Ordering::SeqCst),
        1,
        "the boot deserializes its config once"
    );

    step.store(2, Ordering::SeqCst);
    handle.reload().await.expect("the reload is accepted");
    assert_eq!(
        *service.offered.lock().expect("offered"),
        vec![(1, 2)],
        "the change is offered, old and new typed"
    );
    assert_eq!(
        DESERIALIZED.load(Ordering::SeqCst),
        2,
        "applying the change deserialized only the new config"
    );
    common::exit(run, &handle, steadfast::ExitIntent::Halt).await;
}

/// A connection to the counter: one count, answered after its fsync.
fn bump(port: u16) -> String {
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect");
    stream
        .set_read_timeout(Some(processes::PATIENCE))
        .expect("timeout");
    let mut answer = String::new();
    stream.read_to_string(&mut answer).expect("an answer");
    answer.trim().to_owned()
}

struct Counter {
    _tmp: tempfile::TempDir,
    data: std::path::PathBuf,
    file: std::path::PathBuf,
    port: u16,
    child: Child,
}

impl Drop for Counter {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The counter example over a fresh data dir and a declared file holding
/// `config`, its port free.
fn counter(config: impl FnOnce(u16) -> String) -> Counter {
    let tmp = tempfile::tempdir().expect("tempdir");
    let data = tmp.path().join("data");
    let file = tmp.path().join("counter.toml");
    let port = free_port();
    std::fs::write(&file, config(port)).expect("config");
    let child = Command::new(processes::example("counter"))
        .arg(&data)
        .arg(&file)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("counter starts");
    Counter {
        _tmp: tmp,
        data,
        file,
        port,
        child,
    }
}

fn running(s: &serde_json::Value) -> bool {
    s["lifecycle"]["state"] == "running"
}

fn overrides(data: &Path) -> serde_json::Value {
    let out = ctl(data, &["config", "show", "--json"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let view: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    view["overrides"].clone()
}

/// `config set LEAF VALUE`: its exit code and what it printed on stderr.
fn set(data: &Path, leaf: &str, value: &str) -> (Option<i32>, String) {
    let out = ctl(data, &["config", "set", leaf, value]);
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn a_value_the_type_refuses_and_an_unknown_leaf_exit_3_and_change_nothing() {
    let app = counter(|port| format!("port = {port}\n"));
    until(&app.data, "running", running);
    assert_eq!(bump(app.port), "1");
    let before = overrides(&app.data);

    let (code, stderr) = set(&app.data, "port", "many");
    assert_eq!(code, Some(3), "{stderr}");
    assert!(
        stderr.contains("port") && stderr.contains("invalid type"),
        "names the leaf and the reason: {stderr}"
    );
    let (code, stderr) = set(&app.data, "step", "-1");
    assert_eq!(code, Some(3), "{stderr}");
    assert!(stderr.contains("step"), "{stderr}");
    let (code, stderr) = set(&app.data, "nosuch", "5");
    assert_eq!(code, Some(3), "{stderr}");
    assert!(
        stderr.contains("unknown leaf nosuch"),
        "names the unknown leaf: {stderr}"
    );

    assert_eq!(overrides(&app.data), before, "the tier is unchanged");
    let status = until(&app.data, "still running", running);
    assert_eq!(status["pending"]["kind"], "in_sync", "{status:#}");
    assert_eq!(bump(app.port), "2", "the runtime kept serving, untouched");
}

#[test]
fn a_valid_change_applies_in_place_or_asks_for_a_restart() {
    let app = counter(|port| format!("port = {port}\n"));
    until(&app.data, "running", running);
    assert_eq!(bump(app.port), "1");

    let (code, stderr) = set(&app.data, "step", "10");
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(bump(app.port), "11", "step applied in place");
    let status = until(&app.data, "in sync", |s| {
        running(s) && s["pending"]["kind"] == "in_sync"
    });
    assert_eq!(status["lifecycle"]["attempt"], 1, "no restart: {status:#}");

    let other = free_port();
    let (code, stderr) = set(&app.data, "port", &other.to_string());
    assert_eq!(code, Some(0), "{stderr}");
    let status = until(&app.data, "restart needed", |s| {
        s["pending"]["kind"] == "restart_needed"
            && s["pending"]["leaves"] == serde_json::json!(["port"])
    });
    assert!(running(&status), "{status:#}");
    // The count survives the restart that takes the new port.
    let out = ctl(&app.data, &["restart"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    until(&app.data, "running again", |s| {
        running(s) && s["lifecycle"]["attempt"] == 2
    });
    assert_eq!(bump(other), "21");
}

#[test]
fn a_declared_file_that_does_not_fit_the_type_is_held_naming_the_leaf() {
    let app = counter(|port| format!("port = {port}\nstep = \"lots\"\n"));
    let status = until(&app.data, "held", |s| {
        s["lifecycle"]["state"] == "failed" && s["lifecycle"]["retry"]["class"] == "hold"
    });
    let report = &status["lifecycle"]["report"];
    let error = report["error"].as_str().unwrap_or_default();
    assert!(
        error.contains("step") && error.contains("invalid type"),
        "names the leaf and the reason: {status:#}"
    );
    assert_eq!(report["phase"], "resolve_config", "{status:#}");

    // An unknown leaf in the file is held the same way, naming it.
    std::fs::write(&app.file, format!("port = {}\nstpe = 3\n", app.port)).expect("typo");
    let status = until(&app.data, "held on the typo", |s| {
        s["lifecycle"]["report"]["error"]
            .as_str()
            .is_some_and(|e| e.contains("unknown leaf stpe"))
    });
    assert_eq!(status["lifecycle"]["state"], "failed", "{status:#}");

    // The fix boots it.
    std::fs::write(&app.file, format!("port = {}\nstep = 3\n", app.port)).expect("fix");
    until(&app.data, "running", running);
    assert_eq!(bump(app.port), "3");
}

#[test]
fn kvd_refuses_a_max_connections_that_is_not_a_number() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let data = tmp.path().join("data");
    let config = tmp.path().join("kvd.toml");
    let port = free_port();
    std::fs::write(&config, format!("listen_addr = \"127.0.0.1:{port}\"\n")).expect("config");
    let mut kvd = processes::kvd(&data, &config, Stdio::null());
    until(&data, "running", running);
    let (code, stderr) = set(&data, "max_connections", "notanumber");
    assert_eq!(code, Some(3), "{stderr}");
    assert!(stderr.contains("max_connections"), "{stderr}");
    let (code, stderr) = set(&data, "nosuch", "5");
    assert_eq!(code, Some(3), "{stderr}");
    assert_eq!(overrides(&data), serde_json::json!([]), "nothing persisted");
    assert_eq!(processes::kv(port, "SET k v"), "OK");
    let _ = kvd.kill();
    let _ = kvd.wait();
}
