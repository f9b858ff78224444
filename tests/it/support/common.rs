//! A small service for the supervisor's integration tests: a store lock, a
//! real TCP listener and a serve task, with switches in its config to make a
//! step panic, a drain leak the store, or the serve task end on its own.
//! And `alone_in_process`: a test that measures its whole process (RSS,
//! panics) re-runs itself as the only test of a child of its binary, so it
//! checks the same under `cargo test` (many tests a process) as under nextest.

#![allow(dead_code, missing_docs)]

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use steadfast::config::{ConfigError, ConfigSource, ResolvedConfig};
use steadfast::protocol::lifecycle::LifecycleState;
use steadfast::protocol::snapshot::Snapshot;
use steadfast::service::{ResourceRecord, StoreLock};
use steadfast::supervisor::Timings;
use steadfast::{
    ConfigChange, ExitIntent, Observation, Plan, Resource, Runtime, Service, Step, StepContext,
    StepError, Supervisor, SupervisorHandle,
};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

pub const PATIENCE: Duration = Duration::from_secs(30);

/// The test service. Config leaves it reads:
/// - `listen_addr` (default `127.0.0.1:0`);
/// - `panic_in` = a step name: that step panics;
/// - `leak_store_on_drain` = true: destroying the store leaks its lock;
/// - `serve_ends_after_ms` = N: the serve task ends with an error after N ms;
/// - `panic_on_destroy` = true: destroying `serve` (a drain's first
///   destroy) panics;
/// - `panic_on_apply` = true: applying a config change in place panics;
/// - `refuse` = a reason: `open_store` fails with class hold;
/// - `wipe_fails` = true: the wipe step (re-initialization) fails.
///
/// Its store is the lock plus a file `store.data` under the data dir,
/// which `open_store` creates and the wipe step removes.
#[derive(Debug, Default)]
pub struct TestService {
    /// Store locks leaked on purpose (kept alive for the test's life).
    leaked: Arc<Mutex<Vec<StoreLock>>>,
    /// How many wipe steps ran to completion.
    pub wipes: std::sync::atomic::AtomicUsize,
}

fn leaf<'a>(config: &'a toml::Table, key: &str) -> Option<&'a toml::Value> {
    config.get(key)
}

fn switched(config: &toml::Table, key: &str) -> bool {
    leaf(config, key).and_then(toml::Value::as_bool) == Some(true)
}

/// What every step of the test service does first: panic if the config's
/// `panic_in` names it.
fn panic_if_asked<S: Step>(config: &toml::Table) {
    if leaf(config, "panic_in").and_then(toml::Value::as_str) == Some(S::NAME) {
        panic!("the test asked {} to panic", S::NAME);
    }
}

/// Takes the store lock and writes `store.data`.
struct OpenStore {
    leaked: Arc<Mutex<Vec<StoreLock>>>,
}

/// The open store: its lock, and whether a drain leaks it.
pub struct Store {
    lock: StoreLock,
    leak_on_drain: bool,
}

impl Step for OpenStore {
    const NAME: &'static str = "open_store";
    type Config = toml::Table;
    type Output = Store;

    async fn execute(
        &self,
        cx: StepContext<'_, toml::Table>,
    ) -> Result<Resource<Store>, StepError> {
        panic_if_asked::<Self>(cx.config);
        if let Some(reason) = leaf(cx.config, "refuse").and_then(toml::Value::as_str) {
            return Err(StepError::hold(format!("refused: {reason}")));
        }
        let lock = StoreLock::acquire(cx.data_dir).map_err(StepError::backoff)?;
        std::fs::write(cx.data_dir.join("store.data"), b"data").map_err(StepError::backoff)?;
        let store = Store {
            lock,
            leak_on_drain: switched(cx.config, "leak_store_on_drain"),
        };
        Ok(Resource::new(
            "store",
            cx.data_dir.display().to_string(),
            store,
        ))
    }

    /// Present while the store's lock is held, by anyone: a resumed boot
    /// skips the step only if the lock is still taken.
    async fn observe(&self, record: &ResourceRecord, _runtime: &Runtime) -> Observation {
        store_lock_held(record)
    }

    async fn destroy(
        &self,
        _record: &ResourceRecord,
        runtime: &mut Runtime,
    ) -> Result<(), StepError> {
        if let Some(store) = runtime.take::<Self>()
            && store.leak_on_drain
        {
            self.leaked
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push(store.lock);
        }
        Ok(())
    }
}

/// Whether the store lock under the data dir `record` names is held, by
/// anyone: how a store step observes its resource.
pub fn store_lock_held(record: &ResourceRecord) -> Observation {
    Observation::from(matches!(
        StoreLock::probe(Path::new(&record.id)),
        steadfast::protocol::lifecycle::StoreOutcome::Held { .. }
    ))
}

/// Binds the TCP listener (`listen_addr`).
struct BindListener;

impl Step for BindListener {
    const NAME: &'static str = "bind_listener";
    type Config = toml::Table;
    /// The listener until `serve` takes it.
    type Output = Option<TcpListener>;

    async fn execute(
        &self,
        cx: StepContext<'_, toml::Table>,
    ) -> Result<Resource<Self::Output>, StepError> {
        panic_if_asked::<Self>(cx.config);
        let addr = leaf(cx.config, "listen_addr")
            .and_then(toml::Value::as_str)
            .unwrap_or("127.0.0.1:0");
        let listener = TcpListener::bind(addr)
            .await
            .map_err(|e| StepError::backoff(format!("cannot bind {addr}: {e}")))?;
        let local = listener.local_addr().map_err(StepError::backoff)?;
        Ok(Resource::new("listener", local.to_string(), Some(listener)))
    }
}

/// Spawns the accept loop over the bound listener.
struct Serve;

/// The serve step's switches.
pub struct Serving {
    panic_on_destroy: bool,
}

impl Step for Serve {
    const NAME: &'static str = "serve";
    type Config = toml::Table;
    type Output = Serving;

    async fn execute(
        &self,
        cx: StepContext<'_, toml::Table>,
    ) -> Result<Resource<Serving>, StepError> {
        panic_if_asked::<Self>(cx.config);
        let listener = cx
            .runtime
            .get_mut::<BindListener>()
            .and_then(Option::take)
            .ok_or_else(|| StepError::backoff("no listener"))?;
        let ends_after = leaf(cx.config, "serve_ends_after_ms").and_then(toml::Value::as_integer);
        let token = cx.runtime.shutdown_token();
        cx.runtime.spawn("accept", async move {
            let ending = async {
                match ends_after {
                    Some(ms) => tokio::time::sleep(Duration::from_millis(ms.unsigned_abs())).await,
                    None => std::future::pending().await,
                }
            };
            tokio::pin!(ending);
            loop {
                tokio::select! {
                    () = token.cancelled() => return Ok(()),
                    () = &mut ending => return Err("the serve loop gave up".to_owned()),
                    accepted = listener.accept() => drop(accepted),
                }
            }
        });
        let serving = Serving {
            panic_on_destroy: switched(cx.config, "panic_on_destroy"),
        };
        Ok(Resource::new("serve", "accept", serving))
    }

    async fn destroy(
        &self,
        _record: &ResourceRecord,
        runtime: &mut Runtime,
    ) -> Result<(), StepError> {
        if runtime.take::<Self>().is_some_and(|s| s.panic_on_destroy) {
            panic!("the test asked destroy to panic");
        }
        Ok(())
    }
}

impl Service for TestService {
    type Config = toml::Table;

    fn plan(&self, _config: &toml::Table) -> Plan<toml::Table> {
        Plan::new()
            .step(OpenStore {
                leaked: Arc::clone(&self.leaked),
            })
            .step(BindListener)
            .step(Serve)
    }

    async fn apply_config(
        &self,
        change: ConfigChange<'_, toml::Table>,
        _runtime: &mut Runtime,
    ) -> Vec<String> {
        if switched(change.new, "panic_on_apply") {
            panic!("the test asked apply_config to panic");
        }
        change.changed.to_vec()
    }

    async fn wipe(&self, data_dir: &Path, config: Option<&toml::Table>) -> Result<(), StepError> {
        if config.is_some_and(|c| switched(c, "wipe_fails")) {
            return Err(StepError::hold("the test asked the wipe to fail"));
        }
        let _lock = StoreLock::acquire(data_dir).map_err(StepError::backoff)?;
        match std::fs::remove_file(data_dir.join("store.data")) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(StepError::backoff(e)),
        }
        self.wipes.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Ok(())
    }
}

/// A config source the test can change between boots: `None` does not
/// resolve.
#[derive(Clone, Default)]
pub struct Switch(Arc<Mutex<Option<toml::Table>>>);

impl Switch {
    pub fn new(config: Option<toml::Table>) -> Self {
        Self(Arc::new(Mutex::new(config)))
    }

    pub fn set(&self, config: Option<toml::Table>) {
        *self.0.lock().unwrap_or_else(PoisonError::into_inner) = config;
    }

    pub fn source(&self) -> ConfigSource {
        let cell = Arc::clone(&self.0);
        ConfigSource::new(move || {
            cell.lock()
                .unwrap_or_else(PoisonError::into_inner)
                .clone()
                .map(ResolvedConfig::untracked)
                .ok_or_else(|| ConfigError::Invalid("the test's config does not resolve".into()))
        })
    }
}

pub fn config(text: &str) -> toml::Table {
    text.parse().expect("test config parses")
}

pub fn good() -> toml::Table {
    config("listen_addr = \"127.0.0.1:0\"")
}

pub fn test_timings() -> Timings {
    Timings {
        drain_grace: Duration::from_secs(2),
        ..Timings::default()
    }
}

pub fn supervise(
    data_dir: &Path,
    source: ConfigSource,
    declared: Option<PathBuf>,
) -> (JoinHandle<ExitIntent>, SupervisorHandle) {
    supervise_with(data_dir, source, declared, Arc::new(TestService::default()))
}

pub fn supervise_with(
    data_dir: &Path,
    source: ConfigSource,
    declared: Option<PathBuf>,
    service: Arc<impl Service>,
) -> (JoinHandle<ExitIntent>, SupervisorHandle) {
    let source = match declared {
        Some(path) => source.watching(path),
        None => source,
    };
    let (supervisor, handle) = Supervisor::builder(data_dir, service)
        .config(source)
        .timings(test_timings())
        .build()
        .expect("the supervisor starts");
    (tokio::spawn(supervisor.run()), handle)
}

/// Wait until the published snapshot satisfies `pred`.
pub async fn until(
    handle: &SupervisorHandle,
    what: &str,
    pred: impl Fn(&Snapshot) -> bool,
) -> Snapshot {
    let mut rx = handle.watch();
    let waited = tokio::time::timeout(PATIENCE, async {
        loop {
            {
                let snapshot = rx.borrow_and_update();
                if pred(&snapshot) {
                    return snapshot.clone();
                }
            }
            rx.changed().await.expect("the supervisor is alive");
        }
    })
    .await;
    waited.unwrap_or_else(|_| {
        panic!(
            "timed out waiting for {what}; now {:?}",
            handle.snapshot().lifecycle
        )
    })
}

pub fn running(s: &Snapshot) -> bool {
    matches!(s.lifecycle, LifecycleState::Running { .. })
}

pub fn failed(s: &Snapshot) -> bool {
    matches!(s.lifecycle, LifecycleState::Failed { .. })
}

pub async fn exit(run: JoinHandle<ExitIntent>, handle: &SupervisorHandle, intent: ExitIntent) {
    handle.exit(intent).await.expect("exit accepted");
    let ended = tokio::time::timeout(PATIENCE, run)
        .await
        .expect("the supervisor ends")
        .expect("the supervisor task");
    assert_eq!(ended, intent);
}

/// Boot a daemon over `data_dir` to running, then exit it (halt): leaves a
/// journal and markers behind for a test to inspect or damage.
pub async fn run_once(data_dir: &Path) {
    let (run, handle) = supervise(data_dir, Switch::new(Some(good())).source(), None);
    until(&handle, "running", running).await;
    exit(run, &handle, ExitIntent::Halt).await;
}

/// A source over a declared file that resolves only once the file says
/// `fixed`.
pub fn fixed_file_source(file: PathBuf) -> ConfigSource {
    ConfigSource::new(move || {
        let text =
            std::fs::read_to_string(&file).map_err(|e| ConfigError::Invalid(e.to_string()))?;
        if text.trim() == "fixed" {
            Ok(ResolvedConfig::untracked(good()))
        } else {
            Err(ConfigError::Invalid(format!("not fixed: {text:?}")))
        }
    })
}

/// A daemon whose declared file (`daemon.toml` in `dir`) says `broken`,
/// waited until its boot is held on the config; `fixed_file_source` resolves
/// once the file says `fixed`.
pub async fn held_on_declared_file(
    dir: &Path,
) -> (PathBuf, JoinHandle<ExitIntent>, SupervisorHandle) {
    let declared = dir.join("daemon.toml");
    std::fs::write(&declared, "broken\n").expect("write");
    let (run, handle) = supervise(
        dir,
        fixed_file_source(declared.clone()),
        Some(declared.clone()),
    );
    until(&handle, "a held failure", |s| {
        matches!(
            s.lifecycle,
            LifecycleState::Failed {
                retry: steadfast::protocol::lifecycle::RetryClass::Hold,
                ..
            }
        )
    })
    .await;
    (declared, run, handle)
}

/// A supervisor over a TOML source with `defaults` and an override tier
/// (what `config set` changes), running the test service.
pub fn supervise_toml(dir: &Path, defaults: &str) -> (JoinHandle<ExitIntent>, SupervisorHandle) {
    let source = steadfast::TomlFileSource::new().defaults_toml(defaults);
    let (supervisor, handle) = Supervisor::builder(dir, Arc::new(TestService::default()))
        .config(source)
        .timings(test_timings())
        .build()
        .expect("the supervisor starts");
    (tokio::spawn(supervisor.run()), handle)
}

static PANICS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// Count panics anywhere in this process (the server's tasks included),
/// so a test can say "no panic" and mean it; read with [`panics`].
pub fn count_panics() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let default = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            PANICS.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            default(info);
        }));
    });
}

/// Panics counted since [`count_panics`] was first called.
pub fn panics() -> usize {
    PANICS.load(std::sync::atomic::Ordering::SeqCst)
}

/// The variable that tells a re-run of this test binary which test it runs
/// alone (set on the child only, never in this process).
const ALONE_ENV: &str = "STEADFAST_TEST_ALONE";

/// For a test that measures its whole process (its RSS, the panics counted
/// by [`count_panics`]) and so cannot share it with other tests, as it does
/// under `cargo test`: `true` when this process is the test's own (a re-run
/// of this binary with only `name`; run the body), otherwise runs that
/// re-run, fails if it failed or did not run the test, and returns `false`
/// (return at once). Under nextest too, so both runners check the same.
/// `module` is the test's `module_path!()`: the re-run names the test as
/// the harness does, `MODULE::NAME`.
#[must_use]
pub fn alone_in_process(module: &str, name: &str) -> bool {
    let name = super::test_name(module, name);
    let name = name.as_str();
    if std::env::var_os(ALONE_ENV).is_some_and(|v| v == name) {
        return true;
    }
    let exe = std::env::current_exe().expect("the test binary");
    let out = std::process::Command::new(exe)
        .args([name, "--exact", "--test-threads=1", "--nocapture"])
        .env(ALONE_ENV, name)
        .stdin(std::process::Stdio::null())
        .output()
        .expect("the test binary runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && stdout.contains("1 passed"),
        "{name}, run alone in its own process, failed:\n{stdout}\n{stderr}"
    );
    false
}

/// Attempt `n` (from 1).
pub fn nz(n: u32) -> std::num::NonZeroU32 {
    std::num::NonZeroU32::new(n).expect("an attempt counts from 1")
}

/// One step that waits for a permit (there is one unless a test takes it
/// away): a boot as fast or as slow as the test wants.
pub struct Gate(pub Arc<tokio::sync::Semaphore>);

impl steadfast::Step for Gate {
    const NAME: &'static str = "gate";
    type Config = toml::Table;
    type Output = ();

    async fn execute(
        &self,
        _cx: steadfast::StepContext<'_, toml::Table>,
    ) -> Result<steadfast::Resource<()>, steadfast::StepError> {
        drop(
            self.0
                .acquire()
                .await
                .map_err(steadfast::StepError::backoff)?,
        );
        Ok(steadfast::Resource::new("gate", "", ()))
    }
}

/// A service of one [`Gate`].
pub struct Gated(pub Arc<tokio::sync::Semaphore>);

impl steadfast::Service for Gated {
    type Config = toml::Table;

    fn plan(&self, _config: &toml::Table) -> steadfast::Plan<toml::Table> {
        steadfast::Plan::new().step(Gate(Arc::clone(&self.0)))
    }
}
